// Loading ipoibd's configuration into a DaemonConfig (daemon_config.h):
//   1. parse_command_line(): -i INSTANCE (or a lone argument), -c FILE, the
//      daemon's own flags, and any --SECTION.KEY=VALUE overrides;
//   2. load_config(): /etc/ipoibd/<instance>.conf (or FILE), then the
//      overrides on top, then the rules between keys.
// Boost.Program_options does the INI and argv parsing (load.cpp); nothing
// of it appears in this header.
//
// Operator input fails fast (STYLE.md guideline 8): the first mistake stops
// the load, and its ConfigError names where it is, the key and the value:
//   /etc/ipoibd/ib0.conf:7: [interface] mtu = 70000: must be between 576 and 65520, ...
//   command line: --interface.mtu=70000: must be between 576 and 65520, ...
//
// Command-line values replace the file's. A repeatable key (address, route)
// given on the command line replaces the file's whole list.
//
// The file: -c FILE must exist. The default file may be absent only when the
// command line sets at least one key: the configuration is then the defaults
// plus the command line. With neither, the load fails naming the path, so a
// mistyped instance (`systemctl start ipoibd@ib9`) is not run on defaults.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"
#include "config/daemon_config.h"

namespace ipoibd::config {

inline constexpr std::string_view kDefaultInstance = "ib0";

struct ConfigError {
    std::string message;  // complete, e.g. "FILE:7: [interface] mtu = 70000: must be ..."
};

// One --SECTION.KEY=VALUE from the command line.
struct ConfigOverride {
    std::string key;    // "interface.mtu"
    std::string value;  // "9000"
    std::string token;  // as typed, for errors ("--interface.mtu=9000"); empty: built from key and value
};

struct CommandLine {
    std::string instance = std::string(kDefaultInstance);
    std::string config_file;  // -c FILE; empty: /etc/ipoibd/<instance>.conf
    bool help = false;
    bool version = false;
    bool check_config = false;  // print describe() and exit
    bool foreground = false;
    std::string log_target = "auto";  // --log-target: auto, journal, stderr (--foreground: stderr)
    std::vector<ConfigOverride> overrides;  // in command-line order
};

// argv[0] is the program name and is skipped.
expected<CommandLine, ConfigError> parse_command_line(int argc, const char* const* argv);

// `ipoibd --help`: every option and key with a line of help.
std::string command_line_help();

// "/etc/ipoibd/<instance>.conf"; `directory` is for tests.
std::string default_config_path(std::string_view instance, std::string_view directory = kConfigDirectory);

// `text` as if read from `file_name` (which errors name), for `instance`,
// with `overrides` on top.
expected<DaemonConfig, ConfigError> parse_config(std::string_view text, std::string_view file_name,
                                                 std::string_view instance,
                                                 std::span<const ConfigOverride> overrides = {});

// Reads the file the command line names (see the top of this header) and
// parses it; `directory` holds the default files and is for tests.
expected<DaemonConfig, ConfigError> load_config(const CommandLine& command_line,
                                                std::string_view directory = kConfigDirectory);

}  // namespace ipoibd::config
