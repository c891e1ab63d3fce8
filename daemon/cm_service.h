// The node's connection manager: the CM engine (cm/cm_engine.h) as a
// client of the port's QP1 MAD agent (class 0x07, version 2, method Send),
// answering peers by the address their MADs came from. Until connected mode
// (issue 21) listens on a ServiceID, every REQ is rejected with reason 8
// (no listener), DREQs get their DREP, LAPs an APR "unsupported": a peer
// probing this node learns the truth rather than timing out.
//
// The owner calls tick() at next_deadline(); received MADs come through
// the agent. Sends the path refuses are counted (send_errors).
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "cm/cm_engine.h"
#include "common/counters.h"
#include "sa_client/mad_agent.h"

namespace ipoibd::daemon {

class CmService final : public sa::MadClient {
public:
    CmService(sa::MadAgent& agent, cm::CmEngine::Config config, std::uint64_t seed);

    void on_mad(bytes mad) override { on_mad_from(mad, {}); }
    void on_mad_from(bytes mad, const sa::MadAddress& from) override;
    void tick(cm::Clock::time_point now);
    std::optional<cm::Clock::time_point> next_deadline() const { return engine_.next_deadline(); }

    cm::CmEngine& engine() { return engine_; }
    void visit_counters(CounterSink& out) const;

private:
    void flush();

    sa::MadAgent& agent_;
    cm::CmEngine engine_;
    std::uint64_t send_errors_ = 0;
    std::uint64_t events_unhandled_ = 0;  // events no consumer takes yet (no listener, no connect)
};

}  // namespace ipoibd::daemon
