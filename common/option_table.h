// Command-line options as a table, in the manner of rdma-core saquery.c's
// query_cmds[]: one row per option with its name, what it takes, its help
// text and the handler that applies its value. The command-line tools
// (ibfabricd, ibudping, ibsaquery) declare their options this way.
//
// Boost.Program_options still splits argv, so its messages for an unknown
// option, a missing value or an option given twice stay the ones the tools
// have always printed; it needs Boost::program_options linked (header only
// here). The table makes the options_description (the --help text, in row
// order) and then calls the handlers in row order, so a handler may read
// what an earlier row has set.
#pragma once

#include <algorithm>
#include <array>
#include <boost/lexical_cast.hpp>
#include <boost/program_options.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"

namespace ipoibd::cli {

// What an option takes after its name.
enum class Takes {
    nothing,  // a switch: the handler is called with "" when it is given
    value,    // one value; giving the option twice is an error
    values,   // repeatable: the handler is called once per value, in order
};

// A handler's answer: an error is the whole message, naming the option and
// the value ("--mtu '1000': must be 256, 512, 1024, 2048 or 4096").
using Applied = expected<void, std::string>;

template <class Options>
struct Option {
    const char* name;  // the long name, then ",x" for a short one: "quiet,q"
    Takes takes;
    const char* help;
    // Applies one value to the options. nullptr: the tool looks at the
    // option itself (--help, --version, positional words).
    Applied (*apply)(Options&, const std::string& value) = nullptr;
    // Applied as if given when the option is absent; not shown in --help.
    const char* absent = nullptr;
};

template <class Options>
using OptionTable = std::span<const Option<Options>>;

// Tables made of parts (rows several tools share, then a tool's own), in
// order: cli::rows(std::array{...}, shared_rows<Options>(...), std::array{...}).
template <class Options, std::size_t... N>
constexpr std::array<Option<Options>, (N + ...)> rows(const std::array<Option<Options>, N>&... parts) {
    std::array<Option<Options>, (N + ...)> out{};
    std::size_t i = 0;
    ((std::copy(parts.begin(), parts.end(), out.begin() + static_cast<std::ptrdiff_t>(i)), i += N), ...);
    return out;
}

// The long name of a row: "quiet" of "quiet,q".
inline std::string long_name(const char* name) {
    const std::string n(name);
    return n.substr(0, n.find(','));
}

// The rows as Boost options, for the parser and for --help.
template <class Options>
void describe(OptionTable<Options> table, boost::program_options::options_description& into) {
    namespace po = boost::program_options;
    auto add = into.add_options();
    for (const Option<Options>& row : table) {
        switch (row.takes) {
            case Takes::nothing: add(row.name, row.help); break;
            case Takes::value: add(row.name, po::value<std::string>(), row.help); break;
            case Takes::values: add(row.name, po::value<std::vector<std::string>>(), row.help); break;
        }
    }
}

// Calls the handlers of the rows given in `vm` (or with a value for when
// absent), in row order; the first error ends it.
template <class Options>
Applied apply(OptionTable<Options> table, const boost::program_options::variables_map& vm, Options& options) {
    for (const Option<Options>& row : table) {
        if (!row.apply) continue;
        const auto given = vm.find(long_name(row.name));
        if (given == vm.end()) {
            if (!row.absent) continue;
            if (auto r = row.apply(options, row.absent); !r) return r;
            continue;
        }
        switch (row.takes) {
            case Takes::nothing:
                if (auto r = row.apply(options, ""); !r) return r;
                break;
            case Takes::value:
                if (auto r = row.apply(options, given->second.template as<std::string>()); !r) return r;
                break;
            case Takes::values:
                for (const std::string& v : given->second.template as<std::vector<std::string>>())
                    if (auto r = row.apply(options, v); !r) return r;
                break;
        }
    }
    return {};
}

// Boost.Program_options words an error by replacing placeholders
// ("%canonical_option%", "%value%", "%invalid_line%") in a template with
// what the user typed, again and again until none is left: text that holds
// a placeholder's own name never ends (Boost 1.74, replace_token), and the
// tool spins where it should have said "unrecognised option". Text given to
// Boost for a message has each '%' as U+FF05 (a fullwidth percent sign), and
// the message gets its '%' back.
inline constexpr std::string_view kPercentStandIn = "\xEF\xBC\x85";

inline std::string replace_all(std::string text, std::string_view from, std::string_view to) {
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
        text.replace(at, from.size(), to);
    return text;
}

// Runs parse(args) (Boost's store and notify of `args`); nullopt when it
// succeeds, else Boost's message, safe from arguments with '%' in them (it
// parses them again with the stand-in, for the message only).
template <class Parse>
std::optional<std::string> parse_arguments(const std::vector<std::string>& args, Parse&& parse) {
    namespace po = boost::program_options;
    try {
        parse(args);
        return std::nullopt;
    } catch (const po::error& e) {
        if (std::none_of(args.begin(), args.end(), [](const std::string& a) { return a.find('%') != std::string::npos; }))
            return std::string(e.what());
    }
    std::vector<std::string> stand_ins;
    for (const std::string& a : args) stand_ins.push_back(replace_all(a, "%", kPercentStandIn));
    try {
        parse(stand_ins);
    } catch (const po::error& e) {
        return replace_all(e.what(), kPercentStandIn, "%");
    }
    return std::string("the arguments do not parse");  // they did not, with '%' in them
}

// The words after the program's name.
inline std::vector<std::string> arguments(int argc, const char* const* argv) {
    return argc > 1 ? std::vector<std::string>(argv + 1, argv + argc) : std::vector<std::string>();
}

// A value read as Boost.Program_options reads a typed option (a
// lexical_cast, so "-1" wraps for unsigned types as it always has), with
// its message when the text is not a T.
template <class T>
expected<T, std::string> typed(const char* option, const std::string& value) {
    try {
        return boost::lexical_cast<T>(value);
    } catch (const boost::bad_lexical_cast&) {
        // Boost's own error, worded as when its parser throws it.
        boost::program_options::invalid_option_value e(replace_all(value, "%", kPercentStandIn));
        e.set_option_name(long_name(option));
        e.set_prefix(boost::program_options::command_line_style::allow_long);
        return unexpected(replace_all(e.what(), kPercentStandIn, "%"));
    }
}

// A number in decimal, hex (0x) or octal (0) of at most `max`; nullopt for
// anything else, a sign included ("-1" is not the largest number).
inline std::optional<std::uint64_t> number(const std::string& s, std::uint64_t max) {
    if (s.empty() || s[0] == '-' || s[0] == '+') return std::nullopt;
    try {
        std::size_t end = 0;
        const auto v = std::stoull(s, &end, 0);
        if (end != s.size() || v > max) return std::nullopt;
        return v;
    } catch (const std::logic_error&) {  // invalid_argument, out_of_range
        return std::nullopt;
    }
}

}  // namespace ipoibd::cli
