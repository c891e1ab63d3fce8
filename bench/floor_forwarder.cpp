// bench_floor: the floor rows of bench/tunnel.sh. The least a userspace
// TUN <-> UDP tunnel can do on this machine: one thread, one TUN queue, one
// connected UDP socket, each packet read and written once, no protocol, no
// header, no checks. ipoibd's rows are measured against it: whatever ipoibd
// costs beyond this is its own (its headers and CRCs, the switch, the
// engine, the event loop).
//
//   bench_floor --tun NAME --local ADDR:PORT --remote ADDR:PORT [--busy-poll US]
//               [--unconnected] [--epoll] [--gro] [--vnet-hdr]
//
// Sleeping (the default): poll() on both descriptors. With --busy-poll US
// the loop polls both descriptors without sleeping for US microseconds
// after it moved a packet, yielding the CPU between empty polls, then
// sleeps again: the policy of ipoibd's [daemon] busy-poll without its
// early end under load. The TUN is created here (no offloads, no packet
// information header); the caller gives it an address, an MTU and brings it
// up. Stops on SIGTERM or SIGINT and prints what it moved.
//
// --unconnected and --epoll make it more like ipoibd, to tell what each
// costs: an unconnected socket with the address in every send (a route
// lookup per datagram, as ipoibd's one socket for every peer), and epoll
// instead of poll; --gro turns UDP_GRO on (as ipoibd's soft port), and
// --vnet-hdr opens the TUN with a virtio-net header and TSO offloads (as
// ipoibd's TUN), the header carried over UDP as it is (both ends alike).
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/udp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "bench_floor: %s\n", what.c_str());
    std::exit(2);
}

sockaddr_in parse_endpoint(std::string_view s) {
    const auto colon = s.rfind(':');
    if (colon == std::string_view::npos) die("not ADDR:PORT: " + std::string(s));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    const std::string host(s.substr(0, colon));
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) die("not an IPv4 address: " + host);
    char* end = nullptr;
    const unsigned long port = std::strtoul(std::string(s.substr(colon + 1)).c_str(), &end, 10);
    if (end == nullptr || *end != '\0' || port == 0 || port > 65535) die("not a port: " + std::string(s.substr(colon + 1)));
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    return a;
}

int open_tun(const std::string& name, bool vnet_hdr) {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) die(std::string("/dev/net/tun: ") + std::strerror(errno));
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0);
    if (name.size() >= IFNAMSIZ) die("TUN name too long: " + name);
    std::memcpy(ifr.ifr_name, name.c_str(), name.size());
    if (::ioctl(fd, TUNSETIFF, &ifr) < 0) die("TUNSETIFF " + name + ": " + std::strerror(errno));
    if (vnet_hdr && ::ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) < 0)
        die(std::string("TUNSETOFFLOAD: ") + std::strerror(errno));
    return fd;
}

struct Counts {
    unsigned long long to_udp = 0, to_tun = 0, send_errors = 0, write_errors = 0, polls = 0, empty_polls = 0;
};

}  // namespace

