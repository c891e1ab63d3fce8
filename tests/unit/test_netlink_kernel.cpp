// Kernel tests: the TUN, the request socket and the monitor against a real
// kernel. Each test forks a child that moves into a network namespace of its
// own (unshare(CLONE_NEWNET)) and runs its checks there, so nothing touches
// the host's interfaces, addresses or routes; the namespace dies with the
// child. The child reports each failed check as a line on a pipe, and the
// parent turns the lines into gtest failures. Skipped (not failed) when not
// root, when unshare is refused (an unprivileged container) or when
// /dev/net/tun is missing.
//
// Addresses: 198.18.0.0/15 and 2001:db8::/32 only (DESIGN.md, "Test
// networks").
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <chrono>
#include <cstring>
#include <functional>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sstream>

#include "netlink/monitor.h"
#include "netlink/netlink_socket.h"
#include "netlink/next_hop_cache.h"
#include "host/tun.h"
#include "host/tun_offload.h"
#include "host/tun_port.h"
#include "test_netlink_util.h"

namespace ipoibd::netlink {
namespace {

using namespace std::chrono_literals;
using host::open_tun;
using host::TunCoalescer;
using host::VirtioNetHeader;
using host::checksum_add;
using host::checksum_fold;
using test::ip;
using test::prefix;

constexpr int kSkipStatus = 77;
constexpr auto kChildTimeout = 30s;

// The child's side: failed checks go to the parent as lines on a pipe.
class ChildChecks {
public:
    explicit ChildChecks(int fd) : fd_(fd) {}
    bool expect(bool ok, int line, const std::string& what) {
        if (!ok) {
            failed_ = true;
            send("FAIL line " + std::to_string(line) + ": " + what);
        }
        return ok;
    }
    void skip(const std::string& why) { send("SKIP " + why); }
    bool failed() const { return failed_; }

private:
    void send(std::string line) {
        line += '\n';
        for (std::size_t done = 0; done < line.size();) {
            const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
            if (n <= 0) return;
            done += static_cast<std::size_t>(n);
        }
    }
    int fd_;
    bool failed_ = false;
};

template <class Result>
std::string error_text(const Result& r) {
    return r ? std::string() : r.error().message();
}

#define NS_CHECK(checks, cond) (checks).expect(static_cast<bool>(cond), __LINE__, #cond)
#define NS_OK(checks, result) \
    (checks).expect(static_cast<bool>(result), __LINE__, std::string(#result) + ": " + error_text(result))

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Reads the child's lines until it closes the pipe or the deadline passes.
std::string read_child(int fd, pid_t pid) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + kChildTimeout;
    char buffer[512];
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n <= 0) return out;
        out.append(buffer, static_cast<std::size_t>(n));
    }
    ::kill(pid, SIGKILL);
    return out + "FAIL the child did not finish within " + std::to_string(kChildTimeout.count()) + " s\n";
}

// Runs `body` in a child process inside a new network namespace.
void run_in_own_netns(const std::function<void(ChildChecks&)>& body) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a network namespace";
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0) << std::strerror(errno);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
        ::close(fds[0]);
        ChildChecks checks(fds[1]);
        if (::unshare(CLONE_NEWNET) != 0) {
            checks.skip(std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno));
            ::_exit(kSkipStatus);
        }
        if (::access("/dev/net/tun", R_OK | W_OK) != 0) {
            checks.skip("no /dev/net/tun");
            ::_exit(kSkipStatus);
        }
        body(checks);
        ::_exit(checks.failed() ? 1 : 0);  // no atexit handlers, no gtest teardown in the child
    }
    ::close(fds[1]);
    const std::string output = read_child(fds[0], pid);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);

    std::istringstream lines(output);
    std::string line, skip_reason;
    while (std::getline(lines, line)) {
        if (line.rfind("SKIP ", 0) == 0)
            skip_reason = line.substr(5);
        else
            ADD_FAILURE() << line;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == kSkipStatus) GTEST_SKIP() << skip_reason;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child wait status " << status;
}

