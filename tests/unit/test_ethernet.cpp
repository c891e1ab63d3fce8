// Ethernet as a TAP device presents it and ARP for Ethernet (RFC 826)
// (common/ethernet.h): the header's known bytes and every drop reason, a
// kernel's ARP request written out byte by byte, every ARP rejection reason,
// round trips, the group MACs of RFC 1112 6.4 and RFC 2464 7, and the MAC
// text form.
//
// The ARP request is the 42-byte frame Linux's arp_create() gives a TAP
// device: broadcast destination, the asker's MAC as source and ar$sha, a
// zero ar$tha, no padding (the NIC pads on a wire; a TAP device does not).
// The addresses are test addresses 198.18.0.0/15; the answering MAC is the
// synthetic one ipoib/mac_table.h makes of the port GUID 00:1e:67:03:00:29:47:6f.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "common/ethernet.h"
#include "wire_test_util.h"

namespace ipoibd {
namespace {

using test::from_hex;
using test::to_hex;

std::string hex_of(bytes b) { return to_hex({b.begin(), b.end()}); }

const MacAddress kAsker{0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
const MacAddress kAnswerer{0x02, 0x03, 0x00, 0x29, 0x47, 0x6f};
const Ipv4Address kAskerIp{198, 18, 0, 1};
const Ipv4Address kAnswererIp{198, 18, 0, 2};

// The ARP part of the kernel's request and of the answer to it.
const char* const kRequestArpHex =
    "00 01 08 00 06 04 00 01"  // hrd Ethernet, pro IPv4, hln 6, pln 4, op request
    "52 54 00 12 34 56"        // sha: the asker
    "c6 12 00 01"              // spa 198.18.0.1
    "00 00 00 00 00 00"        // tha: unknown, zero
    "c6 12 00 02";             // tpa 198.18.0.2
const char* const kReplyArpHex =
    "00 01 08 00 06 04 00 02"  // op reply
    "02 03 00 29 47 6f"        // sha: the synthetic MAC
    "c6 12 00 02"              // spa 198.18.0.2
    "52 54 00 12 34 56"        // tha: the asker
    "c6 12 00 01";             // tpa 198.18.0.1
// The whole request frame: broadcast, from the asker, EtherType ARP.
const std::string kRequestFrameHex = std::string("ff ff ff ff ff ff 52 54 00 12 34 56 08 06") + kRequestArpHex;

// ---------------------------------------------------------------------------
// The Ethernet header.

struct EthernetCase {
    const char* name;
    std::string hex;
    std::optional<EthernetError> error;  // nullopt: parses
    MacAddress destination{};
    MacAddress source{};
    std::uint16_t type = 0;
    const char* payload_hex = "";
};

void PrintTo(const EthernetCase& c, std::ostream* os) { *os << c.name; }

const EthernetCase kEthernetCases[] = {
    {"ok_ipv4", "02 03 00 29 47 6f 52 54 00 12 34 56 08 00 45 00 00 14", std::nullopt, kAnswerer, kAsker,
     kEtherTypeIpv4, "45 00 00 14"},
    {"ok_arp", kRequestFrameHex, std::nullopt, kMacBroadcast, kAsker, kEtherTypeArp, kRequestArpHex},
    {"ok_ipv6", "33 33 00 00 00 01 52 54 00 12 34 56 86 dd 60 00", std::nullopt,
     MacAddress{0x33, 0x33, 0, 0, 0, 0x01}, kAsker, kEtherTypeIpv6, "60 00"},
    {"empty_payload_ok", "52 54 00 12 34 56 02 03 00 29 47 6f 08 00", std::nullopt, kAsker, kAnswerer,
     kEtherTypeIpv4, ""},
    {"lowest_ether_type_0600", "52 54 00 12 34 56 02 03 00 29 47 6f 06 00 aa", std::nullopt, kAsker, kAnswerer,
     0x0600, "aa"},
    {"lldp_is_a_type", "01 80 c2 00 00 0e 52 54 00 12 34 56 88 cc 02 07", std::nullopt,
     MacAddress{0x01, 0x80, 0xc2, 0, 0, 0x0e}, kAsker, 0x88CC, "02 07"},
    {"empty", "", EthernetError::truncated},
    {"truncated_13_bytes", "ff ff ff ff ff ff 52 54 00 12 34 56 08", EthernetError::truncated},
    {"truncated_6_bytes", "ff ff ff ff ff ff", EthernetError::truncated},
    {"vlan_8100", "ff ff ff ff ff ff 52 54 00 12 34 56 81 00 00 05 08 06", EthernetError::vlan_tagged},
    {"vlan_8100_no_tag", "ff ff ff ff ff ff 52 54 00 12 34 56 81 00", EthernetError::vlan_tagged},
    {"qinq_88a8", "ff ff ff ff ff ff 52 54 00 12 34 56 88 a8 00 05 81 00 00 06 08 00", EthernetError::vlan_tagged},
    {"length_field_05dc", "01 80 c2 00 00 00 52 54 00 12 34 56 05 dc 42 42 03", EthernetError::length_field},
    {"length_field_05ff", "01 80 c2 00 00 00 52 54 00 12 34 56 05 ff 42 42 03", EthernetError::length_field},
    {"length_field_zero", "01 80 c2 00 00 00 52 54 00 12 34 56 00 00", EthernetError::length_field},
    {"byte_swapped_ipv4", "ff ff ff ff ff ff 52 54 00 12 34 56 00 08 45 00", EthernetError::length_field},
};

class EthernetParse : public testing::TestWithParam<EthernetCase> {};

TEST_P(EthernetParse, KnownBytes) {
    const EthernetCase& c = GetParam();
    const auto wire = from_hex(c.hex);
    const auto f = parse_ethernet(wire);
    if (c.error) {
        ASSERT_FALSE(f.has_value()) << "parsed a frame of type " << f->header.type;
        EXPECT_EQ(f.error(), *c.error) << to_string(f.error()) << " instead of " << to_string(*c.error);
        return;
    }
    ASSERT_TRUE(f.has_value()) << to_string(f.error());
    EXPECT_EQ(format_mac(f->header.destination), format_mac(c.destination));
    EXPECT_EQ(format_mac(f->header.source), format_mac(c.source));
    EXPECT_EQ(f->header.type, c.type);
    EXPECT_EQ(hex_of(f->payload), to_hex(from_hex(c.payload_hex)));
    EXPECT_EQ(f->payload.data(), wire.data() + EthernetHeader::size);  // a view, not a copy
    EXPECT_EQ(f->payload.size(), wire.size() - EthernetHeader::size);
}

INSTANTIATE_TEST_SUITE_P(Ethernet, EthernetParse, testing::ValuesIn(kEthernetCases),
                         [](const testing::TestParamInfo<EthernetCase>& param) { return std::string(param.param.name); });

TEST(Ethernet, HeaderKnownBytes) {
    const EthernetHeader h{.destination = kMacBroadcast, .source = kAsker, .type = kEtherTypeArp};
    std::vector<std::uint8_t> out(EthernetHeader::size + 2, 0xEE);
    h.write_to(out.data());
    EXPECT_EQ(to_hex(out), to_hex(from_hex("ff ff ff ff ff ff 52 54 00 12 34 56 08 06 ee ee")));  // 14 bytes, no more
    EXPECT_EQ(EthernetHeader::read_from(out.data()), h);
}

TEST(Ethernet, HeaderRoundTrip) {
    const EthernetHeader headers[] = {
        {.destination = kAnswerer, .source = kAsker, .type = kEtherTypeIpv4},
        {.destination = kMacBroadcast, .source = kAnswerer, .type = kEtherTypeArp},
        {.destination = {0x33, 0x33, 0xff, 0x00, 0x00, 0x02}, .source = kAsker, .type = kEtherTypeIpv6},
        {.destination = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06}, .source = {0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6},
         .type = 0xABCD},
    };
    for (const EthernetHeader& h : headers) {
        SCOPED_TRACE(format_mac(h.destination));
        std::vector<std::uint8_t> frame(EthernetHeader::size + 3, 0x5A);
        h.write_to(frame.data());
        EXPECT_EQ(EthernetHeader::read_from(frame.data()), h);
        const auto f = parse_ethernet(frame);
        ASSERT_TRUE(f.has_value()) << to_string(f.error());
        EXPECT_EQ(f->header, h);
        EXPECT_EQ(hex_of(f->payload), "5a5a5a");
    }
}

TEST(Ethernet, ReasonsHaveDistinctNames) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < kEthernetErrorCount; ++i) {
        const std::string n = to_string(static_cast<EthernetError>(i));
        EXPECT_NE(n, "unknown");
        names.insert(n);
    }
    EXPECT_EQ(names.size(), kEthernetErrorCount);
    EXPECT_EQ(std::string(to_string(EthernetError::vlan_tagged)), "vlan_tagged");
}

