// TUN offloads (netlink/tun_offload.h): TSO super-packets cut into
// datagrams, partial checksums completed; every header field and checksum
// checked against an independent computation.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "host/tun_offload.h"

namespace ipoibd::host {
namespace {

using Bytes = std::vector<std::uint8_t>;

// RFC 1071, byte by byte: the reference the production sum is held to.
std::uint16_t reference_checksum(const Bytes& data) {
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < data.size(); i += 2)
        sum += static_cast<std::uint32_t>(data[i] << 8) + (i + 1 < data.size() ? data[i + 1] : 0);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum);
}

// ip_len: the IP header's length, with IPv6 extension headers (0: the fixed one).
bool tcp_checksum_ok(const Bytes& ip, bool v6, std::size_t ip_len = 0) {
    if (ip_len == 0) ip_len = v6 ? 40 : static_cast<std::size_t>(ip[0] & 0x0F) * 4;
    Bytes pseudo;
    if (v6) {
        pseudo.insert(pseudo.end(), ip.begin() + 8, ip.begin() + 40);
    } else {
        pseudo.insert(pseudo.end(), ip.begin() + 12, ip.begin() + 20);
    }
    const std::size_t tcp_len = ip.size() - ip_len;
    pseudo.push_back(0);
    pseudo.push_back(6);
    pseudo.push_back(static_cast<std::uint8_t>(tcp_len >> 8));
    pseudo.push_back(static_cast<std::uint8_t>(tcp_len));
    pseudo.insert(pseudo.end(), ip.begin() + static_cast<std::ptrdiff_t>(ip_len), ip.end());
    return reference_checksum(pseudo) == 0;
}

// A virtio header + an IPv4/IPv6 TCP packet with `payload` bytes.
Bytes super_packet(bool v6, std::size_t payload, std::uint16_t mss, std::uint8_t tcp_flags) {
    const std::size_t ip_len = v6 ? 40 : 20, tcp_len = 20;
    Bytes p(VirtioNetHeader::size + ip_len + tcp_len + payload);
    VirtioNetHeader h;
    h.flags = VirtioNetHeader::kFlagNeedsCsum;
    h.gso_type = v6 ? VirtioNetHeader::kGsoTcpV6 : VirtioNetHeader::kGsoTcpV4;
    h.gso_size = mss;
    h.hdr_len = static_cast<std::uint16_t>(ip_len + tcp_len);
    h.csum_start = static_cast<std::uint16_t>(ip_len);
    h.csum_offset = 16;
    h.write_to(p.data());
    std::uint8_t* ip = p.data() + VirtioNetHeader::size;
    if (v6) {
        ip[0] = 0x60;
        store_be16(ip + 4, static_cast<std::uint16_t>(tcp_len + payload));
        ip[6] = 6;
        ip[7] = 64;
        ip[8] = 0x20, ip[9] = 0x01, ip[10] = 0x0d, ip[11] = 0xb8, ip[23] = 1;
        ip[24] = 0x20, ip[25] = 0x01, ip[26] = 0x0d, ip[27] = 0xb8, ip[39] = 2;
    } else {
        ip[0] = 0x45;
        store_be16(ip + 2, static_cast<std::uint16_t>(ip_len + tcp_len + payload));
        store_be16(ip + 4, 0x1000);
        ip[8] = 64;
        ip[9] = 6;
        ip[12] = 198, ip[13] = 18, ip[14] = 0, ip[15] = 1;
        ip[16] = 198, ip[17] = 18, ip[18] = 0, ip[19] = 2;
    }
    std::uint8_t* tcp = ip + ip_len;
    store_be16(tcp, 40000);
    store_be16(tcp + 2, 5201);
    store_be32(tcp + 4, 0xFFFFFF00);  // wraps within the super-packet
    tcp[12] = 0x50;
    tcp[13] = tcp_flags;
    store_be16(tcp + 14, 65535);
    for (std::size_t i = 0; i < payload; ++i) tcp[tcp_len + i] = static_cast<std::uint8_t>(i * 7);
    return p;
}

