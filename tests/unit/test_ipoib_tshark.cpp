// The IPoIB codecs checked against an independent decoder: ARP and ND
// packets built by ipoib/ are carried as the payload of UD SEND Only packets
// (with the 4-byte IPoIB header), written as an ERF-21 capture, and read back
// by tshark (Debian `tshark`) with no decode options. Wireshark's InfiniBand
// dissector recognises the IPoIB header in a UD payload by itself and hands
// the datagram to its ARP and IPv6 dissectors, which must show what was
// built: ARP hardware type 32 and size 20, the 20-byte addresses, and ICMPv6
// checksums Wireshark itself finds correct. A missing tshark is a failure,
// not a skip, as for the other tshark tests.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ipoib/arp.h"
#include "ipoib/frame.h"
#include "ipoib/mgid.h"
#include "ipoib/nd.h"
#include "transport/wire/opcodes.h"
#include "transport/wire/packet.h"
#include "tshark_util.h"

namespace ipoibd::ipoib {
namespace {

using Bytes = std::vector<std::uint8_t>;

const HwAddress kHwA{.flags = 0x80, .qpn = 0x48, .gid = *parse_ipv6("fe80::1e:6703:29:476f")};
const HwAddress kHwB{.flags = 0, .qpn = 0x404, .gid = *parse_ipv6("fe80::2:c903:57:e7fd")};
const Ipv4Address kV4A{198, 18, 0, 2};
const Ipv4Address kV4B{198, 18, 0, 1};
const Ipv6Address kIpA = *parse_ipv6("fe80::21e:6703:29:476f");
const Ipv6Address kIpB = *parse_ipv6("fe80::202:c903:57:e7fd");

// A UD SEND Only carrying `frame` (IPoIB header + datagram): to the broadcast
// group when `dest` is multicast (with a GRH), else unicast to its QPN.
Bytes ud_packet(const HwAddress& src, const HwAddress& dest, const Bytes& frame) {
    ib::PacketSpec spec;
    spec.lrh = {.vl = 0, .lver = 0, .sl = 0, .lnh = ib::Lnh::iba_local, .dlid = 0x0002, .pkt_len = 0, .slid = 0x0001};
    if (dest.is_multicast()) {
        spec.lrh.lnh = ib::Lnh::iba_global;
        spec.lrh.dlid = 0xC000;
        ib::Grh grh;
        grh.sgid = src.gid;
        grh.dgid = dest.gid;
        spec.grh = grh;
    }
    spec.bth.opcode = ib::op::ud_send_only;
    spec.bth.pkey = 0xFFFF;
    spec.bth.dest_qp = dest.qpn;
    spec.bth.psn = 1;
    spec.ext.deth = {0x00000B1B, src.qpn};
    spec.payload = frame;
    Bytes wire(ib::packet_size(spec));
    const auto n = ib::build_packet(spec, wire);
    EXPECT_TRUE(n.has_value());
    return wire;
}

Bytes framed(EtherType type, const Bytes& datagram) {
    Bytes f(EncapHeader::size + datagram.size());
    EXPECT_TRUE(encapsulate(type, datagram, f).has_value());
    return f;
}

Bytes arp_bytes(const ArpPacket& p) {
    Bytes a(ArpPacket::size);
    EXPECT_TRUE(encode_arp(p, a).has_value());
    return a;
}

Bytes ns_bytes(const NeighborSolicitation& ns) {
    Bytes out(kNsNaPacketMaxSize);
    const auto n = build_neighbor_solicitation(ns, out);
    EXPECT_TRUE(n.has_value());
    out.resize(n ? *n : 0);
    return out;
}
Bytes na_bytes(const NeighborAdvertisement& na) {
    Bytes out(kNsNaPacketMaxSize);
    const auto n = build_neighbor_advertisement(na, out);
    EXPECT_TRUE(n.has_value());
    out.resize(n ? *n : 0);
    return out;
}

// tshark shows a 20-byte ARP hardware address as 40 hex digits, no colons.
std::string plain_hex(const HwAddress& a) {
    std::string s = format_hw_address(a);
    std::erase(s, ':');
    return s;
}

TEST(IpoibTshark, ArpAndNdDecodeAsBuilt) {
    const HwAddress broadcast = multicast_address(broadcast_mgid(0xFFFF));
    const ArpPacket request = make_arp_request(kHwB, kV4B, kV4A);
    const NeighborSolicitation ns = make_resolution_solicitation(kIpA, kHwA, kIpB);
    const NdMessage ns_parsed = *parse_nd(ns_bytes(ns));
    const HwAddress sn_group =
        multicast_address(*ipv6_group_mgid(ns.destination, 0xFFFF));

    const std::vector<Bytes> packets = {
        ud_packet(kHwB, broadcast, framed(EtherType::arp, arp_bytes(request))),
        ud_packet(kHwA, kHwB, framed(EtherType::arp, arp_bytes(make_arp_reply(request, kHwA)))),
        ud_packet(kHwA, broadcast, framed(EtherType::arp, arp_bytes(make_gratuitous_arp(kHwA, kV4A)))),
        ud_packet(kHwA, sn_group, framed(EtherType::ipv6, ns_bytes(ns))),
        ud_packet(kHwB, kHwA, framed(EtherType::ipv6, na_bytes(make_solicited_advertisement(ns_parsed, kHwB, false)))),
        ud_packet(kHwA, sn_group, framed(EtherType::ipv6, ns_bytes(make_dad_solicitation(kIpA)))),
    };

    test::ScratchDir dir;
    const std::string pcap = dir.path() + "/ipoib.pcap";
    ASSERT_TRUE(test::write_capture(pcap, packets));
    const std::vector<std::string> fields = {
        "frame.protocols", "arp.hw.type", "arp.hw.size", "arp.proto.type", "arp.proto.size", "arp.opcode",
        "arp.src.hw", "arp.src.proto_ipv4", "arp.dst.hw", "arp.dst.proto_ipv4", "ipv6.src", "ipv6.dst",
        "ipv6.hlim", "icmpv6.type", "icmpv6.checksum.status", "icmpv6.nd.ns.target_address",
        "icmpv6.nd.na.target_address", "icmpv6.nd.na.flag.s", "icmpv6.opt.type", "icmpv6.opt.length",
        "icmpv6.opt.linkaddr",
    };
    const auto rows = test::tshark_rows(dir.path(), pcap, fields);
    ASSERT_EQ(rows.size(), packets.size());

    // ARP: request, reply, gratuitous.
    for (std::size_t i = 0; i < 3; ++i) {
        SCOPED_TRACE(i);
        const auto& r = rows[i];
        EXPECT_NE(r.at("frame.protocols").find("arp"), std::string::npos) << r.at("frame.protocols");
        test::expect_field(r, "arp.hw.type", "32");
        test::expect_field(r, "arp.hw.size", "20");
        test::expect_field(r, "arp.proto.type", "0x0800");
        test::expect_field(r, "arp.proto.size", "4");
    }
    test::expect_field(rows[0], "arp.opcode", "1");
    test::expect_field(rows[0], "arp.src.hw", plain_hex(kHwB));
    test::expect_field(rows[0], "arp.src.proto_ipv4", "198.18.0.1");
    test::expect_field(rows[0], "arp.dst.hw", plain_hex(HwAddress{}));
    test::expect_field(rows[0], "arp.dst.proto_ipv4", "198.18.0.2");
    test::expect_field(rows[1], "arp.opcode", "2");
    test::expect_field(rows[1], "arp.src.hw", plain_hex(kHwA));
    test::expect_field(rows[1], "arp.src.proto_ipv4", "198.18.0.2");
    test::expect_field(rows[1], "arp.dst.hw", plain_hex(kHwB));
    test::expect_field(rows[1], "arp.dst.proto_ipv4", "198.18.0.1");
    test::expect_field(rows[2], "arp.src.proto_ipv4", "198.18.0.2");
    test::expect_field(rows[2], "arp.dst.proto_ipv4", "198.18.0.2");

    // ND: NS, NA, DAD. The checksum status 1 is Wireshark's "Good".
    for (std::size_t i = 3; i < 6; ++i) {
        SCOPED_TRACE(i);
        const auto& r = rows[i];
        EXPECT_NE(r.at("frame.protocols").find("icmpv6"), std::string::npos) << r.at("frame.protocols");
        test::expect_field(r, "icmpv6.checksum.status", "1");
        test::expect_field(r, "ipv6.hlim", "255");
    }
    test::expect_field(rows[3], "icmpv6.type", "135");
    test::expect_field(rows[3], "ipv6.dst", "ff02::1:ff57:e7fd");
    test::expect_field(rows[3], "icmpv6.nd.ns.target_address", "fe80::202:c903:57:e7fd");
    test::expect_field(rows[3], "icmpv6.opt.type", "1");
    test::expect_field(rows[3], "icmpv6.opt.length", "3");
    // Wireshark shows the 22 octets after type and length: the two zero pad
    // octets first, then the address (flags, QPN, GID).
    test::expect_field(rows[3], "icmpv6.opt.linkaddr", "0000" + std::string("800000") + "48" +
                                                           "fe80000000000000001e67030029476f");
    test::expect_field(rows[4], "icmpv6.type", "136");
    test::expect_field(rows[4], "icmpv6.nd.na.target_address", "fe80::202:c903:57:e7fd");
    test::expect_field(rows[4], "icmpv6.nd.na.flag.s", "1");
    test::expect_field(rows[4], "icmpv6.opt.type", "2");
    test::expect_field(rows[4], "icmpv6.opt.linkaddr", "000000000404fe800000000000000002c9030057e7fd");
    test::expect_field(rows[5], "icmpv6.type", "135");
    test::expect_field(rows[5], "ipv6.src", "::");
    test::expect_field(rows[5], "icmpv6.opt.type", "");
}

}  // namespace
}  // namespace ipoibd::ipoib
