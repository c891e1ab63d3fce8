// The rate limiter with a fake clock, and the rate-limited log lines and
// summaries it drives.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/journal_fields.h"
#include "runtime/log.h"
#include "runtime/rate_limit.h"
#include "runtime_test_util.h"

namespace ipoibd::runtime {
namespace {

using namespace std::chrono_literals;
using namespace test;

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

}  // namespace
}  // namespace ipoibd::runtime
