#include "transport/soft/soft_port.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>

#include <cerrno>

#include "transport/soft/route_hint.h"
#include "transport/wire/link.h"

namespace ipoibd::transport {

class SoftPort::Link final : public LinkSink {
public:
    Link(SoftPort& port, UdpBatchSocket& socket) : port_(port), socket_(socket) {}
    bool transmit(bytes packet) override { return port_.transmit(packet); }
    void flush() override {
        if (!deferred) socket_.flush();
    }
    bool deferred = false;

private:
    SoftPort& port_;
    UdpBatchSocket& socket_;
};

namespace {

Error sys_error(const std::string& what, int err) { return Error{Errc::system_error, what, err}; }

}  // namespace

expected<std::unique_ptr<SoftPort>, Error> SoftPort::open(const SoftPortConfig& config) {
    if (config.port_guid == 0) return unexpected(Error{Errc::invalid_argument, "soft port needs a non-zero port GUID"});
    if (config.link_interval.count() <= 0 || config.link_timeout_intervals == 0)
        return unexpected(Error{Errc::invalid_argument, "link interval and timeout must be positive"});
    SocketAddress bind_to;
    if (config.bind_to) {
        bind_to = *config.bind_to;
    } else {
        auto any = parse_socket_address(config.fabric.family() == AF_INET6 ? "[::]:0" : "0.0.0.0:0");
        bind_to = *any;
    }
    // Not connected: cut-through packets come from other ports' addresses.
    auto socket = UdpBatchSocket::open(bind_to, nullptr);
    if (!socket) return unexpected(sys_error(socket.error().operation, socket.error().error));

    UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!timer) return unexpected(sys_error("timerfd_create", errno));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(config.link_interval).count();
    itimerspec spec{};
    spec.it_interval.tv_sec = ns / 1'000'000'000;
    spec.it_interval.tv_nsec = ns % 1'000'000'000;
    spec.it_value = spec.it_interval;
    if (::timerfd_settime(timer.get(), 0, &spec, nullptr) != 0) return unexpected(sys_error("timerfd_settime", errno));

    UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll) return unexpected(sys_error("epoll_create1", errno));
    for (int fd : {socket->fd(), timer.get()}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return unexpected(sys_error("epoll_ctl", errno));
    }
    std::unique_ptr<SoftPort> port(new SoftPort(config, std::move(*socket), std::move(timer), std::move(epoll)));
    port->send_link_packet();  // announce the link at once
    port->socket_.flush();
    return port;
}

SoftPort::~SoftPort() = default;

expected<std::unique_ptr<UdQp>, Error> SoftPort::create_ud_qp(const UdQpConfig& config) {
    return port_.core().create_ud_qp(config);
}

expected<std::unique_ptr<UdQp>, Error> SoftPort::create_gsi_qp(std::uint32_t send_depth, std::uint32_t receive_depth) {
    return port_.core().create_gsi_qp(send_depth, receive_depth);
}

bool SoftPort::send_raw(bytes packet) {
    const bool ok = port_.core().transmit_raw(packet);
    socket_.flush();
    return ok;
}

void SoftPort::set_deferred_flush(bool deferred) { link_sink_->deferred = deferred; }

void SoftPort::flush() { socket_.flush(); }

void SoftPort::process() {
    std::uint64_t expirations = 0;
    if (::read(timer_.get(), &expirations, sizeof expirations) == sizeof expirations && expirations > 0)
        on_timer(expirations);
    socket_.receive([this](bytes d, const SocketAddress& from) { on_datagram(d, from); });
    socket_.flush();
}

void SoftPort::on_timer(std::uint64_t expirations) {
    intervals_silent_ += expirations;
    if (link_up_ && intervals_silent_ >= config_.link_timeout_intervals) set_link(false);
    send_link_packet();
}

void SoftPort::send_link_packet() {
    std::array<std::uint8_t, ib::LinkPacket::size> buf{};
    ib::LinkPacket lp;
    lp.op = link_up_ ? ib::LinkPacket::kOpNormal : ib::LinkPacket::kOpInit;
    lp.write_to(buf.data());
    if (socket_.queue(buf, &config_.fabric)) ++link_.link_packets_sent;
}

