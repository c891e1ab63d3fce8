// The IPoIB engine (RFC 4391), sans-I/O: events and `now` in, actions out
// through EngineIo. It ties together the neighbour cache (ARP/ND), the path
// cache (PathRecords), the multicast manager (MCMemberRecord joins) and the
// SaClient whose MADs they share.
//
// Start-up:
//  1. start(): FullMember join of the broadcast group (nothing else yet).
//  2. Joined: EngineIo::open_qp() with the group's Q_Key gives the QPN of
//     our 20-byte address; link up with MTU = group MTU - 4 (or less if
//     configured); the other groups join; announcements go out (gratuitous
//     ARP per IPv4 address; DAD, then an unsolicited NA, per IPv6 address).
//
// Egress (on_tun_packet(), an IP datagram from the host):
//  1. Malformed: dropped, counted. IGMP/MLD reports: the groups they name
//     are joined (FullMember) or left, and the report itself is sent on.
//     The host's memberships are a set (at most kMaxHostGroups): a report
//     repeated (the kernel sends each change two or three times, and
//     current-state records again) holds one reference, and one leave
//     drops it; reports are taken while the link is down too.
//     NS/NA written by the host: dropped (the engine owns ND; a TUN kernel
//     does none); RS/RA/Redirect get our 24-byte link-layer option.
//  2. Broadcast (255.255.255.255, a subnet broadcast of ours) goes to the
//     broadcast group; multicast to its group's MGID (send-only join if
//     need be; RFC 4391 10 when that fails); unicast to the next hop the
//     caller names (its routing table's gateway) or to the destination.
//  3. Unicast: neighbour cache (ARP request / NS when unresolved, at most 3
//     packets waiting), then path cache (PathRecord, at most 3 frames
//     waiting), then EngineIo::send_datagram().
//
// Ingress (on_datagram(), a UD receive of the link QP):
//  1. Our own multicast copies (our SLID and QPN) dropped; the IPoIB header
//     checked (other EtherTypes dropped, counted).
//  2. ARP: answer requests for our addresses (unicast), learn senders,
//     update entries on gratuitous ARP, detect conflicts with our addresses.
//  3. ND: answer NS for our addresses, learn from options, DAD; RS, RA and
//     Redirect go to the host without the IPoIB option (a TUN has no link
//     layer). Other IP datagrams are written to the TUN.
//  4. An ARP/ND from a peer whose path DLID differs from its SLID re-queries
//     the path.
//
// Events: client reregister / SM change -> rejoin every group; LID change ->
// flush paths, rejoin; port down -> link down, flush; port up -> rejoin,
// link up when the broadcast group answers; P_Key change -> a new QP (new
// QPN) at the next broadcast join, then re-announce. A partition missing
// from the port's P_Key table (a child the SM has not added yet): no joins,
// link down with the reason, until a P_Key change adds it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/counters.h"
#include "common/byte_io.h"
#include "ipoib/arp.h"
#include "ipoib/forwarding.h"
#include "ipoib/frame.h"
#include "ipoib/hw_address.h"
#include "ipoib/link.h"
#include "ipoib/ip_packet.h"
#include "ipoib/mgid.h"
#include "ipoib/multicast.h"
#include "ipoib/nd.h"
#include "ipoib/neighbour_cache.h"
#include "ipoib/path_cache.h"
#include "sa_client/sa_client.h"
#include "transport/port.h"

