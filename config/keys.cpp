#include "config/keys.h"

#include <algorithm>

namespace ipoibd::config {

namespace {

using std::chrono::milliseconds;
using namespace std::chrono_literals;

template <class T>
struct Word {
    std::string_view text;
    T value;
};

constexpr Word<Transport> kTransports[] = {
    {"auto", Transport::automatic}, {"soft", Transport::soft}, {"verbs", Transport::verbs}};
constexpr Word<InterfaceMode> kModes[] = {{"tun", InterfaceMode::tun}, {"tap", InterfaceMode::tap}};
constexpr Word<SendOnlyJoin> kSendOnlyJoins[] = {
    {"send-only-full-member", SendOnlyJoin::send_only_full_member},
    {"send-only-non-member", SendOnlyJoin::send_only_non_member},
    {"non-member", SendOnlyJoin::non_member}};
constexpr Word<MulticastScope> kScopes[] = {{"link-local", MulticastScope::link_local},
                                            {"site-local", MulticastScope::site_local},
                                            {"organization-local", MulticastScope::organization_local},
                                            {"global", MulticastScope::global}};
constexpr Word<LogLevel> kLogLevels[] = {{"debug", LogLevel::debug},
                                         {"info", LogLevel::info},
                                         {"notice", LogLevel::notice},
                                         {"warning", LogLevel::warning},
                                         {"error", LogLevel::error}};

template <class T, std::size_t N>
expected<T, Reason> parse_word(std::string_view text, const Word<T> (&words)[N]) {
    for (const auto& w : words)
        if (w.text == text) return w.value;
    std::string list = "must be ";
    for (std::size_t i = 0; i < N; ++i) {
        if (i > 0) list += i + 1 == N ? " or " : ", ";
        list += words[i].text;
    }
    return unexpected(list);
}

template <class T, std::size_t N>
std::string_view word_of(T value, const Word<T> (&words)[N]) {
    for (const auto& w : words)
        if (w.value == value) return w.text;
    return "(invalid)";
}

// Assigns a parsed value, or passes its reason on.
template <class Field, class Value>
expected<void, Reason> store(Field& field, expected<Value, Reason> parsed) {
    if (!parsed) return unexpected(parsed.error());
    field = static_cast<Field>(*parsed);
    return {};
}

std::vector<std::string> one(std::string_view value) { return {std::string(value)}; }

expected<void, Reason> set_mode(InterfaceMode& mode, std::string_view text) {
    return store(mode, parse_word(text, kModes));
}

expected<void, Reason> set_mtu(unsigned& mtu, std::string_view text) {
    const auto v = parse_unsigned(text, 0, 65520);
    if (!v || (*v != 0 && *v < 576))
        return unexpected(Reason("must be between 576 and 65520, or 0 for the broadcast group's"));
    mtu = static_cast<unsigned>(*v);
    return {};
}

// An RDMA device name as the kernel names it (IBV_SYSFS_NAME_MAX 64); empty
// picks the first HCA.
expected<void, Reason> set_device(std::string& device, std::string_view text) {
    if (text.size() > 63) return unexpected(Reason("is longer than 63 characters"));
    if (text.find_first_of(" \t/") != std::string_view::npos)
        return unexpected(Reason("cannot contain '/' or white space"));
    device = std::string(text);
    return {};
}

expected<void, Reason> add_address(std::vector<IpPrefix>& addresses, std::string_view text) {
    auto prefix = parse_interface_address(text);
    if (!prefix) return unexpected(prefix.error());
    for (const IpPrefix& a : addresses)
        if (a.address == prefix->address)
            return unexpected(format_ip(a.address) + " is already an address of this interface");
    addresses.push_back(*prefix);
    return {};
}

expected<void, Reason> add_route(std::vector<Route>& routes, std::string_view text) {
    auto route = parse_route(text);
    if (!route) return unexpected(route.error());
    for (const Route& r : routes)
        if (r.destination == route->destination)
            return unexpected("a route to " + format_prefix(r.destination) + " is already configured");
    routes.push_back(*route);
    return {};
}

// A socket path must fit sockaddr_un.sun_path (108 bytes with its NUL).
constexpr std::size_t kMaxSocketPath = 107;
constexpr std::size_t kMaxPath = 4095;  // PATH_MAX - 1

const KeySpec kKeys[] = {
    // [fabric]
    {.section = "fabric", .name = "transport", .value_name = "auto|soft|verbs",
     .help = "auto: verbs when the host has an HCA, else soft", .short_option = 't',
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.transport, parse_word(v, kTransports)); },
     .get = [](const DaemonConfig& c) { return one(word_of(c.fabric.transport, kTransports)); }},
    {.section = "fabric", .name = "device", .value_name = "HCA",
     .help = "verbs: the HCA (as ibv_devices lists it); empty: the first one",
     .set = [](DaemonConfig& c, std::string_view v) { return set_device(c.fabric.device, v); },
     .get = [](const DaemonConfig& c) { return one(c.fabric.device); }},
    {.section = "fabric", .name = "port", .value_name = "N", .help = "verbs: the HCA port number",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.port, parse_unsigned(v, 1, 254)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.fabric.port)); }},
    {.section = "fabric", .name = "address", .value_name = "ADDR:PORT",
     .help = "soft: the UDP address of the fabric (ibfabricd --listen)",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.address, parse_fabric_address(v, false)); },
     .get = [](const DaemonConfig& c) { return one(c.fabric.address.to_string()); }},
    {.section = "fabric", .name = "bind", .value_name = "any|ADDR:PORT",
     .help = "soft: this port's own UDP address (where peers and the fabric reach it); any: a free port",
     .set = [](DaemonConfig& c, std::string_view v) -> expected<void, Reason> {
         if (v == "any") {
             c.fabric.bind.reset();
             return {};
         }
         return store(c.fabric.bind, parse_fabric_address(v, true));
     },
     .get = [](const DaemonConfig& c) { return one(c.fabric.bind ? c.fabric.bind->to_string() : std::string("any")); }},
    {.section = "fabric", .name = "key-file", .value_name = "PATH",
     .help = "soft: the fabric key file (one or two 64-hex-digit keys, mode 0600); re-read on reload; empty: none",
     .set = [](DaemonConfig& c, std::string_view v) {
         c.fabric.key_file = std::string(v);
         return expected<void, Reason>();
     },
     .get = [](const DaemonConfig& c) { return one(c.fabric.key_file); }},
    {.section = "fabric", .name = "sm-silence", .value_name = "DURATION",
     .help = "soft: warn when neither an SMP from the subnet manager has reached the port nor its SA has answered for this long (the SA is asked after half of it); 0: never",
     .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.sm_silence, parse_duration_between(v, 0ms, 3600s)); },
     .get = [](const DaemonConfig& c) { return one(format_duration(c.fabric.sm_silence)); }},
    {.section = "fabric", .name = "port-guid", .value_name = "GUID",
     .help = "soft: the port GUID; 0: a stable GUID derived from host and instance",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.port_guid, parse_guid(v)); },
     .get = [](const DaemonConfig& c) { return one(format_guid(c.fabric.port_guid)); }},
    {.section = "fabric", .name = "embedded", .value_name = "yes|no",
     .help = "host the soft fabric (switch, SM, SA) in this daemon",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.embedded, parse_yes_no(v)); },
     .get = [](const DaemonConfig& c) { return one(format_yes_no(c.fabric.embedded)); }},
    {.section = "fabric", .name = "embedded-listen", .value_name = "ADDR:PORT",
     .help = "the UDP address the embedded fabric listens on",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.embedded_listen, parse_fabric_address(v, true)); },
     .get = [](const DaemonConfig& c) { return one(c.fabric.embedded_listen.to_string()); }},
    {.section = "fabric", .name = "embedded-partitions", .value_name = "PATH",
     .help = "the embedded fabric's partitions file (partitions.conf syntax, as ibfabricd --partitions); "
             "re-read on reload; empty: the default partition only",
     .set = [](DaemonConfig& c, std::string_view v) {
         c.fabric.embedded_partitions = std::string(v);
         return expected<void, Reason>();
     },
     .get = [](const DaemonConfig& c) { return one(c.fabric.embedded_partitions); }},
    {.section = "fabric", .name = "pkey", .value_name = "0xPKEY",
     .help = "the partition of the interface; 0xffff: the default partition",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.fabric.pkey, parse_pkey(v)); },
     .get = [](const DaemonConfig& c) { return one(format_pkey(c.fabric.pkey)); }},

    // [interface]
    {.section = "interface", .name = "name", .value_name = "IFNAME",
     .help = "the TUN (or TAP) device's name; default: the instance name",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.interface.name, parse_interface_name(v)); },
     .get = [](const DaemonConfig& c) { return one(c.interface.name); }},
    {.section = "interface", .name = "mode", .value_name = "tun|tap",
     .help = "tun: the interface carries IP packets and ipoibd resolves neighbours; tap: an Ethernet device "
             "whose neighbours the kernel resolves (synthetic MACs, `ip neigh`)",
     .set = [](DaemonConfig& c, std::string_view v) { return set_mode(c.interface.mode, v); },
     .get = [](const DaemonConfig& c) { return one(word_of(c.interface.mode, kModes)); }},
    {.section = "interface", .name = "mtu", .value_name = "BYTES",
     .help = "576..65520; 0: the broadcast group's IB MTU - 4",
     .set = [](DaemonConfig& c, std::string_view v) { return set_mtu(c.interface.mtu, v); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.interface.mtu)); }},
    {.section = "interface", .name = "connected-mode", .value_name = "yes|no",
     .help = "IPoIB connected mode (RFC 4755): unicast to capable peers over RC connections, MTU 65520 "
             "(the kernel's mode=connected); no: datagram mode",
     .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.interface.connected_mode, parse_yes_no(v)); },
     .get = [](const DaemonConfig& c) { return one(format_yes_no(c.interface.connected_mode)); }},
    {.section = "interface", .name = "connected-idle", .value_name = "DURATION",
     .help = "connected mode: a connection of ours unused this long is closed (a peer's after 4 times as long), one whose messages make no progress this long taken down",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.interface.connected_idle, parse_duration_between(v, 1s, 24h)); },
     .get = [](const DaemonConfig& c) { return one(format_duration(c.interface.connected_idle)); }},
    {.section = "interface", .name = "connected-datagram-when-idle", .value_name = "yes|no",
     .help = "connected mode: a unicast packet that fits a UD datagram goes over UD while its connection has "
             "nothing in flight or waiting, or is being set up (no RC ACK each way for a small packet; the order "
             "is kept); no: over the connection, as the kernel",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.interface.connected_datagram_when_idle, parse_yes_no(v)); },
     .get = [](const DaemonConfig& c) { return one(format_yes_no(c.interface.connected_datagram_when_idle)); }},
    {.section = "interface", .name = "address", .value_name = "ADDR/LEN",
     .help = "an address of the interface, e.g. 198.18.0.1/24 (repeatable)",
     .repeatable = true, .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return add_address(c.interface.addresses, v); },
     .get = [](const DaemonConfig& c) {
         std::vector<std::string> out;
         for (const auto& a : c.interface.addresses) out.push_back(format_prefix(a));
         return out;
     },
     .clear = [](DaemonConfig& c) { c.interface.addresses.clear(); }},
    {.section = "interface", .name = "route", .value_name = "PREFIX[ via GW]",
     .help = "a route through the interface, e.g. 198.19.0.0/24 via 198.18.0.2 (repeatable)",
     .repeatable = true, .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return add_route(c.interface.routes, v); },
     .get = [](const DaemonConfig& c) {
         std::vector<std::string> out;
         for (const auto& r : c.interface.routes) out.push_back(format_route(r));
         return out;
     },
     .clear = [](DaemonConfig& c) { c.interface.routes.clear(); }},

    // [multicast]
    {.section = "multicast", .name = "send-only-join",
     .value_name = "send-only-full-member|send-only-non-member|non-member",
     .help = "the JoinState used for groups sent to but not joined", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.multicast.send_only_join, parse_word(v, kSendOnlyJoins)); },
     .get = [](const DaemonConfig& c) { return one(word_of(c.multicast.send_only_join, kSendOnlyJoins)); }},
    {.section = "multicast", .name = "scope", .value_name = "link-local|site-local|organization-local|global",
     .help = "the scope of every IPoIB multicast GID (the broadcast group's included)",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.multicast.scope, parse_word(v, kScopes)); },
     .get = [](const DaemonConfig& c) { return one(word_of(c.multicast.scope, kScopes)); }},
    {.section = "multicast", .name = "max-groups", .value_name = "N",
     .help = "multicast groups joined at once, at most",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.multicast.max_groups, parse_unsigned(v, 16, 65536)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.multicast.max_groups)); }},

    // [neighbour]
    {.section = "neighbour", .name = "reachable-time", .value_name = "DURATION",
     .help = "a confirmed neighbour is REACHABLE this long", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.reachable_time, parse_duration_between(v, 1s, 1h)); },
     .get = [](const DaemonConfig& c) { return one(format_duration(c.neighbour.reachable_time)); }},
    {.section = "neighbour", .name = "retrans-time", .value_name = "DURATION",
     .help = "the time between two ARP requests or neighbour solicitations", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.retrans_time, parse_duration_between(v, 100ms, 1min)); },
     .get = [](const DaemonConfig& c) { return one(format_duration(c.neighbour.retrans_time)); }},
    {.section = "neighbour", .name = "delay-first-probe-time", .value_name = "DURATION",
     .help = "the wait in DELAY before the first unicast probe", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.delay_first_probe_time, parse_duration_between(v, 100ms, 1h)); },
     .get = [](const DaemonConfig& c) { return one(format_duration(c.neighbour.delay_first_probe_time)); }},
    {.section = "neighbour", .name = "gc-stale-time", .value_name = "DURATION",
     .help = "an unused STALE or FAILED neighbour is removed after this", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.gc_stale_time, parse_duration_between(v, 1s, 24h)); },
     .get = [](const DaemonConfig& c) { return one(format_duration(c.neighbour.gc_stale_time)); }},
    {.section = "neighbour", .name = "multicast-solicits", .value_name = "N",
     .help = "broadcast ARP requests or multicast solicitations before FAILED", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.multicast_solicits, parse_unsigned(v, 1, 32)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.neighbour.multicast_solicits)); }},
    {.section = "neighbour", .name = "unicast-probes", .value_name = "N",
     .help = "unicast probes of a STALE neighbour before FAILED", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.unicast_probes, parse_unsigned(v, 1, 32)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.neighbour.unicast_probes)); }},
    {.section = "neighbour", .name = "max-entries", .value_name = "N",
     .help = "neighbours (ARP and ND entries) kept, at most",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.max_entries, parse_unsigned(v, 16, 1'000'000)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.neighbour.max_entries)); }},
    {.section = "neighbour", .name = "path-max-entries", .value_name = "N",
     .help = "PathRecords cached, at most",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.neighbour.path_max_entries, parse_unsigned(v, 16, 1'000'000)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.neighbour.path_max_entries)); }},

    // [queues]
    {.section = "queues", .name = "send-depth", .value_name = "N",
     .help = "work requests the UD send queue holds",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.queues.send_depth, parse_unsigned(v, 16, 16384)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.queues.send_depth)); }},
    {.section = "queues", .name = "receive-depth", .value_name = "N",
     .help = "receive buffers posted to the UD QP",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.queues.receive_depth, parse_unsigned(v, 16, 16384)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.queues.receive_depth)); }},
    {.section = "queues", .name = "sa-max-queued", .value_name = "N",
     .help = "SA requests waiting to be sent, at most; more are refused and counted",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.queues.sa_max_queued, parse_unsigned(v, 16, 65536)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.queues.sa_max_queued)); }},
    {.section = "queues", .name = "tun-max-batch", .value_name = "N",
     .help = "packets read from the TUN device per wake-up, at most",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.queues.tun_max_batch, parse_unsigned(v, 1, 1024)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.queues.tun_max_batch)); }},

    {.section = "queues", .name = "max-connections", .value_name = "N",
     .help = "connected mode: RC connections at most, ours and peers' (more REQs are rejected, more peers reached over UD)",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.queues.max_connections, parse_unsigned(v, 1, 65536)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.queues.max_connections)); }},
    {.section = "queues", .name = "connected-receive-buffers", .value_name = "N",
     .help = "connected mode: 64 KiB receive buffers shared by peers' connections, 64 each (bounds them and their memory)",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.queues.connected_receive_buffers, parse_unsigned(v, 64, 65536)); },
     .get = [](const DaemonConfig& c) { return one(std::to_string(c.queues.connected_receive_buffers)); }},

    // [daemon]
    {.section = "daemon", .name = "log-level", .value_name = "debug|info|notice|warning|error",
     .help = "the least severe message logged", .apply = Apply::live, .short_option = 'l',
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.daemon.log_level, parse_word(v, kLogLevels)); },
     .get = [](const DaemonConfig& c) { return one(word_of(c.daemon.log_level, kLogLevels)); }},
    {.section = "daemon", .name = "control-socket", .value_name = "PATH",
     .help = "ipoibctl's UNIX socket; default: /run/ipoibd/INSTANCE.sock",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.daemon.control_socket, parse_absolute_path(v, kMaxSocketPath)); },
     .get = [](const DaemonConfig& c) { return one(c.daemon.control_socket); }},
    {.section = "daemon", .name = "capture", .value_name = "PATH",
     .help = "write every packet sent and received to this pcap file; empty: off", .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) {
         if (v.empty()) {
             c.daemon.capture.clear();
             return expected<void, Reason>();
         }
         return store(c.daemon.capture, parse_absolute_path(v, kMaxPath));
     },
     .get = [](const DaemonConfig& c) { return one(c.daemon.capture); }},
    {.section = "daemon", .name = "watchdog", .value_name = "yes|no",
     .help = "ping systemd's watchdog from the event loop (when WatchdogSec= is set)",
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.daemon.watchdog, parse_yes_no(v)); },
     .get = [](const DaemonConfig& c) { return one(format_yes_no(c.daemon.watchdog)); }},
    {.section = "daemon", .name = "metrics-listen", .value_name = "ADDR:PORT",
     .help = "serve the counters at http://ADDR:PORT/metrics (Prometheus text format; a local address); empty: off",
     .set = [](DaemonConfig& c, std::string_view v) -> expected<void, Reason> {
         if (v.empty()) {
             c.daemon.metrics_listen.reset();
             return {};
         }
         auto a = parse_socket_address(v);
         if (!a) return unexpected(Reason(a.error() + " (e.g. 127.0.0.1:9464)"));
         if (a->port() == 0) return unexpected(Reason("port 0 is not a TCP port to listen on"));
         c.daemon.metrics_listen = *a;
         return {};
     },
     .get = [](const DaemonConfig& c) { return one(c.daemon.metrics_listen ? c.daemon.metrics_listen->to_string() : std::string()); }},
    {.section = "daemon", .name = "metrics-file", .value_name = "PATH",
     .help = "write the counters to PATH every 10 s (Prometheus text format, node_exporter's textfile collector); empty: off",
     .set = [](DaemonConfig& c, std::string_view v) {
         c.daemon.metrics_file = std::string(v);
         return expected<void, Reason>();
     },
     .get = [](const DaemonConfig& c) { return one(c.daemon.metrics_file); }},
    {.section = "daemon", .name = "busy-poll", .value_name = "DURATION",
     .help = "after moving packets, poll without sleeping this long (lower latency, a CPU busy meanwhile); 0: off",
     .apply = Apply::live,
     .set = [](DaemonConfig& c, std::string_view v) { return store(c.daemon.busy_poll, parse_duration_between(v, 0ms, 1s)); },
     .get = [](const DaemonConfig& c) { return one(format_duration(c.daemon.busy_poll)); }},
    {.section = "daemon", .name = "data-threads", .value_name = "N|auto",
     .help = "threads reading a TUN's queues and sending to the fabric, the event loop's among them (soft fabric, TUN "
             "mode); auto: one per two CPUs, at most 4",
     .set = [](DaemonConfig& c, std::string_view v) -> expected<void, Reason> {
         if (v == "auto") {
             c.daemon.data_threads = 0;
             return {};
         }
         auto n = parse_unsigned(v, 1, 16);
         if (!n) return unexpected(n.error());
         c.daemon.data_threads = static_cast<std::size_t>(*n);
         return {};
     },
     .get = [](const DaemonConfig& c) {
         return one(c.daemon.data_threads == 0 ? std::string("auto") : std::to_string(c.daemon.data_threads));
     }},
};

