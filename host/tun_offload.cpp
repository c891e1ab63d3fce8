#include "host/tun_offload.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace ipoibd::host {

namespace {

constexpr std::uint8_t kProtoTcp = 6;
constexpr std::uint8_t kProtoUdp = 17;
constexpr std::uint8_t kTcpFin = 0x01;
constexpr std::uint8_t kTcpPsh = 0x08;
constexpr std::uint8_t kTcpCwr = 0x80;

// The pseudo-header sum of RFC 793 / RFC 768 / RFC 8200 8.1 for a TCP
// segment or UDP datagram of `l4_length` bytes.
std::uint32_t pseudo_header_sum(bytes ip, bool v6, std::size_t l4_length, std::uint8_t proto = kProtoTcp) {
    std::uint32_t sum = 0;
    if (v6) {
        sum = checksum_add(sum, ip.subspan(8, 32));
    } else {
        sum = checksum_add(sum, ip.subspan(12, 8));
    }
    sum += proto;
    sum += static_cast<std::uint32_t>(l4_length >> 16) + static_cast<std::uint32_t>(l4_length & 0xFFFF);
    return sum;
}

// A segment's IP header after its copy: length, and for IPv4 the
// Identification (the super-packet's + index) and header checksum.
void fix_segment_ip_header(std::uint8_t* s, bool v6, std::size_t ip_len, std::size_t total, std::uint16_t id) {
    if (v6) {
        store_be16(s + 4, static_cast<std::uint16_t>(total - 40));
        return;
    }
    store_be16(s + 2, static_cast<std::uint16_t>(total));
    store_be16(s + 4, id);
    store_be16(s + 10, 0);
    store_be16(s + 10, checksum_fold(checksum_add(0, bytes(s, ip_len))));
}

constexpr std::uint8_t kNextHopByHop = 0;
constexpr std::uint8_t kNextDestinationOptions = 60;
constexpr std::uint8_t kOptionPad1 = 0;
constexpr std::uint8_t kOptionJumboPayload = 0xC2;

// Whether the options of a Hop-by-Hop header (`options`: after its Next
// Header and length bytes) hold a Jumbo Payload option, or do not parse.
bool jumbo_or_malformed(bytes options) {
    for (std::size_t i = 0; i < options.size();) {
        if (options[i] == kOptionPad1) {
            ++i;
            continue;
        }
        if (i + 2 > options.size()) return true;
        const std::size_t end = i + 2 + std::size_t{options[i + 1]};
        if (end > options.size() || options[i] == kOptionJumboPayload) return true;
        i = end;
    }
    return false;
}

// The IPv6 header and the extension headers that every segment can carry
// as they are, up to `proto`: a Hop-by-Hop header (first only) and a
// Destination Options header, as a sender's IPV6_HOPOPTS and IPV6_DSTOPTS
// put them in. Refused: a Routing header (the transport checksum's
// pseudo-header would name its final destination, not the header's), a
// Fragment header (not cut again), AH (it covers what the cut changes), a
// Jumbo Payload option (RFC 2675: it, not Payload Length, would give each
// segment's length). Returns the headers' length.
expected<std::size_t, OffloadError> ipv6_headers(bytes pkt, std::uint8_t proto) {
    constexpr std::size_t kMaxExtensions = 2;
    if (pkt.size() < 40) return unexpected(OffloadError::bad_headers);
    std::uint8_t next = pkt[6];
    std::size_t len = 40;
    for (std::size_t n = 0; next != proto; ++n) {
        const bool allowed = (next == kNextHopByHop && n == 0) || next == kNextDestinationOptions;
        if (!allowed || n == kMaxExtensions || pkt.size() < len + 8) return unexpected(OffloadError::bad_headers);
        const std::size_t ext = (static_cast<std::size_t>(pkt[len + 1]) + 1) * 8;
        if (pkt.size() < len + ext) return unexpected(OffloadError::bad_headers);
        if (next == kNextHopByHop && jumbo_or_malformed(pkt.subspan(len + 2, ext - 2)))
            return unexpected(OffloadError::bad_headers);
        next = pkt[len];
        len += ext;
    }
    return len;
}

// The IP headers of a GSO super-packet that says it is IPv6 (`v6`) or IPv4
// and carries `proto`: their length, or why it is refused.
expected<std::size_t, OffloadError> gso_ip_header(bytes pkt, bool v6, std::uint8_t proto) {
    if (pkt.empty() || (pkt[0] >> 4) != (v6 ? 6 : 4)) return unexpected(OffloadError::bad_headers);
    if (v6) return ipv6_headers(pkt, proto);
    const std::size_t ip_len = static_cast<std::size_t>(pkt[0] & 0x0F) * 4;
    if (ip_len < 20 || pkt.size() < ip_len || pkt[9] != proto) return unexpected(OffloadError::bad_headers);
    return ip_len;
}

// How many datagrams `payload` bytes cut at `mss` make (one without payload).
std::size_t segment_count(std::size_t payload, std::size_t mss) { return payload == 0 ? 1 : (payload + mss - 1) / mss; }

// Cuts a super-packet (`headers` bytes of IP and transport header, then the
// payload) into segments of at most `mss` payload bytes, in `scratch`: each
// gets the headers, its payload and a fixed IP header; then
// fix_l4(segment, payload offset, payload bytes) completes the transport
// header and the segment is emitted. A super-packet without payload is one
// segment. Returns how many were emitted.
template <class FixL4>
std::size_t cut_segments(bytes pkt, bool v6, std::size_t ip_len, std::size_t headers, std::size_t mss,
                         std::vector<std::uint8_t>& scratch, const std::function<void(bytes)>& emit, FixL4 fix_l4) {
    const bytes payload = pkt.subspan(headers);
    const std::uint16_t id0 = v6 ? 0 : load_be16(pkt.data() + 4);
    scratch.resize(headers + mss);
    std::size_t count = 0;
    for (std::size_t off = 0; off < payload.size() || (payload.empty() && count == 0); off += mss) {
        const std::size_t n = std::min(mss, payload.size() - off);
        std::uint8_t* s = scratch.data();
        std::memcpy(s, pkt.data(), headers);
        std::memcpy(s + headers, payload.data() + off, n);
        fix_segment_ip_header(s, v6, ip_len, headers + n, static_cast<std::uint16_t>(id0 + count));
        fix_l4(s, off, n);
        emit(bytes(s, headers + n));
        ++count;
        if (payload.empty()) break;
    }
    return count;
}

// UDP GSO (UDP_L4) from the TUN: one datagram per gso_size of payload.
expected<std::size_t, OffloadError> segment_udp(const VirtioNetHeader& h, bytes pkt, std::vector<std::uint8_t>& scratch,
                                                const std::function<void(bytes)>& emit) {
    if (pkt.empty()) return unexpected(OffloadError::truncated);
    const bool v6 = (pkt[0] >> 4) == 6;
    const auto ip_len = gso_ip_header(pkt, v6, kProtoUdp);
    if (!ip_len) return unexpected(ip_len.error());
    if (pkt.size() < *ip_len + 8) return unexpected(OffloadError::truncated);
    if (h.gso_size == 0) return unexpected(OffloadError::bad_headers);
    if (segment_count(pkt.size() - *ip_len - 8, h.gso_size) > VirtioNetHeader::kMaxUdpSegments)
        return unexpected(OffloadError::too_many_segments);
    return cut_segments(pkt, v6, *ip_len, *ip_len + 8, h.gso_size, scratch, emit,
                        [&](std::uint8_t* s, std::size_t, std::size_t n) {
                            std::uint8_t* udp = s + *ip_len;
                            store_be16(udp + 4, static_cast<std::uint16_t>(8 + n));
                            store_be16(udp + 6, 0);
                            const std::uint32_t sum = pseudo_header_sum(bytes(s, *ip_len), v6, 8 + n, kProtoUdp);
                            const std::uint16_t c = checksum_fold(checksum_add(sum, bytes(udp, 8 + n)));
                            store_be16(udp + 6, c == 0 ? 0xFFFF : c);
                        });
}

}  // namespace