int main(int argc, char** argv) {
    std::string tun, local, remote;
    long busy_us = 0;
    bool unconnected = false, use_epoll = false, gro = false, vnet_hdr = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die(std::string(a) + " needs a value");
            return argv[++i];
        };
        if (a == "--tun") tun = value();
        else if (a == "--local") local = value();
        else if (a == "--remote") remote = value();
        else if (a == "--unconnected") unconnected = true;
        else if (a == "--epoll") use_epoll = true;
        else if (a == "--gro") gro = true;
        else if (a == "--vnet-hdr") vnet_hdr = true;
        else if (a == "--busy-poll") {
            const std::string v = value();
            char* end = nullptr;
            busy_us = std::strtol(v.c_str(), &end, 10);
            if (end == nullptr || *end != '\0' || busy_us < 0 || busy_us > 1'000'000) die("--busy-poll: 0 to 1000000 us: " + v);
        } else {
            die("unknown argument " + std::string(a) +
                " (usage: bench_floor --tun NAME --local ADDR:PORT --remote ADDR:PORT [--busy-poll US] [--unconnected] "
                "[--epoll] [--gro] [--vnet-hdr])");
        }
    }
    if (tun.empty() || local.empty() || remote.empty()) die("--tun, --local and --remote are required");

    const sockaddr_in la = parse_endpoint(local), ra = parse_endpoint(remote);
    const int tfd = open_tun(tun, vnet_hdr);
    const int ufd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ufd < 0) die(std::string("socket: ") + std::strerror(errno));
    const int buf = 4 << 20;
    (void)::setsockopt(ufd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    (void)::setsockopt(ufd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    const int one = 1;
    if (gro && ::setsockopt(ufd, IPPROTO_UDP, UDP_GRO, &one, sizeof one) < 0) die(std::string("UDP_GRO: ") + std::strerror(errno));
    if (::bind(ufd, reinterpret_cast<const sockaddr*>(&la), sizeof la) < 0) die("bind " + local + ": " + std::strerror(errno));
    if (!unconnected && ::connect(ufd, reinterpret_cast<const sockaddr*>(&ra), sizeof ra) < 0)
        die("connect " + remote + ": " + std::strerror(errno));
    int ep = -1;
    if (use_epoll) {
        ep = ::epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) die(std::string("epoll_create1: ") + std::strerror(errno));
        for (int fd : {tfd, ufd}) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.fd = fd;
            if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die(std::string("epoll_ctl: ") + std::strerror(errno));
        }
    }

    struct sigaction sa{};
    sa.sa_handler = on_signal;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);

    using Clock = std::chrono::steady_clock;
    const auto window = std::chrono::microseconds(busy_us);
    Clock::time_point busy_until{};
    Counts n;
    static unsigned char packet[65536];
    // Moves what is ready (at most 64 packets each way); how many moved.
    auto serve = [&]() {
        unsigned moved = 0;
        for (int k = 0; k < 64; ++k) {
            const ssize_t r = ::read(tfd, packet, sizeof packet);
            if (r <= 0) break;
            const ssize_t sent = unconnected ? ::sendto(ufd, packet, static_cast<std::size_t>(r), 0,
                                                        reinterpret_cast<const sockaddr*>(&ra), sizeof ra)
                                             : ::send(ufd, packet, static_cast<std::size_t>(r), 0);
            if (sent < 0)
                ++n.send_errors;
            else
                ++n.to_udp;
            ++moved;
        }
        for (int k = 0; k < 64; ++k) {
            // With UDP_GRO one read may hold several datagrams of one size
            // (the last may be shorter): each is a packet for the TUN.
            iovec iov{packet, sizeof packet};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
            msghdr h{};
            h.msg_iov = &iov;
            h.msg_iovlen = 1;
            h.msg_control = control;
            h.msg_controllen = sizeof control;
            const ssize_t r = ::recvmsg(ufd, &h, 0);
            if (r <= 0) break;
            std::size_t segment = static_cast<std::size_t>(r);
            for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
                if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
                    int size = 0;
                    std::memcpy(&size, CMSG_DATA(c), sizeof size);
                    if (size > 0) segment = static_cast<std::size_t>(size);
                }
            }
            for (std::size_t off = 0; off < static_cast<std::size_t>(r); off += segment) {
                const std::size_t len = std::min(segment, static_cast<std::size_t>(r) - off);
                if (::write(tfd, packet + off, len) < 0)
                    ++n.write_errors;
                else
                    ++n.to_tun;
            }
            ++moved;
        }
        return moved;
    };
    std::fprintf(stderr, "bench_floor: %s <-> %s -> %s, %s\n", tun.c_str(), local.c_str(), remote.c_str(),
                 busy_us ? ("busy polling " + std::to_string(busy_us) + " us after traffic").c_str() : "sleeping");
    while (!g_stop) {
        if (busy_us && Clock::now() < busy_until) {
            ++n.polls;
            if (serve()) {
                busy_until = Clock::now() + window;
            } else {
                ++n.empty_polls;
                ::sched_yield();
            }
            continue;
        }
        int r = 0;
        if (use_epoll) {
            epoll_event evs[2];
            r = ::epoll_wait(ep, evs, 2, 1000);
        } else {
            pollfd fds[2] = {{.fd = tfd, .events = POLLIN, .revents = 0}, {.fd = ufd, .events = POLLIN, .revents = 0}};
            r = ::poll(fds, 2, 1000);
        }
        if (r < 0 && errno != EINTR) die(std::string("poll: ") + std::strerror(errno));
        if (r > 0 && serve() && busy_us) busy_until = Clock::now() + window;
    }
    std::fprintf(stderr, "bench_floor: %llu packets sent to UDP, %llu written to the TUN, %llu send and %llu write errors, %llu busy polls (%llu empty)\n",
                 n.to_udp, n.to_tun, n.send_errors, n.write_errors, n.polls, n.empty_polls);
    return 0;
}