// ---------------------------------------------------------------------------
// ARP for Ethernet.

EthernetArp kernel_request() {
    return EthernetArp{.op = EthernetArp::kOpRequest,
                       .sender_mac = kAsker,
                       .sender_ip = kAskerIp,
                       .target_mac = {},
                       .target_ip = kAnswererIp};
}
EthernetArp reply() {
    return EthernetArp{.op = EthernetArp::kOpReply,
                       .sender_mac = kAnswerer,
                       .sender_ip = kAnswererIp,
                       .target_mac = kAsker,
                       .target_ip = kAskerIp};
}

struct EthernetArpCase {
    std::string name;
    std::vector<std::uint8_t> wire;
    std::optional<EthernetArp> want;  // nullopt: refused with `error`
    EthernetArpError error = EthernetArpError::truncated;
};

void PrintTo(const EthernetArpCase& c, std::ostream* os) { *os << c.name << " (" << to_hex(c.wire) << ")"; }

std::vector<std::uint8_t> request_with(std::size_t at, std::uint8_t value) {
    auto w = from_hex(kRequestArpHex);
    w.at(at) = value;
    return w;
}

std::vector<EthernetArpCase> ethernet_arp_cases() {
    const auto request = from_hex(kRequestArpHex);
    auto padded = request;
    padded.resize(46, 0);  // the payload of a minimum-size (60-byte) frame
    auto padded_junk = request;
    padded_junk.resize(46, 0xA5);
    const auto frame = from_hex(kRequestFrameHex);
    auto two_bad = request_with(1, 32);  // hardware type checked before protocol type
    two_bad[2] = 0x86;
    two_bad[3] = 0xDD;
    auto ipv6_protocol = request;
    ipv6_protocol[2] = 0x86;
    ipv6_protocol[3] = 0xDD;

    using E = EthernetArpError;
    return {
        {"kernel_request", request, kernel_request()},
        {"kernel_request_in_its_frame", std::vector<std::uint8_t>(frame.begin() + 14, frame.end()), kernel_request()},
        {"reply", from_hex(kReplyArpHex), reply()},
        {"padded_to_46_bytes", padded, kernel_request()},
        {"padded_with_nonzero_bytes", padded_junk, kernel_request()},
        {"empty", {}, std::nullopt, E::truncated},
        {"fixed_part_only", std::vector<std::uint8_t>(request.begin(), request.begin() + 8), std::nullopt, E::truncated},
        {"truncated_27_bytes", std::vector<std::uint8_t>(request.begin(), request.end() - 1), std::nullopt, E::truncated},
        {"short_and_foreign", from_hex("00 20 08 00 14 04 00 01"), std::nullopt, E::truncated},  // length first
        {"ieee802_hardware", request_with(1, 6), std::nullopt, E::wrong_hardware_type},
        {"infiniband_hardware", request_with(1, 32), std::nullopt, E::wrong_hardware_type},
        {"hardware_0x0101", request_with(0, 1), std::nullopt, E::wrong_hardware_type},
        {"hardware_before_protocol", two_bad, std::nullopt, E::wrong_hardware_type},
        {"ipv6_protocol", ipv6_protocol, std::nullopt, E::wrong_protocol_type},
        {"protocol_0x0806", request_with(3, 0x06), std::nullopt, E::wrong_protocol_type},
        {"protocol_0x0000", request_with(2, 0x00), std::nullopt, E::wrong_protocol_type},
        {"protocol_0x1800", request_with(2, 0x18), std::nullopt, E::wrong_protocol_type},
        {"hardware_length_20", request_with(4, 20), std::nullopt, E::wrong_hardware_length},
        {"hardware_length_8", request_with(4, 8), std::nullopt, E::wrong_hardware_length},
        {"protocol_length_16", request_with(5, 16), std::nullopt, E::wrong_protocol_length},
        {"protocol_length_0", request_with(5, 0), std::nullopt, E::wrong_protocol_length},
        {"op_0", request_with(7, 0), std::nullopt, E::unsupported_op},
        {"rarp_request_op_3", request_with(7, 3), std::nullopt, E::unsupported_op},
        {"rarp_reply_op_4", request_with(7, 4), std::nullopt, E::unsupported_op},
        {"inarp_request_op_8", request_with(7, 8), std::nullopt, E::unsupported_op},
        {"op_0x0101", request_with(6, 1), std::nullopt, E::unsupported_op},
    };
}

