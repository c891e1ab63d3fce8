#include "cm/cm_engine.h"

#include <algorithm>
#include <random>

#include "common/random.h"

namespace ipoibd::cm {

Clock::duration cm_timeout(std::uint8_t exponent) {
    return std::chrono::nanoseconds(std::int64_t{4096} << std::min<std::uint8_t>(exponent, 31));
}

const char* to_string(State s) {
    switch (s) {
        case State::req_sent: return "REQ_SENT";
        case State::req_rcvd: return "REQ_RCVD";
        case State::rep_sent: return "REP_SENT";
        case State::rep_rcvd: return "REP_RCVD";
        case State::established: return "ESTABLISHED";
        case State::dreq_sent: return "DREQ_SENT";
        case State::timewait: return "TIMEWAIT";
    }
    return "?";
}

const char* to_string(EventKind k) {
    switch (k) {
        case EventKind::req_received: return "req_received";
        case EventKind::rep_received: return "rep_received";
        case EventKind::established: return "established";
        case EventKind::rejected: return "rejected";
        case EventKind::timed_out: return "timed_out";
        case EventKind::disconnect_requested: return "disconnect_requested";
        case EventKind::timewait_exit: return "timewait_exit";
    }
    return "?";
}

void visit(const CmCounters& c, CounterSink& out) {
    static constexpr const char* names[] = {"req", "mra", "rej", "rep", "rtu", "dreq", "drep", "lap", "apr"};
    for (std::size_t i = 0; i < 9; ++i) {
        out.counter(std::string("cm_") + names[i] + "_sent", c.sent[i]);
        out.counter(std::string("cm_") + names[i] + "_received", c.received[i]);
    }
    for (std::size_t i = 0; i < kDecodeErrorCount; ++i)
        out.counter(std::string("cm_malformed_") + to_string(static_cast<DecodeError>(i)), c.malformed[i]);
    out.counter("cm_retransmitted", c.retransmitted);
    out.counter("cm_timeouts", c.timeouts);
    out.counter("cm_unanswered", c.unanswered);
    out.counter("cm_duplicate_reqs", c.duplicate_reqs);
    out.counter("cm_duplicate_mras", c.duplicate_mras);
    out.counter("cm_stale_reqs", c.stale_reqs);
    out.counter("cm_stale_reqs_elsewhere", c.stale_reqs_elsewhere);
    out.counter("cm_unknown_service", c.unknown_service);
    out.counter("cm_no_room", c.no_room);
    out.counter("cm_port_no_room", c.port_no_room);
    out.counter("cm_unmatched", c.unmatched);
    out.counter("cm_dreq_qpn_mismatch", c.dreq_qpn_mismatch);
    out.counter("cm_output_dropped", c.output_dropped);
    out.counter("cm_events_dropped", c.events_dropped);
    out.counter("cm_established", c.established);
}

CmEngine::CmEngine(Config config, std::uint64_t seed) : config_(config) {
    std::mt19937_64 rng(seed);
    tid_high_ = static_cast<std::uint32_t>(rng());
}

void CmEngine::listen(std::uint64_t service_id) { listening_[service_id] = true; }
void CmEngine::unlisten(std::uint64_t service_id) { listening_.erase(service_id); }

// Unpredictable: a REJ of our REQ is matched by our comm ID alone, every
// other message by both, so IDs in a sequence would let a port that learnt
// one (its own connection's) name its neighbours and end them. Not from
// the seed, which the owner may derive from little. An ID a connection
// here holds, TimeWait included, is drawn again: one comes back only after
// its TimeWait, and then by a chance of 1 in 2^32.
ConnectionId CmEngine::new_id() {
    for (;;) {
        const ConnectionId id = config_.comm_id_source ? config_.comm_id_source() : random_u32();
        if (id != 0 && !conns_.contains(id)) return id;
    }
}

CmEngine::Conn* CmEngine::find(ConnectionId id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : &it->second;
}

CmEngine::Conn* CmEngine::by_remote(std::uint32_t remote_id, std::uint64_t remote_ca_guid) {
    for (auto& [id, c] : conns_)
        if (!c.active && c.remote_id == remote_id && c.remote_ca_guid == remote_ca_guid) return &c;
    return nullptr;
}

// Any connection whose peer named itself so (in its REQ or REP).
CmEngine::Conn* CmEngine::by_peer(std::uint32_t remote_id, std::uint64_t remote_ca_guid) {
    for (auto& [id, c] : conns_)
        if (c.remote_known && c.remote_id == remote_id && c.remote_ca_guid == remote_ca_guid) return &c;
    return nullptr;
}

bool CmEngine::same_port(const Address& a, const Address& b) {
    return a.lid == b.lid && (!a.gid || !b.gid || *a.gid == *b.gid);
}

// A wait a peer's REQ sets, within our bounds (Config::min_peer_timeout,
// max_peer_timeout).
Clock::duration CmEngine::peer_timeout(std::uint8_t exponent) const { return cm_timeout(peer_exponent(exponent)); }

std::uint8_t CmEngine::peer_exponent(std::uint8_t exponent) const {
    const std::uint8_t low = config_.min_peer_timeout;
    return std::clamp(exponent, low, std::max(low, config_.max_peer_timeout));
}

bool CmEngine::push(Outgoing o) {
    if (output_.size() >= config_.max_output) {
        ++counters_.output_dropped;
        return false;
    }
    output_.push_back(std::move(o));
    return true;
}

void CmEngine::send(const Address& to, const Message& m, std::uint64_t tid) {
    if (push({to, encode(m, tid)})) ++counters_.sent[m.index()];
}

void CmEngine::event(Event e) {
    if (events_.size() >= config_.max_events) {
        ++counters_.events_dropped;
        return;
    }
    events_.push_back(std::move(e));
}

void CmEngine::arm(Conn& c, Clock::duration after, unsigned retries, Clock::time_point now) {
    c.timer = true;
    c.deadline = now + after;
    c.retry_after = after;
    c.retries_left = retries;
}

// How long a sender waits for the answer to a message it sends 1 + `retries`
// times, each after 2 x PacketLifeTime + `response`: after this it has given
// up, and an answer we never gave is no use to it.
Clock::duration CmEngine::answer_wait(Clock::duration response, unsigned retries, std::uint8_t packet_life_time) const {
    const std::uint8_t life = std::max(packet_life_time, config_.packet_life_time);
    return static_cast<int>(retries + 1) * (2 * cm_timeout(life) + response);
}

void CmEngine::enter_timewait(Conn& c, Clock::time_point now) {
    c.state = State::timewait;
    c.last.reset();
    arm(c, cm_timeout(static_cast<std::uint8_t>(config_.packet_life_time + 1)), 0, now);
}

void CmEngine::send_rej(const Address& to, std::uint32_t local, std::uint32_t remote, MessageKind what,
                        std::uint16_t reason, std::uint64_t tid, bytes ari) {
    Rej r{.local_comm_id = local, .remote_comm_id = remote, .message_rejected = what, .reason = reason};
    if (reason == rej::timeout) {  // ARI: our CA GUID
        r.reject_info_length = 8;
        store_be64(r.ari.data(), config_.local_ca_guid);
    } else if (!ari.empty()) {
        const std::size_t n = std::min(ari.size(), r.ari.size());
        std::copy_n(ari.begin(), n, r.ari.begin());
        r.reject_info_length = static_cast<std::uint8_t>(n);
    }
    send(to, r, tid);
}

// ---------------------------------------------------------------------------
// The owner's calls

expected<ConnectionId, std::string> CmEngine::connect(const ConnectParams& p, Clock::time_point now) {
    if (!ib::is_unicast_lid(p.peer.lid)) return unexpected("LID " + std::to_string(p.peer.lid) + " is not unicast");
    if (p.path_mtu < 1 || p.path_mtu > 5) return unexpected(std::string("path MTU code is 1..5"));
    if (p.local_qpn > 0xFFFFFF || p.starting_psn > 0xFFFFFF) return unexpected(std::string("QPN and PSN are 24 bits"));
    if (p.retry_count > 7 || p.rnr_retry_count > 7) return unexpected(std::string("retry counts are 0..7"));
    if (conns_.size() >= config_.max_connections)
        return unexpected("at most " + std::to_string(config_.max_connections) + " connections");
    const ConnectionId id = new_id();
    Req r;
    r.local_comm_id = id;
    r.service_id = p.service_id;
    r.local_ca_guid = config_.local_ca_guid;
    r.local_qpn = p.local_qpn;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.remote_cm_response_timeout = config_.cm_response_timeout;
    r.starting_psn = p.starting_psn;
    r.local_cm_response_timeout = config_.cm_response_timeout;
    r.retry_count = p.retry_count;
    r.pkey = p.pkey;
    r.path_mtu = p.path_mtu;
    r.rnr_retry_count = p.rnr_retry_count;
    r.max_cm_retries = config_.max_cm_retries;
    r.srq = p.srq;
    r.primary = p.primary;
    if (r.primary.local_ack_timeout == 0) r.primary.local_ack_timeout = config_.local_ack_timeout;
    r.private_data = p.private_data;
    Conn c;
    c.id = id;
    c.active = true;
    c.state = State::req_sent;
    c.peer = p.peer;
    c.source = p.peer;
    c.local_qpn = p.local_qpn;
    c.req_tid = std::uint64_t{tid_high_} << 32 | id;
    send(p.peer, r, c.req_tid);
    c.last = Outgoing{p.peer, encode(r, c.req_tid)};
    arm(c, 2 * cm_timeout(config_.packet_life_time) + cm_timeout(config_.cm_response_timeout), config_.max_cm_retries, now);
    conns_.emplace(id, std::move(c));
    return id;
}

expected<void, std::string> CmEngine::accept(ConnectionId id, const AcceptParams& p, Clock::time_point now) {
    Conn* c = find(id);
    if (!c || c->state != State::req_rcvd) return unexpected(std::string("no connection waiting for an answer"));
    if (p.local_qpn > 0xFFFFFF || p.starting_psn > 0xFFFFFF) return unexpected(std::string("QPN and PSN are 24 bits"));
    Rep r{.local_comm_id = id, .remote_comm_id = c->remote_id, .local_qpn = p.local_qpn, .starting_psn = p.starting_psn,
          .responder_resources = p.responder_resources, .initiator_depth = p.initiator_depth,
          .target_ack_delay = p.target_ack_delay, .rnr_retry_count = p.rnr_retry_count, .srq = p.srq,
          .local_ca_guid = config_.local_ca_guid, .private_data = p.private_data};
    c->local_qpn = p.local_qpn;
    send(c->peer, r, c->req_tid);
    c->last = Outgoing{c->peer, encode(r, c->req_tid)};
    c->state = State::rep_sent;
    arm(*c, c->peer_response, c->peer_retries, now);
    return {};
}

expected<void, std::string> CmEngine::reject(ConnectionId id, std::uint16_t reason, Clock::time_point, bytes ari) {
    Conn* c = find(id);
    if (!c || (c->state != State::req_rcvd && c->state != State::rep_rcvd))
        return unexpected(std::string("no REQ or REP waiting for an answer"));
    send_rej(c->peer, id, c->remote_id, c->state == State::req_rcvd ? MessageKind::req : MessageKind::rep, reason,
             c->req_tid, ari);
    conns_.erase(id);
    return {};
}

expected<void, std::string> CmEngine::establish(ConnectionId id, Clock::time_point) {
    Conn* c = find(id);
    if (!c || c->state != State::rep_rcvd) return unexpected(std::string("no REP waiting for an RTU"));
    send(c->peer, Rtu{.local_comm_id = id, .remote_comm_id = c->remote_id}, c->req_tid);
    c->state = State::established;
    c->timer = false;
    ++counters_.established;
    return {};
}

expected<void, std::string> CmEngine::disconnect(ConnectionId id, Clock::time_point now) {
    Conn* c = find(id);
    if (!c) return unexpected(std::string("no such connection"));
    switch (c->state) {
        case State::established: {
            const Dreq d{.local_comm_id = id, .remote_comm_id = c->remote_id, .remote_qpn = c->remote_qpn};
            c->dreq_tid = std::uint64_t{tid_high_ ^ 1u} << 32 | id;
            send(c->peer, d, c->dreq_tid);
            c->last = Outgoing{c->peer, encode(d, c->dreq_tid)};
            c->state = State::dreq_sent;
            arm(*c, 2 * cm_timeout(config_.packet_life_time) + cm_timeout(config_.cm_response_timeout),
                config_.max_cm_retries, now);
            return {};
        }
        case State::req_sent:  // given up: the peer learns it as a timeout (Linux's destroy in REQ_SENT)
            send_rej(c->peer, id, c->remote_id, MessageKind::req, rej::timeout, c->req_tid);
            conns_.erase(id);
            return {};
        case State::req_rcvd:
        case State::rep_rcvd:
            send_rej(c->peer, id, c->remote_id, c->state == State::req_rcvd ? MessageKind::req : MessageKind::rep,
                     rej::consumer_reject, c->req_tid);
            conns_.erase(id);
            return {};
        case State::rep_sent:
            send_rej(c->peer, id, c->remote_id, MessageKind::rep, rej::consumer_reject, c->req_tid);
            enter_timewait(*c, now);
            return {};
        case State::dreq_sent:
        case State::timewait: return {};
    }
    return {};
}

// ---------------------------------------------------------------------------
// Receiving

void CmEngine::receive(bytes mad, const Address& from, Clock::time_point now) {
    const auto d = decode(mad);
    if (!d) {
        ++counters_.malformed[static_cast<std::size_t>(d.error())];
        return;
    }
    ++counters_.received[d->message.index()];
    std::visit(
        [&](const auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, Req>) on_req(m, d->transaction_id, from, now);
            else if constexpr (std::is_same_v<T, Rep>) on_rep(m, d->transaction_id, from, now);
            else if constexpr (std::is_same_v<T, Rtu>) on_rtu(m);
            else if constexpr (std::is_same_v<T, Rej>) on_rej(m, now);
            else if constexpr (std::is_same_v<T, Mra>) on_mra(m, now);
            else if constexpr (std::is_same_v<T, Dreq>) on_dreq(m, d->transaction_id, from, now);
            else if constexpr (std::is_same_v<T, Drep>) on_drep(m, now);
            else if constexpr (std::is_same_v<T, Lap>) on_lap(m, d->transaction_id, from);
            else ++counters_.unmatched;  // an APR: we send no LAPs
        },
        d->message);
}

