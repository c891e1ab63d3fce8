// The soft HCA port: a PortCore plugged into ibfabricd over UDP.
//
// 1. open_soft_port() binds a UDP socket, connects it to the fabric and
//    starts the link: a 6-byte link packet every link_interval.
// 2. The switch answers with link packets; the first one brings the link up
//    (PortPhysicalState LinkUp, PortState INIT). The SM then finds the port
//    with directed-route SMPs on QP0, which the port's subnet management
//    agent answers, and programs LID, SM LID, P_Keys and state ACTIVE.
// 3. When no link packet has come for link_timeout_intervals intervals the
//    link is down: PortState DOWN, port_down event, sends refused.
// 4. Everything else is PortCore: IBA packets in, validated, delivered to
//    QPs; sends built into IBA packets and queued on the socket, flushed in
//    sendmmsg batches at the end of every post_send and process(). A
//    process() hands over at most receive_budget datagrams; an eventfd in
//    fd()'s set stays readable while more are waiting.
// 5. Cut-through (route_hint.h): the switch's route hints let unicast go
//    straight to the destination port's UDP address until they expire. The
//    socket is therefore not connected, and who sent a datagram decides
//    what it may be: from the fabric's address, anything; from a peer the
//    switch named in a current permit, unicast IBA packets to QPs other than
//    QP0; from anyone else, nothing. A route is taken only from a hint that
//    echoes the random nonce of one of the port's own route requests. While
//    a new route waits for the answer to its request (the marker), packets
//    to that DLID are held, at most drain_timeout (20 ms by default; tests
//    that count held packets set more, so that a descheduled test does not
//    see the hold give up). Every refusal is counted (SoftTrustCounters,
//    SoftCutThroughCounters) and reported to the drop log with its source.
// 6. Send queues for other threads (port.h, UdSendQueue): each a send ring
//    of its own on a dup() of the port's socket (sendmmsg from two threads
//    on one UDP socket is safe; the datagrams leave from the port's
//    address, and only the port receives), sending as the QP it is told
//    from a snapshot the port publishes after any process() that
//    changed it (state, LID, P_Keys, MTU, current direct routes, the fabric
//    key). A queue uses a direct route until its refresh time and, later,
//    until it expires while flagging it; the port's timer asks the switch
//    for a fresh hint for a flagged route. Draining routes and unknown
//    DLIDs go through the switch. The fabric key's sealer shares the
//    port's session and sequence counter (FabricAuth::share_session).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/socket_address.h"
#include "common/unique_fd.h"
#include "transport/managed_port.h"
#include "transport/soft/route_hint.h"
#include "transport/soft/udp_batch.h"

