// The soft MAD transport over the in-memory fabric: port LID 1 plays the SM
// with a fake SA on its QP1 (every in-memory port's SM LID is 1), port LID 2
// is the SA client's. Checks the addressing (SM LID, QP1, the GSI Q_Key),
// receive buffers that are posted again, padding of short MADs, the bounded
// hand-over queue, and a whole SaClient transaction.
#include <gtest/gtest.h>

#include <algorithm>

#include "sa_client/mad_agent.h"
#include "sa_client/mad_transport_soft.h"
#include "sa_client/sa_client.h"
#include "sa_client/sa_records.h"
#include "transport/memory/memory_fabric.h"

namespace ipoibd::sa {
namespace {

using transport::Completion;
using transport::CompletionKind;
using transport::kGrhSlotSize;

// QP1 of the SM's port, answering what arrives: each request comes back as
// its response (R bit set), or as `reply_size` bytes when that is set.
class FakeSa {
public:
    explicit FakeSa(transport::MemoryPort& port) : qp_(std::move(*port.create_gsi_qp(64, 64))) {
        for (std::uint64_t i = 0; i < buffers_.size(); ++i) post(i);
    }

    // Answers every request received; returns how many.
    std::size_t serve() {
        Completion wc[16];
        std::size_t answered = 0;
        for (std::size_t n = qp_->poll(wc), i = 0; i < n; ++i) {
            const Completion& c = wc[i];
            if (c.kind == CompletionKind::send) continue;
            last = c;
            const bytes mad = bytes(buffers_[c.wr_id]).subspan(kGrhSlotSize, c.byte_len - kGrhSlotSize);
            last_request = SaMad::read_from(mad.data());
            SaMad resp = last_request;
            resp.header.method = static_cast<std::uint8_t>(resp.header.method | ib::method::response_bit);
            std::vector<std::uint8_t> wire(kSaMadSize);
            resp.write_to(wire.data());
            wire.resize(reply_size);
            send_to(c.slid, wire);
            post(c.wr_id);
            ++answered;
        }
        return answered;
    }

    // Takes the requests that arrived and answers none (buffers posted again).
    void drop_requests() {
        Completion wc[16];
        for (std::size_t n = qp_->poll(wc); n > 0; n = qp_->poll(wc))
            for (std::size_t i = 0; i < n; ++i)
                if (wc[i].kind == CompletionKind::receive) post(wc[i].wr_id);
    }

    void send_to(std::uint16_t dlid, bytes payload) {
        const transport::SendRequest s{.ah = {.dlid = dlid}, .remote_qpn = ib::kQp1, .remote_qkey = ib::kGsiQKey, .payload = payload};
        ASSERT_EQ(*qp_->post_send({&s, 1}), 1u);
    }

    Completion last;
    SaMad last_request;
    std::size_t reply_size = kSaMadSize;

private:
    void post(std::uint64_t i) {
        const transport::ReceiveBuffer b{i, buffers_[i]};
        ASSERT_EQ(*qp_->post_receive({&b, 1}), 1u);
    }
    std::unique_ptr<transport::UdQp> qp_;
    std::vector<std::vector<std::uint8_t>> buffers_ = std::vector<std::vector<std::uint8_t>>(64, std::vector<std::uint8_t>(kGrhSlotSize + kSaMadSize));
};

SaMad get_request(std::uint64_t tid) {
    McMemberQuery q;
    q.set_mgid(Gid{0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF});
    return *q.request(ib::method::get, tid);
}

struct MadTransportTest : ::testing::Test {
    transport::MemoryFabric fabric;
    std::unique_ptr<transport::MemoryPort> sm_port = fabric.add_port();      // LID 1
    std::unique_ptr<transport::MemoryPort> client_port = fabric.add_port();  // LID 2
    FakeSa sa{*sm_port};
    std::unique_ptr<SoftMadTransport> transport = open({});

