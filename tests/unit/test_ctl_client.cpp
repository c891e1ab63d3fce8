// The control client library (ipoibctl's) against a server whose loop runs
// in its own thread, against no daemon and against a mute one.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "runtime/control.h"
#include "ctl/ctl_client.h"
#include "runtime/journal_fields.h"
#include "ctl/json.h"
#include "ctl/json_parse.h"
#include "runtime_test_util.h"

namespace ipoibd::ctl {
namespace {

using namespace std::chrono_literals;
using namespace runtime::test;

// The client library against a server whose loop runs in its own thread.
// The server belongs to the fixture, so the loop has stopped before it goes.
struct ControlThreadTest : ControlTest {
    std::unique_ptr<runtime::ControlServer> server;
    std::thread runner;

    void serve(runtime::ControlServer::Handler handler = echo_handler, runtime::ControlLimits limits = {}) {
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
                .field("qpn", runtime::field::format_qpn(static_cast<std::uint32_t>(i)))
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
        auto s = runtime::ControlServer::open(*loop, path, echo_handler, {.max_clients = 1});
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

}  // namespace
}  // namespace ipoibd::ctl
