// The daemon's building blocks, each against the real kernel objects it
// uses: the event loop (timers in deadline order, cancel, batch limits, fds
// over a pipe, signals through a signalfd, stop from another thread), the
// logger (stderr lines, levels, journal entries, journald when there is
// one), the rate limiter with a fake clock, sd_notify datagrams read from our
// own NOTIFY_SOCKET, the control socket and its client (modes, stale and
// busy sockets, every bound), JSON both ways, tables, capabilities in a
// child process.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/capabilities.h"
#include "daemon/control.h"
#include "daemon/control_protocol.h"
#include "daemon/ctl_client.h"
#include "daemon/event_loop.h"
#include "daemon/journal_fields.h"
#include "daemon/json.h"
#include "daemon/json_parse.h"
#include "daemon/log.h"
#include "daemon/message_ids.h"
#include "daemon/notify.h"
#include "daemon/rate_limit.h"
#include "daemon/table.h"

namespace ipoibd::daemon {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// ---- helpers ----

class TempDir {
public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "ipoibd-test-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) std::abort();
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        if (value)
            ::setenv(name, value, 1);
        else
            ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (old_)
            ::setenv(name_.c_str(), old_->c_str(), 1);
        else
            ::unsetenv(name_.c_str());
    }

private:
    std::string name_;
    std::optional<std::string> old_;
};

