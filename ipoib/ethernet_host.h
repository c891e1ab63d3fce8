// TAP mode: the Ethernet face of an IPoIB interface (iPXE's and eIPoIB's
// model). The kernel behind a TAP device speaks Ethernet and resolves its
// neighbours itself; the fabric speaks IPoIB with 20-byte addresses. This
// translates between the two, sans-I/O, beside the engine (engine.h) whose
// neighbour cache stays the one source of truth:
//
// From the host (on_host_frame):
//  1. Ethernet header parsed (truncated, VLAN-tagged and 802.3-length frames
//     dropped by reason); a source MAC other than the TAP's own is forged
//     (nothing else may speak from this host: a bridge's other ports cannot
//     be reached over IPoIB) and dropped; EtherTypes other than IPv4, IPv6
//     and ARP dropped.
//  2. ARP (RFC 826 for Ethernet; foreign hardware types dropped by reason):
//     a request for a remote address asks the engine (resolve_for_host):
//     known -> an ARP reply with the neighbour's synthetic MAC at once;
//     unknown -> the engine sends IPoIB ARP, and the reply to the kernel
//     goes when neighbour_learned() says (bounded, expiring). The kernel's
//     announcements (gratuitous ARP) and its replies are dropped (the engine
//     announces our addresses on the fabric); an RFC 5227 probe for an
//     address a fabric neighbour holds is answered for it (the conflict is
//     real), else dropped.
//  3. IPv6 NS (the kernel's address resolution and reachability probes):
//     as ARP, answered with an NA carrying the synthetic MAC (a 6-byte
//     target link-layer option, RFC 2464 8); a DAD probe (source ::) for
//     an address a neighbour holds is answered to ff02::1. NAs the kernel
//     writes are dropped (the engine owns ND on the fabric). Other ND (RS,
//     RA, Redirect) goes to the engine, which rewrites its link-layer option.
//  4. IP to a group or broadcast MAC: to the engine as from a TUN (the IP
//     destination picks the MGID); to a synthetic MAC: to that neighbour's
//     20-byte address (on_host_unicast); to an unknown MAC: dropped.
//
// A port's MAC keeps its 20-byte address and LID unless the port itself
// (its LID, as the fabric says, or the SA's LID for its GID) says
// otherwise (mac_for; counted address_not_vouched).
//
// To the host (to_host, from EngineIo::write_tun): an Ethernet header with
// the TAP's MAC (or the group / broadcast MAC the IP destination maps to)
// and the sender's synthetic MAC, found by its LID and QPN; a sender with
// no entry (it never spoke ARP/ND with us) gets 06:LL:LL:QQ:QQ:QQ (locally
// administered, from its LID and QPN; counted).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/counters.h"
#include "common/ethernet.h"
#include "ipoib/engine.h"
#include "ipoib/mac_table.h"

