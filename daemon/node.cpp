// The node's wiring; the flow is drawn in node.h.
#include "daemon/node.h"

#include "common/prometheus.h"

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <random>
#include <csignal>
#include <cstring>

#include "config/load.h"
#include "runtime/capabilities.h"
#include "daemon/engine_config.h"
#include "runtime/journal_fields.h"
#include "runtime/message_ids.h"
#include "fabric/fabric_service.h"
#include "host/tap_port.h"
#include "host/tun_port.h"
#include "ipoib/mac_table.h"
#include "transport/gid.h"
#include "transport/wire/mad.h"
#include "transport/port_factory.h"
#include "transport/soft/guid.h"
#ifdef IPOIBD_HAVE_RDMACM
#include "cm/rdma_cm_access.h"
#else
namespace ipoibd::cm {
class RdmaCmAccess {};  // never made: no librdmacm in this build
}  // namespace ipoibd::cm
#endif

namespace ipoibd::daemon {

namespace {

constexpr std::chrono::milliseconds kLeaveGrace{1000};
// The longest the node sleeps: its own housekeeping (rate-limited log
// windows, the capture file) needs no finer grain.
constexpr std::chrono::milliseconds kMaxSleep{1000};
// Passes that a backend asks for (verbs), a MAD path that cannot be
// polled (libumad2sim), waiting for the SA's answers on SIGTERM.
constexpr std::chrono::milliseconds kPollInterval{50};
// The engines' deadlines are read again at most this often; in between,
// the timer is pulled in to this point. A busy data path can create a
// deadline on any wake-up, and reading them costs a scan of the neighbour
// table and a timer pass; so while traffic flows the timer runs about as
// often as the fixed tick it replaced (bench/tunnel.sh: a 5 ms holdoff
// cost 10-25 us of polled RTT), and an idle node sleeps until its next
// deadline. A deadline is at most this late.
constexpr std::chrono::milliseconds kRescheduleHoldoff{50};

runtime::LogLevel to_log_level(config::LogLevel l) { return static_cast<runtime::LogLevel>(static_cast<std::uint8_t>(l)); }

std::vector<host::HostRoute> host_routes(const std::vector<config::Route>& routes) {
    std::vector<host::HostRoute> out;
    out.reserve(routes.size());
    for (const config::Route& r : routes) out.push_back({r.destination, r.gateway});
    return out;
}

std::vector<config::Route> config_routes(const std::vector<host::HostRoute>& routes) {
    std::vector<config::Route> out;
    out.reserve(routes.size());
    for (const host::HostRoute& r : routes) out.push_back({r.destination, r.gateway});
    return out;
}

}  // namespace

void visit(const NodeCounters& c, CounterSink& out) { out.counter("capture_errors", c.capture_errors); }

Node::Node(config::DaemonConfig config, std::string config_file, std::string instance, runtime::Logger& log, runtime::Notifier& notify,
           runtime::EventLoop& loop, std::vector<config::ConfigOverride> overrides)
    : config_(std::move(config)),
      config_file_(std::move(config_file)),
      instance_(std::move(instance)),
      overrides_(std::move(overrides)),
      log_(log),
      notify_(notify),
      loop_(loop) {
    drops_log_ = std::make_unique<runtime::RateLimitedLog>(log_, runtime::LogLevel::debug);
    // Datagrams from outside the fabric: someone is trying something.
    fabric_drops_log_ = std::make_unique<runtime::RateLimitedLog>(log_, runtime::LogLevel::warning);
    event_log_ = std::make_unique<EngineEventLog>(log_);
}

// The loop may outlive the node (tests run several nodes on one loop): no
// handler of ours may stay registered.
cm::CmAccess* Node::connection_manager() const {
    if (cm_) return cm_.get();
#ifdef IPOIBD_HAVE_RDMACM
    return rdma_cm_.get();
#else
    return nullptr;
#endif
}

// On an HCA the kernel's ib_cm holds class 0x07: connected mode connects
// through librdmacm (cm/rdma_cm_access.h) and cannot accept.
void Node::open_rdma_cm() {
#ifdef IPOIBD_HAVE_RDMACM
    if (port_device_ == "soft") return;
    const auto a = port_->attributes();
    auto r = cm::RdmaCmAccess::open(a.node_guid ? a.node_guid : a.port_guid);
    if (!r) {
        if (config_.interface.connected_mode) log_.warning("connected mode: no RDMA CM: " + r.error());
        return;
    }
    rdma_cm_ = std::move(*r);
    if (auto added = loop_.add_fd(rdma_cm_->fd(), [this] {
            rdma_cm_->process(runtime::Clock::now());
            end_of_turn();
        });
        !added) {
        log_.warning("connected mode: could not watch the RDMA CM: " + added.error().message());
        rdma_cm_.reset();
    }
#endif
}

Node::~Node() {
    // The capture tap reads members that go before the port does.
    if (port_) (void)port_->set_capture({});
    if (port_) port_->set_drop_log({});
    if (timer_) loop_.cancel_timer(*timer_);
    if (metrics_file_timer_) loop_.cancel_timer(*metrics_file_timer_);
    if (started_ && config_.daemon.watchdog) loop_.set_on_iteration({});
    for (const auto& i : interfaces_) {
        if (i->host().fd() >= 0) loop_.remove_fd(i->host().fd());
        if (i->miss_fd() >= 0) loop_.remove_fd(i->miss_fd());
        i->stop_data_threads();
    }
    if (monitor_) loop_.remove_fd(monitor_->fd());
    if (mad_ && mad_->path().wait_source().fd >= 0) loop_.remove_fd(mad_->path().wait_source().fd);
    for (const auto& i : interfaces_)
        if (mad_) mad_->unregister_client(*i);
    if (mad_ && cm_) mad_->unregister_client(*cm_);
    if (mad_ && pma_) mad_->unregister_client(*pma_);
#ifdef IPOIBD_HAVE_RDMACM
    if (rdma_cm_) loop_.remove_fd(rdma_cm_->fd());
#endif
    if (port_ && port_->fd() >= 0) loop_.remove_fd(port_->fd());
    if (fabric_service_) loop_.remove_fd(fabric_service_->fd());
}

// ---------------------------------------------------------------------------
// 1. The fabric

expected<void, std::string> Node::open_fabric() {
    std::optional<FabricKeys> keys;
    if (!config_.fabric.key_file.empty()) {
        auto k = load_fabric_key_file(config_.fabric.key_file);
        if (!k) return unexpected("[fabric] key-file: " + k.error());
        keys = *k;
    }
    if (config_.fabric.embedded) {
        fabric::FabricServiceOptions o;
        o.listen = config_.fabric.embedded_listen;
        o.keys = keys;
        if (!config_.fabric.embedded_partitions.empty()) {
            auto partitions = fabric::load_partitions(config_.fabric.embedded_partitions);
            if (!partitions) return unexpected("[fabric] embedded-partitions: " + partitions.error().to_string());
            o.sm.partitions = std::move(*partitions);
        }
        o.log = [this](const std::string& line) { log_.info(line, {{runtime::field::kIfname, instance_}}); };
        auto service = fabric::FabricService::open(std::move(o));
        if (!service) return unexpected("could not start the embedded fabric service: " + service.error());
        fabric_service_ = std::move(*service);
        if (auto r = loop_.add_fd(fabric_service_->fd(),
                                  [this] {
                                      const auto now = runtime::Clock::now();
                                      fabric_service_->on_readable(now);
                                      fabric_service_->after_wakeup(now);
                                  });
            !r)
            return unexpected("could not watch the embedded fabric socket: " + r.error().message());
        log_.notice("embedded fabric service (switch, SM, SA) listening on " + fabric_service_->local_address().to_string());
    }

    transport::PortOptions po;
    switch (config_.fabric.transport) {
    case config::Transport::automatic: po.kind = transport::PortOptions::Kind::automatic; break;
    case config::Transport::soft: po.kind = transport::PortOptions::Kind::soft; break;
    case config::Transport::verbs: po.kind = transport::PortOptions::Kind::verbs; break;
    }
    po.fabric = config_.fabric.address;
    po.bind_to = config_.fabric.bind;
    po.keys = keys;
    po.guid = config_.fabric.port_guid ? config_.fabric.port_guid : transport::stable_port_guid(instance_);
    po.node_description = "ipoibd " + instance_;
    // At most what a reap before each process() gives back: port_ready
    // polls up to 1024 completions (sends among them) before it.
    po.receive_budget = std::min<std::size_t>(config_.queues.receive_depth, 256);
    po.deferred_flush = true;
    data_threads_ = config_.daemon.data_threads != 0
                        ? config_.daemon.data_threads
                        : std::clamp<std::size_t>(std::thread::hardware_concurrency() / 2, 1, 4);
    po.device = config_.fabric.device;
    po.port_num = config_.fabric.port;
    auto opened = transport::open_port(po);
    if (!opened) {
        if (po.kind == transport::PortOptions::Kind::verbs)
            return unexpected("could not open HCA port: " + opened.error().message());
        return unexpected("could not open the soft port: " + opened.error().message());
    }
    if (!opened->verbs_unavailable.empty())
        log_.info("no HCA (" + opened->verbs_unavailable + "): using the soft fabric at " +
                  config_.fabric.address.to_string());
    return attach_port(std::move(*opened));
}

expected<void, std::string> Node::attach_port(transport::OpenedPort opened) {
    port_ = std::move(opened.port);
    port_name_ = std::move(opened.name);
    port_device_ = std::move(opened.device);
    port_->set_drop_log([this](std::string_view reason, const std::string& message) {
        fabric_drops_log_->log(reason, message, {}, runtime::Clock::now());
    });
    if (!config_.daemon.capture.empty())
        if (auto r = open_capture(config_.daemon.capture); !r) {
            // An HCA's packets are not ours to see: not a reason to stay down.
            if (!r.error().unsupported) return unexpected(r.error().message);
            log_.warning(r.error().message + "; not capturing");
        }
    // port_ready() processes the port before it reaps QP1.
    auto mad = sa::open_mad_path(*port_, {.ca = config_.fabric.device, .port_num = config_.fabric.port, .process_port = false});
    if (!mad) return unexpected("could not open the SA MAD path: " + mad.error().message());
    mad_ = std::make_unique<sa::MadAgent>(std::move(*mad));
    // The connection manager, where this path can carry class 0x07 and
    // address peers (the soft fabric; on an HCA the kernel's ib_cm holds
    // the class: ../shared/reference/ipoib-cm.md sec. 6).
    if (mad_->path().can_address_peers()) {
        const auto a = port_->attributes();
        auto cm = std::make_unique<CmService>(*mad_, cm::CmEngine::Config{.local_ca_guid = a.node_guid ? a.node_guid : a.port_guid},
                                              std::random_device{}() ^ a.port_guid);
        if (auto r = mad_->register_client(*cm, ib::mgmt_class::com_mgt, cm::kClassVersion, {ib::method::send}); r)
            cm_ = std::move(cm);
        else
            log_.info("no connection manager on this port: " + r.error().message());
    }
    if (!cm_) open_rdma_cm();
    // PerfMgt (perfquery, a PerfMgr) where the port's counters are ours.
    if (port_->packet_counters() && mad_->path().can_address_peers()) {
        auto pma = std::make_unique<PmaService>(*mad_, *port_);
        if (auto r = mad_->register_client(*pma, ib::mgmt_class::perf_mgt, transport::pma::kClassVersion,
                                           {ib::method::get, ib::method::set});
            r)
            pma_ = std::move(pma);
        else
            log_.info("no performance management agent on this port: " + r.error().message());
    }
    if (port_->fd() >= 0)
        if (auto r = loop_.add_fd(port_->fd(), [this] { port_ready(); }); !r)
            return unexpected("could not watch the port: " + r.error().message());
    const sa::MadWaitSource ws = mad_->path().wait_source();
    mad_pollable_ = ws.fd >= 0 && ws.epoll_capable;
    if (mad_pollable_ && ws.fd != port_->fd())
        if (auto r = loop_.add_fd(ws.fd, [this] { port_ready(); }); !r)
            return unexpected("could not watch the MAD path: " + r.error().message());
    log_.info("port " + port_name_ + " opened", {{runtime::field::kDevice, port_device_}});
    return {};
}

// A capture already running goes on until the new file is open: a path the
// daemon cannot write leaves the old capture as it was.
expected<void, Node::CaptureError> Node::open_capture(const std::string& path) {
    const bool tapped_here = !capture_;
    if (tapped_here) {
        auto tapped = port_->set_capture([this](bytes packet, bool outbound) {
            if (capture_ && !capture_->write(packet, std::chrono::system_clock::now(),
                                             outbound ? capture::Direction::sent : capture::Direction::received))
                ++counters_.capture_errors;
        });
        if (!tapped)
            return unexpected(CaptureError{tapped.error().code == transport::Errc::not_supported,
                                           "could not capture on " + port_name_ + ": " + tapped.error().message()});
    }
    auto w = capture::ErfPcapWriter::open(path);
    if (!w) {
        if (tapped_here) (void)port_->set_capture({});
        return unexpected(CaptureError{false, "could not open capture file " + path + ": " + w.error().message()});
    }
    if (capture_) capture_->flush();
    capture_.emplace(std::move(*w));
    log_.info("capturing fabric packets to " + path);
    return {};
}

// ---------------------------------------------------------------------------
// 2. The interfaces

Node::InterfaceSpec Node::parent_spec() const {
    return {.name = config_.interface.name,
            .pkey = config_.fabric.pkey,
            .mode = config_.interface.mode,
            .mtu = config_.interface.mtu,
            .connected_mode = config_.interface.connected_mode,
            .addresses = config_.interface.addresses,
            .routes = config_.interface.routes};
}

Node::InterfaceSpec Node::child_spec(const config::ChildSection& c) {
    return {.name = c.name,
            .pkey = c.pkey,
            .mode = c.mode,
            .mtu = c.mtu,
            .connected_mode = c.connected_mode,
            .addresses = c.addresses,
            .routes = c.routes};
}

expected<std::unique_ptr<host::HostPort>, std::string> Node::open_host(const InterfaceSpec& spec) {
    if (host_opener_) return host_opener_(spec);
    expected<std::unique_ptr<host::TunPort>, std::string> tun = unexpected(std::string());
    if (spec.mode == config::InterfaceMode::tap) {
        // Our own MAC stands for our port as peers' stand for theirs.
        const MacAddress mac = ipoib::synthetic_mac(port_->attributes().gid());
        auto tap = host::TapPort::open(spec.name, mac, *nl_);
        if (!tap) return unexpected(tap.error());
        tun = std::unique_ptr<host::TunPort>(std::move(*tap));
    } else {
        tun = host::TunPort::open(spec.name, *nl_, data_threads_ > 1);
    }
    if (!tun) return unexpected(tun.error());
    (*tun)->on_write_error([this, name = (*tun)->name()](int error) {
        drops_log_->log("tun_write", "could not write to " + name + ": " + std::strerror(error),
                        {{runtime::field::kIfname, name}}, runtime::Clock::now());
    });
    return std::unique_ptr<host::HostPort>(std::move(*tun));
}

expected<void, std::string> Node::create_interfaces() {
    auto nl = netlink::NetlinkSocket::open();
    if (!nl) return unexpected("could not open rtnetlink: " + nl.error().message());
    nl_.emplace(std::move(*nl));
    auto host = open_host(parent_spec());
    if (!host) return unexpected(host.error());
    if (auto r = add_interface(std::move(*host)); !r) return r;
    // P_Key children: their own devices on the same port.
    for (const config::ChildSection& child : config_.children) {
        auto h = open_host(child_spec(child));
        if (!h) return unexpected("could not create [child " + child.name + "]: " + h.error());
        if (auto r = add_interface(std::move(*h), child_spec(child)); !r) return r;
    }

    auto monitor = netlink::RtnlMonitor::open();
    if (!monitor) return unexpected("could not open the netlink monitor: " + monitor.error().message());
    monitor_ = std::make_unique<netlink::RtnlMonitor>(std::move(*monitor));
    if (auto r = loop_.add_fd(monitor_->fd(), [this] { on_monitor_readable(); }); !r)
        return unexpected("could not watch netlink: " + r.error().message());
    return {};
}

expected<void, std::string> Node::add_interface(std::unique_ptr<host::HostPort> host) {
    return add_interface(std::move(host), parent_spec());
}

expected<void, std::string> Node::add_interface(std::unique_ptr<host::HostPort> host, const InterfaceSpec& spec) {
    return add_interface(std::move(host), spec, config_);
}

expected<void, std::string> Node::add_interface(std::unique_ptr<host::HostPort> host, const InterfaceSpec& spec,
                                                const config::DaemonConfig& settings) {
    iface::InterfaceConfig ic;
    ic.engine = engine_config(settings);
    ic.engine.pkey = spec.pkey;
    ic.engine.mtu = spec.mtu;
    ic.engine.connected = spec.connected_mode;
    ic.sa.max_queued = settings.queues.sa_max_queued;
    ic.sa.tid_high = 0x1B0B0000u | (static_cast<std::uint32_t>(::getpid()) & 0xFFFF);
    // Interfaces share the MAD agent: their TIDs start 2^24 apart, numbered
    // by creation (mod 256), so a removed child's late answers find no one.
    ic.sa.first_key = 1 + (static_cast<std::uint32_t>(interfaces_created_++ & 0xFF) << 24);
    ic.link.send_depth = settings.queues.send_depth;
    ic.link.receive_depth = settings.queues.receive_depth;
    ic.requested_mtu = spec.mtu;
    ic.addresses = spec.addresses;
    ic.routes = host_routes(spec.routes);
    ic.host_max_batch = settings.queues.tun_max_batch;
    ic.connected.max_connections = settings.queues.max_connections;
    ic.connected.receive_buffers = settings.queues.connected_receive_buffers;
    ic.connected.ring = 64;
    ic.connected.idle = settings.interface.connected_idle;
    ic.connected.datagram_when_idle = settings.interface.connected_datagram_when_idle;
    if (spec.connected_mode && !connection_manager())
        log_.warning("connected-mode = yes for " + spec.name + ", but this port offers no connection manager (an "
                     "HCA's class 0x07 belongs to the kernel's ib_cm, and librdmacm is not there): datagram mode");
    iface::InterfaceEvents& events = *this;
    auto i = std::make_unique<iface::Interface>(std::move(ic), *port_, std::move(host), events,
                                                connection_manager(), std::random_device{}() ^ interfaces_.size());
    if (auto r = i->configure_host(port_->attributes().port_guid); !r) return r;
    // The SA client takes the responses to its requests and the SA's Reports.
    if (auto r = mad_->register_client(*i, ib::mgmt_class::subn_adm, ib::class_version::subn_adm,
                                       {ib::method::report});
        !r)
        return unexpected("could not register " + i->name() + "'s SA client on QP1: " + r.error().message());
    iface::Interface& added = *i;
    interfaces_.push_back(std::move(i));
    const int fd = added.host().fd();
    if (fd >= 0)
        if (auto r = loop_.add_fd(fd,
                                  [this, &added] {
                                      added.read_host(runtime::Clock::now());
                                      added.flush_host();
                                      if (added.host().gone()) host_gone(added, "a read");
                                      schedule(runtime::Clock::now());
                                  });
            !r)
            return unexpected("could not watch " + added.name() + ": " + r.error().message());
    if (data_threads_ > 1 && spec.mode != config::InterfaceMode::tap) {
        added.set_busy_poll(loop_.busy_poll());
        if (auto r = added.start_data_threads(data_threads_); !r) {
            log_.warning(added.name() + ": one data thread, not " + std::to_string(data_threads_) + ": " + r.error(),
                         {{runtime::field::kIfname, added.name()}});
        } else if (auto w = loop_.add_fd(added.miss_fd(),
                                         [this, &added] {
                                             const auto now = runtime::Clock::now();
                                             added.serve_misses(now);
                                             added.flush_host();
                                             schedule(now);
                                         });
                   !w) {
            added.stop_data_threads();  // and lets go of their queues
            return unexpected("could not watch " + added.name() + "'s data threads: " + w.error().message());
        }
    } else if (settings.daemon.data_threads > 1) {
        log_.warning(added.name() + ": one data thread (TAP mode has one queue)", {{runtime::field::kIfname, added.name()}});
    }
    log_.info("interface " + added.name() + " created (P_Key " + ipoib::hex16(spec.pkey) + ")",
              {{runtime::field::kIfname, added.name()}, {runtime::field::kPkey, ipoib::hex16(spec.pkey)}});
    return {};
}

void Node::remove_interface(const std::string& name, runtime::Clock::time_point now) {
    auto it = std::find_if(interfaces_.begin(), interfaces_.end(), [&](const auto& i) { return i->name() == name; });
    if (it == interfaces_.end() || it == interfaces_.begin()) return;  // the parent stays
    iface::Interface& i = **it;
    i.stop(now);  // leaves its groups (the Deletes go now), closes its connections
    if (const int fd = i.host().fd(); fd >= 0) loop_.remove_fd(fd);
    if (const int fd = i.miss_fd(); fd >= 0) loop_.remove_fd(fd);
    i.stop_data_threads();
    mad_->unregister_client(i);
    log_.info("interface " + name + " removed", {{runtime::field::kIfname, name}});
    interfaces_.erase(it);  // its TUN/TAP device goes with its fd
}

// ---------------------------------------------------------------------------
// 3. Control socket, capabilities

expected<void, std::string> Node::open_control() {
    auto c = runtime::ControlServer::open(loop_, config_.daemon.control_socket,
                                 [this](std::string_view command) { return answer(command); });
    if (!c) return unexpected("could not open the control socket: " + c.error().message());
    control_ = std::move(*c);
    return {};
}

expected<void, std::string> Node::open_metrics() {
    if (config_.daemon.metrics_listen) {
        auto http = runtime::MetricsHttpServer::open(loop_, *config_.daemon.metrics_listen, [this] { return metrics(); });
        if (!http) return unexpected("[daemon] metrics-listen: " + http.error().message());
        metrics_http_ = std::move(*http);
        log_.info("metrics at http://" + metrics_http_->local_address().to_string() + "/metrics");
    }
    if (!config_.daemon.metrics_file.empty()) {
        if (auto r = write_textfile(config_.daemon.metrics_file, metrics()); !r)
            return unexpected("[daemon] metrics-file: " + r.error());
        metrics_file_timer_ = loop_.add_timer_after(std::chrono::seconds(10), [this] { write_metrics_file(); });
    }
    return {};
}

// node_exporter's textfile collector reads the file at each scrape.
void Node::write_metrics_file() {
    if (auto r = write_textfile(config_.daemon.metrics_file, metrics()); !r)
        drops_log_->log("metrics_file", r.error(), {}, runtime::Clock::now());
    metrics_file_timer_ = loop_.add_timer_after(std::chrono::seconds(10), [this] { write_metrics_file(); });
}

void Node::drop_capabilities() {
    // CAP_NET_ADMIN: addresses, routes and the carrier at run time (SIGHUP,
    // link changes); CAP_NET_RAW: the verbs port's raw QPs.
    static constexpr cap_value_t kKeep[] = {CAP_NET_ADMIN, CAP_NET_RAW};
    if (auto r = runtime::keep_only_capabilities(kKeep, log_); !r)
        log_.warning("could not drop capabilities: " + r.error().message());
}

// ---------------------------------------------------------------------------
// 4. The loop

void Node::start_interfaces_if_ready(runtime::Clock::time_point now) {
    if (stopping_) return;
    // Called every time the port is served: once every interface runs,
    // nothing to do (and no copy of the port's attributes and P_Key table).
    if (std::all_of(interfaces_.begin(), interfaces_.end(), [](const auto& i) { return i->started(); })) return;
    const transport::PortAttributes a = port_->attributes();
    if (a.state != transport::PortState::active || a.sm_lid == 0) return;
    bool announced = false;
    for (auto& i : interfaces_) {
        if (i->started()) continue;
        if (!announced) {
            mad_->path().refresh_port();
            log_.info("port active: LID " + std::to_string(a.lid) + ", joining the broadcast group",
                      {{runtime::field::kLid, runtime::field::format_lid(a.lid)}, {runtime::field::kGid, format_gid(a.gid())}});
            (void)notify_.status("port active, joining the broadcast group");
            announced = true;
        }
        i->start(a, now);
    }
}

void Node::handle_port_events(runtime::Clock::time_point now) {
    transport::PortEvent events[16];
    const std::size_t n = port_->poll_events(events);
    for (std::size_t e = 0; e < n; ++e) {
        const transport::PortAttributes a = port_->attributes();
        mad_->path().refresh_port();
        log_.info(std::string("port event: ") + transport::to_string(events[e]),
                  {{runtime::field::kLid, runtime::field::format_lid(a.lid)}});
        for (auto& i : interfaces_) i->on_port_event(events[e], a, now);
    }
    start_interfaces_if_ready(now);
}

std::size_t Node::poll_links(runtime::Clock::time_point now, std::size_t max) {
    std::size_t moved = 0;
    for (auto& i : interfaces_) moved += i->poll_link(now, max);
    return moved;
}

void Node::receive_mads() {
    // The agent hands each interface's SA client the responses to its own
    // requests (by TID) and the SA's Reports.
    mad_->receive(64);
}

void Node::port_ready() {
    process_port();
    end_of_turn();
}

void Node::process_port() {
    const runtime::Clock::time_point now = runtime::Clock::now();
    // Reap before every process(): each one may deliver a receive queue's
    // worth of datagrams, and a QP without posted buffers drops them.
    std::size_t moved = poll_links(now, 1024);
    port_->process();
    handle_port_events(now);
    moved += poll_links(now, 1024);
    receive_mads();
    moved += poll_links(now, 1024);
    if (moved > 0) loop_.keep_polling();  // IPoIB traffic (not link heartbeats or SA MADs)
}

void Node::end_of_turn() {
    port_->flush();
    for (auto& i : interfaces_) i->flush_host();
    schedule(runtime::Clock::now());
}

void Node::on_monitor_readable() {
    const runtime::Clock::time_point now = runtime::Clock::now();
    for (const netlink::MonitorEvent& ev : monitor_->drain()) {
        if (const auto* a = std::get_if<netlink::AddressEvent>(&ev)) {
            for (auto& i : interfaces_) {
                if (a->address.ifindex != i->host().ifindex()) continue;
                if (a->removed)
                    i->host_address_removed(a->address.prefix, now);
                else
                    i->host_address_added(a->address.prefix, now);  // announces it (gratuitous ARP / NA)
            }
        } else if (std::holds_alternative<netlink::RouteEvent>(ev) || std::holds_alternative<netlink::LinkEvent>(ev)) {
            if (const auto* l = std::get_if<netlink::LinkEvent>(&ev); l && l->removed)
                for (auto& i : interfaces_)
                    if (i->host().ifindex() != 0 && i->host().ifindex() == l->link.ifindex) host_gone(*i, "netlink");
            for (auto& i : interfaces_) i->host_routes_changed();
        } else if (std::holds_alternative<netlink::ResyncNeeded>(ev)) {
            resync_hosts(now);
        }
    }
    end_of_turn();
}

void Node::resync_hosts(runtime::Clock::time_point now) {
    for (auto& i : interfaces_) i->resync_host(now);
}

runtime::Clock::time_point Node::next_wakeup(runtime::Clock::time_point now) const {
    runtime::Clock::time_point next = now + kMaxSleep;
    for (const auto& i : interfaces_)
        if (auto d = i->next_deadline()) next = std::min(next, *d);
    if (cm_)
        if (auto d = cm_->next_deadline()) next = std::min(next, *d);
    // RC timers (connected mode): retransmissions, ACK coalescing.
    if (auto d = port_->next_deadline()) next = std::min(next, *d);
    if (fabric_service_) next = std::min(next, now + fabric::FabricService::kTickInterval);
    if (port_->needs_periodic_process() || !mad_pollable_ || stopping_) next = std::min(next, now + kPollInterval);
    return std::max(next, now);
}

void Node::arm(runtime::Clock::time_point at) {
    if (timer_) {
        if (armed_for_ <= at) return;  // it fires sooner, and looks again then
        loop_.cancel_timer(*timer_);
    }
    armed_for_ = at;
    timer_ = loop_.add_timer(at, [this] {
        timer_.reset();
        housekeeping();
    });
}

void Node::set_busy_poll(runtime::Clock::duration window) {
    loop_.set_busy_poll(window);
    for (auto& i : interfaces_) i->set_busy_poll(window);
}

void Node::schedule(runtime::Clock::time_point now) {
    if (now < evaluated_at_ + kRescheduleHoldoff) {
        arm(evaluated_at_ + kRescheduleHoldoff);
        return;
    }
    evaluated_at_ = now;
    arm(next_wakeup(now));
}

std::optional<runtime::Clock::time_point> Node::last_sm_contact() const {
    auto last = port_->last_sm_contact();
    if (!last) return std::nullopt;  // an SMA that is not ours: nothing to watch
    for (const auto& i : interfaces_)
        if (const auto sa = i->engine().last_sa_answer(); sa && *sa > *last) last = sa;
    return last;
}

// A soft port that the SM stops reaching still says ACTIVE (nothing told it
// otherwise), while the fabric may have given it up: say so once, and again
// when the SM is back. The SM shows it is alive by an SMP to the port, or
// by its SA answering: a healthy SM may leave a CA port alone for long
// (OpenSM's light sweeps read the switches, not the CA ports), so after
// half of sm-silence without either the node asks the SA (a Get
// ClassPortInfo, at most one each quarter of sm-silence), and only an SM
// that neither sweeps nor answers is reported. Ports whose SMA is the
// kernel's cannot tell.
void Node::check_sm_contact(runtime::Clock::time_point now) {
    const auto limit = config_.fabric.sm_silence;
    const auto last = last_sm_contact();
    const bool watching = limit.count() > 0 && last && port_->attributes().state == transport::PortState::active;
    if (watching && now - *last > limit / 2 && (!sa_probed_ || now - *sa_probed_ >= limit / 4) &&
        !interfaces_.empty()) {
        sa_probed_ = now;
        interfaces_.front()->probe_sa(now);
    }
    const bool silent = watching && now - *last > limit;
    if (silent == sm_silent_) return;
    sm_silent_ = silent;
    const std::string seconds = last ? std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - *last).count()) : "?";
    if (silent)
        log_.warning("no word from the subnet manager for " + seconds +
                         " s: no SMP reached the port and its SA does not answer; the port still says ACTIVE, but "
                         "the fabric may no longer route to it",
                     {{runtime::field::kLid, runtime::field::format_lid(port_->attributes().lid)}});
    else if (watching)
        log_.notice("the subnet manager reaches this port again", {{runtime::field::kLid, runtime::field::format_lid(port_->attributes().lid)}});
}

