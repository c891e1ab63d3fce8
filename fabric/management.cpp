#include "fabric/management.h"

namespace ipoibd::fabric {

FabricManagement::FabricManagement(Switch& sw, SubnetManager& sm, SaServer& sa)
    : switch_(sw),
      sm_(sm),
      sa_(sa),
      pma_([&sw](std::uint8_t port) -> std::optional<transport::Pma::Selected> {
          auto c = sw.pma_counters(port);
          if (!c) return std::nullopt;
          return transport::Pma::Selected{port, *c, sw.pma_generation(port)};
      }) {}

void visit(const ManagementCounters& c, CounterSink& out) {
    out.counter("sa_malformed", c.sa_malformed);
    out.counter("class_not_supported_answers", c.class_not_supported_answers);
    out.counter("class_not_supported_dropped", c.class_not_supported_dropped);
}

// The answer goes back LID-routed to the requester's QP.
void FabricManagement::answer_gmp(const ib::Packet& packet, bytes mad) {
    ib::PacketSpec spec;
    spec.lrh.sl = packet.lrh.sl;
    spec.lrh.dlid = packet.lrh.slid;
    spec.lrh.slid = switch_.lid() != 0 ? switch_.lid() : ib::kLidPermissive;
    spec.bth.opcode = ib::op::ud_send_only;
    // Port 0 is a full member of every partition and answers as one (as
    // send_mad): the request's own P_Key of a limited member would make a
    // limited-to-limited answer, which the requester's port drops.
    spec.bth.pkey = static_cast<std::uint16_t>(packet.bth.pkey | 0x8000);
    spec.bth.dest_qp = packet.ext.deth.src_qp;
    spec.ext.deth = {ib::kGsiQKey, ib::kQp1};
    spec.payload = mad;
    std::vector<std::uint8_t> wire(ib::packet_size(spec));
    if (ib::build_packet(spec, wire)) switch_.send_from_management(wire);
}

std::uint8_t link_rate_code(std::uint8_t width, std::uint8_t speed) {
    unsigned lanes = 1;
    if (width & 0x08) lanes = 12;
    else if (width & 0x04) lanes = 8;
    else if (width & 0x02) lanes = 4;
    else if (width & 0x10) lanes = 2;
    unsigned mbps_per_lane = 2500;
    if (speed & 0x4) mbps_per_lane = 10000;
    else if (speed & 0x2) mbps_per_lane = 5000;
    switch (lanes * mbps_per_lane) {
        case 2500: return 2;
        case 5000: return 5;
        case 10000: return 3;
        case 20000: return 6;
        case 30000: return 4;
        case 40000: return 7;
        case 60000: return 8;
        case 80000: return 9;
        case 120000: return 10;
        default: return 3;
    }
}

std::vector<SaPort> FabricManagement::sa_ports(const SubnetManager& sm, std::uint64_t subnet_prefix,
                                               const std::vector<Partition>& partitions) {
    std::vector<SaPort> out;
    for (const auto& [sp, p] : sm.ports()) {
        if (p.phase != SmPortPhase::active) continue;
        SaPort s;
        s.lid = p.lid;
        s.guid = p.port_guid;
        store_be64(s.gid.data(), subnet_prefix);
        store_be64(s.gid.data() + 8, p.port_guid);
        s.mtu = p.port_info.neighbor_mtu ? p.port_info.neighbor_mtu : std::uint8_t{4};
        s.rate = link_rate_code(p.port_info.link_width_active, p.port_info.link_speed_active);
        s.pkeys = pkeys_for_port(partitions, p.port_guid);
        s.switch_port = p.switch_port;
        s.switch_lid = p.sw != 0 && p.sw < sm.switches().size() ? sm.switches()[p.sw].lid : std::uint16_t{0};
        s.node_guid = p.node_guid;
        s.description = p.description;
        s.port_info = p.port_info;
        out.push_back(std::move(s));
    }
    return out;
}

void FabricManagement::send_mad(const sa::SaMad& mad, std::uint16_t dlid, std::uint32_t dest_qp, std::uint16_t pkey,
                                std::uint8_t sl, const std::optional<ib::Grh>& grh) {
    std::array<std::uint8_t, ib::kMadSize> bytes_out{};
    mad.write_to(bytes_out.data());
    ib::PacketSpec spec;
    spec.lrh.sl = sl;
    spec.lrh.dlid = dlid;
    spec.lrh.slid = switch_.lid();
    spec.grh = grh;
    spec.bth.opcode = ib::op::ud_send_only;
    // The SM's port is a full member of every partition: its MADs carry the
    // full-member P_Key, which a limited member of the partition can
    // receive (two limited members may not talk, IBA 10.9.3).
    spec.bth.pkey = static_cast<std::uint16_t>(pkey | 0x8000);
    spec.bth.dest_qp = dest_qp;
    spec.ext.deth = {ib::kGsiQKey, ib::kQp1};
    spec.payload = bytes_out;
    std::vector<std::uint8_t> wire(ib::packet_size(spec));
    if (ib::build_packet(spec, wire)) switch_.send_from_management(wire);
}

bool FabricManagement::on_packet(const ib::Packet& packet, bytes, std::uint8_t) {
    const bool gsi = packet.bth.dest_qp == ib::kQp1 && packet.ext.deth.qkey == ib::kGsiQKey &&
                     packet.payload.size() >= 2;
    const std::uint8_t mgmt_class = gsi ? packet.payload[1] : 0;
    // PerfMgt to the switch (perfquery LID PORT, a PerfMgr): its PMA
    // answers from the ports' counters, with or without the SM (the agent
    // is the switch's).
    if (gsi && mgmt_class == ib::mgmt_class::perf_mgt) {
        if (auto reply = pma_.handle(packet.payload)) answer_gmp(packet, *reply);  // else counted by the PMA
        return true;
    }
    // A class nobody on port 0 serves: answered so that the requester
    // fails at once (IBA 13.4.7), as a GSI does.
    if (gsi && mgmt_class != ib::mgmt_class::subn_adm && packet.payload.size() == ib::kMadSize) {
        if (auto answer = ib::class_not_supported_response(ib::MadHeader::read_from(packet.payload.data()))) {
            answer_gmp(packet, *answer);
            ++counters_.class_not_supported_answers;
        } else {
            ++counters_.class_not_supported_dropped;
        }
        return true;
    }
    if (!enabled_ || packet.bth.dest_qp != ib::kQp1) return false;
    auto mad = sa::decode_sa_mad(packet.payload);
    if (!mad || packet.ext.deth.qkey != ib::kGsiQKey) {
        ++counters_.sa_malformed;
        return true;  // taken, and counted: not an SA MAD
    }
    std::optional<ib::Grh> grh;
    if (packet.grh) {
        grh = *packet.grh;
        std::swap(grh->sgid, grh->dgid);
    }
    for (const sa::SaMad& out : sa_.handle(*mad, packet.lrh.slid, packet.ext.deth.src_qp, now_, packet.bth.pkey))
        send_mad(out, packet.lrh.slid, packet.ext.deth.src_qp, packet.bth.pkey, packet.lrh.sl, grh);
    flush();
    return true;
}

void FabricManagement::tick(Clock::time_point now) {
    now_ = now;
    sa_.tick(now);
    flush();
}

void FabricManagement::flush() {
    for (const SaOutgoing& o : sa_.take_outbound()) send_mad(o.mad, o.dlid, o.dest_qp, o.pkey, 0, std::nullopt);
}

}  // namespace ipoibd::fabric
