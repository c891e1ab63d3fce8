// Where each line of an ipoibd.conf sits, for error messages only.
//
// Boost.Program_options parses the file (load.cpp), but it reports neither
// line numbers nor section headers. This scan classifies every line with
// Boost's own rules (program_options/src/config_file.cpp, Boost 1.74):
//   1. cut the line at the first '#', trim " \t\r\n"; empty: skip;
//   2. "[name]": a section; "[]" is a syntax error;
//   3. anything with '=': key = value, both trimmed; the key's full name is
//      "section.key" (no '.' added when the section name ends with one);
//   4. anything else is a syntax error.
// load.cpp pairs each option Boost returns with the next key line of the
// same full name and value, so if Boost's rules ever drift from these (newer
// Boost also skips lines that start with ';') the pairing still holds and
// the scan only loses lines, never shifts them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ipoibd::config {

struct IniLine {
    enum class Kind { section, key, invalid } kind = Kind::invalid;
    unsigned number = 0;  // 1-based
    std::string section;  // section: its name; key: the section it is in ("" before any)
    std::string key;      // key lines
    std::string value;    // key lines
    std::string text;     // the line without its comment, trimmed (for syntax errors)

    // What Boost calls the option: "section.key", or "key" before any section.
    std::string full_name() const;
};

// Every non-empty line of `text`, in order.
std::vector<IniLine> scan_ini(std::string_view text);

}  // namespace ipoibd::config
