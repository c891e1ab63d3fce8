// ClassPortInfo (IBA 15.2.5.2 for the SA, 13.4.8.1): what this SA
// supports, its response time, and no redirection.
#include "fabric/sa/sa_server.h"

#include "fabric/sa/sa_internal.h"

namespace ipoibd::fabric {

using namespace sa_detail;

namespace {
constexpr std::uint8_t kRespTimeValue = 18;  // 4.096 us * 2^18, about 1 s (OpenSM reports 16; its SA is C, ours a daemon loop)
}  // namespace

std::vector<sa::SaMad> SaServer::on_class_port_info(const Request& r) {
    if (r.method() != ib::method::get) return reply(r, ib::mad_status::method_attr_not_supported);
    sa::ClassPortInfo cpi;
    // Get/Set Notice (InformInfo, Reports), UD multicast (MCMemberRecord),
    // PortInfoRecord CapabilityMask matching (all the requested bits).
    cpi.capability_mask = sa::class_capability::is_get_set_notice_supported |
                          sa::class_capability::is_ud_multicast_supported |
                          sa::class_capability::is_port_info_capability_mask_match_supported;
    cpi.resp_time_value = kRespTimeValue;
    cpi.redirect_qp = ib::kQp1;  // no redirection: here, QP1
    cpi.redirect_q_key = ib::kGsiQKey;
    cpi.trap_q_key = ib::kGsiQKey;
    (void)sa::put_record(cpi, r.resp);
    return reply(r, kOk);
}

}  // namespace ipoibd::fabric
