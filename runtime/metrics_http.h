// The Prometheus endpoint (docs/metrics.md): a TCP listener on the event
// loop that answers "GET /metrics" with the text exposition format and
// closes, as a scrape expects. Opt-in and meant for a local address
// (127.0.0.1:9464 and the like; the counters are not secret, but nothing
// here authenticates).
//
// Bounded like the control socket: at most max_clients connections, a
// request head of at most max_request bytes read within client_timeout of
// accept; anything else is answered 400/404/405/503 or closed, and
// counted. One answer per connection (Connection: close). At most
// kAcceptBatch accepts per wake-up; when accept fails for lack of fds or
// memory, accepting pauses for kAcceptPause, as the control socket does,
// instead of the level-triggered listener spinning the loop.
//
// Closing is lingering (as HTTP servers do, RFC 9112 9.6): once the answer
// is in the kernel the server shuts down writing and reads and throws away
// what the client still sends until it closes or kLinger passes. A plain
// close() would answer any later byte (a pipelined request) with a reset
// that throws away the part of the answer not yet sent. A render function
// that throws gets a 500 answer (counted in render_errors), not the daemon
// ended by it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/counters.h"
#include "common/expected.h"
#include "common/socket_address.h"
#include "common/sys_error.h"
#include "common/unique_fd.h"
#include "runtime/event_loop.h"

namespace ipoibd::runtime {

struct MetricsHttpLimits {
    std::size_t max_clients = 8;
    std::size_t max_request = 4096;
    std::chrono::milliseconds client_timeout{2000};
};

struct MetricsHttpCounters {
    std::uint64_t scrapes = 0;         // 200 answers
    std::uint64_t bad_requests = 0;    // 400, 404, 405
    std::uint64_t rejected_busy = 0;   // 503: max_clients reached
    std::uint64_t timeouts = 0;        // closed by client_timeout
    std::uint64_t io_errors = 0;
    std::uint64_t render_errors = 0;   // 500: the render function threw
};
void visit(const MetricsHttpCounters& c, CounterSink& out);

class MetricsHttpServer {
public:
    using Render = std::function<std::string()>;

    static constexpr std::size_t kAcceptBatch = 16;
    static constexpr std::chrono::milliseconds kAcceptPause{100};
    static constexpr std::chrono::milliseconds kLinger{1000};

    static expected<std::unique_ptr<MetricsHttpServer>, SysError> open(EventLoop& loop, const SocketAddress& listen,
                                                                       Render render, MetricsHttpLimits limits = {});
    ~MetricsHttpServer();
    MetricsHttpServer(const MetricsHttpServer&) = delete;
    MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

    SocketAddress local_address() const;
    const MetricsHttpCounters& counters() const { return counters_; }

private:
    struct Client {
        UniqueFd fd;
        std::string request;
        std::string answer;
        std::size_t written = 0;
        bool lingering = false;  // answer written, writing shut down: reading until the client closes
        TimerId timeout;
    };
    MetricsHttpServer(EventLoop& loop, Render render, MetricsHttpLimits limits)
        : loop_(loop), render_(std::move(render)), limits_(limits) {}
    void on_listener_ready();
    void pause_accepting();
    void on_client_ready(int fd);
    void respond(Client& c);
    void write_answer(int fd);
    void linger(int fd, Client& c);
    void read_lingering(int fd);
    void close_client(int fd);

    EventLoop& loop_;
    Render render_;
    MetricsHttpLimits limits_;
    UniqueFd listener_;
    TimerId resume_accept_;
    std::map<int, std::unique_ptr<Client>> clients_;
    MetricsHttpCounters counters_;
};

}  // namespace ipoibd::runtime
