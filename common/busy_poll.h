// Busy polling: for a window after the last keep_polling() call, a thread
// polls its descriptors with a zero timeout instead of sleeping, yielding
// the CPU between empty polls. A wake-up from sleep costs tens of
// microseconds on a virtual machine (the idle vCPU halts in the host); a
// thread that keeps polling while traffic flows answers without one. The
// data path calls keep_polling() when it moves packets, so an idle thread
// sleeps; and polling stops early when yields show that other tasks of
// this machine keep wanting the CPU (ContentionMeter: in yields between
// empty polls that took over kYieldedAway, other tasks held the CPU for at
// least half of a 2 ms span). How long they held it is the growth of the
// thread's run delay (/proc/thread-self/schedstat) over the yield. On a
// loaded machine polling would only take CPU time from them. A slow yield
// in which the run delay did not grow is the host preempting the virtual
// CPU, which says nothing of this machine's load; without the run delay,
// the whole of a slow yield counts as held by others.
//
// One BusyPoller per polling thread: the event loop's (runtime/event_loop.h)
// and each data thread's (interface/data_worker.h). Everything but
// set_window() and counters_snapshot() is the polling thread's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "common/counters.h"
#include "common/unique_fd.h"

namespace ipoibd {

struct BusyPollCounters {
    std::uint64_t windows = 0;       // keep_polling() calls that found the thread sleeping
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
    using Clock = std::chrono::steady_clock;
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

class BusyPoller {
public:
    using Clock = std::chrono::steady_clock;
    // A yield between empty polls that took longer than this is slow:
    // something else ran meanwhile (another task, or the host's).
    static constexpr Clock::duration kYieldedAway = std::chrono::microseconds(50);
    static YieldVerdict judge_yield(Clock::duration took, std::optional<Clock::duration> waited);

    // Polls without sleeping for `window` after each keep_polling(); zero
    // (the default) turns busy polling off. Any thread. A change ends the
    // current window at once (the polling thread's next polling() says
    // no); the new window opens with the next traffic.
    void set_window(Clock::duration window) {
        window_ns_.store(std::max<std::int64_t>(std::chrono::nanoseconds(window).count(), 0), std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_relaxed);
    }
    Clock::duration window() const { return std::chrono::nanoseconds(window_ns_.load(std::memory_order_relaxed)); }
    bool enabled() const { return window_ns_.load(std::memory_order_relaxed) != 0; }

    // The polling thread, from here on. Traffic moved at `now`: poll until
    // now + window.
    void keep_polling(Clock::time_point now) {
        if (!enabled()) return;
        if (!polling(now)) {  // a new window
            bump(counters_.windows);
            contention_.restart(now);
        }
        window_generation_ = generation_.load(std::memory_order_relaxed);
        until_ = now + window();
        ended_ = false;
    }
    // Whether the next wait is a zero-timeout poll.
    bool polling(Clock::time_point now) const {
        return !ended_ && now < until_ && window_generation_ == generation_.load(std::memory_order_relaxed) && enabled();
    }
    // Once, on the polling thread before it polls: the schedstat of that
    // thread (thread-self is resolved at open). Without it every slow
    // yield counts as contended.
    void attach_to_this_thread();
    // After a zero-timeout poll; `ready`: whether it found anything. Counts
    // it; when nothing was ready, yields the CPU and may end the window
    // (others kept the CPU).
    void polled(bool ready) {
        bump(counters_.polls);
        if (ready) return;
        bump(counters_.empty_polls);
        yield();
    }

    // The polling thread's view.
    const BusyPollCounters& counters() const { return counters_; }
    // Any thread (each counter read atomically).
    BusyPollCounters counters_snapshot() const;

private:
    // One writer: a relaxed store the readers of counters_snapshot() may
    // load at any time.
    static void bump(std::uint64_t& c) {
        std::atomic_ref<std::uint64_t> a(c);
        a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    void yield();
    std::optional<Clock::duration> run_delay() const;  // this thread's; nullopt: unknown

    std::atomic<std::int64_t> window_ns_{0};
    std::atomic<std::uint64_t> generation_{0};  // set_window() calls
    // The polling thread's: the current window, opened under generation
    // window_generation_, until `until_` or until others held the CPU.
    std::uint64_t window_generation_ = 0;
    Clock::time_point until_{};
    bool ended_ = false;
    alignas(std::atomic_ref<std::uint64_t>::required_alignment) BusyPollCounters counters_;
    ContentionMeter contention_;
    UniqueFd schedstat_;  // /proc/thread-self/schedstat of the polling thread, or none
};

}  // namespace ipoibd
