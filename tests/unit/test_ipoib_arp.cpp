// ARP over IPoIB (RFC 4391 9.2): known bytes, builders, round trips and every
// rejection reason.
//
// The reply below is laid out as Linux's arp_create() writes one on an IPoIB
// interface (ar$hrd 32, ar$hln 20, then sha/spa/tha/tpa), with the addresses
// of two real ConnectX hosts (the `ip link` output in test_ipoib_address.cpp;
// the second host's QPN is 0x404) on test addresses 198.18.0.0/15. The
// replying host runs connected mode, so its own address carries flag 0x80;
// the requester's address is echoed back as it arrived.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ipoib/arp.h"
#include "ipoib/frame.h"
#include "wire_test_util.h"

namespace ipoibd::ipoib {
namespace {

using test::from_hex;
using test::to_hex;

const char* const kLinuxReplyHex =
    "00 20 08 00 14 04 00 02"                                         // hrd 32, pro IPv4, hln 20, pln 4, op reply
    "80 00 00 48 fe 80 00 00 00 00 00 00 00 1e 67 03 00 29 47 6f"     // sha: flags 0x80, QPN 0x48, GID
    "c6 12 00 02"                                                     // spa 198.18.0.2
    "00 00 04 04 fe 80 00 00 00 00 00 00 00 02 c9 03 00 57 e7 fd"     // tha: QPN 0x404, GID
    "c6 12 00 01";                                                    // tpa 198.18.0.1

HwAddress host_a() {
    return HwAddress{.flags = 0x80, .qpn = 0x48, .gid = *parse_ipv6("fe80::1e:6703:29:476f")};
}
HwAddress host_b() {
    return HwAddress{.flags = 0, .qpn = 0x404, .gid = *parse_ipv6("fe80::2:c903:57:e7fd")};
}
const Ipv4Address kIpA{198, 18, 0, 2};
const Ipv4Address kIpB{198, 18, 0, 1};

std::vector<std::uint8_t> encoded(const ArpPacket& p) {
    std::vector<std::uint8_t> out(ArpPacket::size);
    const auto n = encode_arp(p, out);
    EXPECT_TRUE(n.has_value());
    return out;
}

TEST(IpoibArp, LinuxReplyKnownBytes) {
    const auto wire = from_hex(kLinuxReplyHex);
    ASSERT_EQ(wire.size(), 56u);
    const auto p = parse_arp(wire);
    ASSERT_TRUE(p.has_value()) << to_string(p.error());
    EXPECT_EQ(p->op, ArpOp::reply);
    EXPECT_EQ(p->sender_hw, host_a());
    EXPECT_EQ(p->sender_ip, kIpA);
    EXPECT_EQ(p->target_hw, host_b());
    EXPECT_EQ(p->target_ip, kIpB);
    EXPECT_FALSE(p->is_gratuitous());
    EXPECT_EQ(to_hex(encoded(*p)), to_hex(wire));
}

TEST(IpoibArp, RequestReplyAndGratuitousBuilders) {
    // B asks who has A.
    const ArpPacket request = make_arp_request(host_b(), kIpB, kIpA);
    EXPECT_EQ(to_hex(encoded(request)),
              to_hex(from_hex("00 20 08 00 14 04 00 01"
                              "00 00 04 04 fe 80 00 00 00 00 00 00 00 02 c9 03 00 57 e7 fd c6 12 00 01"
                              "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 c6 12 00 02")));
    // A answers: exactly the Linux reply above.
    const ArpPacket reply = make_arp_reply(request, host_a());
    EXPECT_EQ(to_hex(encoded(reply)), to_hex(from_hex(kLinuxReplyHex)));
    // A announces itself.
    const ArpPacket garp = make_gratuitous_arp(host_a(), kIpA);
    EXPECT_TRUE(garp.is_gratuitous());
    EXPECT_EQ(garp.op, ArpOp::request);
    EXPECT_EQ(to_hex(encoded(garp)),
              to_hex(from_hex("00 20 08 00 14 04 00 01"
                              "80 00 00 48 fe 80 00 00 00 00 00 00 00 1e 67 03 00 29 47 6f c6 12 00 02"
                              "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 c6 12 00 02")));
}

TEST(IpoibArp, RoundTrips) {
    for (const ArpPacket& p : {make_arp_request(host_a(), kIpA, kIpB), make_arp_reply(make_arp_request(host_a(), kIpA, kIpB), host_b()),
                               make_gratuitous_arp(host_b(), kIpB)}) {
        const auto wire = encoded(p);
        const auto back = parse_arp(wire);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, p);
    }
}

TEST(IpoibArp, TrailingBytesIgnored) {
    auto wire = from_hex(kLinuxReplyHex);
    wire.resize(64, 0);
    EXPECT_TRUE(parse_arp(wire).has_value());
}

TEST(IpoibArp, InsideAnIpoibFrame) {
    std::vector<std::uint8_t> frame(EncapHeader::size + ArpPacket::size);
    ASSERT_TRUE(encode_arp(make_arp_reply(make_arp_request(host_b(), kIpB, kIpA), host_a()),
                           mutable_bytes(frame).subspan(EncapHeader::size)).has_value());
    ASSERT_TRUE(write_encap_header(EtherType::arp, frame).has_value());
    // The encapsulation header, then the reply. (Built as bytes: g++ 12
    // takes std::string's operator+ on a literal here for an overflow, GCC
    // bug 105651, once the test programs' precompiled header is used.)
    std::vector<std::uint8_t> expected{0x08, 0x06, 0x00, 0x00};
    const auto reply = from_hex(kLinuxReplyHex);
    expected.insert(expected.end(), reply.begin(), reply.end());
    EXPECT_EQ(to_hex(frame), to_hex(expected));
    const auto f = decapsulate(frame);
    ASSERT_TRUE(f.has_value());
    ASSERT_EQ(f->type, EtherType::arp);
    EXPECT_TRUE(parse_arp(f->payload).has_value());
}

TEST(IpoibArp, RejectionReasons) {
    const auto good = from_hex(kLinuxReplyHex);
    auto with = [&](std::size_t at, std::uint8_t value) {
        auto w = good;
        w[at] = value;
        return w;
    };
    const struct {
        const char* name;
        std::vector<std::uint8_t> wire;
        ArpError want;
    } cases[] = {
        {"empty", {}, ArpError::truncated},
        {"fixed header cut", std::vector<std::uint8_t>(good.begin(), good.begin() + 7), ArpError::truncated},
        {"addresses cut", std::vector<std::uint8_t>(good.begin(), good.end() - 1), ArpError::truncated},
        {"fixed header only", std::vector<std::uint8_t>(good.begin(), good.begin() + 8), ArpError::truncated},
        {"Ethernet hardware type", with(1, 1), ArpError::wrong_hardware_type},
        {"IEEE 802 hardware type", with(1, 6), ArpError::wrong_hardware_type},
        {"IPv6 protocol", [&] { auto w = good; w[2] = 0x86; w[3] = 0xDD; return w; }(), ArpError::wrong_protocol_type},
        {"Ethernet-sized address", with(4, 6), ArpError::wrong_hardware_length},
        {"GID-sized address", with(4, 16), ArpError::wrong_hardware_length},
        {"protocol length 16", with(5, 16), ArpError::wrong_protocol_length},
        {"op 0", with(7, 0), ArpError::unsupported_op},
        {"RARP request", with(7, 3), ArpError::unsupported_op},
        {"RARP reply", with(7, 4), ArpError::unsupported_op},
        {"InARP request", with(7, 8), ArpError::unsupported_op},
        {"op 0x0101", with(6, 1), ArpError::unsupported_op},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        const auto p = parse_arp(c.wire);
        ASSERT_FALSE(p.has_value());
        EXPECT_EQ(p.error(), c.want) << to_string(p.error());
    }
}

TEST(IpoibArp, HeaderCheckedBeforeLength) {
    // A short Ethernet ARP (28 bytes) is named for its hardware type, not
    // for being shorter than an IPoIB one.
    const auto ether = from_hex("00 01 08 00 06 04 00 01 52 54 00 12 34 56 c6 12 00 01"
                                "00 00 00 00 00 00 c6 12 00 02");
    EXPECT_EQ(parse_arp(ether).error(), ArpError::wrong_hardware_type);
}

TEST(IpoibArp, EncodeErrors) {
    std::vector<std::uint8_t> small(ArpPacket::size - 1);
    EXPECT_EQ(encode_arp(make_gratuitous_arp(host_a(), kIpA), small).error(), ArpError::short_buffer);
    HwAddress wide = host_a();
    wide.qpn = 0x1000000;
    std::vector<std::uint8_t> out(ArpPacket::size);
    EXPECT_EQ(encode_arp(make_gratuitous_arp(wide, kIpA), out).error(), ArpError::field_out_of_range);
    ArpPacket p = make_arp_request(host_a(), kIpA, kIpB);
    p.target_hw.qpn = 0x1000000;
    EXPECT_EQ(encode_arp(p, out).error(), ArpError::field_out_of_range);
}

TEST(IpoibArp, ReasonsHaveDistinctNames) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < kArpErrorCount; ++i) {
        const std::string n = to_string(static_cast<ArpError>(i));
        EXPECT_NE(n, "unknown");
        names.insert(n);
    }
    EXPECT_EQ(names.size(), kArpErrorCount);
}

}  // namespace
}  // namespace ipoibd::ipoib
