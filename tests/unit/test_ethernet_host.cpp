// TAP mode's translation (ipoib/ethernet_host.h) on an engine of the
// in-process harness: host A presents Ethernet (its kernel's frames are
// built here byte by byte), host B is a plain engine (a TUN host). Named
// cases of the kernel's ARP and ND, the frames the translation cannot map,
// and the MAC table's life with the neighbour cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine_harness.h"
#include "ipoib/ethernet_host.h"
#include "ipoib/mac_table.h"
#include "ipoib/nd.h"

namespace ipoibd::ipoib::test {
namespace {

constexpr MacAddress kOwn{0x02, 0x00, 0x00, 0x00, 0x00, 0x01};  // the TAP's MAC

struct Frame {
    EthernetHeader header;
    Packet payload;
};

struct Recorder final : EthernetHostIo {
    void write_frame(const EthernetHeader& header, bytes payload) override {
        frames.push_back({header, Packet(payload.begin(), payload.end())});
    }
    std::vector<Frame> frames;
};

Packet ethernet(const MacAddress& dst, const MacAddress& src, std::uint16_t type, const Packet& payload) {
    Packet f(EthernetHeader::size + payload.size());
    EthernetHeader{.destination = dst, .source = src, .type = type}.write_to(f.data());
    std::copy(payload.begin(), payload.end(), f.begin() + EthernetHeader::size);
    return f;
}

Packet arp(std::uint16_t op, const MacAddress& sha, const std::string& spa, const MacAddress& tha,
           const std::string& tpa) {
    EthernetArp a{.op = op, .sender_mac = sha, .sender_ip = *parse_ipv4(spa), .target_mac = tha,
                  .target_ip = *parse_ipv4(tpa)};
    Packet p(EthernetArp::size);
    a.write_to(p.data());
    return p;
}

// An NS as the Linux kernel writes it on an Ethernet device: Hop Limit 255,
// a Source Link-Layer Address option of 8 octets (RFC 2464 8) unless the
// source is ::.
Packet kernel_ns(const std::string& src, const std::string& dst, const std::string& target,
                 std::optional<MacAddress> slla) {
    const std::size_t icmp_len = 24 + (slla ? 8 : 0);
    Packet p(Ipv6Header::size + icmp_len, 0);
    Ipv6Header ip;
    ip.payload_length = static_cast<std::uint16_t>(icmp_len);
    ip.next_header = kNextHeaderIcmpv6;
    ip.hop_limit = 255;
    ip.source = *parse_ipv6(src);
    ip.destination = *parse_ipv6(dst);
    ip.write_to(p.data());
    std::uint8_t* m = p.data() + Ipv6Header::size;
    m[0] = 135;
    const auto t = *parse_ipv6(target);
    std::memcpy(m + 8, t.data(), 16);
    if (slla) {
        m[24] = 1;
        m[25] = 1;
        std::memcpy(m + 26, slla->data(), 6);
    }
    store_be16(m + 2, icmpv6_checksum(ip.source, ip.destination, bytes(m, icmp_len)));
    return p;
}

struct TapPair : ::testing::Test {
    World w;
    Host* a = nullptr;
    Host* b = nullptr;
    Recorder kernel;
    std::unique_ptr<EthernetHost> eth;
    MacAddress mac_b{};

    void SetUp() override {
        a = &w.add_host();
        b = &w.add_host();
        a->add_address("198.18.0.1/24");
        a->add_address("2001:db8::1/64");
        b->add_address("198.18.0.2/24");
        b->add_address("2001:db8::2/64");
        make_tap({});
        a->start();
        b->start();
        w.advance(2s);
        mac_b = synthetic_mac(b->port->attributes().gid());
    }
    void make_tap(EthernetHost::Config config, const MacAddress& own = kOwn) {
        eth = std::make_unique<EthernetHost>(config, own, a->engine, kernel);
        a->on_tun = [this](bytes p, const PacketSource& from) { eth->to_host(p, from); };
        a->on_learned = [this](const IpAddress& ip, const HwAddress& hw, std::uint16_t slid) {
            eth->neighbour_learned(ip, hw, slid, w.now);
        };
    }
    void from_kernel(const Packet& frame) {
        eth->on_host_frame(frame, w.now);
        w.pump();
    }
    std::uint64_t drops(HostFrameDrop d) const { return eth->counters().drops[static_cast<std::size_t>(d)]; }
    // The QPN the MAC table holds for `mac` (0: none).
    std::uint32_t qpn_of(const MacAddress& mac) const {
        for (const MacEntryView& e : eth->table().entries())
            if (e.mac == mac) return e.hw.qpn;
        return 0;
    }
    // Resolves 198.18.0.2 through the kernel's ARP, as `ping` would start.
    void resolve_b() {
        from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp, arp(1, kOwn, "198.18.0.1", {}, "198.18.0.2")));
    }
};