namespace ipoibd::ipoib {

// Where the frames for the host go (the TAP port).
class EthernetHostIo {
public:
    virtual ~EthernetHostIo() = default;
    virtual void write_frame(const EthernetHeader& header, bytes payload) = 0;
};

enum class HostFrameDrop : std::uint8_t {
    forged_source,     // a source MAC (or ARP sender) other than the TAP's
    other_ether_type,  // not IPv4, IPv6 or ARP
    unknown_mac,       // unicast to a MAC that stands for nobody (aged out, or never ours)
    bad_nd,            // an NS that does not parse (checksum, hop limit, length)
    host_na,           // an NA the kernel wrote: the engine owns ND on the fabric
    host_arp_reply,    // an ARP reply the kernel wrote: nobody asked it
    announcement,      // the kernel's gratuitous ARP: the engine announces on the fabric
    unanswered_probe,  // an RFC 5227 / DAD probe for an address nobody on the fabric holds
    own_address,       // ARP/NS for an address of this interface
    pending_full,      // too many resolutions waiting: the kernel will ask again
    count_
};
inline constexpr std::size_t kHostFrameDropCount = static_cast<std::size_t>(HostFrameDrop::count_);
const char* to_string(HostFrameDrop d);

struct EthernetHostCounters {
    std::uint64_t frames_in = 0;
    std::array<std::uint64_t, kEthernetErrorCount> frame_errors{};
    std::array<std::uint64_t, kEthernetArpErrorCount> arp_errors{};
    std::array<std::uint64_t, kHostFrameDropCount> drops{};
    std::uint64_t arp_requests = 0;    // the kernel's, for remote addresses
    std::uint64_t ns_requests = 0;
    std::uint64_t answered_at_once = 0;  // from the neighbour cache
    std::uint64_t answered_later = 0;    // after the engine resolved the address
    std::uint64_t unresolved = 0;        // waited pending_for, nothing learned
    std::uint64_t probes_answered = 0;   // RFC 5227 / DAD probes for a neighbour's address
    std::uint64_t frames_out = 0;
    std::uint64_t unknown_source = 0;    // written with the LID/QPN MAC
    std::uint64_t address_not_vouched = 0;  // a known port's GID named from another LID: its MAC kept its address
};
void visit(const EthernetHostCounters& c, CounterSink& out);

class EthernetHost {
public:
    using Clock = std::chrono::steady_clock;
    struct Config {
        MacTable::Config table;
        std::size_t max_pending = 256;             // the kernel's questions waiting for the fabric
        std::chrono::milliseconds pending_for{3000};  // the kernel asks 3 times, 1 s apart
        std::chrono::milliseconds prune_every{1000};
    };

    // `own`: the TAP device's MAC.
    EthernetHost(Config config, const MacAddress& own, Engine& engine, EthernetHostIo& io);

    void on_host_frame(bytes frame, Clock::time_point now);
    void to_host(bytes ip_packet, const PacketSource& from);
    void neighbour_learned(const IpAddress& ip, const HwAddress& hw, std::uint16_t slid, Clock::time_point now);
    void tick(Clock::time_point now);
    std::optional<Clock::time_point> next_deadline() const;
    // The link went down or the port changed: questions dropped, the table
    // kept (MACs stay stable; entries age out with the neighbours).
    void flush();

    const MacAddress& mac() const { return own_; }
    const MacTable& table() const { return table_; }
    const EthernetHostCounters& counters() const { return counters_; }
    std::size_t pending() const { return pending_.size(); }

private:
    struct Pending {
        IpAddress requester;  // the kernel's address it asked from (ARP spa, NS source)
        Clock::time_point expires{};
    };

    void drop(HostFrameDrop why) { ++counters_.drops[static_cast<std::size_t>(why)]; }
    void on_arp(bytes payload, Clock::time_point now);
    void on_ns(bytes packet, Clock::time_point now);
    // The kernel asked for `target` from `requester`: answer or wait.
    void ask(const IpAddress& target, const IpAddress& requester, Clock::time_point now);
    void answer(const IpAddress& target, const IpAddress& requester, const MacAddress& mac, bool dad);
    // The MAC standing for `hw`, learned from a datagram from `slid` (0:
    // from the neighbour cache, no datagram at hand). A port's entry
    // changes its address or LID only on the fabric's word (vouches_for).
    std::optional<MacAddress> mac_for(const HwAddress& hw, std::uint16_t slid, Clock::time_point now);
    bool vouches_for(const MacEntryView& held, const HwAddress& hw, std::uint16_t slid) const;
    // A neighbour holds `ip` (usable entry): its MAC, without starting resolution.
    std::optional<MacAddress> known_mac(const IpAddress& ip, Clock::time_point now);

    Config config_;
    MacAddress own_;
    Engine& engine_;
    EthernetHostIo& io_;
    MacTable table_;
    std::map<IpAddress, Pending> pending_;
    Clock::time_point next_prune_{};
    std::vector<std::uint8_t> out_;  // ARP replies and NAs under construction
    EthernetHostCounters counters_;
};

}  // namespace ipoibd::ipoib
