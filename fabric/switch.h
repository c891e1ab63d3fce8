// The soft fabric's switch, sans-I/O: ports are UDP peers, packets are whole
// IBA packets.
//
// 1. A 6-byte link packet from a new UDP peer plugs it into the lowest free
//    switch port: the link is up, the switch answers with link packets on
//    every tick, and the SM is told (poll_link_events). A peer silent for
//    link_timeout is unplugged: link down, its port freed. A port is its
//    UDP address: a datagram from any other address is not that port's.
//    One sender cannot take the table (admission, below).
// 2. Data packets get the link-layer checks of a switch (length, LVer,
//    PktLen, VCRC); the ICRC is the destination's business.
// 3. Unicast goes out of LinearForwardingTable[DLID]; multicast out of every
//    member port of MulticastForwardingTable[MLID], the ingress port
//    included (the soft HCA does not loop multicast back itself).
// 4. Packets for the switch itself (its LID, or the permissive LID on QP0)
//    go to the management port 0: directed-route SMPs follow the hop rules
//    of IBA 14.2.2 (smp_dr.h); SMP requests for this switch go to its own
//    SMA (switch_sma.cpp: NodeInfo, SwitchInfo, PortInfo, P_KeyTable, LFT,
//    MFT: the forwarding tables are programmed only through it); SMInfo,
//    traps, responses and QP1 go to the local agents (SM, SA) through
//    ManagementSink.
// 5. Only the fabric manages a port: a real HCA sends with the LID and the
//    P_Keys its SM gave it, a soft port could write anything. So every
//    packet but an SMP (VL15) passes only from and to ports the SM made
//    ACTIVE, with an SLID the forwarding table routes to its ingress port,
//    and, where partition enforcement is on, with a P_Key of the ingress
//    port's table claiming no more than the membership the table gives
//    (a limited member cannot write the full bit). An SMP that goes by
//    LID (LID-routed, or directed-route on a LID-routed part) carries the
//    port's own LID or the permissive one: its answer, and a CA's Trap
//    256, go to or name that LID. Cut-through routes
//    (route_hint.h) are granted only between ACTIVE ports, and the permit
//    names the LIDs and P_Keys the destination may take from the requester.
// 6. Inter-switch links (Config::links): a port cabled to another switch.
//    It is the ISL's alone: never given to a host, plugged only by link
//    packets from the configured peer, and trained from both ends (link
//    packets go to the peer while the link is down, so either switch may
//    start first). Packets from an ISL have had their source checked where
//    they entered the fabric (5: the SLID of a host port's packets), so
//    their SLID is not checked again; everything else holds (the SM makes
//    the ISL ACTIVE, partition enforcement, faults, PMA counters). A
//    multicast copy never goes back out of the ISL it came in on. Without
//    a fabric key, the peer is only the UDP address its datagrams claim.
// Every drop is counted by SwitchDrop.
//
// Admission of new ports, per source host (IP address, any UDP port): at
// most admission_burst new ports at once, then admission_rate a second; at
// most max_pending_per_host ports that the SM has not made ACTIVE. When the
// table is full, a newcomer takes the place of the longest-plugged port
// that is not ACTIVE and has had reclaim_after to become so (the SM makes a
// real port ACTIVE in well under a second); an ACTIVE port keeps its place.
#pragma once

#include "common/counters.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/socket_address.h"
#include "fabric/faults.h"
#include "transport/pma.h"
#include "transport/wire/packet.h"
#include "transport/wire/smp.h"

