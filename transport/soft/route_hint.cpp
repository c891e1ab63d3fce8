#include "transport/soft/route_hint.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "transport/wire/headers.h"

namespace ipoibd::transport {

namespace {

// Magic, version, type, DLID, marker; the rest zero.
void write_common(std::uint8_t type, std::uint16_t dlid, std::uint8_t marker,
                  std::array<std::uint8_t, RouteHint::size>& out) {
    out.fill(0);
    std::copy(RouteHint::kMagic.begin(), RouteHint::kMagic.end(), out.begin());
    out[4] = RouteHint::kVersion;
    out[5] = type;
    store_be16(out.data() + 6, dlid);
    out[11] = marker;
}

}  // namespace

bool is_soft_control(bytes d) {
    return d.size() >= RouteHint::kMagic.size() && std::equal(RouteHint::kMagic.begin(), RouteHint::kMagic.end(), d.begin());
}

std::optional<RouteHint> decode_route_hint(bytes d) {
    if (d.size() != RouteHint::size || !is_soft_control(d)) return std::nullopt;
    if (d[4] != RouteHint::kVersion || d[5] != RouteHint::kTypeUnicast) return std::nullopt;
    RouteHint h;
    h.marker = d[11];
    h.dlid = load_be16(d.data() + 6);
    h.ttl_ms = load_be16(d.data() + 8);
    if (!ib::is_unicast_lid(h.dlid)) return std::nullopt;
    const std::uint16_t port = load_be16(d.data() + 12);
    if (d[10] == 4) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        std::memcpy(&a.sin_addr, d.data() + 14, 4);
        std::memcpy(&h.peer.storage, &a, sizeof a);
        h.peer.length = sizeof a;
    } else if (d[10] == 6) {
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(port);
        std::memcpy(&a.sin6_addr, d.data() + 14, 16);
        std::memcpy(&h.peer.storage, &a, sizeof a);
        h.peer.length = sizeof a;
    } else {
        return std::nullopt;
    }
    return h;
}

bool encode_route_hint(const RouteHint& h, std::array<std::uint8_t, RouteHint::size>& out) {
    write_common(RouteHint::kTypeUnicast, h.dlid, h.marker, out);
    store_be16(out.data() + 8, h.ttl_ms);
    store_be16(out.data() + 12, h.peer.port());
    if (h.peer.family() == AF_INET) {
        sockaddr_in a{};
        std::memcpy(&a, &h.peer.storage, sizeof a);
        out[10] = 4;
        std::memcpy(out.data() + 14, &a.sin_addr, 4);
        return true;
    }
    if (h.peer.family() == AF_INET6) {
        sockaddr_in6 a{};
        std::memcpy(&a, &h.peer.storage, sizeof a);
        out[10] = 6;
        std::memcpy(out.data() + 14, &a.sin6_addr, 16);
        return true;
    }
    return false;
}

void encode_route_request(const RouteRequest& request, std::array<std::uint8_t, RouteHint::size>& out) {
    write_common(RouteHint::kTypeRequest, request.dlid, request.marker, out);
}

std::optional<RouteRequest> decode_route_request(bytes d) {
    if (d.size() != RouteHint::size || !is_soft_control(d)) return std::nullopt;
    if (d[4] != RouteHint::kVersion || d[5] != RouteHint::kTypeRequest) return std::nullopt;
    const RouteRequest r{.dlid = load_be16(d.data() + 6), .marker = d[11]};
    if (!ib::is_unicast_lid(r.dlid)) return std::nullopt;
    return r;
}

}  // namespace ipoibd::transport
