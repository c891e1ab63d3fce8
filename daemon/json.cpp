#include "daemon/json.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace ipoibd::daemon {

std::size_t utf8_sequence_length(std::string_view s) {
    if (s.empty()) return 0;
    const auto b0 = static_cast<unsigned char>(s[0]);
    auto cont = [&](std::size_t i, unsigned lo = 0x80, unsigned hi = 0xbf) {
        if (i >= s.size()) return false;
        const auto b = static_cast<unsigned char>(s[i]);
        return b >= lo && b <= hi;
    };
    if (b0 < 0x80) return 1;
    if (b0 >= 0xc2 && b0 <= 0xdf) return cont(1) ? 2 : 0;
    if (b0 == 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
    if (b0 == 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;  // not the surrogates
    if (b0 >= 0xe1 && b0 <= 0xef) return cont(1) && cont(2) ? 3 : 0;
    if (b0 == 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    if (b0 >= 0xf1 && b0 <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
    if (b0 == 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
    return 0;
}

void append_json_string(std::string& out, std::string_view text) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += '"';
    while (!text.empty()) {
        const auto c = static_cast<unsigned char>(text[0]);
        if (c >= 0x80) {
            const std::size_t n = utf8_sequence_length(text);
            if (n == 0) {
                out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER
                text.remove_prefix(1);
            } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(text[1]) <= 0x9f) {
                // C1 control (U+0080..U+009F), escaped like C0: a terminal
                // takes U+009B as CSI.
                const auto low = static_cast<unsigned char>(text[1]);
                out += "\\u00";
                out += kHex[low >> 4];
                out += kHex[low & 0xf];
                text.remove_prefix(2);
            } else {
                out += text.substr(0, n);
                text.remove_prefix(n);
            }
            continue;
        }
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    out += "\\u00";
                    out += kHex[c >> 4];
                    out += kHex[c & 0xf];
                } else {
                    out += static_cast<char>(c);
                }
        }
        text.remove_prefix(1);
    }
    out += '"';
}

std::string json_error(std::string_view message) {
    JsonWriter w;
    w.begin_object().field("error", message).end_object();
    return w.take();
}

void JsonWriter::before_value() {
    if (!stack_.empty() && stack_.back() == Frame::object) {
        assert(after_key_ && "JsonWriter: a value in an object needs a key first");
        after_key_ = false;
        return;
    }
    assert((!stack_.empty() || out_.empty()) && "JsonWriter: one top-level value only");
    if (!first_) out_ += ',';
    first_ = false;
}

JsonWriter& JsonWriter::begin_object() {
    before_value();
    out_ += '{';
    stack_.push_back(Frame::object);
    first_ = true;
    return *this;
}

JsonWriter& JsonWriter::end_object() {
    assert(!stack_.empty() && stack_.back() == Frame::object && !after_key_);
    stack_.pop_back();
    out_ += '}';
    first_ = false;
    return *this;
}

JsonWriter& JsonWriter::begin_array() {
    before_value();
    out_ += '[';
    stack_.push_back(Frame::array);
    first_ = true;
    return *this;
}

JsonWriter& JsonWriter::end_array() {
    assert(!stack_.empty() && stack_.back() == Frame::array);
    stack_.pop_back();
    out_ += ']';
    first_ = false;
    return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
    assert(!stack_.empty() && stack_.back() == Frame::object && !after_key_);
    if (!first_) out_ += ',';
    first_ = false;
    append_json_string(out_, name);
    out_ += ':';
    after_key_ = true;
    return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
    before_value();
    append_json_string(out_, text);
    return *this;
}

JsonWriter& JsonWriter::value(bool b) {
    before_value();
    out_ += b ? "true" : "false";
    return *this;
}

JsonWriter& JsonWriter::value(double d) {
    if (!std::isfinite(d)) return null();  // JSON has no NaN or infinity
    before_value();
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, d);
    out_.append(buf, r.ptr);
    return *this;
}

JsonWriter& JsonWriter::signed_integer(std::int64_t n) {
    before_value();
    out_ += std::to_string(n);
    return *this;
}

JsonWriter& JsonWriter::unsigned_integer(std::uint64_t n) {
    before_value();
    out_ += std::to_string(n);
    return *this;
}

JsonWriter& JsonWriter::null() {
    before_value();
    out_ += "null";
    return *this;
}

}  // namespace ipoibd::daemon
