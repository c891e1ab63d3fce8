// Whole packets: build/parse round trips for every header combination, and a
// table with one malformed packet per rejection reason.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "transport/wire/packet.h"
#include "wire_test_util.h"

namespace ipoibd::ib {
namespace {

using Wire = std::vector<std::uint8_t>;

Wire build(const PacketSpec& spec) {
    Wire out(packet_size(spec));
    auto n = build_packet(spec, out);
    if (!n) ADD_FAILURE() << "build: " << to_string(n.error());
    return out;
}

// Recomputes both CRCs of a packet after a test edited it, with the
// reference implementation (so a malformed packet fails for its intended
// reason, not for a stale CRC).
void reseal(Wire& w) {
    const std::size_t n = w.size();
    store_icrc(w.data() + n - 6, test::reference_icrc(w));
    store_vcrc(w.data() + n - 2, test::reference_vcrc(w));
}

template <class H>
void edit(Wire& w, std::size_t offset, const std::function<void(H&)>& f) {
    H h = H::read_from(w.data() + offset);
    f(h);
    h.write_to(w.data() + offset);
}
void edit_lrh(Wire& w, const std::function<void(Lrh&)>& f) { edit<Lrh>(w, 0, f); }
void edit_bth(Wire& w, const std::function<void(Bth&)>& f) {
    const bool global = (w[1] & 3) == 3;
    edit<Bth>(w, global ? 48 : 8, f);
}
void edit_grh(Wire& w, const std::function<void(Grh&)>& f) { edit<Grh>(w, 8, f); }

// ---------------------------------------------------------------------------
// Round trips

void expect_round_trip(const PacketSpec& spec, std::uint32_t pmtu = kMaxPmtuBytes) {
    const Wire w = build(spec);
    ASSERT_EQ(w.size() % 4, 2u) << "LRH..ICRC is whole words, VCRC adds 2";
    auto p = parse_packet(w, {.pmtu = pmtu});
    ASSERT_TRUE(p.has_value()) << to_string(p.error());
    EXPECT_EQ(p->lrh.pkt_len * 4u + 2u, w.size());
    EXPECT_EQ(p->lrh.lnh, spec.grh ? Lnh::iba_global : Lnh::iba_local);
    EXPECT_EQ(p->lrh.dlid, spec.lrh.dlid);
    EXPECT_EQ(p->lrh.slid, spec.lrh.slid);
    EXPECT_EQ(p->lrh.sl, spec.lrh.sl);
    EXPECT_EQ(p->lrh.vl, spec.lrh.vl);
    EXPECT_EQ(p->grh.has_value(), spec.grh.has_value());
    if (spec.grh) {
        EXPECT_EQ(p->grh->sgid, spec.grh->sgid);
        EXPECT_EQ(p->grh->dgid, spec.grh->dgid);
        EXPECT_EQ(p->grh->tclass, spec.grh->tclass);
        EXPECT_EQ(p->grh->flow_label, spec.grh->flow_label);
        EXPECT_EQ(p->grh->hop_limit, spec.grh->hop_limit);
        EXPECT_EQ(p->grh->pay_len, w.size() - 2 - 8 - 40);
    }
    Bth want_bth = spec.bth;
    want_bth.pad_cnt = static_cast<std::uint8_t>((4 - spec.payload.size() % 4) % 4);
    EXPECT_TRUE(p->bth == want_bth);
    const std::uint16_t mask = opcode_info(spec.bth.opcode).headers;
    EXPECT_EQ(p->ext.present, mask);
    ExtHeaders want_ext = spec.ext;
    want_ext.present = mask;
    // Only the headers the opcode carries are compared.
    if (!(mask & eth_rdeth)) want_ext.rdeth = p->ext.rdeth;
    if (!(mask & eth_deth)) want_ext.deth = p->ext.deth;
    if (!(mask & eth_reth)) want_ext.reth = p->ext.reth;
    if (!(mask & eth_atomic)) want_ext.atomic = p->ext.atomic;
    if (!(mask & eth_aeth)) want_ext.aeth = p->ext.aeth;
    if (!(mask & eth_atomic_ack)) want_ext.atomic_ack = p->ext.atomic_ack;
    if (!(mask & eth_immdt)) want_ext.immdt = p->ext.immdt;
    if (!(mask & eth_ieth)) want_ext.ieth = p->ext.ieth;
    EXPECT_TRUE(p->ext == want_ext);
    EXPECT_TRUE(std::equal(p->payload.begin(), p->payload.end(), spec.payload.begin(), spec.payload.end()));
}

TEST(Packet, SamplesRoundTrip) {
    for (const auto& s : test::all_samples()) {
        SCOPED_TRACE(s.name);
        expect_round_trip(s.spec);
    }
}

TEST(Packet, EveryParsedOpcodeRoundTrips) {
    // Each defined RC/UC/RD/UD opcode, with every extended header filled with
    // distinct values and a payload its rule allows at PMTU 256.
    std::vector<std::uint8_t> full(256), some(5, 0xAB);
    for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<std::uint8_t>(i);
    int covered = 0;
    for (unsigned code = 0; code < 256; ++code) {
        const auto opcode = static_cast<std::uint8_t>(code);
        const OpcodeInfo& info = opcode_info(opcode);
        if (!info.parsed) continue;
        SCOPED_TRACE(std::string(to_string(info.transport)) + " " + info.name);
        PacketSpec spec;
        spec.lrh.dlid = 0x11;
        spec.lrh.slid = 0x22;
        spec.lrh.sl = 4;
        spec.bth.opcode = opcode;
        spec.bth.dest_qp = 0x123;
        spec.bth.psn = 0x456;
        spec.bth.ack_req = true;
        spec.ext.rdeth = {0x0A0B0C};
        spec.ext.deth = {0x11111111, 0x222222};
        spec.ext.reth = {0x3333333333333333ULL, 0x44444444, 0x55555555};
        spec.ext.atomic = {0x66, 0x77, 0x88, 0x99};
        spec.ext.aeth = {0x1F, 0xAAAAAA};
        spec.ext.atomic_ack = {0xBBBBBBBBBBBBBBBBULL};
        spec.ext.immdt = {0xCCCCCCCC};
        spec.ext.ieth = {0xDDDDDDDD};
        switch (info.payload) {
            case PayloadRule::none: spec.payload = {}; break;
            case PayloadRule::full_pmtu: spec.payload = full; break;
            case PayloadRule::up_to_pmtu: spec.payload = some; break;
        }
        expect_round_trip(spec, 256);
        // And with a GRH.
        Grh grh;
        grh.sgid[0] = 0xFE;
        grh.dgid[15] = 0x01;
        grh.hop_limit = 1;
        spec.grh = grh;
        expect_round_trip(spec, 256);
        ++covered;
    }
    // 23 RC + 12 UC + 22 RD + 2 UD
    EXPECT_EQ(covered, 59);
}

TEST(Packet, PadCountFollowsPayloadLength) {
    auto s = test::sample_ud_payload();
    for (std::size_t len = 0; len <= 8; ++len) {
        std::vector<std::uint8_t> payload(len, 0x5A);
        s.spec.payload = payload;
        const Wire w = build(s.spec);
        auto p = parse_packet(w);
        ASSERT_TRUE(p.has_value()) << to_string(p.error());
        EXPECT_EQ(p->bth.pad_cnt, (4 - len % 4) % 4);
        EXPECT_EQ(p->payload.size(), len);
    }
}

TEST(Packet, MaxPayloadAtEachPmtu) {
    auto s = test::sample_ud_payload();
    for (Mtu m : {Mtu::mtu256, Mtu::mtu512, Mtu::mtu1024, Mtu::mtu2048, Mtu::mtu4096}) {
        std::vector<std::uint8_t> payload(mtu_bytes(m), 1);
        s.spec.payload = payload;
        const Wire w = build(s.spec);
        EXPECT_TRUE(parse_packet(w, {.pmtu = mtu_bytes(m)}).has_value());
    }
}

TEST(Packet, BuildErrors) {
    auto s = test::sample_ud_payload();
    PacketSpec spec = s.spec;
    std::vector<std::uint8_t> small(packet_size(spec) - 1);
    auto e = build_packet(spec, small);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error(), BuildError::short_buffer);

