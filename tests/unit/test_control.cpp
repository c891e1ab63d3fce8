// The control socket: modes, one request per connection, stale and busy
// sockets, every bound.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "runtime/control.h"
#include "ctl/json_parse.h"
#include "runtime_test_util.h"

namespace ipoibd::runtime {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using namespace test;

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

// Whoever may write to the socket's directory could swap the socket for a
// symbolic link between bind() and chmod() (the daemon would set 0600 on
// the link's target) or for a socket of their own that ipoibctl then
// trusts: a directory that someone else owns, or that group or others may
// write to without the sticky bit (/tmp has it), is refused.
TEST_F(ControlTest, DirectoryOthersMayWriteToIsRefused) {
    fs::create_directories(dir);
    ::chmod(dir.c_str(), 0777);
    auto writable = ControlServer::open(*loop, path, echo_handler);
    ASSERT_FALSE(writable.has_value());
    EXPECT_EQ(writable.error().error, EPERM);
    EXPECT_EQ(writable.error().message(), "could not use " + dir +
                                              " as the control socket directory (group or others may write to "
                                              "it, without the sticky bit): Operation not permitted");
    EXPECT_FALSE(fs::exists(path));
    ::chmod(dir.c_str(), 01777);  // as /tmp
    EXPECT_TRUE(ControlServer::open(*loop, path, echo_handler).has_value());
    if (::geteuid() != 0) GTEST_SKIP() << "giving the directory to another user needs root";
    ::chmod(dir.c_str(), 0700);
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    auto foreign = ControlServer::open(*loop, path, echo_handler);
    ASSERT_FALSE(foreign.has_value());
    EXPECT_EQ(foreign.error().message(), "could not use " + dir +
                                             " as the control socket directory (owned by uid 65534, neither root "
                                             "nor this process): Operation not permitted");
}

// The same for every directory above it: whoever may write to one could
// rename the socket's directory away and put one of their own in its place.
TEST_F(ControlTest, ADirectoryAboveOthersMayWriteToIsRefused) {
    const std::string run = (tmp.path() / "run").string();
    fs::create_directories(dir);
    ::chmod(run.c_str(), 0777);
    auto above = ControlServer::open(*loop, path, echo_handler);
    ASSERT_FALSE(above.has_value());
    EXPECT_EQ(above.error().error, EPERM);
    EXPECT_EQ(above.error().message(), "could not use " + dir + " as the control socket directory (" +
                                           fs::canonical(run).string() +
                                           " above it is not safe: group or others may write to it, without the "
                                           "sticky bit): Operation not permitted");
    EXPECT_FALSE(fs::exists(path));
    fs::remove(dir);  // one the daemon creates itself is no safer there
    EXPECT_FALSE(ControlServer::open(*loop, path, echo_handler).has_value());
    ::chmod(run.c_str(), 01777);  // as /tmp
    EXPECT_TRUE(ControlServer::open(*loop, path, echo_handler).has_value());
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
    auto doc = ctl::parse_json(answer);
    ASSERT_TRUE(doc.has_value()) << answer;
    ASSERT_NE(doc->find("error"), nullptr);
    EXPECT_EQ(doc->find("error")->text(), "unknown command 'reboot now'");
    ASSERT_NE(doc->find("commands"), nullptr);
    EXPECT_EQ(doc->find("commands")->items().size(), ctl::control::kCommands.size());
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
    auto doc = ctl::parse_json(read_all(c3.get()));
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

}  // namespace
}  // namespace ipoibd::runtime
