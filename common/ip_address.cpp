#include "common/ip_address.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>

namespace ipoibd {

std::optional<Ipv4Address> parse_ipv4(std::string_view text) {
    Ipv4Address a{};
    const std::string z(text);
    if (inet_pton(AF_INET, z.c_str(), a.data()) != 1) return std::nullopt;
    return a;
}

std::optional<Ipv6Address> parse_ipv6(std::string_view text) {
    Ipv6Address a{};
    const std::string z(text);
    if (inet_pton(AF_INET6, z.c_str(), a.data()) != 1) return std::nullopt;
    return a;
}

std::string format_ipv4(const Ipv4Address& a) {
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, a.data(), buf, sizeof buf);
    return buf;
}

std::string format_ipv6(const Ipv6Address& a) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
    return buf;
}

std::uint8_t address_family(IpFamily f) {
    return static_cast<std::uint8_t>(f == IpFamily::ipv4 ? AF_INET : AF_INET6);
}

std::optional<IpFamily> family_from_af(int af) {
    if (af == AF_INET) return IpFamily::ipv4;
    if (af == AF_INET6) return IpFamily::ipv6;
    return std::nullopt;
}

IpAddress IpAddress::v4(const Ipv4Address& a) {
    IpAddress ip{.family = IpFamily::ipv4, .bytes = {}};
    std::copy(a.begin(), a.end(), ip.bytes.begin());
    return ip;
}

IpAddress IpAddress::v6(const Ipv6Address& a) { return IpAddress{.family = IpFamily::ipv6, .bytes = a}; }

IpAddress IpAddress::from_bytes(IpFamily f, const std::uint8_t* data) {
    IpAddress ip{.family = f, .bytes = {}};
    std::copy_n(data, address_length(f), ip.bytes.begin());
    return ip;
}

IpAddress network_of(const IpAddress& a, unsigned length) {
    IpAddress n = a;
    for (unsigned bit = length; bit < 8 * n.bytes.size(); ++bit)
        n.bytes[bit / 8] = static_cast<std::uint8_t>(n.bytes[bit / 8] & ~(0x80u >> (bit % 8)));
    return n;
}

std::optional<IpAddress> parse_ip_address(std::string_view text) {
    if (auto v4 = parse_ipv4(text)) return IpAddress::v4(*v4);
    if (auto v6 = parse_ipv6(text)) return IpAddress::v6(*v6);
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

}  // namespace ipoibd