TEST_F(TapPair, KernelArpRequestIsResolvedOnTheFabricAndAnsweredWithTheSyntheticMac) {
    resolve_b();
    EXPECT_EQ(a->engine.counters().arp_requests_tx, 1u);  // IPoIB ARP, 20-byte addresses
    ASSERT_EQ(kernel.frames.size(), 1u);
    const Frame& f = kernel.frames[0];
    EXPECT_EQ(f.header.destination, kOwn);
    EXPECT_EQ(f.header.source, mac_b);
    EXPECT_EQ(f.header.type, kEtherTypeArp);
    const auto reply = parse_ethernet_arp(f.payload);
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->op, EthernetArp::kOpReply);
    EXPECT_EQ(reply->sender_mac, mac_b);
    EXPECT_EQ(reply->sender_ip, *parse_ipv4("198.18.0.2"));
    EXPECT_EQ(reply->target_mac, kOwn);
    EXPECT_EQ(reply->target_ip, *parse_ipv4("198.18.0.1"));
    EXPECT_EQ(eth->counters().answered_later, 1u);
    EXPECT_EQ(eth->pending(), 0u);
    // The MAC reads back to B's GUID.
    EXPECT_EQ(mac_b[0], 0x02);
    EXPECT_EQ(std::memcmp(mac_b.data() + 1, b->port->attributes().gid().data() + 11, 5), 0);
}

TEST_F(TapPair, KernelArpRequestForAKnownNeighbourIsAnsweredAtOnce) {
    resolve_b();
    kernel.frames.clear();
    // The kernel's unicast reachability probe (to the MAC it holds).
    eth->on_host_frame(ethernet(mac_b, kOwn, kEtherTypeArp, arp(1, kOwn, "198.18.0.1", mac_b, "198.18.0.2")), w.now);
    ASSERT_EQ(kernel.frames.size(), 1u);  // before any pump: from the cache
    EXPECT_EQ(eth->counters().answered_at_once, 1u);
    EXPECT_EQ(a->engine.counters().arp_requests_tx, 1u);
}

TEST_F(TapPair, IpToASyntheticMacReachesThePeerAndItsAnswerComesFromItsMac) {
    resolve_b();
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    from_kernel(ethernet(mac_b, kOwn, kEtherTypeIpv4, ping));
    ASSERT_EQ(std::count(b->tun.begin(), b->tun.end(), ping), 1);
    kernel.frames.clear();
    const Packet pong = icmp_echo_v4("198.18.0.2", "198.18.0.1", 1);
    b->from_host(pong);
    w.pump();
    ASSERT_EQ(kernel.frames.size(), 1u);
    EXPECT_EQ(kernel.frames[0].header.destination, kOwn);
    EXPECT_EQ(kernel.frames[0].header.source, mac_b);
    EXPECT_EQ(kernel.frames[0].header.type, kEtherTypeIpv4);
    EXPECT_EQ(kernel.frames[0].payload, pong);
    EXPECT_EQ(eth->counters().unknown_source, 0u);
}

TEST_F(TapPair, KernelArpReplyIsDropped) {
    from_kernel(ethernet(kOwn, kOwn, kEtherTypeArp, arp(2, kOwn, "198.18.0.1", mac_b, "198.18.0.2")));
    EXPECT_EQ(drops(HostFrameDrop::host_arp_reply), 1u);
    EXPECT_TRUE(kernel.frames.empty());
}

TEST_F(TapPair, GratuitousArpFromTheKernelIsDroppedTheEngineAnnounces) {
    const auto sent = a->sent.size();
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp, arp(1, kOwn, "198.18.0.1", {}, "198.18.0.1")));
    EXPECT_EQ(drops(HostFrameDrop::announcement), 1u);
    EXPECT_EQ(a->sent.size(), sent);
    EXPECT_TRUE(kernel.frames.empty());
}

