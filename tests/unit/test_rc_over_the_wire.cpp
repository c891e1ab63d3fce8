// Two RC engines over the wire format, as PortCore drives them: every packet
// encoded into one reused buffer larger than any packet (filled with 0xAB
// first), parsed and checked (ICRC, VCRC) again, decoded with
// decode_rc_header and handed to receive() from a buffer scribbled with 0xDD
// straight after the call, over a wire that loses, duplicates and reorders.
// SENDs, WRITEs and READs of 0 to 2048 bytes at MTU 256 with PSNs that wrap
// arrive intact: the engine keeps no view of a received payload past
// receive(), and encodes no byte of a stale buffer into a packet.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

#include "transport/rc/rc_qp.h"
#include "transport/rc/rc_wire.h"

namespace ipoibd::transport::rc {
namespace {
using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;

struct Enc final : RcQp::PacketSink {
    Bytes buf = Bytes(9000, 0xAB);
    std::deque<Bytes>* out;
    RcPath path;
    void send(const RcPacket& p, bytes payload) override {
        auto n = encode_rc_packet_into(p, payload, path, buf);
        ASSERT_TRUE(n);
        out->emplace_back(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
    }
};

struct RcOverTheWire : ::testing::TestWithParam<std::uint64_t> {
    MemoryRegions ma, mb;
    RcQp a{0x100, &ma}, b{0x200, &mb};
    Clock::time_point now = Clock::time_point{} + 1h;
    std::vector<Completion> da, db;
    std::mt19937_64 rnd{1};
    double loss = 0.1, dup = 0.03, reorder = 0.05;
    Bytes scratch = Bytes(9000);
    std::uint32_t pmtu = 256;

    void deliver(RcQp& q, const Bytes& w) {
        std::copy(w.begin(), w.end(), scratch.begin());
        auto parsed = ib::parse_packet(bytes(scratch).first(w.size()), {.pmtu = pmtu});
        ASSERT_TRUE(parsed) << ib::to_string(parsed.error());
        auto h = decode_rc_header(*parsed);
        ASSERT_TRUE(h);
        q.receive(*h, parsed->payload, now);
        std::fill(scratch.begin(), scratch.end(), 0xDD);
    }
    void carry(std::deque<Bytes>& in, std::deque<Bytes>& out) {
        std::uniform_real_distribution<double> u(0, 1);
        for (auto& p : in) {
            if (u(rnd) < loss) continue;
            if (u(rnd) < dup) out.push_back(p);
            if (u(rnd) < reorder && !out.empty()) out.insert(out.end() - 1, p);
            else out.push_back(p);
        }
        in.clear();
    }
    void run(Clock::duration limit) {
        const auto end = now + limit;
        Enc ea, eb;
        ea.path = {.slid = 1, .dlid = 2};
        eb.path = {.slid = 2, .dlid = 1};
        for (int g = 0; g < 1000000 && now < end; ++g) {
            std::deque<Bytes> oa, ob, to_a, to_b;
            ea.out = &oa;
            eb.out = &ob;
            a.output(ea, now);
            b.output(eb, now);
            carry(oa, to_b);
            carry(ob, to_a);
            const bool moved = !to_a.empty() || !to_b.empty();
            for (auto& w : to_b) deliver(b, w);
            for (auto& w : to_a) deliver(a, w);
            for (auto& c : a.poll()) da.push_back(std::move(c));
            for (auto& c : b.poll()) db.push_back(std::move(c));
            if (moved) continue;
            auto next = a.next_deadline();
            if (auto nb = b.next_deadline(); nb && (!next || *nb < *next)) next = nb;
            if (!next) return;
            now = std::max(now, *next);
            a.tick(now);
            b.tick(now);
        }
    }
};

TEST_P(RcOverTheWire, EveryMessageArrivesThoughBuffersAreReusedAndScribbled) {
    rnd.seed(GetParam());
    ASSERT_TRUE(a.to_init() && b.to_init());
    ASSERT_TRUE(a.to_rtr({.dest_qpn = 0x200, .pmtu = pmtu, .rq_psn = 0x123456, .min_rnr_timer = 1}));
    ASSERT_TRUE(b.to_rtr({.dest_qpn = 0x100, .pmtu = pmtu, .rq_psn = 0xFFFFF0, .min_rnr_timer = 1}));
    ASSERT_TRUE(a.to_rts({.sq_psn = 0xFFFFF0, .timeout = 10}));
    ASSERT_TRUE(b.to_rts({.sq_psn = 0x123456, .timeout = 10}));
    Bytes window(100 * 2048, 0), source(100 * 2048), into(100 * 2048, 0);
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::uint8_t>(i * 31 + 5);
    auto w = mb.register_region(window, access::remote_write);
    auto r = mb.register_region(source, access::remote_read);
    ma.register_region(into, access::local_write);
    const std::size_t sizes[] = {0, 1, 2, 3, 4, 5, 255, 256, 257, 511, 512, 513, 1023, 1500, 2048};
    auto body = [&](std::size_t i) {
        Bytes m(sizes[i % std::size(sizes)]);
        for (std::size_t k = 0; k < m.size(); ++k) m[k] = static_cast<std::uint8_t>(i * 3 + k);
        return m;
    };
    const std::size_t n = 100;
    for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(b.post_recv({.wr_id = 1000 + i, .capacity = 4096}));
    std::size_t sends = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (i % 3 == 0) {
            ASSERT_TRUE(a.post_send({.wr_id = i, .payload = body(i)}));
            ++sends;
        } else if (i % 3 == 1) {
            ASSERT_TRUE(a.post_send({.wr_id = i, .payload = body(i), .opcode = WrOpcode::rdma_write,
                                     .remote_va = w.va + i * 2048, .rkey = w.rkey}));
        } else {
            ASSERT_TRUE(a.post_send({.wr_id = i, .opcode = WrOpcode::rdma_read, .remote_va = r.va + i * 2048,
                                     .rkey = r.rkey, .read_into = std::span(into).subspan(i * 2048, body(i).size())}));
        }
    }
    run(600s);
    ASSERT_EQ(da.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(da[i].status, Status::success) << i;
        const auto m = body(i);
        const auto at = static_cast<std::ptrdiff_t>(i * 2048);
        const auto len = static_cast<std::ptrdiff_t>(m.size());
        if (i % 3 == 1) {
            EXPECT_TRUE(std::equal(m.begin(), m.end(), window.begin() + at)) << i;
        } else if (i % 3 == 2) {
            EXPECT_TRUE(std::equal(source.begin() + at, source.begin() + at + len, into.begin() + at)) << i;
        }
    }
    EXPECT_GT(a.counters().retransmitted, 0u);  // the wire's faults were met
    EXPECT_GT(b.counters().duplicate_reads + b.counters().duplicates, 0u);
    ASSERT_EQ(db.size(), sends);
    std::size_t k = 0;
    for (std::size_t i = 0; i < n; i += 3) EXPECT_EQ(db[k++].data, body(i)) << i;
}
INSTANTIATE_TEST_SUITE_P(Seeds, RcOverTheWire, ::testing::Range<std::uint64_t>(1, 13));

}  // namespace
}  // namespace ipoibd::transport::rc
