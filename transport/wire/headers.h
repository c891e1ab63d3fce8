// InfiniBand Architecture base and extended transport headers (IBA vol. 1
// ch. 5 and 9): LRH, GRH, BTH and the extended transport headers RDETH,
// DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt and IETH.
//
// Every size and offset is a named constant next to its header. Fields use
// the spec's names. Each header struct holds host values; write_to() and
// read_from() move them to and from big-endian wire bytes at fixed offsets
// (never by casting a buffer). encode()/decode() below check the span length
// first and return a typed error; decode never fails on field values, which
// the packet parser (packet.h) validates in the order of IBA ch. 9.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "common/byte_io.h"
#include "common/expected.h"

namespace ipoibd::ib {

using Gid = std::array<std::uint8_t, 16>;

// ---------------------------------------------------------------------------
// Identifiers with reserved values (IBA 4.1, 10.2)
inline constexpr std::uint16_t kLidReserved = 0x0000;
inline constexpr std::uint16_t kLidUnicastFirst = 0x0001;
inline constexpr std::uint16_t kLidUnicastLast = 0xBFFF;
inline constexpr std::uint16_t kLidMulticastFirst = 0xC000;
inline constexpr std::uint16_t kLidMulticastLast = 0xFFFE;
inline constexpr std::uint16_t kLidPermissive = 0xFFFF;

inline constexpr bool is_unicast_lid(std::uint16_t lid) {
    return lid >= kLidUnicastFirst && lid <= kLidUnicastLast;
}
inline constexpr bool is_multicast_lid(std::uint16_t lid) {
    return lid >= kLidMulticastFirst && lid <= kLidMulticastLast;
}

inline constexpr std::uint32_t kQpnMask = 0x00FFFFFF;      // QPNs are 24 bits
inline constexpr std::uint32_t kQp0 = 0;                   // SMI
inline constexpr std::uint32_t kQp1 = 1;                   // GSI
inline constexpr std::uint32_t kQpnMulticast = 0x00FFFFFF; // DestQP of every multicast packet
inline constexpr std::uint32_t kPsnMask = 0x00FFFFFF;
inline constexpr std::uint32_t kGsiQKey = 0x80010000;      // well-known Q_Key of QP1
inline constexpr std::uint32_t kQKeyControlledBit = 0x80000000;
inline constexpr std::uint16_t kPKeyDefault = 0xFFFF;
inline constexpr std::uint16_t kPKeyFullMemberBit = 0x8000;
inline constexpr std::uint16_t kPKeyBaseMask = 0x7FFF;

inline constexpr std::uint8_t kVl15 = 15;  // management VL: SMPs to QP0 only

// Path MTU encodings (IBA 7.7.5 / PortInfo NeighborMTU) and their sizes.
enum class Mtu : std::uint8_t { mtu256 = 1, mtu512 = 2, mtu1024 = 3, mtu2048 = 4, mtu4096 = 5 };
inline constexpr std::uint32_t mtu_bytes(Mtu m) { return 128u << static_cast<unsigned>(m); }
inline constexpr std::uint32_t kMaxPmtuBytes = 4096;

// ---------------------------------------------------------------------------
// Local Route Header, 8 bytes (IBA 7.7)
//   byte 0: VL(7:4) LVer(3:0)
//   byte 1: SL(7:4) Rsv2(3:2) LNH(1:0)
//   bytes 2-3: DLID
//   bytes 4-5: Rsv5(15:11) PktLen(10:0), in 4-byte words, LRH through ICRC
//   bytes 6-7: SLID
enum class Lnh : std::uint8_t {
    raw = 0,         // raw packet, non-IBA transport
    ipv6_raw = 1,    // raw IPv6 packet
    iba_local = 2,   // BTH follows the LRH
    iba_global = 3,  // GRH follows the LRH, then BTH
};

struct Lrh {
    static constexpr std::size_t size = 8;
    static constexpr std::uint8_t kLinkVersion = 0;
    static constexpr std::uint16_t kPktLenMax = 0x07FF;