namespace ipoibd::ipoib {

// An address of ours with its prefix length.
struct InterfaceAddress {
    IpAddress ip;
    std::uint8_t prefix_length = 0;
    bool operator==(const InterfaceAddress&) const = default;
    bool contains(const IpAddress& other) const;  // same family, same prefix
};
std::string format_interface_address(const InterfaceAddress& a);

struct EngineConfig {
    std::uint16_t pkey = ib::kPKeyDefault;
    Scope scope = Scope::link_local;
    std::uint32_t mtu = 0;  // interface MTU; 0: the broadcast group's less 4 (connected: 65520)
    // RFC 4755 connected mode: flag 0x80 in our address, unicast to peers
    // with the flag over RC connections (EngineLink::send_connected), the
    // interface MTU 65520; datagrams longer than the UD link towards other
    // peers answered with ICMP (too_big.h).
    bool connected = false;
    bool link_local_address = true;  // own fe80:: + interface identifier (RFC 4391 8)
    unsigned dad_transmits = 1;      // RFC 4862 DupAddrDetectTransmits; 0: no DAD
    std::chrono::milliseconds dad_retrans{1000};
    NeighbourCache::Config neighbour;
    PathCache::Config path;
    McastManager::Config mcast;
};

struct LinkStatus {
    bool up = false;
    std::uint32_t mtu = 0;  // interface MTU
    std::uint32_t datagram_mtu = 0;  // what the UD link carries (the group's less 4); = mtu in datagram mode
    bool connected = false;          // connected mode on: flag 0x80 in `hw`
    std::uint32_t qpn = 0;
    HwAddress hw;           // our 20-byte address
    LinkParameters params;  // from the broadcast group
    std::uint16_t broadcast_mlid = 0;
};

// Something worth a log line; the daemon maps `kind` to a MESSAGE_ID.
enum class EngineEventKind : std::uint8_t {
    link_up,
    link_down,
    broadcast_join_failed,
    group_joined,
    group_join_failed,
    group_left,
    peer_changed,      // a neighbour's 20-byte address changed (restart, new QPN)
    address_conflict,  // someone else claims one of our addresses
    dad_failed,        // DAD found our tentative IPv6 address in use
    qp_opened,
    qp_open_failed,
    path_failed,
    connection_failed,  // connected mode: an RC connection could not be set up, or broke
};
const char* to_string(EngineEventKind k);
// Field spellings of docs/journal.md: "0x0012", "0x000048".
std::string hex16(std::uint16_t v);
std::string hex_qpn(std::uint32_t qpn);

struct EngineEvent {
    EngineEventKind kind = EngineEventKind::link_up;
    std::string message;
    std::vector<std::pair<std::string, std::string>> fields;  // journald-style KEY, value
};

// What the connected half did with a frame.
struct ConnectedSend {
    enum class Outcome : std::uint8_t {
        use_datagram,  // no connection for this peer (none possible, or it failed lately): use UD
        sent,
        queued,   // waiting for the connection (counted by the link)
        dropped,  // counted by the link
        too_big,  // over what the peer receives: `mtu` is the largest IP datagram it takes
    };
    Outcome outcome = Outcome::use_datagram;
    std::uint32_t mtu = 0;
};

// The actions, in two halves. Calls come from inside the engine's methods,
// one thread.
//
// The fabric half: the link's queue pair (port_link.h implements it on a
// transport::Port; a connected-mode link would add RC beside it).
class EngineLink {
public:
    virtual ~EngineLink() = default;
    // One UD datagram (an IPoIB frame) on the link QP, with the link's Q_Key.
    virtual void send_datagram(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) = 0;
    // (Re)creates the link's UD QP with `qkey` on `pkey`; its QPN, or why not.
    virtual expected<std::uint32_t, std::string> open_qp(std::uint32_t qkey, std::uint16_t pkey) = 0;
    virtual void attach(const ib::Gid& mgid, std::uint16_t mlid) = 0;
    virtual void detach(const ib::Gid& mgid, std::uint16_t mlid) = 0;
    // The connected half (RFC 4755), where the link has one: whether it
    // opens connections to peers (then the interface MTU is 65520) and
    // whether it accepts them (then our address carries flag 0x80: on an
    // HCA, where librdmacm connects but cannot listen, it does not); and a
    // unicast frame for a peer whose address has the flag, on the path
    // resolved for it (`fits_datagram`: it fits the UD link too, so the
    // connected half may hand it back for UD).
    virtual bool connected_connects() const { return false; }
    virtual bool connected_accepts() const { return false; }
    virtual ConnectedSend send_connected(const HwAddress& /*to*/, const PathInfo& /*path*/, bytes /*frame*/,
                                         Clock::time_point /*now*/, bool /*fits_datagram*/) {
        return {};
    }
};

// Who an IP packet written to the host came from: the sender's LID and UD
// QPN (for ICMP the engine makes itself, the neighbour it speaks for). A TUN
// has no use for it; TAP mode writes the sender's synthetic MAC
// (ethernet_link.h).
struct PacketSource {
    std::uint16_t slid = 0;
    std::uint32_t qpn = 0;
};

// The host half: the host presentation, the SA's MAD path, the operator.
class EngineIo {
public:
    virtual ~EngineIo() = default;
    virtual void write_tun(bytes ip_packet, const PacketSource& from) = 0;
    // ARP or ND taught the neighbour cache that `ip` is at `hw`, heard from
    // LID `slid` (TAP mode answers the kernel's pending requests).
    virtual void neighbour_learned(const IpAddress& /*ip*/, const HwAddress& /*hw*/, std::uint16_t /*slid*/) {}
    virtual void send_sa(const sa::SaMad& mad) = 0;
    virtual void link_changed(const LinkStatus& status) = 0;
    virtual void event(const EngineEvent& e) = 0;
};

// A received datagram: the bytes after the GRH slot and who sent it.
struct ReceivedDatagram {
    bytes payload;
    std::uint32_t src_qp = 0;
    std::uint16_t slid = 0;
};

struct EngineCounters {
    // ingress
    std::uint64_t rx_datagrams = 0;
    std::uint64_t rx_own_multicast = 0;
    std::array<std::uint64_t, kFrameErrorCount> rx_frame_errors{};
    std::uint64_t rx_rarp = 0;
    std::uint64_t rx_nonzero_reserved = 0;  // senders breaking "zero on send" (kept)
    std::array<std::uint64_t, kIpPacketErrorCount> rx_ip_errors{};
    std::array<std::uint64_t, kArpErrorCount> rx_arp_errors{};
    std::array<std::uint64_t, kNdErrorCount> rx_nd_errors{};
    std::uint64_t rx_to_tun = 0;
    std::uint64_t rx_drop_link_down = 0;
    std::uint64_t arp_requests_rx = 0;
    std::uint64_t arp_replies_rx = 0;
    std::uint64_t ns_rx = 0;
    std::uint64_t rx_drop_ns_not_ours = 0;  // NS for an address not (or not yet) ours: discarded, nothing learned
    std::uint64_t na_rx = 0;
    // egress
    std::uint64_t tun_packets = 0;
    std::array<std::uint64_t, kIpPacketErrorCount> tun_ip_errors{};
    std::uint64_t tun_drop_link_down = 0;
    std::uint64_t tun_drop_host_nd = 0;     // NS/NA the host wrote: the engine owns ND
    std::uint64_t tun_drop_too_big = 0;     // over the interface MTU
    std::uint64_t tun_drop_no_source = 0;   // no address of ours to solicit from
    std::uint64_t tun_drop_bad_nd = 0;      // host RS/RA/Redirect that could not be rewritten
    std::uint64_t tun_drop_mcast_unavailable = 0;  // RFC 4391 10: no group, no all-routers
    std::uint64_t tun_drop_bad_destination = 0;    // unspecified, loopback
    std::uint64_t tx_too_big = 0;       // over the link to its destination (connected mode): dropped ...
    std::uint64_t icmp_too_big_tx = 0;  // ... and answered with ICMP Fragmentation Needed / Packet Too Big
    std::uint64_t tx_fragmented = 0;    // IPv4 without DF cut into fragments instead
    std::uint64_t tx_connected = 0;     // unicast frames handed to an RC connection
    std::uint64_t tx_unicast = 0;
    std::uint64_t tx_multicast = 0;
    std::uint64_t tx_to_all_routers = 0;
    std::uint64_t arp_requests_tx = 0;
    std::uint64_t arp_replies_tx = 0;
    std::uint64_t gratuitous_arp_tx = 0;
    std::uint64_t ns_tx = 0;
    std::uint64_t na_tx = 0;
    std::uint64_t dad_ns_tx = 0;
    // state changes
    std::uint64_t peer_changes = 0;
    std::uint64_t address_conflicts = 0;
    std::uint64_t dad_conflicts = 0;
    std::uint64_t host_group_joins = 0;   // groups the host newly joined
    std::uint64_t host_group_leaves = 0;  // and left
    std::uint64_t host_groups_over_limit = 0;  // joins refused: kMaxHostGroups, or the group table full
    std::uint64_t link_ups = 0;
    std::uint64_t link_downs = 0;
    std::uint64_t qp_opens = 0;
    std::uint64_t qp_open_failures = 0;
    std::uint64_t port_events = 0;
    std::uint64_t sa_probes = 0;  // Get ClassPortInfo sent to learn whether a quiet SM is alive (probe_sa)
};
void visit(const EngineCounters& c, CounterSink& out);

enum class DadState : std::uint8_t { tentative, preferred, duplicate };
struct AddressView {
    InterfaceAddress address;
    DadState dad = DadState::preferred;  // IPv4: always preferred
    bool implicit = false;               // the link-local the engine adds itself
};

class Engine final : private PathSink, private McastSink {
public:
    // The host's group memberships held at most (IGMP/MLD reports).
    static constexpr std::size_t kMaxHostGroups = 4096;