constexpr std::string_view kSections[] = {"fabric", "interface", "multicast", "neighbour", "queues", "daemon"};

}  // namespace

std::string KeySpec::full_name() const { return std::string(section) + "." + std::string(name); }

std::span<const KeySpec> config_keys() { return kKeys; }

std::span<const std::string_view> config_sections() { return kSections; }

const KeySpec* find_key(std::string_view section, std::string_view name) {
    const auto it = std::find_if(std::begin(kKeys), std::end(kKeys),
                                 [&](const KeySpec& k) { return k.section == section && k.name == name; });
    return it == std::end(kKeys) ? nullptr : &*it;
}

// ---------------------------------------------------------------------------
// [child NAME]

namespace {

const ChildKeySpec kChildKeys[] = {
    {.name = "pkey", .value_name = "0xPKEY",
     .help = "the child's partition (required): 0x0001..0x7fff a limited member, with 0x8000 a full member; "
             "not the parent's",
     .set = [](ChildSection& c, std::string_view v) -> expected<void, Reason> {
         auto pkey = parse_pkey(v);  // refuses the invalid P_Key (low 15 bits 0)
         if (!pkey) return unexpected(pkey.error());
         c.pkey = *pkey;
         return {};
     },
     .get = [](const ChildSection& c) { return c.pkey ? one(format_pkey(c.pkey)) : std::vector<std::string>{}; }},
    {.name = "mode", .value_name = "tun|tap",
     .help = "as [interface] mode, for this child",
     .set = [](ChildSection& c, std::string_view v) {
         c.mode_from_parent = false;
         return set_mode(c.mode, v);
     },
     // A child that follows the parent has no mode line (describe() keeps it so).
     .get = [](const ChildSection& c) {
         return c.mode_from_parent ? std::vector<std::string>{} : one(word_of(c.mode, kModes));
     }},
    {.name = "mtu", .value_name = "BYTES",
     .help = "as [interface] mtu, for this child",
     .set = [](ChildSection& c, std::string_view v) { return set_mtu(c.mtu, v); },
     .get = [](const ChildSection& c) { return one(std::to_string(c.mtu)); }},
    {.name = "connected-mode", .value_name = "yes|no",
     .help = "as [interface] connected-mode, for this child",
     .set = [](ChildSection& c, std::string_view v) { return store(c.connected_mode, parse_yes_no(v)); },
     .get = [](const ChildSection& c) { return one(format_yes_no(c.connected_mode)); }},
    {.name = "address", .value_name = "ADDR/LEN",
     .help = "an address of the child (repeatable)", .repeatable = true,
     .set = [](ChildSection& c, std::string_view v) { return add_address(c.addresses, v); },
     .get = [](const ChildSection& c) {
         std::vector<std::string> out;
         for (const auto& a : c.addresses) out.push_back(format_prefix(a));
         return out;
     }},
    {.name = "route", .value_name = "PREFIX[ via GW]",
     .help = "a route through the child (repeatable)", .repeatable = true,
     .set = [](ChildSection& c, std::string_view v) { return add_route(c.routes, v); },
     .get = [](const ChildSection& c) {
         std::vector<std::string> out;
         for (const auto& r : c.routes) out.push_back(format_route(r));
         return out;
     }},
};

}  // namespace

