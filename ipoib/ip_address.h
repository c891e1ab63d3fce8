// IPv4 and IPv6 addresses as the IPoIB codecs carry them: fixed arrays in
// network byte order, exactly as they sit in a packet, so no codec ever has
// to ask which order an integer is in. Text forms for tests, logs and
// configuration.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ipoibd::ipoib {

using Ipv4Address = std::array<std::uint8_t, 4>;   // network order
using Ipv6Address = std::array<std::uint8_t, 16>;  // network order

inline constexpr Ipv4Address kIpv4Unspecified{};                 // 0.0.0.0
inline constexpr Ipv4Address kIpv4LimitedBroadcast{255, 255, 255, 255};
inline constexpr Ipv6Address kIpv6Unspecified{};                 // ::
inline constexpr Ipv6Address kIpv6AllNodes{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
inline constexpr Ipv6Address kIpv6AllRouters{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};

// Class D, 224.0.0.0/4 (RFC 1112).
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
constexpr bool is_solicited_node_multicast(const Ipv6Address& a) {
    return a == solicited_node_multicast(a);
}

// Dotted quad and RFC 5952 text (inet_pton/inet_ntop); nullopt when `text`
// is not an address.
std::optional<Ipv4Address> parse_ipv4(std::string_view text);
std::optional<Ipv6Address> parse_ipv6(std::string_view text);
std::string format_ipv4(const Ipv4Address& a);
std::string format_ipv6(const Ipv6Address& a);

}  // namespace ipoibd::ipoib