    spec.bth.opcode = 0x18;  // reserved
    std::vector<std::uint8_t> out(512);
    e = build_packet(spec, out);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error(), BuildError::unknown_opcode);

    spec = s.spec;
    spec.ext.deth.src_qp = 0x1000000;
    e = build_packet(spec, out);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error(), BuildError::field_out_of_range);

    spec = s.spec;
    std::vector<std::uint8_t> huge(8200);
    spec.payload = huge;
    std::vector<std::uint8_t> big(9000);
    e = build_packet(spec, big);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error(), BuildError::too_long);
    EXPECT_STRNE(to_string(BuildError::too_long), "unknown");
}

// ---------------------------------------------------------------------------
// One malformed packet per rejection reason.

struct RejectCase {
    const char* name;
    DropReason reason;
    std::function<Wire()> make;
    std::uint32_t pmtu = kMaxPmtuBytes;
};

Wire ud() { return test::sample_ud_payload().wire; }
Wire mcast() { return test::sample_ud_multicast_grh().wire; }
Wire ack() { return test::sample_rc_ack().wire; }
Wire mad() { return test::sample_ud_mad().wire; }

Wire with_spec(const std::function<void(PacketSpec&)>& f, std::vector<std::uint8_t>* storage = nullptr) {
    auto s = test::sample_ud_payload();
    if (storage) s.spec.payload = *storage;
    f(s.spec);
    return build(s.spec);
}

