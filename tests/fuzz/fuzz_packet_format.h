// Input format of the fuzz_packet target, shared by the harness
// (fuzz_packet.cpp) and the seed corpus generator (fuzz_packet_seeds.cpp) so
// the two cannot drift apart.
//
// Byte 0 is the selector:
//   bit 7 clear: parse mode. The remaining bytes are one datagram from the
//                wire, LRH through VCRC, handed to ib::parse_packet.
//                Bits 5:0 mod 5 pick the receiving port's PMTU (256, 512,
//                1024, 2048, 4096).
//                Bit 6 set: repair the framing first (see repair_framing):
//                PktLen, GRH PayLen, ICRC and VCRC are recomputed from the
//                mutated bytes, so that mutations reach the checks behind
//                the CRCs instead of all ending as bad_vcrc.
//   bit 7 set:   build mode. The remaining bytes are header field values in
//                the layout of visit_build_fields() below; the harness builds
//                a packet from them and parses it back with PMTU 4096.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "transport/wire/packet.h"

namespace ipoibd::fuzz {

inline constexpr std::uint8_t kBuildModeBit = 0x80;
inline constexpr std::uint8_t kRepairBit = 0x40;
inline constexpr std::array<std::uint32_t, 5> kPmtus = {256, 512, 1024, 2048, 4096};

inline std::uint32_t pmtu_for_selector(std::uint8_t selector) {
    return kPmtus[static_cast<std::size_t>(selector & 0x3F) % kPmtus.size()];
}

// The parse-mode selector for a PMTU in bytes (must be one of kPmtus).
inline std::uint8_t parse_selector(std::uint32_t pmtu) {
    for (std::size_t i = 0; i < kPmtus.size(); ++i)
        if (kPmtus[i] == pmtu) return static_cast<std::uint8_t>(i);
    return static_cast<std::uint8_t>(kPmtus.size() - 1);
}

// Makes the framing fields of a (mutated) datagram consistent, as far as its
// length allows: PktLen when the length is 2 plus a multiple of 4 that PktLen
// can hold; GRH PayLen when LNH says global and the GRH fits; the ICRC when
// the LNH is an IBA transport and LRH, GRH and BTH fit; the VCRC last.
// Reserved bits are left as they are.
inline void repair_framing(std::vector<std::uint8_t>& w) {
    const std::size_t n = w.size();
    if (n < ib::kMinPacketSize) return;
    std::uint8_t* p = w.data();
    const std::size_t words = (n - ib::kVcrcSize) / 4;
    if ((n - ib::kVcrcSize) % 4 == 0 && words <= ib::Lrh::kPktLenMax) {
        const auto rsv5 = static_cast<std::uint16_t>(load_be16(p + 4) & ~ib::Lrh::kPktLenMax);
        store_be16(p + 4, static_cast<std::uint16_t>(rsv5 | words));
    }
    const auto lnh = static_cast<ib::Lnh>(p[1] & 0x3);
    const bool global = lnh == ib::Lnh::iba_global;
    const std::size_t bth = ib::Lrh::size + (global ? ib::Grh::size : 0);
    const std::size_t icrc = n - ib::kVcrcSize - ib::kIcrcSize;
    if ((lnh == ib::Lnh::iba_local || global) && bth + ib::Bth::size <= icrc) {
        if (global) {
            const std::size_t pay_len = n - ib::kVcrcSize - bth;
            if (pay_len <= 0xFFFF)
                store_be16(p + ib::Lrh::size + ib::Grh::kOffsetPayLen, static_cast<std::uint16_t>(pay_len));
        }
        ib::store_icrc(p + icrc, ib::compute_icrc(bytes(w).first(icrc), lnh));
    }
    ib::store_vcrc(p + n - ib::kVcrcSize, ib::compute_vcrc(bytes(w).first(n - ib::kVcrcSize)));
}

// Build mode: everything a PacketSpec needs, plus how much payload to carry.
struct BuildFields {
    ib::Lrh lrh;
    bool has_grh = false;
    ib::Grh grh;
    ib::Bth bth;
    ib::ExtHeaders ext;
    std::uint16_t payload_len = 0;  // interpreted by the harness per PayloadRule
};

// Reads fields from fuzz input; missing bytes read as zero.
class FieldReader {
public:
    explicit FieldReader(ipoibd::bytes in) : in_(in) {}
    void u8(std::uint8_t& v) { v = next(); }
    void u16(std::uint16_t& v) { v = static_cast<std::uint16_t>(uint(2)); }
    void u24(std::uint32_t& v) { v = static_cast<std::uint32_t>(uint(3)); }
    void u32(std::uint32_t& v) { v = static_cast<std::uint32_t>(uint(4)); }
    void u64(std::uint64_t& v) { v = uint(8); }
    void raw(std::uint8_t* p, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) p[i] = next();
    }
    ipoibd::bytes rest() const { return in_.subspan(pos_); }

private:
    std::uint8_t next() { return pos_ < in_.size() ? in_[pos_++] : 0; }
    std::uint64_t uint(int n) {
        std::uint64_t v = 0;
        for (int i = 0; i < n; ++i) v = (v << 8) | next();
        return v;
    }
    ipoibd::bytes in_;
    std::size_t pos_ = 0;
};

