// ipoibd's configuration as the rest of the program sees it: one plain struct
// of typed values. config/load.h fills it from /etc/ipoibd/<instance>.conf
// and the command line; Boost.Program_options is used inside config/load.cpp
// only, and no Boost type leaves config/ (DESIGN.md, "config/").
//
// Each member's initializer is the default of its key, except the two that
// depend on the instance name ([interface] name, [daemon] control-socket),
// which default_config() fills in. ipoibd.conf(5) (man/ipoibd.conf.5)
// documents every key; describe() prints them all as a valid INI file.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ip_address.h"
#include "common/socket_address.h"

namespace ipoibd::config {

inline constexpr std::string_view kConfigDirectory = "/etc/ipoibd";  // <instance>.conf
inline constexpr std::string_view kRunDirectory = "/run/ipoibd";     // <instance>.sock
// ibfabricd's default --listen port (fabric/ibfabricd.cpp). Never 4791: that
// is RoCEv2's, and the soft fabric is not RoCE framing.
inline constexpr std::uint16_t kFabricUdpPort = 18516;
inline constexpr std::uint16_t kRoceV2UdpPort = 4791;

enum class Transport : std::uint8_t {
    automatic,  // "auto": verbs when the host has an HCA, else soft
    soft,       // the soft fabric over UDP (ibfabricd, or the embedded one)
    verbs,      // a real HCA through libibverbs and libibumad
};

enum class InterfaceMode : std::uint8_t {
    tun,  // IP packets; ipoibd resolves neighbours itself
    tap,  // Ethernet frames; the kernel resolves neighbours (synthetic MACs, ipoib/ethernet_host.h)
};

// syslog's names, most verbose first.
enum class LogLevel : std::uint8_t { debug, info, notice, warning, error };

// The IPoIB multicast scope of every MGID the interface forms (RFC 4391 4):
// the scope nibble's value.
enum class MulticastScope : std::uint8_t {
    link_local = 0x2,
    site_local = 0x5,
    organization_local = 0x8,
    global = 0xE,
};

// The JoinState ipoibd asks for when it sends to a group it has not joined
// (IBA 15.2.5.17, MCMemberRecord JoinState bits).
enum class SendOnlyJoin : std::uint8_t {
    send_only_full_member,  // SendOnlyFullMember, as Linux
    send_only_non_member,   // SendOnlyNonMember
    non_member,             // NonMember
};

// "198.19.0.0/24 via 198.18.0.2", or "198.19.0.0/24" for an on-link route.
struct Route {
    IpPrefix destination;              // host bits are zero
    std::optional<IpAddress> gateway;  // same family; nullopt: on-link
    bool operator==(const Route&) const = default;
};

SocketAddress default_fabric_address();   // 127.0.0.1:18516
SocketAddress default_embedded_listen();  // 0.0.0.0:18516, as ibfabricd

// [fabric]: how this daemon reaches InfiniBand.
struct FabricSection {
    Transport transport = Transport::automatic;
    std::string device;                            // verbs: HCA name; empty = the first HCA
    unsigned port = 1;                             // verbs: HCA port number, 1..254
    SocketAddress address = default_fabric_address();  // soft: where ibfabricd listens
    std::optional<SocketAddress> bind;             // soft: this port's own UDP address; none: any, a free port
    std::string key_file;                          // soft: the fabric key file; empty: none
    std::chrono::milliseconds sm_silence{35'000};  // soft: warn when the SM has not swept the port this long; 0 = never
    std::uint64_t port_guid = 0;                   // soft: 0 = stable GUID from host and instance
    bool embedded = false;                         // host the switch, SM and SA in this process
    SocketAddress embedded_listen = default_embedded_listen();
    std::string embedded_partitions;  // the embedded fabric's partitions file; empty: the default partition only
    std::uint16_t pkey = 0xffff;                   // the default partition, full member
    bool operator==(const FabricSection&) const = default;
};

// [interface]: the TUN device and what the kernel is told about it.
struct InterfaceSection {
    std::string name;  // default: the instance name
    InterfaceMode mode = InterfaceMode::tun;
    unsigned mtu = 0;  // 0: the broadcast group's IB MTU - 4 (connected mode: 65520)
    bool connected_mode = false;  // RFC 4755 (the kernel's sysfs `mode`: datagram or connected)
    std::chrono::milliseconds connected_idle{60'000};  // an unused connection of ours is closed after this, a stuck one taken down
    bool connected_datagram_when_idle = true;  // small packets over UD while their connection is idle
    std::vector<IpPrefix> addresses;
    std::vector<Route> routes;
    bool operator==(const InterfaceSection&) const = default;
};

// [child NAME]: a P_Key child interface (the kernel's `ip link add link ib0
// name ib0.8001 type ipoib pkey 0x8001`) served by this daemon on the same
// port, with its own UD QP, engine, host device and broadcast group. The
// [multicast], [neighbour] and [queues] sections apply to it too.
struct ChildSection {
    std::string name;        // "ib0.8001": the device's name
    std::uint16_t pkey = 0;  // required; 0: not given
    InterfaceMode mode = InterfaceMode::tun;
    // No mode line: `mode` is [interface] mode, and follows it (which
    // changes at a restart, not at a reload).
    bool mode_from_parent = false;
    unsigned mtu = 0;
    bool connected_mode = false;
    std::vector<IpPrefix> addresses;
    std::vector<Route> routes;
    bool operator==(const ChildSection&) const = default;
};

// [multicast]
struct MulticastSection {
    SendOnlyJoin send_only_join = SendOnlyJoin::send_only_full_member;
    MulticastScope scope = MulticastScope::link_local;  // of every IPoIB MGID
    std::size_t max_groups = 1024;
    bool operator==(const MulticastSection&) const = default;
};

// [neighbour]: Linux's net.ipv4.neigh.* defaults (ipoib/neighbour_cache.h).
struct NeighbourSection {
    std::chrono::milliseconds reachable_time{30'000};
    std::chrono::milliseconds retrans_time{1'000};
    std::chrono::milliseconds delay_first_probe_time{5'000};
    std::chrono::milliseconds gc_stale_time{60'000};
    unsigned multicast_solicits = 3;
    unsigned unicast_probes = 3;
    std::size_t max_entries = 10'000;
    std::size_t path_max_entries = 10'000;
    bool operator==(const NeighbourSection&) const = default;
};

// [queues]: every queue is bounded (STYLE.md guideline 8).
struct QueuesSection {
    unsigned send_depth = 256;       // UD QP send work requests
    unsigned receive_depth = 256;    // UD QP receive buffers posted
    std::size_t sa_max_queued = 1024;  // SA requests waiting to be sent
    unsigned tun_max_batch = 64;     // packets read from the TUN per wake-up
    std::size_t max_connections = 256;            // connected mode: RC connections, both directions
    std::size_t connected_receive_buffers = 4096; // connected mode: 64 KiB receives shared by peers' connections
    bool operator==(const QueuesSection&) const = default;
};

// [daemon]
struct DaemonSection {
    LogLevel log_level = LogLevel::info;
    std::string control_socket;  // default: /run/ipoibd/<instance>.sock
    std::string capture;         // pcap (ERF type 21) file; empty = no capture
    bool watchdog = true;        // ping systemd's watchdog when WatchdogSec= asks
    std::chrono::milliseconds busy_poll{0};  // poll without sleeping this long after traffic; 0 = off
    std::size_t data_threads = 0;            // threads reading the TUN (interface/data_worker.h); 0 = auto
    std::optional<SocketAddress> metrics_listen;  // Prometheus /metrics over HTTP; none = off
    std::string metrics_file;                     // Prometheus textfile, rewritten every 10 s; empty = off
    bool operator==(const DaemonSection&) const = default;
};

struct DaemonConfig {
    FabricSection fabric;
    InterfaceSection interface;
    std::vector<ChildSection> children;  // in the file's order
    MulticastSection multicast;
    NeighbourSection neighbour;
    QueuesSection queues;
    DaemonSection daemon;
    bool operator==(const DaemonConfig&) const = default;
};

// Every key at its default, for instance `instance` (e.g. "ib0").
DaemonConfig default_config(std::string_view instance);

// The effective configuration as a valid ipoibd.conf: every key, defaults
// included, each after a one-line comment; for `ipoibd --check-config`.
// Parsing the text again gives an equal DaemonConfig.
std::string describe(const DaemonConfig& config);

// What a reload (SIGHUP) of a changed file would do. Keys are named
// "section.key"; a child added, removed or changed is "child NAME" (live:
// reload adds, removes or rebuilds it). `live` keys can be applied to the running daemon (neighbour
// timers and probe counts, log level, addresses, routes, send-only join
// state, capture); a change to any other key takes effect only after a
// restart, and `restart` names those.
struct ReloadPlan {
    std::vector<std::string> live;
    std::vector<std::string> restart;

    bool changed() const { return !live.empty() || !restart.empty(); }
    bool needs_restart() const { return !restart.empty(); }
};
ReloadPlan diff_for_reload(const DaemonConfig& running, const DaemonConfig& reloaded);
// What the daemon runs with after a reload: `running` with every live key
// (the key table's Apply::live) taken from `reloaded`; the keys that need a
// restart keep their running values.
DaemonConfig apply_live(const DaemonConfig& running, const DaemonConfig& reloaded);

// The words ipoibd.conf uses.
std::string_view to_string(Transport transport);
std::string_view to_string(InterfaceMode mode);
std::string_view to_string(LogLevel level);
std::string format_ip(const IpAddress& address);
std::string format_prefix(const IpPrefix& prefix);  // "198.18.0.1/24"
std::string format_route(const Route& route);       // "198.19.0.0/24 via 198.18.0.2"

}  // namespace ipoibd::config
