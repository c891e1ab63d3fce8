// The TUN port's byte logic that needs no device: the next hop a packet read
// from the TUN is handed to the engine with (gateway_of), over a
// NextHopCache whose lookup is a fake standing in for RTM_GETROUTE.
#include <gtest/gtest.h>

#include <cerrno>
#include <optional>
#include <vector>

#include "host/tun_port.h"
#include "test_netlink_util.h"

namespace ipoibd::host {
namespace {

using netlink::NetlinkError;
using netlink::NextHop;
using netlink::test::ip;

constexpr std::uint32_t kTun = 6;   // the daemon's TUN
constexpr std::uint32_t kEth = 2;   // another link of the host

// An IPv4 header (no payload) to `dst`.
std::vector<std::uint8_t> ipv4_to(const IpAddress& dst) {
    std::vector<std::uint8_t> p(20, 0);
    p[0] = 0x45;
    p[3] = 20;
    p[8] = 64;
    p[9] = 17;
    std::copy_n(dst.bytes.begin(), 4, p.begin() + 16);
    return p;
}

// 198.19.0.0/16 via 198.18.5.2 on the TUN, 198.18.5.0/24 on the TUN;
// 198.18.100.0/24 on-link on another link; 198.18.250.0/24 unreachable;
// the default route via 198.18.200.1 on another link.
expected<NextHop, NetlinkError> fake_route_get(const IpAddress& d) {
    const auto& b = d.bytes;
    if (b[0] == 198 && b[1] == 19) return NextHop{.address = ip("198.18.5.2"), .oif = kTun, .via_gateway = true};
    if (b[0] == 198 && b[1] == 18 && b[2] == 5) return NextHop{.address = d, .oif = kTun, .via_gateway = false};
    if (b[0] == 198 && b[1] == 18 && b[2] == 100) return NextHop{.address = d, .oif = kEth, .via_gateway = false};
    if (b[0] == 198 && b[1] == 18 && b[2] == 250) return unexpected(NetlinkError{.operation = "RTM_GETROUTE", .error = ENETUNREACH});
    return NextHop{.address = ip("198.18.200.1"), .oif = kEth, .via_gateway = true};
}

// gateway_of() for a packet to `destination`: `gateway` (none: on-link),
// and whether it counts as other_interface; the lookup never fails here.
void expect_hop(const char* destination, std::optional<IpAddress> gateway, bool other_interface) {
    netlink::NextHopCache cache(fake_route_get);
    const GatewayOf hop = gateway_of(ipv4_to(ip(destination)), cache, kTun);
    EXPECT_EQ(hop.gateway, gateway) << destination;
    EXPECT_EQ(hop.other_interface, other_interface) << destination;
    EXPECT_FALSE(hop.failed) << destination;
}

TEST(TunPortGateway, ARouteViaTheTunGivesItsGateway) {
    expect_hop("198.19.5.7", ip("198.18.5.2"), false);
    expect_hop("198.18.5.9", std::nullopt, false);  // on-link
}

// A packet the kernel put on the TUN although its route leaves by another
// link (IP_PKTINFO or SO_BINDTODEVICE naming the TUN, a packet socket, a
// route changed since): that route's gateway is a neighbour of the other
// link, not of the fabric, so the packet goes as on-link (as the kernel
// sends a packet bound to a link without a route), counted.
TEST(TunPortGateway, AGatewayOfAnotherLinksRouteIsNotUsed) {
    expect_hop("198.18.77.7", std::nullopt, true);
    // On-link elsewhere: nothing to take from it, nothing to count.
    expect_hop("198.18.100.7", std::nullopt, false);
}

TEST(TunPortGateway, AFailedLookupIsSentAsOnLinkAndGroupsAreNotLookedUp) {
    int lookups = 0;
    netlink::NextHopCache cache([&](const IpAddress& d) {
        ++lookups;
        return fake_route_get(d);
    });
    const GatewayOf failed = gateway_of(ipv4_to(ip("198.18.250.1")), cache, kTun);
    EXPECT_TRUE(failed.failed);
    EXPECT_FALSE(failed.gateway);
    EXPECT_EQ(lookups, 1);
    EXPECT_FALSE(gateway_of(ipv4_to(ip("224.0.0.251")), cache, kTun).gateway);
    EXPECT_FALSE(gateway_of(ipv4_to(ip("255.255.255.255")), cache, kTun).gateway);
    const std::vector<std::uint8_t> truncated(10, 0x45);
    EXPECT_FALSE(gateway_of(truncated, cache, kTun).gateway);
    EXPECT_EQ(lookups, 1);
}

}  // namespace
}  // namespace ipoibd::host