namespace ipoibd::transport {

struct SoftPortConfig {
    SocketAddress fabric;                  // where ibfabricd listens
    std::optional<SocketAddress> bind_to;  // default: any address, any port
    std::uint64_t port_guid = 0;           // required, non-zero
    std::uint64_t node_guid = 0;           // 0: the port GUID
    std::string node_description;
    ib::Mtu mtu = ib::Mtu::mtu4096;        // the port's MTU capability
    std::chrono::milliseconds link_interval{100};
    unsigned link_timeout_intervals = 10;
    // Datagrams handed to PortCore per process(): no more than the receive
    // queues hold, or a burst (one GRO message carries up to 64) overruns a
    // QP before its owner reaps it. The rest waits, fd() stays readable.
    std::size_t receive_budget = UdpBatchSocket::kReceiveBudget;
    // How long a new direct route holds its packets waiting for the
    // switch's answer to its marker (route_hint.h) before they, and the
    // route, go back through the switch (drain_timeouts).
    std::chrono::milliseconds drain_timeout{20};
    // The fabric key: every datagram sealed and checked (fabric_auth.h).
    std::optional<FabricKeys> keys;
};

struct SoftCutThroughCounters {
    std::uint64_t hints = 0;          // route hints accepted (answers to our requests)
    std::uint64_t hints_unsolicited = 0;  // "a route exists" (nonce 0): answered with a request
    std::uint64_t hints_refused = 0;  // a nonce we did not ask with (forged or stale): ignored
    std::uint64_t withdrawals = 0;    // routes the switch took back (the LID moved or went)
    std::uint64_t permits = 0;        // the switch named a peer that may send to us
    std::uint64_t permit_withdrawals = 0;  // the switch took a peer's permit back
    std::uint64_t direct_tx = 0;      // unicast packets sent straight to a peer
    std::uint64_t direct_rx = 0;      // packets received from a peer, not the switch
    std::uint64_t via_switch_tx = 0;  // packets sent to the switch
    std::uint64_t refresh_requests = 0;  // route requests sent before a hint expired
    std::uint64_t markers = 0;        // route requests sent to switch a new route to direct
    std::uint64_t held = 0;           // packets held until the marker's answer
    std::uint64_t marker_retries = 0; // markers sent again after a burst overflowed the hold
    std::uint64_t drain_timeouts = 0; // answers that did not come in time (held packets went via the switch)
};

// As "route_hints", "direct_tx", ...
void visit(const SoftCutThroughCounters& c, CounterSink& out);

// Datagrams refused for who sent them.
struct SoftTrustCounters {
    std::uint64_t foreign = 0;          // from an address that is neither the fabric nor a permitted peer
    std::uint64_t peer_not_data = 0;    // a link packet or control datagram from a peer, not the fabric
    std::uint64_t control_malformed = 0;  // from the fabric, magic "IBSF" but no valid hint or permit
    std::uint64_t permits_full = 0;     // a permit that did not fit (kMaxPermits current ones)
    std::uint64_t peer_slid = 0;        // a permitted peer's packet with an SLID not of the peer's LIDs
    std::uint64_t peer_pkey = 0;        // a permitted peer's packet with a P_Key the switch would not have passed
};
// As "foreign_dropped", ...
void visit(const SoftTrustCounters& c, CounterSink& out);

struct SoftLinkCounters {
    std::uint64_t link_packets_sent = 0;
    std::uint64_t link_packets_received = 0;
    std::uint64_t link_packets_bad = 0;  // 6-byte datagrams with a bad LPCRC or Op
    std::uint64_t link_ups = 0;
    std::uint64_t link_downs = 0;
};
// As "link_packets_sent", "link_ups", ...
void visit(const SoftLinkCounters& c, CounterSink& out);

class SoftPort final : public Port {
public:
    static expected<std::unique_ptr<SoftPort>, Error> open(const SoftPortConfig& config);
    ~SoftPort() override;

    PortAttributes attributes() const override { return port_.core().attributes(); }
    expected<std::unique_ptr<UdQp>, Error> create_ud_qp(const UdQpConfig& config) override;
    std::size_t poll_events(std::span<PortEvent> out) override { return port_.core().poll_events(out); }
    int fd() const override { return epoll_.get(); }
    void process() override;
    // Deferred flush (below): sends what the ring holds.
    void flush() override;
    expected<std::unique_ptr<UdQp>, Error> create_gsi_qp(std::uint32_t send_depth,
                                                         std::uint32_t receive_depth) override;
    expected<void, Error> set_capture(PacketTap tap) override;
    void set_drop_log(PortDropLog log) override { drop_log_ = std::move(log); }
    std::string underlay_address() const override { return local_address().to_string(); }
    std::optional<std::chrono::steady_clock::time_point> last_sm_contact() const override {
        return port_.last_sm_contact();
    }
    expected<void, Error> set_fabric_keys(const FabricKeys& keys) override;
    expected<std::unique_ptr<UdSendQueue>, Error> create_send_queue() override;
    const FabricAuth* auth() const { return auth_.get(); }
    // The port's packets, its UDP socket, its link, cut-through and SMA.
    void visit_counters(CounterSink& out) const override;
    expected<std::unique_ptr<RcQueuePair>, Error> create_rc_qp(std::uint16_t pkey_index) override {
        return port_.core().create_rc_qp(pkey_index);
    }
    expected<rc::MemoryRegion, Error> register_memory(std::span<std::uint8_t> memory, std::uint32_t access) override {
        return port_.core().register_memory(memory, access);
    }
    expected<void, Error> deregister_memory(std::uint32_t rkey) override {
        return port_.core().deregister_memory(rkey);
    }
    std::optional<std::chrono::steady_clock::time_point> next_deadline() const override {
        return port_.core().next_rc_deadline();
    }

