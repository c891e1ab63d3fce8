// TAP mode's synthetic MACs (ipoib/mac_table.h) with a fake clock: the MAC
// of a GID (02 + the GUID's low 40 bits, hashed ones after a collision, all
// locally administered unicast), and MacTable: learning, a peer's new QPN
// or LID updating its entry in place, the (LID, QPN) lookup following it,
// collisions, the bound and the least recently used entry making room,
// aging with a "referenced" predicate, clear, the sorted listing, counters.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/byte_io.h"
#include "common/counters.h"
#include "ipoib/mac_table.h"

namespace ipoibd::ipoib {
namespace {

using namespace std::chrono_literals;
using Clock = MacTable::Clock;

constexpr std::uint64_t kLinkLocal = 0xfe80'0000'0000'0000ULL;

ib::Gid gid_of(std::uint64_t guid, std::uint64_t prefix = kLinkLocal) {
    ib::Gid g{};
    store_be64(g.data(), prefix);
    store_be64(g.data() + 8, guid);
    return g;
}

HwAddress endpoint(std::uint64_t guid, std::uint32_t qpn, std::uint64_t prefix = kLinkLocal) {
    return HwAddress{.flags = 0, .qpn = qpn, .gid = gid_of(guid, prefix)};
}

// Two real ConnectX port GUIDs (the hosts of test_ipoib_arp.cpp).
constexpr std::uint64_t kGuidA = 0x001e'6703'0029'476fULL;
constexpr std::uint64_t kGuidB = 0x0002'c903'0057'e7fdULL;
// Another vendor's GUID with kGuidA's low 40 bits (03:00:29:47:6f).
constexpr std::uint64_t kGuidAClash = 0x0002'c903'0029'476fULL;

std::string mac_text(const std::optional<MacAddress>& m) { return m ? format_mac(*m) : "none"; }

// A deterministic stream of GIDs: every byte varies, prefixes included.
struct GidStream {
    std::uint64_t x = 0x9e37'79b9'7f4a'7c15ULL;
    std::uint64_t next() {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        return x ^ (x >> 29);
    }
    ib::Gid gid() {
        const std::uint64_t prefix = next();
        return gid_of(next(), prefix);
    }
};

// ---------------------------------------------------------------------------
// synthetic_mac

TEST(MacSynthetic, FirstAttemptIsTheGuidsLow40Bits) {
    EXPECT_EQ(format_mac(synthetic_mac(gid_of(kGuidA))), "02:03:00:29:47:6f");
    EXPECT_EQ(format_mac(synthetic_mac(gid_of(kGuidB), 0)), "02:03:00:57:e7:fd");
    EXPECT_EQ(format_mac(synthetic_mac(gid_of(0x0123'4567'89ab'cdefULL))), "02:67:89:ab:cd:ef");
    // The GUID's own bit 0x01 at byte 11 does not make a group MAC.
    EXPECT_EQ(format_mac(synthetic_mac(gid_of(0x0000'00ff'ffff'ffffULL))), "02:ff:ff:ff:ff:ff");
    EXPECT_EQ(format_mac(synthetic_mac(gid_of(0))), "02:00:00:00:00:00");
    // The subnet prefix and the GUID's upper 24 bits (the OUI) are not in it.
    EXPECT_EQ(synthetic_mac(gid_of(kGuidA, 0xfec0'0000'0000'0001ULL)), synthetic_mac(gid_of(kGuidA)));
    EXPECT_EQ(synthetic_mac(gid_of(kGuidAClash)), synthetic_mac(gid_of(kGuidA)));

    GidStream s;
    for (int i = 0; i < 1000; ++i) {
        const ib::Gid g = s.gid();
        const MacAddress m = synthetic_mac(g, 0);
        ASSERT_EQ(m[0], 0x02);
        for (std::size_t k = 0; k < 5; ++k) ASSERT_EQ(m[1 + k], g[11 + k]) << "octet " << k + 1;
    }
}

TEST(MacSynthetic, EveryAttemptIsLocallyAdministeredUnicast) {
    GidStream s;
    std::vector<ib::Gid> gids{gid_of(kGuidA), gid_of(0), gid_of(~0ULL, ~0ULL)};
    for (int i = 0; i < 500; ++i) gids.push_back(s.gid());
    for (const ib::Gid& g : gids) {
        for (unsigned attempt = 0; attempt < 64; ++attempt) {
            const MacAddress m = synthetic_mac(g, attempt);
            ASSERT_NE(m[0] & kMacLocallyAdministered, 0) << format_mac(m) << " attempt " << attempt;
            ASSERT_EQ(m[0] & kMacGroupBit, 0) << format_mac(m) << " attempt " << attempt;
            ASSERT_FALSE(is_group_mac(m));
            ASSERT_EQ(m[0], 0x02) << format_mac(m) << " attempt " << attempt;  // "02 + 40 bits"
        }
    }
}

TEST(MacSynthetic, LaterAttemptsDifferAndAreStable) {
    GidStream s;
    std::vector<ib::Gid> gids{gid_of(kGuidA), gid_of(kGuidAClash), gid_of(0)};
    for (int i = 0; i < 200; ++i) gids.push_back(s.gid());
    for (const ib::Gid& g : gids) {
        std::set<MacAddress> seen;
        for (unsigned attempt = 0; attempt < 64; ++attempt) {
            const MacAddress m = synthetic_mac(g, attempt);
            EXPECT_EQ(synthetic_mac(g, attempt), m);  // a function of (GID, attempt) only
            EXPECT_TRUE(seen.insert(m).second) << format_mac(m) << " again at attempt " << attempt;
        }
    }
    // The hash covers the whole GID: GIDs sharing the GUID's low 40 bits (or
    // the whole GUID under another prefix) part ways from attempt 1.
    const ib::Gid a = gid_of(kGuidA), clash = gid_of(kGuidAClash), other_subnet = gid_of(kGuidA, 0xfec0'0000'0000'0000ULL);
    EXPECT_NE(synthetic_mac(a, 1), synthetic_mac(clash, 1));
    EXPECT_NE(synthetic_mac(a, 1), synthetic_mac(other_subnet, 1));
    EXPECT_NE(synthetic_mac(clash, 1), synthetic_mac(other_subnet, 1));
    std::set<MacAddress> firsts;
    for (const ib::Gid& g : gids) firsts.insert(synthetic_mac(g, 1));
    EXPECT_EQ(firsts.size(), gids.size());
}

// ---------------------------------------------------------------------------
// MacTable

struct MacTableTest : ::testing::Test {
    Clock::time_point now = Clock::time_point{} + 1h;
    MacTable table{MacTable::Config{.max_entries = 8, .idle = 60s}};

    MacAddress learn(const HwAddress& hw, std::uint16_t lid) {
        const auto m = table.learn(hw, lid, now);
        EXPECT_TRUE(m.has_value()) << "refused";
        return m.value_or(MacAddress{});
    }
    static std::function<bool(const ib::Gid&)> referenced(std::vector<ib::Gid> gids) {
        return [gids = std::move(gids)](const ib::Gid& g) {
            for (const ib::Gid& r : gids)
                if (r == g) return true;
            return false;
        };
    }
    static bool nothing_referenced(const ib::Gid&) { return false; }
};

TEST_F(MacTableTest, LearnCreatesAnEntryFromTheGuid) {
    const HwAddress a = endpoint(kGuidA, 0x48);
    const MacAddress mac = learn(a, 5);
    EXPECT_EQ(format_mac(mac), "02:03:00:29:47:6f");
    EXPECT_EQ(table.size(), 1u);
    EXPECT_EQ(table.find(mac, now), a);
    EXPECT_EQ(mac_text(table.mac_of(a.gid)), format_mac(mac));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x48)), format_mac(mac));
    EXPECT_EQ(table.counters(), (MacTableCounters{.added = 1}));
    const auto entries = table.entries();
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].mac, mac);
    EXPECT_EQ(entries[0].hw, a);
    EXPECT_EQ(entries[0].lid, 5);

    // Nothing else answers.
    EXPECT_FALSE(table.find(synthetic_mac(gid_of(kGuidB)), now));
    EXPECT_FALSE(table.find(kMacBroadcast, now));
    EXPECT_FALSE(table.mac_of(gid_of(kGuidB)));
    EXPECT_FALSE(table.mac_of(gid_of(kGuidA, 0xfec0'0000'0000'0000ULL)));
    EXPECT_FALSE(table.mac_of_source(6, 0x48));
    // Another QPN at the one endpoint's LID: the same host (a data thread's
    // QP on an HCA, or the peer restarted), so its MAC.
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x49)), format_mac(mac));
}

TEST_F(MacTableTest, LearnIsStableForTheSameGid) {
    const HwAddress a = endpoint(kGuidA, 0x48);
    const MacAddress mac = learn(a, 5);
    for (const std::uint16_t lid : std::initializer_list<std::uint16_t>{5, 0, 5}) {
        now += 1s;
        EXPECT_EQ(mac_text(table.learn(a, lid, now)), format_mac(mac));
    }
    EXPECT_EQ(table.size(), 1u);
    EXPECT_EQ(table.counters(), (MacTableCounters{.added = 1}));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x48)), format_mac(mac));  // lid 0: kept as it was
    EXPECT_EQ(table.entries().at(0).lid, 5);
}

TEST_F(MacTableTest, NewQpnKeepsTheMacAndMovesTheSourceKey) {
    const MacAddress mac = learn(endpoint(kGuidA, 0x48), 5);
    // The peer restarted: same GID, new QPN.
    EXPECT_EQ(format_mac(learn(endpoint(kGuidA, 0x49), 5)), format_mac(mac));
    EXPECT_EQ(table.size(), 1u);
    EXPECT_EQ(table.find(mac, now), endpoint(kGuidA, 0x49));
    EXPECT_EQ(table.counters(), (MacTableCounters{.added = 1, .address_changed = 1}));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x49)), format_mac(mac));

    // Again, this time from a message that does not name the LID.
    EXPECT_EQ(format_mac(learn(endpoint(kGuidA, 0x4a), 0)), format_mac(mac));
    EXPECT_EQ(table.find(mac, now), endpoint(kGuidA, 0x4a));
    EXPECT_EQ(table.counters().address_changed, 2u);
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x4a)), format_mac(mac));
    EXPECT_EQ(table.counters().added, 1u);
}

