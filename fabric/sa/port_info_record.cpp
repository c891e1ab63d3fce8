// PortInfoRecord (IBA 15.2.5.3): every port of the switch and each CA
// port's PortInfo as the SM read and set it; M_Keys for trusted requesters
// only.
#include "fabric/sa/sa_server.h"

#include "fabric/sa/sa_internal.h"

namespace ipoibd::fabric {

using namespace sa_detail;

std::vector<sa::SaMad> SaServer::on_port_info_record(const Request& r) {
    if (!reads_records(r.method())) return reply(r, ib::mad_status::method_attr_not_supported);
    const auto rec = sa::get_record<sa::PortInfoRecord>(r.mad);
    return respond_records(r, query_port_infos(rec, r.mask(), r.requester, r.trusted));
}

std::vector<sa::PortInfoRecord> SaServer::query_port_infos(const sa::PortInfoRecord& req, std::uint64_t mask,
                                                           const SaPort& requester, bool trusted) const {
    namespace c = sa::port_info_record_comp;
    std::vector<sa::PortInfoRecord> all;
    if (switch_view_)
        if (const auto sw = switch_view_(); sw && sw->lid != 0)
            for (std::size_t port = 0; port < sw->ports.size(); ++port) {
                sa::PortInfoRecord r;
                r.endport_lid = sw->lid;
                r.port_num = static_cast<std::uint8_t>(port);
                r.port_info = sw->ports[port];
                all.push_back(r);
            }
    for (const SaPort& p : port_list_) {
        if (p.lid != requester.lid && !shares_partition(p, requester)) continue;
        sa::PortInfoRecord r;
        r.endport_lid = p.lid;
        r.port_num = p.port_info.local_port_num ? p.port_info.local_port_num : std::uint8_t{1};
        r.port_info = p.port_info;
        all.push_back(r);
    }
    std::vector<sa::PortInfoRecord> out;
    for (auto& r : all) {
        if (!trusted) r.port_info.m_key = 0;  // a port's M_Key is for a trusted requester only
        if ((mask & c::endport_lid) && r.endport_lid != req.endport_lid) continue;
        if ((mask & c::port_num) && r.port_num != req.port_num) continue;
        if ((mask & c::lid) && r.port_info.lid != req.port_info.lid) continue;
        if ((mask & c::master_sm_lid) && r.port_info.master_sm_lid != req.port_info.master_sm_lid) continue;
        if ((mask & c::capability_mask) &&
            (r.port_info.capability_mask & req.port_info.capability_mask) != req.port_info.capability_mask)
            continue;
        out.push_back(r);
    }
    std::sort(out.begin(), out.end(), [](const sa::PortInfoRecord& a, const sa::PortInfoRecord& b) {
        return std::tie(a.endport_lid, a.port_num) < std::tie(b.endport_lid, b.port_num);
    });
    return out;
}


}  // namespace ipoibd::fabric