class EthernetArpParse : public testing::TestWithParam<EthernetArpCase> {};

TEST_P(EthernetArpParse, KnownBytes) {
    const EthernetArpCase& c = GetParam();
    const auto a = parse_ethernet_arp(c.wire);
    if (!c.want) {
        ASSERT_FALSE(a.has_value()) << "parsed, op " << a->op;
        EXPECT_EQ(a.error(), c.error) << to_string(a.error()) << " instead of " << to_string(c.error);
        return;
    }
    ASSERT_TRUE(a.has_value()) << to_string(a.error());
    EXPECT_EQ(a->op, c.want->op);
    EXPECT_EQ(format_mac(a->sender_mac), format_mac(c.want->sender_mac));
    EXPECT_EQ(format_ipv4(a->sender_ip), format_ipv4(c.want->sender_ip));
    EXPECT_EQ(format_mac(a->target_mac), format_mac(c.want->target_mac));
    EXPECT_EQ(format_ipv4(a->target_ip), format_ipv4(c.want->target_ip));
    EXPECT_EQ(*a, *c.want);
    // Written out again: the 28 bytes it came from (no padding).
    std::vector<std::uint8_t> out(EthernetArp::size);
    a->write_to(out.data());
    EXPECT_EQ(to_hex(out), to_hex({c.wire.begin(), c.wire.begin() + EthernetArp::size}));
}