TEST_F(MacTableTest, FlagsUpdateTheAddressInPlace) {
    const MacAddress mac = learn(endpoint(kGuidA, 0x48), 5);
    HwAddress rc = endpoint(kGuidA, 0x48);
    rc.flags = HwAddress::kFlagConnectedRc;
    EXPECT_EQ(format_mac(learn(rc, 5)), format_mac(mac));
    EXPECT_EQ(table.find(mac, now), rc);  // the flags as last heard
    EXPECT_EQ(table.size(), 1u);
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x48)), format_mac(mac));
}

TEST_F(MacTableTest, LidLearnedLaterAndChanged) {
    const HwAddress a = endpoint(kGuidA, 0x48);
    const MacAddress mac = learn(a, 0);
    EXPECT_FALSE(table.mac_of_source(0, 0x48));
    EXPECT_EQ(table.entries().at(0).lid, 0);

    EXPECT_EQ(format_mac(learn(a, 7)), format_mac(mac));
    EXPECT_EQ(mac_text(table.mac_of_source(7, 0x48)), format_mac(mac));
    EXPECT_EQ(table.entries().at(0).lid, 7);

    // The SM gave the port a new LID.
    EXPECT_EQ(format_mac(learn(a, 9)), format_mac(mac));
    EXPECT_FALSE(table.mac_of_source(7, 0x48));
    EXPECT_EQ(mac_text(table.mac_of_source(9, 0x48)), format_mac(mac));
    EXPECT_EQ(table.entries().at(0).lid, 9);
    EXPECT_EQ(table.counters().address_changed, 0u);  // same endpoint
    EXPECT_EQ(table.counters().added, 1u);
}

