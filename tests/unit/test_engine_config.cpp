// The mapping from the configuration's words to the IPoIB engine's
// parameters (daemon/engine_config.h).
#include <gtest/gtest.h>

#include "config/daemon_config.h"
#include "daemon/engine_config.h"
#include "sa_client/sa_records.h"

namespace ipoibd::daemon {
namespace {

TEST(EngineConfig, NeighbourDefaultsAreTheEngines) {
    const auto mine = neighbour_cache_config(config::default_config("ib0").neighbour);
    const ipoib::NeighbourCache::Config engine;
    EXPECT_EQ(mine.max_entries, engine.max_entries);
    EXPECT_EQ(mine.multicast_solicits, engine.multicast_solicits);
    EXPECT_EQ(mine.unicast_probes, engine.unicast_probes);
    EXPECT_EQ(mine.retrans_time, engine.retrans_time);
    EXPECT_EQ(mine.reachable_time, engine.reachable_time);
    EXPECT_EQ(mine.delay_first_probe_time, engine.delay_first_probe_time);
    EXPECT_EQ(mine.gc_stale_time, engine.gc_stale_time);
}

TEST(EngineConfig, ScopesAreTheMgidNibbles) {
    EXPECT_EQ(mgid_scope(config::MulticastScope::link_local), ipoib::Scope::link_local);
    EXPECT_EQ(mgid_scope(config::MulticastScope::site_local), ipoib::Scope::site_local);
    EXPECT_EQ(mgid_scope(config::MulticastScope::organization_local), ipoib::Scope::organization_local);
    EXPECT_EQ(mgid_scope(config::MulticastScope::global), ipoib::Scope::global);
    // The config's own enum carries the same nibble values.
    EXPECT_EQ(static_cast<int>(config::MulticastScope::global), static_cast<int>(ipoib::Scope::global));
}

TEST(EngineConfig, SendOnlyJoinsAreTheJoinStateBits) {
    EXPECT_EQ(join_state_bits(config::SendOnlyJoin::send_only_full_member), sa::join_state::send_only_full_member);
    EXPECT_EQ(join_state_bits(config::SendOnlyJoin::send_only_non_member), sa::join_state::send_only_non_member);
    EXPECT_EQ(join_state_bits(config::SendOnlyJoin::non_member), sa::join_state::non_member);
}

TEST(EngineConfig, EngineConfigCarriesTheFile) {
    config::DaemonConfig c = config::default_config("ib0");
    c.fabric.pkey = 0x8001;
    c.multicast.scope = config::MulticastScope::site_local;
    c.multicast.send_only_join = config::SendOnlyJoin::non_member;
    c.multicast.max_groups = 7;
    c.neighbour.path_max_entries = 9;
    c.interface.mtu = 2044;
    const ipoib::EngineConfig e = engine_config(c);
    EXPECT_EQ(e.pkey, 0x8001);
    EXPECT_EQ(e.scope, ipoib::Scope::site_local);
    EXPECT_EQ(e.mcast.send_only_join_state, sa::join_state::non_member);
    EXPECT_EQ(e.mcast.max_groups, 7u);
    EXPECT_EQ(e.path.max_entries, 9u);
    EXPECT_EQ(e.mtu, 2044u);
}

}  // namespace
}  // namespace ipoibd::daemon
