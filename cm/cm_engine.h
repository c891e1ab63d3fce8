// The connection manager (IBA vol. 1 ch. 12), sans-I/O: the connections of
// one port, their states, timers and the CM MADs they exchange. The owner
// moves MADs (receive(), take_output(): to QP1 of an LID, Q_Key
// 0x80010000), runs time (tick() by next_deadline()) and acts on events
// (take_events()); it sets its QPs up itself (INIT/RTR/RTS) from what the
// events carry. Issue 21's IPoIB-CM sits on it.
//
// Active side:  connect() sends a REQ (REQ_SENT); a REP gives rep_received
//               (REP_RCVD); the owner brings its QP to RTS and calls
//               establish(), which sends the RTU (ESTABLISHED).
// Passive side: a REQ for a ServiceID listen() holds gives req_received
//               (REQ_RCVD); accept() sends the REP (REP_SENT), reject() a
//               REJ; the RTU gives established (ESTABLISHED).
// Both:         disconnect() sends a DREQ (DREQ_SENT); a DREQ gives
//               disconnect_requested and is answered with a DREP at once;
//               either way TIMEWAIT follows, then timewait_exit and the
//               connection is gone.
// Local comm IDs are unpredictable (32 bits from getrandom(2) each, never
// 0, none a connection here has, TimeWait included): messages are matched
// by comm IDs, so nobody may name a connection whose IDs it has not seen
// (ib_cm's, an allocator index XOR one random, give each other away).
// As Linux's ib_cm (../shared/reference/ipoib-cm.md sec. 3):
//  - REQ and DREQ carry TID (a per-engine random high half | local comm
//    ID); REP, REJ, MRA and RTU reuse the REQ's, DREP the DREQ's; messages
//    are matched by communication IDs, not TIDs;
//  - a REQ is resent after 2 x PacketLifeTime + the remote CM response
//    timeout, max CM retries times, then timeout (and a REJ "timeout" with
//    our CA GUID as ARI); a REP after the REQ's local CM response timeout
//    (bounded: Config::min_peer_timeout, max_peer_timeout), as many times; a DREQ after 2 x PacketLifeTime; the first MRA for a
//    REQ or REP stretches the wait by its service timeout (at most
//    Config::max_service_timeout), later ones are ignored;
//  - a duplicate REQ (same local comm ID and CA GUID) is answered with the
//    REP again once there is one, else dropped; a REQ from a (CA GUID,
//    QPN) that has a live connection is stale: REJ 10 to it and a DREQ on
//    the old one (only when it comes from the old one's port: the CA GUID
//    and QPN are the sender's word); a ServiceID nobody listens on: REJ 8;
//    no room: REJ 3;
//  - a REJ or MRA is matched by both comm IDs once the peer's is known (a
//    REJ or MRA of our REQ before the REP: by ours alone); a REJ "timeout"
//    by its sender's comm ID and the CA GUID in its ARI (the sender may have
//    given up before it learnt ours: a REQ whose REP never reached it names
//    Remote Comm ID 0);
//  - a REQ or REP the owner leaves unanswered (its event dropped, or the
//    owner gone quiet) is rejected with a REJ "timeout" and freed once its
//    sender has given up waiting: all its sends, each after 2 x
//    PacketLifeTime (ours, or a REQ's sender's, its Local ACK Timeout - 1,
//    whichever is longer) + the response timeout it allows us (a REQ's
//    Remote CM Response Timeout within the Config bounds; for a REP, ours); ib_cm
//    waits for its consumer for ever;
//  - a duplicate REP in ESTABLISHED gets the RTU again; a DREQ whose
//    remote QPN is not the connection's local QPN is dropped; a DREQ for no
//    connection still gets a DREP; a LAP gets an APR "unsupported" (no
//    path migration here).
// Everything is bounded: connections (max_connections, TIMEWAIT included;
// max_per_port of them from one port's REQs),
// output and events (drained by the owner every turn; a full queue drops
// and counts). Every refusal is counted by reason.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cm/cm_mad.h"
#include "common/counters.h"

