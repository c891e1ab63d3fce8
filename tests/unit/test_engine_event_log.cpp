// The engine's events as log lines (daemon/engine_event_log.h) with a fake
// clock: those a fabric packet sets off are rate-limited per kind and what
// was held back is reported; the others are logged as they come.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <string>

#include "daemon/engine_event_log.h"
#include "runtime/log.h"
#include "runtime_test_util.h"

namespace ipoibd::daemon {
namespace {

using namespace std::chrono_literals;
using namespace runtime::test;
using Kind = ipoib::EngineEventKind;

std::size_t count_of(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
    return n;
}

struct EngineEventLogTest : ::testing::Test {
    runtime::Clock::time_point t0 = runtime::Clock::time_point{} + 1h;
    Pipe pipe;
    runtime::Logger logger{{.target = runtime::LogTarget::stderr_lines, .min_level = runtime::LogLevel::debug, .stderr_fd = pipe.write.get()}};
    EngineEventLog log{logger, {.burst = 3, .interval = 10s}};

    static ipoib::EngineEvent event(Kind k, std::string message) {
        return {.kind = k, .message = std::move(message), .fields = {{"IPOIB_PEER_IP", "198.18.0.1"}}};
    }
};

// A peer claiming our address once per packet: the first three of a
// window are logged, the rest counted and reported once.
TEST_F(EngineEventLogTest, EventsFromTheFabricAreRateLimitedPerKindAndTheRestReported) {
    for (int i = 0; i < 1000; ++i) log.log("ib0", event(Kind::address_conflict, "another host claims 198.18.0.1"), t0);
    for (int i = 0; i < 5; ++i) log.log("ib0", event(Kind::peer_changed, "neighbour changed"), t0);
    for (int i = 0; i < 5; ++i) log.log("ib0", event(Kind::path_failed, "no path"), t0);
    std::string out = pipe.drain();
    EXPECT_EQ(count_of(out, "warning: another host claims 198.18.0.1 (IPOIB_IFNAME=ib0 IPOIB_PEER_IP=198.18.0.1)"), 3u);
    EXPECT_EQ(count_of(out, "notice: neighbour changed"), 3u);  // its own window
    EXPECT_EQ(count_of(out, "warning: no path"), 3u);
    log.flush(t0 + 9s);
    EXPECT_EQ(pipe.drain(), "");
    log.flush(t0 + 10s);
    out = pipe.drain();
    EXPECT_NE(out.find("warning: suppressed 997 messages (address_conflict) (IPOIB_IFNAME=ib0 "
                       "IPOIB_REASON=address_conflict IPOIB_SUPPRESSED=997)\n"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("notice: suppressed 2 messages (peer_changed)"), std::string::npos) << out;
    EXPECT_NE(out.find("warning: suppressed 2 messages (path_failed)"), std::string::npos) << out;
    // A new window logs again.
    log.log("ib0", event(Kind::address_conflict, "another host claims 198.18.0.1"), t0 + 11s);
    EXPECT_EQ(count_of(pipe.drain(), "another host claims"), 1u);
}

// A flood on one interface does not silence another's events of the kind.
TEST_F(EngineEventLogTest, EachInterfaceHasItsOwnWindows) {
    for (int i = 0; i < 100; ++i) log.log("ib0", event(Kind::address_conflict, "another host claims 198.18.0.1"), t0);
    (void)pipe.drain();
    log.log("ib0.8001", event(Kind::address_conflict, "another host claims 198.18.1.1"), t0);
    EXPECT_EQ(count_of(pipe.drain(), "another host claims 198.18.1.1 (IPOIB_IFNAME=ib0.8001"), 1u);
    log.flush(t0 + 10s);
    const std::string out = pipe.drain();
    EXPECT_NE(out.find("suppressed 97 messages (address_conflict) (IPOIB_IFNAME=ib0 "), std::string::npos) << out;
    EXPECT_EQ(count_of(out, "suppressed"), 1u) << out;
}

TEST_F(EngineEventLogTest, TheSummaryComesBeforeTheNextEventOfItsKind) {
    for (int i = 0; i < 4; ++i) log.log("ib0", event(Kind::peer_changed, "neighbour changed"), t0);
    (void)pipe.drain();
    log.log("ib0", event(Kind::peer_changed, "neighbour changed"), t0 + 12s);
    const std::string out = pipe.drain();
    const auto summary = out.find("suppressed 1 messages (peer_changed)");
    const auto next = out.find("notice: neighbour changed");
    ASSERT_NE(summary, std::string::npos) << out;
    ASSERT_NE(next, std::string::npos) << out;
    EXPECT_LT(summary, next);
}

TEST_F(EngineEventLogTest, EventsAtTheLinksOwnPaceAreNotLimited) {
    for (int i = 0; i < 20; ++i) log.log("ib0", event(Kind::link_down, "link down"), t0);
    EXPECT_EQ(count_of(pipe.drain(), "warning: link down"), 20u);
    EXPECT_FALSE(set_off_by_the_fabric(Kind::link_down));
    EXPECT_TRUE(set_off_by_the_fabric(Kind::address_conflict));
}

TEST_F(EngineEventLogTest, ALevelTurnedOffCountsNothing) {
    logger.set_min_level(runtime::LogLevel::error);
    for (int i = 0; i < 10; ++i) log.log("ib0", event(Kind::address_conflict, "claim"), t0);
    logger.set_min_level(runtime::LogLevel::debug);
    log.flush(t0 + 10s);
    EXPECT_EQ(pipe.drain(), "");
}

}  // namespace
}  // namespace ipoibd::daemon
