// From the configuration's words to the IPoIB engine's parameters. config/
// is a leaf that knows nothing of the engine (DESIGN.md); the mapping lives
// here, with the daemon that wires the two.
#pragma once

#include "config/daemon_config.h"
#include "ipoib/engine.h"
#include "ipoib/mgid.h"
#include "ipoib/neighbour_cache.h"

namespace ipoibd::daemon {

// [multicast] scope as the MGID's scope nibble.
ipoib::Scope mgid_scope(config::MulticastScope scope);
// [multicast] send-only-join as MCMemberRecord JoinState bits.
std::uint8_t join_state_bits(config::SendOnlyJoin join);
// The neighbour cache's parameters from [neighbour] (the reachable-time
// factor is the caller's: a generator drawn once per process).
ipoib::NeighbourCache::Config neighbour_cache_config(const config::NeighbourSection& neighbour);
// The whole engine configuration for one interface.
ipoib::EngineConfig engine_config(const config::DaemonConfig& c);

}  // namespace ipoibd::daemon
