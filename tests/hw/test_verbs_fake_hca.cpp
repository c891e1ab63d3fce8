// The verbs backend's own code over the fake libibverbs (fake_verbs.h): the
// same calls it makes on an HCA, answered by a model that checks verbs'
// rules. What only real hardware can show (drivers, firmware, the fabric) is
// in test_verbs_port.cpp.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include "tests/hw/fake_verbs.h"
#include "transport/verbs/verbs_port.h"
#include "transport/verbs/verbs_send_queue.h"

namespace ipoibd::transport {
namespace {

constexpr std::uint32_t kQKey = 0x0B1B;
constexpr std::uint16_t kLid = 0x0011;
constexpr std::size_t kBuffer = kGrhSlotSize + 2048;

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed ^ (i * 13));
    return v;
}

class FakeHca : public ::testing::Test {
protected:
    void SetUp() override { fake_verbs::reset(); }
    void TearDown() override {
        qps_.clear();
        port_.reset();
        const auto& s = fake_verbs::stats();
        EXPECT_TRUE(s.violations.empty()) << "first violation: " << s.violations.front();
        EXPECT_EQ(s.live_contexts + s.live_pds + s.live_channels + s.live_cqs + s.live_qps + s.live_mrs + s.live_ahs +
                      s.live_device_lists,
                  0)
            << "every verbs object is released";
        EXPECT_EQ(s.cq_events_got, s.cq_events_acked);
        EXPECT_EQ(s.async_events_got, s.async_events_acked);
        EXPECT_EQ(s.attachments_left_at_destroy, 0) << "QPs detach before they are destroyed";
    }

    void open() {
        auto p = open_verbs_port("", 1);
        ASSERT_TRUE(p) << p.error().message();
        port_ = std::move(*p);
    }

    UdQp& qp(std::uint32_t send_depth = 16, std::uint32_t receive_depth = 16, std::uint16_t pkey_index = 0) {
        auto q = port_->create_ud_qp(UdQpConfig{kQKey, pkey_index, send_depth, receive_depth});
        EXPECT_TRUE(q) << q.error().message();
        qps_.push_back(std::move(*q));
        return *qps_.back();
    }

    void post_receives(UdQp& q, std::size_t n, std::size_t size = kBuffer) {
        buffers_.resize(n);
        std::vector<ReceiveBuffer> rb;
        for (std::size_t i = 0; i < n; ++i) {
            buffers_[i].assign(size, 0xEE);
            rb.push_back(ReceiveBuffer{100 + i, mutable_bytes(buffers_[i])});
        }
        auto posted = q.post_receive(rb);
        ASSERT_TRUE(posted) << posted.error().message();
        ASSERT_EQ(*posted, n);
    }

    std::vector<Completion> drain(UdQp& q, std::size_t batch = 8) {
        std::vector<Completion> all;
        std::vector<Completion> out(batch);
        for (int round = 0; round < 1000; ++round) {
            port_->process();
            const std::size_t n = q.poll(out);
            all.insert(all.end(), out.begin(), out.begin() + static_cast<long>(n));
            if (n < batch) break;
        }
        return all;
    }

    static SendRequest to_self(const UdQp& q, bytes payload, std::uint64_t wr_id = 1) {
        return SendRequest{wr_id, AddressHandle{kLid, 0, 0, std::nullopt}, q.qpn(), kQKey, payload, std::nullopt, false};
    }

    std::unique_ptr<Port> port_;
    std::vector<std::unique_ptr<UdQp>> qps_;
    std::vector<std::vector<std::uint8_t>> buffers_;
};

// --- opening ---------------------------------------------------------------

TEST_F(FakeHca, ReportsThePortAsVerbsDescribesIt) {
    open();
    const PortAttributes a = port_->attributes();
    EXPECT_EQ(a.state, PortState::active);
    EXPECT_EQ(a.lid, kLid);
    EXPECT_EQ(a.sm_lid, 1);
    EXPECT_EQ(a.port_num, 1);
    EXPECT_EQ(a.active_mtu, ib::Mtu::mtu2048);
    EXPECT_EQ(a.subnet_prefix, 0xFE80000000000000ULL);
    EXPECT_EQ(a.port_guid, 0x0002C90300001234ULL);
    EXPECT_EQ(a.node_guid, 0x0002C90300001230ULL);
    EXPECT_EQ(a.pkey_table, (std::vector<std::uint16_t>{0xFFFF, 0x8001})) << "trailing empty entries left out";
    EXPECT_GE(port_->fd(), 0);
    EXPECT_FALSE(readable(port_->fd()));
}

TEST_F(FakeHca, OpeningErrorsNameWhatFailed) {
    fake_verbs::config().kernel_support = false;
    auto no_kernel = open_verbs_port("mlx5_0", 1);
    ASSERT_FALSE(no_kernel);
    EXPECT_EQ(no_kernel.error().code, Errc::not_supported);
    EXPECT_EQ(no_kernel.error().sys_errno, ENOSYS);
    auto listed = list_verbs_devices();
    ASSERT_FALSE(listed);
    EXPECT_EQ(listed.error().code, Errc::not_supported);

    fake_verbs::reset(fake_verbs::Config{.devices = 0});
    auto none = open_verbs_port("", 1);
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().code, Errc::not_supported);
    EXPECT_NE(none.error().message().find("no RDMA devices"), std::string::npos) << none.error().message();

    fake_verbs::reset(fake_verbs::Config{.devices = 2});
    auto names = list_verbs_devices();
    ASSERT_TRUE(names);
    EXPECT_EQ(*names, (std::vector<std::string>{"fake_ib0", "fake_ib1"}));
    auto wrong = open_verbs_port("mlx5_7", 1);
    ASSERT_FALSE(wrong);
    EXPECT_EQ(wrong.error().code, Errc::invalid_argument);
    EXPECT_NE(wrong.error().message().find("fake_ib0, fake_ib1"), std::string::npos) << wrong.error().message();
    auto port2 = open_verbs_port("fake_ib1", 2);
    ASSERT_FALSE(port2);
    EXPECT_EQ(port2.error().code, Errc::invalid_argument);
    EXPECT_NE(port2.error().message().find("fake_ib1 port 2"), std::string::npos) << port2.error().message();

    fake_verbs::reset(fake_verbs::Config{.link_layer = IBV_LINK_LAYER_ETHERNET});
    auto roce = open_verbs_port("", 1);
    ASSERT_FALSE(roce);
    EXPECT_EQ(roce.error().code, Errc::not_supported);
    EXPECT_NE(roce.error().message().find("RoCE"), std::string::npos);
}

