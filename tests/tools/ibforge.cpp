// ibforge: injects forged packets into a soft fabric and checks that each is
// dropped and counted for the right reason. A test tool, not installed.
//
//   ibforge --fabric ADDR:PORT [--guid GUID]
//
// 1. plug in a soft port like any other and wait until the SM made it ACTIVE
// 2. create QP A (receive buffers posted) and QP B (none)
// 3. send each forged packet through the switch to this port's own LID;
//    the ones the switch must stop (bad VCRC, unknown DLID) never come back,
//    the others are dropped by the port, each under its own counter
// 4. send one good packet: it must still arrive
// 5. print every case with the counter that moved; exit 0 when each port
//    case moved exactly its counter (switch cases are checked by the caller
//    in ibfabricd's statistics)
#include <sys/epoll.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/socket_address.h"
#include "transport/soft/guid.h"
#include "transport/soft/soft_port.h"

using namespace ipoibd;
using namespace ipoibd::transport;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t kQKey = 0x00C0FFEE;

void pump(SoftPort& port, int epoll_fd, std::chrono::milliseconds how_long) {
    const auto end = Clock::now() + how_long;
    while (Clock::now() < end) {
        epoll_event ev;
        ::epoll_wait(epoll_fd, &ev, 1, 10);
        port.process();
    }
}

struct Case {
    const char* name;
    const char* expected;  // "port malformed X", "port undelivered X", "switch ..."
    std::function<std::vector<std::uint8_t>()> make;
    std::function<std::uint64_t(const PortCounters&)> counter;  // null: a switch case
};

std::uint64_t malformed(const PortCounters& c, ib::DropReason r) { return c.malformed[static_cast<std::size_t>(r)]; }
std::uint64_t undelivered(const PortCounters& c, DeliveryDrop d) { return c.undelivered[static_cast<std::size_t>(d)]; }

void reseal(std::vector<std::uint8_t>& w) {
    const bool global = (w[1] & 3) == 3;
    ib::store_icrc(w.data() + w.size() - 6, ib::compute_icrc(bytes(w).first(w.size() - 6), global ? ib::Lnh::iba_global : ib::Lnh::iba_local));
    ib::store_vcrc(w.data() + w.size() - 2, ib::compute_vcrc(bytes(w).first(w.size() - 2)));
}

}  // namespace

