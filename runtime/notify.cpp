#include "runtime/notify.h"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstdlib>

namespace ipoibd::runtime {

std::string one_line(std::string_view text) {
    std::string out(text);
    for (char& c : out)
        if (c == '\n' || c == '\r') c = ' ';
    return out;
}

Notifier::Notifier() {
    const char* socket = std::getenv("NOTIFY_SOCKET");
    enabled_ = socket != nullptr && socket[0] != '\0';
    std::uint64_t usec = 0;
    // 0: keep WATCHDOG_USEC/WATCHDOG_PID in the environment; > 0: the
    // manager expects pings from this pid.
    if (::sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
        watchdog_interval_ = std::chrono::microseconds(static_cast<std::chrono::microseconds::rep>(usec));
}

std::optional<Notifier::Clock::duration> Notifier::watchdog_ping_interval() const {
    if (!watchdog_interval_) return std::nullopt;
    return std::chrono::duration_cast<Clock::duration>(*watchdog_interval_) / 2;
}

expected<void, SysError> Notifier::notify(const std::string& state) {
    if (!enabled_) return {};
    const int r = ::sd_notify(0, state.c_str());
    if (r < 0) return unexpected(SysError{"notify the service manager (" + one_line(state) + ")", -r});
    return {};
}

expected<void, SysError> Notifier::ready(std::string_view status) {
    std::string state = "READY=1";
    if (!status.empty()) state += "\nSTATUS=" + one_line(status);
    return notify(state);
}

expected<void, SysError> Notifier::status(std::string_view text) { return notify("STATUS=" + one_line(text)); }

expected<void, SysError> Notifier::reloading(Clock::time_point now) {
    const auto usec = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
    return notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

expected<void, SysError> Notifier::stopping(std::string_view status) {
    std::string state = "STOPPING=1";
    if (!status.empty()) state += "\nSTATUS=" + one_line(status);
    return notify(state);
}

expected<void, SysError> Notifier::extend_timeout(std::chrono::microseconds more) {
    return notify("EXTEND_TIMEOUT_USEC=" + std::to_string(more.count()));
}

expected<void, SysError> Notifier::watchdog(Clock::time_point now) {
    if (!enabled_ || !watchdog_interval_) return {};
    // Pings at most every quarter interval: with the loop waking at least
    // every half interval, two pings are never more than 3/4 apart.
    if (last_ping_ && now - *last_ping_ < *watchdog_ping_interval() / 2) return {};
    last_ping_ = now;
    return notify("WATCHDOG=1");
}

}  // namespace ipoibd::runtime
