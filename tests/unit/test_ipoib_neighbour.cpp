// The neighbour cache with a fake clock: every state transition, the
// 3-packet queue, solicit retries and failure, probing, a peer restarting
// with a new QPN (RFC 4391 9.4), aging and garbage collection, the random
// ReachableTime (RFC 4861 6.3.2), flush and the table bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ipoib/neighbour_cache.h"

namespace ipoibd::ipoib {
namespace {

using namespace std::chrono_literals;
using State = NeighbourState;

const IpAddress kPeer4 = IpAddress::v4({198, 18, 0, 2});
const IpAddress kPeer6 = IpAddress::v6(*parse_ipv6("fe80::21e:6703:29:476f"));

HwAddress hw(std::uint32_t qpn) {
    HwAddress a;
    a.qpn = qpn;
    a.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x1e, 0x67, 0x03, 0x00, 0x29, 0x47, 0x6f};
    return a;
}

Packet packet(std::uint8_t tag) { return Packet{0x45, 0, 0, 20, tag}; }

struct NeighbourTest : ::testing::Test {
    Clock::time_point now = Clock::time_point{} + 1h;
    NeighbourCache cache;

    Resolution send(const IpAddress& ip, std::uint8_t tag = 0) { return cache.lookup_or_resolve(ip, packet(tag), now); }
    NeighbourActions advance(std::chrono::milliseconds d) {
        now += d;
        return cache.tick(now);
    }
    State state(const IpAddress& ip) const {
        auto e = cache.find(ip);
        EXPECT_TRUE(e.has_value());
        return e ? e->state : State::failed;
    }
    // Unknown -> INCOMPLETE -> REACHABLE with one packet flushed.
    void resolve(const IpAddress& ip, const HwAddress& a) {
        send(ip);
        auto out = cache.learn(ip, a, LearnKind::solicited, now);
        ASSERT_EQ(out.flushes.size(), 1u);
        ASSERT_EQ(state(ip), State::reachable);
    }
};

TEST_F(NeighbourTest, UnknownNeighbourQueuesAndSolicitsOnce) {
    auto r = send(kPeer4, 1);
    EXPECT_FALSE(r.send_to);
    ASSERT_EQ(r.actions.solicits.size(), 1u);
    EXPECT_EQ(r.actions.solicits[0], (SolicitAction{.ip = kPeer4, .unicast_to = std::nullopt}));
    EXPECT_TRUE(r.actions.drops.empty());
    EXPECT_EQ(state(kPeer4), State::incomplete);
    EXPECT_EQ(cache.find(kPeer4)->queued, 1u);

    // INCOMPLETE: queue without another solicit.
    r = send(kPeer4, 2);
    EXPECT_FALSE(r.send_to);
    EXPECT_TRUE(r.actions.empty());
    EXPECT_EQ(cache.counters().solicits, 1u);
}

TEST_F(NeighbourTest, AnAddressTheLinkSaysIsGoneIsResolvedAgainAtOnce) {
    resolve(kPeer4, hw(0x48));
    resolve(kPeer6, hw(0x48));  // the same peer's IPv6 address
    const IpAddress other = IpAddress::v4({198, 18, 0, 3});
    resolve(other, hw(0x99));
    const auto out = cache.re_resolve(hw(0x48), now);
    ASSERT_EQ(out.solicits.size(), 2u);  // broadcast solicits, not unicast probes
    for (const SolicitAction& s : out.solicits) EXPECT_FALSE(s.unicast_to);
    EXPECT_EQ(state(kPeer4), State::incomplete);
    EXPECT_EQ(state(kPeer6), State::incomplete);
    EXPECT_EQ(state(other), State::reachable);
    EXPECT_EQ(cache.counters().re_resolved, 2u);
    // The answer from the restarted peer (a new QPN) resolves it.
    (void)cache.learn(kPeer4, hw(0x77), LearnKind::solicited, now);
    EXPECT_EQ(state(kPeer4), State::reachable);
    EXPECT_EQ(cache.find(kPeer4)->hw->qpn, 0x77u);
    // Nothing holds that address any more (kPeer6 is being resolved): no
    // second round of solicits.
    EXPECT_TRUE(cache.re_resolve(hw(0x48), now).solicits.empty());
    EXPECT_EQ(cache.counters().re_resolved, 2u);
}

TEST_F(NeighbourTest, AtMostThreePacketsWaitTheRestAreDroppedAndCounted) {
    for (std::uint8_t i = 1; i <= 3; ++i) EXPECT_TRUE(send(kPeer4, i).actions.drops.empty());
    for (std::uint8_t i = 4; i <= 5; ++i) {
        auto r = send(kPeer4, i);
        EXPECT_FALSE(r.send_to);
        ASSERT_EQ(r.actions.drops.size(), 1u);
        EXPECT_EQ(r.actions.drops[0], (DropAction{.ip = kPeer4, .reason = NeighbourDropReason::queue_full, .count = 1}));
    }
    EXPECT_EQ(cache.counters().drop_queue_full, 2u);
    EXPECT_EQ(cache.find(kPeer4)->queued, 3u);

    // The three that waited leave in order.
    auto out = cache.learn(kPeer4, hw(0x48), LearnKind::solicited, now);
    ASSERT_EQ(out.flushes.size(), 1u);
    EXPECT_EQ(out.flushes[0].to, hw(0x48));
    EXPECT_EQ(out.flushes[0].packets, (std::vector<Packet>{packet(1), packet(2), packet(3)}));
    EXPECT_EQ(cache.find(kPeer4)->queued, 0u);
}

TEST_F(NeighbourTest, SolicitedReplyResolvesToReachableAndLaterPacketsGoDirect) {
    send(kPeer6, 7);
    auto out = cache.learn(kPeer6, hw(0x404), LearnKind::solicited, now);
    ASSERT_EQ(out.flushes.size(), 1u);
    EXPECT_EQ(out.flushes[0].ip, kPeer6);
    EXPECT_EQ(out.flushes[0].packets, std::vector<Packet>{packet(7)});
    EXPECT_EQ(state(kPeer6), State::reachable);
    EXPECT_EQ(cache.counters().resolved, 1u);

    auto r = send(kPeer6);
    EXPECT_EQ(r.send_to, hw(0x404));
    EXPECT_TRUE(r.actions.empty());
    EXPECT_EQ(state(kPeer6), State::reachable);
}

TEST_F(NeighbourTest, UnsolicitedAnswerWhileIncompleteFlushesAndGoesToDelay) {
    send(kPeer4, 1);
    auto out = cache.learn(kPeer4, hw(0x48), LearnKind::unsolicited, now);
    ASSERT_EQ(out.flushes.size(), 1u);
    // STALE, then the flushed packets made it in use: DELAY (RFC 4861 7.3.3).
    EXPECT_EQ(state(kPeer4), State::delay);
}

TEST_F(NeighbourTest, UnsolicitedForUnknownCreatesStaleSolicitedIsIgnored) {
    EXPECT_TRUE(cache.learn(kPeer4, hw(0x48), LearnKind::solicited, now).empty());
    EXPECT_FALSE(cache.find(kPeer4));

    EXPECT_TRUE(cache.learn(kPeer4, hw(0x48), LearnKind::unsolicited, now).empty());
    EXPECT_EQ(state(kPeer4), State::stale);
    auto r = send(kPeer4);
    EXPECT_EQ(r.send_to, hw(0x48));
    EXPECT_TRUE(r.actions.solicits.empty());
    EXPECT_EQ(state(kPeer4), State::delay);
}

TEST_F(NeighbourTest, SolicitsRetransmittedOneSecondApartThenFailedDropsQueue) {
    send(kPeer4, 1);
    send(kPeer4, 2);
    EXPECT_TRUE(advance(999ms).empty());
    for (int retry = 2; retry <= 3; ++retry) {
        auto out = advance(1ms);
        ASSERT_EQ(out.solicits.size(), 1u) << "retry " << retry;
        EXPECT_FALSE(out.solicits[0].unicast_to);
        EXPECT_EQ(state(kPeer4), State::incomplete);
        now += 999ms;
        EXPECT_TRUE(cache.tick(now).empty());
    }
    EXPECT_EQ(cache.next_deadline(), now + 1ms);
    auto out = advance(1ms);
    EXPECT_TRUE(out.solicits.empty());
    ASSERT_EQ(out.drops.size(), 1u);
    EXPECT_EQ(out.drops[0], (DropAction{.ip = kPeer4, .reason = NeighbourDropReason::unresolved, .count = 2}));
    EXPECT_EQ(state(kPeer4), State::failed);
    EXPECT_FALSE(cache.find(kPeer4)->hw);
    EXPECT_EQ(cache.counters().solicits, 3u);
    EXPECT_EQ(cache.counters().drop_unresolved, 2u);
    EXPECT_EQ(cache.counters().failed, 1u);
}

TEST_F(NeighbourTest, FailedEntryRetriesOnNextPacketAndIsCollectedWhenIdle) {
    send(kPeer4);
    for (int i = 0; i < 3; ++i) advance(1s);
    ASSERT_EQ(state(kPeer4), State::failed);

    auto r = send(kPeer4, 9);
    EXPECT_FALSE(r.send_to);
    EXPECT_EQ(r.actions.solicits.size(), 1u);
    EXPECT_EQ(state(kPeer4), State::incomplete);
    EXPECT_EQ(cache.find(kPeer4)->queued, 1u);

    for (int i = 0; i < 3; ++i) advance(1s);
    ASSERT_EQ(state(kPeer4), State::failed);
    advance(cache.config().gc_stale_time);
    EXPECT_FALSE(cache.find(kPeer4));
    EXPECT_EQ(cache.counters().gc_removed, 1u);
}

TEST_F(NeighbourTest, ReachableAgesToStaleThenGarbageCollected) {
    resolve(kPeer4, hw(0x48));
    advance(cache.config().reachable_time - 1ms);
    EXPECT_EQ(state(kPeer4), State::reachable);
    advance(1ms);
    EXPECT_EQ(state(kPeer4), State::stale);
    EXPECT_EQ(cache.counters().became_stale, 1u);
    EXPECT_EQ(cache.find(kPeer4)->hw, hw(0x48));

    advance(cache.config().gc_stale_time - 1ms);
    EXPECT_EQ(state(kPeer4), State::stale);
    advance(1ms);
    EXPECT_FALSE(cache.find(kPeer4));
    EXPECT_EQ(cache.counters().gc_removed, 1u);
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_FALSE(cache.next_deadline());
}

// RFC 4861 6.3.2: ReachableTime is BaseReachableTime times a factor drawn
// from [0.5, 1.5); drawn again by the first tick() 300 s after the last
// draw, and when the configuration changes.
TEST(NeighbourReachableTime, IsTheBaseTimesTheDrawnFactorDrawnAgainEveryFiveMinutes) {
    const std::vector<double> factors{0.5, 1.5, 1.2};
    std::size_t draws = 0;
    NeighbourCache::Config config;  // reachable_time 30 s
    config.reachable_factor = [&] { return factors.at(draws++); };
    NeighbourCache cache(config);
    EXPECT_EQ(draws, 1u);
    EXPECT_EQ(cache.reachable_time(), 15s);

    const Clock::time_point t0 = Clock::time_point{} + 1h;
    cache.tick(t0);  // the first tick: the next draw is due at t0 + 300 s
    cache.lookup_or_resolve(kPeer4, packet(1), t0);
    cache.learn(kPeer4, hw(0x48), LearnKind::solicited, t0);
    cache.tick(t0 + 15s - 1ms);
    EXPECT_EQ(cache.find(kPeer4)->state, State::reachable);
    cache.tick(t0 + 15s);
    EXPECT_EQ(cache.find(kPeer4)->state, State::stale);  // after 15 s, not 30

    cache.tick(t0 + 300s - 1ms);
    EXPECT_EQ(cache.reachable_time(), 15s);
    cache.tick(t0 + 300s);
    EXPECT_EQ(draws, 2u);
    EXPECT_EQ(cache.reachable_time(), 45s);
    EXPECT_FALSE(cache.find(kPeer4));  // collected 60 s after it went STALE
    cache.lookup_or_resolve(kPeer4, packet(2), t0 + 300s);  // resolved again
    cache.learn(kPeer4, hw(0x48), LearnKind::solicited, t0 + 300s);
    ASSERT_TRUE(cache.find(kPeer4));
    cache.tick(t0 + 345s - 1ms);
    EXPECT_EQ(cache.find(kPeer4)->state, State::reachable);
    cache.tick(t0 + 345s);
    EXPECT_EQ(cache.find(kPeer4)->state, State::stale);
    cache.tick(t0 + 599s);
    EXPECT_EQ(draws, 2u);  // the next draw is due at t0 + 600 s

    config.reachable_time = 20s;  // a reload draws again: 1.2 x 20 s
    cache.set_config(config);
    EXPECT_EQ(draws, 3u);
    EXPECT_EQ(cache.reachable_time(), 24s);
}

TEST(NeighbourReachableTime, FactorsOutsideTheRangeAreClampedAndNoFactorIsTheBase) {
    const struct {
        const char* name;
        std::optional<double> factor;
        std::chrono::milliseconds want;
    } rows[] = {
        {"none", std::nullopt, 30s},
        {"0.5", 0.5, 15s},
        {"1.0", 1.0, 30s},
        {"1.499", 1.499, 44'970ms},
        {"below", 0.1, 15s},
        {"negative", -1.0, 15s},
        {"above", 2.0, 45s},
        {"NaN", std::numeric_limits<double>::quiet_NaN(), 30s},
        {"infinite", std::numeric_limits<double>::infinity(), 30s},
    };
    for (const auto& r : rows) {
        NeighbourCache::Config config;
        if (r.factor) config.reachable_factor = [f = *r.factor] { return f; };
        EXPECT_EQ(NeighbourCache(config).reachable_time(), r.want) << r.name;
    }
}

TEST(NeighbourReachableTime, MakeReachableFactorIsUniformFromHalfToOneAndAHalf) {
    auto factor = make_reachable_factor(42);
    double low = 2, high = 0, sum = 0;
    constexpr int kDraws = 10'000;
    for (int i = 0; i < kDraws; ++i) {
        const double f = factor();
        ASSERT_GE(f, 0.5);
        ASSERT_LT(f, 1.5);
        low = std::min(low, f);
        high = std::max(high, f);
        sum += f;
    }
    EXPECT_LT(low, 0.51);
    EXPECT_GT(high, 1.49);
    EXPECT_NEAR(sum / kDraws, 1.0, 0.02);
    // Its own generator: the same seed gives the same draws, another seed others.
    auto a = make_reachable_factor(7), b = make_reachable_factor(7), c = make_reachable_factor(8);
    const double a1 = a(), b1 = b();
    EXPECT_EQ(a1, b1);
    EXPECT_NE(a1, c());
}

TEST_F(NeighbourTest, ExpiredReachableUsedBeforeTickGoesToDelay) {
    resolve(kPeer4, hw(0x48));
    now += cache.config().reachable_time;
    auto r = send(kPeer4);
    EXPECT_EQ(r.send_to, hw(0x48));
    EXPECT_EQ(state(kPeer4), State::delay);
}

TEST_F(NeighbourTest, StaleInUseDelaysThenProbesUnicastAndConfirmationMakesReachable) {
    resolve(kPeer4, hw(0x48));
    advance(cache.config().reachable_time);
    ASSERT_EQ(state(kPeer4), State::stale);

    auto r = send(kPeer4);
    EXPECT_EQ(r.send_to, hw(0x48));
    EXPECT_TRUE(r.actions.solicits.empty());  // DELAY first: upper layers may confirm
    EXPECT_EQ(state(kPeer4), State::delay);

    EXPECT_TRUE(advance(cache.config().delay_first_probe_time - 1ms).empty());
    auto out = advance(1ms);
    ASSERT_EQ(out.solicits.size(), 1u);
    EXPECT_EQ(out.solicits[0], (SolicitAction{.ip = kPeer4, .unicast_to = hw(0x48)}));
    EXPECT_EQ(state(kPeer4), State::probe);
    EXPECT_EQ(send(kPeer4).send_to, hw(0x48));  // PROBE still sends to the known address

    EXPECT_TRUE(cache.learn(kPeer4, hw(0x48), LearnKind::solicited, now).empty());
    EXPECT_EQ(state(kPeer4), State::reachable);
    EXPECT_EQ(cache.counters().probes, 1u);
    EXPECT_EQ(cache.counters().confirmed, 1u);
}

TEST_F(NeighbourTest, UnansweredProbesFail) {
    resolve(kPeer4, hw(0x48));
    advance(cache.config().reachable_time);
    send(kPeer4);
    advance(cache.config().delay_first_probe_time);  // probe 1
    for (int i = 2; i <= 3; ++i) {
        auto out = advance(1s);
        ASSERT_EQ(out.solicits.size(), 1u);
        EXPECT_EQ(out.solicits[0].unicast_to, hw(0x48));
    }
    auto out = advance(1s);
    EXPECT_TRUE(out.solicits.empty());
    EXPECT_TRUE(out.drops.empty());  // nothing was queued: PROBE sends
    EXPECT_EQ(state(kPeer4), State::failed);
    EXPECT_EQ(cache.counters().probes, 3u);
    EXPECT_EQ(cache.counters().failed, 1u);

    // The next packet starts over with a broadcast solicit.
    auto r = send(kPeer4);
    EXPECT_FALSE(r.send_to);
    ASSERT_EQ(r.actions.solicits.size(), 1u);
    EXPECT_FALSE(r.actions.solicits[0].unicast_to);
}

TEST_F(NeighbourTest, DelayConfirmedBeforeProbeGoesReachable) {
    cache.learn(kPeer4, hw(0x48), LearnKind::unsolicited, now);
    send(kPeer4);
    ASSERT_EQ(state(kPeer4), State::delay);
    cache.learn(kPeer4, hw(0x48), LearnKind::solicited, now);
    EXPECT_EQ(state(kPeer4), State::reachable);
    EXPECT_TRUE(advance(cache.config().delay_first_probe_time).empty());
}

// RFC 4861 7.2.5 without a Target Link-Layer Address option: the address
// held stands; Solicited confirms it, an unsolicited NA changes nothing,
// and an entry without an address ignores the NA.
TEST_F(NeighbourTest, AnAdvertisementWithoutAnAddressConfirmsTheOneHeldWhenSolicited) {
    resolve(kPeer6, hw(0x48));
    advance(31s);  // STALE
    send(kPeer6);  // DELAY
    advance(5s);   // PROBE
    ASSERT_EQ(state(kPeer6), State::probe);
    EXPECT_TRUE(cache.advertised(kPeer6, std::nullopt, false, false, now).empty());
    EXPECT_EQ(state(kPeer6), State::probe);
    const auto confirmed = cache.counters().confirmed;
    EXPECT_TRUE(cache.advertised(kPeer6, std::nullopt, true, false, now).empty());
    EXPECT_EQ(state(kPeer6), State::reachable);
    EXPECT_EQ(cache.find(kPeer6)->hw, hw(0x48));
    EXPECT_EQ(cache.counters().confirmed, confirmed + 1);

    const IpAddress other = IpAddress::v6(*parse_ipv6("fe80::2"));
    send(other);
    EXPECT_TRUE(cache.advertised(other, std::nullopt, true, false, now).empty());
    EXPECT_EQ(state(other), State::incomplete);
    EXPECT_EQ(cache.find(other)->queued, 1u);
    // No entry: nothing is created.
    EXPECT_TRUE(cache.advertised(IpAddress::v6(*parse_ipv6("fe80::3")), std::nullopt, true, false, now).empty());
    EXPECT_FALSE(cache.find(IpAddress::v6(*parse_ipv6("fe80::3"))));
}

// RFC 4861 7.2.5: Override clear and another address: the address is not
// replaced, solicited or not; a REACHABLE entry only becomes STALE. With
// Override the address is replaced.
TEST_F(NeighbourTest, AnAdvertisementWithoutOverrideNeverReplacesTheAddress) {
    resolve(kPeer6, hw(0x48));
    EXPECT_TRUE(cache.advertised(kPeer6, hw(0x99), false, false, now).empty());
    EXPECT_EQ(state(kPeer6), State::stale);
    EXPECT_EQ(cache.find(kPeer6)->hw, hw(0x48));
    send(kPeer6);  // DELAY
    EXPECT_TRUE(cache.advertised(kPeer6, hw(0x99), true, false, now).empty());
    EXPECT_EQ(state(kPeer6), State::delay);
    EXPECT_EQ(cache.find(kPeer6)->hw, hw(0x48));
    EXPECT_EQ(cache.counters().address_changed, 0u);
    // The same address without Override is taken as usual: confirmed.
    (void)cache.advertised(kPeer6, hw(0x48), true, false, now);
    EXPECT_EQ(state(kPeer6), State::reachable);
    // Solicited, Override clear, another address: REACHABLE -> STALE.
    (void)cache.advertised(kPeer6, hw(0x99), true, false, now);
    EXPECT_EQ(state(kPeer6), State::stale);
    EXPECT_EQ(cache.find(kPeer6)->hw, hw(0x48));
    // Override set: replaced, STALE when unsolicited.
    (void)cache.advertised(kPeer6, hw(0x99), false, true, now);
    EXPECT_EQ(cache.find(kPeer6)->hw, hw(0x99));
    EXPECT_EQ(cache.counters().address_changed, 1u);
}

TEST_F(NeighbourTest, PeerRestartWithNewQpnReplacesTheAddress) {
    resolve(kPeer4, hw(0x48));
    // RFC 4391 9.4: the peer restarted and announces itself (gratuitous ARP).
    cache.learn(kPeer4, hw(0x49), LearnKind::unsolicited, now);
    EXPECT_EQ(cache.counters().address_changed, 1u);
    EXPECT_EQ(state(kPeer4), State::stale);
    EXPECT_EQ(send(kPeer4).send_to, hw(0x49));

    // A solicited answer with another QPN again: replaced and confirmed.
    cache.learn(kPeer4, hw(0x50), LearnKind::solicited, now);
    EXPECT_EQ(cache.counters().address_changed, 2u);
    EXPECT_EQ(state(kPeer4), State::reachable);
    EXPECT_EQ(send(kPeer4).send_to, hw(0x50));
}

TEST_F(NeighbourTest, SameEndpointWithOtherFlagsIsNotAChange) {
    resolve(kPeer4, hw(0x48));
    HwAddress connected = hw(0x48);
    connected.flags = HwAddress::kFlagConnectedRc;
    cache.learn(kPeer4, connected, LearnKind::unsolicited, now);
    EXPECT_EQ(cache.counters().address_changed, 0u);
    EXPECT_EQ(state(kPeer4), State::reachable);  // unsolicited, same address: unchanged
    EXPECT_EQ(cache.find(kPeer4)->hw, connected);
}

TEST_F(NeighbourTest, FlushDropsEverythingAndCountsQueuedPackets) {
    resolve(kPeer6, hw(0x404));
    send(kPeer4, 1);
    send(kPeer4, 2);
    auto out = cache.flush();
    ASSERT_EQ(out.drops.size(), 1u);
    EXPECT_EQ(out.drops[0], (DropAction{.ip = kPeer4, .reason = NeighbourDropReason::flushed, .count = 2}));
    EXPECT_EQ(cache.counters().drop_flushed, 2u);
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_TRUE(cache.learn(kPeer4, hw(0x48), LearnKind::solicited, now).empty());  // nothing to flush any more
}

TEST_F(NeighbourTest, FamiliesDoNotCollide) {
    // ::c612:2 and 198.18.0.2 share bytes but are different neighbours.
    Ipv6Address v6{};
    v6[0] = 198;
    v6[1] = 18;
    v6[2] = 0;
    v6[3] = 2;
    resolve(kPeer4, hw(0x48));
    auto r = send(IpAddress::v6(v6));
    EXPECT_FALSE(r.send_to);
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(to_string(kPeer4), "198.18.0.2");
    EXPECT_EQ(to_string(kPeer6), "fe80::21e:6703:29:476f");
}

TEST_F(NeighbourTest, EntriesListsEveryNeighbourForIpoibctl) {
    resolve(kPeer4, hw(0x48));
    send(kPeer6, 1);
    auto rows = cache.entries();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].ip, kPeer4);
    EXPECT_EQ(rows[0].state, State::reachable);
    EXPECT_EQ(rows[0].hw, hw(0x48));
    EXPECT_EQ(rows[1].ip, kPeer6);
    EXPECT_EQ(rows[1].state, State::incomplete);
    EXPECT_EQ(rows[1].queued, 1u);
    EXPECT_EQ(rows[1].solicits_sent, 1u);
    EXPECT_EQ(to_string(rows[1].state), "INCOMPLETE");
}

