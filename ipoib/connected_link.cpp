#include "ipoib/connected_link.h"

#include <algorithm>

#include "ipoib/port_link.h"
#include "transport/gid.h"

namespace ipoibd::ipoib {

namespace {

using Outcome = ConnectedSend::Outcome;

std::uint8_t clamp_mtu_code(std::uint8_t code, ib::Mtu port_mtu) {
    if (code < 1 || code > 5) code = static_cast<std::uint8_t>(port_mtu);
    return std::min(code, static_cast<std::uint8_t>(port_mtu));
}

// Sums counters by name (the RC counters of many QPs).
class SumSink final : public CounterSink {
public:
    explicit SumSink(std::map<std::string, std::uint64_t>& into) : into_(into) {}
    void counter(std::string_view name, std::uint64_t value) override { into_[std::string(name)] += value; }

private:
    std::map<std::string, std::uint64_t>& into_;
};

}  // namespace

const char* to_string(ConnState s) {
    switch (s) {
        case ConnState::connecting: return "connecting";
        case ConnState::up: return "up";
        case ConnState::failed: return "failed";
    }
    return "?";
}

void visit(const ConnectedCounters& c, CounterSink& out) {
    out.counter("connects", c.connects);
    out.counter("connected", c.connected);
    out.counter("accepted", c.accepted);
    out.counter("rejected_by_peer", c.rejected_by_peer);
    out.counter("timed_out", c.timed_out);
    out.counter("connect_errors", c.connect_errors);
    out.counter("rejected_no_room", c.rejected_no_room);
    out.counter("rejected_bad_req", c.rejected_bad_req);
    out.counter("rejected_peer_limit", c.rejected_peer_limit);
    out.counter("replaced_by_peer", c.replaced_by_peer);
    out.counter("disconnected_by_peer", c.disconnected_by_peer);
    out.counter("ended_by_cm", c.ended_by_cm);
    out.counter("reaped_idle", c.reaped_idle);
    out.counter("rc_errors", c.rc_errors);
    out.counter("send_stalled", c.send_stalled);
    out.counter("tx_messages", c.tx_messages);
    out.counter("rx_messages", c.rx_messages);
    out.counter("tx_queued", c.tx_queued);
    out.counter("drop_queue_full", c.drop_queue_full);
    out.counter("drop_queued_bytes", c.drop_queued_bytes);
    out.counter("drop_connect_failed", c.drop_connect_failed);
    out.counter("drop_send_full", c.drop_send_full);
    out.counter("drop_send_bytes", c.drop_send_bytes);
    out.counter("drop_refused", c.drop_refused);
    out.counter("drop_too_big_queued", c.drop_too_big_queued);
    out.counter("rx_errors", c.rx_errors);
    out.counter("tx_errors", c.tx_errors);
    out.counter("no_room_datagram", c.no_room_datagram);
    out.counter("idle_datagram", c.idle_datagram);
}

ConnectedLink::ConnectedLink(transport::Port& port, cm::CmAccess& cm, Config config, EventSink events,
                             std::uint64_t seed)
    : port_(port), cm_(cm), config_(config), events_(std::move(events)), rng_(seed | 1) {}

ConnectedLink::~ConnectedLink() { cm_.forget(*this); }

std::uint32_t ConnectedLink::random_psn() {
    // xorshift64*: PSNs need to differ between connections, not be secret.
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return static_cast<std::uint32_t>((rng_ * 0x2545F4914F6CDD1DULL) >> 40) & 0xFFFFFF;
}

std::optional<std::uint16_t> ConnectedLink::pkey_index() const {
    return find_pkey_index(port_.attributes().pkey_table, pkey_);
}

ConnectedLink::Conn* ConnectedLink::find(Key k) {
    auto it = conns_.find(k);
    return it == conns_.end() ? nullptr : &it->second;
}

expected<void, std::string> ConnectedLink::open(std::uint32_t ud_qpn, std::uint16_t pkey, Clock::time_point now) {
    if (open_ && ud_qpn == ud_qpn_ && pkey == pkey_) return {};
    close(now);
    pkey_ = pkey;
    ud_qpn_ = ud_qpn;
    open_ = true;
    auto r = cm_.listen(cm::ipoib_service_id(ud_qpn), *this);
    listening_ = r.has_value();
    return r;
}

void ConnectedLink::close(Clock::time_point now) {
    if (listening_) cm_.unlisten(cm::ipoib_service_id(ud_qpn_));
    open_ = false;
    listening_ = false;
    std::vector<Key> keys;
    for (const auto& [k, c] : conns_) keys.push_back(k);
    for (Key k : keys) {
        Conn* c = find(k);
        if (c->cm_id) (void)cm_.disconnect(*c->cm_id, now);
        counters_.drop_connect_failed += take_queue(*c).size();
        erase(k);
    }
    by_cm_.clear();
    failures_.clear();
}

void ConnectedLink::erase(Key k) {
    auto it = conns_.find(k);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    if (c.qp) {
        SumSink sum(closed_rc_);
        visit(c.qp->counters(), sum);
    }
    (void)take_queue(c);
    forget_sends(c);
    buffers_in_use_ -= std::min(buffers_in_use_, c.active ? std::size_t{0} : config_.ring);
    if (c.active) {
        auto a = active_.find({c.peer.gid, c.peer.qpn});
        if (a != active_.end() && a->second == k) active_.erase(a);
    }
    if (c.cm_id) {
        auto b = by_cm_.find(*c.cm_id);
        if (b != by_cm_.end() && b->second == k) by_cm_.erase(b);
    }
    conns_.erase(it);
}

void ConnectedLink::tear_down(Key k, const std::string& why, Clock::time_point now, bool notify) {
    Conn* c = find(k);
    if (!c) return;
    if (notify)
        events_(EngineEventKind::connection_failed,
                std::string(c->active ? "connection to " : "connection from ") + ipoibd::format_gid(c->peer.gid) + " " +
                    hex_qpn(c->peer.qpn) + " failed: " + why,
                {{"IB_GID", ipoibd::format_gid(c->peer.gid)},
                 {"IB_QPN", hex_qpn(c->peer.qpn)},
                 {"IPOIB_CM_DIRECTION", c->active ? "active" : "passive"},
                 {"IPOIB_REASON", why}});
    if (!c->active) {
        erase(k);
        return;
    }
    counters_.drop_connect_failed += take_queue(*c).size();
    if (c->qp) {
        SumSink sum(closed_rc_);
        visit(c->qp->counters(), sum);
        c->qp.reset();
    }
    if (c->cm_id) {
        by_cm_.erase(*c->cm_id);
        c->cm_id.reset();
    }
    c->state = ConnState::failed;
    forget_sends(*c);
    const std::pair<ib::Gid, std::uint32_t> peer{c->peer.gid, c->peer.qpn};
    if (!failures_.count(peer) && failures_.size() >= kMaxBackoffPeers) failures_.erase(failures_.begin());
    const unsigned failures = failures_[peer] = std::min(failures_[peer] + 1, 16u);
    auto wait = config_.retry_after;
    for (unsigned i = 1; i < failures && wait < config_.retry_max; ++i) wait *= 2;
    c->failed_until = now + std::min(wait, config_.retry_max);
}

// ---------------------------------------------------------------------------
// Active side

ConnectedSend ConnectedLink::send(const HwAddress& to, const PathInfo& path, bytes frame, Clock::time_point now,
                                  bool fits_datagram) {
    if (!open_) return {};
    auto it = active_.find({to.gid, to.qpn});
    if (it != active_.end()) {
        Conn& c = conns_.at(it->second);
        if (c.state == ConnState::failed && now >= c.failed_until) {
            erase(it->second);
            it = active_.end();
        } else {
            switch (c.state) {
                case ConnState::failed: return {};  // UD meanwhile
                case ConnState::connecting:
                    if (small_over_datagram(c, fits_datagram)) return {};
                    if (c.queue.size() >= config_.queue) {
                        ++counters_.drop_queue_full;
                        return {.outcome = Outcome::dropped};
                    }
                    return enqueue(c, frame);
                case ConnState::up:
                    if (small_over_datagram(c, fits_datagram)) return {};
                    if (frame.size() > c.peer_mtu)
                        return {.outcome = Outcome::too_big, .mtu = c.peer_mtu - static_cast<std::uint32_t>(EncapHeader::size)};
                    return post(c, frame, now);
            }
        }
    }
    if (conns_.size() >= config_.max_connections) {
        ++counters_.no_room_datagram;
        return {};
    }
    const Key k = next_key_++;
    Conn& c = conns_[k];
    c.active = true;
    c.peer = to;
    c.peer_lid = path.dlid;
    c.last_used = now;
    active_[{to.gid, to.qpn}] = k;
    start_connect(k, c, path, now);
    if (c.state == ConnState::failed) return {};
    if (small_over_datagram(c, fits_datagram)) return {};  // the connection comes up meanwhile
    return enqueue(c, frame);
}

ConnectedSend ConnectedLink::enqueue(Conn& c, bytes frame) {
    if (queued_bytes_ + frame.size() > config_.max_queued_bytes) {
        ++counters_.drop_queued_bytes;
        return {.outcome = Outcome::dropped};
    }
    assign_bytes(c.queue.emplace_back(), frame);
    queued_bytes_ += frame.size();
    ++counters_.tx_queued;
    return {.outcome = Outcome::queued};
}

void ConnectedLink::forget_sends(Conn& c) {
    for (const auto& [wr_id, size] : c.in_flight) send_bytes_ -= size;
    c.in_flight.clear();
}

std::deque<std::vector<std::uint8_t>> ConnectedLink::take_queue(Conn& c) {
    for (const auto& f : c.queue) queued_bytes_ -= f.size();
    std::deque<std::vector<std::uint8_t>> out;
    out.swap(c.queue);
    return out;
}

bool ConnectedLink::small_over_datagram(const Conn& c, bool fits_datagram) {
    // Nothing of ours on RC that the frame could overtake: no SEND
    // unacknowledged (on the peer each pass delivers RC completions before
    // UD ones, and a kernel peer has one completion queue for both), none
    // waiting for the connection.
    if (!fits_datagram || !config_.datagram_when_idle || !c.in_flight.empty() || !c.queue.empty()) return false;
    ++counters_.idle_datagram;
    return true;
}

void ConnectedLink::start_connect(Key k, Conn& c, const PathInfo& path, Clock::time_point now) {
    ++counters_.connects;
    const transport::PortAttributes attrs = port_.attributes();
    const auto index = pkey_index();
    if (!index) {
        ++counters_.connect_errors;
        tear_down(k, "the P_Key is not in the port's table", now, true);
        return;
    }
    auto qp = port_.create_rc_qp(*index);
    if (!qp) {
        ++counters_.connect_errors;
        tear_down(k, "no RC QP: " + qp.error().message(), now, true);
        return;
    }
    c.qp = std::move(*qp);
    c.our_psn = random_psn();
    c.path_mtu = clamp_mtu_code(path.mtu, attrs.active_mtu);
    cm::ConnectParams p;
    p.peer = {.lid = path.dlid};
    p.service_id = cm::ipoib_service_id(c.peer.qpn);
    p.local_qpn = c.qp->qpn();
    p.starting_psn = c.our_psn;
    p.pkey = attrs.pkey_table.at(*index);
    p.path_mtu = c.path_mtu;
    p.retry_count = config_.retry_count;
    p.rnr_retry_count = config_.rnr_retry;
    p.primary = {.local_lid = attrs.lid,
                 .remote_lid = path.dlid,
                 .local_gid = attrs.gid(),
                 .remote_gid = c.peer.gid,
                 .packet_rate = path.rate,
                 .sl = path.sl,
                 .subnet_local = true,
                 .local_ack_timeout = config_.ack_timeout};
    cm::write_ipoib_data(p.private_data, {.ud_qpn = ud_qpn_, .receive_size = kConnectedReceiveSize});
    auto id = cm_.connect(p, *this, now);
    if (!id) {
        ++counters_.connect_errors;
        tear_down(k, "the CM refused: " + id.error(), now, true);
        return;
    }
    // Events of this connection come later (after a MAD or a channel event),
    // never inside connect(): the mapping is in place before them.
    c.cm_id = *id;
    by_cm_[*id] = k;
}

void ConnectedLink::on_rep(Key k, Conn& c, const cm::Event& e, Clock::time_point now) {
    const cm::IpoibCmData data = cm::read_ipoib_data(e.rep->private_data);
    if (data.receive_size <= EncapHeader::size) {
        (void)cm_.reject(e.id, cm::rej::consumer_reject, {}, now);
        ++counters_.connect_errors;
        tear_down(k, "the REP's receive size is " + std::to_string(data.receive_size), now, true);
        return;
    }
    // A CM that chose the REQ's Starting PSN and path MTU itself
    // (librdmacm) says which.
    if (e.local_psn) c.our_psn = *e.local_psn;
    if (e.path_mtu) c.path_mtu = *e.path_mtu;
    transport::rc::RtrAttributes rtr;
    rtr.dest_qpn = e.rep->local_qpn;
    rtr.pmtu = ib::mtu_bytes(static_cast<ib::Mtu>(c.path_mtu));
    rtr.rq_psn = c.our_psn;
    transport::rc::RtsAttributes rts;
    rts.sq_psn = e.rep->starting_psn;
    rts.timeout = config_.ack_timeout;
    rts.retry_count = config_.retry_count;
    rts.rnr_retry = e.rep->rnr_retry_count;
    if (auto r = c.qp->connect(c.peer_lid, rtr, rts); !r) {
        (void)cm_.reject(e.id, cm::rej::consumer_reject, {}, now);
        ++counters_.connect_errors;
        tear_down(k, "could not bring the QP to RTS: " + r.error(), now, true);
        return;
    }
    if (auto r = cm_.establish(e.id, now); !r) {
        // Not left in REP_RCVD, holding the CM's slot (librdmacm: the id)
        // until the peer gives up.
        (void)cm_.reject(e.id, cm::rej::consumer_reject, {}, now);
        ++counters_.connect_errors;
        tear_down(k, "the CM refused the RTU: " + r.error(), now, true);
        return;
    }
    c.remote_qpn = e.rep->local_qpn;
    c.peer_mtu = std::min(data.receive_size, kConnectedReceiveSize);
    c.state = ConnState::up;
    failures_.erase({c.peer.gid, c.peer.qpn});
    c.last_used = now;
    ++counters_.connected;
    for (const auto& f : take_queue(c)) {
        if (f.size() > c.peer_mtu) {
            ++counters_.drop_too_big_queued;
            continue;
        }
        (void)post(c, f, now);
    }
}

ConnectedSend ConnectedLink::post(Conn& c, bytes frame, Clock::time_point now) {
    if (c.in_flight.size() >= config_.send_depth) {
        ++counters_.drop_send_full;
        return {.outcome = Outcome::dropped};
    }
    if (send_bytes_ + frame.size() > config_.max_send_bytes) {
        ++counters_.drop_send_bytes;
        return {.outcome = Outcome::dropped};
    }
    transport::rc::SendWr wr;
    wr.wr_id = c.next_wr++;
    const std::uint64_t wr_id = wr.wr_id;
    assign_bytes(wr.payload, frame);
    if (auto r = c.qp->post_send(std::move(wr)); !r) {
        ++counters_.drop_refused;
        return {.outcome = Outcome::dropped};
    }
    if (c.in_flight.empty()) c.send_progress = now;
    c.in_flight.emplace_back(wr_id, frame.size());
    send_bytes_ += frame.size();
    ++counters_.tx_messages;
    c.last_used = now;
    return {.outcome = Outcome::sent};
}

// ---------------------------------------------------------------------------
// Passive side

void ConnectedLink::on_req(const cm::Event& e, Clock::time_point now) {
    const cm::Req& req = *e.req;
    const transport::PortAttributes attrs = port_.attributes();
    auto refuse = [&](std::uint16_t reason, bytes ari) { (void)cm_.reject(e.id, reason, ari, now); };
    if (!listening_ || req.service_id != cm::ipoib_service_id(ud_qpn_)) {
        refuse(cm::rej::invalid_service_id, {});
        return;
    }
    if (req.transport_service_type != 0) {
        ++counters_.rejected_bad_req;
        refuse(cm::rej::invalid_transport_type, {});
        return;
    }
    const ib::Gid our_gid = attrs.gid();
    if ((req.pkey & 0x7FFF) != (pkey_ & 0x7FFF) || req.primary.remote_gid != our_gid) {
        ++counters_.rejected_bad_req;
        refuse(cm::rej::invalid_gid, bytes(our_gid.data(), our_gid.size()));
        return;
    }
    // A REQ from the port that holds a passive connection from the same UD
    // QPN: the peer gave that connection up (it connects once per UD QP),
    // so it goes now rather than at the idle timeout. Matched on the
    // source LID too, so that no other port can end it by naming it.
    const cm::IpoibCmData data = cm::read_ipoib_data(req.private_data);
    const std::uint16_t source_lid = e.peer.lid;
    std::size_t from_source = 0;
    std::vector<Key> replaced;
    for (const auto& [key, conn] : conns_) {
        if (conn.active || source_lid == 0 || conn.source_lid != source_lid) continue;
        if (conn.peer.qpn == data.ud_qpn && conn.peer.gid == req.primary.local_gid)
            replaced.push_back(key);
        else
            ++from_source;
    }
    if (from_source >= config_.max_passive_per_peer) {
        ++counters_.rejected_peer_limit;
        refuse(cm::rej::no_qp, {});
        return;
    }
    for (Key old : replaced) {
        ++counters_.replaced_by_peer;
        if (Conn* c = find(old); c && c->cm_id) (void)cm_.disconnect(*c->cm_id, now);
        erase(old);
    }
    if (conns_.size() >= config_.max_connections || buffers_in_use_ + config_.ring > config_.receive_buffers) {
        ++counters_.rejected_no_room;
        refuse(cm::rej::no_qp, {});
        return;
    }
    const auto index = pkey_index();
    auto qp = index ? port_.create_rc_qp(*index)
                    : expected<std::unique_ptr<transport::RcQueuePair>, transport::Error>(
                          unexpected(transport::Error{transport::Errc::bad_pkey_index, "the P_Key is not in the port's table"}));
    if (!qp) {
        ++counters_.rejected_no_room;
        refuse(cm::rej::no_qp, {});
        return;
    }
    const Key k = next_key_++;
    Conn& c = conns_[k];
    c.active = false;
    c.qp = std::move(*qp);
    c.cm_id = e.id;
    by_cm_[e.id] = k;
    c.source_lid = source_lid;
    c.peer = HwAddress{.flags = 0, .qpn = data.ud_qpn, .gid = req.primary.local_gid};
    c.peer_lid = ib::is_unicast_lid(req.primary.local_lid) ? req.primary.local_lid : e.peer.lid;
    c.remote_qpn = req.local_qpn;
    c.peer_mtu = data.receive_size;
    c.path_mtu = clamp_mtu_code(req.path_mtu, attrs.active_mtu);
    c.our_psn = random_psn();
    c.last_used = now;
    buffers_in_use_ += config_.ring;
    for (std::size_t i = 0; i < config_.ring; ++i) {
        if (!c.qp->post_recv({.wr_id = c.next_wr++, .capacity = kConnectedReceiveSize})) break;
        ++c.posted;
    }
    transport::rc::RtrAttributes rtr;
    rtr.dest_qpn = req.local_qpn;
    rtr.pmtu = ib::mtu_bytes(static_cast<ib::Mtu>(c.path_mtu));
    rtr.rq_psn = c.our_psn;
    transport::rc::RtsAttributes rts;
    rts.sq_psn = req.starting_psn;
    rts.timeout = req.primary.local_ack_timeout;
    rts.retry_count = req.retry_count;
    rts.rnr_retry = req.rnr_retry_count;
    if (auto r = c.qp->connect(c.peer_lid, rtr, rts); !r) {
        ++counters_.rejected_no_room;
        erase(k);
        refuse(cm::rej::no_qp, {});
        return;
    }
    cm::AcceptParams a;
    a.local_qpn = c.qp->qpn();
    a.starting_psn = c.our_psn;
    a.rnr_retry_count = req.rnr_retry_count;
    cm::write_ipoib_data(a.private_data, {.ud_qpn = ud_qpn_, .receive_size = kConnectedReceiveSize});
    if (auto r = cm_.accept(e.id, a, now); !r) {
        erase(k);
        refuse(cm::rej::consumer_reject, {});  // not left in REQ_RCVD
        return;
    }
    c.state = ConnState::up;
    ++counters_.accepted;
}

void ConnectedLink::cm_event(const cm::Event& e, Clock::time_point now) {
    if (e.kind == cm::EventKind::req_received) {
        if (e.req) on_req(e, now);
        return;
    }
    auto it = by_cm_.find(e.id);
    if (it == by_cm_.end()) return;  // a connection already gone (closed, failed)
    const Key k = it->second;
    Conn& c = conns_.at(k);
    switch (e.kind) {
        case cm::EventKind::rep_received:
            if (c.active && c.state == ConnState::connecting && e.rep) on_rep(k, c, e, now);
            return;
        case cm::EventKind::established: return;  // passive: already at RTS
        case cm::EventKind::rejected: {
            ++counters_.rejected_by_peer;
            const HwAddress peer = c.peer;
            const bool gone = c.active && e.reason == cm::rej::invalid_service_id;
            tear_down(k, "rejected (reason " + std::to_string(e.reason) + ")", now, true);
            // Nobody listens on the ServiceID of its UD QPN: that QP is gone
            // (a restarted peer whose new address we missed).
            if (gone && peer_gone_) peer_gone_(peer);
            return;
        }
        case cm::EventKind::timed_out:
            ++counters_.timed_out;
            tear_down(k, "the CM timed out", now, true);
            return;
        case cm::EventKind::disconnect_requested:
            // Answered with a DREP already; an active connection's next frame
            // connects again at once (the peer only reaped an idle one).
            ++counters_.disconnected_by_peer;
            erase(k);
            return;
        case cm::EventKind::timewait_exit:
            // Still ours: the CM ended the connection by itself (a stale REQ
            // from the peer's QP makes it DREQ the old one), and the end of
            // TimeWait is all it tells us. The QP and its buffers go as at a
            // DREQ.
            ++counters_.ended_by_cm;
            erase(k);
            return;
        case cm::EventKind::req_received: return;
    }
}

// ---------------------------------------------------------------------------
// Completions and timers

std::size_t ConnectedLink::poll(const ReceiveCallback& on_receive, Clock::time_point now, std::size_t max) {
    std::size_t handled = 0;
    std::vector<std::pair<Key, std::string>> broken;
    std::vector<Key> keys;
    keys.reserve(conns_.size());
    for (const auto& [k, c] : conns_)
        if (c.qp) keys.push_back(k);
    for (Key k : keys) {
        if (handled >= max) break;
        Conn* c = find(k);
        if (!c || !c->qp) continue;
        for (transport::rc::Completion& wc : c->qp->poll()) {
            ++handled;
            c = find(k);  // the receive callback may send, which may add connections (never this one's removal)
            if (wc.receive) {
                if (c->posted) --c->posted;
                if (wc.status != transport::rc::Status::success) {
                    if (wc.status != transport::rc::Status::flushed) ++counters_.rx_errors;
                    continue;
                }
                ++counters_.rx_messages;
                c->last_used = now;
                const std::uint16_t slid = c->peer_lid;
                // Named as over UD (PacketSource: LID and UD QPN, TAP mode's
                // sender MAC), not by the QPN of the peer's RC QP.
                const std::uint32_t src_qp = c->peer.qpn;
                if (c->state == ConnState::up && c->qp->post_recv({.wr_id = c->next_wr++, .capacity = kConnectedReceiveSize}))
                    ++c->posted;
                on_receive(ReceivedDatagram{.payload = wc.data, .src_qp = src_qp, .slid = slid});
            } else {
                // In order: the oldest; a completion out of order (none
                // should be) is found by a scan.
                auto f = !c->in_flight.empty() && c->in_flight.front().first == wc.wr_id
                             ? c->in_flight.begin()
                             : std::find_if(c->in_flight.begin(), c->in_flight.end(),
                                            [&](const auto& s) { return s.first == wc.wr_id; });
                if (f != c->in_flight.end()) {
                    send_bytes_ -= f->second;
                    c->in_flight.erase(f);
                }
                c->send_progress = now;
                if (wc.status != transport::rc::Status::success && wc.status != transport::rc::Status::flushed) {
                    ++counters_.tx_errors;
                    broken.emplace_back(k, std::string("send: ") + transport::rc::to_string(wc.status));
                }
            }
        }
        c = find(k);
        if (c && c->qp && c->qp->state() == transport::rc::QpState::err &&
            std::none_of(broken.begin(), broken.end(), [&](const auto& b) { return b.first == k; }))
            broken.emplace_back(k, "the QP is in the error state");
    }
    for (const auto& [k, why] : broken) {
        Conn* c = find(k);
        if (!c || !c->qp) continue;
        ++counters_.rc_errors;
        if (c->cm_id) (void)cm_.disconnect(*c->cm_id, now);
        tear_down(k, why, now, true);
    }
    return handled;
}

void ConnectedLink::tick(Clock::time_point now) {
    std::vector<Key> expired, idle, stalled;
    for (const auto& [k, c] : conns_) {
        if (c.state == ConnState::failed) {
            if (now >= c.failed_until) expired.push_back(k);
        } else if (c.state == ConnState::up) {
            const auto limit = c.active ? config_.idle : 4 * config_.idle;
            if (c.in_flight.empty()) {
                if (now - c.last_used >= limit) idle.push_back(k);
            } else if (now - c.send_progress >= config_.idle) {
                stalled.push_back(k);
            }
        }
    }
    for (Key k : expired) erase(k);
    for (Key k : idle) {
        Conn* c = find(k);
        ++counters_.reaped_idle;
        if (c->cm_id) (void)cm_.disconnect(*c->cm_id, now);
        erase(k);
    }
    // SENDs outstanding and none completed for the idle time: the peer
    // RNR-NAKs them forever (our RNR retry 7; the RC ends anything else
    // within its retries). Without this the connection would hold its
    // send_depth frames, drop every later one and keep small ones off UD.
    for (Key k : stalled) {
        Conn* c = find(k);
        ++counters_.send_stalled;
        if (c->cm_id) (void)cm_.disconnect(*c->cm_id, now);
        tear_down(k,
                  "no SEND completed for " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - c->send_progress).count()) +
                      " s (" + std::to_string(c->in_flight.size()) + " outstanding)",
                  now, true);
    }
}

