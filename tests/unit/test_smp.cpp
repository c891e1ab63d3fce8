// SMP and attribute codecs: known wire bytes for chosen field values (encode
// and decode), one table per packed attribute that moves each field alone to
// its bits, round trips, short buffers and out-of-range fields.
//
// The known bytes were written from the layouts in IBA vol. 1 14.2 (as
// tabulated by libibmad's fields.c and OpenSM's ib_types.h), not from this
// code; test_smp_tshark.cpp checks the same packets against Wireshark.
#include <gtest/gtest.h>

#include "transport/wire/smp.h"
#include "wire_test_util.h"

namespace ipoibd::ib {
namespace {

using test::from_hex;
using test::to_hex;

// Encodes `a`, compares with `hex`, decodes `hex` back and compares with
// `a`, then checks that one byte less is refused in both directions.
template <class A>
void expect_wire(const A& a, const std::string& hex) {
    const auto want = from_hex(hex);
    ASSERT_EQ(want.size(), A::size);
    std::vector<std::uint8_t> buf(A::size + 3, 0xEE);
    auto n = encode(a, buf);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, A::size);
    buf.resize(A::size);
    EXPECT_EQ(to_hex(buf), to_hex(want));

    auto back = decode<A>(want);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(*back == a);

    std::vector<std::uint8_t> small(A::size - 1);
    auto e = encode(a, small);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error(), CodecError::short_buffer);
    auto d = decode<A>(bytes(want).first(A::size - 1));
    ASSERT_FALSE(d.has_value());
    EXPECT_EQ(d.error(), CodecError::short_buffer);
}

template <class A>
void expect_out_of_range(const A& a) {
    std::vector<std::uint8_t> buf(A::size);
    auto n = encode(a, buf);
    ASSERT_FALSE(n.has_value());
    EXPECT_EQ(n.error(), CodecError::field_out_of_range);
}

std::string zeros(std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += "00 ";
    return s;
}

// One field set alone must produce exactly these bytes at this offset, and
// zeros everywhere else.
template <class A>
struct FieldCase {
    const char* name;
    void (*set)(A&);
    std::size_t offset;
    const char* hex;
};

template <class A>
void expect_fields_alone(const std::vector<FieldCase<A>>& cases) {
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        A a{};
        c.set(a);
        std::vector<std::uint8_t> want(A::size, 0);
        const auto field = from_hex(c.hex);
        std::copy(field.begin(), field.end(), want.begin() + static_cast<std::ptrdiff_t>(c.offset));
        std::vector<std::uint8_t> got(A::size, 0xEE);
        ASSERT_TRUE(encode(a, got).has_value());
        EXPECT_EQ(to_hex(got), to_hex(want));
        auto back = decode<A>(want);
        ASSERT_TRUE(back.has_value());
        EXPECT_TRUE(*back == a);
    }
}

// ---------------------------------------------------------------------------
// The SMP

TEST(Smp, StaticSizes) {
    static_assert(Smp::size == 256 && kSmpDataSize == 64 && kSmpPathSize == 64);
    static_assert(NodeInfo::size == 40 && NodeDescription::size == 64 && PortInfo::size == 64);
    static_assert(PKeyTableBlock::size == 64 && GuidInfoBlock::size == 64 && SwitchInfo::size == 20);
    static_assert(LinearForwardingTableBlock::size == 64 && MulticastForwardingTableBlock::size == 64);
    static_assert(SmInfo::size == 21);
    static_assert(smp_offset::data == 64 && smp_offset::initial_path == 128 && smp_offset::return_path == 192);
    SUCCEED();
}

TEST(Smp, LidRoutedGetPortInfo) {
    Smp s;
    s.mgmt_class = mgmt_class::subn_lid_routed;
    s.method = method::get;
    s.transaction_id = 0x0102030405060708ULL;
    s.attribute_id = smp_attr::port_info;
    s.attribute_modifier = 1;
    s.m_key = 0xA1A2A3A4A5A6A7A8ULL;
    s.data[0] = 0x5A;
    s.data[63] = 0xA5;
    expect_wire(s, "01 01 01 01 00 00 00 00 01 02 03 04 05 06 07 08 00 15 00 00 00 00 00 01"
                   "a1 a2 a3 a4 a5 a6 a7 a8" + zeros(32) +
                   "5a" + zeros(62) + "a5" + zeros(128));
}

