// sd_notify: the datagrams read from our own NOTIFY_SOCKET, the watchdog
// interval from WATCHDOG_USEC/WATCHDOG_PID, no-ops without a socket.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "common/unique_fd.h"
#include "runtime/notify.h"
#include "runtime_test_util.h"

namespace ipoibd::runtime {
namespace {

using namespace std::chrono_literals;
using namespace test;

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

}  // namespace
}  // namespace ipoibd::runtime
