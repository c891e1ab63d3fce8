#include "ipoib/ip_address.h"

#include <arpa/inet.h>

namespace ipoibd::ipoib {

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

}  // namespace ipoibd::ipoib
