// The Prometheus endpoint (runtime/metrics_http.h): GET /metrics answers the
// render function's text; other paths and methods, floods and silent
// clients are answered or closed and counted.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "runtime/metrics_http.h"
#include "tests/unit/runtime_test_util.h"

namespace ipoibd::runtime {
namespace {

using test::make_loop;
using test::run_until;

UniqueFd connect_to(const SocketAddress& a) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(fd.get(), a.get(), a.length), 0);
    return fd;
}

// Everything the server writes on `fd` until it closes or the connection
// fails (a reset: its errno), the loop stepped meanwhile.
struct Received {
    std::string answer;
    int error = 0;
    bool closed = false;
};
Received receive_until_closed(EventLoop& loop, int fd) {
    Received r;
    run_until(loop, [&] {
        char buf[4096];
        ssize_t n = 0;
        while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) r.answer.append(buf, static_cast<std::size_t>(n));
        if (n == 0) r.closed = true;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) r.error = errno;
        return r.closed || r.error != 0;
    });
    return r;
}

// What the server writes on `fd` until it closes, the loop stepped meanwhile.
std::string read_until_closed(EventLoop& loop, int fd) { return receive_until_closed(loop, fd).answer; }

// Runs the loop for `d`.
void run_for(EventLoop& loop, std::chrono::milliseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) ASSERT_TRUE(loop.run_once(std::chrono::milliseconds(10)).has_value());
}

