// libFuzzer target for the IPoIB codecs: the frame classifier (frame.h), the
// ARP parser (arp.h), the ND parser and the link-layer option rewriter
// (nd.h), and TAP mode's Ethernet and Ethernet-ARP codecs
// (common/ethernet.h).
//
// Input: a selector byte, then the body. selector % 7 picks the mode:
//   0 frame      decapsulate(body)
//   1 arp        parse_arp(body)
//   2 nd         parse_nd(body)
//   3 nd-repair  parse_nd(body) after a repair that lets mutations past the
//                framing: version 6, Payload Length = the bytes present,
//                Next Header ICMPv6, Hop Limit 255, correct checksum
//   4 rewrite    body = [flags][20-byte address][IPv6 packet]: flags bit 0
//                says whether to give the address, bit 1 repairs the packet
//                as in mode 3; rewrite_link_layer_option(packet, address)
//   5 too-big    body = [MTU, 2 bytes][IP datagram]: build_too_big() and
//                fragment_v4() (too_big.h)
//   6 ethernet   body = an Ethernet frame: parse_ethernet(body), and
//                parse_ethernet_arp(payload) when its type is ARP (0x0806)
//
// Invariants checked (a violation traps):
//   - every failure names a reason in range;
//   - frame: the payload is body[4..]; encapsulating it again gives the
//     body with the reserved field zeroed;
//   - arp: the body is at least 56 bytes and encode_arp() gives them back
//     byte for byte (the format is canonical: flags are kept);
//   - nd: offsets lie inside the packet; the stored checksum verifies; the
//     link-layer option is reported only for the types that define it;
//     rewriting the message with the address it carries succeeds, does not
//     grow it and parses to the same message; an NS or NA in canonical form
//     (no extension headers, Traffic Class and Flow Label 0, no reserved
//     bits, zero pad octets, nothing but its own option, no trailer) is
//     rebuilt byte for byte by build_neighbor_solicitation/advertisement;
//   - too-big: an answer is ICMP (IPv4: header and ICMP checksums verify,
//     at most 576 bytes) or ICMPv6 (at most 1280 bytes, the checksum
//     verifies), quoting the datagram's first bytes, from its destination
//     to its source, carrying the MTU; fragments are at most the MTU, their
//     header checksums verify, all but the last carry a multiple of 8
//     bytes, and put together by offset they are the datagram's data;
//   - rewrite: the result fits the output, is idempotent (rewriting it again
//     gives the same bytes), and when the input parsed, the result parses to
//     the same message with the new address in the type's option;
//   - ethernet: a frame is refused as truncated exactly when it is shorter
//     than 14 bytes; a VLAN type (0x8100, 0x88A8) or a length (< 0x0600) is
//     never accepted; a parsed header written again with write_to gives
//     body[0..14), and the payload is body[14..] (a view into it); an ARP
//     payload that parses is at least 28 bytes, and write_to gives those 28
//     bytes back byte for byte (the format is canonical for the values it
//     accepts: trailing padding is not part of it).
//
// Built with IPOIBD_FUZZ_SEEDS defined, the file is instead a program that
// writes a seed corpus into the directory given as argv[1], running each
// seed through the same checks as it goes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <vector>

#include "common/ethernet.h"
#include "ipoib/arp.h"
#include "ipoib/frame.h"
#include "ipoib/ip_packet.h"
#include "ipoib/nd.h"
#include "ipoib/too_big.h"
#include "common/inet_checksum.h"

