// SA record codecs: known wire bytes of MCMemberRecord, PathRecord,
// InformInfo, InformInfoRecord and Notice; every packed field alone at its
// bits; reserved bits; component-mask constants; the query builders; the
// MTU, rate, selector and JoinState encodings; trap 64-67 helpers.
//
// Offsets and bit positions were written from the spec's tables as
// tabulated by OpenSM's ib_types.h (ib_member_rec_t, ib_path_rec_t,
// ib_inform_info_t, ib_inform_info_record_t, ib_mad_notice_attr_t and the
// IB_MCR_/IB_PR_/IB_IIR_COMPMASK_ bits) and libibmad's fields.c
// (McastMem*, PathRec*), not from this code.
#include <gtest/gtest.h>

#include "sa_client/sa_notice.h"
#include "sa_client/sa_records.h"
#include "test_sa_util.h"

namespace ipoibd::sa {
namespace {

using test::expect_fields_alone;
using test::expect_out_of_range;
using test::expect_reserved_ignored;
using test::expect_wire;
using test::FieldCase;
using test::gid;
using test::zeros;

constexpr std::uint64_t kLinkLocal = 0xFE80000000000000ULL;

// ff12:401b:ffff::ffff:ffff, the IPv4 broadcast group of P_Key 0xffff.
Gid broadcast_mgid() { return gid(0xFF12401BFFFF0000ULL, 0x00000000FFFFFFFFULL); }

TEST(SaRecords, SizesAndAttributeOffsets) {
    static_assert(McMemberRecord::size == 52 && attribute_offset_for(McMemberRecord::size) == 7);
    static_assert(PathRecord::size == 64 && attribute_offset_for(PathRecord::size) == 8);
    static_assert(InformInfo::size == 36 && InformInfoRecord::size == 60 &&
                  attribute_offset_for(InformInfoRecord::size) == 8);
    static_assert(Notice::size == 80 && kNoticeDataDetailsSize == 54);
    static_assert(McMemberRecord::attribute_id == 0x0038 && PathRecord::attribute_id == 0x0035 &&
                  InformInfo::attribute_id == 0x0003 && InformInfoRecord::attribute_id == 0x00F3 &&
                  Notice::attribute_id == 0x0002);
    SUCCEED();
}

// ---------------------------------------------------------------------------
// MCMemberRecord

McMemberRecord sample_mc_member() {
    McMemberRecord r;
    r.mgid = broadcast_mgid();
    r.port_gid = gid(kLinkLocal, 0x0002C903000AB1C1ULL);
    r.q_key = 0x00000B1B;
    r.mlid = 0xC001;
    r.mtu_selector = Selector::exactly;
    r.mtu = 4;
    r.tclass = 0x12;
    r.p_key = 0xFFFF;
    r.rate_selector = Selector::exactly;
    r.rate = rate::gbps_10;
    r.packet_life_time_selector = Selector::less_than;
    r.packet_life_time = 0x12;
    r.sl = 3;
    r.flow_label = 0x12345;
    r.hop_limit = 0x40;
    r.scope = mgid_scope::link_local;
    r.join_state = join_state::full_member;
    r.proxy_join = true;
    return r;
}

TEST(SaMcMemberRecord, KnownBytes) {
    expect_wire(sample_mc_member(),
                "ff 12 40 1b ff ff 00 00 00 00 00 00 ff ff ff ff"  // MGID
                "fe 80 00 00 00 00 00 00 00 02 c9 03 00 0a b1 c1"  // PortGID
                "00 00 0b 1b"                                      // Q_Key
                "c0 01 84 12"                                      // MLID, MTUSelector|MTU, TClass
                "ff ff 83 52"                                      // P_Key, RateSelector|Rate, PLTSelector|PLT
                "31 23 45 40"                                      // SL|FlowLabel|HopLimit
                "21 80 00 00");                                    // Scope|JoinState, ProxyJoin, Reserved
}

TEST(SaMcMemberRecord, EachPackedFieldAlone) {
    using C = FieldCase<McMemberRecord>;
    using R = McMemberRecord;
    expect_fields_alone<R>({
        C{"Q_Key", [](R& r) { r.q_key = 0x80010000; }, 32, "80 01 00 00"},
        C{"MLID", [](R& r) { r.mlid = 0xFFFE; }, 36, "ff fe"},
        C{"MTUSelector", [](R& r) { r.mtu_selector = Selector::largest_available; }, 38, "c0"},
        C{"MTU", [](R& r) { r.mtu = 0x3F; }, 38, "3f"},
        C{"TClass", [](R& r) { r.tclass = 0xFF; }, 39, "ff"},
        C{"P_Key", [](R& r) { r.p_key = 0x8001; }, 40, "80 01"},
        C{"RateSelector", [](R& r) { r.rate_selector = Selector::largest_available; }, 42, "c0"},
        C{"Rate", [](R& r) { r.rate = 0x3F; }, 42, "3f"},
        C{"PacketLifeTimeSelector", [](R& r) { r.packet_life_time_selector = Selector::largest_available; }, 43,
          "c0"},
        C{"PacketLifeTime", [](R& r) { r.packet_life_time = 0x3F; }, 43, "3f"},
        C{"SL", [](R& r) { r.sl = 0xF; }, 44, "f0 00 00 00"},
        C{"FlowLabel", [](R& r) { r.flow_label = 0xFFFFF; }, 44, "0f ff ff 00"},
        C{"HopLimit", [](R& r) { r.hop_limit = 0xFF; }, 44, "00 00 00 ff"},
        C{"Scope", [](R& r) { r.scope = 0xF; }, 48, "f0"},
        C{"JoinState", [](R& r) { r.join_state = 0xF; }, 48, "0f"},
        C{"ProxyJoin", [](R& r) { r.proxy_join = true; }, 49, "80"},
    });
}

TEST(SaMcMemberRecord, ReservedBitsIgnoredAndRangesEnforced) {
    std::vector<std::uint8_t> wire(McMemberRecord::size, 0);
    wire[49] = 0x7F;  // Reserved bits 6:0 after ProxyJoin
    wire[50] = 0xFF;
    wire[51] = 0xFF;
    expect_reserved_ignored<McMemberRecord>(wire);

    auto r = sample_mc_member();
    r.mtu = 0x40;
    expect_out_of_range(r);
    r = sample_mc_member();
    r.flow_label = 0x100000;
    expect_out_of_range(r);
    r = sample_mc_member();
    r.sl = 16;
    expect_out_of_range(r);
    r = sample_mc_member();
    r.join_state = 0x10;
    expect_out_of_range(r);
    r = sample_mc_member();
    r.scope = 0x10;
    expect_out_of_range(r);
    r = sample_mc_member();
    r.rate_selector = static_cast<Selector>(4);
    expect_out_of_range(r);
}

TEST(SaMcMemberRecord, ComponentMaskBitsInSpecOrder) {
    // OpenSM's IB_MCR_COMPMASK_*: bit i is the i-th field of the table.
    struct Bit {
        std::uint64_t mask;
        unsigned bit;
    };
    const Bit bits[] = {
        {mc_member_comp::mgid, 0},          {mc_member_comp::port_gid, 1},
        {mc_member_comp::q_key, 2},         {mc_member_comp::mlid, 3},
        {mc_member_comp::mtu_selector, 4},  {mc_member_comp::mtu, 5},
        {mc_member_comp::tclass, 6},        {mc_member_comp::p_key, 7},
        {mc_member_comp::rate_selector, 8}, {mc_member_comp::rate, 9},
        {mc_member_comp::packet_life_time_selector, 10}, {mc_member_comp::packet_life_time, 11},
        {mc_member_comp::sl, 12},           {mc_member_comp::flow_label, 13},
        {mc_member_comp::hop_limit, 14},    {mc_member_comp::scope, 15},
        {mc_member_comp::join_state, 16},   {mc_member_comp::proxy_join, 17},
        {mc_member_comp::reserved, 18},
    };
    for (const auto& b : bits) EXPECT_EQ(b.mask, 1ull << b.bit) << b.bit;
    EXPECT_EQ(kMcMemberJoinComponents, 0x10003u);
    // OpenSM's REQUIRED_MC_CREATE_COMP_MASK.
    EXPECT_EQ(kMcMemberCreateComponents, 0x130C7u);
}

TEST(SaMcMemberRecord, QuerySetsFieldAndMaskTogether) {
    McMemberQuery q;
    q.set_mgid(broadcast_mgid())
        .set_port_gid(gid(kLinkLocal, 7))
        .set_join_state(join_state::send_only_full_member);
    EXPECT_EQ(q.component_mask, kMcMemberJoinComponents);
    EXPECT_EQ(q.record.join_state, join_state::send_only_full_member);
    EXPECT_EQ(q.record.mgid, broadcast_mgid());

    q.set_q_key(0x0B1B).set_p_key(0xFFFF).set_sl(0).set_flow_label(0).set_tclass(0);
    EXPECT_EQ(q.component_mask, kMcMemberCreateComponents);

    McMemberQuery all;
    all.set_mgid({})
        .set_port_gid({})
        .set_q_key(1)
        .set_mlid(0xC000)
        .set_mtu(Selector::greater_than, 3)
        .set_tclass(1)
        .set_p_key(1)
        .set_rate(Selector::largest_available, rate::gbps_10)
        .set_packet_life_time(Selector::exactly, 5)
        .set_sl(1)
        .set_flow_label(1)
        .set_hop_limit(1)
        .set_scope(2)
        .set_join_state(1)
        .set_proxy_join(true);
    EXPECT_EQ(all.component_mask, (1ull << 18) - 1);  // every field, not the Reserved bit
    EXPECT_EQ(all.record.mtu_selector, Selector::greater_than);
    EXPECT_EQ(all.record.mtu, 3);
    EXPECT_EQ(all.record.rate_selector, Selector::largest_available);
    EXPECT_EQ(all.record.packet_life_time, 5);

    auto mad = q.request(ib::method::set, 9);
    ASSERT_TRUE(mad.has_value());
    EXPECT_EQ(mad->component_mask, q.component_mask);
    EXPECT_EQ(mad->header.attribute_id, sa_attr::mc_member_record);
    EXPECT_EQ(get_record<McMemberRecord>(*mad), q.record);
}

// ---------------------------------------------------------------------------
// PathRecord

PathRecord sample_path() {
    PathRecord p;
    p.service_id = 0x0102030405060708ULL;
    p.dgid = gid(kLinkLocal, 0x0002C903000AB1C2ULL);
    p.sgid = gid(kLinkLocal, 0x0002C903000AB1C1ULL);
    p.dlid = 0x0012;
    p.slid = 0x0034;
    p.flow_label = 0xABCDE;
    p.hop_limit = 0x05;
    p.tclass = 0x60;
    p.reversible = true;
    p.numb_path = 1;
    p.p_key = 0xFFFF;
    p.qos_class = 0xABC;
    p.sl = 5;
    p.mtu_selector = Selector::exactly;
    p.mtu = 4;
    p.rate_selector = Selector::exactly;
    p.rate = rate::gbps_10;
    p.packet_life_time_selector = Selector::exactly;
    p.packet_life_time = 0x12;
    p.preference = 1;
    return p;
}

TEST(SaPathRecord, KnownBytes) {
    expect_wire(sample_path(),
                "01 02 03 04 05 06 07 08"                          // ServiceID
                "fe 80 00 00 00 00 00 00 00 02 c9 03 00 0a b1 c2"  // DGID
                "fe 80 00 00 00 00 00 00 00 02 c9 03 00 0a b1 c1"  // SGID
                "00 12 00 34"                                      // DLID, SLID
                "0a bc de 05"                                      // RawTraffic|Rsv|FlowLabel|HopLimit
                "60 81 ff ff"                                      // TClass, Reversible|NumbPath, P_Key
                "ab c5 84 83"                                      // QoSClass|SL, MTU, Rate
                "92 01" + zeros(6));                               // PacketLifeTime, Preference, Reserved
}

TEST(SaPathRecord, EachPackedFieldAlone) {
    using C = FieldCase<PathRecord>;
    using P = PathRecord;
    expect_fields_alone<P>({
        C{"DLID", [](P& p) { p.dlid = 0xBFFF; }, 40, "bf ff"},
        C{"SLID", [](P& p) { p.slid = 0x0001; }, 42, "00 01"},
        C{"RawTraffic", [](P& p) { p.raw_traffic = true; }, 44, "80 00 00 00"},
        C{"FlowLabel", [](P& p) { p.flow_label = 0xFFFFF; }, 44, "0f ff ff 00"},
        C{"HopLimit", [](P& p) { p.hop_limit = 0xFF; }, 44, "00 00 00 ff"},
        C{"TClass", [](P& p) { p.tclass = 0xFF; }, 48, "ff"},
        C{"Reversible", [](P& p) { p.reversible = true; }, 49, "80"},
        C{"NumbPath", [](P& p) { p.numb_path = 0x7F; }, 49, "7f"},
        C{"P_Key", [](P& p) { p.p_key = 0x8001; }, 50, "80 01"},
        C{"QoSClass", [](P& p) { p.qos_class = 0xFFF; }, 52, "ff f0"},
        C{"SL", [](P& p) { p.sl = 0xF; }, 52, "00 0f"},
        C{"MTUSelector", [](P& p) { p.mtu_selector = Selector::largest_available; }, 54, "c0"},
        C{"MTU", [](P& p) { p.mtu = 0x3F; }, 54, "3f"},
        C{"RateSelector", [](P& p) { p.rate_selector = Selector::largest_available; }, 55, "c0"},
        C{"Rate", [](P& p) { p.rate = 0x3F; }, 55, "3f"},
        C{"PacketLifeTimeSelector", [](P& p) { p.packet_life_time_selector = Selector::largest_available; }, 56,
          "c0"},
        C{"PacketLifeTime", [](P& p) { p.packet_life_time = 0x3F; }, 56, "3f"},
        C{"Preference", [](P& p) { p.preference = 0xFF; }, 57, "ff"},
    });
}

TEST(SaPathRecord, ReservedBitsIgnoredAndRangesEnforced) {
    std::vector<std::uint8_t> wire(PathRecord::size, 0);
    wire[44] = 0x70;  // Reserved bits 30:28 between RawTraffic and FlowLabel
    for (std::size_t i = 58; i < 64; ++i) wire[i] = 0xFF;
    expect_reserved_ignored<PathRecord>(wire);

    auto p = sample_path();
    p.numb_path = 0x80;
    expect_out_of_range(p);
    p = sample_path();
    p.qos_class = 0x1000;
    expect_out_of_range(p);
    p = sample_path();
    p.flow_label = 0x100000;
    expect_out_of_range(p);
    p = sample_path();
    p.packet_life_time = 0x40;
    expect_out_of_range(p);
}

TEST(SaPathRecord, ComponentMaskBitsInSpecOrder) {
    // OpenSM's IB_PR_COMPMASK_*; ServiceID owns the two bits of the
    // Reserved fields it replaced.
    struct Bit {
        std::uint64_t mask;
        unsigned bit;
    };
    const Bit bits[] = {
        {path_comp::service_id_msb, 0}, {path_comp::service_id_lsb, 1}, {path_comp::dgid, 2},
        {path_comp::sgid, 3},           {path_comp::dlid, 4},           {path_comp::slid, 5},
        {path_comp::raw_traffic, 6},    {path_comp::reserved, 7},       {path_comp::flow_label, 8},
        {path_comp::hop_limit, 9},      {path_comp::tclass, 10},        {path_comp::reversible, 11},
        {path_comp::numb_path, 12},     {path_comp::p_key, 13},         {path_comp::qos_class, 14},
        {path_comp::sl, 15},            {path_comp::mtu_selector, 16},  {path_comp::mtu, 17},
        {path_comp::rate_selector, 18}, {path_comp::rate, 19},          {path_comp::packet_life_time_selector, 20},
        {path_comp::packet_life_time, 21}, {path_comp::preference, 22},
    };
    for (const auto& b : bits) EXPECT_EQ(b.mask, 1ull << b.bit) << b.bit;
    EXPECT_EQ(path_comp::service_id, 0x3u);
}

TEST(SaPathRecord, QuerySetsFieldAndMaskTogether) {
    // The query IPoIB makes for a neighbour: between two GIDs, one path, in
    // its partition, reversible.
    PathQuery q;
    q.set_dgid(gid(kLinkLocal, 2)).set_sgid(gid(kLinkLocal, 1)).set_numb_path(1).set_p_key(0xFFFF).set_reversible(true);
    EXPECT_EQ(q.component_mask,
              path_comp::dgid | path_comp::sgid | path_comp::numb_path | path_comp::p_key | path_comp::reversible);
    EXPECT_EQ(q.record.numb_path, 1);
    EXPECT_TRUE(q.record.reversible);

    PathQuery all;
    all.set_service_id(1)
        .set_dgid({})
        .set_sgid({})
        .set_dlid(1)
        .set_slid(1)
        .set_raw_traffic(false)
        .set_flow_label(1)
        .set_hop_limit(1)
        .set_tclass(1)
        .set_reversible(true)
        .set_numb_path(1)
        .set_p_key(1)
        .set_qos_class(1)
        .set_sl(1)
        .set_mtu(Selector::exactly, 4)
        .set_rate(Selector::exactly, 3)
        .set_packet_life_time(Selector::exactly, 1)
        .set_preference(0);
    EXPECT_EQ(all.component_mask, ((1ull << 23) - 1) & ~path_comp::reserved);

    auto mad = q.request(ib::method::get_table, 5);
    ASSERT_TRUE(mad.has_value());
    EXPECT_EQ(mad->header.attribute_id, sa_attr::path_record);
    EXPECT_EQ(mad->header.method, ib::method::get_table);
    EXPECT_EQ(get_record<PathRecord>(*mad), q.record);
}

// ---------------------------------------------------------------------------
// Encodings

TEST(SaEncodings, Selectors) {
    static_assert(static_cast<int>(Selector::greater_than) == 0 && static_cast<int>(Selector::less_than) == 1 &&
                  static_cast<int>(Selector::exactly) == 2 && static_cast<int>(Selector::largest_available) == 3);
    EXPECT_STREQ(to_string(Selector::greater_than), "greater than");
    EXPECT_STREQ(to_string(Selector::less_than), "less than");
    EXPECT_STREQ(to_string(Selector::exactly), "exactly");
    EXPECT_STREQ(to_string(Selector::largest_available), "largest available");
}

TEST(SaEncodings, Mtu) {
    EXPECT_EQ(mtu_bytes(1), 256u);
    EXPECT_EQ(mtu_bytes(2), 512u);
    EXPECT_EQ(mtu_bytes(3), 1024u);
    EXPECT_EQ(mtu_bytes(4), 2048u);
    EXPECT_EQ(mtu_bytes(5), 4096u);
    EXPECT_EQ(mtu_bytes(0), 0u);
    EXPECT_EQ(mtu_bytes(6), 0u);
    EXPECT_EQ(mtu_bytes(0x3F), 0u);
    EXPECT_EQ(mtu_code(2048), 4);
    EXPECT_EQ(mtu_code(4096), 5);
    EXPECT_EQ(mtu_code(256), 1);
    EXPECT_EQ(mtu_code(2044), 0);
    EXPECT_EQ(mtu_code(8192), 0);
}

TEST(SaEncodings, Rates) {
    struct Case {
        std::uint8_t code;
        std::uint32_t mbps;
        const char* name;
    };
    const Case cases[] = {
        {2, 2500, "2.5 Gb/s"},   {3, 10000, "10 Gb/s"},    {4, 30000, "30 Gb/s"},    {5, 5000, "5 Gb/s"},
        {6, 20000, "20 Gb/s"},   {7, 40000, "40 Gb/s"},    {8, 60000, "60 Gb/s"},    {9, 80000, "80 Gb/s"},
        {10, 120000, "120 Gb/s"}, {11, 14000, "14 Gb/s"},  {12, 56000, "56 Gb/s"},   {13, 112000, "112 Gb/s"},
        {14, 168000, "168 Gb/s"}, {15, 25000, "25 Gb/s"},  {16, 100000, "100 Gb/s"}, {17, 200000, "200 Gb/s"},
        {18, 300000, "300 Gb/s"}, {19, 28000, "28 Gb/s"},  {20, 50000, "50 Gb/s"},   {21, 400000, "400 Gb/s"},
        {22, 600000, "600 Gb/s"}, {23, 800000, "800 Gb/s"}, {24, 1200000, "1200 Gb/s"},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(rate_mbps(c.code), c.mbps) << int{c.code};
        EXPECT_STREQ(rate_name(c.code), c.name) << int{c.code};
    }
    static_assert(rate::gbps_10 == 3 && rate::gbps_2_5 == 2 && rate::gbps_5 == 5 && rate::gbps_40 == 7 &&
                  rate::gbps_56 == 12 && rate::gbps_100 == 16 && rate::gbps_1200 == 24);
    for (int code : {0, 1, 25, 63, 255}) {
        const auto bad = static_cast<std::uint8_t>(code);
        EXPECT_EQ(rate_mbps(bad), 0u) << int{bad};
        EXPECT_STREQ(rate_name(bad), "unknown rate") << int{bad};
    }
    // Codes are not in bandwidth order: 5 Gb/s (5) is slower than 10 Gb/s (3).
    EXPECT_LT(rate_mbps(rate::gbps_5), rate_mbps(rate::gbps_10));
}

TEST(SaEncodings, JoinState) {
    static_assert(join_state::full_member == 1 && join_state::non_member == 2 &&
                  join_state::send_only_non_member == 4 && join_state::send_only_full_member == 8);
    EXPECT_EQ(join_state_names(0), "none");
    EXPECT_EQ(join_state_names(1), "FullMember");
    EXPECT_EQ(join_state_names(8), "SendOnlyFullMember");
    EXPECT_EQ(join_state_names(6), "NonMember|SendOnlyNonMember");
    EXPECT_EQ(join_state_names(0xF), "FullMember|NonMember|SendOnlyNonMember|SendOnlyFullMember");
}

// ---------------------------------------------------------------------------
// InformInfo, InformInfoRecord

InformInfo sample_inform_info() {
    InformInfo i;
    i.gid = gid(kLinkLocal, 1);
    i.lid_range_begin = 0xFFFF;
    i.lid_range_end = 0x0102;
    i.is_generic = 1;
    i.subscribe = 1;
    i.type = 0xFFFF;
    i.trap_number_device_id = trap_number::gid_in_service;
    i.qpn = 0x123456;
    i.resp_time_value = 0x13;
    i.producer_type_vendor_id = producer_type::class_manager;
    return i;
}

TEST(SaInformInfo, KnownBytes) {
    expect_wire(sample_inform_info(),
                "fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 01"  // GID
                "ff ff 01 02 00 00"                                // LIDRangeBegin, LIDRangeEnd, Reserved
                "01 01 ff ff 00 40"                                // IsGeneric, Subscribe, Type, TrapNumber
                "12 34 56 13"                                      // QPN, Reserved|RespTimeValue
                "00 00 00 04");                                    // Reserved, ProducerType
}

TEST(SaInformInfo, PackedFieldsReservedAndRanges) {
    using C = FieldCase<InformInfo>;
    using I = InformInfo;
    expect_fields_alone<I>({
        C{"QPN", [](I& i) { i.qpn = 0xFFFFFF; }, 28, "ff ff ff 00"},
        C{"RespTimeValue", [](I& i) { i.resp_time_value = 0x1F; }, 28, "00 00 00 1f"},
        C{"ProducerType/VendorID", [](I& i) { i.producer_type_vendor_id = 0xFFFFFF; }, 32, "00 ff ff ff"},
        C{"IsGeneric", [](I& i) { i.is_generic = 1; }, 22, "01"},
        C{"Subscribe", [](I& i) { i.subscribe = 1; }, 23, "01"},
    });
    std::vector<std::uint8_t> wire(InformInfo::size, 0);
    wire[20] = wire[21] = 0xFF;  // Reserved
    wire[31] = 0xE0;             // Reserved bits 7:5 before RespTimeValue
    wire[32] = 0xFF;             // Reserved byte before ProducerType
    expect_reserved_ignored<InformInfo>(wire);
    auto i = sample_inform_info();
    i.qpn = 0x1000000;
    expect_out_of_range(i);
    i = sample_inform_info();
    i.resp_time_value = 0x20;
    expect_out_of_range(i);
}

TEST(SaInformInfo, GenericTrapSubscription) {
    const InformInfo sub = generic_trap_subscription(trap_number::mcast_group_created, true);
    EXPECT_EQ(sub.gid, Gid{});
    EXPECT_EQ(sub.lid_range_begin, 0xFFFF);
    EXPECT_EQ(sub.is_generic, 1);
    EXPECT_EQ(sub.subscribe, 1);
    EXPECT_EQ(sub.type, 0xFFFF);
    EXPECT_EQ(sub.trap_number_device_id, 66);
    EXPECT_EQ(sub.qpn, 0u);
    EXPECT_EQ(sub.producer_type_vendor_id, 0xFFFFFFu);
    EXPECT_EQ(generic_trap_subscription(kInformAllTraps, false).subscribe, 0);
    EXPECT_EQ(generic_trap_subscription(kInformAllTraps, false).trap_number_device_id, 0xFFFF);
}

TEST(SaInformInfoRecord, KnownBytesAndMask) {
    InformInfoRecord r;
    r.subscriber_gid = gid(kLinkLocal, 0x0002C903000AB1C1ULL);
    r.enum_ = 0x0102;
    r.inform_info = sample_inform_info();
    expect_wire(r,
                "fe 80 00 00 00 00 00 00 00 02 c9 03 00 0a b1 c1"  // SubscriberGID
                "01 02" + zeros(6) +                               // Enum, Reserved
                "fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 01"  // InformInfo
                "ff ff 01 02 00 00 01 01 ff ff 00 40 12 34 56 13 00 00 00 04");
    std::vector<std::uint8_t> wire(InformInfoRecord::size, 0);
    for (std::size_t i = 18; i < 24; ++i) wire[i] = 0xFF;
    expect_reserved_ignored<InformInfoRecord>(wire);
    // OpenSM's IB_IIR_COMPMASK_*.
    static_assert(inform_info_record_comp::subscriber_gid == 1u << 0 && inform_info_record_comp::enum_ == 1u << 1 &&
                  inform_info_record_comp::reserved0 == 1u << 2 && inform_info_record_comp::gid == 1u << 3 &&
                  inform_info_record_comp::lid_range_begin == 1u << 4 &&
                  inform_info_record_comp::lid_range_end == 1u << 5 && inform_info_record_comp::reserved1 == 1u << 6 &&
                  inform_info_record_comp::is_generic == 1u << 7 && inform_info_record_comp::subscribe == 1u << 8 &&
                  inform_info_record_comp::type == 1u << 9 &&
                  inform_info_record_comp::trap_number_device_id == 1u << 10 &&
                  inform_info_record_comp::qpn == 1u << 11 && inform_info_record_comp::reserved2 == 1u << 12 &&
                  inform_info_record_comp::resp_time_value == 1u << 13 &&
                  inform_info_record_comp::reserved3 == 1u << 14 &&
                  inform_info_record_comp::producer_type_vendor_id == 1u << 15);
}

// ---------------------------------------------------------------------------
// Notice

TEST(SaNotice, KnownBytes) {
    Notice n;
    n.is_generic = true;
    n.type = notice_type::info;
    n.producer_type_vendor_id = 0x0002C9;
    n.trap_number_device_id = 0x0102;
    n.issuer_lid = 0x0001;
    n.notice_toggle = true;
    n.notice_count = 0x1234;
    for (std::size_t i = 0; i < kNoticeDataDetailsSize; ++i) n.data_details[i] = static_cast<std::uint8_t>(i);
    n.issuer_gid = gid(kLinkLocal, 0x0002C90300000001ULL);
    std::string details;
    for (std::size_t i = 0; i < kNoticeDataDetailsSize; ++i) {
        static const char* kHex = "0123456789abcdef";
        details += kHex[i >> 4];
        details += kHex[i & 0xF];
        details += ' ';
    }
    expect_wire(n,
                "84 00 02 c9"   // IsGeneric|Type, ProducerType
                "01 02 00 01"   // TrapNumber, IssuerLID
                "92 34" +       // NoticeToggle|NoticeCount
                details +       // DataDetails
                "fe 80 00 00 00 00 00 00 00 02 c9 03 00 00 00 01");  // IssuerGID
    Notice bad;
    bad.type = 0x80;
    expect_out_of_range(bad);
    bad = Notice{};
    bad.notice_count = 0x8000;
    expect_out_of_range(bad);
    bad = Notice{};
    bad.producer_type_vendor_id = 0x1000000;
    expect_out_of_range(bad);
}

TEST(SaNotice, GidTrapsCarryTheGidAtDataDetailsByteSix) {
    const Gid sm = gid(kLinkLocal, 0x0002C90300000001ULL);
    const Notice n = make_gid_trap(trap_number::mcast_group_created, broadcast_mgid(), 0x0001, sm);
    // As OpenSM issues it: generic, subnet management, class manager.
    expect_wire(n,
                "83 00 00 04 00 42 00 01 00 00" + zeros(6) +
                    "ff 12 40 1b ff ff 00 00 00 00 00 00 ff ff ff ff" + zeros(32) +
                    "fe 80 00 00 00 00 00 00 00 02 c9 03 00 00 00 01");
    EXPECT_EQ(trap_gid(n), broadcast_mgid());

    const Gid port = gid(kLinkLocal, 0x0002C903000AB1C1ULL);
    for (int number : {64, 65, 66, 67}) {
        const auto trap = static_cast<std::uint16_t>(number);
        EXPECT_TRUE(is_gid_trap(trap));
        EXPECT_EQ(trap_gid(make_gid_trap(trap, port, 1, sm)), port) << trap;
    }
    EXPECT_FALSE(is_gid_trap(63));
    EXPECT_FALSE(is_gid_trap(68));
    Notice other = make_gid_trap(trap_number::gid_in_service, port, 1, sm);
    other.trap_number_device_id = 128;
    EXPECT_FALSE(trap_gid(other).has_value());
    other = make_gid_trap(trap_number::gid_in_service, port, 1, sm);
    other.is_generic = false;  // a vendor notice with DeviceID 64
    EXPECT_FALSE(trap_gid(other).has_value());
}

}  // namespace
}  // namespace ipoibd::sa