    std::unique_ptr<SoftMadTransport> open(SoftMadTransportConfig config) {
        auto gsi = client_port->create_gsi_qp(16, 64);
        EXPECT_TRUE(gsi.has_value());
        auto t = SoftMadTransport::open(*client_port, std::move(*gsi), config);
        EXPECT_TRUE(t.has_value());
        return t ? std::move(*t) : nullptr;
    }
    std::vector<std::vector<std::uint8_t>> received;
    std::size_t receive(std::size_t max = 64) {
        return transport->receive([&](bytes m) { received.emplace_back(m.begin(), m.end()); }, max);
    }
};

TEST_F(MadTransportTest, RequestGoesToTheSmQp1AndTheResponseComesBack) {
    const auto info = transport->port_info();
    EXPECT_EQ(info.lid, 2);
    EXPECT_EQ(info.sm_lid, 1);
    EXPECT_TRUE(info.active);
    ASSERT_TRUE(transport->send(get_request(0x1234)).has_value());
    fabric.run();
    ASSERT_EQ(sa.serve(), 1u);
    // From the client's QP1 and LID, a whole MAD, P_Key index 0 (0xffff).
    EXPECT_EQ(sa.last.src_qp, ib::kQp1);
    EXPECT_EQ(sa.last.slid, 2);
    EXPECT_EQ(sa.last.byte_len, kGrhSlotSize + kSaMadSize);
    EXPECT_EQ(sa.last.pkey_index, 0);
    EXPECT_EQ(sa.last_request, get_request(0x1234));
    fabric.run();
    EXPECT_EQ(receive(), 1u);
    ASSERT_EQ(received.size(), 1u);
    ASSERT_EQ(received[0].size(), kSaMadSize);
    const SaMad resp = SaMad::read_from(received[0].data());
    EXPECT_EQ(resp.header.method, ib::method::get_resp);
    EXPECT_EQ(resp.header.transaction_id, 0x1234u);
    EXPECT_EQ(transport->counters().sent, 1u);
    EXPECT_EQ(transport->counters().received, 1u);
    EXPECT_EQ(receive(), 0u);  // nothing more
}

TEST_F(MadTransportTest, ReceiveBuffersArePostedAgain) {
    transport = nullptr;
    transport = open({.receive_buffers = 2});
    for (std::uint64_t i = 0; i < 50; ++i) {
        ASSERT_TRUE(transport->send(get_request(i)).has_value()) << i;
        fabric.run();
        ASSERT_EQ(sa.serve(), 1u);
        fabric.run();
        ASSERT_EQ(receive(), 1u) << i;
    }
    EXPECT_EQ(transport->counters().received, 50u);
    EXPECT_EQ(transport->counters().receive_errors, 0u);
    EXPECT_EQ(transport->counters().send_errors, 0u);
}

TEST_F(MadTransportTest, ShortMadsArePaddedTooShortOnesDropped) {
    sa.reply_size = 112;  // what libumad2sim hands over for one MCMemberRecord
    ASSERT_TRUE(transport->send(get_request(7)).has_value());
    fabric.run();
    sa.serve();
    fabric.run();
    ASSERT_EQ(receive(), 1u);
    ASSERT_EQ(received[0].size(), kSaMadSize);
    EXPECT_EQ(SaMad::read_from(received[0].data()).header.transaction_id, 7u);
    EXPECT_TRUE(std::all_of(received[0].begin() + 112, received[0].end(), [](std::uint8_t b) { return b == 0; }));
    EXPECT_EQ(transport->counters().short_received, 1u);

    sa.reply_size = kSaHeaderSize - 1;  // not even the SA header
    ASSERT_TRUE(transport->send(get_request(8)).has_value());
    fabric.run();
    sa.serve();
    fabric.run();
    EXPECT_EQ(receive(), 0u);
    EXPECT_EQ(transport->counters().dropped, 1u);
}

TEST_F(MadTransportTest, HandOverIsBoundedPerCallAndInTotal) {
    transport = nullptr;
    transport = open({.receive_buffers = 8, .max_pending = 3});
    std::vector<std::uint8_t> mad(kSaMadSize);
    get_request(1).write_to(mad.data());
    for (int i = 0; i < 5; ++i) sa.send_to(2, mad);
    fabric.run();
    EXPECT_EQ(receive(2), 2u);  // at most `max` per call
    EXPECT_EQ(transport->counters().dropped, 2u);  // 5 arrived, 3 could wait
    EXPECT_EQ(receive(), 1u);
    EXPECT_EQ(transport->counters().received, 3u);
}

TEST_F(MadTransportTest, NoSmLidNoSend) {
    auto a = client_port->attributes();
    a.sm_lid = 0;
    client_port->core().set_attributes(a);
    const auto r = transport->send(get_request(1));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, MadTransportErrc::no_sm);
    EXPECT_EQ(transport->counters().send_errors, 1u);
    EXPECT_EQ(transport->counters().sent, 0u);
}

TEST_F(MadTransportTest, OnlyQp1Accepted) {
    auto qp = client_port->create_ud_qp({.qkey = 0x1234});
    ASSERT_TRUE(qp.has_value());
    const auto t = SoftMadTransport::open(*client_port, std::move(*qp));
    ASSERT_FALSE(t.has_value());
    EXPECT_EQ(t.error().code, MadTransportErrc::open_failed);
}

// The SaClient over the transport: submit, move MADs both ways, callback.
TEST_F(MadTransportTest, SaClientTransaction) {
    SaClient client;
    std::optional<expected<SaResult, SaFailure>> result;
    const auto now = Clock::now();
    auto handle = client.submit(get_request(0), [&](const expected<SaResult, SaFailure>& r) { result = r; }, now);
    for (int step = 0; step < 10 && !result; ++step) {
        for (const SaMad& m : client.take_outbound()) ASSERT_TRUE(transport->send(m).has_value());
        fabric.run();
        sa.serve();
        fabric.run();
        transport->receive([&](bytes m) { client.on_mad(m, now); }, 64);
    }
    ASSERT_TRUE(result.has_value());
    ASSERT_TRUE(result->has_value());
    EXPECT_EQ((*result)->status(), 0);
    EXPECT_EQ((*result)->header.header.method, ib::method::get_resp);
    EXPECT_EQ(client.counters().responses, 1u);
    EXPECT_EQ(client.counters().unmatched, 0u);
}

// ---------------------------------------------------------------------------
// The QP1 MAD agent over the same path: clients share QP1; responses reach
// the client whose request had the TID, unsolicited MADs the clients of
// their class and method; the rest is counted.

struct Recorder final : MadClient {
    std::vector<SaMad> got;
    void on_mad(bytes mad) override { got.push_back(SaMad::read_from(mad.data())); }
};

struct MadAgentTest : MadTransportTest {
    MadAgent agent{std::move(transport)};  // the fixture's path: QP1 is one per port
    Recorder a, b;
    void SetUp() override {
        ASSERT_TRUE(agent.register_client(a, ib::mgmt_class::subn_adm, ib::class_version::subn_adm,
                                          {ib::method::report}).has_value());
        ASSERT_TRUE(agent.register_client(b, ib::mgmt_class::subn_adm, ib::class_version::subn_adm).has_value());
    }
    // The SA sends `mad` to the client's QP1 unsolicited.
    void from_sa(const SaMad& mad) {
        std::vector<std::uint8_t> wire(kSaMadSize);
        mad.write_to(wire.data());
        sa.send_to(2, wire);
        fabric.run();
    }
    void round_trip() {
        fabric.run();
        sa.serve();
        fabric.run();
        agent.receive();
    }
};

TEST_F(MadAgentTest, ResponsesGoToTheClientWhoseRequestHadTheTid) {
    ASSERT_TRUE(agent.send(a, get_request(0x1B0B000000000001ULL)).has_value());
    ASSERT_TRUE(agent.send(b, get_request(0x1B0B000001000001ULL)).has_value());
    round_trip();
    ASSERT_EQ(a.got.size(), 1u);
    ASSERT_EQ(b.got.size(), 1u);
    EXPECT_EQ(a.got[0].header.transaction_id, 0x1B0B000000000001ULL);
    EXPECT_EQ(b.got[0].header.transaction_id, 0x1B0B000001000001ULL);
    EXPECT_EQ(agent.counters().dispatched, 2u);
}

TEST_F(MadAgentTest, ResponsesAreMatchedOnTheLow32BitsOfTheTid) {
    // The kernel's MAD layer (and libumad2sim) rewrite the high 32 bits.
    ASSERT_TRUE(agent.send(b, get_request(0x1B0B0000000000A1ULL)).has_value());
    fabric.run();
    sa.drop_requests();  // the answer below is the SA's
    SaMad resp = get_request(0x7777777700000000ULL | 0xA1);
    resp.header.method = ib::method::get_resp;
    from_sa(resp);
    (void)agent.receive();
    EXPECT_TRUE(a.got.empty());
    ASSERT_EQ(b.got.size(), 1u);
    EXPECT_EQ(b.got[0].header.transaction_id, 0x7777777700000000ULL | 0xA1);
    EXPECT_EQ(agent.outstanding(), 0u);
}

// A response counts only from where its request went (the SM's LID): one
// from another port with the request's TID is dropped and the request
// stays outstanding, so the SA's own answer still reaches its client.
TEST_F(MadAgentTest, AResponseFromAnotherPortDoesNotTakeTheRequestsPlace) {
    std::unique_ptr<transport::MemoryPort> other_port = fabric.add_port();  // LID 3
    FakeSa forger{*other_port};
    ASSERT_TRUE(agent.send(b, get_request(0x1B0B0000000000C1ULL)).has_value());
    fabric.run();
    SaMad forged = get_request(0x1B0B0000000000C1ULL);
    forged.header.method = ib::method::get_resp;
    forged.header.status = 0x0C00;  // "no records": not what the SA says
    std::vector<std::uint8_t> wire(kSaMadSize);
    forged.write_to(wire.data());
    forger.send_to(2, wire);
    fabric.run();
    (void)agent.receive();
    EXPECT_TRUE(b.got.empty());
    EXPECT_EQ(agent.counters().response_wrong_source, 1u);
    EXPECT_EQ(agent.outstanding(), 1u);
    sa.serve();  // the SA's answer
    fabric.run();
    (void)agent.receive();
    ASSERT_EQ(b.got.size(), 1u);
    EXPECT_EQ(b.got[0].header.status, 0u);
    EXPECT_EQ(agent.outstanding(), 0u);
}

TEST_F(MadAgentTest, UnsolicitedMadsGoToTheClientsTakingTheirMethod) {
    SaMad report = get_request(0x55);
    report.header.method = ib::method::report;
    from_sa(report);
    agent.receive();
    EXPECT_EQ(a.got.size(), 1u);  // registered for Report
    EXPECT_TRUE(b.got.empty());
}

TEST_F(MadAgentTest, WhatNoClientClaimsIsCountedByReason) {
    SaMad late = get_request(0x99);  // a response to no request of ours
    late.header.method = ib::method::get_resp;
    from_sa(late);
    SaMad set = get_request(0x98);  // SubnAdm, a method nobody takes
    set.header.method = ib::method::set;
    from_sa(set);
    SaMad cm = get_request(0x97);  // a class nobody registered (CM)
    cm.header.mgmt_class = ib::mgmt_class::com_mgt;
    from_sa(cm);
    agent.receive();
    EXPECT_TRUE(a.got.empty());
    EXPECT_TRUE(b.got.empty());
    EXPECT_EQ(agent.counters().unmatched_response, 1u);
    EXPECT_EQ(agent.counters().unclaimed_method, 1u);
    EXPECT_EQ(agent.counters().unclaimed_class, 1u);
    EXPECT_EQ(agent.counters().dispatched, 0u);
    // The request of a class nobody here serves is answered "class not
    // supported" (IBA 13.4.7), so that its sender fails at once.
    EXPECT_EQ(agent.counters().class_not_supported_sent, 1u);
    fabric.run();
    ASSERT_EQ(sa.serve(), 1u);
    EXPECT_EQ(sa.last_request.header.mgmt_class, ib::mgmt_class::com_mgt);
    EXPECT_EQ(sa.last_request.header.method, ib::method::get_resp);
    EXPECT_EQ(sa.last_request.header.transaction_id, 0x97u);
    EXPECT_EQ(sa.last_request.header.status, ib::mad_status::bad_version);
}

TEST_F(MadAgentTest, ANewClassIsClaimedOnceAClientRegistersIt) {
    Recorder cm;
    ASSERT_TRUE(agent.register_client(cm, ib::mgmt_class::com_mgt, 2, {ib::method::send}).has_value());
    SaMad req = get_request(0x42);
    req.header.mgmt_class = ib::mgmt_class::com_mgt;
    req.header.class_version = 2;
    req.header.method = ib::method::send;
    from_sa(req);
    agent.receive();
    EXPECT_EQ(cm.got.size(), 1u);
    agent.unregister_client(cm);
    from_sa(req);
    agent.receive();
    EXPECT_EQ(cm.got.size(), 1u);
    EXPECT_EQ(agent.counters().unclaimed_class, 1u);
}

TEST_F(MadAgentTest, AnsweredRequestsLeaveTheTable) {
    for (std::uint64_t t = 1; t <= MadAgent::kMaxOutstanding + 10; ++t) {
        ASSERT_TRUE(agent.send(a, get_request(t)).has_value());
        round_trip();
    }
    EXPECT_EQ(a.got.size(), MadAgent::kMaxOutstanding + 10);
    EXPECT_EQ(agent.outstanding(), 0u);
    EXPECT_EQ(agent.counters().requests_forgotten, 0u);
    // A second answer to an answered request is nobody's.
    SaMad again = get_request(1);
    again.header.method = ib::method::get_resp;
    from_sa(again);
    agent.receive();
    EXPECT_EQ(agent.counters().unmatched_response, 1u);
}

// One request never answered (a join that timed out, given up by its
// client) must not hold back the order records of every answered one after
// it: they stay bounded as the table is.
TEST_F(MadAgentTest, AnUnansweredRequestHoldsBackNoRecordsOfAnsweredOnes) {
    ASSERT_TRUE(agent.send(a, get_request(1)).has_value());
    fabric.run();
    sa.drop_requests();
    for (std::uint64_t t = 2; t <= 3 * MadAgent::kMaxOutstanding; ++t) {
        ASSERT_TRUE(agent.send(a, get_request(t)).has_value());
        round_trip();
    }
    EXPECT_EQ(a.got.size(), 3 * MadAgent::kMaxOutstanding - 1);
    EXPECT_EQ(agent.outstanding(), 1u);
    EXPECT_LE(agent.order_records(), 2 * MadAgent::kMaxOutstanding);
    // The first is still waited for, and still answered.
    SaMad late = get_request(1);
    late.header.method = ib::method::get_resp;
    from_sa(late);
    agent.receive();
    EXPECT_EQ(agent.outstanding(), 0u);
    EXPECT_EQ(a.got.back().header.transaction_id, 1u);
}

TEST_F(MadAgentTest, UnansweredRequestsAreBoundedOldestFirst) {
    // The fake SA stays silent: requests pile up, the oldest are forgotten.
    for (std::uint64_t t = 1; t <= MadAgent::kMaxOutstanding + 10; ++t) {
        ASSERT_TRUE(agent.send(a, get_request(t)).has_value());
        fabric.run();
        sa.drop_requests();
    }
    EXPECT_EQ(agent.outstanding(), MadAgent::kMaxOutstanding);
    EXPECT_EQ(agent.counters().requests_forgotten, 10u);
    SaMad oldest = get_request(1);  // forgotten
    oldest.header.method = ib::method::get_resp;
    from_sa(oldest);
    SaMad newest = get_request(MadAgent::kMaxOutstanding + 10);
    newest.header.method = ib::method::get_resp;
    from_sa(newest);
    agent.receive();
    EXPECT_EQ(agent.counters().unmatched_response, 1u);
    ASSERT_EQ(a.got.size(), 1u);
    EXPECT_EQ(a.got[0].header.transaction_id, MadAgent::kMaxOutstanding + 10);
}

TEST_F(MadAgentTest, AResponseOfAnotherClassDoesNotCompleteARequest) {
    ASSERT_TRUE(agent.send(a, get_request(0x31)).has_value());
    fabric.run();
    sa.drop_requests();
    SaMad cm = get_request(0x31);  // same TID, the CM's class
    cm.header.mgmt_class = ib::mgmt_class::com_mgt;
    cm.header.method = ib::method::get_resp;
    from_sa(cm);
    agent.receive();
    EXPECT_TRUE(a.got.empty());
    EXPECT_EQ(agent.counters().unmatched_response, 1u);
    EXPECT_EQ(agent.outstanding(), 1u);
}

TEST_F(MadAgentTest, AClientUnregisteredDuringDispatchIsNotCalled) {
    struct Leaver final : MadClient {
        MadAgent* agent = nullptr;
        MadClient* other = nullptr;
        int got = 0;
        void on_mad(bytes) override {
            ++got;
            agent->unregister_client(*other);
        }
    };
    Recorder late;
    Leaver leaver;
    leaver.agent = &agent;
    leaver.other = &late;
    ASSERT_TRUE(agent.register_client(leaver, ib::mgmt_class::com_mgt, 2, {ib::method::send}).has_value());
    ASSERT_TRUE(agent.register_client(late, ib::mgmt_class::com_mgt, 2, {ib::method::send}).has_value());
    SaMad req = get_request(0x43);
    req.header.mgmt_class = ib::mgmt_class::com_mgt;
    req.header.method = ib::method::send;
    from_sa(req);
    agent.receive();
    EXPECT_EQ(leaver.got, 1);
    EXPECT_TRUE(late.got.empty());
}

}  // namespace
}  // namespace ipoibd::sa

