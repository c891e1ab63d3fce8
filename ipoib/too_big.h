// What a link does with an IP datagram longer than it carries, when the
// interface MTU is larger than the link to this destination (connected mode,
// RFC 4755: 65520 on the interface, the UD link's 2044 or 4092 towards
// datagram-mode peers and multicast). As the kernel's ipoib_cm does, the
// sender's stack is told with ICMP, as a router on the path would:
//  - IPv4 with Don't Fragment set: ICMP Destination Unreachable,
//    Fragmentation Needed (RFC 792, RFC 1191 4: Next-Hop MTU), quoting the
//    header and as much of the datagram as fits in 576 bytes;
//  - IPv4 without DF: fragmented here (RFC 791: fragments of a multiple of
//    8 bytes, MF and offsets, the header checksum recomputed; options are
//    copied into every fragment only when their copied flag says so), so
//    nothing is lost;
//  - IPv6: ICMPv6 Packet Too Big (RFC 4443 3.2, RFC 8201), quoting as much
//    of the packet as fits in the minimum MTU of 1280.
// The ICMP message's source is the original destination (the peer the
// datagram could not reach; a source of the host's own would be a martian to
// its reverse-path filter) and its destination the original source.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/byte_io.h"

namespace ipoibd::ipoib {

inline constexpr std::size_t kIcmpV4QuoteLimit = 576;    // RFC 1812 4.3.2.3: the whole ICMP datagram
inline constexpr std::size_t kIcmpV6QuoteLimit = 1280;   // RFC 4443 2.4 (c)

// The ICMP (IPv4, DF set) or ICMPv6 message telling the sender of `packet`
// that `mtu` is the largest datagram the next hop takes, as a whole IP
// datagram written into `out`; nullopt when `packet` is not one that may be
// answered (not IPv4/IPv6, an ICMP error itself, a non-first fragment, a
// source that is unspecified or multicast: RFC 1812 4.3.2.7, RFC 4443 2.4).
std::optional<std::size_t> build_too_big(bytes packet, std::uint32_t mtu, std::vector<std::uint8_t>& out);

// Whether `packet` is IPv4 with Don't Fragment clear (fragment_v4 applies).
bool may_fragment_v4(bytes packet);

// Cuts an IPv4 datagram (DF clear) into fragments of at most `mtu` bytes,
// handing each to `emit`; the number of fragments, or 0 when it cannot (DF
// set, a header too long to leave 8 data bytes per fragment, malformed).
std::size_t fragment_v4(bytes packet, std::uint32_t mtu, const std::function<void(bytes)>& emit);

}  // namespace ipoibd::ipoib
