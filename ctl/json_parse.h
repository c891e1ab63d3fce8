// A minimal JSON parser for ipoibctl (RFC 8259): enough to read what the
// daemon sends, and strict about everything else, since the bytes come from
// a socket.
//
// Limits: the whole text at most max_length bytes (checked first), nesting
// at most max_depth arrays/objects (the parser recurses once per level).
// Objects keep their members in document order (ipoibctl's columns follow
// the daemon's order) and may repeat a key (find() returns the first).
// Numbers keep their text, so a 64-bit counter prints exactly; as_uint64()
// and as_double() convert on demand. Strings are decoded (\uXXXX with
// surrogate pairs to UTF-8); other bytes are taken as they are.
// Errors name the byte offset and what was expected there; a byte that is
// not printable ASCII is named by its value (0x1b), never copied into the
// message, which ipoibctl prints to a terminal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"

namespace ipoibd::ctl {

struct JsonMember;

class JsonValue {
public:
    enum class Kind : std::uint8_t { null, boolean, number, string, array, object };

    static JsonValue make_null();
    static JsonValue make_bool(bool b);
    static JsonValue make_number(std::string text);  // text already valid JSON number syntax
    static JsonValue make_string(std::string text);
    static JsonValue make_array(std::vector<JsonValue> items);
    static JsonValue make_object(std::vector<JsonMember> members);

    Kind kind() const { return kind_; }
    bool is_null() const { return kind_ == Kind::null; }
    bool is_bool() const { return kind_ == Kind::boolean; }
    bool is_number() const { return kind_ == Kind::number; }
    bool is_string() const { return kind_ == Kind::string; }
    bool is_array() const { return kind_ == Kind::array; }
    bool is_object() const { return kind_ == Kind::object; }

    bool as_bool() const { return boolean_; }
    // The string's decoded text, or the number's source text.
    const std::string& text() const { return text_; }
    const std::vector<JsonValue>& items() const { return items_; }
    const std::vector<JsonMember>& members() const { return members_; }
    // The first member called `key`, or null when absent or not an object.
    const JsonValue* find(std::string_view key) const;

    // Numbers that are non-negative integers fitting 64 bits.
    std::optional<std::uint64_t> as_uint64() const;
    std::optional<double> as_double() const;

private:
    explicit JsonValue(Kind kind);

    Kind kind_ = Kind::null;
    bool boolean_ = false;
    std::string text_;
    std::vector<JsonValue> items_;
    std::vector<JsonMember> members_;
};

struct JsonMember {
    std::string key;
    JsonValue value;
};

struct JsonLimits {
    std::size_t max_length = 64u << 20;  // bytes of text
    std::size_t max_depth = 64;          // nested arrays and objects
};

struct JsonParseError {
    std::size_t offset = 0;  // byte offset in the text
    std::string what;        // "expected ':' after an object key"

    std::string message() const { return "invalid JSON at byte " + std::to_string(offset) + ": " + what; }
};

expected<JsonValue, JsonParseError> parse_json(std::string_view text, const JsonLimits& limits = {});

// The value as compact JSON again (used for cells that hold nested values).
std::string to_json(const JsonValue& value);

}  // namespace ipoibd::ctl
