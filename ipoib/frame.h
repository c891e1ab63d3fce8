// The IPoIB encapsulation header (RFC 4391 6): every IP and ARP datagram on
// an IPoIB link is prefixed by 4 octets, the EtherType of the payload and 16
// reserved bits.
//
//   bytes 0-1: Type (an IANA EtherType, Table 1)
//   bytes 2-3: Reserved: "MUST be set to zero on send and ignored on receive"
//
// The header sits directly after the DETH (or the GRH slot of a receive
// buffer), so the payload of a UD SEND is this header plus the datagram.
// Decapsulation is length-first and names its drop reason; encapsulation
// writes into a caller's span, never allocating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "common/byte_io.h"
#include "common/expected.h"

namespace ipoibd::ipoib {

// RFC 4391 Table 1: the four protocols IPoIB carries.
enum class EtherType : std::uint16_t {
    ipv4 = 0x0800,
    arp = 0x0806,
    rarp = 0x8035,
    ipv6 = 0x86DD,
};
const char* to_string(EtherType t);

// True for the four types of Table 1. "Other network protocols ... may use
// the encapsulation format ... but such use is outside of the scope of this
// document": this daemon drops and counts them.
constexpr bool is_ipoib_ether_type(std::uint16_t type) {
    for (EtherType t : {EtherType::ipv4, EtherType::arp, EtherType::rarp, EtherType::ipv6})
        if (type == static_cast<std::uint16_t>(t)) return true;
    return false;
}

struct EncapHeader {
    static constexpr std::size_t size = 4;
    static constexpr std::size_t kOffsetType = 0;
    static constexpr std::size_t kOffsetReserved = 2;

    std::uint16_t type = 0;
    std::uint16_t reserved = 0;  // zero on send, ignored on receive

    void write_to(std::uint8_t* p) const {
        store_be16(p + kOffsetType, type);
        store_be16(p + kOffsetReserved, reserved);
    }
    static EncapHeader read_from(const std::uint8_t* p) {
        return {load_be16(p + kOffsetType), load_be16(p + kOffsetReserved)};
    }
    bool operator==(const EncapHeader&) const = default;
};
static_assert(EncapHeader::size == 4);

enum class FrameError : std::uint8_t {
    truncated,         // shorter than the 4-octet header
    other_ether_type,  // not one of RFC 4391 Table 1: drop and count
    short_buffer,      // encapsulate: the output span cannot hold header + payload
    count_
};
inline constexpr std::size_t kFrameErrorCount = static_cast<std::size_t>(FrameError::count_);
const char* to_string(FrameError e);

// A received IPoIB payload, classified. `payload` points into the buffer
// given to decapsulate(); `reserved` is kept only so that a caller can count
// senders that break the "zero on send" rule; nothing else looks at it.
struct Frame {
    EtherType type = EtherType::ipv4;
    std::uint16_t reserved = 0;
    bytes payload;
};

// Classifies the payload of a received UD SEND (the bytes after the DETH).
// The payload may be empty: whether an empty IPv4 datagram is acceptable is
// the IP layer's business, not the link's.
expected<Frame, FrameError> decapsulate(bytes received);

// Writes the header for `type` (reserved zero) into out[0..4): for callers
// that built the datagram at out[4..] already. Returns 4.
expected<std::size_t, FrameError> write_encap_header(EtherType type, mutable_bytes out);

// Writes header + a copy of `payload` to `out`; returns the frame size.
// `payload` may overlap `out` (it is moved before the header is written), so
// a datagram already built at out[4..] is encapsulated in place.
expected<std::size_t, FrameError> encapsulate(EtherType type, bytes payload, mutable_bytes out);

}  // namespace ipoibd::ipoib
