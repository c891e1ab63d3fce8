// PortCore over the in-memory fabric: UD send/receive as hardware does it
// (GRH slot, completion fields), multicast with loopback, and every
// delivery refusal counted by reason.
#include <gtest/gtest.h>

#include <string>

#include <functional>

#include "transport/memory/memory_fabric.h"
#include "transport/rc/rc_wire.h"
#include "transport/wire/crc.h"

namespace ipoibd::transport {
namespace {

constexpr std::uint32_t kQKey = 0x00000B1B;

struct Buffers {
    std::vector<std::vector<std::uint8_t>> storage;
    std::vector<ReceiveBuffer> posted;
    Buffers(std::size_t n, std::size_t size) : storage(n, std::vector<std::uint8_t>(size, 0xEE)) {
        for (std::size_t i = 0; i < n; ++i) posted.push_back({100 + i, storage[i]});
    }
};

std::vector<Completion> drain(UdQp& qp) {
    std::vector<Completion> all;
    Completion batch[8];
    for (std::size_t n; (n = qp.poll(batch)) > 0;) all.insert(all.end(), batch, batch + n);
    return all;
}

std::vector<PortEvent> events(Port& p) {
    std::vector<PortEvent> out(16);
    out.resize(p.poll_events(out));
    return out;
}

std::uint64_t undelivered(MemoryPort& p, DeliveryDrop d) {
    return p.core().counters().undelivered[static_cast<std::size_t>(d)];
}

struct Pair : ::testing::Test {
    MemoryFabric fabric;
    std::unique_ptr<MemoryPort> a = fabric.add_port();
    std::unique_ptr<MemoryPort> b = fabric.add_port();
    std::unique_ptr<UdQp> qa = *a->create_ud_qp({.qkey = kQKey});
    std::unique_ptr<UdQp> qb = *b->create_ud_qp({.qkey = kQKey});

