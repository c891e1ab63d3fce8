// The 20-byte IPoIB link address, IP group -> MGID mapping and its reverse,
// the link-local interface identifier and the interface MTU.
//
// Known answers come from RFC 4391's own example (section 4: P_Key 0x8000,
// group 2 -> FF12:401B:8000::2 and FF12:601B:8000::2) and from what Linux
// hosts print: `ip link show ib0` on a ConnectX host gave
//   link/infiniband 80:00:00:48:fe:80:00:00:00:00:00:00:00:1e:67:03:00:29:47:6f
//   brd 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff
//   inet6 fe80::21e:6703:29:476f/64 scope link
// and an `ifconfig ib0` elsewhere showed inet6 fe80::202:c903:57:e7fd for
// port GUID 0x0002c9030057e7fd.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ipoib/hw_address.h"
#include "ipoib/link.h"
#include "ipoib/mgid.h"
#include "wire_test_util.h"

namespace ipoibd::ipoib {
namespace {

using test::from_hex;
using test::to_hex;

ib::Gid gid(const char* text) {
    const auto g = parse_ipv6(text);  // GIDs are written like IPv6 addresses
    EXPECT_TRUE(g.has_value()) << text;
    return g.value_or(ib::Gid{});
}
Ipv4Address v4(const char* text) {
    const auto a = parse_ipv4(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a.value_or(Ipv4Address{});
}
Ipv6Address v6(const char* text) { return gid(text); }

// ---------------------------------------------------------------------------
// Hardware address
constexpr const char* kLinuxHost = "80:00:00:48:fe:80:00:00:00:00:00:00:00:1e:67:03:00:29:47:6f";
constexpr const char* kLinuxBroadcast = "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff";

TEST(IpoibHwAddress, LinuxHostAddress) {
    const auto a = parse_hw_address(kLinuxHost);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->flags, HwAddress::kFlagConnectedRc);  // connected mode on
    EXPECT_EQ(a->qpn, 0x48u);
    EXPECT_EQ(a->gid, gid("fe80::1e:6703:29:476f"));
    EXPECT_FALSE(a->is_multicast());
    EXPECT_EQ(format_hw_address(*a), kLinuxHost);
}

TEST(IpoibHwAddress, LinuxBroadcastAddress) {
    const HwAddress brd = multicast_address(broadcast_mgid(0xFFFF));
    EXPECT_EQ(format_hw_address(brd), kLinuxBroadcast);
    EXPECT_TRUE(brd.is_multicast());
    EXPECT_EQ(brd.qpn, ib::kQpnMulticast);
    EXPECT_EQ(parse_hw_address(kLinuxBroadcast), brd);
}

TEST(IpoibHwAddress, ParsesUpperCase) {
    // An ifcfg-ib0 HWADDR line.
    const auto a = parse_hw_address("80:00:02:08:FE:80:00:00:00:00:00:00:7C:FE:90:03:00:99:2F:51");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->qpn, 0x208u);
    EXPECT_EQ(a->gid, gid("fe80::7cfe:9003:99:2f51"));
    EXPECT_EQ(format_hw_address(*a), "80:00:02:08:fe:80:00:00:00:00:00:00:7c:fe:90:03:00:99:2f:51");
}

TEST(IpoibHwAddress, ParseRejects) {
    const char* bad[] = {
        "",
        "80:00:00:48:fe:80:00:00:00:00:00:00:00:1e:67:03:00:29:47",        // 19 octets
        "80:00:00:48:fe:80:00:00:00:00:00:00:00:1e:67:03:00:29:47:6f:00",  // 21 octets
        "80-00-00-48-fe-80-00-00-00-00-00-00-00-1e-67-03-00-29-47-6f",     // wrong separator
        "80:00:00:48:fe:80:00:00:00:00:00:00:00:1e:67:03:00:29:47:6g",     // not hex
        "8:000:00:48:fe:80:00:00:00:00:00:00:00:1e:67:03:00:29:47:6f",     // misplaced colon
        "80:00:00:48:fe:80:00:00:00:00:00:00:00:1e:67:03:00:29:47:6f ",    // trailing space
        "52:54:00:12:34:56",                                               // Ethernet
    };
    for (const char* text : bad) EXPECT_FALSE(parse_hw_address(text).has_value()) << text;
}

TEST(IpoibHwAddress, WireBytes) {
    const HwAddress a{.flags = 0, .qpn = 0xABCDEF, .gid = gid("fe80::2:c903:57:e7fd")};
    const auto want = from_hex("00 ab cd ef fe 80 00 00 00 00 00 00 00 02 c9 03 00 57 e7 fd");
    std::vector<std::uint8_t> out(HwAddress::size + 2, 0xEE);
    const auto n = ib::encode(a, out);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, HwAddress::size);
    out.resize(HwAddress::size);
    EXPECT_EQ(to_hex(out), to_hex(want));