namespace ipoibd::cm {

using Clock = std::chrono::steady_clock;

// A 5-bit CM/IBA timeout exponent as a duration: 4.096 us x 2^t.
Clock::duration cm_timeout(std::uint8_t exponent);

// Where a CM MAD goes or came from: QP1 of this LID (GRH when `gid`).
struct Address {
    std::uint16_t lid = 0;
    std::optional<ib::Gid> gid;
    bool operator==(const Address&) const = default;
};

struct Outgoing {
    Address to;
    std::array<std::uint8_t, ib::kMadSize> mad{};
};

enum class State : std::uint8_t {
    req_sent, req_rcvd, rep_sent, rep_rcvd, established, dreq_sent, timewait,
};
const char* to_string(State s);

using ConnectionId = std::uint32_t;  // our local communication ID

enum class EventKind : std::uint8_t {
    req_received,          // passive: accept() or reject()
    rep_received,          // active: bring the QP to RTS, then establish()
    established,           // passive: the RTU came
    rejected,              // a REJ: `reason`; the connection is gone (or in TIMEWAIT)
    timed_out,             // REQ, REP or DREQ retries ran out, or a REQ or REP went unanswered: gone
    disconnect_requested,  // the peer's DREQ (answered): take the QP down
    timewait_exit,         // gone for good; its IDs may be reused
};
const char* to_string(EventKind k);

struct Event {
    EventKind kind = EventKind::req_received;
    ConnectionId id = 0;
    Address peer;
    std::optional<Req> req;  // req_received
    std::optional<Rep> rep;  // rep_received
    std::uint16_t reason = 0;  // rejected
    // rep_received from a CM that chose what our REQ carried itself
    // (librdmacm: the Starting PSN, our receive PSN, and the path MTU code).
    std::optional<std::uint32_t> local_psn;
    std::optional<std::uint8_t> path_mtu;
};

// What connect() puts in the REQ beyond what the engine fills (comm ID,
// CA GUID, CM timeouts and retries from the Config).
struct ConnectParams {
    Address peer;
    std::uint64_t service_id = 0;
    std::uint32_t local_qpn = 0;
    std::uint32_t starting_psn = 0;   // our receive PSN
    std::uint16_t pkey = 0xFFFF;
    std::uint8_t path_mtu = 4;        // IBA code
    std::uint8_t retry_count = 7;
    std::uint8_t rnr_retry_count = 7;
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    bool srq = false;
    Path primary;
    std::array<std::uint8_t, 92> private_data{};
};

// What accept() puts in the REP.
struct AcceptParams {
    std::uint32_t local_qpn = 0;
    std::uint32_t starting_psn = 0;   // our receive PSN
    std::uint8_t rnr_retry_count = 7;
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    std::uint8_t target_ack_delay = 0;
    bool srq = false;
    std::array<std::uint8_t, 196> private_data{};
};

struct CmCounters {
    std::uint64_t sent[9]{};      // by message (Message index: REQ MRA REJ REP RTU DREQ DREP LAP APR)
    std::uint64_t received[9]{};
    std::uint64_t malformed[kDecodeErrorCount]{};
    std::uint64_t retransmitted = 0;
    std::uint64_t timeouts = 0;
    std::uint64_t unanswered = 0;          // REQs and REPs the owner never answered while the peer waited: REJ 4, gone
    std::uint64_t duplicate_reqs = 0;
    std::uint64_t duplicate_mras = 0;  // MRAs after the first for a REQ or REP: ignored
    std::uint64_t stale_reqs = 0;
    std::uint64_t stale_reqs_elsewhere = 0;  // stale REQs from another port than the connection's peer: REJ 10, the connection kept
    std::uint64_t unknown_service = 0;     // REQs rejected with 8
    std::uint64_t no_room = 0;             // REQs rejected with 3
    std::uint64_t port_no_room = 0;        // REQs rejected with 3: their port holds max_per_port connections
    std::uint64_t unmatched = 0;           // messages for no connection, or in the wrong state
    std::uint64_t dreq_qpn_mismatch = 0;
    std::uint64_t output_dropped = 0;
    std::uint64_t events_dropped = 0;
    std::uint64_t established = 0;
};
void visit(const CmCounters& c, CounterSink& out);

class CmEngine {
public:
    struct Config {
        std::uint64_t local_ca_guid = 0;
        std::size_t max_connections = 1024;
        // Connections one port's REQs (by the MAD's source LID, which the
        // fabric vouches for) may hold, TimeWait and DREQ_SENT included:
        // one that ends we keep up to ~77 s (a DREQ unanswered), so without
        // this one port cycling REQ, RTU and a new REQ would take every slot.
        std::size_t max_per_port = 64;
        std::uint8_t packet_life_time = 16;           // exponent (~268 ms)
        std::uint8_t cm_response_timeout = 20;        // exponent (~4.3 s), ours and what we ask of the peer
        std::uint8_t max_cm_retries = 15;
        std::uint8_t local_ack_timeout = 18;          // the REQ's primary path field
        // The longest service timeout an MRA gets (exponent): Linux's ib_cm
        // asks 24 (~69 s); a peer asking 31 (~2.4 h) gets this.
        std::uint8_t max_service_timeout = 24;
        // Bounds on the waits a peer's REQ sets (exponents): its Local CM
        // Response Timeout, after which our REP goes again. At least ib_cm's
        // floor (2^(t-8) ms, never below 1 ms): 0 would send all 16 REPs
        // within 70 us, the timer firing back to back. At most what an MRA
        // gets: 31 (~2.4 h a wait) would hold the REP some 39 h.
        std::uint8_t min_peer_timeout = 8;
        std::uint8_t max_peer_timeout = 24;
        std::size_t max_output = 4096;
        std::size_t max_events = 4096;
        // Where local comm IDs come from: empty, 32 unpredictable bits each
        // (random_u32(), getrandom(2)); a fuzz target names its own so that
        // its inputs can name our connections.
        std::function<std::uint32_t()> comm_id_source;
    };

