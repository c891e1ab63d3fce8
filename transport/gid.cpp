#include "transport/gid.h"

#include <arpa/inet.h>

namespace ipoibd {

std::optional<ib::Gid> parse_gid(std::string_view text) {
    ib::Gid g{};
    const std::string z(text);
    if (inet_pton(AF_INET6, z.c_str(), g.data()) != 1) return std::nullopt;
    return g;
}

std::string format_gid(const ib::Gid& gid) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, gid.data(), buf, sizeof buf);
    return buf;
}

}  // namespace ipoibd
