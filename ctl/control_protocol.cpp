#include "ctl/control_protocol.h"

#include <algorithm>

namespace ipoibd::ctl::control {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Words of `text` joined by single spaces.
std::string normalise(std::string_view text) {
    std::string out;
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && is_blank(text[i])) ++i;
        const std::size_t start = i;
        while (i < text.size() && !is_blank(text[i])) ++i;
        if (i == start) break;
        if (!out.empty()) out += ' ';
        out.append(text.substr(start, i - start));
    }
    return out;
}

}  // namespace

std::optional<std::string_view> find_command(std::string_view request, const CommandSet& set) {
    if (request.size() > kMaxRequestLine) return std::nullopt;
    const std::string words = normalise(request);
    auto it = std::find(set.commands.begin(), set.commands.end(), std::string_view(words));
    if (it == set.commands.end()) return std::nullopt;
    return *it;
}

std::string Request::text() const {
    return interface.empty() ? std::string(command) : std::string(command) + " " + interface;
}

std::optional<Request> parse_request(std::string_view request, const CommandSet& set) {
    if (request.size() > kMaxRequestLine) return std::nullopt;
    const std::string words = normalise(request);
    if (auto bare = std::find(set.commands.begin(), set.commands.end(), std::string_view(words));
        bare != set.commands.end())
        return Request{*bare, {}};
    const auto space = words.rfind(' ');
    if (space == std::string::npos) return std::nullopt;
    const std::string_view head = std::string_view(words).substr(0, space);
    const std::string_view name = std::string_view(words).substr(space + 1);
    auto it = std::find(set.commands.begin(), set.commands.end(), head);
    if (it == set.commands.end()) return std::nullopt;
    if (std::find(set.node_commands.begin(), set.node_commands.end(), *it) != set.node_commands.end())
        return std::nullopt;
    if (name.empty() || name.size() > kMaxInterfaceName || name == "." || name == "..") return std::nullopt;
    if (name.find_first_of("/:") != std::string_view::npos) return std::nullopt;
    return Request{*it, std::string(name)};
}

std::string socket_path(std::string_view instance) {
    return std::string(kSocketDir) + "/" + std::string(instance) + ".sock";
}

bool valid_instance_name(std::string_view instance) {
    if (instance.empty() || instance.size() > 64 || instance.front() == '.') return false;
    return std::all_of(instance.begin(), instance.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
               c == ':' || c == '@' || c == '-';
    });
}

}  // namespace ipoibd::ctl::control
