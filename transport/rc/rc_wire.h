// RC packets on the wire (transport/rc/rc_qp.h <-> IBA packets): the
// engine's RcPacket as LRH, BTH with an RC opcode, the extended headers its
// opcode carries (RETH, AETH, ImmDt, IBA 9.2-9.3), the payload, ICRC and
// VCRC, and back. What PortCore and the backends will carry (issue 20).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/expected.h"
#include "transport/rc/rc_qp.h"
#include "transport/wire/packet.h"

namespace ipoibd::transport::rc {

// The path's LRH and BTH fields beyond what the RcPacket holds.
struct RcPath {
    std::uint16_t slid = 0;
    std::uint16_t dlid = 0;
    std::uint8_t sl = 0;
    std::uint16_t pkey = ib::kPKeyDefault;
};

// The whole packet; an RcPacket whose opcode is not RC, or that lacks a
// header its opcode needs, or a field out of range, is refused.
expected<std::vector<std::uint8_t>, ib::BuildError> encode_rc_packet(const RcPacket& p, const RcPath& path);
// The same into `out` (resized to the packet; its capacity reused from one
// packet to the next): the packet's length.
expected<std::size_t, ib::BuildError> encode_rc_packet_into(const RcPacket& p, const RcPath& path,
                                                            std::vector<std::uint8_t>& out);
// The same with the payload apart (`p.payload` ignored) into `out`, which
// keeps its size when it is longer (nothing zeroed again from one packet to
// the next): the packet is its first n bytes.
expected<std::size_t, ib::BuildError> encode_rc_packet_into(const RcPacket& p, bytes payload, const RcPath& path,
                                                            std::vector<std::uint8_t>& out);

// The RcPacket of a parsed RC packet (LRH..VCRC checked by parse_packet);
// nullopt for another transport or an opcode this engine does not carry
// (atomics).
std::optional<RcPacket> decode_rc_packet(const ib::Packet& packet);
// The same without the payload (left empty: it stays in `packet.payload`,
// for RcQp::receive(header, payload, now)).
std::optional<RcPacket> decode_rc_header(const ib::Packet& packet);

}  // namespace ipoibd::transport::rc
