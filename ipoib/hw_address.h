// The 20-octet IPoIB link-layer ("hardware") address (RFC 4391 9.1.1,
// Figure 5). The same bytes are the ARP sender/target hardware address and
// the address in the IPv6 Source/Target Link-Layer Address options.
//
//   byte 0:      Reserved flags: "MUST be set to zero on send and ignored on
//                receive unless specified differently in a future document".
//                The future document is RFC 4755 (IPoIB connected mode):
//                Linux sets 0x80 (IPOIB_FLAGS_RC) when the interface accepts
//                RC connections, 0x40 (IPOIB_FLAGS_UC) for UC.
//   bytes 1-3:   QPN, the UD QP all IP and ARP traffic to the interface goes
//                to (24 bits)
//   bytes 4-19:  GID of the port (RECOMMENDED: subnet prefix + port GUID)
//
// ipoibd speaks datagram mode only, so it sends flags 0. Received flags are
// kept (so a parsed address re-encodes to the same bytes) but are not part of
// a peer's identity: compare neighbours with same_endpoint().
//
// Multicast "addresses" are the same shape: QPN 0xFFFFFF and an MGID; the
// broadcast address is QPN 0xFFFFFF + the broadcast-GID (mgid.h), printed by
// Linux as `00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "transport/wire/headers.h"

namespace ipoibd::ipoib {

struct HwAddress {
    static constexpr std::size_t size = 20;
    static constexpr std::size_t kOffsetFlags = 0;
    static constexpr std::size_t kOffsetQpn = 1;
    static constexpr std::size_t kOffsetGid = 4;
    static constexpr std::uint8_t kFlagConnectedRc = 0x80;  // RFC 4755; Linux IPOIB_FLAGS_RC
    static constexpr std::uint8_t kFlagConnectedUc = 0x40;  // RFC 4755; Linux IPOIB_FLAGS_UC

    std::uint8_t flags = 0;  // "Reserved" in RFC 4391; zero on send
    std::uint32_t qpn = 0;   // 24 bits
    ib::Gid gid{};

    bool fields_in_range() const { return qpn <= ib::kQpnMask; }
    void write_to(std::uint8_t* p) const {
        p[kOffsetFlags] = flags;
        store_be24(p + kOffsetQpn, qpn);
        std::memcpy(p + kOffsetGid, gid.data(), gid.size());
    }
    static HwAddress read_from(const std::uint8_t* p) {
        HwAddress a;
        a.flags = p[kOffsetFlags];
        a.qpn = load_be24(p + kOffsetQpn);
        std::memcpy(a.gid.data(), p + kOffsetGid, a.gid.size());
        return a;
    }
    bool operator==(const HwAddress&) const = default;

    // Same QPN and GID: the reserved/connected-mode flags advertise what a
    // peer can do, they do not name a different endpoint.
    bool same_endpoint(const HwAddress& o) const { return qpn == o.qpn && gid == o.gid; }
    // A multicast link address: an MGID (first octet 0xFF), as Linux decides
    // it on transmit. Its QPN is 0xFFFFFF by construction (multicast_address).
    bool is_multicast() const { return gid[0] == 0xFF; }
};
static_assert(HwAddress::size == 1 + 3 + 16);

// The link address of a multicast group: flags 0, QPN 0xFFFFFF, the MGID.
// With the broadcast-GID this is the link's broadcast address.
inline HwAddress multicast_address(const ib::Gid& mgid) {
    return HwAddress{.flags = 0, .qpn = ib::kQpnMulticast, .gid = mgid};
}

// Length-first codecs: ib::encode(addr, out) and ib::decode<HwAddress>(in)
// from transport/wire/headers.h apply (short_buffer, field_out_of_range).

// The form `ip link` prints: 20 lowercase two-digit hex octets joined by ':'.
std::string format_hw_address(const HwAddress& a);
// Accepts exactly that form, upper or lower case (ifcfg files use upper).
std::optional<HwAddress> parse_hw_address(std::string_view text);

}  // namespace ipoibd::ipoib