struct Pipe {
    UniqueFd read;
    UniqueFd write;
    Pipe() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) std::abort();
        read.reset(fds[0]);
        write.reset(fds[1]);
    }
    std::string drain() const {
        std::string out;
        char buf[4096];
        ssize_t n;
        while ((n = ::read(read.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
        return out;
    }
};

std::unique_ptr<EventLoop> make_loop() {
    auto loop = EventLoop::create();
    if (!loop) {
        ADD_FAILURE() << loop.error().message();
        std::abort();
    }
    return std::move(*loop);
}

// Runs wake-ups until `done` or 5 s (then the test fails on its own checks).
template <class Pred>
void run_until(EventLoop& loop, Pred done) {
    const auto give_up = Clock::now() + 5s;
    while (!done() && Clock::now() < give_up) ASSERT_TRUE(loop.run_once(10ms).has_value());
}

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

// Busy polling: with nothing ready and a timer 60 ms away, a sleeping loop
// turns once (the timer); after keep_polling() it turns again and again
// for the window without sleeping, then sleeps until the timer.
TEST(EventLoop, BusyPollTurnsWithoutSleepingForTheWindowThenSleeps) {
    auto loop = make_loop();
    int polling_turns = 0, sleeping_turns = 0;
    loop->set_on_iteration([&] { ++(loop->polling(Clock::now()) ? polling_turns : sleeping_turns); });
    loop->set_busy_poll(30ms);
    EXPECT_EQ(loop->busy_poll(), 30ms);
    EXPECT_FALSE(loop->polling(Clock::now()));  // nothing moved yet
    loop->keep_polling();
    EXPECT_TRUE(loop->polling(Clock::now()));
    EXPECT_FALSE(loop->polling(Clock::now() + 31ms));
    bool fired = false;
    loop->add_timer_after(60ms, [&] {
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
        {EventLoop::kYieldedAway, std::nullopt, V::quick},
        {EventLoop::kYieldedAway, EventLoop::kYieldedAway, V::quick},
        {EventLoop::kYieldedAway + 1us, std::nullopt, V::contended},
        {200us, 100us, V::contended},
        {200us, 200us, V::contended},
        {200us, 99us, V::host_preempted},
        {200us, 0us, V::host_preempted},
        {5ms, 4ms, V::contended},
        {5ms, 10us, V::host_preempted},
    };
    for (const Row& r : rows) {
        EXPECT_EQ(EventLoop::judge_yield(r.took, r.waited), r.want)
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

// ---- logger ----

TEST(Log, StderrLineFormat) {
    Pipe p;
    Logger log({.identifier = "ipoibd", .target = LogTarget::stderr_lines, .stderr_fd = p.write.get()});
    EXPECT_EQ(log.target(), LogTarget::stderr_lines);
    log.info("link up", {{field::kIfname, "ib0"}, {field::kMgid, "ff12:401b:ffff::1"}}, msgid::kLinkUp);
    log.warning("join failed");
    const std::string pid = std::to_string(::getpid());
    EXPECT_EQ(p.drain(), "ipoibd[" + pid + "]: info: link up (IPOIB_IFNAME=ib0 IB_MGID=ff12:401b:ffff::1)\n" +
                             "ipoibd[" + pid + "]: warning: join failed\n");
}

TEST(Log, StderrLineQuotesAndEscapes) {
    const LogField fields[] = {{"IPOIB_REASON", "two words"}, {"X", ""}, {"Y", "say \"hi\"\n"}, {"lower", "a=b"}};
    EXPECT_EQ(stderr_line("ipoibd", 7, LogLevel::notice, "first\nsecond", fields),
              "ipoibd[7]: notice: first\\nsecond (IPOIB_REASON=\"two words\" X=\"\" Y=\"say \\\"hi\\\"\\n\" "
              "LOWER=\"a=b\")\n");
}

TEST(Log, LevelFiltering) {
    Pipe p;
    Logger log({.target = LogTarget::stderr_lines, .min_level = LogLevel::warning, .stderr_fd = p.write.get()});
    log.debug("d");
    log.info("i");
    log.notice("n");
    log.warning("w");
    log.error("e");
    EXPECT_FALSE(log.enabled(LogLevel::notice));
    EXPECT_TRUE(log.enabled(LogLevel::error));
    std::string out = p.drain();
    EXPECT_EQ(out.find(": debug: "), std::string::npos);
    EXPECT_EQ(out.find(": info: "), std::string::npos);
    EXPECT_EQ(out.find(": notice: "), std::string::npos);
    EXPECT_NE(out.find(": warning: w\n"), std::string::npos);
    EXPECT_NE(out.find(": error: e\n"), std::string::npos);

    log.set_min_level(LogLevel::debug);
    log.debug("now visible");
    EXPECT_NE(p.drain().find(": debug: now visible\n"), std::string::npos);
}

TEST(Log, ParseLevel) {
    EXPECT_EQ(parse_log_level("debug").value(), LogLevel::debug);
    EXPECT_EQ(parse_log_level("notice").value(), LogLevel::notice);
    EXPECT_EQ(parse_log_level("warn").value(), LogLevel::warning);
    EXPECT_EQ(parse_log_level("err").value(), LogLevel::error);
    auto bad = parse_log_level("loud");
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error(), "unknown log level 'loud' (debug, info, notice, warning, error)");
    EXPECT_EQ(syslog_priority(LogLevel::debug), 7);
    EXPECT_EQ(syslog_priority(LogLevel::error), 3);
}

TEST(Log, JournalFieldNames) {
    EXPECT_EQ(journal_field_name("IPOIB_IFNAME"), "IPOIB_IFNAME");
    EXPECT_EQ(journal_field_name("ib_gid"), "IB_GID");
    EXPECT_EQ(journal_field_name("peer-hw"), "PEER_HW");
    EXPECT_EQ(journal_field_name("_PID"), "F_PID") << "trusted fields cannot be forged";
    EXPECT_EQ(journal_field_name("1X"), "F1X");
    EXPECT_EQ(journal_field_name(""), "F");
    EXPECT_EQ(journal_field_name(std::string(100, 'A')).size(), 64u);
}

TEST(Log, JournalEntryFields) {
    const std::string qpn = field::format_qpn(0x48);  // fields are views: the string must outlive them
    const LogField fields[] = {{field::kIfname, "ib0"}, {field::kQpn, qpn}};
    const auto here = SourceLocation::current();
    auto entry = journal_entry("ipoibd", LogLevel::info, "link up", fields, msgid::kLinkUp, here);
    ASSERT_EQ(entry.size(), 9u);
    EXPECT_EQ(entry[0], "MESSAGE=link up");
    EXPECT_EQ(entry[1], "PRIORITY=6");
    EXPECT_EQ(entry[2], "SYSLOG_IDENTIFIER=ipoibd");
    EXPECT_EQ(entry[3], "MESSAGE_ID=e6679c3ea3fe4299bcf2506d6fa52b6e");
    EXPECT_EQ(entry[4], "CODE_FILE=" + std::string(here.file));
    EXPECT_TRUE(entry[4].ends_with("test_daemon_support.cpp"));
    EXPECT_EQ(entry[5], "CODE_LINE=" + std::to_string(here.line));
    EXPECT_EQ(entry[6], "CODE_FUNC=TestBody");
    EXPECT_EQ(entry[7], "IPOIB_IFNAME=ib0");
    EXPECT_EQ(entry[8], "IB_QPN=0x000048");

    auto no_id = journal_entry("ipoibd", LogLevel::error, "x", {}, std::nullopt, here);
    EXPECT_EQ(no_id[1], "PRIORITY=3");
    EXPECT_TRUE(no_id[3].starts_with("CODE_FILE=")) << "no MESSAGE_ID field without an id";
}

SourceLocation caller(const SourceLocation& where = SourceLocation::current()) { return where; }

TEST(Log, LocationIsTheCallers) {
    const unsigned line = __LINE__ + 1;
    const SourceLocation got = caller();
    EXPECT_EQ(got.line, line);
    EXPECT_STREQ(got.function, "TestBody");
}

TEST(Log, JournalStreamDetection) {
    Pipe p;
    struct stat st {};
    ASSERT_EQ(::fstat(p.write.get(), &st), 0);
    const std::string match = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    const std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
    EXPECT_TRUE(is_journal_stream(p.write.get(), match.c_str()));
    EXPECT_FALSE(is_journal_stream(p.write.get(), other.c_str()));
    EXPECT_FALSE(is_journal_stream(p.write.get(), nullptr));
    EXPECT_FALSE(is_journal_stream(p.write.get(), ""));
    EXPECT_FALSE(is_journal_stream(p.write.get(), "12"));
    EXPECT_FALSE(is_journal_stream(p.write.get(), (match + "x").c_str()));

    {
        ScopedEnv env("JOURNAL_STREAM", match.c_str());
        Logger log({.target = LogTarget::automatic, .stderr_fd = p.write.get()});
        EXPECT_EQ(log.target(), LogTarget::journal);
    }
    {
        ScopedEnv env("JOURNAL_STREAM", nullptr);
        Logger log({.target = LogTarget::automatic, .stderr_fd = p.write.get()});
        EXPECT_EQ(log.target(), LogTarget::stderr_lines);
    }
}

bool journald_reachable() { return ::access("/run/systemd/journal/socket", F_OK) == 0; }

TEST(Log, JournalTargetWithoutJournaldWritesStderr) {
    if (journald_reachable()) GTEST_SKIP() << "journald is running here";
    Pipe p;
    Logger log({.target = LogTarget::journal, .stderr_fd = p.write.get()});
    EXPECT_EQ(log.target(), LogTarget::stderr_lines) << "sd_journal_sendv would drop messages silently";
    log.notice("journald is gone", {{field::kIfname, "ib0"}});
    EXPECT_NE(p.drain().find(": notice: journald is gone (IPOIB_IFNAME=ib0)\n"), std::string::npos);
}

TEST(Log, SendsToARealJournald) {
    if (!journald_reachable()) GTEST_SKIP() << "no journald (/run/systemd/journal/socket)";
    const LogField fields[] = {{field::kIfname, "test0"}, {field::kReason, "unit_test"}};
    auto entry = journal_entry("ipoibd-test", LogLevel::debug, "daemon_support_tests journal entry", fields,
                               msgid::kDaemonStarted, SourceLocation::current());
    auto sent = send_journal_entry(entry);
    EXPECT_TRUE(sent.has_value()) << sent.error().message();
    Pipe p;
    Logger log({.identifier = "ipoibd-test", .target = LogTarget::journal, .min_level = LogLevel::debug,
                .stderr_fd = p.write.get()});
    log.debug("daemon_support_tests logger entry", {{field::kIfname, "test0"}});
    EXPECT_EQ(p.drain(), "") << "went to the journal, not to the fallback";
}

TEST(Log, MessageIdsAreDistinct) {
    const MessageId all[] = {msgid::kDaemonStarted, msgid::kDaemonStopping, msgid::kConfigReloaded,
                             msgid::kLinkUp,        msgid::kLinkDown,       msgid::kBroadcastJoined,
                             msgid::kJoinFailed,    msgid::kGroupJoined,    msgid::kGroupLeft,
                             msgid::kPeerChanged};
    std::set<std::string_view> seen;
    for (const auto& id : all) EXPECT_TRUE(seen.insert(id.hex).second) << id.hex;
}

TEST(Log, FieldFormats) {
    EXPECT_EQ(field::format_lid(0x12), "0x0012");
    EXPECT_EQ(field::format_lid(0xc001), "0xc001");
    EXPECT_EQ(field::format_qpn(0x48), "0x000048");
    EXPECT_EQ(field::format_qpn(0xffffffff), "0xffffff");
    EXPECT_EQ(field::format_pkey(0xffff), "0xffff");
    EXPECT_EQ(field::format_mad_status(0x0200), "0x0200");
}

// ---- rate limiting, fake clock ----

struct RateLimitTest : ::testing::Test {
    Clock::time_point t0 = Clock::time_point{} + 1h;
    RateLimiter limiter{{.burst = 3, .interval = 10s, .max_reasons = 4}};
};

TEST_F(RateLimitTest, BurstThenSuppressedThenReportedWithTheNextMessage) {
    std::vector<bool> allowed;
    for (int i = 0; i < 5; ++i) allowed.push_back(limiter.check("bad_pkey", t0 + 1s * i).allow);
    EXPECT_EQ(allowed, (std::vector<bool>{true, true, true, false, false}));
    auto v = limiter.check("bad_pkey", t0 + 9s);
    EXPECT_FALSE(v.allow);
    EXPECT_EQ(v.suppressed, 0u) << "the window is still open";
    v = limiter.check("bad_pkey", t0 + 10s);
    EXPECT_TRUE(v.allow);
    EXPECT_EQ(v.suppressed, 3u);
    EXPECT_EQ(v.bucket, "bad_pkey");
}

TEST_F(RateLimitTest, ReasonsHaveTheirOwnWindows) {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.check("a", t0).allow);
    EXPECT_FALSE(limiter.check("a", t0).allow);
    EXPECT_TRUE(limiter.check("b", t0).allow);
}

TEST_F(RateLimitTest, ExpireReportsEndedWindowsAndForgetsThem) {
    for (int i = 0; i < 5; ++i) limiter.check("a", t0);
    limiter.check("quiet", t0);
    EXPECT_TRUE(limiter.expire(t0 + 9s).empty());
    auto ended = limiter.expire(t0 + 10s);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].reason, "a");
    EXPECT_EQ(ended[0].suppressed, 2u);
    EXPECT_EQ(limiter.tracked_reasons(), 0u);
    EXPECT_TRUE(limiter.check("a", t0 + 11s).allow) << "a fresh window";
}

TEST_F(RateLimitTest, TooManyReasonsShareOneBucket) {
    for (const char* r : {"r1", "r2", "r3", "r4"}) limiter.check(r, t0);
    auto v = limiter.check("r5", t0);
    EXPECT_TRUE(v.allow);
    EXPECT_EQ(v.bucket, RateLimiter::kOtherReasons);
    for (const char* r : {"r6", "r7", "r8"}) limiter.check(r, t0);
    EXPECT_FALSE(limiter.check("r9", t0).allow) << "the shared bucket has had its burst";
    EXPECT_EQ(limiter.tracked_reasons(), 5u);
}

TEST_F(RateLimitTest, RateLimitedLogLinesAndSummary) {
    Pipe p;
    Logger log({.target = LogTarget::stderr_lines, .min_level = LogLevel::debug, .stderr_fd = p.write.get()});
    RateLimitedLog drops(log, LogLevel::debug, {.burst = 2, .interval = 5s});
    for (int i = 0; i < 5; ++i)
        drops.log("bad_pkey", "dropped a packet", {{field::kPkey, field::format_pkey(0x7fff)}}, t0);
    const std::string prefix = "ipoibd[" + std::to_string(::getpid()) + "]: debug: ";
    const std::string line = prefix + "dropped a packet (IPOIB_REASON=bad_pkey IB_PKEY=0x7fff)\n";
    EXPECT_EQ(p.drain(), line + line);
    drops.flush(t0 + 4s);
    EXPECT_EQ(p.drain(), "");
    drops.flush(t0 + 5s);
    EXPECT_EQ(p.drain(), prefix + "suppressed 3 messages (bad_pkey) (IPOIB_REASON=bad_pkey IPOIB_SUPPRESSED=3)\n");
}

TEST_F(RateLimitTest, SummaryComesBeforeTheNextMessage) {
    Pipe p;
    Logger log({.target = LogTarget::stderr_lines, .min_level = LogLevel::debug, .stderr_fd = p.write.get()});
    RateLimitedLog drops(log, LogLevel::debug, {.burst = 1, .interval = 5s});
    drops.log("short", "m", {}, t0);
    drops.log("short", "m", {}, t0);
    p.drain();
    drops.log("short", "m", {}, t0 + 6s);
    const std::string out = p.drain();
    const auto summary = out.find("suppressed 1 messages (short)");
    const auto next = out.find(": debug: m (");
    ASSERT_NE(summary, std::string::npos);
    ASSERT_NE(next, std::string::npos);
    EXPECT_LT(summary, next);
}

TEST_F(RateLimitTest, DisabledLevelCostsNothingAndCountsNothing) {
    Pipe p;
    Logger log({.target = LogTarget::stderr_lines, .min_level = LogLevel::info, .stderr_fd = p.write.get()});
    RateLimitedLog drops(log, LogLevel::debug, {.burst = 1, .interval = 5s});
    for (int i = 0; i < 10; ++i) drops.log("r", "m", {}, t0);
    log.set_min_level(LogLevel::debug);
    drops.flush(t0 + 10s);
    EXPECT_EQ(p.drain(), "") << "nothing was counted while debug was off";
    drops.log("r", "m", {}, t0 + 10s);
    EXPECT_NE(p.drain().find(": debug: m (IPOIB_REASON=r)\n"), std::string::npos);
}

// ---- sd_notify ----

struct NotifyTest : ::testing::Test {
    TempDir dir;
    std::string path = (dir.path() / "notify.sock").string();
    UniqueFd socket;
    std::optional<ScopedEnv> notify_socket;
    std::optional<ScopedEnv> watchdog_usec{std::in_place, "WATCHDOG_USEC", nullptr};
    std::optional<ScopedEnv> watchdog_pid{std::in_place, "WATCHDOG_PID", nullptr};

    void SetUp() override {
        socket.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        ASSERT_TRUE(socket);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, path.c_str(), path.size());
        ASSERT_EQ(::bind(socket.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
        notify_socket.emplace("NOTIFY_SOCKET", path.c_str());
    }
    std::optional<std::string> receive() {
        char buf[4096];
        const ssize_t n = ::recv(socket.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) return std::nullopt;
        return std::string(buf, static_cast<std::size_t>(n));
    }
};

TEST_F(NotifyTest, ExactDatagrams) {
    Notifier n;
    EXPECT_TRUE(n.enabled());
    ASSERT_TRUE(n.ready("ib0 up, broadcast group joined"));
    EXPECT_EQ(receive(), "READY=1\nSTATUS=ib0 up, broadcast group joined");
    ASSERT_TRUE(n.ready());
    EXPECT_EQ(receive(), "READY=1");
    ASSERT_TRUE(n.status("waiting for port\nACTIVE"));
    EXPECT_EQ(receive(), "STATUS=waiting for port ACTIVE") << "a newline would start a new assignment";
    ASSERT_TRUE(n.reloading(Clock::time_point{} + 5s + 250us));
    EXPECT_EQ(receive(), "RELOADING=1\nMONOTONIC_USEC=5000250");
    ASSERT_TRUE(n.extend_timeout(30s));
    EXPECT_EQ(receive(), "EXTEND_TIMEOUT_USEC=30000000");
    ASSERT_TRUE(n.stopping("stopping"));
    EXPECT_EQ(receive(), "STOPPING=1\nSTATUS=stopping");
    ASSERT_TRUE(n.stopping());
    EXPECT_EQ(receive(), "STOPPING=1");
    EXPECT_EQ(receive(), std::nullopt);
}

TEST_F(NotifyTest, WatchdogOffWithoutWatchdogUsec) {
    Notifier n;
    EXPECT_EQ(n.watchdog_interval(), std::nullopt);
    EXPECT_EQ(n.watchdog_ping_interval(), std::nullopt);
    ASSERT_TRUE(n.watchdog());
    EXPECT_EQ(receive(), std::nullopt);
}

TEST_F(NotifyTest, WatchdogPingsAtMostEveryQuarterInterval) {
    const std::string pid = std::to_string(::getpid());
    watchdog_usec.emplace("WATCHDOG_USEC", "2000000");
    watchdog_pid.emplace("WATCHDOG_PID", pid.c_str());
    Notifier n;
    EXPECT_EQ(n.watchdog_interval(), std::chrono::microseconds(2'000'000));
    EXPECT_EQ(n.watchdog_ping_interval(), Clock::duration(1s));
    const auto t0 = Clock::time_point{} + 1h;
    ASSERT_TRUE(n.watchdog(t0));
    EXPECT_EQ(receive(), "WATCHDOG=1");
    ASSERT_TRUE(n.watchdog(t0 + 100ms));
    EXPECT_EQ(receive(), std::nullopt) << "a busy loop does not ping on every wake-up";
    ASSERT_TRUE(n.watchdog(t0 + 500ms));
    EXPECT_EQ(receive(), "WATCHDOG=1");
}

TEST_F(NotifyTest, WatchdogForAnotherPidIsNotOurs) {
    const std::string other = std::to_string(::getpid() + 1);
    watchdog_usec.emplace("WATCHDOG_USEC", "2000000");
    watchdog_pid.emplace("WATCHDOG_PID", other.c_str());
    Notifier n;
    EXPECT_EQ(n.watchdog_interval(), std::nullopt);
    ASSERT_TRUE(n.watchdog());
    EXPECT_EQ(receive(), std::nullopt);
}

TEST_F(NotifyTest, WatchdogWithoutPidAndBadValues) {
    {
        watchdog_usec.emplace("WATCHDOG_USEC", "500000");
        Notifier n;
        EXPECT_EQ(n.watchdog_interval(), std::chrono::microseconds(500'000)) << "WATCHDOG_PID is optional";
    }
    {
        watchdog_usec.emplace("WATCHDOG_USEC", "soon");
        Notifier n;
        EXPECT_EQ(n.watchdog_interval(), std::nullopt);
    }
    {
        watchdog_usec.emplace("WATCHDOG_USEC", "0");
        Notifier n;
        EXPECT_EQ(n.watchdog_interval(), std::nullopt);
    }
}

TEST_F(NotifyTest, NoNotifySocketMeansNoOps) {
    ScopedEnv unset("NOTIFY_SOCKET", nullptr);
    watchdog_usec.emplace("WATCHDOG_USEC", "2000000");
    Notifier n;
    EXPECT_FALSE(n.enabled());
    EXPECT_TRUE(n.ready("up"));
    EXPECT_TRUE(n.status("x"));
    EXPECT_TRUE(n.reloading());
    EXPECT_TRUE(n.watchdog());
    EXPECT_TRUE(n.stopping());
    EXPECT_EQ(receive(), std::nullopt);
}

TEST_F(NotifyTest, SendFailureIsATypedError) {
    const std::string gone = (dir.path() / "nobody.sock").string();
    ScopedEnv env("NOTIFY_SOCKET", gone.c_str());
    Notifier n;
    auto r = n.ready();
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().error, 0);
    EXPECT_EQ(r.error().operation, "notify the service manager (READY=1)");
}

// ---- control socket ----

std::string echo_handler(std::string_view command) {
    JsonWriter w;
    w.begin_object().field("command", command).end_object();
    return w.take();
}

UniqueFd connect_raw(const std::string& path) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) ADD_FAILURE() << std::strerror(errno);
    return fd;
}

// What the server wrote, once it has closed (read after the loop has run).
std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    for (;;) {
        pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
        if (::poll(&p, 1, 2000) <= 0) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
}

void send_text(int fd, std::string_view text) {
    ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
}

struct ControlTest : ::testing::Test {
    TempDir tmp;
    std::string dir = (tmp.path() / "run" / "ipoibd").string();
    std::string path = dir + "/ib0.sock";
    std::unique_ptr<EventLoop> loop = make_loop();

    std::unique_ptr<ControlServer> open(ControlServer::Handler handler = echo_handler, ControlLimits limits = {}) {
        ::mkdir((tmp.path() / "run").c_str(), 0755);
        auto server = ControlServer::open(*loop, path, std::move(handler), limits);
        if (!server) {
            ADD_FAILURE() << server.error().message();
            return nullptr;
        }
        return std::move(*server);
    }
    // One request over a raw connection, the loop stepped in this thread.
    std::string request(ControlServer& server, std::string_view text) {
        const ControlCounters before = server.counters();
        UniqueFd c = connect_raw(path);
        send_text(c.get(), text);
        run_until(*loop, [&] {
            const auto& now = server.counters();
            const bool seen = now.accepted > before.accepted || now.rejected_busy > before.rejected_busy;
            return seen && server.clients() == 0;
        });
        return read_all(c.get());
    }
};

TEST_F(ControlTest, DirectoryIs0700AndSocket0600AndRemovedOnClose) {
    auto server = open();
    ASSERT_TRUE(server);
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    server.reset();
    EXPECT_FALSE(fs::exists(path));
}

TEST_F(ControlTest, ExistingDirectoryKeepsItsMode) {
    fs::create_directories(dir);
    ::chmod(dir.c_str(), 0750);
    auto server = open();
    ASSERT_TRUE(server);
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0750u);
}