void CmEngine::on_req(const Req& m, std::uint64_t tid, const Address& from, Clock::time_point now) {
    // A retransmitted REQ: the REP again once there is one.
    if (Conn* dup = by_remote(m.local_comm_id, m.local_ca_guid)) {
        ++counters_.duplicate_reqs;
        if (dup->state == State::rep_sent && dup->last && push(*dup->last)) ++counters_.sent[Message(Rep{}).index()];
        return;
    }
    // A REQ from a QP that still has a live connection here: stale.
    for (auto& [id, c] : conns_) {
        if (c.remote_ca_guid == m.local_ca_guid && c.remote_qpn == m.local_qpn &&
            (c.state == State::established || c.state == State::rep_sent || c.state == State::req_rcvd)) {
            send_rej(from, 0, m.local_comm_id, MessageKind::req, rej::stale_connection, tid);
            // The CA GUID and QPN are the sender's word: only the port the
            // connection's peer is at ends it so, or any port that reaches
            // our QP1 (whatever its partition) could end anyone's
            // connection by naming its QP. A peer whose LID changed waits
            // for the old one to go (idle, RC errors).
            if (!same_port(c.source, from)) {
                ++counters_.stale_reqs_elsewhere;
                return;
            }
            ++counters_.stale_reqs;
            if (c.state == State::established) {
                const Dreq d{.local_comm_id = c.id, .remote_comm_id = c.remote_id, .remote_qpn = c.remote_qpn};
                c.dreq_tid = std::uint64_t{tid_high_ ^ 1u} << 32 | c.id;
                send(c.peer, d, c.dreq_tid);
                c.last = Outgoing{c.peer, encode(d, c.dreq_tid)};
                c.state = State::dreq_sent;
                arm(c, 2 * cm_timeout(config_.packet_life_time) + cm_timeout(config_.cm_response_timeout),
                    config_.max_cm_retries, now);
            }
            return;
        }
    }
    if (!listening_.contains(m.service_id)) {
        ++counters_.unknown_service;
        send_rej(from, 0, m.local_comm_id, MessageKind::req, rej::invalid_service_id, tid);
        return;
    }
    if (m.transport_service_type != 0) {
        send_rej(from, 0, m.local_comm_id, MessageKind::req, rej::invalid_transport_type, tid);
        return;
    }
    const auto from_port = std::count_if(conns_.begin(), conns_.end(),
                                         [&](const auto& kv) { return !kv.second.active && same_port(kv.second.source, from); });
    if (static_cast<std::size_t>(from_port) >= config_.max_per_port) {
        ++counters_.port_no_room;
        send_rej(from, 0, m.local_comm_id, MessageKind::req, rej::no_resources, tid);
        return;
    }
    if (conns_.size() >= config_.max_connections) {
        ++counters_.no_room;
        send_rej(from, 0, m.local_comm_id, MessageKind::req, rej::no_resources, tid);
        return;
    }
    Conn c;
    c.id = new_id();
    c.state = State::req_rcvd;
    // Replies go to the REQ's primary local port (the sender), as ib_cm's.
    c.peer = from;
    c.source = from;
    if (ib::is_unicast_lid(m.primary.local_lid)) c.peer.lid = m.primary.local_lid;
    c.remote_id = m.local_comm_id;
    c.remote_ca_guid = m.local_ca_guid;
    c.remote_known = true;
    c.remote_qpn = m.local_qpn;
    c.req_tid = tid;
    c.peer_response = peer_timeout(m.local_cm_response_timeout);
    c.peer_retries = m.max_cm_retries;
    // Until accept() or reject(); no retransmission (nothing sent yet).
    // The sender waits 2 x its PacketLifeTime + the response timeout per
    // send; a REQ carries its path's Local ACK Timeout, one more than that
    // PacketLifeTime as ib_cm sets it (and reads it back: cm_req_handler).
    const std::uint8_t sender_life =
        m.primary.local_ack_timeout > 0 ? peer_exponent(static_cast<std::uint8_t>(m.primary.local_ack_timeout - 1)) : 0;
    arm(c, answer_wait(peer_timeout(m.remote_cm_response_timeout), m.max_cm_retries, sender_life), 0, now);
    const ConnectionId id = c.id;
    const Address peer = c.peer;
    conns_.emplace(id, std::move(c));
    event({.kind = EventKind::req_received, .id = id, .peer = peer, .req = m});
}

