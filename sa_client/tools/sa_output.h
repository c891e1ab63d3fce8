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

#include "sa_client/mad_transport.h"
#include "sa_client/sa_client.h"
#include "sa_client/sa_notice.h"
#include "sa_client/sa_records.h"
#include "sa_client/tools/sa_request.h"

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
std::string to_json(const InformInfo& r);
std::string to_json(const InformInfoRecord& r);
std::string to_json(const Notice& r);  // with "gid" for traps 64-67

// saquery's layout: a title line, then "\t\tField.........value".
void print_record(std::FILE* out, const McMemberRecord& r);
void print_record(std::FILE* out, const PathRecord& r);
void print_record(std::FILE* out, const InformInfo& r);
void print_record(std::FILE* out, const InformInfoRecord& r);
void print_record(std::FILE* out, const Notice& r);

// One result of `request` (sent as `sent`): a summary line and the records
// in words, or one JSON object with the status, the response method, the
// AttributeOffset and the records. A table that came without RMPP through
// libumad2sim (valid_bytes 224) is cut to its whole records, "truncated"
// saying that some were lost. Returns whether the status was 0.
bool print_result(const Request& request, const SaMad& sent, const expected<SaResult, SaFailure>& result,
                  std::size_t valid_bytes, bool json);
// The `port` command.
void print_port(const Request& request, const MadPortInfo& port, bool json);
// A Report the SA sent (subscribe --listen).
void print_report(const SaMad& report, bool json);

}  // namespace ipoibd::sa::tools
