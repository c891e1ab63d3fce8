// The one IP address type of the project: IPv4 and IPv6 in network byte
// order, exactly as they sit in a packet, a family beside them, and a prefix
// length for interface addresses and routes. Every layer uses it: the IPoIB
// codecs and neighbour cache (ipoib/), rtnetlink (netlink/), the host seam
// (host/), the configuration (config/) and the daemon.
//
// IPv4 sits in the first 4 octets of `bytes`, the rest zero, so one ordered
// map or hash holds both families without collisions.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ipoibd {

using Ipv4Address = std::array<std::uint8_t, 4>;   // network order
using Ipv6Address = std::array<std::uint8_t, 16>;  // network order

inline constexpr Ipv4Address kIpv4Unspecified{};  // 0.0.0.0
inline constexpr Ipv4Address kIpv4LimitedBroadcast{255, 255, 255, 255};
inline constexpr Ipv6Address kIpv6Unspecified{};  // ::
inline constexpr Ipv6Address kIpv6Loopback{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
inline constexpr Ipv6Address kIpv6AllNodes{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
inline constexpr Ipv6Address kIpv6AllRouters{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};

// Class D, 224.0.0.0/4 (RFC 1112 4). Class E (240.0.0.0/4) is unicast
// space as far as forwarding goes: it is not a group address.
constexpr bool is_ipv4_multicast(const Ipv4Address& a) { return (a[0] & 0xF0) == 0xE0; }
// ff00::/8 (RFC 4291 2.7).
constexpr bool is_ipv6_multicast(const Ipv6Address& a) { return a[0] == 0xFF; }
constexpr bool is_ipv6_unspecified(const Ipv6Address& a) { return a == kIpv6Unspecified; }
// fe80::/10 (RFC 4291 2.5.6).
constexpr bool is_ipv6_link_local(const Ipv6Address& a) { return a[0] == 0xFE && (a[1] & 0xC0) == 0x80; }

// ff02::1:ff00:0/104 plus the low 24 bits of `a` (RFC 4291 2.7.1).
constexpr Ipv6Address solicited_node_multicast(const Ipv6Address& a) {
    return {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, a[13], a[14], a[15]};
}
constexpr bool is_solicited_node_multicast(const Ipv6Address& a) { return a == solicited_node_multicast(a); }

// Dotted quad and RFC 5952 text (inet_pton/inet_ntop); nullopt when `text`
// is not an address of that family.
std::optional<Ipv4Address> parse_ipv4(std::string_view text);
std::optional<Ipv6Address> parse_ipv6(std::string_view text);
std::string format_ipv4(const Ipv4Address& a);
std::string format_ipv6(const Ipv6Address& a);

enum class IpFamily : std::uint8_t {
    ipv4 = 4,
    ipv6 = 6,
};

// 4 or 16.
constexpr std::size_t address_length(IpFamily f) { return f == IpFamily::ipv4 ? 4 : 16; }
// 32 or 128.
constexpr unsigned max_prefix_length(IpFamily f) { return f == IpFamily::ipv4 ? 32 : 128; }
// AF_INET / AF_INET6, as socket and rtnetlink headers want them (one octet).
std::uint8_t address_family(IpFamily f);
// The family for AF_INET / AF_INET6; nullopt for anything else.
std::optional<IpFamily> family_from_af(int af);

struct IpAddress {
    IpFamily family = IpFamily::ipv4;
    std::array<std::uint8_t, 16> bytes{};  // network order; IPv4 in [0, 4), the rest zero

    static IpAddress v4(const Ipv4Address& a);
    static IpAddress v6(const Ipv6Address& a);
    // The address from the first address_length(f) octets of `data`.
    static IpAddress from_bytes(IpFamily f, const std::uint8_t* data);

    constexpr bool is_v4() const { return family == IpFamily::ipv4; }
    constexpr bool is_v6() const { return family == IpFamily::ipv6; }
    // The first four octets (meaningful when is_v4()).
    constexpr Ipv4Address v4_bytes() const { return {bytes[0], bytes[1], bytes[2], bytes[3]}; }
    std::size_t size() const { return address_length(family); }
    const std::uint8_t* data() const { return bytes.data(); }
    auto operator<=>(const IpAddress&) const = default;
};

// The one "is this a group address" rule: 224.0.0.0/4 or ff00::/8.
constexpr bool is_multicast(const IpAddress& a) {
    return a.is_v4() ? is_ipv4_multicast(a.v4_bytes()) : a.bytes[0] == 0xFF;
}
constexpr bool is_unspecified(const IpAddress& a) {
    return a.is_v4() ? a.v4_bytes() == kIpv4Unspecified : a.bytes == kIpv6Unspecified;
}
// 127.0.0.0/8 or ::1.
constexpr bool is_loopback(const IpAddress& a) { return a.is_v4() ? a.bytes[0] == 127 : a.bytes == kIpv6Loopback; }
constexpr bool is_link_local(const IpAddress& a) { return a.is_v6() && is_ipv6_link_local(a.bytes); }

// An address with its prefix length, "198.18.0.1/24" or "2001:db8::1/64".
struct IpPrefix {
    IpAddress address;
    std::uint8_t length = 0;  // bits; at most max_prefix_length(address.family)

    auto operator<=>(const IpPrefix&) const = default;
};

// `a` with every bit after the first `length` cleared.
IpAddress network_of(const IpAddress& a, unsigned length);

// inet_pton text; nullopt when `text` is not an IPv4 or IPv6 address.
std::optional<IpAddress> parse_ip_address(std::string_view text);
// "198.18.0.1/24", "2001:db8::1/64"; a bare address is a host prefix
// (/32, /128). nullopt when malformed or the length is too long.
std::optional<IpPrefix> parse_ip_prefix(std::string_view text);

std::string to_string(const IpAddress& a);  // inet_ntop text (RFC 5952 for IPv6)
std::string to_string(const IpPrefix& p);   // "198.18.0.1/24"

struct IpAddressHash {
    std::size_t operator()(const IpAddress& a) const noexcept;
};

}  // namespace ipoibd
