// A whole IBA transport packet: build one into a buffer, or parse and validate
// one received from the wire.
//
//   LRH [GRH] BTH [RDETH][DETH][RETH][AtomicETH][AETH][AtomicAckETH][ImmDt][IETH]
//   payload pad(0..3) ICRC VCRC
//
// LRH PktLen counts 4-byte words from the LRH through the ICRC; the VCRC is
// outside it. GRH PayLen counts bytes from the BTH through the ICRC. BTH
// PadCnt is the number of pad bytes that round the payload up to 4 bytes.
//
// Inbound validation (parse_packet), in this order; the first failed check
// names the DropReason:
//  1. framing: at least LRH+BTH+ICRC+VCRC; LVer; LNH is an IBA transport;
//     PktLen*4 + 2 equals the datagram; room for the GRH when LNH says global
//  2. VCRC (link integrity, IBA 7.8.2), then ICRC (end to end, IBA 7.8.1):
//     once a CRC fails no other header field is trusted, so corruption is
//     counted as corruption and not as whatever field it happened to hit
//  3. GRH: IPVer 6, NxtHdr 0x1B, PayLen consistent with PktLen
//  4. BTH: TVer 0; opcode defined; opcode of a transport this core parses
//  5. addressing: DLID not reserved (permissive only to QP0), SLID unicast
//     (permissive allowed to QP0), VL15 if and only if QP0, multicast DLID
//     only for UD with DestQP 0xFFFFFF and DestQP 0xFFFFFF only multicast
//  6. extended headers of the opcode fit before the ICRC
//  7. PadCnt: no larger than payload+pad, zero where the opcode must fill PMTU
//  8. payload against the PMTU and the opcode's payload rule
// Port- and QP-level checks (P_Key table, Q_Key, QP state, receive WQE) belong
// to the port that owns the QPs, not to this stateless parser.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "common/byte_io.h"
#include "common/expected.h"
#include "transport/wire/crc.h"
#include "transport/wire/headers.h"
#include "transport/wire/opcodes.h"

namespace ipoibd::ib {

// The smallest and largest IBA transport packets, VCRC included.
inline constexpr std::size_t kMinPacketSize = Lrh::size + Bth::size + kIcrcSize + kVcrcSize;
inline constexpr std::size_t kMaxPacketSize = Lrh::kPktLenMax * 4 + kVcrcSize;
// Largest sum of extended transport headers (RD atomic: RDETH+DETH+AtomicETH).
inline constexpr std::size_t kMaxExtHeadersSize = Rdeth::size + Deth::size + AtomicEth::size;

// Extended transport headers; `present` (ExtHeader bits) says which are on
// the wire. The builder writes the ones the opcode requires.
struct ExtHeaders {
    std::uint16_t present = 0;
    Rdeth rdeth;
    Deth deth;
    Reth reth;
    AtomicEth atomic;
    Aeth aeth;
    AtomicAckEth atomic_ack;
    ImmDt immdt;
    Ieth ieth;
    bool operator==(const ExtHeaders&) const = default;
};

// Wire size of the extended headers named by `mask` (ExtHeader bits).
std::size_t ext_headers_size(std::uint16_t mask);

enum class DropReason : std::uint8_t {
    too_short,             // shorter than LRH+BTH+ICRC+VCRC
    bad_link_version,      // LRH LVer != 0
    not_iba_transport,     // LRH LNH raw or raw IPv6: no BTH to parse
    pkt_len_mismatch,      // LRH PktLen*4 + VCRC != datagram size
    truncated_grh,         // LNH global but no room for GRH+BTH
    bad_vcrc,
    bad_icrc,
    bad_ip_version,        // GRH IPVer != 6
    bad_next_header,       // GRH NxtHdr != 0x1B
    grh_pay_len_mismatch,  // GRH PayLen != bytes from BTH through ICRC
    bad_transport_version, // BTH TVer != 0
    unknown_opcode,        // reserved opcode value
    unsupported_opcode,    // defined, but of a transport not parsed (CNP, XRC, manufacturer)
    bad_dlid,              // DLID 0, or permissive DLID not to QP0
    bad_slid,              // SLID not a unicast LID
    vl15_not_qp0,          // VL15 carries only SMPs to QP0
    bad_multicast,         // multicast DLID not UD or not to QP 0xFFFFFF; QP 0xFFFFFF to a unicast DLID
    truncated_headers,     // the opcode's extended headers run into the ICRC
    bad_pad_count,         // PadCnt larger than payload+pad, or non-zero in First/Middle
    payload_exceeds_pmtu,
    bad_payload_length,    // payload where none is allowed, or First/Middle not PMTU
    count_
};
inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::count_);
const char* to_string(DropReason r);

// A validated packet. Spans point into the buffer given to parse_packet.
struct Packet {
    Lrh lrh;
    std::optional<Grh> grh;
    Bth bth;
    ExtHeaders ext;
    bytes payload;  // without the pad
    std::uint32_t icrc = 0;
    std::uint16_t vcrc = 0;
};

struct ParseOptions {
    std::uint32_t pmtu = kMaxPmtuBytes;  // path MTU of the receiving port, bytes
};

expected<Packet, DropReason> parse_packet(bytes wire, const ParseOptions& options = {});

// The checks a switch makes before forwarding (IBA 7.9): step 1 of
// parse_packet except the LNH rule (raw packets are forwarded too), and the
// VCRC. The ICRC is end to end: the destination port checks it.
expected<Lrh, DropReason> link_check(bytes wire);

// What to build. PktLen, PayLen, LNH, PadCnt and both CRCs are computed; the
// extended headers written are exactly those the opcode requires.
struct PacketSpec {
    Lrh lrh;
    std::optional<Grh> grh;
    Bth bth;
    ExtHeaders ext;
    bytes payload;
};

enum class BuildError : std::uint8_t {
    unknown_opcode,      // reserved, or a transport this core does not build
    field_out_of_range,  // a header field exceeds its bit width
    too_long,            // the packet would exceed PktLen's 11 bits
    short_buffer,        // `out` is smaller than packet_size()
};
const char* to_string(BuildError e);

// Total wire size of the packet `spec` describes, VCRC included.
std::size_t packet_size(const PacketSpec& spec);

// Writes the packet to the front of `out`; returns its size.
expected<std::size_t, BuildError> build_packet(const PacketSpec& spec, mutable_bytes out);

}  // namespace ipoibd::ib
