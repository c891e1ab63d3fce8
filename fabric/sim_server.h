// ibfabricd's ibsim-protocol server: programs running under Debian's
// libumad2sim (LD_PRELOAD; OpenSM, smpquery, saquery, perfquery, sminfo,
// ibnetdiscover, osmtest) become nodes of the soft fabric.
//
// The protocol is in sim_wire.h. What this adds is the fabric side:
//
// 1. Sockets. open() binds the control socket B:ctl (B the base name, as
//    the clients' $IBSIM_SOCKNAME) and every slot's B:out<slot>. A CONNECT
//    takes the lowest free slot and connects B:out<slot> to the client's
//    B:in<pid> (from then on only that socket may send to it; a free
//    slot's is connected to B:ctl, which sends it nothing); the reply
//    names the slot. Every control message gets an 80-byte reply from B:ctl,
//    ERROR (type 0) for anything refused (the client then exits instead of
//    waiting for ever); every refusal is counted by SimDrop. Abstract names
//    have no permissions: only root's and the server's own user's
//    processes are served (their credentials, client_uids), and other
//    users' ERRORs are not allowed to fill B:ctl's send buffer.
// 2. Nodes. A client attaches to a node by name ($SIM_HOST; empty: the
//    default node). A node is a channel adapter of one port: a soft port
//    (transport/soft/soft_port.h) of this process plugged into the switch
//    over UDP like any ipoibd's, with its subnet management agent, found and
//    programmed by the SM as every other port. Its node GUID is the one
//    given for the name (--sim-node NAME=GUID), or one derived from the name
//    (locally administered, the same on every start); the port GUID is the
//    node GUID + 1, as the client's fake sysfs assumes (its gids/0). Several
//    clients may share a node (OpenSM and saquery on one host); the port
//    goes away, link down, with its last client.
// 3. GET_PORTINFO waits (at most attach_wait) for the SM to make a new port
//    ACTIVE: the client writes its sysfs (LID, SM LID) once, from this
//    answer. The M_Key is never shown (the SM's secret): 0 in its place.
// 4. MADs from a client leave from its node's port as real packets: SMPs
//    from QP0 (directed route with the requester's hop rule, IBA 14.2.2;
//    HopCount 0 is answered by the node's own SMA), everything else from
//    the node's GSI QP (QP1, Q_Key 0x80010000) by LID. A request's TID gets
//    the slot in bits 63..48; a response coming back goes to the client of
//    that slot when it answers one of its requests in flight (TID, class,
//    source LID); so does the TrapRepress answering a client's Trap (its
//    M_Key, the port's, blanked). Unsolicited requests (SA queries,
//    SMInfo, traps) go to the node's SM client (the one that set IsSM),
//    and only to it; of the GMPs only SubnAdm (the shim crashes on a class
//    without an agent). A request of a class nobody on the node serves is
//    answered with MAD status 0x0004 (class not supported), as a GSI does.
// 5. Bounds: max_clients slots; at most max_outstanding requests in flight
//    per client; a request not answered within request_timeout, or one
//    that cannot be sent, comes back to its client with status 110
//    (ETIMEDOUT), the only failure libumad2sim understands. A client that
//    is gone (its process has exited, its socket refuses our datagrams or
//    no longer exists: a SIGKILL skips the shim's DISCONNECT) is reaped
//    within a second.
//
// Sans-loop: the owner puts fd() (an epoll of all the sockets and ports)
// into its loop for EPOLLIN, calls process(now) when it is readable and
// tick(now) every 50 ms or so.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/counters.h"
#include "common/expected.h"
#include "common/socket_address.h"
#include "common/unique_fd.h"
#include "fabric/sim_wire.h"
#include "transport/soft/soft_port.h"

