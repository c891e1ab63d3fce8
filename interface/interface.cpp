// One IPoIB interface; the flow is drawn in interface.h.
#include "interface/interface.h"

#include <algorithm>

#include "ipoib/link.h"

namespace ipoibd::iface {

namespace {

// Reads of the host between hand-overs to the wire: a super-packet is up to
// 45 datagrams, and the send queue must not fill before its completions
// are reaped.
constexpr std::size_t kLongRun = 8;
constexpr std::size_t kReadsPerHandover = 4;
// Connected mode reads datagrams of up to 64 KiB: after this many bytes
// from the host the port is served too (the peer's ACKs, credits and
// requests), so that a long batch does not leave them waiting until the
// peer's RC timers expire.
constexpr std::size_t kConnectedBytesPerService = 256 * 1024;

template <class T>
std::vector<T> missing_from(const std::vector<T>& a, const std::vector<T>& b) {
    std::vector<T> out;
    for (const T& x : a)
        if (std::find(b.begin(), b.end(), x) == b.end()) out.push_back(x);
    return out;
}

// What the host holds after moving it from `running` to `wanted`: `wanted`,
// less what it refused to add, plus what it refused to remove. Recorded as
// such, a refused change is tried again by the next reload.
template <class T, class Add, class Remove>
std::vector<T> apply_difference(const std::vector<T>& running, const std::vector<T>& wanted, Add add, Remove remove,
                                std::string& failed) {
    std::vector<T> held = wanted;
    for (const T& x : missing_from(running, wanted))
        if (auto r = remove(x); !r) {
            failed += " " + r.error();
            held.push_back(x);
        }
    for (const T& x : missing_from(wanted, running))
        if (auto r = add(x); !r) {
            failed += " " + r.error();
            std::erase(held, x);
        }
    return held;
}

// Routes in the order the kernel takes them: those on the link before
// those through a gateway, which the kernel refuses unless an address or
// an on-link route already covers the gateway. Otherwise in the file's
// order.
std::vector<host::HostRoute> kernel_order(std::vector<host::HostRoute> routes) {
    std::stable_partition(routes.begin(), routes.end(), [](const host::HostRoute& r) { return !r.gateway; });
    return routes;
}

}  // namespace

void visit(const InterfaceCounters& c, CounterSink& out) {
    out.counter("sa_send_errors", c.sa_send_errors);
    out.counter("host_config_errors", c.host_config_errors);
}

Interface::Interface(InterfaceConfig config, transport::Port& port, std::unique_ptr<host::HostPort> host,
                     InterfaceEvents& events, cm::CmAccess* cm, std::uint64_t seed)
    : config_(std::move(config)),
      port_(port),
      host_(std::move(host)),
      events_(events),
      link_(port, config_.link),
      connected_on_(config_.engine.connected) {
    if (cm)
        connected_ = std::make_unique<ipoib::ConnectedLink>(
            port, *cm, config_.connected,
            [this](ipoib::EngineEventKind kind, std::string message,
                   std::vector<std::pair<std::string, std::string>> fields) {
                fields.emplace_back("IB_PKEY", ipoib::hex16(config_.engine.pkey));
                events_.engine_event(name(), ipoib::EngineEvent{.kind = kind, .message = std::move(message),
                                                                .fields = std::move(fields)});
            },
            seed);
    engine_ = std::make_unique<ipoib::Engine>(config_.engine, *this, *this, config_.sa);
    if (connected_)
        connected_->on_peer_gone([this](const ipoib::HwAddress& gone) { engine_->peer_gone(gone, Clock::now()); });
    if (auto mac = host_->mac()) {
        ipoib::EthernetHostIo& io = *this;
        ethernet_ = std::make_unique<ipoib::EthernetHost>(config_.ethernet, *mac, *engine_, io);
    }
}

Interface::~Interface() {
    // The engine may call back into the links while it goes.
    ethernet_.reset();
    engine_.reset();
    connected_.reset();
}

expected<std::uint32_t, std::string> Interface::open_qp(std::uint32_t qkey, std::uint16_t pkey) {
    auto qpn = link_.open_qp(qkey, pkey);
    if (qpn && connected_) {
        if (connected_on_) {
            open_connected(*qpn, pkey, Clock::now());
        } else {
            connected_->close(Clock::now());
        }
    }
    return qpn;
}

void Interface::open_connected(std::uint32_t qpn, std::uint16_t pkey, Clock::time_point now) {
    if (auto r = connected_->open(qpn, pkey, now); !r)
        events_.host_warning(name(), "connected mode: peers' connections are not accepted (" + r.error() +
                                         "): the link address carries no flag 0x80, peers reach this host over UD");
}

std::string Interface::set_connected(bool on, Clock::time_point now) {
    std::string why;
    if (on && !connected_) why = "connected mode needs a connection manager, which this port does not offer";
    connected_on_ = on;
    if (connected_) {
        if (on) {
            if (link_.has_qp()) open_connected(link_.qpn(), config_.engine.pkey, now);
        } else {
            connected_->close(now);
        }
    }
    engine_->set_connected(on, now);
    return why;
}

void Interface::tick(Clock::time_point now) {
    engine_->tick(now);
    if (connected_) connected_->tick(now);
    if (ethernet_) ethernet_->tick(now);
}

std::optional<Clock::time_point> Interface::next_deadline() const {
    auto next = engine_->next_deadline();
    if (connected_)
        if (auto d = connected_->next_deadline(); d && (!next || *d < *next)) next = d;
    if (ethernet_)
        if (auto d = ethernet_->next_deadline(); d && (!next || *d < *next)) next = d;
    return next;
}

void Interface::write_tun(bytes ip_packet, const ipoib::PacketSource& from) {
    if (ethernet_)
        ethernet_->to_host(ip_packet, from);
    else
        host_->write(ip_packet);
}

void Interface::neighbour_learned(const IpAddress& ip, const ipoib::HwAddress& hw, std::uint16_t slid) {
    if (ethernet_) ethernet_->neighbour_learned(ip, hw, slid, Clock::now());
}

void Interface::stop(Clock::time_point now) {
    engine_->stop(now);
    if (connected_) connected_->close(now);
}

expected<void, std::string> Interface::configure_host(std::uint64_t port_guid) {
    // No carrier until the broadcast group is joined; a host that cannot
    // say so (no TUNSETCARRIER) still works.
    host_result(host_->set_carrier(false));
    for (const IpPrefix& p : config_.addresses)
        if (auto r = host_->add_address(p); !r) return unexpected("could not configure " + name() + ": " + r.error());
    // The link-local address is RFC 4391's (port GUID as EUI-64).
    if (auto r = host_->add_address({IpAddress::v6(ipoib::link_local_address(port_guid)), 64}); !r)
        events_.host_warning(name(), "could not add the link-local address: " + r.error());
    if (auto r = host_->set_up(true); !r) return unexpected("could not bring " + name() + " up: " + r.error());
    for (const host::HostRoute& route : kernel_order(config_.routes))
        if (auto r = host_->add_route(route); !r)
            return unexpected("could not add routes on " + name() + ": " + r.error());
    for (const IpPrefix& p : config_.addresses)
        engine_->add_address({.ip = p.address, .prefix_length = p.length}, Clock::now());
    return {};
}

void Interface::start(const transport::PortAttributes& attributes, Clock::time_point now) {
    started_ = true;
    engine_->start(attributes, now);
}

void Interface::on_port_event(transport::PortEvent event, const transport::PortAttributes& attributes,
                              Clock::time_point now) {
    if (started_) engine_->on_port_event(event, attributes, now);
}

// ---------------------------------------------------------------------------
// The data path

void Interface::read_host(Clock::time_point now) {
    now_ = now;
    // After a quiet spell one read per wake-up, with no read that finds
    // nothing after it (host/read_pacing.h). The engine's sends leave in
    // one batch. Completions are reaped by the port handler; a full send
    // queue drops (counted), never blocks.
    if (host_->read_batch(*this, host_reads_.reads(now)) > 0) {
        host_reads_.read_at(now);
        events_.traffic();
    }
    port_.flush();
    poll_link(Clock::now(), 256);
    // The host port is flushed at the end of the node's turn.
}

void Interface::on_host_packet(bytes ip_packet, const std::optional<IpAddress>& next_hop) {
    host_bytes_ += ip_packet.size();
    engine_->on_tun_packet(ip_packet, next_hop, now_);
}

void Interface::on_host_frame(bytes ethernet_frame) {
    host_bytes_ += ethernet_frame.size();
    if (ethernet_) ethernet_->on_host_frame(ethernet_frame, now_);
}

void Interface::after_host_read(std::size_t datagrams, std::size_t read_index) {
    if (connected_ && connected_->connections() > 0 && host_bytes_ >= kConnectedBytesPerService) {
        host_bytes_ = 0;
        events_.serve_port();
        return;
    }
    if (datagrams > kLongRun || read_index % kReadsPerHandover == kReadsPerHandover - 1) {
        port_.flush();
        poll_link(now_, 1024);
    }
}

std::size_t Interface::poll_link(Clock::time_point now, std::size_t max) {
    const auto deliver = [&](const ipoib::ReceivedDatagram& d) { engine_->on_datagram(d, now); };
    // RC before UD: a peer that saw its RC message acknowledged may send the
    // next small frame over UD (ConnectedLink::Config::datagram_when_idle);
    // the message's completion is here before that datagram's.
    std::size_t n = 0;
    if (connected_ && connected_->connections() > 0) n += connected_->poll(deliver, now, max);
    n += link_.poll(deliver, max);
    return n;
}

// ---------------------------------------------------------------------------
// The host side

// The host port's errors name the operation ("could not set the carrier of
// ib0: ...", the rtnetlink request): counted and logged.
void Interface::host_result(const expected<void, std::string>& r) {
    if (r || host_gone_) return;
    ++counters_.host_config_errors;
    events_.host_warning(name(), r.error());
}

void Interface::link_changed(const ipoib::LinkStatus& s) {
    if (s.up) {
        if (config_.requested_mtu > s.mtu)
            events_.host_warning(name(), "[interface] mtu = " + std::to_string(config_.requested_mtu) +
                                             " is more than the broadcast group carries; using " +
                                             std::to_string(s.mtu) +
                                             " (the fabric's partition sets the group MTU)");
        host_result(host_->set_mtu(s.mtu));
        host_result(host_->set_carrier(true));
        host_routes_changed();
    } else {
        host_result(host_->set_carrier(false));
        if (ethernet_) ethernet_->flush();
    }
    events_.link_changed(name(), s);
}

void Interface::host_address_added(const IpPrefix& address, Clock::time_point now) {
    if (is_link_local(address.address)) return;
    engine_->add_address({.ip = address.address, .prefix_length = address.length}, now);  // announced
    host_routes_changed();
}

void Interface::host_address_removed(const IpPrefix& address, Clock::time_point now) {
    if (is_link_local(address.address)) return;
    engine_->remove_address({.ip = address.address, .prefix_length = address.length}, now);
    host_routes_changed();
}

void Interface::resync_host(Clock::time_point now) {
    host_routes_changed();
    auto listed = host_->list_addresses();
    if (!listed) {
        host_result(unexpected("could not list the addresses of " + name() + ": " + listed.error()));
        return;
    }
    // The engine's own link-local address is none of the host's business.
    for (const ipoib::AddressView& a : engine_->addresses()) {
        const bool listed_still = std::any_of(listed->begin(), listed->end(),
                                              [&](const IpPrefix& p) { return p.address == a.address.ip; });
        if (!a.implicit && !listed_still) host_address_removed({a.address.ip, a.address.prefix_length}, now);
    }
    for (const IpPrefix& p : *listed) host_address_added(p, now);
}

std::string Interface::reconfigure(const std::vector<IpPrefix>& addresses, const std::vector<host::HostRoute>& routes,
                                   const ipoib::NeighbourCache::Config& neighbour,
                                   std::uint8_t send_only_join_state) {
    std::string failed;
    host::HostPort& h = *host_;
    config_.addresses = apply_difference(
        config_.addresses, addresses, [&](const IpPrefix& p) { return h.add_address(p); },
        [&](const IpPrefix& p) { return h.remove_address(p); }, failed);
    config_.routes = apply_difference(
        config_.routes, kernel_order(routes), [&](const host::HostRoute& r) { return h.add_route(r); },
        [&](const host::HostRoute& r) { return h.remove_route(r); }, failed);
    ipoib::NeighbourCache::Config n = neighbour;
    n.reachable_factor = engine_->neighbours().config().reachable_factor;  // the same generator
    engine_->reconfigure(n, send_only_join_state);
    return failed;
}

}  // namespace ipoibd::iface