TEST_F(MacTableTest, SourceKeyTakenOverByAnotherGidIsNotForgottenByTheFormerOwner) {
    const MacAddress mac_a = learn(endpoint(kGuidA, 0x48), 5);
    // (LID 5, QPN 0x48) now belongs to another GID (the port's GUID changed).
    const MacAddress mac_b = learn(endpoint(kGuidB, 0x48), 5);
    ASSERT_NE(mac_a, mac_b);
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x48)), format_mac(mac_b));

    // A's QPN changes: B's key stays B's.
    learn(endpoint(kGuidA, 0x50), 0);
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x48)), format_mac(mac_b));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x50)), format_mac(mac_a));

    // A ages out: B's key still stays B's, and B is the one endpoint left
    // at LID 5.
    now += 61s;
    table.prune(referenced({gid_of(kGuidB)}), now);
    EXPECT_FALSE(table.mac_of(gid_of(kGuidA)));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x48)), format_mac(mac_b));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x50)), format_mac(mac_b));
}

// A source QPN the table does not know takes the MAC of the endpoint at
// its LID only while there is exactly one: endpoints sharing a port (two
// IPoIB instances in one partition) leave it unknown.
TEST_F(MacTableTest, AnUnknownQpnTakesTheMacOfTheOneEndpointAtItsLid) {
    const MacAddress mac_a = learn(endpoint(kGuidA, 0x48), 5);
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x777)), format_mac(mac_a));
    const MacAddress mac_b = learn(endpoint(kGuidB, 0x60), 5);  // a second endpoint on the port
    EXPECT_FALSE(table.mac_of_source(5, 0x777));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x48)), format_mac(mac_a));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x60)), format_mac(mac_b));

    // A moves to LID 9: each LID has one endpoint again.
    learn(endpoint(kGuidA, 0x48), 9);
    EXPECT_EQ(mac_text(table.mac_of_source(9, 0x777)), format_mac(mac_a));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x777)), format_mac(mac_b));

    // Back to one LID, then the one the LID's record named ages out: the
    // other is found.
    learn(endpoint(kGuidA, 0x48), 5);
    EXPECT_FALSE(table.mac_of_source(5, 0x777));
    now += 61s;
    table.prune(referenced({gid_of(kGuidA)}), now);
    EXPECT_FALSE(table.mac_of(gid_of(kGuidB)));
    EXPECT_EQ(mac_text(table.mac_of_source(5, 0x777)), format_mac(mac_a));
    now += 61s;
    table.prune(nothing_referenced, now);
    EXPECT_FALSE(table.mac_of_source(5, 0x777));
    EXPECT_FALSE(table.mac_of_source(9, 0x777));

    learn(endpoint(kGuidA, 0x48), 5);
    table.clear();
    EXPECT_FALSE(table.mac_of_source(5, 0x777));
}