VirtioNetHeader VirtioNetHeader::read_from(const std::uint8_t* p) {
    return {p[0], p[1], load_le16(p + 2), load_le16(p + 4), load_le16(p + 6), load_le16(p + 8)};
}

void VirtioNetHeader::write_to(std::uint8_t* p) const {
    p[0] = flags;
    p[1] = gso_type;
    store_le16(p + 2, hdr_len);
    store_le16(p + 4, gso_size);
    store_le16(p + 6, csum_start);
    store_le16(p + 8, csum_offset);
}

const char* to_string(OffloadError e) {
    switch (e) {
    case OffloadError::truncated: return "truncated";
    case OffloadError::bad_csum_offsets: return "bad_csum_offsets";
    case OffloadError::unsupported_gso: return "unsupported_gso";
    case OffloadError::bad_headers: return "bad_headers";
    case OffloadError::too_many_segments: return "too_many_segments";
    case OffloadError::count_: break;
    }
    return "?";
}

expected<std::size_t, OffloadError> segment_tun_packet(mutable_bytes read, std::vector<std::uint8_t>& scratch,
                                                       const std::function<void(bytes)>& emit) {
    if (read.size() < VirtioNetHeader::size) return unexpected(OffloadError::truncated);
    const VirtioNetHeader h = VirtioNetHeader::read_from(read.data());
    const mutable_bytes pkt = read.subspan(VirtioNetHeader::size);
    const std::uint8_t gso = static_cast<std::uint8_t>(h.gso_type & ~VirtioNetHeader::kGsoEcn);

    if (h.gso_type == VirtioNetHeader::kGsoNone) {
        if (h.flags & VirtioNetHeader::kFlagNeedsCsum) {
            const std::size_t field = static_cast<std::size_t>(h.csum_start) + h.csum_offset;
            if (h.csum_start > pkt.size() || field + 2 > pkt.size()) return unexpected(OffloadError::bad_csum_offsets);
            // The field holds the pseudo-header sum: summing over it completes it.
            const std::uint16_t c = checksum_fold(checksum_add(0, pkt.subspan(h.csum_start)));
            store_be16(pkt.data() + field, c == 0 ? 0xFFFF : c);  // UDP's "no checksum" would be 0
        }
        emit(pkt);
        return 1;
    }
    if (gso == VirtioNetHeader::kGsoUdpL4) return segment_udp(h, pkt, scratch, emit);
    if (gso != VirtioNetHeader::kGsoTcpV4 && gso != VirtioNetHeader::kGsoTcpV6)
        return unexpected(OffloadError::unsupported_gso);
    const bool v6 = gso == VirtioNetHeader::kGsoTcpV6;
    const auto ip = gso_ip_header(pkt, v6, kProtoTcp);
    if (!ip) return unexpected(ip.error());
    const std::size_t ip_len = *ip;
    if (pkt.size() < ip_len + 20) return unexpected(OffloadError::truncated);
    const std::size_t tcp_len = static_cast<std::size_t>(pkt[ip_len + 12] >> 4) * 4;
    if (tcp_len < 20 || pkt.size() < ip_len + tcp_len) return unexpected(OffloadError::bad_headers);
    if (h.gso_size == 0) return unexpected(OffloadError::bad_headers);
    const std::size_t payload = pkt.size() - ip_len - tcp_len;
    if (segment_count(payload, h.gso_size) > VirtioNetHeader::kMaxTcpSegments)
        return unexpected(OffloadError::too_many_segments);
    const std::uint32_t seq0 = load_be32(pkt.data() + ip_len + 4);
    const std::uint8_t flags0 = pkt[ip_len + 13];
    return cut_segments(pkt, v6, ip_len, ip_len + tcp_len, h.gso_size, scratch, emit,
                        [&](std::uint8_t* s, std::size_t off, std::size_t n) {
                            std::uint8_t* tcp = s + ip_len;
                            store_be32(tcp + 4, seq0 + static_cast<std::uint32_t>(off));
                            std::uint8_t fl = flags0;
                            if (off + n < payload) fl = static_cast<std::uint8_t>(fl & ~(kTcpFin | kTcpPsh));  // not the last
                            if (off != 0) fl = static_cast<std::uint8_t>(fl & ~kTcpCwr);                      // not the first
                            tcp[13] = fl;
                            store_be16(tcp + 16, 0);
                            const std::uint32_t sum = pseudo_header_sum(bytes(s, ip_len), v6, tcp_len + n);
                            store_be16(tcp + 16, checksum_fold(checksum_add(sum, bytes(tcp, tcp_len + n))));
                        });
}