TEST_F(TapPair, ArpProbeForANeighboursAddressIsDefendedForIt) {
    resolve_b();
    kernel.frames.clear();
    // RFC 5227 probe: sender 0.0.0.0, target the address to be checked.
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp, arp(1, kOwn, "0.0.0.0", {}, "198.18.0.2")));
    ASSERT_EQ(kernel.frames.size(), 1u);
    EXPECT_EQ(kernel.frames[0].header.destination, kMacBroadcast);
    const auto reply = parse_ethernet_arp(kernel.frames[0].payload);
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->sender_mac, mac_b);
    EXPECT_EQ(reply->sender_ip, *parse_ipv4("198.18.0.2"));
    EXPECT_EQ(eth->counters().probes_answered, 1u);
    // Nobody holds .9: no answer, no fabric traffic.
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp, arp(1, kOwn, "0.0.0.0", {}, "198.18.0.9")));
    EXPECT_EQ(kernel.frames.size(), 1u);
    EXPECT_EQ(drops(HostFrameDrop::unanswered_probe), 1u);
}

TEST_F(TapPair, NsWithAnEthernetOptionIsResolvedAndTheNaCarriesTheSyntheticMac) {
    from_kernel(ethernet(multicast_mac(ip("ff02::1:ff00:2")), kOwn, kEtherTypeIpv6,
                         kernel_ns("2001:db8::1", "ff02::1:ff00:2", "2001:db8::2", kOwn)));
    EXPECT_EQ(a->engine.counters().ns_tx, 1u);
    ASSERT_EQ(kernel.frames.size(), 1u);
    const Frame& f = kernel.frames[0];
    EXPECT_EQ(f.header.destination, kOwn);
    EXPECT_EQ(f.header.source, mac_b);
    EXPECT_EQ(f.header.type, kEtherTypeIpv6);
    ASSERT_EQ(f.payload.size(), 40u + 24 + 8);
    const Ipv6Header ip6 = Ipv6Header::read_from(f.payload.data());
    EXPECT_EQ(ip6.hop_limit, 255);
    EXPECT_EQ(ip6.source, *parse_ipv6("2001:db8::2"));
    EXPECT_EQ(ip6.destination, *parse_ipv6("2001:db8::1"));
    const std::uint8_t* m = f.payload.data() + 40;
    EXPECT_EQ(m[0], 136);
    EXPECT_EQ(m[4], kNaFlagSolicited | kNaFlagOverride);
    EXPECT_EQ(std::memcmp(m + 8, parse_ipv6("2001:db8::2")->data(), 16), 0);
    EXPECT_EQ(m[24], 2);  // Target Link-Layer Address
    EXPECT_EQ(m[25], 1);  // 8 octets: an Ethernet address
    EXPECT_EQ(std::memcmp(m + 26, mac_b.data(), 6), 0);
    EXPECT_EQ(icmpv6_checksum(ip6.source, ip6.destination, bytes(m, 32)), load_be16(m + 2));
    EXPECT_EQ(eth->counters().answered_later, 1u);
}

TEST_F(TapPair, DadProbeForANeighboursAddressIsAnsweredToAllNodes) {
    from_kernel(ethernet(multicast_mac(ip("ff02::1:ff00:2")), kOwn, kEtherTypeIpv6,
                         kernel_ns("2001:db8::1", "ff02::1:ff00:2", "2001:db8::2", kOwn)));
    kernel.frames.clear();
    from_kernel(ethernet(multicast_mac(ip("ff02::1:ff00:2")), kOwn, kEtherTypeIpv6,
                         kernel_ns("::", "ff02::1:ff00:2", "2001:db8::2", std::nullopt)));
    ASSERT_EQ(kernel.frames.size(), 1u);
    const Frame& f = kernel.frames[0];
    EXPECT_EQ(f.header.destination, multicast_mac(ip("ff02::1")));
    const Ipv6Header ip6 = Ipv6Header::read_from(f.payload.data());
    EXPECT_EQ(ip6.destination, kIpv6AllNodes);
    EXPECT_EQ(f.payload[40 + 4], kNaFlagOverride);  // not Solicited (RFC 4861 7.2.4)
    EXPECT_EQ(eth->counters().probes_answered, 1u);
    from_kernel(ethernet(multicast_mac(ip("ff02::1:ff00:9")), kOwn, kEtherTypeIpv6,
                         kernel_ns("::", "ff02::1:ff00:9", "2001:db8::9", std::nullopt)));
    EXPECT_EQ(kernel.frames.size(), 1u);
    EXPECT_EQ(drops(HostFrameDrop::unanswered_probe), 1u);
}