namespace ipoibd::sa {
namespace {

// The MAD path addresses peers (the CM's need): send_to() a port's QP1,
// receive_from() naming the sender.
struct PeerMads : MadTransportTest {
    std::unique_ptr<transport::MemoryPort> peer_port = fabric.add_port();  // LID 3
    std::unique_ptr<SoftMadTransport> peer = [this] {
        auto gsi = peer_port->create_gsi_qp(16, 64);
        auto t = SoftMadTransport::open(*peer_port, std::move(*gsi));
        return t ? std::move(*t) : nullptr;
    }();
    static std::vector<std::uint8_t> cm_mad(std::uint8_t tag) {
        std::vector<std::uint8_t> m(kSaMadSize, tag);
        m[0] = 1;
        m[1] = 0x07;  // CommunicationManagement
        m[2] = 2;
        m[3] = ib::method::send;
        return m;
    }
};

TEST_F(PeerMads, SendToAPortAndLearnWhoSentIt) {
    ASSERT_TRUE(peer);
    ASSERT_TRUE(transport->send_to(cm_mad(0xAB), {.lid = 3, .sl = 5}));
    fabric.run();
    std::vector<std::pair<std::vector<std::uint8_t>, MadAddress>> got;
    peer->receive_from([&](bytes m, const MadAddress& from) { got.emplace_back(std::vector(m.begin(), m.end()), from); });
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].first, cm_mad(0xAB));
    EXPECT_EQ(got[0].second.lid, 2) << "the sender's LID";
    EXPECT_EQ(got[0].second.sl, 5);
    EXPECT_FALSE(got[0].second.gid);
    // With a GRH, the sender's GID comes along.
    ASSERT_TRUE(transport->send_to(cm_mad(0xCD), {.lid = 3, .gid = peer_port->attributes().gid()}));
    fabric.run();
    got.clear();
    peer->receive_from([&](bytes m, const MadAddress& from) { got.emplace_back(std::vector(m.begin(), m.end()), from); });
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(got[0].second.gid);
    EXPECT_EQ(*got[0].second.gid, client_port->attributes().gid());
    // Refused: not a whole MAD, not a unicast LID.
    EXPECT_FALSE(transport->send_to(bytes(cm_mad(0)).first(100), {.lid = 3}));
    EXPECT_FALSE(transport->send_to(cm_mad(0), {.lid = 0xC001}));
    EXPECT_EQ(transport->counters().send_errors, 2u);
}

