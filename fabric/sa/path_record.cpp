// PathRecord (IBA 15.2.5.16): Get and GetTable between GIDs or LIDs of
// ports that share a partition, with OpenSM's choice of sources.
#include "fabric/sa/sa_server.h"

#include "fabric/sa/sa_internal.h"

namespace ipoibd::fabric {

using namespace sa_detail;

namespace {
namespace pc = sa::path_comp;
}  // namespace

std::vector<sa::SaMad> SaServer::on_path_record(const Request& r) {
    if (!reads_records(r.method())) return reply(r, ib::mad_status::method_attr_not_supported);
    const auto rec = sa::get_record<sa::PathRecord>(r.mad);
    if (r.method() == ib::method::get && !(r.mask() & (pc::dgid | pc::dlid)))
        return reply(r, sa::sa_status::err_req_insufficient_components);
    return respond_records(r, query_paths(rec, r.mask(), r.requester, r.method() == ib::method::get_table));
}

std::vector<sa::PathRecord> SaServer::query_paths(const sa::PathRecord& req, std::uint64_t mask, const SaPort& requester,
                                                  bool all_sources) const {
    std::vector<const SaPort*> sources, dests;
    for (const SaPort& p : port_list_) {
        // No source given: a Get asks from the requester; a GetTable with a
        // destination asks from every port (as OpenSM answers it).
        const bool any_source = all_sources && (mask & (pc::dgid | pc::dlid));
        const bool src = (mask & pc::sgid)   ? p.gid == req.sgid
                         : (mask & pc::slid) ? p.lid == req.slid
                                             : (any_source || p.lid == requester.lid);
        const bool dst = (mask & pc::dgid) ? p.gid == req.dgid : (mask & pc::dlid) ? p.lid == req.dlid : true;
        if (src) sources.push_back(&p);
        if (dst) dests.push_back(&p);
    }
    std::vector<sa::PathRecord> out;
    for (const SaPort* sp : sources) {
        for (const SaPort* dp : dests) {
            const SaPort& s = *sp;
            const SaPort& d = *dp;
            // The P_Key: the requested one if both hold it, else the first
            // the two share (full membership preferred by table order).
            std::optional<std::uint16_t> pkey;
            for (std::uint16_t k : s.pkeys) {
                if (!holds_pkey(d, k) || (k & 0x7FFF) == 0) continue;
                if ((mask & pc::p_key) && (k & 0x7FFF) != (req.p_key & 0x7FFF)) continue;
                // Two limited members share no partition they may talk in.
                const bool s_full = (k & 0x8000) != 0;
                const bool d_full = std::any_of(d.pkeys.begin(), d.pkeys.end(), [&](std::uint16_t x) { return x == (k | 0x8000); });
                if (!s_full && !d_full) continue;
                pkey = k;
                break;
            }
            if (!pkey) continue;
            sa::PathRecord r;
            r.sgid = s.gid;
            r.dgid = d.gid;
            r.slid = s.lid;
            r.dlid = d.lid;
            r.reversible = true;
            r.p_key = *pkey;
            r.sl = 0;
            r.mtu_selector = Selector::exactly;
            r.mtu = std::min(s.mtu, d.mtu);
            r.rate_selector = Selector::exactly;
            r.rate = sa::rate_mbps(s.rate) <= sa::rate_mbps(d.rate) ? s.rate : d.rate;
            r.packet_life_time_selector = Selector::exactly;
            r.packet_life_time = config_.packet_life_time;
            if ((mask & pc::mtu) && !selects((mask & pc::mtu_selector) ? req.mtu_selector : Selector::exactly, r.mtu, req.mtu)) continue;
            if ((mask & pc::rate) &&
                !rate_selects((mask & pc::rate_selector) ? req.rate_selector : Selector::exactly, r.rate, req.rate))
                continue;
            if ((mask & pc::packet_life_time) &&
                !life_selects((mask & pc::packet_life_time_selector) ? req.packet_life_time_selector : Selector::exactly,
                              r.packet_life_time, req.packet_life_time))
                continue;
            if ((mask & pc::sl) && req.sl != r.sl) continue;
            out.push_back(r);
        }
    }
    return out;
}


}  // namespace ipoibd::fabric
