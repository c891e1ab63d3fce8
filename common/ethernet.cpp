#include "common/ethernet.h"

#include <cstdio>
#include <cstring>

namespace ipoibd {

std::string format_mac(const MacAddress& m) {
    char buf[18];
    std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return buf;
}

namespace {
int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
}  // namespace

std::optional<MacAddress> parse_mac(std::string_view text) {
    if (text.size() != 17) return std::nullopt;
    MacAddress m{};
    for (std::size_t i = 0; i < m.size(); ++i) {
        const std::size_t at = 3 * i;
        if (i > 0 && text[at - 1] != ':') return std::nullopt;
        const int hi = hex_digit(text[at]);
        const int lo = hex_digit(text[at + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        m[i] = static_cast<std::uint8_t>(hi << 4 | lo);
    }
    return m;
}

MacAddress multicast_mac(const IpAddress& group) {
    const std::uint8_t* a = group.data();
    if (group.is_v4()) return {0x01, 0x00, 0x5e, static_cast<std::uint8_t>(a[1] & 0x7f), a[2], a[3]};
    return {0x33, 0x33, a[12], a[13], a[14], a[15]};
}

void EthernetHeader::write_to(std::uint8_t* p) const {
    std::memcpy(p + kOffsetDestination, destination.data(), destination.size());
    std::memcpy(p + kOffsetSource, source.data(), source.size());
    store_be16(p + kOffsetType, type);
}

EthernetHeader EthernetHeader::read_from(const std::uint8_t* p) {
    EthernetHeader h;
    std::memcpy(h.destination.data(), p + kOffsetDestination, h.destination.size());
    std::memcpy(h.source.data(), p + kOffsetSource, h.source.size());
    h.type = load_be16(p + kOffsetType);
    return h;
}

const char* to_string(EthernetError e) {
    switch (e) {
        case EthernetError::truncated: return "truncated";
        case EthernetError::vlan_tagged: return "vlan_tagged";
        case EthernetError::length_field: return "length_field";
        case EthernetError::count_: break;
    }
    return "unknown";
}

expected<EthernetFrame, EthernetError> parse_ethernet(bytes frame) {
    if (frame.size() < EthernetHeader::size) return unexpected(EthernetError::truncated);
    const EthernetHeader h = EthernetHeader::read_from(frame.data());
    if (h.type == kEtherTypeVlan || h.type == kEtherTypeQinQ) return unexpected(EthernetError::vlan_tagged);
    if (h.type < kEtherTypeMinimum) return unexpected(EthernetError::length_field);
    return EthernetFrame{h, frame.subspan(EthernetHeader::size)};
}

const char* to_string(EthernetArpError e) {
    switch (e) {
        case EthernetArpError::truncated: return "truncated";
        case EthernetArpError::wrong_hardware_type: return "wrong_hardware_type";
        case EthernetArpError::wrong_protocol_type: return "wrong_protocol_type";
        case EthernetArpError::wrong_hardware_length: return "wrong_hardware_length";
        case EthernetArpError::wrong_protocol_length: return "wrong_protocol_length";
        case EthernetArpError::unsupported_op: return "unsupported_op";
        case EthernetArpError::count_: break;
    }
    return "unknown";
}

void EthernetArp::write_to(std::uint8_t* p) const {
    store_be16(p, kArpHardwareEthernet);
    store_be16(p + 2, kEtherTypeIpv4);
    p[4] = 6;
    p[5] = 4;
    store_be16(p + 6, op);
    std::memcpy(p + 8, sender_mac.data(), 6);
    std::memcpy(p + 14, sender_ip.data(), 4);
    std::memcpy(p + 18, target_mac.data(), 6);
    std::memcpy(p + 24, target_ip.data(), 4);
}

expected<EthernetArp, EthernetArpError> parse_ethernet_arp(bytes in) {
    if (in.size() < EthernetArp::size) return unexpected(EthernetArpError::truncated);
    const std::uint8_t* p = in.data();
    if (load_be16(p) != kArpHardwareEthernet) return unexpected(EthernetArpError::wrong_hardware_type);
    if (load_be16(p + 2) != kEtherTypeIpv4) return unexpected(EthernetArpError::wrong_protocol_type);
    if (p[4] != 6) return unexpected(EthernetArpError::wrong_hardware_length);
    if (p[5] != 4) return unexpected(EthernetArpError::wrong_protocol_length);
    EthernetArp a;
    a.op = load_be16(p + 6);
    if (a.op != EthernetArp::kOpRequest && a.op != EthernetArp::kOpReply)
        return unexpected(EthernetArpError::unsupported_op);
    std::memcpy(a.sender_mac.data(), p + 8, 6);
    std::memcpy(a.sender_ip.data(), p + 14, 4);
    std::memcpy(a.target_mac.data(), p + 18, 6);
    std::memcpy(a.target_ip.data(), p + 24, 4);
    return a;
}

}  // namespace ipoibd
