// The join machine drawn in multicast.h. Every group is one map entry whose
// state says what tick() or an SA answer does next:
//
//   WAITING --broadcast joined--> JOINING --answer ok--> JOINED
//                                   |   \--error/timeout--> BACKOFF --retry_at--> JOINING
//   JOINED --rejoin_all()--> JOINING (attachment kept; MLID checked on answer)
//   any --port_down()--> WAITING (broadcast: JOINING again at rejoin_all())
#include "ipoib/multicast.h"

#include <algorithm>

#include "transport/wire/mad.h"

namespace ipoibd::ipoib {

void visit(const McastCounters& c, CounterSink& out) {
    out.counter("joins", c.joins);
    out.counter("joined", c.joined);
    out.counter("join_failures", c.join_failures);
    out.counter("leaves", c.leaves);
    out.counter("rejoins", c.rejoins);
    out.counter("send_only_created", c.send_only_created);
    out.counter("send_only_expired", c.send_only_expired);
    out.counter("mlid_changed", c.mlid_changed);
    out.counter("drop_queue_full", c.drop_queue_full);
    out.counter("drop_queued_bytes", c.drop_queued_bytes);
    out.counter("drop_join_failed", c.drop_join_failed);
    out.counter("drop_table_full", c.drop_table_full);
    out.counter("drop_flushed", c.drop_flushed);
}

std::string_view to_string(GroupRole r) {
    switch (r) {
    case GroupRole::broadcast: return "broadcast";
    case GroupRole::full: return "full";
    case GroupRole::send_only: return "send-only";
    }
    return "?";
}

std::string_view to_string(GroupState s) {
    switch (s) {
    case GroupState::waiting: return "WAITING";
    case GroupState::joining: return "JOINING";
    case GroupState::joined: return "JOINED";
    case GroupState::backoff: return "BACKOFF";
    }
    return "?";
}

void McastManager::start(const ib::Gid& broadcast_mgid, const ib::Gid& port_gid, std::uint16_t pkey) {
    broadcast_ = broadcast_mgid;
    port_gid_ = port_gid;
    pkey_ = pkey;
    Group& g = groups_[broadcast_];
    g.role = GroupRole::broadcast;
    g.full_refs = std::max(g.full_refs, 1u);
    join(broadcast_, g);
}

bool McastManager::broadcast_joined() const {
    auto it = groups_.find(broadcast_);
    return link_.has_value() && it != groups_.end() && it->second.state == GroupState::joined;
}

std::uint8_t McastManager::wanted_join_state(const Group& g) const {
    return g.role == GroupRole::send_only ? config_.send_only_join_state : sa::join_state::full_member;
}

void McastManager::join(const ib::Gid& mgid, Group& g) {
    const std::uint8_t state = wanted_join_state(g);
    sa::McMemberQuery q;
    q.set_mgid(mgid).set_port_gid(port_gid_).set_join_state(state).set_p_key(static_cast<std::uint16_t>(pkey_ | 0x8000));
    if (g.role != GroupRole::broadcast && link_) {
        // Creation components: the broadcast group's parameters (RFC 4391 10).
        q.set_q_key(link_->qkey)
            .set_mtu(sa::Selector::exactly, link_->mtu)
            .set_tclass(link_->tclass)
            .set_rate(sa::Selector::exactly, link_->rate)
            .set_sl(link_->sl)
            .set_flow_label(link_->flow_label)
            .set_hop_limit(link_->hop_limit);
    }
    auto mad = q.request(ib::method::set, 0);
    g.state = GroupState::joining;
    ++counters_.joins;
    if (!mad) {
        on_join_answer(mgid, state, unexpected(sa::SaFailure::malformed_response));
        return;
    }
    g.maybe_state = static_cast<std::uint8_t>(g.maybe_state | state);
    g.request = sa_.submit(
        *mad, [this, mgid, state](const expected<sa::SaResult, sa::SaFailure>& r) { on_join_answer(mgid, state, r); },
        now_);
}

std::chrono::milliseconds McastManager::backoff(unsigned failures) const {
    std::chrono::milliseconds d = config_.backoff_initial;
    for (unsigned i = 1; i < failures && d < config_.backoff_max; ++i) d *= 2;
    return std::min(d, config_.backoff_max);
}

void McastManager::on_join_answer(const ib::Gid& mgid, std::uint8_t join_state,
                                  const expected<sa::SaResult, sa::SaFailure>& result) {
    auto it = groups_.find(mgid);
    if (it == groups_.end()) return;
    Group& g = it->second;
    std::uint16_t status = 0;
    std::optional<sa::McMemberRecord> rec;
    if (result) {
        // Answered: the SA holds the state (success) or not (an error).
        g.maybe_state = static_cast<std::uint8_t>(g.maybe_state & ~join_state);
        status = result->status();
        if (status == 0) {
            rec = sa::get_record<sa::McMemberRecord>(result->header);
            if (rec->mgid != mgid || rec->mlid == 0) rec.reset();
        }
    }
    if (!rec) {
        ++counters_.join_failures;
        ++g.failures;
        const auto delay = backoff(g.failures);
        g.state = GroupState::backoff;
        g.retry_at = now_ + delay;
        const std::size_t dropped = take_queue(g).size();
        counters_.drop_join_failed += dropped;
        sink_.join_failed(mgid, g.role, status, g.failures, delay, dropped);
        return;
    }
    ++counters_.joined;
    g.failures = 0;
    g.join_state = static_cast<std::uint8_t>(g.join_state | join_state);
    if (g.attached && g.mlid != rec->mlid) {
        ++counters_.mlid_changed;
        sink_.detach(mgid, g.mlid);
        g.attached = false;
    }
    g.mlid = rec->mlid;
    g.state = GroupState::joined;
    g.last_used = now_;
    // Send-only members receive nothing: only full members are attached.
    if (g.role != GroupRole::send_only && !g.attached) {
        sink_.attach(mgid, g.mlid);
        g.attached = true;
    }
    if (g.role == GroupRole::broadcast) {
        link_ = LinkParameters{.qkey = rec->q_key,
                               .mtu = rec->mtu,
                               .rate = rec->rate,
                               .sl = rec->sl,
                               .tclass = rec->tclass,
                               .flow_label = rec->flow_label,
                               .hop_limit = rec->hop_limit,
                               .pkey = rec->p_key};
        sink_.broadcast_joined(*link_, g.mlid);
        start_waiting();
        return;
    }
    std::vector<Packet> frames = take_queue(g);
    sink_.group_joined(mgid, g.role, g.mlid, std::move(frames));
}

void McastManager::start_waiting() {
    for (auto& [mgid, g] : groups_)
        if (g.state == GroupState::waiting) join(mgid, g);
}

bool McastManager::add_full(const ib::Gid& mgid) {
    auto it = groups_.find(mgid);
    if (it == groups_.end()) {
        if (groups_.size() >= config_.max_groups) {
            ++counters_.drop_table_full;
            return false;
        }
        it = groups_.emplace(mgid, Group{}).first;
    }
    Group& g = it->second;
    if (++g.full_refs > 1 || g.role == GroupRole::broadcast) return true;
    const bool upgrade = g.role == GroupRole::send_only;
    g.role = GroupRole::full;
    if (!broadcast_joined()) {
        if (g.state != GroupState::joining) g.state = GroupState::waiting;
        return true;
    }
    // A send-only member becoming full: join again as FullMember (the SA
    // adds the state to the ones the port holds).
    if (upgrade || g.state == GroupState::waiting) join(mgid, g);
    return true;
}

void McastManager::remove_full(const ib::Gid& mgid) {
    auto it = groups_.find(mgid);
    if (it == groups_.end() || it->second.full_refs == 0 || it->second.role == GroupRole::broadcast) return;
    if (--it->second.full_refs > 0) return;
    leave(mgid, it->second);
    groups_.erase(it);
}

void McastManager::leave(const ib::Gid& mgid, Group& g) {
    counters_.drop_flushed += take_queue(g).size();
    g.request.cancel();
    if (g.attached) {
        sink_.detach(mgid, g.mlid);
        g.attached = false;
    }
    // What the SA may hold: the states it granted, and those of a join it
    // may have taken without our hearing (in flight, or timed out). A
    // Delete of a state it does not hold is refused, and harmless; not
    // sending it would leave the port a member for good (IBA 15.4: until a
    // Delete or the port goes).
    const auto state = static_cast<std::uint8_t>(g.join_state | g.maybe_state);
    if (state != 0) {
        sa::McMemberQuery q;
        q.set_mgid(mgid).set_port_gid(port_gid_).set_join_state(state);
        if (auto mad = q.request(ib::method::del, 0)) {
            ++counters_.leaves;
            leaving_.push_back(sa_.submit(*mad, [](const expected<sa::SaResult, sa::SaFailure>&) {}, now_));
        }
    }
    g.maybe_state = 0;
    if (g.join_state != 0) {
        g.join_state = 0;
        sink_.group_left(mgid, g.role);
    }
    // Answered leaves need no handle any more.
    std::erase_if(leaving_, [](const sa::SaClient::Handle& h) { return !h.pending(); });
}

McastSendResult McastManager::send(const ib::Gid& mgid, bytes frame) {
    McastSendResult r;
    auto it = groups_.find(mgid);
    if (it == groups_.end()) {
        if (groups_.size() >= config_.max_groups) {
            ++counters_.drop_table_full;
            return r;
        }
        it = groups_.emplace(mgid, Group{}).first;
        it->second.role = GroupRole::send_only;
        ++counters_.send_only_created;
        if (broadcast_joined()) join(mgid, it->second);
    }
    Group& g = it->second;
    g.last_used = now_;
    switch (g.state) {
    case GroupState::joined:
        ++g.sent;
        r.outcome = McastSendResult::Outcome::send;
        r.ah = address_handle(mgid, g.mlid);
        return r;
    case GroupState::backoff:
        r.outcome = McastSendResult::Outcome::unavailable;
        return r;
    case GroupState::waiting:
    case GroupState::joining:
        if (g.queue.size() >= kMaxQueuedPerGroup) {
            ++counters_.drop_queue_full;
            return r;
        }
        if (queued_bytes_ + frame.size() > config_.max_queued_bytes) {
            ++counters_.drop_queued_bytes;
            return r;
        }
        g.queue.emplace_back(frame.begin(), frame.end());
        queued_bytes_ += frame.size();
        r.outcome = McastSendResult::Outcome::queued;
        return r;
    }
    return r;
}

transport::AddressHandle McastManager::address_handle(const ib::Gid& mgid, std::uint16_t mlid) const {
    transport::AddressHandle ah;
    ah.dlid = mlid;
    ah.sl = link_ ? link_->sl : 0;
    ah.grh = transport::GrhAttributes{.dgid = mgid,
                                      .flow_label = link_ ? link_->flow_label : 0,
                                      .sgid_index = 0,
                                      .hop_limit = link_ ? link_->hop_limit : std::uint8_t{0},
                                      .traffic_class = link_ ? link_->tclass : std::uint8_t{0}};
    return ah;
}

std::optional<transport::AddressHandle> McastManager::address_of(const ib::Gid& mgid) const {
    auto it = groups_.find(mgid);
    if (it == groups_.end() || it->second.state != GroupState::joined) return std::nullopt;
    return address_handle(mgid, it->second.mlid);
}

bool McastManager::is_joined(const ib::Gid& mgid) const {
    auto it = groups_.find(mgid);
    return it != groups_.end() && it->second.state == GroupState::joined;
}

void McastManager::rejoin_all() {
    ++counters_.rejoins;
    link_.reset();
    for (auto& [mgid, g] : groups_) {
        g.request.cancel();
        g.failures = 0;
        g.state = GroupState::waiting;
    }
    auto it = groups_.find(broadcast_);
    if (it != groups_.end()) join(broadcast_, it->second);
}

void McastManager::port_down() {
    link_.reset();
    for (auto& [mgid, g] : groups_) {
        g.request.cancel();
        counters_.drop_flushed += take_queue(g).size();
        g.state = GroupState::waiting;
        g.join_state = 0;  // the SA drops a port that went away
        g.failures = 0;
    }
}

std::vector<Packet> McastManager::take_queue(Group& g) {
    for (const Packet& p : g.queue) queued_bytes_ -= p.size();
    std::vector<Packet> out = std::move(g.queue);
    g.queue.clear();
    return out;
}

void McastManager::leave_all() {
    for (auto& [mgid, g] : groups_) leave(mgid, g);
    groups_.clear();
    link_.reset();
}

void McastManager::tick() {
    for (auto it = groups_.begin(); it != groups_.end();) {
        Group& g = it->second;
        if (g.state == GroupState::backoff && now_ >= g.retry_at) {
            if (g.role == GroupRole::broadcast || broadcast_joined())
                join(it->first, g);
            else
                g.state = GroupState::waiting;
        }
        if (g.role == GroupRole::send_only && g.state != GroupState::joining && now_ - g.last_used >= config_.send_only_idle) {
            ++counters_.send_only_expired;
            leave(it->first, g);
            it = groups_.erase(it);
            continue;
        }
        ++it;
    }
}

std::optional<Clock::time_point> McastManager::next_deadline() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) {
        if (!next || t < *next) next = t;
    };
    for (const auto& [mgid, g] : groups_) {
        if (g.state == GroupState::backoff) consider(g.retry_at);
        if (g.role == GroupRole::send_only && g.state != GroupState::joining) consider(g.last_used + config_.send_only_idle);
    }
    return next;
}

std::vector<McastGroupView> McastManager::groups() const {
    std::vector<McastGroupView> out;
    out.reserve(groups_.size());
    for (const auto& [mgid, g] : groups_)
        out.push_back({.mgid = mgid,
                       .role = g.role,
                       .state = g.state,
                       .mlid = g.mlid,
                       .join_state = g.join_state,
                       .full_refs = g.full_refs,
                       .failures = g.failures,
                       .queued = g.queue.size(),
                       .sent = g.sent,
                       .retry_at = g.retry_at});
    return out;
}

}  // namespace ipoibd::ipoib