void CmEngine::on_rep(const Rep& m, std::uint64_t, const Address&, Clock::time_point now) {
    Conn* c = find(m.remote_comm_id);
    if (!c || !c->active) {
        ++counters_.unmatched;
        return;
    }
    if (c->state == State::req_sent) {
        c->remote_id = m.local_comm_id;
        c->remote_qpn = m.local_qpn;
        c->remote_ca_guid = m.local_ca_guid;
        c->remote_known = true;
        c->state = State::rep_rcvd;
        c->last.reset();
        // Until establish() or reject(): the peer resends its REP after the
        // REQ's Local CM Response Timeout (ours), max CM retries times.
        arm(*c, answer_wait(cm_timeout(config_.cm_response_timeout), config_.max_cm_retries), 0, now);
        event({.kind = EventKind::rep_received, .id = c->id, .peer = c->peer, .rep = m});
        return;
    }
    if (c->state == State::established && c->remote_id == m.local_comm_id) {
        // Our RTU was lost: again.
        send(c->peer, Rtu{.local_comm_id = c->id, .remote_comm_id = c->remote_id}, c->req_tid);
        return;
    }
    ++counters_.unmatched;  // a duplicate before establish(), or the wrong state
}

void CmEngine::on_rtu(const Rtu& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c || c->active || c->remote_id != m.local_comm_id || c->state != State::rep_sent) {
        ++counters_.unmatched;
        return;
    }
    c->state = State::established;
    c->timer = false;
    c->last.reset();
    ++counters_.established;
    event({.kind = EventKind::established, .id = c->id, .peer = c->peer});
}