namespace ipoibd::iface {

expected<void, std::string> Interface::start_data_threads(std::size_t threads) {
    if (threads <= 1 || !workers_.empty()) return {};
    auto plane = std::make_shared<DataPlane>();
    if (plane->misses().fd() < 0) return unexpected(std::string("could not create an eventfd for the data threads"));
    std::vector<std::unique_ptr<DataWorker>> workers;
    // On failure the queues opened so far close with `workers` and the
    // port's copies of them: a queue left open with no reader would swallow
    // the flows the host hashes to it.
    for (std::size_t i = 1; i < threads; ++i) {
        auto send = port_.create_send_queue();
        if (!send) {
            host_->close_queues();
            return unexpected("data thread " + std::to_string(i) + ": " + send.error().message());
        }
        auto queue = host_->open_queue();
        if (!queue) {
            host_->close_queues();
            return unexpected("data thread " + std::to_string(i) + ": " + queue.error());
        }
        workers.push_back(std::make_unique<DataWorker>(std::move(*queue), std::move(*send), plane, config_.host_max_batch));
        workers.back()->set_busy_poll(busy_poll_);
    }
    plane_ = std::move(plane);
    workers_ = std::move(workers);
    publish_forwarding(Clock::now());
    for (auto& w : workers_)
        if (auto r = w->start(); !r) {
            stop_data_threads();
            workers_.clear();
            host_->close_queues();
            plane_.reset();
            return r;
        }
    return {};
}

void Interface::set_busy_poll(Clock::duration window) {
    busy_poll_ = window;
    for (auto& w : workers_) w->set_busy_poll(window);
}

void Interface::stop_data_threads() {
    for (auto& w : workers_) w->stop();  // each detaches its queue
    host_->close_queues();
}

void Interface::serve_misses(Clock::time_point now) {
    if (!plane_) return;
    now_ = now;
    // As a host read: the engine's sends leave in batches, and completions
    // are reaped between them so that a long drain does not fill the send
    // queue.
    std::size_t since_flush = 0, served = 0;
    const auto batch_done = [&] {
        ++served;
        if (++since_flush < 64) return;
        since_flush = 0;
        port_.flush();
        poll_link(Clock::now(), 256);
    };
    plane_->misses().drain(
        [&](bytes packet, const std::optional<IpAddress>& next_hop) {
            on_host_packet(packet, next_hop);
            batch_done();
        },
        [&](const IpAddress& ip) {
            engine_->touch_neighbour(ip, now);
            batch_done();
        });
    if (served == 0) return;  // woken with nothing waiting: no traffic to keep busy polling for
    events_.traffic();
    port_.flush();
    poll_link(Clock::now(), 256);
}

void Interface::publish_forwarding(Clock::time_point now) {
    // Connected mode: the peers' traffic goes over RC, the loop's; the
    // host then sends every flow to the loop's queue.
    if (const bool on = !engine_->link().connected; on != workers_on_) {
        workers_on_ = on;  // tried once per change: a refusal is logged, not retried every turn
        host_->use_queues(on);  // the loop's writes, which teach the host's flow table, stay on its queue
        for (auto& w : workers_)
            if (auto r = w->set_enabled(on); !r) events_.host_warning(name(), "data threads: " + r.error());
    }
    const transport::UdQp* qp = link_.qp();
    const transport::SendAs as =
        qp ? transport::SendAs{qp->qpn(), qp->qkey(), qp->pkey(), qp->pkey_index()} : transport::SendAs{};
    const std::uint64_t fp =
        engine_->forwarding_fingerprint() * 31 + as.qpn * 7 + as.qkey + as.pkey + (std::uint64_t{as.pkey_index} << 40);
    if (published_ == fp) return;
    auto s = engine_->forwarding_snapshot(now);
    s->as = as;
    if (!qp) s->up = false;
    plane_->publish(std::move(s));
    published_ = fp;
}

}  // namespace ipoibd::iface
