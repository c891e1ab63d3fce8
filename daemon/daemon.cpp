// The daemon's wiring; the flow is drawn in daemon.h.
#include "daemon/daemon.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <random>
#include <variant>

#include "config/load.h"
#include "daemon/capabilities.h"
#include "daemon/journal_fields.h"
#include "daemon/message_ids.h"
#include "fabric/fabric_service.h"
#include "ipoib/link.h"
#include "netlink/tun_offload.h"
#include "sa_client/mad_transport_soft.h"
#include "transport/gid.h"
#include "transport/soft/guid.h"
#include "transport/soft/soft_port.h"
#include "transport/tools/port_open.h"

namespace ipoibd::daemon {

namespace {

constexpr std::chrono::milliseconds kHousekeeping{50};
constexpr std::chrono::milliseconds kLeaveGrace{1000};
constexpr std::size_t kMaxIpPacket = 65535 + netlink::VirtioNetHeader::size;

netlink::IpAddress to_netlink(const config::IpAddress& a) {
    if (const auto* v4 = std::get_if<ipoib::Ipv4Address>(&a)) return netlink::IpAddress::v4(*v4);
    return netlink::IpAddress::v6(std::get<ipoib::Ipv6Address>(a));
}

netlink::IpPrefix to_netlink(const config::IpPrefix& p) { return {to_netlink(p.address), p.length}; }

ipoib::NeighbourIp to_engine(const netlink::IpAddress& a) {
    ipoib::NeighbourIp ip;
    ip.family = a.family == netlink::IpFamily::ipv4 ? ipoib::IpFamily::ipv4 : ipoib::IpFamily::ipv6;
    ip.bytes = a.bytes;
    return ip;
}

netlink::IpAddress to_netlink(const ipoib::NeighbourIp& ip) {
    netlink::IpAddress a;
    a.family = ip.family == ipoib::IpFamily::ipv4 ? netlink::IpFamily::ipv4 : netlink::IpFamily::ipv6;
    a.bytes = ip.bytes;
    return a;
}

LogLevel to_log_level(config::LogLevel l) { return static_cast<LogLevel>(static_cast<std::uint8_t>(l)); }

std::optional<MessageId> message_id_of(ipoib::EngineEventKind k) {
    using K = ipoib::EngineEventKind;
    switch (k) {
    case K::link_up: return msgid::kLinkUp;
    case K::link_down: return msgid::kLinkDown;
    case K::broadcast_join_failed:
    case K::group_join_failed: return msgid::kJoinFailed;
    case K::group_joined: return msgid::kGroupJoined;
    case K::group_left: return msgid::kGroupLeft;
    case K::peer_changed: return msgid::kPeerChanged;
    default: return std::nullopt;
    }
}

LogLevel level_of(ipoib::EngineEventKind k) {
    using K = ipoib::EngineEventKind;
    switch (k) {
    case K::peer_changed: return LogLevel::notice;
    case K::group_joined:
    case K::group_left: return LogLevel::debug;
    case K::link_down:
    case K::broadcast_join_failed:
    case K::group_join_failed:
    case K::address_conflict:
    case K::dad_failed:
    case K::path_failed: return LogLevel::warning;
    case K::qp_open_failed: return LogLevel::error;
    default: return LogLevel::info;
    }
}

ipoib::EngineConfig engine_config(const config::DaemonConfig& c) {
    ipoib::EngineConfig e;
    e.pkey = c.fabric.pkey;
    e.scope = c.multicast.scope;
    e.mtu = c.interface.mtu;
    e.neighbour = config::neighbour_cache_config(c.neighbour);
    e.neighbour.reachable_factor = ipoib::make_reachable_factor(std::random_device{}());
    e.path.max_entries = c.neighbour.path_max_entries;
    e.mcast.send_only_join_state = c.multicast.send_only_join;
    e.mcast.max_groups = c.multicast.max_groups;
    return e;
}

}  // namespace

Daemon::Daemon(config::DaemonConfig config, std::string config_file, std::string instance, Logger& log,
               Notifier& notify, EventLoop& loop)
    : config_(std::move(config)),
      config_file_(std::move(config_file)),
      instance_(std::move(instance)),
      log_(log),
      notify_(notify),
      loop_(loop),
      tun_buffer_(kMaxIpPacket) {
    drops_log_ = std::make_unique<RateLimitedLog>(log_, LogLevel::debug);
}

Daemon::~Daemon() = default;

// ---------------------------------------------------------------------------
// 1. The fabric

expected<void, std::string> Daemon::open_fabric() {
    if (config_.fabric.embedded) {
        fabric::FabricServiceOptions o;
        o.listen = config_.fabric.embedded_listen;
        o.log = [this](const std::string& line) { log_.info(line, {{field::kIfname, instance_}}); };
        auto service = fabric::FabricService::open(std::move(o));
        if (!service) return unexpected("could not start the embedded fabric service: " + service.error());
        fabric_service_ = std::move(*service);
        if (auto r = loop_.add_fd(fabric_service_->fd(),
                                  [this] {
                                      const auto now = Clock::now();
                                      fabric_service_->on_readable(now);
                                      fabric_service_->after_wakeup(now);
                                  });
            !r)
            return unexpected("could not watch the embedded fabric socket: " + r.error().message());
        log_.notice("embedded fabric service (switch, SM, SA) listening on " + fabric_service_->local_address().to_string());
    }

    using config::Transport;
    const Transport kind = config_.fabric.transport;
    if (kind == Transport::verbs || kind == Transport::automatic) {
        auto port = transport::open_verbs(config_.fabric.device, config_.fabric.port);
        if (port) {
            port_ = std::move(*port);
            port_name_ = (config_.fabric.device.empty() ? std::string("first HCA") : config_.fabric.device) + " port " +
                         std::to_string(config_.fabric.port);
            sa::UmadTransportConfig u;
            u.ca = config_.fabric.device;
            u.port_num = config_.fabric.port;
            auto mad = sa::open_umad_transport(u);
            if (!mad) return unexpected("could not open the SA MAD path (umad): " + mad.error().message());
            mad_ = std::move(*mad);
        } else if (kind == Transport::verbs) {
            return unexpected("could not open HCA port: " + port.error().message());
        } else {
            log_.info("no HCA (" + port.error().message() + "): using the soft fabric at " +
                      config_.fabric.address.to_string());
        }
    }
    if (!port_) {
        transport::SoftPortConfig sc;
        sc.fabric = config_.fabric.address;
        sc.port_guid = config_.fabric.port_guid ? config_.fabric.port_guid : transport::stable_port_guid(instance_);
        sc.node_description = "ipoibd " + instance_;
        // At most what a reap before each process() gives back: on_port_ready
        // polls up to 1024 completions (sends among them) before it.
        sc.receive_budget = std::min<std::size_t>(config_.queues.receive_depth, 256);
        auto soft = transport::SoftPort::open(sc);
        if (!soft) return unexpected("could not open the soft port: " + soft.error().message());
        auto gsi = (*soft)->create_gsi_qp(64, 64);
        if (!gsi) return unexpected("could not create QP1: " + gsi.error().message());
        transport::SoftPort& sp = **soft;
        if (!config_.daemon.capture.empty())
            if (auto r = open_capture(config_.daemon.capture); !r) return r;
        sp.core().set_tap([this](bytes packet, bool outbound) {
            if (capture_ && !capture_->write(packet, std::chrono::system_clock::now(),
                                             outbound ? capture::Direction::sent : capture::Direction::received))
                ++tun_counters_.capture_errors;
        });
        sp.set_deferred_flush(true);
        soft_port_ = &sp;
        port_ = std::move(*soft);
        // on_port_ready() processes the port before it reaps QP1.
        auto mad = sa::SoftMadTransport::open(*port_, std::move(*gsi), {.process_port = false});
        if (!mad) return unexpected("could not open the SA MAD path: " + mad.error().message());
        mad_ = std::move(*mad);
        char guid[32];
        std::snprintf(guid, sizeof guid, "0x%016llx", static_cast<unsigned long long>(sc.port_guid));
        port_name_ = std::string("soft ") + guid + " via " + config_.fabric.address.to_string();
    } else if (!config_.daemon.capture.empty()) {
        log_.warning("capture is supported on the soft fabric only; not capturing");
    }

    ipoib::PortLink::Config lc;
    lc.send_depth = config_.queues.send_depth;
    lc.receive_depth = config_.queues.receive_depth;
    link_ = std::make_unique<ipoib::PortLink>(*port_, lc);
    sa::SaClient::Config sac;
    sac.max_queued = config_.queues.sa_max_queued;
    sac.tid_high = 0x1B0B0000u | (static_cast<std::uint32_t>(::getpid()) & 0xFFFF);
    engine_ = std::make_unique<ipoib::Engine>(engine_config(config_), *this, sac);

    if (port_->fd() >= 0)
        if (auto r = loop_.add_fd(port_->fd(), [this] { on_port_ready(); }); !r)
            return unexpected("could not watch the port: " + r.error().message());
    const sa::MadWaitSource ws = mad_->wait_source();
    mad_pollable_ = ws.fd >= 0 && ws.epoll_capable;
    if (mad_pollable_ && ws.fd != port_->fd())
        if (auto r = loop_.add_fd(ws.fd, [this] { on_port_ready(); }); !r)
            return unexpected("could not watch the MAD path: " + r.error().message());
    log_.info("port " + port_name_ + " opened", {{field::kDevice, soft_port_ ? "soft" : config_.fabric.device}});
    return {};
}

expected<void, std::string> Daemon::open_capture(const std::string& path) {
    auto w = capture::ErfPcapWriter::open(path);
    if (!w) return unexpected("could not open capture file " + path + ": " + w.error().message());
    capture_.emplace(std::move(*w));
    log_.info("capturing fabric packets to " + path);
    return {};
}

// ---------------------------------------------------------------------------
// 2. The interface

void Daemon::set_carrier(bool on) {
    if (!tun_) return;
    int carrier = on ? 1 : 0;
    if (::ioctl(tun_->fd.get(), TUNSETCARRIER, &carrier) != 0)
        log_.warning(std::string("could not set the carrier of ") + tun_->name + ": " + std::strerror(errno));
}

expected<void, std::string> Daemon::apply_addresses(const std::vector<config::IpPrefix>& addresses, bool add) {
    for (const config::IpPrefix& p : addresses) {
        const netlink::IpPrefix np = to_netlink(p);
        auto r = add ? nl_->add_address(tun_->ifindex, np, {.nodad = true}) : nl_->remove_address(tun_->ifindex, np);
        if (!r) return unexpected(r.error().message());
    }
    return {};
}

expected<void, std::string> Daemon::apply_routes(const std::vector<config::Route>& routes, bool add) {
    for (const config::Route& route : routes) {
        netlink::RouteSpec spec;
        spec.destination = to_netlink(route.destination);
        if (route.gateway) spec.gateway = to_netlink(*route.gateway);
        spec.oif = tun_->ifindex;
        auto r = add ? nl_->add_route(spec) : nl_->remove_route(spec);
        if (!r) return unexpected(r.error().message());
    }
    return {};
}

expected<void, std::string> Daemon::create_interface() {
    auto nl = netlink::NetlinkSocket::open();
    if (!nl) return unexpected("could not open rtnetlink: " + nl.error().message());
    nl_.emplace(std::move(*nl));
    auto tun = netlink::open_tun(
        {.name = config_.interface.name, .multi_queue = false, .persist = false, .offload = true});
    if (!tun) return unexpected(tun.error().message());
    tun_.emplace(std::move(*tun));
    set_carrier(false);  // no carrier until the broadcast group is joined
    if (tun_->offload)
        coalescer_ = std::make_unique<netlink::TunCoalescer>([this](bytes d) { write_tun_raw(d); },
                                                             tun_->udp_segmentation);

    // The link-local address is RFC 4391's (port GUID as EUI-64), not one
    // the kernel would invent for a device without a link layer.
    {
        std::ofstream gen("/proc/sys/net/ipv6/conf/" + tun_->name + "/addr_gen_mode");
        if (gen) gen << "1\n";  // IN6_ADDR_GEN_MODE_NONE
    }
    if (auto r = apply_addresses(config_.interface.addresses, true); !r)
        return unexpected("could not configure " + tun_->name + ": " + r.error());
    const auto ll = ipoib::link_local_address(port_->attributes().port_guid);
    if (auto r = nl_->add_address(tun_->ifindex, {netlink::IpAddress::v6(ll), 64}, {.nodad = true}); !r)
        log_.warning("could not add the link-local address: " + r.error().message());
    if (auto r = nl_->set_link_up(tun_->ifindex, true); !r)
        return unexpected("could not bring " + tun_->name + " up: " + r.error().message());
    if (auto r = apply_routes(config_.interface.routes, true); !r)
        return unexpected("could not add routes on " + tun_->name + ": " + r.error());

    for (const config::IpPrefix& p : config_.interface.addresses) {
        const netlink::IpPrefix np = to_netlink(p);
        engine_->add_address({.ip = to_engine(np.address), .prefix_length = np.length}, Clock::now());
    }

    auto monitor = netlink::RtnlMonitor::open();
    if (!monitor) return unexpected("could not open the netlink monitor: " + monitor.error().message());
    monitor_ = std::make_unique<netlink::RtnlMonitor>(std::move(*monitor));
    next_hops_ = std::make_unique<netlink::NextHopCache>(
        [this](const netlink::IpAddress& dst) { return nl_->lookup_next_hop(dst); });

    if (auto r = loop_.add_fd(tun_->fd.get(), [this] { on_tun_readable(); }); !r)
        return unexpected("could not watch the TUN: " + r.error().message());
    if (auto r = loop_.add_fd(monitor_->fd(), [this] { on_monitor_readable(); }); !r)
        return unexpected("could not watch netlink: " + r.error().message());
    log_.info("interface " + tun_->name + " created", {{field::kIfname, tun_->name}});
    return {};
}

// ---------------------------------------------------------------------------
// 3. Control socket, capabilities

expected<void, std::string> Daemon::open_control() {
    auto c = ControlServer::open(loop_, config_.daemon.control_socket,
                                 [this](std::string_view command) { return answer(command); });
    if (!c) return unexpected("could not open the control socket: " + c.error().message());
    control_ = std::move(*c);
    return {};
}

void Daemon::drop_capabilities() {
    // CAP_NET_ADMIN: addresses, routes and the carrier at run time (SIGHUP,
    // link changes); CAP_NET_RAW: the verbs port's raw QPs.
    static constexpr cap_value_t kKeep[] = {CAP_NET_ADMIN, CAP_NET_RAW};
    if (auto r = keep_only_capabilities(kKeep, log_); !r)
        log_.warning("could not drop capabilities: " + r.error().message());
}

// ---------------------------------------------------------------------------
// 4. The loop

void Daemon::start_engine_if_ready(Clock::time_point now) {
    if (engine_started_ || stopping_) return;
    const transport::PortAttributes a = port_->attributes();
    if (a.state != transport::PortState::active || a.sm_lid == 0) return;
    engine_started_ = true;
    mad_->refresh_port();
    log_.info("port active: LID " + std::to_string(a.lid) + ", joining the broadcast group",
              {{field::kLid, field::format_lid(a.lid)}, {field::kGid, format_gid(a.gid())}});
    (void)notify_.status("port active, joining the broadcast group");
    engine_->start(a, now);
}

void Daemon::handle_port_events(Clock::time_point now) {
    transport::PortEvent events[16];
    const std::size_t n = port_->poll_events(events);
    for (std::size_t i = 0; i < n; ++i) {
        const transport::PortAttributes a = port_->attributes();
        mad_->refresh_port();
        log_.info(std::string("port event: ") + transport::to_string(events[i]),
                  {{field::kLid, field::format_lid(a.lid)}});
        if (engine_started_) engine_->on_port_event(events[i], a, now);
    }
    start_engine_if_ready(now);
}

void Daemon::flush_sends() {
    if (soft_port_)
        soft_port_->flush();
    else
        port_->process();
}

void Daemon::on_port_ready() {
    const Clock::time_point now = Clock::now();
    const auto deliver = [&](const ipoib::ReceivedDatagram& d) { engine_->on_datagram(d, now); };
    // Reap before every process(): each one may deliver a receive queue's
    // worth of datagrams, and a QP without posted buffers drops them.
    std::size_t moved = link_->poll(deliver, 1024);
    port_->process();
    handle_port_events(now);
    moved += link_->poll(deliver, 1024);
    mad_->receive([&](bytes mad) { engine_->on_sa_mad(mad, now); }, 64);
    moved += link_->poll(deliver, 1024);
    flush_sends();
    flush_tun();
    if (moved > 0) loop_.keep_polling();  // IPoIB traffic (not link heartbeats or SA MADs)
}

void Daemon::on_tun_datagram(bytes packet, Clock::time_point now) {
    std::optional<ipoib::NeighbourIp> next_hop;
    if (auto info = ipoib::inspect_ip_packet(packet)) {
        const ipoib::NeighbourIp& dst = info->destination;
        const bool group = dst.family == ipoib::IpFamily::ipv4 ? (dst.bytes[0] & 0xF0) >= 0xE0 : dst.bytes[0] == 0xFF;
        if (!group) {
            auto hop = next_hops_->resolve(to_netlink(dst));
            if (hop && hop->via_gateway)
                next_hop = to_engine(hop->address);
            else if (!hop)
                ++tun_counters_.next_hop_failures;
        }
    }
    engine_->on_tun_packet(packet, next_hop, now);
}

void Daemon::on_tun_readable() {
    const std::size_t batch = config_.queues.tun_max_batch;
    const Clock::time_point now = Clock::now();
    const std::uint64_t rx_before = tun_counters_.rx_packets;
    for (std::size_t i = 0; i < batch; ++i) {
        const ssize_t n = ::read(tun_->fd.get(), tun_buffer_.data(), tun_buffer_.size());
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) ++tun_counters_.rx_errors;
            break;
        }
        ++tun_counters_.rx_packets;
        const mutable_bytes read(tun_buffer_.data(), static_cast<std::size_t>(n));
        if (!tun_->offload) {
            on_tun_datagram(read, now);
            continue;
        }
        // A TSO super-packet becomes datagrams of the link MTU here.
        auto segments = netlink::segment_tun_packet(read, segment_buffer_,
                                                    [&](bytes datagram) { on_tun_datagram(datagram, now); });
        if (!segments) {
            ++tun_counters_.offload_errors[static_cast<std::size_t>(segments.error())];
            continue;
        }
        if (*segments > 1) tun_counters_.rx_segmented += *segments;
        // A super-packet is up to 45 datagrams: hand them to the wire and
        // reap their send completions before the send queue fills.
        if (*segments > 8 || i % 4 == 3) {
            flush_sends();
            link_->poll([&](const ipoib::ReceivedDatagram& d) { engine_->on_datagram(d, now); }, 1024);
        }
    }
    // The engine's sends leave in one batch. Completions are reaped by the
    // port handler; a full send queue drops (counted), never blocks.
    if (tun_counters_.rx_packets != rx_before) loop_.keep_polling();
    flush_sends();
    link_->poll([&](const ipoib::ReceivedDatagram& d) { engine_->on_datagram(d, Clock::now()); }, 256);
    flush_tun();
}