struct PeerRecorder final : MadClient {
    std::vector<MadAddress> from;
    void on_mad(bytes) override { from.push_back({}); }
    void on_mad_from(bytes, const MadAddress& f) override { from.push_back(f); }
};

TEST_F(PeerMads, TheAgentHandsTheSenderToItsClientsAndSendsToPeers) {
    MadAgent agent(std::move(transport));
    PeerRecorder cm;
    ASSERT_TRUE(agent.register_client(cm, 0x07, 2, {ib::method::send}));
    ASSERT_TRUE(peer->send_to(cm_mad(1), {.lid = 2, .sl = 1}));
    fabric.run();
    EXPECT_EQ(agent.receive(), 1u);
    ASSERT_EQ(cm.from.size(), 1u);
    EXPECT_EQ(cm.from[0].lid, 3);
    EXPECT_EQ(cm.from[0].sl, 1);
    ASSERT_TRUE(agent.send_to(cm, cm_mad(2), cm.from[0]));
    fabric.run();
    std::size_t n = 0;
    peer->receive_from([&](bytes, const MadAddress& f) {
        EXPECT_EQ(f.lid, 2);
        ++n;
    });
    EXPECT_EQ(n, 1u);
    EXPECT_EQ(agent.outstanding(), 0u) << "Sends leave nothing to wait for";
}

}  // namespace
}  // namespace ipoibd::sa