INSTANTIATE_TEST_SUITE_P(Ethernet, EthernetArpParse, testing::ValuesIn(ethernet_arp_cases()),
                         [](const testing::TestParamInfo<EthernetArpCase>& param) { return param.param.name; });

TEST(EthernetArp, WriteKnownBytes) {
    std::vector<std::uint8_t> out(EthernetArp::size + 2, 0xEE);
    kernel_request().write_to(out.data());
    EXPECT_EQ(to_hex(out), to_hex(from_hex(std::string(kRequestArpHex) + "ee ee")));  // 28 bytes, no more
    reply().write_to(out.data());
    EXPECT_EQ(to_hex(out), to_hex(from_hex(std::string(kReplyArpHex) + "ee ee")));
}

TEST(EthernetArp, RoundTrip) {
    EthernetArp odd{.op = EthernetArp::kOpReply,
                    .sender_mac = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab},
                    .sender_ip = {10, 20, 30, 40},
                    .target_mac = {0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98},
                    .target_ip = {255, 254, 253, 252}};
    EthernetArp gratuitous = kernel_request();
    gratuitous.target_ip = gratuitous.sender_ip;
    EthernetArp probe = kernel_request();
    probe.sender_ip = kIpv4Unspecified;
    for (const EthernetArp& p : {kernel_request(), reply(), odd, gratuitous, probe}) {
        SCOPED_TRACE(format_mac(p.sender_mac) + " " + format_ipv4(p.target_ip));
        std::vector<std::uint8_t> wire(EthernetArp::size, 0xEE);
        p.write_to(wire.data());
        const auto back = parse_ethernet_arp(wire);
        ASSERT_TRUE(back.has_value()) << to_string(back.error());
        EXPECT_EQ(*back, p);
    }
}

