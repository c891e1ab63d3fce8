// The event loop against the real kernel objects it uses: timers in
// deadline order, cancel, batch limits, fds over a pipe, signals through a
// signalfd, stop from another thread, busy polling and its contention meter.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/event_loop.h"
#include "runtime_test_util.h"

namespace ipoibd::runtime {
namespace {

using namespace std::chrono_literals;
using namespace test;

// ---- event loop: timers ----

TEST(EventLoop, DueTimersRunInDeadlineOrderTiesInInsertionOrder) {
    auto loop = make_loop();
    std::vector<std::string> fired;
    const auto base = Clock::now();
    loop->add_timer(base - 3ms, [&] { fired.push_back("c"); });
    loop->add_timer(base - 5ms, [&] { fired.push_back("a"); });
    loop->add_timer(base - 2ms, [&] { fired.push_back("d1"); });
    loop->add_timer(base - 4ms, [&] { fired.push_back("b"); });
    loop->add_timer(base - 2ms, [&] { fired.push_back("d2"); });
    const TimerId later = loop->add_timer(base + 1h, [&] { fired.push_back("later"); });
    auto ran = loop->run_once(1s);
    ASSERT_TRUE(ran.has_value());
    EXPECT_EQ(*ran, 5u);
    EXPECT_EQ(fired, (std::vector<std::string>{"a", "b", "c", "d1", "d2"}));
    EXPECT_EQ(loop->pending_timers(), 1u);
    EXPECT_TRUE(loop->cancel_timer(later));
    EXPECT_EQ(loop->pending_timers(), 0u);
}

TEST(EventLoop, FutureTimerFiresAfterItsDeadlineNotBefore) {
    auto loop = make_loop();
    const auto start = Clock::now();
    std::optional<Clock::time_point> fired_at;
    loop->add_timer_after(20ms, [&] { fired_at = Clock::now(); });
    run_until(*loop, [&] { return fired_at.has_value(); });
    ASSERT_TRUE(fired_at);
    EXPECT_GE(*fired_at - start, 20ms);
}

TEST(EventLoop, CancelledTimerNeverRuns) {
    auto loop = make_loop();
    int a = 0;
    int b = 0;
    const TimerId ta = loop->add_timer_after(0ms, [&] { ++a; });
    const TimerId tb = loop->add_timer_after(0ms, [&] { ++b; });
    EXPECT_TRUE(loop->cancel_timer(ta));
    EXPECT_FALSE(loop->cancel_timer(ta)) << "second cancel";
    run_until(*loop, [&] { return b == 1; });
    EXPECT_EQ(a, 0);
    EXPECT_EQ(b, 1);
    EXPECT_FALSE(loop->cancel_timer(tb)) << "already fired";
    EXPECT_FALSE(loop->cancel_timer(TimerId{})) << "the null id";
}

TEST(EventLoop, HandlersAddAndCancelTimers) {
    auto loop = make_loop();
    std::vector<int> fired;
    TimerId victim;
    loop->add_timer_after(0ms, [&] {
        fired.push_back(1);
        EXPECT_TRUE(loop->cancel_timer(victim));
        loop->add_timer_after(0ms, [&] { fired.push_back(3); });
    });
    victim = loop->add_timer_after(5ms, [&] { fired.push_back(2); });
    run_until(*loop, [&] { return fired.size() >= 2; });
    EXPECT_EQ(fired, (std::vector<int>{1, 3}));
}

TEST(EventLoop, AtMostABatchOfTimersPerWakeup) {
    auto loop = make_loop();
    const std::size_t total = EventLoop::kTimersPerWakeup + 10;
    std::size_t fired = 0;
    const auto past = Clock::now() - 1ms;
    for (std::size_t i = 0; i < total; ++i) loop->add_timer(past, [&] { ++fired; });
    ASSERT_TRUE(loop->run_once(1s).has_value());
    EXPECT_EQ(fired, EventLoop::kTimersPerWakeup);
    ASSERT_TRUE(loop->run_once(1s).has_value());
    EXPECT_EQ(fired, total) << "the rest on the next wake-up";
}

TEST(EventLoop, ManyCancelledTimersDoNotDisturbTheLiveOnes) {
    auto loop = make_loop();
    std::vector<TimerId> ids;
    for (int i = 0; i < 1000; ++i) ids.push_back(loop->add_timer_after(1h, [] { FAIL() << "cancelled timer ran"; }));
    bool fired = false;
    loop->add_timer_after(1ms, [&] { fired = true; });
    for (auto id : ids) EXPECT_TRUE(loop->cancel_timer(id));
    EXPECT_EQ(loop->pending_timers(), 1u);
    run_until(*loop, [&] { return fired; });
    EXPECT_TRUE(fired);
}

// ---- event loop: fds ----

TEST(EventLoop, ReadableFdCallsItsHandlerUntilRemoved) {
    auto loop = make_loop();
    Pipe p;
    std::string got;
    int calls = 0;
    ASSERT_TRUE(loop->add_fd(p.read.get(), [&] {
        ++calls;
        got += p.drain();
    }));
    EXPECT_TRUE(loop->has_fd(p.read.get()));
    ASSERT_EQ(::write(p.write.get(), "ping", 4), 4);
    run_until(*loop, [&] { return calls > 0; });
    EXPECT_EQ(got, "ping");

    loop->remove_fd(p.read.get());
    EXPECT_FALSE(loop->has_fd(p.read.get()));
    ASSERT_EQ(::write(p.write.get(), "x", 1), 1);
    ASSERT_TRUE(loop->run_once(20ms).has_value());
    EXPECT_EQ(calls, 1);
}

TEST(EventLoop, HandlerRemovingAnotherReadyFdStopsItsDispatch) {
    auto loop = make_loop();
    Pipe a;
    Pipe b;
    int calls = 0;
    // Both are ready in the same wake-up; whichever runs first removes both,
    // so the other's event, already returned by epoll_wait, is dropped.
    auto remove_both = [&] {
        ++calls;
        loop->remove_fd(a.read.get());
        loop->remove_fd(b.read.get());
    };
    ASSERT_TRUE(loop->add_fd(a.read.get(), remove_both));
    ASSERT_TRUE(loop->add_fd(b.read.get(), remove_both));
    ASSERT_EQ(::write(a.write.get(), "1", 1), 1);
    ASSERT_EQ(::write(b.write.get(), "1", 1), 1);
    ASSERT_TRUE(loop->run_once(1s).has_value());
    EXPECT_EQ(calls, 1);
}

TEST(EventLoop, WritableInterest) {
    auto loop = make_loop();
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    UniqueFd s0(sv[0]);
    UniqueFd s1(sv[1]);
    int writable = 0;
    int readable = 0;
    ASSERT_TRUE(loop->add_fd(s0.get(), [&] { ++readable; }));
    ASSERT_TRUE(loop->run_once(10ms).has_value());
    EXPECT_EQ(readable, 0) << "nothing to read";
    loop->remove_fd(s0.get());
    ASSERT_TRUE(loop->add_fd(s0.get(), [&] { ++writable; }, EventLoop::Interest::writable));
    ASSERT_TRUE(loop->run_once(1s).has_value());
    EXPECT_EQ(writable, 1);
}

TEST(EventLoop, FdErrorsNameTheOperationAndErrno) {
    auto loop = make_loop();
    auto bad = loop->add_fd(-1, [] {});
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error().error, EBADF);
    EXPECT_EQ(bad.error().message(), "could not add fd -1 to epoll: Bad file descriptor");