namespace {

using namespace ipoibd;
using namespace ipoibd::ipoib;
using Bytes = std::vector<std::uint8_t>;

constexpr unsigned kModes = 7;
constexpr std::size_t kRewriteHeader = 1 + HwAddress::size;

[[noreturn]] void fail(const char* what, int line) {
    std::fprintf(stderr, "fuzz_ipoib: invariant violated at %s:%d: %s\n", __FILE__, line, what);
    std::fflush(stderr);
    __builtin_trap();
}

#define FUZZ_CHECK(cond)                    \
    do {                                    \
        if (!(cond)) fail(#cond, __LINE__); \
    } while (0)

bool same_bytes(bytes a, bytes b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// Mode 3's repair: a well-framed ICMPv6 packet with a correct checksum.
void repair(Bytes& p) {
    if (p.size() < Ipv6Header::size || p.size() - Ipv6Header::size > 0xFFFF) return;
    p[0] = static_cast<std::uint8_t>(0x60 | (p[0] & 0x0F));
    store_be16(p.data() + Ipv6Header::kOffsetPayloadLength, static_cast<std::uint16_t>(p.size() - Ipv6Header::size));
    p[Ipv6Header::kOffsetNextHeader] = kNextHeaderIcmpv6;
    p[Ipv6Header::kOffsetHopLimit] = kNdHopLimit;
    if (p.size() < Ipv6Header::size + 4) return;
    const Ipv6Header h = Ipv6Header::read_from(p.data());
    const mutable_bytes msg = mutable_bytes(p).subspan(Ipv6Header::size);
    store_be16(msg.data() + kIcmpv6OffsetChecksum, icmpv6_checksum(h.source, h.destination, msg));
}

// ---------------------------------------------------------------------------
void check_frame(const Bytes& body) {
    const auto f = decapsulate(body);
    if (!f) {
        FUZZ_CHECK(static_cast<std::size_t>(f.error()) < kFrameErrorCount);
        FUZZ_CHECK(f.error() != FrameError::short_buffer);
        FUZZ_CHECK((f.error() == FrameError::truncated) == (body.size() < EncapHeader::size));
        return;
    }
    FUZZ_CHECK(f->payload.data() == body.data() + EncapHeader::size);
    FUZZ_CHECK(f->payload.size() == body.size() - EncapHeader::size);
    Bytes again(body.size());
    const auto n = encapsulate(f->type, f->payload, again);
    FUZZ_CHECK(n.has_value() && *n == body.size());
    Bytes want = body;
    want[2] = want[3] = 0;
    FUZZ_CHECK(again == want);
}

void check_arp(const Bytes& body) {
    const auto a = parse_arp(body);
    if (!a) {
        FUZZ_CHECK(static_cast<std::size_t>(a.error()) < kArpErrorCount);
        FUZZ_CHECK(a.error() != ArpError::short_buffer && a.error() != ArpError::field_out_of_range);
        return;
    }
    FUZZ_CHECK(body.size() >= ArpPacket::size);
    Bytes out(ArpPacket::size);
    const auto n = encode_arp(*a, out);
    FUZZ_CHECK(n.has_value() && *n == ArpPacket::size);
    FUZZ_CHECK(same_bytes(out, bytes(body).first(ArpPacket::size)));
}

// ---------------------------------------------------------------------------
bool same_message(const NdMessage& a, const NdMessage& b) {
    return a.type == b.type && a.ip.source == b.ip.source && a.ip.destination == b.ip.destination &&
           a.icmp_offset == b.icmp_offset && a.target == b.target && a.destination == b.destination &&
           a.router == b.router && a.solicited == b.solicited && a.override_flag == b.override_flag;
}

std::optional<HwAddress> carried(const NdMessage& m) {
    return link_layer_option_of(m.type) == NdOptionType::source_link_layer_address ? m.source_lla : m.target_lla;
}

// The NS/NA the builders would make of `m`, if `p` is in their canonical form.
std::optional<Bytes> canonical_rebuild(const NdMessage& m, const Bytes& p) {
    if (m.type != NdType::neighbor_solicitation && m.type != NdType::neighbor_advertisement) return std::nullopt;
    const std::optional<HwAddress> lla = carried(m);
    const std::size_t option = lla ? LinkLayerAddressOption::size : 0;
    if (m.icmp_offset != Ipv6Header::size || m.ip.traffic_class != 0 || m.ip.flow_label != 0 ||
        m.icmp_length != nd_fixed_size(m.type) + option || p.size() != Ipv6Header::size + m.icmp_length)
        return std::nullopt;
    const std::uint8_t* msg = p.data() + m.icmp_offset;
    const std::uint8_t reserved_mask = m.type == NdType::neighbor_advertisement ? 0x1F : 0xFF;
    if ((msg[4] & reserved_mask) != 0 || msg[5] != 0 || msg[6] != 0 || msg[7] != 0) return std::nullopt;
    if (lla && (msg[24 + 2] != 0 || msg[24 + 3] != 0)) return std::nullopt;
    if (m.checksum == 0xFFFF) return std::nullopt;  // the other zero: we write 0x0000

    Bytes out(kNsNaPacketMaxSize);
    expected<std::size_t, NdError> n = std::size_t{0};
    if (m.type == NdType::neighbor_solicitation) {
        n = build_neighbor_solicitation({m.ip.source, m.ip.destination, m.target, lla}, out);
    } else {
        n = build_neighbor_advertisement(
            {m.ip.source, m.ip.destination, m.target, m.router, m.solicited, m.override_flag, lla}, out);
    }
    FUZZ_CHECK(n.has_value());  // parse_nd accepted it, so the builder's checks pass
    out.resize(*n);
    return out;
}

void check_nd(const Bytes& p) {
    const auto m = parse_nd(p);
    if (!m) {
        FUZZ_CHECK(static_cast<std::size_t>(m.error()) < kNdErrorCount);
        FUZZ_CHECK(m.error() != NdError::short_buffer && m.error() != NdError::field_out_of_range &&
                   m.error() != NdError::too_long);
        return;
    }
    FUZZ_CHECK(m->icmp_offset >= Ipv6Header::size);
    FUZZ_CHECK(m->icmp_offset + m->icmp_length == Ipv6Header::size + m->ip.payload_length);
    FUZZ_CHECK(Ipv6Header::size + m->ip.payload_length <= p.size());
    FUZZ_CHECK(m->icmp_length >= nd_fixed_size(m->type));
    FUZZ_CHECK(m->ip.hop_limit == kNdHopLimit);
    const bytes msg = bytes(p).subspan(m->icmp_offset, m->icmp_length);
    const std::uint16_t computed = icmpv6_checksum(m->ip.source, m->ip.destination, msg);
    FUZZ_CHECK(m->checksum == computed || (computed == 0 && m->checksum == 0xFFFF));
    if (link_layer_option_of(m->type) == NdOptionType::source_link_layer_address) {
        FUZZ_CHECK(!m->target_lla.has_value());
    } else {
        FUZZ_CHECK(!m->source_lla.has_value());
    }

    // Rewriting with the address the message already carries.
    Bytes out(p.size() + LinkLayerAddressOption::size);
    const auto n = rewrite_link_layer_option(p, carried(*m), out);
    FUZZ_CHECK(n.has_value());
    FUZZ_CHECK(*n <= Ipv6Header::size + m->ip.payload_length);
    out.resize(*n);
    const auto again = parse_nd(out);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(same_message(*m, *again));
    FUZZ_CHECK(carried(*again) == carried(*m));

    if (const auto rebuilt = canonical_rebuild(*m, p)) FUZZ_CHECK(*rebuilt == p);
}

void check_rewrite(const Bytes& body) {
    if (body.size() < kRewriteHeader) return;
    const std::uint8_t flags = body[0];
    std::optional<HwAddress> address;
    if (flags & 1) address = HwAddress::read_from(body.data() + 1);  // always in range: 24 bits read
    Bytes p(body.begin() + kRewriteHeader, body.end());
    if (flags & 2) repair(p);

    Bytes out(p.size() + LinkLayerAddressOption::size + 16);
    const auto n = rewrite_link_layer_option(p, address, out);
    if (!n) {
        FUZZ_CHECK(static_cast<std::size_t>(n.error()) < kNdErrorCount);
        FUZZ_CHECK(n.error() != NdError::short_buffer && n.error() != NdError::field_out_of_range);
        return;
    }
    FUZZ_CHECK(*n <= out.size());
    out.resize(*n);
    Bytes twice(out.size() + LinkLayerAddressOption::size);
    const auto n2 = rewrite_link_layer_option(out, address, twice);
    FUZZ_CHECK(n2.has_value());
    twice.resize(*n2);
    FUZZ_CHECK(twice == out);

    if (const auto before = parse_nd(p)) {
        const auto after = parse_nd(out);
        FUZZ_CHECK(after.has_value());
        FUZZ_CHECK(same_message(*before, *after));
        FUZZ_CHECK(carried(*after) == address);
    }
}

void check_too_big(const Bytes& body) {
    if (body.size() < 2) return;
    const std::uint32_t mtu = load_be16(body.data());
    const bytes packet(body.data() + 2, body.size() - 2);
    Bytes out;
    if (const auto n = build_too_big(packet, mtu, out)) {
        FUZZ_CHECK(*n == out.size());
        const auto in = inspect_ip_packet(packet);
        FUZZ_CHECK(in.has_value());
        const auto info = inspect_ip_packet(out);
        FUZZ_CHECK(info.has_value() && info->family == in->family);
        FUZZ_CHECK(info->source.bytes == in->destination.bytes && info->destination.bytes == in->source.bytes);
        const std::size_t quoted = std::min(in->length, out.size() - info->upper_offset - 8);
        FUZZ_CHECK(same_bytes(bytes(out.data() + info->upper_offset + 8, quoted), packet.first(quoted)));
        if (in->family == IpFamily::ipv4) {
            FUZZ_CHECK(out.size() <= kIcmpV4QuoteLimit);
            FUZZ_CHECK(internet_checksum(bytes(out.data(), 20)) == 0);
            FUZZ_CHECK(internet_checksum(bytes(out.data() + 20, out.size() - 20)) == 0);
            FUZZ_CHECK(out[20] == 3 && out[21] == 4 && load_be16(out.data() + 26) == mtu);
        } else {
            FUZZ_CHECK(out.size() <= kIcmpV6QuoteLimit);
            FUZZ_CHECK(out[40] == 2 && load_be32(out.data() + 44) == mtu);
            Ipv6Address src{}, dst{};
            std::memcpy(src.data(), out.data() + 8, 16);
            std::memcpy(dst.data(), out.data() + 24, 16);
            FUZZ_CHECK(icmpv6_checksum(src, dst, bytes(out.data() + 40, out.size() - 40)) == load_be16(out.data() + 42));
        }
    }
    std::vector<Bytes> fragments;
    const std::size_t count = fragment_v4(packet, mtu, [&](bytes f) { fragments.emplace_back(f.begin(), f.end()); });
    FUZZ_CHECK(count == fragments.size());
    if (count == 0) return;
    const auto in = inspect_ip_packet(packet);
    FUZZ_CHECK(in.has_value() && may_fragment_v4(packet));
    const std::size_t ihl = static_cast<std::size_t>(packet[0] & 0x0F) * 4;
    const std::size_t base = static_cast<std::size_t>(load_be16(packet.data() + 6) & 0x1FFF) * 8;
    Bytes data(in->length - ihl);
    std::size_t covered = 0;
    for (std::size_t i = 0; i < fragments.size(); ++i) {
        const Bytes& f = fragments[i];
        FUZZ_CHECK(f.size() <= mtu);
        const std::size_t h = static_cast<std::size_t>(f[0] & 0x0F) * 4;
        FUZZ_CHECK(h >= 20 && h <= f.size() && load_be16(f.data() + 2) == f.size());
        FUZZ_CHECK(internet_checksum(bytes(f.data(), h)) == 0);
        const std::size_t offset = static_cast<std::size_t>(load_be16(f.data() + 6) & 0x1FFF) * 8;
        FUZZ_CHECK(offset >= base && offset - base + (f.size() - h) <= data.size());
        if (i + 1 < fragments.size()) FUZZ_CHECK((f.size() - h) % 8 == 0);
        std::memcpy(data.data() + (offset - base), f.data() + h, f.size() - h);
        covered += f.size() - h;
    }
    FUZZ_CHECK(covered == data.size());
    FUZZ_CHECK(same_bytes(data, packet.subspan(ihl, in->length - ihl)));
}

// ---------------------------------------------------------------------------
void check_ethernet(const Bytes& body) {
    const auto f = parse_ethernet(body);
    if (!f) {
        FUZZ_CHECK(static_cast<std::size_t>(f.error()) < kEthernetErrorCount);
        FUZZ_CHECK((f.error() == EthernetError::truncated) == (body.size() < EthernetHeader::size));
        if (f.error() != EthernetError::truncated) {
            const std::uint16_t type = load_be16(body.data() + EthernetHeader::kOffsetType);
            FUZZ_CHECK((f.error() == EthernetError::vlan_tagged) == (type == kEtherTypeVlan || type == kEtherTypeQinQ));
            FUZZ_CHECK((f.error() == EthernetError::length_field) == (type < kEtherTypeMinimum));
        }
        return;
    }
    FUZZ_CHECK(body.size() >= EthernetHeader::size);
    FUZZ_CHECK(f->header.type != kEtherTypeVlan && f->header.type != kEtherTypeQinQ);
    FUZZ_CHECK(f->header.type >= kEtherTypeMinimum);
    std::uint8_t header[EthernetHeader::size];
    f->header.write_to(header);
    FUZZ_CHECK(same_bytes(bytes(header, EthernetHeader::size), bytes(body).first(EthernetHeader::size)));
    FUZZ_CHECK(EthernetHeader::read_from(header) == f->header);
    FUZZ_CHECK(f->payload.data() == body.data() + EthernetHeader::size);
    FUZZ_CHECK(same_bytes(f->payload, bytes(body).subspan(EthernetHeader::size)));
    if (f->header.type != kEtherTypeArp) return;

    const auto a = parse_ethernet_arp(f->payload);
    if (!a) {
        FUZZ_CHECK(static_cast<std::size_t>(a.error()) < kEthernetArpErrorCount);
        FUZZ_CHECK((a.error() == EthernetArpError::truncated) == (f->payload.size() < EthernetArp::size));
        return;
    }
    FUZZ_CHECK(f->payload.size() >= EthernetArp::size);
    FUZZ_CHECK(a->op == EthernetArp::kOpRequest || a->op == EthernetArp::kOpReply);
    std::uint8_t arp[EthernetArp::size];
    a->write_to(arp);
    FUZZ_CHECK(same_bytes(bytes(arp, EthernetArp::size), f->payload.first(EthernetArp::size)));
    const auto again = parse_ethernet_arp(bytes(arp, EthernetArp::size));
    FUZZ_CHECK(again.has_value() && *again == *a);
}

void run_one(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return;
    const unsigned mode = data[0] % kModes;
    // An exact-size heap copy, so ASan's redzones sit right at both ends.
    Bytes body(data + 1, data + size);
    switch (mode) {
        case 0: check_frame(body); break;
        case 1: check_arp(body); break;
        case 2: check_nd(body); break;
        case 3: repair(body); check_nd(body); break;
        case 4: check_rewrite(body); break;
        case 5: check_too_big(body); break;
        case 6: check_ethernet(body); break;
    }
}

}  // namespace

#ifndef IPOIBD_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    run_one(data, size);
    return 0;
}

#else  // IPOIBD_FUZZ_SEEDS: the seed corpus writer

#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

int g_count = 0;

void add(const fs::path& dir, const std::string& name, std::uint8_t mode, const Bytes& body) {
    Bytes data{mode};
    data.insert(data.end(), body.begin(), body.end());
    std::ofstream out(dir / (name + ".bin"), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!out) {
        std::fprintf(stderr, "fuzz_ipoib_seeds: cannot write %s\n", name.c_str());
        std::exit(1);
    }
    run_one(data.data(), data.size());  // every seed meets the invariants
    ++g_count;
}

Bytes ns_bytes(const NeighborSolicitation& ns) {
    Bytes out(kNsNaPacketMaxSize);
    out.resize(*build_neighbor_solicitation(ns, out));
    return out;
}
Bytes na_bytes(const NeighborAdvertisement& na) {
    Bytes out(kNsNaPacketMaxSize);
    out.resize(*build_neighbor_advertisement(na, out));
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: fuzz_ipoib_seeds SEED_DIR\n");
        return 2;
    }
    const fs::path dir = argv[1];
    fs::create_directories(dir);

