// IPv6 Neighbor Discovery over IPoIB (RFC 4861 as RFC 4391 9.3 fills it
// in): the Source/Target Link-Layer Address options carry the 20-octet IPoIB
// address, and this file finds, checks, rewrites and produces them in whole
// IPv6 packets (RS, RA, NS, NA, Redirect), recomputing the ICMPv6 checksum.
//
// The IPoIB link-layer address option, 24 octets (length 3):
//   byte 0: Type (1 source, 2 target)    byte 1: Length = 3 (units of 8 octets)
//   bytes 2-3: zero: "two octets of zero MUST be prepended" to the address
//   bytes 4-23: the link-layer address (hw_address.h)
// The pad comes first, as the RFC says and Linux does (ndisc_addr_option_pad).
//
// parse_nd() checks, and the first failure names the reason:
//  1. IPv6 header: 40 bytes, version 6, Payload Length neither 0 (jumbogram)
//     nor more than the bytes present (bytes after it are ignored)
//  2. extension headers, minimally: Hop-by-Hop (first only) and Destination
//     Options are skipped, at most 8 of them; a Fragment header is refused
//     (ND messages are never fragmented, RFC 6980); Routing, AH, ESP and the
//     rest are refused rather than half-understood
//  3. the upper layer is ICMPv6 (not_icmpv6 otherwise) of types 133-137
//     (not_nd otherwise): those two reasons mean "not ND, handle as data"
//  4. message at least the type's fixed part; checksum (corruption first);
//     Hop Limit 255 (RFC 4861: anything else was forwarded by a router);
//     Code 0
//  5. options: every length non-zero and inside the message; the link-layer
//     option the type defines (source for RS, RA, NS; target for NA and
//     Redirect) has length 3 and appears at most once; options the type does
//     not define are skipped, as RFC 4861 tells receivers to do
//  6. RFC 4861 validity rules that need only the packet: no source option
//     from the unspecified address (RS, DAD NS); DAD NS to a solicited-node
//     group; NS/NA targets and the Redirect destination not multicast; no
//     Solicited flag on an NA to a multicast group; RA and Redirect from a
//     link-local source; a Redirect target link-local or the destination
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/byte_io.h"
#include "common/expected.h"
#include "ipoib/hw_address.h"
#include "common/ip_address.h"

namespace ipoibd::ipoib {

// ---------------------------------------------------------------------------
// IPv6 header (RFC 8200 3), 40 bytes
//   bytes 0-3: Version(31:28)=6 Traffic Class(27:20) Flow Label(19:0)
//   bytes 4-5: Payload Length   byte 6: Next Header   byte 7: Hop Limit
//   bytes 8-23: Source Address  bytes 24-39: Destination Address
struct Ipv6Header {
    static constexpr std::size_t size = 40;
    static constexpr std::uint8_t kVersion = 6;
    static constexpr std::size_t kOffsetPayloadLength = 4;
    static constexpr std::size_t kOffsetNextHeader = 6;
    static constexpr std::size_t kOffsetHopLimit = 7;
    static constexpr std::size_t kOffsetSource = 8;
    static constexpr std::size_t kOffsetDestination = 24;

    std::uint8_t version = kVersion;  // 4 bits
    std::uint8_t traffic_class = 0;
    std::uint32_t flow_label = 0;     // 20 bits
    std::uint16_t payload_length = 0;
    std::uint8_t next_header = 0;
    std::uint8_t hop_limit = 0;
    Ipv6Address source{};
    Ipv6Address destination{};

