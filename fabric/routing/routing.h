// Unicast routing engines over a swept subnet (topology.h): what the SM
// writes into every switch's LinearForwardingTable. Pure functions: a
// topology (and the tables routed before) in, tables out; no SMPs.
//
// Both engines follow OpenSM's (osm_ucast_mgr.c, osm_switch.c,
// osm_ucast_updn.c), so that a fabric routed by ibfabricd's SM and by
// OpenSM with the same engine gets the same paths:
//  1. Hop tables: for every destination switch D, every switch S and every
//     port P of S, the hops from S out of P to D (0 at D's port 0).
//     minhop: breadth-first over the links. updn: the same search with the
//     up/down rule (below), so that only legal up*down* paths count.
//  2. A CA port is routed as the switch it is plugged into, plus the last
//     hop: on that switch its LID goes out of its own port.
//  3. On each switch, the targets in port GUID order (every CA port, and
//     every switch's port 0): the port kept from the previous tables when
//     it is still a least-hop port and its link is up; else, of the
//     least-hop ports with a link, the one that routes the fewest CA LIDs
//     so far (ties: the lowest port number). Switch LIDs are routed but not
//     counted (OpenSM's port_profile_switch_nodes FALSE).
//
// Up/down (Schroeder et al., Autonet; OpenSM's updn): switches are ranked
// by their distance from the roots (rank 0); a link is "up" towards the
// lower rank, between equal ranks towards the larger GUID, and between two
// roots both ways. A path may go up and then down, never down and then up,
// which leaves no cycle in the channel dependency graph (credit_loops.h).
// Roots: the ones named, else OpenSM's choice by min-hop histogram (a
// switch at which one hop count holds more than 90% of the CA ports and no
// other holds more than 5%: the spines of a fat tree).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fabric/routing/topology.h"

namespace ipoibd::fabric::routing {

enum class Engine : std::uint8_t { minhop, updn };
const char* to_string(Engine e);
std::optional<Engine> parse_engine(const std::string& name);

// One LinearForwardingTable per switch, indexed by LID (0..max_lid).
struct Routes {
    Engine engine = Engine::minhop;
    std::vector<std::vector<std::uint8_t>> lft;  // [switch][lid]: the out port, kNoPort for none
    std::vector<std::uint64_t> switch_guids;     // [switch], to match tables across sweeps
    std::vector<std::uint32_t> roots;            // updn: the root switches
    // Least hops between switches, [from * switches + to]; kUnreachable
    // where there is no (legal) path.
    std::vector<std::uint8_t> switch_hops;
    std::size_t switches = 0;
    std::uint8_t hops(std::uint32_t from, std::uint32_t to) const { return switch_hops[from * switches + to]; }
    // Of every (switch, CA LID) pair, how many have no route.
    std::size_t unrouted = 0;
};

struct RoutingOptions {
    Engine engine = Engine::minhop;
    std::vector<std::uint64_t> root_guids;  // updn: empty to choose them as OpenSM does
    // The tables routed before: an entry that is still a least-hop port
    // with its link up is kept (a sweep after a change moves only the
    // routes it has to). Switches are matched by GUID.
    const Routes* previous = nullptr;
};

struct RoutingResult {
    std::optional<Routes> routes;
    std::string error;  // why not (updn: no roots found, a root GUID not a switch)
};

RoutingResult route(const Topology& topology, const RoutingOptions& options);

// OpenSM's updn_find_root_nodes_by_min_hop: the switches whose min-hop
// histogram of CA ports has a single bar over 90% and none other over 5%.
std::vector<std::uint32_t> updn_roots_by_min_hop(const Topology& topology);

// The switches a packet from LID `slid` (a CA port or a switch) to LID
// `dlid` crosses, following the tables switch by switch: what a
// PathRecord's PacketLifeTime grows with. nullopt when the tables do not
// deliver it (no route, a loop, a LID nobody holds).
std::optional<unsigned> path_hops(const Topology& topology, const Routes& routes, std::uint16_t slid,
                                  std::uint16_t dlid);

}  // namespace ipoibd::fabric::routing