    Engine(EngineConfig config, EngineLink& link, EngineIo& io, sa::SaClient::Config sa_config = {});
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;
    ~Engine() override;

    // Joins the broadcast group as `port`'s GID 0.
    void start(const transport::PortAttributes& port, Clock::time_point now);
    // Leaves every group (the Deletes go to EngineIo::send_sa at once and
    // are retried by tick() until answered), link down.
    void stop(Clock::time_point now);

    void add_address(const InterfaceAddress& a, Clock::time_point now);
    void remove_address(const InterfaceAddress& a, Clock::time_point now);

    // An IP datagram from the host; `next_hop` is the gateway its route names
    // (nullopt: the destination is on the link).
    void on_tun_packet(bytes packet, std::optional<IpAddress> next_hop, Clock::time_point now);
    // TAP mode (ethernet_link.h): an IP datagram the host addressed to a
    // neighbour's link address itself (its own ARP/ND chose it); group and
    // broadcast destinations go as from on_tun_packet().
    void on_host_unicast(bytes packet, const HwAddress& to, Clock::time_point now);
    // TAP mode: the host asks for `ip`'s link address (its ARP request or
    // NS). A usable neighbour entry answers at once (and counts as in use,
    // as an egress packet would); otherwise resolution starts (nullopt) and
    // EngineIo::neighbour_learned() says when it is known. Nullopt too when
    // the link is down or `ip` is ours.
    std::optional<HwAddress> resolve_for_host(const IpAddress& ip, Clock::time_point now);
    // TAP mode: whether `ip` is an address of this interface.
    bool owns(const IpAddress& ip) const { return is_ours(ip); }
    // 255.255.255.255 or the broadcast address of a subnet of ours.
    bool is_broadcast(const IpAddress& ip) const { return is_broadcast_v4(ip); }
    void on_datagram(const ReceivedDatagram& d, Clock::time_point now);
    // An SA MAD from LID `from_lid` (0: unknown); only the port's SM may
    // answer (SaClient::on_mad).
    void on_sa_mad(bytes mad, Clock::time_point now, std::uint16_t from_lid = 0);
    void on_port_event(transport::PortEvent e, const transport::PortAttributes& port, Clock::time_point now);
    void tick(Clock::time_point now);
    std::optional<Clock::time_point> next_deadline() const;