void Node::housekeeping() {
    const runtime::Clock::time_point now = runtime::Clock::now();
    if (fabric_service_) {
        fabric_service_->tick(now);
        fabric_service_->after_wakeup(now);
    }
    if (!mad_pollable_) receive_mads();
    const auto rc_due = port_->next_deadline();
    if (port_->needs_periodic_process() || (rc_due && *rc_due <= now))
        process_port();  // the flushes and the timer follow
    handle_port_events(now);
    for (auto& i : interfaces_) i->tick(now);
    if (cm_) cm_->tick(now);
    port_->flush();  // not process(): receiving is port_ready's, which reaps the QPs first
    for (auto& i : interfaces_) i->flush_host();
    if (capture_) capture_->flush();
    drops_log_->flush(now);
    fabric_drops_log_->flush(now);
    event_log_->flush(now);
    check_sm_contact(now);
    if (stopping_) {
        const bool idle = std::all_of(interfaces_.begin(), interfaces_.end(), [](const auto& i) { return i->sa_idle(); });
        if (idle || now >= stop_deadline_) {
            loop_.stop();
            return;
        }
    }
    evaluated_at_ = now;
    arm(next_wakeup(now));
}

int Node::run() {
    loop_.on_signal(SIGTERM, [this](const runtime::SignalInfo&) { stop("SIGTERM"); });
    loop_.on_signal(SIGINT, [this](const runtime::SignalInfo&) { stop("SIGINT"); });
    loop_.on_signal(SIGHUP, [this](const runtime::SignalInfo&) { reload(); });
    loop_.on_signal(SIGUSR1, [this](const runtime::SignalInfo&) { log_counters(); });
    start();
    if (auto r = loop_.run(); !r) {
        log_.error("event loop failed: " + r.error().message());
        return 1;
    }
    const std::string ifname = interfaces_.empty() ? instance_ : interfaces_.front()->name();
    log_.info("ipoibd stopped", {{runtime::field::kIfname, ifname}});
    return exit_status_;
}