// Whether an MRA or REJ naming `c` by our comm ID comes from its peer: its
// own comm ID must be the one the peer gave us (REQ or REP), once we have
// it; before that (a REJ or MRA of our REQ) ours alone, as ib_cm's
// cm_acquire_id(ours, 0). Not the sender's LID: with LMC or a GRH route it
// need not be the one we address, and ib_cm does not check it either.
bool CmEngine::from_peer(const Conn& c, std::uint32_t sender_comm_id) {
    return !c.remote_known || c.remote_id == sender_comm_id;
}

// The connection a REJ ends, as ib_cm's cm_acquire_rejected_id. A REJ
// "timeout" comes from a side that gave up waiting, perhaps before it learnt
// our comm ID (a REQ whose REP never reached it: Remote Comm ID 0): matched
// by its sender's comm ID and the CA GUID in its ARI (IBA 12.6.7), failing
// that as any REJ: by our comm ID and the sender's.
CmEngine::Conn* CmEngine::rejected(const Rej& m) {
    if (m.reason == rej::timeout)
        if (Conn* c = by_peer(m.local_comm_id, load_be64(m.ari.data()))) return c;
    Conn* c = find(m.remote_comm_id);
    return c && from_peer(*c, m.local_comm_id) ? c : nullptr;
}

