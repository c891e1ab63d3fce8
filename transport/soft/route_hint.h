// Cut-through unicast on the soft fabric: the switch tells a port where a
// LID's port listens, so that unicast need not pass through the switch
// process (one UDP hop and one process less per packet).
//
// The switch sends a route hint to the ingress port of a unicast packet it
// forwards: "DLID d is at UDP address A for the next ttl_ms". The port then
// sends packets to d straight to A until the hint expires, and one packet
// through the switch after that fetches a fresh hint (the switch re-sends a
// hint at most every ttl/2 per port and DLID). What the switch would do
// still holds: hints exist only for routes the SM programmed; they expire,
// and a port forgets them when its link goes down; the receiving port
// validates every packet (VCRC, ICRC, P_Key, Q_Key) whoever sent it.
// To keep using a route without a gap (a packet through the switch in the
// middle of a direct stream would arrive late and look like loss to TCP),
// a port asks for a fresh hint with a route request (type 2, the DLID, no
// address) once half of a hint's TTL has passed, and keeps sending
// directly meanwhile.
//
// Switching a route from the switch to direct must not reorder it either
// (IBA delivers a path's packets in order, and TCP and ibudping notice):
// packets the port sent through the switch just before a hint came may
// still be in the switch's socket, and a direct packet would overtake them.
// So a port does not use a new hint at once: it sends a route request
// carrying a marker (1-255) behind its packets, holds its packets to that
// DLID (at most 64, at most 20 ms), and starts sending directly, held
// packets first, when the hint answering that marker comes back: the
// switch reads its socket in order, so by then it has forwarded everything
// the port sent before the request. Unsolicited hints carry marker 0. A
// burst that overflows the hold goes through the switch, in order, followed
// by a new marker; when no answer comes in time, a later hint tries again.
//
// Multicast, SMPs and SA MADs always go through the switch. A switch that
// captures (ibfabricd --pcap) sends no hints, so the capture sees all.
//
// Wire format (30 bytes; not an IBA packet: no LRH starts with 'I', LVer 9):
//   0-3   magic "IBSF"
//   4     version (1)          5     type (1: unicast route)
//   6-7   DLID                 8-9   TTL in milliseconds
//   10    address family (4, 6)    11  marker (request: the port's;
//                                      hint: the request's echoed, 0 unsolicited)
//   12-13 UDP port             14-29 address (IPv4 in 14-17, rest zero)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/byte_io.h"
#include "common/socket_address.h"

namespace ipoibd::transport {

struct RouteHint {
    static constexpr std::size_t size = 30;
    static constexpr std::array<std::uint8_t, 4> kMagic{'I', 'B', 'S', 'F'};
    static constexpr std::uint8_t kVersion = 1;
    static constexpr std::uint8_t kTypeUnicast = 1;
    static constexpr std::uint8_t kTypeRequest = 2;

    std::uint16_t dlid = 0;
    std::uint16_t ttl_ms = 0;
    SocketAddress peer;
    std::uint8_t marker = 0;  // the route request this answers; 0: unsolicited
};

struct RouteRequest {
    std::uint16_t dlid = 0;
    std::uint8_t marker = 0;
};

// Whether a datagram claims to be a soft-fabric control datagram (magic);
// decode_route_hint() then says whether it is a valid one.
bool is_soft_control(bytes datagram);
// nullopt: wrong size, version, type, family, a multicast or zero DLID.
std::optional<RouteHint> decode_route_hint(bytes datagram);
// Writes the 30 bytes; false for a peer that is neither IPv4 nor IPv6.
bool encode_route_hint(const RouteHint& hint, std::array<std::uint8_t, RouteHint::size>& out);
// A port's request for a fresh hint for `dlid` (type 2; address fields zero),
// answered by a hint carrying the same marker.
void encode_route_request(const RouteRequest& request, std::array<std::uint8_t, RouteHint::size>& out);
// A valid route request, else nullopt.
std::optional<RouteRequest> decode_route_request(bytes datagram);

}  // namespace ipoibd::transport