void Daemon::on_monitor_readable() {
    for (const netlink::MonitorEvent& ev : monitor_->drain()) {
        if (const auto* a = std::get_if<netlink::AddressEvent>(&ev)) {
            if (a->address.ifindex != tun_->ifindex) continue;
            const ipoib::InterfaceAddress ia{.ip = to_engine(a->address.prefix.address),
                                             .prefix_length = a->address.prefix.length};
            if (ia.ip.family == ipoib::IpFamily::ipv6 && ipoib::is_ipv6_link_local(ia.ip.bytes)) continue;
            if (a->removed)
                engine_->remove_address(ia, Clock::now());
            else
                engine_->add_address(ia, Clock::now());  // announces a new one (gratuitous ARP / NA)
            next_hops_->invalidate();
        } else if (std::holds_alternative<netlink::RouteEvent>(ev) || std::holds_alternative<netlink::LinkEvent>(ev)) {
            next_hops_->invalidate();
        } else if (std::holds_alternative<netlink::ResyncNeeded>(ev)) {
            next_hops_->invalidate();
            if (auto list = nl_->list_addresses(tun_->ifindex, std::nullopt))
                for (const netlink::AddressInfo& ai : *list)
                    if (!(ai.prefix.address.family == netlink::IpFamily::ipv6 &&
                          ipoib::is_ipv6_link_local(ai.prefix.address.bytes)))
                        engine_->add_address({.ip = to_engine(ai.prefix.address), .prefix_length = ai.prefix.length},
                                             Clock::now());
        }
    }
    flush_sends();
}

