#include "transport/soft/route_hint.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "transport/wire/headers.h"

namespace ipoibd::transport {

namespace {

constexpr std::size_t kNonceOffset = 30;

// Magic, version, type, DLID, nonce; the rest zero.
void write_common(std::uint8_t type, std::uint16_t dlid, std::uint64_t nonce, SoftControlBuffer& out) {
    out.fill(0);
    std::copy(RouteHint::kMagic.begin(), RouteHint::kMagic.end(), out.begin());
    out[4] = RouteHint::kVersion;
    out[5] = type;
    store_be16(out.data() + 6, dlid);
    store_be64(out.data() + kNonceOffset, nonce);
}

bool valid_header(bytes d, std::uint8_t type) {
    return d.size() == RouteHint::size && is_soft_control(d) && d[4] == RouteHint::kVersion && d[5] == type &&
           (d[11] == 0 || type == RouteHint::kTypePermit);
}

constexpr std::uint8_t kPermitLmcMask = 0x07;
constexpr std::uint8_t kPermitFirst = 0x40;
constexpr std::uint8_t kPermitAnyPKey = 0x80;

bool write_address(const SocketAddress& peer, SoftControlBuffer& out) {
    store_be16(out.data() + 12, peer.port());
    if (peer.family() == AF_INET) {
        sockaddr_in a{};
        std::memcpy(&a, &peer.storage, sizeof a);
        out[10] = 4;
        std::memcpy(out.data() + 14, &a.sin_addr, 4);
        return true;
    }
    if (peer.family() == AF_INET6) {
        sockaddr_in6 a{};
        std::memcpy(&a, &peer.storage, sizeof a);
        out[10] = 6;
        std::memcpy(out.data() + 14, &a.sin6_addr, 16);
        return true;
    }
    return false;
}

std::optional<SocketAddress> read_address(bytes d) {
    SocketAddress peer;
    const std::uint16_t port = load_be16(d.data() + 12);
    if (port == 0) return std::nullopt;
    if (d[10] == 4) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        std::memcpy(&a.sin_addr, d.data() + 14, 4);
        std::memcpy(&peer.storage, &a, sizeof a);
        peer.length = sizeof a;
        return peer;
    }
    if (d[10] == 6) {
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(port);
        std::memcpy(&a.sin6_addr, d.data() + 14, 16);
        std::memcpy(&peer.storage, &a, sizeof a);
        peer.length = sizeof a;
        return peer;
    }
    return std::nullopt;
}

}  // namespace

bool is_soft_control(bytes d) {
    return d.size() >= RouteHint::kMagic.size() && std::equal(RouteHint::kMagic.begin(), RouteHint::kMagic.end(), d.begin());
}

std::optional<RouteHint> decode_route_hint(bytes d) {
    if (!valid_header(d, RouteHint::kTypeUnicast)) return std::nullopt;
    RouteHint h;
    h.dlid = load_be16(d.data() + 6);
    h.ttl_ms = load_be16(d.data() + 8);
    h.nonce = load_be64(d.data() + kNonceOffset);
    if (!ib::is_unicast_lid(h.dlid)) return std::nullopt;
    const auto peer = read_address(d);
    if (!peer) return std::nullopt;
    h.peer = *peer;
    return h;
}

bool encode_route_hint(const RouteHint& h, SoftControlBuffer& out) {
    write_common(RouteHint::kTypeUnicast, h.dlid, h.nonce, out);
    store_be16(out.data() + 8, h.ttl_ms);
    return write_address(h.peer, out);
}

void encode_route_request(const RouteRequest& request, SoftControlBuffer& out) {
    write_common(RouteHint::kTypeRequest, request.dlid, request.nonce, out);
}

std::optional<RouteRequest> decode_route_request(bytes d) {
    if (!valid_header(d, RouteHint::kTypeRequest)) return std::nullopt;
    const RouteRequest r{.dlid = load_be16(d.data() + 6), .nonce = load_be64(d.data() + kNonceOffset)};
    if (!ib::is_unicast_lid(r.dlid) || r.nonce == 0) return std::nullopt;
    return r;
}

bool encode_peer_permit(const PeerPermit& permit, SoftControlBuffer& out) {
    write_common(RouteHint::kTypePermit, permit.lid, 0, out);
    store_be16(out.data() + 8, permit.ttl_ms);
    out[11] = static_cast<std::uint8_t>((permit.lmc & kPermitLmcMask) | (permit.first ? kPermitFirst : 0) |
                                        (permit.any_pkey ? kPermitAnyPKey : 0));
    for (std::size_t i = 0; i < PeerPermit::kPKeys; ++i) store_be16(out.data() + kNonceOffset + 2 * i, permit.pkeys[i]);
    return write_address(permit.peer, out);
}

std::optional<PeerPermit> decode_peer_permit(bytes d) {
    if (!valid_header(d, RouteHint::kTypePermit)) return std::nullopt;
    const std::uint8_t flags = d[11];
    if (flags & ~(kPermitLmcMask | kPermitFirst | kPermitAnyPKey)) return std::nullopt;
    PeerPermit p;
    p.ttl_ms = load_be16(d.data() + 8);
    p.lid = load_be16(d.data() + 6);
    p.lmc = flags & kPermitLmcMask;
    p.first = (flags & kPermitFirst) != 0;
    p.any_pkey = (flags & kPermitAnyPKey) != 0;
    bool some_pkey = false;
    for (std::size_t i = 0; i < PeerPermit::kPKeys; ++i) {
        p.pkeys[i] = load_be16(d.data() + kNonceOffset + 2 * i);
        some_pkey = some_pkey || (p.pkeys[i] & 0x7FFF) != 0;
    }
    const auto peer = read_address(d);
    if (!peer) return std::nullopt;
    p.peer = *peer;
    if (p.ttl_ms == 0) {  // a withdrawal names the peer alone
        if (p.lid != 0 || flags != 0 || some_pkey) return std::nullopt;
        return p;
    }
    const auto span = static_cast<std::uint16_t>((1u << p.lmc) - 1);
    if (!ib::is_unicast_lid(p.lid) || (p.lid & span) != 0 || !ib::is_unicast_lid(static_cast<std::uint16_t>(p.lid | span)))
        return std::nullopt;
    // Any P_Key, or some: never both, never none.
    if (p.any_pkey == some_pkey) return std::nullopt;
    return p;
}

}  // namespace ipoibd::transport
