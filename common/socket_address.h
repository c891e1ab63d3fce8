// Numeric socket addresses as users write them: "198.18.0.1:18516",
// "[2001:db8::1]:18516". No name resolution: the fabric is configured by
// address, and a daemon must not block on DNS.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/expected.h"

namespace ipoibd {

struct SocketAddress {
    sockaddr_storage storage{};
    socklen_t length = 0;

    int family() const { return storage.ss_family; }
    const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
    sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
    std::uint16_t port() const;
    std::string to_string() const;  // same form as parse() accepts
    // The host part without the port, as raw bytes (4 or 16): a map key for
    // "the same host".
    std::string host_key() const;
    bool operator==(const SocketAddress& o) const;
};

// Parses ADDR:PORT (IPv4) or [ADDR]:PORT (IPv6); the error says what is
// wrong with `text` in words.
expected<SocketAddress, std::string> parse_socket_address(std::string_view text);

// Builds an address from a sockaddr the kernel filled in.
SocketAddress socket_address_from(const sockaddr_storage& storage, socklen_t length);

}  // namespace ipoibd