    // What a configuration reload may change live.
    void reconfigure(const NeighbourCache::Config& neighbour, std::uint8_t send_only_join_state) {
        neighbours_.set_config(neighbour);
        mcast_.set_send_only_join_state(send_only_join_state);
    }
    // Connected mode on or off (reload): paths flushed as the kernel does;
    // with the link up, the new MTU and flags go to the host and the
    // fabric (gratuitous ARP, unsolicited NA).
    void set_connected(bool on, Clock::time_point now);
    // The link's connected half changed what it can do (listening or not).
    void connected_changed(Clock::time_point now);

    // The link learned that the peer at `gone` no longer exists (its QPN
    // refuses connections): the neighbours at that address are resolved
    // again (NeighbourCache::re_resolve).
    void peer_gone(const HwAddress& gone, Clock::time_point now);

    // Data threads (forwarding.h): what forwarding depends on, as a number
    // that moves when any of it changes; the snapshot of it; and what one
    // use of a neighbour does (a data thread used `ip`'s entry after its
    // quiet time: STALE -> DELAY and a probe, an old path re-queried).
    std::uint64_t forwarding_fingerprint() const;
    std::shared_ptr<ForwardingSnapshot> forwarding_snapshot(Clock::time_point now) const;
    void touch_neighbour(const IpAddress& ip, Clock::time_point now);

