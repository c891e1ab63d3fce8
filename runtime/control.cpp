#include "runtime/control.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>

#include "ctl/json.h"

namespace ipoibd::runtime {

void visit(const ControlCounters& c, CounterSink& out) {
    out.counter("accepted", c.accepted);
    out.counter("answered", c.answered);
    out.counter("rejected_busy", c.rejected_busy);
    out.counter("oversize", c.oversize);
    out.counter("unknown_command", c.unknown_command);
    out.counter("timeouts", c.timeouts);
    out.counter("handler_errors", c.handler_errors);
    out.counter("io_errors", c.io_errors);
}

namespace {

// Reads what a client sent beyond its request line before closing: closing
// a Unix socket with unread input makes the peer's read fail with
// ECONNRESET instead of returning our answer and EOF. Bounded, so a client
// that keeps writing cannot hold the loop.
void discard_input(int fd) {
    std::array<char, 4096> buf{};
    for (int i = 0; i < 16; ++i)
        if (::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT) <= 0) return;
}

// One non-blocking attempt; for short error answers that fit the socket
// buffer of a fresh connection.
void send_once(int fd, const std::string& text) {
    [[maybe_unused]] auto n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

expected<sockaddr_un, SysError> unix_address(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof addr.sun_path)
        return unexpected(SysError{"use control socket path '" + path + "'", ENAMETOOLONG});
    std::memcpy(addr.sun_path, path.data(), path.size());
    return addr;
}

// Why `st`, a directory on the way to the socket, is not safe: someone but
// root and us may replace what is in it (its owner, or group and others
// without the sticky bit); nullopt when it is safe.
std::optional<std::string> unsafe_directory(const struct stat& st) {
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
        return "owned by uid " + std::to_string(st.st_uid) + ", neither root nor this process";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
        return std::string("group or others may write to it, without the sticky bit");
    return std::nullopt;
}

// The directory the socket lives in, created 0700 when missing. An existing
// one keeps its mode, but must be safe: whoever may write to it could swap
// the socket for a symbolic link between bind() and chmod() (we would chmod
// the link's target) or for a socket of their own that ipoibctl trusts. So
// it belongs to root or to us, and group and others may not write to it
// unless the sticky bit keeps them off our socket (as in /tmp). The same
// holds for every directory above it (as OpenSSH's checks of its keys):
// whoever may write to one could rename ours away and put their own in its
// place.
expected<void, SysError> make_socket_dir(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) return {};
    const std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) == 0) {
        if (::chmod(dir.c_str(), 0700) < 0) return unexpected(SysError{"set mode 0700 on " + dir, errno});
    } else {
        if (errno != EEXIST) return unexpected(SysError{"create directory " + dir, errno});
        struct stat st {};
        if (::stat(dir.c_str(), &st) < 0) return unexpected(SysError{"stat " + dir, errno});
        if (!S_ISDIR(st.st_mode))
            return unexpected(SysError{"use " + dir + " as the control socket directory", ENOTDIR});
        if (const auto why = unsafe_directory(st))
            return unexpected(SysError{"use " + dir + " as the control socket directory (" + *why + ")", EPERM});
    }
    char* real = ::realpath(dir.c_str(), nullptr);
    if (!real) return unexpected(SysError{"resolve " + dir, errno});
    std::string above(real);
    std::free(real);
    while (above != "/") {
        above.resize(std::max<std::size_t>(above.rfind('/'), 1));
        struct stat st {};
        if (::stat(above.c_str(), &st) < 0) return unexpected(SysError{"stat " + above, errno});
        if (const auto why = unsafe_directory(st))
            return unexpected(SysError{"use " + dir + " as the control socket directory (" + above + " above it is " +
                                           "not safe: " + *why + ")",
                                       EPERM});
    }
    return {};
}

// What is at `path` when bind() says it is in use.
enum class Occupant { daemon, stale, gone };

