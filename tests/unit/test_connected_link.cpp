// ipoib/connected_link.h on its own: a fake connection manager (the test
// plays the CM's events) and RC QPs on the in-memory fabric, time passed
// in. The paths the in-process nodes do not reach: the bound on frames
// waiting, a rejected peer reached over UD for retry_after and then asked
// again, a peer's receive size below ours, a failed connect, the passive
// side's refusals and idle reaping.
#include <gtest/gtest.h>

#include <vector>

#include "cm/cm_mad.h"
#include "ipoib/connected_link.h"
#include "ipoib/link.h"
#include "transport/memory/memory_fabric.h"

namespace ipoibd::ipoib {
namespace {

using namespace std::chrono_literals;
using Outcome = ConnectedSend::Outcome;

struct FakeCm final : cm::CmAccess {
    std::vector<cm::ConnectParams> connects;
    std::vector<std::pair<cm::ConnectionId, cm::AcceptParams>> accepts;
    std::vector<std::pair<cm::ConnectionId, std::uint16_t>> rejects;
    std::vector<std::vector<std::uint8_t>> reject_aris;
    std::vector<cm::ConnectionId> establishes, disconnects;
    std::vector<std::uint64_t> listening;
    bool refuse_connect = false;
    bool refuse_accept = false;
    bool refuse_establish = false;
    cm::ConnectionId next = 100;

    std::uint64_t ca_guid() const override { return 0x1111; }
    expected<void, std::string> listen(std::uint64_t sid, cm::CmUser&) override {
        listening.push_back(sid);
        return {};
    }
    void unlisten(std::uint64_t sid) override { std::erase(listening, sid); }
    expected<cm::ConnectionId, std::string> connect(const cm::ConnectParams& p, cm::CmUser&, cm::Clock::time_point) override {
        if (refuse_connect) return unexpected(std::string("no room"));
        connects.push_back(p);
        return next++;
    }
    expected<void, std::string> accept(cm::ConnectionId id, const cm::AcceptParams& p, cm::Clock::time_point) override {
        if (refuse_accept) return unexpected(std::string("no such connection"));
        accepts.emplace_back(id, p);
        return {};
    }
    expected<void, std::string> reject(cm::ConnectionId id, std::uint16_t reason, bytes ari, cm::Clock::time_point) override {
        rejects.emplace_back(id, reason);
        reject_aris.emplace_back(ari.begin(), ari.end());
        return {};
    }
    expected<void, std::string> establish(cm::ConnectionId id, cm::Clock::time_point) override {
        if (refuse_establish) return unexpected(std::string("rdma_establish: Invalid argument"));
        establishes.push_back(id);
        return {};
    }
    expected<void, std::string> disconnect(cm::ConnectionId id, cm::Clock::time_point) override {
        disconnects.push_back(id);
        return {};
    }
    void forget(cm::CmUser&) override {}
};

class ConnectedLinkTest : public ::testing::Test {
protected:
    ConnectedLinkTest() {
        config_.queue = 2;
        config_.ring = 4;
        config_.receive_buffers = 8;
        config_.idle = 10s;
        link_ = std::make_unique<ConnectedLink>(
            *a_, cm_, config_,
            [this](EngineEventKind k, std::string m, std::vector<std::pair<std::string, std::string>>) {
                events_.emplace_back(k, std::move(m));
            },
            7);
        EXPECT_TRUE(link_->open(kOurUdQpn, 0xFFFF, t0_));
    }

    HwAddress peer() const {
        return HwAddress{.flags = HwAddress::kFlagConnectedRc, .qpn = kPeerUdQpn, .gid = b_->attributes().gid()};
    }
    PathInfo path() const { return PathInfo{.dlid = b_->attributes().lid, .sl = 0, .mtu = 4, .rate = 3}; }
    static std::vector<std::uint8_t> frame(std::size_t n, std::uint8_t fill = 0x5A) {
        std::vector<std::uint8_t> f(n, fill);
        f[0] = 0x08;  // IPv4 EtherType
        f[1] = 0x00;
        f[2] = f[3] = 0;
        return f;
    }
    // The peer's side of a connection: an RC QP on port b with receives,
    // connected to the QP our REQ named; then the REP as the CM reports it.
    void answer_rep(std::uint32_t receive_size = kConnectedReceiveSize, std::uint64_t receives = 8) {
        ASSERT_FALSE(cm_.connects.empty());
        const cm::ConnectParams& req = cm_.connects.back();
        auto qp = b_->create_rc_qp(0);
        ASSERT_TRUE(qp);
        peer_qp_ = std::move(*qp);
        for (std::uint64_t i = 0; i < receives; ++i) ASSERT_TRUE(peer_qp_->post_recv({.wr_id = i, .capacity = 70000}));
        transport::rc::RtrAttributes rtr;
        rtr.dest_qpn = req.local_qpn;
        rtr.pmtu = 2048;
        rtr.rq_psn = 0x555;  // what the REP says: our send PSN
        transport::rc::RtsAttributes rts;
        rts.sq_psn = req.starting_psn;  // the REQ's: its receive PSN
        ASSERT_TRUE(peer_qp_->connect(a_->attributes().lid, rtr, rts));
        cm::Rep rep;
        rep.local_qpn = peer_qp_->qpn();
        rep.starting_psn = 0x555;
        rep.rnr_retry_count = 7;
        cm::write_ipoib_data(rep.private_data, {.ud_qpn = kPeerUdQpn, .receive_size = receive_size});
        link_->cm_event(cm::Event{.kind = cm::EventKind::rep_received, .id = cm_.next - 1, .rep = rep}, now_);
    }
    std::vector<std::vector<std::uint8_t>> peer_received() {
        std::vector<std::vector<std::uint8_t>> out;
        for (int i = 0; i < 10; ++i) {
            fabric_.run();
            link_->poll([](const ReceivedDatagram&) {}, now_);
            for (auto& c : peer_qp_->poll())
                if (c.receive && c.status == transport::rc::Status::success) out.push_back(std::move(c.data));
        }
        return out;
    }