TEST_F(FakeHca, QpConfigIsChecked) {
    open();
    auto empty = port_->create_ud_qp(UdQpConfig{kQKey, 2, 16, 16});
    ASSERT_FALSE(empty);
    EXPECT_EQ(empty.error().code, Errc::bad_pkey_index);
    auto deep = port_->create_ud_qp(UdQpConfig{kQKey, 0, 100000, 16});
    ASSERT_FALSE(deep);
    EXPECT_EQ(deep.error().code, Errc::invalid_argument);
    EXPECT_NE(deep.error().message().find("max_qp_wr"), std::string::npos);
    auto controlled = port_->create_ud_qp(UdQpConfig{ib::kGsiQKey, 0, 16, 16});
    ASSERT_FALSE(controlled);
    EXPECT_EQ(controlled.error().code, Errc::system_error);
    EXPECT_EQ(controlled.error().sys_errno, EPERM);
    EXPECT_NE(controlled.error().message().find("INIT"), std::string::npos) << controlled.error().message();

    UdQp& limited = qp(16, 16, 1);
    EXPECT_EQ(limited.pkey(), 0x8001);
    EXPECT_EQ(limited.qkey(), kQKey);
}

// The SM flips our partition's membership at the QP's index (full to
// limited): the engine keeps the QP (the index holds its partition still),
// and the P_Key it reports, which the data threads send as, follows once the
// port is queried, as the engine does on the pkey_change.
TEST_F(FakeHca, AQpReportsTheP_KeyItsIndexHoldsNow) {
    open();
    UdQp& q = qp(16, 16, 1);
    ASSERT_EQ(q.pkey(), 0x8001);
    fake_verbs::config().pkeys[1] = 0x0001;
    fake_verbs::raise_async_event(IBV_EVENT_PKEY_CHANGE, 1);
    port_->process();
    std::array<PortEvent, 2> events;
    ASSERT_EQ(port_->poll_events(events), 1u);
    ASSERT_EQ(events[0], PortEvent::pkey_change);
    ASSERT_EQ(port_->attributes().pkey_table[1], 0x0001);
    EXPECT_EQ(q.pkey(), 0x0001) << "the limited key, not the full one it was made with";
    EXPECT_EQ(q.pkey_index(), 1);
}

TEST_F(FakeHca, QpnsAreNotReusedWhileThePortLives) {
    fake_verbs::reset(fake_verbs::Config{.reuse_qpns = true});
    open();
    auto first = port_->create_ud_qp(UdQpConfig{kQKey, 0, 4, 4});
    ASSERT_TRUE(first);
    const std::uint32_t old_qpn = (*first)->qpn();
    first->reset();
    UdQp& second = qp(4, 4);
    EXPECT_NE(second.qpn(), old_qpn);
    EXPECT_EQ(fake_verbs::stats().qps_created, 3) << "the reused QPN was held while a fresh one was made";
    EXPECT_EQ(fake_verbs::stats().live_qps, 1);
}

// --- data path --------------------------------------------------------------

TEST_F(FakeHca, UnicastToItselfThroughTheEventFd) {
    open();
    UdQp& q = qp();
    post_receives(q, 3);
    const auto p0 = pattern(10, 1), p1 = pattern(2048, 2), p2 = pattern(0, 3);
    std::vector<SendRequest> sends{to_self(q, p0, 1), to_self(q, p1, 2), to_self(q, p2, 3)};
    sends[1].immediate = 0xCAFEF00D;
    sends[2].remote_qkey = ib::kQKeyControlledBit;
    auto posted = q.post_send(sends);
    ASSERT_TRUE(posted) << posted.error().message();
    EXPECT_EQ(*posted, 3u);

    EXPECT_TRUE(readable(port_->fd())) << "a completion event wakes the loop";
    const auto got = drain(q);
    EXPECT_FALSE(readable(port_->fd()));
    ASSERT_EQ(got.size(), 6u);
    int sends_done = 0;
    for (const Completion& c : got) {
        ASSERT_EQ(c.status, CompletionStatus::success) << to_string(c.status);
        if (c.kind == CompletionKind::send) {
            ++sends_done;
            EXPECT_GE(c.wr_id, 1u);
            EXPECT_LE(c.wr_id, 3u);
            continue;
        }
        const auto& payload = c.wr_id == 100 ? p0 : c.wr_id == 101 ? p1 : p2;
        const auto& buf = buffers_[c.wr_id - 100];
        EXPECT_EQ(c.byte_len, kGrhSlotSize + payload.size());
        EXPECT_EQ(c.src_qp, q.qpn());
        EXPECT_EQ(c.slid, kLid);
        EXPECT_FALSE(c.grh_present);
        EXPECT_EQ(c.pkey_index, 0) << "the QP's index, not verbs' GSI-only field";
        EXPECT_TRUE(std::equal(payload.begin(), payload.end(), buf.begin() + kGrhSlotSize));
        if (kGrhSlotSize + payload.size() < buf.size()) {
            EXPECT_EQ(buf[kGrhSlotSize + payload.size()], 0xEE) << "nothing written past the packet";
        }
        EXPECT_EQ(c.immediate.has_value(), c.wr_id == 101);
        if (c.immediate) {
            EXPECT_EQ(*c.immediate, 0xCAFEF00Du);
        }
    }
    EXPECT_EQ(sends_done, 3);
    EXPECT_EQ(fake_verbs::stats().ahs_created, 1) << "one AH for one destination";
}