namespace ipoibd::fabric {

using Clock = std::chrono::steady_clock;

enum class SwitchDrop : std::uint8_t {
    bad_link_packet,     // 6 bytes with a bad LPCRC or Op
    unknown_peer,        // data from a UDP peer that never sent a link packet
    ports_full,          // a new peer and no free switch port
    link_check,          // failed the switch's link checks (see link_drops)
    no_route,            // unicast DLID with no forwarding entry
    egress_down,         // forwarding entry points at a port without a link
    no_multicast_members,
    management_malformed,  // packet for the switch that fails the full parse
    sma_dropped,         // an SMP request the switch's SMA does not answer (a response, a TrapRepress, bad M_Key)
    management_no_agent,   // nobody on port 0 serves that QP
    dr_discarded,        // the directed-route hop rules refused it
    bad_route_request,   // a cut-through route request that is malformed or for no route
    route_refused,       // a route request between ports not both ACTIVE, or that share no partition
    admission_rate,      // a new port from a host over its admission rate
    admission_pending,   // a new port from a host with max_pending_per_host ports not yet ACTIVE
    pkey_inbound,        // partition enforcement: the ingress port's P_KeyTable lacks the packet's P_Key
    pkey_outbound,       // partition enforcement: an egress port's P_KeyTable lacks it (that copy dropped)
    port_not_active,     // a packet other than an SMP from or to a port the SM has not made ACTIVE
    slid_not_port,       // a packet (an SMP by LID: unless permissive) whose SLID the forwarding table does not route to its ingress port
    count_
};
inline constexpr std::size_t kSwitchDropCount = static_cast<std::size_t>(SwitchDrop::count_);
const char* to_string(SwitchDrop d);

struct SwitchCounters {
    std::array<std::uint64_t, kSwitchDropCount> dropped{};
    std::array<std::uint64_t, ib::kDropReasonCount> link_drops{};  // by reason, within link_check
    std::uint64_t forwarded = 0;       // packets sent out of a port
    std::uint64_t route_hints = 0;     // cut-through hints sent to ports
    std::uint64_t route_withdrawals = 0;  // hints taken back: the LID moved or went
    std::uint64_t to_management = 0;   // packets handed to port 0
    std::uint64_t link_packets_in = 0;
    std::uint64_t link_packets_out = 0;
    std::uint64_t permits = 0;          // cut-through permits sent to destination ports
    std::uint64_t permit_withdrawals = 0;  // permits taken back: the requester's state or partitions changed
    std::uint64_t ports_reclaimed = 0;  // ports not ACTIVE unplugged to make room for a newcomer
    std::uint64_t sma_responses = 0;    // GetResps of the switch's SMA
    std::uint64_t sma_error_responses = 0;  // of those, with a non-zero status
    std::uint64_t traps_sent = 0;           // Trap 128 (a link changed) to the master SM
    std::uint64_t dropped_for(SwitchDrop d) const { return dropped[static_cast<std::size_t>(d)]; }
};
// As "forwarded", "dropped_<reason>", "link_check_<reason>", ...
void visit(const SwitchCounters& c, CounterSink& out);

struct LinkEvent {
    std::uint8_t port = 0;
    bool up = false;
};

// Where the switch's output goes.
class SwitchOutput {
public:
    virtual ~SwitchOutput() = default;
    // A datagram for the peer of a switch port.
    virtual void send(const SocketAddress& peer, bytes datagram) = 0;
};

// The switch's own port 0: the SM and the SA.
class ManagementSink {
public:
    virtual ~ManagementSink() = default;
    // An SMP the hop rules delivered to this node (D 1: a response to the
    // SM), or a LID-routed SMP to the switch LID.
    // `slid` is the packet's LRH SLID (where a LID-routed request's answer goes).
    // Returns false when no agent takes it (counted as management_no_agent).
    virtual bool on_smp(const ib::Smp& smp, std::uint8_t in_port, std::uint16_t slid) = 0;
    // Any other packet to the switch LID (QP1: SA MADs). Returns false when
    // no agent takes it.
    virtual bool on_packet(const ib::Packet& packet, bytes wire, std::uint8_t in_port) = 0;
};

// An inter-switch link: a switch port cabled to a port of another switch,
// whose link packets and data come from `peer` (another ibfabricd over
// UDP, or another switch of this process).
struct IslConfig {
    std::uint8_t port = 0;
    SocketAddress peer;
};

class Switch {
public:
    static constexpr std::uint8_t kMaxPorts = 254;  // NumPorts is 8 bits; 255 is reserved

