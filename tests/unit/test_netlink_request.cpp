// rtnetlink request builders, with no kernel: each request is read back
// with libmnl's own parser and checked field by field against what
// iproute2 would send for the same command. A request is also fed to our
// reply parser where the kernel's notification has the same layout.
#include <gtest/gtest.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include "netlink/rtnl_reply.h"
#include "netlink/rtnl_request.h"
#include "test_netlink_util.h"

namespace ipoibd::netlink {
namespace {

using test::ip;
using test::octets;
using test::parse_request;
using test::prefix;

constexpr int kRequestAck = NLM_F_REQUEST | NLM_F_ACK;
constexpr int kCreate = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;

TEST(NetlinkRequest, SetMtuIsNewlinkWithIflaMtu) {
    Request r = build_set_mtu(7, 2044);
    auto p = parse_request(r.bytes, sizeof(ifinfomsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.header.nlmsg_type, RTM_NEWLINK);
    EXPECT_EQ(p.header.nlmsg_flags, kRequestAck);  // no NLM_F_CREATE: change an existing link
    EXPECT_EQ(p.header.nlmsg_seq, 0u);
    auto ifi = p.fixed_as<ifinfomsg>();
    EXPECT_EQ(ifi.ifi_family, AF_UNSPEC);
    EXPECT_EQ(ifi.ifi_index, 7);
    EXPECT_EQ(ifi.ifi_change, 0u);
    EXPECT_EQ(p.u32(IFLA_MTU), 2044u);
    EXPECT_EQ(p.attributes.size(), 1u);
    EXPECT_EQ(r.operation, "RTM_NEWLINK mtu 2044");
    EXPECT_EQ(r.ifindex, 7u);
    EXPECT_FALSE(r.dump);
}

TEST(NetlinkRequest, LinkUpAndDownChangeOnlyIffUp) {
    for (bool up : {true, false}) {
        Request r = build_set_link_up(9, up);
        auto p = parse_request(r.bytes, sizeof(ifinfomsg));
        ASSERT_TRUE(p.well_formed);
        EXPECT_EQ(p.header.nlmsg_type, RTM_NEWLINK);
        auto ifi = p.fixed_as<ifinfomsg>();
        EXPECT_EQ(ifi.ifi_index, 9);
        EXPECT_EQ(ifi.ifi_change, static_cast<unsigned>(IFF_UP));
        EXPECT_EQ(ifi.ifi_flags, up ? static_cast<unsigned>(IFF_UP) : 0u);
        EXPECT_TRUE(p.attributes.empty());
        EXPECT_EQ(r.operation, up ? "RTM_NEWLINK up" : "RTM_NEWLINK down");
    }
}

TEST(NetlinkRequest, GetLinkNamesTheIndex) {
    Request r = build_get_link(3);
    auto p = parse_request(r.bytes, sizeof(ifinfomsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.header.nlmsg_type, RTM_GETLINK);
    EXPECT_EQ(p.header.nlmsg_flags, kRequestAck);
    EXPECT_EQ(p.fixed_as<ifinfomsg>().ifi_index, 3);
}

TEST(NetlinkRequest, AddIpv4AddressCarriesLocalAndAddress) {
    Request r = build_address_change(Change::add, 5, prefix("198.18.0.1/24"));
    auto p = parse_request(r.bytes, sizeof(ifaddrmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.header.nlmsg_type, RTM_NEWADDR);
    EXPECT_EQ(p.header.nlmsg_flags, kCreate);
    auto ifa = p.fixed_as<ifaddrmsg>();
    EXPECT_EQ(ifa.ifa_family, AF_INET);
    EXPECT_EQ(ifa.ifa_prefixlen, 24);
    EXPECT_EQ(ifa.ifa_index, 5u);
    EXPECT_EQ(ifa.ifa_flags, 0);
    EXPECT_EQ(p.octets(IFA_LOCAL), (std::vector<std::uint8_t>{198, 18, 0, 1}));
    EXPECT_EQ(p.octets(IFA_ADDRESS), (std::vector<std::uint8_t>{198, 18, 0, 1}));
    EXPECT_FALSE(p.has(IFA_FLAGS));
    EXPECT_EQ(r.operation, "RTM_NEWADDR 198.18.0.1/24");
    EXPECT_EQ(r.ifindex, 5u);
}

TEST(NetlinkRequest, AddIpv6AddressWithNodad) {
    Request r = build_address_change(Change::add, 5, prefix("2001:db8:5::1/64"), AddressOptions{.nodad = true});
    auto p = parse_request(r.bytes, sizeof(ifaddrmsg));
    ASSERT_TRUE(p.well_formed);
    auto ifa = p.fixed_as<ifaddrmsg>();
    EXPECT_EQ(ifa.ifa_family, AF_INET6);
    EXPECT_EQ(ifa.ifa_prefixlen, 64);
    EXPECT_EQ(ifa.ifa_flags, IFA_F_NODAD);
    EXPECT_EQ(p.u32(IFA_FLAGS), static_cast<std::uint32_t>(IFA_F_NODAD));
    EXPECT_EQ(p.octets(IFA_ADDRESS), octets(ip("2001:db8:5::1")));
}

TEST(NetlinkRequest, NodadIsIgnoredForIpv4AndRemoval) {
    auto v4 = parse_request(build_address_change(Change::add, 5, prefix("198.18.0.1/24"), {.nodad = true}).bytes,
                            sizeof(ifaddrmsg));
    EXPECT_FALSE(v4.has(IFA_FLAGS));
    Request del = build_address_change(Change::remove, 5, prefix("2001:db8:5::1/64"), {.nodad = true});
    auto p = parse_request(del.bytes, sizeof(ifaddrmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.header.nlmsg_type, RTM_DELADDR);
    EXPECT_EQ(p.header.nlmsg_flags, kRequestAck);
    EXPECT_FALSE(p.has(IFA_FLAGS));
    EXPECT_EQ(del.operation, "RTM_DELADDR 2001:db8:5::1/64");
}

TEST(NetlinkRequest, AddressDumpIsFilteredByIndexAndFamily) {
    Request r = build_address_dump(4, IpFamily::ipv6);
    auto p = parse_request(r.bytes, sizeof(ifaddrmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.header.nlmsg_type, RTM_GETADDR);
    EXPECT_EQ(p.header.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
    EXPECT_EQ(p.fixed_as<ifaddrmsg>().ifa_family, AF_INET6);
    EXPECT_EQ(p.fixed_as<ifaddrmsg>().ifa_index, 4u);
    EXPECT_TRUE(r.dump);
    EXPECT_EQ(parse_request(build_address_dump(4).bytes, sizeof(ifaddrmsg)).fixed_as<ifaddrmsg>().ifa_family,
              AF_UNSPEC);
}

TEST(NetlinkRequest, RouteViaGatewayOnDevice) {
    RouteSpec spec{.destination = prefix("198.19.5.0/24"), .gateway = ip("198.18.5.2"), .oif = 6};
    Request r = build_route_change(Change::add, spec);
    auto p = parse_request(r.bytes, sizeof(rtmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.header.nlmsg_type, RTM_NEWROUTE);
    EXPECT_EQ(p.header.nlmsg_flags, kCreate);
    auto rtm = p.fixed_as<rtmsg>();
    EXPECT_EQ(rtm.rtm_family, AF_INET);
    EXPECT_EQ(rtm.rtm_dst_len, 24);
    EXPECT_EQ(rtm.rtm_table, RT_TABLE_MAIN);
    EXPECT_EQ(rtm.rtm_protocol, RTPROT_STATIC);
    EXPECT_EQ(rtm.rtm_type, RTN_UNICAST);
    EXPECT_EQ(rtm.rtm_scope, RT_SCOPE_UNIVERSE);
    EXPECT_EQ(p.octets(RTA_DST), (std::vector<std::uint8_t>{198, 19, 5, 0}));
    EXPECT_EQ(p.octets(RTA_GATEWAY), (std::vector<std::uint8_t>{198, 18, 5, 2}));
    EXPECT_EQ(p.u32(RTA_OIF), 6u);
    EXPECT_EQ(p.u32(RTA_TABLE), static_cast<std::uint32_t>(RT_TABLE_MAIN));
    EXPECT_FALSE(p.has(RTA_PRIORITY));
    EXPECT_EQ(r.operation, "RTM_NEWROUTE 198.19.5.0/24 via 198.18.5.2");
    EXPECT_EQ(r.ifindex, 6u);
}

TEST(NetlinkRequest, OnLinkIpv4RouteHasLinkScopeAndNoGateway) {
    Request r = build_route_change(Change::add, {.destination = prefix("198.18.7.0/24"), .oif = 6, .metric = 100});
    auto p = parse_request(r.bytes, sizeof(rtmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.fixed_as<rtmsg>().rtm_scope, RT_SCOPE_LINK);
    EXPECT_FALSE(p.has(RTA_GATEWAY));
    EXPECT_EQ(p.u32(RTA_PRIORITY), 100u);
}

TEST(NetlinkRequest, Ipv6RouteAndDefaultRoute) {
    Request r = build_route_change(Change::add, {.destination = prefix("::/0"), .gateway = ip("2001:db8:5::2")});
    auto p = parse_request(r.bytes, sizeof(rtmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.fixed_as<rtmsg>().rtm_family, AF_INET6);
    EXPECT_EQ(p.fixed_as<rtmsg>().rtm_dst_len, 0);
    EXPECT_EQ(p.fixed_as<rtmsg>().rtm_scope, RT_SCOPE_UNIVERSE);
    EXPECT_FALSE(p.has(RTA_DST));  // the default route names no destination
    EXPECT_FALSE(p.has(RTA_OIF));
    EXPECT_EQ(p.octets(RTA_GATEWAY), octets(ip("2001:db8:5::2")));
}

TEST(NetlinkRequest, Ipv4RouteViaIpv6GatewayUsesRtaVia) {
    Request r = build_route_change(Change::add, {.destination = prefix("198.19.0.0/16"), .gateway = ip("2001:db8::2")});
    auto p = parse_request(r.bytes, sizeof(rtmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_FALSE(p.has(RTA_GATEWAY));
    auto via = p.octets(RTA_VIA);
    ASSERT_EQ(via.size(), 18u);
    std::uint16_t family = 0;
    std::memcpy(&family, via.data(), 2);
    EXPECT_EQ(family, AF_INET6);
    EXPECT_EQ(std::vector<std::uint8_t>(via.begin() + 2, via.end()), octets(ip("2001:db8::2")));
}

TEST(NetlinkRequest, DeleteRouteMatchesAnyScopeAndType) {
    Request r = build_route_change(Change::remove, {.destination = prefix("198.19.5.0/24"), .gateway = ip("198.18.5.2")});
    auto p = parse_request(r.bytes, sizeof(rtmsg));
    ASSERT_TRUE(p.well_formed);
    EXPECT_EQ(p.header.nlmsg_type, RTM_DELROUTE);
    EXPECT_EQ(p.header.nlmsg_flags, kRequestAck);
    EXPECT_EQ(p.fixed_as<rtmsg>().rtm_scope, RT_SCOPE_NOWHERE);
    EXPECT_EQ(p.fixed_as<rtmsg>().rtm_type, RTN_UNSPEC);
    EXPECT_EQ(r.ifindex, 0u);
}

TEST(NetlinkRequest, LargeTableNumberGoesInRtaTable) {
    auto p = parse_request(build_route_change(Change::add, {.destination = prefix("198.19.0.0/16"), .table = 1000}).bytes,
                           sizeof(rtmsg));
    EXPECT_EQ(p.fixed_as<rtmsg>().rtm_table, RT_TABLE_UNSPEC);
    EXPECT_EQ(p.u32(RTA_TABLE), 1000u);
}

TEST(NetlinkRequest, RouteGetAsksForOneHost) {
    for (const char* text : {"198.19.5.7", "2001:db8:6::7"}) {
        const IpAddress dst = ip(text);
        Request r = build_route_get(dst);
        auto p = parse_request(r.bytes, sizeof(rtmsg));
        ASSERT_TRUE(p.well_formed);
        EXPECT_EQ(p.header.nlmsg_type, RTM_GETROUTE);
        EXPECT_EQ(p.header.nlmsg_flags, kRequestAck);
        auto rtm = p.fixed_as<rtmsg>();
        EXPECT_EQ(rtm.rtm_family, address_family(dst.family));
        EXPECT_EQ(rtm.rtm_dst_len, max_prefix_length(dst.family));
        // NETLINK_GET_STRICT_CHK refuses a lookup with any of these set.
        EXPECT_EQ(rtm.rtm_table, 0);
        EXPECT_EQ(rtm.rtm_protocol, 0);
        EXPECT_EQ(rtm.rtm_scope, 0);
        EXPECT_EQ(rtm.rtm_type, 0);
        EXPECT_EQ(p.octets(RTA_DST), octets(dst));
        EXPECT_EQ(p.attributes.size(), 1u);
        EXPECT_EQ(r.operation, std::string("RTM_GETROUTE ") + text);
    }
}

TEST(NetlinkRequest, SetSequenceStampsTheHeader) {
    Request r = build_set_mtu(1, 1500);
    set_sequence(r.bytes, 0x01020304);
    EXPECT_EQ(parse_request(r.bytes, sizeof(ifinfomsg)).header.nlmsg_seq, 0x01020304u);
}

// The kernel's address and route notifications have the layout of our
// requests, so our parser reads our own requests back: a round trip.
TEST(NetlinkRequest, AddressRequestRoundTripsThroughTheParser) {
    for (const char* text : {"198.18.0.1/24", "2001:db8:5::1/64"}) {
        Request r = build_address_change(Change::add, 12, prefix(text), {.nodad = true});
        auto parsed = parse_address_message(r.bytes);
        ASSERT_TRUE(parsed) << parsed.error();
        EXPECT_EQ(parsed->ifindex, 12u);
        EXPECT_EQ(parsed->prefix, prefix(text));
    }
}

TEST(NetlinkRequest, RouteRequestRoundTripsThroughTheParser) {
    RouteSpec spec{.destination = prefix("2001:db8:6::/64"), .gateway = ip("2001:db8:5::2"), .oif = 3, .metric = 7};
    auto parsed = parse_route_message(build_route_change(Change::add, spec).bytes);
    ASSERT_TRUE(parsed) << parsed.error();
    EXPECT_EQ(parsed->family, IpFamily::ipv6);
    EXPECT_EQ(parsed->destination, spec.destination);
    EXPECT_EQ(parsed->gateway, spec.gateway);
    EXPECT_EQ(parsed->oif, 3u);
    EXPECT_EQ(parsed->priority, 7u);
    EXPECT_EQ(parsed->table, kMainTable);
    EXPECT_EQ(parsed->protocol, kProtocolStatic);

    RouteSpec via{.destination = prefix("198.19.0.0/16"), .gateway = ip("2001:db8::2")};
    auto parsed_via = parse_route_message(build_route_change(Change::add, via).bytes);
    ASSERT_TRUE(parsed_via) << parsed_via.error();
    EXPECT_EQ(parsed_via->gateway, via.gateway);
}

TEST(NetlinkIpPrefix, ParsesAndFormats) {
    EXPECT_EQ(to_string(prefix("198.18.0.1/24")), "198.18.0.1/24");
    EXPECT_EQ(to_string(prefix("2001:db8:0:0::1/64")), "2001:db8::1/64");
    EXPECT_EQ(prefix("198.18.0.1").length, 32);
    EXPECT_EQ(prefix("2001:db8::1").length, 128);
    for (const char* bad : {"", "198.18.0.1/33", "2001:db8::1/129", "198.18.0.1/", "198.18.0.1/2x", "ib0", "1.2.3/8"})
        EXPECT_FALSE(parse_ip_prefix(bad)) << bad;
    EXPECT_EQ(ip("198.18.0.1"), IpAddress::v4({198, 18, 0, 1}));
    // Same octets, other family: different keys.
    EXPECT_NE((IpAddress{.family = IpFamily::ipv6, .bytes = ip("198.18.0.1").bytes}), ip("198.18.0.1"));
}

}  // namespace
}  // namespace ipoibd::netlink