TEST(Smp, DirectedRouteGetNodeInfo) {
    // An SM's first SMP to a node two hops away, as it leaves the SM:
    // HopPointer 0, HopCount 2, DrSLID = DrDLID = permissive, path 1, 5.
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    s.method = method::get;
    s.hop_pointer = 0;
    s.hop_count = 2;
    s.transaction_id = 0x00000000CAFE0001ULL;
    s.attribute_id = smp_attr::node_info;
    s.initial_path[1] = 1;
    s.initial_path[2] = 5;
    expect_wire(s, "01 81 01 01 00 00 00 02 00 00 00 00 ca fe 00 01 00 11 00 00 00 00 00 00" + zeros(8) +
                   "ff ff ff ff" + zeros(28) + zeros(64) + "00 01 05" + zeros(61) + zeros(64));
}

TEST(Smp, DirectedRouteResponseCarriesDirectionAndStatus) {
    // Returning (D = 1) with status 0x001C, HopPointer 2 of 2, a LID-routed
    // first part (DrSLID 0x0001) and the return path filled in.
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    s.method = method::get_resp;
    s.status = mad_status::invalid_attr_or_modifier;
    s.direction = true;
    s.hop_pointer = 2;
    s.hop_count = 2;
    s.transaction_id = 7;
    s.attribute_id = smp_attr::port_info;
    s.dr_slid = 0x0001;
    s.dr_dlid = kLidPermissive;
    s.initial_path[1] = 1;
    s.initial_path[2] = 5;
    s.return_path[1] = 3;
    s.return_path[2] = 1;
    expect_wire(s, "01 81 01 81 80 1c 02 02 00 00 00 00 00 00 00 07 00 15 00 00 00 00 00 00" + zeros(8) +
                   "00 01 ff ff" + zeros(28) + zeros(64) + "00 01 05" + zeros(61) + "00 03 01" + zeros(61));
    s.status = 0x8000;  // the D bit is not status
    expect_out_of_range(s);
}

TEST(Smp, LidRoutedIgnoresDirectedRouteFields) {
    // A LID-routed SMP: ClassSpecific, bytes 32-63 and 128-255 are Reserved.
    std::vector<std::uint8_t> mad(Smp::size, 0xFF);
    mad[0] = 1;
    mad[1] = mgmt_class::subn_lid_routed;
    mad[2] = 1;
    mad[3] = method::set;
    auto s = decode_smp(mad);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->status, 0xFFFF);  // all 16 bits are status
    EXPECT_FALSE(s->direction);
    EXPECT_EQ(s->hop_pointer, 0);
    EXPECT_EQ(s->hop_count, 0);
    EXPECT_EQ(s->dr_slid, kLidPermissive);
    EXPECT_EQ(s->initial_path, DrPath{});
    EXPECT_EQ(s->return_path, DrPath{});
    std::vector<std::uint8_t> out(Smp::size);
    s->write_to(out.data());
    EXPECT_EQ(to_hex(std::vector<std::uint8_t>(out.begin() + 32, out.begin() + 64)), to_hex(from_hex(zeros(32))));
    EXPECT_EQ(out[6], 0);
    EXPECT_EQ(out[255], 0);
}

TEST(Smp, DecodeRefusesWhatIsNotAnSmp) {
    std::vector<std::uint8_t> mad(Smp::size, 0);
    mad[0] = 1;
    mad[1] = mgmt_class::subn_directed_route;
    EXPECT_TRUE(decode_smp(mad).has_value());
    EXPECT_EQ(decode_smp(bytes(mad).first(255)).error(), SmpError::wrong_size);
    mad.push_back(0);
    EXPECT_EQ(decode_smp(mad).error(), SmpError::wrong_size);
    mad.pop_back();
    mad[1] = mgmt_class::subn_adm;
    EXPECT_EQ(decode_smp(mad).error(), SmpError::not_smp_class);
    EXPECT_EQ(decode_smp(bytes{}).error(), SmpError::wrong_size);
    EXPECT_STRNE(to_string(SmpError::not_smp_class), "unknown");
}