// Drains the monitor until `done` holds for the events so far, or 2 s pass.
std::vector<MonitorEvent> drain_until(RtnlMonitor& monitor, const std::function<bool(const std::vector<MonitorEvent>&)>& done) {
    std::vector<MonitorEvent> events;
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (!done(events) && std::chrono::steady_clock::now() < deadline) {
        pollfd p{.fd = monitor.fd(), .events = POLLIN, .revents = 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        for (auto& e : monitor.drain()) events.push_back(std::move(e));
    }
    return events;
}

bool has_address(const std::vector<AddressInfo>& list, const IpPrefix& p) {
    return std::any_of(list.begin(), list.end(), [&](const AddressInfo& a) { return a.prefix == p; });
}

TEST(NetlinkKernel, TunIsCreatedNonBlockingAndGoesAwayWithItsFd) {
    run_in_own_netns([](ChildChecks& c) {
        auto tun = open_tun({.name = "nltest0"});
        if (!NS_OK(c, tun)) return;
        NS_CHECK(c, tun->name == "nltest0");
        NS_CHECK(c, tun->ifindex != 0 && tun->ifindex == ::if_nametoindex("nltest0"));
        NS_CHECK(c, (::fcntl(tun->fd.get(), F_GETFL) & O_NONBLOCK) != 0);
        char packet[64];
        NS_CHECK(c, ::read(tun->fd.get(), packet, sizeof packet) < 0 && errno == EAGAIN);

        // A pattern gets the kernel's choice; the same name twice is busy.
        auto pattern = open_tun({.name = "nlt%d"});
        if (NS_OK(c, pattern)) NS_CHECK(c, pattern->name == "nlt0");
        auto busy = open_tun({.name = "nlt0"});
        NS_CHECK(c, !busy && busy.error().message() == "could not create TUN nlt0: Device or resource busy");
        auto too_long = open_tun({.name = "nltest-name-too-long"});
        NS_CHECK(c, !too_long && contains(too_long.error().message(), "could not create TUN nltest-name-too-long"));

        // persist = false: closing the only fd removes the device.
        tun->fd.reset();
        NS_CHECK(c, ::if_nametoindex("nltest0") == 0);
    });
}

TEST(NetlinkKernel, ConfiguresTheTunAndLooksUpNextHops) {
    run_in_own_netns([](ChildChecks& c) {
        auto tun = open_tun({.name = "nltest0"});
        auto nl = NetlinkSocket::open();
        if (!NS_OK(c, tun) || !NS_OK(c, nl)) return;
        const std::uint32_t index = tun->ifindex;

        auto mtu = nl->set_mtu(index, 2044);
        NS_OK(c, mtu);
        auto v4 = nl->add_address(index, prefix("198.18.5.1/24"));
        NS_OK(c, v4);
        auto v6 = nl->add_address(index, prefix("2001:db8:5::1/64"), {.nodad = true});
        NS_OK(c, v6);
        auto up = nl->set_link_up(index, true);
        NS_OK(c, up);
        auto link = nl->get_link(index);
        if (NS_OK(c, link)) {
            NS_CHECK(c, link->mtu == 2044);
            NS_CHECK(c, link->up());
            NS_CHECK(c, link->name == "nltest0");
        }

        auto route = nl->add_route({.destination = prefix("198.19.5.0/24"), .gateway = ip("198.18.5.2"), .oif = index});
        NS_OK(c, route);
        auto via = nl->lookup_next_hop(ip("198.19.5.7"));
        if (NS_OK(c, via)) {
            NS_CHECK(c, via->address == ip("198.18.5.2"));
            NS_CHECK(c, via->via_gateway);
            NS_CHECK(c, via->oif == index);
        }
        auto on_link = nl->lookup_next_hop(ip("198.18.5.9"));
        if (NS_OK(c, on_link)) {
            NS_CHECK(c, on_link->address == ip("198.18.5.9"));
            NS_CHECK(c, !on_link->via_gateway);
            NS_CHECK(c, on_link->oif == index);
        }
        auto route6 = nl->add_route({.destination = prefix("2001:db8:6::/64"), .gateway = ip("2001:db8:5::2"), .oif = index});
        NS_OK(c, route6);
        auto via6 = nl->lookup_next_hop(ip("2001:db8:6::7"));
        if (NS_OK(c, via6)) NS_CHECK(c, via6->address == ip("2001:db8:5::2") && via6->oif == index);
        auto on_link6 = nl->lookup_next_hop(ip("2001:db8:5::9"));
        if (NS_OK(c, on_link6)) NS_CHECK(c, on_link6->address == ip("2001:db8:5::9") && !on_link6->via_gateway);

        auto listed = nl->list_addresses(index);
        if (NS_OK(c, listed)) {
            NS_CHECK(c, has_address(*listed, prefix("198.18.5.1/24")));
            NS_CHECK(c, has_address(*listed, prefix("2001:db8:5::1/64")));
        }
        auto only_v4 = nl->list_addresses(index, IpFamily::ipv4);
        if (NS_OK(c, only_v4)) NS_CHECK(c, only_v4->size() == 1 && has_address(*only_v4, prefix("198.18.5.1/24")));

        // The same address twice: EEXIST, named, with the kernel's words.
        auto again = nl->add_address(index, prefix("198.18.5.1/24"));
        if (NS_CHECK(c, !again)) {
            const std::string text = again.error().message();
            NS_CHECK(c, again.error().error == EEXIST);
            NS_CHECK(c, contains(text, "RTM_NEWADDR 198.18.5.1/24 on nltest0: File exists"));
            if (nl->extended_ack()) NS_CHECK(c, contains(text, "(kernel: ") && !again.error().kernel_message.empty());
        }

        // Removing the route makes the destination unreachable (the
        // namespace has no default route).
        auto removed = nl->remove_route({.destination = prefix("198.19.5.0/24"), .gateway = ip("198.18.5.2"), .oif = index});
        NS_OK(c, removed);
        auto gone = nl->lookup_next_hop(ip("198.19.5.7"));
        NS_CHECK(c, !gone && gone.error().error == ENETUNREACH);
        NS_CHECK(c, !gone && gone.error().message() == "RTM_GETROUTE 198.19.5.7: Network is unreachable");
        auto unaddressed = nl->remove_address(index, prefix("198.18.5.1/24"));
        NS_OK(c, unaddressed);
        auto after = nl->list_addresses(index);
        if (NS_OK(c, after)) NS_CHECK(c, !has_address(*after, prefix("198.18.5.1/24")));

        auto down = nl->set_link_up(index, false);
        NS_OK(c, down);
        auto link_down = nl->get_link(index);
        if (NS_OK(c, link_down)) NS_CHECK(c, !link_down->up());
        auto no_link = nl->set_mtu(9999, 1500);
        NS_CHECK(c, !no_link && contains(no_link.error().message(), "RTM_NEWLINK mtu 1500 on ifindex 9999: No such device"));
    });
}

TEST(NetlinkKernel, MonitorSeesTheChangesAndInvalidatesNextHops) {
    run_in_own_netns([](ChildChecks& c) {
        auto monitor = RtnlMonitor::open();
        auto nl = NetlinkSocket::open();
        auto tun = open_tun({.name = "nltest0"});
        if (!NS_OK(c, monitor) || !NS_OK(c, nl) || !NS_OK(c, tun)) return;
        const std::uint32_t index = tun->ifindex;
        NextHopCache cache([&nl](const IpAddress& d) { return nl->lookup_next_hop(d); });

        auto mtu = nl->set_mtu(index, 2044);
        auto v4 = nl->add_address(index, prefix("198.18.5.1/24"));
        auto v6 = nl->add_address(index, prefix("2001:db8:5::1/64"), {.nodad = true});
        auto up = nl->set_link_up(index, true);
        if (!NS_OK(c, mtu) || !NS_OK(c, v4) || !NS_OK(c, v6) || !NS_OK(c, up)) return;

        auto is_added = [index](const MonitorEvent& e, const char* p) {
            const auto* a = std::get_if<AddressEvent>(&e);
            return a && !a->removed && a->address.ifindex == index && a->address.prefix == prefix(p);
        };
        auto is_our_link = [index](const MonitorEvent& e, std::uint32_t mtu_wanted, bool up_wanted) {
            const auto* l = std::get_if<LinkEvent>(&e);
            return l && l->link.ifindex == index && l->link.mtu == mtu_wanted && l->link.up() == up_wanted;
        };
        auto events = drain_until(*monitor, [&](const std::vector<MonitorEvent>& seen) {
            return std::any_of(seen.begin(), seen.end(), [&](auto& e) { return is_added(e, "198.18.5.1/24"); }) &&
                   std::any_of(seen.begin(), seen.end(), [&](auto& e) { return is_added(e, "2001:db8:5::1/64"); }) &&
                   std::any_of(seen.begin(), seen.end(), [&](auto& e) { return is_our_link(e, 2044, true); });
        });
        NS_CHECK(c, std::any_of(events.begin(), events.end(), [&](auto& e) { return is_added(e, "198.18.5.1/24"); }));
        NS_CHECK(c, std::any_of(events.begin(), events.end(), [&](auto& e) { return is_added(e, "2001:db8:5::1/64"); }));
        NS_CHECK(c, std::any_of(events.begin(), events.end(), [&](auto& e) { return is_our_link(e, 2044, true); }));
        NS_CHECK(c, monitor->counters().malformed == 0);

        // The next hop is cached until a route notification clears it.
        auto route = nl->add_route({.destination = prefix("198.19.5.0/24"), .gateway = ip("198.18.5.2"), .oif = index});
        if (!NS_OK(c, route)) return;
        auto first = cache.resolve(ip("198.19.5.7"));
        auto second = cache.resolve(ip("198.19.5.7"));
        NS_CHECK(c, first && second && first->address == ip("198.18.5.2"));
        NS_CHECK(c, cache.counters().misses == 1 && cache.counters().hits == 1);

        auto replaced = nl->remove_route({.destination = prefix("198.19.5.0/24"), .gateway = ip("198.18.5.2"), .oif = index});
        auto other = nl->add_route({.destination = prefix("198.19.5.0/24"), .gateway = ip("198.18.5.3"), .oif = index});
        if (!NS_OK(c, replaced) || !NS_OK(c, other)) return;
        auto route_events = drain_until(*monitor, [](const std::vector<MonitorEvent>& seen) {
            return std::count_if(seen.begin(), seen.end(), [](auto& e) {
                       const auto* r = std::get_if<RouteEvent>(&e);
                       return r && r->route.destination == prefix("198.19.5.0/24");
                   }) >= 2;
        });
        for (const MonitorEvent& e : route_events)
            if (std::holds_alternative<RouteEvent>(e) || std::holds_alternative<ResyncNeeded>(e)) cache.invalidate();
        NS_CHECK(c, cache.counters().invalidations >= 1);
        auto fresh = cache.resolve(ip("198.19.5.7"));
        NS_CHECK(c, fresh && fresh->address == ip("198.18.5.3"));
    });
}

TEST(NetlinkKernel, MonitorOverrunIsReportedAsResyncNeeded) {
    run_in_own_netns([](ChildChecks& c) {
        // The smallest receive buffer the kernel allows, then far more
        // notifications than it holds, unread.
        auto monitor = RtnlMonitor::open({.receive_buffer = 1, .max_datagrams_per_drain = 1000});
        auto nl = NetlinkSocket::open();
        auto tun = open_tun({.name = "nltest0"});
        if (!NS_OK(c, monitor) || !NS_OK(c, nl) || !NS_OK(c, tun)) return;
        for (std::uint8_t i = 1; i <= 100; ++i) {
            auto added = nl->add_address(tun->ifindex, IpPrefix{.address = IpAddress::v4({198, 18, 6, i}), .length = 32});
            if (!NS_OK(c, added)) return;
        }
        auto events = monitor->drain();
        NS_CHECK(c, std::any_of(events.begin(), events.end(),
                                [](const MonitorEvent& e) { return std::holds_alternative<ResyncNeeded>(e); }));
        NS_CHECK(c, monitor->counters().overruns >= 1);
        // The socket keeps working after the overrun.
        auto more = nl->add_address(tun->ifindex, prefix("198.18.7.1/32"));
        NS_OK(c, more);
        auto after = drain_until(*monitor, [](const std::vector<MonitorEvent>& seen) {
            return std::any_of(seen.begin(), seen.end(), [](const MonitorEvent& e) {
                const auto* a = std::get_if<AddressEvent>(&e);
                return a && a->address.prefix == prefix("198.18.7.1/32");
            });
        });
        NS_CHECK(c, std::any_of(after.begin(), after.end(), [](const MonitorEvent& e) {
                        const auto* a = std::get_if<AddressEvent>(&e);
                        return a && a->address.prefix == prefix("198.18.7.1/32");
                    }));
    });
}

}  // namespace
}  // namespace ipoibd::netlink