// ---------------------------------------------------------------------------
// TunCoalescer

namespace {

constexpr std::size_t kMaxSuperPacket = 65535;
constexpr std::uint8_t kTcpAck = 0x10;

// The fields of a TCP/IP packet that decide whether segments can merge.
struct TcpView {
    bool v6 = false;
    std::size_t ip_len = 0, tcp_len = 0, payload = 0;
    std::uint32_t seq = 0;
    std::uint8_t flags = 0;
};

// A datagram's IP header as the coalescer takes it: IPv4 without options
// or fragments, IPv6 without extension headers, `proto` next, lengths
// matching the datagram. Returns {v6, header length}.
std::optional<std::pair<bool, std::size_t>> mergeable_ip(bytes p, std::uint8_t proto) {
    if (p.size() < 20) return std::nullopt;
    if ((p[0] >> 4) == 4) {
        if ((p[0] & 0x0F) != 5 || p[9] != proto) return std::nullopt;          // no IPv4 options
        if ((load_be16(p.data() + 6) & 0x3FFF) != 0) return std::nullopt;      // no fragments
        if (load_be16(p.data() + 2) != p.size()) return std::nullopt;
        return std::pair{false, std::size_t{20}};
    }
    if ((p[0] >> 4) == 6) {
        if (p.size() < 40 || p[6] != proto) return std::nullopt;               // no extension headers
        if (load_be16(p.data() + 4) + 40u != p.size()) return std::nullopt;
        return std::pair{true, std::size_t{40}};
    }
    return std::nullopt;
}

std::optional<TcpView> tcp_view(bytes p) {
    TcpView v;
    const auto ip = mergeable_ip(p, kProtoTcp);
    if (!ip) return std::nullopt;
    v.v6 = ip->first;
    v.ip_len = ip->second;
    if (p.size() < v.ip_len + 20) return std::nullopt;
    v.tcp_len = static_cast<std::size_t>(p[v.ip_len + 12] >> 4) * 4;
    if (v.tcp_len < 20 || p.size() < v.ip_len + v.tcp_len) return std::nullopt;
    v.payload = p.size() - v.ip_len - v.tcp_len;
    v.seq = load_be32(p.data() + v.ip_len + 4);
    v.flags = p[v.ip_len + 13];
    // Only plain data: ACK, and PSH (which ends a run); no SYN/FIN/RST/URG/ECE/CWR.
    if ((v.flags & ~(kTcpAck | kTcpPsh)) != 0 || !(v.flags & kTcpAck) || v.payload == 0) return std::nullopt;
    return v;
}

constexpr std::size_t kMaxUdpSegments = 64;  // the kernel's UDP_MAX_SEGMENTS is 64 or more

// The fields of a UDP/IP datagram that decide whether datagrams can merge.
struct UdpView {
    bool v6 = false;
    std::size_t ip_len = 0, payload = 0;
};

std::optional<UdpView> udp_view(bytes p) {
    UdpView v;
    const auto ip = mergeable_ip(p, kProtoUdp);
    if (!ip || p.size() < ip->second + 8) return std::nullopt;
    v.v6 = ip->first;
    v.ip_len = ip->second;
    if (load_be16(p.data() + v.ip_len + 4) != p.size() - v.ip_len) return std::nullopt;  // UDP Length
    v.payload = p.size() - v.ip_len - 8;
    if (v.payload == 0) return std::nullopt;
    return v;
}

}  // namespace