void check_segments(bool v6) {
    const std::uint16_t mss = 1000;
    const std::size_t payload = 4500;  // 4 full segments and a short one
    Bytes p = super_packet(v6, payload, mss, 0x18 | 0x01 | 0x80);  // PSH ACK FIN CWR
    Bytes original_payload(p.end() - static_cast<std::ptrdiff_t>(payload), p.end());
    std::vector<Bytes> out;
    std::vector<std::uint8_t> scratch;
    auto n = segment_tun_packet(p, scratch, [&](bytes d) { out.emplace_back(d.begin(), d.end()); });
    ASSERT_TRUE(n);
    ASSERT_EQ(*n, 5u);
    ASSERT_EQ(out.size(), 5u);
    Bytes joined;
    const std::size_t ip_len = v6 ? 40 : 20;
    for (std::size_t i = 0; i < out.size(); ++i) {
        const Bytes& s = out[i];
        const std::size_t seg_payload = i < 4 ? 1000 : 500;
        ASSERT_EQ(s.size(), ip_len + 20 + seg_payload) << i;
        if (v6) {
            EXPECT_EQ(load_be16(s.data() + 4), 20 + seg_payload);
        } else {
            EXPECT_EQ(load_be16(s.data() + 2), s.size());
            EXPECT_EQ(load_be16(s.data() + 4), 0x1000 + i);
            EXPECT_EQ(reference_checksum(Bytes(s.begin(), s.begin() + 20)), 0) << "IPv4 header checksum " << i;
        }
        const std::uint8_t* tcp = s.data() + ip_len;
        EXPECT_EQ(load_be32(tcp + 4), 0xFFFFFF00u + static_cast<std::uint32_t>(i * 1000)) << i;
        const bool first = i == 0, last = i == 4;
        EXPECT_EQ((tcp[13] & 0x01) != 0, last) << "FIN " << i;
        EXPECT_EQ((tcp[13] & 0x08) != 0, last) << "PSH " << i;
        EXPECT_EQ((tcp[13] & 0x80) != 0, first) << "CWR " << i;
        EXPECT_TRUE(tcp[13] & 0x10) << "ACK " << i;
        EXPECT_TRUE(tcp_checksum_ok(s, v6)) << "TCP checksum " << i;
        joined.insert(joined.end(), s.begin() + static_cast<std::ptrdiff_t>(ip_len + 20), s.end());
    }
    EXPECT_EQ(joined, original_payload);
}

TEST(TunOffload, CutsATcpV4SuperPacket) { check_segments(false); }
TEST(TunOffload, CutsATcpV6SuperPacket) { check_segments(true); }

TEST(TunOffload, CompletesAPartialChecksumWithoutGso) {
    Bytes p = super_packet(false, 100, 0, 0x10);
    VirtioNetHeader h = VirtioNetHeader::read_from(p.data());
    h.gso_type = VirtioNetHeader::kGsoNone;
    h.write_to(p.data());
    // The kernel leaves the pseudo-header sum (not complemented) in the field.
    Bytes ip(p.begin() + VirtioNetHeader::size, p.end());
    Bytes pseudo(ip.begin() + 12, ip.begin() + 20);
    pseudo.push_back(0);
    pseudo.push_back(6);
    pseudo.push_back(0);
    pseudo.push_back(120);
    const std::uint16_t partial = static_cast<std::uint16_t>(~reference_checksum(pseudo));
    store_be16(p.data() + VirtioNetHeader::size + 20 + 16, partial);
    std::vector<Bytes> out;
    std::vector<std::uint8_t> scratch;
    auto n = segment_tun_packet(p, scratch, [&](bytes d) { out.emplace_back(d.begin(), d.end()); });
    ASSERT_TRUE(n);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(tcp_checksum_ok(out[0], false));
}

