// SMP and attribute layouts checked against an independent decoder:
// Wireshark's InfiniBand dissector. SMPs with a distinct value in every
// field are built into UD SEND Only packets to QP0, written to an ERF pcap,
// and read back with tshark (Debian package `tshark`, no decode options);
// each field tshark shows must equal what was encoded. A missing tshark is a
// failure, not a skip, as in test_tshark.cpp.
//
// tshark prints these fields as 0x-prefixed hex or decimal (parse_uint
// takes both), FT_BYTES as hex digits, and NodeDescription as text.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "transport/capture/erf_pcap.h"
#include "transport/wire/packet.h"
#include "transport/wire/smp.h"
#include "tshark_util.h"
#include "wire_test_util.h"

namespace ipoibd::ib {
namespace {

using Fields = std::map<std::string, std::string>;  // tshark field -> expected text or number

struct Sample {
    std::string name;
    Smp smp;
    Fields expect;
};

std::string num(std::uint64_t v) { return std::to_string(v); }

// Hex digits of bytes as tshark shows an FT_BYTES field (separators dropped).
std::string hex_digits(std::string s) {
    std::erase(s, ':');
    return s;
}

Smp smp_base(std::uint8_t mgmt_class, std::uint16_t attribute, std::uint64_t tid) {
    Smp s;
    s.mgmt_class = mgmt_class;
    s.method = method::get_resp;
    s.transaction_id = tid;
    s.attribute_id = attribute;
    return s;
}

Sample port_info_sample() {
    PortInfo p;
    p.m_key = 0x0102030405060708ULL;
    p.gid_prefix = 0xFE80000000000001ULL;
    p.lid = 0x1234;
    p.master_sm_lid = 0x0021;
    p.capability_mask = 0x02010848;
    p.diag_code = 0xABCD;
    p.m_key_lease_period = 0x003C;
    p.local_port_num = 1;
    p.link_width_enabled = 0x03;
    p.link_width_supported = 0x01;
    p.link_width_active = 0x02;
    p.link_speed_supported = 7;
    p.port_state = port_state::armed;
    p.port_physical_state = port_physical_state::link_up;
    p.link_down_default_state = 2;
    p.m_key_protect_bits = 2;
    p.lmc = 5;
    p.link_speed_active = 4;
    p.link_speed_enabled = 6;
    p.neighbor_mtu = 4;
    p.master_sm_sl = 3;
    p.vl_cap = 4;
    p.init_type = 0xA;
    p.vl_high_limit = 0x11;
    p.vl_arbitration_high_cap = 8;
    p.vl_arbitration_low_cap = 9;
    p.init_type_reply = 0xB;
    p.mtu_cap = 5;
    p.vl_stall_count = 6;
    p.hoq_life = 0x13;
    p.operational_vls = 3;
    p.partition_enforcement_outbound = true;
    p.filter_raw_inbound = true;
    p.m_key_violations = 0x0102;
    p.p_key_violations = 0x0304;
    p.q_key_violations = 0x0506;
    p.guid_cap = 0x20;
    p.client_reregister = true;
    p.subnet_timeout = 0x12;
    p.resp_time_value = 0x11;
    p.local_phy_errors = 0xC;
    p.overrun_errors = 0xD;
    p.max_credit_hint = 0x0F0E;
    p.link_round_trip_latency = 0xABCDEF;

    Sample s{"DR GetResp PortInfo", smp_base(mgmt_class::subn_directed_route, smp_attr::port_info, 0x11), {}};
    s.smp.status = 0x001C;
    s.smp.direction = true;
    s.smp.hop_pointer = 2;
    s.smp.hop_count = 3;
    s.smp.m_key = 0x1122334455667788ULL;
    s.smp.dr_slid = 0x0009;
    s.smp.dr_dlid = 0xFFFF;
    s.smp.attribute_modifier = 1;
    s.smp.initial_path[1] = 1;
    s.smp.initial_path[2] = 5;
    s.smp.initial_path[3] = 7;
    s.smp.return_path[1] = 3;
    s.smp.return_path[2] = 2;
    EXPECT_TRUE(put_attribute(p, s.smp.data).has_value());
    s.expect = {
        {"infiniband.mad.mgmtclass", num(0x81)},
        {"infiniband.mad.method", num(0x81)},
        {"infiniband.mad.attributeid", num(0x15)},
        {"infiniband.mad.attributemodifier", num(1)},
        // Wireshark's status is all 16 bits, D included. Its own D field
        // (infiniband.smpdirected.d) reads one byte under a 16-bit mask
        // 0x8000 and always shows 0 in tshark 4.0, so it is not compared.
        {"infiniband.smpdirected.smpstatus", num(0x801C)},
        {"infiniband.smpdirected.hoppointer", num(2)},
        {"infiniband.smpdirected.hopcount", num(3)},
        {"infiniband.smpdirected.drslid", num(0x0009)},
        {"infiniband.smpdirected.drdlid", num(0xFFFF)},
        {"infiniband.smpdirected.initialpath", "00010507" + std::string(120, '0')},
        {"infiniband.smpdirected.returnpath", "000302" + std::string(122, '0')},
        {"infiniband.portinfo.m_key", num(p.m_key)},
        {"infiniband.portinfo.guid", num(p.gid_prefix)},  // Wireshark's name for GidPrefix
        {"infiniband.portinfo.lid", num(p.lid)},
        {"infiniband.portinfo.mastersmlid", num(p.master_sm_lid)},
        {"infiniband.portinfo.capabilitymask", num(p.capability_mask)},
        {"infiniband.portinfo.diagcode", num(p.diag_code)},
        {"infiniband.portinfo.m_keyleaseperiod", num(p.m_key_lease_period)},
        {"infiniband.portinfo.localportnum", num(p.local_port_num)},
        {"infiniband.portinfo.linkwidthenabled", num(p.link_width_enabled)},
        {"infiniband.portinfo.linkwidthsupported", num(p.link_width_supported)},
        {"infiniband.portinfo.linkwidthactive", num(p.link_width_active)},
        {"infiniband.portinfo.linkspeedsupported", num(p.link_speed_supported)},
        {"infiniband.portinfo.portstate", num(p.port_state)},
        {"infiniband.portinfo.portphysicalstate", num(p.port_physical_state)},
        {"infiniband.portinfo.linkdowndefaultstate", num(p.link_down_default_state)},
        {"infiniband.portinfo.m_keyprotectbits", num(p.m_key_protect_bits)},
        {"infiniband.portinfo.lmc", num(p.lmc)},
        {"infiniband.portinfo.linkspeedactive", num(p.link_speed_active)},
        {"infiniband.portinfo.linkspeedenabled", num(p.link_speed_enabled)},
        {"infiniband.portinfo.neighbormtu", num(p.neighbor_mtu)},
        {"infiniband.portinfo.mastersmsl", num(p.master_sm_sl)},
        {"infiniband.portinfo.vlcap", num(p.vl_cap)},
        {"infiniband.portinfo.inittype", num(p.init_type)},
        {"infiniband.portinfo.vlhighlimit", num(p.vl_high_limit)},
        {"infiniband.portinfo.vlarbitrationhighcap", num(p.vl_arbitration_high_cap)},
        {"infiniband.portinfo.vlarbitrationlowcap", num(p.vl_arbitration_low_cap)},
        {"infiniband.portinfo.inittypereply", num(p.init_type_reply)},
        {"infiniband.portinfo.mtucap", num(p.mtu_cap)},
        {"infiniband.portinfo.vlstallcount", num(p.vl_stall_count)},
        {"infiniband.portinfo.hoqlife", num(p.hoq_life)},
        {"infiniband.portinfo.operationalvls", num(p.operational_vls)},
        {"infiniband.portinfo.partitionenforcementinbound", num(0)},
        {"infiniband.portinfo.partitionenforcementoutbound", num(1)},
        {"infiniband.portinfo.filterrawinbound", num(1)},
        {"infiniband.portinfo.filterrawoutbound", num(0)},
        {"infiniband.portinfo.m_keyviolations", num(p.m_key_violations)},
        {"infiniband.portinfo.p_keyviolations", num(p.p_key_violations)},
        {"infiniband.portinfo.q_keyviolations", num(p.q_key_violations)},
        {"infiniband.portinfo.guidcap", num(p.guid_cap)},
        {"infiniband.portinfo.clientreregister", num(1)},
        {"infiniband.portinfo.subnettimeout", num(p.subnet_timeout)},
        {"infiniband.portinfo.resptimevalue", num(p.resp_time_value)},
        {"infiniband.portinfo.localphyerrors", num(p.local_phy_errors)},
        {"infiniband.portinfo.overrunerrors", num(p.overrun_errors)},
        {"infiniband.portinfo.maxcredithint", num(p.max_credit_hint)},
        {"infiniband.portinfo.linkroundtriplatency", num(p.link_round_trip_latency)},
    };
    return s;
}

Sample node_info_sample() {
    NodeInfo n;
    n.node_type = node_type::switch_node;
    n.num_ports = 36;
    n.system_image_guid = 0x0002C90300A1B2C3ULL;
    n.node_guid = 0x0002C90300A1B2C0ULL;
    n.port_guid = 0x0002C90300A1B2C1ULL;
    n.partition_cap = 0x0080;
    n.device_id = 0xC738;
    n.revision = 0x000000B0;
    n.local_port_num = 7;
    n.vendor_id = 0x0002C9;
    Sample s{"LID-routed GetResp NodeInfo", smp_base(mgmt_class::subn_lid_routed, smp_attr::node_info, 0x12), {}};
    s.smp.m_key = 0x0A0B0C0D0E0F1011ULL;
    EXPECT_TRUE(put_attribute(n, s.smp.data).has_value());
    s.expect = {
        {"infiniband.mad.mgmtclass", num(0x01)},
        {"infiniband.smplid.mkey", num(s.smp.m_key)},
        {"infiniband.nodeinfo.baseversion", num(1)},
        {"infiniband.nodeinfo.classversion", num(1)},
        {"infiniband.nodeinfo.nodetype", num(n.node_type)},
        {"infiniband.nodeinfo.numports", num(n.num_ports)},
        {"infiniband.nodeinfo.systemimageguid", num(n.system_image_guid)},
        {"infiniband.nodeinfo.nodeguid", num(n.node_guid)},
        {"infiniband.nodeinfo.portguid", num(n.port_guid)},
        {"infiniband.nodeinfo.partitioncap", num(n.partition_cap)},
        {"infiniband.nodeinfo.deviceid", num(n.device_id)},
        {"infiniband.nodeinfo.revision", num(n.revision)},
        {"infiniband.nodeinfo.localportnum", num(n.local_port_num)},
        {"infiniband.nodeinfo.vendorid", num(n.vendor_id)},
    };
    return s;
}

Sample switch_info_sample() {
    SwitchInfo w;
    w.linear_fdb_cap = 0xC000;
    w.random_fdb_cap = 0x0102;
    w.multicast_fdb_cap = 0x0200;
    w.linear_fdb_top = 0x0010;
    w.default_port = 1;
    w.default_multicast_primary_port = 2;
    w.default_multicast_not_primary_port = 3;
    w.life_time_value = 0x13;
    w.port_state_change = true;
    w.optimized_sl_to_vl_mapping_programming = 2;
    w.lids_per_port = 0x0304;
    w.partition_enforcement_cap = 0x0020;
    w.inbound_enforcement_cap = true;
    w.filter_raw_inbound_cap = true;
    w.enhanced_port0 = true;
    Sample s{"LID-routed GetResp SwitchInfo", smp_base(mgmt_class::subn_lid_routed, smp_attr::switch_info, 0x13), {}};
    EXPECT_TRUE(put_attribute(w, s.smp.data).has_value());
    s.expect = {
        {"infiniband.switchinfo.linearfdbcap", num(w.linear_fdb_cap)},
        {"infiniband.switchinfo.randomfdbcap", num(w.random_fdb_cap)},
        {"infiniband.switchinfo.multicastfdbcap", num(w.multicast_fdb_cap)},
        {"infiniband.switchinfo.linearfdbtop", num(w.linear_fdb_top)},
        {"infiniband.switchinfo.defaultport", num(1)},
        {"infiniband.switchinfo.defaultmulticastprimaryport", num(2)},
        {"infiniband.switchinfo.defaultmulticastnotprimaryport", num(3)},
        {"infiniband.switchinfo.lifetimevalue", num(0x13)},
        {"infiniband.switchinfo.portstatechange", num(1)},
        {"infiniband.switchinfo.optimizedsltovlmappingprogramming", num(2)},
        {"infiniband.switchinfo.lidsperport", num(w.lids_per_port)},
        {"infiniband.switchinfo.partitionenforcementcap", num(w.partition_enforcement_cap)},
        {"infiniband.switchinfo.inboundenforcementcap", num(1)},
        {"infiniband.switchinfo.outboundenforcementcap", num(0)},
        {"infiniband.switchinfo.filterrawinboundcap", num(1)},
        {"infiniband.switchinfo.filterrawoutboundcap", num(0)},
        {"infiniband.switchinfo.enhancedportzero", num(1)},
    };
    return s;
}

Sample sm_info_sample() {
    const SmInfo m{0x0002C90300000001ULL, 0x1122334455667788ULL, 0x0000ABCD, 0xE, sm_state::master};
    Sample s{"LID-routed GetResp SMInfo", smp_base(mgmt_class::subn_lid_routed, smp_attr::sm_info, 0x14), {}};
    EXPECT_TRUE(put_attribute(m, s.smp.data).has_value());
    s.expect = {
        {"infiniband.sminfo.guid", num(m.guid)},
        {"infiniband.sminfo.sm_key", num(m.sm_key)},
        {"infiniband.sminfo.actcount", num(m.act_count)},
        {"infiniband.sminfo.priority", num(m.priority)},
        {"infiniband.sminfo.smstate", num(m.sm_state)},
    };
    return s;
}

Sample node_description_sample() {
    Sample s{"DR GetResp NodeDescription", smp_base(mgmt_class::subn_directed_route, smp_attr::node_description, 0x15),
             {}};
    s.smp.direction = true;
    EXPECT_TRUE(put_attribute(NodeDescription{"ipoibd soft-hca ib0"}, s.smp.data).has_value());
    s.expect = {{"infiniband.nodedescription.nodestring", "ipoibd soft-hca ib0"}};
    return s;
}

// A UD SEND Only to QP0 on VL15 carrying `smp`.
std::vector<std::uint8_t> smp_packet(const Smp& smp) {
    std::vector<std::uint8_t> payload(Smp::size);
    smp.write_to(payload.data());
    PacketSpec spec;
    spec.lrh = {.vl = kVl15, .lver = 0, .sl = 0, .lnh = Lnh::iba_local, .dlid = kLidPermissive, .pkt_len = 0,
                .slid = kLidPermissive};
    spec.bth.opcode = op::ud_send_only;
    spec.bth.dest_qp = kQp0;
    spec.ext.deth = {0, kQp0};
    spec.payload = payload;
    std::vector<std::uint8_t> wire(packet_size(spec));
    auto n = build_packet(spec, wire);
    EXPECT_TRUE(n.has_value());
    return wire;
}

// The DR paths are compared as hex digits; everything else as tshark_util does.
void expect_smp_field(const test::TsharkRow& row, const std::string& field, const std::string& want) {
    if (field.ends_with("path")) {
        EXPECT_EQ(hex_digits(row.at(field)), want) << field;
        return;
    }
    test::expect_field(row, field, want);
}

TEST(SmpTshark, WiresharkDecodesEveryFieldAsEncoded) {
    const std::vector<Sample> samples = {port_info_sample(), node_info_sample(), switch_info_sample(),
                                         sm_info_sample(), node_description_sample()};
    char tmpl[] = "/tmp/ipoibd_smp_tshark_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    const std::string pcap = dir + "/smp.pcap";
    {
        auto writer = capture::ErfPcapWriter::open(pcap);
        ASSERT_TRUE(writer.has_value());
        const auto t0 = std::chrono::system_clock::time_point{std::chrono::seconds{1'700'000'000}};
        for (const auto& s : samples) ASSERT_TRUE(writer->write(smp_packet(s.smp), t0)) << s.name;
        ASSERT_TRUE(writer->flush());
    }
    std::vector<std::string> fields;
    for (const auto& s : samples)
        for (const auto& [field, value] : s.expect) fields.push_back(field);
    std::sort(fields.begin(), fields.end());
    fields.erase(std::unique(fields.begin(), fields.end()), fields.end());

    const auto rows = test::tshark_rows(dir, pcap, fields);
    ASSERT_EQ(rows.size(), samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i) {
        SCOPED_TRACE(samples[i].name);
        for (const auto& [field, want] : samples[i].expect) expect_smp_field(rows[i], field, want);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace ipoibd::ib
