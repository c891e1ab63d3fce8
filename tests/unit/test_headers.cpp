// Every IBA header: known wire bytes for chosen field values (encode and
// decode), round trips, short buffers and out-of-range fields.
#include <gtest/gtest.h>

#include "transport/wire/headers.h"
#include "transport/wire/mad.h"
#include "wire_test_util.h"

namespace ipoibd::ib {
namespace {

using test::from_hex;
using test::to_hex;

// Encodes `h`, compares with `hex`, decodes `hex` back and compares with `h`,
// then checks that one byte less is refused in both directions.
template <class H>
void expect_wire(const H& h, const char* hex) {
    const auto want = from_hex(hex);
    ASSERT_EQ(want.size(), H::size);
    std::vector<std::uint8_t> buf(H::size + 3, 0xEE);
    auto n = encode(h, buf);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, H::size);
    buf.resize(H::size);
    EXPECT_EQ(to_hex(buf), to_hex(want));

    auto back = decode<H>(want);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(*back == h);

    std::vector<std::uint8_t> small(H::size - 1);
    auto e = encode(h, small);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error(), CodecError::short_buffer);
    auto d = decode<H>(bytes(want).first(H::size - 1));
    ASSERT_FALSE(d.has_value());
    EXPECT_EQ(d.error(), CodecError::short_buffer);
}

template <class H>
void expect_out_of_range(const H& h) {
    std::vector<std::uint8_t> buf(H::size);
    auto n = encode(h, buf);
    ASSERT_FALSE(n.has_value());
    EXPECT_EQ(n.error(), CodecError::field_out_of_range);
}

TEST(Headers, StaticSizes) {
    static_assert(Lrh::size == 8 && Grh::size == 40 && Bth::size == 12);
    static_assert(Rdeth::size == 4 && Deth::size == 8 && Reth::size == 16 && AtomicEth::size == 28);
    static_assert(Aeth::size == 4 && AtomicAckEth::size == 8 && ImmDt::size == 4 && Ieth::size == 4);
    static_assert(MadHeader::size == 24 && kMadSize == 256);
    SUCCEED();
}

TEST(Headers, Lrh) {
    Lrh h{.vl = 0xF, .lver = 0, .sl = 0x5, .lnh = Lnh::iba_global, .dlid = 0xC001, .pkt_len = 0x7FF, .slid = 0x1234};
    expect_wire(h, "f0 53 c0 01 07 ff 12 34");
    expect_wire(Lrh{.vl = 1, .lver = 2, .sl = 0, .lnh = Lnh::raw, .dlid = 1, .pkt_len = 6, .slid = 2},
                "12 00 00 01 00 06 00 02");
    h.vl = 16;
    expect_out_of_range(h);
    h.vl = 0;
    h.pkt_len = 0x800;
    expect_out_of_range(h);
}

TEST(Headers, LrhIgnoresReservedBitsOnDecode) {
    // Rsv2 (byte 1 bits 3:2) and Rsv5 (byte 4 bits 7:3) set.
    auto d = decode<Lrh>(from_hex("00 0e 00 01 f8 06 00 02"));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->lnh, Lnh::iba_local);
    EXPECT_EQ(d->pkt_len, 6);
}

TEST(Headers, Grh) {
    Grh h;
    h.tclass = 0xAB;
    h.flow_label = 0xCDEF1;
    h.pay_len = 0x0102;
    h.hop_limit = 0x40;
    for (std::uint8_t i = 0; i < 16; ++i) {
        h.sgid[i] = i;
        h.dgid[i] = static_cast<std::uint8_t>(0xF0 | i);
    }
    expect_wire(h,
                "6a bc de f1 01 02 1b 40"
                "00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f"
                "f0 f1 f2 f3 f4 f5 f6 f7 f8 f9 fa fb fc fd fe ff");
    h.flow_label = 0x100000;
    expect_out_of_range(h);
}

TEST(Headers, Bth) {
    Bth h{.opcode = 0x64, .se = true, .mig_req = true, .pad_cnt = 2, .tver = 0, .pkey = 0x8001,
          .resv8a = 0, .dest_qp = 0xABCDEF, .ack_req = true, .psn = 0x123456};
    expect_wire(h, "64 e0 80 01 00 ab cd ef 80 12 34 56");
    h.dest_qp = 0x1000000;
    expect_out_of_range(h);
    h.dest_qp = 1;
    h.psn = 0x1000000;
    expect_out_of_range(h);
    h.psn = 0;
    h.pad_cnt = 4;
    expect_out_of_range(h);
}

TEST(Headers, BthDecodeIgnoresResv7) {
    auto d = decode<Bth>(from_hex("04 00 ff ff 00 00 00 05 7f 00 00 09"));
    ASSERT_TRUE(d.has_value());
    EXPECT_FALSE(d->ack_req);
    EXPECT_EQ(d->psn, 9u);
}

TEST(Headers, Rdeth) {
    expect_wire(Rdeth{0x00ABCDEF}, "00 ab cd ef");
    expect_out_of_range(Rdeth{0x01000000});
}

TEST(Headers, Deth) {
    expect_wire(Deth{0x80010000, 0x000001}, "80 01 00 00 00 00 00 01");
    expect_wire(Deth{0x00000B1B, 0xFFFFFF}, "00 00 0b 1b 00 ff ff ff");
    expect_out_of_range(Deth{0, 0x1000000});
}