    // Operator actions (ipoibctl flush).
    void flush_neighbours(Clock::time_point now);
    void flush_paths(Clock::time_point now);

    const LinkStatus& link() const { return link_; }
    std::uint16_t pkey() const { return config_.pkey; }  // the partition this engine serves
    bool stopped() const { return stopped_; }
    std::vector<AddressView> addresses() const;
    const NeighbourCache& neighbours() const { return neighbours_; }
    const PathCache& paths() const { return paths_; }
    const McastManager& multicast() const { return mcast_; }
    const sa::SaClient& sa_client() const { return sa_; }
    const EngineCounters& counters() const { return counters_; }
    // Whether the SA still has work queued (leaves at shutdown).
    bool sa_idle() const { return sa_.outstanding() == 0; }
    // A Get ClassPortInfo to the SA, unless one is on its way: its answer
    // (last_sa_answer) says that the SM, quiet towards this port, is alive
    // (the node's sm-silence check asks for it).
    void probe_sa(Clock::time_point now);
    std::optional<Clock::time_point> last_sa_answer() const { return sa_.last_answer(); }

private:
    struct Address {
        InterfaceAddress address;
        DadState dad = DadState::preferred;
        bool implicit = false;
        unsigned dad_sent = 0;
        Clock::time_point dad_deadline{};
    };

    // PathSink
    void path_ready(const ib::Gid& dgid, const PathInfo& path, std::vector<QueuedFrame> frames) override;
    void path_failed(const ib::Gid& dgid, std::uint16_t sa_status, std::size_t dropped) override;
    // McastSink
    void attach(const ib::Gid& mgid, std::uint16_t mlid) override { link_io_.attach(mgid, mlid); }
    void detach(const ib::Gid& mgid, std::uint16_t mlid) override { link_io_.detach(mgid, mlid); }
    void broadcast_joined(const LinkParameters& link, std::uint16_t mlid) override;
    void join_failed(const ib::Gid& mgid, GroupRole role, std::uint16_t sa_status, unsigned failures,
                     std::chrono::milliseconds retry_in, std::size_t dropped) override;
    void group_joined(const ib::Gid& mgid, GroupRole role, std::uint16_t mlid, std::vector<Packet> frames) override;
    void group_left(const ib::Gid& mgid, GroupRole role) override;

    // engine.cpp: lifecycle
    void set_port(const transport::PortAttributes& port);
    // Our partition is in the port's P_Key table (a child's may not be yet).
    bool pkey_in_table(const transport::PortAttributes& port) const;
    std::optional<std::size_t> pkey_index(const transport::PortAttributes& port) const;
    void link_down(const char* why);
    void announce();
    void drain_sa();
    void emit(EngineEventKind kind, std::string message, std::vector<std::pair<std::string, std::string>> fields);
    std::optional<ib::Gid> group_mgid(const IpAddress& group) const;
    bool want_group(const IpAddress& group, bool join);
    void host_group_change(const GroupChange& change);
    Address* find_address(const IpAddress& ip);
    void dad_tick();

