// IPv6 Neighbor Discovery with IPoIB link-layer options (RFC 4391 9.3):
// known bytes for NS, NA, DAD and unsolicited NA, parsing of RS, RA and
// Redirect, extension headers, option rewriting, and every rejection reason.
//
// Checksums are checked twice over, independently of ipoib/nd.cpp:
//  - reference_checksum() below builds the pseudo-header as bytes and adds
//    with an end-around carry at every step (nd.cpp sums into 64 bits and
//    folds once, straight from the address arrays);
//  - the four known packets' checksums (0x829f NS, 0x4ec0 NA, 0x83d5 DAD,
//    0x4a96 unsolicited NA) were computed by a separate Python script and
//    shown "[correct]" by tshark 4.0 on a raw-IPv6 capture of those bytes.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ipoib/nd.h"
#include "wire_test_util.h"

namespace ipoibd::ipoib {
namespace {

using test::from_hex;
using test::to_hex;
using Bytes = std::vector<std::uint8_t>;

Ipv6Address v6(const char* text) {
    const auto a = parse_ipv6(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a.value_or(Ipv6Address{});
}

// Two hosts (addresses from real ConnectX ports; see test_ipoib_address.cpp).
const Ipv6Address kIpA = v6("fe80::21e:6703:29:476f");
const Ipv6Address kIpB = v6("fe80::202:c903:57:e7fd");
const HwAddress kHwA{.flags = 0, .qpn = 0x48, .gid = v6("fe80::1e:6703:29:476f")};
const HwAddress kHwB{.flags = 0, .qpn = 0x404, .gid = v6("fe80::2:c903:57:e7fd")};

// A asks for B: NS to B's solicited-node group with A's source option.
const char* const kNsHex =
    "60 00 00 00 00 30 3a ff"
    "fe 80 00 00 00 00 00 00 02 1e 67 03 00 29 47 6f"
    "ff 02 00 00 00 00 00 00 00 00 00 01 ff 57 e7 fd"
    "87 00 82 9f 00 00 00 00"                                  // type 135, code 0, checksum, reserved
    "fe 80 00 00 00 00 00 00 02 02 c9 03 00 57 e7 fd"          // target B
    "01 03 00 00"                                              // SLLA, length 3, two zero octets
    "00 00 00 48 fe 80 00 00 00 00 00 00 00 1e 67 03 00 29 47 6f";  // A's 20-byte address
// B answers: NA to A, Solicited and Override, B's target option.
const char* const kNaHex =
    "60 00 00 00 00 30 3a ff"
    "fe 80 00 00 00 00 00 00 02 02 c9 03 00 57 e7 fd"
    "fe 80 00 00 00 00 00 00 02 1e 67 03 00 29 47 6f"
    "88 00 4e c0 60 00 00 00"
    "fe 80 00 00 00 00 00 00 02 02 c9 03 00 57 e7 fd"
    "02 03 00 00 00 00 04 04 fe 80 00 00 00 00 00 00 00 02 c9 03 00 57 e7 fd";
// A's DAD probe for its link-local address.
const char* const kDadHex =
    "60 00 00 00 00 18 3a ff"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "ff 02 00 00 00 00 00 00 00 00 00 01 ff 29 47 6f"
    "87 00 83 d5 00 00 00 00"
    "fe 80 00 00 00 00 00 00 02 1e 67 03 00 29 47 6f";
// A announces itself to all nodes: Override only.
const char* const kUnsolicitedNaHex =
    "60 00 00 00 00 30 3a ff"
    "fe 80 00 00 00 00 00 00 02 1e 67 03 00 29 47 6f"
    "ff 02 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
    "88 00 4a 96 20 00 00 00"
    "fe 80 00 00 00 00 00 00 02 1e 67 03 00 29 47 6f"
    "02 03 00 00 00 00 00 48 fe 80 00 00 00 00 00 00 00 1e 67 03 00 29 47 6f";

// ---------------------------------------------------------------------------
// Independent helpers
std::uint16_t reference_checksum(const Ipv6Address& src, const Ipv6Address& dst, Bytes msg) {
    msg[2] = msg[3] = 0;
    Bytes all(src.begin(), src.end());
    all.insert(all.end(), dst.begin(), dst.end());
    const auto len = static_cast<std::uint32_t>(msg.size());
    for (int shift = 24; shift >= 0; shift -= 8) all.push_back(static_cast<std::uint8_t>(len >> shift));
    all.insert(all.end(), {0, 0, 0, 58});
    all.insert(all.end(), msg.begin(), msg.end());
    if (all.size() % 2) all.push_back(0);
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < all.size(); i += 2) {
        sum += static_cast<std::uint32_t>((all[i] << 8) | all[i + 1]);
        if (sum > 0xFFFF) sum -= 0xFFFF;  // end-around carry
    }
    return static_cast<std::uint16_t>(~sum);
}

void append(Bytes& b, const Bytes& more) { b.insert(b.end(), more.begin(), more.end()); }
void append(Bytes& b, const Ipv6Address& a) { b.insert(b.end(), a.begin(), a.end()); }

Bytes ipoib_option(std::uint8_t type, const HwAddress& hw) {
    Bytes o = {type, 3, 0, 0};
    o.resize(24);
    hw.write_to(o.data() + 4);
    return o;
}
Bytes ethernet_option(std::uint8_t type) { return {type, 1, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56}; }
Bytes prefix_option() {  // type 3, length 4: 2001:db8::/64, L and A
    Bytes o = {3, 4, 64, 0xC0, 0, 0, 0x0E, 0x10, 0, 0, 0x07, 0x08, 0, 0, 0, 0};
    append(o, v6("2001:db8::"));
    return o;
}
Bytes mtu_option() { return {5, 1, 0, 0, 0, 0, 0x07, 0xFC}; }  // 2044

Bytes ns_message(const Ipv6Address& target, const Bytes& options = {}) {
    Bytes m = {135, 0, 0, 0, 0, 0, 0, 0};
    append(m, target);
    append(m, options);
    return m;
}
Bytes na_message(std::uint8_t flags, const Ipv6Address& target, const Bytes& options = {}) {
    Bytes m = {136, 0, 0, 0, flags, 0, 0, 0};
    append(m, target);
    append(m, options);
    return m;
}
Bytes rs_message(const Bytes& options = {}) {
    Bytes m = {133, 0, 0, 0, 0, 0, 0, 0};
    append(m, options);
    return m;
}
Bytes ra_message(const Bytes& options = {}) {
    Bytes m = {134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0};
    append(m, options);
    return m;
}
Bytes redirect_message(const Ipv6Address& target, const Ipv6Address& destination, const Bytes& options = {}) {
    Bytes m = {137, 0, 0, 0, 0, 0, 0, 0};
    append(m, target);
    append(m, destination);
    append(m, options);
    return m;
}

struct PacketSpec {
    Ipv6Address src = kIpA;
    Ipv6Address dst = kIpB;
    Bytes icmp;
    Bytes ext;                 // extension headers, their own next-header fields filled in
    std::uint8_t next_header = kNextHeaderIcmpv6;  // of the IPv6 header
    std::uint8_t hop_limit = 255;
};

Bytes make_packet(PacketSpec s) {
    if (s.icmp.size() >= 4) {
        const std::uint16_t c = reference_checksum(s.src, s.dst, s.icmp);
        s.icmp[2] = static_cast<std::uint8_t>(c >> 8);
        s.icmp[3] = static_cast<std::uint8_t>(c);
    }
    const std::size_t payload = s.ext.size() + s.icmp.size();
    Bytes p = {0x60, 0, 0, 0, static_cast<std::uint8_t>(payload >> 8), static_cast<std::uint8_t>(payload),
               s.next_header, s.hop_limit};
    append(p, s.src);
    append(p, s.dst);
    append(p, s.ext);
    append(p, s.icmp);
    return p;
}

Bytes build(const NeighborSolicitation& ns) {
    Bytes out(kNsNaPacketMaxSize);
    const auto n = build_neighbor_solicitation(ns, out);
    EXPECT_TRUE(n.has_value()) << to_string(n.error());
    out.resize(n ? *n : 0);
    return out;
}
Bytes build(const NeighborAdvertisement& na) {
    Bytes out(kNsNaPacketMaxSize);
    const auto n = build_neighbor_advertisement(na, out);
    EXPECT_TRUE(n.has_value()) << to_string(n.error());
    out.resize(n ? *n : 0);
    return out;
}

NdMessage parsed(const Bytes& packet) {
    const auto m = parse_nd(packet);
    EXPECT_TRUE(m.has_value()) << to_string(m.error());
    return m ? *m : NdMessage{};
}

// ---------------------------------------------------------------------------
TEST(IpoibNd, LinkLayerOptionLayout) {
    Bytes o(LinkLayerAddressOption::size, 0xEE);
    LinkLayerAddressOption{NdOptionType::source_link_layer_address, kHwA}.write_to(o.data());
    EXPECT_EQ(to_hex(o), to_hex(from_hex("01 03 00 00 00 00 00 48 fe 80 00 00 00 00 00 00 00 1e 67 03 00 29 47 6f")));
    EXPECT_EQ(link_layer_option_of(NdType::router_solicitation), NdOptionType::source_link_layer_address);
    EXPECT_EQ(link_layer_option_of(NdType::router_advertisement), NdOptionType::source_link_layer_address);
    EXPECT_EQ(link_layer_option_of(NdType::neighbor_solicitation), NdOptionType::source_link_layer_address);
    EXPECT_EQ(link_layer_option_of(NdType::neighbor_advertisement), NdOptionType::target_link_layer_address);
    EXPECT_EQ(link_layer_option_of(NdType::redirect), NdOptionType::target_link_layer_address);
}

TEST(IpoibNd, NeighborSolicitationKnownBytes) {
    const Bytes wire = build(make_resolution_solicitation(kIpA, kHwA, kIpB));
    EXPECT_EQ(to_hex(wire), to_hex(from_hex(kNsHex)));
    const NdMessage m = parsed(wire);
    EXPECT_EQ(m.type, NdType::neighbor_solicitation);
    EXPECT_EQ(m.ip.source, kIpA);
    EXPECT_EQ(m.ip.destination, v6("ff02::1:ff57:e7fd"));
    EXPECT_EQ(m.ip.hop_limit, 255);
    EXPECT_EQ(m.icmp_offset, 40u);
    EXPECT_EQ(m.icmp_length, 48u);
    EXPECT_EQ(m.checksum, 0x829f);
    EXPECT_EQ(m.target, kIpB);
    EXPECT_EQ(m.source_lla, kHwA);
    EXPECT_FALSE(m.target_lla.has_value());
}

TEST(IpoibNd, SolicitedAdvertisementKnownBytes) {
    const NdMessage ns = parsed(from_hex(kNsHex));
    const Bytes wire = build(make_solicited_advertisement(ns, kHwB, false));
    EXPECT_EQ(to_hex(wire), to_hex(from_hex(kNaHex)));
    const NdMessage m = parsed(wire);
    EXPECT_EQ(m.type, NdType::neighbor_advertisement);
    EXPECT_EQ(m.ip.destination, kIpA);
    EXPECT_EQ(m.target, kIpB);
    EXPECT_FALSE(m.router);
    EXPECT_TRUE(m.solicited);
    EXPECT_TRUE(m.override_flag);
    EXPECT_EQ(m.target_lla, kHwB);
    EXPECT_FALSE(m.source_lla.has_value());
    EXPECT_EQ(m.checksum, 0x4ec0);
}

TEST(IpoibNd, DadKnownBytesAndItsAnswer) {
    const Bytes wire = build(make_dad_solicitation(kIpA));
    EXPECT_EQ(to_hex(wire), to_hex(from_hex(kDadHex)));
    const NdMessage dad = parsed(wire);
    EXPECT_TRUE(is_ipv6_unspecified(dad.ip.source));
    EXPECT_FALSE(dad.source_lla.has_value());
    EXPECT_EQ(dad.checksum, 0x83d5);
    // A defender answers to all nodes, Solicited clear (RFC 4861 7.2.4).
    const NeighborAdvertisement na = make_solicited_advertisement(dad, kHwB, true);
    EXPECT_EQ(na.destination, kIpv6AllNodes);
    EXPECT_FALSE(na.solicited);
    EXPECT_TRUE(na.router);
    const NdMessage m = parsed(build(na));
    EXPECT_TRUE(m.router);
    EXPECT_FALSE(m.solicited);
    EXPECT_EQ(m.target, kIpA);
}

TEST(IpoibNd, UnsolicitedAdvertisementKnownBytes) {
    const Bytes wire = build(make_unsolicited_advertisement(kIpA, kHwA, false));
    EXPECT_EQ(to_hex(wire), to_hex(from_hex(kUnsolicitedNaHex)));
    const NdMessage m = parsed(wire);
    EXPECT_FALSE(m.solicited);
    EXPECT_TRUE(m.override_flag);
    EXPECT_EQ(m.ip.destination, kIpv6AllNodes);
    EXPECT_EQ(m.checksum, 0x4a96);
}

TEST(IpoibNd, UnicastProbe) {
    const NeighborSolicitation ns = make_unicast_solicitation(kIpA, kHwA, kIpB);
    EXPECT_EQ(ns.destination, kIpB);
    const NdMessage m = parsed(build(ns));
    EXPECT_EQ(m.ip.destination, kIpB);
    EXPECT_EQ(m.source_lla, kHwA);
}

TEST(IpoibNd, ChecksumAgainstReference) {
    for (const char* hex : {kNsHex, kNaHex, kDadHex, kUnsolicitedNaHex}) {
        const Bytes p = from_hex(hex);
        const Ipv6Header h = Ipv6Header::read_from(p.data());
        const Bytes msg(p.begin() + 40, p.end());
        const std::uint16_t stored = static_cast<std::uint16_t>((msg[2] << 8) | msg[3]);
        EXPECT_EQ(icmpv6_checksum(h.source, h.destination, msg), stored);
        EXPECT_EQ(reference_checksum(h.source, h.destination, msg), stored);
    }
    // Odd lengths pad with a zero octet; lengths above 16 bits reach the
    // pseudo-header's high word.
    for (std::size_t len : {4u, 5u, 23u, 1001u, 70001u}) {
        Bytes msg(len);
        for (std::size_t i = 0; i < len; ++i) msg[i] = static_cast<std::uint8_t>(i * 37 + 11);
        EXPECT_EQ(icmpv6_checksum(kIpA, kIpB, msg), reference_checksum(kIpA, kIpB, msg)) << len;
    }
}

TEST(IpoibNd, ChecksumEitherZeroAccepted) {
    // Ones' complement has two zeros; a sender may store 0xFFFF where we
    // compute 0x0000. Find a message whose checksum is 0 and store 0xFFFF.
    for (std::uint16_t pad = 0; pad < 0xFFFF; ++pad) {
        Bytes icmp = na_message(0x20, kIpA, ipoib_option(2, kHwA));
        icmp[6] = static_cast<std::uint8_t>(pad >> 8);  // reserved bits: any value sums in
        icmp[7] = static_cast<std::uint8_t>(pad);
        if (reference_checksum(kIpA, kIpv6AllNodes, icmp) != 0) continue;
        Bytes p = make_packet({.src = kIpA, .dst = kIpv6AllNodes, .icmp = icmp});
        EXPECT_TRUE(parse_nd(p).has_value());
        p[42] = p[43] = 0xFF;
        EXPECT_TRUE(parse_nd(p).has_value());
        return;
    }
    FAIL() << "no message with checksum 0 found";
}

TEST(IpoibNd, RouterMessages) {
    // RS from a configured address with its source option.
    NdMessage m = parsed(make_packet({.src = kIpA, .dst = kIpv6AllRouters, .icmp = rs_message(ipoib_option(1, kHwA))}));
    EXPECT_EQ(m.type, NdType::router_solicitation);
    EXPECT_EQ(m.source_lla, kHwA);
    // RS from :: without one.
    m = parsed(make_packet({.src = kIpv6Unspecified, .dst = kIpv6AllRouters, .icmp = rs_message()}));
    EXPECT_FALSE(m.source_lla.has_value());
    // RA: prefix, source option and MTU options in any order.
    m = parsed(make_packet({.src = kIpB, .dst = kIpv6AllNodes,
                            .icmp = ra_message([] {
                                Bytes o = prefix_option();
                                append(o, ipoib_option(1, kHwB));
                                append(o, mtu_option());
                                return o;
                            }())}));
    EXPECT_EQ(m.type, NdType::router_advertisement);
    EXPECT_EQ(m.source_lla, kHwB);
    EXPECT_EQ(m.icmp_length, 16u + 32 + 24 + 8);
    // Redirect to a better first hop, with its target option and a
    // Redirected Header option (type 4).
    const Bytes redirected_header = {4, 2, 0, 0, 0, 0, 0, 0, 0x60, 0, 0, 0, 0, 0, 0, 0};
    m = parsed(make_packet({.src = kIpB, .dst = kIpA,
                            .icmp = redirect_message(v6("fe80::1"), v6("2001:db8::99"), [&] {
                                Bytes o = ipoib_option(2, kHwA);
                                append(o, redirected_header);
                                return o;
                            }())}));
    EXPECT_EQ(m.type, NdType::redirect);
    EXPECT_EQ(m.target, v6("fe80::1"));
    EXPECT_EQ(m.destination, v6("2001:db8::99"));
    EXPECT_EQ(m.target_lla, kHwA);
    // Redirect to the destination itself (on-link).
    m = parsed(make_packet({.src = kIpB, .dst = kIpA, .icmp = redirect_message(v6("2001:db8::99"), v6("2001:db8::99"))}));
    EXPECT_FALSE(m.target_lla.has_value());
}

TEST(IpoibNd, OptionsOfOtherTypesSkipped) {
    // "The contents of any defined options that are not specified to be used
    // with [this message] MUST be ignored": a target option (even an
    // Ethernet-sized one) in an NS, a source option in an NA, unknown types.
    NdMessage m = parsed(make_packet({.dst = v6("ff02::1:ff57:e7fd"), .icmp = ns_message(kIpB, [] {
                                          Bytes o = ethernet_option(2);
                                          append(o, ipoib_option(1, kHwA));
                                          append(o, Bytes{200, 1, 1, 2, 3, 4, 5, 6});
                                          return o;
                                      }())}));
    EXPECT_EQ(m.source_lla, kHwA);
    EXPECT_FALSE(m.target_lla.has_value());
    m = parsed(make_packet({.src = kIpB, .dst = kIpA, .icmp = na_message(0x60, kIpB, ethernet_option(1))}));
    EXPECT_FALSE(m.source_lla.has_value());
    EXPECT_FALSE(m.target_lla.has_value());
}

TEST(IpoibNd, ReceivedFlagsAndPadIgnored) {
    // A connected-mode peer's flags survive; non-zero pad octets (which the
    // RFC says MUST be zero) do not stop the option being read.
    HwAddress cm = kHwA;
    cm.flags = 0x80;
    Bytes opt = ipoib_option(1, cm);
    opt[2] = 0xAA;
    const NdMessage m = parsed(make_packet({.dst = v6("ff02::1:ff57:e7fd"), .icmp = ns_message(kIpB, opt)}));
    EXPECT_EQ(m.source_lla, cm);
}

TEST(IpoibNd, ExtensionHeadersSkipped) {
    const Bytes hbh = {60, 0, 1, 4, 0, 0, 0, 0};            // Hop-by-Hop -> Destination Options, PadN
    const Bytes dst_opts = {58, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // 16 bytes -> ICMPv6
    Bytes ext = hbh;
    append(ext, dst_opts);
    const NdMessage m = parsed(make_packet({.dst = v6("ff02::1:ff57:e7fd"), .icmp = ns_message(kIpB, ipoib_option(1, kHwA)),
                                            .ext = ext, .next_header = kNextHeaderHopByHop}));
    EXPECT_EQ(m.icmp_offset, 40u + 8 + 16);
    EXPECT_EQ(m.icmp_length, 48u);
    EXPECT_EQ(m.source_lla, kHwA);
}

TEST(IpoibNd, TrailingBytesIgnored) {
    Bytes p = from_hex(kNsHex);
    p.insert(p.end(), 8, 0xEE);
    EXPECT_EQ(parsed(p).icmp_length, 48u);
}

// ---------------------------------------------------------------------------
struct RejectCase {
    std::string name;
    Bytes packet;
    NdError want;
};

std::vector<RejectCase> rejection_cases() {
    const Ipv6Address sn_b = v6("ff02::1:ff57:e7fd");
    const Bytes good_ns = ns_message(kIpB, ipoib_option(1, kHwA));
    auto ns_with = [&](const Bytes& options) { return make_packet({.dst = sn_b, .icmp = ns_message(kIpB, options)}); };
    auto dest_opts = [](std::uint8_t next) { return Bytes{next, 0, 1, 4, 0, 0, 0, 0}; };
    std::vector<RejectCase> c;

    Bytes p = from_hex(kNsHex);
    c.push_back({"39 bytes", Bytes(p.begin(), p.begin() + 39), NdError::truncated_ipv6_header});
    p[0] = 0x45;
    c.push_back({"IPv4 version", p, NdError::bad_ip_version});
    p = from_hex(kNsHex);
    p[4] = p[5] = 0;
    c.push_back({"jumbogram payload length 0", p, NdError::bad_payload_length});
    p = from_hex(kNsHex);
    p.pop_back();
    c.push_back({"payload length past the end", p, NdError::bad_payload_length});

    c.push_back({"extension header cut",
                 make_packet({.icmp = {}, .ext = {58}, .next_header = kNextHeaderDestinationOptions}),
                 NdError::truncated_extension_header});
    c.push_back({"extension header longer than payload",
                 make_packet({.icmp = {}, .ext = {58, 1, 1, 4, 0, 0, 0, 0}, .next_header = kNextHeaderDestinationOptions}),
                 NdError::truncated_extension_header});
    c.push_back({"fragment header",
                 make_packet({.icmp = good_ns, .ext = {58, 0, 0, 1, 0, 0, 0, 1}, .next_header = kNextHeaderFragment}),
                 NdError::fragmented});
    c.push_back({"routing header",
                 make_packet({.icmp = good_ns, .ext = {58, 0, 0, 0, 0, 0, 0, 0}, .next_header = kNextHeaderRouting}),
                 NdError::unsupported_extension_header});
    c.push_back({"AH", make_packet({.icmp = good_ns, .ext = dest_opts(58), .next_header = 51}),
                 NdError::unsupported_extension_header});
    c.push_back({"Hop-by-Hop not first",
                 make_packet({.icmp = good_ns, .ext = [&] { Bytes e = dest_opts(0); append(e, dest_opts(58)); return e; }(),
                              .next_header = kNextHeaderDestinationOptions}),
                 NdError::unsupported_extension_header});
    {
        Bytes nine;
        for (int i = 0; i < 9; ++i) append(nine, dest_opts(i == 8 ? 58 : 60));
        c.push_back({"nine extension headers",
                     make_packet({.dst = sn_b, .icmp = good_ns, .ext = nine, .next_header = kNextHeaderDestinationOptions}),
                     NdError::too_many_extension_headers});
    }
    c.push_back({"UDP", make_packet({.icmp = good_ns, .next_header = 17}), NdError::not_icmpv6});
    c.push_back({"No Next Header", make_packet({.icmp = good_ns, .next_header = 59}), NdError::not_icmpv6});
    c.push_back({"UDP after Destination Options",
                 make_packet({.icmp = good_ns, .ext = dest_opts(17), .next_header = kNextHeaderDestinationOptions}),
                 NdError::not_icmpv6});
    c.push_back({"echo request", make_packet({.icmp = {128, 0, 0, 0, 0, 1, 0, 1}}), NdError::not_nd});
    c.push_back({"MLD report", make_packet({.icmp = {143, 0, 0, 0, 0, 0, 0, 0}}), NdError::not_nd});
    c.push_back({"router renumbering (138)", make_packet({.icmp = {138, 0, 0, 0, 0, 0, 0, 0}}), NdError::not_nd});
    c.push_back({"empty ICMPv6", make_packet({.icmp = {}, .ext = dest_opts(58), .next_header = kNextHeaderDestinationOptions}),
                 NdError::truncated_message});
    c.push_back({"NS of 20 bytes", make_packet({.icmp = Bytes(good_ns.begin(), good_ns.begin() + 20)}),
                 NdError::truncated_message});
    {
        Bytes r = redirect_message(kIpB, kIpB);
        r.pop_back();
        c.push_back({"Redirect of 39 bytes", make_packet({.src = kIpB, .dst = kIpA, .icmp = r}),
                     NdError::truncated_message});
    }

    p = from_hex(kNsHex);
    p.back() ^= 1;
    c.push_back({"corrupted", p, NdError::bad_checksum});
    p = from_hex(kNsHex);
    p[9] ^= 1;  // source address: covered through the pseudo-header
    c.push_back({"corrupted source", p, NdError::bad_checksum});
    p = from_hex(kNsHex);
    p[7] = 64;  // not covered by the checksum
    c.push_back({"hop limit 64", p, NdError::bad_hop_limit});
    {
        Bytes icmp = good_ns;
        icmp[1] = 1;
        c.push_back({"code 1", make_packet({.dst = sn_b, .icmp = icmp}), NdError::bad_code});
    }

    c.push_back({"option length 0", ns_with({1, 0, 0, 0, 0, 0, 0, 0}), NdError::bad_option_length});
    c.push_back({"unknown option of length 0", ns_with({99, 0, 0, 0, 0, 0, 0, 0}), NdError::bad_option_length});
    c.push_back({"option past the end", ns_with({3, 4, 0, 0, 0, 0, 0, 0}), NdError::bad_option_length});
    c.push_back({"one stray octet", ns_with({1}), NdError::bad_option_length});
    c.push_back({"Ethernet source option", ns_with(ethernet_option(1)), NdError::wrong_link_layer_option_length});
    {
        Bytes four = ipoib_option(1, kHwA);
        four[1] = 4;
        four.resize(32);
        c.push_back({"source option of length 4", ns_with(four), NdError::wrong_link_layer_option_length});
        Bytes two = ipoib_option(1, kHwA);
        append(two, ipoib_option(1, kHwB));
        c.push_back({"two source options", ns_with(two), NdError::duplicate_link_layer_option});
        c.push_back({"NA with an Ethernet target option",
                     make_packet({.src = kIpB, .dst = kIpA, .icmp = na_message(0x60, kIpB, ethernet_option(2))}),
                     NdError::wrong_link_layer_option_length});
    }

    c.push_back({"DAD with a source option",
                 make_packet({.src = kIpv6Unspecified, .dst = sn_b, .icmp = good_ns}),
                 NdError::link_layer_option_not_allowed});
    c.push_back({"RS from :: with a source option",
                 make_packet({.src = kIpv6Unspecified, .dst = kIpv6AllRouters, .icmp = rs_message(ipoib_option(1, kHwA))}),
                 NdError::link_layer_option_not_allowed});
    c.push_back({"DAD to all nodes", make_packet({.src = kIpv6Unspecified, .dst = kIpv6AllNodes, .icmp = ns_message(kIpB)}),
                 NdError::dad_not_to_solicited_node});
    c.push_back({"NS for a multicast target", make_packet({.dst = sn_b, .icmp = ns_message(kIpv6AllNodes)}),
                 NdError::multicast_target});
    c.push_back({"NA for a multicast target",
                 make_packet({.src = kIpB, .dst = kIpA, .icmp = na_message(0x60, v6("ff02::2"))}),
                 NdError::multicast_target});
    c.push_back({"Redirect for a multicast destination",
                 make_packet({.src = kIpB, .dst = kIpA, .icmp = redirect_message(v6("fe80::1"), v6("ff0e::1"))}),
                 NdError::multicast_target});
    c.push_back({"solicited NA to all nodes",
                 make_packet({.src = kIpB, .dst = kIpv6AllNodes, .icmp = na_message(0x60, kIpB)}),
                 NdError::solicited_to_multicast});
    c.push_back({"RA from a global address",
                 make_packet({.src = v6("2001:db8::1"), .dst = kIpv6AllNodes, .icmp = ra_message()}),
                 NdError::source_not_link_local});
    c.push_back({"Redirect from a global address",
                 make_packet({.src = v6("2001:db8::1"), .dst = kIpA, .icmp = redirect_message(v6("fe80::1"), v6("2001:db8::99"))}),
                 NdError::source_not_link_local});
    c.push_back({"Redirect to a global router",
                 make_packet({.src = kIpB, .dst = kIpA, .icmp = redirect_message(v6("2001:db8::1"), v6("2001:db8::99"))}),
                 NdError::bad_redirect_target});
    return c;
}

TEST(IpoibNd, RejectionReasons) {
    std::set<NdError> seen;
    for (const auto& c : rejection_cases()) {
        SCOPED_TRACE(c.name);
        const auto m = parse_nd(c.packet);
        ASSERT_FALSE(m.has_value());
        EXPECT_EQ(m.error(), c.want) << "got " << to_string(m.error());
        seen.insert(c.want);
    }
    // Every parse reason is exercised (the rest belong to build/rewrite).
    for (std::size_t i = 0; i < kNdErrorCount; ++i) {
        const auto e = static_cast<NdError>(i);
        if (e == NdError::short_buffer || e == NdError::field_out_of_range || e == NdError::too_long) continue;
        EXPECT_TRUE(seen.count(e)) << "no case for " << to_string(e);
    }
}

// ---------------------------------------------------------------------------
Bytes rewrite(const Bytes& in, const std::optional<HwAddress>& hw) {
    Bytes out(in.size() + 64, 0xEE);
    const auto n = rewrite_link_layer_option(in, hw, out);
    EXPECT_TRUE(n.has_value()) << to_string(n.error());
    out.resize(n ? *n : 0);
    return out;
}

TEST(IpoibNd, RewriteEthernetOptionToIpoib) {
    // What the kernel behind a TAP device sends: an Ethernet source option.
    const Bytes tap_ns = make_packet({.dst = v6("ff02::1:ff57:e7fd"), .icmp = ns_message(kIpB, ethernet_option(1))});
    EXPECT_EQ(parse_nd(tap_ns).error(), NdError::wrong_link_layer_option_length);
    EXPECT_EQ(to_hex(rewrite(tap_ns, kHwA)), to_hex(from_hex(kNsHex)));

    const Bytes tap_na = make_packet({.src = kIpB, .dst = kIpA, .icmp = na_message(0x60, kIpB, ethernet_option(2))});
    EXPECT_EQ(to_hex(rewrite(tap_na, kHwB)), to_hex(from_hex(kNaHex)));
}

TEST(IpoibNd, RewriteKeepsPositionAndOtherOptions) {
    Bytes opts = prefix_option();
    append(opts, ethernet_option(1));
    append(opts, mtu_option());
    const Bytes ra = make_packet({.src = kIpB, .dst = kIpv6AllNodes, .icmp = ra_message(opts)});
    const Bytes out = rewrite(ra, kHwB);
    Bytes want_opts = prefix_option();
    append(want_opts, ipoib_option(1, kHwB));
    append(want_opts, mtu_option());
    EXPECT_EQ(to_hex(out), to_hex(make_packet({.src = kIpB, .dst = kIpv6AllNodes, .icmp = ra_message(want_opts)})));
    EXPECT_EQ(parsed(out).source_lla, kHwB);
}

TEST(IpoibNd, RewriteInsertsRemovesAndDeduplicates) {
    const Ipv6Address sn_b = v6("ff02::1:ff57:e7fd");
    // None there: appended after the last option.
    const Bytes bare = make_packet({.dst = sn_b, .icmp = ns_message(kIpB, mtu_option())});
    Bytes want = mtu_option();
    append(want, ipoib_option(1, kHwA));
    EXPECT_EQ(to_hex(rewrite(bare, kHwA)), to_hex(make_packet({.dst = sn_b, .icmp = ns_message(kIpB, want)})));
    // Removed when no address is given.
    EXPECT_EQ(to_hex(rewrite(from_hex(kNsHex), std::nullopt)), to_hex(make_packet({.dst = sn_b, .icmp = ns_message(kIpB)})));
    // Two of them (any sizes): one IPoIB option where the first was.
    Bytes two = ethernet_option(1);
    append(two, ipoib_option(1, kHwB));
    EXPECT_EQ(to_hex(rewrite(make_packet({.dst = sn_b, .icmp = ns_message(kIpB, two)}), kHwA)), to_hex(from_hex(kNsHex)));
    // Options of the other kind are left alone.
    const Bytes with_target = make_packet({.dst = sn_b, .icmp = ns_message(kIpB, ethernet_option(2))});
    Bytes kept = ethernet_option(2);
    append(kept, ipoib_option(1, kHwA));
    EXPECT_EQ(to_hex(rewrite(with_target, kHwA)), to_hex(make_packet({.dst = sn_b, .icmp = ns_message(kIpB, kept)})));
}

TEST(IpoibNd, RewriteKeepsExtensionHeadersDropsTrailer) {
    const Bytes hbh = {58, 0, 1, 4, 0, 0, 0, 0};
    const Ipv6Address sn_b = v6("ff02::1:ff57:e7fd");
    Bytes in = make_packet({.dst = sn_b, .icmp = ns_message(kIpB, ethernet_option(1)), .ext = hbh,
                            .next_header = kNextHeaderHopByHop});
    in.insert(in.end(), 5, 0xEE);
    const Bytes out = rewrite(in, kHwA);
    EXPECT_EQ(to_hex(out), to_hex(make_packet({.dst = sn_b, .icmp = ns_message(kIpB, ipoib_option(1, kHwA)), .ext = hbh,
                                               .next_header = kNextHeaderHopByHop})));
    EXPECT_EQ(parsed(out).icmp_offset, 48u);
}

TEST(IpoibNd, RewriteIsIdempotent) {
    for (const char* hex : {kNsHex, kNaHex, kUnsolicitedNaHex}) {
        const Bytes once = rewrite(from_hex(hex), kHwB);
        EXPECT_EQ(to_hex(rewrite(once, kHwB)), to_hex(once));
    }
    // DAD without an address: copied unchanged.
    EXPECT_EQ(to_hex(rewrite(from_hex(kDadHex), std::nullopt)), to_hex(from_hex(kDadHex)));
}

TEST(IpoibNd, RewriteErrors) {
    Bytes out(256);
    EXPECT_EQ(rewrite_link_layer_option(from_hex(kDadHex), kHwA, out).error(), NdError::link_layer_option_not_allowed);
    Bytes bad = from_hex(kNsHex);
    bad.back() ^= 1;
    EXPECT_EQ(rewrite_link_layer_option(bad, kHwA, out).error(), NdError::bad_checksum);
    const Bytes echo = make_packet({.icmp = {128, 0, 0, 0, 0, 1, 0, 1}});
    EXPECT_EQ(rewrite_link_layer_option(echo, kHwA, out).error(), NdError::not_nd);
    Bytes code = ns_message(kIpB);
    code[1] = 3;
    EXPECT_EQ(rewrite_link_layer_option(make_packet({.dst = v6("ff02::1:ff57:e7fd"), .icmp = code}), kHwA, out).error(),
              NdError::bad_code);
    EXPECT_EQ(rewrite_link_layer_option(make_packet({.icmp = ns_message(kIpB, {1, 0})}), kHwA, out).error(),
              NdError::bad_option_length);
    Bytes small(from_hex(kNsHex).size() - 1);
    EXPECT_EQ(rewrite_link_layer_option(from_hex(kNsHex), kHwA, small).error(), NdError::short_buffer);
    HwAddress wide = kHwA;
    wide.qpn = 0x1000000;
    EXPECT_EQ(rewrite_link_layer_option(from_hex(kNsHex), wide, out).error(), NdError::field_out_of_range);

    // A message whose payload cannot grow by 24 bytes.
    Bytes options;
    for (int i = 0; i < 32; ++i) {
        Bytes o(2040, 0);
        o[0] = 200;
        o[1] = 255;
        append(options, o);
    }
    Bytes last(65504 - options.size(), 0);
    last[0] = 200;
    last[1] = static_cast<std::uint8_t>(last.size() / 8);
    append(options, last);
    const Bytes huge = make_packet({.dst = v6("ff02::1:ff57:e7fd"), .icmp = ns_message(kIpB, options)});
    ASSERT_EQ(huge.size(), 40u + 65528);
    ASSERT_TRUE(parse_nd(huge).has_value());
    Bytes big_out(huge.size() + 64);
    EXPECT_EQ(rewrite_link_layer_option(huge, kHwA, big_out).error(), NdError::too_long);
    EXPECT_TRUE(rewrite_link_layer_option(huge, std::nullopt, big_out).has_value());
}

TEST(IpoibNd, BuilderErrors) {
    Bytes out(kNsNaPacketMaxSize);
    NeighborSolicitation dad = make_dad_solicitation(kIpA);
    dad.source_lla = kHwA;
    EXPECT_EQ(build_neighbor_solicitation(dad, out).error(), NdError::link_layer_option_not_allowed);
    dad = make_dad_solicitation(kIpA);
    dad.destination = kIpv6AllNodes;
    EXPECT_EQ(build_neighbor_solicitation(dad, out).error(), NdError::dad_not_to_solicited_node);
    EXPECT_EQ(build_neighbor_solicitation(make_resolution_solicitation(kIpA, kHwA, kIpv6AllNodes), out).error(),
              NdError::multicast_target);
    NeighborAdvertisement na = make_unsolicited_advertisement(kIpA, kHwA, false);
    na.solicited = true;
    EXPECT_EQ(build_neighbor_advertisement(na, out).error(), NdError::solicited_to_multicast);
    na = make_unsolicited_advertisement(kIpv6AllNodes, kHwA, false);
    EXPECT_EQ(build_neighbor_advertisement(na, out).error(), NdError::multicast_target);

    Bytes small(kNsNaPacketMaxSize - 1);
    EXPECT_EQ(build_neighbor_solicitation(make_resolution_solicitation(kIpA, kHwA, kIpB), small).error(),
              NdError::short_buffer);
    EXPECT_EQ(build_neighbor_advertisement(make_unsolicited_advertisement(kIpA, kHwA, false), small).error(),
              NdError::short_buffer);
    Bytes dad_size(64);
    EXPECT_TRUE(build_neighbor_solicitation(make_dad_solicitation(kIpA), dad_size).has_value());

    HwAddress wide = kHwA;
    wide.qpn = 0x1000000;
    EXPECT_EQ(build_neighbor_solicitation(make_resolution_solicitation(kIpA, wide, kIpB), out).error(),
              NdError::field_out_of_range);
    EXPECT_EQ(build_neighbor_advertisement(make_unsolicited_advertisement(kIpA, wide, false), out).error(),
              NdError::field_out_of_range);
}

TEST(IpoibNd, BuildParseRoundTrip) {
    const Ipv6Address global = v6("2001:db8::a");
    for (bool router : {false, true}) {
        for (bool override_flag : {false, true}) {
            for (bool with_lla : {false, true}) {
                NeighborAdvertisement na{.source = global, .destination = kIpB, .target = global, .router = router,
                                         .solicited = true, .override_flag = override_flag,
                                         .target_lla = with_lla ? std::optional<HwAddress>(kHwA) : std::nullopt};
                const NdMessage m = parsed(build(na));
                EXPECT_EQ(m.router, router);
                EXPECT_TRUE(m.solicited);
                EXPECT_EQ(m.override_flag, override_flag);
                EXPECT_EQ(m.target_lla, na.target_lla);
                EXPECT_EQ(m.ip.source, global);
            }
        }
    }
}

TEST(IpoibNd, Ipv6HeaderFields) {
    const Bytes wire = from_hex("6a bc de f1 01 02 3a 40"
                                "fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
                                "ff 02 00 00 00 00 00 00 00 00 00 00 00 00 00 01");
    const Ipv6Header h = Ipv6Header::read_from(wire.data());
    EXPECT_EQ(h.version, 6);
    EXPECT_EQ(h.traffic_class, 0xAB);
    EXPECT_EQ(h.flow_label, 0xCDEF1u);
    EXPECT_EQ(h.payload_length, 0x0102);
    EXPECT_EQ(h.next_header, 58);
    EXPECT_EQ(h.hop_limit, 64);
    Bytes out(40);
    h.write_to(out.data());
    EXPECT_EQ(out, wire);
}

TEST(IpoibNd, NamesAndSizes) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < kNdErrorCount; ++i) {
        const std::string n = to_string(static_cast<NdError>(i));
        EXPECT_NE(n, "unknown");
        names.insert(n);
    }
    EXPECT_EQ(names.size(), kNdErrorCount);
    EXPECT_EQ(nd_fixed_size(NdType::router_solicitation), 8u);
    EXPECT_EQ(nd_fixed_size(NdType::router_advertisement), 16u);
    EXPECT_EQ(nd_fixed_size(NdType::neighbor_solicitation), 24u);
    EXPECT_EQ(nd_fixed_size(NdType::neighbor_advertisement), 24u);
    EXPECT_EQ(nd_fixed_size(NdType::redirect), 40u);
    EXPECT_STREQ(to_string(NdType::redirect), "redirect");
}

}  // namespace
}  // namespace ipoibd::ipoib