TEST(Headers, Reth) {
    expect_wire(Reth{0x0102030405060708ULL, 0xA1A2A3A4, 0x00001000},
                "01 02 03 04 05 06 07 08 a1 a2 a3 a4 00 00 10 00");
}

TEST(Headers, AtomicEth) {
    expect_wire(AtomicEth{0x1112131415161718ULL, 0x21222324, 0x3132333435363738ULL, 0x4142434445464748ULL},
                "11 12 13 14 15 16 17 18 21 22 23 24"
                "31 32 33 34 35 36 37 38 41 42 43 44 45 46 47 48");
}

TEST(Headers, Aeth) {
    expect_wire(Aeth{Aeth::kSyndromeNak | 0x03, 0x00C0FFEE & 0xFFFFFF}, "63 c0 ff ee");
    expect_out_of_range(Aeth{0, 0x1000000});
}

TEST(Headers, AtomicAckEth) { expect_wire(AtomicAckEth{0xDEADBEEFCAFEF00DULL}, "de ad be ef ca fe f0 0d"); }

TEST(Headers, ImmDt) { expect_wire(ImmDt{0x01020304}, "01 02 03 04"); }

TEST(Headers, Ieth) { expect_wire(Ieth{0x0A0B0C0D}, "0a 0b 0c 0d"); }

TEST(Headers, MadHeader) {
    MadHeader h;
    h.mgmt_class = mgmt_class::subn_adm;
    h.class_version = class_version::subn_adm;
    h.method = method::get_table_resp;
    h.status = 0x0200;
    h.class_specific = 0x0001;
    h.transaction_id = 0x0102030405060708ULL;
    h.attribute_id = 0x0038;
    h.attribute_modifier = 0xAABBCCDD;
    expect_wire(h, "01 03 02 92 02 00 00 01 01 02 03 04 05 06 07 08 00 38 00 00 aa bb cc dd");
    EXPECT_TRUE(h.is_response());
}

TEST(Headers, RoundTripsOfBoundaryValues) {
    // All-ones and all-zeros in every field that has a width.
    for (bool ones : {false, true}) {
        Lrh l{.vl = ones ? std::uint8_t{15} : std::uint8_t{0}, .lver = ones ? std::uint8_t{15} : std::uint8_t{0},
              .sl = ones ? std::uint8_t{15} : std::uint8_t{0}, .lnh = ones ? Lnh::iba_global : Lnh::raw,
              .dlid = ones ? std::uint16_t{0xFFFF} : std::uint16_t{0},
              .pkt_len = ones ? Lrh::kPktLenMax : std::uint16_t{0},
              .slid = ones ? std::uint16_t{0xFFFF} : std::uint16_t{0}};
        std::array<std::uint8_t, Lrh::size> lb{};
        ASSERT_TRUE(encode(l, lb).has_value());
        EXPECT_TRUE(*decode<Lrh>(lb) == l);

        Bth b{.opcode = ones ? std::uint8_t{0xFF} : std::uint8_t{0}, .se = ones, .mig_req = ones,
              .pad_cnt = ones ? std::uint8_t{3} : std::uint8_t{0}, .tver = ones ? std::uint8_t{15} : std::uint8_t{0},
              .pkey = ones ? std::uint16_t{0xFFFF} : std::uint16_t{0}, .resv8a = ones ? std::uint8_t{0xFF} : std::uint8_t{0},
              .dest_qp = ones ? kQpnMask : 0, .ack_req = ones, .psn = ones ? kPsnMask : 0};
        std::array<std::uint8_t, Bth::size> bb{};
        ASSERT_TRUE(encode(b, bb).has_value());
        EXPECT_TRUE(*decode<Bth>(bb) == b);

        Grh g;
        g.ip_ver = ones ? 15 : 0;
        g.tclass = ones ? 0xFF : 0;
        g.flow_label = ones ? 0xFFFFF : 0;
        g.pay_len = ones ? 0xFFFF : 0;
        g.next_hdr = ones ? 0xFF : 0;
        g.hop_limit = ones ? 0xFF : 0;
        g.sgid.fill(ones ? 0xFF : 0);
        g.dgid.fill(ones ? 0xFF : 0);
        std::array<std::uint8_t, Grh::size> gb{};
        ASSERT_TRUE(encode(g, gb).has_value());
        EXPECT_TRUE(*decode<Grh>(gb) == g);
    }
}

TEST(Headers, LidClasses) {
    EXPECT_FALSE(is_unicast_lid(0x0000));
    EXPECT_TRUE(is_unicast_lid(0x0001));
    EXPECT_TRUE(is_unicast_lid(0xBFFF));
    EXPECT_FALSE(is_unicast_lid(0xC000));
    EXPECT_TRUE(is_multicast_lid(0xC000));
    EXPECT_TRUE(is_multicast_lid(0xFFFE));
    EXPECT_FALSE(is_multicast_lid(0xFFFF));
    EXPECT_EQ(mtu_bytes(Mtu::mtu256), 256u);
    EXPECT_EQ(mtu_bytes(Mtu::mtu2048), 2048u);
    EXPECT_EQ(mtu_bytes(Mtu::mtu4096), 4096u);
}

}  // namespace
}  // namespace ipoibd::ib
