// The reliable connected service's engine (transport/rc/rc_qp.h) with a fake
// clock: two QPs joined by a wire that can lose, duplicate and reorder.
// Every message arrives once, in order, intact; NAKs, retries, RNR, timeouts
// and PSN wrap-around go as IBA 9.7 says; errors end in the right completion
// and flush the rest.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "transport/rc/rc_qp.h"
#include "transport/wire/opcodes.h"

namespace ipoibd::transport::rc {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;

struct Wire {
    double loss = 0, dup = 0, reorder = 0;
    bool drop_all = false;
    std::mt19937_64 random{1};
    std::function<bool(const RcPacket&)> drop_if;  // a test's own choice
    bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(random) < p; }
    // Packets in flight one way, after the faults.
    void carry(std::vector<RcPacket>& in, std::deque<RcPacket>& out) {
        for (RcPacket& p : in) {
            if (drop_all || chance(loss) || (drop_if && drop_if(p))) continue;
            if (chance(dup)) out.push_back(p);
            if (chance(reorder) && !out.empty())
                out.insert(out.end() - 1, std::move(p));
            else
                out.push_back(std::move(p));
        }
        in.clear();
    }
};

struct RcPair : ::testing::Test {
    RcQp a{0x100}, b{0x200};
    Wire ab, ba;
    Clock::time_point now = Clock::time_point{} + 1h;
    std::vector<Completion> done_a, done_b;

    void connect(std::uint32_t psn_a = 0, std::uint32_t psn_b = 0, RtsAttributes rts = {}, std::uint32_t pmtu = 256,
                 std::uint8_t min_rnr = 1) {
        ASSERT_TRUE(a.to_init());
        ASSERT_TRUE(b.to_init());
        ASSERT_TRUE(a.to_rtr({.dest_qpn = 0x200, .pmtu = pmtu, .rq_psn = psn_b, .min_rnr_timer = min_rnr}));
        ASSERT_TRUE(b.to_rtr({.dest_qpn = 0x100, .pmtu = pmtu, .rq_psn = psn_a, .min_rnr_timer = min_rnr}));
        rts.sq_psn = psn_a;
        ASSERT_TRUE(a.to_rts(rts));
        rts.sq_psn = psn_b;
        ASSERT_TRUE(b.to_rts(rts));
    }
    // Moves packets and time until nothing is left to do (or `limit`).
    void run(Clock::duration limit = 60s) {
        const auto end = now + limit;
        for (int guard = 0; guard < 1'000'000 && now < end; ++guard) {
            std::vector<RcPacket> out_a, out_b;
            a.output(out_a, now);
            b.output(out_b, now);
            std::deque<RcPacket> to_b, to_a;
            ab.carry(out_a, to_b);
            ba.carry(out_b, to_a);
            const bool moved = !to_a.empty() || !to_b.empty();
            for (const RcPacket& p : to_b) b.receive(p, now);
            for (const RcPacket& p : to_a) a.receive(p, now);
            for (auto& c : a.poll()) done_a.push_back(std::move(c));
            for (auto& c : b.poll()) done_b.push_back(std::move(c));
            if (moved) continue;
            // Nothing in flight: the next timer.
            std::optional<Clock::time_point> next = a.next_deadline();
            if (const auto nb = b.next_deadline(); nb && (!next || *nb < *next)) next = nb;
            if (!next) return;
            now = std::max(now, *next);
            a.tick(now);
            b.tick(now);
        }
    }
    static Bytes message(std::size_t n, std::uint8_t seed) {
        Bytes m(n);
        for (std::size_t i = 0; i < n; ++i) m[i] = static_cast<std::uint8_t>(seed + i * 7);
        return m;
    }
};

TEST(RcTimers, RnrTableAndLocalAckTimeout) {
    EXPECT_EQ(rnr_timer(0), 655360us);
    EXPECT_EQ(rnr_timer(1), 10us);
    EXPECT_EQ(rnr_timer(12), 640us);
    EXPECT_EQ(rnr_timer(31), 491520us);
    EXPECT_FALSE(local_ack_timeout(0));
    EXPECT_EQ(*local_ack_timeout(14), 67108us);  // 4.096 us x 2^14
}

TEST(RcStates, TransitionsInOrderOnly) {
    RcQp q(1);
    EXPECT_FALSE(q.to_rtr({}));
    EXPECT_FALSE(q.post_recv({.wr_id = 1, .capacity = 10}));
    ASSERT_TRUE(q.to_init());
    EXPECT_TRUE(q.post_recv({.wr_id = 1, .capacity = 10}));
    EXPECT_FALSE(q.post_send({.wr_id = 2}));
    EXPECT_FALSE(q.to_rtr({.pmtu = 1000}));
    ASSERT_TRUE(q.to_rtr({.dest_qpn = 2, .pmtu = 1024}));
    EXPECT_FALSE(q.to_rts({.retry_count = 8}));
    ASSERT_TRUE(q.to_rts({}));
    EXPECT_EQ(q.state(), QpState::rts);
    q.to_error();
    const auto flushed = q.poll();
    ASSERT_EQ(flushed.size(), 1u);
    EXPECT_EQ(flushed[0].status, Status::flushed);
    EXPECT_TRUE(flushed[0].receive);
}