TEST(EthernetArp, GratuitousAndProbe) {
    EXPECT_FALSE(kernel_request().is_gratuitous());
    EXPECT_FALSE(kernel_request().is_probe());
    EthernetArp announce = kernel_request();
    announce.target_ip = kAskerIp;
    EXPECT_TRUE(announce.is_gratuitous());
    EXPECT_FALSE(announce.is_probe());
    EthernetArp probe = kernel_request();  // RFC 5227 2.1.1: spa 0.0.0.0
    probe.sender_ip = kIpv4Unspecified;
    EXPECT_TRUE(probe.is_probe());
    EXPECT_FALSE(probe.is_gratuitous());
}

TEST(EthernetArp, ReasonsHaveDistinctNames) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < kEthernetArpErrorCount; ++i) {
        const std::string n = to_string(static_cast<EthernetArpError>(i));
        EXPECT_NE(n, "unknown");
        names.insert(n);
    }
    EXPECT_EQ(names.size(), kEthernetArpErrorCount);
    EXPECT_EQ(std::string(to_string(EthernetArpError::unsupported_op)), "unsupported_op");
}

// ---------------------------------------------------------------------------
// Group MACs.

struct MulticastCase {
    const char* name;
    const char* group;
    const char* mac;
};

void PrintTo(const MulticastCase& c, std::ostream* os) { *os << c.group << " -> " << c.mac; }

const MulticastCase kMulticastCases[] = {
    {"all_hosts", "224.0.0.1", "01:00:5e:00:00:01"},
    {"ssdp", "239.255.255.250", "01:00:5e:7f:ff:fa"},            // the 2nd octet's high bit dropped
    {"high_bit_dropped", "224.128.0.1", "01:00:5e:00:00:01"},    // the same MAC as 224.0.0.1
    {"first_octet_not_mapped", "232.1.2.3", "01:00:5e:01:02:03"},  // only 23 bits map
    {"mdns_v4", "224.0.0.251", "01:00:5e:00:00:fb"},
    {"all_nodes", "ff02::1", "33:33:00:00:00:01"},
    {"solicited_node", "ff02::1:ff00:2", "33:33:ff:00:00:02"},
    {"site_scope", "ff05::1:3", "33:33:00:01:00:03"},
    {"low_32_bits_only", "ff0e:1234:5678::abcd:ef01:2345", "33:33:ef:01:23:45"},
};

class EthernetMulticast : public testing::TestWithParam<MulticastCase> {};

TEST_P(EthernetMulticast, GroupMac) {
    const auto group = parse_ip_address(GetParam().group);
    ASSERT_TRUE(group.has_value());
    const MacAddress m = multicast_mac(*group);
    EXPECT_EQ(format_mac(m), GetParam().mac);
    EXPECT_TRUE(is_group_mac(m));
    EXPECT_EQ(m[0] & kMacLocallyAdministered, group->is_v6() ? kMacLocallyAdministered : 0);
}

INSTANTIATE_TEST_SUITE_P(Ethernet, EthernetMulticast, testing::ValuesIn(kMulticastCases),
                         [](const testing::TestParamInfo<MulticastCase>& param) { return std::string(param.param.name); });

TEST(EthernetMac, Predicates) {
    EXPECT_TRUE(is_group_mac(kMacBroadcast));
    EXPECT_FALSE(is_zero_mac(kMacBroadcast));
    EXPECT_FALSE(is_group_mac(kAsker));
    EXPECT_FALSE(is_group_mac(kAnswerer));
    EXPECT_TRUE(is_group_mac(MacAddress{0x01, 0, 0, 0, 0, 0}));
    EXPECT_TRUE(is_zero_mac(MacAddress{}));
    EXPECT_FALSE(is_zero_mac(MacAddress{0, 0, 0, 0, 0, 1}));
    EXPECT_EQ(format_mac(kMacBroadcast), "ff:ff:ff:ff:ff:ff");
}

// ---------------------------------------------------------------------------
// MAC text.

