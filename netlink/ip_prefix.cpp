#include "netlink/ip_prefix.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>

namespace ipoibd::netlink {

std::uint8_t address_family(IpFamily f) {
    return static_cast<std::uint8_t>(f == IpFamily::ipv4 ? AF_INET : AF_INET6);
}

std::optional<IpFamily> family_from_af(int af) {
    if (af == AF_INET) return IpFamily::ipv4;
    if (af == AF_INET6) return IpFamily::ipv6;
    return std::nullopt;
}

IpAddress IpAddress::v4(const std::array<std::uint8_t, 4>& a) {
    IpAddress ip{.family = IpFamily::ipv4, .bytes = {}};
    std::copy(a.begin(), a.end(), ip.bytes.begin());
    return ip;
}

IpAddress IpAddress::v6(const std::array<std::uint8_t, 16>& a) { return IpAddress{.family = IpFamily::ipv6, .bytes = a}; }

IpAddress IpAddress::from_bytes(IpFamily f, const std::uint8_t* data) {
    IpAddress ip{.family = f, .bytes = {}};
    std::copy_n(data, address_length(f), ip.bytes.begin());
    return ip;
}

std::optional<IpAddress> parse_ip_address(std::string_view text) {
    const std::string z(text);
    std::array<std::uint8_t, 16> bytes{};
    if (inet_pton(AF_INET, z.c_str(), bytes.data()) == 1) return IpAddress{.family = IpFamily::ipv4, .bytes = bytes};
    if (inet_pton(AF_INET6, z.c_str(), bytes.data()) == 1) return IpAddress{.family = IpFamily::ipv6, .bytes = bytes};
    return std::nullopt;
}

std::optional<IpPrefix> parse_ip_prefix(std::string_view text) {
    const auto slash = text.find('/');
    auto address = parse_ip_address(text.substr(0, slash));
    if (!address) return std::nullopt;
    const unsigned max = max_prefix_length(address->family);
    if (slash == std::string_view::npos) return IpPrefix{.address = *address, .length = static_cast<std::uint8_t>(max)};
    const std::string_view digits = text.substr(slash + 1);
    unsigned length = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || length > max)
        return std::nullopt;
    return IpPrefix{.address = *address, .length = static_cast<std::uint8_t>(length)};
}

std::string to_string(const IpAddress& a) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(address_family(a.family), a.bytes.data(), text, sizeof text);
    return text;
}

std::string to_string(const IpPrefix& p) { return to_string(p.address) + "/" + std::to_string(p.length); }

std::size_t IpAddressHash::operator()(const IpAddress& a) const noexcept {
    // FNV-1a over family and bytes. Cheap; the keys are destinations that
    // local senders routed to the TUN, and the tables keyed by them are
    // bounded, so a crafted collision set costs at most one long bucket.
    std::uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&h](std::uint8_t octet) {
        h ^= octet;
        h *= 0x100000001b3ULL;
    };
    mix(static_cast<std::uint8_t>(a.family));
    for (std::uint8_t octet : a.bytes) mix(octet);
    return static_cast<std::size_t>(h);
}

}  // namespace ipoibd::netlink