    static constexpr std::uint32_t kOurUdQpn = 0x000100;
    static constexpr std::uint32_t kPeerUdQpn = 0x000200;
    transport::MemoryFabric fabric_;
    std::unique_ptr<transport::MemoryPort> a_ = fabric_.add_port();
    std::unique_ptr<transport::MemoryPort> b_ = fabric_.add_port();
    FakeCm cm_;
    ConnectedLink::Config config_;
    std::unique_ptr<ConnectedLink> link_;
    std::unique_ptr<transport::RcQueuePair> peer_qp_;
    std::vector<std::pair<EngineEventKind, std::string>> events_;
    const Clock::time_point t0_ = Clock::time_point{} + 1h;
    Clock::time_point now_ = t0_;
};

TEST_F(ConnectedLinkTest, TheFirstFrameSendsALinuxStyleReqAndWaitingIsBounded) {
    EXPECT_EQ(cm_.listening, std::vector<std::uint64_t>{cm::ipoib_service_id(kOurUdQpn)});
    const auto f = frame(100);
    EXPECT_EQ(link_->send(peer(), path(), f, now_).outcome, Outcome::queued);
    ASSERT_EQ(cm_.connects.size(), 1u);
    const cm::ConnectParams& req = cm_.connects.front();
    EXPECT_EQ(req.service_id, cm::ipoib_service_id(kPeerUdQpn));
    EXPECT_EQ(req.peer.lid, b_->attributes().lid);
    EXPECT_EQ(req.primary.remote_gid, b_->attributes().gid());
    EXPECT_EQ(req.path_mtu, 4);
    EXPECT_EQ(req.retry_count, 7);
    EXPECT_EQ(req.rnr_retry_count, 7);
    EXPECT_EQ(cm::read_ipoib_data(req.private_data),
              (cm::IpoibCmData{.ud_qpn = kOurUdQpn, .receive_size = kConnectedReceiveSize}));
    EXPECT_EQ(link_->send(peer(), path(), f, now_).outcome, Outcome::queued);
    EXPECT_EQ(link_->send(peer(), path(), f, now_).outcome, Outcome::dropped);  // queue = 2
    EXPECT_EQ(link_->counters().drop_queue_full, 1u);
    EXPECT_EQ(cm_.connects.size(), 1u);  // one REQ per peer
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::connecting);
    EXPECT_EQ(link_->connection_to(peer())->queued, 2u);
}

TEST_F(ConnectedLinkTest, AllConnectionsQueuesHoldAtMostMaxQueuedBytes) {
    config_.max_queued_bytes = 3000;
    link_ = std::make_unique<ConnectedLink>(*a_, cm_, config_, [](EngineEventKind, std::string, auto) {}, 7);
    ASSERT_TRUE(link_->open(kOurUdQpn, 0xFFFF, now_));
    HwAddress first = peer(), second = peer();
    second.qpn = 0x300;
    // Two peers whose CMs are slow: each may hold `queue` (2) frames, all of
    // them together 3000 bytes.
    EXPECT_EQ(link_->send(first, path(), frame(1000), now_).outcome, Outcome::queued);
    EXPECT_EQ(link_->send(first, path(), frame(1000), now_).outcome, Outcome::queued);
    EXPECT_EQ(link_->send(second, path(), frame(1000), now_).outcome, Outcome::queued);
    EXPECT_EQ(link_->send(second, path(), frame(1000), now_).outcome, Outcome::dropped);
    EXPECT_EQ(link_->counters().drop_queued_bytes, 1u);
    EXPECT_EQ(link_->queued_bytes(), 3000u);
    // The first peer rejects: its frames are dropped and their bytes free.
    ASSERT_EQ(cm_.connects.size(), 2u);
    link_->cm_event(cm::Event{.kind = cm::EventKind::rejected, .id = 100, .reason = cm::rej::consumer_reject}, now_);
    EXPECT_EQ(link_->counters().drop_connect_failed, 2u);
    EXPECT_EQ(link_->queued_bytes(), 1000u);
    EXPECT_EQ(link_->send(second, path(), frame(1000), now_).outcome, Outcome::queued);
    EXPECT_EQ(link_->queued_bytes(), 2000u);
    // Closing drops the rest.
    link_->close(now_);
    EXPECT_EQ(link_->queued_bytes(), 0u);
}

TEST_F(ConnectedLinkTest, TheRepBringsTheConnectionUpAndTheWaitingFramesLeave) {
    ASSERT_EQ(link_->send(peer(), path(), frame(100, 1), now_).outcome, Outcome::queued);
    ASSERT_EQ(link_->send(peer(), path(), frame(5000, 2), now_).outcome, Outcome::queued);
    answer_rep();
    ASSERT_EQ(cm_.establishes.size(), 1u);  // the RTU
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::up);
    EXPECT_EQ(link_->send(peer(), path(), frame(60000, 3), now_).outcome, Outcome::sent);
    const auto got = peer_received();
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0], frame(100, 1));
    EXPECT_EQ(got[1], frame(5000, 2));
    EXPECT_EQ(got[2], frame(60000, 3));
    EXPECT_EQ(link_->counters().connected, 1u);
    EXPECT_EQ(link_->counters().tx_messages, 3u);
}

