// ARP over IPoIB (RFC 826 as RFC 4391 9.2 fills it in): hardware type 32
// (INFINIBAND, IANA), protocol IPv4, a 20-octet hardware address (hw_address.h)
// and a 4-octet protocol address; 56 bytes, carried with EtherType 0x0806.
//
//   bytes 0-1:   ar$hrd  hardware type, 32
//   bytes 2-3:   ar$pro  protocol type, 0x0800
//   byte 4:      ar$hln  hardware address length, 20
//   byte 5:      ar$pln  protocol address length, 4
//   bytes 6-7:   ar$op   1 request, 2 reply
//   bytes 8-27:  ar$sha  sender hardware address
//   bytes 28-31: ar$spa  sender IPv4 address
//   bytes 32-51: ar$tha  target hardware address
//   bytes 52-55: ar$tpa  target IPv4 address
//
// parse_arp() checks the fixed header against these constants before it
// trusts the lengths, then the buffer against the lengths. Trailing bytes
// are ignored (nothing pads IPoIB frames, but nothing forbids it either).
// Who answers what, and what is learned, is the engine's business.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/byte_io.h"
#include "common/expected.h"
#include "ipoib/hw_address.h"
#include "common/ip_address.h"

namespace ipoibd::ipoib {

inline constexpr std::uint16_t kArpHardwareInfiniband = 32;  // IANA ARP hardware type (RFC 4391 14)
inline constexpr std::uint16_t kArpProtocolIpv4 = 0x0800;
inline constexpr std::uint8_t kArpHardwareLength = HwAddress::size;
inline constexpr std::uint8_t kArpProtocolLength = 4;

enum class ArpOp : std::uint16_t {
    request = 1,
    reply = 2,
};

struct ArpPacket {
    static constexpr std::size_t kFixedSize = 8;  // hrd, pro, hln, pln, op
    static constexpr std::size_t size = kFixedSize + 2 * (HwAddress::size + 4);
    static constexpr std::size_t kOffsetOp = 6;
    static constexpr std::size_t kOffsetSenderHw = 8;
    static constexpr std::size_t kOffsetSenderIp = 28;
    static constexpr std::size_t kOffsetTargetHw = 32;
    static constexpr std::size_t kOffsetTargetIp = 52;

    ArpOp op = ArpOp::request;
    HwAddress sender_hw;
    Ipv4Address sender_ip{};
    HwAddress target_hw;  // zero in a request
    Ipv4Address target_ip{};

    bool fields_in_range() const { return sender_hw.fields_in_range() && target_hw.fields_in_range(); }
    void write_to(std::uint8_t* p) const;
    bool operator==(const ArpPacket&) const = default;

    // Sender and target protocol address equal: an announcement or a
    // conflict probe's answer (RFC 5227), not a question about another host.
    bool is_gratuitous() const { return sender_ip == target_ip; }
};
static_assert(ArpPacket::size == 56);

enum class ArpError : std::uint8_t {
    truncated,               // shorter than the fixed header, or than the addresses it declares
    wrong_hardware_type,     // ar$hrd != 32
    wrong_protocol_type,     // ar$pro != 0x0800
    wrong_hardware_length,   // ar$hln != 20
    wrong_protocol_length,   // ar$pln != 4
    unsupported_op,          // not request or reply (RARP 3/4, InARP 8/9, ...)
    short_buffer,            // encode: output smaller than 56 bytes
    field_out_of_range,      // encode: a QPN wider than 24 bits
    count_
};
inline constexpr std::size_t kArpErrorCount = static_cast<std::size_t>(ArpError::count_);
const char* to_string(ArpError e);

// Validates and decodes an ARP packet (the payload after the IPoIB header).
expected<ArpPacket, ArpError> parse_arp(bytes in);
// Writes the 56 bytes; returns 56.
expected<std::size_t, ArpError> encode_arp(const ArpPacket& p, mutable_bytes out);

// Who has `target_ip`? Sent to the broadcast group; target hardware zero
// (as Linux sends it).
ArpPacket make_arp_request(const HwAddress& our_hw, const Ipv4Address& our_ip, const Ipv4Address& target_ip);
// The answer to `request` for an address we own: sender = us and the address
// asked for, target = the requester. Sent unicast to request.sender_hw.
ArpPacket make_arp_reply(const ArpPacket& request, const HwAddress& our_hw);
// Announcement of `our_ip` (start-up, address change, new QPN): a request
// with sender and target protocol address both ours and the target hardware
// address zero (RFC 5227 2.3; what the Linux kernel sends).
ArpPacket make_gratuitous_arp(const HwAddress& our_hw, const Ipv4Address& our_ip);

}  // namespace ipoibd::ipoib