void Daemon::housekeeping() {
    const Clock::time_point now = Clock::now();
    if (fabric_service_) {
        fabric_service_->tick(now);
        fabric_service_->after_wakeup(now);
    }
    if (!mad_pollable_) mad_->receive([&](bytes mad) { engine_->on_sa_mad(mad, now); }, 64);
    if (port_->fd() < 0 || !soft_port_) on_port_ready();
    handle_port_events(now);
    engine_->tick(now);
    flush_sends();  // not process(): receiving is on_port_ready's, which reaps the QPs first
    flush_tun();
    if (capture_) capture_->flush();
    drops_log_->flush(now);
    if (stopping_ && (engine_->sa_idle() || now >= stop_deadline_)) {
        loop_.stop();
        return;
    }
    loop_.add_timer(now + kHousekeeping, [this] { housekeeping(); });
}

int Daemon::run() {
    loop_.on_signal(SIGTERM, [this](const SignalInfo&) { stop("SIGTERM"); });
    loop_.on_signal(SIGINT, [this](const SignalInfo&) { stop("SIGINT"); });
    loop_.on_signal(SIGHUP, [this](const SignalInfo&) { reload(); });
    loop_.on_signal(SIGUSR1, [this](const SignalInfo&) { log_counters(); });
    loop_.set_busy_poll(config_.daemon.busy_poll);
    // [daemon] watchdog = no: no pings (a unit with WatchdogSec= would then
    // restart the daemon; drop WatchdogSec= along with it).
    if (config_.daemon.watchdog)
        loop_.set_on_iteration([this] { (void)notify_.watchdog(Clock::now()); }, notify_.watchdog_ping_interval());
    (void)notify_.status("waiting for the port to become ACTIVE");
    log_.info("ipoibd " IPOIBD_VERSION " started on " + port_name_,
              {{field::kIfname, tun_->name}, {field::kVersion, IPOIBD_VERSION}, {field::kConfigFile, config_file_}},
              msgid::kDaemonStarted);
    start_engine_if_ready(Clock::now());
    housekeeping();
    if (auto r = loop_.run(); !r) {
        log_.error("event loop failed: " + r.error().message());
        return 1;
    }
    log_.info("ipoibd stopped", {{field::kIfname, tun_->name}});
    return 0;
}