void Node::start() {
    started_ = true;
    set_busy_poll(config_.daemon.busy_poll);
    // [daemon] watchdog = no: no pings (a unit with WatchdogSec= would then
    // restart the daemon; drop WatchdogSec= along with it).
    if (config_.daemon.watchdog)
        loop_.set_on_iteration([this] { (void)notify_.watchdog(runtime::Clock::now()); }, notify_.watchdog_ping_interval());
    (void)notify_.status("waiting for the port to become ACTIVE");
    const std::string ifname = interfaces_.empty() ? instance_ : interfaces_.front()->name();
    log_.info("ipoibd " IPOIBD_VERSION " started on " + port_name_,
              {{runtime::field::kIfname, ifname}, {runtime::field::kVersion, IPOIBD_VERSION}, {runtime::field::kConfigFile, config_file_}},
              runtime::msgid::kDaemonStarted);
    start_interfaces_if_ready(runtime::Clock::now());
    housekeeping();
}

void Node::host_gone(iface::Interface& i, const char* seen_by) {
    if (i.host_gone()) return;  // told already
    i.set_host_gone();
    // Its fd reports an error at every wait, its data threads' too.
    if (const int fd = i.host().fd(); fd >= 0) loop_.remove_fd(fd);
    if (const int fd = i.miss_fd(); fd >= 0) loop_.remove_fd(fd);
    i.stop_data_threads();
    log_.error(i.name() + " was deleted (" + seen_by + " said so): stopping with status 1 (the service manager " +
                   "starts ipoibd again, with its devices)",
               {{runtime::field::kIfname, i.name()}});
    exit_status_ = 1;
    stop("the deletion of " + i.name());
}

