#include "config/values.h"

#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/duration.h"

namespace ipoibd::config {

namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

// "0x" and 1..max_digits hex digits; the caller words the error.
bool parse_hex(std::string_view text, std::size_t max_digits, std::uint64_t& out) {
    if (text.size() < 3 || text.size() > 2 + max_digits) return false;
    if (text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) return false;
    const char* begin = text.data() + 2;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, out, 16);
    return ec == std::errc() && ptr == end;
}

// 240.0.0.0/4, the limited broadcast address included (RFC 1112 4).
bool is_ipv4_reserved(const IpAddress& a) { return a.is_v4() && (a.bytes[0] & 0xF0) == 0xF0; }

// Why `a` cannot be a unicast address of this interface or a gateway, or "".
std::string_view not_unicast(const IpAddress& a) {
    if (is_unspecified(a)) return "the unspecified address";
    if (is_multicast(a)) return "a multicast address";
    if (is_loopback(a)) return "a loopback address";
    if (is_ipv4_reserved(a)) return "a reserved address (240.0.0.0/4)";
    return "";
}

// "ADDR/LEN" with LEN in [min_length, the family's maximum].
expected<IpPrefix, Reason> parse_prefix(std::string_view text, std::uint8_t min_length) {
    const auto slash = text.find('/');
    if (slash == std::string_view::npos)
        return unexpected(Reason("missing prefix length (e.g. 198.18.0.1/24 or 2001:db8::1/64)"));
    auto address = parse_ip_address(text.substr(0, slash));
    if (!address) return unexpected(address.error());
    const std::string_view length_text = text.substr(slash + 1);
    unsigned length = 0;
    auto [ptr, ec] = std::from_chars(length_text.data(), length_text.data() + length_text.size(), length);
    if (length_text.empty() || ec == std::errc::invalid_argument || ptr != length_text.data() + length_text.size())
        return unexpected("prefix length " + quoted(length_text) + " is not a number");
    const unsigned max = max_prefix_length(address->family);
    if (ec == std::errc::result_out_of_range || length > max)
        return unexpected("prefix length " + std::string(length_text) + " is longer than " + std::to_string(max));
    if (length < min_length)
        return unexpected("prefix length " + std::to_string(length) + " is shorter than " + std::to_string(min_length));
    return IpPrefix{*address, static_cast<std::uint8_t>(length)};
}

}  // namespace

expected<std::uint64_t, Reason> parse_unsigned(std::string_view text, std::uint64_t min, std::uint64_t max) {
    const auto range = "must be between " + std::to_string(min) + " and " + std::to_string(max);
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ptr != end || ec == std::errc::invalid_argument)
        return unexpected("not a whole number; " + range);
    if (ec == std::errc::result_out_of_range || value < min || value > max) return unexpected(range);
    return value;
}

expected<bool, Reason> parse_yes_no(std::string_view text) {
    if (text == "yes" || text == "true" || text == "on") return true;
    if (text == "no" || text == "false" || text == "off") return false;
    return unexpected(Reason("must be yes or no"));
}

std::string_view format_yes_no(bool value) { return value ? "yes" : "no"; }

expected<std::chrono::milliseconds, Reason> parse_duration_between(std::string_view text,
                                                                   std::chrono::milliseconds min,
                                                                   std::chrono::milliseconds max) {
    auto d = parse_duration(text);
    if (!d) return unexpected(d.error());
    if (*d < min || *d > max)
        return unexpected("must be between " + format_duration(min) + " and " + format_duration(max));
    return *d;
}

std::string format_duration(std::chrono::milliseconds duration) {
    const auto ms = static_cast<std::uint64_t>(duration.count());
    if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
    if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
    return std::to_string(ms) + "ms";
}

expected<std::uint16_t, Reason> parse_pkey(std::string_view text) {
    std::uint64_t value = 0;
    if (!parse_hex(text, 4, value)) return unexpected(Reason("must be a hexadecimal P_Key, 0x0001 to 0xffff"));
    if ((value & 0x7FFF) == 0)
        return unexpected(Reason("is the invalid P_Key (its low 15 bits are 0; IBA 10.9.1.2)"));
    return static_cast<std::uint16_t>(value);
}

std::string format_pkey(std::uint16_t pkey) {
    char text[8];
    std::snprintf(text, sizeof text, "0x%04x", static_cast<unsigned>(pkey));
    return text;
}

expected<std::uint64_t, Reason> parse_guid(std::string_view text) {
    std::uint64_t value = 0;
    if (text == "0") return value;
    if (!parse_hex(text, 16, value))
        return unexpected(Reason("must be 0 (derived) or a GUID in hex, e.g. 0x0002c90300a1b2c3"));
    return value;
}

std::string format_guid(std::uint64_t guid) {
    if (guid == 0) return "0";
    char text[24];
    std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(guid));
    return text;
}

expected<IpAddress, Reason> parse_ip_address(std::string_view text) {
    if (auto a = ipoibd::parse_ip_address(text)) return *a;
    return unexpected(quoted(text) + " is not an IPv4 or IPv6 address");
}