    void write_to(std::uint8_t* p) const;
    static Ipv6Header read_from(const std::uint8_t* p);
    bool operator==(const Ipv6Header&) const = default;
};

inline constexpr std::uint8_t kNextHeaderHopByHop = 0;
inline constexpr std::uint8_t kNextHeaderRouting = 43;
inline constexpr std::uint8_t kNextHeaderFragment = 44;
inline constexpr std::uint8_t kNextHeaderIcmpv6 = 58;
inline constexpr std::uint8_t kNextHeaderDestinationOptions = 60;
inline constexpr std::size_t kMaxExtensionHeaders = 8;
inline constexpr std::uint8_t kNdHopLimit = 255;

// ---------------------------------------------------------------------------
// ND messages (RFC 4861 4). Every one starts with the ICMPv6 header:
//   byte 0: Type   byte 1: Code (0)   bytes 2-3: Checksum
// and then a fixed part before the options:
//   RS:       bytes 4-7 reserved                                  -> 8
//   RA:       Cur Hop Limit, M|O flags, Router Lifetime,
//             Reachable Time, Retrans Timer                      -> 16
//   NS:       bytes 4-7 reserved, 8-23 Target Address            -> 24
//   NA:       byte 4 R(7) S(6) O(5), reserved to byte 7,
//             8-23 Target Address                                -> 24
//   Redirect: bytes 4-7 reserved, 8-23 Target, 24-39 Destination -> 40
enum class NdType : std::uint8_t {
    router_solicitation = 133,
    router_advertisement = 134,
    neighbor_solicitation = 135,
    neighbor_advertisement = 136,
    redirect = 137,
};
const char* to_string(NdType t);
std::size_t nd_fixed_size(NdType t);

inline constexpr std::size_t kIcmpv6OffsetChecksum = 2;
inline constexpr std::size_t kNdOffsetTarget = 8;
inline constexpr std::size_t kNdOffsetRedirectDestination = 24;
inline constexpr std::size_t kNaOffsetFlags = 4;
inline constexpr std::uint8_t kNaFlagRouter = 0x80;
inline constexpr std::uint8_t kNaFlagSolicited = 0x40;
inline constexpr std::uint8_t kNaFlagOverride = 0x20;

enum class NdOptionType : std::uint8_t {
    source_link_layer_address = 1,
    target_link_layer_address = 2,
};
// The link-layer option a message type defines: source for RS, RA and NS,
// target for NA and Redirect.
NdOptionType link_layer_option_of(NdType t);

struct LinkLayerAddressOption {
    static constexpr std::size_t size = 24;
    static constexpr std::uint8_t kLengthUnits = 3;  // size / 8
    static constexpr std::size_t kOffsetAddress = 4;  // after type, length and two zero octets

    NdOptionType type = NdOptionType::source_link_layer_address;
    HwAddress address;

    void write_to(std::uint8_t* p) const {
        p[0] = static_cast<std::uint8_t>(type);
        p[1] = kLengthUnits;
        p[2] = 0;
        p[3] = 0;
        address.write_to(p + kOffsetAddress);
    }
    bool operator==(const LinkLayerAddressOption&) const = default;
};
static_assert(LinkLayerAddressOption::size == 2 + 2 + HwAddress::size);
static_assert(LinkLayerAddressOption::size == 8 * LinkLayerAddressOption::kLengthUnits);

enum class NdError : std::uint8_t {
    truncated_ipv6_header,          // fewer than 40 bytes
    bad_ip_version,                 // version != 6
    bad_payload_length,             // 0 (jumbogram) or more than the bytes present
    truncated_extension_header,
    fragmented,                     // a Fragment header (RFC 6980: ND is never fragmented)
    unsupported_extension_header,   // Routing, AH, ESP, ..., or Hop-by-Hop not first
    too_many_extension_headers,
    not_icmpv6,                     // the upper layer is something else: not ND
    not_nd,                         // ICMPv6 but not types 133-137: not ND
    truncated_message,              // shorter than the type's fixed part
    bad_checksum,
    bad_hop_limit,                  // != 255
    bad_code,                       // != 0
    bad_option_length,              // an option of length 0, or one running past the message
    wrong_link_layer_option_length, // the type's link-layer option is not 3 (not an IPoIB address)
    duplicate_link_layer_option,
    link_layer_option_not_allowed,  // a source option from the unspecified address (RS, DAD NS)
    dad_not_to_solicited_node,      // NS from :: not sent to a solicited-node group
    multicast_target,               // NS/NA target or Redirect destination is multicast
    solicited_to_multicast,         // NA with the Solicited flag sent to a multicast group
    source_not_link_local,          // RA or Redirect not from a link-local address
    bad_redirect_target,            // Redirect target neither link-local nor the destination
    short_buffer,                   // build/rewrite: the output span is too small
    field_out_of_range,             // build/rewrite: a QPN wider than 24 bits
    too_long,                       // rewrite: the result would exceed 65535 bytes of payload
    count_
};
inline constexpr std::size_t kNdErrorCount = static_cast<std::size_t>(NdError::count_);
const char* to_string(NdError e);

// A validated ND message. Offsets are into the packet given to parse_nd().
struct NdMessage {
    Ipv6Header ip;
    std::size_t icmp_offset = 0;  // where the ICMPv6 message starts (40 + extension headers)
    std::size_t icmp_length = 0;  // its length, options included
    NdType type = NdType::neighbor_solicitation;
    std::uint16_t checksum = 0;