TEST_F(RcPair, MessagesOfEverySizeArriveOnceInOrderIntact) {
    connect();
    const std::size_t sizes[] = {0, 1, 255, 256, 257, 512, 1000, 4096, 10000};
    for (std::size_t i = 0; i < 40; ++i) ASSERT_TRUE(b.post_recv({.wr_id = 100 + i, .capacity = 16384}));
    for (std::size_t i = 0; i < 40; ++i)
        ASSERT_TRUE(a.post_send({.wr_id = i, .payload = message(sizes[i % 9], static_cast<std::uint8_t>(i)),
                                 .imm = i % 3 == 0 ? std::optional<std::uint32_t>(0xC0DE0000 + i) : std::nullopt}));
    run();
    ASSERT_EQ(done_b.size(), 40u);
    ASSERT_EQ(done_a.size(), 40u);
    for (std::size_t i = 0; i < 40; ++i) {
        EXPECT_EQ(done_b[i].wr_id, 100 + i);
        EXPECT_EQ(done_b[i].status, Status::success);
        EXPECT_EQ(done_b[i].data, message(sizes[i % 9], static_cast<std::uint8_t>(i))) << i;
        EXPECT_EQ(done_b[i].imm.has_value(), i % 3 == 0);
        EXPECT_EQ(done_a[i].wr_id, i);
        EXPECT_EQ(done_a[i].status, Status::success);
    }
    EXPECT_EQ(a.counters().retransmitted, 0u);
}

// 10% loss, 2% duplication and 5% reordering both ways, for several seeds:
// every message still arrives exactly once, in order, intact.
struct RcLossy : RcPair, ::testing::WithParamInterface<std::uint64_t> {};

TEST_P(RcLossy, ALossyFabricLosesNothing) {
    connect(0xFFFFF0, 0x123456);  // the PSNs wrap around 2^24 on the way
    ab = {.loss = 0.10, .dup = 0.02, .reorder = 0.05};
    ba = {.loss = 0.10, .dup = 0.02, .reorder = 0.05};
    ab.random.seed(GetParam());
    ba.random.seed(GetParam() + 1000);
    for (std::size_t i = 0; i < 300; ++i) ASSERT_TRUE(b.post_recv({.wr_id = i, .capacity = 4096}));
    for (std::size_t i = 0; i < 300; ++i)
        ASSERT_TRUE(a.post_send({.wr_id = i, .payload = message(1 + (i * 37) % 1500, static_cast<std::uint8_t>(i))}));
    run(600s);
    ASSERT_EQ(done_b.size(), 300u);
    for (std::size_t i = 0; i < 300; ++i) {
        ASSERT_EQ(done_b[i].status, Status::success);
        ASSERT_EQ(done_b[i].wr_id, i);
        EXPECT_EQ(done_b[i].data, message(1 + (i * 37) % 1500, static_cast<std::uint8_t>(i))) << i;
    }
    ASSERT_EQ(done_a.size(), 300u);
    for (std::size_t i = 0; i < 300; ++i) EXPECT_EQ(done_a[i].wr_id, i);
    EXPECT_GT(a.counters().retransmitted, 0u);
    EXPECT_GT(b.counters().duplicates, 0u);
    EXPECT_EQ(a.state(), QpState::rts);
    EXPECT_EQ(b.state(), QpState::rts);
}
INSTANTIATE_TEST_SUITE_P(Seeds, RcLossy, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8));

TEST_F(RcPair, OneNakPerSequenceErrorThenTheRetransmission) {
    connect();
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(b.post_recv({.wr_id = 10u + static_cast<unsigned>(i), .capacity = 4096}));
    // The second packet of the first message is lost once.
    bool dropped = false;
    ab.drop_if = [&](const RcPacket& p) {
        if (dropped || p.opcode != op::rc_send_middle) return false;
        dropped = true;
        return true;
    };
    ASSERT_TRUE(a.post_send({.wr_id = 1, .payload = message(4 * 256, 1)}));
    run();
    EXPECT_EQ(b.counters().naks_sent, 1u) << "one NAK for the sequence error, not one per packet after it";
    EXPECT_EQ(a.counters().naks_received, 1u);
    ASSERT_EQ(done_b.size(), 1u);
    EXPECT_EQ(done_b[0].data, message(4 * 256, 1));
}