TEST(EthernetMac, FormatKnownText) {
    EXPECT_EQ(format_mac(kAsker), "52:54:00:12:34:56");
    EXPECT_EQ(format_mac(kAnswerer), "02:03:00:29:47:6f");
    EXPECT_EQ(format_mac(MacAddress{}), "00:00:00:00:00:00");
    EXPECT_EQ(format_mac(MacAddress{0xab, 0xcd, 0xef, 0x0a, 0xb0, 0x09}), "ab:cd:ef:0a:b0:09");
}

TEST(EthernetMac, TextRoundTrip) {
    const MacAddress macs[] = {
        MacAddress{}, kMacBroadcast, kAsker, kAnswerer, {0x01, 0x00, 0x5e, 0x7f, 0xff, 0xfa},
        {0x0a, 0xb0, 0xc9, 0xd8, 0xe7, 0xf6},
    };
    for (const MacAddress& m : macs) {
        const std::string text = format_mac(m);
        SCOPED_TRACE(text);
        EXPECT_EQ(text.size(), 17u);
        const auto back = parse_mac(text);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, m);
    }
    // Every octet value survives the trip, in every position.
    for (unsigned v = 0; v < 256; ++v) {
        const auto b = static_cast<std::uint8_t>(v);
        const MacAddress m{b, static_cast<std::uint8_t>(b ^ 0xFF), b, static_cast<std::uint8_t>(b + 1), b,
                           static_cast<std::uint8_t>(b * 7)};
        const auto back = parse_mac(format_mac(m));
        ASSERT_TRUE(back.has_value()) << format_mac(m);
        EXPECT_EQ(*back, m) << format_mac(m);
    }
}

TEST(EthernetMac, UpperCaseAccepted) {
    const auto m = parse_mac("02:AB:CD:EF:0A:FF");
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(*m, (MacAddress{0x02, 0xab, 0xcd, 0xef, 0x0a, 0xff}));
    const auto mixed = parse_mac("02:aB:Cd:eF:0a:Ff");
    ASSERT_TRUE(mixed.has_value());
    EXPECT_EQ(*mixed, *m);
    EXPECT_EQ(format_mac(*m), "02:ab:cd:ef:0a:ff");  // written lower case
}

struct BadMac {
    const char* name;
    const char* text;
};

void PrintTo(const BadMac& c, std::ostream* os) { *os << '"' << c.text << '"'; }

const BadMac kBadMacs[] = {
    {"empty", ""},
    {"one_digit_short", "52:54:00:12:34:5"},
    {"one_digit_long", "52:54:00:12:34:567"},
    {"seven_octets", "52:54:00:12:34:56:78"},
    {"five_octets", "52:54:00:12:34"},
    {"single_digit_octets", "2:54:0:12:34:56:7"},  // 17 characters, separators misplaced
    {"dashes", "52-54-00-12-34-56"},
    {"dots", "52.54.00.12.34.56"},
    {"cisco_dots", "5254.0012.3456"},
    {"no_separators_17", "5254001234560000a"},
    {"one_dash", "52:54:00-12:34:56"},
    {"last_separator_wrong", "52:54:00:12:34;56"},
    {"separator_shifted", "52:54:00:12:3456:"},
    {"trailing_colon", "52:54:00:12:34:5:"},
    {"leading_colon", ":52:54:00:12:34:5"},
    {"non_hex_g", "52:54:00:12:34:5g"},
    {"non_hex_first", "x2:54:00:12:34:56"},
    {"non_hex_high_nibble", "52:54:00:z2:34:56"},
    {"sign", "52:54:00:+1:34:56"},
    {"space_padded", " 2:54:00:12:34:56"},
    {"trailing_newline", "52:54:00:12:34:56\n"},
    {"separator_digit", "52:54:00:12:34056"},
};

class EthernetMacRejects : public testing::TestWithParam<BadMac> {};

TEST_P(EthernetMacRejects, ParseMac) {
    const auto m = parse_mac(GetParam().text);
    EXPECT_FALSE(m.has_value()) << "read as " << format_mac(*m);
}

INSTANTIATE_TEST_SUITE_P(Ethernet, EthernetMacRejects, testing::ValuesIn(kBadMacs),
                         [](const testing::TestParamInfo<BadMac>& param) { return std::string(param.param.name); });

}  // namespace
}  // namespace ipoibd