    auto missing = loop->set_interest(12345, EventLoop::Interest::writable);
    ASSERT_FALSE(missing.has_value());
    EXPECT_EQ(missing.error().error, ENOENT);
    EXPECT_EQ(missing.error().operation, "modify fd 12345 in epoll");

    Pipe p;
    ASSERT_TRUE(loop->add_fd(p.read.get(), [] {}));
    auto twice = loop->add_fd(p.read.get(), [] {});
    ASSERT_FALSE(twice.has_value());
    EXPECT_EQ(twice.error().error, EEXIST);
}

// ---- event loop: signals, stop, the iteration hook ----

TEST(EventLoop, SignalArrivesAsACallback) {
    auto loop = make_loop();
    std::vector<SignalInfo> got;
    ASSERT_TRUE(loop->on_signal(SIGUSR1, [&](const SignalInfo& s) { got.push_back(s); }));
    ASSERT_EQ(::raise(SIGUSR1), 0);  // blocked: stays pending for the signalfd
    run_until(*loop, [&] { return !got.empty(); });
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].signo, SIGUSR1);
    EXPECT_EQ(got[0].sender_pid, ::getpid());
    EXPECT_EQ(got[0].sender_uid, ::getuid());
}

TEST(EventLoop, SeveralSignalsEachToItsHandler) {
    auto loop = make_loop();
    std::vector<int> got;
    ASSERT_TRUE(loop->on_signal(SIGUSR1, [&](const SignalInfo& s) { got.push_back(s.signo); }));
    ASSERT_TRUE(loop->on_signal(SIGHUP, [&](const SignalInfo& s) { got.push_back(s.signo); }));
    ASSERT_EQ(::raise(SIGHUP), 0);
    ASSERT_EQ(::raise(SIGUSR1), 0);
    run_until(*loop, [&] { return got.size() >= 2; });
    EXPECT_EQ(std::set<int>(got.begin(), got.end()), (std::set<int>{SIGHUP, SIGUSR1}));
}