IpAddress host(std::uint8_t n) { return IpAddress::v4({198, 18, 1, n}); }

TEST(NeighbourTableBound, FullTableEvictsOldestStaleElseRefusesAndCounts) {
    Clock::time_point now = Clock::time_point{} + 1h;
    NeighbourCache cache(NeighbourCache::Config{.max_entries = 3});
    cache.learn(host(1), hw(1), LearnKind::unsolicited, now);  // STALE, oldest
    now += 1s;
    cache.learn(host(2), hw(2), LearnKind::unsolicited, now);  // STALE
    cache.lookup_or_resolve(host(3), packet(3), now);          // INCOMPLETE

    // Full: the oldest STALE entry makes room.
    auto r = cache.lookup_or_resolve(host(4), packet(4), now);
    EXPECT_EQ(r.actions.solicits.size(), 1u);
    EXPECT_FALSE(cache.find(host(1)));
    EXPECT_TRUE(cache.find(host(2)));
    EXPECT_EQ(cache.counters().evicted, 1u);

    cache.lookup_or_resolve(host(5), packet(5), now);
    EXPECT_FALSE(cache.find(host(2)));
    EXPECT_EQ(cache.size(), 3u);

    // Now only INCOMPLETE entries: refuse, count, never evict one in use.
    r = cache.lookup_or_resolve(host(6), packet(6), now);
    EXPECT_FALSE(r.send_to);
    EXPECT_TRUE(r.actions.solicits.empty());
    ASSERT_EQ(r.actions.drops.size(), 1u);
    EXPECT_EQ(r.actions.drops[0].reason, NeighbourDropReason::table_full);
    EXPECT_EQ(cache.counters().drop_table_full, 1u);
    EXPECT_FALSE(cache.find(host(6)));
    EXPECT_EQ(cache.size(), 3u);
    EXPECT_TRUE(cache.learn(host(7), hw(7), LearnKind::unsolicited, now).empty());
    EXPECT_FALSE(cache.find(host(7)));
}

