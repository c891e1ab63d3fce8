// The rtnetlink request socket: sends one request from rtnl_request.h and
// waits for its answer, with a deadline.
//
// Flow of one request (transact):
//   1. stamp the next sequence number into the request;
//   2. send it to the kernel (portid 0);
//   3. receive datagrams until the answer ends: the NLMSG_ERROR ACK of a
//      plain request (error 0 is success; NLM_F_ACK is always set) or the
//      NLMSG_DONE of a dump; each datagram is split by split_reply, data
//      messages for our sequence number are kept, others' are skipped;
//   4. a non-zero error becomes a NetlinkError naming the request, the link
//      and the kernel's extended-ACK text:
//        "RTM_NEWADDR 198.18.0.1/24 on ib0: File exists (kernel: ipv4:
//         Address already assigned)".
//
// The socket is blocking with a poll() deadline per request, because every
// rtnetlink request is answered synchronously: the kernel has queued the
// reply before sendto() returns, so the wait is microseconds. It is meant for
// start-up configuration and for NextHopCache misses, not for a hot path.
// Notifications go to a separate socket (monitor.h), so a request never has
// to step over them.
//
// Socket options: NETLINK_EXT_ACK (error text), NETLINK_CAP_ACK (errors do
// not echo our whole request back), NETLINK_GET_STRICT_CHK (dumps honour the
// ifindex filter). Each is a nicety: a kernel without one still works, with
// less detail, so failing to set it is not an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/expected.h"
#include "common/sys_error.h"
#include "netlink/netlink_error.h"
#include "netlink/rtnl_reply.h"
#include "netlink/rtnl_request.h"

struct mnl_socket;

namespace ipoibd::netlink {

class NetlinkSocket {
public:
    static constexpr std::chrono::milliseconds kDefaultTimeout{2000};
    // Large enough for any single rtnetlink datagram: the kernel sizes dump
    // datagrams to the reader's buffer, up to 32 KiB.
    static constexpr std::size_t kReceiveBufferSize = 32 * 1024;

    // Opens and binds a NETLINK_ROUTE socket (close-on-exec).
    static expected<NetlinkSocket, SysError> open(std::chrono::milliseconds timeout = kDefaultTimeout);

    NetlinkSocket(NetlinkSocket&&) noexcept;
    NetlinkSocket& operator=(NetlinkSocket&&) noexcept;
    ~NetlinkSocket();

    int fd() const;
    std::uint32_t portid() const { return portid_; }
    // Whether the kernel accepted NETLINK_EXT_ACK (error texts will come).
    bool extended_ack() const { return extended_ack_; }

    // Link configuration (RTM_NEWLINK) and read-back (RTM_GETLINK).
    expected<void, NetlinkError> set_mtu(std::uint32_t ifindex, std::uint32_t mtu);
    expected<void, NetlinkError> set_link_up(std::uint32_t ifindex, bool up);
    expected<LinkInfo, NetlinkError> get_link(std::uint32_t ifindex);

    // Addresses (RTM_NEWADDR / RTM_DELADDR / RTM_GETADDR dump). Adding an
    // address that exists fails with EEXIST.
    expected<void, NetlinkError> add_address(std::uint32_t ifindex, const IpPrefix& prefix, AddressOptions options = {});
    expected<void, NetlinkError> remove_address(std::uint32_t ifindex, const IpPrefix& prefix);
    expected<std::vector<AddressInfo>, NetlinkError> list_addresses(std::uint32_t ifindex,
                                                                    std::optional<IpFamily> family = std::nullopt);

    // Routes (RTM_NEWROUTE / RTM_DELROUTE).
    expected<void, NetlinkError> add_route(const RouteSpec& route);
    expected<void, NetlinkError> remove_route(const RouteSpec& route);

    // RTM_GETROUTE: the next hop the kernel uses for `destination`: the
    // route's gateway, or the destination itself when it is on-link; and the
    // output interface. Fails with the kernel's errno when there is no route
    // (ENETUNREACH, EHOSTUNREACH).
    expected<NextHop, NetlinkError> lookup_next_hop(const IpAddress& destination);

    // Any request: sends it and returns the data messages of its answer,
    // each a copy of one whole netlink message.
    expected<std::vector<std::vector<std::uint8_t>>, NetlinkError> transact(Request request);

private:
    struct MnlClose {
        void operator()(mnl_socket* s) const;
    };
    NetlinkSocket(std::unique_ptr<mnl_socket, MnlClose> socket, std::chrono::milliseconds timeout);

    expected<void, NetlinkError> execute(Request request);
    static NetlinkError fail(const Request& request, int error, std::string kernel_message = {});
    static NetlinkError malformed(const Request& request, std::string reason);
    expected<std::size_t, int> receive(std::chrono::steady_clock::time_point deadline);

    std::unique_ptr<mnl_socket, MnlClose> socket_;
    std::chrono::milliseconds timeout_;
    std::uint32_t portid_ = 0;
    std::uint32_t sequence_ = 0;
    bool extended_ack_ = false;
    std::vector<std::uint8_t> buffer_;
};

// "ib0", or "ifindex 7" when the index names no link (any more).
std::string link_name(std::uint32_t ifindex);

}  // namespace ipoibd::netlink