TEST_F(ConnectedLinkTest, SendsOutstandingHoldAtMostMaxSendBytes) {
    config_.max_send_bytes = 3000;
    link_ = std::make_unique<ConnectedLink>(*a_, cm_, config_, [](EngineEventKind, std::string, auto) {}, 7);
    ASSERT_TRUE(link_->open(kOurUdQpn, 0xFFFF, now_));
    ASSERT_EQ(link_->send(peer(), path(), frame(1000), now_).outcome, Outcome::queued);
    answer_rep();
    EXPECT_EQ(link_->send(peer(), path(), frame(1000), now_).outcome, Outcome::sent);
    EXPECT_EQ(link_->send(peer(), path(), frame(1000), now_).outcome, Outcome::sent);
    // Three unacknowledged (a peer that never reads would hold them for
    // `idle`): the next is dropped, not held.
    EXPECT_EQ(link_->send(peer(), path(), frame(1000), now_).outcome, Outcome::dropped);
    EXPECT_EQ(link_->counters().drop_send_bytes, 1u);
    EXPECT_EQ(link_->send_bytes(), 3000u);
    // Their completions give the bytes back.
    EXPECT_EQ(peer_received().size(), 3u);
    EXPECT_EQ(link_->send_bytes(), 0u);
    EXPECT_EQ(link_->send(peer(), path(), frame(1000), now_).outcome, Outcome::sent);
    EXPECT_EQ(link_->send_bytes(), 1000u);
    // So does the connection's end.
    link_->cm_event(cm::Event{.kind = cm::EventKind::disconnect_requested, .id = cm_.next - 1}, now_);
    EXPECT_EQ(link_->send_bytes(), 0u);
}

TEST_F(ConnectedLinkTest, ASmallFrameTakesUdOnlyWhileTheConnectionHasNothingInFlight) {
    // The first frame starts the connection; a small one goes UD meanwhile.
    ASSERT_EQ(link_->send(peer(), path(), frame(100, 0), now_, true).outcome, Outcome::use_datagram);
    EXPECT_EQ(cm_.connects.size(), 1u);
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::connecting);
    // Once a frame waits for the connection, small ones wait behind it.
    ASSERT_EQ(link_->send(peer(), path(), frame(9000, 1), now_, false).outcome, Outcome::queued);
    ASSERT_EQ(link_->send(peer(), path(), frame(100, 9), now_, true).outcome, Outcome::queued);
    EXPECT_EQ(link_->counters().idle_datagram, 1u);
    answer_rep();
    // The waiting frame is on its way, unacknowledged: a small frame
    // follows it over RC so as not to overtake it.
    EXPECT_EQ(link_->send(peer(), path(), frame(200, 2), now_, true).outcome, Outcome::sent);
    auto got = peer_received();  // delivered and acknowledged
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0], frame(9000, 1));
    EXPECT_EQ(got[1], frame(100, 9));
    EXPECT_EQ(got[2], frame(200, 2));
    EXPECT_EQ(link_->counters().idle_datagram, 1u);
    // Idle: UD.
    EXPECT_EQ(link_->send(peer(), path(), frame(300, 3), now_, true).outcome, Outcome::use_datagram);
    EXPECT_EQ(link_->counters().idle_datagram, 2u);
    // What does not fit UD takes the connection.
    EXPECT_EQ(link_->send(peer(), path(), frame(9000, 4), now_, false).outcome, Outcome::sent);
    // ... and while it is in flight the next small one follows it.
    EXPECT_EQ(link_->send(peer(), path(), frame(300, 5), now_, true).outcome, Outcome::sent);
    got = peer_received();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], frame(9000, 4));
    EXPECT_EQ(got[1], frame(300, 5));
    EXPECT_EQ(link_->counters().tx_messages, 5u);
    EXPECT_EQ(link_->counters().idle_datagram, 2u);
    // Frames over UD do not keep the connection: it carries nothing and is
    // reaped as idle; the next small frame goes UD while a new one starts.
    now_ = t0_ + config_.idle - 1s;
    EXPECT_EQ(link_->send(peer(), path(), frame(300, 6), now_, true).outcome, Outcome::use_datagram);
    now_ = t0_ + config_.idle + 1s;
    link_->tick(now_);
    EXPECT_EQ(link_->counters().reaped_idle, 1u);
    EXPECT_FALSE(link_->connection_to(peer()));
    EXPECT_EQ(link_->send(peer(), path(), frame(300, 7), now_, true).outcome, Outcome::use_datagram);
    EXPECT_EQ(cm_.connects.size(), 2u);
}

