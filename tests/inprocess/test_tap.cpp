// TAP mode (issue 22) with whole nodes in one process (node_harness.h): A
// presents Ethernet (a fake TAP: frames in and out of memory), B a TUN, on
// one partition, over the in-memory fabric and the soft fabric. A's
// "kernel" resolves B with its own ARP and ND and the node answers with
// B's synthetic MAC; IP frames to that MAC reach B, and B's answers come
// back as frames from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "common/ethernet.h"
#include "ipoib/mac_table.h"
#include "ipoib/nd.h"
#include "tests/inprocess/node_harness.h"

namespace ipoibd::inprocess {
namespace {

using ipoib::test::icmp_echo_v4;
using ipoib::test::icmp_echo_v6;
using ipoib::test::ip;
using Packet = std::vector<std::uint8_t>;

constexpr std::uint64_t kGuidA = 0x0002c90300c30001ULL;
constexpr std::uint64_t kGuidB = 0x0002c90300c30002ULL;

MacAddress mac_of(std::uint64_t guid) {
    return {0x02, static_cast<std::uint8_t>(guid >> 32), static_cast<std::uint8_t>(guid >> 24),
            static_cast<std::uint8_t>(guid >> 16), static_cast<std::uint8_t>(guid >> 8), static_cast<std::uint8_t>(guid)};
}

Packet ethernet(const MacAddress& dst, const MacAddress& src, std::uint16_t type, const Packet& payload) {
    Packet f(EthernetHeader::size + payload.size());
    EthernetHeader{.destination = dst, .source = src, .type = type}.write_to(f.data());
    std::copy(payload.begin(), payload.end(), f.begin() + EthernetHeader::size);
    return f;
}

Packet arp_request(const MacAddress& sha, const std::string& spa, const std::string& tpa) {
    EthernetArp a{.op = EthernetArp::kOpRequest, .sender_mac = sha, .sender_ip = *parse_ipv4(spa), .target_mac = {},
                  .target_ip = *parse_ipv4(tpa)};
    Packet p(EthernetArp::size);
    a.write_to(p.data());
    return p;
}

Packet ns_with_ethernet_option(const std::string& src, const std::string& target, const MacAddress& slla) {
    const Ipv6Address t = *parse_ipv6(target);
    const Ipv6Address dst = solicited_node_multicast(t);
    Packet p(40 + 32, 0);
    ipoib::Ipv6Header h;
    h.payload_length = 32;
    h.next_header = ipoib::kNextHeaderIcmpv6;
    h.hop_limit = 255;
    h.source = *parse_ipv6(src);
    h.destination = dst;
    h.write_to(p.data());
    std::uint8_t* m = p.data() + 40;
    m[0] = 135;
    std::memcpy(m + 8, t.data(), 16);
    m[24] = 1;
    m[25] = 1;
    std::memcpy(m + 26, slla.data(), 6);
    store_be16(m + 2, ipoib::icmpv6_checksum(h.source, h.destination, bytes(m, 32)));
    return p;
}


class TapNodes : public ::testing::TestWithParam<FabricKind> {
protected:
    void SetUp() override {
        fabric_ = std::make_unique<Fabric>(GetParam());
        fabric_->tune_config = [](config::DaemonConfig& c) { c.interface.mode = config::InterfaceMode::tap; };
        a_ = &fabric_->add_node("a", {"198.18.0.1/24", "2001:db8::1/64"}, kGuidA);
        fabric_->tune_config = {};
        b_ = &fabric_->add_node("b", {"198.18.0.2/24", "2001:db8::2/64"}, kGuidB);
        ASSERT_TRUE(fabric_->run_until([&] { return a_->link_up() && b_->link_up(); }));
        ASSERT_EQ(a_->host->mac(), mac_a_);
        ASSERT_FALSE(b_->host->mac());
    }

    // A's kernel asks until its question is answered with a frame `match` takes.
    std::optional<Packet> ask(const Packet& frame, const std::function<bool(const Packet&)>& match) {
        for (int attempt = 0; attempt < 10; ++attempt) {
            a_->host->inject(frame);
            std::optional<Packet> got;
            if (fabric_->run_until([&] { return (got = a_->take_written(match)).has_value(); }, 2s)) return got;
        }
        return std::nullopt;
    }