    // Sends `packet` to the fabric exactly as given, valid or not: for test
    // and diagnostic tools that forge packets (tests/tools/ibforge). The
    // daemon never uses it.
    bool send_raw(bytes packet);

    bool link_up() const { return link_up_; }

    // Batching for an owner with its own loop: with deferred flush, packets
    // posted by post_send() wait in the send ring (256 datagrams; a full
    // ring is flushed) until flush() or process(), so that a loop turn's
    // sends leave in sendmmsg batches instead of one syscall per packet.
    void set_deferred_flush(bool deferred);
    // The packet engine (tests).
    PortCore& core() { return port_.core(); }
    // The port and its SMA (ibfabricd's sim clients: a management
    // application on the port's node).
    ManagedPort& managed() { return port_; }
    const ManagedPort& managed() const { return port_; }
    const PortCounters& counters() const { return port_.core().counters(); }
    const PortCounters* packet_counters() const override { return &port_.core().counters(); }
    const UdpCounters& udp_counters() const { return socket_.counters(); }
    const SoftLinkCounters& link_counters() const { return link_; }
    const SoftCutThroughCounters& cut_through_counters() const { return cut_; }
    const SoftTrustCounters& trust_counters() const { return trust_; }
    const SmaCounters& sma_counters() const { return port_.sma().counters(); }
    SocketAddress local_address() const { return socket_.local_address(); }

    // What send queues (another thread's) see of the port: published by
    // the port's thread, immutable once published.
    struct SendRoute {
        std::uint16_t dlid = 0;
        SocketAddress peer;
        std::chrono::steady_clock::time_point refresh_at{}, expires{};
    };
    struct SendContext {
        bool active = false;
        std::uint16_t lid = 0;
        std::size_t mtu = 0;
        ib::Gid gid{};
        std::vector<std::uint16_t> pkey_table;
        std::vector<SendRoute> routes;  // sorted by DLID; draining ones left out
        // Per route: a queue used it after its refresh time (the port then
        // asks for a fresh hint).
        std::unique_ptr<std::atomic<bool>[]> used_late;
        std::uint64_t keys_version = 0;
        std::shared_ptr<const FabricAuth> sealer;  // share_session() of the port's; null: no key
    };
    struct SendShared {
        std::mutex lock;
        std::shared_ptr<const SendContext> context;
        std::shared_ptr<const SendContext> load() {
            std::lock_guard g(lock);
            return context;
        }
    };

private:
    class Link;
    class SendQueue;
    // Publishes a new SendContext when what the queues see changed.
    void publish_send_context();
    // Routes a queue used late get a refresh request; expired ones go.
    void refresh_queue_routes(std::chrono::steady_clock::time_point now);
    SoftPort(const SoftPortConfig& config, UdpBatchSocket socket, UniqueFd timer, UniqueFd more, UniqueFd epoll);
    void on_datagram(bytes datagram, const SocketAddress& from);
    bool transmit(bytes packet);
    bool hints_current() const;  // the route hints still belong to this programming of the port
    void forget_hints();         // held packets go through the switch, in order
    void on_control(bytes datagram);
    void on_route_hint(const RouteHint& hint);
    void on_permit(const PeerPermit& permit);
    struct Permit;
    // The current permit of `from`, or null.
    const Permit* permitted(const SocketAddress& from);
    // Whether a packet straight from a peer carries what its permit
    // allows (an SLID of its LIDs, a P_Key it may use); counts and logs
    // when not. A packet too short to tell is PortCore's to refuse.
    bool within_permit(const Permit& permit, bytes datagram, const SocketAddress& from);
    // `why`: what was wrong with the source; null: neither the fabric nor a peer it named.
    void refuse(std::string_view reason, const SocketAddress& from, const char* what, const char* why = nullptr);
    // A route request with a fresh nonce (kept in *nonce); false: not queued.
    bool send_request(std::uint16_t dlid, std::uint64_t* nonce);
    // Sends the held packets for `dlid` (all DLIDs when 0) to `to`, in order.
    void release_held(std::uint16_t dlid, const SocketAddress& to, bool direct);
    void expire_drains(std::chrono::steady_clock::time_point now);
    void on_timer(std::uint64_t expirations);
    void send_link_packet();
    void set_link(bool up);

