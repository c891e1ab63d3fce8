// ICRC and VCRC: check values, a complete packet spelled out byte by byte,
// and which header fields each CRC covers.
#include <gtest/gtest.h>

#include <string>

#include "transport/wire/crc.h"
#include "transport/wire/packet.h"
#include "wire_test_util.h"

namespace ipoibd::ib {
namespace {

using test::from_hex;

std::vector<std::uint8_t> ascii(const std::string& s) { return {s.begin(), s.end()}; }

TEST(Crc, Crc32CheckValueIsEthernets) {
    // The catalogue check value of CRC-32 (ISO-HDLC, Ethernet) over "123456789".
    EXPECT_EQ(test::reference_crc32(ascii("123456789")), 0xCBF43926u);
}

TEST(Crc, Crc16VcrcCheckValue) {
    // CRC-16, poly 0x100B, reflected, init 0xFFFF, xorout 0xFFFF over
    // "123456789". Computed independently (bitwise, non-table) and by the
    // production table.
    const auto check = ascii("123456789");
    EXPECT_EQ(test::reference_crc16_vcrc(check), 0x0A3D);
    EXPECT_EQ(crc16_vcrc(check), 0x0A3D);
}

TEST(Crc, Crc16EmptyInputIsZero) {
    // init 0xFFFF xor final 0xFFFF with no data.
    EXPECT_EQ(crc16_vcrc({}), 0x0000);
}

// A UD SEND Only, LRH DLID 3 SLID 2, DestQP 0x48, PSN 1, Q_Key 0xB1B,
// SrcQP 0x49, payload "hello" (PadCnt 3), every byte written out.
const char* kKnownUdPacket =
    "00 02 00 03 00 0a 00 02"              // LRH: VL0 LVer0 SL0 LNH=local DLID 3 PktLen 10 SLID 2
    "64 30 ff ff 00 00 00 48 00 00 00 01"  // BTH: UD SEND Only, PadCnt 3, P_Key ffff, QP 0x48, PSN 1
    "00 00 0b 1b 00 00 00 49"              // DETH: Q_Key 0xb1b, SrcQP 0x49
    "68 65 6c 6c 6f 00 00 00"              // "hello" + 3 pad bytes
    "12 85 9a 43"                          // ICRC 0x439a8512, least significant byte first
    "55 c7";                               // VCRC 0xc755, least significant byte first

TEST(Crc, KnownPacketCrcs) {
    const auto wire = from_hex(kKnownUdPacket);
    ASSERT_EQ(wire.size(), 42u);
    EXPECT_EQ(compute_icrc(bytes(wire).first(36), Lnh::iba_local), 0x439A8512u);
    EXPECT_EQ(load_icrc(wire.data() + 36), 0x439A8512u);
    EXPECT_EQ(compute_vcrc(bytes(wire).first(40)), 0xC755);
    EXPECT_EQ(load_vcrc(wire.data() + 40), 0xC755);
}

TEST(Crc, KnownPacketBuildsByteForByte) {
    const std::vector<std::uint8_t> payload = ascii("hello");
    PacketSpec spec;
    spec.lrh.dlid = 3;
    spec.lrh.slid = 2;
    spec.bth.opcode = op::ud_send_only;
    spec.bth.pkey = 0xFFFF;
    spec.bth.dest_qp = 0x48;
    spec.bth.psn = 1;
    spec.ext.deth = {0xB1B, 0x49};
    spec.payload = payload;
    std::vector<std::uint8_t> out(packet_size(spec));
    auto n = build_packet(spec, out);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(test::to_hex(out), test::to_hex(from_hex(kKnownUdPacket)));
}

TEST(Crc, KnownPacketParses) {
    const auto wire = from_hex(kKnownUdPacket);
    auto pkt = parse_packet(wire);
    ASSERT_TRUE(pkt.has_value()) << to_string(pkt.error());
    EXPECT_EQ(pkt->icrc, 0x439A8512u);
    EXPECT_EQ(pkt->vcrc, 0xC755);
    EXPECT_EQ(std::string(pkt->payload.begin(), pkt->payload.end()), "hello");
}

TEST(Crc, ProductionMatchesReferenceOnSamples) {
    for (const auto& s : test::all_samples()) {
        SCOPED_TRACE(s.name);
        const std::size_t n = s.wire.size();
        EXPECT_EQ(load_icrc(s.wire.data() + n - 6), test::reference_icrc(s.wire));
        EXPECT_EQ(load_vcrc(s.wire.data() + n - 2), test::reference_vcrc(s.wire));
    }
}

// Rebuilds `s` with `mutate` applied to its spec and reports whether the
// ICRC changed.
template <class F>
bool icrc_changes(test::SamplePacket s, F mutate) {
    const std::uint32_t before = load_icrc(s.wire.data() + s.wire.size() - 6);
    mutate(s.spec);
    std::vector<std::uint8_t> out(packet_size(s.spec));
    auto n = build_packet(s.spec, out);
    if (!n) ADD_FAILURE() << to_string(n.error());
    return load_icrc(out.data() + out.size() - 6) != before;
}

TEST(Crc, LocalPacketIcrcMasksVlAndResv8aOnly) {
    const auto s = test::sample_ud_payload();
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.lrh.vl = 7; }));
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.bth.resv8a = 0xC0; }));
    EXPECT_TRUE(icrc_changes(s, [](PacketSpec& p) { p.lrh.sl = 9; }));
    EXPECT_TRUE(icrc_changes(s, [](PacketSpec& p) { p.lrh.dlid = 0x99; }));
    EXPECT_TRUE(icrc_changes(s, [](PacketSpec& p) { p.bth.psn = 0x42; }));
    EXPECT_TRUE(icrc_changes(s, [](PacketSpec& p) { p.ext.deth.qkey = 0x42; }));
}