    std::uint8_t vl = 0;         // 4 bits
    std::uint8_t lver = kLinkVersion;  // 4 bits
    std::uint8_t sl = 0;         // 4 bits
    Lnh lnh = Lnh::iba_local;    // 2 bits
    std::uint16_t dlid = 0;
    std::uint16_t pkt_len = 0;   // 11 bits, 4-byte words
    std::uint16_t slid = 0;

    bool fields_in_range() const {
        return vl <= 0xF && lver <= 0xF && sl <= 0xF && static_cast<std::uint8_t>(lnh) <= 3 &&
               pkt_len <= kPktLenMax;
    }
    void write_to(std::uint8_t* p) const {
        p[0] = static_cast<std::uint8_t>((vl << 4) | lver);
        p[1] = static_cast<std::uint8_t>((sl << 4) | static_cast<std::uint8_t>(lnh));
        store_be16(p + 2, dlid);
        store_be16(p + 4, pkt_len);
        store_be16(p + 6, slid);
    }
    static Lrh read_from(const std::uint8_t* p) {
        Lrh h;
        h.vl = p[0] >> 4;
        h.lver = p[0] & 0xF;
        h.sl = p[1] >> 4;
        h.lnh = static_cast<Lnh>(p[1] & 0x3);
        h.dlid = load_be16(p + 2);
        h.pkt_len = load_be16(p + 4) & kPktLenMax;
        h.slid = load_be16(p + 6);
        return h;
    }
    bool operator==(const Lrh&) const = default;
};

// ---------------------------------------------------------------------------
// Global Route Header, 40 bytes (IBA 8.3), laid out like an IPv6 header
//   bytes 0-3: IPVer(31:28)=6 TClass(27:20) FlowLabel(19:0)
//   bytes 4-5: PayLen, bytes from the BTH through the ICRC
//   byte 6: NxtHdr (0x1B: IBA transport), byte 7: HopLmt
//   bytes 8-23: SGID, bytes 24-39: DGID
struct Grh {
    static constexpr std::size_t size = 40;
    static constexpr std::uint8_t kIpVersion = 6;
    static constexpr std::uint8_t kNextHeaderIba = 0x1B;
    static constexpr std::size_t kOffsetPayLen = 4;
    static constexpr std::size_t kOffsetSgid = 8;
    static constexpr std::size_t kOffsetDgid = 24;

    std::uint8_t ip_ver = kIpVersion;  // 4 bits
    std::uint8_t tclass = 0;
    std::uint32_t flow_label = 0;      // 20 bits
    std::uint16_t pay_len = 0;
    std::uint8_t next_hdr = kNextHeaderIba;
    std::uint8_t hop_limit = 0;
    Gid sgid{};
    Gid dgid{};

    bool fields_in_range() const { return ip_ver <= 0xF && flow_label <= 0xFFFFF; }
    void write_to(std::uint8_t* p) const {
        store_be32(p, (std::uint32_t{ip_ver} << 28) | (std::uint32_t{tclass} << 20) | flow_label);
        store_be16(p + kOffsetPayLen, pay_len);
        p[6] = next_hdr;
        p[7] = hop_limit;
        std::memcpy(p + kOffsetSgid, sgid.data(), sgid.size());
        std::memcpy(p + kOffsetDgid, dgid.data(), dgid.size());
    }
    static Grh read_from(const std::uint8_t* p) {
        Grh h;
        const std::uint32_t w = load_be32(p);
        h.ip_ver = static_cast<std::uint8_t>(w >> 28);
        h.tclass = static_cast<std::uint8_t>(w >> 20);
        h.flow_label = w & 0xFFFFF;
        h.pay_len = load_be16(p + kOffsetPayLen);
        h.next_hdr = p[6];
        h.hop_limit = p[7];
        std::memcpy(h.sgid.data(), p + kOffsetSgid, 16);
        std::memcpy(h.dgid.data(), p + kOffsetDgid, 16);
        return h;
    }
    bool operator==(const Grh&) const = default;
};

// ---------------------------------------------------------------------------
// Base Transport Header, 12 bytes (IBA 9.2)
//   byte 0: OpCode
//   byte 1: SE(7) M(6) PadCnt(5:4) TVer(3:0)
//   bytes 2-3: P_Key
//   byte 4: Resv8a (variant: masked to ones in the ICRC; the congestion
//           control annex puts FECN/BECN here)
//   bytes 5-7: DestQP
//   byte 8: A(7) Resv7(6:0)
//   bytes 9-11: PSN
struct Bth {
    static constexpr std::size_t size = 12;
    static constexpr std::uint8_t kTransportVersion = 0;
    static constexpr std::size_t kOffsetResv8a = 4;