// The production sum (wide little-endian words) against RFC 1071 byte by
// byte, at every length to 80 and at packet sizes, from several offsets and
// starting sums (a starting sum is how pseudo-headers come in).
TEST(TunOffload, ChecksumMatchesTheReferenceAtEveryLength) {
    Bytes data(1600);
    std::uint32_t x = 4242;
    for (auto& b : data) b = static_cast<std::uint8_t>((x = x * 1103515245u + 12345u) >> 16);
    for (std::uint32_t start : {0u, 0x1234u, 0xFFFFu, 0x2FFFEu})
        for (std::size_t off = 0; off < 3; ++off)
            for (std::size_t len : {0u, 1u, 2u, 3u, 7u, 8u, 15u, 16u, 17u, 31u, 33u, 64u, 79u, 80u, 1399u, 1400u, 1597u}) {
                const Bytes piece(data.begin() + static_cast<std::ptrdiff_t>(off),
                                  data.begin() + static_cast<std::ptrdiff_t>(off + len));
                // The reference, with the starting sum as leading 16-bit words.
                Bytes with_start{static_cast<std::uint8_t>(start >> 24), static_cast<std::uint8_t>(start >> 16),
                                 static_cast<std::uint8_t>(start >> 8), static_cast<std::uint8_t>(start)};
                with_start.insert(with_start.end(), piece.begin(), piece.end());
                ASSERT_EQ(checksum_fold(checksum_add(start, bytes(piece.data(), piece.size()))), reference_checksum(with_start))
                    << "start " << start << " offset " << off << " length " << len;
            }
    Bytes ones(1400, 0xFF);
    EXPECT_EQ(checksum_fold(checksum_add(0, bytes(ones.data(), ones.size()))), reference_checksum(ones));
}

// An IPv6 TCP super-packet with extension headers: `chain` goes after the
// fixed header, the first of them named by `first` (each names the next;
// the last must name TCP, 6).
Bytes with_extensions(std::uint8_t first, const Bytes& chain, std::size_t payload, std::uint16_t mss) {
    Bytes p = super_packet(true, payload, mss, 0x18);
    std::uint8_t* ip = p.data() + VirtioNetHeader::size;
    ip[6] = first;
    store_be16(ip + 4, static_cast<std::uint16_t>(load_be16(ip + 4) + chain.size()));
    p.insert(p.begin() + VirtioNetHeader::size + 40, chain.begin(), chain.end());
    store_le16(p.data() + 6, static_cast<std::uint16_t>(40 + chain.size()));  // csum_start
    return p;
}

constexpr std::uint8_t kHopByHop = 0, kRouting = 43, kFragment = 44, kDestinationOptions = 60, kTcp = 6;
// An 8-byte options header naming `next`: PadN over its 6 bytes, or other options.
Bytes options_header(std::uint8_t next, Bytes options = {0x01, 0x04, 0, 0, 0, 0}) {
    Bytes h(2 + options.size());
    h[0] = next;
    h[1] = static_cast<std::uint8_t>(h.size() / 8 - 1);
    std::copy(options.begin(), options.end(), h.begin() + 2);
    return h;
}

