// The JSON parser: good and malformed documents, depth and length limits,
// number conversions.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "ctl/json_parse.h"

namespace ipoibd::ctl {
namespace {

TEST(JsonParse, GoodDocuments) {
    struct Case {
        std::string in;
        std::string canonical;
    };
    const Case cases[] = {
        {"{}", "{}"},
        {" [ ] ", "[]"},
        {"null", "null"},
        {"true", "true"},
        {"false", "false"},
        {"0", "0"},
        {"-0.5e+10", "-0.5e+10"},
        {"12345678901234567890", "12345678901234567890"},
        {"\"\"", "\"\""},
        {"\"\\u00e9\\ud83d\\ude00\\/\\\"\"", "\"\xc3\xa9\xf0\x9f\x98\x80/\\\"\""},
        {"\"\\u0000\"", "\"\\u0000\""},
        {"{\"a\" : [1, {\"b\":null}], \"a\":2}\n", "{\"a\":[1,{\"b\":null}],\"a\":2}"},
        {"\t[\r\n1,\n2 ]", "[1,2]"},
    };
    for (const auto& c : cases) {
        auto doc = parse_json(c.in);
        ASSERT_TRUE(doc.has_value()) << c.in << ": " << doc.error().message();
        EXPECT_EQ(to_json(*doc), c.canonical) << c.in;
    }
    auto dup = parse_json("{\"a\":1,\"a\":2}");
    EXPECT_EQ(dup->find("a")->text(), "1") << "first of a repeated key";
    EXPECT_EQ(dup->find("b"), nullptr);
}

TEST(JsonParse, MalformedDocuments) {
    struct Case {
        std::string in;
        std::size_t offset;
        std::string what;
    };
    const Case cases[] = {
        {"", 0, "unexpected end of text, expected a value"},
        {"   ", 3, "unexpected end of text, expected a value"},
        {"{", 1, "expected a string as object key"},
        {"{\"a\":1", 6, "unexpected end of text in an object"},
        {"[1,2", 4, "unexpected end of text in an array"},
        {"{\"a\":1,}", 7, "expected a string as object key"},
        {"{\"a\" 1}", 5, "expected ':' after an object key"},
        {"{1:2}", 1, "expected a string as object key"},
        {"[1,]", 3, "unexpected character ']', expected a value"},
        {"[1 2]", 3, "expected ',' or ']' in an array"},
        {"{\"a\":1 \"b\":2}", 7, "expected ',' or '}' in an object"},
        {"\"abc", 4, "unterminated string"},
        {"\"ab\\", 4, "unterminated escape"},
        {"\"\\x\"", 2, "bad escape '\\x'"},
        {"\"\\u12x4\"", 5, "bad hex digit in \\u escape"},
        {"\"\\u12", 3, "truncated \\u escape"},
        {"\"\\ud800\"", 7, "high surrogate not followed by a low surrogate"},
        {"\"\\ud800\\u0041\"", 13, "high surrogate not followed by a low surrogate"},
        {"\"\\udc00\"", 7, "lone low surrogate in \\u escape"},
        {"\"a\nb\"", 2, "control character in a string"},
        {"01", 1, "unexpected text after the JSON document"},
        {"1.", 2, "invalid number: no digits after '.'"},
        {"-", 1, "invalid number: no digits"},
        {"-a", 1, "invalid number: no digits"},
        {"1e", 2, "invalid number: no digits in the exponent"},
        {"+1", 0, "unexpected character '+', expected a value"},
        {"tru", 0, "invalid literal (expected true)"},
        {"nul", 0, "invalid literal (expected null)"},
        {"NaN", 0, "unexpected character 'N', expected a value"},
        {"[1] x", 4, "unexpected text after the JSON document"},
        {"{}{}", 2, "unexpected text after the JSON document"},
        // A byte that is not printable ASCII is named by its value: the
        // message goes to a terminal (ipoibctl's standard error).
        {"\x1b[2J", 0, "unexpected byte 0x1b, expected a value"},
        {"\xc2\x9b", 0, "unexpected byte 0xc2, expected a value"},
        {"\"\\\x1b\"", 2, "bad escape, byte 0x1b after '\\'"},
    };
    for (const auto& c : cases) {
        auto doc = parse_json(c.in);
        ASSERT_FALSE(doc.has_value()) << c.in;
        EXPECT_EQ(doc.error().what, c.what) << c.in;
        EXPECT_EQ(doc.error().offset, c.offset) << c.in;
    }
    EXPECT_EQ(parse_json("[1,]").error().message(),
              "invalid JSON at byte 3: unexpected character ']', expected a value");
}

TEST(JsonParse, DepthAndLengthLimits) {
    const std::string ok = std::string(64, '[') + std::string(64, ']');
    EXPECT_TRUE(parse_json(ok).has_value());
    const std::string deep = std::string(65, '[') + std::string(65, ']');
    auto r = parse_json(deep);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().what, "nesting deeper than 64");
    EXPECT_EQ(r.error().offset, 64u);
    // Deep enough to overflow the stack without the limit.
    EXPECT_FALSE(parse_json(std::string(1'000'000, '[')).has_value());
    auto objects = parse_json(R"({"a":{"b":{}}})", {.max_depth = 2});
    ASSERT_FALSE(objects.has_value());
    EXPECT_EQ(objects.error().what, "nesting deeper than 2");
    EXPECT_EQ(objects.error().offset, 10u);

    auto long_doc = parse_json("[1,2,3,4,5]", {.max_length = 10});
    ASSERT_FALSE(long_doc.has_value());
    EXPECT_EQ(long_doc.error().what, "document longer than 10 bytes");
}

TEST(JsonParse, NumberConversions) {
    auto n = [](const char* text) { return *parse_json(text); };
    EXPECT_EQ(n("18446744073709551615").as_uint64(), 18446744073709551615u);
    EXPECT_EQ(n("18446744073709551616").as_uint64(), std::nullopt);
    EXPECT_EQ(n("-1").as_uint64(), std::nullopt);
    EXPECT_EQ(n("1.5").as_uint64(), std::nullopt);
    EXPECT_EQ(n("1.5").as_double(), 1.5);
    EXPECT_EQ(n("-2e3").as_double(), -2000.0);
    EXPECT_EQ(n("\"1\"").as_uint64(), std::nullopt);
}

}  // namespace
}  // namespace ipoibd::ctl
