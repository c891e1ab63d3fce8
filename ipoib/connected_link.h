// IPoIB connected mode (RFC 4755) on a transport::Port: the RC half of an
// interface's link, beside its UD QP (port_link.h). One RC connection per
// direction per peer, as Linux's ipoib_cm: our sends to a peer go on a
// connection we open (active), a peer's sends to us on one it opens
// (passive); multicast and address resolution stay on UD.
//
// Active (send()):
//  1. The first unicast frame to a peer whose address carries flag 0x80
//     creates an RC QP and sends a REQ (ServiceID 0x10..00 | the peer's UD
//     QPN, private data: our UD QPN and receive size 65524) on the path the
//     engine resolved; frames wait meanwhile (small ones go UD instead,
//     Config::datagram_when_idle; at most Config::queue wait, and
//     Config::max_queued_bytes in all connections, the rest dropped and
//     counted).
//  2. The REP: our QP to RTS (its Starting PSN is our send PSN, its RNR
//     retry count ours), RTU, the waiting frames sent. Frames longer than
//     the peer's receive size are refused (too_big: the engine answers
//     with ICMP).
//  3. A REJ, a REQ timeout, a send error (retries exhausted, the peer gone),
//     SENDs outstanding with none completed for Config::idle (a peer that
//     RNR-NAKs forever), a DREQ: the connection is torn down; for
//     Config::retry_after frames to that peer go over UD (when they fit),
//     then a new REQ is tried.
//  4. Idle for Config::idle: a DREQ, and the QP goes.
// Passive (cm_event(req_received) for our ServiceID):
//  1. Checked: RC, our P_Key, our GID as the primary remote GID (else REJ 12
//     with our GID, as ib_cm), room (connections under Config::max_
//     connections and Config::ring receive buffers free in the shared pool
//     of Config::receive_buffers, else REJ 1 "no QP").
//  2. An RC QP with Config::ring receives of 65524 bytes posted, at RTS
//     before the REP leaves (the kernel sends right after its RTS);
//     received frames go to the engine like UD datagrams, from the peer's
//     LID and UD QPN (its REQ's private data); each receive is posted
//     again.
//  3. Idle for 4 x Config::idle, a DREQ or an error: torn down, its
//     buffers back in the pool.
// Either side: a connection the CM ends by itself (a stale REQ from the
// peer's QP: its DREQ on the old connection) goes at its TimeWait's end,
// the one event the CM sends about it.
// Small frames go over UD while nothing of ours is on RC for the peer
// (Config::datagram_when_idle).
// Everything is bounded (connections, queued frames, posted sends and
// receives) and every drop counted. Threading: the port's (one thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cm/cm_access.h"
#include "common/counters.h"
#include "ipoib/engine.h"
#include "ipoib/link.h"
#include "transport/port.h"

