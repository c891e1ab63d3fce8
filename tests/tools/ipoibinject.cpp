// ipoibinject: sends malformed IPoIB frames to a running ipoibd over the
// soft fabric, for scenario tests that check each is dropped, counted and
// harmless. A test tool, not installed.
//
//   ipoibinject --fabric ADDR:PORT --guid GUID --dlid LID --dqpn QPN --qkey QKEY [--only valid]
//
// 1. plug in a soft port and wait until the SM made it ACTIVE
// 2. send, as well-formed UD packets to (DLID, DQPN) with the link's Q_Key,
//    payloads that break one IPoIB rule each (names printed as sent):
//      truncated      2 bytes, shorter than the encapsulation header
//      ether_type     EtherType 0x88CC (LLDP), not one of RFC 4391's four
//      arp_hw_type    ARP with hardware type 1 (Ethernet)
//      ip_truncated   IPv4 version nibble, 10 bytes
//      rarp           a RARP frame (carried, nobody answers)
//      nd_checksum    an NS with a broken ICMPv6 checksum
// 3. one packet with a bad ICRC (the port drops it before the engine)
// With `--only valid`, instead: one well-formed IPoIB frame (an IPv4 UDP
// datagram to 198.18.1.1) on this port's own P_Key, for scenarios that show
// a receiving port enforcing its QP's partition (IBA 10.9.3).
// Exit 0 when every send was accepted.
#include <sys/epoll.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/socket_address.h"
#include "transport/soft/soft_port.h"
#include "transport/wire/crc.h"
#include "transport/wire/packet.h"

using namespace ipoibd;
using namespace ipoibd::transport;
using Clock = std::chrono::steady_clock;

namespace {

void pump(SoftPort& port, int epoll_fd, std::chrono::milliseconds how_long) {
    const auto end = Clock::now() + how_long;
    while (Clock::now() < end) {
        epoll_event ev;
        ::epoll_wait(epoll_fd, &ev, 1, 10);
        port.process();
    }
}

std::uint64_t number(const std::string& s) { return std::stoull(s, nullptr, 0); }

}  // namespace