    SendRequest to_b(bytes payload, std::uint64_t wr_id = 1) const {
        return {.wr_id = wr_id, .ah = {.dlid = b->attributes().lid, .sl = 2}, .remote_qpn = qb->qpn(),
                .remote_qkey = kQKey, .payload = payload};
    }
};

TEST_F(Pair, PortsComeUpActiveWithEvents) {
    EXPECT_EQ(a->attributes().state, PortState::active);
    EXPECT_EQ(a->attributes().lid, 1);
    EXPECT_EQ(b->attributes().lid, 2);
    const auto ev = events(*a);
    EXPECT_NE(std::find(ev.begin(), ev.end(), PortEvent::port_active), ev.end());
    EXPECT_NE(std::find(ev.begin(), ev.end(), PortEvent::lid_change), ev.end());
    EXPECT_NE(qa->qpn(), qb->qpn() + 100);  // distinct QPs
    EXPECT_GT(qa->qpn(), 1u);
}

TEST_F(Pair, UnicastDeliversPayloadAfterGrhSlot) {
    Buffers bufs(3, kGrhSlotSize + 4096);
    ASSERT_EQ(*qb->post_receive(bufs.posted), 3u);
    std::vector<std::uint8_t> p0, p1(100, 0x11), p2(4096, 0x22);
    const SendRequest reqs[] = {to_b(p0, 1), to_b(p1, 2), to_b(p2, 3)};
    ASSERT_EQ(*qa->post_send(reqs), 3u);
    fabric.run();

    const auto sent = drain(*qa);
    ASSERT_EQ(sent.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(sent[i].kind, CompletionKind::send);
        EXPECT_EQ(sent[i].wr_id, i + 1);
        EXPECT_EQ(sent[i].status, CompletionStatus::success);
    }
    const auto got = drain(*qb);
    ASSERT_EQ(got.size(), 3u);
    const std::size_t sizes[] = {0, 100, 4096};
    for (std::size_t i = 0; i < 3; ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(got[i].kind, CompletionKind::receive);
        EXPECT_EQ(got[i].status, CompletionStatus::success);
        EXPECT_EQ(got[i].wr_id, 100 + i);
        EXPECT_EQ(got[i].byte_len, kGrhSlotSize + sizes[i]);
        EXPECT_EQ(got[i].src_qp, qa->qpn());
        EXPECT_EQ(got[i].slid, a->attributes().lid);
        EXPECT_EQ(got[i].sl, 2);
        EXPECT_FALSE(got[i].grh_present);
        EXPECT_FALSE(got[i].immediate.has_value());
    }
    EXPECT_EQ(bufs.storage[1][kGrhSlotSize], 0x11);
    EXPECT_EQ(bufs.storage[1][kGrhSlotSize + 99], 0x11);
    EXPECT_EQ(bufs.storage[1][kGrhSlotSize + 100], 0xEE) << "nothing written past the payload";
    EXPECT_EQ(bufs.storage[2][kGrhSlotSize + 4095], 0x22);
    EXPECT_EQ(b->core().counters().rx_packets, 3u);
    EXPECT_EQ(a->core().counters().tx_packets, 3u);
}

TEST_F(Pair, ImmediateAndSolicited) {
    Buffers bufs(1, 256);
    qb->post_receive(bufs.posted);
    std::vector<std::uint8_t> p(8, 1);
    SendRequest r = to_b(p);
    r.immediate = 0xCAFEF00D;
    r.solicited = true;
    ASSERT_EQ(*qa->post_send({&r, 1}), 1u);
    fabric.run();
    const auto got = drain(*qb);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(got[0].immediate.has_value());
    EXPECT_EQ(*got[0].immediate, 0xCAFEF00Du);
}

TEST_F(Pair, ControlledQKeyUsesTheQpsOwn) {
    Buffers bufs(1, 256);
    qb->post_receive(bufs.posted);
    std::vector<std::uint8_t> p(8, 1);
    SendRequest r = to_b(p);
    r.remote_qkey = 0x80000000;  // high bit: use the sending QP's Q_Key
    qa->post_send({&r, 1});
    fabric.run();
    EXPECT_EQ(drain(*qb).size(), 1u);
}

TEST_F(Pair, QKeyMismatchIsDroppedAndCounted) {
    Buffers bufs(1, 256);
    qb->post_receive(bufs.posted);
    std::vector<std::uint8_t> p(8, 1);
    SendRequest r = to_b(p);
    r.remote_qkey = 0x1234;
    qa->post_send({&r, 1});
    fabric.run();
    EXPECT_TRUE(drain(*qb).empty());
    EXPECT_EQ(undelivered(*b, DeliveryDrop::qkey_mismatch), 1u);
    // The buffer was not consumed: a good packet still lands.
    r.remote_qkey = kQKey;
    qa->post_send({&r, 1});
    fabric.run();
    EXPECT_EQ(drain(*qb).size(), 1u);
}

TEST_F(Pair, NoBufferAndSmallBuffer) {
    std::vector<std::uint8_t> p(100, 1);
    SendRequest r = to_b(p);
    qa->post_send({&r, 1});
    fabric.run();
    EXPECT_EQ(undelivered(*b, DeliveryDrop::no_receive_buffer), 1u);

    Buffers small(1, kGrhSlotSize + 99);
    qb->post_receive(small.posted);
    qa->post_send({&r, 1});
    fabric.run();
    const auto got = drain(*qb);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, CompletionStatus::local_length_error);
    EXPECT_EQ(undelivered(*b, DeliveryDrop::buffer_too_small), 1u);
}

TEST_F(Pair, UnknownQpAndForeignDlid) {
    std::vector<std::uint8_t> p(4, 1);
    SendRequest r = to_b(p);
    r.remote_qpn = 0x777;
    qa->post_send({&r, 1});
    r = to_b(p);
    r.ah.dlid = 99;  // nobody: the fabric has no route
    qa->post_send({&r, 1});
    fabric.run();
    EXPECT_EQ(undelivered(*b, DeliveryDrop::unknown_qp), 1u);
    EXPECT_EQ(fabric.dropped_no_route(), 1u);
}

TEST_F(Pair, MalformedPacketsCountedByReason) {
    std::vector<std::uint8_t> garbage(40, 0x00);
    b->core().receive(garbage);
    std::vector<std::uint8_t> tiny(3, 0);
    b->core().receive(tiny);
    const auto& m = b->core().counters().malformed;
    EXPECT_EQ(m[static_cast<std::size_t>(ib::DropReason::too_short)], 1u);
    EXPECT_EQ(m[static_cast<std::size_t>(ib::DropReason::not_iba_transport)], 1u);
}

TEST_F(Pair, SendQueueIsBounded) {
    auto q = *a->create_ud_qp({.qkey = kQKey, .send_depth = 2});
    std::vector<std::uint8_t> p(4, 1);
    const SendRequest reqs[] = {to_b(p, 1), to_b(p, 2), to_b(p, 3), to_b(p, 4)};
    EXPECT_EQ(*q->post_send(reqs), 2u);
    EXPECT_EQ(*q->post_send(reqs), 0u) << "full until completions are polled";
    EXPECT_EQ(drain(*q).size(), 2u);
    EXPECT_EQ(*q->post_send(std::span(reqs).subspan(2)), 2u);
}

TEST_F(Pair, ReceiveQueueIsBoundedAndBuffersChecked) {
    auto q = *b->create_ud_qp({.qkey = kQKey, .receive_depth = 2});
    Buffers bufs(3, 64);
    EXPECT_EQ(*q->post_receive(bufs.posted), 2u);
    std::vector<std::uint8_t> tiny(10);
    const ReceiveBuffer bad[] = {{1, tiny}};
    auto r = q->post_receive(bad);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Errc::invalid_argument);
}