// One port (one source LID, which the fabric vouches for) naming GID after
// GID in its ARP/ND must not fill the table: past max_per_lid it is
// refused, counted, and other ports still get entries.
TEST_F(MacTableTest, OneLidCannotFillTheTable) {
    MacTable t{MacTable::Config{.max_entries = 8, .idle = 60s, .max_per_lid = 3}};
    for (std::uint64_t i = 0; i < 8; ++i) t.learn(endpoint(0x1000 + i, 0x48), 5, now);
    EXPECT_EQ(t.size(), 3u);
    EXPECT_EQ(t.counters().lid_full, 5u);
    EXPECT_TRUE(t.learn(endpoint(kGuidA, 0x48), 6, now));
    EXPECT_TRUE(t.learn(endpoint(kGuidB, 0x48), 7, now));
    // A known GID at the LID is still updated (a restart: a new QPN).
    EXPECT_TRUE(t.learn(endpoint(0x1000, 0x49), 5, now));
    EXPECT_EQ(t.size(), 5u);
}

TEST_F(MacTableTest, CollisionsGetHashedMacs) {
    const HwAddress a = endpoint(kGuidA, 0x48);
    const HwAddress clash = endpoint(kGuidAClash, 0x49);                      // same low 40 bits
    const HwAddress other_subnet = endpoint(kGuidA, 0x4a, 0xfec0'0000'0000'0000ULL);  // same GUID
    const MacAddress mac_a = learn(a, 5);
    EXPECT_EQ(mac_a, synthetic_mac(a.gid, 0));
    EXPECT_EQ(table.counters().collisions, 0u);

    const MacAddress mac_clash = learn(clash, 6);
    EXPECT_NE(mac_clash, mac_a);
    EXPECT_EQ(format_mac(mac_clash), format_mac(synthetic_mac(clash.gid, 1)));
    EXPECT_EQ(table.counters().collisions, 1u);

    const MacAddress mac_other = learn(other_subnet, 7);
    EXPECT_EQ(format_mac(mac_other), format_mac(synthetic_mac(other_subnet.gid, 1)));
    EXPECT_NE(mac_other, mac_a);
    EXPECT_NE(mac_other, mac_clash);
    EXPECT_EQ(table.counters().collisions, 2u);

    // A GUID whose own MAC is one already handed out as a hashed one.
    std::uint64_t guid_d = 0x12'3456ULL << 40;
    for (std::size_t i = 1; i < 6; ++i) guid_d |= std::uint64_t{mac_clash[i]} << (8 * (5 - i));
    const HwAddress d = endpoint(guid_d, 0x4b);
    ASSERT_EQ(synthetic_mac(d.gid, 0), mac_clash);
    const MacAddress mac_d = learn(d, 8);
    EXPECT_EQ(format_mac(mac_d), format_mac(synthetic_mac(d.gid, 1)));
    EXPECT_EQ(table.counters().collisions, 3u);

    // Each MAC leads to its own endpoint, both ways.
    EXPECT_EQ(table.size(), 4u);
    EXPECT_EQ(table.counters().added, 4u);
    const std::pair<HwAddress, MacAddress> all[] = {{a, mac_a}, {clash, mac_clash}, {other_subnet, mac_other}, {d, mac_d}};
    for (const auto& [hw, mac] : all) {
        SCOPED_TRACE(format_mac(mac));
        EXPECT_FALSE(is_group_mac(mac));
        EXPECT_NE(mac[0] & kMacLocallyAdministered, 0);
        EXPECT_EQ(table.find(mac, now), hw);
        EXPECT_EQ(mac_text(table.mac_of(hw.gid)), format_mac(mac));
    }
    EXPECT_EQ(mac_text(table.mac_of_source(6, 0x49)), format_mac(mac_clash));
    EXPECT_EQ(mac_text(table.mac_of_source(8, 0x4b)), format_mac(mac_d));

    // Stable while it lives: the hashed entry keeps its MAC when heard again,
    // even after the GUID's MAC is free.
    now += 61s;
    table.prune(referenced({clash.gid, other_subnet.gid, d.gid}), now);
    ASSERT_FALSE(table.mac_of(a.gid));
    EXPECT_EQ(format_mac(learn(clash, 6)), format_mac(mac_clash));
    EXPECT_EQ(table.counters().collisions, 3u);
    // And A, back, has its GUID's MAC again.
    EXPECT_EQ(format_mac(learn(a, 5)), format_mac(mac_a));
    EXPECT_EQ(table.counters().collisions, 3u);
}

TEST_F(MacTableTest, FullRefusesUntilTheLeastRecentlyUsedHasBeenIdle) {
    table.set_config({.max_entries = 2, .idle = 60s});
    const Clock::time_point t0 = now;
    const HwAddress a = endpoint(kGuidA, 0x48), b = endpoint(kGuidB, 0x49);
    const HwAddress c = endpoint(0x0011'2233'4455'6677ULL, 0x4a);
    const MacAddress mac_a = learn(a, 5);
    now = t0 + 1s;
    const MacAddress mac_b = learn(b, 6);

    // Both recently used: refused.
    now = t0 + 2s;
    EXPECT_FALSE(table.learn(c, 7, now));
    EXPECT_EQ(table.counters(), (MacTableCounters{.added = 2, .full = 1}));
    EXPECT_EQ(table.size(), 2u);
    EXPECT_FALSE(table.mac_of(c.gid));
    EXPECT_FALSE(table.mac_of_source(7, 0x4a));

    // A known GID is still heard on a full table (updated in place).
    EXPECT_EQ(format_mac(learn(endpoint(kGuidA, 0x48), 5)), format_mac(mac_a));
    EXPECT_EQ(table.counters().full, 1u);

    // A is used (a frame to it), B is not.
    now = t0 + 30s;
    ASSERT_TRUE(table.find(mac_a, now));
    now = t0 + 60s;  // B idle 59 s: not yet
    EXPECT_FALSE(table.learn(c, 7, now));
    EXPECT_EQ(table.counters().full, 2u);
    EXPECT_EQ(table.counters().removed, 0u);

    // B, the least recently used (though learned after A), has been idle
    // for config().idle: it makes room.
    now = t0 + 61s;
    const auto mac_c = table.learn(c, 7, now);
    ASSERT_TRUE(mac_c.has_value());
    EXPECT_EQ(*mac_c, synthetic_mac(c.gid));
    EXPECT_EQ(table.size(), 2u);
    EXPECT_EQ(table.counters(), (MacTableCounters{.added = 3, .removed = 1, .full = 2}));
    EXPECT_FALSE(table.mac_of(b.gid));
    EXPECT_FALSE(table.find(mac_b, now));
    EXPECT_FALSE(table.mac_of_source(6, 0x49));
    EXPECT_EQ(table.find(mac_a, now), a);
    EXPECT_EQ(table.find(*mac_c, now), c);
    EXPECT_EQ(mac_text(table.mac_of_source(7, 0x4a)), format_mac(*mac_c));
}

TEST_F(MacTableTest, PruneRemovesUnreferencedIdleEntriesOnly) {
    const Clock::time_point t0 = now;
    const HwAddress a = endpoint(kGuidA, 0x48);                     // referenced, idle
    const HwAddress b = endpoint(kGuidB, 0x49);                     // neither: goes
    const HwAddress c = endpoint(0x0011'2233'4455'6677ULL, 0x4a);  // used by a frame
    const HwAddress d = endpoint(0x0011'2233'4455'6688ULL, 0x4b);  // heard again
    const MacAddress mac_a = learn(a, 5), mac_b = learn(b, 6), mac_c = learn(c, 7), mac_d = learn(d, 8);
    now = t0 + 50s;
    ASSERT_TRUE(table.find(mac_c, now));
    now = t0 + 55s;
    learn(d, 8);

    now = t0 + 100s;
    std::set<ib::Gid> asked;
    table.prune(
        [&](const ib::Gid& g) {
            asked.insert(g);
            return g == a.gid;
        },
        now);
    EXPECT_TRUE(asked.count(a.gid) && asked.count(b.gid));  // the idle ones at least
    EXPECT_EQ(table.size(), 3u);
    EXPECT_EQ(table.find(mac_a, now - 100s), a);  // (a look that leaves it idle)
    EXPECT_FALSE(table.mac_of(b.gid));
    EXPECT_FALSE(table.find(mac_b, now));
    EXPECT_FALSE(table.mac_of_source(6, 0x49));
    EXPECT_TRUE(table.mac_of(c.gid));
    EXPECT_TRUE(table.mac_of(d.gid));
    EXPECT_EQ(table.counters().removed, 1u);

    // Nothing referenced any more: A (idle 100 s) and C (idle 61 s) go, D
    // (idle 56 s) stays.
    now = t0 + 111s;
    table.prune(nothing_referenced, now);
    EXPECT_FALSE(table.mac_of(a.gid));
    EXPECT_FALSE(table.mac_of_source(5, 0x48));
    EXPECT_FALSE(table.mac_of(c.gid));
    EXPECT_FALSE(table.mac_of_source(7, 0x4a));
    EXPECT_EQ(table.find(mac_d, now), d);
    EXPECT_EQ(mac_text(table.mac_of_source(8, 0x4b)), format_mac(mac_d));
    EXPECT_EQ(table.size(), 1u);
    EXPECT_EQ(table.counters().removed, 3u);

    // B heard again: a new entry, its MAC as before.
    EXPECT_EQ(format_mac(learn(b, 6)), format_mac(mac_b));
    EXPECT_EQ(table.counters().added, 5u);
}

TEST_F(MacTableTest, PruneIdleBoundary) {
    const Clock::time_point t0 = now;
    learn(endpoint(kGuidA, 0x48), 5);
    table.prune(nothing_referenced, t0 + 60s - 1ms);
    EXPECT_EQ(table.size(), 1u);
    table.prune(nothing_referenced, t0 + 60s);  // unused for `idle`: removed
    EXPECT_EQ(table.size(), 0u);
    EXPECT_EQ(table.counters().removed, 1u);
}

TEST_F(MacTableTest, Clear) {
    const MacAddress mac_a = learn(endpoint(kGuidA, 0x48), 5);
    const MacAddress mac_b = learn(endpoint(kGuidB, 0x49), 6);
    learn(endpoint(kGuidAClash, 0x4a), 7);
    table.clear();
    EXPECT_EQ(table.size(), 0u);
    EXPECT_TRUE(table.entries().empty());
    EXPECT_FALSE(table.find(mac_a, now));
    EXPECT_FALSE(table.find(mac_b, now));
    EXPECT_FALSE(table.mac_of(gid_of(kGuidA)));
    EXPECT_FALSE(table.mac_of_source(5, 0x48));
    EXPECT_FALSE(table.mac_of_source(6, 0x49));
    EXPECT_FALSE(table.mac_of_source(7, 0x4a));
    EXPECT_EQ(table.counters(), (MacTableCounters{.added = 3, .removed = 3, .collisions = 1}));
    // Learned again from nothing: the GUID's MAC, no collision.
    EXPECT_EQ(format_mac(learn(endpoint(kGuidB, 0x49), 6)), format_mac(mac_b));
    EXPECT_EQ(table.counters().collisions, 1u);
}

TEST_F(MacTableTest, EntriesSortedByMac) {
    const HwAddress hws[] = {
        endpoint(0x0000'00ff'0000'0001ULL, 0x41),
        endpoint(0x0000'0000'0000'0002ULL, 0x42),
        endpoint(0x0000'0080'0000'0003ULL, 0x43),
        endpoint(0x0000'0000'0000'00ffULL, 0x44),
        endpoint(0x0000'0000'0100'0000ULL, 0x45),
    };
    std::uint16_t lid = 1;
    for (const HwAddress& hw : hws) learn(hw, lid++);
    const auto entries = table.entries();
    ASSERT_EQ(entries.size(), 5u);
    const struct {
        const char* mac;
        std::size_t index;
    } want[] = {
        {"02:00:00:00:00:02", 1}, {"02:00:00:00:00:ff", 3}, {"02:00:01:00:00:00", 4},
        {"02:80:00:00:00:03", 2}, {"02:ff:00:00:00:01", 0},
    };
    for (std::size_t i = 0; i < entries.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(format_mac(entries[i].mac), want[i].mac);
        EXPECT_EQ(entries[i].hw, hws[want[i].index]);
        EXPECT_EQ(entries[i].lid, want[i].index + 1);
    }
}

TEST_F(MacTableTest, CountersVisitEveryField) {
    struct Sink : CounterSink {
        std::map<std::string, std::uint64_t> seen;
        void counter(std::string_view name, std::uint64_t value) override {
            EXPECT_TRUE(seen.emplace(std::string(name), value).second) << name << " twice";
        }
    } sink;
    const MacTableCounters c{.added = 1, .removed = 2, .collisions = 3, .full = 4, .lid_full = 6, .address_changed = 5};
    visit(c, sink);
    EXPECT_EQ(sink.seen, (std::map<std::string, std::uint64_t>{
                             {"added", 1}, {"removed", 2}, {"collisions", 3}, {"full", 4}, {"lid_full", 6}, {"address_changed", 5}}));
}

}  // namespace
}  // namespace ipoibd::ipoib