std::optional<Clock::time_point> ConnectedLink::next_deadline() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) {
        if (!next || t < *next) next = t;
    };
    for (const auto& [k, c] : conns_) {
        if (c.state == ConnState::failed) consider(c.failed_until);
        else if (c.state == ConnState::up && c.in_flight.empty())
            consider(c.last_used + (c.active ? config_.idle : 4 * config_.idle));
        else if (c.state == ConnState::up) consider(c.send_progress + config_.idle);
    }
    return next;
}

std::optional<ConnectionView> ConnectedLink::connection_to(const HwAddress& peer) const {
    auto it = active_.find({peer.gid, peer.qpn});
    if (it == active_.end()) return std::nullopt;
    const Conn& c = conns_.at(it->second);
    return ConnectionView{.state = c.state,
                          .active = true,
                          .remote_qpn = c.remote_qpn,
                          .local_qpn = c.qp ? c.qp->qpn() : 0,
                          .peer_mtu = c.peer_mtu,
                          .queued = c.queue.size()};
}

void ConnectedLink::visit_counters(CounterSink& out) const {
    std::size_t active = 0, passive = 0;
    for (const auto& [k, c] : conns_)
        if (c.state == ConnState::up) ++(c.active ? active : passive);
    out.counter("connections_active", active);
    out.counter("connections_passive", passive);
    out.counter("receive_buffers_in_use", buffers_in_use_);
    out.counter("queued_bytes", queued_bytes_);
    out.counter("send_bytes", send_bytes_);
    visit(counters_, out);
    std::map<std::string, std::uint64_t> rc = closed_rc_;
    SumSink sum(rc);
    for (const auto& [k, c] : conns_)
        if (c.qp) visit(c.qp->counters(), sum);
    for (const auto& [name, value] : rc) out.counter(name, value);  // rc_*, as the RC QP names them
}

}  // namespace ipoibd::ipoib