expected<Occupant, SysError> probe(const std::string& path, const sockaddr_un& addr) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) < 0) {
        if (errno == ENOENT) return Occupant::gone;
        return unexpected(SysError{"stat " + path, errno});
    }
    if (!S_ISSOCK(st.st_mode))
        return unexpected(SysError{"bind control socket " + path + " (the path exists and is not a socket)", EEXIST});
    UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s) return unexpected(SysError{"create a socket to probe " + path, errno});
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return Occupant::daemon;
    if (errno == EAGAIN || errno == EINPROGRESS) return Occupant::daemon;  // listening, backlog full
    if (errno == ECONNREFUSED) return Occupant::stale;
    if (errno == ENOENT) return Occupant::gone;
    return unexpected(SysError{"probe control socket " + path, errno});
}

}  // namespace

ControlServer::ControlServer(EventLoop& loop, std::string path, Handler handler, ControlLimits limits,
                             ctl::control::CommandSet commands)
    : loop_(loop), path_(std::move(path)), handler_(std::move(handler)), limits_(limits), commands_(commands) {}

expected<std::unique_ptr<ControlServer>, SysError> ControlServer::open(EventLoop& loop, std::string path,
                                                                       Handler handler, ControlLimits limits,
                                                                       ctl::control::CommandSet commands) {
    std::unique_ptr<ControlServer> server(
        new ControlServer(loop, std::move(path), std::move(handler), limits, commands));
    if (auto r = server->listen(); !r) return unexpected(r.error());
    return server;
}

expected<void, SysError> ControlServer::listen() {
    auto addr = unix_address(path_);
    if (!addr) return unexpected(addr.error());
    if (auto r = make_socket_dir(path_); !r) return r;
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return unexpected(SysError{"create control socket", errno});

    const auto* sa = reinterpret_cast<const sockaddr*>(&*addr);
    bool bound = false;
    for (int attempt = 0; attempt < 3 && !bound; ++attempt) {
        if (::bind(fd.get(), sa, sizeof *addr) == 0) {
            bound = true;
            break;
        }
        if (errno != EADDRINUSE) return unexpected(SysError{"bind control socket " + path_, errno});
        auto occupant = probe(path_, *addr);
        if (!occupant) return unexpected(occupant.error());
        if (*occupant == Occupant::daemon)
            return unexpected(SysError{"bind control socket " + path_ + " (another ipoibd answers on it)", EADDRINUSE});
        if (*occupant == Occupant::stale && ::unlink(path_.c_str()) < 0 && errno != ENOENT)
            return unexpected(SysError{"remove stale control socket " + path_, errno});
    }
    if (!bound) return unexpected(SysError{"bind control socket " + path_, EADDRINUSE});

    // Nothing can connect before listen(), so the mode is right before the
    // first client.
    if (::chmod(path_.c_str(), 0600) < 0) {
        const int e = errno;
        ::unlink(path_.c_str());
        return unexpected(SysError{"set mode 0600 on " + path_, e});
    }
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0) {
        socket_dev_ = st.st_dev;
        socket_ino_ = st.st_ino;
    }
    if (::listen(fd.get(), static_cast<int>(limits_.max_clients)) < 0) {
        const int e = errno;
        ::unlink(path_.c_str());
        return unexpected(SysError{"listen on control socket " + path_, e});
    }
    if (auto r = loop_.add_fd(fd.get(), [this] { on_listener_ready(); }); !r) {
        ::unlink(path_.c_str());
        return r;
    }
    listener_ = std::move(fd);
    return {};
}

ControlServer::~ControlServer() {
    loop_.cancel_timer(resume_accept_);
    while (!clients_.empty()) close_client(clients_.begin()->first);
    if (!listener_) return;
    loop_.remove_fd(listener_.get());
    listener_.reset();
    // Only our own socket: never a file that replaced it.
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == socket_dev_ && st.st_ino == socket_ino_)
        ::unlink(path_.c_str());
}

