// IP multicast group -> IB multicast GID (RFC 4391 4, Figures 1 and 2).
//
//   | 8 bits   | 4 bits | 4 bits | 16 bits         | 16 bits | 80 bits  |
//   | 11111111 | 0001   | scope  | IPoIB signature | P_Key   | group ID |
//
//   byte 0: 0xFF; byte 1: flags 0001 (T: transient, which IPoIB MGIDs MUST
//   set) | scope; bytes 2-3: signature 0x401B (IPv4) or 0x601B (IPv6);
//   bytes 4-5: P_Key; bytes 6-15: group ID:
//     IPv6: the low 80 bits of the group address;
//     IPv4: the low 28 bits of the group in the low 28 bits, the rest zero;
//     broadcast-GID (255.255.255.255): 48 zero bits then 32 one bits.
//
// The P_Key always carries the full-member bit: the broadcast-GID "MUST" use
// a full-membership P_Key (4.1), and Linux ORs 0x8000 into the link's P_Key
// before it builds any MGID, so a limited member's interface still names the
// same groups as everybody else. "All MGIDs used in the IPoIB subnet MUST use
// the same scop bits as in the corresponding broadcast-GID": the scope is a
// link parameter, not derived from the IPv6 group's own scope.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/expected.h"
#include "common/ip_address.h"
#include "transport/wire/headers.h"

namespace ipoibd::ipoib {

inline constexpr std::uint16_t kIpv4Signature = 0x401B;
inline constexpr std::uint16_t kIpv6Signature = 0x601B;
inline constexpr std::uint8_t kMgidFlagsTransient = 0x1;  // the 0001 nibble
inline constexpr std::size_t kMgidOffsetSignature = 2;
inline constexpr std::size_t kMgidOffsetPKey = 4;
inline constexpr std::size_t kMgidOffsetGroupId = 6;
inline constexpr std::size_t kMgidGroupIdSize = 10;       // 80 bits
inline constexpr std::uint32_t kIpv4GroupMask = 0x0FFFFFFF;  // the 28 bits an IPv4 MGID keeps

// MGID scopes IBA defines (the IPv6 values of RFC 4291 2.7).
enum class Scope : std::uint8_t {
    link_local = 0x2,  // "local-subnet scope (i.e., 0x2) is RECOMMENDED" (4.1)
    site_local = 0x5,
    organization_local = 0x8,
    global = 0xE,
};
// For configuration: one of the four values above, else nullopt.
std::optional<Scope> scope_from_nibble(std::uint8_t nibble);

enum class MgidError : std::uint8_t {
    not_multicast,  // the IP address is not a multicast group (nor 255.255.255.255)
    count_
};
inline constexpr std::size_t kMgidErrorCount = static_cast<std::size_t>(MgidError::count_);
const char* to_string(MgidError e);

// ff1S:401b:PPPP:0000:0000:0000:ffff:ffff with P = pkey | 0x8000.
ib::Gid broadcast_mgid(std::uint16_t pkey, Scope scope = Scope::link_local);

// An IPv4 multicast group (224.0.0.0/4); 255.255.255.255 maps to the
// broadcast-GID (4: "SHALL be mapped"). Subnet-directed broadcasts also go to
// the broadcast group, but only the caller knows the prefix that makes them.
expected<ib::Gid, MgidError> ipv4_group_mgid(const Ipv4Address& group, std::uint16_t pkey,
                                             Scope scope = Scope::link_local);
// An IPv6 multicast group (ff00::/8).
expected<ib::Gid, MgidError> ipv6_group_mgid(const Ipv6Address& group, std::uint16_t pkey,
                                             Scope scope = Scope::link_local);

// The reverse: is `mgid` an IPoIB MGID, and of which family, scope, P_Key.
enum class MgidFamily : std::uint8_t { ipv4, ipv6 };
struct IpoibMgid {
    MgidFamily family = MgidFamily::ipv4;
    std::uint8_t scope = 0;   // the raw 4-bit scope on the wire
    std::uint16_t pkey = 0;   // as carried (full-member bit included)
    bool broadcast = false;   // the broadcast-GID
    std::array<std::uint8_t, kMgidGroupIdSize> group_id{};

    // The IPv4 group: 224.0.0.0/4 plus the 28 bits, or 255.255.255.255 for
    // the broadcast-GID; nullopt for the IPv6 family.
    std::optional<Ipv4Address> ipv4_group() const;
    bool operator==(const IpoibMgid&) const = default;
};
// nullopt unless the MGID has prefix 0xFF, flags 0001, an IPoIB signature,
// and, for IPv4, a group ID that Figure 1 or Figure 2 can produce (zeros
// above the 28 bits, or exactly the broadcast pattern).
std::optional<IpoibMgid> parse_ipoib_mgid(const ib::Gid& mgid);

}  // namespace ipoibd::ipoib