    const auto back = ib::decode<HwAddress>(want);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, a);

    std::vector<std::uint8_t> small(HwAddress::size - 1);
    EXPECT_EQ(ib::encode(a, small).error(), ib::CodecError::short_buffer);
    EXPECT_EQ(ib::decode<HwAddress>(bytes(want).first(HwAddress::size - 1)).error(), ib::CodecError::short_buffer);
    HwAddress wide = a;
    wide.qpn = 0x1000000;
    EXPECT_EQ(ib::encode(wide, out).error(), ib::CodecError::field_out_of_range);
}

TEST(IpoibHwAddress, FlagsKeptButNotIdentity) {
    // "ignored on receive": the flags survive decode (so bytes re-encode the
    // same) but a peer toggling connected mode is the same endpoint.
    const auto a = *parse_hw_address(kLinuxHost);
    HwAddress b = a;
    b.flags = 0;
    EXPECT_NE(a, b);
    EXPECT_TRUE(a.same_endpoint(b));
    b.qpn = 0x49;
    EXPECT_FALSE(a.same_endpoint(b));
    b = a;
    b.gid[15] ^= 1;
    EXPECT_FALSE(a.same_endpoint(b));
}

// ---------------------------------------------------------------------------
// MGIDs
TEST(IpoibMgid, Rfc4391Example) {
    // Section 4: all-routers group 2 on a link with P_Key 0x8000.
    EXPECT_EQ(*ipv4_group_mgid(v4("224.0.0.2"), 0x8000), gid("ff12:401b:8000::2"));
    EXPECT_EQ(*ipv6_group_mgid(v6("ff02::2"), 0x8000), gid("ff12:601b:8000::2"));
}

TEST(IpoibMgid, BroadcastGid) {
    EXPECT_EQ(broadcast_mgid(0xFFFF), gid("ff12:401b:ffff::ffff:ffff"));
    // A limited member's interface names the full-member group, as Linux does.
    EXPECT_EQ(broadcast_mgid(0x7FFF), gid("ff12:401b:ffff::ffff:ffff"));
    EXPECT_EQ(broadcast_mgid(0x0001, Scope::site_local), gid("ff15:401b:8001::ffff:ffff"));
    EXPECT_EQ(broadcast_mgid(0x8002, Scope::global), gid("ff1e:401b:8002::ffff:ffff"));
    // 255.255.255.255 "SHALL be mapped to the broadcast-GID", not to ::fff:ffff.
    EXPECT_EQ(*ipv4_group_mgid(kIpv4LimitedBroadcast, 0xFFFF), broadcast_mgid(0xFFFF));
}

TEST(IpoibMgid, GroupTable) {
    const struct {
        const char* group;
        std::uint16_t pkey;
        Scope scope;
        const char* mgid;
    } cases[] = {
        {"224.0.0.1", 0xFFFF, Scope::link_local, "ff12:401b:ffff::1"},
        {"239.255.255.250", 0xFFFF, Scope::link_local, "ff12:401b:ffff::fff:fffa"},  // top 4 bits dropped
        {"232.1.2.3", 0x0001, Scope::global, "ff1e:401b:8001::801:203"},
        {"ff02::1", 0xFFFF, Scope::link_local, "ff12:601b:ffff::1"},
        {"ff02::1:ff29:476f", 0xFFFF, Scope::link_local, "ff12:601b:ffff::1:ff29:476f"},  // solicited-node
        {"ff05::1:3", 0xFFFF, Scope::site_local, "ff15:601b:ffff::1:3"},  // the link's scope, not the group's
        {"ff0e:1234:5678:9abc:def0:1122:3344:5566", 0x8123, Scope::link_local,
         "ff12:601b:8123:9abc:def0:1122:3344:5566"},  // low 80 bits
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.group);
        const auto v4addr = parse_ipv4(c.group);
        const auto m = v4addr ? ipv4_group_mgid(*v4addr, c.pkey, c.scope)
                              : ipv6_group_mgid(v6(c.group), c.pkey, c.scope);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(format_ipv6(*m), format_ipv6(gid(c.mgid)));
    }
}