TEST_F(TapPair, KernelNaIsDropped) {
    Packet na = kernel_ns("2001:db8::1", "ff02::1", "2001:db8::1", std::nullopt);
    na[40] = 136;
    from_kernel(ethernet(multicast_mac(ip("ff02::1")), kOwn, kEtherTypeIpv6, na));
    EXPECT_EQ(drops(HostFrameDrop::host_na), 1u);
}

TEST_F(TapPair, FramesTheTranslationCannotMapAreDroppedByReason) {
    resolve_b();
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    const auto sent = a->sent.size();
    // truncated: less than an Ethernet header
    from_kernel(Packet(10, 0xAA));
    EXPECT_EQ(eth->counters().frame_errors[static_cast<std::size_t>(EthernetError::truncated)], 1u);
    // a VLAN tag: IPoIB has no VLANs
    from_kernel(ethernet(mac_b, kOwn, kEtherTypeVlan, Packet(30, 0)));
    EXPECT_EQ(eth->counters().frame_errors[static_cast<std::size_t>(EthernetError::vlan_tagged)], 1u);
    // an unknown EtherType (LLDP)
    from_kernel(ethernet(mac_b, kOwn, 0x88CC, Packet(30, 0)));
    EXPECT_EQ(drops(HostFrameDrop::other_ether_type), 1u);
    // a forged source MAC (a bridge's other port, or a spoofer)
    from_kernel(ethernet(mac_b, MacAddress{0x02, 9, 9, 9, 9, 9}, kEtherTypeIpv4, ping));
    EXPECT_EQ(drops(HostFrameDrop::forged_source), 1u);
    // ARP whose sender is not the TAP
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp,
                         arp(1, MacAddress{0x02, 9, 9, 9, 9, 9}, "198.18.0.1", {}, "198.18.0.2")));
    EXPECT_EQ(drops(HostFrameDrop::forged_source), 2u);
    // ARP for a foreign hardware type (IEEE 802, 6)
    Packet foreign = arp(1, kOwn, "198.18.0.1", {}, "198.18.0.2");
    foreign[1] = 6;
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp, foreign));
    EXPECT_EQ(eth->counters().arp_errors[static_cast<std::size_t>(EthernetArpError::wrong_hardware_type)], 1u);
    // truncated ARP
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp, Packet(20, 0)));
    EXPECT_EQ(eth->counters().arp_errors[static_cast<std::size_t>(EthernetArpError::truncated)], 1u);
    // unicast to a MAC that stands for nobody
    from_kernel(ethernet(MacAddress{0x02, 1, 2, 3, 4, 5}, kOwn, kEtherTypeIpv4, ping));
    EXPECT_EQ(drops(HostFrameDrop::unknown_mac), 1u);
    // an NS with a broken checksum
    Packet ns = kernel_ns("2001:db8::1", "ff02::1:ff00:2", "2001:db8::2", kOwn);
    ns[40 + 2] ^= 0xFF;
    from_kernel(ethernet(multicast_mac(ip("ff02::1:ff00:2")), kOwn, kEtherTypeIpv6, ns));
    EXPECT_EQ(drops(HostFrameDrop::bad_nd), 1u);
    // None of it reached the fabric.
    EXPECT_EQ(a->sent.size(), sent);
    EXPECT_TRUE(b->tun.empty());
}