std::span<const ChildKeySpec> child_keys() { return kChildKeys; }

const ChildKeySpec* find_child_key(std::string_view name) {
    const auto it = std::find_if(std::begin(kChildKeys), std::end(kChildKeys),
                                 [&](const ChildKeySpec& k) { return k.name == name; });
    return it == std::end(kChildKeys) ? nullptr : &*it;
}

std::optional<std::string_view> child_name_of(std::string_view section) {
    if (section.size() <= kChildSection.size() + 1 || section.substr(0, kChildSection.size()) != kChildSection ||
        section[kChildSection.size()] != ' ')
        return std::nullopt;
    return section.substr(kChildSection.size() + 1);
}

expected<void, Reason> check_child_name(std::string_view name) {
    auto n = parse_interface_name(name);
    if (!n) return unexpected(n.error());
    return {};
}

std::optional<ChildInconsistency> check_children(const DaemonConfig& c) {
    for (std::size_t i = 0; i < c.children.size(); ++i) {
        const ChildSection& child = c.children[i];
        if (child.name == c.interface.name)
            return ChildInconsistency{child.name, "name", "is the parent's name ([interface] name)"};
        if (child.pkey == 0) return ChildInconsistency{child.name, "pkey", "is missing: a child needs its partition"};
        if ((child.pkey & 0x7fff) == (c.fabric.pkey & 0x7fff))
            return ChildInconsistency{child.name, "pkey",
                                      format_pkey(child.pkey) + " is the parent's partition ([fabric] pkey = " +
                                          format_pkey(c.fabric.pkey) + ")"};
        for (std::size_t j = 0; j < i; ++j)
            if ((c.children[j].pkey & 0x7fff) == (child.pkey & 0x7fff))
                return ChildInconsistency{child.name, "pkey",
                                          format_pkey(child.pkey) + " is already the partition of [child " +
                                              c.children[j].name + "]"};
        // One address, one interface: the kernel would take it on both
        // devices, and the daemon's answers (ARP, ND) for it would come from
        // whichever engine a request reached.
        auto owner = [&](const IpAddress& a) -> std::optional<std::pair<std::string, IpPrefix>> {
            for (const IpPrefix& p : c.interface.addresses)
                if (p.address == a) return std::pair{std::string("[interface]"), p};
            for (std::size_t j = 0; j < i; ++j)
                for (const IpPrefix& p : c.children[j].addresses)
                    if (p.address == a) return std::pair{"[" + std::string(kChildSection) + " " + c.children[j].name + "]", p};
            return std::nullopt;
        };
        for (const IpPrefix& a : child.addresses)
            if (const auto o = owner(a.address))
                return ChildInconsistency{child.name, "address",
                                          format_ip(a.address) + " is already " + o->first + " address = " +
                                              format_prefix(o->second) + " (an address belongs to one interface)",
                                          format_prefix(a)};
    }
    return std::nullopt;
}

