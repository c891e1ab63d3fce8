// ipoibctl's human output, built generically from the daemon's JSON so a
// new field in an answer shows up without touching the client:
//
//   - an array of objects is a table: the keys (in first-seen order) are
//     the column headers, one row per object, "-" where a row lacks a key;
//   - an object is "key: value" lines; a member that is an object is a
//     "key:" line with its lines indented below, a member that is an array
//     of objects is a "key:" line with the table indented below;
//   - scalars print bare: strings without quotes, null as "-"; an array of
//     scalars is "a, b, c"; a nested value in a table cell is compact JSON.
//
// Columns are separated by two spaces and padded to the widest cell (width
// in UTF-8 code points); a column whose cells are all numbers is
// right-aligned, as counters in iproute2's tables; the last column is not
// padded, so no line ends in spaces. Control characters in the data (a node
// description from the fabric can hold anything) print as '?': C0, DEL,
// C1 (U+0080..U+009F) and any byte of broken UTF-8, so the output cannot
// drive the terminal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ctl/json_parse.h"

namespace ipoibd::ctl {

class Table {
public:
    explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

    // Short rows are padded with "-", longer ones cut to the header count.
    void add_row(std::vector<std::string> cells);
    std::size_t rows() const { return rows_.size(); }
    // The header line and one line per row, each ending in '\n'; every line
    // starts with `indent`.
    std::string render(std::string_view indent = {}) const;

private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

// `text` with control characters (C0, DEL, C1) and bytes of broken UTF-8
// replaced by '?', one per code point or byte.
std::string printable(std::string_view text);
// Display width: UTF-8 code points.
std::size_t display_width(std::string_view text);

// The human form of a daemon answer, following the rules above.
std::string format_json_text(const JsonValue& value);

}  // namespace ipoibd::ctl