TEST(ConnectedLinkConfig, WithoutDatagramWhenIdleEveryFrameTakesTheConnection) {
    transport::MemoryFabric fabric;
    auto a = fabric.add_port();
    auto b = fabric.add_port();
    FakeCm cm;
    ConnectedLink::Config config;
    config.datagram_when_idle = false;
    ConnectedLink link(*a, cm, config, [](EngineEventKind, std::string, std::vector<std::pair<std::string, std::string>>) {}, 7);
    const Clock::time_point now = Clock::time_point{} + 1h;
    ASSERT_TRUE(link.open(0x100, 0xFFFF, now));
    const HwAddress to{.flags = HwAddress::kFlagConnectedRc, .qpn = 0x200, .gid = b->attributes().gid()};
    const PathInfo path{.dlid = b->attributes().lid, .sl = 0, .mtu = 4, .rate = 3};
    std::vector<std::uint8_t> f(100, 0);
    ASSERT_EQ(link.send(to, path, f, now, true).outcome, Outcome::queued);
    auto qp = b->create_rc_qp(0);
    ASSERT_TRUE(qp);
    transport::rc::RtrAttributes rtr;
    rtr.dest_qpn = cm.connects.back().local_qpn;
    rtr.pmtu = 2048;
    rtr.rq_psn = 0x555;
    transport::rc::RtsAttributes rts;
    rts.sq_psn = cm.connects.back().starting_psn;
    ASSERT_TRUE((*qp)->connect(a->attributes().lid, rtr, rts));
    cm::Rep rep;
    rep.local_qpn = (*qp)->qpn();
    rep.starting_psn = 0x555;
    cm::write_ipoib_data(rep.private_data, {.ud_qpn = 0x200, .receive_size = kConnectedReceiveSize});
    link.cm_event(cm::Event{.kind = cm::EventKind::rep_received, .id = cm.next - 1, .rep = rep}, now);
    for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE((*qp)->post_recv({.wr_id = i, .capacity = 70000}));
    for (int i = 0; i < 10; ++i) {
        fabric.run();
        link.poll([](const ReceivedDatagram&) {}, now);
        (void)(*qp)->poll();
    }
    EXPECT_EQ(link.send(to, path, f, now, true).outcome, Outcome::sent);  // idle, yet over RC
    EXPECT_EQ(link.counters().idle_datagram, 0u);
}

TEST_F(ConnectedLinkTest, AFrameOverThePeersReceiveSizeIsTooBig) {
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    answer_rep(2048);
    const ConnectedSend r = link_->send(peer(), path(), frame(3000), now_);
    EXPECT_EQ(r.outcome, Outcome::too_big);
    EXPECT_EQ(r.mtu, 2044u);
}

TEST_F(ConnectedLinkTest, ARejectedPeerIsReachedOverUdForAWhileThenAskedAgain) {
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    link_->cm_event(cm::Event{.kind = cm::EventKind::rejected, .id = cm_.next - 1, .reason = 8}, now_);
    EXPECT_EQ(link_->counters().rejected_by_peer, 1u);
    EXPECT_EQ(link_->counters().drop_connect_failed, 1u);  // the frame that waited
    ASSERT_EQ(events_.size(), 1u);
    EXPECT_EQ(events_.front().first, EngineEventKind::connection_failed);
    EXPECT_NE(events_.front().second.find("rejected (reason 8)"), std::string::npos) << events_.front().second;
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::failed);
    now_ += 500ms;
    EXPECT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::use_datagram);
    EXPECT_EQ(cm_.connects.size(), 1u);
    ASSERT_TRUE(link_->next_deadline());
    EXPECT_EQ(*link_->next_deadline(), t0_ + config_.retry_after);
    now_ = t0_ + config_.retry_after;
    EXPECT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    EXPECT_EQ(cm_.connects.size(), 2u);
}

TEST_F(ConnectedLinkTest, AnUnknownServiceIdSaysThePeersAddressIsGoneOtherReasonsDoNot) {
    std::vector<HwAddress> gone;
    link_->on_peer_gone([&](const HwAddress& hw) { gone.push_back(hw); });
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    link_->cm_event(cm::Event{.kind = cm::EventKind::rejected, .id = cm_.next - 1, .reason = cm::rej::no_qp}, now_);
    EXPECT_TRUE(gone.empty());  // busy, not gone
    now_ = t0_ + config_.retry_after;
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    link_->cm_event(cm::Event{.kind = cm::EventKind::rejected, .id = cm_.next - 1, .reason = cm::rej::invalid_service_id},
                    now_);
    ASSERT_EQ(gone.size(), 1u);
    EXPECT_TRUE(gone[0].same_endpoint(peer()));
}

