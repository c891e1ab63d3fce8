#include "ipoib/arp.h"

#include <cstring>

namespace ipoibd::ipoib {

const char* to_string(ArpError e) {
    switch (e) {
        case ArpError::truncated: return "truncated";
        case ArpError::wrong_hardware_type: return "wrong_hardware_type";
        case ArpError::wrong_protocol_type: return "wrong_protocol_type";
        case ArpError::wrong_hardware_length: return "wrong_hardware_length";
        case ArpError::wrong_protocol_length: return "wrong_protocol_length";
        case ArpError::unsupported_op: return "unsupported_op";
        case ArpError::short_buffer: return "short_buffer";
        case ArpError::field_out_of_range: return "field_out_of_range";
        case ArpError::count_: break;
    }
    return "unknown";
}

void ArpPacket::write_to(std::uint8_t* p) const {
    store_be16(p, kArpHardwareInfiniband);
    store_be16(p + 2, kArpProtocolIpv4);
    p[4] = kArpHardwareLength;
    p[5] = kArpProtocolLength;
    store_be16(p + kOffsetOp, static_cast<std::uint16_t>(op));
    sender_hw.write_to(p + kOffsetSenderHw);
    std::memcpy(p + kOffsetSenderIp, sender_ip.data(), sender_ip.size());
    target_hw.write_to(p + kOffsetTargetHw);
    std::memcpy(p + kOffsetTargetIp, target_ip.data(), target_ip.size());
}

expected<ArpPacket, ArpError> parse_arp(bytes in) {
    // 1. the fixed header, then its fields, before any length is trusted
    if (in.size() < ArpPacket::kFixedSize) return unexpected(ArpError::truncated);
    const std::uint8_t* p = in.data();
    if (load_be16(p) != kArpHardwareInfiniband) return unexpected(ArpError::wrong_hardware_type);
    if (load_be16(p + 2) != kArpProtocolIpv4) return unexpected(ArpError::wrong_protocol_type);
    if (p[4] != kArpHardwareLength) return unexpected(ArpError::wrong_hardware_length);
    if (p[5] != kArpProtocolLength) return unexpected(ArpError::wrong_protocol_length);
    // 2. the addresses those lengths declare
    if (in.size() < ArpPacket::size) return unexpected(ArpError::truncated);
    // 3. the operation
    const std::uint16_t op = load_be16(p + ArpPacket::kOffsetOp);
    if (op != static_cast<std::uint16_t>(ArpOp::request) && op != static_cast<std::uint16_t>(ArpOp::reply))
        return unexpected(ArpError::unsupported_op);

    ArpPacket a;
    a.op = static_cast<ArpOp>(op);
    a.sender_hw = HwAddress::read_from(p + ArpPacket::kOffsetSenderHw);
    std::memcpy(a.sender_ip.data(), p + ArpPacket::kOffsetSenderIp, a.sender_ip.size());
    a.target_hw = HwAddress::read_from(p + ArpPacket::kOffsetTargetHw);
    std::memcpy(a.target_ip.data(), p + ArpPacket::kOffsetTargetIp, a.target_ip.size());
    return a;
}

expected<std::size_t, ArpError> encode_arp(const ArpPacket& a, mutable_bytes out) {
    if (out.size() < ArpPacket::size) return unexpected(ArpError::short_buffer);
    if (!a.fields_in_range()) return unexpected(ArpError::field_out_of_range);
    a.write_to(out.data());
    return ArpPacket::size;
}

ArpPacket make_arp_request(const HwAddress& our_hw, const Ipv4Address& our_ip, const Ipv4Address& target_ip) {
    return ArpPacket{.op = ArpOp::request, .sender_hw = our_hw, .sender_ip = our_ip, .target_hw = {},
                     .target_ip = target_ip};
}

ArpPacket make_arp_reply(const ArpPacket& request, const HwAddress& our_hw) {
    return ArpPacket{.op = ArpOp::reply, .sender_hw = our_hw, .sender_ip = request.target_ip,
                     .target_hw = request.sender_hw, .target_ip = request.sender_ip};
}

ArpPacket make_gratuitous_arp(const HwAddress& our_hw, const Ipv4Address& our_ip) {
    return make_arp_request(our_hw, our_ip, our_ip);
}

}  // namespace ipoibd::ipoib