void Node::stop(const std::string& why) {
    if (stopping_) return;
    stopping_ = true;
    (void)notify_.stopping(std::string("leaving multicast groups (") + why + ")");
    for (auto& i : interfaces_) {
        log_.notice(std::string("stopping on ") + why + ": leaving every multicast group",
                    {{runtime::field::kIfname, i->name()}}, runtime::msgid::kDaemonStopping);
        i->stop(runtime::Clock::now());
    }
    port_->flush();
    stop_deadline_ = runtime::Clock::now() + kLeaveGrace;
    schedule(runtime::Clock::now());
}

void Node::reload() {
    (void)notify_.reloading(runtime::Clock::now());
    config::CommandLine cl;
    cl.instance = instance_;
    cl.config_file = config_file_;
    // The command line wins over the file (ipoibd.conf(5)), at every reload.
    cl.overrides = overrides_;
    auto fresh = config::load_config(cl);
    if (!fresh) {
        log_.error("reload failed, keeping the running configuration: " + fresh.error().message);
        (void)notify_.ready("reload failed; running configuration kept");
        return;
    }
    const config::ReloadPlan plan = config::diff_for_reload(config_, *fresh);
    // What needs a restart keeps its running value: the key table says
    // which keys those are (config/keys.cpp), and the rest comes from the
    // file. Children the reload adds are built with it. Each step below
    // puts back in it the running value of what it could not apply, so
    // that the next reload tries again.
    config::DaemonConfig target = config::apply_live(config_, *fresh);
    if (target.daemon.log_level != config_.daemon.log_level) log_.set_min_level(to_log_level(target.daemon.log_level));
    std::string failed = reload_parent(target);
    failed += reload_children(target);
    failed += reload_capture(target);
    set_busy_poll(target.daemon.busy_poll);
    std::vector<std::string> applied = config::diff_for_reload(config_, target).live;
    failed += reload_fabric_keys(applied);
    failed += reload_embedded_partitions(applied);
    config_ = std::move(target);
    log_reloaded(applied, plan.restart, failed);
    const bool up = !interfaces_.empty() && interfaces_.front()->engine().link().up;
    (void)notify_.ready(up ? "link up" : "waiting for the broadcast group");
    schedule(runtime::Clock::now());
}