void CmEngine::on_rej(const Rej& m, Clock::time_point now) {
    Conn* c = rejected(m);
    if (!c || c->state == State::timewait) {
        ++counters_.unmatched;
        return;
    }
    event({.kind = EventKind::rejected, .id = c->id, .peer = c->peer, .reason = m.reason});
    if (c->state == State::rep_sent || c->state == State::established || c->state == State::dreq_sent ||
        m.reason == rej::stale_connection) {
        enter_timewait(*c, now);
    } else {
        conns_.erase(c->id);
    }
}

void CmEngine::on_mra(const Mra& m, Clock::time_point now) {
    Conn* c = find(m.remote_comm_id);
    if (c && !from_peer(*c, m.local_comm_id)) c = nullptr;
    const bool for_req = c && c->state == State::req_sent && m.message_mraed == MessageKind::req;
    const bool for_rep = c && c->state == State::rep_sent && m.message_mraed == MessageKind::rep;
    if (!for_req && !for_rep) {
        ++counters_.unmatched;
        return;
    }
    // The peer needs longer: wait its service timeout on top of the path's,
    // once, and no longer than Linux asks: an MRA before each of the
    // REQ's 16 sends, each asking 31 (~2.4 h), would hold it (and the
    // connection's waiting frames and slot) some 39 h.
    if (c->mra_received) {
        ++counters_.duplicate_mras;
        return;
    }
    c->mra_received = true;
    const auto service = std::min(m.service_timeout, config_.max_service_timeout);
    c->deadline = now + cm_timeout(service) + 2 * cm_timeout(config_.packet_life_time);
}