    std::unique_ptr<Fabric> fabric_;
    TestNode* a_ = nullptr;
    TestNode* b_ = nullptr;
    const MacAddress mac_a_ = mac_of(kGuidA);
    const MacAddress mac_b_ = mac_of(kGuidB);
};

TEST_P(TapNodes, TheKernelsArpAndNdResolveTheTunHostAndPingsCross) {
    // ARP: who has 198.18.0.2? -> a reply from B's synthetic MAC.
    const auto reply = ask(ethernet(kMacBroadcast, mac_a_, kEtherTypeArp, arp_request(mac_a_, "198.18.0.1", "198.18.0.2")),
                           [](const Packet& p) { return p.size() >= 14 + 28 && load_be16(p.data() + 12) == kEtherTypeArp; });
    ASSERT_TRUE(reply);
    const auto arp = parse_ethernet_arp(bytes(*reply).subspan(14));
    ASSERT_TRUE(arp);
    EXPECT_EQ(arp->op, EthernetArp::kOpReply);
    EXPECT_EQ(arp->sender_mac, mac_b_);
    EXPECT_EQ(arp->sender_ip, *parse_ipv4("198.18.0.2"));
    EXPECT_EQ(arp->target_mac, mac_a_);

    // An echo to B's MAC reaches B's TUN; B's answer comes back from B's MAC.
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    a_->host->inject(ethernet(mac_b_, mac_a_, kEtherTypeIpv4, ping));
    ASSERT_TRUE(fabric_->run_until([&] { return b_->take_written([&](const Packet& p) { return p == ping; }).has_value(); }));
    const Packet pong = icmp_echo_v4("198.18.0.2", "198.18.0.1", 1);
    b_->host->inject(pong);
    std::optional<Packet> back;
    ASSERT_TRUE(fabric_->run_until([&] {
        return (back = a_->take_written([&](const Packet& p) { return p.size() == 14 + pong.size(); })).has_value();
    }));
    EXPECT_EQ(Packet(back->begin() + 14, back->end()), pong);
    EXPECT_TRUE(std::equal(mac_a_.begin(), mac_a_.end(), back->begin()));      // to A's MAC
    EXPECT_TRUE(std::equal(mac_b_.begin(), mac_b_.end(), back->begin() + 6));  // from B's

    // ND: an NS with the Ethernet option -> an NA with B's MAC; then ping6.
    const auto na = ask(ethernet(multicast_mac(ip("ff02::1:ff00:2")), mac_a_, kEtherTypeIpv6,
                                 ns_with_ethernet_option("2001:db8::1", "2001:db8::2", mac_a_)),
                        [](const Packet& p) { return p.size() == 14 + 72 && p[14 + 40] == 136; });
    ASSERT_TRUE(na);
    EXPECT_TRUE(std::equal(mac_b_.begin(), mac_b_.end(), na->begin() + 14 + 40 + 26));
    const Packet ping6 = icmp_echo_v6("2001:db8::1", "2001:db8::2", 2);
    a_->host->inject(ethernet(mac_b_, mac_a_, kEtherTypeIpv6, ping6));
    ASSERT_TRUE(fabric_->run_until([&] { return b_->take_written([&](const Packet& p) { return p == ping6; }).has_value(); }));

    // The node's view: the MAC in ipoibctl neigh and the translation's counters.
    const std::string neigh = a_->node->answer("neigh");
    EXPECT_NE(neigh.find("\"mac\":\"" + format_mac(mac_b_) + "\""), std::string::npos) << neigh;
    const std::string stats = a_->node->answer("stats");
    EXPECT_NE(stats.find("\"ethernet\":{"), std::string::npos) << stats;
    EXPECT_NE(stats.find("\"mac_table\":{\"entries\":1"), std::string::npos) << stats;
    EXPECT_EQ(b_->node->answer("stats").find("\"ethernet\":{"), std::string::npos);
}

TEST_P(TapNodes, TheTunHostReachesTheTapHostFirst) {
    // B speaks first: B's engine resolves A over IPoIB ARP (A's node
    // answers for its address as in TUN mode); A's kernel gets the echo as
    // a frame from B's MAC (A learned B from the ARP request).
    const Packet ping = icmp_echo_v4("198.18.0.2", "198.18.0.1", 5);
    std::optional<Packet> got;
    for (int attempt = 0; attempt < 10 && !got; ++attempt) {
        b_->host->inject(ping);
        fabric_->run_until([&] { return (got = a_->take_written([&](const Packet& p) { return p.size() == 14 + ping.size(); })).has_value(); },
                           1s);
    }
    ASSERT_TRUE(got);
    EXPECT_EQ(Packet(got->begin() + 14, got->end()), ping);
    EXPECT_TRUE(std::equal(mac_b_.begin(), mac_b_.end(), got->begin() + 6));
    EXPECT_EQ(load_be16(got->data() + 12), kEtherTypeIpv4);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, TapNodes, ::testing::Values(FabricKind::memory, FabricKind::soft),
                         [](const ::testing::TestParamInfo<FabricKind>& p) { return to_string(p.param); });

}  // namespace
}  // namespace ipoibd::inprocess