TEST_F(FakeHca, RefusalsFollowTheBatchRule) {
    open();
    UdQp& q = qp(4, 4);
    const auto ok = pattern(64, 1), big = pattern(2049, 2);
    auto first_bad = q.post_send(std::vector{to_self(q, big), to_self(q, ok)});
    ASSERT_FALSE(first_bad);
    EXPECT_EQ(first_bad.error().code, Errc::payload_too_long);

    auto later_bad = q.post_send(std::vector{to_self(q, ok), to_self(q, big), to_self(q, ok)});
    ASSERT_TRUE(later_bad);
    EXPECT_EQ(*later_bad, 1u) << "the batch stops at the refused request";

    SendRequest mcast_no_grh = to_self(q, ok);
    mcast_no_grh.ah.dlid = 0xC001;
    auto bad_mcast = q.post_send(std::span(&mcast_no_grh, 1));
    ASSERT_FALSE(bad_mcast);
    EXPECT_EQ(bad_mcast.error().code, Errc::invalid_argument);

    std::vector<SendRequest> many(6, to_self(q, ok));
    auto partial = q.post_send(many);
    ASSERT_TRUE(partial);
    EXPECT_EQ(*partial, 3u) << "4 deep, 1 still outstanding";
    auto full = q.post_send(many);
    ASSERT_TRUE(full);
    EXPECT_EQ(*full, 0u);
    EXPECT_EQ(drain(q).size(), 4u);
    auto again = q.post_send(many);
    ASSERT_TRUE(again);
    EXPECT_EQ(*again, 4u);
    EXPECT_EQ(drain(q).size(), 4u);

    std::array<std::uint8_t, 39> tiny{};
    auto small = q.post_receive(std::array{ReceiveBuffer{1, mutable_bytes(tiny)}});
    ASSERT_FALSE(small);
    EXPECT_EQ(small.error().code, Errc::invalid_argument);
    post_receives(q, 4);
    std::vector<std::uint8_t> extra(kBuffer);
    auto over = q.post_receive(std::array{ReceiveBuffer{9, mutable_bytes(extra)}});
    ASSERT_TRUE(over);
    EXPECT_EQ(*over, 0u) << "receive queue at its depth";
}

TEST_F(FakeHca, ATooSmallReceiveBufferFailsAsItWouldInPlace) {
    open();
    UdQp& q = qp();
    post_receives(q, 1, kGrhSlotSize + 16);
    const auto payload = pattern(17, 4);
    ASSERT_TRUE(q.post_send(std::array{to_self(q, payload)}));
    const auto got = drain(q);
    ASSERT_EQ(got.size(), 2u);
    const auto rx = std::find_if(got.begin(), got.end(), [](const Completion& c) { return c.kind == CompletionKind::receive; });
    ASSERT_NE(rx, got.end());
    EXPECT_EQ(rx->status, CompletionStatus::local_length_error);
    EXPECT_EQ(rx->wr_id, 100u);
    EXPECT_TRUE(std::all_of(buffers_[0].begin(), buffers_[0].end(), [](std::uint8_t b) { return b == 0xEE; }));
}

TEST_F(FakeHca, SendsNeedAnActivePort) {
    fake_verbs::reset(fake_verbs::Config{.state = IBV_PORT_INIT});
    open();
    UdQp& q = qp();
    const auto payload = pattern(8, 0);
    auto refused = q.post_send(std::array{to_self(q, payload)});
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, Errc::port_not_active);

    // The SM brings the port up: an async event, seen through the fd.
    fake_verbs::config().state = IBV_PORT_ACTIVE;
    fake_verbs::raise_async_event(IBV_EVENT_PORT_ACTIVE, 1);
    EXPECT_TRUE(readable(port_->fd()));
    port_->process();
    std::array<PortEvent, 4> events;
    ASSERT_EQ(port_->poll_events(events), 1u);
    EXPECT_EQ(events[0], PortEvent::port_active);
    EXPECT_TRUE(q.post_send(std::array{to_self(q, payload)}));
    drain(q);
}

TEST_F(FakeHca, AsyncEventsBecomePortEvents) {
    fake_verbs::reset(fake_verbs::Config{.ports = 2});
    open();
    qp();
    fake_verbs::raise_async_event(IBV_EVENT_LID_CHANGE, 1);
    fake_verbs::raise_async_event(IBV_EVENT_QP_FATAL, 0);  // not a port event
    fake_verbs::raise_async_event(IBV_EVENT_PORT_ERR, 2);  // another port
    fake_verbs::raise_async_event(IBV_EVENT_SM_CHANGE, 1);
    fake_verbs::raise_async_event(IBV_EVENT_PKEY_CHANGE, 1);
    fake_verbs::raise_async_event(IBV_EVENT_CLIENT_REREGISTER, 1);
    port_->process();
    EXPECT_FALSE(readable(port_->fd()));
    std::array<PortEvent, 8> events;
    ASSERT_EQ(port_->poll_events(events), 4u);
    EXPECT_EQ(events[0], PortEvent::lid_change);
    EXPECT_EQ(events[1], PortEvent::sm_change);
    EXPECT_EQ(events[2], PortEvent::pkey_change);
    EXPECT_EQ(events[3], PortEvent::client_reregister);
    EXPECT_EQ(fake_verbs::stats().async_events_got, 6u);
}