// A peer whose CM never answers: each failure in a row doubles the time
// its frames go UD before the next REQ (1, 2, 4 s ... at most retry_max);
// a connection that comes up starts over.
TEST_F(ConnectedLinkTest, FailuresInARowBackOffUntilAConnectionComesUp) {
    auto fail_once = [&] {
        link_->cm_event(cm::Event{.kind = cm::EventKind::timed_out, .id = cm_.next - 1}, now_);
    };
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    fail_once();
    std::size_t connects = cm_.connects.size();
    for (const auto wait : {1s, 2s, 4s, 8s}) {
        now_ += wait - 10ms;
        EXPECT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::use_datagram) << wait.count();
        EXPECT_EQ(cm_.connects.size(), connects);
        now_ += 10ms;
        link_->tick(now_);
        ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued) << wait.count();
        ASSERT_EQ(cm_.connects.size(), ++connects);
        fail_once();
    }
    // It comes up at last: the next failure waits 1 s again.
    now_ += 16s;
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    answer_rep();
    ASSERT_EQ(link_->counters().connected, 1u);
    link_->cm_event(cm::Event{.kind = cm::EventKind::timed_out, .id = cm_.next - 1}, now_);
    now_ += 1s;
    link_->tick(now_);
    EXPECT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
}

TEST_F(ConnectedLinkTest, AConnectTheCmRefusesFallsBackToUd) {
    cm_.refuse_connect = true;
    EXPECT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::use_datagram);
    EXPECT_EQ(link_->counters().connect_errors, 1u);
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::failed);
}

// The CM refusing the RTU (librdmacm's rdma_establish failing) or the REP:
// the connection is rejected, not left in REP_RCVD or REQ_RCVD holding the
// CM's slot until the peer gives up.
TEST_F(ConnectedLinkTest, AnRtuOrRepTheCmRefusesRejectsTheConnection) {
    cm_.refuse_establish = true;
    EXPECT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    answer_rep();
    ASSERT_EQ(cm_.rejects.size(), 1u);
    EXPECT_EQ(cm_.rejects[0], std::make_pair(cm::ConnectionId{100}, cm::rej::consumer_reject));
    EXPECT_EQ(link_->counters().connect_errors, 1u);
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::failed);

    cm_.refuse_accept = true;
    cm::Req r;
    r.local_comm_id = 0x9001;
    r.service_id = cm::ipoib_service_id(kOurUdQpn);
    r.local_qpn = 0x501;
    r.pkey = 0xFFFF;
    r.path_mtu = 4;
    r.primary.local_lid = b_->attributes().lid;
    r.primary.local_gid = b_->attributes().gid();
    r.primary.remote_gid = a_->attributes().gid();
    cm::write_ipoib_data(r.private_data, {.ud_qpn = kPeerUdQpn, .receive_size = kConnectedReceiveSize});
    const cm::Event req{.kind = cm::EventKind::req_received, .id = 7, .peer = {.lid = b_->attributes().lid}, .req = r};
    link_->cm_event(req, now_);
    ASSERT_EQ(cm_.rejects.size(), 2u);
    EXPECT_EQ(cm_.rejects[1], std::make_pair(cm::ConnectionId{7}, cm::rej::consumer_reject));
    EXPECT_EQ(link_->buffers_in_use(), 0u);
}

TEST_F(ConnectedLinkTest, TheConnectionsAreBoundedFailedOnesIncluded) {
    config_.max_connections = 2;
    link_ = std::make_unique<ConnectedLink>(*a_, cm_, config_, [](EngineEventKind, std::string, auto) {}, 7);
    ASSERT_TRUE(link_->open(kOurUdQpn, 0xFFFF, now_));
    for (std::uint32_t q = 0; q < 2; ++q) {
        HwAddress p = peer();
        p.qpn = 0x300 + q;
        EXPECT_EQ(link_->send(p, path(), frame(100), now_).outcome, Outcome::queued);
    }
    HwAddress third = peer();
    third.qpn = 0x400;
    EXPECT_EQ(link_->send(third, path(), frame(100), now_).outcome, Outcome::use_datagram);
    EXPECT_EQ(link_->counters().no_room_datagram, 1u);
    EXPECT_EQ(link_->connections(), 2u);
}

// A peer's REQ from its RC QP `qpn` for its UD QP `ud_qpn`.
cm::Req passive_req(std::uint32_t qpn, const ib::Gid& ours, const ib::Gid& theirs, std::uint16_t their_lid,
                    std::uint32_t ud_qpn = 0x000200) {
    cm::Req r;
    r.local_comm_id = 0x9000 + qpn;
    r.service_id = cm::ipoib_service_id(0x000100);
    r.local_qpn = qpn;
    r.starting_psn = 0x123;
    r.pkey = 0xFFFF;
    r.path_mtu = 4;
    r.retry_count = 0;
    r.rnr_retry_count = 0;
    r.primary.local_lid = their_lid;
    r.primary.local_gid = theirs;
    r.primary.remote_gid = ours;
    r.primary.local_ack_timeout = 14;
    cm::write_ipoib_data(r.private_data, {.ud_qpn = ud_qpn, .receive_size = kConnectedReceiveSize});
    return r;
}

