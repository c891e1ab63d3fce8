#include "common/busy_poll.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace ipoibd {

void visit(const BusyPollCounters& c, CounterSink& out) {
    out.counter("windows", c.windows);
    out.counter("polls", c.polls);
    out.counter("empty_polls", c.empty_polls);
    out.counter("slow_yields", c.slow_yields);
    out.counter("host_preempted", c.host_preempted);
    out.counter("yielded_away", c.yielded_away);
}

YieldVerdict BusyPoller::judge_yield(Clock::duration took, std::optional<Clock::duration> waited) {
    if (took <= kYieldedAway) return YieldVerdict::quick;
    if (!waited || *waited * 2 >= took) return YieldVerdict::contended;
    return YieldVerdict::host_preempted;
}

void BusyPoller::attach_to_this_thread() {
    schedstat_.reset(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC));
}

BusyPollCounters BusyPoller::counters_snapshot() const {
    auto load = [](const std::uint64_t& c) {
        return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(c)).load(std::memory_order_relaxed);
    };
    return {.windows = load(counters_.windows),
            .polls = load(counters_.polls),
            .empty_polls = load(counters_.empty_polls),
            .slow_yields = load(counters_.slow_yields),
            .host_preempted = load(counters_.host_preempted),
            .yielded_away = load(counters_.yielded_away)};
}

std::optional<BusyPoller::Clock::duration> BusyPoller::run_delay() const {
    if (!schedstat_) return std::nullopt;
    // "<time run, ns> <time waited runnable, ns> <timeslices>\n", generated afresh at offset 0
    std::array<char, 96> text{};
    const ssize_t n = ::pread(schedstat_.get(), text.data(), text.size(), 0);
    if (n <= 0) return std::nullopt;
    const char* const end = text.data() + n;
    const char* const space = std::find(static_cast<const char*>(text.data()), end, ' ');
    if (space == end) return std::nullopt;
    std::uint64_t ns = 0;
    const auto [p, ec] = std::from_chars(space + 1, end, ns);
    if (ec != std::errc{} || p == space + 1) return std::nullopt;
    return std::chrono::nanoseconds(ns);
}

// Nothing was ready: let other work run first. When other tasks keep the
// CPU through our yields (a busy machine, where polling would take CPU from
// them), sleep until the next traffic. Tasks that run briefly between two
// polls, and the host preempting the vCPU, do not end polling. (Ending the
// window on the first yield over 50 us stopped polling about once per ping
// in a ping test, where ping itself runs on these CPUs; a moving average
// over the yields' durations counted the host's preemptions as load.)
void BusyPoller::yield() {
    const std::optional<Clock::duration> delay_before = run_delay();
    const Clock::time_point before = Clock::now();
    ::sched_yield();
    const Clock::duration took = Clock::now() - before;
    std::optional<Clock::duration> waited;
    if (took > kYieldedAway && delay_before) {
        if (const auto delay_after = run_delay()) waited = *delay_after - *delay_before;
    }
    const YieldVerdict verdict = judge_yield(took, waited);
    if (verdict != YieldVerdict::quick) bump(counters_.slow_yields);
    if (verdict == YieldVerdict::host_preempted) bump(counters_.host_preempted);
    // How long other tasks held the CPU: nothing in a quick yield; in a slow
    // one its run delay, or all of it when that is unknown.
    const Clock::duration held =
        verdict == YieldVerdict::quick ? Clock::duration::zero() : std::min(waited.value_or(took), took);
    if (contention_.observe(before + took, held)) {
        ended_ = true;
        bump(counters_.yielded_away);
    }
}

}  // namespace ipoibd
