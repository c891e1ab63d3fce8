#include "ipoib/too_big.h"

#include <algorithm>
#include <cstring>

#include "common/inet_checksum.h"
#include "ipoib/ip_packet.h"
#include "ipoib/nd.h"

namespace ipoibd::ipoib {

namespace {

constexpr std::uint8_t kProtocolIcmp = 1;
constexpr std::uint8_t kIcmpDestinationUnreachable = 3;
constexpr std::uint8_t kIcmpFragmentationNeeded = 4;
constexpr std::uint8_t kIcmpv6PacketTooBig = 2;
constexpr std::uint16_t kFlagDf = 0x4000;
constexpr std::uint16_t kFlagMf = 0x2000;
constexpr std::uint16_t kOffsetMask = 0x1FFF;
constexpr std::uint8_t kDefaultTtl = 64;

// ICMPv4 types that are errors (RFC 792, RFC 1812 4.3.2.7: never answer one).
bool is_icmp_error(std::uint8_t type) { return type == 3 || type == 4 || type == 5 || type == 11 || type == 12; }

bool v4_answerable(bytes packet, const IpPacketInfo& info) {
    if (!info.first_fragment) return false;
    const std::uint8_t s0 = info.source.bytes[0];
    if (info.source.bytes[0] == 0 || (s0 >= 224) || s0 == 127) return false;  // unspecified, multicast/class E, loopback
    if (info.protocol == kProtocolIcmp && info.upper_offset < packet.size() && is_icmp_error(packet[info.upper_offset]))
        return false;
    return true;
}

bool v6_answerable(bytes packet, const IpPacketInfo& info) {
    if (info.source.bytes == Ipv6Address{} || info.source.bytes[0] == 0xFF) return false;
    if (info.protocol == kNextHeaderIcmpv6 && info.upper_offset < packet.size() && packet[info.upper_offset] < 128)
        return false;  // an ICMPv6 error (RFC 4443 2.4 (e))
    return true;
}

}  // namespace

std::optional<std::size_t> build_too_big(bytes packet, std::uint32_t mtu, std::vector<std::uint8_t>& out) {
    auto info = inspect_ip_packet(packet);
    if (!info) return std::nullopt;
    packet = packet.first(info->length);
    if (is_multicast(info->destination)) return std::nullopt;  // no unicast source to speak as
    if (info->family == IpFamily::ipv4) {
        if (!v4_answerable(packet, *info)) return std::nullopt;
        const std::size_t quote = std::min(packet.size(), kIcmpV4QuoteLimit - 20 - 8);
        const std::size_t total = 20 + 8 + quote;
        out.assign(total, 0);
        std::uint8_t* ip = out.data();
        ip[0] = 0x45;
        store_be16(ip + 2, static_cast<std::uint16_t>(total));
        ip[8] = kDefaultTtl;
        ip[9] = kProtocolIcmp;
        std::memcpy(ip + 12, info->destination.bytes.data(), 4);
        std::memcpy(ip + 16, info->source.bytes.data(), 4);
        store_be16(ip + 10, internet_checksum(bytes(ip, 20)));
        std::uint8_t* icmp = ip + 20;
        icmp[0] = kIcmpDestinationUnreachable;
        icmp[1] = kIcmpFragmentationNeeded;
        store_be16(icmp + 6, static_cast<std::uint16_t>(std::min<std::uint32_t>(mtu, 0xFFFF)));
        std::memcpy(icmp + 8, packet.data(), quote);
        store_be16(icmp + 2, internet_checksum(bytes(icmp, 8 + quote)));
        return total;
    }
    if (!v6_answerable(packet, *info)) return std::nullopt;
    const std::size_t quote = std::min(packet.size(), kIcmpV6QuoteLimit - 40 - 8);
    const std::size_t total = 40 + 8 + quote;
    out.assign(total, 0);
    std::uint8_t* ip = out.data();
    ip[0] = 0x60;
    store_be16(ip + 4, static_cast<std::uint16_t>(8 + quote));
    ip[6] = kNextHeaderIcmpv6;
    ip[7] = kDefaultTtl;
    std::memcpy(ip + 8, info->destination.bytes.data(), 16);
    std::memcpy(ip + 24, info->source.bytes.data(), 16);
    std::uint8_t* icmp = ip + 40;
    icmp[0] = kIcmpv6PacketTooBig;
    store_be32(icmp + 4, mtu);
    std::memcpy(icmp + 8, packet.data(), quote);
    store_be16(icmp + 2, icmpv6_checksum(info->destination.bytes, info->source.bytes, bytes(icmp, 8 + quote)));
    return total;
}

bool may_fragment_v4(bytes packet) {
    return packet.size() >= kIpv4MinHeaderSize && (packet[0] >> 4) == 4 && !(load_be16(packet.data() + 6) & kFlagDf);
}

std::size_t fragment_v4(bytes packet, std::uint32_t mtu, const std::function<void(bytes)>& emit) {
    auto info = inspect_ip_packet(packet);
    if (!info || info->family != IpFamily::ipv4 || !may_fragment_v4(packet)) return 0;
    packet = packet.first(info->length);
    const std::size_t ihl = static_cast<std::size_t>(packet[0] & 0x0F) * 4;
    // Later fragments carry only the options whose copied flag (0x80) is set.
    std::vector<std::uint8_t> later_options;
    for (std::size_t i = kIpv4MinHeaderSize; i < ihl;) {
        const std::uint8_t type = packet[i];
        if (type == 0) break;  // end of options
        if (type == 1) {       // no-operation
            ++i;
            continue;
        }
        if (i + 1 >= ihl || packet[i + 1] < 2 || i + packet[i + 1] > ihl) return 0;  // malformed options
        if (type & 0x80) later_options.insert(later_options.end(), packet.begin() + static_cast<std::ptrdiff_t>(i),
                                              packet.begin() + static_cast<std::ptrdiff_t>(i + packet[i + 1]));
        i += packet[i + 1];
    }
    while (later_options.size() % 4) later_options.push_back(0);
    const std::size_t later_ihl = kIpv4MinHeaderSize + later_options.size();
    if (mtu < ihl + 8 || mtu < later_ihl + 8) return 0;

    const std::uint16_t flags_offset = load_be16(packet.data() + 6);
    const std::size_t base_offset = static_cast<std::size_t>(flags_offset & kOffsetMask) * 8;
    const bool more_after = flags_offset & kFlagMf;
    const bytes data = packet.subspan(ihl);
    // A fragment whose data would end past what the 13-bit offset can
    // name (a datagram over 65535 bytes once reassembled) is not split:
    // the offsets would spill into the flags.
    if (base_offset + data.size() > (std::size_t{kOffsetMask} + 1) * 8) return 0;
    std::vector<std::uint8_t> frag;
    std::size_t pos = 0, count = 0;
    while (pos < data.size()) {
        const std::size_t h = pos == 0 ? ihl : later_ihl;
        std::size_t chunk = (mtu - h) / 8 * 8;
        const bool last = pos + chunk >= data.size();
        if (last) chunk = data.size() - pos;
        frag.assign(h + chunk, 0);
        std::memcpy(frag.data(), packet.data(), kIpv4MinHeaderSize);
        if (pos == 0) {
            std::memcpy(frag.data() + kIpv4MinHeaderSize, packet.data() + kIpv4MinHeaderSize, ihl - kIpv4MinHeaderSize);
        } else if (!later_options.empty()) {
            std::memcpy(frag.data() + kIpv4MinHeaderSize, later_options.data(), later_options.size());
        }
        frag[0] = static_cast<std::uint8_t>(0x40 | (h / 4));
        store_be16(frag.data() + 2, static_cast<std::uint16_t>(frag.size()));
        const std::uint16_t off = static_cast<std::uint16_t>((base_offset + pos) / 8);
        store_be16(frag.data() + 6, static_cast<std::uint16_t>(off | ((!last || more_after) ? kFlagMf : 0)));
        store_be16(frag.data() + 10, 0);
        store_be16(frag.data() + 10, internet_checksum(bytes(frag.data(), h)));
        std::memcpy(frag.data() + h, data.data() + pos, chunk);
        emit(frag);
        ++count;
        pos += chunk;
    }
    return count;
}

}  // namespace ipoibd::ipoib