// One sender naming a new next hop per datagram fills every entry's queue;
// what they hold together is bounded in bytes, not only per entry (10,000
// entries x 3 connected-mode datagrams of 64 KiB would be 2 GB).
TEST(NeighbourQueuedBytes, AllQueuesTogetherHoldAtMostMaxQueuedBytes) {
    Clock::time_point now = Clock::time_point{} + 1h;
    NeighbourCache cache(NeighbourCache::Config{.max_entries = 100, .max_queued_bytes = 10 * 1000});
    const Packet big(1000, 0x45);
    auto host = [](std::uint8_t n) { return IpAddress::v4({198, 18, 1, n}); };
    std::size_t dropped = 0;
    for (std::uint8_t n = 1; n <= 5; ++n)
        for (int i = 0; i < 3; ++i) {
            const Resolution r = cache.lookup_or_resolve(host(n), big, now);
            for (const DropAction& d : r.actions.drops) {
                EXPECT_EQ(d.reason, NeighbourDropReason::queued_bytes);
                dropped += d.count;
            }
        }
    EXPECT_EQ(cache.queued_bytes(), 10u * 1000);
    EXPECT_EQ(dropped, 5u);
    EXPECT_EQ(cache.counters().drop_queued_bytes, 5u);
    EXPECT_EQ(cache.find(host(4))->queued, 1u);
    EXPECT_EQ(cache.find(host(5))->queued, 0u);
    // Every way out of a queue gives its bytes back: an answer (the
    // packets leave), a failed resolution, a flush.
    EXPECT_EQ(cache.learn(host(1), hw(1), LearnKind::solicited, now).flushes.at(0).packets.size(), 3u);
    EXPECT_EQ(cache.queued_bytes(), 7u * 1000);
    EXPECT_TRUE(cache.lookup_or_resolve(host(5), big, now).actions.drops.empty());
    for (int i = 0; i < 4; ++i) {
        now += 1s;
        (void)cache.tick(now);
    }
    EXPECT_EQ(cache.find(host(2))->state, NeighbourState::failed);
    EXPECT_EQ(cache.queued_bytes(), 0u);
    (void)cache.lookup_or_resolve(host(9), big, now);
    EXPECT_EQ(cache.queued_bytes(), 1000u);
    (void)cache.flush();
    EXPECT_EQ(cache.queued_bytes(), 0u);
}

TEST(NeighbourDropReasons, NamesMatchTheCounters) {
    EXPECT_EQ(to_string(NeighbourDropReason::queue_full), "drop_queue_full");
    EXPECT_EQ(to_string(NeighbourDropReason::unresolved), "drop_unresolved");
    EXPECT_EQ(to_string(NeighbourDropReason::table_full), "drop_table_full");
    EXPECT_EQ(to_string(NeighbourDropReason::flushed), "drop_flushed");
    EXPECT_EQ(to_string(NeighbourDropReason::queued_bytes), "drop_queued_bytes");
}

}  // namespace
}  // namespace ipoibd::ipoib
