#include "config/ini_scan.h"

namespace ipoibd::config {

namespace {

constexpr std::string_view kWhiteSpace = " \t\r\n";  // Boost's trim_ws set

std::string_view trim(std::string_view s) {
    const auto first = s.find_first_not_of(kWhiteSpace);
    if (first == std::string_view::npos) return {};
    const auto last = s.find_last_not_of(kWhiteSpace);
    return s.substr(first, last - first + 1);
}

}  // namespace

std::string IniLine::full_name() const {
    if (section.empty()) return key;
    if (section.back() == '.') return section + key;
    return section + "." + key;
}

std::vector<IniLine> scan_ini(std::string_view text) {
    std::vector<IniLine> lines;
    std::string current_section;
    unsigned number = 0;
    std::size_t start = 0;
    while (start < text.size()) {
        auto end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        std::string_view s = text.substr(start, end - start);
        start = end + 1;
        ++number;

        if (const auto hash = s.find('#'); hash != std::string_view::npos) s = s.substr(0, hash);
        s = trim(s);
        if (s.empty()) continue;

        IniLine line;
        line.number = number;
        line.text = std::string(s);
        if (s.front() == '[' && s.back() == ']' && s.size() >= 2) {
            if (s.size() == 2) {
                line.kind = IniLine::Kind::invalid;
            } else {
                line.kind = IniLine::Kind::section;
                current_section = std::string(s.substr(1, s.size() - 2));
                line.section = current_section;
            }
        } else if (const auto eq = s.find('='); eq != std::string_view::npos) {
            line.kind = IniLine::Kind::key;
            line.section = current_section;
            line.key = std::string(trim(s.substr(0, eq)));
            line.value = std::string(trim(s.substr(eq + 1)));
        } else {
            line.kind = IniLine::Kind::invalid;
        }
        lines.push_back(std::move(line));
    }
    return lines;
}

}  // namespace ipoibd::config