TEST_F(ConnectedLinkTest, PeersRequestsAreAcceptedUntilThePoolRunsOutAndBadOnesRefused) {
    const ib::Gid ours = a_->attributes().gid(), theirs = b_->attributes().gid();
    const std::uint16_t lid = b_->attributes().lid;
    auto event = [&](const cm::Req& r, cm::ConnectionId id) {
        link_->cm_event(cm::Event{.kind = cm::EventKind::req_received, .id = id, .peer = {.lid = lid}, .req = r}, now_);
    };
    event(passive_req(0x501, ours, theirs, lid), 1);
    ASSERT_EQ(cm_.accepts.size(), 1u);
    const cm::AcceptParams& rep = cm_.accepts.front().second;
    EXPECT_EQ(cm::read_ipoib_data(rep.private_data),
              (cm::IpoibCmData{.ud_qpn = kOurUdQpn, .receive_size = kConnectedReceiveSize}));
    EXPECT_EQ(rep.rnr_retry_count, 0);  // the REQ's, as Linux echoes it
    EXPECT_EQ(link_->buffers_in_use(), 4u);
    event(passive_req(0x502, ours, theirs, lid, 0x202), 2);  // the port's second UD QP
    EXPECT_EQ(link_->buffers_in_use(), 8u);
    event(passive_req(0x503, ours, theirs, lid, 0x203), 3);  // 8 buffers, 4 each: no room
    ib::Gid wrong = ours;
    wrong[15] ^= 1;
    event(passive_req(0x504, wrong, theirs, lid), 4);
    cm::Req uc = passive_req(0x505, ours, theirs, lid);
    uc.transport_service_type = 1;
    event(uc, 5);
    ASSERT_EQ(cm_.rejects.size(), 3u);
    EXPECT_EQ(cm_.rejects[0], std::make_pair(cm::ConnectionId{3}, cm::rej::no_qp));
    EXPECT_EQ(cm_.rejects[1], std::make_pair(cm::ConnectionId{4}, cm::rej::invalid_gid));
    EXPECT_EQ(cm_.reject_aris[1], std::vector<std::uint8_t>(ours.begin(), ours.end()));
    EXPECT_EQ(cm_.rejects[2], std::make_pair(cm::ConnectionId{5}, cm::rej::invalid_transport_type));
    EXPECT_EQ(link_->counters().rejected_no_room, 1u);
    EXPECT_EQ(link_->counters().rejected_bad_req, 2u);

    // A DREQ frees a connection and its buffers.
    link_->cm_event(cm::Event{.kind = cm::EventKind::disconnect_requested, .id = 1}, now_);
    EXPECT_EQ(link_->buffers_in_use(), 4u);
    EXPECT_EQ(link_->counters().disconnected_by_peer, 1u);
}

// One port may hold max_passive_per_peer connections to us, counted by the
// source LID the fabric vouches for; a new REQ from the UD QP that holds
// one replaces it (the peer gave it up), and only from the same LID.
TEST_F(ConnectedLinkTest, APortHoldsBoundedPassiveConnectionsAndANewReqReplacesItsOldOne) {
    config_.receive_buffers = 64;
    config_.max_passive_per_peer = 2;
    link_ = std::make_unique<ConnectedLink>(*a_, cm_, config_, [](EngineEventKind, std::string, auto) {}, 7);
    ASSERT_TRUE(link_->open(kOurUdQpn, 0xFFFF, t0_));
    const ib::Gid ours = a_->attributes().gid(), theirs = b_->attributes().gid();
    const std::uint16_t lid = b_->attributes().lid;
    auto event = [&](const cm::Req& r, cm::ConnectionId id, std::uint16_t from) {
        link_->cm_event(cm::Event{.kind = cm::EventKind::req_received, .id = id, .peer = {.lid = from}, .req = r}, now_);
    };
    event(passive_req(0x501, ours, theirs, lid, 0x201), 1, lid);
    event(passive_req(0x502, ours, theirs, lid, 0x202), 2, lid);
    event(passive_req(0x503, ours, theirs, lid, 0x203), 3, lid);  // a third UD QP: over the limit
    ASSERT_EQ(cm_.rejects.size(), 1u);
    EXPECT_EQ(cm_.rejects[0], std::make_pair(cm::ConnectionId{3}, cm::rej::no_qp));
    EXPECT_EQ(link_->counters().rejected_peer_limit, 1u);
    EXPECT_EQ(link_->connections(), 2u);
    // Another port is not limited by this one's connections.
    event(passive_req(0x504, ours, theirs, lid + 40, 0x201), 4, static_cast<std::uint16_t>(lid + 40));
    EXPECT_EQ(link_->connections(), 3u);
    // The first UD QP connects again: its old connection goes (DREQ), the
    // new one is accepted within the limit.
    event(passive_req(0x505, ours, theirs, lid, 0x201), 5, lid);
    EXPECT_EQ(link_->counters().replaced_by_peer, 1u);
    EXPECT_EQ(cm_.disconnects, std::vector<cm::ConnectionId>{1});
    EXPECT_EQ(link_->connections(), 3u);
    EXPECT_EQ(cm_.accepts.back().first, cm::ConnectionId{5});
    // A REQ from another LID naming the same peer replaces nothing.
    event(passive_req(0x506, ours, theirs, lid, 0x202), 6, static_cast<std::uint16_t>(lid + 41));
    EXPECT_EQ(link_->counters().replaced_by_peer, 1u);
    EXPECT_EQ(link_->connections(), 4u);
}