TEST(Smp, DirectedRouteRoundTripOfEveryField) {
    Smp s;
    s.base_version = 0xFE;
    s.mgmt_class = mgmt_class::subn_directed_route;
    s.class_version = 0xFD;
    s.method = 0xFF;
    s.status = kSmpDrStatusMask;
    s.direction = true;
    s.hop_pointer = 0xFF;
    s.hop_count = 0xFF;
    s.transaction_id = ~0ULL;
    s.attribute_id = 0xFFFF;
    s.attribute_modifier = 0xFFFFFFFF;
    s.m_key = ~0ULL;
    s.dr_slid = 0x1234;
    s.dr_dlid = 0x5678;
    for (std::size_t i = 0; i < 64; ++i) {
        s.data[i] = static_cast<std::uint8_t>(i);
        s.initial_path[i] = static_cast<std::uint8_t>(0x40 + i);
        s.return_path[i] = static_cast<std::uint8_t>(0x80 + i);
    }
    std::vector<std::uint8_t> buf(Smp::size);
    ASSERT_TRUE(encode(s, buf).has_value());
    auto back = decode_smp(buf);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(*back == s);
}

TEST(Smp, AttributeNames) {
    EXPECT_STREQ(smp_attribute_name(smp_attr::port_info), "PortInfo");
    EXPECT_STREQ(smp_attribute_name(smp_attr::node_info), "NodeInfo");
    EXPECT_STREQ(smp_attribute_name(smp_attr::p_key_table), "P_KeyTable");
    EXPECT_STREQ(smp_attribute_name(smp_attr::notice), "Notice");
    EXPECT_STREQ(smp_attribute_name(smp_attr::multicast_forwarding_table), "MulticastForwardingTable");
    EXPECT_STREQ(smp_attribute_name(0x7777), "unknown attribute");
    static_assert(smp_attr::node_description == 0x0010 && smp_attr::switch_info == 0x0012 &&
                  smp_attr::guid_info == 0x0014 && smp_attr::linear_forwarding_table == 0x0019 &&
                  smp_attr::sm_info == 0x0020);
}

// ---------------------------------------------------------------------------
// NodeInfo, NodeDescription

TEST(SmpAttributes, NodeInfo) {
    NodeInfo n;
    n.node_type = node_type::channel_adapter;
    n.num_ports = 2;
    n.system_image_guid = 0x0002C90300A1B2C3ULL;
    n.node_guid = 0x0002C90300A1B2C0ULL;
    n.port_guid = 0x0002C90300A1B2C1ULL;
    n.partition_cap = 0x0080;
    n.device_id = 0x1003;
    n.revision = 0x000000B0;
    n.local_port_num = 1;
    n.vendor_id = 0x0002C9;
    expect_wire(n, "01 01 01 02 00 02 c9 03 00 a1 b2 c3 00 02 c9 03 00 a1 b2 c0"
                   "00 02 c9 03 00 a1 b2 c1 00 80 10 03 00 00 00 b0 01 00 02 c9");
    n.vendor_id = 0x1000000;
    expect_out_of_range(n);
}

TEST(SmpAttributes, NodeDescription) {
    expect_wire(NodeDescription{"ib0 soft HCA"}, "69 62 30 20 73 6f 66 74 20 48 43 41" + zeros(52));
    // 64 bytes exactly: no NUL on the wire, read back whole.
    const std::string full(64, 'x');
    std::vector<std::uint8_t> buf(64);
    ASSERT_TRUE(encode(NodeDescription{full}, buf).has_value());
    EXPECT_EQ(decode<NodeDescription>(buf)->text, full);
    expect_out_of_range(NodeDescription{std::string(65, 'x')});
    // Bytes after the first NUL are not text.
    buf.assign(64, 0);
    buf[0] = 'a';
    buf[2] = 'b';
    EXPECT_EQ(decode<NodeDescription>(buf)->text, "a");
}

// ---------------------------------------------------------------------------
// PortInfo

