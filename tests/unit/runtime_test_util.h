// Helpers for the tests of the daemon's building blocks (test_event_loop.cpp,
// test_log.cpp, test_notify.cpp, test_control.cpp, ...): a temporary
// directory, a scoped environment variable, a non-blocking pipe, an event
// loop stepped until a condition holds, and a control server fixture with
// raw client connections.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "runtime/control.h"
#include "runtime/event_loop.h"

namespace ipoibd::runtime::test {

// A directory under $TMPDIR, removed with everything in it at the end of
// the scope.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    std::optional<std::string> old_;
};

// A non-blocking pipe; drain() reads what is in it now.
struct Pipe {
    UniqueFd read;
    UniqueFd write;
    Pipe();
    std::string drain() const;
};

// An event loop, or the test aborts.
std::unique_ptr<EventLoop> make_loop();

// Runs wake-ups until `done` or 5 s (then the test fails on its own checks).
template <class Pred>
void run_until(EventLoop& loop, Pred done) {
    using namespace std::chrono_literals;
    const auto give_up = Clock::now() + 5s;
    while (!done() && Clock::now() < give_up) ASSERT_TRUE(loop.run_once(10ms).has_value());
}

// ---- control socket ----

// A control handler that answers {"command":COMMAND}.
std::string echo_handler(std::string_view command);

// A client connection to the socket at `path` (a test failure if refused).
UniqueFd connect_raw(const std::string& path);

// What the server wrote, once it has closed (read after the loop has run).
std::string read_all(int fd);

void send_text(int fd, std::string_view text);

// A control server in a temporary directory, its loop stepped in the test's
// thread.
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

}  // namespace ipoibd::runtime::test