    Ipv6Address target{};       // NS, NA, Redirect
    Ipv6Address destination{};  // Redirect
    bool router = false;        // NA flags
    bool solicited = false;
    bool override_flag = false;

    // The IPoIB link-layer options the type defines; flags as received.
    std::optional<HwAddress> source_lla;  // RS, RA, NS
    std::optional<HwAddress> target_lla;  // NA, Redirect
};

expected<NdMessage, NdError> parse_nd(bytes ipv6_packet);

// ICMPv6 checksum (RFC 4443 2.3 over the RFC 8200 8.1 pseudo-header: source,
// destination, 32-bit upper-layer length, three zero octets, Next Header
// 58), with the message's own checksum field taken as zero.
std::uint16_t icmpv6_checksum(const Ipv6Address& source, const Ipv6Address& destination, bytes message);

// Gives an ND message the IPoIB link-layer option holding `address`, for
// packets built by someone who does not speak IPoIB (the kernel behind a TAP
// device writes a 6-byte Ethernet option). Every option of the kind the type
// defines is removed whatever its length; when `address` is set, one 24-byte
// IPoIB option takes the place of the first (or follows the last option when
// there was none). Other options and the extension headers are copied; the
// Payload Length and the checksum are recomputed; bytes past the payload are
// dropped. `in` must pass checks 1-4 of parse_nd() except the Hop Limit,
// plus the option lengths; a source option for the unspecified address is
// refused. `out` must not overlap `in`. Returns the new packet's size.
expected<std::size_t, NdError> rewrite_link_layer_option(bytes in, const std::optional<HwAddress>& address,
                                                         mutable_bytes out);

// ---------------------------------------------------------------------------
// Builders: whole IPv6 packets, Hop Limit 255, Traffic Class and Flow Label 0,
// no extension headers.
inline constexpr std::size_t kNsNaPacketMaxSize = Ipv6Header::size + 24 + LinkLayerAddressOption::size;

struct NeighborSolicitation {
    Ipv6Address source{};       // :: for Duplicate Address Detection
    Ipv6Address destination{};  // the target's solicited-node group, or the target (unicast probe)
    Ipv6Address target{};
    std::optional<HwAddress> source_lla;  // must be empty when the source is ::
};

struct NeighborAdvertisement {
    Ipv6Address source{};
    Ipv6Address destination{};  // the soliciting node, or ff02::1
    Ipv6Address target{};
    bool router = false;
    bool solicited = false;
    bool override_flag = true;
    std::optional<HwAddress> target_lla;
};

// Errors: short_buffer, field_out_of_range; link_layer_option_not_allowed, dad_not_to_solicited_node,
// multicast_target and solicited_to_multicast for what parse_nd() would refuse.
expected<std::size_t, NdError> build_neighbor_solicitation(const NeighborSolicitation& ns, mutable_bytes out);
expected<std::size_t, NdError> build_neighbor_advertisement(const NeighborAdvertisement& na, mutable_bytes out);

// DAD probe for a tentative address (RFC 4862 5.4.2): from ::, to the
// address's solicited-node group, no source option.
NeighborSolicitation make_dad_solicitation(const Ipv6Address& tentative);
// Address resolution (RFC 4861 7.2.2): to the target's solicited-node group,
// with our source option.
NeighborSolicitation make_resolution_solicitation(const Ipv6Address& our_ip, const HwAddress& our_hw,
                                                  const Ipv6Address& target);
// Reachability probe (RFC 4861 7.3.3): unicast to the cached neighbour.
NeighborSolicitation make_unicast_solicitation(const Ipv6Address& our_ip, const HwAddress& our_hw,
                                               const Ipv6Address& target);
// The answer to a parsed NS for an address we own (RFC 4861 7.2.4): from the
// target address, Override set, our target option; to the solicitor with
// Solicited set, or, for a DAD probe (source ::), to ff02::1 without it.
NeighborAdvertisement make_solicited_advertisement(const NdMessage& ns, const HwAddress& our_hw, bool router);
// Announcement (RFC 4861 7.2.6) at start-up or when our link address (QPN)
// changed: to ff02::1, Solicited clear, Override set.
NeighborAdvertisement make_unsolicited_advertisement(const Ipv6Address& our_ip, const HwAddress& our_hw,
                                                     bool router);

}  // namespace ipoibd::ipoib
