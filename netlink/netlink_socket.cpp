#include "netlink/netlink_socket.h"

#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace ipoibd::netlink {

std::string link_name(std::uint32_t ifindex) {
    char name[IF_NAMESIZE] = {};
    if (::if_indextoname(ifindex, name) != nullptr) return name;
    return "ifindex " + std::to_string(ifindex);
}

void NetlinkSocket::MnlClose::operator()(mnl_socket* s) const { mnl_socket_close(s); }

NetlinkSocket::NetlinkSocket(std::unique_ptr<mnl_socket, MnlClose> socket, std::chrono::milliseconds timeout)
    : socket_(std::move(socket)),
      timeout_(timeout),
      portid_(mnl_socket_get_portid(socket_.get())),
      buffer_(kReceiveBufferSize) {}

NetlinkSocket::NetlinkSocket(NetlinkSocket&&) noexcept = default;
NetlinkSocket& NetlinkSocket::operator=(NetlinkSocket&&) noexcept = default;
NetlinkSocket::~NetlinkSocket() = default;

int NetlinkSocket::fd() const { return mnl_socket_get_fd(socket_.get()); }

expected<NetlinkSocket, SysError> NetlinkSocket::open(std::chrono::milliseconds timeout) {
    std::unique_ptr<mnl_socket, MnlClose> socket(mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC));
    if (!socket) return unexpected(SysError{"open a NETLINK_ROUTE socket", errno});
    if (mnl_socket_bind(socket.get(), 0, MNL_SOCKET_AUTOPID) < 0)
        return unexpected(SysError{"bind a NETLINK_ROUTE socket", errno});
    NetlinkSocket result(std::move(socket), timeout);
    // Niceties (see netlink_socket.h): a kernel that refuses one still
    // answers every request, with less detail.
    int on = 1;
    result.extended_ack_ = mnl_socket_setsockopt(result.socket_.get(), NETLINK_EXT_ACK, &on, sizeof on) == 0;
    mnl_socket_setsockopt(result.socket_.get(), NETLINK_CAP_ACK, &on, sizeof on);
    mnl_socket_setsockopt(result.socket_.get(), NETLINK_GET_STRICT_CHK, &on, sizeof on);
    return result;
}

NetlinkError NetlinkSocket::fail(const Request& request, int error, std::string kernel_message) {
    std::string operation = request.operation;
    if (request.ifindex != 0) operation += " on " + link_name(request.ifindex);
    return NetlinkError{.operation = std::move(operation), .error = error, .kernel_message = std::move(kernel_message)};
}

NetlinkError NetlinkSocket::malformed(const Request& request, std::string reason) {
    NetlinkError e = fail(request, EBADMSG);
    e.malformed = std::move(reason);
    return e;
}

// One datagram into buffer_, waiting at most until `deadline`.
expected<std::size_t, int> NetlinkSocket::receive(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return unexpected(ETIMEDOUT);
        pollfd p{.fd = fd(), .events = POLLIN, .revents = 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) return unexpected(errno);
        if (ready == 0) return unexpected(ETIMEDOUT);
        const ssize_t n = mnl_socket_recvfrom(socket_.get(), buffer_.data(), buffer_.size());
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) return unexpected(errno);  // ENOSPC: a datagram larger than the buffer (MSG_TRUNC)
        return static_cast<std::size_t>(n);
    }
}

expected<std::vector<std::vector<std::uint8_t>>, NetlinkError> NetlinkSocket::transact(Request request) {
    if (++sequence_ == 0) ++sequence_;  // 0 is what notifications carry
    const std::uint32_t seq = sequence_;
    set_sequence(request.bytes, seq);
    if (mnl_socket_sendto(socket_.get(), request.bytes.data(), request.bytes.size()) < 0)
        return unexpected(fail(request, errno));

    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::vector<std::vector<std::uint8_t>> data;
    for (;;) {
        auto received = receive(deadline);
        if (!received) return unexpected(fail(request, received.error()));
        auto batch = split_reply(Bytes(buffer_.data(), *received), seq);
        if (!batch) return unexpected(malformed(request, batch.error()));
        for (Bytes message : batch->messages) data.emplace_back(message.begin(), message.end());
        if (batch->ack && batch->ack->error != 0)
            return unexpected(fail(request, batch->ack->error, batch->ack->kernel_message));
        if (batch->ack || batch->done) return data;
    }
}

expected<void, NetlinkError> NetlinkSocket::execute(Request request) {
    auto answer = transact(std::move(request));
    if (!answer) return unexpected(answer.error());
    return {};
}

expected<void, NetlinkError> NetlinkSocket::set_mtu(std::uint32_t ifindex, std::uint32_t mtu) {
    return execute(build_set_mtu(ifindex, mtu));
}

expected<void, NetlinkError> NetlinkSocket::set_link_up(std::uint32_t ifindex, bool up) {
    return execute(build_set_link_up(ifindex, up));
}

expected<LinkInfo, NetlinkError> NetlinkSocket::get_link(std::uint32_t ifindex) {
    Request request = build_get_link(ifindex);
    auto answer = transact(request);
    if (!answer) return unexpected(answer.error());
    for (const auto& message : *answer) {
        if (message_type(message) != RTM_NEWLINK) continue;
        auto link = parse_link_message(message);
        if (!link) return unexpected(malformed(request, link.error()));
        return *link;
    }
    return unexpected(malformed(request, "no RTM_NEWLINK in the answer"));
}

expected<void, NetlinkError> NetlinkSocket::add_address(std::uint32_t ifindex, const IpPrefix& prefix,
                                                        AddressOptions options) {
    return execute(build_address_change(Change::add, ifindex, prefix, options));
}

expected<void, NetlinkError> NetlinkSocket::remove_address(std::uint32_t ifindex, const IpPrefix& prefix) {
    return execute(build_address_change(Change::remove, ifindex, prefix));
}

expected<std::vector<AddressInfo>, NetlinkError> NetlinkSocket::list_addresses(std::uint32_t ifindex,
                                                                               std::optional<IpFamily> family) {
    Request request = build_address_dump(ifindex, family);
    auto answer = transact(request);
    if (!answer) return unexpected(answer.error());
    std::vector<AddressInfo> addresses;
    for (const auto& message : *answer) {
        if (message_type(message) != RTM_NEWADDR) continue;
        auto address = parse_address_message(message);
        if (!address) return unexpected(malformed(request, address.error()));
        // Without NETLINK_GET_STRICT_CHK the kernel dumps every link.
        if (address->ifindex != ifindex) continue;
        if (family && address->prefix.address.family != *family) continue;
        addresses.push_back(*address);
    }
    return addresses;
}

expected<void, NetlinkError> NetlinkSocket::add_route(const RouteSpec& route) {
    return execute(build_route_change(Change::add, route));
}

expected<void, NetlinkError> NetlinkSocket::remove_route(const RouteSpec& route) {
    return execute(build_route_change(Change::remove, route));
}

expected<NextHop, NetlinkError> NetlinkSocket::lookup_next_hop(const IpAddress& destination) {
    Request request = build_route_get(destination);
    auto answer = transact(request);
    if (!answer) return unexpected(answer.error());
    for (const auto& message : *answer) {
        if (message_type(message) != RTM_NEWROUTE) continue;
        auto route = parse_route_message(message);
        if (!route) return unexpected(malformed(request, route.error()));
        return next_hop_for(*route, destination);
    }
    return unexpected(malformed(request, "no RTM_NEWROUTE in the answer"));
}

}  // namespace ipoibd::netlink