namespace {

// One interface's addresses and routes, under the section that sets them.
struct RoutedInterface {
    std::string section;  // "interface", "child ib0.8001"
    const std::vector<IpPrefix>* addresses;
    const std::vector<Route>* routes;
};

std::vector<RoutedInterface> routed_interfaces(const DaemonConfig& c) {
    std::vector<RoutedInterface> out{{"interface", &c.interface.addresses, &c.interface.routes}};
    for (const ChildSection& child : c.children)
        out.push_back({std::string(kChildSection) + " " + child.name, &child.addresses, &child.routes});
    return out;
}

// The kernel adds a route to an IPv4 address's prefix with the address
// (table main, metric 0: the one a route of ours gets), except for a /32.
bool kernel_routes(const IpPrefix& address, const IpPrefix& destination) {
    return address.address.is_v4() && address.length < 32 && destination.length == address.length &&
           destination.address == network_of(address.address, address.length);
}

bool covers(const IpPrefix& prefix, const IpAddress& a) {
    return prefix.address.family == a.family &&
           network_of(prefix.address, prefix.length) == network_of(a, prefix.length);
}

// The kernel takes a gateway only on the link of the route's own device: in
// the prefix of one of its addresses (IPv6: its link-local fe80::/64 too),
// or of an on-link route through it (the interface adds those first,
// interface.cpp's kernel_order).
bool on_link(const RoutedInterface& i, const IpAddress& gateway) {
    if (is_link_local(gateway)) return true;
    for (const IpPrefix& a : *i.addresses)
        if (covers(a, gateway)) return true;
    for (const Route& r : *i.routes)
        if (!r.gateway && covers(r.destination, gateway)) return true;
    return false;
}

// The directed broadcast address of an IPv4 prefix shorter than /31.
std::optional<IpAddress> broadcast_of(const IpPrefix& p) {
    if (!p.address.is_v4() || p.length >= 31) return std::nullopt;
    auto b = p.address.v4_bytes();
    const std::uint32_t host = p.length == 0 ? ~0u : (~0u >> p.length);
    std::uint32_t v = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
    v |= host;
    return IpAddress::v4({static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16),
                          static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)});
}

