// The JSON writer: string escaping and the shape of documents.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "ctl/json.h"
#include "ctl/json_parse.h"

namespace ipoibd::ctl {
namespace {

TEST(JsonWriter, StringEscaping) {
    struct Case {
        const char* name;
        std::string in;
        std::string out;
    };
    const Case cases[] = {
        {"plain", "ib0", "\"ib0\""},
        {"quote and backslash", "a\"b\\c", "\"a\\\"b\\\\c\""},
        {"named controls", "\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\""},
        {"other controls", std::string("\x01\x1f\x7f", 3), "\"\\u0001\\u001f\\u007f\""},
        {"nul", std::string("a\0b", 3), "\"a\\u0000b\""},
        // C1 (U+0080..U+009F) escaped too: a terminal takes U+009B as CSI,
        // and ipoibctl -j prints the answer as it came.
        {"c1 controls", "a\xc2\x9b" "b\xc2\x80\xc2\x9f\xc2\xa0", "\"a\\u009bb\\u0080\\u009f\xc2\xa0\""},
        {"slash stays", "a/b", "\"a/b\""},
        {"valid utf-8", "caf\xc3\xa9 \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\""},
        {"stray byte", "a\xff" "b", "\"a\xef\xbf\xbd" "b\""},
        {"overlong", "\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\""},
        {"surrogate", "\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""},
        {"truncated", "\xe2\x82", "\"\xef\xbf\xbd\xef\xbf\xbd\""},
    };
    for (const auto& c : cases) {
        std::string out;
        append_json_string(out, c.in);
        EXPECT_EQ(out, c.out) << c.name;
        auto back = parse_json(out);
        EXPECT_TRUE(back.has_value()) << c.name;
    }
}

TEST(JsonWriter, DocumentShape) {
    JsonWriter w;
    w.begin_object()
        .field("ifname", "ib0")
        .field("mtu", 2044)
        .field("up", true)
        .field("rx", std::uint64_t{18446744073709551615u})
        .field("delta", std::int64_t{-9223372036854775807LL - 1})
        .field("ratio", 1.5)
        .field("nan", std::numeric_limits<double>::quiet_NaN())
        .key("gw")
        .null()
        .key("empty")
        .begin_array()
        .end_array()
        .key("list")
        .begin_array()
        .value(1)
        .begin_object()
        .end_object()
        .value("x")
        .end_array()
        .end_object();
    EXPECT_TRUE(w.complete());
    EXPECT_EQ(w.str(),
              "{\"ifname\":\"ib0\",\"mtu\":2044,\"up\":true,\"rx\":18446744073709551615,"
              "\"delta\":-9223372036854775808,\"ratio\":1.5,\"nan\":null,\"gw\":null,\"empty\":[],"
              "\"list\":[1,{},\"x\"]}");
    auto doc = parse_json(w.str());
    ASSERT_TRUE(doc.has_value());
    EXPECT_EQ(to_json(*doc), w.str()) << "round trip";
    EXPECT_EQ(doc->find("rx")->as_uint64(), 18446744073709551615u);
    EXPECT_EQ(json_error("no \"port\""), "{\"error\":\"no \\\"port\\\"\"}");
}

}  // namespace
}  // namespace ipoibd::ctl