TEST(IpoibMgid, NotMulticast) {
    for (const char* a : {"198.18.0.1", "0.0.0.0", "223.255.255.255", "240.0.0.1"}) {
        const auto m = ipv4_group_mgid(v4(a), 0xFFFF);
        ASSERT_FALSE(m.has_value()) << a;
        EXPECT_EQ(m.error(), MgidError::not_multicast);
    }
    for (const char* a : {"fe80::1", "2001:db8::1", "::", "feff::1"}) {
        const auto m = ipv6_group_mgid(v6(a), 0xFFFF);
        ASSERT_FALSE(m.has_value()) << a;
        EXPECT_EQ(m.error(), MgidError::not_multicast);
    }
    EXPECT_STREQ(to_string(MgidError::not_multicast), "not_multicast");
}

TEST(IpoibMgid, ReverseKnown) {
    auto m = parse_ipoib_mgid(gid("ff12:401b:ffff::ffff:ffff"));
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->family, MgidFamily::ipv4);
    EXPECT_EQ(m->scope, 0x2);
    EXPECT_EQ(m->pkey, 0xFFFF);
    EXPECT_TRUE(m->broadcast);
    EXPECT_EQ(m->ipv4_group(), kIpv4LimitedBroadcast);

    m = parse_ipoib_mgid(gid("ff15:401b:8001::fff:fffa"));
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->scope, 0x5);
    EXPECT_EQ(m->pkey, 0x8001);
    EXPECT_FALSE(m->broadcast);
    EXPECT_EQ(m->ipv4_group(), v4("239.255.255.250"));

    m = parse_ipoib_mgid(gid("ff12:601b:ffff::1:ff29:476f"));
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->family, MgidFamily::ipv6);
    EXPECT_FALSE(m->broadcast);
    EXPECT_FALSE(m->ipv4_group().has_value());
    EXPECT_EQ(to_hex({m->group_id.begin(), m->group_id.end()}), to_hex(from_hex("00 00 00 00 00 01 ff 29 47 6f")));
}

TEST(IpoibMgid, ReverseRejects) {
    const char* not_ipoib[] = {
        "fe80::1e:6703:29:476f",             // a unicast GID
        "ff12:401c:ffff::1",                 // wrong signature
        "ff12:a01b:ffff::1",                 // wrong signature
        "ff02:401b:ffff::1",                 // T flag clear
        "ff32:401b:ffff::1",                 // other flags set
        "ff12:401b:ffff:1::1",               // IPv4 group ID with bits above 32
        "ff12:401b:ffff::1000:1",            // IPv4 group ID with bits above 28
        "ff12:401b:ffff::ffff:fffe",         // neither a 28-bit group nor broadcast
        "fe12:401b:ffff::1",                 // not multicast
    };
    for (const char* g : not_ipoib) EXPECT_FALSE(parse_ipoib_mgid(gid(g)).has_value()) << g;
    // IPv6 MGIDs take any 80 bits.
    EXPECT_TRUE(parse_ipoib_mgid(gid("ff12:601b:ffff:ffff:ffff:ffff:ffff:ffff")).has_value());
}

TEST(IpoibMgid, RoundTrip) {
    for (std::uint32_t i = 0; i < 4096; ++i) {
        const std::uint32_t x = i * 2654435761u;  // spread over the space
        const Ipv4Address g4{static_cast<std::uint8_t>(0xE0 | (x >> 28)), static_cast<std::uint8_t>(x >> 16),
                             static_cast<std::uint8_t>(x >> 8), static_cast<std::uint8_t>(x)};
        const auto pkey = static_cast<std::uint16_t>(x >> 7);
        const Scope scope = (i % 2) ? Scope::link_local : Scope::organization_local;
        const auto m4 = parse_ipoib_mgid(*ipv4_group_mgid(g4, pkey, scope));
        ASSERT_TRUE(m4.has_value());
        EXPECT_EQ(m4->ipv4_group(), g4);
        EXPECT_EQ(m4->pkey, pkey | 0x8000);
        EXPECT_EQ(m4->scope, static_cast<std::uint8_t>(scope));

        Ipv6Address g6{};
        g6[0] = 0xFF;
        for (std::size_t b = 1; b < 16; ++b) g6[b] = static_cast<std::uint8_t>(x >> (b % 4 * 8));
        const auto m6 = parse_ipoib_mgid(*ipv6_group_mgid(g6, pkey, scope));
        ASSERT_TRUE(m6.has_value());
        EXPECT_EQ(m6->family, MgidFamily::ipv6);
        EXPECT_TRUE(std::equal(m6->group_id.begin(), m6->group_id.end(), g6.begin() + 6));
    }
}