TEST_F(ConnectedLinkTest, AFrameFromAPeersConnectionNamesItsSenderByLidAndUdQpn) {
    // The peer's RC QP, and its REQ naming it (UD QPN kPeerUdQpn in the private data).
    auto qp = b_->create_rc_qp(0);
    ASSERT_TRUE(qp);
    peer_qp_ = std::move(*qp);
    const std::uint16_t lid = b_->attributes().lid;
    const cm::Req req = passive_req(peer_qp_->qpn(), a_->attributes().gid(), b_->attributes().gid(), lid);
    link_->cm_event(cm::Event{.kind = cm::EventKind::req_received, .id = 1, .peer = {.lid = lid}, .req = req}, now_);
    ASSERT_EQ(cm_.accepts.size(), 1u);
    const cm::AcceptParams& rep = cm_.accepts.front().second;
    transport::rc::RtrAttributes rtr;
    rtr.dest_qpn = rep.local_qpn;
    rtr.pmtu = 2048;
    rtr.rq_psn = req.starting_psn;
    transport::rc::RtsAttributes rts;
    rts.sq_psn = rep.starting_psn;
    ASSERT_TRUE(peer_qp_->connect(a_->attributes().lid, rtr, rts));
    ASSERT_NE(peer_qp_->qpn(), kPeerUdQpn);
    ASSERT_TRUE(peer_qp_->post_send({.wr_id = 1, .payload = frame(100)}));
    std::vector<std::pair<std::uint16_t, std::uint32_t>> from;
    for (int i = 0; i < 10; ++i) {
        fabric_.run();
        link_->poll([&](const ReceivedDatagram& d) { from.emplace_back(d.slid, d.src_qp); }, now_);
        (void)peer_qp_->poll();
    }
    // PacketSource is LID and UD QPN (TAP mode's sender MAC is looked up by
    // them), not the QPN of the peer's RC QP.
    ASSERT_EQ(from.size(), 1u);
    EXPECT_EQ(from[0], std::make_pair(lid, kPeerUdQpn));
}

// A peer that accepts and then posts no receives answers every SEND with an
// RNR NAK, and our RNR retry count (7, which a Linux peer echoes) retries
// forever: without a bound nothing would complete, fail or be reaped.
TEST_F(ConnectedLinkTest, AConnectionWhoseSendsMakeNoProgressForTheIdleTimeIsTornDown) {
    config_.send_depth = 2;
    link_ = std::make_unique<ConnectedLink>(
        *a_, cm_, config_,
        [this](EngineEventKind k, std::string m, std::vector<std::pair<std::string, std::string>>) {
            events_.emplace_back(k, std::move(m));
        },
        7);
    ASSERT_TRUE(link_->open(kOurUdQpn, 0xFFFF, now_));
    auto turn = [&] {  // the fabric and both sides, RC timers as at `now_`, as in real time
        for (int i = 0; i < 4; ++i) {
            a_->core().service_rc(std::chrono::steady_clock::now() + (now_ - t0_));
            fabric_.run();
            link_->poll([](const ReceivedDatagram&) {}, now_);
            (void)peer_qp_->poll();
        }
    };
    ASSERT_EQ(link_->send(peer(), path(), frame(3000, 1), now_).outcome, Outcome::queued);
    answer_rep(kConnectedReceiveSize, 0);  // the waiting frame leaves: RNR NAK
    turn();
    // Progress (a completion) starts the bound again: the peer posts one
    // receive late, the retry gets through.
    now_ = t0_ + config_.idle - 1s;
    ASSERT_TRUE(peer_qp_->post_recv({.wr_id = 1, .capacity = 70000}));
    turn();
    link_->tick(now_);
    ASSERT_EQ(link_->connection_to(peer())->state, ConnState::up);
    const Clock::time_point progress = now_;
    // Then nothing: two SENDs outstanding (send_depth), the rest dropped, small frames too.
    ASSERT_EQ(link_->send(peer(), path(), frame(3000, 2), now_).outcome, Outcome::sent);
    now_ += 1s;
    ASSERT_EQ(link_->send(peer(), path(), frame(3000, 3), now_).outcome, Outcome::sent);
    turn();
    EXPECT_EQ(link_->send(peer(), path(), frame(100, 4), now_, true).outcome, Outcome::dropped);
    EXPECT_EQ(link_->counters().drop_send_full, 1u);
    ASSERT_TRUE(link_->next_deadline());
    EXPECT_EQ(*link_->next_deadline(), progress + config_.idle);
    now_ = progress + config_.idle - 1ms;
    turn();
    link_->tick(now_);
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::up);
    // No completion for the idle time with SENDs outstanding: torn down as
    // an RC error would (DREQ, logged, UD for retry_after, then a new REQ).
    now_ = progress + config_.idle;
    link_->tick(now_);
    EXPECT_EQ(link_->counters().send_stalled, 1u);
    EXPECT_EQ(link_->connection_to(peer())->state, ConnState::failed);
    EXPECT_EQ(cm_.disconnects, std::vector<cm::ConnectionId>{cm_.next - 1});
    ASSERT_EQ(events_.size(), 1u);
    EXPECT_EQ(events_[0].first, EngineEventKind::connection_failed);
    EXPECT_NE(events_[0].second.find("no SEND completed"), std::string::npos) << events_[0].second;
    EXPECT_EQ(link_->send(peer(), path(), frame(100, 5), now_, true).outcome, Outcome::use_datagram);
    now_ += config_.retry_after;
    EXPECT_EQ(link_->send(peer(), path(), frame(3000, 6), now_).outcome, Outcome::queued);
    EXPECT_EQ(cm_.connects.size(), 2u);
    EXPECT_EQ(link_->counters().tx_messages, 3u);
}