    const Ipv6Address ip_a{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x1e, 0x67, 0x03, 0x00, 0x29, 0x47, 0x6f};
    const Ipv6Address ip_b{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x02, 0xc9, 0x03, 0x00, 0x57, 0xe7, 0xfd};
    HwAddress hw_a{.flags = 0, .qpn = 0x48, .gid = {}};
    hw_a.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x1e, 0x67, 0x03, 0x00, 0x29, 0x47, 0x6f};
    HwAddress hw_b{.flags = 0x80, .qpn = 0x404, .gid = {}};
    hw_b.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x57, 0xe7, 0xfd};
    const Ipv4Address v4_a{198, 18, 0, 2};
    const Ipv4Address v4_b{198, 18, 0, 1};

    // ARP, bare (mode 1) and framed (mode 0).
    const ArpPacket request = make_arp_request(hw_b, v4_b, v4_a);
    const ArpPacket arps[] = {request, make_arp_reply(request, hw_a), make_gratuitous_arp(hw_a, v4_a)};
    for (std::size_t i = 0; i < std::size(arps); ++i) {
        Bytes a(ArpPacket::size);
        (void)encode_arp(arps[i], a);
        add(dir, "arp_" + std::to_string(i), 1, a);
        Bytes framed(EncapHeader::size + a.size());
        (void)encapsulate(EtherType::arp, a, framed);
        add(dir, "frame_arp_" + std::to_string(i), 0, framed);
    }

    // ND, as built (modes 2 and 3) and framed (mode 0).
    const NdMessage dad_ns = *parse_nd(ns_bytes(make_dad_solicitation(ip_a)));
    const Bytes nds[] = {
        ns_bytes(make_resolution_solicitation(ip_a, hw_a, ip_b)),
        ns_bytes(make_unicast_solicitation(ip_a, hw_a, ip_b)),
        ns_bytes(make_dad_solicitation(ip_a)),
        na_bytes(make_solicited_advertisement(*parse_nd(ns_bytes(make_resolution_solicitation(ip_a, hw_a, ip_b))), hw_b, false)),
        na_bytes(make_solicited_advertisement(dad_ns, hw_b, true)),
        na_bytes(make_unsolicited_advertisement(ip_a, hw_a, false)),
    };
    for (std::size_t i = 0; i < std::size(nds); ++i) {
        add(dir, "nd_" + std::to_string(i), 2, nds[i]);
        add(dir, "nd_repair_" + std::to_string(i), 3, nds[i]);
        Bytes framed(EncapHeader::size + nds[i].size());
        (void)encapsulate(EtherType::ipv6, nds[i], framed);
        add(dir, "frame_nd_" + std::to_string(i), 0, framed);
        Bytes rw{3};
        Bytes addr(HwAddress::size);
        hw_b.write_to(addr.data());
        rw.insert(rw.end(), addr.begin(), addr.end());
        rw.insert(rw.end(), nds[i].begin(), nds[i].end());
        add(dir, "rewrite_" + std::to_string(i), 4, rw);
    }

    // RA with prefix, source and MTU options; Redirect with target and
    // redirected-header options (mode 3 fixes their checksums).
    Bytes ra(40, 0);
    ra[0] = 0x60;
    std::memcpy(ra.data() + 8, ip_b.data(), 16);
    ra[24] = 0xff; ra[25] = 0x02; ra[39] = 0x01;
    const Bytes ra_msg = {134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0,
                          3, 4, 64, 0xC0, 0, 0, 0x0E, 0x10, 0, 0, 0x07, 0x08, 0, 0, 0, 0,
                          0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                          1, 3, 0, 0, 0x80, 0, 0x04, 0x04, 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
                          0, 0x02, 0xc9, 0x03, 0, 0x57, 0xe7, 0xfd,
                          5, 1, 0, 0, 0, 0, 0x07, 0xFC};
    ra.insert(ra.end(), ra_msg.begin(), ra_msg.end());
    add(dir, "ra", 3, ra);
    Bytes redirect(40, 0);
    redirect[0] = 0x60;
    std::memcpy(redirect.data() + 8, ip_b.data(), 16);
    std::memcpy(redirect.data() + 24, ip_a.data(), 16);
    Bytes rd_msg = {137, 0, 0, 0, 0, 0, 0, 0};
    rd_msg.insert(rd_msg.end(), ip_b.begin(), ip_b.end());
    const Bytes dst{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99};
    rd_msg.insert(rd_msg.end(), dst.begin(), dst.end());
    const Bytes tlla = {2, 3, 0, 0, 0, 0, 0, 0x48, 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
                        0, 0x1e, 0x67, 0x03, 0, 0x29, 0x47, 0x6f,
                        4, 1, 0, 0, 0, 0, 0, 0};
    rd_msg.insert(rd_msg.end(), tlla.begin(), tlla.end());
    redirect.insert(redirect.end(), rd_msg.begin(), rd_msg.end());
    add(dir, "redirect", 3, redirect);

    // Too big (mode 5): an IPv4 datagram of 3000 bytes with and without DF
    // (one with a copied option), an IPv6 one, each with MTU 1500.
    for (int variant = 0; variant < 4; ++variant) {
        const bool v6 = variant == 3, options = variant == 2;
        const std::size_t header = v6 ? 40 : (options ? 28 : 20);
        Bytes d(2 + header + 2980, 0);
        store_be16(d.data(), 1500);
        std::uint8_t* ip = d.data() + 2;
        if (v6) {
            ip[0] = 0x60;
            store_be16(ip + 4, 2980);
            ip[6] = 17;
            ip[7] = 64;
            std::memcpy(ip + 8, ip_a.data(), 16);
            std::memcpy(ip + 24, ip_b.data(), 16);
        } else {
            ip[0] = static_cast<std::uint8_t>(0x40 | (header / 4));
            store_be16(ip + 2, static_cast<std::uint16_t>(header + 2980));
            store_be16(ip + 6, variant == 0 ? 0x4000 : 0);
            ip[8] = 64;
            ip[9] = 17;
            std::memcpy(ip + 12, v4_b.data(), 4);
            std::memcpy(ip + 16, v4_a.data(), 4);
            if (options) {
                const std::uint8_t opt[8] = {0x82, 4, 1, 2, 0x07, 3, 4, 0};
                std::memcpy(ip + 20, opt, 8);
            }
            store_be16(ip + 10, internet_checksum(bytes(ip, header)));
        }
        for (std::size_t i = header; i < header + 2980; ++i) ip[i] = static_cast<std::uint8_t>(i);
        add(dir, "too_big_" + std::to_string(variant), 5, d);
    }

    // Ethernet (mode 6): the kernel's ARP request as a TAP device gives it
    // (42 bytes), the reply padded to a minimum-size frame (60 bytes), an
    // IPv4 frame, and a VLAN-tagged one (refused).
    const MacAddress mac_asker{0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
    const MacAddress mac_synthetic{0x02, 0x03, 0x00, 0x29, 0x47, 0x6f};
    auto ethernet_frame = [](const MacAddress& to, const MacAddress& from, std::uint16_t type, const Bytes& payload) {
        Bytes f(EthernetHeader::size);
        EthernetHeader{.destination = to, .source = from, .type = type}.write_to(f.data());
        f.insert(f.end(), payload.begin(), payload.end());
        return f;
    };
    const EthernetArp ether_request{.op = EthernetArp::kOpRequest,
                                    .sender_mac = mac_asker,
                                    .sender_ip = v4_b,
                                    .target_mac = {},
                                    .target_ip = v4_a};
    const EthernetArp ether_reply{.op = EthernetArp::kOpReply,
                                  .sender_mac = mac_synthetic,
                                  .sender_ip = v4_a,
                                  .target_mac = mac_asker,
                                  .target_ip = v4_b};
    Bytes arp_request(EthernetArp::size);
    ether_request.write_to(arp_request.data());
    Bytes arp_reply(46, 0);
    ether_reply.write_to(arp_reply.data());
    add(dir, "ethernet_arp_request", 6, ethernet_frame(kMacBroadcast, mac_asker, kEtherTypeArp, arp_request));
    add(dir, "ethernet_arp_reply", 6, ethernet_frame(mac_asker, mac_synthetic, kEtherTypeArp, arp_reply));
    const Bytes ipv4_header = {0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2};
    add(dir, "ethernet_ipv4", 6, ethernet_frame(mac_synthetic, mac_asker, kEtherTypeIpv4, ipv4_header));
    Bytes tagged = {0x00, 0x05, 0x08, 0x06};  // VID 5, then the ARP request
    tagged.insert(tagged.end(), arp_request.begin(), arp_request.end());
    add(dir, "ethernet_vlan", 6, ethernet_frame(kMacBroadcast, mac_asker, kEtherTypeVlan, tagged));

    std::printf("fuzz_ipoib_seeds: wrote %d seeds to %s\n", g_count, dir.c_str());
    return 0;
}

#endif
