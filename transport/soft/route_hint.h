// Cut-through unicast on the soft fabric: the switch tells a port where a
// LID's port listens, so that unicast need not pass through the switch
// process (one UDP hop and one process less per packet).
//
// Who may send what to a port (the trust rules, docs/soft-fabric.md):
//  - the switch's address: everything (link packets, SMPs, hints, permits);
//  - a peer the switch named in a permit: unicast IBA packets to a QP other
//    than QP0, until the permit expires;
//  - anyone else: nothing (dropped and counted by the port).
// And a route is taken only from a hint that answers one of the port's own
// route requests: each request carries a fresh random 64-bit nonce, which
// the switch echoes; a hint with another nonce (a forgery, even from the
// switch's spoofed address, or a stale answer) changes nothing.
//
// The switch sends an unsolicited hint (nonce 0) to the ingress port of a
// unicast packet it forwards: "DLID d has a route". The port answers with a
// route request carrying a nonce, behind the packets it sent through the
// switch, holds its packets to that DLID (at most 64, at most
// SoftPortConfig::drain_timeout, 20 ms by default) and starts sending
// directly, held packets first, when the hint answering the nonce comes
// back: the switch reads its socket in order, so by then it has
// forwarded everything the port sent before (IBA delivers a path's packets
// in order; TCP and ibudping notice when not). With that answer the switch
// sends the destination port a permit for the requester's address, valid
// twice the hint's TTL. A burst that overflows the hold goes through the
// switch, in order, followed by a new request; when no answer comes in
// time, a later hint tries again. Halfway through a hint's life the port
// asks again (a new nonce) and keeps sending directly meanwhile.
//
// When a LID moves to another switch port (its port came back with another
// UDP address) or goes, the switch withdraws the routes it hinted: a hint
// with nonce 0 and TTL 0 to every port it told. That port sends to the LID
// through the switch again at once (its held packets first, in order)
// instead of into the old address until the hint expires. Withdrawing only
// ever makes a port use the switch, so it needs no nonce.
//
// Multicast, SMPs and SA MADs always go through the switch. A switch that
// captures (ibfabricd --pcap) sends no hints, so the capture sees all.
//
// A permit says what the peer may send: packets with an SLID of its LIDs
// and, where the switch enforces partitions, a P_Key the switch would have
// let pass between the two ports (the peer's membership bit included: a
// packet may not claim more). A direct packet is checked against it as the
// switch would have checked it (docs/soft-fabric.md). A port in more
// partitions than one permit holds gets several, back to back: the first
// replaces what the peer was permitted, the others add P_Keys. A permit of
// TTL 0 withdraws the peer's (the switch saw it go, or its partitions
// change; the next route request gets a new one).
//
// Wire format (38 bytes; not an IBA packet: no LRH starts with 'I', LVer 9):
//   0-3   magic "IBSF"
//   4     version (3)          5     type (1 hint, 2 request, 3 permit)
//   6-7   DLID (permit: the peer's base LID, 0 to withdraw)
//   8-9   TTL in milliseconds (request: 0; hint: 0 with nonce 0 withdraws;
//         permit: 0 withdraws)
//   10    address family (4, 6; request: 0)
//   11    0; permit: bits 0-2 the peer's LMC, bit 6 the first of a set,
//         bit 7 any P_Key (no partition enforcement), others 0
//   12-13 UDP port             14-29 address (IPv4 in 14-17, rest zero)
//         (hint: where DLID listens; permit: who may send)
//   30-37 nonce (request: the port's; hint: the request's echoed, 0 when
//         unsolicited); permit: four P_Keys, 0 where none
// Version 3 (the permit's LIDs and P_Keys) refuses version 2 and back: a
// port and a switch of different versions take no routes (everything
// passes the switch).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/byte_io.h"
#include "common/socket_address.h"

namespace ipoibd::transport {

struct RouteHint {
    static constexpr std::size_t size = 38;
    static constexpr std::array<std::uint8_t, 4> kMagic{'I', 'B', 'S', 'F'};
    static constexpr std::uint8_t kVersion = 3;
    static constexpr std::uint8_t kTypeUnicast = 1;
    static constexpr std::uint8_t kTypeRequest = 2;
    static constexpr std::uint8_t kTypePermit = 3;

    std::uint16_t dlid = 0;
    std::uint16_t ttl_ms = 0;
    SocketAddress peer;
    std::uint64_t nonce = 0;  // the route request this answers; 0: unsolicited
};

struct RouteRequest {
    std::uint16_t dlid = 0;
    std::uint64_t nonce = 0;
};

// The switch to a port: `peer` may send it unicast for ttl_ms, with an
// SLID in lid..lid + 2^lmc - 1 and one of `pkeys` (or any P_Key).
struct PeerPermit {
    static constexpr std::size_t kPKeys = 4;
    std::uint16_t ttl_ms = 0;  // 0: withdraws what `peer` was permitted
    SocketAddress peer;
    std::uint16_t lid = 0;     // base LID (its low lmc bits 0); 0 in a withdrawal
    std::uint8_t lmc = 0;
    bool first = true;         // replaces what `peer` was permitted; false: adds its P_Keys
    bool any_pkey = false;     // no partition enforcement between the two ports
    std::array<std::uint16_t, kPKeys> pkeys{};  // membership bit included; 0: none
};

using SoftControlBuffer = std::array<std::uint8_t, RouteHint::size>;

// Whether a datagram claims to be a soft-fabric control datagram (magic);
// the decoders then say whether it is a valid one.
bool is_soft_control(bytes datagram);
// nullopt: wrong size, version, type, family, a multicast or zero DLID.
std::optional<RouteHint> decode_route_hint(bytes datagram);
// Writes the 38 bytes; false for a peer that is neither IPv4 nor IPv6.
bool encode_route_hint(const RouteHint& hint, SoftControlBuffer& out);
// A port's request for a hint for `dlid` (type 2; address fields zero),
// answered by a hint carrying the same nonce.
void encode_route_request(const RouteRequest& request, SoftControlBuffer& out);
// A valid route request (a non-zero nonce), else nullopt.
std::optional<RouteRequest> decode_route_request(bytes datagram);
// false for a peer that is neither IPv4 nor IPv6.
bool encode_peer_permit(const PeerPermit& permit, SoftControlBuffer& out);
// nullopt: not a permit, or one that grants nothing or grants it to no LID
// (a withdrawal names nothing but the peer).
std::optional<PeerPermit> decode_peer_permit(bytes datagram);
// Whether `pkey` (of a packet) is one `permitted` (of a permit) allows:
// the same partition, and no fuller membership.
constexpr bool permit_allows_pkey(std::uint16_t permitted, std::uint16_t pkey) {
    return (permitted & 0x7FFF) != 0 && (permitted & 0x7FFF) == (pkey & 0x7FFF) &&
           ((pkey & 0x8000) == 0 || (permitted & 0x8000) != 0);
}

}  // namespace ipoibd::transport