namespace ipoibd::netlink {
namespace {

// A non-blocking UDP socket bound to IPv4 `address`:`port` (host order).
int bound_udp_socket(ChildChecks& c, std::uint32_t address, std::uint16_t port) {
    const int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    NS_CHECK(c, sock >= 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port);
    at.sin_addr.s_addr = htonl(address);
    NS_CHECK(c, ::bind(sock, reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0);
    return sock;
}

// A datagram bound to the TUN (IP_PKTINFO, SO_BINDTODEVICE) whose
// destination the routing table sends by another link: IPv4 assumes the
// destination is on-link and puts it on the TUN, while RTM_GETROUTE names
// the other link's gateway. gateway_of() must not hand that gateway to
// the engine (it is no neighbour on the fabric).
TEST(NetlinkKernel, ABoundDatagramForAnotherLinksRouteIsNotSentToItsGateway) {
    run_in_own_netns([](ChildChecks& c) {
        auto tun = open_tun({.name = "nltest0"});
        auto other = open_tun({.name = "nltest1"});
        auto nl = NetlinkSocket::open();
        if (!NS_OK(c, tun) || !NS_OK(c, other) || !NS_OK(c, nl)) return;
        auto a0 = nl->add_address(tun->ifindex, prefix("198.18.5.1/24"));
        auto a1 = nl->add_address(other->ifindex, prefix("198.18.9.1/24"));
        auto up0 = nl->set_link_up(tun->ifindex, true);
        auto up1 = nl->set_link_up(other->ifindex, true);
        auto dflt = nl->add_route({.destination = prefix("0.0.0.0/0"), .gateway = ip("198.18.9.254"), .oif = other->ifindex});
        if (!NS_OK(c, a0) || !NS_OK(c, a1) || !NS_OK(c, up0) || !NS_OK(c, up1) || !NS_OK(c, dflt)) return;

        const int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        NS_CHECK(c, ::setsockopt(sock, SOL_SOCKET, SO_BINDTODEVICE, "nltest0", sizeof "nltest0") == 0);
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_port = htons(9);
        to.sin_addr.s_addr = htonl(0xC6134D07);  // 198.19.77.7
        NS_CHECK(c, ::sendto(sock, "x", 1, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 1);
        ::close(sock);
        // The kernel's ARP for 198.19.77.7 on a TUN (no link layer) is none:
        // the datagram itself comes out of the TUN.
        std::vector<std::uint8_t> packet(2048);
        pollfd pf{.fd = tun->fd.get(), .events = POLLIN, .revents = 0};
        ssize_t n = -1;
        for (int i = 0; i < 10 && n < 0; ++i) {
            if (::poll(&pf, 1, 200) == 1) n = ::read(tun->fd.get(), packet.data(), packet.size());
            if (n > 0 && (n < 20 || packet[9] != 17)) n = -1;  // not ours (IPv6 noise): read on
        }
        if (!NS_CHECK(c, n >= 20)) return;
        packet.resize(static_cast<std::size_t>(n));
        NS_CHECK(c, host::destination_of(packet) == ip("198.19.77.7"));

        NextHopCache cache([&nl](const IpAddress& d) { return nl->lookup_next_hop(d); });
        auto hop = nl->lookup_next_hop(ip("198.19.77.7"));
        if (NS_OK(c, hop)) NS_CHECK(c, hop->via_gateway && hop->oif == other->ifindex);
        const host::GatewayOf g = host::gateway_of(packet, cache, tun->ifindex);
        NS_CHECK(c, !g.gateway);
        NS_CHECK(c, g.other_interface);
    });
}

// Writes a TCPv4 super-packet of `payload` bytes cut at `gso_size` on the
// TUN `ifindex` through a packet socket with PACKET_VNET_HDR, as any process
// with CAP_NET_RAW may; returns its size, virtio header included (0 when it
// could not).
std::size_t send_tcp_super_packet(ChildChecks& c, std::uint32_t ifindex, std::size_t payload, std::uint16_t gso_size) {
    const int sock = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP));
    const int on = 1;
    if (!NS_CHECK(c, sock >= 0 && ::setsockopt(sock, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) == 0)) return 0;
    std::vector<std::uint8_t> m(VirtioNetHeader::size + 40 + payload, 0);
    VirtioNetHeader h;
    h.flags = VirtioNetHeader::kFlagNeedsCsum;
    h.gso_type = VirtioNetHeader::kGsoTcpV4;
    h.hdr_len = 40;
    h.gso_size = gso_size;
    h.csum_start = 20;
    h.csum_offset = 16;
    h.write_to(m.data());
    std::uint8_t* ip4 = m.data() + VirtioNetHeader::size;
    ip4[0] = 0x45;
    store_be16(ip4 + 2, static_cast<std::uint16_t>(40 + payload));
    ip4[8] = 64, ip4[9] = 6;
    const std::uint8_t addrs[8] = {198, 18, 5, 1, 198, 18, 5, 2};
    std::memcpy(ip4 + 12, addrs, 8);
    ip4[20 + 12] = 0x50, ip4[20 + 13] = 0x10;  // data offset 5, ACK
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = static_cast<int>(ifindex);
    to.sll_protocol = htons(ETH_P_IP);
    const bool sent = NS_CHECK(c, ::sendto(sock, m.data(), m.size(), 0, reinterpret_cast<const sockaddr*>(&to),
                                           sizeof to) == static_cast<ssize_t>(m.size()));
    ::close(sock);
    return sent ? m.size() : 0;
}

// A packet socket with PACKET_VNET_HDR on the TUN hands its reader a TCP
// super-packet with whatever gso_size it asked for (the kernel checks the
// headers, not the size; it cuts one larger than 64 KiB itself): 1 would
// be 60,000 datagrams from one read. segment_tun_packet() refuses it.
TEST(NetlinkKernel, ATcpSuperPacketWithATinyGsoSizeFromAPacketSocketIsRefused) {
    run_in_own_netns([](ChildChecks& c) {
        auto tun = open_tun({.name = "nltest0", .offload = true});
        auto nl = NetlinkSocket::open();
        if (!NS_OK(c, tun) || !NS_OK(c, nl)) return;
        auto up = nl->set_link_up(tun->ifindex, true);
        if (!NS_OK(c, up)) return;
        const std::size_t sent = send_tcp_super_packet(c, tun->ifindex, 60'000, 1);
        if (sent == 0) return;
        std::vector<std::uint8_t> read(65535 + VirtioNetHeader::size);
        ssize_t n = -1;
        for (int i = 0; i < 10 && n < 0; ++i) {
            pollfd pf{.fd = tun->fd.get(), .events = POLLIN, .revents = 0};
            if (::poll(&pf, 1, 200) == 1) n = ::read(tun->fd.get(), read.data(), read.size());
            if (n > 0 && read[1] != VirtioNetHeader::kGsoTcpV4) n = -1;  // IPv6 noise: read on
        }
        if (!NS_CHECK(c, n == static_cast<ssize_t>(sent))) return;
        NS_CHECK(c, VirtioNetHeader::read_from(read.data()).gso_size == 1);  // as the sender asked
        std::size_t emitted = 0;
        std::vector<std::uint8_t> scratch;
        const auto cut = host::segment_tun_packet(mutable_bytes(read.data(), static_cast<std::size_t>(n)), scratch,
                                                  [&](bytes) { ++emitted; });
        NS_CHECK(c, !cut && cut.error() == host::OffloadError::too_many_segments);
        NS_CHECK(c, emitted == 0);
    });
}

// Counts what a TunPort hands over.
struct CountingReceiver : host::HostReceiver {
    std::size_t packets = 0, reads = 0;
    void on_host_packet(bytes, const std::optional<IpAddress>&) override { ++packets; }
    void after_host_read(std::size_t, std::size_t) override { ++reads; }
};

// Super-packets cut as finely as the bound lets (8 bytes, 7,500 datagrams
// each) end a read batch after the first: the loop turns between them
// (host_port.h, kBatchDatagramsPerRead). Nothing is lost: the second comes
// with the next batch.
TEST(NetlinkKernel, AReadBatchEndsWhenItsReadsMakeManyDatagrams) {
    run_in_own_netns([](ChildChecks& c) {
        auto nl = NetlinkSocket::open();
        if (!NS_OK(c, nl)) return;
        auto tun = host::TunPort::open("nltest0", *nl);
        if (!NS_CHECK(c, tun)) return;
        auto up = nl->set_link_up((*tun)->ifindex(), true);
        if (!NS_OK(c, up)) return;
        const std::size_t payload = 60'000;
        for (int i = 0; i < 2; ++i)
            if (send_tcp_super_packet(c, (*tun)->ifindex(), payload, 8) == 0) return;
        CountingReceiver receiver;
        pollfd pf{.fd = (*tun)->fd(), .events = POLLIN, .revents = 0};
        NS_CHECK(c, ::poll(&pf, 1, 1000) == 1);
        // A batch of 4 reads: IPv6 noise (router solicitations, MLD) may
        // come first, but the first super-packet ends it.
        std::size_t batches = 0;
        while (receiver.packets < 2 * payload / 8 && batches < 10) {
            const std::size_t before = receiver.packets;
            (*tun)->read_batch(receiver, 4);
            ++batches;
            NS_CHECK(c, receiver.packets - before <= payload / 8 + 4);
            if (receiver.packets == before) ::poll(&pf, 1, 200);
        }
        NS_CHECK(c, receiver.packets >= 2 * payload / 8);
        NS_CHECK(c, batches >= 2);
    });
}

// What the coalescer writes, the kernel takes: three UDP datagrams of one
// flow go to the TUN as one USO packet (when the kernel has USO) and reach a
// socket as three datagrams, in order, intact.
TEST(NetlinkKernel, TunTakesCoalescedUdpAndDeliversEveryDatagram) {
    run_in_own_netns([](ChildChecks& c) {
        auto tun = open_tun({.name = "nltest0", .offload = true});
        auto nl = NetlinkSocket::open();
        if (!NS_OK(c, tun) || !NS_OK(c, nl)) return;
        NS_CHECK(c, tun->offload);
        auto added = nl->add_address(tun->ifindex, IpPrefix{.address = IpAddress::v4({198, 18, 7, 1}), .length = 24});
        auto up = nl->set_link_up(tun->ifindex, true);
        if (!NS_OK(c, added) || !NS_OK(c, up)) return;
        const int sock = bound_udp_socket(c, 0xC6120701, 5201);  // 198.18.7.1

        std::size_t writes = 0;
        TunCoalescer coalescer(
            [&](bytes d) {
                ++writes;
                NS_CHECK(c, ::write(tun->fd.get(), d.data(), d.size()) == static_cast<ssize_t>(d.size()));
            },
            tun->udp_segmentation);
        for (std::uint8_t i = 0; i < 3; ++i) {
            std::vector<std::uint8_t> p(28 + 1000, static_cast<std::uint8_t>('a' + i));
            std::fill(p.begin(), p.begin() + 28, std::uint8_t{0});
            p[0] = 0x45;
            store_be16(p.data() + 2, static_cast<std::uint16_t>(p.size()));
            store_be16(p.data() + 4, static_cast<std::uint16_t>(7 + i));
            p[6] = 0x40, p[7] = 0, p[8] = 64, p[9] = 17;
            const std::uint8_t addrs[8] = {198, 18, 7, 2, 198, 18, 7, 1};
            std::memcpy(p.data() + 12, addrs, 8);
            store_be16(p.data() + 10, 0);
            store_be16(p.data() + 10, checksum_fold(checksum_add(0, bytes(p.data(), 20))));
            store_be16(p.data() + 20, 40000);
            store_be16(p.data() + 22, 5201);
            store_be16(p.data() + 24, 1008);
            store_be16(p.data() + 26, 0);  // IPv4 UDP without a checksum
            coalescer.add(p);
        }
        coalescer.flush();
        NS_CHECK(c, writes == (tun->udp_segmentation ? 1u : 3u));
        for (int i = 0; i < 3; ++i) {
            pollfd pf{.fd = sock, .events = POLLIN, .revents = 0};
            NS_CHECK(c, ::poll(&pf, 1, 2000) == 1);
            char buf[2000];
            const ssize_t n = ::recv(sock, buf, sizeof buf, 0);
            NS_CHECK(c, n == 1000);
            NS_CHECK(c, n > 0 && buf[0] == 'a' + i && buf[999] == 'a' + i);
        }
        ::close(sock);
    });
}

// Which queue of a multi-queue TUN the host's reply to a flow leaves on: the
// kernel's flow table sends it out on the queue that last wrote the flow.
// With use_queues(true) TunPort writes each flow on the queue flow_queue()
// gives it, so replies reach the data thread that reads that queue; with
// use_queues(false) (connected mode) every write stays on the port's own
// queue, and so does every reply.
struct ReplyQueues {
    std::size_t on_expected = 0, on_port = 0, on_other = 0, lost = 0;
    std::size_t expected_other = 0;  // flows flow_queue() puts on the second queue
};

// The reply to flow `sport`: IPv4 UDP from 198.18.8.1:5300 to port `sport`.
bool is_reply(bytes p, std::uint16_t sport) {
    if (p.size() < 28 || p[0] != 0x45 || p[9] != 17) return false;
    return load_be16(p.data() + 20) == 5300 && load_be16(p.data() + 22) == sport;
}

class Replies final : public host::HostReceiver {
public:
    explicit Replies(std::uint16_t sport) : sport_(sport) {}
    void on_host_packet(bytes p, const std::optional<IpAddress>&) override { replies += is_reply(p, sport_); }
    void after_host_read(std::size_t, std::size_t) override {}
    std::size_t replies = 0;

private:
    std::uint16_t sport_;
};

ReplyQueues replies_by_queue(ChildChecks& c, host::TunPort& port, host::HostQueue& other, int sock,
                             std::uint16_t first_port, bool queues_on) {
    ReplyQueues r;
    port.use_queues(queues_on);
    for (std::uint16_t f = 0; f < 16; ++f) {
        const std::uint16_t sport = static_cast<std::uint16_t>(first_port + f);
        std::vector<std::uint8_t> p(28 + 8, 0);
        p[0] = 0x45;
        store_be16(p.data() + 2, static_cast<std::uint16_t>(p.size()));
        p[6] = 0x40, p[8] = 64, p[9] = 17;
        const std::uint8_t addrs[8] = {198, 18, 8, 2, 198, 18, 8, 1};
        std::memcpy(p.data() + 12, addrs, 8);
        store_be16(p.data() + 10, checksum_fold(checksum_add(0, bytes(p.data(), 20))));
        store_be16(p.data() + 20, sport);
        store_be16(p.data() + 22, 5300);
        store_be16(p.data() + 24, 16);  // IPv4 UDP without a checksum
        const std::size_t want = host::flow_queue(p, false, 2);
        r.expected_other += want == 1;
        port.write(p);
        port.flush();
        // The host answers the flow from its socket...
        pollfd pf{.fd = sock, .events = POLLIN, .revents = 0};
        if (!NS_CHECK(c, ::poll(&pf, 1, 500) == 1)) return r;
        char buf[64];
        sockaddr_in from{};
        socklen_t from_len = sizeof from;
        const ssize_t n = ::recvfrom(sock, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
        NS_CHECK(c, n == 8 && ntohs(from.sin_port) == sport);
        NS_CHECK(c, ::sendto(sock, buf, 8, 0, reinterpret_cast<const sockaddr*>(&from), from_len) == 8);
        // ...and the reply is read from one of the two queues.
        pollfd q[2] = {{.fd = port.fd(), .events = POLLIN, .revents = 0},
                       {.fd = other.fd(), .events = POLLIN, .revents = 0}};
        if (::poll(q, 2, 500) <= 0) {
            ++r.lost;
            continue;
        }
        std::size_t got = 0, on = 0;
        if (q[0].revents & POLLIN) {
            Replies d(sport);
            port.read_batch(d, 1);
            got += d.replies;
        }
        if (q[1].revents & POLLIN) {
            on = 1;
            other.read_batch(1, [&](bytes d, const std::optional<IpAddress>&) { got += is_reply(d, sport); });
        }
        NS_CHECK(c, got == 1);  // the flow's reply, on one queue
        if (on == want) ++r.on_expected;
        if (on == 0)
            ++r.on_port;
        else
            ++r.on_other;
    }
    return r;
}

// A multi-queue TUN `name` with a second queue, up with 198.18.`third`.1/24
// (in the child's own namespace); port null when that failed (checked).
struct TwoQueueTun {
    std::unique_ptr<NetlinkSocket> nl;
    std::unique_ptr<host::TunPort> port;
    std::unique_ptr<host::HostQueue> other;
};

TwoQueueTun two_queue_tun(ChildChecks& c, const std::string& name, std::uint8_t third) {
    TwoQueueTun t;
    auto nl = NetlinkSocket::open();
    if (!NS_OK(c, nl)) return t;
    t.nl = std::make_unique<NetlinkSocket>(std::move(*nl));
    auto port = host::TunPort::open(name, *t.nl, true);
    if (!c.expect(static_cast<bool>(port), __LINE__, "TunPort::open: " + (port ? std::string() : port.error()))) return t;
    auto other = (*port)->open_queue();
    if (!c.expect(static_cast<bool>(other), __LINE__, "open_queue: " + (other ? std::string() : other.error())))
        return t;
    host::TunPort& p = **port;
    NS_CHECK(c, p.add_address(IpPrefix{.address = IpAddress::v4({198, 18, third, 1}), .length = 24}));
    NS_CHECK(c, p.set_carrier(true));
    NS_CHECK(c, p.set_up(true));
    t.other = std::move(*other);
    t.port = std::move(*port);
    return t;
}

TEST(NetlinkKernel, MultiQueueTunRepliesLeaveOnTheQueueThatWroteTheFlow) {
    run_in_own_netns([](ChildChecks& c) {
        TwoQueueTun t = two_queue_tun(c, "mqtest0", 8);
        if (!t.port) return;
        host::TunPort& p = *t.port;
        host::HostQueue* const other = t.other.get();
        const int sock = bound_udp_socket(c, 0xC6120801, 5300);  // 198.18.8.1

        const ReplyQueues off = replies_by_queue(c, p, *other, sock, 41000, false);
        NS_CHECK(c, off.lost == 0);
        NS_CHECK(c, off.on_port == 16);       // every write, and so every reply, on the port's queue
        NS_CHECK(c, off.expected_other > 0);  // among them flows that would have gone to the other

        const ReplyQueues on = replies_by_queue(c, p, *other, sock, 42000, true);
        NS_CHECK(c, on.lost == 0);
        NS_CHECK(c, on.on_expected == 16);
        NS_CHECK(c, on.expected_other > 0 && on.on_other == on.expected_other);
        ::close(sock);
    });
}

// An ICMP echo request from the fabric is answered by the host while it is
// written: TunPort writes it on the port's queue whatever its flow's hash
// (write_queue()), so the echo replies leave there too, where the event
// loop reads them in the same pass, and no data thread wakes for them. Not
// the first: the kernel answers inside the write, before it notes the
// writing queue in its flow table, so the first echo of a flow (or the
// first after the kernel forgot it, 3 s unused) leaves by the hash.
TEST(NetlinkKernel, MultiQueueTunEchoRepliesLeaveOnThePortsQueue) {
    run_in_own_netns([](ChildChecks& c) {
        TwoQueueTun t = two_queue_tun(c, "mqtest1", 9);
        if (!t.port) return;
        host::TunPort& p = *t.port;
        host::HostQueue* const other = t.other.get();
        p.use_queues(true);
        std::size_t hashed_other = 0, on_port = 0, on_other = 0;
        for (int i = 0; i < 32; ++i) {
            const auto h = static_cast<std::uint8_t>(2 + i / 2);
            const std::uint16_t seq = static_cast<std::uint16_t>(1 + i % 2);
            // An echo request from 198.18.9.h to 198.18.9.1, id h.
            std::vector<std::uint8_t> e(20 + 16, 0);
            e[0] = 0x45;
            store_be16(e.data() + 2, static_cast<std::uint16_t>(e.size()));
            e[8] = 64, e[9] = 1;
            const std::uint8_t addrs[8] = {198, 18, 9, h, 198, 18, 9, 1};
            std::memcpy(e.data() + 12, addrs, 8);
            store_be16(e.data() + 10, checksum_fold(checksum_add(0, bytes(e.data(), 20))));
            e[20] = 8;
            store_be16(e.data() + 24, h);
            store_be16(e.data() + 26, seq);
            store_be16(e.data() + 22, checksum_fold(checksum_add(0, bytes(e.data() + 20, 16))));
            hashed_other += seq == 2 && host::flow_queue(e, false, 2) == 1;
            NS_CHECK(c, host::write_queue(e, false, 2) == 0);
            p.write(e);
            p.flush();
            pollfd q[2] = {{.fd = p.fd(), .events = POLLIN, .revents = 0},
                           {.fd = other->fd(), .events = POLLIN, .revents = 0}};
            if (!NS_CHECK(c, ::poll(q, 2, 500) > 0)) return;
            const auto is_echo_reply = [&](bytes d) {
                return d.size() >= 28 && d[0] == 0x45 && d[9] == 1 && d[20] == 0 && d[19] == h;
            };
            if (q[0].revents & POLLIN) {
                struct Echo final : host::HostReceiver {
                    std::function<bool(bytes)> match;
                    std::size_t got = 0;
                    void on_host_packet(bytes d, const std::optional<IpAddress>&) override { got += match(d); }
                    void after_host_read(std::size_t, std::size_t) override {}
                } r;
                r.match = is_echo_reply;
                p.read_batch(r, 1);
                if (seq == 2) on_port += r.got;
            }
            if (q[1].revents & POLLIN) {
                std::size_t got = 0;
                other->read_batch(1, [&](bytes d, const std::optional<IpAddress>&) { got += is_echo_reply(d); });
                if (seq == 2) on_other += got;
            }
        }
        NS_CHECK(c, hashed_other > 0);  // flows the hash alone would have put on the other queue
        NS_CHECK(c, on_port == 16);
        NS_CHECK(c, on_other == 0);
    });
}

}  // namespace
}  // namespace ipoibd::netlink