// Addresses and routes (the difference goes to the host), the neighbour
// timers and send-only join state, connected mode.
std::string Node::reload_parent(config::DaemonConfig& target) {
    if (interfaces_.empty()) return {};
    iface::Interface& parent = *interfaces_.front();
    // target's [neighbour]: max-entries needs a restart (keys.cpp).
    std::string failed = parent.reconfigure(target.interface.addresses, host_routes(target.interface.routes),
                                            neighbour_cache_config(target.neighbour),
                                            join_state_bits(target.multicast.send_only_join));
    target.interface.addresses = parent.addresses();
    target.interface.routes = config_routes(parent.routes());
    if (target.interface.connected_mode != config_.interface.connected_mode)
        if (auto why = parent.set_connected(target.interface.connected_mode, runtime::Clock::now()); !why.empty()) {
            failed += " [interface] connected-mode: " + why + ";";
            target.interface.connected_mode = config_.interface.connected_mode;
        }
    return failed;
}

std::string Node::reload_capture(config::DaemonConfig& target) {
    if (target.daemon.capture == config_.daemon.capture) return {};
    if (target.daemon.capture.empty()) {
        capture_.reset();
        (void)port_->set_capture({});
        return {};
    }
    if (auto r = open_capture(target.daemon.capture); !r) {
        // The old capture (if any) goes on, and the new path is tried
        // again at the next reload.
        target.daemon.capture = capture_ ? config_.daemon.capture : std::string();
        return " " + r.error().message + (capture_ ? " (capture to " + config_.daemon.capture + " kept)" : "") + ";";
    }
    return {};
}

