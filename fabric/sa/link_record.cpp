// LinkRecord (IBA 15.2.5.13): both directions of each cable between the
// switch and a CA port.
#include "fabric/sa/sa_server.h"

#include "fabric/sa/sa_internal.h"

namespace ipoibd::fabric {

using namespace sa_detail;

std::vector<sa::SaMad> SaServer::on_link_record(const Request& r) {
    if (!reads_records(r.method())) return reply(r, ib::mad_status::method_attr_not_supported);
    const auto rec = sa::get_record<sa::LinkRecord>(r.mad);
    return respond_records(r, query_links(rec, r.mask(), r.requester));
}

std::vector<sa::LinkRecord> SaServer::query_links(const sa::LinkRecord& req, std::uint64_t mask,
                                                  const SaPort& requester) const {
    namespace c = sa::link_record_comp;
    std::vector<sa::LinkRecord> out;
    if (!switch_view_) return out;
    const auto sw = switch_view_();
    if (!sw || sw->lid == 0) return out;
    auto add = [&](const sa::LinkRecord& r) {
        if ((mask & c::from_lid) && r.from_lid != req.from_lid) return;
        if ((mask & c::from_port) && r.from_port != req.from_port) return;
        if ((mask & c::to_port) && r.to_port != req.to_port) return;
        if ((mask & c::to_lid) && r.to_lid != req.to_lid) return;
        out.push_back(r);
    };
    for (const SaPort& p : port_list_) {
        if (p.switch_port == 0) continue;
        if (p.lid != requester.lid && !shares_partition(p, requester)) continue;
        const std::uint8_t ca_port = p.port_info.local_port_num ? p.port_info.local_port_num : std::uint8_t{1};
        const std::uint16_t switch_lid = p.switch_lid != 0 ? p.switch_lid : sw->lid;
        add({switch_lid, p.switch_port, ca_port, p.lid});
        add({p.lid, ca_port, p.switch_port, switch_lid});
    }
    std::sort(out.begin(), out.end(), [](const sa::LinkRecord& a, const sa::LinkRecord& b) {
        return std::tie(a.from_lid, a.from_port) < std::tie(b.from_lid, b.from_port);
    });
    return out;
}


}  // namespace ipoibd::fabric
