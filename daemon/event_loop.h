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
// call, run() polls with a zero timeout instead of sleeping, yielding the CPU
// between empty polls. A wake-up from sleep costs tens of microseconds on a
// virtual machine (the idle vCPU halts in the host); a daemon that keeps
// polling while traffic flows answers without one. The data-path handlers
// call keep_polling() when they move packets, so an idle daemon sleeps; and
// polling stops early when yields show that other tasks of this machine
// keep wanting the CPU (ContentionMeter: in yields between empty polls
// that took over kYieldedAway, other tasks held the CPU for at least half
// of a 2 ms span). How long they held it is the growth of the thread's run
// delay (/proc/thread-self/schedstat) over the yield. On a loaded machine
// polling would only take CPU time from them. A slow yield in which the
// run delay did not grow is the host preempting the virtual CPU, which
// says nothing of this machine's load; without the run delay, the whole of
// a slow yield counts as held by others.
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

#include "common/counters.h"
#include "common/expected.h"
#include "common/sys_error.h"
#include "common/unique_fd.h"

namespace ipoibd::daemon {

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

struct BusyPollCounters {
    std::uint64_t windows = 0;       // keep_polling() calls that found the loop sleeping
    std::uint64_t polls = 0;         // wake-ups with a zero timeout
    std::uint64_t empty_polls = 0;   // of those, with nothing ready
    std::uint64_t slow_yields = 0;     // yields between empty polls that took longer than kYieldedAway
    std::uint64_t host_preempted = 0;  // of those, slow with no other task of this machine running
    std::uint64_t yielded_away = 0;    // windows ended early: others held the CPU (ContentionMeter)
};
void visit(const BusyPollCounters& c, CounterSink& out);

// What a yield between empty polls says. `took`: how long sched_yield()
// took; `waited`: how much of that the thread waited runnable while other
// tasks ran (its run delay grew by that much), nullopt when unknown.
enum class YieldVerdict : std::uint8_t {
    quick,           // took at most kYieldedAway
    contended,       // slow, and other tasks ran for at least half of it (or unknown)
    host_preempted,  // slow, but not because of other tasks: the host took the vCPU
};

// Busy polling's measure of load: how long other tasks of this machine held
// the CPU during slow yields, over spans of kSpan. Polling ends when in a
// span they held it for at least half of the time. Brief runs of others
// (a task that itself yields, or the application answered, running between
// two polls) make no yield slow and count nothing; a task that keeps the
// CPU makes every other yield wait a time slice.
class ContentionMeter {
public:
    static constexpr Clock::duration kSpan = std::chrono::milliseconds(2);
    // Starts a span (when a polling window opens).
    void restart(Clock::time_point now) {
        span_start_ = now;
        held_ = Clock::duration::zero();
    }
    // After a yield that ended at `now`, in which others held the CPU for
    // `held` (zero for a quick yield). True when that ends a span in which
    // others held the CPU for at least half of it (a new span starts).
    bool observe(Clock::time_point now, Clock::duration held) {
        held_ += held;
        const Clock::duration span = now - span_start_;
        if (span < kSpan) return false;
        const bool loaded = held_ * 2 >= span;
        restart(now);
        return loaded;
    }

private:
    Clock::time_point span_start_{};
    Clock::duration held_{};
};

class EventLoop {
public:
    static constexpr std::size_t kEventsPerWait = 64;    // ready fds per epoll_wait
    static constexpr std::size_t kTimersPerWakeup = 64;  // due timers run per wake-up
    static constexpr std::size_t kSignalsPerWakeup = 16; // signals read per wake-up
    // A yield between empty polls that took longer than this is slow:
    // something else ran meanwhile (another task, or the host's).
    static constexpr Clock::duration kYieldedAway = std::chrono::microseconds(50);
    static YieldVerdict judge_yield(Clock::duration took, std::optional<Clock::duration> waited);

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
    void set_busy_poll(Clock::duration window);
    Clock::duration busy_poll() const { return busy_window_; }
    void keep_polling() {
        if (busy_window_ == Clock::duration::zero()) return;
        const Clock::time_point now = Clock::now();
        if (now >= busy_until_) {  // a new window
            ++busy_counters_.windows;
            contention_.restart(now);
        }
        busy_until_ = now + busy_window_;
    }
    const BusyPollCounters& busy_poll_counters() const { return busy_counters_; }
    bool polling(Clock::time_point now) const { return now < busy_until_; }

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
    void yield_between_polls();
    std::optional<Clock::duration> run_delay() const;  // this thread's; nullopt: unknown

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
    Clock::duration busy_window_{};
    Clock::time_point busy_until_{};
    BusyPollCounters busy_counters_;
    ContentionMeter contention_;
    UniqueFd schedstat_;  // /proc/thread-self/schedstat of the thread in run(), or none

    static constexpr std::uint64_t kTimerToken = 1;
    static constexpr std::uint64_t kSignalToken = 2;
    static constexpr std::uint64_t kWakeupToken = 3;
    static constexpr std::uint64_t kFirstUserToken = 16;
};

}  // namespace ipoibd::daemon