TEST_F(Pair, SendRefusals) {
    std::vector<std::uint8_t> big(4097, 1);
    SendRequest r = to_b(big);
    auto e = qa->post_send({&r, 1});
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error().code, Errc::payload_too_long);

    std::vector<std::uint8_t> p(4, 1);
    r = to_b(p);
    r.ah.dlid = 0xC000;
    r.remote_qpn = ib::kQpnMulticast;
    e = qa->post_send({&r, 1});
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error().code, Errc::invalid_argument) << "multicast without a GRH";

    PortAttributes down = a->attributes();
    down.state = PortState::down;
    a->core().set_attributes(down);
    r = to_b(p);
    e = qa->post_send({&r, 1});
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error().code, Errc::port_not_active);
    const auto ev = events(*a);
    EXPECT_EQ(ev.back(), PortEvent::port_down);
}

TEST_F(Pair, PortNotReadyDropsData) {
    PortAttributes init = b->attributes();
    init.state = PortState::init;
    b->core().set_attributes(init);
    std::vector<std::uint8_t> p(4, 1);
    SendRequest r = to_b(p);
    qa->post_send({&r, 1});
    fabric.run();
    EXPECT_EQ(undelivered(*b, DeliveryDrop::port_not_ready), 1u);
}

TEST(PortCorePKey, MembershipRules) {
    struct Case {
        std::uint16_t sender, receiver;
        bool delivered;
    } cases[] = {
        {0xFFFF, 0xFFFF, true},   // full / full
        {0x7FFF, 0xFFFF, true},   // limited / full
        {0xFFFF, 0x7FFF, true},   // full / limited
        {0x7FFF, 0x7FFF, false},  // limited / limited
        {0x8001, 0xFFFF, false},  // other partition
        {0x8000, 0x8000, false},  // invalid P_Key
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(std::to_string(c.sender) + " -> " + std::to_string(c.receiver));
        MemoryFabric fabric;
        auto a = fabric.add_port({.pkey_table = {c.sender}});
        auto b = fabric.add_port({.pkey_table = {c.receiver}});
        auto qa = *a->create_ud_qp({.qkey = kQKey});
        auto qb = *b->create_ud_qp({.qkey = kQKey});
        Buffers bufs(1, 128);
        qb->post_receive(bufs.posted);
        std::vector<std::uint8_t> p(4, 1);
        SendRequest r{.wr_id = 1, .ah = {.dlid = b->attributes().lid}, .remote_qpn = qb->qpn(), .remote_qkey = kQKey, .payload = p};
        qa->post_send({&r, 1});
        fabric.run();
        EXPECT_EQ(drain(*qb).size(), c.delivered ? 1u : 0u);
        EXPECT_EQ(undelivered(*b, DeliveryDrop::pkey_mismatch), c.delivered ? 0u : 1u);
    }
}

