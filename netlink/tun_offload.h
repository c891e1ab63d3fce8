// TUN offloads (IFF_VNET_HDR): the kernel hands the daemon TCP super-packets
// of up to 64 KiB (TSO) with checksums left partial, and the daemon cuts
// them into datagrams of the link MTU itself: one read() per super-packet
// instead of one per datagram, and the host's TCP stack sends big segments.
// Byte logic only, no syscalls (wireguard-go keeps the same split).
//
// Every read from such a TUN starts with a virtio_net_hdr (10 bytes,
// <linux/virtio_net.h>, little-endian, as the kernel uses it for TUN):
//   0     flags        NEEDS_CSUM (1): the checksum at csum_start +
//                      csum_offset holds only the pseudo-header sum
//   1     gso_type     NONE 0, TCPV4 1, UDP 3, TCPV6 4, ECN bit 0x80
//   2-3   hdr_len      bytes of headers (hint; recomputed here)
//   4-5   gso_size     payload bytes per segment
//   6-7   csum_start   where the checksummed part starts
//   8-9   csum_offset  where, from csum_start, the checksum field is
// Every write carries one too (all zero: a plain packet).
//
// segment_tun_packet():
//  1. no GSO: complete a partial checksum if asked; the packet as is;
//  2. TCP GSO: per segment, the IP and TCP headers copied; IPv4 Total
//     Length, Identification (+1 per segment) and header checksum, or IPv6
//     Payload Length; TCP sequence number advanced; FIN and PSH only on
//     the last segment, CWR only on the first; the TCP checksum computed
//     whole (pseudo-header, header, payload);
//  3. anything else (UDP GSO, a header that does not parse): refused with a
//     reason, counted by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/byte_io.h"
#include "common/expected.h"

namespace ipoibd::netlink {

struct VirtioNetHeader {
    static constexpr std::size_t size = 10;
    static constexpr std::uint8_t kFlagNeedsCsum = 1;
    static constexpr std::uint8_t kGsoNone = 0;
    static constexpr std::uint8_t kGsoTcpV4 = 1;
    static constexpr std::uint8_t kGsoUdp = 3;
    static constexpr std::uint8_t kGsoTcpV6 = 4;
    static constexpr std::uint8_t kGsoEcn = 0x80;

    std::uint8_t flags = 0;
    std::uint8_t gso_type = 0;
    std::uint16_t hdr_len = 0;
    std::uint16_t gso_size = 0;
    std::uint16_t csum_start = 0;
    std::uint16_t csum_offset = 0;

    static VirtioNetHeader read_from(const std::uint8_t* p);
    void write_to(std::uint8_t* p) const;
};

enum class OffloadError : std::uint8_t {
    truncated,          // shorter than the virtio header, or the headers it implies
    bad_csum_offsets,   // csum_start/csum_offset outside the packet
    unsupported_gso,    // UDP GSO, ECN-only, or an unknown type
    bad_headers,        // IP or TCP header that does not parse for TSO
    count_
};
inline constexpr std::size_t kOffloadErrorCount = static_cast<std::size_t>(OffloadError::count_);
const char* to_string(OffloadError e);

// Internet checksum helpers (RFC 1071): the one's-complement sum, folded.
std::uint32_t checksum_add(std::uint32_t sum, bytes data);
std::uint16_t checksum_fold(std::uint32_t sum);

// Calls `emit` with each IP datagram (no virtio header) that `read` (as read
// from the TUN, virtio header first) stands for, in order. `scratch` is
// reused for the segments, so the spans are valid only during the call.
// Returns the number of datagrams emitted.
expected<std::size_t, OffloadError> segment_tun_packet(mutable_bytes read, std::vector<std::uint8_t>& scratch,
                                                       const std::function<void(bytes ip_packet)>& emit);

}  // namespace ipoibd::netlink