    struct Config {
        std::uint16_t lid = 1;  // the switch's (management port's) LID
        // The switch node's GUID (its port 0's too) and NodeDescription,
        // as its subnet management agent reports them.
        std::uint64_t guid = 0x0200'00ff'fe00'0001ULL;
        std::string description = "ibfabricd soft switch";
        std::uint8_t num_ports = 64;
        std::chrono::milliseconds link_timeout{1000};
        // Cut-through (transport/soft/route_hint.h): tell the ingress port
        // of a forwarded unicast packet where its DLID's port listens.
        bool cut_through = true;
        std::chrono::milliseconds hint_ttl{2000};
        // Admission of new ports per source host (above).
        std::uint32_t admission_burst = 16;
        double admission_rate = 2.0;  // new ports a second, after the burst
        std::uint32_t max_pending_per_host = 16;
        std::chrono::milliseconds reclaim_after{5000};
        // Faults injected on purpose (faults.h); none by default. With any,
        // no route hints: every packet passes the switch.
        std::vector<FaultRule> faults;
        std::uint64_t fault_seed = 1;
        // Inter-switch links (header comment, 6).
        std::vector<IslConfig> links;
    };
    // Whether `config` can run: every ISL on a port 1..num_ports, no port
    // or peer twice. The reason, or nullopt.
    static std::optional<std::string> config_error(const Config& config);
    static constexpr std::size_t kMaxAdmissionHosts = 4096;

    Switch(const Config& config, SwitchOutput& output);

    void set_management(ManagementSink* sink) { management_ = sink; }
    // Sees every data packet that enters the switch (from_management false)
    // and every packet port 0 originates (true): the capture hook.
    using Tap = std::function<void(bytes packet, bool from_management)>;
    void set_tap(Tap tap) { tap_ = std::move(tap); }
    // Port 0's LID: the configured one until an SM sets another.
    std::uint16_t lid() const { return sma_ports_.empty() ? config_.lid : sma_ports_[0].info.lid; }
    std::uint64_t guid() const { return config_.guid; }
    const std::string& description() const { return config_.description; }
    // What the SMA reports (the SA's topology records): NodeInfo (as read
    // from port 0) and the PortInfo of a port, 0..num_ports().
    ib::NodeInfo node_info() const { return sma_node_info(0); }
    ib::PortInfo port_info(std::uint8_t port) const { return sma_port_info(port); }
    // A port's counters for the switch's performance management agent
    // (transport/pma.h): ports 1..num_ports(); nullopt for others.
    std::optional<transport::PmaPortCounters> pma_counters(std::uint8_t port) const;
    // Changes when a new link comes up on the port, whose counters start
    // from 0 (transport::Pma::Selected::generation).
    std::uint64_t pma_generation(std::uint8_t port) const {
        return port < ports_.size() ? ports_[port].link_number : 0;
    }
    // Whether the SM on this switch's port 0 runs (PortInfo IsSM of port 0).
    void set_sm_present(bool present);
    std::uint8_t num_ports() const { return config_.num_ports; }

    // One datagram received from `from`.
    void on_datagram(const SocketAddress& from, bytes datagram, Clock::time_point now);
    // Link packets to every plugged port; unplugs the silent ones.
    void tick(Clock::time_point now);
    std::size_t poll_link_events(std::span<LinkEvent> out);

    // Sends a packet built by the management port (SM, SA): a DR SMP out of
    // `port` (directed part), or a LID-routed packet by the forwarding table
    // when `port` is 0.
    void send_from_management(bytes packet, std::uint8_t port = 0);

