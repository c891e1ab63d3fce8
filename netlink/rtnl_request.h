// rtnetlink request builders: pure functions from typed arguments to the
// bytes of one netlink message, built with libmnl. No socket here, so every
// request is checked byte for byte in tests without a kernel
// (tests/unit/test_netlink_request.cpp); NetlinkSocket (netlink_socket.h)
// stamps the sequence number and sends them.
//
// What the daemon asks of the kernel, in start-up order (DESIGN.md, "TUN and
// routing"):
//   1. RTM_NEWLINK  ifindex, IFLA_MTU                  build_set_mtu
//   2. RTM_NEWADDR  ifindex, prefix [, IFA_F_NODAD]    build_address_change
//   3. RTM_NEWLINK  ifindex, IFF_UP in ifi_change      build_set_link_up
//   4. RTM_NEWROUTE prefix [via gateway] [dev ifindex] build_route_change
// and at run time:
//   5. RTM_GETROUTE destination -> the kernel's next hop (build_route_get),
//      because a TUN is handed the packet but never told which gateway the
//      kernel chose for it; the answer fills NextHopCache;
//   6. RTM_GETADDR  dump, filtered to one ifindex     build_address_dump
//   7. RTM_GETLINK  ifindex (MTU and flags read back) build_get_link
//
// Link changes use RTM_NEWLINK without NLM_F_CREATE, as iproute2's `ip link
// set` does; RTM_SETLINK is the older form with fewer abilities. Every
// non-dump request carries NLM_F_ACK, so success is an explicit NLMSG_ERROR
// with error 0 and the socket never guesses when a reply is complete.
// Additions carry NLM_F_CREATE | NLM_F_EXCL like `ip addr add` and `ip route
// add`: adding what is already there is an error (EEXIST) the caller sees.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/ip_address.h"

namespace ipoibd::netlink {

// Largest request built here: header, fixed part and a handful of
// attributes. Builders abort on overflow (a bug, not an input error).
inline constexpr std::size_t kMaxRequestSize = 512;

// <linux/rtnetlink.h> values, named here so this header stays free of the
// kernel's macros; rtnl_request.cpp static_asserts them against the kernel.
inline constexpr std::uint32_t kMainTable = 254;     // RT_TABLE_MAIN
inline constexpr std::uint8_t kProtocolStatic = 4;   // RTPROT_STATIC: set by an administrator or daemon

// One rtnetlink request: a single netlink message whose nlmsg_seq is 0 until
// NetlinkSocket stamps it (set_sequence).
struct Request {
    std::vector<std::uint8_t> bytes;
    // What the request does, for error messages: "RTM_NEWADDR 198.18.0.1/24".
    std::string operation;
    // The link it acts on, 0 for none; errors then read "... on ib0".
    std::uint32_t ifindex = 0;
    // NLM_F_DUMP: the answer is many messages ending with NLMSG_DONE.
    bool dump = false;
};

enum class Change : std::uint8_t {
    add,     // RTM_NEW*, NLM_F_CREATE | NLM_F_EXCL
    remove,  // RTM_DEL*
};

struct AddressOptions {
    // IFA_F_NODAD (IPv6 only; ignored for IPv4): the address is usable at
    // once instead of after Duplicate Address Detection. The daemon owns
    // neighbour discovery on the fabric, so kernel DAD on a TUN proves
    // nothing.
    bool nodad = false;
};

struct RouteSpec {
    IpPrefix destination;               // 0.0.0.0/0 or ::/0 is the default route
    std::optional<IpAddress> gateway;   // `via`; an IPv6 gateway for an IPv4 route is sent as RTA_VIA
    std::uint32_t oif = 0;              // `dev`; 0 lets the kernel derive it from the gateway
    std::uint32_t table = kMainTable;
    std::uint32_t metric = 0;           // RTA_PRIORITY; 0 leaves the kernel's default
    std::uint8_t protocol = kProtocolStatic;
};

Request build_set_mtu(std::uint32_t ifindex, std::uint32_t mtu);
Request build_set_link_up(std::uint32_t ifindex, bool up);
Request build_get_link(std::uint32_t ifindex);

Request build_address_change(Change change, std::uint32_t ifindex, const IpPrefix& prefix,
                             AddressOptions options = {});
// All addresses of `ifindex` (of one family, or both when nullopt). The
// kernel filters by ifindex only with NETLINK_GET_STRICT_CHK; the socket
// filters again, so older kernels give the same answer.
Request build_address_dump(std::uint32_t ifindex, std::optional<IpFamily> family = std::nullopt);

Request build_route_change(Change change, const RouteSpec& route);
// The route the kernel would use to send to `destination` (`ip route get`).
Request build_route_get(const IpAddress& destination);

// Writes nlmsg_seq into a built request (the socket numbers each one).
void set_sequence(std::span<std::uint8_t> request, std::uint32_t seq);

}  // namespace ipoibd::netlink