TEST(EventLoop, StopFromAnotherThreadEndsRun) {
    auto loop = make_loop();
    std::thread stopper([&] {
        std::this_thread::sleep_for(20ms);
        loop->stop();
    });
    EXPECT_TRUE(loop->run().has_value());
    stopper.join();
    EXPECT_FALSE(loop->stop_requested()) << "consumed by run()";
}

TEST(EventLoop, StopFromAHandler) {
    auto loop = make_loop();
    int ticks = 0;
    std::function<void()> tick = [&] {
        if (++ticks == 3)
            loop->stop();
        else
            loop->add_timer_after(1ms, tick);
    };
    loop->add_timer_after(0ms, tick);
    EXPECT_TRUE(loop->run().has_value());
    EXPECT_EQ(ticks, 3);
}

TEST(EventLoop, IterationHookRunsWhenIdle) {
    auto loop = make_loop();
    int hooks = 0;
    loop->set_on_iteration([&] { ++hooks; }, 5ms);
    // No fd, no timer: without the period this would wait forever.
    ASSERT_TRUE(loop->run_once(std::nullopt).has_value());
    ASSERT_TRUE(loop->run_once(std::nullopt).has_value());
    EXPECT_EQ(hooks, 2);
}

// Busy polling: with nothing ready and a timer 1.5 s away, a sleeping loop
// turns once (the timer); after keep_polling() it turns again and again
// for the window without sleeping, then sleeps until the timer. (A window
// of 1 s: its first turn must come before the window ends, however loaded
// the machine. On a loaded machine it ends early, yielded_away, and the
// loop sleeps until the timer then.)
TEST(EventLoop, BusyPollTurnsWithoutSleepingForTheWindowThenSleeps) {
    auto loop = make_loop();
    int polling_turns = 0, sleeping_turns = 0;
    loop->set_on_iteration([&] { ++(loop->polling(Clock::now()) ? polling_turns : sleeping_turns); });
    loop->set_busy_poll(1s);
    EXPECT_EQ(loop->busy_poll(), 1s);
    EXPECT_FALSE(loop->polling(Clock::now()));  // nothing moved yet
    loop->keep_polling();
    EXPECT_TRUE(loop->polling(Clock::now()));
    EXPECT_FALSE(loop->polling(Clock::now() + 1001ms));
    bool fired = false;
    loop->add_timer_after(1500ms, [&] {
        fired = true;
        loop->stop();
    });
    ASSERT_TRUE(loop->run().has_value());
    EXPECT_TRUE(fired);
    EXPECT_GE(polling_turns, 1);  // a turn with nothing ready, before the timer: no sleep
    EXPECT_LE(sleeping_turns, 2);  // the timer's wake-up, and the turn the window ended in
}