    // engine_tx.cpp: egress
    // The checks every host packet goes through (parsed, link up, MTU, the
    // groups a report names, ND options rewritten); nullopt: dropped, counted.
    std::optional<std::pair<bytes, IpPacketInfo>> accept_host_packet(bytes packet);
    void send_ip(bytes packet, const IpPacketInfo& info, const std::optional<IpAddress>& next_hop);
    void send_ip_unicast(bytes packet, EtherType type, const IpAddress& next_hop);
    void send_to_neighbour(const HwAddress& to, EtherType type, bytes packet);
    void send_frame_unicast(const HwAddress& to, bytes frame);
    void deliver_unicast(const HwAddress& to, const PathInfo& path, bytes frame);
    void too_big(bytes frame, std::uint32_t mtu, const HwAddress& to, const PathInfo& path);
    bool connected_active() const { return config_.connected && link_io_.connected_connects(); }
    void apply_link_parameters();
    void send_multicast(const ib::Gid& mgid, bytes frame, bool wider_than_link_local, IpFamily family);
    void send_broadcast(EtherType type, bytes packet);
    bytes build_frame(EtherType type, bytes packet);
    void process(NeighbourActions&& actions);
    void solicit(const SolicitAction& s);
    void send_arp(const ArpPacket& p, const std::optional<HwAddress>& unicast_to);
    void send_nd(bytes ipv6_packet, const Ipv6Address& destination, const std::optional<HwAddress>& unicast_to);
    std::optional<Ipv4Address> source_v4_for(const IpAddress& target) const;
    std::optional<Ipv6Address> source_v6_for(const IpAddress& target) const;
    bool is_broadcast_v4(const IpAddress& dst) const;

    // engine_rx.cpp: ingress
    void on_arp(bytes payload, std::uint16_t slid);
    void on_ipv6(bytes packet, const IpPacketInfo& info, std::uint16_t slid);
    void on_neighbor_solicitation(const NdMessage& m, std::uint16_t slid);
    void on_neighbor_advertisement(const NdMessage& m, std::uint16_t slid);
    void learn(const IpAddress& ip, const HwAddress& hw, LearnKind kind, std::uint16_t slid);
    // The neighbour cache took `hw` for `ip` (it held `before`), heard from
    // `slid`: peer_changed when the endpoint changed, the path re-queried
    // when it came from another LID, the host told.
    void heard(const IpAddress& ip, const std::optional<NeighbourEntryView>& before, const HwAddress& hw,
               std::uint16_t slid);
    bool is_ours(const IpAddress& ip) const;
    void write_tun(bytes packet);

    EngineConfig config_;
    EngineLink& link_io_;
    EngineIo& io_;
    Clock::time_point now_{};
    sa::SaClient sa_;
    sa::SaClient::Handle sa_probe_;
    NeighbourCache neighbours_;
    PathCache paths_;
    McastManager mcast_;

    transport::PortAttributes port_;
    LinkStatus link_;
    bool started_ = false;
    bool stopped_ = false;
    bool qp_stale_ = true;  // open a new QP at the next broadcast join
    std::uint32_t qp_qkey_ = 0;
    std::vector<Address> addresses_;
    std::set<IpAddress> host_groups_;    // groups the host's IGMP/MLD reports joined
    std::vector<std::uint8_t> tx_;       // frame under construction
    std::vector<std::uint8_t> scratch_;  // rewritten ND packets
    std::vector<std::uint8_t> icmp_;     // ICMP too-big answers
    PacketSource rx_source_;             // the sender of the datagram being handled
    // While a reply to a fabric packet goes out (ARP reply, solicited NA):
    // the LID it came from, which the path cache limits (path_cache.h).
    std::uint16_t reply_origin_ = 0;
    struct ReplyOrigin {
        ReplyOrigin(Engine& e, std::uint16_t slid) : engine(e) { engine.reply_origin_ = slid; }
        ~ReplyOrigin() { engine.reply_origin_ = 0; }
        ReplyOrigin(const ReplyOrigin&) = delete;
        ReplyOrigin& operator=(const ReplyOrigin&) = delete;
        Engine& engine;
    };
    EngineCounters counters_;
};

}  // namespace ipoibd::ipoib
