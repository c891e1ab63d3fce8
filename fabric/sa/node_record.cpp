// NodeRecord (IBA 15.2.5.2): the switch's node and each CA port's, selected
// by component mask.
#include "fabric/sa/sa_server.h"

#include "fabric/sa/sa_internal.h"

namespace ipoibd::fabric {

using namespace sa_detail;

std::vector<sa::SaMad> SaServer::on_node_record(const Request& r) {
    if (!reads_records(r.method())) return reply(r, ib::mad_status::method_attr_not_supported);
    const auto rec = sa::get_record<sa::NodeRecord>(r.mad);
    return respond_records(r, query_nodes(rec, r.mask(), r.requester));
}

// The topology: NodeRecord, PortInfoRecord, LinkRecord. A CA port's records
// are shown to requesters that share a partition with it (as OpenSM does
// for untrusted requesters); the switch's to everyone.

std::vector<sa::NodeRecord> SaServer::query_nodes(const sa::NodeRecord& req, std::uint64_t mask,
                                                  const SaPort& requester) const {
    namespace c = sa::node_record_comp;
    std::vector<sa::NodeRecord> all;
    if (switch_view_)
        if (const auto sw = switch_view_(); sw && sw->lid != 0) {
            sa::NodeRecord r;
            r.lid = sw->lid;
            r.node_info = sw->node_info;
            r.node_description.text = sw->description;
            all.push_back(r);
        }
    for (const SaPort& p : port_list_) {
        if (p.lid != requester.lid && !shares_partition(p, requester)) continue;
        sa::NodeRecord r;
        r.lid = p.lid;
        r.node_info.node_type = ib::node_type::channel_adapter;
        r.node_info.num_ports = 1;
        r.node_info.node_guid = p.node_guid ? p.node_guid : p.guid;
        r.node_info.system_image_guid = r.node_info.node_guid;
        r.node_info.port_guid = p.guid;
        r.node_info.partition_cap = 32;
        r.node_info.local_port_num = p.port_info.local_port_num ? p.port_info.local_port_num : std::uint8_t{1};
        r.node_description.text = p.description;
        all.push_back(r);
    }
    std::vector<sa::NodeRecord> out;
    for (const auto& r : all) {
        const ib::NodeInfo& n = r.node_info;
        const ib::NodeInfo& q = req.node_info;
        if ((mask & c::lid) && r.lid != req.lid) continue;
        if ((mask & c::node_type) && n.node_type != q.node_type) continue;
        if ((mask & c::num_ports) && n.num_ports != q.num_ports) continue;
        if ((mask & c::system_image_guid) && n.system_image_guid != q.system_image_guid) continue;
        if ((mask & c::node_guid) && n.node_guid != q.node_guid) continue;
        if ((mask & c::port_guid) && n.port_guid != q.port_guid) continue;
        if ((mask & c::local_port_num) && n.local_port_num != q.local_port_num) continue;
        if ((mask & c::node_description) && r.node_description.text != req.node_description.text) continue;
        out.push_back(r);
    }
    // By LID, as OpenSM lists them (a client that sees only the first few,
    // under libumad2sim, sees the same ones).
    std::sort(out.begin(), out.end(), [](const sa::NodeRecord& a, const sa::NodeRecord& b) { return a.lid < b.lid; });
    return out;
}


}  // namespace ipoibd::fabric