TEST(PortCoreMulticast, DeliveredToEveryAttachedQpIncludingSender) {
    MemoryFabric fabric;
    auto a = fabric.add_port();
    auto b = fabric.add_port();
    auto c = fabric.add_port();
    auto qa = *a->create_ud_qp({.qkey = kQKey});
    auto qb = *b->create_ud_qp({.qkey = kQKey});
    auto qc = *c->create_ud_qp({.qkey = kQKey});
    const ib::Gid mgid = {0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
    ASSERT_TRUE(qa->attach_multicast(mgid, 0xC000).has_value());
    ASSERT_TRUE(qb->attach_multicast(mgid, 0xC000).has_value());
    Buffers ba(1, 256), bb(1, 256), bc(1, 256);
    qa->post_receive(ba.posted);
    qb->post_receive(bb.posted);
    qc->post_receive(bc.posted);

    std::vector<std::uint8_t> p = {1, 2, 3, 4, 5};
    SendRequest r{.wr_id = 9, .ah = {.dlid = 0xC000, .grh = GrhAttributes{.dgid = mgid, .hop_limit = 1}},
                  .remote_qpn = ib::kQpnMulticast, .remote_qkey = kQKey, .payload = p};
    ASSERT_EQ(*qa->post_send({&r, 1}), 1u);
    fabric.run();

    for (auto* q : {qa.get(), qb.get()}) {
        auto got = drain(*q);
        std::erase_if(got, [](const Completion& x) { return x.kind == CompletionKind::send; });
        ASSERT_EQ(got.size(), 1u);
        EXPECT_TRUE(got[0].grh_present);
        EXPECT_EQ(got[0].src_qp, qa->qpn());
        EXPECT_EQ(got[0].byte_len, kGrhSlotSize + 5);
    }
    EXPECT_TRUE(drain(*qc).empty());
    EXPECT_EQ(undelivered(*c, DeliveryDrop::multicast_not_attached), 1u);

    // The GRH slot holds the received GRH: IPVer 6, SGID = sender, DGID = group.
    const auto grh = ib::decode<ib::Grh>(bytes(bb.storage[0]).first(kGrhSlotSize));
    ASSERT_TRUE(grh.has_value());
    EXPECT_EQ(grh->ip_ver, 6);
    EXPECT_EQ(grh->sgid, a->attributes().gid());
    EXPECT_EQ(grh->dgid, mgid);
    EXPECT_EQ(bb.storage[0][kGrhSlotSize + 4], 5);

    // Detach: no more delivery to b.
    ASSERT_TRUE(qb->detach_multicast(mgid, 0xC000).has_value());
    EXPECT_EQ(qb->detach_multicast(mgid, 0xC000).error().code, Errc::not_attached);
    qb->post_receive(bb.posted);
    qa->post_send({&r, 1});
    fabric.run();
    EXPECT_TRUE(drain(*qb).empty());
}

TEST(PortCoreGsi, Qp1ReceivesMadsAndReportsPKeyIndex) {
    MemoryFabric fabric;
    auto a = fabric.add_port({.pkey_table = {0xFFFF, 0x8001}});
    auto b = fabric.add_port({.pkey_table = {0xFFFF, 0x8001}});
    auto gsi = *b->create_gsi_qp(16, 16);
    EXPECT_EQ(gsi->qpn(), ib::kQp1);
    EXPECT_EQ(gsi->qkey(), ib::kGsiQKey);
    EXPECT_FALSE(b->create_gsi_qp(16, 16).has_value()) << "one QP1 per port";
    // Only a QP whose own Q_Key is 0x80010000 can send it: a Q_Key with the
    // high bit set in a work request means "use the QP's own" (controlled).
    auto qa = *a->create_gsi_qp(16, 16);
    Buffers bufs(1, kGrhSlotSize + 256);
    gsi->post_receive(bufs.posted);
    std::vector<std::uint8_t> mad(256, 0);
    SendRequest r{.wr_id = 1, .ah = {.dlid = b->attributes().lid}, .remote_qpn = ib::kQp1, .remote_qkey = ib::kGsiQKey, .payload = mad};
    qa->post_send({&r, 1});
    fabric.run();
    const auto got = drain(*gsi);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].pkey_index, 0);

    // A normal QP cannot forge the GSI Q_Key.
    auto normal = *a->create_ud_qp({.qkey = kQKey, .pkey_index = 1});
    gsi->post_receive(bufs.posted);
    normal->post_send({&r, 1});
    fabric.run();
    EXPECT_TRUE(drain(*gsi).empty());
    EXPECT_EQ(undelivered(*b, DeliveryDrop::qkey_mismatch), 1u);
}

