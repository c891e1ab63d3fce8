#include "common/utf8.h"

#include <algorithm>
#include <cstdio>

namespace ipoibd {

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

std::string escape_text(std::string_view text) {
    std::string out;
    while (!text.empty()) {
        const std::size_t n = std::max<std::size_t>(utf8_sequence_length(text), 1);
        if (text_problem(text.substr(0, n))) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(text[0]));
            out += buf;
            text.remove_prefix(1);
        } else {
            out += text.substr(0, n);
            text.remove_prefix(n);
        }
    }
    return out;
}

std::optional<std::string> text_problem(std::string_view text) {
    auto hex = [](unsigned b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "0x%02x", b);
        return std::string(buf);
    };
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        const std::string column = " at column " + std::to_string(i + 1);
        if ((c < 0x20 && c != '\t') || c == 0x7f) return "control character " + hex(c) + column;
        const std::size_t n = utf8_sequence_length(text.substr(i));
        if (n == 0) return "byte " + hex(c) + column + " is not UTF-8";
        if (starts_with_c1_control(text.substr(i))) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned char>(text[i + 1]));
            return "control character " + std::string(buf) + column;
        }
        i += n;
    }
    return std::nullopt;
}

}  // namespace ipoibd