TEST_F(TapPair, GroupAndBroadcastTrafficGetGroupMacs) {
    resolve_b();
    kernel.frames.clear();
    // B sends to the subnet broadcast and to a group A's host joined.
    const Packet bcast = udp_v4("198.18.0.2", "198.18.0.255");
    b->from_host(bcast);
    w.pump();
    ASSERT_EQ(kernel.frames.size(), 1u);
    EXPECT_EQ(kernel.frames[0].header.destination, kMacBroadcast);
    EXPECT_EQ(kernel.frames[0].header.source, mac_b);
    kernel.frames.clear();
    const Packet echo6 = icmp_echo_v6("2001:db8::2", "ff02::1", 7);
    b->from_host(echo6);
    w.pump();
    ASSERT_EQ(kernel.frames.size(), 1u);
    EXPECT_EQ(kernel.frames[0].header.destination, (MacAddress{0x33, 0x33, 0, 0, 0, 1}));
    // From the kernel: a broadcast frame goes to the broadcast group.
    const auto before = b->tun.size();
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeIpv4, udp_v4("198.18.0.1", "198.18.0.255")));
    EXPECT_EQ(b->tun.size(), before + 1);
}

TEST_F(TapPair, AFabricSenderWithoutAnEntryGetsALidQpnMac) {
    resolve_b();  // both engines know each other now
    make_tap({});  // a fresh translation (an empty table) over the same engine
    const Packet ping = icmp_echo_v4("198.18.0.2", "198.18.0.1", 1);
    b->from_host(ping);
    w.pump();
    ASSERT_EQ(kernel.frames.size(), 2u);  // the ARP reply of resolve_b(), then the ping
    const Frame& f = kernel.frames.back();
    EXPECT_EQ(f.payload, ping);
    const std::uint16_t lid = b->port->attributes().lid;
    const std::uint32_t qpn = b->engine.link().qpn;
    EXPECT_EQ(f.header.source, (MacAddress{0x06, static_cast<std::uint8_t>(lid >> 8), static_cast<std::uint8_t>(lid),
                                           static_cast<std::uint8_t>(qpn >> 16), static_cast<std::uint8_t>(qpn >> 8),
                                           static_cast<std::uint8_t>(qpn)}));
    EXPECT_EQ(eth->counters().unknown_source, 1u);
}

// The fabric vouches for a datagram's source LID and QPN, not for the GID
// its ARP names: a port at another LID that names B's GID (under an address
// of its own, which the engine may well learn) must not move B's MAC to a
// QPN of its choosing, nor take the LID that labels B's frames.
TEST_F(TapPair, AnArpNamingAnotherPortsGidFromElsewhereDoesNotMoveItsMac) {
    resolve_b();
    Host& c = w.add_host();
    c.add_address("198.18.0.3/24");
    c.start();
    w.advance(2s);
    HwAddress forged = b->engine.link().hw;
    forged.qpn = (forged.qpn + 0x100) & ib::kQpnMask;
    const ArpPacket request = make_arp_request(forged, *parse_ipv4("198.18.0.3"), *parse_ipv4("198.18.0.1"));
    Packet payload(ArpPacket::size);
    request.write_to(payload.data());
    Packet frame(4 + payload.size());
    ASSERT_TRUE(encapsulate(EtherType::arp, payload, frame));
    a->engine.on_datagram({.payload = frame, .src_qp = c.engine.link().qpn, .slid = c.port->attributes().lid}, w.now);
    w.pump();
    EXPECT_EQ(qpn_of(mac_b), b->engine.link().qpn);
    EXPECT_EQ(eth->counters().address_not_vouched, 1u);

    // The kernel's traffic to B's MAC still reaches B, and B's answer
    // still carries B's MAC.
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    from_kernel(ethernet(mac_b, kOwn, kEtherTypeIpv4, ping));
    ASSERT_EQ(std::count(b->tun.begin(), b->tun.end(), ping), 1);
    kernel.frames.clear();
    b->from_host(icmp_echo_v4("198.18.0.2", "198.18.0.1", 1));
    w.pump();
    ASSERT_EQ(kernel.frames.size(), 1u);
    EXPECT_EQ(kernel.frames[0].header.source, mac_b);

    // The kernel asking for the forged address gets B's MAC, which still
    // stands for B's own QPN.
    from_kernel(ethernet(kMacBroadcast, kOwn, kEtherTypeArp, arp(1, kOwn, "198.18.0.1", {}, "198.18.0.3")));
    EXPECT_EQ(qpn_of(mac_b), b->engine.link().qpn);
}