TEST_F(ControlTest, AnswersOneRequestPerConnection) {
    auto server = open();
    ASSERT_TRUE(server);
    EXPECT_EQ(request(*server, "status\n"), "{\"command\":\"status\"}\n");
    EXPECT_EQ(request(*server, "  flush \t neigh \r\n"), "{\"command\":\"flush neigh\"}\n");
    EXPECT_EQ(request(*server, "stats\nextra junk after the line"), "{\"command\":\"stats\"}\n");
    EXPECT_EQ(server->counters().answered, 3u);
    EXPECT_EQ(server->counters().accepted, 3u);
}

TEST_F(ControlTest, RequestWithoutNewlineEndsAtShutdown) {
    auto server = open();
    ASSERT_TRUE(server);
    UniqueFd c = connect_raw(path);
    send_text(c.get(), "mcast");
    ::shutdown(c.get(), SHUT_WR);
    run_until(*loop, [&] { return server->counters().answered == 1 && server->clients() == 0; });
    EXPECT_EQ(read_all(c.get()), "{\"command\":\"mcast\"}\n");
}

TEST_F(ControlTest, UnknownCommandIsAnErrorListingTheCommands) {
    int calls = 0;
    auto server = open([&](std::string_view c) {
        ++calls;
        return echo_handler(c);
    });
    ASSERT_TRUE(server);
    const std::string answer = request(*server, "reboot now\n");
    auto doc = parse_json(answer);
    ASSERT_TRUE(doc.has_value()) << answer;
    ASSERT_NE(doc->find("error"), nullptr);
    EXPECT_EQ(doc->find("error")->text(), "unknown command 'reboot now'");
    ASSERT_NE(doc->find("commands"), nullptr);
    EXPECT_EQ(doc->find("commands")->items().size(), control::kCommands.size());
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(server->counters().unknown_command, 1u);
}

