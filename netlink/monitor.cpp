#include "netlink/monitor.h"

#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace ipoibd::netlink {

void visit(const MonitorCounters& c, CounterSink& out) {
    out.counter("netlink_datagrams", c.datagrams);
    out.counter("netlink_events", c.link_events + c.address_events + c.route_events);
    out.counter("netlink_malformed", c.malformed);
    out.counter("netlink_ignored", c.ignored);
    out.counter("netlink_overruns", c.overruns);
    out.counter("netlink_receive_errors", c.receive_errors);
}
namespace {

constexpr unsigned kGroups[] = {
    RTNLGRP_LINK,
    RTNLGRP_IPV4_IFADDR,
    RTNLGRP_IPV6_IFADDR,
    RTNLGRP_IPV4_ROUTE,
    RTNLGRP_IPV6_ROUTE,
};

// One ResyncNeeded covers a run of losses.
void request_resync(std::vector<MonitorEvent>& events) {
    if (events.empty() || !std::holds_alternative<ResyncNeeded>(events.back())) events.emplace_back(ResyncNeeded{});
}

void refuse(const std::string& reason, MonitorCounters& counters, std::string* last_error) {
    ++counters.malformed;
    if (last_error) *last_error = reason;
}

void parse_one(Bytes message, std::vector<MonitorEvent>& events, MonitorCounters& counters, std::string* last_error) {
    const std::uint16_t type = message_type(message);
    switch (type) {
    case RTM_NEWLINK:
    case RTM_DELLINK: {
        auto link = parse_link_message(message);
        if (!link) return refuse(link.error(), counters, last_error);
        ++counters.link_events;
        events.emplace_back(LinkEvent{.link = std::move(*link), .removed = type == RTM_DELLINK});
        return;
    }
    case RTM_NEWADDR:
    case RTM_DELADDR: {
        auto address = parse_address_message(message);
        if (!address) return refuse(address.error(), counters, last_error);
        ++counters.address_events;
        events.emplace_back(AddressEvent{.address = *address, .removed = type == RTM_DELADDR});
        return;
    }
    case RTM_NEWROUTE:
    case RTM_DELROUTE: {
        auto route = parse_route_message(message);
        if (!route) return refuse(route.error(), counters, last_error);
        ++counters.route_events;
        events.emplace_back(RouteEvent{.route = *route, .removed = type == RTM_DELROUTE});
        return;
    }
    default:
        ++counters.ignored;
        return;
    }
}

}  // namespace

void parse_notifications(Bytes datagram, std::vector<MonitorEvent>& events, MonitorCounters& counters,
                         std::string* last_error) {
    auto messages = split_messages(datagram);
    // A datagram whose framing is broken cannot be walked past the break;
    // it counts as one malformed message.
    if (!messages) return refuse(messages.error(), counters, last_error);
    for (Bytes message : *messages) parse_one(message, events, counters, last_error);
}

void RtnlMonitor::MnlClose::operator()(mnl_socket* s) const { mnl_socket_close(s); }

RtnlMonitor::RtnlMonitor(std::unique_ptr<mnl_socket, MnlClose> socket, Options options)
    : socket_(std::move(socket)), options_(options), buffer_(kReceiveBufferSize) {}

RtnlMonitor::RtnlMonitor(RtnlMonitor&&) noexcept = default;
RtnlMonitor& RtnlMonitor::operator=(RtnlMonitor&&) noexcept = default;
RtnlMonitor::~RtnlMonitor() = default;

int RtnlMonitor::fd() const { return mnl_socket_get_fd(socket_.get()); }

expected<RtnlMonitor, SysError> RtnlMonitor::open(Options options) {
    std::unique_ptr<mnl_socket, MnlClose> socket(mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!socket) return unexpected(SysError{"open a NETLINK_ROUTE monitor socket", errno});
    if (mnl_socket_bind(socket.get(), 0, MNL_SOCKET_AUTOPID) < 0)
        return unexpected(SysError{"bind the NETLINK_ROUTE monitor socket", errno});
    // NETLINK_ADD_MEMBERSHIP takes group numbers, unlike bind()'s 32-bit
    // legacy mask, so every RTNLGRP_* is reachable the same way.
    for (unsigned group : kGroups) {
        if (mnl_socket_setsockopt(socket.get(), NETLINK_ADD_MEMBERSHIP, &group, sizeof group) < 0)
            return unexpected(SysError{"join rtnetlink group " + std::to_string(group), errno});
    }
    // SO_RCVBUFFORCE passes rmem_max when privileged; otherwise SO_RCVBUF
    // gets what the limit allows. Either way the monitor works; a small
    // buffer only means earlier overruns.
    const int fd = mnl_socket_get_fd(socket.get());
    int size = options.receive_buffer;
    if (size > 0 && ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
        ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    return RtnlMonitor(std::move(socket), options);
}

std::vector<MonitorEvent> RtnlMonitor::drain() {
    std::vector<MonitorEvent> events;
    for (std::size_t i = 0; i < options_.max_datagrams_per_drain; ++i) {
        const ssize_t n = mnl_socket_recvfrom(socket_.get(), buffer_.data(), buffer_.size());
        if (n >= 0) {
            ++counters_.datagrams;
            parse_notifications(Bytes(buffer_.data(), static_cast<std::size_t>(n)), events, counters_, &last_error_);
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        const int error = errno;
        if (error == ENOBUFS || error == ENOSPC) {
            // ENOBUFS: the queue overflowed and the kernel dropped
            // notifications. ENOSPC: libmnl saw MSG_TRUNC, the datagram is
            // gone. Either way the socket keeps working and the next recv
            // returns what is still queued.
            if (error == ENOBUFS) {
                ++counters_.overruns;
            } else {
                ++counters_.receive_errors;
                last_error_ = "recv: notification larger than the receive buffer";
            }
            request_resync(events);
            continue;
        }
        // Anything unexpected: count, keep the reason, stop this batch.
        ++counters_.receive_errors;
        last_error_ = std::string("recv: ") + std::strerror(error);
        break;
    }
    return events;
}

}  // namespace ipoibd::netlink