TEST(EventLoop, BusyPollOffByDefaultAndWhenSetToZero) {
    auto loop = make_loop();
    loop->keep_polling();
    EXPECT_FALSE(loop->polling(Clock::now()));
    loop->set_busy_poll(10ms);
    loop->keep_polling();
    EXPECT_TRUE(loop->polling(Clock::now()));
    loop->set_busy_poll(0ms);
    EXPECT_FALSE(loop->polling(Clock::now()));
    int turns = 0;
    loop->set_on_iteration([&] { ++turns; });
    loop->add_timer_after(20ms, [&] { loop->stop(); });
    ASSERT_TRUE(loop->run().has_value());
    EXPECT_EQ(turns, 1);  // slept until the timer
}

// A window lasts from the last traffic for the window in force then; a
// change of the window (from another thread, on reload) ends the current
// one at once, and the next traffic opens a window of the new length.
TEST(BusyPoller, AChangedWindowEndsTheCurrentOne) {
    const Clock::time_point t0 = Clock::time_point{} + 1h;
    BusyPoller b;
    b.keep_polling(t0);  // off: nothing
    EXPECT_FALSE(b.polling(t0));
    EXPECT_EQ(b.counters().windows, 0u);
    b.set_window(100ms);
    EXPECT_FALSE(b.polling(t0 + 1ms));  // no traffic since it was set
    b.keep_polling(t0 + 10ms);
    EXPECT_EQ(b.counters().windows, 1u);
    EXPECT_TRUE(b.polling(t0 + 109ms));
    EXPECT_FALSE(b.polling(t0 + 110ms));
    b.keep_polling(t0 + 50ms);  // within the window: the same one, longer
    EXPECT_EQ(b.counters().windows, 1u);
    EXPECT_TRUE(b.polling(t0 + 149ms));
    b.set_window(20ms);  // changed: ended at once
    EXPECT_FALSE(b.polling(t0 + 51ms));
    b.keep_polling(t0 + 60ms);  // a new window of 20 ms
    EXPECT_EQ(b.counters().windows, 2u);
    EXPECT_TRUE(b.polling(t0 + 79ms));
    EXPECT_FALSE(b.polling(t0 + 80ms));
    b.keep_polling(t0 + 70ms);
    b.set_window(0ms);  // off
    EXPECT_FALSE(b.polling(t0 + 71ms));
    b.set_window(100ms);  // on again before the old end: still no polling until traffic
    EXPECT_FALSE(b.polling(t0 + 72ms));
    b.keep_polling(t0 + 200ms);
    EXPECT_EQ(b.counters().windows, 3u);
    EXPECT_TRUE(b.polling(t0 + 299ms));
}

// A yield's verdict: quick up to kYieldedAway; beyond it, contended when
// other tasks ran for at least half of it or when that is unknown, else the
// host preempted the vCPU.
TEST(EventLoop, JudgeYield) {
    using V = YieldVerdict;
    struct Row {
        Clock::duration took;
        std::optional<Clock::duration> waited;
        V want;
    };
    const Row rows[] = {
        {0us, std::nullopt, V::quick},
        {BusyPoller::kYieldedAway, std::nullopt, V::quick},
        {BusyPoller::kYieldedAway, BusyPoller::kYieldedAway, V::quick},
        {BusyPoller::kYieldedAway + 1us, std::nullopt, V::contended},
        {200us, 100us, V::contended},
        {200us, 200us, V::contended},
        {200us, 99us, V::host_preempted},
        {200us, 0us, V::host_preempted},
        {5ms, 4ms, V::contended},
        {5ms, 10us, V::host_preempted},
    };
    for (const Row& r : rows) {
        EXPECT_EQ(BusyPoller::judge_yield(r.took, r.waited), r.want)
            << std::chrono::duration_cast<std::chrono::microseconds>(r.took).count() << " us, waited "
            << (r.waited ? std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(*r.waited).count())
                         : std::string("unknown"));
    }
}

