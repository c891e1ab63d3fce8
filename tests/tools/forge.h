// Forged IBA packets for the tests of the soft fabric's trust rules
// (tests/unit/test_fabric.cpp, tests/tools/ibattack.cpp): valid packets,
// CRCs included, that only their sender makes forgeries.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "transport/wire/packet.h"
#include "transport/wire/smp.h"

namespace ipoibd::test {

// A UD SEND Only from SLID to DLID's QP `dest_qp` (QP0: VL15, source QP0).
inline std::vector<std::uint8_t> forged_packet(std::uint16_t slid, std::uint16_t dlid, std::uint32_t dest_qp,
                                               std::uint32_t qkey, bytes payload) {
    ib::PacketSpec spec;
    spec.lrh.vl = dest_qp == ib::kQp0 ? ib::kVl15 : 0;
    spec.lrh.dlid = dlid;
    spec.lrh.slid = slid;
    spec.bth.opcode = ib::op::ud_send_only;
    spec.bth.pkey = ib::kPKeyDefault;
    spec.bth.dest_qp = dest_qp;
    spec.ext.deth = {qkey, dest_qp == ib::kQp0 ? ib::kQp0 : 0x99};
    spec.payload = payload;
    std::vector<std::uint8_t> out(ib::packet_size(spec));
    if (!ib::build_packet(spec, out)) out.clear();
    return out;
}

// SubnSet(PortInfo) PortState Down, LID-routed, carrying `m_key`: what took
// a host down before ports checked who sent it.
inline std::vector<std::uint8_t> forged_port_down(std::uint16_t slid, std::uint16_t dlid, std::uint64_t m_key = 0) {
    ib::Smp smp;
    smp.mgmt_class = ib::mgmt_class::subn_lid_routed;
    smp.method = ib::method::set;
    smp.attribute_id = ib::smp_attr::port_info;
    smp.transaction_id = 0x0bad0000 + m_key;
    smp.m_key = m_key;
    ib::PortInfo down;
    down.port_state = ib::port_state::down;
    down.lid = dlid;
    (void)ib::put_attribute(down, smp.data);
    std::array<std::uint8_t, ib::kMadSize> mad{};
    smp.write_to(mad.data());
    return forged_packet(slid, dlid, ib::kQp0, 0, mad);
}

}  // namespace ipoibd::test
