#include "ctl/ctl_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/sys_error.h"
#include "common/unique_fd.h"

namespace ipoibd::ctl {

namespace {

using Clock = std::chrono::steady_clock;

CtlError failed(const std::string& operation, int error) {
    return CtlError{.kind = CtlError::Kind::failed, .message = SysError{operation, error}.message()};
}

CtlError timed_out(const std::string& path, std::chrono::milliseconds timeout) {
    return CtlError{.kind = CtlError::Kind::timeout,
                    .message = "ipoibd did not answer within " + std::to_string(timeout.count()) + " ms on " + path};
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return false;
        pollfd p{.fd = fd, .events = events, .revents = 0};
        const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60'000)));
        if (n > 0) return true;
        if (n < 0 && errno != EINTR) return true;  // let the read or write report it
    }
}

expected<UniqueFd, CtlError> connect_to(const std::string& path, Clock::time_point deadline,
                                        std::chrono::milliseconds timeout) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof addr.sun_path)
        return unexpected(failed("use control socket path '" + path + "'", ENAMETOOLONG));
    std::memcpy(addr.sun_path, path.data(), path.size());
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return unexpected(failed("create a socket", errno));
    for (;;) {
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return fd;
        switch (errno) {
            case EINTR: continue;
            case ENOENT:
            case ENOTDIR:
            case ECONNREFUSED:
                return unexpected(CtlError{.kind = CtlError::Kind::not_running,
                                           .message = "ipoibd is not running (no control socket at " + path + ")"});
            case EACCES:
            case EPERM:
                return unexpected(
                    CtlError{.kind = CtlError::Kind::permission,
                             .message = "permission denied on control socket " + path + " (run as root)"});
            case EAGAIN:  // the daemon's backlog is full: it is busy, try again shortly
                if (Clock::now() >= deadline) return unexpected(timed_out(path, timeout));
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
                continue;
            default: return unexpected(failed("connect to " + path, errno));
        }
    }
}

}  // namespace

expected<std::string, CtlError> ctl_request(const std::string& socket_path, std::string_view command,
                                            std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    auto fd = connect_to(socket_path, deadline, timeout);
    if (!fd) return unexpected(fd.error());

    const std::string request = std::string(command) + "\n";
    std::size_t sent = 0;
    while (sent < request.size()) {
        const ssize_t n = ::send(fd->get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_for(fd->get(), POLLOUT, deadline)) return unexpected(timed_out(socket_path, timeout));
        } else {
            break;  // EPIPE, ECONNRESET: the daemon refused us; its answer says why
        }
    }
    ::shutdown(fd->get(), SHUT_WR);

    std::string answer;
    std::array<char, 16384> buf{};
    for (;;) {
        const ssize_t n = ::recv(fd->get(), buf.data(), buf.size(), 0);
        if (n > 0) {
            answer.append(buf.data(), static_cast<std::size_t>(n));
            if (answer.size() > control::kMaxAnswer)
                return unexpected(CtlError{.kind = CtlError::Kind::failed,
                                           .message = "the answer from " + socket_path + " is longer than " +
                                                      std::to_string(control::kMaxAnswer) + " bytes"});
            continue;
        }
        if (n == 0) break;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_for(fd->get(), POLLIN, deadline)) return unexpected(timed_out(socket_path, timeout));
            continue;
        }
        if (errno == ECONNRESET && !answer.empty()) break;  // answered, then closed with our input unread
        return unexpected(failed("read the answer from " + socket_path, errno));
    }
    if (answer.empty())
        return unexpected(CtlError{.kind = CtlError::Kind::failed,
                                   .message = "ipoibd closed " + socket_path + " without answering"});
    return answer;
}

}  // namespace ipoibd::ctl