void Daemon::stop(const char* why) {
    if (stopping_) return;
    stopping_ = true;
    (void)notify_.stopping(std::string("leaving multicast groups (") + why + ")");
    log_.notice(std::string("stopping on ") + why + ": leaving every multicast group",
                {{field::kIfname, tun_->name}}, msgid::kDaemonStopping);
    engine_->stop(Clock::now());
    flush_sends();
    stop_deadline_ = Clock::now() + kLeaveGrace;
}

void Daemon::reload() {
    (void)notify_.reloading(Clock::now());
    config::CommandLine cl;
    cl.instance = instance_;
    cl.config_file = config_file_;
    auto fresh = config::load_config(cl);
    if (!fresh) {
        log_.error("reload failed, keeping the running configuration: " + fresh.error().message);
        (void)notify_.ready("reload failed; running configuration kept");
        return;
    }
    // Values the command line set keep their command-line meaning only
    // until a reload: the file is authoritative from here on.
    config::DaemonConfig next = *fresh;
    const config::ReloadPlan plan = config::diff_for_reload(config_, next);
    std::string applied, failed;
    for (const std::string& key : plan.live) applied += (applied.empty() ? "" : ", ") + key;
    if (next.daemon.log_level != config_.daemon.log_level) log_.set_min_level(to_log_level(next.daemon.log_level));
    if (next.interface.addresses != config_.interface.addresses) {
        std::vector<config::IpPrefix> gone, added;
        for (const auto& p : config_.interface.addresses)
            if (std::find(next.interface.addresses.begin(), next.interface.addresses.end(), p) == next.interface.addresses.end())
                gone.push_back(p);
        for (const auto& p : next.interface.addresses)
            if (std::find(config_.interface.addresses.begin(), config_.interface.addresses.end(), p) == config_.interface.addresses.end())
                added.push_back(p);
        if (auto r = apply_addresses(gone, false); !r) failed += " " + r.error();
        if (auto r = apply_addresses(added, true); !r) failed += " " + r.error();
    }
    if (next.interface.routes != config_.interface.routes) {
        std::vector<config::Route> gone, added;
        for (const auto& r : config_.interface.routes)
            if (std::find(next.interface.routes.begin(), next.interface.routes.end(), r) == next.interface.routes.end())
                gone.push_back(r);
        for (const auto& r : next.interface.routes)
            if (std::find(config_.interface.routes.begin(), config_.interface.routes.end(), r) == config_.interface.routes.end())
                added.push_back(r);
        if (auto r = apply_routes(gone, false); !r) failed += " " + r.error();
        if (auto r = apply_routes(added, true); !r) failed += " " + r.error();
    }
    ipoib::NeighbourCache::Config neighbour = config::neighbour_cache_config(next.neighbour);
    neighbour.reachable_factor = engine_->neighbours().config().reachable_factor;  // the same generator
    engine_->reconfigure(neighbour, next.multicast.send_only_join);
    loop_.set_busy_poll(next.daemon.busy_poll);
    if (next.daemon.capture != config_.daemon.capture) {
        capture_.reset();
        if (!next.daemon.capture.empty()) {
            if (!soft_port_)
                failed += " capture needs the soft fabric;";
            else if (auto r = open_capture(next.daemon.capture); !r)
                failed += " " + r.error();
        }
    }
    std::string restart;
    for (const std::string& key : plan.restart) restart += (restart.empty() ? "" : ", ") + key;
    // Keep the running values of what needs a restart.
    config::DaemonConfig kept = next;
    kept.fabric = config_.fabric;
    kept.interface.name = config_.interface.name;
    kept.interface.mode = config_.interface.mode;
    kept.interface.mtu = config_.interface.mtu;
    kept.queues = config_.queues;
    kept.multicast.scope = config_.multicast.scope;
    kept.multicast.max_groups = config_.multicast.max_groups;
    kept.neighbour.max_entries = config_.neighbour.max_entries;
    kept.neighbour.path_max_entries = config_.neighbour.path_max_entries;
    kept.daemon.control_socket = config_.daemon.control_socket;
    kept.daemon.watchdog = config_.daemon.watchdog;
    config_ = kept;
    std::string message = "configuration reloaded";
    message += applied.empty() ? ": nothing changed live" : ": applied " + applied;
    if (!restart.empty()) message += "; needs a restart to take effect: " + restart;
    if (!failed.empty()) message += "; failed:" + failed;
    const LogField fields[] = {{field::kIfname, tun_->name}, {field::kConfigFile, config_file_}};
    log_.log(failed.empty() ? LogLevel::notice : LogLevel::warning, message, fields, msgid::kConfigReloaded);
    (void)notify_.ready(engine_->link().up ? "link up" : "waiting for the broadcast group");
}