void CmEngine::on_dreq(const Dreq& m, std::uint64_t tid, const Address& from, Clock::time_point now) {
    Conn* c = find(m.remote_comm_id);
    if (!c || c->remote_id != m.local_comm_id) {
        // Nothing of ours: answer anyway, so the peer can finish.
        ++counters_.unmatched;
        send(from, Drep{.local_comm_id = m.remote_comm_id, .remote_comm_id = m.local_comm_id}, tid);
        return;
    }
    if (m.remote_qpn != c->local_qpn) {
        ++counters_.dreq_qpn_mismatch;
        return;
    }
    send(c->peer, Drep{.local_comm_id = c->id, .remote_comm_id = c->remote_id}, tid);
    if (c->state == State::timewait) return;  // our DREP was lost: sent again
    if (c->state == State::req_sent || c->state == State::req_rcvd || c->state == State::rep_rcvd) {
        ++counters_.unmatched;  // not connected yet: the DREP answers, nothing else changes
        return;
    }
    event({.kind = EventKind::disconnect_requested, .id = c->id, .peer = c->peer});
    enter_timewait(*c, now);
}

void CmEngine::on_drep(const Drep& m, Clock::time_point now) {
    Conn* c = find(m.remote_comm_id);
    if (!c || c->remote_id != m.local_comm_id || c->state != State::dreq_sent) {
        ++counters_.unmatched;
        return;
    }
    enter_timewait(*c, now);
}

