// Topologies by shape, for tests, benchmarks and `ibfabricd --topology`:
// a two-level fat tree (leaves and spines) and a ring of switches. LIDs as
// an SM gives them in a breadth-first sweep: switches first, then the CA
// ports; GUIDs from fixed bases so that a shape is the same every time.
#pragma once

#include <cstdint>

#include "fabric/routing/topology.h"

namespace ipoibd::fabric::routing {

inline constexpr std::uint64_t kShapeSwitchGuidBase = 0x0002'c900'0010'0000ULL;
inline constexpr std::uint64_t kShapeCaGuidBase = 0x0002'c900'0020'0000ULL;

struct FatTreeShape {
    unsigned leaves = 8;
    unsigned spines = 4;
    unsigned hosts_per_leaf = 12;
    unsigned links_per_spine = 1;  // cables from each leaf to each spine
};

// Leaf ports 1..hosts_per_leaf are hosts, then the uplinks spine by spine;
// spine ports go leaf by leaf. Switches 0..leaves-1 are the leaves.
Topology fat_tree(const FatTreeShape& shape);

// switches in a ring: switch i port 1 to switch i+1 port 2, hosts from
// port 3 on.
Topology ring(unsigned switches, unsigned hosts_per_switch);

}  // namespace ipoibd::fabric::routing
