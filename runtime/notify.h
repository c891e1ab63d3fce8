// Service-manager notifications through libsystemd's sd_notify (the
// protocol of sd_notify(3): "KEY=value" lines in one datagram to the
// AF_UNIX socket named by $NOTIFY_SOCKET).
//
// The daemon sends READY=1 only once it really works (port up, TUN
// configured, broadcast group joined), STATUS= lines as it goes, RELOADING=1
// and READY=1 around a configuration reload, STOPPING=1 on shutdown, and
// WATCHDOG=1 from the event loop's on_iteration hook, so a wedged loop gets
// the service killed (WatchdogSec= in the unit).
//
// Every call is a no-op without $NOTIFY_SOCKET (not started by systemd, or
// Type=simple), and WATCHDOG=1 is sent only when sd_watchdog_enabled(3)
// says the manager expects it from this process ($WATCHDOG_USEC, and
// $WATCHDOG_PID equal to our pid when set). The environment is read once,
// by the constructor.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/expected.h"
#include "common/sys_error.h"

namespace ipoibd::runtime {

class Notifier {
public:
    using Clock = std::chrono::steady_clock;

    Notifier();

    // $NOTIFY_SOCKET was set when the Notifier was made.
    bool enabled() const { return enabled_; }
    // WATCHDOG_USEC, when the watchdog is on for this process.
    std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_interval_; }
    // Half the interval, as sd_watchdog_enabled(3) recommends: the period to
    // give the loop's on_iteration hook that calls watchdog().
    std::optional<Clock::duration> watchdog_ping_interval() const;

    // "READY=1", with "STATUS=<status>" when status is not empty.
    expected<void, SysError> ready(std::string_view status = {});
    // "STATUS=<text>"; shown by systemctl status.
    expected<void, SysError> status(std::string_view text);
    // "RELOADING=1" and "MONOTONIC_USEC=<now>" (systemd >= 253 wants the
    // timestamp for Type=notify-reload; older versions ignore it). Send
    // ready() when the reload is done.
    expected<void, SysError> reloading(Clock::time_point now = Clock::now());
    // "STOPPING=1", with "STATUS=<status>" when status is not empty.
    expected<void, SysError> stopping(std::string_view status = {});
    // "EXTEND_TIMEOUT_USEC=<n>": a slow start-up step (waiting for the port)
    // asks for more time instead of being killed by TimeoutStartSec=.
    expected<void, SysError> extend_timeout(std::chrono::microseconds more);
    // "WATCHDOG=1" when the watchdog is on and the last ping is at least a
    // quarter interval old (the first call always pings), so calling it on
    // every iteration of a loop that wakes at least every half interval
    // keeps pings at most 3/4 interval apart, and a busy loop does not send
    // a datagram per wake-up.
    expected<void, SysError> watchdog(Clock::time_point now = Clock::now());

    // Sends `state` as it is; every other method ends up here.
    expected<void, SysError> notify(const std::string& state);

private:
    bool enabled_ = false;
    std::optional<std::chrono::microseconds> watchdog_interval_;
    std::optional<Clock::time_point> last_ping_;
};

// Status text fit for one STATUS= line: newlines (which would start a new
// assignment in the datagram) become spaces.
std::string one_line(std::string_view text);

}  // namespace ipoibd::runtime