TEST(PortCoreQpns, NotReusedAndBadPKeyIndexRefused) {
    MemoryFabric fabric;
    auto a = fabric.add_port();
    std::uint32_t first;
    {
        auto q = *a->create_ud_qp({.qkey = 1});
        first = q->qpn();
    }
    auto q2 = *a->create_ud_qp({.qkey = 1});
    EXPECT_NE(q2->qpn(), first);
    auto bad = a->create_ud_qp({.qkey = 1, .pkey_index = 5});
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error().code, Errc::bad_pkey_index);
    EXPECT_EQ(bad.error().message(), "bad P_Key index: P_Key index 5 of a 1-entry table");
}

}  // namespace
}  // namespace ipoibd::transport

namespace ipoibd::transport {
namespace {

// RC requests a port's parser refuses beyond their headers (a reserved or
// unsupported opcode, a bad PadCnt, a length the opcode does not allow) are
// NAKed invalid request by the QP they are for, not dropped (C9-83 to C9-85,
// C9-93); the same packets from another port, or as responses, are dropped.
struct RcInvalid : ::testing::Test {
    MemoryFabric fabric;
    std::unique_ptr<MemoryPort> a = fabric.add_port();
    std::unique_ptr<MemoryPort> b = fabric.add_port();
    std::unique_ptr<RcQueuePair> qa = *a->create_rc_qp(0);
    std::unique_ptr<RcQueuePair> qb = *b->create_rc_qp(0);
    std::vector<std::vector<std::uint8_t>> sent_by_b;

