// The neighbour cache with a fake clock: every state transition, the
// 3-packet queue, solicit retries and failure, probing, a peer restarting
// with a new QPN (RFC 4391 9.4), aging and garbage collection, flush and the
// table bound.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "ipoib/neighbour_cache.h"

namespace ipoibd::ipoib {
namespace {

using namespace std::chrono_literals;
using State = NeighbourState;

const NeighbourIp kPeer4 = NeighbourIp::v4({198, 18, 0, 2});
const NeighbourIp kPeer6 = NeighbourIp::v6(*parse_ipv6("fe80::21e:6703:29:476f"));

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

    Resolution send(const NeighbourIp& ip, std::uint8_t tag = 0) { return cache.lookup_or_resolve(ip, packet(tag), now); }
    NeighbourActions advance(std::chrono::milliseconds d) {
        now += d;
        return cache.tick(now);
    }
    State state(const NeighbourIp& ip) const {
        auto e = cache.find(ip);
        EXPECT_TRUE(e.has_value());
        return e ? e->state : State::failed;
    }
    // Unknown -> INCOMPLETE -> REACHABLE with one packet flushed.
    void resolve(const NeighbourIp& ip, const HwAddress& a) {
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
    auto r = send(NeighbourIp::v6(v6));
    EXPECT_FALSE(r.send_to);
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(format_neighbour_ip(kPeer4), "198.18.0.2");
    EXPECT_EQ(format_neighbour_ip(kPeer6), "fe80::21e:6703:29:476f");
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

NeighbourIp host(std::uint8_t n) { return NeighbourIp::v4({198, 18, 1, n}); }

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

TEST(NeighbourDropReasons, NamesMatchTheCounters) {
    EXPECT_EQ(to_string(NeighbourDropReason::queue_full), "drop_queue_full");
    EXPECT_EQ(to_string(NeighbourDropReason::unresolved), "drop_unresolved");
    EXPECT_EQ(to_string(NeighbourDropReason::table_full), "drop_table_full");
    EXPECT_EQ(to_string(NeighbourDropReason::flushed), "drop_flushed");
}

}  // namespace
}  // namespace ipoibd::ipoib