TEST_F(ControlTest, OversizeRequestIsRefused) {
    auto server = open();
    ASSERT_TRUE(server);
    const std::string answer = request(*server, std::string(300, 'a') + "\n");
    EXPECT_EQ(answer, "{\"error\":\"request longer than 256 bytes\"}\n");
    EXPECT_EQ(server->counters().oversize, 1u);
    // Exactly at the limit (newline included) is fine.
    EXPECT_EQ(request(*server, std::string(250, ' ') + "paths" + "\n"), "{\"command\":\"paths\"}\n");
}

TEST_F(ControlTest, TooManyClientsAreToldSo) {
    auto server = open(echo_handler, {.max_clients = 2});
    ASSERT_TRUE(server);
    UniqueFd c1 = connect_raw(path);
    UniqueFd c2 = connect_raw(path);
    run_until(*loop, [&] { return server->clients() == 2; });
    UniqueFd c3 = connect_raw(path);
    run_until(*loop, [&] { return server->counters().rejected_busy == 1; });
    auto doc = parse_json(read_all(c3.get()));
    ASSERT_TRUE(doc.has_value());
    ASSERT_NE(doc->find("error"), nullptr);
    EXPECT_TRUE(doc->find("error")->text().starts_with("too many clients (2 connections"));
    EXPECT_EQ(server->clients(), 2u);
    // The two held connections are still served.
    send_text(c1.get(), "status\n");
    run_until(*loop, [&] { return server->clients() == 1; });
    EXPECT_EQ(read_all(c1.get()), "{\"command\":\"status\"}\n");
}

