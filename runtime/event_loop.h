// The daemon's one event loop (STYLE.md guideline 6): one thread, one epoll
// instance, level-triggered.
//
// Flow of one wake-up (run_once):
//   1. Re-arm the timerfd for the earliest live deadline in the heap, if it
//      changed since the last wake-up.
//   2. epoll_wait for at most kEventsPerWait ready fds; the wait is bounded
//      by the on_iteration period when one is set.
//   3. Dispatch: the timerfd runs at most kTimersPerWakeup due timers, in
//      deadline order (ties in the order they were added); the signalfd
//      delivers at most kSignalsPerWakeup signals; every other fd calls its
//      handler once.
//   4. Call the on_iteration hook (watchdog ping, deferred flushes).
//
// Batches: a handler is called once per wake-up and must take at most a
// batch of work (its own constant) and return. Epoll is level-triggered, so
// an fd with more pending work is reported again on the next wake-up; the
// same holds for timers and signals left over by their batch limits. No
// handler can starve the others, and the hook (the watchdog) keeps running.
//
// Handlers may add and remove fds and timers, including their own, and may
// call stop(). An fd must be removed before it is closed: a closed fd
// leaves epoll only when every duplicate of it is closed.
//
// Signals: on_signal() blocks the signal in the calling thread and delivers
// it through a signalfd. Signals are per-thread masks, so a daemon blocks
// kDaemonSignals with block_signals() at the top of main(), before starting
// any thread, and every thread inherits the mask. Signals stay blocked when
// the loop is destroyed (the daemon is exiting then).
//
// Busy polling (set_busy_poll): for a window after the last keep_polling()
// call, run() polls with a zero timeout instead of sleeping, yielding the
// CPU between empty polls, and stops early on a loaded machine
// (common/busy_poll.h). The data-path handlers call keep_polling() when
// they move packets, so an idle daemon sleeps.
//
// Timers use std::chrono::steady_clock, which is CLOCK_MONOTONIC on Linux,
// the clock the timerfd is armed with (absolute deadlines).
#pragma once

#include <sys/signalfd.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/busy_poll.h"
#include "common/counters.h"
#include "common/expected.h"
#include "common/sys_error.h"
#include "common/unique_fd.h"

namespace ipoibd::runtime {

using Clock = std::chrono::steady_clock;

// The signals ipoibd handles: SIGTERM and SIGINT stop, SIGHUP reloads the
// configuration, SIGUSR1 logs the counters.
inline constexpr std::array<int, 4> kDaemonSignals = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};

struct SignalInfo {
    int signo = 0;
    pid_t sender_pid = 0;  // 0 for signals from the kernel
    uid_t sender_uid = 0;
};

// A pending timer; value 0 is never a live timer.
struct TimerId {
    std::uint64_t value = 0;
    bool operator==(const TimerId&) const = default;
};

class EventLoop {
public:
    static constexpr std::size_t kEventsPerWait = 64;    // ready fds per epoll_wait
    static constexpr std::size_t kTimersPerWakeup = 64;  // due timers run per wake-up
    static constexpr std::size_t kSignalsPerWakeup = 16; // signals read per wake-up

    enum class Interest : std::uint8_t {
        readable,  // EPOLLIN (also reports hang-up and errors)
        writable,  // EPOLLOUT (also reports hang-up and errors)
    };

    using FdHandler = std::function<void()>;
    using TimerHandler = std::function<void()>;
    using SignalHandler = std::function<void(const SignalInfo&)>;
    using IterationHook = std::function<void()>;

    // Creates the epoll instance, the timerfd, the signalfd (empty mask) and
    // the eventfd stop() wakes the loop with.
    static expected<std::unique_ptr<EventLoop>, SysError> create();
    ~EventLoop();
    EventLoop(const EventLoop&) = delete;
    EventLoop& operator=(const EventLoop&) = delete;

    // Calls `handler` on each wake-up where `fd` is ready for `interest`, or
    // has hung up or failed (the handler finds out by reading or writing).
    expected<void, SysError> add_fd(int fd, FdHandler handler, Interest interest = Interest::readable);
    expected<void, SysError> set_interest(int fd, Interest interest);
    // Forgets `fd`; a no-op when it is not registered. Call before close().
    void remove_fd(int fd);
    bool has_fd(int fd) const { return fd_tokens_.contains(fd); }

