// Credit loops: a cycle in the channel dependency graph of a set of
// forwarding tables (Dally and Seitz). A channel is one direction of an
// inter-switch link; a packet that arrives on channel A and leaves on B
// makes B's buffers a dependency of A's. Under link-level flow control a
// cycle of such dependencies can deadlock the fabric with every buffer on
// it full. Min-hop routing makes one on a ring; up/down never does.
//
// Every switch counts as a source for every LID (a CA on any switch, or
// the switch itself, may send to it), so the graph is the tables' whole
// possible traffic, not one workload's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fabric/routing/routing.h"
#include "fabric/routing/topology.h"

namespace ipoibd::fabric::routing {

struct Channel {
    std::uint32_t sw = 0;   // the switch it leaves
    std::uint8_t port = 0;  // by this port
    friend bool operator==(const Channel&, const Channel&) = default;
};

struct ChannelGraph {
    std::size_t channels = 0;      // inter-switch channels in use
    std::size_t dependencies = 0;  // distinct edges
    // A cycle, channel after channel, the first depending on the last;
    // empty when there is none.
    std::vector<Channel> cycle;
};

ChannelGraph check_credit_loops(const Topology& topology, const Routes& routes);

// "sw 3 port 2 -> sw 4 port 1 -> ...", switches by GUID.
std::string describe(const Topology& topology, const std::vector<Channel>& cycle);

}  // namespace ipoibd::fabric::routing
