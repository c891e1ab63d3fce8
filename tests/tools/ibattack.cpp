// ibattack: what an attacker on the underlay tries against a soft fabric
// (tests/scenario/fabric_trust.sh). A test tool, not installed; every loop is
// bounded in count and time.
//
//   ibattack foreign --to ADDR:PORT --dlid LID --qpn QPN [--count N]
//       From a plain UDP socket (not the fabric's address): SubnSet(PortInfo)
//       PortState Down, a data packet to QPN, a route hint and a permit
//       naming this socket, a link packet; N times. Then listens 1 s and
//       prints how many datagrams came back ("received 0").
//   ibattack flood --fabric ADDR:PORT --sockets N --seconds S
//       N sockets send link packets every 300 ms for S seconds; prints how
//       many the switch plugged in (answered with a link packet).
//   ibattack spoof-hint --fabric ADDR:PORT --to ADDR:PORT --dlid LID --seconds S
//       Raw socket (root): route hints for DLID naming this tool's UDP
//       socket, with the fabric's source address, guessed nonces and nonce
//       0, every 50 ms for S seconds; prints how many IBA packets reached
//       the tool's socket ("captured 0").
//   ibattack mkey-set --fabric ADDR:PORT --dlid LID [--count N]
//       A soft port of the fabric (the SM makes it ACTIVE) sends LID-routed
//       SubnSet(PortInfo) PortState Down to DLID with guessed M_Keys.
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/socket_address.h"
#include "common/unique_fd.h"
#include "tests/tools/forge.h"
#include "transport/port_factory.h"
#include "transport/soft/guid.h"
#include "transport/soft/route_hint.h"
#include "transport/soft/soft_port.h"
#include "transport/wire/link.h"
#include "transport/wire/packet.h"
#include "transport/wire/smp.h"

using namespace ipoibd;
using namespace ipoibd::transport;
using Clock = std::chrono::steady_clock;
using Wire = std::vector<std::uint8_t>;

namespace {

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr, "ibattack: %s\n", why);
    std::exit(2);
}

struct Args {
    std::string command;
    std::map<std::string, std::string> values;
    std::string get(const std::string& k, const char* fallback = nullptr) const {
        const auto it = values.find(k);
        if (it != values.end()) return it->second;
        if (!fallback) usage(("missing --" + k).c_str());
        return fallback;
    }
    SocketAddress address(const std::string& k) const {
        auto a = parse_socket_address(get(k));
        if (!a) usage(("--" + k + ": " + a.error()).c_str());
        return *a;
    }
    std::uint64_t number(const std::string& k, const char* fallback = nullptr) const {
        return std::stoull(get(k, fallback), nullptr, 0);
    }
};

UniqueFd udp_socket(int family) {
    UniqueFd fd(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) usage("socket failed");
    return fd;
}

SocketAddress local_of(int fd) {
    SocketAddress a;
    a.length = sizeof a.storage;
    ::getsockname(fd, a.get(), &a.length);
    return a;
}

// Datagrams waiting on `fd` within `how_long`, IBA packets (not 6-byte link
// packets, not control) counted apart.
std::pair<std::size_t, std::size_t> drain(int fd, std::chrono::milliseconds how_long) {
    std::size_t all = 0, iba = 0;
    std::array<std::uint8_t, 9000> buf;
    const auto end = Clock::now() + how_long;
    while (Clock::now() < end) {
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
        if (n < 0) {
            ::usleep(2000);
            continue;
        }
        ++all;
        const bytes d(buf.data(), static_cast<std::size_t>(n));
        if (d.size() != ib::LinkPacket::size && !is_soft_control(d)) ++iba;
    }
    return {all, iba};
}

