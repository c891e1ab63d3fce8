// How ibsaquery prints SA records: saquery-like dotted lines for people, one
// JSON object per result for scripts (tests/opensm/compare.py reads them).
//
// JSON: numbers are JSON integers, GIDs IPv6 text, selectors their 2-bit
// code with the value in its own key ("mtu_selector": 2, "mtu": 4), so a
// record reads back field for field as the spec names it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "sa_client/sa_records.h"

namespace ipoibd::sa::tools {

// A JSON object written in order: Json().str("a", "x").num("b", 1).done().
class Json {
public:
    Json& str(std::string_view key, std::string_view value);
    Json& num(std::string_view key, std::uint64_t value);
    Json& boolean(std::string_view key, bool value);
    Json& null(std::string_view key);
    Json& raw(std::string_view key, std::string_view json);  // a nested value, already JSON
    std::string done() const { return out_ + "}"; }

    static std::string quote(std::string_view s);

private:
    void key(std::string_view k);
    std::string out_ = "{";
};

std::string to_json(const McMemberRecord& r);
std::string to_json(const PathRecord& r);

// saquery's layout: a title line, then "\t\tField.........value".
void print_record(std::FILE* out, const McMemberRecord& r);
void print_record(std::FILE* out, const PathRecord& r);

}  // namespace ipoibd::sa::tools