int main(int argc, char** argv) {
    std::string fabric = "127.0.0.1:18516";
    std::uint64_t guid = stable_port_guid("ibforge");
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::string(argv[i]) == "--fabric") fabric = argv[i + 1];
        if (std::string(argv[i]) == "--guid") guid = std::stoull(argv[i + 1], nullptr, 0);
    }
    auto addr = parse_socket_address(fabric);
    if (!addr) {
        std::fprintf(stderr, "ibforge: bad --fabric: %s\n", addr.error().c_str());
        return 2;
    }
    SoftPortConfig config;
    config.fabric = *addr;
    config.port_guid = guid;
    config.node_description = "ibforge";
    auto opened = SoftPort::open(config);
    if (!opened) {
        std::fprintf(stderr, "ibforge: %s\n", opened.error().message().c_str());
        return 1;
    }
    SoftPort& port = **opened;
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, port.fd(), &ev);
    for (int i = 0; i < 500 && port.attributes().state != PortState::active; ++i) pump(port, ep, std::chrono::milliseconds(10));
    if (port.attributes().state != PortState::active) {
        std::fprintf(stderr, "ibforge: port not ACTIVE\n");
        return 1;
    }
    auto qa = *port.create_ud_qp({.qkey = kQKey});
    auto qb = *port.create_ud_qp({.qkey = kQKey});
    std::vector<std::vector<std::uint8_t>> storage(64, std::vector<std::uint8_t>(kGrhSlotSize + 4096));
    for (std::size_t i = 0; i < storage.size(); ++i) {
        const ReceiveBuffer b{i, storage[i]};
        qa->post_receive({&b, 1});
    }
    const PortAttributes attr = port.attributes();
    const std::uint32_t mtu = ib::mtu_bytes(attr.active_mtu);
    std::printf("ibforge: LID 0x%04x QPN A 0x%06x B 0x%06x MTU %u\n", attr.lid, qa->qpn(), qb->qpn(), mtu);

    // A valid UD packet to QP A of this port; each case bends one thing.
    auto good = [&](std::size_t payload_len = 64, std::uint32_t qpn = 0) {
        std::vector<std::uint8_t> payload(payload_len, 0x5A);
        ib::PacketSpec s;
        s.lrh.dlid = attr.lid;
        s.lrh.slid = attr.lid;
        s.bth.opcode = ib::op::ud_send_only;
        s.bth.pkey = attr.pkey_table.at(0);
        s.bth.dest_qp = qpn ? qpn : qa->qpn();
        s.ext.deth = {kQKey, qa->qpn()};
        s.payload = payload;
        std::vector<std::uint8_t> w(ib::packet_size(s));
        (void)ib::build_packet(s, w);
        return w;
    };
    auto with_bth = [&](std::function<void(ib::Bth&)> f, std::function<void(ib::Deth&)> g = {}) {
        auto w = good();
        ib::Bth b = ib::Bth::read_from(w.data() + ib::Lrh::size);
        f(b);
        b.write_to(w.data() + ib::Lrh::size);
        if (g) {
            ib::Deth d = ib::Deth::read_from(w.data() + ib::Lrh::size + ib::Bth::size);
            g(d);
            d.write_to(w.data() + ib::Lrh::size + ib::Bth::size);
        }
        reseal(w);
        return w;
    };
    using R = ib::DropReason;
    using D = DeliveryDrop;
    const std::vector<Case> cases = {
        {"bad ICRC", "port malformed bad_icrc", [&] {
             auto w = good(); w[30] ^= 0xFF;
             ib::store_vcrc(w.data() + w.size() - 2, ib::compute_vcrc(bytes(w).first(w.size() - 2))); return w; },
         [](const PortCounters& c) { return malformed(c, R::bad_icrc); }},
        // A P_Key the port's own switch port lacks: partition enforcement
        // stops it at the switch (the receiving port's own check is the
        // unit tests' and the pkey_children scenario's).
        {"wrong P_Key", "switch drop pkey_inbound", [&] { return with_bth([](ib::Bth& b) { b.pkey = 0x8123; }); },
         nullptr},
        {"wrong Q_Key", "port undelivered qkey_mismatch", [&] { return with_bth([](ib::Bth&) {}, [](ib::Deth& d) { d.qkey = 0xBAD; }); },
         [](const PortCounters& c) { return undelivered(c, D::qkey_mismatch); }},
        {"payload over the PMTU", "port malformed payload_exceeds_pmtu", [&] { return good(mtu + 4); },
         [](const PortCounters& c) { return malformed(c, R::payload_exceeds_pmtu); }},
        {"truncated headers", "port malformed truncated_headers", [&] {
             // RDMA READ Request needs a 16-byte RETH; only the 8 DETH bytes follow the BTH.
             auto w = good(0);
             ib::Bth b = ib::Bth::read_from(w.data() + ib::Lrh::size);
             b.opcode = ib::op::rc_rdma_read_request;
             b.write_to(w.data() + ib::Lrh::size);
             reseal(w);
             return w; },
         [](const PortCounters& c) { return malformed(c, R::truncated_headers); }},
        {"unknown opcode", "port malformed unknown_opcode", [&] { return with_bth([](ib::Bth& b) { b.opcode = 0x18; }); },
         [](const PortCounters& c) { return malformed(c, R::unknown_opcode); }},
        {"no receive buffer posted", "port undelivered no_receive_buffer", [&] { return good(64, qb->qpn()); },
         [](const PortCounters& c) { return undelivered(c, D::no_receive_buffer); }},
        {"no such QP", "port undelivered unknown_qp", [&] { return good(64, 0x7777); },
         [](const PortCounters& c) { return undelivered(c, D::unknown_qp); }},
        {"bad VCRC", "switch link_check bad_vcrc", [&] { auto w = good(); w.back() ^= 0xFF; return w; }, nullptr},
        {"unknown DLID", "switch drop no_route", [&] {
             auto w = good();
             ib::Lrh l = ib::Lrh::read_from(w.data()); l.dlid = 0x0BAD; l.write_to(w.data());
             reseal(w); return w; }, nullptr},
        {"garbage", "switch link_check too_short", [&] { return std::vector<std::uint8_t>(20, 0xAB); }, nullptr},
    };

    // Everything the port can drop a packet for, added up; and completions,
    // so that nothing forged is delivered. (rx_packets also counts the SM's
    // sweeps, so it cannot tell.)
    auto drops = [](const PortCounters& c) {
        std::uint64_t n = 0;
        for (auto v : c.malformed) n += v;
        for (auto v : c.undelivered) n += v;
        return n;
    };
    auto completions = [&] {
        Completion wc[8];
        return qa->poll(wc) + qb->poll(wc);
    };
    int failures = 0;
    for (const Case& c : cases) {
        const PortCounters before = port.counters();
        port.send_raw(c.make());
        pump(port, ep, std::chrono::milliseconds(100));
        const PortCounters after = port.counters();
        const std::uint64_t moved_total = drops(after) - drops(before);
        const std::size_t delivered = completions();
        bool ok;
        if (!c.counter) {
            ok = moved_total == 0 && delivered == 0;
        } else {
            ok = c.counter(after) - c.counter(before) == 1 && moved_total == 1 && delivered == 0;
        }
        std::printf("%-26s expect %-40s %s\n", c.name, c.expected,
                    ok ? (c.counter ? "ok" : "ok (never reached the port)") : "FAIL");
        if (!ok) {
            std::printf("    delivered %zu\n", delivered);
            for (std::size_t i = 0; i < ib::kDropReasonCount; ++i)
                if (after.malformed[i] != before.malformed[i]) std::printf("    moved: malformed %s\n", ib::to_string(static_cast<ib::DropReason>(i)));
            for (std::size_t i = 0; i < kDeliveryDropCount; ++i)
                if (after.undelivered[i] != before.undelivered[i]) std::printf("    moved: undelivered %s\n", to_string(static_cast<DeliveryDrop>(i)));
        }
        failures += ok ? 0 : 1;
    }
    // The port and the switch still carry good traffic.
    port.send_raw(good());
    pump(port, ep, std::chrono::milliseconds(100));
    Completion wc[4];
    const std::size_t n = qa->poll(wc);
    const bool good_ok = n == 1 && wc[0].status == CompletionStatus::success && wc[0].byte_len == kGrhSlotSize + 64;
    std::printf("%-26s expect %-40s %s\n", "good packet", "delivered", good_ok ? "ok" : "FAIL");
    failures += good_ok ? 0 : 1;
    std::printf("ibforge: %d of %zu cases failed\n", failures, cases.size() + 1);
    return failures == 0 ? 0 : 1;
}