TEST_F(FakeHca, ASmallPollBatchKeepsTheFdReadable) {
    open();
    UdQp& q = qp();
    const auto payload = pattern(8, 0);
    ASSERT_TRUE(q.post_send(std::vector(4, to_self(q, payload))));
    ASSERT_TRUE(readable(port_->fd()));
    std::array<Completion, 1> one;
    std::size_t seen = 0;
    for (int i = 0; i < 10 && readable(port_->fd()); ++i) {
        port_->process();
        seen += q.poll(one);
    }
    EXPECT_EQ(seen, 4u) << "the loop is woken until the CQ is empty";
}

TEST_F(FakeHca, MulticastReachesAttachedQpsWithTheGrh) {
    open();
    UdQp& a = qp();
    UdQp& b = qp();
    const ib::Gid mgid{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    const std::uint16_t mlid = 0xC000;
    ASSERT_TRUE(a.attach_multicast(mgid, mlid));
    ASSERT_TRUE(a.attach_multicast(mgid, mlid));
    ASSERT_TRUE(b.attach_multicast(mgid, mlid));
    auto unicast = a.attach_multicast(mgid, kLid);
    ASSERT_FALSE(unicast);
    EXPECT_EQ(unicast.error().code, Errc::invalid_argument);
    post_receives(a, 1);
    std::vector<std::uint8_t> b_buf(kBuffer);
    ASSERT_TRUE(b.post_receive(std::array{ReceiveBuffer{7, mutable_bytes(b_buf)}}));

    GrhAttributes grh;
    grh.dgid = mgid;
    grh.hop_limit = 1;
    grh.traffic_class = 0x20;
    const auto payload = pattern(300, 5);
    const SendRequest send{9, AddressHandle{mlid, 0, 0, grh}, ib::kQpnMulticast, kQKey, payload, std::nullopt, false};
    ASSERT_TRUE(a.post_send(std::span(&send, 1)));
    const auto at_a = drain(a);
    const auto at_b = drain(b);
    ASSERT_EQ(at_a.size(), 2u) << "the sender's own copy and its send completion";
    ASSERT_EQ(at_b.size(), 1u);
    EXPECT_TRUE(at_b[0].grh_present);
    EXPECT_EQ(at_b[0].src_qp, a.qpn());
    const ib::Grh g = ib::Grh::read_from(b_buf.data());
    EXPECT_EQ(g.dgid, mgid);
    EXPECT_EQ(g.sgid, port_->attributes().gid());
    EXPECT_EQ(g.tclass, 0x20);
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), b_buf.begin() + kGrhSlotSize));

    ASSERT_TRUE(b.detach_multicast(mgid, mlid));
    auto twice = b.detach_multicast(mgid, mlid);
    ASSERT_FALSE(twice);
    EXPECT_EQ(twice.error().code, Errc::not_attached);
    // `a` stays attached: its destructor detaches (checked in TearDown).
}

TEST_F(FakeHca, AddressHandlesAreCachedAndOutliveEvictionWhileInFlight) {
    open();
    UdQp& q = qp(1100, 4);
    const auto payload = pattern(4, 0);
    std::vector<SendRequest> sends;
    for (std::uint16_t i = 0; i < 1100; ++i)
        sends.push_back(SendRequest{i, AddressHandle{static_cast<std::uint16_t>(0x100 + i), 0, 0, std::nullopt}, 0x99,
                                    kQKey, payload, std::nullopt, false});
    auto posted = q.post_send(sends);
    ASSERT_TRUE(posted) << posted.error().message();
    EXPECT_EQ(*posted, 1100u);
    EXPECT_EQ(fake_verbs::stats().ahs_created, 1100);
    EXPECT_EQ(fake_verbs::stats().live_ahs, 1100) << "evicted AHs live on while their sends are in flight";
    EXPECT_EQ(drain(q, 64).size(), 1100u);
    EXPECT_EQ(fake_verbs::stats().live_ahs, 1024) << "then only the cache holds them";
    EXPECT_TRUE(fake_verbs::stats().violations.empty());
}

TEST_F(FakeHca, TeardownInAnyOrder) {
    open();
    UdQp& q = qp();
    post_receives(q, 4);
    const auto payload = pattern(8, 0);
    ASSERT_TRUE(q.post_send(std::vector(2, to_self(q, payload))));
    // Completions and a CQ event left unprocessed; the port goes first.
    port_.reset();
    EXPECT_GT(fake_verbs::stats().live_contexts, 0) << "the QP keeps the device open";
    qps_.clear();
    EXPECT_EQ(fake_verbs::stats().live_contexts, 0);
}

// --- send queues for data threads (verbs_send_queue.h) ----------------------

class FakeHcaSendQueue : public FakeHca {
protected:
    void TearDown() override {
        queue_.reset();
        FakeHca::TearDown();
    }
    void make(std::uint16_t receiver_pkey_index = 0) {
        open();
        receiver_ = &qp(16, 64, receiver_pkey_index);
        post_receives(*receiver_, 64);
        auto q = port_->create_send_queue();
        ASSERT_TRUE(q) << q.error().message();
        queue_ = std::move(*q);
    }
    SendAs as() const { return SendAs{receiver_->qpn(), kQKey, receiver_->pkey(), receiver_->pkey_index()}; }
    std::vector<Completion> received() {
        std::vector<Completion> got;
        for (const Completion& c : drain(*receiver_, 64))
            if (c.kind == CompletionKind::receive) got.push_back(c);
        return got;
    }

    UdQp* receiver_ = nullptr;
    std::unique_ptr<UdSendQueue> queue_;
};