TEST(IpoibMgid, ScopeFromNibble) {
    EXPECT_EQ(scope_from_nibble(0x2), Scope::link_local);
    EXPECT_EQ(scope_from_nibble(0x5), Scope::site_local);
    EXPECT_EQ(scope_from_nibble(0x8), Scope::organization_local);
    EXPECT_EQ(scope_from_nibble(0xE), Scope::global);
    for (int n : {0x0, 0x1, 0x3, 0x4, 0xF, 0x12})
        EXPECT_FALSE(scope_from_nibble(static_cast<std::uint8_t>(n)).has_value()) << n;
}

// ---------------------------------------------------------------------------
// Link parameters
TEST(IpoibLink, InterfaceIdentifierLikeLinux) {
    const struct {
        std::uint64_t guid;
        const char* link_local;
    } cases[] = {
        {0x001e67030029476fULL, "fe80::21e:6703:29:476f"},  // ip addr on the host above
        {0x0002c9030057e7fdULL, "fe80::202:c903:57:e7fd"},  // the ifconfig output above
        // The u bit already set: taken as already modified, left alone.
        {0x0202c9030057e7fdULL, "fe80::202:c903:57:e7fd"},
        {0xfffffffffffffffeULL, "fe80::ffff:ffff:ffff:fffe"},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(format_ipv6(link_local_address(c.guid)), c.link_local);
        EXPECT_TRUE(is_ipv6_link_local(link_local_address(c.guid)));
    }
    const InterfaceIdentifier iid = interface_identifier(0x001e67030029476fULL);
    EXPECT_EQ(to_hex({iid.begin(), iid.end()}), to_hex(from_hex("02 1e 67 03 00 29 47 6f")));
    static_assert(interface_identifier(0)[0] == 0x02);
}

TEST(IpoibLink, InterfaceMtu) {
    EXPECT_EQ(interface_mtu(ib::Mtu::mtu256), 252u);
    EXPECT_EQ(interface_mtu(ib::Mtu::mtu512), 508u);
    EXPECT_EQ(interface_mtu(ib::Mtu::mtu1024), 1020u);
    EXPECT_EQ(interface_mtu(ib::Mtu::mtu2048), 2044u);  // the MUST of RFC 4391 7
    EXPECT_EQ(interface_mtu(ib::Mtu::mtu4096), 4092u);

    EXPECT_EQ(clamp_interface_mtu(0, ib::Mtu::mtu2048), 2044u);
    EXPECT_EQ(clamp_interface_mtu(1500, ib::Mtu::mtu2048), 1500u);
    EXPECT_EQ(clamp_interface_mtu(2044, ib::Mtu::mtu2048), 2044u);
    EXPECT_EQ(clamp_interface_mtu(2045, ib::Mtu::mtu2048), 2044u);
    EXPECT_EQ(clamp_interface_mtu(65520, ib::Mtu::mtu4096), 4092u);  // connected-mode MTU: not here

    EXPECT_FALSE(mtu_carries_ipv6(interface_mtu(ib::Mtu::mtu1024)));
    EXPECT_TRUE(mtu_carries_ipv6(interface_mtu(ib::Mtu::mtu2048)));
    EXPECT_TRUE(mtu_carries_ipv6(1280));
}

TEST(IpoibIpAddress, Helpers) {
    EXPECT_EQ(solicited_node_multicast(v6("fe80::21e:6703:29:476f")), v6("ff02::1:ff29:476f"));
    EXPECT_TRUE(is_solicited_node_multicast(v6("ff02::1:ff00:1")));
    EXPECT_FALSE(is_solicited_node_multicast(v6("ff02::1")));
    EXPECT_TRUE(is_ipv6_link_local(v6("febf::1")));
    EXPECT_FALSE(is_ipv6_link_local(v6("fec0::1")));
    EXPECT_TRUE(is_ipv4_multicast(v4("224.0.0.0")));
    EXPECT_TRUE(is_ipv4_multicast(v4("239.255.255.255")));
    EXPECT_FALSE(is_ipv4_multicast(v4("240.0.0.0")));
    EXPECT_EQ(format_ipv4(v4("198.18.0.1")), "198.18.0.1");
    EXPECT_FALSE(parse_ipv4("198.18.0").has_value());
    EXPECT_FALSE(parse_ipv6("fe80:::1").has_value());
}

}  // namespace
}  // namespace ipoibd::ipoib
