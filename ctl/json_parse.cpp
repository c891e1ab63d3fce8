#include "ctl/json_parse.h"

#include <charconv>

#include "ctl/json.h"

namespace ipoibd::ctl {

JsonValue::JsonValue(Kind kind) : kind_(kind) {}

JsonValue JsonValue::make_null() { return JsonValue(Kind::null); }

JsonValue JsonValue::make_bool(bool b) {
    JsonValue v(Kind::boolean);
    v.boolean_ = b;
    return v;
}

JsonValue JsonValue::make_number(std::string text) {
    JsonValue v(Kind::number);
    v.text_ = std::move(text);
    return v;
}

JsonValue JsonValue::make_string(std::string text) {
    JsonValue v(Kind::string);
    v.text_ = std::move(text);
    return v;
}

JsonValue JsonValue::make_array(std::vector<JsonValue> items) {
    JsonValue v(Kind::array);
    v.items_ = std::move(items);
    return v;
}

JsonValue JsonValue::make_object(std::vector<JsonMember> members) {
    JsonValue v(Kind::object);
    v.members_ = std::move(members);
    return v;
}

const JsonValue* JsonValue::find(std::string_view key) const {
    for (const auto& m : members_)
        if (m.key == key) return &m.value;
    return nullptr;
}

std::optional<std::uint64_t> JsonValue::as_uint64() const {
    if (kind_ != Kind::number) return std::nullopt;
    std::uint64_t n = 0;
    const char* end = text_.data() + text_.size();
    auto [ptr, ec] = std::from_chars(text_.data(), end, n);
    if (ec != std::errc() || ptr != end) return std::nullopt;
    return n;
}

std::optional<double> JsonValue::as_double() const {
    if (kind_ != Kind::number) return std::nullopt;
    double d = 0;
    const char* end = text_.data() + text_.size();
    auto [ptr, ec] = std::from_chars(text_.data(), end, d);
    if (ec != std::errc() || ptr != end) return std::nullopt;
    return d;
}

namespace {

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

// "character 'x'" for printable ASCII, else "byte 0x1b": error messages go
// to a terminal, and the byte may be part of an escape sequence.
std::string describe_byte(char c) {
    static constexpr char kHex[] = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string("character '") + c + "'";
    return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 0xf];
}

// Recursive descent over RFC 8259's grammar. Every function returns false
// with error_ set at the first problem; nothing is read past the text.
class Parser {
public:
    Parser(std::string_view text, const JsonLimits& limits) : text_(text), limits_(limits) {}

    expected<JsonValue, JsonParseError> document() {
        if (text_.size() > limits_.max_length) {
            pos_ = limits_.max_length;
            fail("document longer than " + std::to_string(limits_.max_length) + " bytes");
            return unexpected(*error_);
        }
        JsonValue v = JsonValue::make_null();
        skip_whitespace();
        if (!value(v, 0)) return unexpected(*error_);
        skip_whitespace();
        if (pos_ != text_.size()) {
            fail("unexpected text after the JSON document");
            return unexpected(*error_);
        }
        return v;
    }

private:
    bool fail(std::string what) {
        if (!error_) error_ = JsonParseError{.offset = pos_, .what = std::move(what)};
        return false;
    }
    bool at_end() const { return pos_ >= text_.size(); }
    char peek() const { return text_[pos_]; }
    void skip_whitespace() {
        while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
    }
    bool literal(std::string_view word) {
        if (text_.substr(pos_, word.size()) != word)
            return fail("invalid literal (expected " + std::string(word) + ")");
        pos_ += word.size();
        return true;
    }

    bool value(JsonValue& out, std::size_t depth) {
        if (at_end()) return fail("unexpected end of text, expected a value");
        switch (peek()) {
            case '{': return object(out, depth);
            case '[': return array(out, depth);
            case '"': {
                std::string s;
                if (!string(s)) return false;
                out = JsonValue::make_string(std::move(s));
                return true;
            }
            case 't':
                out = JsonValue::make_bool(true);
                return literal("true");
            case 'f':
                out = JsonValue::make_bool(false);
                return literal("false");
            case 'n':
                out = JsonValue::make_null();
                return literal("null");
            default:
                if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return number(out);
                return fail("unexpected " + describe_byte(peek()) + ", expected a value");
        }
    }

    bool enter(std::size_t depth) {
        if (depth >= limits_.max_depth) return fail("nesting deeper than " + std::to_string(limits_.max_depth));
        return true;
    }

    bool object(JsonValue& out, std::size_t depth) {
        if (!enter(depth)) return false;
        ++pos_;  // '{'
        std::vector<JsonMember> members;
        skip_whitespace();
        if (!at_end() && peek() == '}') {
            ++pos_;
            out = JsonValue::make_object(std::move(members));
            return true;
        }
        for (;;) {
            skip_whitespace();
            if (at_end() || peek() != '"') return fail("expected a string as object key");
            JsonMember m{.key = {}, .value = JsonValue::make_null()};
            if (!string(m.key)) return false;
            skip_whitespace();
            if (at_end() || peek() != ':') return fail("expected ':' after an object key");
            ++pos_;
            skip_whitespace();
            if (!value(m.value, depth + 1)) return false;
            members.push_back(std::move(m));
            skip_whitespace();
            if (at_end()) return fail("unexpected end of text in an object");
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            if (peek() == '}') {
                ++pos_;
                out = JsonValue::make_object(std::move(members));
                return true;
            }
            return fail("expected ',' or '}' in an object");
        }
    }

