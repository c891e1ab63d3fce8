// UTF-8 well-formedness (RFC 3629), for text that reaches a terminal, a
// journal or a JSON answer.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ipoibd {

// Length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0 (also
// for an empty `s`).
std::size_t utf8_sequence_length(std::string_view s);
// Whether `s` starts with a C1 control (U+0080..U+009F, encoded 0xc2
// 0x80..0x9f): well-formed UTF-8, yet a terminal takes U+009B as CSI.
inline bool starts_with_c1_control(std::string_view s) {
    return s.size() >= 2 && static_cast<unsigned char>(s[0]) == 0xc2 && static_cast<unsigned char>(s[1]) >= 0x80 &&
           static_cast<unsigned char>(s[1]) <= 0x9f;
}

// What makes `text` (one line of a file, or a command-line value) no text:
// a control character (C0 but TAB, DEL, C1) or a byte that is not UTF-8,
// named by value and 1-based byte column ("control character 0x00 at
// column 31"); nullopt for text. Keeps such bytes out of error messages,
// the journal and a terminal.
std::optional<std::string> text_problem(std::string_view text);
// `text` with every byte text_problem() objects to written \xNN, for
// quoting what a user typed (a command-line token, a file name).
std::string escape_text(std::string_view text);

}  // namespace ipoibd
