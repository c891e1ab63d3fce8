// libFuzzer target for what a TUN or TAP read hands the daemon with
// offloads on (host/tun_offload.h): segment_tun_packet() on a virtio_net_hdr
// and the bytes after it, as a packet socket with PACKET_VNET_HDR may write
// them.
//
// Input: the read itself. When the input's first byte is odd, the header's
// gso_type is forced to TCPv4, TCPv6 or UDP_L4 (by the second byte) and
// the IP header's version, protocol and lengths are repaired (for some
// IPv6 inputs with a Destination Options header first), so that most
// inputs reach the cutting.
//
// Invariants checked (a violation aborts):
//   - a refusal names a reason in range and emits nothing;
//   - the count returned is the number of datagrams emitted, at least one,
//     at most kMaxTcpSegments (kMaxUdpSegments for UDP_L4);
//   - no datagram is longer than the packet it came from, none of a cut
//     is empty;
//   - every datagram of a cut super-packet says its own length: IPv4 Total
//     Length, or IPv6 Payload Length + 40, is its size;
//   - IPv6 options headers (Hop-by-Hop, Destination Options) are in every
//     datagram, and the transport header after them;
//   - the payloads of the datagrams of a cut super-packet add up to the
//     super-packet's.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "host/tun_offload.h"

using namespace ipoibd;
using namespace ipoibd::host;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

// Forces a GSO type the cutting takes and an IP header it parses.
void repair(std::vector<std::uint8_t>& r) {
    if (r.size() < VirtioNetHeader::size + 40) return;
    static constexpr std::uint8_t kTypes[] = {VirtioNetHeader::kGsoTcpV4, VirtioNetHeader::kGsoTcpV6,
                                              VirtioNetHeader::kGsoUdpL4};
    r[1] = kTypes[r[1] % 3];
    std::uint8_t* ip = r.data() + VirtioNetHeader::size;
    const std::size_t len = r.size() - VirtioNetHeader::size;
    const bool udp = r[1] == VirtioNetHeader::kGsoUdpL4;
    const bool v6 = r[1] == VirtioNetHeader::kGsoTcpV6 || (udp && (ip[0] & 1));
    if (v6) {
        ip[0] = static_cast<std::uint8_t>(0x60 | (ip[0] & 0x0F));
        store_be16(ip + 4, static_cast<std::uint16_t>(len - 40));
        ip[6] = udp ? 17 : 6;
        // Bit 1 of the version byte: a Destination Options header of 8
        // bytes first (its options are the input's).
        if ((ip[0] & 2) && len >= 40 + 8 + 20) {
            ip[40] = ip[6];
            ip[41] = 0;
            ip[6] = 60;
        }
    } else {
        ip[0] = 0x45;
        store_be16(ip + 2, static_cast<std::uint16_t>(len));
        ip[9] = udp ? 17 : 6;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size > 65535 + VirtioNetHeader::size) return 0;  // a read is no longer
    std::vector<std::uint8_t> read(data, data + size);
    if (size > 0 && (data[0] & 1)) repair(read);
    const std::uint8_t gso = read.size() > 1 ? static_cast<std::uint8_t>(read[1] & ~VirtioNetHeader::kGsoEcn) : 0;
    const bool cut = gso == VirtioNetHeader::kGsoTcpV4 || gso == VirtioNetHeader::kGsoTcpV6 ||
                     gso == VirtioNetHeader::kGsoUdpL4;
    const std::size_t packet = read.size() > VirtioNetHeader::size ? read.size() - VirtioNetHeader::size : 0;

    std::vector<std::uint8_t> scratch;
    std::size_t emitted = 0, headers = 0, payload = 0;
    const auto result = segment_tun_packet(read, scratch, [&](bytes d) {
        ++emitted;
        check(d.size() <= packet);  // an empty one (a bare header) is the engine's to count
        if (!cut) return;
        check(!d.empty());
        const bool v6 = (d[0] >> 4) == 6;
        check(d.size() >= (v6 ? 40u : 20u));
        check((v6 ? load_be16(d.data() + 4) + 40u : load_be16(d.data() + 2)) == d.size());
        // The headers are the same length in every datagram of one cut: the
        // first's tells them, from its transport header.
        if (emitted == 1) {
            std::size_t ip_len = v6 ? 40 : static_cast<std::size_t>(d[0] & 0x0F) * 4;
            // IPv6: Hop-by-Hop and Destination Options headers go with
            // every datagram (at most two; each says its length in 8-byte
            // units past the first 8).
            for (std::uint8_t next = v6 ? d[6] : 0, n = 0; v6 && (next == 0 || next == 60) && n < 2; ++n) {
                check(d.size() >= ip_len + 8);
                next = d[ip_len];
                ip_len += (static_cast<std::size_t>(d[ip_len + 1]) + 1) * 8;
            }
            check(d.size() >= ip_len + (gso == VirtioNetHeader::kGsoUdpL4 ? 8 : 20));
            headers = ip_len + (gso == VirtioNetHeader::kGsoUdpL4 ? 8 : static_cast<std::size_t>(d[ip_len + 12] >> 4) * 4);
        }
        check(d.size() >= headers);
        payload += d.size() - headers;
    });
    if (!result) {
        check(static_cast<std::size_t>(result.error()) < kOffloadErrorCount);
        check(emitted == 0);
        return 0;
    }
    check(*result == emitted && emitted >= 1);
    check(emitted <= (gso == VirtioNetHeader::kGsoUdpL4 ? VirtioNetHeader::kMaxUdpSegments
                                                         : VirtioNetHeader::kMaxTcpSegments));
    if (cut) check(payload + headers == packet);
    return 0;
}