// The fabric key file is read again (rotation); a new path needs a restart.
std::string Node::reload_fabric_keys(std::vector<std::string>& applied) {
    if (config_.fabric.key_file.empty()) return {};
    auto keys = load_fabric_key_file(config_.fabric.key_file);
    if (!keys) return " [fabric] key-file: " + keys.error() + " (keys in use kept);";
    std::string failed;
    if (auto r = port_->set_fabric_keys(*keys); !r) failed += " fabric key: " + r.error().message() + ";";
    if (fabric_service_)
        if (auto r = fabric_service_->set_fabric_keys(*keys); !r) failed += " embedded fabric key: " + r.error() + ";";
    if (failed.empty()) applied.push_back("fabric key");
    return failed;
}

// The embedded fabric's partitions file is read again (the SM sets the
// P_KeyTables of the ports whose partitions changed, the SA creates the new
// partitions' broadcast groups); a new path needs a restart.
std::string Node::reload_embedded_partitions(std::vector<std::string>& applied) {
    if (!fabric_service_ || config_.fabric.embedded_partitions.empty()) return {};
    auto partitions = fabric::load_partitions(config_.fabric.embedded_partitions);
    if (!partitions)
        return " [fabric] embedded-partitions: " + partitions.error().to_string() + " (partitions in use kept);";
    const std::size_t changed = fabric_service_->set_partitions(std::move(*partitions));
    applied.push_back("embedded partitions (P_Keys changed on " + std::to_string(changed) +
                      (changed == 1 ? " port)" : " ports)"));
    return {};
}