    SoftPortConfig config_;
    UdpBatchSocket socket_;
    UniqueFd timer_;
    std::chrono::steady_clock::time_point timer_due_;  // the timer's next expiry, or a little before it
    UniqueFd more_;   // eventfd, readable while the socket holds received datagrams not yet handed over
    bool more_armed_ = false;
    UniqueFd epoll_;
    std::unique_ptr<Link> link_sink_;
    ManagedPort port_;
    bool link_up_ = false;
    std::uint64_t intervals_silent_ = 0;
    SoftLinkCounters link_;
    struct Direct {
        SocketAddress peer;
        std::chrono::steady_clock::time_point expires{};
        std::chrono::steady_clock::time_point refresh_at{};  // ask for a fresh hint from here on
        bool refresh_asked = false;
        // The nonce of our last request for this route: only a hint that
        // echoes it is taken.
        std::uint64_t nonce = 0;
        // A new route: packets held until the hint answering `nonce`
        // comes back, or until drain_deadline (config_.drain_timeout after
        // the request; route_hint.h).
        bool draining = false;
        std::chrono::steady_clock::time_point drain_deadline{};
    };
    static constexpr std::size_t kMaxHeld = 64;
    struct Held {
        std::uint16_t dlid;
        std::vector<std::uint8_t> packet;
    };
    std::vector<Held> held_;  // in the order sent; at most kMaxHeld
    static constexpr std::size_t kMaxPermitPKeys = 32;  // a P_KeyTable block: as many as a switch port holds
    struct Permit {
        SocketAddress peer;
        std::chrono::steady_clock::time_point expires{};
        std::uint16_t lid = 0;  // base LID
        std::uint8_t lmc = 0;
        bool any_pkey = false;
        std::uint8_t pkey_count = 0;
        std::array<std::uint16_t, kMaxPermitPKeys> pkeys{};
    };
    static constexpr std::size_t kMaxPermits = 256;  // a switch has at most 254 ports
    std::vector<Permit> permits_;
    std::size_t last_permit_ = 0;  // where the last match was: a stream comes from one peer
    std::chrono::steady_clock::time_point now_{};  // read once per process()
    PortDropLog drop_log_;
    static constexpr unsigned kRefusalsLogged = 10;  // a second
    std::chrono::steady_clock::time_point refusal_window_{};
    unsigned refusals_logged_ = 0;
    SoftTrustCounters trust_;
    std::unique_ptr<FabricAuth> auth_;  // the fabric key; null: none
    std::unordered_map<std::uint16_t, Direct> direct_;  // by DLID; bounded by the unicast LID space
    std::uint16_t hints_lid_ = 0;     // the port's LID and SM LID when the hints came
    std::uint16_t hints_sm_lid_ = 0;
    std::uint64_t hints_reregistrations_ = 0;  // ManagedPort::reregistrations() then
    SoftCutThroughCounters cut_;
    std::shared_ptr<SendShared> send_shared_;  // null until the first send queue
    std::uint64_t keys_version_ = 0;           // set_fabric_keys() calls
};

}  // namespace ipoibd::transport