TunCoalescer::TunCoalescer(Writer write, bool udp)
    : write_(std::move(write)), udp_(udp), buf_(VirtioNetHeader::size + kMaxSuperPacket) {}

bool TunCoalescer::continues(bytes p) const {
    if (!flow_ || flow_->closed) return false;
    if (flow_->udp) {
        const auto u = udp_view(p);
        if (!u || u->v6 != flow_->v6 || u->payload > flow_->mss || used_ + u->payload > buf_.size()) return false;
        const std::uint8_t* run = buf_.data() + VirtioNetHeader::size;
        if (flow_->v6) {
            if (std::memcmp(run, p.data(), 4) != 0 || std::memcmp(run + 6, p.data() + 6, 34) != 0) return false;
        } else if (run[1] != p[1] || run[6] != p[6] || run[8] != p[8] || std::memcmp(run + 12, p.data() + 12, 8) != 0) {
            return false;
        }
        return std::memcmp(run + flow_->ip_len, p.data() + flow_->ip_len, 4) == 0;  // ports
    }
    const auto v = tcp_view(p);
    if (!v || v->v6 != flow_->v6 || v->tcp_len != flow_->tcp_len || v->payload > flow_->mss) return false;
    if (v->seq != flow_->next_seq || used_ + v->payload > buf_.size()) return false;
    const std::uint8_t* run = buf_.data() + VirtioNetHeader::size;
    if (flow_->v6) {
        // Version, traffic class, flow label; next header, hop limit; addresses.
        if (std::memcmp(run, p.data(), 4) != 0 || std::memcmp(run + 6, p.data() + 6, 34) != 0) return false;
    } else {
        // TOS; flags; TTL, protocol; addresses (not length, ID, checksum).
        if (run[1] != p[1] || run[6] != p[6] || run[8] != p[8] || run[9] != p[9] ||
            std::memcmp(run + 12, p.data() + 12, 8) != 0)
            return false;
    }
    const std::uint8_t* rt = run + flow_->ip_len;
    const std::uint8_t* pt = p.data() + flow_->ip_len;
    // Ports; ACK number; data offset; window; options, byte for byte.
    return std::memcmp(rt, pt, 4) == 0 && std::memcmp(rt + 8, pt + 8, 5) == 0 && std::memcmp(rt + 14, pt + 14, 2) == 0 &&
           std::memcmp(rt + 20, pt + 20, flow_->tcp_len - 20) == 0;
}

