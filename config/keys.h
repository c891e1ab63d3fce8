// The one table of ipoibd.conf keys. Everything else is driven from it: the
// Boost option descriptions (file and command line), the value parsers,
// describe(), diff_for_reload(), and the tests that hold the man page to it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"
#include "config/daemon_config.h"
#include "config/values.h"

namespace ipoibd::config {

// When a changed value takes effect on reload.
enum class Apply : std::uint8_t { live, restart };

struct KeySpec {
    std::string_view section;     // "interface"
    std::string_view name;        // "mtu"
    std::string_view value_name;  // for --help: "BYTES", "auto|soft|verbs"
    std::string_view help;        // one line, for --help and describe()
    bool repeatable = false;      // a list: each occurrence adds one entry
    Apply apply = Apply::restart;
    char short_option = '\0';     // command-line short form, or '\0'

    // Parses `value` into `config` (repeatable keys: appends one entry).
    expected<void, Reason> (*set)(DaemonConfig& config, std::string_view value) = nullptr;
    // The value(s) as ipoibd.conf writes them; set() reads them back.
    std::vector<std::string> (*get)(const DaemonConfig& config) = nullptr;
    // Repeatable keys: empties the list (a command-line list replaces the file's).
    void (*clear)(DaemonConfig& config) = nullptr;

    std::string full_name() const;  // "interface.mtu"
};

// Every key, grouped by section in the order the sections are documented.
std::span<const KeySpec> config_keys();
// "fabric", "interface", "multicast", "neighbour", "queues", "daemon".
std::span<const std::string_view> config_sections();
const KeySpec* find_key(std::string_view section, std::string_view name);

// [child NAME] sections: a P_Key child interface each. Their keys, with
// the same conventions as KeySpec, on one ChildSection.
inline constexpr std::string_view kChildSection = "child";  // "[child ib0.8001]"
struct ChildKeySpec {
    std::string_view name;
    std::string_view value_name;
    std::string_view help;
    bool repeatable = false;
    expected<void, Reason> (*set)(ChildSection& child, std::string_view value) = nullptr;
    std::vector<std::string> (*get)(const ChildSection& child) = nullptr;
};
std::span<const ChildKeySpec> child_keys();
const ChildKeySpec* find_child_key(std::string_view name);
// "ib0.8001" from the section name "child ib0.8001"; nullopt for other sections.
std::optional<std::string_view> child_name_of(std::string_view section);
// A child's name: a valid interface name (as [interface] name).
expected<void, Reason> check_child_name(std::string_view name);
// What is wrong with the children as a whole (a missing or repeated P_Key,
// the parent's P_Key or name, an address the parent or an earlier child
// has): the child to blame and why.
struct ChildInconsistency {
    std::string child;
    std::string key;    // "pkey", "name", "address"
    Reason reason;
    std::string value;  // a repeatable key's entry to blame (address: as written back, format_prefix)
};
std::optional<ChildInconsistency> check_children(const DaemonConfig& config);

// Routes the kernel would refuse at start-up: a gateway off the link of
// the route's interface (no address or earlier on-link route of it covers
// it), an IPv4 route to the prefix of one of the daemon's addresses (File
// exists: the kernel adds that route with the address; an IPv6 one it
// takes, at another metric), or a route to one prefix through two of the
// daemon's interfaces. Names the route to blame and where it is.
struct RouteInconsistency {
    std::string section;  // "interface" or "child ib0.8001"
    std::string route;    // as ipoibd.conf writes it (format_route)
    Reason reason;
};
std::optional<RouteInconsistency> check_routes(const DaemonConfig& config);

// A rule between keys that no single value breaks: names the key to blame.
struct Inconsistency {
    const KeySpec* key;
    Reason reason;
};
std::optional<Inconsistency> check_consistency(const DaemonConfig& config);

}  // namespace ipoibd::config
