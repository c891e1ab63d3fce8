#include "fabric/sa/sa_server.h"

#include <algorithm>

#include "fabric/sa/sa_internal.h"
#include "sa_client/rmpp.h"

namespace ipoibd::fabric {

using namespace sa_detail;

// One handler per attribute (its own file beside this one, as OpenSM keeps
// one per record type). An attribute not here is answered "method/attribute
// not supported".
const SaServer::Route SaServer::kRoutes[] = {
    {sa::sa_attr::class_port_info, &SaServer::on_class_port_info},
    {sa::sa_attr::node_record, &SaServer::on_node_record},
    {sa::sa_attr::port_info_record, &SaServer::on_port_info_record},
    {sa::sa_attr::link_record, &SaServer::on_link_record},
    {sa::sa_attr::path_record, &SaServer::on_path_record},
    {sa::sa_attr::mc_member_record, &SaServer::on_mc_member_record},
    {sa::sa_attr::inform_info, &SaServer::on_inform_info},
    {sa::sa_attr::inform_info_record, &SaServer::on_inform_info_record},
};

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
    index_ports();
}

void SaServer::index_ports() {
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
    const auto refuse = [&](std::uint16_t status) {
        resp.header.status = status;
        ++counters_.errors;
        return std::vector<sa::SaMad>{resp};
    };
    if (request.header.is_response()) {
        ++counters_.malformed;
        return {};
    }
    if (request.header.class_version != ib::class_version::subn_adm) return refuse(ib::mad_status::bad_version);
    // C15-0.1.5: an SM_Key is 0 or the SA's; any other discards the MAD.
    if (request.sm_key != 0 && request.sm_key != config_.sm_key) {
        ++counters_.sm_key_refused;
        return {};
    }
    const auto requester = port_by_lid(requester_lid);
    if (!requester) return refuse(sa::sa_status::err_req_invalid);
    const Request r{request, resp, *requester, to, request.sm_key == config_.sm_key};
    for (const Route& route : kRoutes)
        if (route.attribute_id == request.header.attribute_id) return (this->*route.handler)(r);
    return reply(r, ib::mad_status::method_attr_not_supported);
}

std::vector<sa::SaMad> SaServer::reply(const Request& r, std::uint16_t status) {
    r.resp.header.status = status;
    if (status != kOk) ++counters_.errors;
    return {r.resp};
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

bool SaServer::shares_partition(const SaPort& a, const SaPort& b) {
    return std::any_of(a.pkeys.begin(), a.pkeys.end(), [&](std::uint16_t k) {
        // Two limited members of a partition do not share it (IBA 10.9.3).
        return (k & 0x7FFF) != 0 && std::any_of(b.pkeys.begin(), b.pkeys.end(), [&](std::uint16_t x) {
                   return (x & 0x7FFF) == (k & 0x7FFF) && ((x | k) & 0x8000) != 0;
               });
    });
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
        index_ports();
    }
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
