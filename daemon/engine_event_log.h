// The IPoIB engine's events (ipoib/engine.h EngineEvent) as log entries: a
// level and a MESSAGE_ID per kind, the interface's name first among the
// fields.
//
// Some kinds are set off by a packet from the fabric, one per packet: a
// peer claiming one of our addresses (address_conflict), a neighbour's
// address changing (peer_changed), a path query failing (path_failed: every
// ARP from a made-up GID costs a query). A hostile or broken peer must not
// flood the journal with them (STYLE.md guideline 8), so those go through a
// RateLimiter (rate_limit.h), one window per interface and kind (a flood
// on one interface keeps the others' events): the first `burst` of a
// window are logged, the rest counted and reported as one line at the
// kind's level, "suppressed 9123 messages (address_conflict)", before the
// next event of that kind or by flush(), whichever comes first. The
// engine's counters (address_conflicts, peer_changes, paths.failures) still
// count every one. Other kinds follow the link's and the SA's own pace and
// are logged as they come.
//
// Time is passed in; not thread-safe (the control thread's).
#pragma once

#include <optional>
#include <string_view>

#include "runtime/log.h"
#include "runtime/message_ids.h"
#include "runtime/rate_limit.h"
#include "ipoib/engine.h"

namespace ipoibd::daemon {

runtime::LogLevel level_of(ipoib::EngineEventKind k);
std::optional<runtime::MessageId> message_id_of(ipoib::EngineEventKind k);
// True for the kinds a fabric packet sets off, which are rate-limited.
bool set_off_by_the_fabric(ipoib::EngineEventKind k);

class EngineEventLog {
public:
    explicit EngineEventLog(runtime::Logger& logger, runtime::RateLimiter::Config config = {}) : logger_(logger), limiter_(config) {}

    void log(std::string_view ifname, const ipoib::EngineEvent& e, runtime::Clock::time_point now);
    // Reports the windows that ended with events held back.
    void flush(runtime::Clock::time_point now);

private:
    void report(std::string_view reason, std::uint64_t suppressed);

    runtime::Logger& logger_;
    runtime::RateLimiter limiter_;
};

}  // namespace ipoibd::daemon