// Sends `request` and reads the whole answer (the server closes).
std::string exchange(EventLoop& loop, const SocketAddress& a, const std::string& request) {
    UniqueFd fd = connect_to(a);
    EXPECT_EQ(::send(fd.get(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    return read_until_closed(loop, fd.get());
}

struct MetricsHttpTest : ::testing::Test {
    std::unique_ptr<EventLoop> loop = make_loop();
    std::unique_ptr<MetricsHttpServer> server;
    void SetUp() override {
        auto s = MetricsHttpServer::open(*loop, *parse_socket_address("127.0.0.1:0"),
                                         [] { return std::string("# TYPE x_y untyped\nx_y 1\n"); },
                                         {.max_clients = 2, .max_request = 512, .client_timeout = std::chrono::milliseconds(300)});
        ASSERT_TRUE(s) << s.error().message();
        server = std::move(*s);
    }
};

TEST_F(MetricsHttpTest, GetMetricsAnswersTheText) {
    const std::string a = exchange(*loop, server->local_address(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(a.starts_with("HTTP/1.1 200 OK\r\n")) << a;
    EXPECT_NE(a.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << a;
    EXPECT_TRUE(a.ends_with("\r\n\r\n# TYPE x_y untyped\nx_y 1\n")) << a;
    EXPECT_EQ(server->counters().scrapes, 1u);
}

// RFC 9110 9.3.2/8.6: a HEAD answer has the GET answer's headers, its
// Content-Length too (a MUST when sent), and no content.
TEST_F(MetricsHttpTest, HeadAnswersTheHeadersOfGet) {
    const std::string get = exchange(*loop, server->local_address(), "GET /metrics HTTP/1.1\r\n\r\n");
    const std::string head = exchange(*loop, server->local_address(), "HEAD /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(head, get.substr(0, get.find("\r\n\r\n") + 4));
    EXPECT_NE(head.find("Content-Length: 25\r\n"), std::string::npos) << head;
    EXPECT_EQ(server->counters().scrapes, 2u);
    const std::string missing = exchange(*loop, server->local_address(), "HEAD / HTTP/1.1\r\n\r\n");
    EXPECT_TRUE(missing.starts_with("HTTP/1.1 404")) << missing;
    EXPECT_TRUE(missing.ends_with("\r\n\r\n")) << missing;
}

TEST_F(MetricsHttpTest, OtherPathsMethodsAndGarbageAreRefused) {
    EXPECT_TRUE(exchange(*loop, server->local_address(), "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    EXPECT_TRUE(exchange(*loop, server->local_address(), "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    EXPECT_TRUE(exchange(*loop, server->local_address(), "hello\r\n\r\n").starts_with("HTTP/1.1 400"));
    EXPECT_TRUE(exchange(*loop, server->local_address(), std::string(600, 'A')).starts_with("HTTP/1.1 400"));
    EXPECT_EQ(server->counters().bad_requests, 4u);
    EXPECT_EQ(server->counters().scrapes, 0u);
}

// The head limit holds however the head arrives: one over it is refused
// even when it all comes in one read; exactly at it is served.
TEST_F(MetricsHttpTest, HeadLimitHoldsWithinOneRead) {
    const std::string start = "GET /metrics HTTP/1.1\r\nX-Pad: ";
    const std::string end = "\r\n\r\n";
    const std::string at_limit = start + std::string(512 - start.size() - end.size(), 'p') + end;
    ASSERT_EQ(at_limit.size(), 512u);
    EXPECT_TRUE(exchange(*loop, server->local_address(), at_limit).starts_with("HTTP/1.1 200"));
    const std::string over = start + std::string(513 - start.size() - end.size(), 'p') + end;
    const std::string answer = exchange(*loop, server->local_address(), over);
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer;
    EXPECT_TRUE(answer.ends_with("request too long\n")) << answer;
    EXPECT_EQ(server->counters().bad_requests, 1u);
    EXPECT_EQ(server->counters().scrapes, 1u);
}

// A client that shuts down writing in the middle of the head is told so
// and counted; one that connects and closes (a port check) is just closed.
TEST_F(MetricsHttpTest, IncompleteHeadIsRefusedAndCounted) {
    UniqueFd fd = connect_to(server->local_address());
    const std::string part = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    ASSERT_EQ(::send(fd.get(), part.data(), part.size(), 0), static_cast<ssize_t>(part.size()));
    ::shutdown(fd.get(), SHUT_WR);
    const std::string answer = read_until_closed(*loop, fd.get());
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer;
    EXPECT_TRUE(answer.ends_with("incomplete request head\n")) << answer;
    EXPECT_EQ(server->counters().bad_requests, 1u);
    UniqueFd probe = connect_to(server->local_address());
    ::shutdown(probe.get(), SHUT_WR);
    EXPECT_EQ(read_until_closed(*loop, probe.get()), "");
    EXPECT_EQ(server->counters().bad_requests, 1u);
    EXPECT_EQ(server->counters().timeouts, 0u);
    EXPECT_EQ(server->counters().io_errors, 0u);
}

TEST_F(MetricsHttpTest, SilentClientsTimeOutAndTheBusyAreTurnedAway) {
    UniqueFd a = connect_to(server->local_address()), b = connect_to(server->local_address());
    // A third while the two say nothing (accepted first, in order): 503.
    const std::string third = exchange(*loop, server->local_address(), "GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_TRUE(third.starts_with("HTTP/1.1 503")) << third;
    EXPECT_EQ(server->counters().rejected_busy, 1u);
    run_until(*loop, [&] { return server->counters().timeouts == 2; });
    EXPECT_EQ(server->counters().timeouts, 2u);
    // The server still answers.
    EXPECT_TRUE(exchange(*loop, server->local_address(), "GET /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
}

// A client with a small receive buffer: a large answer waits in the
// server's send queue.
UniqueFd connect_slow_reader(const SocketAddress& a) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int small = 4096;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    EXPECT_EQ(::connect(fd.get(), a.get(), a.length), 0);
    return fd;
}

// A client that sends a body (or pipelines a second request) leaves bytes
// unread when the answer is done; a TCP close() with unread input sends a
// reset and throws away what is still in the send queue, so a large answer
// to a slow reader arrived cut. The server reads what the client sent
// before closing.
TEST(MetricsHttp, AnswerIsWholeWhenTheClientSentMoreThanTheHead) {
    auto loop = make_loop();
    const std::string body(1u << 20, 'x');
    auto s = MetricsHttpServer::open(*loop, *parse_socket_address("127.0.0.1:0"), [&] { return body; });
    ASSERT_TRUE(s) << s.error().message();
    UniqueFd fd = connect_slow_reader((*s)->local_address());
    // More than the server reads at once, so some is still unread when the
    // head is answered.
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n" +
                                std::string(3000, 'b');
    ASSERT_EQ(::send(fd.get(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    const Received r = receive_until_closed(*loop, fd.get());
    EXPECT_EQ(r.error, 0) << std::strerror(r.error);
    EXPECT_TRUE(r.closed);
    EXPECT_TRUE(r.answer.ends_with("\r\n\r\n" + body)) << r.answer.size() << " bytes";
    EXPECT_EQ((*s)->counters().scrapes, 1u);
    EXPECT_EQ((*s)->counters().timeouts, 0u);
}

// Bytes the client sends after the answer is in the kernel (a pipelined
// request) must not cost it the answer: a plain close() answers them with a
// reset that throws away what is not yet sent. The server lingers: it shuts
// down writing and reads until the client closes.
TEST(MetricsHttp, AnswerIsWholeWhenTheClientWritesAfterIt) {
    auto loop = make_loop();
    const std::string body(1u << 20, 'x');
    auto s = MetricsHttpServer::open(*loop, *parse_socket_address("127.0.0.1:0"), [&] { return body; });
    ASSERT_TRUE(s) << s.error().message();
    UniqueFd fd = connect_slow_reader((*s)->local_address());
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send(fd.get(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    // Answered: on loopback the server's send buffer takes the whole MiB at
    // once, so the server is done with the connection here.
    run_until(*loop, [&] { return (*s)->counters().scrapes == 1; });
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(loop->run_once(std::chrono::milliseconds(10)).has_value());
    const std::string next = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send(fd.get(), next.data(), next.size(), 0), static_cast<ssize_t>(next.size()));
    const Received r = receive_until_closed(*loop, fd.get());
    EXPECT_EQ(r.error, 0) << std::strerror(r.error);
    EXPECT_TRUE(r.closed);
    EXPECT_TRUE(r.answer.ends_with("\r\n\r\n" + body)) << r.answer.size() << " bytes";
    EXPECT_EQ((*s)->counters().scrapes, 1u);
    fd.reset();
    // The lingering connection ends with the client's close, not a timeout.
    run_for(*loop, std::chrono::milliseconds(200));
    EXPECT_EQ((*s)->counters().timeouts, 0u);
}

// A client that never closes holds its slot for kLinger at most.
TEST(MetricsHttp, LingeringEndsAfterKLinger) {
    auto loop = make_loop();
    auto s = MetricsHttpServer::open(*loop, *parse_socket_address("127.0.0.1:0"), [] { return std::string("x 1\n"); },
                                     {.max_clients = 1});
    ASSERT_TRUE(s) << s.error().message();
    const SocketAddress a = (*s)->local_address();
    UniqueFd held = connect_to(a);
    const std::string request = "GET /metrics HTTP/1.1\r\n\r\n";
    ASSERT_EQ(::send(held.get(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    std::string first;
    run_until(*loop, [&] {
        char buf[512];
        ssize_t n = 0;
        while ((n = ::recv(held.get(), buf, sizeof buf, MSG_DONTWAIT)) > 0) first.append(buf, static_cast<std::size_t>(n));
        return n == 0;
    });
    EXPECT_TRUE(first.starts_with("HTTP/1.1 200")) << first;
    // `held` is still open: the one slot is taken while the server lingers.
    EXPECT_TRUE(exchange(*loop, a, request).starts_with("HTTP/1.1 503"));
    run_for(*loop, MetricsHttpServer::kLinger + std::chrono::milliseconds(200));
    EXPECT_TRUE(exchange(*loop, a, request).starts_with("HTTP/1.1 200"));
    EXPECT_EQ((*s)->counters().timeouts, 0u);
}

// RFC 9112 2.2: a server ignores empty lines before the request line.
TEST_F(MetricsHttpTest, EmptyLinesBeforeTheRequestLineAreIgnored) {
    EXPECT_TRUE(exchange(*loop, server->local_address(), "\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    EXPECT_TRUE(exchange(*loop, server->local_address(), "\nGET /metrics HTTP/1.1\n\n").starts_with("HTTP/1.1 200"));
    EXPECT_EQ(server->counters().scrapes, 2u);
    EXPECT_EQ(server->counters().bad_requests, 0u);
}

// A render function that throws (out of memory building a large text) is
// answered 500 and counted; the server goes on serving.
TEST(MetricsHttp, ARenderThatThrowsIsAnswered500) {
    auto loop = make_loop();
    bool fail = true;
    auto s = MetricsHttpServer::open(*loop, *parse_socket_address("127.0.0.1:0"), [&] {
        if (fail) throw std::runtime_error("no counters");
        return std::string("x 1\n");
    });
    ASSERT_TRUE(s) << s.error().message();
    const std::string a = exchange(*loop, (*s)->local_address(), "GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_TRUE(a.starts_with("HTTP/1.1 500")) << a;
    EXPECT_TRUE(a.ends_with("metrics: no counters\n")) << a;
    EXPECT_EQ((*s)->counters().render_errors, 1u);
    EXPECT_EQ((*s)->counters().scrapes, 0u);
    fail = false;
    EXPECT_TRUE(exchange(*loop, (*s)->local_address(), "GET /metrics HTTP/1.1\r\n\r\n").ends_with("\r\n\r\nx 1\n"));
    EXPECT_EQ((*s)->counters().scrapes, 1u);
}

// Out of fds, accept() fails while the connection stays queued, so the
// level-triggered listener is ready at every wake-up: the server pauses
// accepting (counted once) instead of spinning the loop, and takes the
// connection when it resumes.
// The sanitizers' runtime needs descriptors of its own (UBSan probes memory
// through a pipe): with none left it reports errors that are not there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderSanitizer = true;
#else
constexpr bool kUnderSanitizer = false;
#endif
#else
constexpr bool kUnderSanitizer = false;
#endif

TEST_F(MetricsHttpTest, RunningOutOfFdsPausesAcceptingInsteadOfSpinning) {
    if (kUnderSanitizer) GTEST_SKIP() << "no descriptors left for the sanitizers' runtime (run by the g++ build)";
    UniqueFd client = connect_to(server->local_address());
    const std::string request = "GET /metrics HTTP/1.1\r\n\r\n";
    ASSERT_EQ(::send(client.get(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
    rlimit low = old;
    low.rlim_cur = 256;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    std::vector<UniqueFd> filler;
    for (;;) {
        UniqueFd f(::dup(client.get()));
        if (!f) break;
        filler.push_back(std::move(f));
    }
    // A spinning listener fails at every turn; a paused one once per
    // kAcceptPause (more than once only when a busy machine made the 20
    // turns outlast it).
    const auto turns_from = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(loop->run_once(std::chrono::milliseconds(1)).has_value());
    const auto pauses = static_cast<std::uint64_t>((std::chrono::steady_clock::now() - turns_from) /
                                                   MetricsHttpServer::kAcceptPause);
    EXPECT_GE(server->counters().io_errors, 1u);
    EXPECT_LE(server->counters().io_errors, 1u + pauses);
    filler.clear();
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
    std::string answer;
    bool closed = false;
    run_until(*loop, [&] {
        char buf[4096];
        const ssize_t n = ::recv(client.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) answer.append(buf, static_cast<std::size_t>(n));
        if (n == 0) closed = true;
        return closed;
    });
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer;
}

}  // namespace
}  // namespace ipoibd::runtime