void Daemon::log_counters() {
    log_.info("counters: " + answer_stats(), {{field::kIfname, tun_->name}});
}

// ---------------------------------------------------------------------------
// EngineIo

void Daemon::send_datagram(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) {
    link_->send(ah, remote_qpn, frame);
}

void Daemon::write_tun(bytes ip_packet) {
    if (coalescer_) {
        coalescer_->add(ip_packet);  // written at the end of this loop turn
        return;
    }
    write_tun_raw(ip_packet);
}

void Daemon::write_tun_raw(bytes data) {
    if (::write(tun_->fd.get(), data.data(), data.size()) < 0) {
        ++tun_counters_.tx_errors;
        drops_log_->log("tun_write", std::string("could not write to the TUN: ") + std::strerror(errno), {},
                        Clock::now());
        return;
    }
    ++tun_counters_.tx_packets;
}

void Daemon::flush_tun() {
    if (coalescer_) coalescer_->flush();
}

void Daemon::send_sa(const sa::SaMad& mad) {
    if (auto r = mad_->send(mad); !r) {
        ++tun_counters_.sa_send_errors;
        drops_log_->log("sa_send", "could not send an SA MAD: " + r.error().message(), {}, Clock::now());
    }
}

expected<std::uint32_t, std::string> Daemon::open_qp(std::uint32_t qkey, std::uint16_t pkey) {
    return link_->open_qp(qkey, pkey);
}

