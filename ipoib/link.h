// Link parameters derived from the port and the broadcast group: the IPv6
// interface identifier and link-local address (RFC 4391 8, 8.1) and the
// interface MTU (RFC 4391 7).
#pragma once

#include <array>
#include <cstdint>

#include "ipoib/frame.h"
#include "common/ip_address.h"
#include "transport/wire/headers.h"

namespace ipoibd::ipoib {

// ---------------------------------------------------------------------------
// Interface identifier (RFC 4391 8): the port GUID is an EUI-64; RFC 4291
// wants the "Modified EUI-64" form, whose u bit (0x02 of the first octet) is
// the inverse of IEEE's. The RFC asks implementations to tell whether a GUID
// is already modified and toggle only if not. Nothing in a GUID says which it
// is, so ipoibd does what Linux does (addrconf_ifid_infiniband): set the bit.
// For every IEEE-assigned GUID (u = 0) that is exactly the inversion; a GUID
// with the bit already set is taken as already modified and left alone. The
// link-local addresses therefore match the ones Linux hosts on the same
// fabric derive, e.g. GUID 0x001e67030029476f -> fe80::21e:6703:29:476f.
inline constexpr std::uint8_t kEui64UniversalLocalBit = 0x02;
using InterfaceIdentifier = std::array<std::uint8_t, 8>;

constexpr InterfaceIdentifier interface_identifier(std::uint64_t port_guid) {
    InterfaceIdentifier iid{};
    for (std::size_t i = 0; i < iid.size(); ++i) iid[i] = static_cast<std::uint8_t>(port_guid >> (56 - 8 * i));
    iid[0] = static_cast<std::uint8_t>(iid[0] | kEui64UniversalLocalBit);
    return iid;
}

// fe80::/64 + the interface identifier (RFC 4291 2.5.6, RFC 4391 8.1).
constexpr Ipv6Address link_local_address(std::uint64_t port_guid) {
    Ipv6Address a{0xfe, 0x80};
    const InterfaceIdentifier iid = interface_identifier(port_guid);
    for (std::size_t i = 0; i < iid.size(); ++i) a[8 + i] = iid[i];
    return a;
}

// ---------------------------------------------------------------------------
// MTU (RFC 4391 7): the IPoIB-link MTU is the broadcast group's IB MTU; the
// interface MTU is that less the 4-octet encapsulation header, so an IP
// datagram plus its header fills exactly one IB packet: 2044 for a 2048 group
// (the size every implementation MUST support), 4092 for 4096.
inline constexpr std::uint32_t kIpv6MinimumLinkMtu = 1280;  // RFC 8200 5

constexpr std::uint32_t interface_mtu(ib::Mtu broadcast_group_mtu) {
    return ib::mtu_bytes(broadcast_group_mtu) - static_cast<std::uint32_t>(EncapHeader::size);
}

// An operator's MTU never exceeds what the group carries; 0 means "not
// configured" and gives the group's.
constexpr std::uint32_t clamp_interface_mtu(std::uint32_t configured, ib::Mtu broadcast_group_mtu) {
    const std::uint32_t ceiling = interface_mtu(broadcast_group_mtu);
    return configured == 0 || configured > ceiling ? ceiling : configured;
}

// Connected mode (RFC 4755), as Linux's ipoib_cm: the interface MTU, and
// the receive size each side advertises in its REQ or REP (the 4-byte
// header included).
inline constexpr std::uint32_t kConnectedModeMtu = 65520;
inline constexpr std::uint32_t kConnectedReceiveSize = 65524;

// Groups of 256, 512 or 1024 bytes leave room for IPv4 only.
constexpr bool mtu_carries_ipv6(std::uint32_t interface_mtu_bytes) {
    return interface_mtu_bytes >= kIpv6MinimumLinkMtu;
}

}  // namespace ipoibd::ipoib