TEST(Crc, GlobalPacketIcrcMasksLrhTclassFlowLabelHopLimit) {
    const auto s = test::sample_ud_multicast_grh();
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.lrh.sl = 9; }));
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.lrh.dlid = 0xC001; }));
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.lrh.slid = 0x0042; }));
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.grh->tclass = 0xAB; }));
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.grh->flow_label = 0x12345; }));
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.grh->hop_limit = 0x40; }));
    EXPECT_FALSE(icrc_changes(s, [](PacketSpec& p) { p.bth.resv8a = 0x01; }));
    EXPECT_TRUE(icrc_changes(s, [](PacketSpec& p) { p.grh->sgid[15] ^= 1; }));
    EXPECT_TRUE(icrc_changes(s, [](PacketSpec& p) { p.grh->dgid[3] ^= 1; }));
    EXPECT_TRUE(icrc_changes(s, [](PacketSpec& p) { p.bth.dest_qp = 0x12; }));
}

TEST(Crc, VcrcCoversEveryByteIncludingVl) {
    auto s = test::sample_ud_payload();
    const std::uint16_t before = load_vcrc(s.wire.data() + s.wire.size() - 2);
    s.spec.lrh.vl = 7;
    std::vector<std::uint8_t> out(packet_size(s.spec));
    ASSERT_TRUE(build_packet(s.spec, out).has_value());
    EXPECT_NE(load_vcrc(out.data() + out.size() - 2), before);
}

}  // namespace
}  // namespace ipoibd::ib

namespace {
// The VCRC bit by bit, straight from the polynomial (0x100B, reflected).
std::uint16_t vcrc_bitwise(ipoibd::bytes data) {
    std::uint16_t c = 0xFFFF;
    for (std::uint8_t b : data) {
        c ^= b;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? static_cast<std::uint16_t>(0xD008 ^ (c >> 1)) : static_cast<std::uint16_t>(c >> 1);
    }
    return static_cast<std::uint16_t>(c ^ 0xFFFF);
}
}  // namespace

TEST(Vcrc, SlicedTableMatchesTheBitwiseDefinitionAtEveryLength) {
    std::vector<std::uint8_t> data(300);
    std::uint32_t x = 12345;
    for (auto& b : data) b = static_cast<std::uint8_t>((x = x * 1103515245u + 12345u) >> 16);
    for (std::size_t len = 0; len <= data.size(); ++len) {
        const ipoibd::bytes d(data.data(), len);
        ASSERT_EQ(ipoibd::ib::crc16_vcrc(d), vcrc_bitwise(d)) << "length " << len;
    }
}

// The folding path (PCLMULQDQ, from 64 bytes) against the tables, at every
// length up to two 4 KiB packets and at every start alignment.
TEST(Vcrc, FoldingMatchesTheTablesAtEveryLengthAndAlignment) {
    std::vector<std::uint8_t> data(8200);
    std::uint32_t x = 777;
    for (auto& b : data) b = static_cast<std::uint8_t>((x = x * 1103515245u + 12345u) >> 16);
    for (std::size_t off = 0; off < 16; ++off)
        for (std::size_t len = 0; len + off <= data.size(); len += (len < 600 ? 1 : 37)) {
            const ipoibd::bytes d(data.data() + off, len);
            ASSERT_EQ(ipoibd::ib::crc16_vcrc(d), ipoibd::ib::crc16_vcrc_portable(d)) << "offset " << off << " length " << len;
        }
    const ipoibd::bytes all(data.data(), data.size());
    EXPECT_EQ(ipoibd::ib::crc16_vcrc(all), vcrc_bitwise(all));
}

// Runs of 0x00 and 0xFF (zero polynomials; the complement of the init).
TEST(Vcrc, FoldingMatchesTheBitwiseDefinitionOnConstantRuns) {
    for (std::uint8_t fill : {std::uint8_t{0x00}, std::uint8_t{0xFF}})
        for (std::size_t len : {64u, 127u, 128u, 129u, 4130u}) {
            const std::vector<std::uint8_t> data(len, fill);
            EXPECT_EQ(ipoibd::ib::crc16_vcrc(data), vcrc_bitwise(data)) << int{fill} << " x " << len;
        }
}

// ISA-L's CRC-32 against the bit-by-bit reference, LRH-only and GRH packets
// of every payload size up to 4 KiB in steps (its vector paths cut the
// buffer at 16, 64 and 256 bytes).
TEST(Crc, IcrcMatchesTheReferenceAcrossPayloadSizes) {
    std::uint32_t x = 99;
    for (const bool global : {false, true}) {
        const std::size_t head = 8 + (global ? 40 : 0) + 12;
        for (std::size_t payload = 0; payload <= 4096; payload += (payload < 300 ? 4 : 92)) {
            std::vector<std::uint8_t> wire(head + payload + 6);
            for (auto& b : wire) b = static_cast<std::uint8_t>((x = x * 1103515245u + 12345u) >> 16);
            wire[1] = static_cast<std::uint8_t>((wire[1] & ~0x3) | (global ? 0x3 : 0x2));
            const auto lnh = global ? ipoibd::ib::Lnh::iba_global : ipoibd::ib::Lnh::iba_local;
            ASSERT_EQ(ipoibd::ib::compute_icrc(ipoibd::bytes(wire).first(wire.size() - 6), lnh),
                      ipoibd::test::reference_icrc(wire))
                << (global ? "GRH" : "LRH") << " payload " << payload;
        }
    }
}