// `bytes` counts whole packets as the soft port does: an immediate's ImmDt
// header and the payload's padding too.
TEST_F(FakeHcaSendQueue, CountsTheBytesOfWholePackets) {
    make();
    const auto payload = pattern(13, 3);
    SendRequest req = to_self(*receiver_, payload);
    req.immediate = 0xC0DE;
    ASSERT_EQ(queue_->send(as(), std::array{req}), 1u);
    queue_->flush();
    EXPECT_EQ(received().size(), 1u);
    EXPECT_EQ(queue_->counters().bytes.load(), 8u + 12 + 8 + 4 + 16 + 4 + 2);  // LRH BTH DETH ImmDt, 13 padded, ICRC VCRC
}

// A data thread's packets leave from a send-only QP of the queue's own: the
// payload arrives whole with the Q_Key and P_Key of the QP it sends as,
// from a source QPN of its own (an HCA cannot send as another QP).
TEST_F(FakeHcaSendQueue, SendsAsTheQpItIsToldWithASourceQpnOfItsOwn) {
    make();
    const auto payload = pattern(1500, 7);
    const SendRequest req = to_self(*receiver_, payload);
    ASSERT_EQ(queue_->send(as(), std::array{req, req}), 2u);
    queue_->flush();
    const auto got = received();
    ASSERT_EQ(got.size(), 2u);
    for (const Completion& c : got) {
        EXPECT_EQ(c.status, CompletionStatus::success);
        EXPECT_EQ(c.byte_len, kGrhSlotSize + payload.size());
        EXPECT_NE(c.src_qp, receiver_->qpn());
        EXPECT_NE(c.src_qp, 0u);
        EXPECT_EQ(c.src_qp, got.front().src_qp) << "one QP for the queue";
    }
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), buffers_[0].begin() + kGrhSlotSize));
    EXPECT_EQ(fake_verbs::stats().last_pkey, 0xFFFF);
    EXPECT_EQ(queue_->counters().packets.load(), 2u);
    EXPECT_EQ(queue_->counters().bytes.load(), 2 * (8 + 12 + 8 + payload.size() + 4 + 2));  // LRH BTH DETH . ICRC VCRC
    EXPECT_EQ(queue_->counters().refused.load() + queue_->counters().dropped.load() + queue_->counters().failed.load(),
              0u);
    EXPECT_EQ(fake_verbs::stats().qps_created, 2) << "the receiver's and the queue's";
    // A controlled Q_Key in a request is the sending-as QP's.
    SendRequest controlled = req;
    controlled.remote_qkey = 0x80000000u | 0x1234;
    ASSERT_EQ(queue_->send(as(), std::array{controlled}), 1u);
    EXPECT_EQ(received().size(), 1u);
    EXPECT_EQ(fake_verbs::stats().dropped_qkey, 0);
}

// The P_Key is the sending-as QP's: the queue's QP sits on the index that
// holds it. When the QP it sends as changes (made again on another P_Key),
// so does the queue's QP; the old one's slots come back.
TEST_F(FakeHcaSendQueue, FollowsThePkeyAndTheQpItSendsAs) {
    make(1);  // the receiver on 0x8001
    const auto payload = pattern(64, 1);
    const SendRequest req = to_self(*receiver_, payload);
    ASSERT_EQ(queue_->send(as(), std::array{req}), 1u);
    ASSERT_EQ(received().size(), 1u);
    EXPECT_EQ(fake_verbs::stats().last_pkey, 0x8001);
    EXPECT_EQ(fake_verbs::stats().dropped_pkey, 0);
    const int created = fake_verbs::stats().qps_created;

    // The same QP: no new one. Another QP on another P_Key (0xFFFF): a
    // new QP on that index, whose packets the 0x8001 receiver does not
    // take (another partition).
    ASSERT_EQ(queue_->send(as(), std::array{req}), 1u);
    EXPECT_EQ(fake_verbs::stats().qps_created, created);
    ASSERT_EQ(received().size(), 1u);
    SendAs other = as();
    other.pkey = 0xFFFF;
    other.pkey_index = 0;
    other.qpn += 1;
    ASSERT_EQ(queue_->send(other, std::array{req}), 1u);
    EXPECT_EQ(fake_verbs::stats().qps_created, created + 1);
    EXPECT_EQ(received().size(), 0u);
    EXPECT_EQ(fake_verbs::stats().dropped_pkey, 1) << "0xFFFF is not the receiver's partition";

    // An index the table does not have: no QP (counted failed), and none
    // tried again at once.
    SendAs absent = as();
    absent.pkey = 0x8042;
    absent.pkey_index = 7;
    absent.qpn += 2;
    EXPECT_EQ(queue_->send(absent, std::array{req, req}), 0u);
    EXPECT_EQ(queue_->counters().failed.load(), 2u);
    EXPECT_EQ(queue_->send(absent, std::array{req}), 0u);
    EXPECT_EQ(queue_->counters().failed.load(), 3u);
    EXPECT_EQ(queue_->counters().refused.load(), 0u);
    EXPECT_EQ(fake_verbs::stats().qps_created, created + 2) << "one attempt (INIT refused the index), not one per send";
    EXPECT_EQ(fake_verbs::stats().live_qps, 1) << "the receiver's: the failed one is gone";
    ASSERT_EQ(queue_->send(as(), std::array{req}), 1u);
    EXPECT_EQ(received().size(), 1u);
}

