// IP addresses and prefixes as rtnetlink carries them: network-order bytes
// plus a family, and a prefix length beside them (ifa_prefixlen,
// rtm_dst_len). The netlink layer does not depend on ipoib/ (DESIGN.md:
// netlink <- daemon only), so it has its own small address type; its layout
// matches ipoib::NeighbourIp (IPv4 in the first 4 octets, the rest zero) so
// the daemon converts between the two with a copy.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ipoibd::netlink {

enum class IpFamily : std::uint8_t {
    ipv4,
    ipv6,
};

// AF_INET / AF_INET6, as the rtnetlink headers want them (one octet).
std::uint8_t address_family(IpFamily f);
// The family for AF_INET / AF_INET6; nullopt for anything else.
std::optional<IpFamily> family_from_af(int af);
// 4 or 16.
constexpr std::size_t address_length(IpFamily f) { return f == IpFamily::ipv4 ? 4 : 16; }
// 32 or 128.
constexpr unsigned max_prefix_length(IpFamily f) { return f == IpFamily::ipv4 ? 32 : 128; }

struct IpAddress {
    IpFamily family = IpFamily::ipv4;
    std::array<std::uint8_t, 16> bytes{};  // network order; IPv4 in [0, 4), the rest zero

    static IpAddress v4(const std::array<std::uint8_t, 4>& a);
    static IpAddress v6(const std::array<std::uint8_t, 16>& a);
    // The address from the first address_length(f) octets of `data`.
    static IpAddress from_bytes(IpFamily f, const std::uint8_t* data);

    std::size_t size() const { return address_length(family); }
    const std::uint8_t* data() const { return bytes.data(); }
    auto operator<=>(const IpAddress&) const = default;
};

struct IpPrefix {
    IpAddress address;
    std::uint8_t length = 0;  // bits; at most max_prefix_length(address.family)

    auto operator<=>(const IpPrefix&) const = default;
};

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

}  // namespace ipoibd::netlink