// Why a gateway on the link is still no gateway: an address of this
// daemon (IPv6: the kernel refuses a local gateway; IPv4: it takes one, and
// the route then sends to ourselves) or the directed broadcast address of
// the interface's prefix (the kernel refuses it).
std::optional<std::string> gateway_problem(const std::vector<RoutedInterface>& all, const RoutedInterface& i,
                                           const IpAddress& gateway) {
    for (const RoutedInterface& other : all)
        for (const IpPrefix& a : *other.addresses)
            if (a.address == gateway)
                return "the gateway " + format_ip(gateway) + " is [" + other.section + "] address = " +
                       format_prefix(a) + ": a route through this daemon's own address leads nowhere";
    for (const IpPrefix& a : *i.addresses)
        if (broadcast_of(a) == gateway)
            return "the gateway " + format_ip(gateway) + " is the broadcast address of [" + i.section +
                   "] address = " + format_prefix(a);
    return std::nullopt;
}

}  // namespace

std::optional<RouteInconsistency> check_routes(const DaemonConfig& c) {
    const std::vector<RoutedInterface> all = routed_interfaces(c);
    for (std::size_t i = 0; i < all.size(); ++i) {
        for (std::size_t n = 0; n < all[i].routes->size(); ++n) {
            const Route& r = (*all[i].routes)[n];
            const std::string destination = format_prefix(r.destination);
            if (r.gateway && !on_link(all[i], *r.gateway))
                return RouteInconsistency{all[i].section, format_route(r),
                                          "the gateway " + format_ip(*r.gateway) + " is not on the link of [" +
                                              all[i].section + "]: no address of it, nor an on-link route "
                                              "through it, covers it"};
            if (r.gateway)
                if (auto problem = gateway_problem(all, all[i], *r.gateway))
                    return RouteInconsistency{all[i].section, format_route(r), *problem};
            for (const RoutedInterface& other : all)
                for (const IpPrefix& a : *other.addresses)
                    if (kernel_routes(a, r.destination))
                        return RouteInconsistency{all[i].section, format_route(r),
                                                  "the kernel already routes " + destination + " with [" +
                                                      other.section + "] address = " + format_prefix(a)};
            for (std::size_t j = 0; j < i; ++j)
                for (const Route& earlier : *all[j].routes)
                    if (earlier.destination == r.destination)
                        return RouteInconsistency{all[i].section, format_route(r),
                                                  "a route to " + destination + " is already configured in [" +
                                                      all[j].section + "]"};
        }
    }
    return std::nullopt;
}

