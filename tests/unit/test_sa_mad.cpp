// SA MAD codec: known wire bytes of the whole MAD and of its RMPP header,
// decode errors, attribute names, status words (the strings saquery
// prints), ClassPortInfo, and the request/record helpers.
//
// The known bytes were written from the layouts in IBA vol. 1 13.4, 13.6
// and 15.2.1 as libibmad's fields.c (SaSMkey at bit 288, SaAttrOffs at
// byte 44, SaCompMask at byte 48, SaData at byte 56, Rmpp* in bytes 24-35)
// and OpenSM's ib_sa_mad_t and ib_class_port_info_t tabulate them, not from
// this code; test_sa_tshark.cpp checks the same layouts against Wireshark.
#include <gtest/gtest.h>

#include "sa_client/sa_mad.h"
#include "sa_client/sa_records.h"
#include "test_sa_util.h"

namespace ipoibd::sa {
namespace {

using test::expect_fields_alone;
using test::expect_out_of_range;
using test::expect_wire;
using test::FieldCase;
using test::from_hex;
using test::gid;
using test::to_hex;
using test::zeros;

TEST(SaMad, SizesAndOffsets) {
    static_assert(SaMad::size == 256 && kSaHeaderSize == 56 && kSaDataSize == 200);
    static_assert(kSaClassHeaderSize == 20 && RmppHeader::size == 12);
    static_assert(sa_offset::rmpp == 24 && sa_offset::sm_key == 36 && sa_offset::attribute_offset == 44 &&
                  sa_offset::component_mask == 48 && sa_offset::data == 56);
    static_assert(ClassPortInfo::size == 72);
    static_assert(attribute_offset_for(52) == 7 && attribute_offset_for(64) == 8 && attribute_offset_for(60) == 8 &&
                  attribute_offset_for(72) == 9 && attribute_offset_for(0) == 0);
    SUCCEED();
}

TEST(SaMad, GetTableRespSegmentKnownBytes) {
    SaMad m;
    m.header.method = ib::method::get_table_resp;
    m.header.status = sa_status::err_no_records;
    m.header.transaction_id = 0x0000000112345678ULL;
    m.header.attribute_id = sa_attr::mc_member_record;
    m.header.attribute_modifier = 0xA1B2C3D4;
    m.rmpp = {.rmpp_version = 1,
              .rmpp_type = rmpp_type::data,
              .r_resp_time = 0x0E,
              .rmpp_flags = rmpp_flag::active | rmpp_flag::first | rmpp_flag::last,
              .rmpp_status = 0,
              .data1 = 1,
              .data2 = 188};
    m.sm_key = 0x0102030405060708ULL;
    m.attribute_offset = 7;
    m.component_mask = mc_member_comp::mgid | mc_member_comp::port_gid | mc_member_comp::join_state;
    m.data[0] = 0x5A;
    m.data[199] = 0xA5;
    expect_wire(m,
                "01 03 02 92 03 00 00 00"   // versions, class, method; Status; ClassSpecific
                "00 00 00 01 12 34 56 78"   // TransactionID
                "00 38 00 00 a1 b2 c3 d4"   // AttributeID, Reserved, AttributeModifier
                "01 01 77 00"               // RMPPVersion, RMPPType, RRespTime|Flags, RMPPStatus
                "00 00 00 01 00 00 00 bc"   // SegmentNumber, PayloadLength
                "01 02 03 04 05 06 07 08"   // SM_Key
                "00 07 00 00"               // AttributeOffset, Reserved
                "00 00 00 00 00 01 00 03"   // ComponentMask
                "5a" + zeros(198) + "a5");
}

TEST(SaMad, RmppHeaderEachFieldAlone) {
    using C = FieldCase<RmppHeader>;
    expect_fields_alone<RmppHeader>({
        C{"RMPPVersion", [](RmppHeader& h) { h.rmpp_version = 0xFF; }, 0, "ff"},
        C{"RMPPType", [](RmppHeader& h) { h.rmpp_type = 0xFF; }, 1, "ff"},
        C{"RRespTime", [](RmppHeader& h) { h.r_resp_time = 0x1F; }, 2, "f8"},
        C{"RMPPFlags Active", [](RmppHeader& h) { h.rmpp_flags = rmpp_flag::active; }, 2, "01"},
        C{"RMPPFlags First", [](RmppHeader& h) { h.rmpp_flags = rmpp_flag::first; }, 2, "02"},
        C{"RMPPFlags Last", [](RmppHeader& h) { h.rmpp_flags = rmpp_flag::last; }, 2, "04"},
        C{"RMPPStatus", [](RmppHeader& h) { h.rmpp_status = 0xFF; }, 3, "ff"},
        C{"Data1 SegmentNumber", [](RmppHeader& h) { h.data1 = 0x01020304; }, 4, "01 02 03 04"},
        C{"Data2 PayloadLength", [](RmppHeader& h) { h.data2 = 0x05060708; }, 8, "05 06 07 08"},
    });
    RmppHeader h;
    h.r_resp_time = 0x20;
    expect_out_of_range(h);
    h = RmppHeader{};
    h.rmpp_flags = 8;
    expect_out_of_range(h);
}

TEST(SaMad, ReservedBytesAreZeroOnSendAndIgnoredOnReceive) {
    std::vector<std::uint8_t> wire(SaMad::size, 0);
    wire[0] = 1;
    wire[1] = ib::mgmt_class::subn_adm;
    wire[2] = 2;
    wire[18] = 0xFF;  // MAD header Reserved
    wire[46] = 0xFF;  // SA header Reserved
    wire[47] = 0xFF;
    auto m = decode_sa_mad(wire);
    ASSERT_TRUE(m.has_value());
    std::vector<std::uint8_t> out(SaMad::size, 0xEE);
    m->write_to(out.data());
    EXPECT_EQ(out[18], 0);
    EXPECT_EQ(out[46], 0);
    EXPECT_EQ(out[47], 0);
}

TEST(SaMad, DecodeRefusesWhatIsNotAnSaMad) {
    std::vector<std::uint8_t> mad(SaMad::size, 0);
    mad[0] = 1;
    mad[1] = ib::mgmt_class::subn_adm;
    EXPECT_TRUE(decode_sa_mad(mad).has_value());
    EXPECT_EQ(decode_sa_mad(bytes(mad).first(255)).error(), SaMadError::wrong_size);
    EXPECT_EQ(decode_sa_mad(bytes{}).error(), SaMadError::wrong_size);
    mad.push_back(0);
    EXPECT_EQ(decode_sa_mad(mad).error(), SaMadError::wrong_size);
    mad.pop_back();
    mad[1] = ib::mgmt_class::subn_lid_routed;
    EXPECT_EQ(decode_sa_mad(mad).error(), SaMadError::not_sa_class);
    // Versions are the agent's to judge: a bad class version still decodes.
    mad[1] = ib::mgmt_class::subn_adm;
    mad[0] = 7;
    mad[2] = 9;
    auto m = decode_sa_mad(mad);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->header.base_version, 7);
    EXPECT_EQ(m->header.class_version, 9);
    EXPECT_STRNE(to_string(SaMadError::wrong_size), "unknown");
    EXPECT_STRNE(to_string(SaMadError::not_sa_class), "unknown");
}

TEST(SaMad, DefaultsAreAnSaRequest) {
    const SaMad m;
    EXPECT_EQ(m.header.base_version, 1);
    EXPECT_EQ(m.header.mgmt_class, 0x03);
    EXPECT_EQ(m.header.class_version, 2);
    EXPECT_EQ(m.rmpp, RmppHeader{});
}

TEST(SaMad, AttributeIdsAndNames) {
    static_assert(sa_attr::class_port_info == 0x0001 && sa_attr::notice == 0x0002 && sa_attr::inform_info == 0x0003);
    static_assert(sa_attr::node_record == 0x0011 && sa_attr::port_info_record == 0x0012);
    static_assert(sa_attr::service_record == 0x0031 && sa_attr::path_record == 0x0035 &&
                  sa_attr::mc_member_record == 0x0038 && sa_attr::inform_info_record == 0x00F3);
    static_assert(sa_attr::multi_path_record == 0x003A && sa_attr::p_key_table_record == 0x0033);
    EXPECT_STREQ(sa_attribute_name(sa_attr::mc_member_record), "MCMemberRecord");
    EXPECT_STREQ(sa_attribute_name(sa_attr::path_record), "PathRecord");
    EXPECT_STREQ(sa_attribute_name(sa_attr::inform_info), "InformInfo");
    EXPECT_STREQ(sa_attribute_name(sa_attr::inform_info_record), "InformInfoRecord");
    EXPECT_STREQ(sa_attribute_name(sa_attr::notice), "Notice");
    EXPECT_STREQ(sa_attribute_name(sa_attr::class_port_info), "ClassPortInfo");
    EXPECT_STREQ(sa_attribute_name(sa_attr::service_record), "ServiceRecord");
    EXPECT_STREQ(sa_attribute_name(0x7777), "unknown attribute");
}

// ---------------------------------------------------------------------------
// Status

TEST(SaStatus, CodesSitInTheClassSpecificBits) {
    static_assert(sa_status::err_no_resources == 0x0100 && sa_status::err_req_invalid == 0x0200 &&
                  sa_status::err_no_records == 0x0300 && sa_status::err_too_many_records == 0x0400 &&
                  sa_status::err_req_invalid_gid == 0x0500 && sa_status::err_req_insufficient_components == 0x0600 &&
                  sa_status::err_req_denied == 0x0700 && sa_status::err_status_prio_suggested == 0x0800);
    static_assert((sa_status::mask & ib::mad_status::class_specific_mask) == sa_status::mask);
    SUCCEED();
}

TEST(SaStatus, ErrorNamesAreSaquerysWords) {
    struct Case {
        std::uint8_t code;
        const char* name;
    };
    const Case cases[] = {
        {0, "SA_NO_ERROR"},
        {1, "SA_ERR_NO_RESOURCES"},
        {2, "SA_ERR_REQ_INVALID"},
        {3, "SA_ERR_NO_RECORDS"},
        {4, "SA_ERR_TOO_MANY_RECORDS"},
        {5, "SA_ERR_REQ_INVALID_GID"},
        {6, "SA_ERR_REQ_INSUFFICIENT_COMPONENTS"},
        {7, "SA_ERR_REQ_DENIED"},
        {8, "SA_ERR_STATUS_PRIO_SUGGESTED"},
        {9, "SA_ERR_UNKNOWN"},
        {0xFF, "SA_ERR_UNKNOWN"},
    };
    for (const auto& c : cases) EXPECT_STREQ(sa_error_name(c.code), c.name) << int{c.code};
}

TEST(SaStatus, InvalidFieldNamesAreSaquerysWords) {
    EXPECT_STREQ(mad_invalid_field_name(0), "MAD No invalid fields");
    EXPECT_STREQ(mad_invalid_field_name(1), "MAD Bad version");
    EXPECT_STREQ(mad_invalid_field_name(2), "MAD Method specified is not supported");
    EXPECT_STREQ(mad_invalid_field_name(3), "MAD Method/Attribute combination is not supported");
    EXPECT_STREQ(mad_invalid_field_name(4), "MAD Reserved");
    EXPECT_STREQ(mad_invalid_field_name(7), "MAD Invalid value in Attribute field(s) or Attribute Modifier");
    EXPECT_STREQ(mad_invalid_field_name(8), "MAD UNKNOWN ERROR");
}

TEST(SaStatus, DescribedInWords) {
    struct Case {
        std::uint16_t status;
        const char* text;
    };
    const Case cases[] = {
        {0x0000, "0x0000: success"},
        {sa_status::err_no_records, "0x0300: SA_ERR_NO_RECORDS"},
        {sa_status::err_req_insufficient_components, "0x0600: SA_ERR_REQ_INSUFFICIENT_COMPONENTS"},
        {sa_status::err_req_invalid, "0x0200: SA_ERR_REQ_INVALID"},
        {sa_status::err_req_denied, "0x0700: SA_ERR_REQ_DENIED"},
        {ib::mad_status::bad_version, "0x0004: MAD Bad version"},
        {ib::mad_status::method_attr_not_supported, "0x000c: MAD Method/Attribute combination is not supported"},
        {ib::mad_status::invalid_attr_or_modifier,
         "0x001c: MAD Invalid value in Attribute field(s) or Attribute Modifier"},
        {ib::mad_status::busy, "0x0001: BUSY"},
        {ib::mad_status::redirect_required, "0x0002: Redirection Required"},
        {0x0A03, "0x0a03: BUSY; Redirection Required; SA_ERR_UNKNOWN"},
        {0x0208, "0x0208: MAD Method specified is not supported; SA_ERR_REQ_INVALID"},
        {0x00E0, "0x00e0: reserved status bits"},
    };
    for (const auto& c : cases) EXPECT_EQ(describe_sa_status(c.status), c.text);
}

// ---------------------------------------------------------------------------
// ClassPortInfo

TEST(SaClassPortInfo, KnownBytes) {
    ClassPortInfo c;
    c.capability_mask = class_capability::is_get_set_notice_supported | class_capability::is_ud_multicast_supported;
    c.capability_mask2 = sa_capability2::is_send_only_full_member_supported;
    c.resp_time_value = 0x12;
    c.redirect_gid = gid(0xFE80000000000000ULL, 5);
    c.redirect_tc = 0x11;
    c.redirect_sl = 0x2;
    c.redirect_fl = 0x34567;
    c.redirect_lid = 0x0102;
    c.redirect_p_key = 0xFFFF;
    c.redirect_qp = 0x000001;
    c.redirect_q_key = ib::kGsiQKey;
    c.trap_gid = gid(0xFE80000000000000ULL, 6);
    c.trap_tc = 0x22;
    c.trap_sl = 0x3;
    c.trap_fl = 0x89ABC;
    c.trap_lid = 0x0203;
    c.trap_p_key = 0x7FFF;
    c.trap_hl = 0x40;
    c.trap_qp = 0xABCDEF;
    c.trap_q_key = 0x01020304;
    expect_wire(c,
                "01 02 02 02"                                      // versions, CapabilityMask
                "00 02 00 12"                                      // CapabilityMask2 (bit 12) | RespTimeValue
                "fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 05"  // RedirectGID
                "11 23 45 67"                                      // RedirectTC | SL | FL
                "01 02 ff ff 00 00 00 01 80 01 00 00"              // RedirectLID, P_Key, QP, Q_Key
                "fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 06"  // TrapGID
                "22 38 9a bc 02 03 7f ff"                          // TrapTC|SL|FL, TrapLID, TrapP_Key
                "40 ab cd ef 01 02 03 04");                        // TrapHL, TrapQP, TrapQ_Key
}

TEST(SaClassPortInfo, EachPackedFieldAlone) {
    using C = FieldCase<ClassPortInfo>;
    expect_fields_alone<ClassPortInfo>({
        C{"CapabilityMask2", [](ClassPortInfo& c) { c.capability_mask2 = 0x7FFFFFF; }, 4, "ff ff ff e0"},
        C{"RespTimeValue", [](ClassPortInfo& c) { c.resp_time_value = 0x1F; }, 4, "00 00 00 1f"},
        C{"RedirectTC", [](ClassPortInfo& c) { c.redirect_tc = 0xFF; }, 24, "ff 00 00 00"},
        C{"RedirectSL", [](ClassPortInfo& c) { c.redirect_sl = 0xF; }, 24, "00 f0 00 00"},
        C{"RedirectFL", [](ClassPortInfo& c) { c.redirect_fl = 0xFFFFF; }, 24, "00 0f ff ff"},
        C{"RedirectQP", [](ClassPortInfo& c) { c.redirect_qp = 0xFFFFFF; }, 32, "00 ff ff ff"},
        C{"TrapSL", [](ClassPortInfo& c) { c.trap_sl = 0xF; }, 56, "00 f0 00 00"},
        C{"TrapFL", [](ClassPortInfo& c) { c.trap_fl = 0xFFFFF; }, 56, "00 0f ff ff"},
        C{"TrapHL", [](ClassPortInfo& c) { c.trap_hl = 0xFF; }, 64, "ff 00 00 00"},
        C{"TrapQP", [](ClassPortInfo& c) { c.trap_qp = 0xFFFFFF; }, 64, "00 ff ff ff"},
    });
    ClassPortInfo c;
    c.capability_mask2 = 0x8000000;
    expect_out_of_range(c);
    c = ClassPortInfo{};
    c.trap_qp = 0x1000000;
    expect_out_of_range(c);
    c = ClassPortInfo{};
    c.redirect_sl = 16;
    expect_out_of_range(c);
    // Byte 32 is Reserved: ignored on receive.
    std::vector<std::uint8_t> wire(ClassPortInfo::size, 0);
    wire[32] = 0xFF;
    EXPECT_EQ(ib::decode<ClassPortInfo>(wire)->redirect_qp, 0u);
}

// ---------------------------------------------------------------------------
// Requests and records in the SA data

TEST(SaMad, MakeRequestPutsRecordMaskAndAttribute) {
    McMemberRecord r;
    r.mgid = gid(0xFF12401BFFFF0000ULL, 0x00000000FFFFFFFFULL);
    r.join_state = join_state::full_member;
    auto m = make_sa_request(ib::method::set, 0x42, r, mc_member_comp::mgid | mc_member_comp::join_state);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->header.method, ib::method::set);
    EXPECT_EQ(m->header.transaction_id, 0x42u);
    EXPECT_EQ(m->header.attribute_id, sa_attr::mc_member_record);
    EXPECT_EQ(m->header.mgmt_class, ib::mgmt_class::subn_adm);
    EXPECT_EQ(m->header.class_version, 2);
    EXPECT_EQ(m->component_mask, 0x10001u);
    EXPECT_EQ(m->attribute_offset, 0);
    EXPECT_EQ(m->sm_key, 0u);
    EXPECT_EQ(get_record<McMemberRecord>(*m), r);
    EXPECT_EQ(m->data[0], 0xFF);
    EXPECT_EQ(m->data[48], 0x01);