namespace ipoibd::fabric {

struct SimServerOptions {
    std::string base_name{sim::kDefaultSocketBaseName};
    std::size_t max_clients = sim::kMaxClients;  // 1..kMaxSimClients
    SocketAddress fabric;                        // the switch (a wildcard address means this host)
    std::optional<FabricKeys> keys;
    std::map<std::string, std::uint64_t> node_guids;  // by node name
    std::string default_node = "sim";                 // for clients with an empty $SIM_HOST
    // Who may CONNECT: the user ids whose processes' CONNECTs are taken
    // (their credentials, SO_PASSCRED). The abstract namespace has no file
    // permissions: without this any user of the network namespace could
    // plug a node, with the fabric key, into the fabric. Empty: root and
    // the server's effective uid (SimServer::open fills it in).
    std::vector<uid_t> client_uids;
    std::chrono::milliseconds attach_wait{5000};
    std::chrono::milliseconds request_timeout{1000};
    std::size_t max_outstanding = 64;  // requests in flight, per client
    ib::Mtu mtu = ib::Mtu::mtu4096;
};
inline constexpr std::size_t kMaxSimClients = 64;

enum class SimDrop : std::uint8_t {
    ctl_wrong_size,       // a control datagram of other than 80 bytes
    ctl_bad_magic,
    ctl_unknown_type,
    ctl_bad_length,       // len above 64
    ctl_bad_payload,      // a payload the type cannot carry (short, unterminated name, SET_ISSM 2)
    ctl_unknown_client,   // a client id that is no connected slot, or not from that client's socket
    ctl_not_permitted,    // a message from a user not in client_uids (or without credentials)
    ctl_no_reply,         // a reply not sent: B:ctl's send buffer full, or a quarter of it held for other users' senders
    clients_full,         // CONNECT with every slot taken
    node_has_sm,          // a second IsSM client on one node
    attach_failed,        // the node's port or the slot's socket could not be opened
    request_wrong_size,   // a data datagram of other than 288 bytes
    request_stale,        // a datagram its client left unread on the slot's socket when it went
    request_bad_length,   // length above 256
    request_not_mad,      // BaseVersion not 1, or a directed-route SMP the requester's hop rule refuses
    request_bad_lid,      // a LID-routed MAD to LID 0 or a multicast LID
    request_port_down,    // a GMP while the node's port is not ACTIVE
    request_send_failed,  // the port refused the packet
    too_many_outstanding, // a client over max_outstanding requests in flight
    response_no_client,   // a response whose TID names no client of that node
    response_unexpected,  // a response that answers no request the client has in flight (TID, class, source LID)
    request_no_sm,        // an unsolicited request for a node without an SM client
    request_no_agent,     // an unsolicited GMP of a class other than SubnAdm (the shim would crash on it)
    client_queue_full,    // a client's socket did not take a datagram (EAGAIN)
    client_gone,          // a MAD for a client whose socket is gone (refused this one or an earlier one)
    local_response,       // a directed-route response of HopCount 0 from a client: it ends at its own port, where nobody asked
    local_smp_refused,    // a HopCount-0 SMP its node's SMA refused (a bad M_Key; the SMA's counters say why): the client times out
    fabric_not_mad,       // a packet for a client that is no MAD (short, bad SMP, a failed receive)
    reply_send_failed,    // the node's own answer (PMA, class not supported) or RMPP ACK/ABORT the port did not take
    count_
};
inline constexpr std::size_t kSimDropCount = static_cast<std::size_t>(SimDrop::count_);
const char* to_string(SimDrop d);

struct SimCounters {
    std::uint64_t control_messages = 0;
    std::uint64_t clients_connected = 0;
    std::uint64_t clients_disconnected = 0;  // DISCONNECT
    std::uint64_t clients_reaped = 0;        // gone without DISCONNECT
    std::uint64_t nodes_opened = 0;
    std::uint64_t nodes_closed = 0;
    std::uint64_t mads_from_clients = 0;
    std::uint64_t mads_to_clients = 0;
    std::uint64_t local_smps = 0;  // answered by the client's own SMA (HopCount 0)
    std::uint64_t timeouts = 0;    // requests sent back with status 110
    // Requests from the fabric of a class nobody on the node serves (the
    // drops request_no_sm, request_no_agent) answered with MAD status
    // 0x0004, class not supported, so their senders fail at once.
    std::uint64_t class_not_supported_answers = 0;
    std::array<std::uint64_t, kSimDropCount> dropped{};
    std::uint64_t dropped_for(SimDrop d) const { return dropped[static_cast<std::size_t>(d)]; }
};
// As "control_messages", ..., "dropped_<reason>".
void visit(const SimCounters& c, CounterSink& out);

class SimServer {
public:
    using Clock = std::chrono::steady_clock;
    using Log = std::function<void(const std::string&)>;

    // Binds B:ctl; the error names the socket ("another ibsim or ibfabricd
    // serves it" when it is taken).
    static expected<std::unique_ptr<SimServer>, std::string> open(SimServerOptions options, Log log = {});
    ~SimServer();
    SimServer(const SimServer&) = delete;
    SimServer& operator=(const SimServer&) = delete;

