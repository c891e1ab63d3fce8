#include "ctl/json.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace ipoibd::ctl {

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
            } else if (starts_with_c1_control(text)) {  // escaped like C0
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

}  // namespace ipoibd::ctl
