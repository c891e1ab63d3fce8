// Counters are described once, by the visit() beside each counter struct
// (common/counters.h); `ipoibctl stats`, its JSON and the SIGUSR1 log are
// made from those visits. A field added to a struct and not to its visit
// would be kept and never shown: these tests set every field of each
// struct to 1 and check that the visit reports them all.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "common/counters.h"
#include "runtime/control.h"
#include "runtime/metrics_http.h"
#include "fabric/management.h"
#include "fabric/sa/sa_server.h"
#include "fabric/sim_server.h"
#include "fabric/sm.h"
#include "fabric/switch.h"
#include "runtime/event_loop.h"
#include "daemon/node.h"
#include "host/tun_port.h"
#include "interface/interface.h"
#include "ipoib/engine.h"
#include "ipoib/multicast.h"
#include "ipoib/neighbour_cache.h"
#include "ipoib/path_cache.h"
#include "ipoib/port_link.h"
#include "netlink/monitor.h"
#include "sa_client/mad_agent.h"
#include "sa_client/mad_transport.h"
#include "sa_client/sa_client.h"
#include "transport/port_core.h"
#include "transport/rc/rc_qp.h"
#include "transport/sma.h"
#include "transport/soft/fabric_auth.h"
#include "transport/soft/soft_port.h"
#include "transport/soft/udp_batch.h"

namespace ipoibd {
namespace {

struct Collect final : CounterSink {
    std::map<std::string, std::uint64_t> seen;
    std::uint64_t total = 0;
    void counter(std::string_view name, std::uint64_t value) override {
        EXPECT_TRUE(seen.emplace(std::string(name), value).second) << "named twice: " << name;
        total += value;
    }
};

// Every field of `T` is a std::uint64_t or an array of them: fill them
// all with 1, visit, and expect one unit per field (arrays: per entry),
// each under a name of its own but for `summed` fields that a visit adds
// into another's name.
template <class T>
void expect_every_field_visited(const char* what, std::size_t summed = 0) {
    static_assert(std::is_trivially_copyable_v<T>);
    static_assert(sizeof(T) % sizeof(std::uint64_t) == 0, "counter structs hold 64-bit counters only");
    constexpr std::size_t fields = sizeof(T) / sizeof(std::uint64_t);
    std::uint64_t ones[fields];
    std::fill(std::begin(ones), std::end(ones), 1);
    T c;
    std::memcpy(&c, ones, sizeof c);
    Collect out;
    visit(c, out);
    EXPECT_EQ(out.total, fields) << what << ": a field is not visited (or visited twice)";
    EXPECT_EQ(out.seen.size() + summed, fields) << what << ": a field is not visited, another twice";
}

TEST(Counters, EveryFieldOfEveryStructIsVisited) {
    expect_every_field_visited<ipoib::EngineCounters>("EngineCounters");
    expect_every_field_visited<ipoib::NeighbourCounters>("NeighbourCounters");
    expect_every_field_visited<ipoib::PathCounters>("PathCounters");
    expect_every_field_visited<ipoib::McastCounters>("McastCounters");
    expect_every_field_visited<ipoib::PortLinkCounters>("PortLinkCounters");
    expect_every_field_visited<sa::SaClientCounters>("SaClientCounters");
    expect_every_field_visited<sa::MadTransportCounters>("MadTransportCounters");
    expect_every_field_visited<transport::PortCounters>("PortCounters");
    expect_every_field_visited<transport::UdpCounters>("UdpCounters");
    expect_every_field_visited<transport::SmaCounters>("SmaCounters");
    expect_every_field_visited<transport::SoftLinkCounters>("SoftLinkCounters");
    expect_every_field_visited<transport::SoftCutThroughCounters>("SoftCutThroughCounters");
    expect_every_field_visited<transport::SoftTrustCounters>("SoftTrustCounters");
    // link, address and route events are shown as their sum.
    expect_every_field_visited<netlink::MonitorCounters>("MonitorCounters", 2);
    expect_every_field_visited<BusyPollCounters>("BusyPollCounters");
    expect_every_field_visited<runtime::ControlCounters>("ControlCounters");
    expect_every_field_visited<daemon::NodeCounters>("NodeCounters");
    expect_every_field_visited<sa::MadAgentCounters>("MadAgentCounters");
    expect_every_field_visited<iface::InterfaceCounters>("InterfaceCounters");
    expect_every_field_visited<host::TunCounters>("TunCounters");
    expect_every_field_visited<runtime::MetricsHttpCounters>("MetricsHttpCounters");
    expect_every_field_visited<transport::FabricAuthCounters>("FabricAuthCounters");
    expect_every_field_visited<fabric::SwitchCounters>("SwitchCounters");
    expect_every_field_visited<fabric::SmCounters>("SmCounters");
    expect_every_field_visited<fabric::SaCounters>("SaCounters");
    expect_every_field_visited<transport::rc::RcCounters>("RcCounters");
    expect_every_field_visited<fabric::FaultCounters>("FaultCounters");
    expect_every_field_visited<fabric::SimCounters>("SimCounters");
    expect_every_field_visited<fabric::ManagementCounters>("ManagementCounters");
}

TEST(Counters, ReasonArraysShowOnlyTheReasonsThatHappened) {
    transport::PortCounters c;
    c.malformed[static_cast<std::size_t>(ib::DropReason::bad_icrc)] = 3;
    Collect out;
    visit(c, out);
    EXPECT_EQ(out.seen.count("malformed_" + std::string(ib::to_string(ib::DropReason::bad_icrc))), 1u);
    for (const auto& [name, value] : out.seen) {
        if (name.starts_with("malformed_") || name.starts_with("undelivered_")) {
            EXPECT_NE(value, 0u) << name;
        }
    }
}

}  // namespace
}  // namespace ipoibd