const std::vector<RejectCase>& reject_cases() {
    static const std::vector<RejectCase> cases = {
        {"empty", DropReason::too_short, [] { return Wire{}; }},
        {"25 bytes", DropReason::too_short, [] { return Wire(25, 0); }},
        {"LVer 1", DropReason::bad_link_version, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.lver = 1; }); reseal(w); return w; }},
        {"LNH raw", DropReason::not_iba_transport, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.lnh = Lnh::raw; }); return w; }},
        {"LNH raw IPv6", DropReason::not_iba_transport, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.lnh = Lnh::ipv6_raw; }); return w; }},
        {"PktLen one word long", DropReason::pkt_len_mismatch, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { ++l.pkt_len; }); reseal(w); return w; }},
        {"PktLen one word short", DropReason::pkt_len_mismatch, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { --l.pkt_len; }); reseal(w); return w; }},
        {"datagram cut by 1 byte", DropReason::pkt_len_mismatch, [] { auto w = ud(); w.pop_back(); return w; }},
        {"LNH global without room for GRH", DropReason::truncated_grh, [] { auto w = ack(); edit_lrh(w, [](Lrh& l) { l.lnh = Lnh::iba_global; }); return w; }},
        {"VCRC flipped", DropReason::bad_vcrc, [] { auto w = ud(); w.back() ^= 0x01; return w; }},
        {"payload bit flipped", DropReason::bad_vcrc, [] { auto w = ud(); w[30] ^= 0x80; return w; }},
        {"payload flipped, VCRC recomputed", DropReason::bad_icrc, [] {
             auto w = ud(); w[30] ^= 0x80;
             store_vcrc(w.data() + w.size() - 2, test::reference_vcrc(w)); return w; }},
        {"ICRC flipped, VCRC recomputed", DropReason::bad_icrc, [] {
             auto w = mcast(); w[w.size() - 6] ^= 0xFF;
             store_vcrc(w.data() + w.size() - 2, test::reference_vcrc(w)); return w; }},
        {"GRH IPVer 4", DropReason::bad_ip_version, [] { auto w = mcast(); edit_grh(w, [](Grh& g) { g.ip_ver = 4; }); reseal(w); return w; }},
        {"GRH NxtHdr UDP", DropReason::bad_next_header, [] { auto w = mcast(); edit_grh(w, [](Grh& g) { g.next_hdr = 17; }); reseal(w); return w; }},
        {"GRH PayLen +4", DropReason::grh_pay_len_mismatch, [] { auto w = mcast(); edit_grh(w, [](Grh& g) { g.pay_len += 4; }); reseal(w); return w; }},
        {"TVer 1", DropReason::bad_transport_version, [] { auto w = ud(); edit_bth(w, [](Bth& b) { b.tver = 1; }); reseal(w); return w; }},
        {"RC opcode 0x18", DropReason::unknown_opcode, [] { auto w = ack(); edit_bth(w, [](Bth& b) { b.opcode = 0x18; }); reseal(w); return w; }},
        {"UC opcode 0x2C", DropReason::unknown_opcode, [] { auto w = ack(); edit_bth(w, [](Bth& b) { b.opcode = 0x2C; }); reseal(w); return w; }},
        {"UD opcode 0x60 (SEND First)", DropReason::unknown_opcode, [] { auto w = ud(); edit_bth(w, [](Bth& b) { b.opcode = 0x60; }); reseal(w); return w; }},
        {"CNP", DropReason::unsupported_opcode, [] { auto w = ud(); edit_bth(w, [](Bth& b) { b.opcode = op::cnp_notify; }); reseal(w); return w; }},
        {"XRC SEND Only", DropReason::unsupported_opcode, [] { auto w = ud(); edit_bth(w, [](Bth& b) { b.opcode = op::xrc | op::send_only; }); reseal(w); return w; }},
        {"manufacturer 0xC0", DropReason::unsupported_opcode, [] { auto w = ud(); edit_bth(w, [](Bth& b) { b.opcode = 0xC0; }); reseal(w); return w; }},
        {"DLID 0", DropReason::bad_dlid, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.dlid = 0; }); reseal(w); return w; }},
        {"permissive DLID to QP 0x48", DropReason::bad_dlid, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.dlid = kLidPermissive; }); reseal(w); return w; }},
        {"SLID 0", DropReason::bad_slid, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.slid = 0; }); reseal(w); return w; }},
        {"multicast SLID", DropReason::bad_slid, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.slid = 0xC001; }); reseal(w); return w; }},
        {"VL15 to QP 0x48", DropReason::vl15_not_qp0, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.vl = kVl15; }); reseal(w); return w; }},
        {"QP0 on VL0", DropReason::vl15_not_qp0, [] { auto w = mad(); edit_bth(w, [](Bth& b) { b.dest_qp = kQp0; }); reseal(w); return w; }},
        {"multicast DLID to QP 0x48", DropReason::bad_multicast, [] { auto w = ud(); edit_lrh(w, [](Lrh& l) { l.dlid = 0xC000; }); reseal(w); return w; }},
        {"unicast DLID to QP 0xFFFFFF", DropReason::bad_multicast, [] { auto w = ud(); edit_bth(w, [](Bth& b) { b.dest_qp = kQpnMulticast; }); reseal(w); return w; }},
        {"multicast RC", DropReason::bad_multicast, [] {
             auto w = ack(); edit_lrh(w, [](Lrh& l) { l.dlid = 0xC000; });
             edit_bth(w, [](Bth& b) { b.dest_qp = kQpnMulticast; }); reseal(w); return w; }},
        {"RDMA READ Request without room for RETH", DropReason::truncated_headers, [] {
             auto w = ack(); edit_bth(w, [](Bth& b) { b.opcode = op::rc_rdma_read_request; }); reseal(w); return w; }},
        {"PadCnt 3 with no payload", DropReason::bad_pad_count, [] { auto w = ack(); edit_bth(w, [](Bth& b) { b.pad_cnt = 3; }); reseal(w); return w; }},
        {"PadCnt in SEND First", DropReason::bad_pad_count, [] {
             static std::vector<std::uint8_t> p(255, 1);
             return with_spec([](PacketSpec& s) {
                 s.bth.opcode = op::rc_send_first; s.payload = p; }); }, 256},
        {"UD payload 300 at PMTU 256", DropReason::payload_exceeds_pmtu, [] {
             static std::vector<std::uint8_t> p(300, 1);
             return with_spec([](PacketSpec& s) { s.payload = p; }); }, 256},
        {"MAD at PMTU 256 is fine, 260 is not", DropReason::payload_exceeds_pmtu, [] {
             static std::vector<std::uint8_t> p(260, 1);
             return with_spec([](PacketSpec& s) { s.payload = p; }); }, 256},
        {"Acknowledge with payload", DropReason::bad_payload_length, [] {
             static std::vector<std::uint8_t> p(4, 1);
             return with_spec([](PacketSpec& s) { s.bth.opcode = op::rc_acknowledge; s.bth.dest_qp = 5; s.payload = p; }); }},
        {"SEND Middle shorter than PMTU", DropReason::bad_payload_length, [] {
             static std::vector<std::uint8_t> p(128, 1);
             return with_spec([](PacketSpec& s) { s.bth.opcode = op::rc_send_middle; s.payload = p; }); }, 256},
    };
    return cases;
}

