#include <gtest/gtest.h>

#include "transport/wire/mad.h"
#include "wire_test_util.h"

namespace ipoibd::ib {
namespace {

TEST(Mad, DecodeWholeMad) {
    const auto s = test::sample_ud_mad();
    auto h = decode_mad(s.payload);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->mgmt_class, mgmt_class::subn_adm);
    EXPECT_EQ(h->class_version, 2);
    EXPECT_EQ(h->method, method::get);
    EXPECT_EQ(h->transaction_id, 0x12345678u);
    EXPECT_EQ(h->attribute_id, 0x0035);
    EXPECT_FALSE(h->is_response());
}

TEST(Mad, RejectsWrongSizeAndVersion) {
    std::vector<std::uint8_t> mad(kMadSize, 0);
    mad[0] = kMadBaseVersion;
    EXPECT_TRUE(decode_mad(mad).has_value());
    auto r = decode_mad(bytes(mad).first(kMadSize - 1));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MadError::wrong_size);
    mad.push_back(0);
    EXPECT_EQ(decode_mad(mad).error(), MadError::wrong_size);
    mad.pop_back();
    mad[0] = 2;
    EXPECT_EQ(decode_mad(mad).error(), MadError::bad_base_version);
    EXPECT_STRNE(to_string(MadError::bad_base_version), "unknown");
}

TEST(Mad, MethodNames) {
    EXPECT_STREQ(method_name(method::get), "Get");
    EXPECT_STREQ(method_name(method::get_resp), "GetResp");
    EXPECT_STREQ(method_name(method::get_table_resp), "GetTableResp");
    EXPECT_STREQ(method_name(method::del), "Delete");
    EXPECT_STREQ(method_name(method::report_resp), "ReportResp");
    EXPECT_STREQ(method_name(0x7F), "unknown method");
}

TEST(Mad, StatusInWords) {
    EXPECT_EQ(describe_mad_status(0), "success");
    EXPECT_EQ(describe_mad_status(0x0001), "0x0001: busy");
    EXPECT_EQ(describe_mad_status(0x000C), "0x000c: method/attribute combination not supported");
    EXPECT_EQ(describe_mad_status(0x001C), "0x001c: invalid attribute or modifier value");
    EXPECT_EQ(describe_mad_status(0x0200), "0x0200: class-specific status 0x02");
    EXPECT_EQ(describe_mad_status(0x0203), "0x0203: busy; redirect required; class-specific status 0x02");
}

}  // namespace
}  // namespace ipoibd::ib