TEST_F(ControlTest, SilentClientTimesOut) {
    auto server = open(echo_handler, {.client_timeout = 30ms});
    ASSERT_TRUE(server);
    UniqueFd c = connect_raw(path);
    run_until(*loop, [&] { return server->counters().accepted == 1; });
    run_until(*loop, [&] { return server->clients() == 0; });
    EXPECT_EQ(server->counters().timeouts, 1u);
    EXPECT_EQ(read_all(c.get()), "{\"error\":\"timed out waiting for the request\"}\n");
}

TEST_F(ControlTest, HandlerExceptionIsAnsweredAndCounted) {
    auto server = open([](std::string_view) -> std::string { throw std::runtime_error("no engine yet"); });
    ASSERT_TRUE(server);
    EXPECT_EQ(request(*server, "status\n"), "{\"error\":\"internal error: no engine yet\"}\n");
    EXPECT_EQ(server->counters().handler_errors, 1u);
}

TEST_F(ControlTest, StaleSocketIsReplaced) {
    fs::create_directories(dir);
    {
        // A daemon that was killed: the file stays, nobody listens.
        UniqueFd s(::socket(AF_UNIX, SOCK_STREAM, 0));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, path.c_str(), path.size());
        ASSERT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    }
    ASSERT_TRUE(fs::exists(path));
    auto server = open();
    ASSERT_TRUE(server);
    EXPECT_EQ(request(*server, "neigh\n"), "{\"command\":\"neigh\"}\n");
}

TEST_F(ControlTest, SecondServerIsRefusedAndTheFirstKeepsServing) {
    auto first = open();
    ASSERT_TRUE(first);
    auto second = ControlServer::open(*loop, path, echo_handler);
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error().error, EADDRINUSE);
    EXPECT_EQ(second.error().message(),
              "could not bind control socket " + path + " (another ipoibd answers on it): Address already in use");
    EXPECT_EQ(request(*first, "status\n"), "{\"command\":\"status\"}\n");
}