// Writes fields as fuzz input (used by the seed generator).
class FieldWriter {
public:
    void u8(const std::uint8_t& v) { out.push_back(v); }
    void u16(const std::uint16_t& v) { uint(v, 2); }
    void u24(const std::uint32_t& v) { uint(v, 3); }
    void u32(const std::uint32_t& v) { uint(v, 4); }
    void u64(const std::uint64_t& v) { uint(v, 8); }
    void raw(const std::uint8_t* p, std::size_t n) { out.insert(out.end(), p, p + n); }
    std::vector<std::uint8_t> out;

private:
    void uint(std::uint64_t v, int n) {
        for (int i = n - 1; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    }
};

// The build-mode layout, one definition for both directions. F is
// FieldReader (f is filled in) or FieldWriter (f is serialized). Only the
// extended headers of the chosen opcode are in the input. After reading, the
// caller masks values into their bit widths (see mask_build_fields).
//   opcode(1) flags(1: bit0 GRH, bit1 SE, bit2 M, bit3 A) VL<<4|SL(1)
//   DLID(2) SLID(2) P_Key(2) Resv8a(1) DestQP(3) PSN(3)
//   [GRH: TClass(1) FlowLabel(3) HopLmt(1) SGID(16) DGID(16)]
//   extended headers of the opcode, in wire order
//   payload_len(2), then the payload bytes (the rest of the input)
template <class F, class Fields>
void visit_build_fields(F& f, Fields& b) {
    f.u8(b.bth.opcode);
    std::uint8_t flags = static_cast<std::uint8_t>((b.has_grh ? 1 : 0) | (b.bth.se ? 2 : 0) |
                                                   (b.bth.mig_req ? 4 : 0) | (b.bth.ack_req ? 8 : 0));
    f.u8(flags);
    std::uint8_t vl_sl = static_cast<std::uint8_t>(((b.lrh.vl & 0xF) << 4) | (b.lrh.sl & 0xF));
    f.u8(vl_sl);
    f.u16(b.lrh.dlid);
    f.u16(b.lrh.slid);
    f.u16(b.bth.pkey);
    f.u8(b.bth.resv8a);
    f.u24(b.bth.dest_qp);
    f.u24(b.bth.psn);
    if constexpr (!std::is_const_v<Fields>) {
        b.has_grh = (flags & 1) != 0;
        b.bth.se = (flags & 2) != 0;
        b.bth.mig_req = (flags & 4) != 0;
        b.bth.ack_req = (flags & 8) != 0;
        b.lrh.vl = static_cast<std::uint8_t>(vl_sl >> 4);
        b.lrh.sl = static_cast<std::uint8_t>(vl_sl & 0xF);
    }
    if (b.has_grh) {
        f.u8(b.grh.tclass);
        f.u24(b.grh.flow_label);
        f.u8(b.grh.hop_limit);
        f.raw(b.grh.sgid.data(), b.grh.sgid.size());
        f.raw(b.grh.dgid.data(), b.grh.dgid.size());
    }
    const std::uint16_t headers = ib::opcode_info(b.bth.opcode).headers;
    if (headers & ib::eth_rdeth) f.u24(b.ext.rdeth.ee_context);
    if (headers & ib::eth_deth) {
        f.u32(b.ext.deth.qkey);
        f.u24(b.ext.deth.src_qp);
    }
    if (headers & ib::eth_reth) {
        f.u64(b.ext.reth.va);
        f.u32(b.ext.reth.rkey);
        f.u32(b.ext.reth.dma_len);
    }
    if (headers & ib::eth_atomic) {
        f.u64(b.ext.atomic.va);
        f.u32(b.ext.atomic.rkey);
        f.u64(b.ext.atomic.swap_add);
        f.u64(b.ext.atomic.compare);
    }
    if (headers & ib::eth_aeth) {
        f.u8(b.ext.aeth.syndrome);
        f.u24(b.ext.aeth.msn);
    }
    if (headers & ib::eth_atomic_ack) f.u64(b.ext.atomic_ack.orig_remote_data);
    if (headers & ib::eth_immdt) f.u32(b.ext.immdt.value);
    if (headers & ib::eth_ieth) f.u32(b.ext.ieth.rkey);
    f.u16(b.payload_len);
}

// Forces every field into its bit width and every version/protocol field to
// the one value the parser accepts, so that only addressing and opcode are
// left for the harness to reason about.
inline void mask_build_fields(BuildFields& b) {
    b.lrh.vl &= 0xF;
    b.lrh.sl &= 0xF;
    b.lrh.lver = ib::Lrh::kLinkVersion;
    b.bth.tver = ib::Bth::kTransportVersion;
    b.bth.pad_cnt = 0;
    b.bth.dest_qp &= ib::kQpnMask;
    b.bth.psn &= ib::kPsnMask;
    b.grh.ip_ver = ib::Grh::kIpVersion;
    b.grh.next_hdr = ib::Grh::kNextHeaderIba;
    b.grh.flow_label &= 0xFFFFF;
    b.ext.rdeth.ee_context &= 0xFFFFFF;
    b.ext.deth.src_qp &= ib::kQpnMask;
    b.ext.aeth.msn &= 0xFFFFFF;
}

}  // namespace ipoibd::fuzz