// What the port's QP refuses, a queue refuses too (counted): a port that is
// not ACTIVE, a payload over the active MTU, multicast. More than its depth
// in flight: the rest dropped (counted) until completions are reaped.
TEST_F(FakeHcaSendQueue, RefusesAndDropsWithACount) {
    make();
    const auto payload = pattern(64, 2);
    const SendRequest req = to_self(*receiver_, payload);
    const auto big = pattern(2049, 3);  // active MTU 2048
    SendRequest multicast = req;
    multicast.ah = AddressHandle{0xC001, 0, 0, GrhAttributes{}};
    multicast.remote_qpn = ib::kQpnMulticast;
    EXPECT_EQ(queue_->send(as(), std::array{to_self(*receiver_, big), multicast}), 0u);
    EXPECT_EQ(queue_->counters().refused.load(), 2u);

    fake_verbs::config().state = IBV_PORT_DOWN;
    fake_verbs::raise_async_event(IBV_EVENT_PORT_ERR, 1);
    port_->process();
    EXPECT_EQ(queue_->send(as(), std::array{req}), 0u);
    EXPECT_EQ(queue_->counters().refused.load(), 3u);
    fake_verbs::config().state = IBV_PORT_ACTIVE;
    fake_verbs::raise_async_event(IBV_EVENT_PORT_ACTIVE, 1);
    port_->process();
    std::array<PortEvent, 4> events;
    (void)port_->poll_events(events);

    // 300 in one call: the ring holds 256, the rest are taken and dropped
    // (as the soft port's full ring); the next send reaps the completions
    // and has room again. The receiver holds 64.
    const std::vector<SendRequest> many(300, req);
    EXPECT_EQ(queue_->send(as(), many), 300u);
    EXPECT_EQ(queue_->counters().dropped.load(), 44u);
    EXPECT_EQ(queue_->send(as(), many), 300u);
    EXPECT_EQ(queue_->counters().packets.load(), 600u);
    EXPECT_EQ(queue_->counters().dropped.load(), 88u);
    // LRH 8, BTH 12, DETH 8, 64 bytes, ICRC 4, VCRC 2.
    EXPECT_EQ(queue_->counters().bytes.load(), 600u * (8 + 12 + 8 + 64 + 4 + 2));
    EXPECT_EQ(fake_verbs::stats().ahs_created, 1) << "one AH for one destination";
    EXPECT_EQ(received().size(), 64u);
}

// A send error leaves a UD QP in SQE, where every later send is flushed:
// the queue makes its QP again and sends go out.
TEST_F(FakeHcaSendQueue, ASendErrorMakesTheQpAgain) {
    make();
    const auto payload = pattern(64, 5);
    const SendRequest req = to_self(*receiver_, payload);
    fake_verbs::config().ud_send_status = IBV_WC_LOC_QP_OP_ERR;
    ASSERT_EQ(queue_->send(as(), std::array{req}), 1u);
    fake_verbs::config().ud_send_status = IBV_WC_SUCCESS;
    const int created = fake_verbs::stats().qps_created;
    ASSERT_EQ(queue_->send(as(), std::array{req}), 1u);
    EXPECT_EQ(fake_verbs::stats().qps_created, created + 1);
    EXPECT_EQ(received().size(), 1u);
    EXPECT_EQ(queue_->counters().dropped.load(), 1u);
    ASSERT_EQ(queue_->send(as(), std::array{req}), 1u);
    EXPECT_EQ(received().size(), 1u);
    EXPECT_EQ(fake_verbs::stats().qps_created, created + 1);
}

// A QP that could not be made is tried again after kRetryAfter, not at
// every send.
TEST_F(FakeHcaSendQueue, AQpThatCouldNotBeMadeIsTriedAgainLater) {
    make();
    const auto payload = pattern(64, 6);
    const SendRequest req = to_self(*receiver_, payload);
    fake_verbs::config().fail_create_qp = 1;
    const int created = fake_verbs::stats().qps_created;
    EXPECT_EQ(queue_->send(as(), std::array{req}), 0u);
    EXPECT_EQ(queue_->send(as(), std::array{req}), 0u);
    EXPECT_EQ(queue_->counters().failed.load(), 2u);
    EXPECT_EQ(fake_verbs::stats().qps_created, created);
    std::size_t taken = 0;
    for (int i = 0; i < 100 && taken == 0; ++i) {  // bounded: 2 s
        std::this_thread::sleep_for(verbs::VerbsSendQueue::kRetryAfter / 5);
        taken = queue_->send(as(), std::array{req});
    }
    EXPECT_EQ(taken, 1u);
    EXPECT_EQ(fake_verbs::stats().qps_created, created + 1);
    EXPECT_EQ(received().size(), 1u);
}

// Made again for another QP with sends outstanding (completions not yet
// come): the old QP's slots are all free again.
TEST_F(FakeHcaSendQueue, MakingTheQpAgainFreesItsSlots) {
    make();
    fake_verbs::config().defer_send_completions = true;
    const auto payload = pattern(64, 8);
    const std::vector<SendRequest> batch(200, to_self(*receiver_, payload));
    ASSERT_EQ(queue_->send(as(), batch), 200u);
    SendAs other = as();
    other.qpn += 1;
    ASSERT_EQ(queue_->send(other, batch), 200u);
    EXPECT_EQ(queue_->counters().dropped.load(), 0u) << "the first 200 slots came back with the old QP";
    fake_verbs::complete_sends();
    queue_->flush();
    EXPECT_EQ(received().size(), 64u);  // what the receiver had posted
}

