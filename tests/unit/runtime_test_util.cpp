#include "runtime_test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ctl/json.h"

namespace ipoibd::runtime::test {

namespace fs = std::filesystem;

TempDir::TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ipoibd-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
}

TempDir::~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
        ::setenv(name, value, 1);
    else
        ::unsetenv(name);
}

ScopedEnv::~ScopedEnv() {
    if (old_)
        ::setenv(name_.c_str(), old_->c_str(), 1);
    else
        ::unsetenv(name_.c_str());
}

Pipe::Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) std::abort();
    read.reset(fds[0]);
    write.reset(fds[1]);
}

std::string Pipe::drain() const {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(read.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    return out;
}

std::unique_ptr<EventLoop> make_loop() {
    auto loop = EventLoop::create();
    if (!loop) {
        ADD_FAILURE() << loop.error().message();
        std::abort();
    }
    return std::move(*loop);
}

std::string echo_handler(std::string_view command) {
    ctl::JsonWriter w;
    w.begin_object().field("command", command).end_object();
    return w.take();
}

UniqueFd connect_raw(const std::string& path) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) ADD_FAILURE() << std::strerror(errno);
    return fd;
}

std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    for (;;) {
        pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
        if (::poll(&p, 1, 2000) <= 0) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
}

void send_text(int fd, std::string_view text) {
    ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
}

}  // namespace ipoibd::runtime::test