// The meter decides once per span of kSpan: loaded when others held the
// CPU for at least half of it; a new span starts after each decision.
TEST(EventLoop, ContentionMeterDecidesPerSpan) {
    const Clock::time_point t0{};
    const auto span = ContentionMeter::kSpan;
    ContentionMeter m;
    m.restart(t0);
    EXPECT_FALSE(m.observe(t0 + 100us, 100us));       // held all of it, but the span is not over
    EXPECT_FALSE(m.observe(t0 + span - 1us, span / 2));  // still not over
    EXPECT_TRUE(m.observe(t0 + span, 0us));             // over: 100 us + span/2 >= half
    // a new span from t0 + span: others held under half
    EXPECT_FALSE(m.observe(t0 + span + span / 2, span / 4));
    EXPECT_FALSE(m.observe(t0 + 2 * span, span / 4 - 1us));
    // exactly half is loaded
    EXPECT_FALSE(m.observe(t0 + 2 * span + 1us, span / 2));
    EXPECT_TRUE(m.observe(t0 + 3 * span, 0us));
    // a yield far longer than the span, held by others: decided at once
    EXPECT_TRUE(m.observe(t0 + 13 * span, 10 * span));
    // the host's preemptions count only what others held: nothing
    EXPECT_FALSE(m.observe(t0 + 23 * span, 0us));
    // restart() forgets what was held
    m.restart(t0 + 30 * span);
    EXPECT_FALSE(m.observe(t0 + 30 * span + 10us, span));
    m.restart(t0 + 31 * span);
    EXPECT_FALSE(m.observe(t0 + 32 * span, 0us));
}

// With a thread spinning on the loop's CPU (no yields of its own), every
// yield of the polling loop waits a time slice for it: polling stops long
// before its window, and the loop sleeps until the timer.
TEST(EventLoop, BusyPollStopsWhenAnotherTaskKeepsTheCpu) {
    cpu_set_t original;
    ASSERT_EQ(::pthread_getaffinity_np(::pthread_self(), sizeof original, &original), 0);
    const int cpu = ::sched_getcpu();
    ASSERT_GE(cpu, 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(static_cast<std::size_t>(cpu), &one);
    if (::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) != 0) GTEST_SKIP() << "cannot pin threads";
    std::atomic<bool> spin{true};
    std::thread hog([&] {
        (void)::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);
        const auto until = Clock::now() + 5s;  // bounded, whatever happens to the test
        while (spin.load(std::memory_order_relaxed) && Clock::now() < until) {
        }
    });
    auto loop = make_loop();
    loop->set_busy_poll(1s);
    loop->keep_polling();
    int sleeping_turns = 0;
    loop->set_on_iteration([&] { sleeping_turns += loop->polling(Clock::now()) ? 0 : 1; });
    loop->add_timer_after(300ms, [&] { loop->stop(); });
    const auto r = loop->run();
    spin.store(false);
    hog.join();
    (void)::pthread_setaffinity_np(::pthread_self(), sizeof original, &original);
    ASSERT_TRUE(r.has_value());
    const BusyPollCounters& c = loop->busy_poll_counters();
    EXPECT_EQ(c.yielded_away, 1u) << c.polls << " polls, " << c.slow_yields << " slow yields";  // one window, ended by the hog
    EXPECT_GE(c.slow_yields, 1u);
    EXPECT_GE(sleeping_turns, 1);  // then slept until the timer
}

}  // namespace
}  // namespace ipoibd::runtime