TEST_F(ControlTest, PathThatIsNotASocketIsLeftAlone) {
    fs::create_directories(dir);
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("keep me", f);
    std::fclose(f);
    auto server = ControlServer::open(*loop, path, echo_handler);
    ASSERT_FALSE(server.has_value());
    EXPECT_EQ(server.error().error, EEXIST);
    EXPECT_TRUE(fs::is_regular_file(path));
}

TEST_F(ControlTest, PathTooLong) {
    auto server = ControlServer::open(*loop, "/tmp/" + std::string(200, 'x') + ".sock", echo_handler);
    ASSERT_FALSE(server.has_value());
    EXPECT_EQ(server.error().error, ENAMETOOLONG);
}

// The client library against a server whose loop runs in its own thread.
// The server belongs to the fixture, so the loop has stopped before it goes.
struct ControlThreadTest : ControlTest {
    std::unique_ptr<ControlServer> server;
    std::thread runner;

    void serve(ControlServer::Handler handler = echo_handler, ControlLimits limits = {}) {
        server = open(std::move(handler), limits);
        ASSERT_TRUE(server);
        runner = std::thread([this] { EXPECT_TRUE(loop->run().has_value()); });
    }
    void stop() {
        if (!runner.joinable()) return;
        loop->stop();
        runner.join();
    }
    void TearDown() override {
        stop();
        server.reset();
    }
};

TEST_F(ControlThreadTest, ClientGetsTheJson) {
    serve();
    auto answer = ctl_request(path, "status");
    ASSERT_TRUE(answer.has_value()) << answer.error().message;
    EXPECT_EQ(*answer, "{\"command\":\"status\"}\n");
    answer = ctl_request(path, "flush paths");
    ASSERT_TRUE(answer.has_value()) << answer.error().message;
    EXPECT_EQ(*answer, "{\"command\":\"flush paths\"}\n");
    stop();
    EXPECT_EQ(server->counters().answered, 2u);
}

TEST_F(ControlThreadTest, LargeAnswerArrivesWhole) {
    // Far larger than a socket buffer: written across many wake-ups.
    serve([](std::string_view) {
        JsonWriter w;
        w.begin_object().key("neigh").begin_array();
        for (int i = 0; i < 40000; ++i)
            w.begin_object()
                .field("ip", "198.18." + std::to_string(i / 256) + "." + std::to_string(i % 256))
                .field("qpn", field::format_qpn(static_cast<std::uint32_t>(i)))
                .end_object();
        w.end_array().end_object();
        return w.take();
    });
    auto answer = ctl_request(path, "neigh");
    ASSERT_TRUE(answer.has_value()) << answer.error().message;
    EXPECT_GT(answer->size(), 1'000'000u);
    auto doc = parse_json(*answer);
    ASSERT_TRUE(doc.has_value()) << doc.error().message();
    EXPECT_EQ(doc->find("neigh")->items().size(), 40000u);
}

TEST_F(ControlThreadTest, BusyDaemonAnswerReachesTheClient) {
    UniqueFd holder;
    {
        // The holder connects first, so it is accepted first.
        ::mkdir((tmp.path() / "run").c_str(), 0755);
        auto s = ControlServer::open(*loop, path, echo_handler, {.max_clients = 1});
        ASSERT_TRUE(s.has_value());
        server = std::move(*s);
        holder = connect_raw(path);
        runner = std::thread([this] { EXPECT_TRUE(loop->run().has_value()); });
    }
    auto answer = ctl_request(path, "status");
    ASSERT_TRUE(answer.has_value()) << answer.error().message;
    EXPECT_TRUE(answer->starts_with("{\"error\":\"too many clients (1 connections")) << *answer;
}

TEST(CtlClient, NotRunningWhenTheSocketIsAbsentOrRefuses) {
    TempDir tmp;
    const std::string path = (tmp.path() / "ib0.sock").string();
    auto r = ctl_request(path, "status", 1s);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().kind, CtlError::Kind::not_running);
    EXPECT_EQ(r.error().message, "ipoibd is not running (no control socket at " + path + ")");

    UniqueFd stale(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    r = ctl_request(path, "status", 1s);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().kind, CtlError::Kind::not_running);
}

