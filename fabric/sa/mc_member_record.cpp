// MCMemberRecord (IBA 15.2.5.17): joins (Set) that create groups or add
// members, leaves (Delete), Get and GetTable; the predefined broadcast
// groups of the partitions, MLIDs, and the multicast forwarding that
// follows membership.
#include "fabric/sa/sa_server.h"

#include "fabric/sa/sa_internal.h"

namespace ipoibd::fabric {

using namespace sa_detail;

namespace {

namespace mc = sa::mc_member_comp;

// An IPoIB MGID: ff1S:401b:PPPP:: (IPv4) or ff1S:601b:PPPP:: (IPv6).
std::optional<std::uint16_t> ipoib_mgid_pkey(const ib::Gid& g) {
    if (g[0] != 0xFF || g[3] != 0x1B || (g[2] != 0x40 && g[2] != 0x60)) return std::nullopt;
    return load_be16(g.data() + 4);
}

bool zero_gid(const ib::Gid& g) { return std::all_of(g.begin(), g.end(), [](std::uint8_t b) { return b == 0; }); }

// The signature of SA-assigned MGIDs (IBA 15.2.5.17; OpenSM's too).
constexpr std::uint16_t kSaAssignedSignature = 0xA01B;

// Whether a requested MGID may name a new group, as OpenSM checks it
// (IBA 4.1.1 for the multicast GID format): a multicast prefix (0xFF); an
// IPoIB signature (0x401B, 0x601B) is taken as it is; otherwise the three
// reserved flag bits are zero, and the SA's own signature is not asked
// for with link-local scope, which is the SA's to assign.
bool valid_requested_mgid(const ib::Gid& g) {
    if (g[0] != 0xFF) return false;
    const std::uint16_t signature = load_be16(g.data() + 2);
    if (signature == 0x401B || signature == 0x601B) return true;
    if (g[1] & 0xE0) return false;
    if (signature == kSaAssignedSignature && (g[1] & 0x0F) == sa::mgid_scope::link_local) return false;
    return true;
}

// PathRecord/MCMemberRecord MTU codes 1 (256) to 5 (4096); 0 and 6-63 are
// reserved (IBA 15.2.5.17, table 205).
bool valid_mtu_code(std::uint8_t mtu) { return mtu >= 1 && mtu <= 5; }

}  // namespace

std::vector<sa::SaMad> SaServer::on_mc_member_record(const Request& r) {
    const auto rec = sa::get_record<sa::McMemberRecord>(r.mad);
    const std::uint8_t method = r.method();
    if (method == ib::method::set || method == ib::method::del) {
        sa::McMemberRecord out;
        const std::uint16_t status = method == ib::method::set ? join(rec, r.mask(), r.requester, out)
                                                               : leave(rec, r.mask(), r.requester, out);
        if (status == kOk) {
            (void)sa::put_record(out, r.resp);
            r.resp.attribute_offset = sa::attribute_offset_for(sa::McMemberRecord::size);
        } else {
            (void)sa::put_record(rec, r.resp);
        }
        return reply(r, status);
    }
    if (reads_records(method)) return respond_records(r, query_groups(rec, r.mask(), r.requester, r.trusted));
    return reply(r, ib::mad_status::method_attr_not_supported);
}

// Each partition with the ipoib flag has its IPv4 broadcast group from the
// start: ff12:401b:PPPP::ffff:ffff with the partition's parameters, MLIDs
// from 0xC000 in partition order (the default partition's is 0xC000).
void SaServer::create_predefined_groups() {
    for (const Partition& p : config_.partitions) {
        if (!p.ipoib) continue;
        McGroup g;
        g.predefined = true;
        ib::Gid mgid{0xFF, static_cast<std::uint8_t>(0x10 | p.broadcast.scope), 0x40, 0x1B};
        store_be16(mgid.data() + 4, static_cast<std::uint16_t>(p.pkey | 0x8000));
        mgid[12] = mgid[13] = mgid[14] = mgid[15] = 0xFF;
        if (groups_.count(mgid)) continue;  // a reload keeps the groups it had
        g.params.mgid = mgid;
        g.params.q_key = p.broadcast.qkey;
        g.params.mlid = allocate_mlid();
        g.params.mtu_selector = Selector::exactly;
        g.params.mtu = p.broadcast.mtu;
        g.params.tclass = p.broadcast.tclass;
        g.params.p_key = static_cast<std::uint16_t>(p.pkey | 0x8000);
        g.params.rate_selector = Selector::exactly;
        g.params.rate = p.broadcast.rate;
        g.params.packet_life_time_selector = Selector::exactly;
        g.params.packet_life_time = config_.packet_life_time;
        g.params.sl = p.broadcast.sl;
        g.params.flow_label = p.broadcast.flow_label;
        g.params.scope = p.broadcast.scope;
        groups_[mgid] = g;
    }
}

std::uint16_t SaServer::allocate_mlid() const {
    // One pass over the groups, one over the MLIDs (not one over the groups
    // per MLID: creating the n-th group would cost n^2).
    std::vector<bool> used(std::size_t{ib::kLidMulticastLast} - ib::kLidMulticastFirst + 1);
    for (const auto& [mgid, g] : groups_)
        if (g.params.mlid >= ib::kLidMulticastFirst && g.params.mlid <= ib::kLidMulticastLast)
            used[g.params.mlid - ib::kLidMulticastFirst] = true;
    for (std::size_t i = 0; i < used.size(); ++i)
        if (!used[i]) return static_cast<std::uint16_t>(ib::kLidMulticastFirst + i);
    return 0;
}

std::size_t SaServer::memberships_of(std::uint64_t guid) const {
    return static_cast<std::size_t>(
        std::count_if(groups_.begin(), groups_.end(), [&](const auto& kv) { return kv.second.members.contains(guid); }));
}

std::uint16_t SaServer::join(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester,
                             sa::McMemberRecord& out) {
    if ((mask & sa::kMcMemberJoinComponents) != sa::kMcMemberJoinComponents) return sa::sa_status::err_req_insufficient_components;
    if (req.join_state == 0) return sa::sa_status::err_req_invalid;
    // The port to join: the requester's own, or another (a proxy join,
    // IBA o15-0.1.2), which must share a partition with the requester.
    const auto member_port = port_by_gid(req.port_gid);
    if (!member_port) return sa::sa_status::err_req_invalid;
    const SaPort& member = *member_port;
    const bool proxy = member.guid != requester.guid;
    if (proxy && !shares_partition(member, requester)) return sa::sa_status::err_req_invalid;
    auto it = groups_.find(req.mgid);
    // One port's share of the groups (and so of the MLIDs).
    if ((it == groups_.end() || !it->second.members.contains(member.guid)) &&
        memberships_of(member.guid) >= config_.max_groups_per_port) {
        ++counters_.joins_over_limit;
        return sa::sa_status::err_no_resources;
    }
    if (it == groups_.end()) {
        McGroup created;
        const std::uint16_t status = create_group(req, mask, member, created);
        if (status != kOk) return status;
        it = groups_.emplace(created.params.mgid, created).first;
        ++counters_.groups_created;
        report(sa::trap_number::mcast_group_created, created.params.mgid, created.params.p_key, std::nullopt, now_);
    } else {
        const sa::McMemberRecord& g = it->second.params;
        if (!holds_pkey(member, g.p_key)) return sa::sa_status::err_req_invalid;
        if (!may_modify(it->second, member.guid, requester)) return sa::sa_status::err_req_invalid;
        if ((mask & mc::q_key) && req.q_key != g.q_key) return sa::sa_status::err_req_invalid;
        if ((mask & mc::p_key) && (req.p_key & 0x7FFF) != (g.p_key & 0x7FFF)) return sa::sa_status::err_req_invalid;
        if ((mask & mc::mtu) && !selects((mask & mc::mtu_selector) ? req.mtu_selector : Selector::exactly, g.mtu, req.mtu))
            return sa::sa_status::err_req_invalid;
        if ((mask & mc::rate) && !rate_selects((mask & mc::rate_selector) ? req.rate_selector : Selector::exactly, g.rate, req.rate))
            return sa::sa_status::err_req_invalid;
        if ((mask & mc::packet_life_time) &&
            !life_selects((mask & mc::packet_life_time_selector) ? req.packet_life_time_selector : Selector::exactly,
                          g.packet_life_time, req.packet_life_time))
            return sa::sa_status::err_req_invalid;
        if ((mask & mc::sl) && req.sl != g.sl) return sa::sa_status::err_req_invalid;
        if ((mask & mc::flow_label) && req.flow_label != g.flow_label) return sa::sa_status::err_req_invalid;
        if ((mask & mc::tclass) && req.tclass != g.tclass) return sa::sa_status::err_req_invalid;
        if ((mask & mc::hop_limit) && req.hop_limit != g.hop_limit) return sa::sa_status::err_req_invalid;
        // The port must carry the group's traffic.
        if (member.mtu < g.mtu || sa::rate_mbps(member.rate) < sa::rate_mbps(g.rate)) return sa::sa_status::err_req_invalid;
    }
    McGroup& group = it->second;
    if (!group.members.contains(member.guid)) {
        if (proxy)
            group.proxied.insert(member.guid);
        else
            group.proxied.erase(member.guid);
    }
    group.members[member.guid] |= req.join_state;
    out = group.params;
    out.port_gid = member.gid;
    out.join_state = group.members[member.guid];
    out.proxy_join = group.proxied.contains(member.guid);
    update_forwarding(group);
    return kOk;
}

// A membership that the port itself made is the port's alone to change; one
// a proxy made, any port of the group's partition may (IBA o15-0.1.2, as
// OpenSM's validate_modify). Not a member yet: anyone allowed to join it.
bool SaServer::may_modify(const McGroup& g, std::uint64_t member_guid, const SaPort& requester) const {
    if (!g.members.contains(member_guid)) return true;
    if (!g.proxied.contains(member_guid)) return member_guid == requester.guid;
    return holds_pkey(requester, g.params.p_key);
}

std::uint16_t SaServer::create_group(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, McGroup& out) {
    if ((mask & sa::kMcMemberCreateComponents) != sa::kMcMemberCreateComponents) return sa::sa_status::err_req_insufficient_components;
    if (!(req.join_state & (sa::join_state::full_member | sa::join_state::send_only_full_member))) return sa::sa_status::err_req_invalid;
    if (!holds_pkey(requester, req.p_key)) return sa::sa_status::err_req_invalid;
    if (!zero_gid(req.mgid) && !valid_requested_mgid(req.mgid)) return sa::sa_status::err_req_invalid;
    sa::McMemberRecord g = req;
    // MTU and rate: what the selector asks for, within the requester's port.
    std::uint8_t mtu = requester.mtu;
    if (mask & mc::mtu) {
        const Selector s = (mask & mc::mtu_selector) ? req.mtu_selector : Selector::exactly;
        if (s == Selector::exactly) mtu = req.mtu;
        else if (s == Selector::greater_than) mtu = std::max<std::uint8_t>(static_cast<std::uint8_t>(req.mtu + 1), requester.mtu);
        else if (s == Selector::less_than) mtu = std::min<std::uint8_t>(static_cast<std::uint8_t>(req.mtu - 1), requester.mtu);
        if (!valid_mtu_code(mtu) || mtu > requester.mtu || !selects(s, mtu, req.mtu)) return sa::sa_status::err_req_invalid;
    }
    std::uint8_t rate = requester.rate;
    if (mask & mc::rate) {
        const Selector s = (mask & mc::rate_selector) ? req.rate_selector : Selector::exactly;
        if (s == Selector::exactly) rate = req.rate;
        if (sa::rate_mbps(rate) == 0 || sa::rate_mbps(rate) > sa::rate_mbps(requester.rate) || !rate_selects(s, rate, req.rate))
            return sa::sa_status::err_req_invalid;  // a reserved rate code, or more than the port has
    }
    // PacketLifeTime (6 bits): the request's, as OpenSM copies it (0 when
    // not given); with a selector, the nearest value it allows, or the SA's
    // own for "smallest available". Greater than 63 or less than 0 cannot
    // be had.
    std::uint8_t life = req.packet_life_time;
    if (mask & mc::packet_life_time) {
        const Selector s = (mask & mc::packet_life_time_selector) ? req.packet_life_time_selector : Selector::exactly;
        constexpr std::uint8_t kMaxLife = 0x3F;
        switch (s) {
            case Selector::exactly: break;
            case Selector::greater_than:
                if (req.packet_life_time >= kMaxLife) return sa::sa_status::err_req_invalid;
                life = static_cast<std::uint8_t>(req.packet_life_time + 1);
                break;
            case Selector::less_than:
                if (req.packet_life_time == 0) return sa::sa_status::err_req_invalid;
                life = static_cast<std::uint8_t>(req.packet_life_time - 1);
                break;
            case Selector::largest_available: life = config_.packet_life_time; break;  // "smallest available"
        }
        if (life > kMaxLife) return sa::sa_status::err_req_invalid;
    }
    g.mtu_selector = Selector::exactly;
    g.mtu = mtu;
    g.rate_selector = Selector::exactly;
    g.rate = rate;
    g.packet_life_time_selector = Selector::exactly;
    g.packet_life_time = life;
    if (!(mask & mc::hop_limit)) g.hop_limit = 0;
    // An IPoIB group takes its partition's broadcast group's parameters;
    // asking for others is refused.
    if (const auto pkey = ipoib_mgid_pkey(req.mgid)) {
        const auto bcast = std::find_if(groups_.begin(), groups_.end(), [&](const auto& kv) {
            return kv.second.predefined && (kv.second.params.p_key & 0x7FFF) == (*pkey & 0x7FFF);
        });
        if (bcast == groups_.end()) return sa::sa_status::err_req_invalid;
        const sa::McMemberRecord& b = bcast->second.params;
        if (req.q_key != b.q_key || (req.p_key & 0x7FFF) != (b.p_key & 0x7FFF) || req.sl != b.sl ||
            req.tclass != b.tclass || req.flow_label != b.flow_label)
            return sa::sa_status::err_req_invalid;
        if ((mask & mc::mtu) && !selects((mask & mc::mtu_selector) ? req.mtu_selector : Selector::exactly, b.mtu, req.mtu))
            return sa::sa_status::err_req_invalid;
        g.mtu = b.mtu;
        g.rate = b.rate;
    }
    if (zero_gid(req.mgid)) {
        // The SA names the group: ff1S:a01b:PPPP::N, as OpenSM does; never
        // a name a group already has (a requested one, or an earlier N
        // after the counter wrapped).
        ib::Gid m{0xFF, static_cast<std::uint8_t>(0x10 | ((mask & mc::scope) ? req.scope : sa::mgid_scope::link_local)), 0xA0, 0x1B};
        store_be16(m.data() + 4, req.p_key);
        std::size_t tries = 0;
        do {
            if (++tries > groups_.size() + 1) return sa::sa_status::err_no_resources;
            store_be32(m.data() + 12, next_mgid_++);
        } while (groups_.contains(m));
        g.mgid = m;
    }
    g.mlid = allocate_mlid();
    if (g.mlid == 0) return sa::sa_status::err_no_resources;
    g.port_gid = {};
    g.join_state = 0;
    out.params = g;
    return kOk;
}

std::uint16_t SaServer::leave(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, sa::McMemberRecord& out) {
    if ((mask & sa::kMcMemberJoinComponents) != sa::kMcMemberJoinComponents) return sa::sa_status::err_req_insufficient_components;
    const auto it = groups_.find(req.mgid);
    if (it == groups_.end()) return sa::sa_status::err_req_invalid;
    McGroup& g = it->second;
    // The member by its PortGID's GUID (its port may be gone already).
    if (load_be64(req.port_gid.data()) != config_.subnet_prefix) return sa::sa_status::err_req_invalid;
    const std::uint64_t member_guid = load_be64(req.port_gid.data() + 8);
    if (!may_modify(g, member_guid, requester)) return sa::sa_status::err_req_invalid;
    const auto m = g.members.find(member_guid);
    // o15-0.1.14: the JoinState to leave must share a bit with the stored
    // one and hold no bit the stored one lacks.
    if (m == g.members.end() || !(m->second & req.join_state) || (req.join_state & ~m->second))
        return sa::sa_status::err_req_invalid;
    m->second = static_cast<std::uint8_t>(m->second & ~req.join_state);
    // OpenSM's DeleteResp: the request's record, selectors "exactly", the
    // group's Scope and the JoinState the port keeps.
    out = req;
    out.mtu_selector = out.rate_selector = out.packet_life_time_selector = Selector::exactly;
    out.scope = g.params.scope;
    out.join_state = m->second;
    out.proxy_join = g.proxied.contains(member_guid);
    if (m->second == 0) {
        g.members.erase(m);
        g.proxied.erase(member_guid);
    }
    if (g.members.empty() && !g.predefined) {
        program_multicast(g.params.mlid, {});
        const sa::McMemberRecord params = g.params;
        groups_.erase(it);
        ++counters_.groups_deleted;
        report(sa::trap_number::mcast_group_deleted, params.mgid, params.p_key, std::nullopt, now_);
        return kOk;
    }
    update_forwarding(g);
    return kOk;
}

std::vector<sa::McMemberRecord> SaServer::query_groups(const sa::McMemberRecord& req, std::uint64_t mask,
                                                       const SaPort& requester, bool trusted) const {
    std::vector<sa::McMemberRecord> out;
    for (const auto& [mgid, g] : groups_) {
        const sa::McMemberRecord& p = g.params;
        // Groups of a partition the requester is not in are not its to see
        // (as OpenSM: the requester's port must hold the group's P_Key).
        if (!holds_pkey(requester, p.p_key)) continue;
        if ((mask & mc::mgid) && req.mgid != p.mgid) continue;
        if ((mask & mc::mlid) && req.mlid != p.mlid) continue;
        if ((mask & mc::q_key) && req.q_key != p.q_key) continue;
        if ((mask & mc::p_key) && (req.p_key & 0x7FFF) != (p.p_key & 0x7FFF)) continue;
        if ((mask & mc::sl) && req.sl != p.sl) continue;
        if (!trusted) {
            // Like OpenSM, a requester without the SM_Key sees each group
            // once, without its members.
            out.push_back(p);
            continue;
        }
        for (const auto& [guid, state] : g.members) {
            sa::McMemberRecord r = p;
            store_be64(r.port_gid.data(), config_.subnet_prefix);
            store_be64(r.port_gid.data() + 8, guid);
            r.join_state = state;
            r.proxy_join = g.proxied.contains(guid);
            if ((mask & mc::port_gid) && req.port_gid != r.port_gid) continue;
            out.push_back(r);
        }
    }
    return out;
}

void SaServer::program_multicast(std::uint16_t mlid, const std::set<std::uint64_t>& members) {
    if (program_multicast_) {
        program_multicast_(mlid, members);
        return;
    }
    std::set<std::uint8_t> ports;
    for (std::uint64_t guid : members)
        if (const SaPort* p = port_by_guid(guid); p && p->switch_port != 0 && p->switch_lid == 0) ports.insert(p->switch_port);
    switch_.set_multicast_ports(mlid, std::move(ports));
}

void SaServer::update_forwarding(const McGroup& g) {
    std::set<std::uint64_t> members;
    for (const auto& [guid, state] : g.members) {
        if (!(state & (sa::join_state::full_member | sa::join_state::non_member))) continue;
        if (const SaPort* p = port_by_guid(guid); p && p->switch_port != 0) members.insert(guid);
    }
    program_multicast(g.params.mlid, members);
}

void SaServer::refresh_forwarding() {
    reload_ports();
    for (const auto& [mgid, g] : groups_) update_forwarding(g);
}


}  // namespace ipoibd::fabric