    r.join_state = 0x10;  // does not fit 4 bits
    auto bad = make_sa_request(ib::method::set, 1, r);
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error(), ib::CodecError::field_out_of_range);
}

TEST(SaMad, PutRecordZeroesTheRestOfTheData) {
    SaMad m;
    m.data.fill(0xEE);
    ClassPortInfo c;
    ASSERT_TRUE(put_record(c, m).has_value());
    EXPECT_EQ(m.data[0], 1);
    EXPECT_EQ(m.data[1], 2);
    for (std::size_t i = ClassPortInfo::size; i < kSaDataSize; ++i) ASSERT_EQ(m.data[i], 0) << i;
    EXPECT_EQ(get_record<ClassPortInfo>(m), c);
    c.resp_time_value = 0x20;
    EXPECT_EQ(put_record(c, m).error(), ib::CodecError::field_out_of_range);
}

TEST(SaMad, WholeMadRoundTripOfEveryField) {
    SaMad m;
    m.header = {.base_version = 0xFE,
                .mgmt_class = ib::mgmt_class::subn_adm,
                .class_version = 0xFD,
                .method = 0xFF,
                .status = 0xFFFF,
                .class_specific = 0xFFFF,
                .transaction_id = ~0ULL,
                .attribute_id = 0xFFFF,
                .attribute_modifier = 0xFFFFFFFF};
    m.rmpp = {0xFF, 0xFF, 0x1F, 0x7, 0xFF, 0xFFFFFFFF, 0xFFFFFFFF};
    m.sm_key = ~0ULL;
    m.attribute_offset = 0xFFFF;
    m.component_mask = ~0ULL;
    for (std::size_t i = 0; i < kSaDataSize; ++i) m.data[i] = static_cast<std::uint8_t>(i);
    std::vector<std::uint8_t> buf(SaMad::size);
    ASSERT_TRUE(ib::encode(m, buf).has_value());
    auto back = decode_sa_mad(buf);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, m);
}

}  // namespace
}  // namespace ipoibd::sa