int foreign(const Args& a) {
    const SocketAddress to = a.address("to");
    const auto dlid = static_cast<std::uint16_t>(a.number("dlid"));
    const auto qpn = static_cast<std::uint32_t>(a.number("qpn"));
    const auto count = a.number("count", "10");
    UniqueFd fd = udp_socket(to.family());
    const SocketAddress any = *parse_socket_address(to.family() == AF_INET6 ? "[::]:0" : "0.0.0.0:0");
    if (::bind(fd.get(), any.get(), any.length) != 0) usage("bind failed");
    const SocketAddress me = local_of(fd.get());
    const std::array<std::uint8_t, 16> data{0x08, 0x00, 0, 0, 0x45};
    std::vector<Wire> forged{test::forged_port_down(1, dlid, 0), test::forged_packet(dlid, dlid, qpn, 0x0b1b, data)};
    SoftControlBuffer ctl;
    encode_route_hint({.dlid = dlid, .ttl_ms = 60000, .peer = me, .nonce = 0}, ctl);
    forged.emplace_back(ctl.begin(), ctl.end());
    encode_peer_permit({.ttl_ms = 60000, .peer = me, .lid = dlid, .any_pkey = true}, ctl);
    forged.emplace_back(ctl.begin(), ctl.end());
    Wire link(ib::LinkPacket::size);
    ib::LinkPacket{}.write_to(link.data());
    forged.push_back(link);
    std::size_t sent = 0;
    for (std::uint64_t i = 0; i < count; ++i)
        for (const Wire& w : forged) sent += ::sendto(fd.get(), w.data(), w.size(), 0, to.get(), to.length) > 0;
    const auto [back, iba] = drain(fd.get(), std::chrono::milliseconds(1000));
    std::printf("ibattack foreign: sent %zu from %s, received %zu\n", sent, me.to_string().c_str(), back);
    (void)iba;
    return 0;
}

int flood(const Args& a) {
    const SocketAddress fabric = a.address("fabric");
    const auto n = std::min<std::uint64_t>(a.number("sockets"), 1000);
    const auto seconds = std::min<std::uint64_t>(a.number("seconds"), 120);
    std::vector<UniqueFd> fds;
    for (std::uint64_t i = 0; i < n; ++i) fds.push_back(udp_socket(fabric.family()));
    std::vector<bool> plugged(fds.size(), false);
    Wire link(ib::LinkPacket::size);
    ib::LinkPacket{}.write_to(link.data());
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    std::array<std::uint8_t, 9000> buf;
    while (Clock::now() < end) {
        for (auto& fd : fds) ::sendto(fd.get(), link.data(), link.size(), 0, fabric.get(), fabric.length);
        const auto turn = Clock::now() + std::chrono::milliseconds(300);
        while (Clock::now() < turn) {
            for (std::size_t i = 0; i < fds.size(); ++i)
                while (::recv(fds[i].get(), buf.data(), buf.size(), 0) > 0) plugged[i] = true;
            ::usleep(20'000);
        }
    }
    std::size_t got = 0;
    for (bool p : plugged) got += p;
    std::printf("ibattack flood: %zu of %zu sockets were plugged in\n", got, fds.size());
    return 0;
}

int spoof_hint(const Args& a) {
    const SocketAddress fabric = a.address("fabric"), to = a.address("to");
    const auto dlid = static_cast<std::uint16_t>(a.number("dlid"));
    const auto seconds = std::min<std::uint64_t>(a.number("seconds", "3"), 60);
    if (fabric.family() != AF_INET || to.family() != AF_INET) usage("spoof-hint: IPv4 only");
    UniqueFd raw(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW));
    if (!raw) usage("spoof-hint needs a raw socket (root)");
    // Where the redirected packets would come: a UDP socket of ours.
    UniqueFd catcher = udp_socket(AF_INET);
    const SocketAddress any = *parse_socket_address("0.0.0.0:0");
    if (::bind(catcher.get(), any.get(), any.length) != 0) usage("bind failed");
    SocketAddress me = local_of(catcher.get());
    // The hint must name an address the victim can reach: the source
    // address of a route to it.
    {
        UniqueFd probe = udp_socket(AF_INET);
        if (::connect(probe.get(), to.get(), to.length) == 0) {
            SocketAddress src = local_of(probe.get());
            sockaddr_in s{}, m{};
            std::memcpy(&s, &src.storage, sizeof s);
            std::memcpy(&m, &me.storage, sizeof m);
            m.sin_addr = s.sin_addr;
            std::memcpy(&me.storage, &m, sizeof m);
        }
    }
    sockaddr_in from{}, dst{};
    std::memcpy(&from, &fabric.storage, sizeof from);
    std::memcpy(&dst, &to.storage, sizeof dst);
    std::size_t sent = 0, captured = 0;
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < end) {
        std::uint64_t guess = 0;
        (void)::getrandom(&guess, sizeof guess, 0);
        for (std::uint64_t nonce : {guess, std::uint64_t{0}}) {
            SoftControlBuffer ctl;
            encode_route_hint({.dlid = dlid, .ttl_ms = 60000, .peer = me, .nonce = nonce}, ctl);
            Wire d(20 + 8 + ctl.size());
            d[0] = 0x45;
            d[2] = static_cast<std::uint8_t>(d.size() >> 8);
            d[3] = static_cast<std::uint8_t>(d.size());
            d[8] = 64;
            d[9] = IPPROTO_UDP;
            std::memcpy(d.data() + 12, &from.sin_addr, 4);
            std::memcpy(d.data() + 16, &dst.sin_addr, 4);
            std::memcpy(d.data() + 20, &from.sin_port, 2);
            std::memcpy(d.data() + 22, &dst.sin_port, 2);
            d[24] = static_cast<std::uint8_t>((8 + ctl.size()) >> 8);
            d[25] = static_cast<std::uint8_t>(8 + ctl.size());  // UDP checksum 0: none
            std::memcpy(d.data() + 28, ctl.data(), ctl.size());
            sent += ::sendto(raw.get(), d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) > 0;
        }
        captured += drain(catcher.get(), std::chrono::milliseconds(50)).second;
    }
    std::printf("ibattack spoof-hint: sent %zu hints naming %s as LID 0x%04x, captured %zu\n", sent,
                me.to_string().c_str(), dlid, captured);
    return 0;
}