// The TAP's own MAC is the synthetic MAC of our GID (daemon/node.cpp): no
// other GID may be given it, as a GID whose low 40 bits are our GUID's
// would be (another vendor's GUID, or any GID a port names in its ARP).
// The kernel would hold its own MAC for a neighbour.
TEST_F(TapPair, NoPeerIsGivenTheTapsOwnMac) {
    const MacAddress own = synthetic_mac(a->port->attributes().gid());
    make_tap({}, own);
    HwAddress lookalike = b->engine.link().hw;
    lookalike.gid = a->port->attributes().gid();
    lookalike.gid[8] ^= 0x01;  // another OUI, the same low 40 bits
    const ArpPacket request = make_arp_request(lookalike, *parse_ipv4("198.18.0.3"), *parse_ipv4("198.18.0.1"));
    Packet payload(ArpPacket::size);
    request.write_to(payload.data());
    Packet frame(4 + payload.size());
    ASSERT_TRUE(encapsulate(EtherType::arp, payload, frame));
    a->engine.on_datagram({.payload = frame, .src_qp = b->engine.link().qpn, .slid = b->port->attributes().lid}, w.now);
    w.pump();
    from_kernel(ethernet(kMacBroadcast, own, kEtherTypeArp, arp(1, own, "198.18.0.1", {}, "198.18.0.3")));
    ASSERT_EQ(kernel.frames.size(), 1u);
    const auto reply = parse_ethernet_arp(kernel.frames[0].payload);
    ASSERT_TRUE(reply);
    EXPECT_NE(reply->sender_mac, own);
    EXPECT_EQ(reply->sender_mac, *eth->table().mac_of(lookalike.gid));
    EXPECT_EQ(eth->table().counters().collisions, 1u);
}

TEST_F(TapPair, APeerRestartKeepsItsMacAndFramesReachTheNewQpn) {
    resolve_b();
    const std::uint32_t old_qpn = b->engine.link().qpn;
    b = &w.restart_host(1);
    b->add_address("198.18.0.2/24");
    b->add_address("2001:db8::2/64");
    b->start();
    w.advance(3s);  // joins, gratuitous ARP from the new QPN
    ASSERT_NE(b->engine.link().qpn, old_qpn);
    EXPECT_EQ(eth->table().mac_of(b->port->attributes().gid()), mac_b);
    EXPECT_GE(eth->table().counters().address_changed, 1u);
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 2);
    from_kernel(ethernet(mac_b, kOwn, kEtherTypeIpv4, ping));
    EXPECT_EQ(std::count(b->tun.begin(), b->tun.end(), ping), 1);
}

TEST_F(TapPair, QuestionsWaitingForTheFabricAreBoundedAndExpire) {
    make_tap({.table = {}, .max_pending = 4, .pending_for = 3000ms, .prune_every = 1000ms});
    for (int i = 10; i < 20; ++i)
        eth->on_host_frame(ethernet(kMacBroadcast, kOwn, kEtherTypeArp,
                                    arp(1, kOwn, "198.18.0.1", {}, "198.18.0." + std::to_string(i))),
                           w.now);
    EXPECT_EQ(eth->pending(), 4u);
    EXPECT_EQ(drops(HostFrameDrop::pending_full), 6u);
    w.now += 3001ms;
    eth->tick(w.now);
    EXPECT_EQ(eth->pending(), 0u);
    EXPECT_EQ(eth->counters().unresolved, 4u);
}

TEST_F(TapPair, TheMacTableAgesWithTheNeighbourCache) {
    make_tap({.table = {.max_entries = 4096, .idle = 1000ms}, .max_pending = 256, .pending_for = 3000ms,
              .prune_every = 1000ms});
    resolve_b();
    ASSERT_EQ(eth->table().size(), 1u);
    // While the neighbour entry lives, the MAC stays however idle.
    w.now += 5s;
    eth->tick(w.now);
    EXPECT_EQ(eth->table().size(), 1u);
    // The neighbour cache collects the unused entry (STALE, then gc_stale_time).
    w.advance(200s, 1s);
    ASSERT_FALSE(a->engine.neighbours().find(ip("198.18.0.2")));
    eth->tick(w.now);
    EXPECT_EQ(eth->table().size(), 0u);
    EXPECT_EQ(eth->table().counters().removed, 1u);
}

}  // namespace
}  // namespace ipoibd::ipoib::test