// A sender's IPV6_HOPOPTS and IPV6_DSTOPTS put a Hop-by-Hop and a
// Destination Options header in every TSO super-packet: each segment
// carries them, Payload Length counts them, the TCP checksum does not.
TEST(TunOffload, CutsATcpV6SuperPacketWithOptionsHeaders) {
    struct Case {
        const char* name;
        std::uint8_t first;
        Bytes chain;
    };
    Bytes both = options_header(kDestinationOptions);
    const Bytes dst = options_header(kTcp, Bytes(14, 0));  // Pad1s, 16 bytes in all
    both.insert(both.end(), dst.begin(), dst.end());
    const Case cases[] = {
        {"hop-by-hop", kHopByHop, options_header(kTcp)},
        {"destination options", kDestinationOptions, options_header(kTcp)},
        {"both", kHopByHop, both},
    };
    for (const Case& c : cases) {
        const std::size_t ip_len = 40 + c.chain.size();
        Bytes p = with_extensions(c.first, c.chain, 2500, 1000);
        const Bytes original_payload(p.end() - 2500, p.end());
        std::vector<Bytes> out;
        std::vector<std::uint8_t> scratch;
        auto n = segment_tun_packet(p, scratch, [&](bytes d) { out.emplace_back(d.begin(), d.end()); });
        ASSERT_TRUE(n) << c.name << ": " << to_string(n.error());
        ASSERT_EQ(out.size(), 3u) << c.name;
        Bytes joined;
        for (std::size_t i = 0; i < out.size(); ++i) {
            const Bytes& s = out[i];
            const std::size_t seg_payload = i < 2 ? 1000 : 500;
            ASSERT_EQ(s.size(), ip_len + 20 + seg_payload) << c.name << " " << i;
            EXPECT_EQ(s[6], c.first) << c.name;
            EXPECT_EQ(Bytes(s.begin() + 40, s.begin() + static_cast<std::ptrdiff_t>(ip_len)), c.chain) << c.name;
            EXPECT_EQ(load_be16(s.data() + 4), c.chain.size() + 20 + seg_payload) << c.name << " " << i;
            EXPECT_EQ(load_be32(s.data() + ip_len + 4), 0xFFFFFF00u + static_cast<std::uint32_t>(i * 1000));
            EXPECT_TRUE(tcp_checksum_ok(s, true, ip_len)) << c.name << " TCP checksum " << i;
            joined.insert(joined.end(), s.begin() + static_cast<std::ptrdiff_t>(ip_len + 20), s.end());
        }
        EXPECT_EQ(joined, original_payload) << c.name;
    }
}

TEST(TunOffload, RefusesIpv6ExtensionHeadersASegmentCannotCopy) {
    struct Case {
        const char* name;
        std::uint8_t first;
        Bytes chain;
    };
    Bytes routing{kTcp, 2, 4, 1, 0, 0, 0, 0};  // a segment routing header naming one more address
    routing.resize(24, 0x11);
    const Bytes fragment{kTcp, 0, 0, 0, 0, 0, 0, 1};
    const Bytes jumbo = options_header(kTcp, {0xC2, 4, 0, 1, 0, 0});
    const Bytes bad_option = options_header(kTcp, {0x01, 9, 0, 0, 0, 0});  // PadN past the header
    Bytes late_hop = options_header(kHopByHop);
    const Bytes hop = options_header(kTcp);
    late_hop.insert(late_hop.end(), hop.begin(), hop.end());
    Bytes three = options_header(kDestinationOptions);  // hop-by-hop, then two destination options headers
    const Bytes dst_dst = options_header(kDestinationOptions), dst_tcp = options_header(kTcp);
    three.insert(three.end(), dst_dst.begin(), dst_dst.end());
    three.insert(three.end(), dst_tcp.begin(), dst_tcp.end());
    const Case cases[] = {
        {"routing", kRouting, routing},
        {"fragment", kFragment, fragment},
        {"jumbo payload", kHopByHop, jumbo},
        {"option past its header", kHopByHop, bad_option},
        {"hop-by-hop not first", kDestinationOptions, late_hop},
        {"three headers", kHopByHop, three},
        {"header past the packet", kDestinationOptions, Bytes{kTcp, 200, 1, 4, 0, 0, 0, 0}},
    };
    for (const Case& c : cases) {
        Bytes p = with_extensions(c.first, c.chain, 100, 50);
        std::vector<std::uint8_t> scratch;
        std::size_t emitted = 0;
        auto n = segment_tun_packet(p, scratch, [&](bytes) { ++emitted; });
        ASSERT_FALSE(n) << c.name;
        EXPECT_EQ(n.error(), OffloadError::bad_headers) << c.name;
        EXPECT_EQ(emitted, 0u) << c.name;
    }
}