void Daemon::link_changed(const ipoib::LinkStatus& s) {
    if (s.up && config_.interface.mtu > s.mtu)
        log_.warning("[interface] mtu = " + std::to_string(config_.interface.mtu) +
                         " is more than the broadcast group carries; using " + std::to_string(s.mtu) +
                         " (the fabric's partition sets the group MTU)",
                     {{field::kIfname, tun_->name}, {field::kMtu, std::to_string(s.mtu)}});
    if (s.up) {
        if (auto r = nl_->set_mtu(tun_->ifindex, s.mtu); !r)
            log_.warning("could not set the MTU of " + tun_->name + ": " + r.error().message());
        set_carrier(true);
        next_hops_->invalidate();
        const std::string status = tun_->name + " up: MTU " + std::to_string(s.mtu) + ", QPN " +
                                   std::to_string(s.qpn) + ", broadcast group joined";
        if (!ready_sent_) {
            ready_sent_ = true;
            (void)notify_.ready(status);
        } else {
            (void)notify_.status(status);
        }
    } else {
        set_carrier(false);
        (void)notify_.status(tun_->name + " down: waiting for the broadcast group");
    }
}

void Daemon::event(const ipoib::EngineEvent& e) {
    std::vector<LogField> fields;
    fields.reserve(e.fields.size() + 1);
    fields.push_back({field::kIfname, tun_ ? std::string_view(tun_->name) : std::string_view(instance_)});
    for (const auto& [k, v] : e.fields) fields.push_back({k, v});
    log_.log(level_of(e.kind), e.message, fields, message_id_of(e.kind));
}

}  // namespace ipoibd::daemon