int main(int argc, char** argv) {
    std::string fabric = "127.0.0.1:18516";
    std::uint64_t guid = 0x0002C903000000F0ULL, dlid = 0, dqpn = 0, qkey = 0x0B1B;
    std::string only;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--fabric") fabric = v;
        else if (k == "--guid") guid = number(v);
        else if (k == "--dlid") dlid = number(v);
        else if (k == "--dqpn") dqpn = number(v);
        else if (k == "--qkey") qkey = number(v);
        else if (k == "--only") only = v;
    }
    auto addr = parse_socket_address(fabric);
    if (!addr || dlid == 0 || dqpn == 0) {
        std::fprintf(stderr, "usage: ipoibinject --fabric ADDR:PORT [--guid G] --dlid LID --dqpn QPN [--qkey Q] [--only valid]\n");
        return 2;
    }
    if (!only.empty() && only != "valid") {
        std::fprintf(stderr, "ipoibinject: --only takes 'valid'\n");
        return 2;
    }
    SoftPortConfig config;
    config.fabric = *addr;
    config.port_guid = guid;
    config.node_description = "ipoibinject";
    auto opened = SoftPort::open(config);
    if (!opened) {
        std::fprintf(stderr, "ipoibinject: %s\n", opened.error().message().c_str());
        return 1;
    }
    SoftPort& port = **opened;
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, port.fd(), &ev);
    for (int i = 0; i < 500 && port.attributes().state != PortState::active; ++i) pump(port, ep, std::chrono::milliseconds(10));
    if (port.attributes().state != PortState::active) {
        std::fprintf(stderr, "ipoibinject: port not ACTIVE\n");
        return 1;
    }
    auto qp = port.create_ud_qp({.qkey = static_cast<std::uint32_t>(qkey)});
    if (!qp) {
        std::fprintf(stderr, "ipoibinject: %s\n", qp.error().message().c_str());
        return 1;
    }
    using P = std::vector<std::uint8_t>;
    P arp(4 + 56, 0);
    arp[0] = 0x08, arp[1] = 0x06, arp[5] = 1, arp[6] = 0x08, arp[8] = 20, arp[9] = 4, arp[11] = 1;
    P ns(4 + 40 + 24, 0);
    ns[0] = 0x86, ns[1] = 0xDD, ns[4] = 0x60, ns[4 + 5] = 24, ns[4 + 6] = 58, ns[4 + 7] = 255;
    ns[4 + 8] = 0xfe, ns[4 + 9] = 0x80, ns[4 + 23] = 1;   // source fe80::1
    ns[4 + 24] = 0xff, ns[4 + 25] = 0x02, ns[4 + 35] = 1, ns[4 + 36] = 0xff, ns[4 + 39] = 2;  // ff02::1:ff00:2
    ns[44] = 135, ns[46] = 0xde, ns[47] = 0xad;           // NS, checksum 0xdead
    ns[52] = 0x20, ns[53] = 0x01, ns[54] = 0x0d, ns[55] = 0xb8, ns[67] = 2;  // target 2001:db8::2
    // 198.18.0.200 -> 198.18.1.1, UDP 9 -> 9, 4 bytes; header checksum 0x0000
    // left for the receiver to judge (the port's P_Key check comes first).
    P valid{0x08, 0x00, 0, 0, 0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 198, 18, 0, 200, 198, 18, 1, 1,
            0, 9, 0, 9, 0, 12, 0, 0, 't', 'e', 's', 't'};
    std::uint32_t sum = 0;
    for (std::size_t i = 4; i < 24; i += 2) sum += static_cast<std::uint32_t>(valid[i] << 8 | valid[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    valid[14] = static_cast<std::uint8_t>(~sum >> 8);
    valid[15] = static_cast<std::uint8_t>(~sum);
    const std::vector<std::pair<const char*, P>> only_valid = {{"valid", valid}};
    const std::vector<std::pair<const char*, P>> malformed = {
        {"truncated", P{0x08, 0x00}},
        {"ether_type", P{0x88, 0xCC, 0, 0, 1, 2, 3, 4}},
        {"arp_hw_type", arp},
        {"ip_truncated", P{0x08, 0x00, 0, 0, 0x45, 0, 0, 10, 0, 0, 0, 0, 0, 0}},
        {"rarp", P{0x80, 0x35, 0, 0, 0, 1}},
        {"nd_checksum", ns},
    };
    const auto& cases = only.empty() ? malformed : only_valid;
    int failures = 0;
    for (const auto& [name, payload] : cases) {
        SendRequest r;
        r.ah.dlid = static_cast<std::uint16_t>(dlid);
        r.remote_qpn = static_cast<std::uint32_t>(dqpn);
        r.remote_qkey = static_cast<std::uint32_t>(qkey);
        r.payload = payload;
        auto sent = (*qp)->post_send({&r, 1});
        const bool ok = sent && *sent == 1;
        failures += ok ? 0 : 1;
        std::printf("sent %s%s\n", name, ok ? "" : " (refused)");
        pump(port, ep, std::chrono::milliseconds(20));
    }
    if (!only.empty()) {
        pump(port, ep, std::chrono::milliseconds(100));
        return failures == 0 ? 0 : 1;
    }
    // A packet with a broken ICRC: the receiving port drops it (bad_icrc).
    ib::PacketSpec s;
    const PortAttributes attr = port.attributes();
    s.lrh.dlid = static_cast<std::uint16_t>(dlid);
    s.lrh.slid = attr.lid;
    s.bth.opcode = ib::op::ud_send_only;
    s.bth.pkey = attr.pkey_table.at(0);
    s.bth.dest_qp = static_cast<std::uint32_t>(dqpn);
    s.ext.deth = {static_cast<std::uint32_t>(qkey), (*qp)->qpn()};
    const P body{0x08, 0x00, 0, 0, 0x45};
    s.payload = body;
    P w(ib::packet_size(s));
    (void)ib::build_packet(s, w);
    w[w.size() - 7] ^= 0xFF;  // inside the ICRC
    ib::store_vcrc(w.data() + w.size() - 2, ib::compute_vcrc(bytes(w).first(w.size() - 2)));
    std::printf("sent bad_icrc%s\n", port.send_raw(w) ? "" : " (refused)");
    pump(port, ep, std::chrono::milliseconds(100));
    return failures == 0 ? 0 : 1;
}
