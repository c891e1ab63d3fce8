#include "daemon/cm_service.h"

namespace ipoibd::daemon {

CmService::CmService(sa::MadAgent& agent, cm::CmEngine::Config config, std::uint64_t seed)
    : agent_(agent), engine_(config, seed) {}

void CmService::on_mad_from(bytes mad, const sa::MadAddress& from) {
    engine_.receive(mad, {.lid = from.lid, .gid = from.gid}, cm::Clock::now());
    flush();
}

void CmService::tick(cm::Clock::time_point now) {
    engine_.tick(now);
    flush();
}

void CmService::flush() {
    for (const cm::Outgoing& o : engine_.take_output())
        if (!agent_.send_to(*this, o.mad, {.lid = o.to.lid, .gid = o.to.gid})) ++send_errors_;
    // Nothing here connects or listens yet: what the engine reports has no
    // taker (issue 21 puts connected mode here).
    events_unhandled_ += engine_.take_events().size();
}

void CmService::visit_counters(CounterSink& out) const {
    visit(engine_.counters(), out);
    out.counter("cm_send_errors", send_errors_);
    out.counter("cm_events_unhandled", events_unhandled_);
    out.counter("cm_connections", engine_.connections());
}

}  // namespace ipoibd::daemon
