// IP inspection and the host's IGMP/MLD reports (ip_packet.h).
#include <gtest/gtest.h>

#include "engine_harness.h"
#include "ipoib/ip_packet.h"

namespace ipoibd::ipoib::test {
namespace {

TEST(IpPacket, InspectsIpv4AndIpv6) {
    const Packet v4 = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    auto i4 = inspect_ip_packet(v4);
    ASSERT_TRUE(i4);
    EXPECT_EQ(i4->family, IpFamily::ipv4);
    EXPECT_EQ(i4->source, ip("198.18.0.1"));
    EXPECT_EQ(i4->destination, ip("198.18.0.2"));
    EXPECT_EQ(i4->protocol, 1);
    EXPECT_EQ(i4->upper_offset, 20u);
    EXPECT_EQ(i4->length, v4.size());

    Packet padded = v4;
    padded.resize(v4.size() + 10);  // bytes past Total Length are ignored
    EXPECT_EQ(inspect_ip_packet(padded)->length, v4.size());

    const Packet mld = mldv2_report("2001:db8::1", "ff05::2", true);
    auto i6 = inspect_ip_packet(mld);
    ASSERT_TRUE(i6);
    EXPECT_EQ(i6->family, IpFamily::ipv6);
    EXPECT_EQ(i6->protocol, kNextHeaderIcmpv6);  // past the Hop-by-Hop header
    EXPECT_EQ(i6->upper_offset, 48u);
}

struct BadCase {
    const char* name;
    Packet packet;
    IpPacketError error;
};

TEST(IpPacket, RefusesMalformedPacketsWithAReason) {
    Packet v4 = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    Packet ihl = v4;
    ihl[0] = 0x44;
    Packet total = v4;
    store_be16(total.data() + 2, static_cast<std::uint16_t>(v4.size() + 1));
    Packet v6 = icmp_echo_v6("2001:db8::1", "2001:db8::2", 1);
    Packet plen = v6;
    store_be16(plen.data() + 4, static_cast<std::uint16_t>(v6.size()));
    Packet ext = mldv2_report("2001:db8::1", "ff05::2", true);
    ext[41] = 200;  // Hop-by-Hop length past the packet
    const BadCase cases[] = {
        {"empty", {}, IpPacketError::empty},
        {"version 5", {0x50, 0, 0, 0}, IpPacketError::bad_version},
        {"short v4", Packet(v4.begin(), v4.begin() + 19), IpPacketError::truncated_header},
        {"ihl 4", ihl, IpPacketError::bad_header_length},
        {"total length", total, IpPacketError::bad_total_length},
        {"short v6", Packet(v6.begin(), v6.begin() + 39), IpPacketError::truncated_header},
        {"payload length", plen, IpPacketError::bad_total_length},
        {"extension", ext, IpPacketError::truncated_extension},
    };
    for (const auto& c : cases) {
        auto r = inspect_ip_packet(c.packet);
        ASSERT_FALSE(r) << c.name;
        EXPECT_EQ(r.error(), c.error) << c.name << ": " << to_string(r.error());
    }
}

TEST(IpPacket, ReadsIgmpAndMldReports) {
    auto changes = [](const Packet& p) { return host_group_changes(p, *inspect_ip_packet(p)); };
    EXPECT_EQ(changes(igmpv3_report("198.18.0.1", "239.1.2.3", true)),
              (std::vector<GroupChange>{{ip("239.1.2.3"), true}}));
    EXPECT_EQ(changes(igmpv3_report("198.18.0.1", "239.1.2.3", false)),
              (std::vector<GroupChange>{{ip("239.1.2.3"), false}}));
    EXPECT_EQ(changes(mldv2_report("2001:db8::1", "ff05::1:3", true)),
              (std::vector<GroupChange>{{ip("ff05::1:3"), true}}));
    EXPECT_EQ(changes(mldv2_report("2001:db8::1", "ff05::1:3", false)),
              (std::vector<GroupChange>{{ip("ff05::1:3"), false}}));
    // Not a report: nothing.
    EXPECT_TRUE(changes(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1)).empty());
    // A record claiming more sources than the packet holds ends the list.
    Packet bad = igmpv3_report("198.18.0.1", "239.1.2.3", true);
    store_be16(bad.data() + 20 + 8 + 2, 50);
    EXPECT_TRUE(changes(bad).empty());
    // ALLOW_NEW_SOURCES and BLOCK_OLD_SOURCES without sources change
    // nothing (RFC 3376 4.2.12, 5.1: such records are not even sent); the
    // membership stays as it was, neither joined nor left.
    for (const std::uint8_t type : {kRecordAllowNewSources, std::uint8_t{6}}) {
        Packet v3 = igmpv3_report("198.18.0.1", "239.1.2.3", true);
        v3[20 + 8] = type;
        EXPECT_TRUE(changes(v3).empty()) << "IGMPv3 record type " << int{type};
        Packet v6 = mldv2_report("2001:db8::1", "ff05::1:3", true);
        v6[40 + 8 + 8] = type;  // after the Hop-by-Hop header and the MLD header
        EXPECT_TRUE(changes(v6).empty()) << "MLDv2 record type " << int{type};
    }
    // IGMPv2 report and leave.
    Packet v2 = igmpv3_report("198.18.0.1", "239.1.2.3", true);
    v2.resize(20 + 8);
    store_be16(v2.data() + 2, 28);
    v2[20] = kIgmpV2Report;
    v2[24] = 239, v2[25] = 1, v2[26] = 2, v2[27] = 3;
    EXPECT_EQ(changes(v2), (std::vector<GroupChange>{{ip("239.1.2.3"), true}}));
    v2[20] = kIgmpV2Leave;
    EXPECT_EQ(changes(v2), (std::vector<GroupChange>{{ip("239.1.2.3"), false}}));
}

}  // namespace
}  // namespace ipoibd::ipoib::test