TEST(CtlClient, TimesOutWhenTheDaemonDoesNotAnswer) {
    TempDir tmp;
    const std::string path = (tmp.path() / "ib0.sock").string();
    UniqueFd mute(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    ASSERT_EQ(::bind(mute.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::listen(mute.get(), 4), 0);  // listens, never accepts
    auto r = ctl_request(path, "status", 50ms);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().kind, CtlError::Kind::timeout);
    EXPECT_EQ(r.error().message, "ipoibd did not answer within 50 ms on " + path);
}

TEST(ControlProtocol, CommandsAndPaths) {
    EXPECT_EQ(control::find_command("status"), "status");
    EXPECT_EQ(control::find_command(" flush\tpaths "), "flush paths");
    EXPECT_EQ(control::find_command("flush"), std::nullopt);
    EXPECT_EQ(control::find_command("STATUS"), std::nullopt);
    EXPECT_EQ(control::find_command(""), std::nullopt);
    EXPECT_EQ(control::socket_path("ib0"), "/run/ipoibd/ib0.sock");
    EXPECT_TRUE(control::valid_instance_name("ib0.8001"));
    EXPECT_FALSE(control::valid_instance_name("../etc"));
    EXPECT_FALSE(control::valid_instance_name("a/b"));
    EXPECT_FALSE(control::valid_instance_name(""));
}

// ---- JSON writer ----

TEST(JsonWriter, StringEscaping) {
    struct Case {
        const char* name;
        std::string in;
        std::string out;
    };
    const Case cases[] = {
        {"plain", "ib0", "\"ib0\""},
        {"quote and backslash", "a\"b\\c", "\"a\\\"b\\\\c\""},
        {"named controls", "\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\""},
        {"other controls", std::string("\x01\x1f\x7f", 3), "\"\\u0001\\u001f\\u007f\""},
        {"nul", std::string("a\0b", 3), "\"a\\u0000b\""},
        {"slash stays", "a/b", "\"a/b\""},
        {"valid utf-8", "caf\xc3\xa9 \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\""},
        {"stray byte", "a\xff" "b", "\"a\xef\xbf\xbd" "b\""},
        {"overlong", "\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\""},
        {"surrogate", "\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""},
        {"truncated", "\xe2\x82", "\"\xef\xbf\xbd\xef\xbf\xbd\""},
    };
    for (const auto& c : cases) {
        std::string out;
        append_json_string(out, c.in);
        EXPECT_EQ(out, c.out) << c.name;
        auto back = parse_json(out);
        EXPECT_TRUE(back.has_value()) << c.name;
    }
}

TEST(JsonWriter, DocumentShape) {
    JsonWriter w;
    w.begin_object()
        .field("ifname", "ib0")
        .field("mtu", 2044)
        .field("up", true)
        .field("rx", std::uint64_t{18446744073709551615u})
        .field("delta", std::int64_t{-9223372036854775807LL - 1})
        .field("ratio", 1.5)
        .field("nan", std::numeric_limits<double>::quiet_NaN())
        .key("gw")
        .null()
        .key("empty")
        .begin_array()
        .end_array()
        .key("list")
        .begin_array()
        .value(1)
        .begin_object()
        .end_object()
        .value("x")
        .end_array()
        .end_object();
    EXPECT_TRUE(w.complete());
    EXPECT_EQ(w.str(),
              "{\"ifname\":\"ib0\",\"mtu\":2044,\"up\":true,\"rx\":18446744073709551615,"
              "\"delta\":-9223372036854775808,\"ratio\":1.5,\"nan\":null,\"gw\":null,\"empty\":[],"
              "\"list\":[1,{},\"x\"]}");
    auto doc = parse_json(w.str());
    ASSERT_TRUE(doc.has_value());
    EXPECT_EQ(to_json(*doc), w.str()) << "round trip";
    EXPECT_EQ(doc->find("rx")->as_uint64(), 18446744073709551615u);
    EXPECT_EQ(json_error("no \"port\""), "{\"error\":\"no \\\"port\\\"\"}");
}

// ---- JSON parser ----

TEST(JsonParse, GoodDocuments) {
    struct Case {
        std::string in;
        std::string canonical;
    };
    const Case cases[] = {
        {"{}", "{}"},
        {" [ ] ", "[]"},
        {"null", "null"},
        {"true", "true"},
        {"false", "false"},
        {"0", "0"},
        {"-0.5e+10", "-0.5e+10"},
        {"12345678901234567890", "12345678901234567890"},
        {"\"\"", "\"\""},
        {"\"\\u00e9\\ud83d\\ude00\\/\\\"\"", "\"\xc3\xa9\xf0\x9f\x98\x80/\\\"\""},
        {"\"\\u0000\"", "\"\\u0000\""},
        {"{\"a\" : [1, {\"b\":null}], \"a\":2}\n", "{\"a\":[1,{\"b\":null}],\"a\":2}"},
        {"\t[\r\n1,\n2 ]", "[1,2]"},
    };
    for (const auto& c : cases) {
        auto doc = parse_json(c.in);
        ASSERT_TRUE(doc.has_value()) << c.in << ": " << doc.error().message();
        EXPECT_EQ(to_json(*doc), c.canonical) << c.in;
    }
    auto dup = parse_json("{\"a\":1,\"a\":2}");
    EXPECT_EQ(dup->find("a")->text(), "1") << "first of a repeated key";
    EXPECT_EQ(dup->find("b"), nullptr);
}

TEST(JsonParse, MalformedDocuments) {
    struct Case {
        std::string in;
        std::size_t offset;
        std::string what;
    };
    const Case cases[] = {
        {"", 0, "unexpected end of text, expected a value"},
        {"   ", 3, "unexpected end of text, expected a value"},
        {"{", 1, "expected a string as object key"},
        {"{\"a\":1", 6, "unexpected end of text in an object"},
        {"[1,2", 4, "unexpected end of text in an array"},
        {"{\"a\":1,}", 7, "expected a string as object key"},
        {"{\"a\" 1}", 5, "expected ':' after an object key"},
        {"{1:2}", 1, "expected a string as object key"},
        {"[1,]", 3, "unexpected character ']', expected a value"},
        {"[1 2]", 3, "expected ',' or ']' in an array"},
        {"{\"a\":1 \"b\":2}", 7, "expected ',' or '}' in an object"},
        {"\"abc", 4, "unterminated string"},
        {"\"ab\\", 4, "unterminated escape"},
        {"\"\\x\"", 2, "bad escape '\\x'"},
        {"\"\\u12x4\"", 5, "bad hex digit in \\u escape"},
        {"\"\\u12", 3, "truncated \\u escape"},
        {"\"\\ud800\"", 7, "high surrogate not followed by a low surrogate"},
        {"\"\\ud800\\u0041\"", 13, "high surrogate not followed by a low surrogate"},
        {"\"\\udc00\"", 7, "lone low surrogate in \\u escape"},
        {"\"a\nb\"", 2, "control character in a string"},
        {"01", 1, "unexpected text after the JSON document"},
        {"1.", 2, "invalid number: no digits after '.'"},
        {"-", 1, "invalid number: no digits"},
        {"-a", 1, "invalid number: no digits"},
        {"1e", 2, "invalid number: no digits in the exponent"},
        {"+1", 0, "unexpected character '+', expected a value"},
        {"tru", 0, "invalid literal (expected true)"},
        {"nul", 0, "invalid literal (expected null)"},
        {"NaN", 0, "unexpected character 'N', expected a value"},
        {"[1] x", 4, "unexpected text after the JSON document"},
        {"{}{}", 2, "unexpected text after the JSON document"},
    };
    for (const auto& c : cases) {
        auto doc = parse_json(c.in);
        ASSERT_FALSE(doc.has_value()) << c.in;
        EXPECT_EQ(doc.error().what, c.what) << c.in;
        EXPECT_EQ(doc.error().offset, c.offset) << c.in;
    }
    EXPECT_EQ(parse_json("[1,]").error().message(),
              "invalid JSON at byte 3: unexpected character ']', expected a value");
}

TEST(JsonParse, DepthAndLengthLimits) {
    const std::string ok = std::string(64, '[') + std::string(64, ']');
    EXPECT_TRUE(parse_json(ok).has_value());
    const std::string deep = std::string(65, '[') + std::string(65, ']');
    auto r = parse_json(deep);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().what, "nesting deeper than 64");
    EXPECT_EQ(r.error().offset, 64u);
    // Deep enough to overflow the stack without the limit.
    EXPECT_FALSE(parse_json(std::string(1'000'000, '[')).has_value());
    auto objects = parse_json(R"({"a":{"b":{}}})", {.max_depth = 2});
    ASSERT_FALSE(objects.has_value());
    EXPECT_EQ(objects.error().what, "nesting deeper than 2");
    EXPECT_EQ(objects.error().offset, 10u);

    auto long_doc = parse_json("[1,2,3,4,5]", {.max_length = 10});
    ASSERT_FALSE(long_doc.has_value());
    EXPECT_EQ(long_doc.error().what, "document longer than 10 bytes");
}

TEST(JsonParse, NumberConversions) {
    auto n = [](const char* text) { return *parse_json(text); };
    EXPECT_EQ(n("18446744073709551615").as_uint64(), 18446744073709551615u);
    EXPECT_EQ(n("18446744073709551616").as_uint64(), std::nullopt);
    EXPECT_EQ(n("-1").as_uint64(), std::nullopt);
    EXPECT_EQ(n("1.5").as_uint64(), std::nullopt);
    EXPECT_EQ(n("1.5").as_double(), 1.5);
    EXPECT_EQ(n("-2e3").as_double(), -2000.0);
    EXPECT_EQ(n("\"1\"").as_uint64(), std::nullopt);
}

// ---- tables ----

TEST(Table, ColumnsAlignedNumbersRight) {
    Table t({"ip", "state", "rx"});
    t.add_row({"198.18.0.2", "REACHABLE", "5"});
    t.add_row({"fe80::1", "STALE", "12345"});
    t.add_row({"198.18.0.3"});
    EXPECT_EQ(t.render(),
              "ip          state         rx\n"
              "198.18.0.2  REACHABLE      5\n"
              "fe80::1     STALE      12345\n"
              "198.18.0.3  -              -\n");
    EXPECT_EQ(t.render("  ").substr(0, 6), "  ip  ");
}

TEST(Table, WidthCountsCodePointsAndControlsArePrinted) {
    Table t({"node", "n"});
    t.add_row({"caf\xc3\xa9", "1"});
    t.add_row({printable("evil\x1b[2Jx"), "22"});
    EXPECT_EQ(t.render(),
              "node        n\n"
              "caf\xc3\xa9        1\n"
              "evil?[2Jx  22\n");
    EXPECT_EQ(display_width("caf\xc3\xa9"), 4u);
}

TEST(Table, JsonAsText) {
    auto doc = parse_json(R"({"ifname":"ib0","state":"up","mtu":2044,"flags":["a","b"],"gw":null,
        "counters":{"rx_packets":10,"tx_packets":7},
        "neigh":[{"ip":"198.18.0.2","qpn":"0x000048","age":12},{"ip":"198.18.0.3","age":3,"state":"STALE"}],
        "groups":[]})");
    ASSERT_TRUE(doc.has_value());
    EXPECT_EQ(format_json_text(*doc),
              "ifname: ib0\n"
              "state: up\n"
              "mtu: 2044\n"
              "flags: a, b\n"
              "gw: -\n"
              "counters:\n"
              "  rx_packets: 10\n"
              "  tx_packets: 7\n"
              "neigh:\n"
              "  ip          qpn       age  state\n"
              "  198.18.0.2  0x000048   12  -\n"
              "  198.18.0.3  -           3  STALE\n"
              "groups: (none)\n");
    auto rows = parse_json(R"([{"mgid":"ff12:401b::1","members":["a","b"],"x":{"y":1}}])");
    EXPECT_EQ(format_json_text(*rows),
              "mgid          members  x\n"
              "ff12:401b::1  a,b      {\"y\":1}\n");
}