void CmEngine::on_lap(const Lap& m, std::uint64_t tid, const Address& from) {
    const Conn* c = find(m.remote_comm_id);
    send(from, Apr{.local_comm_id = m.remote_comm_id, .remote_comm_id = m.local_comm_id,
                   .ap_status = c ? apr_status::unsupported : apr_status::invalid_comm_id},
         tid);
}

// ---------------------------------------------------------------------------
// Time

void CmEngine::tick(Clock::time_point now) {
    std::vector<ConnectionId> gone;
    for (auto& [id, c] : conns_) {
        if (!c.timer || now < c.deadline) continue;
        if (c.state == State::timewait) {
            event({.kind = EventKind::timewait_exit, .id = id, .peer = c.peer});
            gone.push_back(id);
            continue;
        }
        if (c.state == State::req_rcvd || c.state == State::rep_rcvd) {
            // The owner never answered and the peer has given up waiting.
            ++counters_.unanswered;
            event({.kind = EventKind::timed_out, .id = id, .peer = c.peer});
            send_rej(c.peer, id, c.remote_id, c.state == State::req_rcvd ? MessageKind::req : MessageKind::rep,
                     rej::timeout, c.req_tid);
            gone.push_back(id);
            continue;
        }
        if (c.retries_left > 0 && c.last) {
            --c.retries_left;
            if (push(*c.last)) ++counters_.retransmitted;
            c.deadline = now + c.retry_after;
            continue;
        }
        ++counters_.timeouts;
        event({.kind = EventKind::timed_out, .id = id, .peer = c.peer});
        if (c.state == State::req_sent || c.state == State::rep_sent) {
            send_rej(c.peer, id, c.remote_id, c.state == State::req_sent ? MessageKind::req : MessageKind::rep,
                     rej::timeout, c.req_tid);
            if (c.state == State::req_sent) {
                gone.push_back(id);
            } else {
                enter_timewait(c, now);
            }
        } else {
            enter_timewait(c, now);  // DREQ_SENT: no DREP came
        }
    }
    for (ConnectionId id : gone) conns_.erase(id);
}

std::optional<Clock::time_point> CmEngine::next_deadline() const {
    std::optional<Clock::time_point> next;
    for (const auto& [id, c] : conns_)
        if (c.timer && (!next || c.deadline < *next)) next = c.deadline;
    return next;
}

std::vector<Outgoing> CmEngine::take_output() {
    std::vector<Outgoing> out;
    out.swap(output_);
    return out;
}

std::vector<Event> CmEngine::take_events() {
    std::vector<Event> out;
    out.swap(events_);
    return out;
}

std::optional<State> CmEngine::state(ConnectionId id) const {
    const auto it = conns_.find(id);
    if (it == conns_.end()) return std::nullopt;
    return it->second.state;
}

}  // namespace ipoibd::cm
