#include "ipoib/ip_packet.h"

#include <algorithm>

#include "ipoib/nd.h"

namespace ipoibd::ipoib {

const char* to_string(IpPacketError e) {
    switch (e) {
    case IpPacketError::empty: return "empty";
    case IpPacketError::bad_version: return "bad_version";
    case IpPacketError::truncated_header: return "truncated_header";
    case IpPacketError::bad_header_length: return "bad_header_length";
    case IpPacketError::bad_total_length: return "bad_total_length";
    case IpPacketError::truncated_extension: return "truncated_extension";
    case IpPacketError::count_: break;
    }
    return "?";
}

namespace {

expected<IpPacketInfo, IpPacketError> inspect_ipv4(bytes p) {
    if (p.size() < kIpv4MinHeaderSize) return unexpected(IpPacketError::truncated_header);
    const std::size_t ihl = static_cast<std::size_t>(p[0] & 0x0F) * 4;
    if (ihl < kIpv4MinHeaderSize) return unexpected(IpPacketError::bad_header_length);
    if (p.size() < ihl) return unexpected(IpPacketError::truncated_header);
    const std::size_t total = load_be16(p.data() + 2);
    if (total < ihl || total > p.size()) return unexpected(IpPacketError::bad_total_length);
    IpPacketInfo info;
    info.family = IpFamily::ipv4;
    Ipv4Address src{}, dst{};
    std::copy_n(p.data() + 12, 4, src.begin());
    std::copy_n(p.data() + 16, 4, dst.begin());
    info.source = IpAddress::v4(src);
    info.destination = IpAddress::v4(dst);
    info.protocol = p[9];
    info.upper_offset = ihl;
    info.length = total;
    info.first_fragment = (load_be16(p.data() + 6) & 0x1FFF) == 0;
    return info;
}

expected<IpPacketInfo, IpPacketError> inspect_ipv6(bytes p) {
    if (p.size() < Ipv6Header::size) return unexpected(IpPacketError::truncated_header);
    const Ipv6Header h = Ipv6Header::read_from(p.data());
    const std::size_t total = Ipv6Header::size + h.payload_length;
    if (total > p.size()) return unexpected(IpPacketError::bad_total_length);
    IpPacketInfo info;
    info.family = IpFamily::ipv6;
    info.source = IpAddress::v6(h.source);
    info.destination = IpAddress::v6(h.destination);
    info.length = total;
    std::uint8_t next = h.next_header;
    std::size_t offset = Ipv6Header::size;
    for (std::size_t n = 0; n < kMaxExtensionHeaders; ++n) {
        if (next != kNextHeaderHopByHop && next != kNextHeaderRouting && next != kNextHeaderDestinationOptions)
            break;
        if (offset + 2 > total) return unexpected(IpPacketError::truncated_extension);
        const std::size_t len = (static_cast<std::size_t>(p[offset + 1]) + 1) * 8;
        if (offset + len > total) return unexpected(IpPacketError::truncated_extension);
        next = p[offset];
        offset += len;
    }
    info.protocol = next;
    info.upper_offset = offset;
    return info;
}

// IGMPv3 / MLDv2 group records: type, aux data length (32-bit words),
// number of sources, the group, the sources, the aux data.
void read_records(bytes body, std::size_t count, IpFamily family, std::vector<GroupChange>& out) {
    const std::size_t addr_size = family == IpFamily::ipv4 ? 4 : 16;
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) {
        if (off + 4 + addr_size > body.size()) return;
        const std::uint8_t type = body[off];
        const std::size_t aux = static_cast<std::size_t>(body[off + 1]) * 4;
        const std::size_t sources = load_be16(body.data() + off + 2);
        IpAddress group;
        group.family = family;
        std::copy_n(body.data() + off + 4, addr_size, group.bytes.begin());
        const std::size_t record_size = 4 + addr_size + sources * addr_size + aux;
        if (off + record_size > body.size()) return;
        off += record_size;
        if (!is_multicast(group)) continue;
        // EXCLUDE mode (even with an empty source list) means "receive"; an
        // INCLUDE with sources too. INCLUDE of nothing is a leave. ALLOW
        // names sources added (to INCLUDE) or no longer excluded: receive;
        // of none it changes nothing (and is never sent, RFC 3376 5.1).
        if (type == kRecordModeIsExclude || type == kRecordChangeToExclude)
            out.push_back({group, true});
        else if (type == kRecordModeIsInclude || type == kRecordChangeToInclude)
            out.push_back({group, sources > 0});
        else if (type == kRecordAllowNewSources && sources > 0)
            out.push_back({group, true});
    }
}

}  // namespace

expected<IpPacketInfo, IpPacketError> inspect_ip_packet(bytes packet) {
    if (packet.empty()) return unexpected(IpPacketError::empty);
    switch (packet[0] >> 4) {
    case 4: return inspect_ipv4(packet);
    case 6: return inspect_ipv6(packet);
    default: return unexpected(IpPacketError::bad_version);
    }
}

std::vector<GroupChange> host_group_changes(bytes packet, const IpPacketInfo& info) {
    std::vector<GroupChange> out;
    if (info.upper_offset >= info.length || !info.first_fragment) return out;
    const bytes body = packet.subspan(info.upper_offset, info.length - info.upper_offset);
    if (info.family == IpFamily::ipv4) {
        if (info.protocol != kIpProtocolIgmp || body.size() < 8) return out;
        const std::uint8_t type = body[0];
        if (type == kIgmpV1Report || type == kIgmpV2Report || type == kIgmpV2Leave) {
            IpAddress group;
            group.family = IpFamily::ipv4;
            std::copy_n(body.data() + 4, 4, group.bytes.begin());
            if (is_multicast(group)) out.push_back({group, type != kIgmpV2Leave});
        } else if (type == kIgmpV3Report) {
            read_records(body.subspan(8), load_be16(body.data() + 6), IpFamily::ipv4, out);
        }
        return out;
    }
    if (info.protocol != kNextHeaderIcmpv6 || body.size() < 8) return out;
    const std::uint8_t type = body[0];
    if (type == kMldV1Report || type == kMldV1Done) {
        if (body.size() < 24) return out;
        IpAddress group;
        group.family = IpFamily::ipv6;
        std::copy_n(body.data() + 8, 16, group.bytes.begin());
        if (is_multicast(group)) out.push_back({group, type == kMldV1Report});
    } else if (type == kMldV2Report) {
        read_records(body.subspan(8), load_be16(body.data() + 6), IpFamily::ipv6, out);
    }
    return out;
}

}  // namespace ipoibd::ipoib
