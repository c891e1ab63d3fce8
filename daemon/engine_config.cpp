#include "daemon/engine_config.h"

#include <random>

#include "sa_client/sa_records.h"

namespace ipoibd::daemon {

ipoib::Scope mgid_scope(config::MulticastScope scope) {
    switch (scope) {
    case config::MulticastScope::link_local: return ipoib::Scope::link_local;
    case config::MulticastScope::site_local: return ipoib::Scope::site_local;
    case config::MulticastScope::organization_local: return ipoib::Scope::organization_local;
    case config::MulticastScope::global: return ipoib::Scope::global;
    }
    return ipoib::Scope::link_local;
}

std::uint8_t join_state_bits(config::SendOnlyJoin join) {
    switch (join) {
    case config::SendOnlyJoin::send_only_full_member: return sa::join_state::send_only_full_member;
    case config::SendOnlyJoin::send_only_non_member: return sa::join_state::send_only_non_member;
    case config::SendOnlyJoin::non_member: return sa::join_state::non_member;
    }
    return sa::join_state::send_only_full_member;
}

ipoib::NeighbourCache::Config neighbour_cache_config(const config::NeighbourSection& n) {
    ipoib::NeighbourCache::Config out;
    out.max_entries = n.max_entries;
    out.multicast_solicits = n.multicast_solicits;
    out.unicast_probes = n.unicast_probes;
    out.retrans_time = n.retrans_time;
    out.reachable_time = n.reachable_time;
    out.delay_first_probe_time = n.delay_first_probe_time;
    out.gc_stale_time = n.gc_stale_time;
    return out;
}

ipoib::EngineConfig engine_config(const config::DaemonConfig& c) {
    ipoib::EngineConfig e;
    e.pkey = c.fabric.pkey;
    e.scope = mgid_scope(c.multicast.scope);
    e.mtu = c.interface.mtu;
    e.connected = c.interface.connected_mode;
    e.neighbour = neighbour_cache_config(c.neighbour);
    e.neighbour.reachable_factor = ipoib::make_reachable_factor(std::random_device{}());
    e.path.max_entries = c.neighbour.path_max_entries;
    e.mcast.send_only_join_state = join_state_bits(c.multicast.send_only_join);
    e.mcast.max_groups = c.multicast.max_groups;
    return e;
}

}  // namespace ipoibd::daemon