    // The switch's subnet management agent (port 0; IBA 14.2.5, switch_sma.cpp):
    // answers an SMP request addressed to this switch, as the SMA of a real
    // switch does, and returns the GetResp (not yet turned around for a
    // directed route); nullopt when nothing is answered (counted). in_port:
    // where it came in (0: from this switch's own SM). Served: NodeInfo,
    // NodeDescription, SwitchInfo (Get, Set), PortInfo of every port (Get,
    // Set), P_KeyTable per port (Get, Set), LinearForwardingTable and
    // MulticastForwardingTable (Get, Set: they are the tables the switch
    // forwards by).
    std::optional<ib::Smp> sma_answer(const ib::Smp& request, std::uint8_t in_port);
    // A directed-route SMP of HopCount 0 from this switch's own SM (port 0),
    // past the requester's hop rule: answered in place, the GetResp returned.
    std::optional<ib::Smp> local_smp(ib::Smp smp);
    // Forwarding tables, programmed through the SMA (sma_answer); these are
    // what a Set LinearForwardingTable / MulticastForwardingTable block does
    // to one entry.
    void set_unicast_route(std::uint16_t lid, std::uint8_t port);
    void clear_unicast_route(std::uint16_t lid);
    std::optional<std::uint8_t> unicast_route(std::uint16_t lid) const;
    void set_multicast_ports(std::uint16_t mlid, std::set<std::uint8_t> ports);
    // A group every plugged port belongs to (predefined groups before the SA).
    void set_multicast_flood(std::uint16_t mlid, bool flood);

    // The SM tells the switch which ports it made ACTIVE (admission).
    void set_port_active(std::uint8_t port, bool active);

    bool port_up(std::uint8_t port) const;
    // Whether `port` is an inter-switch link (plugged or not).
    bool is_isl(std::uint8_t port) const { return port < isl_peers_.size() && isl_peers_[port].has_value(); }
    std::optional<SocketAddress> peer_of(std::uint8_t port) const;
    const SwitchCounters& counters() const { return counters_; }
    const FaultInjector& faults() const { return faults_; }

private:
    struct PortSlot {
        bool plugged = false;
        SocketAddress peer;
        Clock::time_point last_heard{};
        Clock::time_point plugged_at{};
        std::uint64_t link_number = 0;  // which link of the switch's life this is: its PMA's generation
        bool active = false;  // the SM made it ACTIVE
        std::uint64_t rx_packets = 0;
        std::uint64_t tx_packets = 0;
        // For the switch's PMA: IBA packets in (past the link checks) and
        // their bytes, bytes out, link-check failures, partition drops.
        std::uint64_t rx_iba_packets = 0;
        std::uint64_t rx_bytes = 0;
        std::uint64_t tx_bytes = 0;
        std::uint64_t rx_errors = 0;
        std::uint64_t rx_pkey_drops = 0;
        std::uint64_t tx_pkey_drops = 0;
    };
    struct Admission {
        double tokens = 0;
        Clock::time_point refilled{};
    };

    // What the SMA keeps for each port (index = port number, 0 the
    // management port): the PortInfo fields an SM sets, and the P_Keys.
    struct SmaPort {
        ib::PortInfo info;
        std::vector<std::uint16_t> p_keys;  // kPartitionCap entries
    };
    static constexpr std::size_t kPartitionCap = 32;
    void init_sma();
    ib::NodeInfo sma_node_info(std::uint8_t in_port) const;
    ib::SwitchInfo sma_switch_info() const;
    ib::PortInfo sma_port_info(std::uint8_t port) const;
    std::uint16_t sma_get(const ib::Smp& request, ib::SmpData& data, std::uint8_t in_port) const;
    std::uint16_t sma_set(const ib::Smp& request, ib::SmpData& data, std::uint8_t in_port);
    std::uint16_t set_port_info(std::uint8_t port, const ib::PortInfo& requested);
    void send_sma_reply(ib::Smp reply, const ib::Packet& request);
    // Partition enforcement (IBA 10.9.2): may a packet with this P_Key pass
    // `port` (its P_KeyTable, as the SM set it)? Inbound, the packet may
    // not claim full membership where the table gives a limited one.
    bool pkey_allowed(std::uint8_t port, std::uint16_t pkey, bool inbound) const;
    bool enforcing(std::uint8_t port, bool inbound) const {
        const ib::PortInfo& pi = sma_ports_[port].info;
        return inbound ? pi.partition_enforcement_inbound : pi.partition_enforcement_outbound;
    }
    std::vector<SmaPort> sma_ports_;
    ib::SwitchInfo switch_info_;  // the settable fields; the rest computed
    bool port_state_change_ = false;
    // A link came up, went down or retrained: SwitchInfo PortStateChange,
    // and Trap 128 (send_link_state_trap) now, or kTrapInterval after the
    // last one.
    void port_state_changed();
    void send_link_state_trap();
    static constexpr std::chrono::milliseconds kTrapInterval{100};
    bool trap_pending_ = false;
    std::optional<Clock::time_point> last_trap_;
    std::uint64_t next_trap_tid_ = 1;