void ControlServer::on_listener_ready() {
    for (std::size_t i = 0; i < kAcceptBatch; ++i) {
        UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (fd) {
            if (clients_.size() >= limits_.max_clients)
                reject_busy(std::move(fd));
            else
                accept_client(std::move(fd));
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        ++counters_.io_errors;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause_accepting();
        return;
    }
}

void ControlServer::pause_accepting() {
    loop_.remove_fd(listener_.get());
    resume_accept_ = loop_.add_timer_after(kAcceptPause, [this] {
        resume_accept_ = {};
        if (!loop_.add_fd(listener_.get(), [this] { on_listener_ready(); })) pause_accepting();
    });
}

void ControlServer::reject_busy(UniqueFd fd) {
    ++counters_.rejected_busy;
    send_once(fd.get(), ctl::json_error("too many clients (" + std::to_string(limits_.max_clients) +
                                   " connections are being served); try again") + "\n");
    discard_input(fd.get());
}

void ControlServer::accept_client(UniqueFd fd) {
    const int raw = fd.get();
    auto client = std::make_unique<Client>();
    client->fd = std::move(fd);
    if (!loop_.add_fd(raw, [this, raw] { on_client_ready(raw); })) {
        ++counters_.io_errors;
        return;
    }
    client->timeout = loop_.add_timer_after(limits_.client_timeout, [this, raw] { on_timeout(raw); });
    clients_.emplace(raw, std::move(client));
    ++counters_.accepted;
}

void ControlServer::on_client_ready(int fd) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = *it->second;
    if (c.answering)
        write_answer(c);
    else
        read_request(c);
    // c may be gone here
}

void ControlServer::read_request(Client& c) {
    // Never more than the limit: the buffer holds at most max_request bytes.
    std::array<char, 512> buf{};
    const std::size_t room = std::min(buf.size(), limits_.max_request - c.request.size());
    const ssize_t n = ::recv(c.fd.get(), buf.data(), room, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        ++counters_.io_errors;
        close_client(c.fd.get());
        return;
    }
    if (n == 0) {  // the client shut down writing: what it sent is the request
        if (c.request.empty())
            close_client(c.fd.get());
        else
            answer(c, std::string(c.request));
        return;
    }
    c.request.append(buf.data(), static_cast<std::size_t>(n));
    if (const auto nl = c.request.find('\n'); nl != std::string::npos) {
        answer(c, c.request.substr(0, nl));
        return;
    }
    if (c.request.size() >= limits_.max_request) {
        ++counters_.oversize;
        c.answer = ctl::json_error("request longer than " + std::to_string(limits_.max_request) + " bytes") + "\n";
        c.answering = true;
        write_answer(c);
    }
}

void ControlServer::answer(Client& c, std::string_view line) {
    c.answering = true;
    const auto request = ctl::control::parse_request(line, commands_);
    if (!request) {
        ++counters_.unknown_command;
        ctl::JsonWriter w;
        w.begin_object().field("error", "unknown command '" + std::string(line) + "'").key("commands").begin_array();
        for (auto name : commands_.commands) w.value(name);
        w.end_array().end_object();
        c.answer = w.take();
    } else {
        try {
            c.answer = handler_(request->text());
            ++counters_.answered;
        } catch (const std::exception& e) {
            ++counters_.handler_errors;
            c.answer = ctl::json_error(std::string("internal error: ") + e.what());
        }
    }
    if (c.answer.empty() || c.answer.back() != '\n') c.answer += '\n';
    write_answer(c);
}

void ControlServer::write_answer(Client& c) {
    while (c.written < c.answer.size()) {
        const ssize_t n =
            ::send(c.fd.get(), c.answer.data() + c.written, c.answer.size() - c.written, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c.written += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // The rest when the client has read some; the timeout still runs.
            if (!loop_.set_interest(c.fd.get(), EventLoop::Interest::writable)) break;
            return;
        }
        ++counters_.io_errors;  // the client went away
        break;
    }
    discard_input(c.fd.get());
    close_client(c.fd.get());
}

void ControlServer::on_timeout(int fd) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    it->second->timeout = {};  // fired
    ++counters_.timeouts;
    if (!it->second->answering) {
        send_once(fd, ctl::json_error("timed out waiting for the request") + "\n");
        discard_input(fd);
    }
    close_client(fd);
}

void ControlServer::close_client(int fd) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    loop_.cancel_timer(it->second->timeout);
    loop_.remove_fd(fd);
    clients_.erase(it);  // closes the fd
}

}  // namespace ipoibd::runtime
