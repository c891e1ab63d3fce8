// Packet builder and inbound parser. The numbered steps in parse_packet()
// follow the order documented in packet.h.
#include "transport/wire/packet.h"

#include <cstring>

namespace ipoibd::ib {
namespace {

// Applies `f(bit, header)` to each extended header in wire order.
template <class Ext, class F>
void for_each_ext(Ext& e, F&& f) {
    f(eth_rdeth, e.rdeth);
    f(eth_deth, e.deth);
    f(eth_reth, e.reth);
    f(eth_atomic, e.atomic);
    f(eth_aeth, e.aeth);
    f(eth_atomic_ack, e.atomic_ack);
    f(eth_immdt, e.immdt);
    f(eth_ieth, e.ieth);
}

std::size_t write_ext(const ExtHeaders& e, std::uint16_t mask, std::uint8_t* p) {
    std::size_t off = 0;
    for_each_ext(e, [&](std::uint16_t bit, const auto& h) {
        if (!(mask & bit)) return;
        h.write_to(p + off);
        off += h.size;
    });
    return off;
}

void read_ext(ExtHeaders& e, std::uint16_t mask, const std::uint8_t* p) {
    std::size_t off = 0;
    e.present = mask;
    for_each_ext(e, [&](std::uint16_t bit, auto& h) {
        if (!(mask & bit)) return;
        h = std::remove_reference_t<decltype(h)>::read_from(p + off);
        off += h.size;
    });
}

bool ext_in_range(const ExtHeaders& e, std::uint16_t mask) {
    bool ok = true;
    for_each_ext(e, [&](std::uint16_t bit, const auto& h) {
        if (mask & bit) ok = ok && h.fields_in_range();
    });
    return ok;
}

std::size_t pad_for(std::size_t payload) { return (4 - payload % 4) % 4; }

}  // namespace

std::size_t ext_headers_size(std::uint16_t mask) {
    std::size_t n = 0;
    ExtHeaders none;
    for_each_ext(none, [&](std::uint16_t bit, const auto& h) {
        if (mask & bit) n += h.size;
    });
    return n;
}

expected<Packet, DropReason> parse_packet(bytes wire, const ParseOptions& options) {
    using R = DropReason;
    const std::uint8_t* p = wire.data();
    Packet pkt;

    // 1. Framing.
    if (wire.size() < kMinPacketSize) return unexpected(R::too_short);
    pkt.lrh = Lrh::read_from(p);
    if (pkt.lrh.lver != Lrh::kLinkVersion) return unexpected(R::bad_link_version);
    if (pkt.lrh.lnh != Lnh::iba_local && pkt.lrh.lnh != Lnh::iba_global)
        return unexpected(R::not_iba_transport);
    if (std::size_t{pkt.lrh.pkt_len} * 4 + kVcrcSize != wire.size()) return unexpected(R::pkt_len_mismatch);
    const bool global = pkt.lrh.lnh == Lnh::iba_global;
    const std::size_t bth_offset = Lrh::size + (global ? Grh::size : 0);
    if (wire.size() < bth_offset + Bth::size + kIcrcSize + kVcrcSize) return unexpected(R::truncated_grh);
    const std::size_t vcrc_offset = wire.size() - kVcrcSize;
    const std::size_t icrc_offset = vcrc_offset - kIcrcSize;

    // 2. CRCs.
    pkt.vcrc = load_vcrc(p + vcrc_offset);
    if (compute_vcrc(wire.first(vcrc_offset)) != pkt.vcrc) return unexpected(R::bad_vcrc);
    pkt.icrc = load_icrc(p + icrc_offset);
    if (compute_icrc(wire.first(icrc_offset), pkt.lrh.lnh) != pkt.icrc) return unexpected(R::bad_icrc);

    // 3. GRH.
    if (global) {
        pkt.grh = Grh::read_from(p + Lrh::size);
        if (pkt.grh->ip_ver != Grh::kIpVersion) return unexpected(R::bad_ip_version);
        if (pkt.grh->next_hdr != Grh::kNextHeaderIba) return unexpected(R::bad_next_header);
        if (pkt.grh->pay_len != vcrc_offset - bth_offset) return unexpected(R::grh_pay_len_mismatch);
    }

    // 4. BTH and opcode.
    pkt.bth = Bth::read_from(p + bth_offset);
    if (pkt.bth.tver != Bth::kTransportVersion) return unexpected(R::bad_transport_version);
    const OpcodeInfo& info = opcode_info(pkt.bth.opcode);
    if (info.name == nullptr) return unexpected(R::unknown_opcode);
    if (!info.parsed) return unexpected(R::unsupported_opcode);

    // 5. Addressing.
    const std::uint16_t dlid = pkt.lrh.dlid;
    const bool to_qp0 = pkt.bth.dest_qp == kQp0;
    if (dlid == kLidReserved || (dlid == kLidPermissive && !to_qp0)) return unexpected(R::bad_dlid);
    if (!is_unicast_lid(pkt.lrh.slid) && !(pkt.lrh.slid == kLidPermissive && to_qp0))
        return unexpected(R::bad_slid);
    if ((pkt.lrh.vl == kVl15) != to_qp0) return unexpected(R::vl15_not_qp0);
    const bool multicast = is_multicast_lid(dlid);
    if (multicast != (pkt.bth.dest_qp == kQpnMulticast) || (multicast && info.transport != Transport::ud))
        return unexpected(R::bad_multicast);

    // 6. Extended transport headers.
    const std::size_t headers_end = bth_offset + Bth::size + ext_headers_size(info.headers);
    if (headers_end > icrc_offset) return unexpected(R::truncated_headers);
    read_ext(pkt.ext, info.headers, p + bth_offset + Bth::size);

    // 7. PadCnt.
    const std::size_t payload_and_pad = icrc_offset - headers_end;
    if (pkt.bth.pad_cnt > payload_and_pad || (info.payload == PayloadRule::full_pmtu && pkt.bth.pad_cnt != 0))
        return unexpected(R::bad_pad_count);
    const std::size_t payload_len = payload_and_pad - pkt.bth.pad_cnt;

    // 8. Payload.
    if (payload_len > options.pmtu) return unexpected(R::payload_exceeds_pmtu);
    if ((info.payload == PayloadRule::none && payload_and_pad != 0) ||
        (info.payload == PayloadRule::full_pmtu && payload_len != options.pmtu))
        return unexpected(R::bad_payload_length);
    pkt.payload = wire.subspan(headers_end, payload_len);
    return pkt;
}

expected<Lrh, DropReason> link_check(bytes wire) {
    using R = DropReason;
    if (wire.size() < kMinPacketSize) return unexpected(R::too_short);
    const Lrh lrh = Lrh::read_from(wire.data());
    if (lrh.lver != Lrh::kLinkVersion) return unexpected(R::bad_link_version);
    if (std::size_t{lrh.pkt_len} * 4 + kVcrcSize != wire.size()) return unexpected(R::pkt_len_mismatch);
    const std::size_t vcrc_offset = wire.size() - kVcrcSize;
    if (compute_vcrc(wire.first(vcrc_offset)) != load_vcrc(wire.data() + vcrc_offset)) return unexpected(R::bad_vcrc);
    return lrh;
}

std::size_t packet_size(const PacketSpec& spec) {
    const OpcodeInfo& info = opcode_info(spec.bth.opcode);
    return Lrh::size + (spec.grh ? Grh::size : 0) + Bth::size + ext_headers_size(info.headers) +
           spec.payload.size() + pad_for(spec.payload.size()) + kIcrcSize + kVcrcSize;
}

expected<std::size_t, BuildError> build_packet(const PacketSpec& spec, mutable_bytes out) {
    const OpcodeInfo& info = opcode_info(spec.bth.opcode);
    if (info.name == nullptr || !info.parsed) return unexpected(BuildError::unknown_opcode);

    const std::size_t total = packet_size(spec);
    if ((total - kVcrcSize) / 4 > Lrh::kPktLenMax) return unexpected(BuildError::too_long);

    Lrh lrh = spec.lrh;
    lrh.lnh = spec.grh ? Lnh::iba_global : Lnh::iba_local;
    lrh.pkt_len = static_cast<std::uint16_t>((total - kVcrcSize) / 4);
    Bth bth = spec.bth;
    bth.pad_cnt = static_cast<std::uint8_t>(pad_for(spec.payload.size()));
    std::optional<Grh> grh = spec.grh;
    if (grh) grh->pay_len = static_cast<std::uint16_t>(total - kVcrcSize - Lrh::size - Grh::size);

    if (!lrh.fields_in_range() || !bth.fields_in_range() || (grh && !grh->fields_in_range()) ||
        !ext_in_range(spec.ext, info.headers))
        return unexpected(BuildError::field_out_of_range);
    if (out.size() < total) return unexpected(BuildError::short_buffer);

    std::uint8_t* p = out.data();
    std::size_t off = 0;
    lrh.write_to(p);
    off += Lrh::size;
    if (grh) {
        grh->write_to(p + off);
        off += Grh::size;
    }
    bth.write_to(p + off);
    off += Bth::size;
    off += write_ext(spec.ext, info.headers, p + off);
    if (!spec.payload.empty()) std::memcpy(p + off, spec.payload.data(), spec.payload.size());
    off += spec.payload.size();
    std::memset(p + off, 0, bth.pad_cnt);
    off += bth.pad_cnt;
    store_icrc(p + off, compute_icrc(out.first(off), lrh.lnh));
    off += kIcrcSize;
    store_vcrc(p + off, compute_vcrc(out.first(off)));
    off += kVcrcSize;
    return off;
}

const char* to_string(DropReason r) {
    switch (r) {
        case DropReason::too_short: return "too_short";
        case DropReason::bad_link_version: return "bad_link_version";
        case DropReason::not_iba_transport: return "not_iba_transport";
        case DropReason::pkt_len_mismatch: return "pkt_len_mismatch";
        case DropReason::truncated_grh: return "truncated_grh";
        case DropReason::bad_vcrc: return "bad_vcrc";
        case DropReason::bad_icrc: return "bad_icrc";
        case DropReason::bad_ip_version: return "bad_ip_version";
        case DropReason::bad_next_header: return "bad_next_header";
        case DropReason::grh_pay_len_mismatch: return "grh_pay_len_mismatch";
        case DropReason::bad_transport_version: return "bad_transport_version";
        case DropReason::unknown_opcode: return "unknown_opcode";
        case DropReason::unsupported_opcode: return "unsupported_opcode";
        case DropReason::bad_dlid: return "bad_dlid";
        case DropReason::bad_slid: return "bad_slid";
        case DropReason::vl15_not_qp0: return "vl15_not_qp0";
        case DropReason::bad_multicast: return "bad_multicast";
        case DropReason::truncated_headers: return "truncated_headers";
        case DropReason::bad_pad_count: return "bad_pad_count";
        case DropReason::payload_exceeds_pmtu: return "payload_exceeds_pmtu";
        case DropReason::bad_payload_length: return "bad_payload_length";
        case DropReason::count_: break;
    }
    return "unknown";
}

const char* to_string(BuildError e) {
    switch (e) {
        case BuildError::unknown_opcode: return "opcode not buildable";
        case BuildError::field_out_of_range: return "header field out of range";
        case BuildError::too_long: return "packet longer than LRH PktLen allows";
        case BuildError::short_buffer: return "output buffer too small";
    }
    return "unknown";
}

const char* to_string(CodecError e) {
    switch (e) {
        case CodecError::short_buffer: return "buffer shorter than the header";
        case CodecError::field_out_of_range: return "header field out of range";
    }
    return "unknown";
}

}  // namespace ipoibd::ib