    int fd() const { return epoll_.get(); }
    void process(Clock::time_point now);
    void tick(Clock::time_point now);

    // SIGHUP's key rotation, for the nodes' ports.
    void set_fabric_keys(const FabricKeys& keys);

    const SimCounters& counters() const { return counters_; }
    // The nodes' own counters, added up by name: each node's port (packets,
    // drops by reason, its SMA's sma_*: what ipoibctl shows in section
    // port) and its PMA (pma_*), over the nodes open now and every node
    // closed since open() (most live for one client: smpquery's for one
    // query).
    void visit_node_counters(CounterSink& out) const;
    std::size_t client_count() const;
    // One line per client and node, for SIGUSR1.
    std::string stats() const;
    // The port of a node (tests), or null.
    const transport::SoftPort* node_port(const std::string& name) const;
    const SimServerOptions& options() const { return options_; }

    // The node GUID a name gets without --sim-node.
    static std::uint64_t derived_node_guid(const std::string& name);

private:
    struct Node;
    struct Client;
    struct Outstanding {
        Clock::time_point deadline;
        sim::SimRequest request;  // as sent: slot in the TID, SLID filled in
    };

    SimServer(SimServerOptions options, Log log, UniqueFd ctl, std::vector<UniqueFd> slot_sockets, UniqueFd epoll);

    void on_control(Clock::time_point now);
    // Who sent a control message: its address (the sun_path bytes) and
    // whether its user may attach (client_uids).
    struct CtlSender {
        std::vector<std::uint8_t> address;
        std::optional<ucred> cred;
        bool permitted = false;
    };
    bool permitted(const std::optional<ucred>& cred) const;
    void reply(const sim::CtlMessage& m, const CtlSender& to);
    void refuse(SimDrop why, std::uint32_t client_id, const CtlSender& to);
    void connect_client(sim::CtlMessage m, const CtlSender& from, Clock::time_point now);
    bool answer_port_info(Client& c, sim::CtlMessage m, const CtlSender& to, Clock::time_point now, bool waited);
    void release(unsigned slot, bool reaped);
    Node* open_node(const std::string& name, std::string& error);
    void close_node(Node& node);

    void on_client_data(unsigned slot, Clock::time_point now);
    void from_client(Client& c, sim::SimRequest r, Clock::time_point now);
    bool send_smp(Client& c, sim::SimRequest& r);
    bool send_gmp(Client& c, const sim::SimRequest& r);
    bool gsi_send(Node& node, std::uint16_t dlid, std::uint32_t qpn, bytes mad);
    void drain_gsi(Node& node);
    void fail_request(Client& c, sim::SimRequest r, SimDrop why);

    void on_node(Node& node, Clock::time_point now);
    bool on_node_smp(Node& node, const ib::Packet& packet);
    void on_node_gmp(Node& node, bytes mad, std::uint16_t slid, std::uint32_t src_qp);
    void answer_class_not_supported(Node& node, const sim::SimRequest& r, std::uint16_t slid, std::uint32_t src_qp);
    // Whether a response answers a request c has in flight, as the
    // kernel's MAD layer matches one to its send: the same TID and class,
    // from the LID the request went to (slid null: directed route, which
    // has none to compare).
    bool answers_request(const Client& c, std::uint64_t tid, std::uint8_t mgmt_class,
                         std::optional<std::uint16_t> slid) const;
    // An SA response for client c: true when r is now what to deliver (one
    // MAD, or a completed RMPP transfer), false while a transfer goes on.
    bool sa_transfer(Node& node, Client& c, sim::SimRequest& r);
    void to_client(Client& c, const sim::SimRequest& r);
    void answer_waiting(Clock::time_point now);
    void reap_gone();

    SimServerOptions options_;
    Log log_;
    UniqueFd ctl_;
    // B:out<slot> for every slot, bound at open() and held for good (as
    // ibsim does): a name the server let go between clients could be
    // bound by anyone, and every CONNECT to that slot would then fail.
    std::vector<UniqueFd> slot_sockets_;
    UniqueFd epoll_;
    std::vector<std::unique_ptr<Client>> slots_;  // index = slot; null = free
    std::map<std::string, std::unique_ptr<Node>> nodes_;
    std::uint32_t next_node_id_ = 1;
    std::set<uid_t> logged_uids_;  // users whose refused CONNECT was logged
    Clock::time_point next_liveness_{};
    SimCounters counters_;
    SummingSink closed_nodes_;  // the counters of the nodes closed so far
};

}  // namespace ipoibd::fabric