TEST(TunOffload, RefusesWhatItCannotCut) {
    std::vector<std::uint8_t> scratch;
    auto none = [](bytes) {};
    Bytes tiny(5, 0);
    EXPECT_EQ(segment_tun_packet(tiny, scratch, none).error(), OffloadError::truncated);
    Bytes udp = super_packet(false, 100, 50, 0x10);
    udp[1] = VirtioNetHeader::kGsoUdp;
    EXPECT_EQ(segment_tun_packet(udp, scratch, none).error(), OffloadError::unsupported_gso);
    // The ECN bit alone names no GSO type (the kernel's virtio_net_hdr_to_skb
    // refuses it too): not a plain packet.
    Bytes ecn_only = super_packet(false, 100, 50, 0x10);
    ecn_only[1] = VirtioNetHeader::kGsoEcn;
    EXPECT_EQ(segment_tun_packet(ecn_only, scratch, none).error(), OffloadError::unsupported_gso);
    Bytes offsets = super_packet(false, 100, 0, 0x10);
    offsets[1] = 0;
    store_le16(offsets.data() + 6, 5000);
    EXPECT_EQ(segment_tun_packet(offsets, scratch, none).error(), OffloadError::bad_csum_offsets);
    Bytes not_tcp = super_packet(false, 100, 50, 0x10);
    not_tcp[VirtioNetHeader::size + 9] = 17;
    EXPECT_EQ(segment_tun_packet(not_tcp, scratch, none).error(), OffloadError::bad_headers);
    Bytes zero_mss = super_packet(true, 100, 0, 0x10);
    EXPECT_EQ(segment_tun_packet(zero_mss, scratch, none).error(), OffloadError::bad_headers);
    Bytes short_tcp = super_packet(false, 0, 50, 0x10);
    short_tcp.resize(VirtioNetHeader::size + 30);
    EXPECT_EQ(segment_tun_packet(short_tcp, scratch, none).error(), OffloadError::truncated);
    // USO: the IP header must say UDP, and the UDP header must be there.
    Bytes uso_tcp = super_packet(false, 100, 50, 0x10);
    uso_tcp[1] = VirtioNetHeader::kGsoUdpL4;
    EXPECT_EQ(segment_tun_packet(uso_tcp, scratch, none).error(), OffloadError::bad_headers);
    Bytes uso_short = uso_tcp;
    uso_short[VirtioNetHeader::size + 9] = 17;
    uso_short.resize(VirtioNetHeader::size + 24);
    EXPECT_EQ(segment_tun_packet(uso_short, scratch, none).error(), OffloadError::truncated);
    Bytes uso_no_mss = uso_tcp;
    uso_no_mss[VirtioNetHeader::size + 9] = 17;
    store_le16(uso_no_mss.data() + 4, 0);
    EXPECT_EQ(segment_tun_packet(uso_no_mss, scratch, none).error(), OffloadError::bad_headers);
}