PortInfo sample_port_info() {
    PortInfo p;
    p.m_key = 0x0102030405060708ULL;
    p.gid_prefix = 0xFE80000000000000ULL;
    p.lid = 0x1234;
    p.master_sm_lid = 0x0001;
    p.capability_mask = 0x02010848;
    p.diag_code = 0xABCD;
    p.m_key_lease_period = 0x003C;
    p.local_port_num = 1;
    p.link_width_enabled = 0x03;
    p.link_width_supported = 0x03;
    p.link_width_active = 0x02;
    p.link_speed_supported = 7;
    p.port_state = port_state::active;
    p.port_physical_state = port_physical_state::link_up;
    p.link_down_default_state = 2;
    p.m_key_protect_bits = 2;
    p.lmc = 5;
    p.link_speed_active = 4;
    p.link_speed_enabled = 7;
    p.neighbor_mtu = 5;
    p.master_sm_sl = 3;
    p.vl_cap = 4;
    p.init_type = 0xA;
    p.vl_high_limit = 0x11;
    p.vl_arbitration_high_cap = 8;
    p.vl_arbitration_low_cap = 9;
    p.init_type_reply = 0xB;
    p.mtu_cap = 5;
    p.vl_stall_count = 7;
    p.hoq_life = 0x13;
    p.operational_vls = 3;
    p.partition_enforcement_inbound = true;
    p.filter_raw_inbound = true;
    p.m_key_violations = 0x0102;
    p.p_key_violations = 0x0304;
    p.q_key_violations = 0x0506;
    p.guid_cap = 0x20;
    p.client_reregister = true;
    p.multicast_pkey_trap_suppression_enabled = 2;
    p.subnet_timeout = 0x12;
    p.resp_time_value = 0x11;
    p.local_phy_errors = 0xC;
    p.overrun_errors = 0xD;
    p.max_credit_hint = 0x0F0E;
    p.link_round_trip_latency = 0xABCDEF;
    p.capability_mask2 = 0x0020;
    p.link_speed_ext_active = 2;
    p.link_speed_ext_supported = 3;
    p.link_speed_ext_enabled = 0x1F;
    return p;
}

TEST(SmpAttributes, PortInfoKnownBytes) {
    expect_wire(sample_port_info(),
                "01 02 03 04 05 06 07 08"  // M_Key
                "fe 80 00 00 00 00 00 00"  // GidPrefix
                "12 34 00 01"              // LID, MasterSMLID
                "02 01 08 48"              // CapabilityMask
                "ab cd 00 3c"              // DiagCode, M_KeyLeasePeriod
                "01 03 03 02"              // LocalPortNum, LinkWidthEnabled/Supported/Active
                "74 52 85 47"              // speed|state, phys|down-default, protect|LMC, active|enabled
                "53 4a 11 08"              // NeighborMTU|SMSL, VLCap|InitType, VLHighLimit, ArbHighCap
                "09 b5 f3 3a"              // ArbLowCap, InitTypeReply|MTUCap, stall|HOQLife, OpVLs|enforcement
                "01 02 03 04 05 06"        // M_Key, P_Key, Q_Key violations
                "20 d2 11 cd"              // GUIDCap, rereg|trap-suppr|SubnetTimeOut, RespTime, phy|overrun
                "0f 0e 00 ab cd ef"        // MaxCreditHint, Reserved, LinkRoundTripLatency
                "00 20 23 1f");            // CapabilityMask2, ext active|supported, ext enabled
}