    std::optional<std::uint8_t> port_of(const SocketAddress& peer) const;
    // The ISL whose configured peer is `peer`, plugged or not.
    std::optional<std::uint8_t> isl_of(const SocketAddress& peer) const;
    void plug(std::uint8_t port, const SocketAddress& from, Clock::time_point now);
    // A switch port for a new peer, or nullopt (counted).
    std::optional<std::uint8_t> admit(const SocketAddress& from, Clock::time_point now);
    void answer_route_request(std::uint8_t in_port, std::uint8_t out_port, std::uint16_t dlid, std::uint64_t nonce,
                              Clock::time_point now);
    void on_link_packet(const SocketAddress& from, bytes datagram, Clock::time_point now);
    // `now` unset: a management packet (no cut-through hint).
    void forward(bytes datagram, const ib::Lrh& lrh, std::uint8_t in_port, Clock::time_point now = {});
    // The P_Keys (with the ingress port's membership) a packet from
    // `in_port` to `out_port` may carry past this switch's partition
    // enforcement; nullopt: any (neither port enforces).
    std::optional<std::vector<std::uint16_t>> cut_through_keys(std::uint8_t in_port, std::uint8_t out_port) const;
    void maybe_send_hint(std::uint8_t in_port, std::uint8_t out_port, std::uint16_t dlid, Clock::time_point now);
    void send_hint(std::uint8_t in_port, std::uint8_t out_port, std::uint16_t dlid, std::uint64_t nonce);
    // The LIDs the forwarding table routes to `port`: base LID and LMC.
    std::optional<std::pair<std::uint16_t, std::uint8_t>> lids_of(std::uint8_t port) const;
    // The forwarding table routes `slid` to `port`: the SM gave the port that LID.
    bool slid_routed_to(std::uint16_t slid, std::uint8_t port) const;
    void reset_cut_through(std::uint8_t port);
    void withdraw_hints(std::uint16_t lid);
    // Last hint sent to (ingress port, DLID).
    std::map<std::pair<std::uint8_t, std::uint16_t>, Clock::time_point> hints_sent_;
    void to_management(bytes datagram, std::uint8_t in_port);
    void handle_dr_smp(ib::Smp smp, const ib::Packet& pkt, std::uint8_t in_port);
    void send_to_port(std::uint8_t port, bytes datagram);
    void transmit(std::uint8_t port, bytes datagram);  // past the fault injector
    bool hints_allowed() const { return config_.cut_through && !tap_ && !faults_.active(); }
    void send_link_packet(std::uint8_t port);
    void send_link_packet_to(const SocketAddress& peer);
    void unplug(std::uint8_t port);
    void count(SwitchDrop d) { ++counters_.dropped[static_cast<std::size_t>(d)]; }

    Config config_;
    SwitchOutput& output_;
    ManagementSink* management_ = nullptr;
    Tap tap_;
    std::vector<PortSlot> ports_;  // index = port number; 0 unused here
    std::vector<std::optional<SocketAddress>> isl_peers_;  // index = port number: the ISL's peer
    std::uint64_t links_ = 0;      // links that came up: the last PortSlot::link_number
    std::map<std::string, Admission> admission_;  // by source host; at most kMaxAdmissionHosts
    std::map<std::uint16_t, std::uint8_t> lft_;
    std::map<std::uint16_t, std::set<std::uint8_t>> mft_;
    std::set<std::uint16_t> flooded_;
    std::vector<LinkEvent> link_events_;
    SwitchCounters counters_;
    FaultInjector faults_;
    Clock::time_point now_{};  // of the last datagram or tick: the fault injector's clock
};

}  // namespace ipoibd::fabric