// A packet socket with PACKET_VNET_HDR can hand the TUN a TCP super-packet
// with a gso_size of 1: 65,000 datagrams from one read. Linux's TCP never
// cuts finer than 8 bytes (8,192 segments), its UDP GSO into at most 128.
TEST(TunOffload, RefusesMoreSegmentsThanLinuxSendersMake) {
    std::vector<std::uint8_t> scratch;
    std::size_t emitted = 0;
    auto count = [&](bytes) { ++emitted; };
    const std::size_t max_payload = 65535 - 20 - 20;
    Bytes tiny_mss = super_packet(false, max_payload, 1, 0x10);
    EXPECT_EQ(segment_tun_packet(tiny_mss, scratch, count).error(), OffloadError::too_many_segments);
    Bytes tiny_mss6 = super_packet(true, max_payload, 7, 0x10);
    EXPECT_EQ(segment_tun_packet(tiny_mss6, scratch, count).error(), OffloadError::too_many_segments);
    EXPECT_EQ(emitted, 0u);
    // The finest Linux TCP cuts: 8 bytes, at most 8,192 segments.
    Bytes finest = super_packet(false, VirtioNetHeader::kMaxTcpSegments * 8, 8, 0x10);
    EXPECT_EQ(segment_tun_packet(finest, scratch, count).value(), VirtioNetHeader::kMaxTcpSegments);
    EXPECT_EQ(emitted, VirtioNetHeader::kMaxTcpSegments);
    // USO: 128 datagrams, not 129.
    Bytes uso = super_packet(false, 129 * 10, 10, 0x10);
    uso[1] = VirtioNetHeader::kGsoUdpL4;
    uso[VirtioNetHeader::size + 9] = 17;
    emitted = 0;
    EXPECT_EQ(segment_tun_packet(uso, scratch, count).error(), OffloadError::too_many_segments);
    uso.resize(uso.size() - 10 - 12);  // the UDP header is 12 bytes shorter than TCP's
    EXPECT_EQ(segment_tun_packet(uso, scratch, count).value(), VirtioNetHeader::kMaxUdpSegments);
    EXPECT_EQ(emitted, VirtioNetHeader::kMaxUdpSegments);
    EXPECT_STREQ(to_string(OffloadError::too_many_segments), "too_many_segments");
}

}  // namespace
}  // namespace ipoibd::host

namespace ipoibd::host {
namespace {

// Plain TCP/IP segments (no virtio header) as the engine hands them over.
std::vector<Bytes> segments_of(bool v6, std::size_t payload, std::uint16_t mss, std::uint8_t flags) {
    Bytes p = super_packet(v6, payload, mss, flags);
    std::vector<Bytes> out;
    std::vector<std::uint8_t> scratch;
    (void)segment_tun_packet(p, scratch, [&](bytes d) { out.emplace_back(d.begin(), d.end()); });
    return out;
}

TEST(TunCoalescer, MergesARunIntoOneSuperPacketThatSegmentsBack) {
    for (bool v6 : {false, true}) {
        const auto segs = segments_of(v6, 4500, 1000, 0x18);  // ACK, PSH on the last
        ASSERT_EQ(segs.size(), 5u);
        std::vector<Bytes> written;
        TunCoalescer c([&](bytes d) { written.emplace_back(d.begin(), d.end()); });
        for (const Bytes& s : segs) c.add(s);
        c.flush();
        ASSERT_EQ(written.size(), 1u) << "v6 " << v6;
        const VirtioNetHeader h = VirtioNetHeader::read_from(written[0].data());
        EXPECT_EQ(h.gso_type, v6 ? VirtioNetHeader::kGsoTcpV6 : VirtioNetHeader::kGsoTcpV4);
        EXPECT_EQ(h.gso_size, 1000);
        EXPECT_EQ(h.flags, VirtioNetHeader::kFlagNeedsCsum);
        // What the kernel would do with it: cut it again; the segments match.
        std::vector<Bytes> again;
        std::vector<std::uint8_t> scratch;
        Bytes copy = written[0];
        ASSERT_TRUE(segment_tun_packet(copy, scratch, [&](bytes d) { again.emplace_back(d.begin(), d.end()); }));
        ASSERT_EQ(again.size(), segs.size());
        for (std::size_t i = 0; i < segs.size(); ++i) {
            const std::size_t ip_len = v6 ? 40 : 20;
            EXPECT_EQ(Bytes(again[i].begin() + static_cast<std::ptrdiff_t>(ip_len), again[i].end()),
                      Bytes(segs[i].begin() + static_cast<std::ptrdiff_t>(ip_len), segs[i].end()))
                << "segment " << i;
            EXPECT_TRUE(tcp_checksum_ok(again[i], v6));
        }
        EXPECT_EQ(c.packets_in(), 5u);
        EXPECT_EQ(c.packets_out(), 1u);
    }
}

TEST(TunCoalescer, KeepsOrderAndLeavesWhatCannotMergeAlone) {
    auto segs = segments_of(false, 3000, 1000, 0x10);
    ASSERT_EQ(segs.size(), 3u);
    Bytes gap = segs[2];  // a sequence gap: not the continuation
    store_be32(gap.data() + 20 + 4, load_be32(gap.data() + 20 + 4) + 1);
    Bytes syn = segs[0];
    syn[20 + 13] = 0x02;
    Bytes udp(28, 0);
    udp[0] = 0x45, udp[9] = 17;
    store_be16(udp.data() + 2, 28);
    std::vector<Bytes> written;
    TunCoalescer c([&](bytes d) { written.emplace_back(d.begin(), d.end()); });
    c.add(segs[0]);
    c.add(segs[1]);  // merges
    c.add(gap);      // new run
    c.add(udp);      // alone
    c.add(syn);      // alone
    c.flush();
    ASSERT_EQ(written.size(), 4u);
    EXPECT_EQ(VirtioNetHeader::read_from(written[0].data()).gso_type, VirtioNetHeader::kGsoTcpV4);
    for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(VirtioNetHeader::read_from(written[i].data()).gso_type, 0) << i;
    EXPECT_EQ(Bytes(written[1].begin() + VirtioNetHeader::size, written[1].end()), gap);
    EXPECT_EQ(Bytes(written[2].begin() + VirtioNetHeader::size, written[2].end()), udp);
    EXPECT_EQ(Bytes(written[3].begin() + VirtioNetHeader::size, written[3].end()), syn);
}

}  // namespace
}  // namespace ipoibd::host