TEST(Packet, EachRejectionHasItsReason) {
    for (const auto& c : reject_cases()) {
        SCOPED_TRACE(c.name);
        const Wire w = c.make();
        auto p = parse_packet(w, {.pmtu = c.pmtu});
        ASSERT_FALSE(p.has_value()) << "accepted";
        EXPECT_EQ(p.error(), c.reason) << "got " << to_string(p.error()) << ", want " << to_string(c.reason);
    }
}

TEST(Packet, RejectionTableCoversEveryReason) {
    std::set<DropReason> seen;
    for (const auto& c : reject_cases()) seen.insert(c.reason);
    for (std::size_t i = 0; i < kDropReasonCount; ++i) {
        const auto r = static_cast<DropReason>(i);
        EXPECT_TRUE(seen.count(r)) << "no malformed packet for " << to_string(r);
        EXPECT_STRNE(to_string(r), "unknown");
    }
}

TEST(Packet, PermissiveDlidAndSlidAllowedForDirectedRouteSmp) {
    auto s = test::sample_ud_mad();
    s.spec.lrh.vl = kVl15;
    s.spec.lrh.dlid = kLidPermissive;
    s.spec.lrh.slid = kLidPermissive;
    s.spec.bth.dest_qp = kQp0;
    s.spec.ext.deth = {0, kQp0};
    const Wire w = build(s.spec);
    auto p = parse_packet(w);
    ASSERT_TRUE(p.has_value()) << to_string(p.error());
    EXPECT_EQ(p->payload.size(), 256u);
}

TEST(Packet, EveryTruncationIsRejectedWithoutReadingPastTheEnd) {
    // Each prefix of a valid packet, copied into an exactly-sized buffer so
    // a sanitizer build catches any read beyond it.
    for (const auto& s : test::all_samples()) {
        for (std::size_t len = 0; len < s.wire.size(); ++len) {
            std::vector<std::uint8_t> prefix(s.wire.begin(), s.wire.begin() + static_cast<std::ptrdiff_t>(len));
            EXPECT_FALSE(parse_packet(prefix).has_value()) << s.name << " prefix " << len;
        }
    }
}

}  // namespace
}  // namespace ipoibd::ib
