// ibfabricd's control socket answers and metrics (what ibfabricctl shows):
// the daemon's state, its ports with GUID, LID, state and UDP address, the
// SA's groups, the switches of the process and their links, and every
// counter, from the visit() functions beside the
// counter structs. The protocol is ipoibd's (ctl/control_protocol.h)
// with ibfabricd's own commands, none of which takes an interface.
#pragma once

#include <array>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/prometheus.h"
#include "ctl/control_protocol.h"
#include "fabric/fabric_service.h"
#include "fabric/sim_server.h"

namespace ipoibd::fabric {

inline constexpr std::array<std::string_view, 5> kFabricCommands = {"status", "ports", "groups", "switches", "stats"};
inline constexpr ctl::control::CommandSet kFabricCommandSet{kFabricCommands, kFabricCommands};

// Where ibfabricd's control socket is unless --control-socket says: by the
// UDP port it listens on, so that fabrics on two ports of one host each
// have theirs.
std::string default_fabric_socket(const SocketAddress& listen);

// What the daemon knows beside the service.
struct FabricDaemonInfo {
    std::chrono::steady_clock::time_point started;
    std::string key_file;  // "" without a fabric key
    const SimServer* sim = nullptr;  // --sim-socket: its clients and counters
    // --topology: every switch of the process, the first the one the other
    // answers are about; empty for one switch.
    struct NamedSwitch {
        std::string name;
        const FabricService* fabric = nullptr;
    };
    std::vector<NamedSwitch> switches;
};

// The JSON answer to one of kFabricCommands.
std::string fabric_answer(const FabricService& fabric, const FabricDaemonInfo& info, std::string_view command);

// Every counter section of the fabric ("switch", "udp", "sm", "sa",
// "switch_pma", "management", "auth" with a key, "faults" with faults),
// each through `section(name, visit)`.
template <class Section>
void visit_fabric_sections(const FabricService& fabric, Section&& section) {
    section("switch", [&](CounterSink& o) { visit(fabric.fabric_switch().counters(), o); });
    section("udp", [&](CounterSink& o) { visit(fabric.udp_counters(), o); });
    section("sm", [&](CounterSink& o) { visit(fabric.subnet_manager().counters(), o); });
    section("sa", [&](CounterSink& o) { visit(fabric.sa_server().counters(), o); });
    section("switch_pma", [&](CounterSink& o) { visit(fabric.management().pma_counters(), o); });
    section("management", [&](CounterSink& o) { visit(fabric.management().counters(), o); });
    if (fabric.auth()) section("auth", [&](CounterSink& o) { visit(fabric.auth()->counters(), o); });
    if (fabric.fabric_switch().faults().active())
        section("faults", [&](CounterSink& o) { visit(fabric.fabric_switch().faults().counters(), o); });
}

// The sim server's counter sections: "sim" (its own) and "sim_nodes"
// (its nodes' ports, SMAs and PMAs, SimServer::visit_node_counters).
template <class Section>
void visit_sim_sections(const SimServer& sim, Section&& section) {
    section("sim", [&](CounterSink& o) { visit(sim.counters(), o); });
    section("sim_nodes", [&](CounterSink& o) { sim.visit_node_counters(o); });
}

// The counters and a few gauges (ports by state, groups) in the Prometheus
// text format, prefix "ibfabricd".
void fabric_metrics(const FabricService& fabric, PrometheusText& out);

}  // namespace ipoibd::fabric