void Node::log_reloaded(const std::vector<std::string>& applied, const std::vector<std::string>& restart,
                        const std::string& failed) {
    auto list = [](const std::vector<std::string>& keys) {
        std::string out;
        for (const std::string& key : keys) out += (out.empty() ? "" : ", ") + key;
        return out;
    };
    std::string message = "configuration reloaded";
    message += applied.empty() ? ": nothing changed live" : ": applied " + list(applied);
    if (!restart.empty()) message += "; needs a restart to take effect: " + list(restart);
    if (!failed.empty()) message += "; failed (tried again at the next reload):" + failed;
    const std::string ifname = interfaces_.empty() ? instance_ : interfaces_.front()->name();
    const runtime::LogField fields[] = {{runtime::field::kIfname, ifname}, {runtime::field::kConfigFile, config_file_}};
    log_.log(failed.empty() ? runtime::LogLevel::notice : runtime::LogLevel::warning, message, fields, runtime::msgid::kConfigReloaded);
}

// Children the file no longer names go; new ones come; a child whose P_Key,
// mode, MTU or connected mode changed is rebuilt (a new device and QP); one
// whose addresses or routes changed is reconfigured in place. A child that
// could not be built is left out of `target`, so the next reload builds it.
std::string Node::reload_children(config::DaemonConfig& target) {
    std::string failed;
    const auto now = runtime::Clock::now();
    auto find = [](const std::vector<config::ChildSection>& v, const std::string& name) -> const config::ChildSection* {
        for (const auto& c : v)
            if (c.name == name) return &c;
        return nullptr;
    };
    for (const config::ChildSection& old : config_.children) {
        const config::ChildSection* now_c = find(target.children, old.name);
        const bool rebuild = now_c && (now_c->pkey != old.pkey || now_c->mode != old.mode || now_c->mtu != old.mtu ||
                                       now_c->connected_mode != old.connected_mode);
        if (!now_c || rebuild) remove_interface(old.name, now);
    }
    for (const config::ChildSection& c : target.children) {
        const config::ChildSection* old = find(config_.children, c.name);
        if (interface_named(c.name) && old) continue;  // reconfigured below
        auto host = open_host(child_spec(c));
        if (!host) {
            failed += " [child " + c.name + "]: " + host.error() + ";";
            continue;
        }
        if (auto r = add_interface(std::move(*host), child_spec(c), target); !r) {
            failed += " [child " + c.name + "]: " + r.error() + ";";
            continue;
        }
    }
    std::erase_if(target.children, [&](const config::ChildSection& c) { return !interface_named(c.name); });
    // The children kept: their addresses and routes, and the neighbour
    // timers and send-only join state the parent takes too.
    for (config::ChildSection& c : target.children) {
        if (!find(config_.children, c.name)) continue;
        iface::Interface& child = *interface_named(c.name);
        failed += child.reconfigure(c.addresses, host_routes(c.routes), neighbour_cache_config(target.neighbour),
                                    join_state_bits(target.multicast.send_only_join));
        c.addresses = child.addresses();
        c.routes = config_routes(child.routes());
    }
    start_interfaces_if_ready(now);
    return failed;
}

