// The multicast manager against a real SaClient whose MADs the test reads
// and answers: what a leave sends while a join's outcome is unknown.
#include <gtest/gtest.h>

#include "ipoib/multicast.h"
#include "sa_client/sa_records.h"

namespace ipoibd::ipoib {
namespace {

using namespace std::chrono_literals;

struct NullSink final : McastSink {
    void attach(const ib::Gid&, std::uint16_t) override {}
    void detach(const ib::Gid&, std::uint16_t) override {}
    void broadcast_joined(const LinkParameters&, std::uint16_t) override {}
    void join_failed(const ib::Gid&, GroupRole, std::uint16_t, unsigned, std::chrono::milliseconds, std::size_t) override {}
    void group_joined(const ib::Gid&, GroupRole, std::uint16_t, std::vector<Packet>) override {}
    void group_left(const ib::Gid&, GroupRole) override {}
};

// The SA's GetResp to a join, granting it with `mlid`.
std::vector<std::uint8_t> granted(const sa::SaMad& request, std::uint16_t mlid) {
    sa::SaMad r = request;
    r.header.method = ib::method::get_resp;
    auto rec = sa::get_record<sa::McMemberRecord>(request);
    rec.mlid = mlid;
    rec.q_key = 0x0B1B;
    rec.mtu = 4;
    rec.rate = 3;
    (void)sa::put_record(rec, r);
    std::vector<std::uint8_t> wire(sa::kSaMadSize);
    r.write_to(wire.data());
    return wire;
}

struct McastManagerTest : ::testing::Test {
    Clock::time_point now = Clock::time_point{} + 1h;
    sa::SaClient sa;
    NullSink sink;
    McastManager m{sa, sink, now, McastManager::Config{}};
    ib::Gid broadcast{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    ib::Gid me{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    ib::Gid group{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};

    void SetUp() override {
        m.start(broadcast, me, 0xFFFF);
        const auto out = sa.take_outbound();
        ASSERT_EQ(out.size(), 1u);
        sa.on_mad(granted(out[0], 0xC000), now);
        ASSERT_TRUE(m.broadcast_joined());
    }
    // The Deletes among what the SA client sent, with their JoinStates.
    std::vector<std::uint8_t> deletes() {
        std::vector<std::uint8_t> states;
        for (const sa::SaMad& mad : sa.take_outbound())
            if (mad.header.method == ib::method::del) states.push_back(sa::get_record<sa::McMemberRecord>(mad).join_state);
        return states;
    }
};

// The host leaves while the join is at the SA: the SA may grant it, so the
// leave deletes it (before, nothing did, and the port stayed a member).
TEST_F(McastManagerTest, LeavingWhileTheJoinIsInFlightDeletesIt) {
    m.add_full(group);
    ASSERT_EQ(sa.take_outbound().size(), 1u);
    m.remove_full(group);
    EXPECT_EQ(deletes(), std::vector<std::uint8_t>{sa::join_state::full_member});
}

// A join that timed out may have reached the SA too.
TEST_F(McastManagerTest, LeavingAfterAJoinTimedOutDeletesIt) {
    m.add_full(group);
    ASSERT_EQ(sa.take_outbound().size(), 1u);
    for (int i = 0; i < 100 && m.counters().join_failures == 0; ++i) {
        now += 1s;
        sa.tick(now);
        m.tick();
        (void)sa.take_outbound();
    }
    ASSERT_EQ(m.counters().join_failures, 1u);
    m.remove_full(group);
    EXPECT_EQ(deletes(), std::vector<std::uint8_t>{sa::join_state::full_member});
}

// A join the SA refused holds nothing: no Delete; a granted one is deleted once.
TEST_F(McastManagerTest, ALeaveDeletesWhatTheSaMayHoldOnly) {
    m.add_full(group);
    auto out = sa.take_outbound();
    ASSERT_EQ(out.size(), 1u);
    sa::SaMad refused = out[0];
    refused.header.method = ib::method::get_resp;
    refused.header.status = sa::sa_status::err_req_invalid;
    std::vector<std::uint8_t> wire(sa::kSaMadSize);
    refused.write_to(wire.data());
    sa.on_mad(wire, now);
    m.remove_full(group);
    EXPECT_TRUE(deletes().empty());
    m.add_full(group);
    out = sa.take_outbound();
    ASSERT_EQ(out.size(), 1u);
    sa.on_mad(granted(out[0], 0xC001), now);
    m.remove_full(group);
    EXPECT_EQ(deletes(), std::vector<std::uint8_t>{sa::join_state::full_member});
}

// Frames waiting for joins are bounded all groups together, not only per
// group (64 frames x 1,024 groups of up to 64 KiB while the SA is slow); a
// group's join gives its bytes back.
TEST_F(McastManagerTest, AllGroupsQueuesHoldAtMostMaxQueuedBytes) {
    McastManager::Config config;
    config.max_queued_bytes = 10'000;
    McastManager small{sa, sink, now, config};
    small.start(broadcast, me, 0xFFFF);
    auto out = sa.take_outbound();
    ASSERT_EQ(out.size(), 1u);
    sa.on_mad(granted(out[0], 0xC001), now);
    ASSERT_TRUE(small.broadcast_joined());
    ib::Gid other = group;
    other[15] = 10;
    const std::vector<std::uint8_t> frame(4000, 0x45);
    EXPECT_EQ(small.send(group, frame).outcome, McastSendResult::Outcome::queued);
    EXPECT_EQ(small.send(group, frame).outcome, McastSendResult::Outcome::queued);
    EXPECT_EQ(small.send(other, frame).outcome, McastSendResult::Outcome::dropped);  // 12,000 > 10,000
    EXPECT_EQ(small.counters().drop_queued_bytes, 1u);
    EXPECT_EQ(small.counters().drop_queue_full, 0u);
    // The first group's join is granted: its frames leave, its bytes with them.
    for (const sa::SaMad& mad : sa.take_outbound())
        if (sa::get_record<sa::McMemberRecord>(mad).mgid == group) sa.on_mad(granted(mad, 0xC002), now);
    EXPECT_EQ(small.send(other, frame).outcome, McastSendResult::Outcome::queued);
    EXPECT_EQ(small.counters().drop_queued_bytes, 1u);
}

}  // namespace
}  // namespace ipoibd::ipoib