expected<IpPrefix, Reason> parse_interface_address(std::string_view text) {
    auto prefix = parse_prefix(text, 1);
    if (!prefix) return unexpected(prefix.error());
    if (const auto why = not_unicast(prefix->address); !why.empty())
        return unexpected(std::string(why) + " cannot be an interface address");
    return *prefix;
}

expected<Route, Reason> parse_route(std::string_view text) {
    std::vector<std::string_view> words;
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && is_space(text[i])) ++i;
        std::size_t j = i;
        while (j < text.size() && !is_space(text[j])) ++j;
        if (j > i) words.push_back(text.substr(i, j - i));
        i = j;
    }
    if (words.size() != 1 && (words.size() != 3 || words[1] != "via"))
        return unexpected(Reason("expected PREFIX or PREFIX via GATEWAY"));
    auto destination = parse_prefix(words[0], 0);
    if (!destination) return unexpected(destination.error());
    const IpAddress network = network_of(destination->address, destination->length);
    if (network != destination->address)
        return unexpected("host bits are set in " + std::string(words[0]) + " (the network is " +
                          format_prefix(IpPrefix{network, destination->length}) + ")");
    Route route{*destination, std::nullopt};
    if (words.size() == 3) {
        auto gateway = parse_ip_address(words[2]);
        if (!gateway) return unexpected(gateway.error());
        if (gateway->family != destination->address.family)
            return unexpected(Reason("gateway ") + std::string(words[2]) + " is " +
                              (gateway->is_v4() ? "IPv4" : "IPv6") + " but the destination is " +
                              (destination->address.is_v6() ? "IPv6" : "IPv4"));
        if (const auto why = not_unicast(*gateway); !why.empty())
            return unexpected(Reason("gateway ") + std::string(words[2]) + " is " + std::string(why));
        route.gateway = *gateway;
    }
    return route;
}

expected<SocketAddress, Reason> parse_fabric_address(std::string_view text, bool listen) {
    auto address = parse_socket_address(text);
    if (!address) return unexpected(address.error() + " (e.g. 198.18.0.1:18516 or [2001:db8::1]:18516)");
    if (address->port() == 0) return unexpected(Reason("port 0 is not a UDP port to use"));
    if (address->port() == kRoceV2UdpPort)
        return unexpected(Reason("port 4791 is RoCEv2's; the soft fabric must not use it"));
    if (!listen && is_wildcard(*address))
        return unexpected(Reason("the wildcard address cannot be sent to; give the fabric's address"));
    return *address;
}

bool is_wildcard(const SocketAddress& address) {
    if (address.family() == AF_INET) {
        sockaddr_in v4{};
        std::memcpy(&v4, &address.storage, sizeof v4);
        return v4.sin_addr.s_addr == htonl(INADDR_ANY);
    }
    if (address.family() == AF_INET6) {
        sockaddr_in6 v6{};
        std::memcpy(&v6, &address.storage, sizeof v6);
        return IN6_IS_ADDR_UNSPECIFIED(&v6.sin6_addr);
    }
    return false;
}

expected<std::string, Reason> parse_interface_name(std::string_view text) {
    if (text.empty() || text.size() > 15) return unexpected(Reason("must be 1 to 15 characters long"));
    if (text == "." || text == "..") return unexpected(Reason("cannot be '.' or '..'"));
    // '%' too: the kernel takes "ib%d" for a pattern and names the device
    // otherwise, so the daemon would never find it by its configured name.
    if (std::any_of(text.begin(), text.end(), [](char c) { return c == '/' || c == ':' || c == '%' || is_space(c); }))
        return unexpected(Reason("cannot contain '/', ':', '%' or white space"));
    if (auto problem = text_problem(text)) return unexpected("cannot contain a " + *problem);
    return std::string(text);
}

expected<std::string, Reason> parse_absolute_path(std::string_view text, std::size_t max_length) {
    if (text.empty() || text.front() != '/') return unexpected(Reason("must be an absolute path"));
    if (text.size() > max_length)
        return unexpected("is longer than " + std::to_string(max_length) + " bytes");
    if (text.find('\0') != std::string_view::npos) return unexpected(Reason("contains a NUL byte"));
    return std::string(text);
}

std::string format_ip(const IpAddress& address) { return to_string(address); }

std::string format_prefix(const IpPrefix& prefix) {
    return format_ip(prefix.address) + "/" + std::to_string(prefix.length);
}

std::string format_route(const Route& route) {
    std::string text = format_prefix(route.destination);
    if (route.gateway) text += " via " + format_ip(*route.gateway);
    return text;
}

SocketAddress default_fabric_address() {
    return *parse_socket_address("127.0.0.1:" + std::to_string(kFabricUdpPort));
}

SocketAddress default_embedded_listen() {
    return *parse_socket_address("0.0.0.0:" + std::to_string(kFabricUdpPort));
}

}  // namespace ipoibd::config