void TunCoalescer::start(bytes p) {
    std::memset(buf_.data(), 0, VirtioNetHeader::size);
    std::memcpy(buf_.data() + VirtioNetHeader::size, p.data(), p.size());
    used_ = VirtioNetHeader::size + p.size();
    flow_.reset();
    if (const auto u = udp_ ? udp_view(p) : std::nullopt) {
        flow_ = Flow{.udp = true, .v6 = u->v6, .ip_len = u->ip_len, .tcp_len = 8, .mss = u->payload, .segments = 1};
        return;
    }
    if (const auto v = tcp_view(p)) {
        flow_ = Flow{.v6 = v->v6,
                     .ip_len = v->ip_len,
                     .tcp_len = v->tcp_len,
                     .mss = v->payload,
                     .next_seq = v->seq + static_cast<std::uint32_t>(v->payload),
                     .segments = 1,
                     .closed = (v->flags & kTcpPsh) != 0};
    }
}

void TunCoalescer::append(bytes p) {
    if (flow_->udp) {
        const std::size_t payload = p.size() - flow_->ip_len - 8;
        std::memcpy(buf_.data() + used_, p.data() + flow_->ip_len + 8, payload);
        used_ += payload;
        ++flow_->segments;
        if (payload < flow_->mss || flow_->segments == kMaxUdpSegments) flow_->closed = true;
        return;
    }
    const auto v = tcp_view(p);
    const std::size_t headers = flow_->ip_len + flow_->tcp_len;
    std::memcpy(buf_.data() + used_, p.data() + headers, v->payload);
    used_ += v->payload;
    // The run takes the newest segment's flags (PSH).
    buf_[VirtioNetHeader::size + flow_->ip_len + 13] = v->flags;
    flow_->next_seq += static_cast<std::uint32_t>(v->payload);
    ++flow_->segments;
    if (v->payload < flow_->mss || (v->flags & kTcpPsh)) flow_->closed = true;
}

void TunCoalescer::add(bytes ip_packet) {
    ++packets_in_;
    if (used_ > 0 && continues(ip_packet)) {
        append(ip_packet);
        return;
    }
    flush();
    if (ip_packet.size() > kMaxSuperPacket) return;  // cannot be: the TUN's MTU is smaller
    start(ip_packet);
}

void TunCoalescer::flush() {
    if (used_ == 0) return;
    std::uint8_t* pkt = buf_.data() + VirtioNetHeader::size;
    const std::size_t len = used_ - VirtioNetHeader::size;
    if (flow_ && flow_->segments > 1) {
        const std::size_t ip_len = flow_->ip_len, tcp_len = flow_->tcp_len;
        if (flow_->v6) {
            store_be16(pkt + 4, static_cast<std::uint16_t>(len - 40));
        } else {
            store_be16(pkt + 2, static_cast<std::uint16_t>(len));
            store_be16(pkt + 10, 0);
            store_be16(pkt + 10, checksum_fold(checksum_add(0, bytes(pkt, ip_len))));
        }
        // NEEDS_CSUM: the field holds the pseudo-header sum, not complemented.
        const std::uint8_t proto = flow_->udp ? kProtoUdp : kProtoTcp;
        const std::uint32_t pseudo = pseudo_header_sum(bytes(pkt, ip_len), flow_->v6, len - ip_len, proto);
        const std::size_t csum_offset = flow_->udp ? 6 : 16;
        if (flow_->udp) store_be16(pkt + ip_len + 4, static_cast<std::uint16_t>(len - ip_len));  // UDP Length: the whole
        store_be16(pkt + ip_len + csum_offset, static_cast<std::uint16_t>(~checksum_fold(pseudo)));
        VirtioNetHeader h;
        h.flags = VirtioNetHeader::kFlagNeedsCsum;
        h.gso_type = flow_->udp  ? VirtioNetHeader::kGsoUdpL4
                     : flow_->v6 ? VirtioNetHeader::kGsoTcpV6
                                 : VirtioNetHeader::kGsoTcpV4;
        h.hdr_len = static_cast<std::uint16_t>(ip_len + tcp_len);
        h.gso_size = static_cast<std::uint16_t>(flow_->mss);
        h.csum_start = static_cast<std::uint16_t>(ip_len);
        h.csum_offset = static_cast<std::uint16_t>(csum_offset);
        h.write_to(buf_.data());
    }
    write_(bytes(buf_.data(), used_));
    ++packets_out_;
    used_ = 0;
    flow_.reset();
}

}  // namespace ipoibd::host