    bool array(JsonValue& out, std::size_t depth) {
        if (!enter(depth)) return false;
        ++pos_;  // '['
        std::vector<JsonValue> items;
        skip_whitespace();
        if (!at_end() && peek() == ']') {
            ++pos_;
            out = JsonValue::make_array(std::move(items));
            return true;
        }
        for (;;) {
            skip_whitespace();
            JsonValue item = JsonValue::make_null();
            if (!value(item, depth + 1)) return false;
            items.push_back(std::move(item));
            skip_whitespace();
            if (at_end()) return fail("unexpected end of text in an array");
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            if (peek() == ']') {
                ++pos_;
                out = JsonValue::make_array(std::move(items));
                return true;
            }
            return fail("expected ',' or ']' in an array");
        }
    }

    bool hex4(std::uint32_t& out) {
        if (text_.size() - pos_ < 4) return fail("truncated \\u escape");
        out = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = text_[pos_++];
            out <<= 4;
            if (c >= '0' && c <= '9')
                out |= static_cast<std::uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f')
                out |= static_cast<std::uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                out |= static_cast<std::uint32_t>(c - 'A' + 10);
            else {
                --pos_;
                return fail("bad hex digit in \\u escape");
            }
        }
        return true;
    }

    bool unicode_escape(std::string& out) {
        std::uint32_t cp = 0;
        if (!hex4(cp)) return false;
        if (cp >= 0xdc00 && cp <= 0xdfff) return fail("lone low surrogate in \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (text_.substr(pos_, 2) != "\\u") return fail("high surrogate not followed by a low surrogate");
            pos_ += 2;
            std::uint32_t low = 0;
            if (!hex4(low)) return false;
            if (low < 0xdc00 || low > 0xdfff) return fail("high surrogate not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        }
        append_utf8(out, cp);
        return true;
    }

    bool string(std::string& out) {
        ++pos_;  // '"'
        for (;;) {
            if (at_end()) return fail("unterminated string");
            const char c = text_[pos_];
            if (c == '"') {
                ++pos_;
                return true;
            }
            if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
            if (c != '\\') {
                out += c;
                ++pos_;
                continue;
            }
            ++pos_;
            if (at_end()) return fail("unterminated escape");
            const char e = text_[pos_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u':
                    if (!unicode_escape(out)) return false;
                    break;
                default:
                    --pos_;
                    if (static_cast<unsigned char>(e) < 0x20 || static_cast<unsigned char>(e) >= 0x7f)
                        return fail("bad escape, " + describe_byte(e) + " after '\\'");
                    return fail(std::string("bad escape '\\") + e + "'");
            }
        }
    }

    bool digits() {
        const std::size_t start = pos_;
        while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
        return pos_ > start;
    }

    bool number(JsonValue& out) {
        const std::size_t start = pos_;
        if (peek() == '-') ++pos_;
        if (at_end()) return fail("invalid number: no digits");
        if (peek() == '0') {
            ++pos_;  // no leading zeros: "012" stops after the 0 and fails as trailing text
        } else if (!digits()) {
            return fail("invalid number: no digits");
        }
        if (!at_end() && peek() == '.') {
            ++pos_;
            if (!digits()) return fail("invalid number: no digits after '.'");
        }
        if (!at_end() && (peek() == 'e' || peek() == 'E')) {
            ++pos_;
            if (!at_end() && (peek() == '+' || peek() == '-')) ++pos_;
            if (!digits()) return fail("invalid number: no digits in the exponent");
        }
        out = JsonValue::make_number(std::string(text_.substr(start, pos_ - start)));
        return true;
    }

    std::string_view text_;
    const JsonLimits& limits_;
    std::size_t pos_ = 0;
    std::optional<JsonParseError> error_;
};

void write_json(std::string& out, const JsonValue& v) {
    switch (v.kind()) {
        case JsonValue::Kind::null: out += "null"; return;
        case JsonValue::Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
        case JsonValue::Kind::number: out += v.text(); return;
        case JsonValue::Kind::string: append_json_string(out, v.text()); return;
        case JsonValue::Kind::array:
            out += '[';
            for (std::size_t i = 0; i < v.items().size(); ++i) {
                if (i > 0) out += ',';
                write_json(out, v.items()[i]);
            }
            out += ']';
            return;
        case JsonValue::Kind::object:
            out += '{';
            for (std::size_t i = 0; i < v.members().size(); ++i) {
                if (i > 0) out += ',';
                append_json_string(out, v.members()[i].key);
                out += ':';
                write_json(out, v.members()[i].value);
            }
            out += '}';
            return;
    }
}

}  // namespace

expected<JsonValue, JsonParseError> parse_json(std::string_view text, const JsonLimits& limits) {
    return Parser(text, limits).document();
}

std::string to_json(const JsonValue& value) {
    std::string out;
    write_json(out, value);
    return out;
}

}  // namespace ipoibd::ctl