TEST_F(ConnectedLinkTest, AConnectionTheCmEndedByItselfGoesAtItsTimewaitExit) {
    // One of ours and two of the peer's.
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    answer_rep();
    const cm::ConnectionId ours = cm_.next - 1;
    const ib::Gid our_gid = a_->attributes().gid(), their_gid = b_->attributes().gid();
    const std::uint16_t lid = b_->attributes().lid;
    for (const cm::ConnectionId id : {1u, 2u})
        link_->cm_event(cm::Event{.kind = cm::EventKind::req_received, .id = id, .peer = {.lid = lid},
                                  .req = passive_req(0x500 + id, our_gid, their_gid, lid, 0x300 + id)},
                        now_);
    ASSERT_EQ(link_->connections(), 3u);
    ASSERT_EQ(link_->buffers_in_use(), 8u);
    // The peer's second ends as usual: DREQ, then TimeWait's end.
    link_->cm_event(cm::Event{.kind = cm::EventKind::disconnect_requested, .id = 2}, now_);
    link_->cm_event(cm::Event{.kind = cm::EventKind::timewait_exit, .id = 2}, now_ + 1s);
    EXPECT_EQ(link_->counters().disconnected_by_peer, 1u);
    // The CM ends the other two by itself (a stale REQ from the peer's QP:
    // its DREQ, the DREP, TimeWait); all their owner hears is the end of
    // TimeWait. Their QPs and buffers go then.
    link_->cm_event(cm::Event{.kind = cm::EventKind::timewait_exit, .id = 1}, now_ + 1s);
    link_->cm_event(cm::Event{.kind = cm::EventKind::timewait_exit, .id = ours}, now_ + 1s);
    EXPECT_EQ(link_->connections(), 0u);
    EXPECT_EQ(link_->buffers_in_use(), 0u);
    EXPECT_EQ(link_->counters().ended_by_cm, 2u);
    EXPECT_TRUE(cm_.disconnects.empty()) << "the CM has ended them already";
    // Our next frame to the peer asks for a new connection at once.
    EXPECT_EQ(link_->send(peer(), path(), frame(100), now_ + 1s).outcome, Outcome::queued);
    EXPECT_EQ(cm_.connects.size(), 2u);
}

TEST_F(ConnectedLinkTest, IdleConnectionsAreClosedOursSoonerThanPeers) {
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    answer_rep();
    const ib::Gid ours = a_->attributes().gid(), theirs = b_->attributes().gid();
    link_->cm_event(cm::Event{.kind = cm::EventKind::req_received, .id = 50, .peer = {.lid = b_->attributes().lid},
                              .req = passive_req(0x601, ours, theirs, b_->attributes().lid)},
                    now_);
    ASSERT_EQ(link_->connections(), 2u);
    (void)peer_received();  // the frame left; nothing outstanding
    now_ = t0_ + config_.idle;
    link_->tick(now_);
    EXPECT_EQ(link_->counters().reaped_idle, 1u);  // ours
    EXPECT_EQ(link_->connections(), 1u);
    EXPECT_EQ(cm_.disconnects.size(), 1u);
    now_ = t0_ + 4 * config_.idle;
    link_->tick(now_);
    EXPECT_EQ(link_->counters().reaped_idle, 2u);  // the peer's, after 4x
    EXPECT_EQ(link_->connections(), 0u);
    EXPECT_EQ(link_->buffers_in_use(), 0u);
}

TEST_F(ConnectedLinkTest, ClosingDisconnectsEverythingAndStopsListening) {
    ASSERT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::queued);
    link_->close(now_);
    EXPECT_TRUE(cm_.listening.empty());
    EXPECT_EQ(cm_.disconnects.size(), 1u);
    EXPECT_EQ(link_->connections(), 0u);
    EXPECT_EQ(link_->counters().drop_connect_failed, 1u);
    EXPECT_EQ(link_->send(peer(), path(), frame(100), now_).outcome, Outcome::use_datagram);
}

}  // namespace
}  // namespace ipoibd::ipoib
