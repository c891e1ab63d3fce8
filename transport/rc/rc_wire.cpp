#include "transport/rc/rc_wire.h"

namespace ipoibd::transport::rc {

expected<std::vector<std::uint8_t>, ib::BuildError> encode_rc_packet(const RcPacket& p, const RcPath& path) {
    std::vector<std::uint8_t> out;
    auto n = encode_rc_packet_into(p, path, out);
    if (!n) return unexpected(n.error());
    return out;
}

expected<std::size_t, ib::BuildError> encode_rc_packet_into(const RcPacket& p, const RcPath& path,
                                                            std::vector<std::uint8_t>& out) {
    auto n = encode_rc_packet_into(p, p.payload, path, out);
    if (n) out.resize(*n);
    return n;
}

expected<std::size_t, ib::BuildError> encode_rc_packet_into(const RcPacket& p, bytes payload, const RcPath& path,
                                                            std::vector<std::uint8_t>& out) {
    const ib::OpcodeInfo& info = ib::opcode_info(p.opcode);
    if (info.transport != ib::Transport::rc || info.name == nullptr) return unexpected(ib::BuildError::unknown_opcode);
    if (((info.headers & ib::eth_reth) && !p.reth) || ((info.headers & ib::eth_aeth) && !p.aeth) ||
        ((info.headers & ib::eth_immdt) && !p.imm) || (info.headers & (ib::eth_atomic | ib::eth_atomic_ack)))
        return unexpected(ib::BuildError::field_out_of_range);
    ib::PacketSpec spec;
    spec.lrh.sl = path.sl;
    spec.lrh.dlid = path.dlid;
    spec.lrh.slid = path.slid;
    spec.bth.opcode = p.opcode;
    spec.bth.pkey = path.pkey;
    spec.bth.dest_qp = p.dest_qp;
    spec.bth.ack_req = p.ack_req;
    spec.bth.psn = p.psn;
    if (p.reth) spec.ext.reth = *p.reth;
    if (p.aeth) spec.ext.aeth = *p.aeth;
    if (p.imm) spec.ext.immdt = ib::ImmDt{*p.imm};
    spec.payload = payload;
    if (const std::size_t size = ib::packet_size(spec); out.size() < size) out.resize(size);
    const auto n = ib::build_packet(spec, out);
    if (!n) return unexpected(n.error());
    return *n;
}

std::optional<RcPacket> decode_rc_header(const ib::Packet& packet) {
    const ib::OpcodeInfo& info = ib::opcode_info(packet.bth.opcode);
    if (info.transport != ib::Transport::rc || info.name == nullptr ||
        (info.headers & (ib::eth_atomic | ib::eth_atomic_ack)))
        return std::nullopt;
    RcPacket p;
    p.opcode = packet.bth.opcode;
    p.dest_qp = packet.bth.dest_qp;
    p.psn = packet.bth.psn;
    p.ack_req = packet.bth.ack_req;
    if (info.headers & ib::eth_reth) p.reth = packet.ext.reth;
    if (info.headers & ib::eth_aeth) p.aeth = packet.ext.aeth;
    if (info.headers & ib::eth_immdt) p.imm = packet.ext.immdt.value;
    return p;
}

std::optional<RcPacket> decode_rc_packet(const ib::Packet& packet) {
    auto p = decode_rc_header(packet);
    if (p) assign_bytes(p->payload, packet.payload);
    return p;
}

}  // namespace ipoibd::transport::rc