int mkey_set(const Args& a) {
    const SocketAddress fabric = a.address("fabric");
    const auto dlid = static_cast<std::uint16_t>(a.number("dlid"));
    const auto count = std::min<std::uint64_t>(a.number("count", "16"), 10000);
    SoftPortConfig config;
    config.fabric = fabric;
    config.port_guid = stable_port_guid("ibattack");
    config.node_description = "ibattack";
    auto opened = SoftPort::open(config);
    if (!opened) {
        std::fprintf(stderr, "ibattack: %s\n", opened.error().message().c_str());
        return 1;
    }
    SoftPort& port = **opened;
    if (!wait_until_active(port, std::chrono::seconds(10))) {
        std::fprintf(stderr, "ibattack: port not ACTIVE\n");
        return 1;
    }
    const std::uint16_t me = port.attributes().lid;
    std::size_t sent = 0;
    for (std::uint64_t k = 0; k < count; ++k) {
        sent += port.send_raw(test::forged_port_down(me, dlid, k));
        port.process();
    }
    const auto end = Clock::now() + std::chrono::milliseconds(500);
    while (Clock::now() < end) {
        port.process();
        ::usleep(5000);
    }
    std::printf("ibattack mkey-set: LID 0x%04x sent %zu Sets of PortInfo (PortState Down) to LID 0x%04x with M_Keys 0..%llu\n",
                me, sent, dlid, static_cast<unsigned long long>(count - 1));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) usage("usage: ibattack foreign|flood|spoof-hint|mkey-set --OPTION VALUE ...");
    Args a;
    a.command = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (!k.starts_with("--")) usage(("unexpected " + k).c_str());
        a.values[k.substr(2)] = argv[i + 1];
    }
    if (a.command == "foreign") return foreign(a);
    if (a.command == "flood") return flood(a);
    if (a.command == "spoof-hint") return spoof_hint(a);
    if (a.command == "mkey-set") return mkey_set(a);
    usage(("unknown command " + a.command).c_str());
}