    // `seed`: the TIDs' high half (comm IDs: Config::comm_id_source).
    CmEngine(Config config, std::uint64_t seed);

    void listen(std::uint64_t service_id);
    void unlisten(std::uint64_t service_id);

    expected<ConnectionId, std::string> connect(const ConnectParams& p, Clock::time_point now);
    expected<void, std::string> accept(ConnectionId id, const AcceptParams& p, Clock::time_point now);
    // `ari`: Additional Rejection Information (at most 72 bytes; e.g. our GID
    // for reason 12).
    expected<void, std::string> reject(ConnectionId id, std::uint16_t reason, Clock::time_point now, bytes ari = {});
    expected<void, std::string> establish(ConnectionId id, Clock::time_point now);
    expected<void, std::string> disconnect(ConnectionId id, Clock::time_point now);

    void receive(bytes mad, const Address& from, Clock::time_point now);
    void tick(Clock::time_point now);
    std::optional<Clock::time_point> next_deadline() const;

    std::vector<Outgoing> take_output();
    std::vector<Event> take_events();

    std::optional<State> state(ConnectionId id) const;
    std::size_t connections() const { return conns_.size(); }
    const CmCounters& counters() const { return counters_; }

private:
    struct Conn {
        ConnectionId id = 0;
        State state = State::req_sent;
        bool active = false;
        Address peer;
        // Where the peer's MADs come from, as the fabric says (not a field
        // of theirs): the REQ's sender (passive), whom we connect to (active).
        Address source;
        std::uint32_t remote_id = 0;
        std::uint64_t remote_ca_guid = 0;
        bool remote_known = false;         // the two above: from the REQ (passive) or the REP (active)
        std::uint32_t local_qpn = 0;
        std::uint32_t remote_qpn = 0;
        std::uint64_t req_tid = 0;
        std::uint64_t dreq_tid = 0;
        std::optional<Outgoing> last;      // what a retransmission resends (REQ, REP, DREQ)
        Clock::time_point deadline{};
        bool timer = false;
        Clock::duration retry_after{};
        unsigned retries_left = 0;
        bool mra_received = false;         // the REQ or REP has had its MRA (one per message, as ib_cm's MRA_*_RCVD)
        // Passive: how long the REQ's sender waits for our REP, and how often.
        Clock::duration peer_response{};
        unsigned peer_retries = 0;
    };

    // Into the bounded output; false (counted in output_dropped) when full.
    bool push(Outgoing o);
    void send(const Address& to, const Message& m, std::uint64_t tid);
    void event(Event e);
    ConnectionId new_id();
    Conn* find(ConnectionId id);
    Conn* by_remote(std::uint32_t remote_id, std::uint64_t remote_ca_guid);
    Conn* by_peer(std::uint32_t remote_id, std::uint64_t remote_ca_guid);
    static bool from_peer(const Conn& c, std::uint32_t sender_comm_id);
    static bool same_port(const Address& a, const Address& b);
    Clock::duration peer_timeout(std::uint8_t exponent) const;
    std::uint8_t peer_exponent(std::uint8_t exponent) const;  // within the Config's bounds
    Conn* rejected(const Rej& m);
    void arm(Conn& c, Clock::duration after, unsigned retries, Clock::time_point now);
    // How long a sender waits for an answer: 1 + `retries` sends, each
    // 2 x PacketLifeTime (the larger of ours and `packet_life_time`) +
    // `response`.
    Clock::duration answer_wait(Clock::duration response, unsigned retries, std::uint8_t packet_life_time = 0) const;
    void enter_timewait(Conn& c, Clock::time_point now);
    void on_req(const Req& m, std::uint64_t tid, const Address& from, Clock::time_point now);
    void on_rep(const Rep& m, std::uint64_t tid, const Address& from, Clock::time_point now);
    void on_rtu(const Rtu& m);
    void on_rej(const Rej& m, Clock::time_point now);
    void on_mra(const Mra& m, Clock::time_point now);
    void on_dreq(const Dreq& m, std::uint64_t tid, const Address& from, Clock::time_point now);
    void on_drep(const Drep& m, Clock::time_point now);
    void on_lap(const Lap& m, std::uint64_t tid, const Address& from);
    void send_rej(const Address& to, std::uint32_t local, std::uint32_t remote, MessageKind what,
                  std::uint16_t reason, std::uint64_t tid, bytes ari = {});

    Config config_;
    std::uint32_t tid_high_;
    std::map<std::uint64_t, bool> listening_;
    std::map<ConnectionId, Conn> conns_;
    std::vector<Outgoing> output_;
    std::vector<Event> events_;
    CmCounters counters_;
};

}  // namespace ipoibd::cm
