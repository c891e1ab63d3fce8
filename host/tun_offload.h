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
//  2. TCP GSO: per segment, the IP and TCP headers copied (IPv6 with a
//     Hop-by-Hop and a Destination Options header too; other extension
//     headers and a Jumbo Payload option refused); IPv4 Total
//     Length, Identification (+1 per segment) and header checksum, or IPv6
//     Payload Length; TCP sequence number advanced; FIN and PSH only on
//     the last segment, CWR only on the first; the TCP checksum computed
//     whole (pseudo-header, header, payload);
//  3. UDP GSO (UDP_L4: a UDP_SEGMENT sender, when the TUN has USO): per
//     datagram, the IP and UDP headers copied; IPv4 Total Length,
//     Identification and header checksum, or IPv6 Payload Length; UDP
//     Length; the UDP checksum computed whole (0 sent as 0xFFFF);
//  4. anything else (UFO, a header that does not parse, more segments than
//     Linux's own senders make): refused with a reason, counted by the
//     caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/byte_io.h"
#include "common/inet_checksum.h"
#include "common/expected.h"

namespace ipoibd::host {

struct VirtioNetHeader {
    static constexpr std::size_t size = 10;
    static constexpr std::uint8_t kFlagNeedsCsum = 1;
    static constexpr std::uint8_t kGsoNone = 0;
    static constexpr std::uint8_t kGsoTcpV4 = 1;
    static constexpr std::uint8_t kGsoUdp = 3;
    static constexpr std::uint8_t kGsoTcpV6 = 4;
    static constexpr std::uint8_t kGsoUdpL4 = 5;
    static constexpr std::uint8_t kGsoEcn = 0x80;
    // The most datagrams one super-packet is cut into. Linux's TCP never
    // cuts finer than TCP_MIN_GSO_SIZE (8 bytes: TCP_MIN_SND_MSS 48 less 40
    // of options), 8,192 segments of 65,535 bytes; its UDP GSO makes at
    // most UDP_MAX_SEGMENTS (64, 128 in recent kernels) and the kernel
    // holds packet sockets to that too. For TCP it does not: a packet
    // socket with PACKET_VNET_HDR can hand the TUN a super-packet with a
    // gso_size of 1, 65,000 datagrams (an engine pass each) from one read.
    static constexpr std::size_t kMaxTcpSegments = 8192;
    static constexpr std::size_t kMaxUdpSegments = 128;

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
    unsupported_gso,    // UFO, ECN-only, or an unknown type
    bad_headers,        // IP or TCP header that does not parse for TSO
    too_many_segments,  // more than kMaxTcpSegments / kMaxUdpSegments (gso_size too small)
    count_
};
inline constexpr std::size_t kOffloadErrorCount = static_cast<std::size_t>(OffloadError::count_);
const char* to_string(OffloadError e);

// Internet checksum helpers (RFC 1071): common/inet_checksum.h.
using ipoibd::checksum_add;
using ipoibd::checksum_fold;

// Calls `emit` with each IP datagram (no virtio header) that `read` (as read
// from the TUN, virtio header first) stands for, in order. `scratch` is
// reused for the segments, so the spans are valid only during the call.
// Returns the number of datagrams emitted.
expected<std::size_t, OffloadError> segment_tun_packet(mutable_bytes read, std::vector<std::uint8_t>& scratch,
                                                       const std::function<void(bytes ip_packet)>& emit);

// The other direction: TCP segments the daemon is about to write to the
// TUN, coalesced into super-packets the host's TCP stack takes in one go
// (what GRO does for a NIC); with `udp` (a TUN with USO) runs of UDP
// datagrams of one flow too, written as one UDP_L4 GSO packet that the
// kernel cuts again (one write and one pass through IP for up to 64). Only runs of consecutive packets are merged,
// so the order of everything written is kept:
//  1. add() copies a packet; if it continues the open run (same addresses,
//     ports, TTL/Hop Limit, TOS, ACK number, window, TCP options; sequence
//     number where the run ends; ACK with at most PSH; no IPv4 options or
//     fragments; every earlier segment full size, this one no larger) it
//     joins it, otherwise the open run is written first;
//  2. a run ends after a short segment or PSH, or at 64 KiB;
//  UDP: same addresses, ports, TOS/traffic class, TTL/Hop Limit, DF; no
//     IPv4 options or fragments, no IPv6 extension headers; every earlier
//     datagram the size of the first, this one no larger (a smaller one
//     ends the run); at most 64 datagrams and 64 KiB;
//  3. flush() writes what is open. A run of one is written as it came (a
//     zero virtio header); a longer run as one packet with gso_type TCPv4/6,
//     gso_size the segment size, NEEDS_CSUM over the TCP part and the
//     pseudo-header sum in the checksum field, IPv4 length and header
//     checksum recomputed.
// The owner calls flush() before it waits for input again, so nothing
// waits longer than one loop turn.
class TunCoalescer {
public:
    using Writer = std::function<void(bytes vnet_header_and_packet)>;

    explicit TunCoalescer(Writer write, bool udp = false);
    void add(bytes ip_packet);
    void flush();

    std::uint64_t packets_in() const { return packets_in_; }
    std::uint64_t packets_out() const { return packets_out_; }

private:
    struct Flow {
        bool udp = false;
        bool v6 = false;
        std::size_t ip_len = 0;
        std::size_t tcp_len = 0;
        std::size_t mss = 0;       // payload of the first segment
        std::uint32_t next_seq = 0;
        std::size_t segments = 0;
        bool closed = false;       // a short segment or PSH ended it
    };
    bool continues(bytes p) const;
    void start(bytes p);
    void append(bytes p);

    Writer write_;
    bool udp_ = false;
    std::vector<std::uint8_t> buf_;  // virtio header + the run's packet
    std::size_t used_ = 0;           // bytes of buf_ in use (0: no run)
    std::optional<Flow> flow_;       // the run is mergeable TCP
    std::uint64_t packets_in_ = 0;
    std::uint64_t packets_out_ = 0;
};

}  // namespace ipoibd::host
