// Rate-limited logging for the data path (STYLE.md guideline 8): a peer
// that sends garbage at line rate must not flood the journal, yet the
// operator must see that it happens and how much.
//
// Per reason (a drop-reason token such as "bad_pkey"), a window opens with
// the first message: the first `burst` messages of the window are logged,
// the rest are counted. When the window has ended, the count is reported as
// one line, "suppressed 9123 messages (bad_pkey)", either just before the
// next message of that reason or by flush() (call it from the loop's
// on_iteration hook or a timer), whichever comes first.
//
// Time is passed in, never read, so the rules are tested with a fake clock.
// Not thread-safe: one instance per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/log.h"

namespace ipoibd::runtime {

using Clock = std::chrono::steady_clock;

class RateLimiter {
public:
    struct Config {
        std::uint32_t burst = 10;                             // messages per reason per window
        Clock::duration interval = std::chrono::seconds(10);  // window length
        std::size_t max_reasons = 64;  // distinct reasons tracked; more share kOtherReasons
    };
    static constexpr std::string_view kOtherReasons = "(other reasons)";

    struct Verdict {
        bool allow = false;
        std::uint64_t suppressed = 0;  // held back in the reason's previous window: report it first
        std::string_view bucket;       // the reason, or kOtherReasons; valid until the next call
    };
    struct Summary {
        std::string reason;
        std::uint64_t suppressed = 0;
    };

    RateLimiter() : RateLimiter(Config{}) {}
    explicit RateLimiter(Config config) : config_(config) {}

    Verdict check(std::string_view reason, Clock::time_point now);
    // Ends every window that is over, returning those that held messages
    // back; their reasons are forgotten.
    std::vector<Summary> expire(Clock::time_point now);
    std::size_t tracked_reasons() const { return windows_.size(); }

private:
    struct Window {
        Clock::time_point start;
        std::uint32_t logged = 0;
        std::uint64_t suppressed = 0;
    };

    Config config_;
    std::map<std::string, Window, std::less<>> windows_;
};

// A RateLimiter in front of a Logger, at one level (data-path drops log at
// debug, so with the default level they cost one comparison).
class RateLimitedLog {
public:
    RateLimitedLog(Logger& logger, LogLevel level, RateLimiter::Config config = {})
        : logger_(logger), level_(level), limiter_(config) {}

    // Logs `message` with IPOIB_REASON=reason and `fields`, unless the
    // reason has had its burst in this window.
    void log(std::string_view reason, std::string_view message, std::initializer_list<LogField> fields,
             Clock::time_point now, const SourceLocation& where = SourceLocation::current());
    // Reports the windows that ended with messages held back.
    void flush(Clock::time_point now);

private:
    void report(std::string_view reason, std::uint64_t suppressed);

    Logger& logger_;
    LogLevel level_;
    RateLimiter limiter_;
};

}  // namespace ipoibd::runtime
