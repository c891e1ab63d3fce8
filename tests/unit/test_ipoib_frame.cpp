// The IPoIB encapsulation header (RFC 4391 6): known bytes for each type of
// Table 1, the reserved field ignored on receive and zero on send, every
// drop reason, in-place encapsulation, round trips.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ipoib/frame.h"
#include "wire_test_util.h"

namespace ipoibd::ipoib {
namespace {

using test::from_hex;
using test::to_hex;

std::string hex_of(bytes b) { return to_hex({b.begin(), b.end()}); }

TEST(IpoibFrame, Table1Values) {
    EXPECT_EQ(static_cast<std::uint16_t>(EtherType::ipv4), 0x0800);
    EXPECT_EQ(static_cast<std::uint16_t>(EtherType::arp), 0x0806);
    EXPECT_EQ(static_cast<std::uint16_t>(EtherType::rarp), 0x8035);
    EXPECT_EQ(static_cast<std::uint16_t>(EtherType::ipv6), 0x86DD);
    EXPECT_TRUE(is_ipoib_ether_type(0x0800));
    EXPECT_FALSE(is_ipoib_ether_type(0x88CC));  // LLDP
    EXPECT_FALSE(is_ipoib_ether_type(0x8100));  // 802.1Q
    EXPECT_FALSE(is_ipoib_ether_type(0x0000));
}

struct DecapCase {
    const char* name;
    const char* hex;
    EtherType type;
    std::uint16_t reserved;
    const char* payload_hex;
};

TEST(IpoibFrame, DecapsulateKnownBytes) {
    const DecapCase cases[] = {
        {"ipv4", "08 00 00 00 45 00 00 14", EtherType::ipv4, 0, "45 00 00 14"},
        {"arp", "08 06 00 00 00 20 08 00", EtherType::arp, 0, "00 20 08 00"},
        {"rarp", "80 35 00 00 00 20", EtherType::rarp, 0, "00 20"},
        {"ipv6", "86 dd 00 00 60 00 00 00", EtherType::ipv6, 0, "60 00 00 00"},
        {"empty payload", "08 00 00 00", EtherType::ipv4, 0, ""},
        // "ignored on receive": a sender that sets reserved bits is still heard
        {"reserved set", "86 dd ab cd 60", EtherType::ipv6, 0xABCD, "60"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        const auto wire = from_hex(c.hex);
        const auto f = decapsulate(wire);
        ASSERT_TRUE(f.has_value()) << to_string(f.error());
        EXPECT_EQ(f->type, c.type);
        EXPECT_EQ(f->reserved, c.reserved);
        EXPECT_EQ(hex_of(f->payload), to_hex(from_hex(c.payload_hex)));
        EXPECT_EQ(f->payload.data(), wire.data() + EncapHeader::size);  // a view, not a copy
    }
}

TEST(IpoibFrame, DropReasons) {
    const struct {
        const char* name;
        const char* hex;
        FrameError want;
    } cases[] = {
        {"empty", "", FrameError::truncated},
        {"one byte", "08", FrameError::truncated},
        {"three bytes", "08 00 00", FrameError::truncated},
        {"LLDP", "88 cc 00 00 01 02", FrameError::other_ether_type},
        {"VLAN tag", "81 00 00 00", FrameError::other_ether_type},
        {"zero type", "00 00 00 00", FrameError::other_ether_type},
        {"byte-swapped IPv4", "00 08 00 00", FrameError::other_ether_type},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        const auto f = decapsulate(from_hex(c.hex));
        ASSERT_FALSE(f.has_value());
        EXPECT_EQ(f.error(), c.want);
    }
}

TEST(IpoibFrame, EncapsulateWritesZeroReserved) {
    const auto payload = from_hex("60 00 00 00 00 08 3a ff");
    std::vector<std::uint8_t> out(32, 0xEE);
    const auto n = encapsulate(EtherType::ipv6, payload, out);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, 12u);
    out.resize(*n);
    EXPECT_EQ(to_hex(out), to_hex(from_hex("86 dd 00 00 60 00 00 00 00 08 3a ff")));
}

TEST(IpoibFrame, EncapsulateInPlace) {
    // The datagram is built at out[4..]; only the header is added.
    std::vector<std::uint8_t> buf = from_hex("ee ee ee ee 00 20 08 00 14 04");
    const auto n = encapsulate(EtherType::arp, bytes(buf).subspan(4), buf);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, buf.size());
    EXPECT_EQ(to_hex(buf), to_hex(from_hex("08 06 00 00 00 20 08 00 14 04")));

    std::vector<std::uint8_t> hdr_only = from_hex("ee ee ee ee 45");
    ASSERT_TRUE(write_encap_header(EtherType::ipv4, hdr_only).has_value());
    EXPECT_EQ(to_hex(hdr_only), to_hex(from_hex("08 00 00 00 45")));
}

TEST(IpoibFrame, EncapsulateShortBuffer) {
    const auto payload = from_hex("45 00 00 14");
    std::vector<std::uint8_t> out(EncapHeader::size + payload.size() - 1);
    const auto n = encapsulate(EtherType::ipv4, payload, out);
    ASSERT_FALSE(n.has_value());
    EXPECT_EQ(n.error(), FrameError::short_buffer);
    std::vector<std::uint8_t> three(3);
    EXPECT_EQ(encapsulate(EtherType::ipv4, {}, three).error(), FrameError::short_buffer);
    EXPECT_EQ(write_encap_header(EtherType::ipv4, three).error(), FrameError::short_buffer);
    std::vector<std::uint8_t> four(4);
    EXPECT_EQ(*encapsulate(EtherType::ipv4, {}, four), 4u);
}

TEST(IpoibFrame, RoundTripEveryType) {
    const auto payload = from_hex("01 02 03 04 05");
    for (EtherType t : {EtherType::ipv4, EtherType::arp, EtherType::rarp, EtherType::ipv6}) {
        SCOPED_TRACE(to_string(t));
        std::vector<std::uint8_t> out(64);
        const auto n = encapsulate(t, payload, out);
        ASSERT_TRUE(n.has_value());
        const auto f = decapsulate(bytes(out).first(*n));
        ASSERT_TRUE(f.has_value());
        EXPECT_EQ(f->type, t);
        EXPECT_EQ(f->reserved, 0);
        EXPECT_EQ(hex_of(f->payload), to_hex(payload));
    }
}

TEST(IpoibFrame, EncapHeaderStruct) {
    const auto wire = from_hex("86 dd 12 34");
    const EncapHeader h = EncapHeader::read_from(wire.data());
    EXPECT_EQ(h, (EncapHeader{0x86DD, 0x1234}));
    std::vector<std::uint8_t> out(4);
    h.write_to(out.data());
    EXPECT_EQ(out, wire);
}

TEST(IpoibFrame, ReasonsHaveDistinctNames) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < kFrameErrorCount; ++i) {
        const std::string n = to_string(static_cast<FrameError>(i));
        EXPECT_NE(n, "unknown");
        names.insert(n);
    }
    EXPECT_EQ(names.size(), kFrameErrorCount);
}

}  // namespace
}  // namespace ipoibd::ipoib
