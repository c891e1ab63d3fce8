#include "runtime/metrics_http.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace ipoibd::runtime {

void visit(const MetricsHttpCounters& c, CounterSink& out) {
    out.counter("scrapes", c.scrapes);
    out.counter("bad_requests", c.bad_requests);
    out.counter("rejected_busy", c.rejected_busy);
    out.counter("timeouts", c.timeouts);
    out.counter("io_errors", c.io_errors);
    out.counter("render_errors", c.render_errors);
}

namespace {

// With_body false: the answer to HEAD, the same headers as GET's, the
// Content-Length too (RFC 9110 8.6), without the content.
std::string http_answer(int status, std::string_view reason, std::string_view content_type, std::string_view body,
                        bool with_body = true) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\n";
    out += "Content-Type: " + std::string(content_type) + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += "Connection: close\r\n\r\n";
    if (with_body) out += body;
    return out;
}

// Bytes of the request head in `request`, its blank line included, or npos
// while it is incomplete.
std::size_t head_length(std::string_view request) {
    const auto crlf = request.find("\r\n\r\n");
    const auto lf = request.find("\n\n");
    if (crlf == std::string_view::npos && lf == std::string_view::npos) return std::string_view::npos;
    if (lf == std::string_view::npos || (crlf != std::string_view::npos && crlf < lf)) return crlf + 4;
    return lf + 2;
}

// Reads what a client sent beyond the request head (a pipelined request, a
// body) before closing: TCP's close() with unread input sends a reset and
// throws away what is still in the send queue, so a large answer to a slow
// reader would arrive cut (and the scraper wait for the rest). Bounded, so
// a client that keeps writing cannot hold the loop.
void discard_input(int fd) {
    char buf[4096];
    for (int i = 0; i < 16; ++i)
        if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) return;
}

}  // namespace

expected<std::unique_ptr<MetricsHttpServer>, SysError> MetricsHttpServer::open(EventLoop& loop,
                                                                               const SocketAddress& listen,
                                                                               Render render,
                                                                               MetricsHttpLimits limits) {
    std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(loop, std::move(render), limits));
    s->listener_ = UniqueFd(::socket(listen.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s->listener_) return unexpected(SysError{"socket", errno});
    const int one = 1;
    ::setsockopt(s->listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s->listener_.get(), listen.get(), listen.length) != 0)
        return unexpected(SysError{"bind " + listen.to_string(), errno});
    if (::listen(s->listener_.get(), 16) != 0) return unexpected(SysError{"listen", errno});
    MetricsHttpServer* self = s.get();
    if (auto r = loop.add_fd(s->listener_.get(), [self] { self->on_listener_ready(); }); !r) return unexpected(r.error());
    return s;
}

MetricsHttpServer::~MetricsHttpServer() {
    loop_.cancel_timer(resume_accept_);
    while (!clients_.empty()) close_client(clients_.begin()->first);
    if (listener_) loop_.remove_fd(listener_.get());
}

SocketAddress MetricsHttpServer::local_address() const {
    SocketAddress a;
    a.length = sizeof a.storage;
    ::getsockname(listener_.get(), a.get(), &a.length);
    return a;
}

void MetricsHttpServer::on_listener_ready() {
    for (std::size_t i = 0; i < kAcceptBatch; ++i) {
        UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            ++counters_.io_errors;
            // The connection stays queued: the listener would be ready at
            // every wake-up until an fd is free.
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause_accepting();
            return;
        }
        if (clients_.size() >= limits_.max_clients) {
            ++counters_.rejected_busy;
            const std::string busy = http_answer(503, "Service Unavailable", "text/plain", "too many clients\n");
            (void)::send(fd.get(), busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            discard_input(fd.get());
            continue;
        }
        const int raw = fd.get();
        auto c = std::make_unique<Client>();
        c->fd = std::move(fd);
        c->timeout = loop_.add_timer_after(limits_.client_timeout, [this, raw] {
            ++counters_.timeouts;
            close_client(raw);
        });
        clients_.emplace(raw, std::move(c));
        if (!loop_.add_fd(raw, [this, raw] { on_client_ready(raw); })) {
            ++counters_.io_errors;
            close_client(raw);
        }
    }
}

void MetricsHttpServer::pause_accepting() {
    loop_.remove_fd(listener_.get());
    resume_accept_ = loop_.add_timer_after(kAcceptPause, [this] {
        resume_accept_ = {};
        if (!loop_.add_fd(listener_.get(), [this] { on_listener_ready(); })) pause_accepting();
    });
}