// The queue on a thread of its own (as a data thread uses it) while the
// port's thread processes events, takes receives and sees the port go
// down and up (the state the queue reads): what the queue took arrived or
// was counted. Run under ThreadSanitizer by scripts/test.sh.
TEST_F(FakeHcaSendQueue, AThreadSendsWhileThePortsThreadWorks) {
    make();
    const auto payload = pattern(200, 9);
    const SendRequest req = to_self(*receiver_, payload);
    constexpr int kRounds = 400;
    std::atomic<std::size_t> taken{0};
    std::atomic<bool> done{false};
    std::thread sender([&] {
        for (int i = 0; i < kRounds; ++i) {
            taken += queue_->send(as(), std::array{req, req});
            queue_->flush();
            if (i % 16 == 0) std::this_thread::yield();
        }
        done = true;
    });
    std::size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int turn = 0; !done && std::chrono::steady_clock::now() < deadline; ++turn) {
        if (turn % 50 == 10) {
            fake_verbs::config().state = IBV_PORT_DOWN;
            fake_verbs::raise_async_event(IBV_EVENT_PORT_ERR, 1);
        } else if (turn % 50 == 20) {
            fake_verbs::config().state = IBV_PORT_ACTIVE;
            fake_verbs::raise_async_event(IBV_EVENT_PORT_ACTIVE, 1);
        }
        for (const Completion& c : received()) {  // each buffer posted again
            ++got;
            const ReceiveBuffer rb{c.wr_id, mutable_bytes(buffers_.at(c.wr_id - 100))};
            ASSERT_TRUE(receiver_->post_receive(std::span(&rb, 1)));
        }
        std::array<PortEvent, 8> events;
        (void)port_->poll_events(events);
    }
    sender.join();
    got += received().size();
    queue_->flush();
    const SendQueueCounters& c = queue_->counters();
    EXPECT_EQ(taken.load(), c.packets.load());
    EXPECT_EQ(c.refused.load() + c.packets.load(), 2u * kRounds) << "every request taken or refused";
    EXPECT_EQ(c.failed.load(), 0u);
    EXPECT_LE(got, c.packets.load() - c.dropped.load());
    // Under load the sender may run all its rounds while the port is down
    // (every packet dropped, counted): that nothing arrived says nothing.
    // The port up again, the queue still carries.
    fake_verbs::config().state = IBV_PORT_ACTIVE;
    fake_verbs::raise_async_event(IBV_EVENT_PORT_ACTIVE, 1);
    // The events the loop left come first, and a queue whose QP could not
    // be made while the port was down tries again after kRetryAfter.
    std::size_t sent = 0;
    for (int i = 0; i < 100 && sent == 0; ++i) {
        port_->process();
        std::array<PortEvent, 8> events;
        (void)port_->poll_events(events);
        sent = queue_->send(as(), std::array{req, req});
        if (sent == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(sent, 2u);
    queue_->flush();
    std::size_t after = 0;
    for (int i = 0; i < 100 && after == 0; ++i) after += received().size();
    EXPECT_GT(after, 0u);
}

// Destroyed with sends in flight and their completions never reaped: the
// QP goes before the AHs those sends hold (the fake checks the order).
TEST_F(FakeHcaSendQueue, TeardownWithSendsInFlight) {
    make();
    const auto payload = pattern(64, 4);
    ASSERT_EQ(queue_->send(as(), std::vector(8, to_self(*receiver_, payload))), 8u);
    port_.reset();
    queue_.reset();
    EXPECT_TRUE(fake_verbs::stats().violations.empty()) << fake_verbs::stats().violations.front();
}

// --- RC (verbs_rc.h) --------------------------------------------------------

class FakeHcaRc : public FakeHca {
protected:
    void TearDown() override {
        a_.reset();
        b_.reset();
        FakeHca::TearDown();
    }
    // Two RC QPs on the fake port, connected to each other (the port's own
    // LID), as ibv_rc_pingpong connects two processes.
    void connect_pair(rc::RtsAttributes rts = {}) {
        open();
        auto a = port_->create_rc_qp(0);
        auto b = port_->create_rc_qp(0);
        ASSERT_TRUE(a) << a.error().message();
        ASSERT_TRUE(b) << b.error().message();
        a_ = std::move(*a);
        b_ = std::move(*b);
        ASSERT_TRUE(a_->connect(kLid, {.dest_qpn = b_->qpn(), .pmtu = 2048, .rq_psn = 0x123}, rts));
        ASSERT_TRUE(b_->connect(kLid, {.dest_qpn = a_->qpn(), .pmtu = 2048, .rq_psn = 0x456}, rts));
    }
    std::vector<rc::Completion> drain(RcQueuePair& q) {
        port_->process();
        return q.poll();
    }

    std::vector<std::uint8_t> window_ = std::vector<std::uint8_t>(8192, 0);
    std::vector<std::uint8_t> source_ = pattern(8192, 0x5A);
    std::vector<std::uint8_t> landing_ = std::vector<std::uint8_t>(8192, 0);
    std::unique_ptr<RcQueuePair> a_, b_;
};

TEST_F(FakeHcaRc, SendWriteWithImmediateAndReadLikeTheSoftPort) {
    connect_pair();
    EXPECT_EQ(a_->state(), rc::QpState::rts);
    EXPECT_NE(a_->qpn(), b_->qpn());
    const auto w = port_->register_memory(window_, rc::access::remote_write);
    const auto r = port_->register_memory(source_, rc::access::remote_read);
    ASSERT_TRUE(w && r);
    ASSERT_TRUE(port_->register_memory(landing_, rc::access::local_write));
    ASSERT_TRUE(b_->post_recv({.wr_id = 10, .capacity = 5000}));
    ASSERT_TRUE(b_->post_recv({.wr_id = 11, .capacity = 64}));
    const auto message = pattern(5000, 1);
    ASSERT_TRUE(a_->post_send({.wr_id = 1, .payload = message, .imm = 0xCAFE}));
    ASSERT_TRUE(a_->post_send({.wr_id = 2, .payload = pattern(300, 2), .imm = 77, .opcode = rc::WrOpcode::rdma_write,
                               .remote_va = w->va + 100, .rkey = w->rkey}));
    ASSERT_TRUE(a_->post_send({.wr_id = 3, .opcode = rc::WrOpcode::rdma_read, .remote_va = r->va + 7, .rkey = r->rkey,
                               .read_into = std::span(landing_).first(4000)}));
    const auto sent = drain(*a_);
    ASSERT_EQ(sent.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(sent[i].wr_id, i + 1);
        EXPECT_EQ(sent[i].status, rc::Status::success) << rc::to_string(sent[i].status);
        EXPECT_FALSE(sent[i].receive);
    }
    const auto got = drain(*b_);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TRUE(got[0].receive);
    EXPECT_EQ(got[0].wr_id, 10u);
    EXPECT_EQ(got[0].data, message);
    EXPECT_EQ(got[0].imm, 0xCAFEu);
    EXPECT_EQ(got[1].wr_id, 11u);
    EXPECT_EQ(got[1].imm, 77u);
    EXPECT_EQ(got[1].byte_len, 300u);
    EXPECT_TRUE(got[1].data.empty()) << "a WRITE's data is in the window, not the buffer";
    const auto written = pattern(300, 2);
    EXPECT_TRUE(std::equal(written.begin(), written.end(), window_.begin() + 100));
    EXPECT_TRUE(std::equal(landing_.begin(), landing_.begin() + 4000, source_.begin() + 7));
    EXPECT_EQ(a_->counters().messages_sent, 3u);
    EXPECT_EQ(b_->counters().messages_received, 2u);
    // Buffers are pooled: a second round registers nothing new.
    const int mrs = fake_verbs::stats().live_mrs;
    ASSERT_TRUE(b_->post_recv({.wr_id = 12, .capacity = 5000}));
    ASSERT_TRUE(a_->post_send({.wr_id = 4, .payload = message}));
    EXPECT_EQ(fake_verbs::stats().live_mrs, mrs);
    EXPECT_EQ(drain(*a_).size(), 1u);
    EXPECT_EQ(drain(*b_).size(), 1u);
}

TEST_F(FakeHcaRc, ABadRKeyIsARemoteAccessErrorAndTheRestIsFlushed) {
    connect_pair();
    const auto r = port_->register_memory(source_, rc::access::remote_read);  // not writable
    ASSERT_TRUE(r);
    ASSERT_TRUE(b_->post_recv({.wr_id = 20, .capacity = 64}));
    ASSERT_TRUE(a_->post_send({.wr_id = 1, .payload = pattern(10, 0), .opcode = rc::WrOpcode::rdma_write,
                               .remote_va = r->va, .rkey = r->rkey}));
    ASSERT_TRUE(a_->post_send({.wr_id = 2, .payload = pattern(10, 0)}));
    const auto sent = drain(*a_);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0].status, rc::Status::remote_access_error);
    EXPECT_EQ(sent[1].status, rc::Status::flushed);
    EXPECT_EQ(a_->state(), rc::QpState::err);
    // The responder's QP went to ERR too: its receive is flushed.
    const auto got = drain(*b_);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, rc::Status::flushed);
}