void Node::log_counters() {
    for (const auto& i : interfaces_) log_.info("counters: " + answer_stats(*i), {{runtime::field::kIfname, i->name()}});
}

iface::Interface* Node::interface_named(std::string_view name) {
    for (auto& i : interfaces_)
        if (i->name() == name) return i.get();
    return nullptr;
}


// ---------------------------------------------------------------------------
// InterfaceEvents

bool Node::send_sa(sa::MadClient& from, const sa::SaMad& mad) {
    auto r = mad_->send(from, mad);
    if (!r) drops_log_->log("sa_send", "could not send an SA MAD: " + r.error().message(), {}, runtime::Clock::now());
    return r.has_value();
}

void Node::link_changed(const std::string& ifname, const ipoib::LinkStatus& s) {
    if (s.up) {
        const std::string status = ifname + " up: MTU " + std::to_string(s.mtu) + ", QPN " + std::to_string(s.qpn) +
                                   ", broadcast group joined";
        if (!ready_sent_) {
            ready_sent_ = true;
            (void)notify_.ready(status);
        } else {
            (void)notify_.status(status);
        }
    } else {
        (void)notify_.status(ifname + " down: waiting for the broadcast group");
    }
}

void Node::engine_event(const std::string& ifname, const ipoib::EngineEvent& e) {
    event_log_->log(ifname, e, runtime::Clock::now());
}

void Node::host_warning(const std::string& ifname, const std::string& message) {
    log_.warning(message, {{runtime::field::kIfname, ifname}});
}

}  // namespace ipoibd::daemon
