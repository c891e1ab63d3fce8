#include "common/socket_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>

namespace ipoibd {

std::uint16_t SocketAddress::port() const {
    if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
    if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
    return 0;
}

std::string SocketAddress::to_string() const {
    char text[INET6_ADDRSTRLEN] = {};
    if (family() == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, text, sizeof text);
        return std::string(text) + ":" + std::to_string(port());
    }
    if (family() == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, text, sizeof text);
        return "[" + std::string(text) + "]:" + std::to_string(port());
    }
    return "(no address)";
}

std::string SocketAddress::host_key() const {
    if (family() == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr;
        return std::string(reinterpret_cast<const char*>(&a), sizeof a);
    }
    if (family() == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
        return std::string(reinterpret_cast<const char*>(&a), sizeof a);
    }
    return {};
}

bool SocketAddress::operator==(const SocketAddress& o) const {
    return length == o.length && std::memcmp(&storage, &o.storage, length) == 0;
}

expected<SocketAddress, std::string> parse_socket_address(std::string_view text) {
    std::string_view host, port_text;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
            return unexpected(std::string("expected [IPv6]:PORT"));
        host = text.substr(1, close - 1);
        port_text = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos) return unexpected(std::string("expected ADDRESS:PORT"));
        host = text.substr(0, colon);
        port_text = text.substr(colon + 1);
    }
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535 || port_text.empty())
        return unexpected("bad port '" + std::string(port_text) + "'");

    SocketAddress out;
    const std::string host_z(host);
    sockaddr_in v4{};
    sockaddr_in6 v6{};
    if (inet_pton(AF_INET, host_z.c_str(), &v4.sin_addr) == 1) {
        v4.sin_family = AF_INET;
        v4.sin_port = htons(static_cast<std::uint16_t>(port));
        std::memcpy(&out.storage, &v4, sizeof v4);
        out.length = sizeof v4;
    } else if (inet_pton(AF_INET6, host_z.c_str(), &v6.sin6_addr) == 1) {
        v6.sin6_family = AF_INET6;
        v6.sin6_port = htons(static_cast<std::uint16_t>(port));
        std::memcpy(&out.storage, &v6, sizeof v6);
        out.length = sizeof v6;
    } else {
        return unexpected("'" + host_z + "' is not a numeric IPv4 or IPv6 address");
    }
    return out;
}

SocketAddress socket_address_from(const sockaddr_storage& storage, socklen_t length) {
    SocketAddress a;
    a.storage = storage;
    a.length = length;
    return a;
}

}  // namespace ipoibd