TEST_F(FakeHcaRc, NoPeerIsRetryExceededNoBufferIsRnrRetryExceeded) {
    connect_pair({.timeout = 10, .retry_count = 2, .rnr_retry = 0});
    ASSERT_TRUE(a_->post_send({.wr_id = 1, .payload = pattern(10, 0)}));  // b has no receive posted
    auto sent = drain(*a_);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].status, rc::Status::rnr_retry_exceeded);
    EXPECT_EQ(fake_verbs::stats().rc_rnr, 1);
    b_.reset();  // the responder goes away
    auto c = port_->create_rc_qp(0);
    ASSERT_TRUE(c);
    ASSERT_TRUE((*c)->connect(kLid, {.dest_qpn = 0xABCD}, {}));
    ASSERT_TRUE((*c)->post_send({.wr_id = 5, .payload = pattern(10, 0)}));
    sent = drain(**c);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].status, rc::Status::retry_exceeded);
    EXPECT_EQ((*c)->state(), rc::QpState::err);
}

TEST_F(FakeHcaRc, RefusesWhatVerbsWouldRefuse) {
    connect_pair();
    std::vector<std::uint8_t> unregistered(64);
    auto r = a_->post_send({.wr_id = 1, .opcode = rc::WrOpcode::rdma_read, .rkey = 1, .read_into = unregistered});
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("not in a region registered"), std::string::npos) << r.error();
    EXPECT_FALSE(a_->connect(kLid, {.dest_qpn = 1}, {})) << "connected already";
    EXPECT_FALSE(port_->create_rc_qp(9)) << "no such P_Key index";
    EXPECT_FALSE(port_->register_memory({}, rc::access::remote_read));
    const auto m = port_->register_memory(source_, rc::access::remote_read);
    ASSERT_TRUE(m);
    EXPECT_TRUE(port_->deregister_memory(m->rkey));
    EXPECT_FALSE(port_->deregister_memory(m->rkey));
    auto fresh = port_->create_rc_qp(0);
    ASSERT_TRUE(fresh);
    EXPECT_FALSE((*fresh)->post_send({.wr_id = 1, .payload = pattern(4, 0)})) << "RESET: nothing to send on";
    EXPECT_FALSE((*fresh)->connect(0xC001, {.dest_qpn = 1}, {})) << "a multicast LID";
}

TEST_F(FakeHcaRc, CompletionsWakeThePortFd) {
    connect_pair();
    port_->process();
    ASSERT_FALSE(readable(port_->fd()));
    ASSERT_TRUE(b_->post_recv({.wr_id = 1, .capacity = 64}));
    ASSERT_TRUE(a_->post_send({.wr_id = 1, .payload = pattern(10, 0)}));
    EXPECT_TRUE(readable(port_->fd())) << "the RC CQ is on the port's completion channel";
    EXPECT_EQ(drain(*a_).size(), 1u);
    EXPECT_EQ(drain(*b_).size(), 1u);
}

}  // namespace
}  // namespace ipoibd::transport
