// A small JSON writer for the control socket's answers (RFC 8259), compact
// output in one line, no dependency.
//
//   JsonWriter w;
//   w.begin_object().key("ifname").value("ib0").key("mtu").value(2044)
//    .key("neigh").begin_array().end_array().end_object();
//   send(w.str());
//
// Strings are escaped ('"', '\\', control characters: C0, DEL and C1, so
// an answer printed as it came cannot drive a terminal) and made valid UTF-8:
// a byte that does not start a well-formed sequence becomes U+FFFD, so a
// node description from the fabric cannot make the document unparseable.
// Non-finite doubles become null. Keys and values must alternate inside an
// object; a misuse is a programming error (assert).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/utf8.h"

namespace ipoibd::ctl {

class JsonWriter {
public:
    JsonWriter& begin_object();
    JsonWriter& end_object();
    JsonWriter& begin_array();
    JsonWriter& end_array();
    JsonWriter& key(std::string_view name);

    JsonWriter& value(std::string_view text);
    JsonWriter& value(const char* text) { return value(std::string_view(text)); }
    JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
    JsonWriter& value(bool b);
    JsonWriter& value(double d);
    template <std::integral T>
        requires(!std::same_as<T, bool> && !std::same_as<T, char>)
    JsonWriter& value(T n) {
        if constexpr (std::is_signed_v<T>)
            return signed_integer(static_cast<std::int64_t>(n));
        else
            return unsigned_integer(static_cast<std::uint64_t>(n));
    }
    JsonWriter& null();

    // key(name).value(v) in one call.
    template <class T>
    JsonWriter& field(std::string_view name, const T& v) {
        key(name);
        return value(v);
    }

    // True when every object and array opened has been closed.
    bool complete() const { return stack_.empty() && !out_.empty(); }
    const std::string& str() const { return out_; }
    std::string take() { return std::move(out_); }

private:
    enum class Frame : std::uint8_t { object, array };
    void before_value();
    JsonWriter& signed_integer(std::int64_t n);
    JsonWriter& unsigned_integer(std::uint64_t n);

    std::string out_;
    std::vector<Frame> stack_;
    bool first_ = true;       // no element yet in the innermost container
    bool after_key_ = false;  // a key was written, its value is next
};

// Appends `text` as a JSON string literal (quotes included).
void append_json_string(std::string& out, std::string_view text);

// {"error":"<message>"}: the answer to a request that failed.
std::string json_error(std::string_view message);

}  // namespace ipoibd::ctl
