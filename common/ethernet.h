// Ethernet as a TAP device presents it (IEEE 802.3 with DIX EtherTypes),
// and ARP for Ethernet (RFC 826): the wire formats of the TAP host port
// (host/tap_port.h) and of the translation between its frames and IPoIB
// (ipoib/ethernet_link.h). Byte logic only.
//
// Ethernet header, 14 bytes (no FCS: a TAP device neither gives nor takes one)
//   bytes 0-5:   destination MAC
//   bytes 6-11:  source MAC
//   bytes 12-13: EtherType (>= 0x0600), or 0x8100/0x88A8 for a VLAN tag
//
// ARP for Ethernet, 28 bytes (RFC 826 with ar$hrd 1, ar$hln 6):
//   bytes 0-1: ar$hrd 1   bytes 2-3: ar$pro 0x0800   byte 4: ar$hln 6
//   byte 5: ar$pln 4      bytes 6-7: ar$op (1 request, 2 reply)
//   bytes 8-13: ar$sha    bytes 14-17: ar$spa
//   bytes 18-23: ar$tha   bytes 24-27: ar$tpa
//
// Group addresses: IPv4 multicast 01:00:5e + the low 23 bits of the group
// (RFC 1112 6.4), IPv6 multicast 33:33 + the low 32 bits (RFC 2464 7), the
// broadcast address ff:ff:ff:ff:ff:ff.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/byte_io.h"
#include "common/expected.h"
#include "common/ip_address.h"

namespace ipoibd {

using MacAddress = std::array<std::uint8_t, 6>;

inline constexpr MacAddress kMacBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
inline constexpr std::uint8_t kMacGroupBit = 0x01;           // I/G: a group address
inline constexpr std::uint8_t kMacLocallyAdministered = 0x02;  // U/L: not IEEE-assigned

constexpr bool is_group_mac(const MacAddress& m) { return (m[0] & kMacGroupBit) != 0; }
constexpr bool is_zero_mac(const MacAddress& m) { return m == MacAddress{}; }

// "02:00:5e:10:00:01": six lowercase two-digit hex octets; the parser takes
// upper case too.
std::string format_mac(const MacAddress& m);
std::optional<MacAddress> parse_mac(std::string_view text);

// The Ethernet destination of an IP group address (RFC 1112 6.4, RFC 2464 7).
MacAddress multicast_mac(const IpAddress& group);

inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeArp = 0x0806;
inline constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;     // IEEE 802.1Q
inline constexpr std::uint16_t kEtherTypeQinQ = 0x88A8;     // IEEE 802.1ad
inline constexpr std::uint16_t kEtherTypeMinimum = 0x0600;  // below: an 802.3 length, not a type

struct EthernetHeader {
    static constexpr std::size_t size = 14;
    static constexpr std::size_t kOffsetDestination = 0;
    static constexpr std::size_t kOffsetSource = 6;
    static constexpr std::size_t kOffsetType = 12;

    MacAddress destination{};
    MacAddress source{};
    std::uint16_t type = 0;

    void write_to(std::uint8_t* p) const;
    static EthernetHeader read_from(const std::uint8_t* p);
    bool operator==(const EthernetHeader&) const = default;
};
static_assert(EthernetHeader::size == 6 + 6 + 2);

enum class EthernetError : std::uint8_t {
    truncated,      // shorter than the 14-byte header
    vlan_tagged,    // 802.1Q / 802.1ad: IPoIB has no VLANs (a P_Key is the partition)
    length_field,   // an 802.3 length (< 0x0600), LLC/SNAP: not an EtherType
    count_
};
inline constexpr std::size_t kEthernetErrorCount = static_cast<std::size_t>(EthernetError::count_);
const char* to_string(EthernetError e);

struct EthernetFrame {
    EthernetHeader header;
    bytes payload;  // into the buffer given to parse_ethernet()
};

// Length first, then the type field; the payload may be empty (its owner
// decides whether that is a valid packet).
expected<EthernetFrame, EthernetError> parse_ethernet(bytes frame);

// ---------------------------------------------------------------------------
// ARP for Ethernet (RFC 826).
inline constexpr std::uint16_t kArpHardwareEthernet = 1;

enum class EthernetArpError : std::uint8_t {
    truncated,              // fewer than 28 bytes
    wrong_hardware_type,    // ar$hrd != 1 (a foreign link layer)
    wrong_protocol_type,    // ar$pro != 0x0800
    wrong_hardware_length,  // ar$hln != 6
    wrong_protocol_length,  // ar$pln != 4
    unsupported_op,         // not request or reply (RARP, InARP)
    count_
};
inline constexpr std::size_t kEthernetArpErrorCount = static_cast<std::size_t>(EthernetArpError::count_);
const char* to_string(EthernetArpError e);

struct EthernetArp {
    static constexpr std::size_t size = 28;
    static constexpr std::uint16_t kOpRequest = 1;
    static constexpr std::uint16_t kOpReply = 2;

    std::uint16_t op = kOpRequest;
    MacAddress sender_mac{};
    Ipv4Address sender_ip{};
    MacAddress target_mac{};
    Ipv4Address target_ip{};

    void write_to(std::uint8_t* p) const;
    bool operator==(const EthernetArp&) const = default;
    // Sender and target protocol address equal: an announcement (RFC 5227).
    bool is_gratuitous() const { return sender_ip == target_ip; }
    // An RFC 5227 probe: sender protocol address 0.0.0.0.
    bool is_probe() const { return sender_ip == kIpv4Unspecified; }
};
static_assert(EthernetArp::size == 8 + 2 * (6 + 4));

// Trailing bytes (the padding of a minimum-size frame) are ignored.
expected<EthernetArp, EthernetArpError> parse_ethernet_arp(bytes in);

}  // namespace ipoibd