namespace ipoibd::host {
namespace {

// A UDP/IP datagram with a valid UDP checksum (and IPv4 header checksum).
Bytes udp_datagram(bool v6, std::uint16_t id, std::uint16_t dport, std::size_t payload, std::uint8_t fill) {
    const std::size_t ip_len = v6 ? 40 : 20;
    Bytes p(ip_len + 8 + payload, fill);
    std::uint8_t* ip = p.data();
    std::memset(ip, 0, ip_len + 8);
    if (v6) {
        ip[0] = 0x60;
        store_be16(ip + 4, static_cast<std::uint16_t>(8 + payload));
        ip[6] = 17;
        ip[7] = 64;
        ip[8] = 0x20, ip[9] = 0x01, ip[10] = 0x0d, ip[11] = 0xb8, ip[23] = 1;
        ip[24] = 0x20, ip[25] = 0x01, ip[26] = 0x0d, ip[27] = 0xb8, ip[39] = 2;
    } else {
        ip[0] = 0x45;
        store_be16(ip + 2, static_cast<std::uint16_t>(p.size()));
        store_be16(ip + 4, id);
        ip[6] = 0x40;  // DF
        ip[8] = 64;
        ip[9] = 17;
        ip[12] = 198, ip[13] = 18, ip[14] = 0, ip[15] = 1;
        ip[16] = 198, ip[17] = 18, ip[18] = 0, ip[19] = 2;
        store_be16(ip + 10, reference_checksum(Bytes(ip, ip + 20)));
    }
    std::uint8_t* udp = ip + ip_len;
    store_be16(udp, 40000);
    store_be16(udp + 2, dport);
    store_be16(udp + 4, static_cast<std::uint16_t>(8 + payload));
    Bytes pseudo;
    if (v6) {
        pseudo.assign(ip + 8, ip + 40);
    } else {
        pseudo.assign(ip + 12, ip + 20);
    }
    const std::size_t l4 = 8 + payload;
    pseudo.push_back(0);
    pseudo.push_back(17);
    pseudo.push_back(static_cast<std::uint8_t>(l4 >> 8));
    pseudo.push_back(static_cast<std::uint8_t>(l4));
    pseudo.insert(pseudo.end(), udp, udp + l4);
    const std::uint16_t c = reference_checksum(pseudo);
    store_be16(udp + 6, c == 0 ? 0xFFFF : c);
    return p;
}

TEST(TunCoalescer, MergesAUdpRunIntoOneUsoPacketThatSegmentsBack) {
    for (bool v6 : {false, true}) {
        std::vector<Bytes> dgrams;
        for (std::uint16_t i = 0; i < 3; ++i) dgrams.push_back(udp_datagram(v6, static_cast<std::uint16_t>(100 + i), 5201, 1000, static_cast<std::uint8_t>(i + 1)));
        dgrams.push_back(udp_datagram(v6, 103, 5201, 400, 9));  // shorter: ends the run
        std::vector<Bytes> written;
        TunCoalescer c([&](bytes d) { written.emplace_back(d.begin(), d.end()); }, true);
        for (const Bytes& d : dgrams) c.add(d);
        c.flush();
        ASSERT_EQ(written.size(), 1u) << "v6 " << v6;
        const std::size_t ip_len = v6 ? 40 : 20;
        const VirtioNetHeader h = VirtioNetHeader::read_from(written[0].data());
        EXPECT_EQ(h.gso_type, VirtioNetHeader::kGsoUdpL4);
        EXPECT_EQ(h.gso_size, 1000);
        EXPECT_EQ(h.flags, VirtioNetHeader::kFlagNeedsCsum);
        EXPECT_EQ(h.hdr_len, ip_len + 8);
        EXPECT_EQ(h.csum_start, ip_len);
        EXPECT_EQ(h.csum_offset, 6);
        EXPECT_EQ(written[0].size(), VirtioNetHeader::size + ip_len + 8 + 3400);
        // Cut again (as the kernel does): the very datagrams that went in.
        std::vector<Bytes> again;
        std::vector<std::uint8_t> scratch;
        Bytes copy = written[0];
        ASSERT_TRUE(segment_tun_packet(copy, scratch, [&](bytes d) { again.emplace_back(d.begin(), d.end()); }));
        ASSERT_EQ(again.size(), dgrams.size());
        for (std::size_t i = 0; i < dgrams.size(); ++i) EXPECT_EQ(again[i], dgrams[i]) << "datagram " << i << " v6 " << v6;
        EXPECT_EQ(c.packets_in(), 4u);
        EXPECT_EQ(c.packets_out(), 1u);
    }
}

TEST(TunCoalescer, UdpRunsOnlyWithUsoPerFlowAndAtMost64) {
    const Bytes d = udp_datagram(false, 1, 5201, 500, 1);
    std::vector<Bytes> written;
    // Without USO every datagram is written as it came.
    TunCoalescer plain([&](bytes b) { written.emplace_back(b.begin(), b.end()); });
    for (int i = 0; i < 3; ++i) plain.add(d);
    plain.flush();
    ASSERT_EQ(written.size(), 3u);
    for (const Bytes& w : written) EXPECT_EQ(Bytes(w.begin() + VirtioNetHeader::size, w.end()), d);
    // With it: another port is another run; a longer datagram too; 70 in a
    // row are two runs (64 + 6).
    written.clear();
    TunCoalescer c([&](bytes b) { written.emplace_back(b.begin(), b.end()); }, true);
    c.add(d);
    c.add(d);
    c.add(udp_datagram(false, 3, 5202, 500, 1));
    c.add(udp_datagram(false, 4, 5202, 600, 1));
    for (int i = 0; i < 70; ++i) c.add(d);
    c.flush();
    ASSERT_EQ(written.size(), 5u);
    EXPECT_EQ(VirtioNetHeader::read_from(written[0].data()).gso_type, VirtioNetHeader::kGsoUdpL4);
    EXPECT_EQ(VirtioNetHeader::read_from(written[1].data()).gso_type, VirtioNetHeader::kGsoNone);
    EXPECT_EQ(VirtioNetHeader::read_from(written[2].data()).gso_type, VirtioNetHeader::kGsoNone);
    EXPECT_EQ(written[3].size(), VirtioNetHeader::size + 28 + 64 * 500);
    EXPECT_EQ(written[4].size(), VirtioNetHeader::size + 28 + 6 * 500);
}

}  // namespace
}  // namespace ipoibd::host