void MetricsHttpServer::on_client_ready(int fd) {
    const auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = *it->second;
    if (c.lingering) {
        read_lingering(fd);
        return;
    }
    if (!c.answer.empty()) {
        write_answer(fd);
        return;
    }
    char buf[1024];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if ((n == 0 && c.request.empty()) || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (n < 0) ++counters_.io_errors;
        close_client(fd);  // connected and closed: a port check, nothing to answer
        return;
    }
    if (n < 0) return;
    c.request.append(buf, static_cast<std::size_t>(n));
    // RFC 9112 2.2: empty lines before the request line are ignored (some
    // clients send a CRLF after a previous request's body).
    c.request.erase(0, std::min(c.request.find_first_not_of("\r\n"), c.request.size()));
    if (c.request.empty() && n > 0) return;
    if (n == 0) {  // shut down writing before the end of the head
        ++counters_.bad_requests;
        c.answer = http_answer(400, "Bad Request", "text/plain", "incomplete request head\n");
    } else if (const std::size_t head = head_length(c.request);
               head == std::string::npos ? c.request.size() > limits_.max_request : head > limits_.max_request) {
        ++counters_.bad_requests;
        c.answer = http_answer(400, "Bad Request", "text/plain", "request too long\n");
    } else if (head == std::string::npos) {
        return;  // the rest of the head later
    } else {
        respond(c);
    }
    (void)loop_.set_interest(fd, EventLoop::Interest::writable);
    write_answer(fd);
}

void MetricsHttpServer::respond(Client& c) {
    const std::string_view req(c.request);
    const std::string_view line = req.substr(0, req.find_first_of("\r\n"));
    const auto sp1 = line.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) {
        ++counters_.bad_requests;
        c.answer = http_answer(400, "Bad Request", "text/plain", "not an HTTP request\n");
        return;
    }
    const std::string_view method = line.substr(0, sp1);
    const bool with_body = method != "HEAD";  // a HEAD answer never has content
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    if (target != "/metrics") {
        ++counters_.bad_requests;
        c.answer = http_answer(404, "Not Found", "text/plain", "the metrics are at /metrics\n", with_body);
        return;
    }
    if (method != "GET" && method != "HEAD") {
        ++counters_.bad_requests;
        c.answer = http_answer(405, "Method Not Allowed", "text/plain", "GET /metrics\n");
        return;
    }
    std::string text;
    try {
        text = render_();
    } catch (const std::exception& e) {
        ++counters_.render_errors;
        c.answer = http_answer(500, "Internal Server Error", "text/plain", std::string("metrics: ") + e.what() + "\n",
                               with_body);
        return;
    }
    ++counters_.scrapes;
    c.answer = http_answer(200, "OK", "text/plain; version=0.0.4; charset=utf-8", text, with_body);
}

void MetricsHttpServer::write_answer(int fd) {
    const auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = *it->second;
    while (c.written < c.answer.size()) {
        const ssize_t n = ::send(fd, c.answer.data() + c.written, c.answer.size() - c.written, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c.written += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        ++counters_.io_errors;
        close_client(fd);
        return;
    }
    linger(fd, c);
}

void MetricsHttpServer::linger(int fd, Client& c) {
    c.lingering = true;
    c.answer.clear();
    c.answer.shrink_to_fit();
    c.request.clear();
    c.request.shrink_to_fit();
    loop_.cancel_timer(c.timeout);
    if (::shutdown(fd, SHUT_WR) != 0 || !loop_.set_interest(fd, EventLoop::Interest::readable)) {
        discard_input(fd);
        close_client(fd);
        return;
    }
    c.timeout = loop_.add_timer_after(kLinger, [this, fd] {
        discard_input(fd);
        close_client(fd);
    });
    read_lingering(fd);
}

// Bounded per wake-up like discard_input(); the client's close (or an
// error) ends the connection, the linger timer at the latest.
void MetricsHttpServer::read_lingering(int fd) {
    char buf[4096];
    for (int i = 0; i < 16; ++i) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        close_client(fd);
        return;
    }
}

void MetricsHttpServer::close_client(int fd) {
    const auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    loop_.cancel_timer(it->second->timeout);
    loop_.remove_fd(fd);
    clients_.erase(it);
}

}  // namespace ipoibd::runtime
