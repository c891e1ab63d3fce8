#include "fabric/sa_server.h"

#include <algorithm>

#include "sa_client/rmpp.h"

namespace ipoibd::fabric {
namespace {

namespace mc = sa::mc_member_comp;
namespace pc = sa::path_comp;
using sa::Selector;

constexpr std::uint16_t kOk = 0;
constexpr std::uint8_t kRespTimeValue = 18;  // 4.096 us * 2^18, about 1 s (OpenSM reports 16; its SA is C, ours a daemon loop)

// Does `have` satisfy `want` under `selector` (IBA 15.2.5.16 selectors)?
// MTU and rate codes grow with the value they name for the codes used here.
bool selects(Selector selector, std::uint8_t have, std::uint8_t want) {
    switch (selector) {
        case Selector::greater_than: return have > want;
        case Selector::less_than: return have < want;
        case Selector::exactly: return have == want;
        case Selector::largest_available: return true;
    }
    return false;
}

// Rate codes are not ordered by speed (5 Gb/s is code 5, 10 Gb/s code 3).
bool rate_selects(Selector selector, std::uint8_t have, std::uint8_t want) {
    const auto h = sa::rate_mbps(have), w = sa::rate_mbps(want);
    switch (selector) {
        case Selector::greater_than: return h > w;
        case Selector::less_than: return h < w;
        case Selector::exactly: return h == w;
        case Selector::largest_available: return true;
    }
    return false;
}

// PacketLifeTime selectors: 0 greater than, 1 less than, 2 exactly, 3 the
// smallest available (IBA 15.2.5.16): any group or path does.
bool life_selects(Selector selector, std::uint8_t have, std::uint8_t want) {
    return selector == Selector::largest_available || selects(selector, have, want);
}

bool holds_pkey(const SaPort& port, std::uint16_t pkey) {
    return std::any_of(port.pkeys.begin(), port.pkeys.end(),
                       [&](std::uint16_t k) { return (k & 0x7FFF) == (pkey & 0x7FFF) && (k & 0x7FFF) != 0; });
}

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

SaServer::SaServer(SaServerConfig config, Switch& sw, PortList ports)
    : config_(std::move(config)), switch_(sw), ports_(std::move(ports)) {
    create_predefined_groups();
    reload_ports();
}

void SaServer::set_partitions(std::vector<Partition> partitions) {
    config_.partitions = std::move(partitions);
    create_predefined_groups();
    reload_ports();
}

void SaServer::reload_ports() {
    port_list_ = ports_();
    by_lid_.clear();
    by_guid_.clear();
    by_gid_.clear();
    for (std::size_t i = 0; i < port_list_.size(); ++i) {
        by_lid_[port_list_[i].lid] = i;
        by_guid_[port_list_[i].guid] = i;
        by_gid_[port_list_[i].gid] = i;
    }
}

const SaPort* SaServer::port_by_guid(std::uint64_t guid) const {
    const auto it = by_guid_.find(guid);
    return it == by_guid_.end() ? nullptr : &port_list_[it->second];
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

std::optional<SaPort> SaServer::port_by_lid(std::uint16_t lid) const {
    const auto it = by_lid_.find(lid);
    if (it == by_lid_.end()) return std::nullopt;
    return port_list_[it->second];
}

std::optional<SaPort> SaServer::port_by_gid(const ib::Gid& gid) const {
    const auto it = by_gid_.find(gid);
    if (it == by_gid_.end()) return std::nullopt;
    return port_list_[it->second];
}

std::vector<sa::SaMad> SaServer::handle(const sa::SaMad& request, std::uint16_t requester_lid,
                                        std::uint32_t requester_qpn, Clock::time_point now, std::uint16_t requester_pkey) {
    if (now != Clock::time_point{}) now_ = now;
    const Requester to{requester_lid, requester_qpn, requester_pkey};
    if (request.rmpp.rmpp_type > sa::rmpp_type::data) return on_rmpp_control(request, requester_lid);
    if (request.header.method == ib::method::report_resp) {
        const auto it = pending_reports_.find(static_cast<std::uint32_t>(request.header.transaction_id));
        if (it != pending_reports_.end()) {
            pending_reports_.erase(it);
            ++counters_.reports_acked;
        }
        return {};
    }
    ++counters_.requests;
    sa::SaMad resp = request;
    // IBA 15.4: Get and Set are answered with GetResp, the others with
    // their own method and the R bit.
    resp.header.method = request.header.method == ib::method::set
                             ? ib::method::get_resp
                             : static_cast<std::uint8_t>(request.header.method | ib::method::response_bit);
    resp.header.status = kOk;
    resp.rmpp = {};
    resp.data.fill(0);
    auto reply = [&](std::uint16_t status) {
        resp.header.status = status;
        if (status != kOk) ++counters_.errors;
        return std::vector<sa::SaMad>{resp};
    };
    if (request.header.is_response()) {
        ++counters_.malformed;
        return {};
    }
    if (request.header.class_version != ib::class_version::subn_adm) return reply(ib::mad_status::bad_version);
    // C15-0.1.5: an SM_Key is 0 or the SA's; any other discards the MAD.
    if (request.sm_key != 0 && request.sm_key != config_.sm_key) {
        ++counters_.sm_key_refused;
        return {};
    }
    const auto requester = port_by_lid(requester_lid);
    if (!requester) return reply(sa::sa_status::err_req_invalid);
    const std::uint8_t method = request.header.method;
    const std::uint64_t mask = request.component_mask;

    if (request.header.attribute_id == sa::sa_attr::mc_member_record) {
        const auto rec = sa::get_record<sa::McMemberRecord>(request);
        if (method == ib::method::set || method == ib::method::del) {
            sa::McMemberRecord out;
            const std::uint16_t status = method == ib::method::set ? join(rec, mask, *requester, out)
                                                                   : leave(rec, mask, *requester, out);
            if (status == kOk) {
                (void)sa::put_record(out, resp);
                resp.attribute_offset = sa::attribute_offset_for(sa::McMemberRecord::size);
            } else {
                (void)sa::put_record(rec, resp);
            }
            return reply(status);
        }
        if (method == ib::method::get || method == ib::method::get_table) {
            const auto found = query_groups(rec, mask, *requester, request.sm_key == config_.sm_key);
            return respond_records(resp, method, found, to);
        }
        return reply(ib::mad_status::method_attr_not_supported);
    }
    if (request.header.attribute_id == sa::sa_attr::inform_info) {
        if (method != ib::method::set) return reply(ib::mad_status::method_attr_not_supported);
        const auto info = sa::get_record<sa::InformInfo>(request);
        (void)sa::put_record(info, resp);
        const std::uint16_t status = inform(info, *requester, requester_qpn);
        if (status == kOk) resp.attribute_offset = sa::attribute_offset_for(sa::InformInfo::size);
        return reply(status);
    }
    if (request.header.attribute_id == sa::sa_attr::inform_info_record) {
        if (method != ib::method::get && method != ib::method::get_table)
            return reply(ib::mad_status::method_attr_not_supported);
        const auto rec = sa::get_record<sa::InformInfoRecord>(request);
        return respond_records(resp, method, query_subscriptions(rec, mask, *requester), to);
    }
    if (request.header.attribute_id == sa::sa_attr::class_port_info) {
        if (method != ib::method::get) return reply(ib::mad_status::method_attr_not_supported);
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
        (void)sa::put_record(cpi, resp);
        return reply(kOk);
    }
    if (request.header.attribute_id == sa::sa_attr::node_record) {
        if (method != ib::method::get && method != ib::method::get_table)
            return reply(ib::mad_status::method_attr_not_supported);
        const auto rec = sa::get_record<sa::NodeRecord>(request);
        return respond_records(resp, method, query_nodes(rec, mask, *requester), to);
    }
    if (request.header.attribute_id == sa::sa_attr::port_info_record) {
        if (method != ib::method::get && method != ib::method::get_table)
            return reply(ib::mad_status::method_attr_not_supported);
        const auto rec = sa::get_record<sa::PortInfoRecord>(request);
        return respond_records(resp, method,
                               query_port_infos(rec, mask, *requester, request.sm_key == config_.sm_key), to);
    }
    if (request.header.attribute_id == sa::sa_attr::link_record) {
        if (method != ib::method::get && method != ib::method::get_table)
            return reply(ib::mad_status::method_attr_not_supported);
        const auto rec = sa::get_record<sa::LinkRecord>(request);
        return respond_records(resp, method, query_links(rec, mask, *requester), to);
    }
    if (request.header.attribute_id == sa::sa_attr::path_record) {
        if (method != ib::method::get && method != ib::method::get_table)
            return reply(ib::mad_status::method_attr_not_supported);
        const auto rec = sa::get_record<sa::PathRecord>(request);
        if (method == ib::method::get && !(mask & (pc::dgid | pc::dlid))) return reply(sa::sa_status::err_req_insufficient_components);
        return respond_records(resp, method, query_paths(rec, mask, *requester, method == ib::method::get_table), to);
    }
    return reply(ib::mad_status::method_attr_not_supported);
}

template <class Record>
std::vector<sa::SaMad> SaServer::respond_records(sa::SaMad& resp, std::uint8_t method, const std::vector<Record>& found,
                                                 const Requester& to) {
    if (found.empty() && method == ib::method::get_table) return sa::rmpp_segments(resp, {});
    if (found.empty()) {
        resp.header.status = sa::sa_status::err_no_records;
        ++counters_.errors;
        return {resp};
    }
    if (method == ib::method::get) {
        if (found.size() > 1) {
            resp.header.status = sa::sa_status::err_too_many_records;
            ++counters_.errors;
            return {resp};
        }
        (void)sa::put_record(found.front(), resp);
        resp.attribute_offset = sa::attribute_offset_for(Record::size);
        return {resp};
    }
    resp.attribute_offset = sa::attribute_offset_for(Record::size);
    const auto payload = sa::pack_records(std::span<const Record>(found));
    auto segments = sa::rmpp_segments(resp, payload);
    if (segments.size() == 1) return segments;
    // More than one segment: one RMPP window at a time, as the requester's
    // ACKs open them (IBA 13.6).
    if (transfers_.size() >= config_.max_transfers) {
        resp.header.status = sa::sa_status::err_no_resources;
        ++counters_.errors;
        return {resp};
    }
    const std::pair<std::uint16_t, std::uint32_t> key{to.lid, static_cast<std::uint32_t>(resp.header.transaction_id)};
    Transfer t{sa::RmppSender(std::move(segments)), to, now_ + config_.rmpp_timeout, 1};
    auto first = t.sender.start();
    transfers_.insert_or_assign(key, std::move(t));
    ++counters_.rmpp_transfers;
    return first;
}

std::vector<sa::SaMad> SaServer::on_rmpp_control(const sa::SaMad& mad, std::uint16_t requester_lid) {
    const auto it = transfers_.find({requester_lid, static_cast<std::uint32_t>(mad.header.transaction_id)});
    if (it == transfers_.end()) return {};  // the ACK of a one-segment table, or of a transfer already over
    auto more = it->second.sender.on_ack(mad);
    if (!more) {
        // STOP/ABORT from the requester, or a broken ACK: the transfer ends.
        ++counters_.rmpp_aborted;
        transfers_.erase(it);
        return {};
    }
    if (it->second.sender.complete()) {
        transfers_.erase(it);
        return {};
    }
    it->second.deadline = now_ + config_.rmpp_timeout;
    it->second.tries = 1;
    return std::move(*more);
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

// ---------------------------------------------------------------------------
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
        add({sw->lid, p.switch_port, ca_port, p.lid});
        add({p.lid, ca_port, p.switch_port, sw->lid});
    }
    std::sort(out.begin(), out.end(), [](const sa::LinkRecord& a, const sa::LinkRecord& b) {
        return std::tie(a.from_lid, a.from_port) < std::tie(b.from_lid, b.from_port);
    });
    return out;
}

bool SaServer::shares_partition(const SaPort& a, const SaPort& b) {
    return std::any_of(a.pkeys.begin(), a.pkeys.end(), [&](std::uint16_t k) {
        // Two limited members of a partition do not share it (IBA 10.9.3).
        return (k & 0x7FFF) != 0 && std::any_of(b.pkeys.begin(), b.pkeys.end(), [&](std::uint16_t x) {
                   return (x & 0x7FFF) == (k & 0x7FFF) && ((x | k) & 0x8000) != 0;
               });
    });
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

void SaServer::program_multicast(std::uint16_t mlid, std::set<std::uint8_t> ports) {
    if (program_multicast_)
        program_multicast_(mlid, ports);
    else
        switch_.set_multicast_ports(mlid, std::move(ports));
}

void SaServer::update_forwarding(const McGroup& g) {
    std::set<std::uint8_t> ports;
    for (const auto& [guid, state] : g.members) {
        if (!(state & (sa::join_state::full_member | sa::join_state::non_member))) continue;
        if (const SaPort* p = port_by_guid(guid); p && p->switch_port != 0) ports.insert(p->switch_port);
    }
    program_multicast(g.params.mlid, std::move(ports));
}

void SaServer::refresh_forwarding() {
    reload_ports();
    for (const auto& [mgid, g] : groups_) update_forwarding(g);
}

void SaServer::port_active(std::uint64_t guid, Clock::time_point now) {
    now_ = now;
    refresh_forwarding();
    if (const SaPort* p = port_by_guid(guid)) report(sa::trap_number::gid_in_service, p->gid, 0, *p, now);
}

void SaServer::port_gone(std::uint64_t guid, Clock::time_point now) {
    if (now != Clock::time_point{}) now_ = now;
    std::optional<SaPort> gone;
    if (const SaPort* p = port_by_guid(guid)) gone = *p;
    std::vector<sa::McMemberRecord> deleted;
    for (auto it = groups_.begin(); it != groups_.end();) {
        it->second.members.erase(guid);
        if (it->second.members.empty() && !it->second.predefined) {
            program_multicast(it->second.params.mlid, {});
            deleted.push_back(it->second.params);
            it = groups_.erase(it);
            ++counters_.groups_deleted;
        } else {
            update_forwarding(it->second);
            ++it;
        }
    }
    std::erase_if(subscriptions_, [&](const Subscription& s) { return s.guid == guid; });
    if (gone) report(sa::trap_number::gid_out_of_service, gone->gid, 0, gone, now_);
    for (const auto& g : deleted) report(sa::trap_number::mcast_group_deleted, g.mgid, g.p_key, std::nullopt, now_);
    // The port is still in the SM's list while it is being removed; drop
    // it here so that nothing is routed or reported to it any more.
    if (gone) {
        std::erase_if(port_list_, [&](const SaPort& p) { return p.guid == guid; });
        by_lid_.clear();
        by_guid_.clear();
        by_gid_.clear();
        for (std::size_t i = 0; i < port_list_.size(); ++i) {
            by_lid_[port_list_[i].lid] = i;
            by_guid_[port_list_[i].guid] = i;
            by_gid_[port_list_[i].gid] = i;
        }
    }
}

// Subscriptions as InformInfoRecords, selected by SubscriberGID and Enum.
// Enum numbers a subscriber's subscriptions in the order they were made.
// Shown, as the topology records, only to requesters that share a
// partition with the subscriber.
std::vector<sa::InformInfoRecord> SaServer::query_subscriptions(const sa::InformInfoRecord& req, std::uint64_t mask,
                                                                const SaPort& requester) const {
    namespace ic = sa::inform_info_record_comp;
    std::vector<sa::InformInfoRecord> out;
    std::map<std::uint64_t, std::uint16_t> next_enum;
    for (const Subscription& sub : subscriptions_) {
        if (sub.guid != requester.guid) {
            const SaPort* subscriber = port_by_guid(sub.guid);
            if (!subscriber || !shares_partition(*subscriber, requester)) {
                ++next_enum[sub.guid];
                continue;
            }
        }
        sa::InformInfoRecord r;
        store_be64(r.subscriber_gid.data(), config_.subnet_prefix);
        store_be64(r.subscriber_gid.data() + 8, sub.guid);
        r.enum_ = next_enum[sub.guid]++;
        r.inform_info = sa::generic_trap_subscription(sub.trap, true);
        r.inform_info.qpn = sub.qpn;
        if ((mask & ic::subscriber_gid) && r.subscriber_gid != req.subscriber_gid) continue;
        if ((mask & ic::enum_) && r.enum_ != req.enum_) continue;
        if ((mask & ic::trap_number_device_id) && r.inform_info.trap_number_device_id != req.inform_info.trap_number_device_id)
            continue;
        out.push_back(r);
    }
    return out;
}

std::uint16_t SaServer::inform(const sa::InformInfo& info, const SaPort& requester, std::uint32_t qpn) {
    if (info.is_generic != 1) return sa::sa_status::err_req_invalid;  // vendor traps: none are issued
    const Subscription sub{requester.guid, qpn, info.trap_number_device_id};
    const auto same = [&](const Subscription& s) { return s.guid == sub.guid && s.trap == sub.trap && s.qpn == sub.qpn; };
    if (info.subscribe == 1) {
        if (std::any_of(subscriptions_.begin(), subscriptions_.end(), same)) return kOk;
        const auto held = std::count_if(subscriptions_.begin(), subscriptions_.end(),
                                        [&](const Subscription& s) { return s.guid == sub.guid; });
        if (static_cast<std::size_t>(held) >= config_.max_subscriptions_per_port) {
            ++counters_.subscriptions_over_limit;
            return sa::sa_status::err_no_resources;
        }
        subscriptions_.push_back(sub);
        return kOk;
    }
    const auto before = subscriptions_.size();
    std::erase_if(subscriptions_, same);
    return subscriptions_.size() < before ? kOk : sa::sa_status::err_req_invalid;
}

// A Report of `trap` about `gid` to every subscriber that may know of it:
// one sharing a partition with the port `about` (traps 64/65), or holding
// the group's P_Key (66/67).
void SaServer::report(std::uint16_t trap, const ib::Gid& gid, std::uint16_t group_pkey, std::optional<SaPort> about,
                      Clock::time_point now) {
    if (subscriptions_.empty()) return;
    ib::Gid issuer{};
    store_be64(issuer.data(), config_.subnet_prefix);
    const sa::Notice notice = sa::make_gid_trap(trap, gid, config_.sm_lid, issuer);
    for (const Subscription& sub : subscriptions_) {
        if (sub.trap != sa::kInformAllTraps && sub.trap != trap) continue;
        const SaPort* subscriber = port_by_guid(sub.guid);
        if (!subscriber) continue;
        std::optional<std::uint16_t> pkey;
        if (about) {
            for (std::uint16_t k : subscriber->pkeys)
                if (holds_pkey(*about, k) && !pkey) pkey = k;
        } else if (holds_pkey(*subscriber, group_pkey)) {
            pkey = static_cast<std::uint16_t>(group_pkey | 0x8000);
        }
        if (!pkey) continue;
        if (pending_reports_.size() >= config_.max_pending_reports) {
            ++counters_.reports_dropped;
            continue;
        }
        PendingReport p;
        p.out.dlid = subscriber->lid;
        p.out.dest_qp = sub.qpn;
        p.out.pkey = *pkey;
        p.out.mad.header.method = ib::method::report;
        p.out.mad.header.attribute_id = sa::sa_attr::notice;
        const std::uint32_t tid = next_report_tid_++;
        p.out.mad.header.transaction_id = (std::uint64_t{0x5A5A0000} << 32) | tid;  // high half: this SA's reports
        (void)sa::put_record(notice, p.out.mad);
        pending_reports_[tid] = p;
        send_report(tid, now);
    }
}

void SaServer::send_report(std::size_t tid, Clock::time_point now) {
    PendingReport& p = pending_reports_.at(static_cast<std::uint32_t>(tid));
    ++p.tries;
    p.deadline = now + config_.report_timeout;
    outbound_.push_back(p.out);
    ++counters_.reports_sent;
}

void SaServer::tick(Clock::time_point now) {
    now_ = now;
    std::vector<std::uint32_t> resend, expired;
    for (const auto& [tid, p] : pending_reports_) {
        if (now < p.deadline) continue;
        (p.tries > config_.report_retries ? expired : resend).push_back(tid);
    }
    for (std::uint32_t tid : resend) send_report(tid, now);
    for (std::uint32_t tid : expired) {
        pending_reports_.erase(tid);
        ++counters_.reports_dropped;
    }
    // Unacknowledged RMPP windows are sent again, then given up.
    for (auto it = transfers_.begin(); it != transfers_.end();) {
        Transfer& t = it->second;
        if (now < t.deadline) {
            ++it;
            continue;
        }
        if (t.tries > config_.rmpp_retries) {
            ++counters_.rmpp_aborted;
            it = transfers_.erase(it);
            continue;
        }
        ++t.tries;
        t.deadline = now + config_.rmpp_timeout;
        for (const sa::SaMad& m : t.sender.retransmit()) outbound_.push_back({t.to.lid, t.to.qpn, t.to.pkey, m});
        ++it;
    }
}

std::vector<SaOutgoing> SaServer::take_outbound() { return std::exchange(outbound_, {}); }

void visit(const SaCounters& c, CounterSink& out) {
    out.counter("requests", c.requests);
    out.counter("errors", c.errors);
    out.counter("malformed", c.malformed);
    out.counter("sm_key_refused", c.sm_key_refused);
    out.counter("groups_created", c.groups_created);
    out.counter("groups_deleted", c.groups_deleted);
    out.counter("reports_sent", c.reports_sent);
    out.counter("reports_acked", c.reports_acked);
    out.counter("reports_dropped", c.reports_dropped);
    out.counter("rmpp_transfers", c.rmpp_transfers);
    out.counter("rmpp_aborted", c.rmpp_aborted);
    out.counter("joins_over_limit", c.joins_over_limit);
    out.counter("subscriptions_over_limit", c.subscriptions_over_limit);
}

}  // namespace ipoibd::fabric