    // One-shot timers on the steady clock. A deadline in the past fires on
    // the next wake-up.
    TimerId add_timer(Clock::time_point at, TimerHandler handler);
    TimerId add_timer_after(Clock::duration delay, TimerHandler handler);
    // Returns false when the timer already fired or was cancelled.
    bool cancel_timer(TimerId id);
    std::size_t pending_timers() const { return timers_.size(); }

    // Blocks `signals` in the calling thread (inherited by threads it
    // starts later). Call it at the top of main().
    static expected<void, SysError> block_signals(std::initializer_list<int> signals);
    static expected<void, SysError> block_daemon_signals();
    // Blocks `signo` in the calling thread and delivers it to `handler`;
    // a second call for the same signal replaces the handler.
    expected<void, SysError> on_signal(int signo, SignalHandler handler);

    // Called after each wake-up's dispatch. With `at_least_every`, the loop
    // wakes up at least that often even when idle, so a watchdog pinged from
    // the hook fires only when the loop is really stuck.
    void set_on_iteration(IterationHook hook, std::optional<Clock::duration> at_least_every = std::nullopt);

    // Polls without sleeping for `window` after each keep_polling(); zero
    // (the default) turns busy polling off.
    void set_busy_poll(Clock::duration window) { busy_.set_window(window); }
    Clock::duration busy_poll() const { return busy_.window(); }
    void keep_polling() {
        if (busy_.enabled()) busy_.keep_polling(Clock::now());
    }
    const BusyPollCounters& busy_poll_counters() const { return busy_.counters(); }
    bool polling(Clock::time_point now) const { return busy_.polling(now); }

    // Runs wake-ups until stop(); the stop request is consumed on return,
    // so run() may be called again.
    expected<void, SysError> run();
    // One wake-up: waits at most `timeout` (nullopt: until something is
    // ready), dispatches, calls the hook. Returns how many handlers ran.
    expected<std::size_t, SysError> run_once(std::optional<Clock::duration> timeout);
    // Asks run() to return after the current wake-up. Safe from any thread
    // (it writes an eventfd) and from handlers.
    void stop();
    bool stop_requested() const { return stop_requested_.load(); }

private:
    struct FdEntry {
        int fd = -1;
        FdHandler handler;
    };
    struct Deadline {
        Clock::time_point at;
        std::uint64_t id = 0;  // also the tie-breaker: added first, fires first
        bool operator>(const Deadline& o) const { return at != o.at ? at > o.at : id > o.id; }
    };

    EventLoop() = default;
    expected<void, SysError> init();
    expected<void, SysError> epoll_add(int fd, std::uint64_t token, std::uint32_t events);
    expected<void, SysError> rearm_timerfd();
    std::size_t run_due_timers();
    std::size_t read_signals();
    void drain_wakeup();
    void drop_cancelled_top();
    void compact_deadlines();
    std::optional<int> wait_timeout_ms(std::optional<Clock::duration> timeout) const;

    UniqueFd epoll_;
    UniqueFd timerfd_;
    UniqueFd signalfd_;
    UniqueFd wakeup_;  // eventfd written by stop()
    sigset_t signal_mask_{};

    std::uint64_t next_token_ = kFirstUserToken;
    std::unordered_map<int, std::uint64_t> fd_tokens_;
    std::unordered_map<std::uint64_t, std::shared_ptr<FdEntry>> fd_entries_;

    std::uint64_t next_timer_ = 1;
    std::vector<Deadline> deadlines_;  // a min-heap (std::greater), cancelled entries removed lazily
    std::unordered_map<std::uint64_t, TimerHandler> timers_;  // live timers only
    std::optional<Clock::time_point> armed_at_;               // what the timerfd holds

    std::map<int, SignalHandler> signal_handlers_;
    IterationHook on_iteration_;
    std::optional<Clock::duration> iteration_period_;
    std::atomic<bool> stop_requested_{false};
    BusyPoller busy_;

    static constexpr std::uint64_t kTimerToken = 1;
    static constexpr std::uint64_t kSignalToken = 2;
    static constexpr std::uint64_t kWakeupToken = 3;
    static constexpr std::uint64_t kFirstUserToken = 16;
};

}  // namespace ipoibd::runtime
