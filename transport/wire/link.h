// Link packets (IBA vol. 1 7.9.4): the 6-byte flow control packets two
// directly connected ports exchange while their link is up.
//
//   bits 47:44 Op      0 = normal flow control, 1 = flow control init
//   bits 43:32 FCTBS   flow control total blocks sent
//   bits 31:28 VL
//   bits 27:16 FCCL    flow control credit limit
//   bits 15:0  LPCRC   CRC-16 (the VCRC polynomial) over the first 4 bytes,
//                      least significant byte first like the VCRC
//
// On the soft fabric a port and the switch send these to each other
// periodically: they are the link's physical heartbeat. A switch port that
// receives them is LinkUp (PortState Init until the SM programs it); one
// that stops receiving them goes Down. A datagram of exactly 6 bytes is a
// link packet; IBA data packets are at least 26 bytes.
#pragma once

#include <cstdint>

#include "common/byte_io.h"
#include "common/expected.h"
#include "transport/wire/crc.h"

namespace ipoibd::ib {

struct LinkPacket {
    static constexpr std::size_t size = 6;
    static constexpr std::uint8_t kOpNormal = 0;
    static constexpr std::uint8_t kOpInit = 1;

    std::uint8_t op = kOpNormal;  // 4 bits
    std::uint16_t fctbs = 0;      // 12 bits
    std::uint8_t vl = 0;          // 4 bits
    std::uint16_t fccl = 0;       // 12 bits

    bool fields_in_range() const { return op <= 0xF && fctbs <= 0xFFF && vl <= 0xF && fccl <= 0xFFF; }
    void write_to(std::uint8_t* p) const {
        store_be16(p, static_cast<std::uint16_t>((op << 12) | fctbs));
        store_be16(p + 2, static_cast<std::uint16_t>((vl << 12) | fccl));
        store_le16(p + 4, crc16_vcrc(bytes(p, 4)));
    }
    static LinkPacket read_from(const std::uint8_t* p) {
        const std::uint16_t a = load_be16(p), b = load_be16(p + 2);
        return {static_cast<std::uint8_t>(a >> 12), static_cast<std::uint16_t>(a & 0xFFF),
                static_cast<std::uint8_t>(b >> 12), static_cast<std::uint16_t>(b & 0xFFF)};
    }
    bool operator==(const LinkPacket&) const = default;
};

enum class LinkPacketError : std::uint8_t { wrong_size, bad_lpcrc, bad_op };

// A received link packet: exactly 6 bytes, LPCRC good, Op 0 or 1.
inline expected<LinkPacket, LinkPacketError> parse_link_packet(bytes in) {
    if (in.size() != LinkPacket::size) return unexpected(LinkPacketError::wrong_size);
    if (load_le16(in.data() + 4) != crc16_vcrc(in.first(4))) return unexpected(LinkPacketError::bad_lpcrc);
    LinkPacket p = LinkPacket::read_from(in.data());
    if (p.op > LinkPacket::kOpInit) return unexpected(LinkPacketError::bad_op);
    return p;
}

}  // namespace ipoibd::ib
