// NextHopCache with a fake lookup standing in for RTM_GETROUTE: hits and
// misses, on-link destinations, failed lookups not cached, invalidation on
// route changes, and the bound with oldest-first eviction.
#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <vector>

#include "netlink/next_hop_cache.h"
#include "test_netlink_util.h"

namespace ipoibd::netlink {
namespace {

using test::ip;

// A routing table in miniature: 198.19.0.0/16 via 198.18.5.2, 198.18.5.0/24
// on-link, 2001:db8:6::/48 via 2001:db8:5::2; anything else unreachable.
struct FakeKernel {
    std::vector<IpAddress> asked;
    bool unreachable = false;

    expected<NextHop, NetlinkError> lookup(const IpAddress& destination) {
        asked.push_back(destination);
        const auto& b = destination.bytes;
        if (!unreachable && destination.family == IpFamily::ipv4 && b[0] == 198 && b[1] == 19)
            return NextHop{.address = ip("198.18.5.2"), .oif = 6, .via_gateway = true};
        if (!unreachable && destination.family == IpFamily::ipv4 && b[0] == 198 && b[1] == 18 && b[2] == 5)
            return NextHop{.address = destination, .oif = 6, .via_gateway = false};
        if (!unreachable && destination.family == IpFamily::ipv6 && b[0] == 0x20 && b[1] == 0x01 && b[5] == 6)
            return NextHop{.address = ip("2001:db8:5::2"), .oif = 6, .via_gateway = true};
        return unexpected(NetlinkError{.operation = "RTM_GETROUTE " + to_string(destination), .error = ENETUNREACH});
    }
};

struct NextHopCacheTest : ::testing::Test {
    FakeKernel kernel;
    NextHopCache cache{[this](const IpAddress& d) { return kernel.lookup(d); }};
};

TEST_F(NextHopCacheTest, ViaRouteResolvesTheGatewayOnceThenHits) {
    auto first = cache.resolve(ip("198.19.5.7"));
    ASSERT_TRUE(first);
    EXPECT_EQ(*first, (NextHop{.address = ip("198.18.5.2"), .oif = 6, .via_gateway = true}));
    auto second = cache.resolve(ip("198.19.5.7"));
    ASSERT_TRUE(second);
    EXPECT_EQ(*second, *first);
    EXPECT_EQ(kernel.asked.size(), 1u);
    EXPECT_EQ(cache.counters(), (NextHopCounters{.hits = 1, .misses = 1}));
    EXPECT_EQ(cache.size(), 1u);
}

TEST_F(NextHopCacheTest, OnLinkDestinationIsItsOwnNextHop) {
    auto hop = cache.resolve(ip("198.18.5.9"));
    ASSERT_TRUE(hop);
    EXPECT_EQ(hop->address, ip("198.18.5.9"));
    EXPECT_FALSE(hop->via_gateway);
}

TEST_F(NextHopCacheTest, FamiliesAreSeparateKeys) {
    ASSERT_TRUE(cache.resolve(ip("2001:db8:6::7")));
    ASSERT_TRUE(cache.resolve(ip("198.19.0.1")));
    EXPECT_EQ(cache.peek(ip("2001:db8:6::7"))->address, ip("2001:db8:5::2"));
    EXPECT_EQ(cache.peek(ip("198.19.0.1"))->address, ip("198.18.5.2"));
    EXPECT_EQ(cache.size(), 2u);
}

// "No route" is the kernel's answer and is remembered until the routes
// change: a sender naming destinations with no route (a datagram bound to
// the TUN) cost one netlink round trip a packet.
TEST_F(NextHopCacheTest, NoRouteIsCachedUntilTheRoutesChange) {
    auto hop = cache.resolve(ip("198.20.0.1"));
    ASSERT_FALSE(hop);
    EXPECT_EQ(hop.error().error, ENETUNREACH);
    EXPECT_EQ(hop.error().message(), "RTM_GETROUTE 198.20.0.1: Network is unreachable");
    auto again = cache.resolve(ip("198.20.0.1"));
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().error, ENETUNREACH);
    EXPECT_EQ(kernel.asked.size(), 1u);
    EXPECT_EQ(cache.counters(), (NextHopCounters{.hits = 1, .misses = 1, .lookups_failed = 1, .no_route_hits = 1}));
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_FALSE(cache.peek(ip("198.20.0.1")));
    cache.invalidate();
    EXPECT_FALSE(cache.resolve(ip("198.20.0.1")));
    EXPECT_EQ(kernel.asked.size(), 2u);
}

// Other failures (a timeout, the socket's buffer) are not the kernel's
// answer: the next packet asks again.
TEST_F(NextHopCacheTest, OtherFailuresAreNotCached) {
    int calls = 0;
    NextHopCache timing_out{[&](const IpAddress& d) -> expected<NextHop, NetlinkError> {
        ++calls;
        return unexpected(NetlinkError{.operation = "RTM_GETROUTE " + to_string(d), .error = ETIMEDOUT});
    }};
    EXPECT_FALSE(timing_out.resolve(ip("198.20.0.1")));
    EXPECT_FALSE(timing_out.resolve(ip("198.20.0.1")));
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(timing_out.size(), 0u);
}

TEST_F(NextHopCacheTest, RouteChangeInvalidatesEverything) {
    ASSERT_TRUE(cache.resolve(ip("198.19.5.7")));
    ASSERT_TRUE(cache.resolve(ip("198.18.5.9")));
    cache.invalidate();
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_FALSE(cache.peek(ip("198.19.5.7")));
    // The route went away: the next packet sees the kernel's new answer.
    kernel.unreachable = true;
    EXPECT_FALSE(cache.resolve(ip("198.19.5.7")));
    EXPECT_EQ(cache.counters(), (NextHopCounters{.misses = 3, .lookups_failed = 1, .invalidations = 1}));
}

TEST(NextHopCacheBound, FullCacheEvictsTheOldestEntry) {
    FakeKernel kernel;
    NextHopCache cache([&kernel](const IpAddress& d) { return kernel.lookup(d); }, 3);
    const IpAddress a = ip("198.19.0.1"), b = ip("198.19.0.2"), c = ip("198.19.0.3"), d = ip("198.19.0.4");
    for (const IpAddress& x : {a, b, c}) ASSERT_TRUE(cache.resolve(x));
    ASSERT_TRUE(cache.resolve(a));  // a hit does not refresh: the order is insertion order
    ASSERT_TRUE(cache.resolve(d));
    EXPECT_EQ(cache.size(), 3u);
    EXPECT_FALSE(cache.peek(a));
    EXPECT_TRUE(cache.peek(b));
    EXPECT_TRUE(cache.peek(c));
    EXPECT_TRUE(cache.peek(d));
    EXPECT_EQ(cache.counters().evictions, 1u);

    // Many destinations (a scan) never grow it past the bound.
    for (std::uint8_t i = 0; i < 200; ++i) ASSERT_TRUE(cache.resolve(IpAddress::v4({198, 19, 1, i})));
    EXPECT_EQ(cache.size(), 3u);
    EXPECT_EQ(cache.counters().evictions, 201u);
    EXPECT_EQ(cache.capacity(), 3u);
}

TEST(NextHopCacheBound, DefaultCapacityAndZero) {
    FakeKernel kernel;
    auto lookup = [&kernel](const IpAddress& d) { return kernel.lookup(d); };
    EXPECT_EQ(NextHopCache(lookup).capacity(), NextHopCache::kDefaultCapacity);
    NextHopCache tiny(lookup, 0);
    EXPECT_EQ(tiny.capacity(), 1u);
    ASSERT_TRUE(tiny.resolve(ip("198.19.0.1")));
    ASSERT_TRUE(tiny.resolve(ip("198.19.0.2")));
    EXPECT_EQ(tiny.size(), 1u);
}

}  // namespace
}  // namespace ipoibd::netlink
