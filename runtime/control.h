// The daemon's side of the control socket (protocol in control_protocol.h):
// a non-blocking Unix stream listener on the EventLoop that reads one
// request line per connection, asks the daemon's handler for the answer and
// writes it back.
//
// Opening (ControlServer::open):
//   1. the socket's directory is created 0700 when missing (an existing one
//      keeps its mode: RuntimeDirectory= or tmpfiles own it then; but one
//      owned by someone else than root or us, or that group or others may
//      write to without the sticky bit, is refused: they could swap the
//      socket);
//   2. bind; when the path exists, connect to it: if someone answers (or
//      its backlog is full), another daemon serves this instance and open
//      fails; if nothing answers, the socket is stale (a daemon that was
//      killed) and is replaced; a path that is not a socket is never
//      removed;
//   3. chmod 0600 before listen(), so no connection is accepted before the
//      mode is right;
//   4. listen and register with the loop.
// The destructor unlinks the socket, unless another file has taken its
// place meanwhile.
//
// Serving, every connection bounded (guideline 8):
//   - at most max_clients at once; one more is accepted and answered
//     {"error": "too many clients"} at once, so ipoibctl says why;
//   - the request line is at most max_request bytes, newline included;
//     a longer one is answered with an error;
//   - client_timeout from accept to close, whatever the client does;
//   - at most kAcceptBatch accepts per wake-up; when accept fails for lack
//     of fds or memory, accepting pauses for kAcceptPause instead of the
//     level-triggered listener spinning the loop.
// Each of these is counted in ControlCounters, for the "stats" answer.
//
// The handler runs in the loop thread and gets one of the server's commands
// (ipoibd's ctl::control::kCommands by default); unknown commands never reach it. An exception from it is answered as an
// internal error and counted; the daemon keeps running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/counters.h"
#include "common/expected.h"
#include "common/sys_error.h"
#include "common/unique_fd.h"
#include "ctl/control_protocol.h"
#include "runtime/event_loop.h"

namespace ipoibd::runtime {

struct ControlLimits {
    std::size_t max_clients = ctl::control::kMaxClients;
    std::size_t max_request = ctl::control::kMaxRequestLine;
    std::chrono::milliseconds client_timeout = ctl::control::kClientTimeout;
};

struct ControlCounters {
    std::uint64_t accepted = 0;         // connections served (not rejected)
    std::uint64_t answered = 0;         // answers from the handler
    std::uint64_t rejected_busy = 0;    // max_clients reached
    std::uint64_t oversize = 0;         // request line too long
    std::uint64_t unknown_command = 0;  // not one of ctl::control::kCommands
    std::uint64_t timeouts = 0;         // closed by client_timeout
    std::uint64_t handler_errors = 0;   // the handler threw
    std::uint64_t io_errors = 0;        // accept/read/write failed (client gone, no fds)
};
void visit(const ControlCounters& c, CounterSink& out);

class ControlServer {
public:
    using Handler = std::function<std::string(std::string_view command)>;

    static constexpr std::size_t kAcceptBatch = 16;
    static constexpr std::chrono::milliseconds kAcceptPause{100};

    static expected<std::unique_ptr<ControlServer>, SysError> open(
        EventLoop& loop, std::string path, Handler handler, ControlLimits limits = {},
        ctl::control::CommandSet commands = ctl::control::kIpoibdCommands);
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    const std::string& path() const { return path_; }
    const ControlCounters& counters() const { return counters_; }
    std::size_t clients() const { return clients_.size(); }

private:
    struct Client {
        UniqueFd fd;
        std::string request;
        std::string answer;
        std::size_t written = 0;
        bool answering = false;
        TimerId timeout;
    };

    ControlServer(EventLoop& loop, std::string path, Handler handler, ControlLimits limits,
                  ctl::control::CommandSet commands);
    expected<void, SysError> listen();
    void on_listener_ready();
    void pause_accepting();
    void accept_client(UniqueFd fd);
    void reject_busy(UniqueFd fd);
    void on_client_ready(int fd);
    void read_request(Client& c);
    void answer(Client& c, std::string_view line);
    void write_answer(Client& c);
    void on_timeout(int fd);
    void close_client(int fd);

    EventLoop& loop_;
    std::string path_;
    Handler handler_;
    ControlLimits limits_;
    ctl::control::CommandSet commands_;
    UniqueFd listener_;
    dev_t socket_dev_ = 0;
    ino_t socket_ino_ = 0;
    TimerId resume_accept_;
    std::map<int, std::unique_ptr<Client>> clients_;
    ControlCounters counters_;
};

}  // namespace ipoibd::runtime
