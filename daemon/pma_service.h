// The node's performance management agent on a soft port: the PMA
// (transport/pma.h) as a client of the port's QP1 MAD agent (class PerfMgt
// 0x04, version 1, methods Get and Set), answering perfquery and OpenSM's
// PerfMgr from the port's own packet counters, the ones `ipoibctl stats`
// shows (section port). On an HCA the adapter's PMA answers and the node
// has none (the port gives no packet counters).
#pragma once

#include "sa_client/mad_agent.h"
#include "transport/pma.h"
#include "transport/port.h"

namespace ipoibd::daemon {

class PmaService final : public sa::MadClient {
public:
    PmaService(sa::MadAgent& agent, const transport::Port& port);

    void on_mad(bytes mad) override { on_mad_from(mad, {}); }
    void on_mad_from(bytes mad, const sa::MadAddress& from) override;

    // "pma_responses", ..., and "pma_send_errors".
    void visit_counters(CounterSink& out) const;

private:
    sa::MadAgent& agent_;
    transport::Pma pma_;
    std::uint64_t send_errors_ = 0;
};

}  // namespace ipoibd::daemon
