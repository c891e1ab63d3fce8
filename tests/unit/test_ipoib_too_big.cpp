// too_big.h: ICMP Fragmentation Needed / Packet Too Big and IPv4
// fragmentation, for connected mode's datagrams that UD cannot carry.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "common/inet_checksum.h"
#include "ipoib/ip_packet.h"
#include "ipoib/nd.h"
#include "ipoib/too_big.h"
#include "tests/unit/engine_harness.h"

namespace ipoibd::ipoib {
namespace {

using test::icmp_echo_v4;
using test::icmp_echo_v6;
using test::udp_v4;
using Packet = std::vector<std::uint8_t>;

Packet set_flags(Packet p, std::uint16_t flags_offset) {
    store_be16(p.data() + 6, flags_offset);
    store_be16(p.data() + 10, 0);
    store_be16(p.data() + 10, internet_checksum(bytes(p.data(), static_cast<std::size_t>(p[0] & 0x0F) * 4)));
    return p;
}
Packet df(Packet p) { return set_flags(std::move(p), 0x4000); }

TEST(TooBig, Ipv4WithDfGetsFragmentationNeededFromTheDestination) {
    const Packet p = df(icmp_echo_v4("198.18.0.1", "198.18.0.3", 7, 60000));
    std::vector<std::uint8_t> out;
    const auto n = build_too_big(p, 2044, out);
    ASSERT_TRUE(n);
    ASSERT_EQ(*n, 576u);  // RFC 1812 4.3.2.3: as much as fits in 576
    EXPECT_EQ(out[0], 0x45);
    EXPECT_EQ(load_be16(out.data() + 2), 576);
    EXPECT_EQ(out[9], 1);  // ICMP
    EXPECT_EQ(internet_checksum(bytes(out.data(), 20)), 0);  // header checksum verifies
    EXPECT_TRUE(std::equal(out.begin() + 12, out.begin() + 16, p.begin() + 16));  // source: the old destination
    EXPECT_TRUE(std::equal(out.begin() + 16, out.begin() + 20, p.begin() + 12));  // destination: the old source
    EXPECT_EQ(out[20], 3);  // destination unreachable
    EXPECT_EQ(out[21], 4);  // fragmentation needed
    EXPECT_EQ(load_be16(out.data() + 26), 2044);  // next-hop MTU (RFC 1191)
    EXPECT_EQ(internet_checksum(bytes(out.data() + 20, out.size() - 20)), 0);
    EXPECT_TRUE(std::equal(out.begin() + 28, out.end(), p.begin()));  // the quote
}

TEST(TooBig, Ipv6GetsPacketTooBigOfAtMost1280Bytes) {
    const Packet p = icmp_echo_v6("2001:db8::1", "2001:db8::3", 9, 30000);
    std::vector<std::uint8_t> out;
    const auto n = build_too_big(p, 4092, out);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 1280u);  // RFC 4443 2.4 (c)
    EXPECT_EQ(out[0] >> 4, 6);
    EXPECT_EQ(load_be16(out.data() + 4), 1280 - 40);
    EXPECT_EQ(out[6], kNextHeaderIcmpv6);
    EXPECT_EQ(out[40], 2);  // packet too big
    EXPECT_EQ(out[41], 0);
    EXPECT_EQ(load_be32(out.data() + 44), 4092u);
    Ipv6Address src{}, dst{};
    std::copy_n(out.begin() + 8, 16, src.begin());
    std::copy_n(out.begin() + 24, 16, dst.begin());
    EXPECT_TRUE(std::equal(src.begin(), src.end(), p.begin() + 24));
    EXPECT_TRUE(std::equal(dst.begin(), dst.end(), p.begin() + 8));
    const bytes icmp(out.data() + 40, out.size() - 40);
    EXPECT_EQ(icmpv6_checksum(src, dst, icmp), load_be16(out.data() + 42));
    EXPECT_TRUE(std::equal(out.begin() + 48, out.end(), p.begin()));
}

TEST(TooBig, ShortDatagramsAreQuotedWhole) {
    const Packet p = df(icmp_echo_v4("198.18.0.1", "198.18.0.3", 1, 100));
    std::vector<std::uint8_t> out;
    ASSERT_EQ(build_too_big(p, 68, out), 28u + p.size());
}

struct Unanswerable {
    const char* name;
    Packet packet;
};

TEST(TooBig, WhatMustNotBeAnsweredIsNot) {
    Packet icmp_error = df(icmp_echo_v4("198.18.0.1", "198.18.0.3", 1, 3000));
    icmp_error[20] = 3;  // itself a destination unreachable
    Packet later_fragment = set_flags(icmp_echo_v4("198.18.0.1", "198.18.0.3", 1, 3000), 0x4000 | 185);
    Packet v6_error = icmp_echo_v6("2001:db8::1", "2001:db8::3", 1, 3000);
    v6_error[40] = 1;  // ICMPv6 destination unreachable
    const Unanswerable cases[] = {
        {"an ICMP error", icmp_error},
        {"a fragment after the first", later_fragment},
        {"an unspecified source", df(icmp_echo_v4("0.0.0.0", "198.18.0.3", 1, 3000))},
        {"a multicast destination", df(udp_v4("198.18.0.1", "239.1.2.3", 3000))},
        {"an ICMPv6 error", v6_error},
        {"an unspecified IPv6 source", icmp_echo_v6("::", "2001:db8::3", 1, 3000)},
        {"not IP", Packet(100, 0x11)},
        {"empty", Packet{}},
    };
    for (const Unanswerable& c : cases) {
        std::vector<std::uint8_t> out;
        EXPECT_FALSE(build_too_big(c.packet, 2044, out)) << c.name;
    }
}

// Reassembles fragments by offset; checks each one's header.
Packet reassemble(const std::vector<Packet>& fragments, const Packet& original, std::uint32_t mtu) {
    std::map<std::size_t, Packet> data;
    bool saw_last = false;
    for (const Packet& f : fragments) {
        EXPECT_LE(f.size(), mtu);
        const std::size_t ihl = static_cast<std::size_t>(f[0] & 0x0F) * 4;
        EXPECT_EQ(internet_checksum(bytes(f.data(), ihl)), 0);
        EXPECT_EQ(load_be16(f.data() + 2), f.size());
        EXPECT_TRUE(std::equal(f.begin() + 12, f.begin() + 20, original.begin() + 12));  // addresses
        EXPECT_EQ(load_be16(f.data() + 4), load_be16(original.data() + 4));             // Identification
        const std::uint16_t fo = load_be16(f.data() + 6);
        const bool more = fo & 0x2000;
        if (more) {
            EXPECT_EQ((f.size() - ihl) % 8, 0u);
        } else {
            saw_last = true;
        }
        data[static_cast<std::size_t>(fo & 0x1FFF) * 8] = Packet(f.begin() + static_cast<std::ptrdiff_t>(ihl), f.end());
    }
    EXPECT_TRUE(saw_last);
    Packet out(original.begin(), original.begin() + 20);
    for (const auto& [offset, d] : data) {
        EXPECT_EQ(offset, out.size() - 20);
        out.insert(out.end(), d.begin(), d.end());
    }
    return out;
}

TEST(TooBig, Ipv4WithoutDfIsFragmentedAndReassemblesToTheOriginal) {
    const Packet p = icmp_echo_v4("198.18.0.1", "198.18.0.3", 3, 9000);
    ASSERT_TRUE(may_fragment_v4(p));
    std::vector<Packet> fragments;
    EXPECT_EQ(fragment_v4(p, 2044, [&](bytes f) { fragments.emplace_back(f.begin(), f.end()); }), 5u);
    const Packet whole = reassemble(fragments, p, 2044);
    EXPECT_TRUE(std::equal(whole.begin() + 20, whole.end(), p.begin() + 20, p.end()));
    EXPECT_EQ(whole.size(), p.size());
}

TEST(TooBig, OptionsWithTheCopiedFlagGoInEveryFragmentOthersInTheFirstOnly) {
    Packet body = icmp_echo_v4("198.18.0.1", "198.18.0.3", 3, 3000);
    // IHL 7: a Security-like option with the copied flag (0x82, length 4)
    // and a Record Route (0x07, length 3) + end of list.
    Packet p(body.begin(), body.begin() + 20);
    const std::uint8_t options[8] = {0x82, 4, 0xAA, 0xBB, 0x07, 3, 4, 0};
    p.insert(p.end(), options, options + 8);
    p.insert(p.end(), body.begin() + 20, body.end());
    p[0] = 0x47;
    store_be16(p.data() + 2, static_cast<std::uint16_t>(p.size()));
    p = set_flags(p, 0);
    std::vector<Packet> fragments;
    ASSERT_EQ(fragment_v4(p, 1500, [&](bytes f) { fragments.emplace_back(f.begin(), f.end()); }), 3u);
    EXPECT_EQ(fragments[0][0], 0x47);
    EXPECT_TRUE(std::equal(options, options + 8, fragments[0].begin() + 20));
    for (std::size_t i = 1; i < fragments.size(); ++i) {
        EXPECT_EQ(fragments[i][0], 0x46) << i;  // the copied option alone, padded to 4
        EXPECT_TRUE(std::equal(options, options + 4, fragments[i].begin() + 20)) << i;
    }
    std::size_t data = 0;
    for (const Packet& f : fragments) data += f.size() - static_cast<std::size_t>(f[0] & 0x0F) * 4;
    EXPECT_EQ(data, p.size() - 28);
}

TEST(TooBig, AFragmentIsCutAgainKeepingItsOffsetAndMoreFragments) {
    // The middle of a bigger datagram: offset 1000 * 8, MF set.
    const Packet p = set_flags(icmp_echo_v4("198.18.0.1", "198.18.0.3", 3, 3000), 0x2000 | 1000);
    std::vector<Packet> fragments;
    ASSERT_EQ(fragment_v4(p, 1500, [&](bytes f) { fragments.emplace_back(f.begin(), f.end()); }), 3u);
    EXPECT_EQ(load_be16(fragments[0].data() + 6), 0x2000 | 1000);
    for (const Packet& f : fragments) EXPECT_TRUE(load_be16(f.data() + 6) & 0x2000);  // the last keeps MF
}

TEST(TooBig, FragmentationRefusesWhatItCannotCut) {
    EXPECT_EQ(fragment_v4(df(icmp_echo_v4("198.18.0.1", "198.18.0.3", 1, 3000)), 1500, [](bytes) {}), 0u);
    EXPECT_EQ(fragment_v4(icmp_echo_v6("2001:db8::1", "2001:db8::3", 1, 3000), 1500, [](bytes) {}), 0u);
    EXPECT_EQ(fragment_v4(icmp_echo_v4("198.18.0.1", "198.18.0.3", 1, 3000), 24, [](bytes) {}), 0u);
    Packet bad_options = icmp_echo_v4("198.18.0.1", "198.18.0.3", 1, 3000);
    Packet p(bad_options.begin(), bad_options.begin() + 20);
    const std::uint8_t options[4] = {0x82, 9, 0, 0};  // runs past the header
    p.insert(p.end(), options, options + 4);
    p.insert(p.end(), bad_options.begin() + 20, bad_options.end());
    p[0] = 0x46;
    store_be16(p.data() + 2, static_cast<std::uint16_t>(p.size()));
    EXPECT_EQ(fragment_v4(set_flags(p, 0), 1500, [](bytes) {}), 0u);
    // A fragment near the end of the offset space: its pieces' offsets
    // would spill into the flags (found by fuzz_ipoib).
    EXPECT_EQ(fragment_v4(set_flags(icmp_echo_v4("198.18.0.1", "198.18.0.3", 1, 3000), 0x1F00), 1500, [](bytes) {}),
              0u);
}

}  // namespace
}  // namespace ipoibd::ipoib