TEST_F(RcPair, NoReceiveBufferMeansRnrNakThenSuccessOnceOneIsPosted) {
    connect(0, 0, {.rnr_retry = 7}, 256, /*min_rnr=*/14);  // 1.28 ms
    ASSERT_TRUE(a.post_send({.wr_id = 1, .payload = message(100, 3)}));
    run(5ms);
    EXPECT_GT(b.counters().rnr_naks_sent, 0u);
    EXPECT_TRUE(done_b.empty());
    ASSERT_TRUE(b.post_recv({.wr_id = 9, .capacity = 100}));
    run();
    ASSERT_EQ(done_b.size(), 1u);
    EXPECT_EQ(done_b[0].data, message(100, 3));
    ASSERT_EQ(done_a.size(), 1u);
    EXPECT_EQ(done_a[0].status, Status::success);
}

TEST_F(RcPair, RnrRetriesRunOutIntoAnErrorAndTheRestIsFlushed) {
    connect(0, 0, {.rnr_retry = 2}, 256, 1);
    ASSERT_TRUE(a.post_send({.wr_id = 1, .payload = message(10, 1)}));
    ASSERT_TRUE(a.post_send({.wr_id = 2, .payload = message(10, 2)}));
    run();
    ASSERT_EQ(done_a.size(), 2u);
    EXPECT_EQ(done_a[0].status, Status::rnr_retry_exceeded);
    EXPECT_EQ(done_a[1].status, Status::flushed);
    EXPECT_EQ(a.state(), QpState::err);
    EXPECT_EQ(b.counters().rnr_naks_sent, 3u);  // the first try and two retries
}

TEST_F(RcPair, SilenceRunsTheRetriesOutIntoRetryExceeded) {
    connect(0, 0, {.timeout = 10, .retry_count = 3});  // 4 ms
    ASSERT_TRUE(b.post_recv({.wr_id = 5, .capacity = 100}));
    ab.drop_all = true;
    ASSERT_TRUE(a.post_send({.wr_id = 1, .payload = message(10, 1)}));
    run();
    ASSERT_EQ(done_a.size(), 1u);
    EXPECT_EQ(done_a[0].status, Status::retry_exceeded);
    EXPECT_EQ(a.counters().timeouts, 4u);  // the first try and three retries
    EXPECT_EQ(a.state(), QpState::err);
    // The process is fine, and so is the other QP.
    EXPECT_EQ(b.state(), QpState::rts);
}

TEST_F(RcPair, DuplicatesAreAcknowledgedNotDeliveredAgain) {
    connect();
    ASSERT_TRUE(b.post_recv({.wr_id = 5, .capacity = 100}));
    ASSERT_TRUE(b.post_recv({.wr_id = 6, .capacity = 100}));
    ab.dup = 1.0;  // every packet twice
    ASSERT_TRUE(a.post_send({.wr_id = 1, .payload = message(10, 1)}));
    run();
    ASSERT_EQ(done_b.size(), 1u);
    EXPECT_EQ(b.counters().duplicates, 1u);
    EXPECT_EQ(a.counters().ghost_acks, 1u) << "the second ACK acknowledges nothing outstanding";
}

TEST_F(RcPair, AMessageLongerThanTheBufferIsAnInvalidRequest) {
    connect();
    ASSERT_TRUE(b.post_recv({.wr_id = 5, .capacity = 100}));
    ASSERT_TRUE(a.post_send({.wr_id = 1, .payload = message(300, 1)}));
    ASSERT_TRUE(a.post_send({.wr_id = 2, .payload = message(10, 1)}));
    run();
    ASSERT_EQ(done_a.size(), 2u);
    EXPECT_EQ(done_a[0].status, Status::remote_invalid_request);
    EXPECT_EQ(done_a[1].status, Status::flushed);
    ASSERT_EQ(done_b.size(), 1u);
    EXPECT_EQ(done_b[0].status, Status::local_length_error);
    EXPECT_EQ(b.state(), QpState::err);
}

TEST_F(RcPair, OpcodeSequenceAndLengthLiesAreInvalidRequests) {
    connect();
    ASSERT_TRUE(b.post_recv({.wr_id = 5, .capacity = 4096}));
    // A MIDDLE with nothing open, at the expected PSN.
    RcPacket middle{.opcode = op::rc_send_middle, .dest_qp = 0x200, .psn = 0, .payload = Bytes(256)};
    b.receive(middle, now);
    std::vector<RcPacket> out;
    b.output(out, now);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].aeth->syndrome, Aeth::kSyndromeNak | nak::invalid_request);
    EXPECT_EQ(b.counters().invalid_requests, 1u);
    // A FIRST shorter than the PMTU on a fresh pair.
    RcQp c(0x300);
    ASSERT_TRUE(c.to_init());
    ASSERT_TRUE(c.post_recv({.wr_id = 1, .capacity = 4096}));
    ASSERT_TRUE(c.to_rtr({.dest_qpn = 0x100, .pmtu = 256}));
    c.receive(RcPacket{.opcode = op::rc_send_first, .dest_qp = 0x300, .psn = 0, .payload = Bytes(100)}, now);
    out.clear();
    c.output(out, now);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].aeth->syndrome, Aeth::kSyndromeNak | nak::invalid_request);
}

}  // namespace
}  // namespace ipoibd::transport::rc