TEST(SmpAttributes, PortInfoEachPackedFieldAlone) {
    using C = FieldCase<PortInfo>;
    expect_fields_alone<PortInfo>({
        C{"LinkSpeedSupported", [](PortInfo& p) { p.link_speed_supported = 0xF; }, 32, "f0"},
        C{"PortState", [](PortInfo& p) { p.port_state = 0xF; }, 32, "0f"},
        C{"PortPhysicalState", [](PortInfo& p) { p.port_physical_state = 0xF; }, 33, "f0"},
        C{"LinkDownDefaultState", [](PortInfo& p) { p.link_down_default_state = 0xF; }, 33, "0f"},
        C{"M_KeyProtectBits", [](PortInfo& p) { p.m_key_protect_bits = 3; }, 34, "c0"},
        C{"LMC", [](PortInfo& p) { p.lmc = 7; }, 34, "07"},
        C{"LinkSpeedActive", [](PortInfo& p) { p.link_speed_active = 0xF; }, 35, "f0"},
        C{"LinkSpeedEnabled", [](PortInfo& p) { p.link_speed_enabled = 0xF; }, 35, "0f"},
        C{"NeighborMTU", [](PortInfo& p) { p.neighbor_mtu = 0xF; }, 36, "f0"},
        C{"MasterSMSL", [](PortInfo& p) { p.master_sm_sl = 0xF; }, 36, "0f"},
        C{"VLCap", [](PortInfo& p) { p.vl_cap = 0xF; }, 37, "f0"},
        C{"InitType", [](PortInfo& p) { p.init_type = 0xF; }, 37, "0f"},
        C{"InitTypeReply", [](PortInfo& p) { p.init_type_reply = 0xF; }, 41, "f0"},
        C{"MTUCap", [](PortInfo& p) { p.mtu_cap = 0xF; }, 41, "0f"},
        C{"VLStallCount", [](PortInfo& p) { p.vl_stall_count = 7; }, 42, "e0"},
        C{"HOQLife", [](PortInfo& p) { p.hoq_life = 0x1F; }, 42, "1f"},
        C{"OperationalVLs", [](PortInfo& p) { p.operational_vls = 0xF; }, 43, "f0"},
        C{"PartitionEnforcementInbound", [](PortInfo& p) { p.partition_enforcement_inbound = true; }, 43, "08"},
        C{"PartitionEnforcementOutbound", [](PortInfo& p) { p.partition_enforcement_outbound = true; }, 43, "04"},
        C{"FilterRawInbound", [](PortInfo& p) { p.filter_raw_inbound = true; }, 43, "02"},
        C{"FilterRawOutbound", [](PortInfo& p) { p.filter_raw_outbound = true; }, 43, "01"},
        C{"ClientReregister", [](PortInfo& p) { p.client_reregister = true; }, 51, "80"},
        C{"MulticastPKeyTrapSuppressionEnabled",
          [](PortInfo& p) { p.multicast_pkey_trap_suppression_enabled = 3; }, 51, "60"},
        C{"SubnetTimeOut", [](PortInfo& p) { p.subnet_timeout = 0x1F; }, 51, "1f"},
        C{"RespTimeValue", [](PortInfo& p) { p.resp_time_value = 0x1F; }, 52, "1f"},
        C{"LocalPhyErrors", [](PortInfo& p) { p.local_phy_errors = 0xF; }, 53, "f0"},
        C{"OverrunErrors", [](PortInfo& p) { p.overrun_errors = 0xF; }, 53, "0f"},
        C{"LinkRoundTripLatency", [](PortInfo& p) { p.link_round_trip_latency = 0xFFFFFF; }, 56, "00 ff ff ff"},
        C{"LinkSpeedExtActive", [](PortInfo& p) { p.link_speed_ext_active = 0xF; }, 62, "f0"},
        C{"LinkSpeedExtSupported", [](PortInfo& p) { p.link_speed_ext_supported = 0xF; }, 62, "0f"},
        C{"LinkSpeedExtEnabled", [](PortInfo& p) { p.link_speed_ext_enabled = 0x1F; }, 63, "1f"},
    });
}

TEST(SmpAttributes, PortInfoReservedBitsIgnoredOnRead) {
    std::vector<std::uint8_t> wire(64, 0);
    wire[34] = 0x38;  // Reserved bits 5:3 between M_KeyProtectBits and LMC
    wire[52] = 0xE0;  // Reserved bits 7:5 before RespTimeValue
    wire[56] = 0xFF;  // Reserved byte before LinkRoundTripLatency
    wire[63] = 0xE0;  // Reserved bits 7:5 before LinkSpeedExtEnabled
    auto p = decode<PortInfo>(wire);
    ASSERT_TRUE(p.has_value());
    EXPECT_TRUE(*p == PortInfo{});
}

TEST(SmpAttributes, PortInfoOutOfRange) {
    PortInfo p;
    p.lmc = 8;
    expect_out_of_range(p);
    p = PortInfo{};
    p.port_state = 16;
    expect_out_of_range(p);
    p = PortInfo{};
    p.link_round_trip_latency = 0x1000000;
    expect_out_of_range(p);
    p = PortInfo{};
    p.subnet_timeout = 0x20;
    expect_out_of_range(p);
    p = PortInfo{};
    p.m_key_protect_bits = 4;
    expect_out_of_range(p);
}

// ---------------------------------------------------------------------------
// Tables

TEST(SmpAttributes, PKeyTableBlock) {
    PKeyTableBlock b;
    b.p_keys[0] = 0xFFFF;
    b.p_keys[1] = 0x8001;
    b.p_keys[2] = 0x7FFF;
    b.p_keys[31] = 0x1234;
    expect_wire(b, "ff ff 80 01 7f ff" + zeros(56) + "12 34");
    EXPECT_EQ(p_key_table_modifier(3), 3u);
    EXPECT_EQ(p_key_table_modifier(1, 5), 0x00050001u);
}

TEST(SmpAttributes, GuidInfoBlock) {
    GuidInfoBlock b;
    b.guids[0] = 0x0002C90300A1B2C1ULL;
    b.guids[7] = 0x1122334455667788ULL;
    expect_wire(b, "00 02 c9 03 00 a1 b2 c1" + zeros(48) + "11 22 33 44 55 66 77 88");
}