std::optional<Inconsistency> check_consistency(const DaemonConfig& c) {
    const KeySpec* embedded = find_key("fabric", "embedded");
    if (c.fabric.embedded && c.fabric.transport == Transport::verbs)
        return Inconsistency{embedded, "the embedded fabric is soft: it needs transport = soft or auto, not verbs"};
    if (!c.fabric.embedded_partitions.empty() && !c.fabric.embedded)
        return Inconsistency{find_key("fabric", "embedded-partitions"),
                             "partitions for the embedded fabric need embedded = yes (an ibfabricd takes them with "
                             "--partitions)"};
    // This daemon's own port reaches the embedded fabric like any other
    // port, through [fabric] address; with a wildcard listen address only
    // the port number can be checked.
    if (c.fabric.embedded) {
        const SocketAddress& listen = c.fabric.embedded_listen;
        const bool reaches = is_wildcard(listen) ? c.fabric.address.port() == listen.port() : c.fabric.address == listen;
        if (!reaches)
            return Inconsistency{embedded, "this daemon's port connects to address = " + c.fabric.address.to_string() +
                                               ", which is not embedded-listen = " + listen.to_string()};
    }
    return std::nullopt;
}

DaemonConfig default_config(std::string_view instance) {
    DaemonConfig c;
    c.interface.name = std::string(instance);
    c.daemon.control_socket = std::string(kRunDirectory) + "/" + std::string(instance) + ".sock";
    return c;
}

std::string_view to_string(Transport transport) { return word_of(transport, kTransports); }
std::string_view to_string(InterfaceMode mode) { return word_of(mode, kModes); }
std::string_view to_string(LogLevel level) { return word_of(level, kLogLevels); }

}  // namespace ipoibd::config