    std::uint8_t opcode = 0;
    bool se = false;            // solicited event
    bool mig_req = false;       // M: migration request
    std::uint8_t pad_cnt = 0;   // 2 bits
    std::uint8_t tver = kTransportVersion;  // 4 bits
    std::uint16_t pkey = kPKeyDefault;
    std::uint8_t resv8a = 0;
    std::uint32_t dest_qp = 0;  // 24 bits
    bool ack_req = false;       // A
    std::uint32_t psn = 0;      // 24 bits

    bool fields_in_range() const {
        return pad_cnt <= 3 && tver <= 0xF && dest_qp <= kQpnMask && psn <= kPsnMask;
    }
    void write_to(std::uint8_t* p) const {
        p[0] = opcode;
        p[1] = static_cast<std::uint8_t>((se ? 0x80 : 0) | (mig_req ? 0x40 : 0) | (pad_cnt << 4) | tver);
        store_be16(p + 2, pkey);
        p[4] = resv8a;
        store_be24(p + 5, dest_qp);
        p[8] = ack_req ? 0x80 : 0;
        store_be24(p + 9, psn);
    }
    static Bth read_from(const std::uint8_t* p) {
        Bth h;
        h.opcode = p[0];
        h.se = (p[1] & 0x80) != 0;
        h.mig_req = (p[1] & 0x40) != 0;
        h.pad_cnt = (p[1] >> 4) & 0x3;
        h.tver = p[1] & 0xF;
        h.pkey = load_be16(p + 2);
        h.resv8a = p[4];
        h.dest_qp = load_be24(p + 5);
        h.ack_req = (p[8] & 0x80) != 0;
        h.psn = load_be24(p + 9);
        return h;
    }
    bool operator==(const Bth&) const = default;
};

// ---------------------------------------------------------------------------
// Reliable Datagram ETH, 4 bytes (IBA 9.3.1): Resv8 EE-Context(24)
struct Rdeth {
    static constexpr std::size_t size = 4;
    std::uint32_t ee_context = 0;  // 24 bits
    bool fields_in_range() const { return ee_context <= 0xFFFFFF; }
    void write_to(std::uint8_t* p) const { p[0] = 0; store_be24(p + 1, ee_context); }
    static Rdeth read_from(const std::uint8_t* p) { return {load_be24(p + 1)}; }
    bool operator==(const Rdeth&) const = default;
};

// Datagram ETH, 8 bytes (IBA 9.3.2): Q_Key(32) Resv8 SrcQP(24)
struct Deth {
    static constexpr std::size_t size = 8;
    std::uint32_t qkey = 0;
    std::uint32_t src_qp = 0;  // 24 bits
    bool fields_in_range() const { return src_qp <= kQpnMask; }
    void write_to(std::uint8_t* p) const {
        store_be32(p, qkey);
        p[4] = 0;
        store_be24(p + 5, src_qp);
    }
    static Deth read_from(const std::uint8_t* p) { return {load_be32(p), load_be24(p + 5)}; }
    bool operator==(const Deth&) const = default;
};

// RDMA ETH, 16 bytes (IBA 9.3.3): VA(64) R_Key(32) DMALen(32)
struct Reth {
    static constexpr std::size_t size = 16;
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint32_t dma_len = 0;
    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const {
        store_be64(p, va);
        store_be32(p + 8, rkey);
        store_be32(p + 12, dma_len);
    }
    static Reth read_from(const std::uint8_t* p) { return {load_be64(p), load_be32(p + 8), load_be32(p + 12)}; }
    bool operator==(const Reth&) const = default;
};

// Atomic ETH, 28 bytes (IBA 9.3.4): VA(64) R_Key(32) SwapDt(64) CmpDt(64)
struct AtomicEth {
    static constexpr std::size_t size = 28;
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint64_t swap_add = 0;  // SwapDt, or AddDt for FetchAdd
    std::uint64_t compare = 0;   // CmpDt
    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const {
        store_be64(p, va);
        store_be32(p + 8, rkey);
        store_be64(p + 12, swap_add);
        store_be64(p + 20, compare);
    }
    static AtomicEth read_from(const std::uint8_t* p) {
        return {load_be64(p), load_be32(p + 8), load_be64(p + 12), load_be64(p + 20)};
    }
    bool operator==(const AtomicEth&) const = default;
};

// ACK ETH, 4 bytes (IBA 9.3.5): Syndrome(8) MSN(24)
//   Syndrome bits 6:5 say ACK (00), RNR NAK (01) or NAK (11); bits 4:0 carry
//   the credit count, RNR timer or NAK code (IBA 9.7.5.2).
struct Aeth {
    static constexpr std::size_t size = 4;
    static constexpr std::uint8_t kSyndromeAck = 0x00;
    static constexpr std::uint8_t kSyndromeRnrNak = 0x20;
    static constexpr std::uint8_t kSyndromeNak = 0x60;
    static constexpr std::uint8_t kSyndromeTypeMask = 0x60;
    std::uint8_t syndrome = 0;
    std::uint32_t msn = 0;  // 24 bits
    bool fields_in_range() const { return msn <= 0xFFFFFF; }
    void write_to(std::uint8_t* p) const { p[0] = syndrome; store_be24(p + 1, msn); }
    static Aeth read_from(const std::uint8_t* p) { return {p[0], load_be24(p + 1)}; }
    bool operator==(const Aeth&) const = default;
};

// Atomic ACK ETH, 8 bytes (IBA 9.3.6): OrigRemDt(64)
struct AtomicAckEth {
    static constexpr std::size_t size = 8;
    std::uint64_t orig_remote_data = 0;
    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const { store_be64(p, orig_remote_data); }
    static AtomicAckEth read_from(const std::uint8_t* p) { return {load_be64(p)}; }
    bool operator==(const AtomicAckEth&) const = default;
};

// Immediate Data, 4 bytes (IBA 9.3.7). Opaque to the transport; kept in wire
// order as four bytes' worth of big-endian value.
struct ImmDt {
    static constexpr std::size_t size = 4;
    std::uint32_t value = 0;
    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const { store_be32(p, value); }
    static ImmDt read_from(const std::uint8_t* p) { return {load_be32(p)}; }
    bool operator==(const ImmDt&) const = default;
};

// Invalidate ETH, 4 bytes (IBA 9.3.8): R_Key to invalidate
struct Ieth {
    static constexpr std::size_t size = 4;
    std::uint32_t rkey = 0;
    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const { store_be32(p, rkey); }
    static Ieth read_from(const std::uint8_t* p) { return {load_be32(p)}; }
    bool operator==(const Ieth&) const = default;
};

// ---------------------------------------------------------------------------
// Length-first codecs shared by every header above.
enum class CodecError : std::uint8_t {
    short_buffer,        // the span is smaller than the header
    field_out_of_range,  // a field does not fit its bit width (encode only)
};
const char* to_string(CodecError e);

template <class Header>
expected<std::size_t, CodecError> encode(const Header& h, mutable_bytes out) {
    if (out.size() < Header::size) return unexpected(CodecError::short_buffer);
    if (!h.fields_in_range()) return unexpected(CodecError::field_out_of_range);
    h.write_to(out.data());
    return Header::size;
}

template <class Header>
expected<Header, CodecError> decode(bytes in) {
    if (in.size() < Header::size) return unexpected(CodecError::short_buffer);
    return Header::read_from(in.data());
}

}  // namespace ipoibd::ib