TEST(SmpAttributes, LinearForwardingTableBlock) {
    LinearForwardingTableBlock b;
    b.ports[0] = 0;     // LID 64n: no route
    b.ports[1] = 1;
    b.ports[63] = 0xFF; // 255: drop
    expect_wire(b, "00 01" + zeros(61) + "ff");
}

TEST(SmpAttributes, MulticastForwardingTableBlock) {
    MulticastForwardingTableBlock b;
    b.port_masks[0] = 0x0006;  // ports 1 and 2 of position 0
    b.port_masks[31] = 0x8001;
    expect_wire(b, "00 06" + zeros(60) + "80 01");
    EXPECT_EQ(multicast_forwarding_table_modifier(2, 1), 0x10000002u);
    EXPECT_EQ(multicast_forwarding_table_modifier(0x1FF, 0xF), 0xF00001FFu);
}

// ---------------------------------------------------------------------------
// SwitchInfo, SMInfo

TEST(SmpAttributes, SwitchInfo) {
    SwitchInfo s;
    s.linear_fdb_cap = 0xC000;
    s.multicast_fdb_cap = 0x0200;
    s.linear_fdb_top = 0x0010;
    s.default_port = 1;
    s.default_multicast_primary_port = 2;
    s.default_multicast_not_primary_port = 3;
    s.life_time_value = 0x13;
    s.port_state_change = true;
    s.optimized_sl_to_vl_mapping_programming = 1;
    s.partition_enforcement_cap = 0x0020;
    s.inbound_enforcement_cap = true;
    s.outbound_enforcement_cap = true;
    s.filter_raw_outbound_cap = true;
    s.enhanced_port0 = true;
    s.multicast_fdb_top = 0xC00F;
    expect_wire(s, "c0 00 00 00 02 00 00 10 01 02 03 9d 00 00 00 20 d8 00 c0 0f");
    s.life_time_value = 0x20;
    expect_out_of_range(s);
}

TEST(SmpAttributes, SwitchInfoEachPackedFieldAlone) {
    using C = FieldCase<SwitchInfo>;
    expect_fields_alone<SwitchInfo>({
        C{"LifeTimeValue", [](SwitchInfo& s) { s.life_time_value = 0x1F; }, 11, "f8"},
        C{"PortStateChange", [](SwitchInfo& s) { s.port_state_change = true; }, 11, "04"},
        C{"OptimizedSLtoVLMappingProgramming",
          [](SwitchInfo& s) { s.optimized_sl_to_vl_mapping_programming = 3; }, 11, "03"},
        C{"InboundEnforcementCap", [](SwitchInfo& s) { s.inbound_enforcement_cap = true; }, 16, "80"},
        C{"OutboundEnforcementCap", [](SwitchInfo& s) { s.outbound_enforcement_cap = true; }, 16, "40"},
        C{"FilterRawInboundCap", [](SwitchInfo& s) { s.filter_raw_inbound_cap = true; }, 16, "20"},
        C{"FilterRawOutboundCap", [](SwitchInfo& s) { s.filter_raw_outbound_cap = true; }, 16, "10"},
        C{"EnhancedPort0", [](SwitchInfo& s) { s.enhanced_port0 = true; }, 16, "08"},
        C{"RandomFDBCap", [](SwitchInfo& s) { s.random_fdb_cap = 0xBEEF; }, 2, "be ef"},
        C{"LIDsPerPort", [](SwitchInfo& s) { s.lids_per_port = 0x0102; }, 12, "01 02"},
    });
}

TEST(SmpAttributes, SmInfo) {
    SmInfo s{0x0002C90300000001ULL, 0x1122334455667788ULL, 0x0000ABCD, 0xE, sm_state::master};
    expect_wire(s, "00 02 c9 03 00 00 00 01 11 22 33 44 55 66 77 88 00 00 ab cd e3");
    s.priority = 0x10;
    expect_out_of_range(s);
}

TEST(SmpAttributes, PutAttributeZeroesTheRestOfTheData) {
    SmpData data;
    data.fill(0xEE);
    ASSERT_TRUE(put_attribute(SmInfo{1, 2, 3, 4, 5}, data).has_value());
    EXPECT_EQ(data[20], 0x45);
    for (std::size_t i = SmInfo::size; i < data.size(); ++i) EXPECT_EQ(data[i], 0) << i;
    PortInfo bad;
    bad.lmc = 9;
    EXPECT_FALSE(put_attribute(bad, data).has_value());
}

}  // namespace
}  // namespace ipoibd::ib