bool SoftPort::hints_current() const {
    const PortAttributes& a = port_.core().attributes();
    return a.state == PortState::active && a.lid == hints_lid_ && a.sm_lid == hints_sm_lid_ &&
           port_.reregistrations() == hints_reregistrations_;
}

bool SoftPort::transmit(bytes packet) {
    // Hints belong to one programming of the port by one SM: a port that is
    // not ACTIVE, whose LID or SM changed, or that an SM asked to
    // re-register (a restarted fabric re-sweeps without the link going down
    // and may give a LID to a port at another address) forgets them.
    if (!direct_.empty() && !hints_current()) direct_.clear();
    if (!direct_.empty() && packet.size() >= ib::Lrh::size) {
        const std::uint16_t dlid = load_be16(packet.data() + 2);
        if (auto it = direct_.find(dlid); it != direct_.end()) {
            const auto now = std::chrono::steady_clock::now();
            if (now < it->second.expires) {
                if (now >= it->second.refresh_at && !it->second.refresh_asked) {
                    std::array<std::uint8_t, RouteHint::size> req;
                    encode_route_request(dlid, req);
                    if (socket_.queue(req, &config_.fabric)) ++cut_.refresh_requests;
                    it->second.refresh_asked = true;
                }
                ++cut_.direct_tx;
                return socket_.queue(packet, &it->second.peer);
            }
            direct_.erase(it);  // expired: this packet fetches a fresh hint
        }
    }
    ++cut_.via_switch_tx;
    return socket_.queue(packet, &config_.fabric);
}

void SoftPort::on_datagram(bytes datagram, const SocketAddress& from) {
    const bool from_fabric = from == config_.fabric;
    if (!from_fabric) {
        // Only IBA packets come straight from peers; PortCore validates them.
        if (datagram.size() == ib::LinkPacket::size || is_soft_control(datagram) || !link_up_) {
            ++cut_.hints_bad;
            return;
        }
        ++cut_.direct_rx;
        port_.core().receive(datagram);
        return;
    }
    if (is_soft_control(datagram)) {
        const auto hint = decode_route_hint(datagram);
        if (!hint || !link_up_) {
            ++cut_.hints_bad;
            return;
        }
        const PortAttributes& a = port_.core().attributes();
        if (a.state != PortState::active) {
            ++cut_.hints_bad;
            return;
        }
        if (!hints_current()) direct_.clear();
        hints_lid_ = a.lid;
        hints_sm_lid_ = a.sm_lid;
        hints_reregistrations_ = port_.reregistrations();
        ++cut_.hints;
        const auto now = std::chrono::steady_clock::now();
        const auto ttl = std::chrono::milliseconds(hint->ttl_ms);
        direct_[hint->dlid] = Direct{.peer = hint->peer, .expires = now + ttl, .refresh_at = now + ttl / 2, .refresh_asked = false};
        return;
    }
    if (datagram.size() == ib::LinkPacket::size) {
        if (!ib::parse_link_packet(datagram)) {
            ++link_.link_packets_bad;
            return;
        }
        ++link_.link_packets_received;
        intervals_silent_ = 0;
        if (!link_up_) set_link(true);
        return;
    }
    port_.core().receive(datagram);
}

}  // namespace ipoibd::transport

namespace ipoibd::transport {

SoftPort::SoftPort(const SoftPortConfig& config, UdpBatchSocket socket, UniqueFd timer, UniqueFd epoll)
    : config_(config),
      socket_(std::move(socket)),
      timer_(std::move(timer)),
      epoll_(std::move(epoll)),
      link_sink_(std::make_unique<Link>(*this, socket_)),
      port_(SmaIdentity{
                .node_guid = config.node_guid ? config.node_guid : config.port_guid,
                .port_guid = config.port_guid,
                .node_description = config.node_description,
                .mtu_cap = config.mtu,
            },
            *link_sink_) {}

void SoftPort::set_link(bool up) {
    link_up_ = up;
    direct_.clear();  // the SM will program the port anew
    ++(up ? link_.link_ups : link_.link_downs);
    if (up)
        port_.link_up();
    else
        port_.link_down();
}

}  // namespace ipoibd::transport