    void SetUp() override {
        ASSERT_TRUE(qa->connect(b->attributes().lid, {.dest_qpn = qb->qpn(), .pmtu = 256, .rq_psn = 0x700},
                                {.sq_psn = 0x500}));
        ASSERT_TRUE(qb->connect(a->attributes().lid, {.dest_qpn = qa->qpn(), .pmtu = 256, .rq_psn = 0x500},
                                {.sq_psn = 0x700}));
        ASSERT_TRUE(b->set_capture([this](bytes p, bool out) {
            if (out) sent_by_b.emplace_back(p.begin(), p.end());
        }));
    }
    // A SEND ONLY from A to B at `psn`, then `edit` applied and the CRCs
    // made right again: the packet is whole, only its transport is wrong.
    std::vector<std::uint8_t> forged(std::uint32_t psn, const std::function<void(std::vector<std::uint8_t>&)>& edit,
                                     std::uint8_t opcode = ib::op::rc_send_only, std::size_t payload = 20) {
        rc::RcPacket p{.opcode = opcode, .dest_qp = qb->qpn(), .psn = psn, .ack_req = true,
                       .payload = std::vector<std::uint8_t>(payload, 7)};
        if (opcode == ib::op::rc_rdma_read_response_first) p.aeth = ib::Aeth{0, 0};
        auto encoded = rc::encode_rc_packet(p, {.slid = a->attributes().lid, .dlid = b->attributes().lid});
        EXPECT_TRUE(encoded);
        if (!encoded) return {};
        auto wire = *encoded;
        edit(wire);
        const std::size_t icrc = wire.size() - ib::kVcrcSize - ib::kIcrcSize;
        ib::store_icrc(wire.data() + icrc, ib::compute_icrc(bytes(wire).first(icrc), ib::Lnh::iba_local));
        ib::store_vcrc(wire.data() + icrc + 4, ib::compute_vcrc(bytes(wire).first(icrc + 4)));
        return wire;
    }
    // B's NAKs to A: their AETH syndromes.
    std::vector<std::uint8_t> naks_from_b() const {
        std::vector<std::uint8_t> out;
        for (const auto& w : sent_by_b) {
            auto p = ib::parse_packet(w, {.pmtu = 4096});
            if (p && p->bth.opcode == ib::op::rc_acknowledge && (p->ext.aeth.syndrome & 0x60) == 0x60)
                out.push_back(p->ext.aeth.syndrome);
        }
        return out;
    }
};

constexpr std::size_t kOpcodeAt = ib::Lrh::size;       // BTH byte 0
constexpr std::size_t kPadAt = ib::Lrh::size + 1;      // SE M PadCnt TVer

TEST_F(RcInvalid, AReservedOpcodeAtTheExpectedPsnIsNakedInvalidRequest) {
    b->core().receive(forged(0x500, [](auto& w) { w[kOpcodeAt] = 0x18; }), true);  // C9-84
    b->process();
    EXPECT_EQ(naks_from_b(), std::vector<std::uint8_t>{0x61});
    EXPECT_EQ(qb->state(), rc::QpState::err);
    EXPECT_EQ(qb->counters().invalid_requests, 1u);
    EXPECT_EQ(undelivered(*b, DeliveryDrop::rc_invalid_request), 1u);
    EXPECT_EQ(b->core().counters().malformed[static_cast<std::size_t>(ib::DropReason::unknown_opcode)], 1u);
}

TEST_F(RcInvalid, AtomicsAndSendWithInvalidateAreFunctionsThisQpDoesNotSupport) {
    // CmpSwap carries an AtomicETH (28 bytes) and no payload.
    b->core().receive(forged(0x500, [](auto& w) { w[kOpcodeAt] = ib::op::rc_compare_swap; }, ib::op::rc_send_only, 28),
                      true);
    b->process();
    EXPECT_EQ(naks_from_b(), std::vector<std::uint8_t>{0x61});  // C9-83
    EXPECT_EQ(qb->state(), rc::QpState::err);
}

TEST_F(RcInvalid, SendOnlyWithInvalidateIsNotCarried) {
    // SEND ONLY with Invalidate carries an IETH (4 bytes) before the payload.
    b->core().receive(forged(0x500, [](auto& w) { w[kOpcodeAt] = ib::op::rc_send_only_inv; }), true);
    b->process();
    EXPECT_EQ(naks_from_b(), std::vector<std::uint8_t>{0x61});
}

TEST_F(RcInvalid, PadCountAndLengthLiesAreNakedInvalidRequest) {
    // A FIRST with a PadCnt (C9-85).
    b->core().receive(forged(0x500, [](auto& w) { w[kPadAt] = static_cast<std::uint8_t>(w[kPadAt] | 0x10); },
                             ib::op::rc_send_first, 256),
                      true);
    b->process();
    EXPECT_EQ(naks_from_b(), std::vector<std::uint8_t>{0x61});
    EXPECT_EQ(b->core().counters().malformed[static_cast<std::size_t>(ib::DropReason::bad_pad_count)], 1u);
}

TEST_F(RcInvalid, AShortFirstPacketIsALengthError) {
    b->core().receive(forged(0x500, [](auto&) {}, ib::op::rc_send_first, 100), true);  // C9-93: FIRST < PMTU
    b->process();
    EXPECT_EQ(naks_from_b(), std::vector<std::uint8_t>{0x61});
}

TEST_F(RcInvalid, AheadOfTheExpectedPsnASequenceErrorBehindItADuplicate) {
    b->core().receive(forged(0x4F0, [](auto& w) { w[kOpcodeAt] = 0x18; }), true);  // behind: dropped
    b->process();
    EXPECT_TRUE(naks_from_b().empty());
    EXPECT_EQ(qb->counters().duplicates, 1u);
    b->core().receive(forged(0x510, [](auto& w) { w[kOpcodeAt] = 0x18; }), true);  // ahead
    b->process();
    EXPECT_EQ(naks_from_b(), std::vector<std::uint8_t>{0x60}) << "NAK PSN sequence error";
    EXPECT_EQ(qb->state(), rc::QpState::rts);
}

TEST_F(RcInvalid, NotFromThePeerOrNotARequestIsDroppedAsBefore) {
    auto c = fabric.add_port();
    // From another LID: not the connection's.
    b->core().receive(forged(0x500, [&](auto& w) { store_be16(w.data() + 6, c->attributes().lid); w[kOpcodeAt] = 0x18; }),
                      true);
    // A malformed response (a READ response FIRST shorter than the PMTU).
    b->core().receive(forged(0x500, [](auto&) {}, ib::op::rc_rdma_read_response_first, 100), true);
    b->process();
    EXPECT_TRUE(naks_from_b().empty());
    EXPECT_EQ(qb->state(), rc::QpState::rts);
    EXPECT_EQ(undelivered(*b, DeliveryDrop::rc_invalid_request), 0u);
}

}  // namespace
}  // namespace ipoibd::transport
