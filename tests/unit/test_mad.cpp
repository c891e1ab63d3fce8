#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

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

TEST(Mad, AClassNotSupportedAnswerPerMethod) {
    struct Case {
        const char* name;
        std::uint8_t method;
        std::optional<std::uint8_t> answer;  // nullopt: none
    };
    const Case cases[] = {
        {"Get", method::get, method::get_resp},
        {"Set", method::set, method::get_resp},
        {"GetTable", method::get_table, method::get_table_resp},
        {"Delete", method::del, method::del_resp},
        {"Report", method::report, method::report_resp},
        {"Send", method::send, std::nullopt},
        {"Trap", method::trap, std::nullopt},
        {"TrapRepress", method::trap_repress, std::nullopt},
        {"GetResp", method::get_resp, std::nullopt},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        MadHeader request;
        request.mgmt_class = mgmt_class::dev_mgt;
        request.class_version = 1;
        request.method = c.method;
        request.class_specific = 0x1234;
        request.transaction_id = 0x1122334455667788ULL;
        request.attribute_id = 0x0010;
        request.attribute_modifier = 7;
        const auto out = class_not_supported_response(request);
        ASSERT_EQ(out.has_value(), c.answer.has_value());
        if (!out) continue;
        MadHeader expected = request;
        expected.method = *c.answer;
        expected.status = mad_status::bad_version;  // 0x0004
        expected.class_specific = 0;
        EXPECT_EQ(MadHeader::read_from(out->data()), expected);
        EXPECT_TRUE(std::all_of(out->begin() + kMadHeaderSize, out->end(), [](std::uint8_t b) { return b == 0; }));
    }
}

}  // namespace
}  // namespace ipoibd::ib