// ---- capabilities ----

TEST(Capabilities, Names) {
    EXPECT_EQ(parse_capability("cap_net_admin").value(), CAP_NET_ADMIN);
    EXPECT_EQ(parse_capability("CAP_NET_RAW").value(), CAP_NET_RAW);
    auto bad = parse_capability("cap_fly");
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error(), "unknown capability 'cap_fly' (e.g. cap_net_admin)");
    EXPECT_EQ(capability_name(CAP_NET_ADMIN), "cap_net_admin");
}

// Runs `child` in a forked process (capabilities cannot be taken back) and
// returns its exit status.
template <class F>
int in_child(F child) {
    const pid_t pid = ::fork();
    if (pid == 0) _exit(child());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST(Capabilities, KeepOnlyTheListedOnes) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    const int status = in_child([] {
        Pipe p;
        Logger log({.target = LogTarget::stderr_lines, .stderr_fd = p.write.get()});
        const cap_value_t keep[] = {CAP_NET_ADMIN, CAP_NET_RAW};
        auto report = keep_only_capabilities(keep, log);
        if (!report || !report->changed) return 1;
        cap_t now = ::cap_get_proc();
        for (cap_value_t c = 0; CAP_IS_SUPPORTED(c); ++c) {
            const bool wanted = (c == CAP_NET_ADMIN || c == CAP_NET_RAW) &&
                                std::find(report->kept.begin(), report->kept.end(), capability_name(c)) !=
                                    report->kept.end();
            cap_flag_value_t permitted = CAP_CLEAR;
            cap_flag_value_t effective = CAP_CLEAR;
            cap_flag_value_t inheritable = CAP_CLEAR;
            ::cap_get_flag(now, c, CAP_PERMITTED, &permitted);
            ::cap_get_flag(now, c, CAP_EFFECTIVE, &effective);
            ::cap_get_flag(now, c, CAP_INHERITABLE, &inheritable);
            if ((permitted == CAP_SET) != wanted || (effective == CAP_SET) != wanted) return 2;
            if (inheritable == CAP_SET) return 3;
            if (c != CAP_NET_ADMIN && c != CAP_NET_RAW && ::cap_get_bound(c) != 0) return 4;
        }
        ::cap_free(now);
        if (p.drain().find(": info: capabilities reduced to ") == std::string::npos) return 5;
        return 0;
    });
    EXPECT_EQ(status, 0);
}

TEST(Capabilities, NotRootIsANoOpWithANotice) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to become someone else";
    const int status = in_child([] {
        if (::setresgid(65534, 65534, 65534) < 0 || ::setresuid(65534, 65534, 65534) < 0) return 1;
        Pipe p;
        Logger log({.target = LogTarget::stderr_lines, .stderr_fd = p.write.get()});
        const cap_value_t keep[] = {CAP_NET_ADMIN};
        auto report = keep_only_capabilities(keep, log);
        if (!report || report->changed) return 2;
        if (p.drain().find(": notice: not running as root") == std::string::npos) return 3;
        return 0;
    });
    EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace ipoibd::daemon