namespace ipoibd::ipoib {

enum class ConnState : std::uint8_t { connecting, up, failed };
const char* to_string(ConnState s);

struct ConnectedCounters {
    std::uint64_t connects = 0;            // REQs we started
    std::uint64_t connected = 0;           // ... that reached RTS (REP, RTU)
    std::uint64_t accepted = 0;            // REQs we answered with a REP
    std::uint64_t rejected_by_peer = 0;    // REJs: of our REQs, or of our REPs (the peer gave up first)
    std::uint64_t timed_out = 0;           // our REQs unanswered
    std::uint64_t connect_errors = 0;      // no QP, the CM refused, the REP unusable
    std::uint64_t rejected_no_room = 0;    // REQs refused: connections or receive buffers (REJ 1)
    std::uint64_t rejected_bad_req = 0;    // REQs refused: not RC, another P_Key, not our GID
    std::uint64_t rejected_peer_limit = 0; // REQs refused: the sending port holds max_passive_per_peer
    std::uint64_t replaced_by_peer = 0;    // a peer's passive connection its new REQ replaced
    std::uint64_t disconnected_by_peer = 0;  // DREQs
    std::uint64_t ended_by_cm = 0;         // connections the CM ended by itself (a stale REQ from the peer's QP: its DREQ)
    std::uint64_t reaped_idle = 0;
    std::uint64_t rc_errors = 0;           // connections an RC error took down (retries, RNR, remote errors)
    std::uint64_t send_stalled = 0;        // connections taken down: SENDs outstanding, none completed for Config::idle
    std::uint64_t tx_messages = 0;
    std::uint64_t rx_messages = 0;
    std::uint64_t tx_queued = 0;           // frames that waited for a connection
    std::uint64_t drop_queue_full = 0;     // frames beyond Config::queue while connecting
    std::uint64_t drop_queued_bytes = 0;   // frames beyond Config::max_queued_bytes in all connections' queues
    std::uint64_t drop_connect_failed = 0; // waiting frames of a connection that failed
    std::uint64_t drop_send_full = 0;      // Config::send_depth SENDs outstanding
    std::uint64_t drop_send_bytes = 0;     // Config::max_send_bytes outstanding in all connections
    std::uint64_t drop_refused = 0;        // post_send refused
    std::uint64_t drop_too_big_queued = 0; // waiting frames longer than the peer's receive size
    std::uint64_t rx_errors = 0;           // receive completions with an error (not flushes)
    std::uint64_t tx_errors = 0;           // send completions with an error (not flushes)
    std::uint64_t no_room_datagram = 0;    // frames that went UD: no room for another connection
    std::uint64_t idle_datagram = 0;       // frames that went UD: small, nothing of ours on RC for the peer (Config::datagram_when_idle)
};
void visit(const ConnectedCounters& c, CounterSink& out);

// What ipoibctl neigh shows of a peer's connection.
struct ConnectionView {
    ConnState state = ConnState::connecting;
    bool active = true;
    std::uint32_t remote_qpn = 0;  // the peer's RC QPN (0 while connecting)
    std::uint32_t local_qpn = 0;
    std::uint32_t peer_mtu = 0;    // the peer's receive size (the 4-byte header included)
    std::size_t queued = 0;
};

class ConnectedLink final : public cm::CmUser {
public:
    struct Config {
        std::size_t max_connections = 256;  // both directions, failed entries included
        std::size_t receive_buffers = 4096; // the passive connections' shared pool
        std::size_t ring = 64;              // receives each passive connection holds
        // Passive connections one port (the REQ's source LID, which the
        // fabric vouches for) may hold: a peer needs one per UD QP it
        // sends from; without a limit one port could take every slot.
        std::size_t max_passive_per_peer = 8;
        std::size_t queue = 16;             // frames waiting per connecting peer
        // Frames waiting for connections, all together: `queue` frames of
        // up to 64 KiB for each of max_connections peers would be 256 MiB.
        std::size_t max_queued_bytes = 16 * 1024 * 1024;
        std::size_t send_depth = 128;       // SENDs outstanding per connection
        // Bytes of SENDs outstanding in all connections together: send_depth
        // messages of up to 64 KiB on each of max_connections would be 2 GiB,
        // held for `idle` by peers that post no receives (RNR NAKs).
        std::size_t max_send_bytes = 64 * 1024 * 1024;
        // Ours closed after this long unused, a peer's after 4x. Also the
        // bound on a connection of ours whose SENDs make no progress: one
        // outstanding and none completed for this long is taken down (the
        // RC ends a healthy SEND within its retries, some 2 s, but our RNR
        // retry 7 waits forever on a peer that posts no receives).
        std::chrono::milliseconds idle{60'000};
        // After a failure of ours, frames to the peer go UD for retry_after,
        // doubled at each failure in a row (no connection up in between)
        // up to retry_max: a peer whose CM never answers is asked once a
        // minute, not once a second.
        std::chrono::milliseconds retry_after{1'000};
        std::chrono::milliseconds retry_max{64'000};
        // Our REQs' RC parameters. The kernel asks for 0 and 0 and loses a
        // connection with one packet; over a fabric that may drop packets
        // ipoibd retries (the peer's RC does the retransmitting).
        std::uint8_t retry_count = 7;
        std::uint8_t rnr_retry = 7;
        std::uint8_t ack_timeout = 14;  // 4.096 us x 2^14 = 67 ms
        // A frame that fits a UD datagram goes over UD while its connection
        // has nothing of ours in flight or waiting (every SEND ACKed, none
        // queued), so it does not overtake one of our RC messages; also
        // while the connection is being set up. RFC 4755 has every
        // implementation accept unicast on UD, and a small packet on RC
        // costs an ACK packet each way (a wake-up of both hosts on a soft
        // fabric). Such frames do not keep a connection from idle reaping:
        // it carries nothing. false: every unicast frame over the
        // connection, waiting while it is set up, as the kernel's ipoib_cm.
        bool datagram_when_idle = true;
    };
    // A journald-worthy event (connection_failed), with its fields.
    using EventSink = std::function<void(EngineEventKind, std::string, std::vector<std::pair<std::string, std::string>>)>;
    using ReceiveCallback = std::function<void(const ReceivedDatagram&)>;

    ConnectedLink(transport::Port& port, cm::CmAccess& cm, Config config, EventSink events, std::uint64_t seed);
    // Called when a peer's UD QPN turns out not to exist any more (our REQ
    // rejected as an unknown ServiceID, reason 8): its address is stale.
    void on_peer_gone(std::function<void(const HwAddress&)> hook) { peer_gone_ = std::move(hook); }
    ~ConnectedLink() override;
    ConnectedLink(const ConnectedLink&) = delete;
    ConnectedLink& operator=(const ConnectedLink&) = delete;

    // Opens connections for `ud_qpn` (a new UD QP: the old connections go)
    // and listens on its ServiceID. `pkey`: the interface's. An error says
    // why peers' connections cannot be accepted (librdmacm cannot listen on
    // IPoIB's ServiceIDs); the link still opens its own.
    expected<void, std::string> open(std::uint32_t ud_qpn, std::uint16_t pkey, Clock::time_point now);
    // Disconnects everything (DREQs) and stops listening.
    void close(Clock::time_point now);
    bool is_open() const { return open_; }
    bool is_listening() const { return listening_; }

    // `fits_datagram`: the frame fits the UD link (the engine's datagram
    // MTU), so it may take UD instead (Config::datagram_when_idle).
    ConnectedSend send(const HwAddress& to, const PathInfo& path, bytes frame, Clock::time_point now,
                       bool fits_datagram = false);

    // Completions of every connection, up to `max`; receives go to `on_receive`.
    std::size_t poll(const ReceiveCallback& on_receive, Clock::time_point now, std::size_t max = 1024);
    void tick(Clock::time_point now);
    std::optional<Clock::time_point> next_deadline() const;

    // cm::CmUser
    void cm_event(const cm::Event& e, Clock::time_point now) override;

    std::optional<ConnectionView> connection_to(const HwAddress& peer) const;
    std::size_t connections() const { return conns_.size(); }
    std::size_t buffers_in_use() const { return buffers_in_use_; }
    std::size_t queued_bytes() const { return queued_bytes_; }
    std::size_t send_bytes() const { return send_bytes_; }
    const ConnectedCounters& counters() const { return counters_; }
    // Ours, then the RC counters of every connection, closed ones included
    // (as rc_*).
    void visit_counters(CounterSink& out) const;

private:
    using Key = std::uint64_t;
    struct Conn {
        bool active = true;
        ConnState state = ConnState::connecting;
        std::optional<cm::ConnectionId> cm_id;
        std::unique_ptr<transport::RcQueuePair> qp;
        HwAddress peer;
        std::uint16_t peer_lid = 0;
        std::uint16_t source_lid = 0;  // passive: the LID the REQ came from (0: unknown)
        std::uint32_t remote_qpn = 0;
        std::uint32_t peer_mtu = 0;
        std::uint32_t our_psn = 0;
        std::uint8_t path_mtu = 0;  // IBA code
        std::deque<std::vector<std::uint8_t>> queue;
        // Each SEND outstanding, oldest first: wr_id and bytes (their count
        // too). An RC send queue completes in the order it was posted.
        std::deque<std::pair<std::uint64_t, std::size_t>> in_flight;
        // The last send completion, or the post that found none outstanding:
        // the bound on a connection that makes no progress (tick()).
        Clock::time_point send_progress{};
        std::size_t posted = 0;  // passive: receives posted
        Clock::time_point last_used{};
        Clock::time_point failed_until{};
        std::uint64_t next_wr = 1;
    };

    Conn* find(Key k);
    void start_connect(Key k, Conn& c, const PathInfo& path, Clock::time_point now);
    void on_rep(Key k, Conn& c, const cm::Event& e, Clock::time_point now);
    void on_req(const cm::Event& e, Clock::time_point now);
    ConnectedSend post(Conn& c, bytes frame, Clock::time_point now);
    // Queues `frame` on `c` if the byte budget allows (else counted).
    ConnectedSend enqueue(Conn& c, bytes frame);
    // Empties `c`'s queue, its bytes back in the budget.
    std::deque<std::vector<std::uint8_t>> take_queue(Conn& c);
    // `c`'s SENDs outstanding are no longer ours to wait for (its QP goes).
    void forget_sends(Conn& c);
    // Config::datagram_when_idle: whether `c` lets this frame go UD (counted).
    bool small_over_datagram(const Conn& c, bool fits_datagram);
    // The QP goes (its counters kept); an active connection becomes FAILED
    // for retry_after (its waiting frames dropped), a passive one is erased.
    void tear_down(Key k, const std::string& why, Clock::time_point now, bool notify);
    void erase(Key k);
    std::optional<std::uint16_t> pkey_index() const;
    std::uint32_t random_psn();

    transport::Port& port_;
    cm::CmAccess& cm_;
    Config config_;
    EventSink events_;
    std::function<void(const HwAddress&)> peer_gone_;
    bool open_ = false;
    bool listening_ = false;
    std::uint32_t ud_qpn_ = 0;
    std::uint16_t pkey_ = 0xFFFF;
    std::uint64_t rng_;
    Key next_key_ = 1;
    std::map<Key, Conn> conns_;
    std::map<std::pair<ib::Gid, std::uint32_t>, Key> active_;  // by the peer's GID and UD QPN
    std::map<cm::ConnectionId, Key> by_cm_;
    // Failures in a row of our connections to a peer (GID, UD QPN), until
    // one comes up; at most kMaxBackoffPeers remembered.
    static constexpr std::size_t kMaxBackoffPeers = 1024;
    std::map<std::pair<ib::Gid, std::uint32_t>, unsigned> failures_;
    std::size_t buffers_in_use_ = 0;
    std::size_t queued_bytes_ = 0;  // in every connection's queue
    std::size_t send_bytes_ = 0;    // of every connection's SENDs outstanding
    std::map<std::string, std::uint64_t> closed_rc_;  // RC counters of connections gone
    ConnectedCounters counters_;
};

}  // namespace ipoibd::ipoib
