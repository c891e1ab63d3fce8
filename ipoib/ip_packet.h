// What the engine needs to know about an IP datagram from the TUN or the
// fabric, read length-first: family, source, destination, the upper-layer
// protocol and where it starts (IPv6 extension headers skipped), and, for
// the IGMP (RFC 2236, RFC 3376) and MLD (RFC 2710, RFC 3810) reports the
// host's kernel sends, which groups it joins or leaves. The kernel joins
// groups on the TUN like on any multicast-capable device; these reports are
// how the daemon learns them (a TUN has no multicast list to read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/byte_io.h"
#include "common/expected.h"
#include "ipoib/neighbour_cache.h"

namespace ipoibd::ipoib {

inline constexpr std::size_t kIpv4MinHeaderSize = 20;
inline constexpr std::uint8_t kIpProtocolIgmp = 2;
inline constexpr std::uint8_t kIpProtocolUdp = 17;

// IGMP types (RFC 2236 2.1, RFC 3376 4).
inline constexpr std::uint8_t kIgmpV1Report = 0x12;
inline constexpr std::uint8_t kIgmpV2Report = 0x16;
inline constexpr std::uint8_t kIgmpV2Leave = 0x17;
inline constexpr std::uint8_t kIgmpV3Report = 0x22;
// MLD types (RFC 2710 3, RFC 3810 5).
inline constexpr std::uint8_t kMldV1Report = 131;
inline constexpr std::uint8_t kMldV1Done = 132;
inline constexpr std::uint8_t kMldV2Report = 143;
// Group record types of IGMPv3 and MLDv2 reports (RFC 3376 4.2.12).
inline constexpr std::uint8_t kRecordModeIsInclude = 1;
inline constexpr std::uint8_t kRecordModeIsExclude = 2;
inline constexpr std::uint8_t kRecordChangeToInclude = 3;
inline constexpr std::uint8_t kRecordChangeToExclude = 4;
inline constexpr std::uint8_t kRecordAllowNewSources = 5;

enum class IpPacketError : std::uint8_t {
    empty,
    bad_version,          // neither 4 nor 6
    truncated_header,     // shorter than the fixed header (or IHL)
    bad_header_length,    // IPv4 IHL below 5
    bad_total_length,     // IPv4 Total Length / IPv6 Payload Length beyond the bytes present
    truncated_extension,  // an IPv6 extension header runs past the packet
    count_
};
inline constexpr std::size_t kIpPacketErrorCount = static_cast<std::size_t>(IpPacketError::count_);
const char* to_string(IpPacketError e);

struct IpPacketInfo {
    IpFamily family = IpFamily::ipv4;
    IpAddress source;
    IpAddress destination;
    // IPv4 Protocol, or the IPv6 upper-layer Next Header after Hop-by-Hop,
    // Routing and Destination Options headers; kNextHeaderFragment for a
    // fragment (not looked into).
    std::uint8_t protocol = 0;
    std::size_t upper_offset = 0;  // where the upper-layer header starts
    std::size_t length = 0;        // the datagram's own length (bytes past it ignored)
    bool first_fragment = true;    // IPv4: fragment offset 0
};

expected<IpPacketInfo, IpPacketError> inspect_ip_packet(bytes packet);

// One group the host joined (join = true) or left.
struct GroupChange {
    IpAddress group;
    bool join = true;
    bool operator==(const GroupChange&) const = default;
};

// The joins and leaves an IGMP or MLD report of `packet` announces, in
// order; empty for any other packet, a query, or a malformed report (whose
// records are read length-first; a record running past the packet ends the
// list). Groups that are not multicast addresses are skipped.
std::vector<GroupChange> host_group_changes(bytes packet, const IpPacketInfo& info);

}  // namespace ipoibd::ipoib
