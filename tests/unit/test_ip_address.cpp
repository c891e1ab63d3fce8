// The project's one IP address type (common/ip_address.h): the group-address
// rule every layer uses, parsing and text, ordering across families.
#include <gtest/gtest.h>

#include <unordered_set>

#include "common/ip_address.h"

namespace ipoibd {
namespace {

IpAddress ip(std::string_view text) {
    auto a = parse_ip_address(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a.value_or(IpAddress{});
}

struct GroupCase {
    const char* name;
    const char* address;
    bool multicast;
};

TEST(IpAddress, IsMulticastIsClassDAndFf00Only) {
    const GroupCase cases[] = {
        {"lowest class D", "224.0.0.0", true},
        {"all hosts", "224.0.0.1", true},
        {"highest class D", "239.255.255.255", true},
        {"class E is not a group", "240.0.0.1", false},
        {"limited broadcast is not a group", "255.255.255.255", false},
        {"just below class D", "223.255.255.255", false},
        {"a test-network host", "198.18.0.1", false},
        {"IPv6 all nodes", "ff02::1", true},
        {"IPv6 global scope group", "ff0e::101", true},
        {"IPv6 documentation unicast", "2001:db8::1", false},
        {"IPv6 link-local unicast", "fe80::1", false},
        {"IPv4-mapped group is IPv6 unicast", "::ffff:224.0.0.1", false},
    };
    for (const auto& c : cases) EXPECT_EQ(is_multicast(ip(c.address)), c.multicast) << c.name;
}

TEST(IpAddress, V4SitsInTheFirstFourOctets) {
    const IpAddress a = IpAddress::v4({198, 18, 0, 1});
    EXPECT_TRUE(a.is_v4());
    EXPECT_EQ(a.size(), 4u);
    EXPECT_EQ(a.v4_bytes(), (Ipv4Address{198, 18, 0, 1}));
    for (std::size_t i = 4; i < a.bytes.size(); ++i) EXPECT_EQ(a.bytes[i], 0) << i;
    EXPECT_EQ(a, ip("198.18.0.1"));
    EXPECT_EQ(IpAddress::from_bytes(IpFamily::ipv4, a.data()), a);
}

TEST(IpAddress, FamiliesNeverCollide) {
    // 0.0.0.0 and :: have the same bytes; the family keeps them apart.
    const IpAddress v4 = IpAddress::v4({});
    const IpAddress v6 = IpAddress::v6({});
    EXPECT_NE(v4, v6);
    EXPECT_LT(v4, v6);
    std::unordered_set<IpAddress, IpAddressHash> set{v4, v6};
    EXPECT_EQ(set.size(), 2u);
}

TEST(IpAddress, TextRoundTrips) {
    for (const char* text : {"198.18.0.1", "0.0.0.0", "2001:db8::1", "fe80::202:c903:a:b", "::"})
        EXPECT_EQ(to_string(ip(text)), text);
    EXPECT_FALSE(parse_ip_address("198.18.0"));
    EXPECT_FALSE(parse_ip_address("2001:db8::1::2"));
    EXPECT_FALSE(parse_ip_address(""));
}

TEST(IpAddress, PrefixesParseAndPrint) {
    auto p = parse_ip_prefix("198.18.0.1/24");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->length, 24);
    EXPECT_EQ(to_string(*p), "198.18.0.1/24");
    EXPECT_EQ(parse_ip_prefix("2001:db8::1")->length, 128);  // a bare address is a host prefix
    EXPECT_FALSE(parse_ip_prefix("198.18.0.1/33"));
    EXPECT_FALSE(parse_ip_prefix("198.18.0.1/"));
    EXPECT_FALSE(parse_ip_prefix("198.18.0.1/2x"));
}

TEST(IpAddress, NetworkOfClearsHostBits) {
    EXPECT_EQ(network_of(ip("198.18.3.77"), 16), ip("198.18.0.0"));
    EXPECT_EQ(network_of(ip("198.18.3.77"), 20), ip("198.18.0.0"));
    EXPECT_EQ(network_of(ip("198.18.31.77"), 20), ip("198.18.16.0"));
    EXPECT_EQ(network_of(ip("2001:db8:1:2::9"), 48), ip("2001:db8:1::"));
    EXPECT_EQ(network_of(ip("198.18.3.77"), 32), ip("198.18.3.77"));
    EXPECT_EQ(network_of(ip("198.18.3.77"), 0), ip("0.0.0.0"));
}

TEST(IpAddress, SpecialRanges) {
    EXPECT_TRUE(is_loopback(ip("127.0.0.1")));
    EXPECT_TRUE(is_loopback(ip("::1")));
    EXPECT_FALSE(is_loopback(ip("198.18.0.1")));
    EXPECT_TRUE(is_unspecified(ip("0.0.0.0")));
    EXPECT_TRUE(is_unspecified(ip("::")));
    EXPECT_TRUE(is_link_local(ip("fe80::1")));
    EXPECT_TRUE(is_link_local(ip("febf::1")));
    EXPECT_FALSE(is_link_local(ip("fec0::1")));
    EXPECT_FALSE(is_link_local(ip("169.254.0.1")));  // IPv6's rule only: RFC 4391 8 forms fe80::
}

}  // namespace
}  // namespace ipoibd
