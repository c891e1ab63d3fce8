// ipoibd.conf and the command line -> DaemonConfig: every bad-input case
// with its exact error text (file:line, key, value), defaults, overrides,
// the describe() round trip, reload plans, and the example file and man
// page held to the key table.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/daemon_config.h"
#include "config/keys.h"
#include "config/load.h"
#include "config/values.h"

namespace ipoibd::config {
namespace {

using namespace std::chrono_literals;

// A directory of its own for each test, removed afterwards.
class TempDir {
public:
    TempDir() {
        std::string pattern = (std::filesystem::path(testing::TempDir()) / "ipoibd-config-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    std::string write(const std::string& name, std::string_view text) const {
        const auto file = (path_ / name).string();
        std::ofstream(file, std::ios::binary) << text;
        return file;
    }
    std::string path() const { return path_.string(); }

private:
    std::filesystem::path path_;
};

std::string read_source_file(const std::string& relative) {
    std::ifstream in(std::string(IPOIBD_SOURCE_DIR) + "/" + relative, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

expected<CommandLine, ConfigError> command_line(std::vector<const char*> args) {
    args.insert(args.begin(), "ipoibd");
    return parse_command_line(static_cast<int>(args.size()), args.data());
}

// Loads `text` from a file named ib0.conf, as `-c FILE` would.
expected<DaemonConfig, ConfigError> load_text(const TempDir& dir, std::string_view text,
                                              std::vector<const char*> args = {}) {
    const std::string file = dir.write("ib0.conf", text);
    args.insert(args.begin(), {"-c", file.c_str()});
    auto line = command_line(args);
    if (!line) return unexpected(line.error());
    return load_config(*line, dir.path());
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
        text.replace(at, from.size(), to);
    return text;
}

// ---------------------------------------------------------------------------
// Bad files: each with the exact error, FILE standing for the file's path.

struct BadFile {
    const char* name;
    const char* text;
    const char* error;
};

const BadFile kBadFiles[] = {
    {"mtu_too_large",
     "# ipoibd configuration\n\n[fabric]\ntransport = soft\n\n[interface]\nmtu = 70000\n",
     "FILE:7: [interface] mtu = 70000: must be between 576 and 65520, or 0 for the broadcast group's"},
    {"mtu_too_small", "[interface]\nmtu = 500\n",
     "FILE:2: [interface] mtu = 500: must be between 576 and 65520, or 0 for the broadcast group's"},
    {"mtu_not_a_number", "[interface]\nmtu = big\n",
     "FILE:2: [interface] mtu = big: must be between 576 and 65520, or 0 for the broadcast group's"},
    {"mtu_empty", "[interface]\nmtu =\n",
     "FILE:2: [interface] mtu = \"\": must be between 576 and 65520, or 0 for the broadcast group's"},
    {"line_numbers_count_comments_blanks_and_crlf",
     "# comment\r\n\r\n[interface]   # trailing comment\r\n\t mtu\t=\t2044 # why\r\n\n   \nname = ib0\nmtu = 9\n",
     "FILE:8: [interface] mtu = 9: mtu is already set on line 4 (only address and route may repeat)"},
    {"first_mistake_wins", "[interface]\nmtu = 1\n[queues]\nsend-depth = 1\n",
     "FILE:2: [interface] mtu = 1: must be between 576 and 65520, or 0 for the broadcast group's"},

    // Structure.
    {"unknown_section_typo", "[fabirc]\ntransport = soft\n",
     "FILE:1: [fabirc]: unknown section; did you mean [fabric]?"},
    {"unknown_section", "[interface]\nmtu = 2044\n\n[routing]\n",
     "FILE:4: [routing]: unknown section; the sections are [fabric], [interface], [multicast], [neighbour], "
     "[queues], [daemon]"},
    {"unknown_key_typo", "[interface]\nmut = 1500\n",
     "FILE:2: [interface] mut = 1500: unknown key; did you mean mtu?"},
    {"key_in_wrong_section", "[interface]\nreachable-time = 30s\n",
     "FILE:2: [interface] reachable-time = 30s: unknown key; reachable-time belongs in [neighbour]"},
    {"unknown_key", "[queues]\ncolour = blue\n",
     "FILE:2: [queues] colour = blue: unknown key; [queues] has send-depth, receive-depth, sa-max-queued, "
     "tun-max-batch, max-connections, connected-receive-buffers"},
    {"key_outside_section", "mtu = 1500\n[interface]\n",
     "FILE:1: mtu = 1500: key outside any section; mtu belongs in [interface]"},
    {"unknown_key_outside_section", "colour = blue\n",
     "FILE:1: colour = blue: key outside any section; keys follow a [section] line"},
    {"semicolon_is_not_a_comment", "[fabric]\n; port = 2\n",
     "FILE:2: [fabric] ; port = 2: unknown key; comments start with '#', not ';'"},
    {"bind_roce_port", "[fabric]\nbind = 198.18.0.2:4791\n",
     "FILE:2: [fabric] bind = 198.18.0.2:4791: port 4791 is RoCEv2's; the soft fabric must not use it"},
    {"missing_key", "[fabric]\n= 2\n", "FILE:2: [fabric] = 2: unknown key; [fabric] has transport, device, port, "
                                        "address, bind, key-file, sm-silence, port-guid, embedded, embedded-listen, "
     "embedded-partitions, pkey"},
    {"repeated_key", "[interface]\nmtu = 1500\nname = ib0\nmtu = 2044\n",
     "FILE:4: [interface] mtu = 2044: mtu is already set on line 2 (only address and route may repeat)"},
    {"repeated_key_in_a_reopened_section", "[daemon]\nwatchdog = no\n[fabric]\nport = 1\n[daemon]\nwatchdog = yes\n",
     "FILE:6: [daemon] watchdog = yes: watchdog is already set on line 2 (only address and route may repeat)"},
    {"syntax_no_equals", "[interface]\nmtu 1500\n",
     "FILE:2: mtu 1500: syntax error: expected [section], key = value or a # comment"},
    {"syntax_unclosed_section", "[fabric]\nport = 1\n[interface\n",
     "FILE:3: [interface: syntax error: expected [section], key = value or a # comment"},
    {"syntax_empty_section", "\n[]\n", "FILE:2: []: syntax error: empty section name"},
    // Boost's own message for the line looped for ever filling its template
    // with a line that holds the placeholder's name.
    {"syntax_boost_placeholder", "[neighbour]\nretrans%invalid_line%\n",
     "FILE:2: retrans%invalid_line%: syntax error: expected [section], key = value or a # comment"},

    // [fabric]
    {"transport_unknown", "[fabric]\ntransport = fast\n",
     "FILE:2: [fabric] transport = fast: must be auto, soft or verbs"},
    {"device_with_space", "[fabric]\ndevice = mlx5 0\n",
     "FILE:2: [fabric] device = mlx5 0: cannot contain '/' or white space"},
    {"port_zero", "[fabric]\nport = 0\n", "FILE:2: [fabric] port = 0: must be between 1 and 254"},
    {"port_negative", "[fabric]\nport = -1\n",
     "FILE:2: [fabric] port = -1: not a whole number; must be between 1 and 254"},
    {"address_name", "[fabric]\naddress = ibfabric:18516\n",
     "FILE:2: [fabric] address = ibfabric:18516: 'ibfabric' is not a numeric IPv4 or IPv6 address "
     "(e.g. 198.18.0.1:18516 or [2001:db8::1]:18516)"},
    {"address_no_port", "[fabric]\naddress = 198.18.0.1\n",
     "FILE:2: [fabric] address = 198.18.0.1: expected ADDRESS:PORT (e.g. 198.18.0.1:18516 or [2001:db8::1]:18516)"},
    {"address_roce_port", "[fabric]\naddress = 198.18.0.1:4791\n",
     "FILE:2: [fabric] address = 198.18.0.1:4791: port 4791 is RoCEv2's; the soft fabric must not use it"},
    {"address_wildcard", "[fabric]\naddress = 0.0.0.0:18516\n",
     "FILE:2: [fabric] address = 0.0.0.0:18516: the wildcard address cannot be sent to; give the fabric's address"},
    {"embedded_listen_port_zero", "[fabric]\nembedded-listen = [::]:0\n",
     "FILE:2: [fabric] embedded-listen = [::]:0: port 0 is not a UDP port to use"},
    {"port_guid_not_hex", "[fabric]\nport-guid = 12345\n",
     "FILE:2: [fabric] port-guid = 12345: must be 0 (derived) or a GUID in hex, e.g. 0x0002c90300a1b2c3"},
    {"port_guid_too_long", "[fabric]\nport-guid = 0x10002c90300a1b2c3\n",
     "FILE:2: [fabric] port-guid = 0x10002c90300a1b2c3: must be 0 (derived) or a GUID in hex, "
     "e.g. 0x0002c90300a1b2c3"},
    {"embedded_not_bool", "[fabric]\nembedded = maybe\n", "FILE:2: [fabric] embedded = maybe: must be yes or no"},
    {"embedded_with_verbs", "[fabric]\ntransport = verbs\nembedded = yes\n",
     "FILE:3: [fabric] embedded = yes: the embedded fabric is soft: it needs transport = soft or auto, not verbs"},
    {"embedded_not_reached", "[fabric]\nembedded = yes\nembedded-listen = 198.18.0.1:18516\n",
     "FILE:2: [fabric] embedded = yes: this daemon's port connects to address = 127.0.0.1:18516, which is not "
     "embedded-listen = 198.18.0.1:18516"},
    {"embedded_partitions_without_embedded", "[fabric]\nembedded-partitions = /etc/ipoibd/partitions.conf\n",
     "FILE:2: [fabric] embedded-partitions = /etc/ipoibd/partitions.conf: partitions for the embedded fabric need "
     "embedded = yes (an ibfabricd takes them with --partitions)"},
    {"pkey_without_0x", "[fabric]\npkey = ffff\n",
     "FILE:2: [fabric] pkey = ffff: must be a hexadecimal P_Key, 0x0001 to 0xffff"},
    {"pkey_too_wide", "[fabric]\npkey = 0x18001\n",
     "FILE:2: [fabric] pkey = 0x18001: must be a hexadecimal P_Key, 0x0001 to 0xffff"},
    {"pkey_invalid", "[fabric]\npkey = 0x8000\n",
     "FILE:2: [fabric] pkey = 0x8000: is the invalid P_Key (its low 15 bits are 0; IBA 10.9.1.2)"},

    // [interface]
    {"name_too_long", "[interface]\nname = ib0.verylongname\n",
     "FILE:2: [interface] name = ib0.verylongname: must be 1 to 15 characters long"},
    {"name_with_slash", "[interface]\nname = ib/0\n",
     "FILE:2: [interface] name = ib/0: cannot contain '/', ':', '%' or white space"},
    // The kernel would take it for a pattern and name the device otherwise.
    {"name_with_percent", "[interface]\nname = ib%d\n",
     "FILE:2: [interface] name = ib%d: cannot contain '/', ':', '%' or white space"},
    {"name_dot_dot", "[interface]\nname = ..\n", "FILE:2: [interface] name = ..: cannot be '.' or '..'"},
    {"mode_unknown", "[interface]\nmode = tunnel\n", "FILE:2: [interface] mode = tunnel: must be tun or tap"},
    {"child_without_pkey", "[child ib0.8001]\naddress = 198.18.1.1/24\n",
     "FILE:1: [child ib0.8001] pkey: is missing: a child needs its partition"},
    {"child_with_the_parents_pkey", "[child ib0.8001]\npkey = 0x7fff\n",
     "FILE:2: [child ib0.8001] pkey = 0x7fff: 0x7fff is the parent's partition ([fabric] pkey = 0xffff)"},
    {"child_pkey_not_a_number", "[child ib0.8001]\npkey = storage\n", 
     "FILE:2: [child ib0.8001] pkey = storage: must be a hexadecimal P_Key, 0x0001 to 0xffff"},
    {"children_share_a_pkey", "[child ib0.8001]\npkey = 0x8001\n[child ib0.9001]\npkey = 0x0001\n",
     "FILE:4: [child ib0.9001] pkey = 0x0001: 0x0001 is already the partition of [child ib0.8001]"},
    {"child_named_twice", "[child ib0.8001]\npkey = 0x8001\n[child ib0.8001]\npkey = 0x8002\n",
     "FILE:3: [child ib0.8001]: a child of this name is already defined on line 1"},
    {"child_named_as_parent", "[child ib0]\npkey = 0x8001\n", "FILE:1: [child ib0] name: is the parent's name ([interface] name)"},
    {"child_name_too_long", "[child ib0.8001.abcdefgh]\npkey = 0x8001\n",
     "FILE:1: [child ib0.8001.abcdefgh]: the name must be 1 to 15 characters long"},
    {"child_unknown_key", "[child ib0.8001]\npkey = 0x8001\nqueue = 3\n",
     "FILE:3: [child ib0.8001] queue = 3: unknown key; a [child] section has pkey, mode, mtu, connected-mode, address, route"},
    {"child_pkey_twice", "[child ib0.8001]\npkey = 0x8001\npkey = 0x8002\n",
     "FILE:3: [child ib0.8001] pkey = 0x8002: pkey is already set on line 2"},
    {"child_with_the_parents_address",
     "[interface]\naddress = 198.18.0.1/24\n[child ib0.8001]\npkey = 0x8001\naddress = 198.18.1.1/24\n"
     "address = 198.18.0.1/16\n",
     "FILE:6: [child ib0.8001] address = 198.18.0.1/16: 198.18.0.1 is already [interface] address = 198.18.0.1/24 "
     "(an address belongs to one interface)"},
    {"children_share_an_address",
     "[child ib0.8001]\npkey = 0x8001\naddress = 2001:db8:1::1/64\n[child ib0.8002]\npkey = 0x8002\n"
     "address = 2001:db8:1::1/128\n",
     "FILE:6: [child ib0.8002] address = 2001:db8:1::1/128: 2001:db8:1::1 is already [child ib0.8001] address = "
     "2001:db8:1::1/64 (an address belongs to one interface)"},
    {"child_bad_address", "[child ib0.8001]\npkey = 0x8001\naddress = 198.18.1.300/24\n",
     "FILE:3: [child ib0.8001] address = 198.18.1.300/24: '198.18.1.300' is not an IPv4 or IPv6 address"},
    {"address_not_parsable", "[interface]\naddress = 198.18.0.300/24\n",
     "FILE:2: [interface] address = 198.18.0.300/24: '198.18.0.300' is not an IPv4 or IPv6 address"},
    {"address_prefix_too_long_v4", "[interface]\naddress = 198.18.0.1/33\n",
     "FILE:2: [interface] address = 198.18.0.1/33: prefix length 33 is longer than 32"},
    {"address_prefix_too_long_v6", "[interface]\naddress = 2001:db8::1/129\n",
     "FILE:2: [interface] address = 2001:db8::1/129: prefix length 129 is longer than 128"},
    {"address_prefix_huge", "[interface]\naddress = 2001:db8::1/99999999999\n",
     "FILE:2: [interface] address = 2001:db8::1/99999999999: prefix length 99999999999 is longer than 128"},
    {"address_prefix_zero", "[interface]\naddress = 198.18.0.1/0\n",
     "FILE:2: [interface] address = 198.18.0.1/0: prefix length 0 is shorter than 1"},
    {"address_prefix_not_a_number", "[interface]\naddress = 198.18.0.1/x\n",
     "FILE:2: [interface] address = 198.18.0.1/x: prefix length 'x' is not a number"},
    {"address_without_prefix", "[interface]\naddress = 198.18.0.1\n",
     "FILE:2: [interface] address = 198.18.0.1: missing prefix length (e.g. 198.18.0.1/24 or 2001:db8::1/64)"},
    {"address_multicast", "[interface]\naddress = ff02::1/64\n",
     "FILE:2: [interface] address = ff02::1/64: a multicast address cannot be an interface address"},
    {"address_unspecified", "[interface]\naddress = 0.0.0.0/8\n",
     "FILE:2: [interface] address = 0.0.0.0/8: the unspecified address cannot be an interface address"},
    {"address_loopback", "[interface]\naddress = ::1/128\n",
     "FILE:2: [interface] address = ::1/128: a loopback address cannot be an interface address"},
    {"address_reserved", "[interface]\naddress = 255.255.255.255/32\n",
     "FILE:2: [interface] address = 255.255.255.255/32: a reserved address (240.0.0.0/4) cannot be an interface "
     "address"},
    {"address_twice", "[interface]\naddress = 198.18.0.1/24\naddress = 2001:db8::1/64\naddress = 198.18.0.1/16\n",
     "FILE:4: [interface] address = 198.18.0.1/16: 198.18.0.1 is already an address of this interface"},
    {"route_syntax", "[interface]\nroute = 198.19.0.0/24 through 198.18.0.2\n",
     "FILE:2: [interface] route = 198.19.0.0/24 through 198.18.0.2: expected PREFIX or PREFIX via GATEWAY"},
    {"route_missing_gateway", "[interface]\nroute = 198.19.0.0/24 via\n",
     "FILE:2: [interface] route = 198.19.0.0/24 via: expected PREFIX or PREFIX via GATEWAY"},
    {"route_host_bits", "[interface]\nroute = 198.19.0.1/24 via 198.18.0.2\n",
     "FILE:2: [interface] route = 198.19.0.1/24 via 198.18.0.2: host bits are set in 198.19.0.1/24 "
     "(the network is 198.19.0.0/24)"},
    {"route_host_bits_v6", "[interface]\nroute = 2001:db8:1::1/64\n",
     "FILE:2: [interface] route = 2001:db8:1::1/64: host bits are set in 2001:db8:1::1/64 "
     "(the network is 2001:db8:1::/64)"},
    {"route_prefix_too_long", "[interface]\nroute = 198.19.0.0/40\n",
     "FILE:2: [interface] route = 198.19.0.0/40: prefix length 40 is longer than 32"},
    {"route_families_differ", "[interface]\nroute = 2001:db8:1::/64 via 198.18.0.2\n",
     "FILE:2: [interface] route = 2001:db8:1::/64 via 198.18.0.2: gateway 198.18.0.2 is IPv4 but the "
     "destination is IPv6"},
    {"route_gateway_not_parsable", "[interface]\nroute = 198.19.0.0/24 via gw1\n",
     "FILE:2: [interface] route = 198.19.0.0/24 via gw1: 'gw1' is not an IPv4 or IPv6 address"},
    {"route_gateway_multicast", "[interface]\nroute = 198.19.0.0/24 via 224.0.0.1\n",
     "FILE:2: [interface] route = 198.19.0.0/24 via 224.0.0.1: gateway 224.0.0.1 is a multicast address"},
    {"route_twice", "[interface]\nroute = 198.19.0.0/24\nroute = 198.19.0.0/24 via 198.18.0.2\n",
     "FILE:3: [interface] route = 198.19.0.0/24 via 198.18.0.2: a route to 198.19.0.0/24 is already configured"},
    // Routes the kernel would refuse at start-up.
    {"route_gateway_off_link", "[interface]\naddress = 198.18.0.1/24\nroute = 198.19.0.0/24 via 198.20.0.1\n",
     "FILE:3: [interface] route = 198.19.0.0/24 via 198.20.0.1: the gateway 198.20.0.1 is not on the link of "
     "[interface]: no address of it, nor an on-link route through it, covers it"},
    {"route_gateway_on_the_parents_link_only",
     "[interface]\naddress = 198.18.0.1/24\n[child ib0.8001]\npkey = 0x8001\nroute = 198.19.0.0/24 via 198.18.0.2\n",
     "FILE:5: [child ib0.8001] route = 198.19.0.0/24 via 198.18.0.2: the gateway 198.18.0.2 is not on the link of "
     "[child ib0.8001]: no address of it, nor an on-link route through it, covers it"},
    {"route_gateway_is_an_own_address",
     "[interface]\naddress = 198.18.0.1/24\nroute = 198.19.0.0/24 via 198.18.0.1\n",
     "FILE:3: [interface] route = 198.19.0.0/24 via 198.18.0.1: the gateway 198.18.0.1 is [interface] address = "
     "198.18.0.1/24: a route through this daemon's own address leads nowhere"},
    {"route_v6_gateway_is_a_childs_address",
     "[interface]\naddress = 2001:db8::1/64\nroute = 2001:db8:9::/64 via 2001:db8::2\n"
     "[child ib0.8001]\npkey = 0x8001\naddress = 2001:db8::2/128\n",
     "FILE:3: [interface] route = 2001:db8:9::/64 via 2001:db8::2: the gateway 2001:db8::2 is [child ib0.8001] "
     "address = 2001:db8::2/128: a route through this daemon's own address leads nowhere"},
    {"route_gateway_is_the_broadcast_address",
     "[interface]\naddress = 198.18.0.1/24\nroute = 198.19.0.0/24 via 198.18.0.255\n",
     "FILE:3: [interface] route = 198.19.0.0/24 via 198.18.0.255: the gateway 198.18.0.255 is the broadcast "
     "address of [interface] address = 198.18.0.1/24"},
    {"route_v6_gateway_off_link", "[interface]\naddress = 2001:db8::1/64\nroute = 2001:db8:9::/64 via 2001:db8:5::1\n",
     "FILE:3: [interface] route = 2001:db8:9::/64 via 2001:db8:5::1: the gateway 2001:db8:5::1 is not on the link of "
     "[interface]: no address of it, nor an on-link route through it, covers it"},
    {"route_to_an_address_prefix", "[interface]\naddress = 198.18.1.1/24\nroute = 198.18.1.0/24 via 198.18.1.2\n",
     "FILE:3: [interface] route = 198.18.1.0/24 via 198.18.1.2: the kernel already routes 198.18.1.0/24 with "
     "[interface] address = 198.18.1.1/24"},
    {"route_to_a_childs_address_prefix",
     "[interface]\nroute = 198.18.1.0/24\n[child ib0.8001]\npkey = 0x8001\naddress = 198.18.1.1/24\n",
     "FILE:2: [interface] route = 198.18.1.0/24: the kernel already routes 198.18.1.0/24 with "
     "[child ib0.8001] address = 198.18.1.1/24"},
    {"route_in_parent_and_child",
     "[interface]\nroute = 198.19.0.0/24\n[child ib0.8001]\npkey = 0x8001\naddress = 198.18.1.1/24\n"
     "route = 2001:db8:9::/64\nroute = 198.19.0.0/24 via 198.18.1.2\n",
     "FILE:7: [child ib0.8001] route = 198.19.0.0/24 via 198.18.1.2: a route to 198.19.0.0/24 is already configured "
     "in [interface]"},
    {"route_v6_in_two_children",
     "[child ib0.8001]\npkey = 0x8001\nroute = 2001:db8:9::/64\n[child ib0.8002]\npkey = 0x8002\n"
     "route = 2001:db8:9::/64\n",
     "FILE:6: [child ib0.8002] route = 2001:db8:9::/64: a route to 2001:db8:9::/64 is already configured in "
     "[child ib0.8001]"},

    // [multicast]
    {"send_only_join_unknown", "[multicast]\nsend-only-join = full\n",
     "FILE:2: [multicast] send-only-join = full: must be send-only-full-member, send-only-non-member or non-member"},
    {"scope_unknown", "[multicast]\nscope = local\n",
     "FILE:2: [multicast] scope = local: must be link-local, site-local, organization-local or global"},
    {"max_groups_too_small", "[multicast]\nmax-groups = 0\n",
     "FILE:2: [multicast] max-groups = 0: must be between 16 and 65536"},

    // [neighbour]
    // 2^61 + 30 seconds: times 1000 wraps to 30 s.
    {"duration_wraps", "[neighbour]\nreachable-time = 2305843009213693982s\n",
     "FILE:2: [neighbour] reachable-time = 2305843009213693982s: '2305843009213693982s' is longer than a year"},
    {"duration_hours_wrap", "[daemon]\nbusy-poll = 5124095576030432h\n",
     "FILE:2: [daemon] busy-poll = 5124095576030432h: '5124095576030432h' is longer than a year"},
    {"duration_not_a_duration", "[neighbour]\nreachable-time = soon\n",
     "FILE:2: [neighbour] reachable-time = soon: 'soon' is not a duration (e.g. 250ms, 1s, 2m)"},
    {"duration_unknown_unit", "[neighbour]\ngc-stale-time = 2d\n",
     "FILE:2: [neighbour] gc-stale-time = 2d: unknown unit 'd' in '2d' (ms, s, m, h)"},
    {"duration_too_short", "[neighbour]\nretrans-time = 10ms\n",
     "FILE:2: [neighbour] retrans-time = 10ms: must be between 100ms and 60s"},
    {"duration_too_long", "[neighbour]\ndelay-first-probe-time = 2h\n",
     "FILE:2: [neighbour] delay-first-probe-time = 2h: must be between 100ms and 1h"},
    {"solicits_zero", "[neighbour]\nmulticast-solicits = 0\n",
     "FILE:2: [neighbour] multicast-solicits = 0: must be between 1 and 32"},
    {"probes_too_many", "[neighbour]\nunicast-probes = 33\n",
     "FILE:2: [neighbour] unicast-probes = 33: must be between 1 and 32"},
    {"max_entries_huge", "[neighbour]\nmax-entries = 18446744073709551616\n",
     "FILE:2: [neighbour] max-entries = 18446744073709551616: must be between 16 and 1000000"},
    {"path_max_entries_word", "[neighbour]\npath-max-entries = many\n",
     "FILE:2: [neighbour] path-max-entries = many: not a whole number; must be between 16 and 1000000"},

    // [queues]
    {"send_depth_small", "[queues]\nsend-depth = 1\n", "FILE:2: [queues] send-depth = 1: must be between 16 and 16384"},
    {"receive_depth_hex", "[queues]\nreceive-depth = 0x100\n",
     "FILE:2: [queues] receive-depth = 0x100: not a whole number; must be between 16 and 16384"},
    {"sa_max_queued_large", "[queues]\nsa-max-queued = 100000\n",
     "FILE:2: [queues] sa-max-queued = 100000: must be between 16 and 65536"},
    {"tun_max_batch_zero", "[queues]\ntun-max-batch = 0\n",
     "FILE:2: [queues] tun-max-batch = 0: must be between 1 and 1024"},

    // [daemon]
    {"log_level_unknown", "[daemon]\nlog-level = verbose\n",
     "FILE:2: [daemon] log-level = verbose: must be debug, info, notice, warning or error"},
    {"control_socket_relative", "[daemon]\ncontrol-socket = ipoibd.sock\n",
     "FILE:2: [daemon] control-socket = ipoibd.sock: must be an absolute path"},
    {"control_socket_too_long", "[daemon]\ncontrol-socket = /run/ipoibd/"
                                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
     "FILE:2: [daemon] control-socket = /run/ipoibd/"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: "
     "is longer than 107 bytes"},
    {"capture_relative", "[daemon]\ncapture = ib0.pcap\n",
     "FILE:2: [daemon] capture = ib0.pcap: must be an absolute path"},
    {"watchdog_not_bool", "[daemon]\nwatchdog = 1\n", "FILE:2: [daemon] watchdog = 1: must be yes or no"},
    {"busy_poll_too_long", "[daemon]\nbusy-poll = 2s\n", "FILE:2: [daemon] busy-poll = 2s: must be between 0s and 1s"},

    // Text only: the bytes never reach the message.
    {"control_character", "[interface]\nname = ib\x01x\n",
     "FILE:2: control character 0x01 at column 10 (ipoibd.conf is UTF-8 text)"},
    {"escape_in_a_comment", "# \x1b[2J\n[interface]\n", "FILE:1: control character 0x1b at column 3 (ipoibd.conf is UTF-8 text)"},
    {"not_utf8", "[interface]\naddress = 198.18.0.1/24\xff\n",
     "FILE:2: byte 0xff at column 24 is not UTF-8 (ipoibd.conf is UTF-8 text)"},
    {"c1_control", "[interface]\nname = a\xc2\x9b\n",
     "FILE:2: control character U+009B at column 9 (ipoibd.conf is UTF-8 text)"},
    {"carriage_return_inside_a_line", "[interface]\nname = a\rb\n",
     "FILE:2: control character 0x0d at column 9 (ipoibd.conf is UTF-8 text)"},
};

class BadFileTest : public testing::TestWithParam<BadFile> {};

// A NUL cut the message that quoted its line ("FILE:2: [interface] address
// = 198.18.0.1/24" and no reason); CRLF line ends, tabs and UTF-8 are text,
// and a byte order mark is skipped.
TEST(ConfigText, ANulIsNamedAndTextIsTaken) {
    TempDir dir;
    auto nul = load_text(dir, std::string("[interface]\naddress = 198.18.0.1/24\0junk\n", 40));
    ASSERT_FALSE(nul.has_value());
    EXPECT_EQ(nul.error().message,
              dir.path() + "/ib0.conf:2: control character 0x00 at column 24 (ipoibd.conf is UTF-8 text)");
    auto text = load_text(dir, "\xef\xbb\xbf# caf\xc3\xa9\r\n[interface]\r\naddress =\t198.18.0.1/24\r\n");
    ASSERT_TRUE(text.has_value()) << text.error().message;
    EXPECT_EQ(format_prefix(text->interface.addresses.at(0)), "198.18.0.1/24");
}

TEST(ConfigText, EscapeTextWritesWhatIsNotTextAsHex) {
    EXPECT_EQ(escape_text("ib0"), "ib0");
    EXPECT_EQ(escape_text("caf\xc3\xa9"), "caf\xc3\xa9");
    EXPECT_EQ(escape_text(std::string("a\0b\x1b[m\xff\xc2\x9b", 9)), "a\\x00b\\x1b[m\\xff\\xc2\\x9b");
    EXPECT_EQ(escape_text("\xe2\x82"), "\\xe2\\x82");  // a cut sequence
    // C1 ends at U+009F; U+00A0 (no-break space) is text.
    EXPECT_EQ(escape_text("\xc2\x80\xc2\x9f\xc2\xa0"), "\\xc2\\x80\\xc2\\x9f\xc2\xa0");
    EXPECT_EQ(text_problem("a\xc2\x9f").value_or(""), "control character U+009F at column 2");
    EXPECT_FALSE(text_problem("a\xc2\xa0").has_value());
    EXPECT_FALSE(starts_with_c1_control("\xc2"));
    EXPECT_FALSE(starts_with_c1_control("\xc2\x7f"));
}

TEST_P(BadFileTest, FailsNamingFileLineKeyAndValue) {
    TempDir dir;
    const std::string file = dir.path() + "/ib0.conf";
    auto config = load_text(dir, GetParam().text);
    ASSERT_FALSE(config.has_value());
    EXPECT_EQ(config.error().message, replace_all(GetParam().error, "FILE", file));
}

INSTANTIATE_TEST_SUITE_P(Config, BadFileTest, testing::ValuesIn(kBadFiles),
                         [](const testing::TestParamInfo<BadFile>& param) { return std::string(param.param.name); });

// ---------------------------------------------------------------------------
// Defaults and good files.

TEST(ConfigDefaults, EveryKey) {
    const DaemonConfig c = default_config("ib0");
    EXPECT_EQ(c.fabric.transport, Transport::automatic);
    EXPECT_EQ(c.fabric.device, "");
    EXPECT_EQ(c.fabric.port, 1u);
    EXPECT_EQ(c.fabric.address.to_string(), "127.0.0.1:18516");
    EXPECT_FALSE(c.fabric.bind);
    EXPECT_EQ(c.fabric.key_file, "");
    EXPECT_EQ(c.fabric.sm_silence, 35s);
    EXPECT_EQ(c.fabric.port_guid, 0u);
    EXPECT_FALSE(c.fabric.embedded);
    EXPECT_EQ(c.fabric.embedded_listen.to_string(), "0.0.0.0:18516");
    EXPECT_EQ(c.fabric.pkey, 0xffff);
    EXPECT_EQ(c.interface.name, "ib0");
    EXPECT_EQ(c.interface.mode, InterfaceMode::tun);
    EXPECT_EQ(c.interface.mtu, 0u);
    EXPECT_TRUE(c.interface.addresses.empty());
    EXPECT_TRUE(c.interface.routes.empty());
    EXPECT_EQ(c.multicast.send_only_join, SendOnlyJoin::send_only_full_member);
    EXPECT_EQ(c.multicast.scope, MulticastScope::link_local);
    EXPECT_EQ(c.multicast.max_groups, 1024u);
    EXPECT_EQ(c.neighbour.reachable_time, 30s);
    EXPECT_EQ(c.neighbour.retrans_time, 1s);
    EXPECT_EQ(c.neighbour.delay_first_probe_time, 5s);
    EXPECT_EQ(c.neighbour.gc_stale_time, 60s);
    EXPECT_EQ(c.neighbour.multicast_solicits, 3u);
    EXPECT_EQ(c.neighbour.unicast_probes, 3u);
    EXPECT_EQ(c.neighbour.max_entries, 10'000u);
    EXPECT_EQ(c.neighbour.path_max_entries, 10'000u);
    EXPECT_EQ(c.queues.send_depth, 256u);
    EXPECT_EQ(c.queues.receive_depth, 256u);
    EXPECT_EQ(c.queues.sa_max_queued, 1024u);
    EXPECT_EQ(c.queues.tun_max_batch, 64u);
    EXPECT_EQ(c.daemon.log_level, LogLevel::info);
    EXPECT_EQ(c.daemon.control_socket, "/run/ipoibd/ib0.sock");
    EXPECT_EQ(c.daemon.capture, "");
    EXPECT_TRUE(c.daemon.watchdog);
}

TEST(ConfigDefaults, InstanceNamesInterfaceAndSocket) {
    const DaemonConfig c = default_config("ib1.8001");
    EXPECT_EQ(c.interface.name, "ib1.8001");
    EXPECT_EQ(c.daemon.control_socket, "/run/ipoibd/ib1.8001.sock");
}

TEST(ConfigDefaults, EmptyFileAndCommentsOnlyAreTheDefaults) {
    EXPECT_EQ(*parse_config("", "ib0.conf", "ib0"), default_config("ib0"));
    EXPECT_EQ(*parse_config("# nothing\n\n[fabric]\n[daemon]   # also nothing\n", "ib0.conf", "ib0"),
              default_config("ib0"));
}

TEST(ConfigDefaults, ParsesEveryKey) {
    const char* text = R"([fabric]
transport = soft
device = mlx5_1
port = 2
address = [2001:db8::fab]:18600
port-guid = 0x0002c90300a1b2c3
embedded = yes
embedded-listen = [::]:18600
pkey = 0x8001

[interface]
name = ib0.8001
mode = tun
mtu = 2044
address = 198.18.0.1/24
address = 2001:db8::1/64
route = 198.19.0.0/24 via 198.18.0.2
route = 2001:db8:1::/64 via 2001:db8::2
route = 198.18.128.0/17

[multicast]
send-only-join = non-member
scope = site-local
max-groups = 64

[neighbour]
reachable-time = 15s
retrans-time = 500ms
delay-first-probe-time = 2s
gc-stale-time = 2m
multicast-solicits = 5
unicast-probes = 4
max-entries = 512
path-max-entries = 256

[queues]
send-depth = 1024
receive-depth = 2048
sa-max-queued = 64
tun-max-batch = 32

[daemon]
log-level = debug
control-socket = /run/ipoibd/test.sock
capture = /var/tmp/ib0.pcap
watchdog = no
busy-poll = 20ms
)";
    auto parsed = parse_config(text, "ib0.conf", "ib0");
    ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
    const DaemonConfig& c = *parsed;
    EXPECT_EQ(c.fabric.transport, Transport::soft);
    EXPECT_EQ(c.fabric.device, "mlx5_1");
    EXPECT_EQ(c.fabric.port, 2u);
    EXPECT_EQ(c.fabric.address.to_string(), "[2001:db8::fab]:18600");
    EXPECT_EQ(c.fabric.port_guid, 0x0002c90300a1b2c3u);
    EXPECT_TRUE(c.fabric.embedded);
    EXPECT_EQ(c.fabric.embedded_listen.to_string(), "[::]:18600");
    EXPECT_EQ(c.fabric.pkey, 0x8001);
    EXPECT_EQ(c.interface.name, "ib0.8001");
    EXPECT_EQ(c.interface.mtu, 2044u);
    ASSERT_EQ(c.interface.addresses.size(), 2u);
    EXPECT_EQ(c.interface.addresses[0], (IpPrefix{IpAddress::v4({198, 18, 0, 1}), 24}));
    EXPECT_EQ(format_prefix(c.interface.addresses[1]), "2001:db8::1/64");
    ASSERT_EQ(c.interface.routes.size(), 3u);
    EXPECT_EQ(c.interface.routes[0].destination, (IpPrefix{IpAddress::v4({198, 19, 0, 0}), 24}));
    EXPECT_EQ(c.interface.routes[0].gateway, IpAddress::v4({198, 18, 0, 2}));
    EXPECT_EQ(format_route(c.interface.routes[1]), "2001:db8:1::/64 via 2001:db8::2");
    EXPECT_FALSE(c.interface.routes[2].gateway.has_value());
    EXPECT_EQ(c.multicast.send_only_join, SendOnlyJoin::non_member);
    EXPECT_EQ(c.multicast.scope, MulticastScope::site_local);
    EXPECT_EQ(c.multicast.max_groups, 64u);
    EXPECT_EQ(c.neighbour.reachable_time, 15s);
    EXPECT_EQ(c.neighbour.retrans_time, 500ms);
    EXPECT_EQ(c.neighbour.delay_first_probe_time, 2s);
    EXPECT_EQ(c.neighbour.gc_stale_time, 2min);
    EXPECT_EQ(c.neighbour.multicast_solicits, 5u);
    EXPECT_EQ(c.neighbour.unicast_probes, 4u);
    EXPECT_EQ(c.neighbour.max_entries, 512u);
    EXPECT_EQ(c.neighbour.path_max_entries, 256u);
    EXPECT_EQ(c.queues.send_depth, 1024u);
    EXPECT_EQ(c.queues.receive_depth, 2048u);
    EXPECT_EQ(c.queues.sa_max_queued, 64u);
    EXPECT_EQ(c.queues.tun_max_batch, 32u);
    EXPECT_EQ(c.daemon.log_level, LogLevel::debug);
    EXPECT_EQ(c.daemon.control_socket, "/run/ipoibd/test.sock");
    EXPECT_EQ(c.daemon.capture, "/var/tmp/ib0.pcap");
    EXPECT_FALSE(c.daemon.watchdog);
    EXPECT_EQ(c.daemon.busy_poll, 20ms);
}

TEST(ConfigDefaults, WordsAndBooleansAccepted) {
    auto c = parse_config("[fabric]\ntransport = verbs\nembedded = off\n[daemon]\nwatchdog = true\n"
                          "[multicast]\nsend-only-join = send-only-non-member\nscope = global\n",
                          "f", "ib0");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->fabric.transport, Transport::verbs);
    EXPECT_FALSE(c->fabric.embedded);
    EXPECT_TRUE(c->daemon.watchdog);
    EXPECT_EQ(c->multicast.send_only_join, SendOnlyJoin::send_only_non_member);
    EXPECT_EQ(c->multicast.scope, MulticastScope::global);
}

TEST(ConfigDefaults, EmbeddedDefaultsReachEachOther) {
    auto c = parse_config("[fabric]\nembedded = yes\n", "f", "ib0");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_TRUE(c->fabric.embedded);
    auto pinned = parse_config("[fabric]\nembedded = yes\nembedded-listen = 198.18.0.1:18516\n"
                               "address = 198.18.0.1:18516\n",
                               "f", "ib0");
    EXPECT_TRUE(pinned.has_value()) << pinned.error().message;
}

TEST(ConfigDefaults, BindTakesAnAddressOrAny) {
    auto c = parse_config("[fabric]\nbind = 198.18.0.2:40000\n", "f", "ib0");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    ASSERT_TRUE(c->fabric.bind);
    EXPECT_EQ(c->fabric.bind->to_string(), "198.18.0.2:40000");
    c = parse_config("[fabric]\nbind = any\n", "f", "ib0");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_FALSE(c->fabric.bind);
}

TEST(ConfigDefaults, BadInstanceIsRefused) {
    auto c = parse_config("", "f", "a/b");
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.error().message, "instance 'a/b': an instance name cannot contain '/', ':', '%' or white space");
}

// ---------------------------------------------------------------------------
// The command line.

TEST(ConfigCommandLine, DaemonOptions) {
    auto line = command_line({"-i", "ib1", "-c", "/tmp/x.conf", "--check-config", "-f", "--version", "-h"});
    ASSERT_TRUE(line.has_value()) << line.error().message;
    EXPECT_EQ(line->instance, "ib1");
    EXPECT_EQ(line->config_file, "/tmp/x.conf");
    EXPECT_TRUE(line->check_config);
    EXPECT_TRUE(line->foreground);
    EXPECT_TRUE(line->version);
    EXPECT_TRUE(line->help);
    EXPECT_TRUE(line->overrides.empty());

    auto plain = command_line({});
    ASSERT_TRUE(plain.has_value());
    EXPECT_EQ(plain->instance, "ib0");
    EXPECT_EQ(plain->config_file, "");
    EXPECT_FALSE(plain->check_config || plain->foreground || plain->help || plain->version);

    auto positional = command_line({"ib2"});
    ASSERT_TRUE(positional.has_value());
    EXPECT_EQ(positional->instance, "ib2");
}

TEST(ConfigCommandLine, OverridesTheFile) {
    TempDir dir;
    auto c = load_text(dir, "[interface]\nmtu = 1500\n[daemon]\nlog-level = warning\n[fabric]\ntransport = verbs\n",
                       {"--interface.mtu=2044", "-l", "debug", "-tsoft", "--neighbour.reachable-time", "10s"});
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->interface.mtu, 2044u);
    EXPECT_EQ(c->daemon.log_level, LogLevel::debug);
    EXPECT_EQ(c->fabric.transport, Transport::soft);
    EXPECT_EQ(c->neighbour.reachable_time, 10s);
}

TEST(ConfigCommandLine, ListReplacesTheFilesList) {
    TempDir dir;
    const char* file = "[interface]\naddress = 198.18.0.1/24\naddress = 2001:db8::1/64\nroute = 198.19.0.0/24\n";
    auto one = load_text(dir, file, {"--interface.address=198.18.5.5/16"});
    ASSERT_TRUE(one.has_value()) << one.error().message;
    ASSERT_EQ(one->interface.addresses.size(), 1u);
    EXPECT_EQ(format_prefix(one->interface.addresses[0]), "198.18.5.5/16");
    EXPECT_EQ(one->interface.routes.size(), 1u);  // untouched

    auto two = load_text(dir, file, {"--interface.address", "198.18.5.5/16", "--interface.address=2001:db8:5::5/48"});
    ASSERT_TRUE(two.has_value()) << two.error().message;
    ASSERT_EQ(two->interface.addresses.size(), 2u);
    EXPECT_EQ(format_prefix(two->interface.addresses[1]), "2001:db8:5::5/48");
}

struct BadCommandLine {
    const char* name;
    std::vector<const char*> args;
    const char* error;
};

const BadCommandLine kBadCommandLines[] = {
    {"value_out_of_range", {"--interface.mtu=70000"},
     "command line: --interface.mtu=70000: must be between 576 and 65520, or 0 for the broadcast group's"},
    {"value_as_next_argument", {"--interface.mtu", "70000"},
     "command line: --interface.mtu 70000: must be between 576 and 65520, or 0 for the broadcast group's"},
    {"short_form", {"-l", "loud"}, "command line: -l loud: must be debug, info, notice, warning or error"},
    {"unknown_option_typo", {"--interface.mut=1500"},
     "command line: --interface.mut=1500: unknown option; did you mean --interface.mtu?"},
    {"no_abbreviations", {"--interface.mt=1500"},
     "command line: --interface.mt=1500: unknown option; did you mean --interface.mtu?"},
    {"unknown_short_option", {"-x"}, "command line: -x: unknown option"},
    {"given_twice", {"--interface.mtu=1500", "--interface.mtu=2044"},
     "command line: --interface.mtu=2044: --interface.mtu is given twice"},
    {"missing_value", {"--interface.mtu"},
     "command line: the required argument for option '--interface.mtu' is missing"},
    {"value_file_cannot_hold", {"--daemon.capture=/tmp/a#b"},
     "command line: --daemon.capture=/tmp/a#b: ipoibd.conf could not hold this value ('#', a line break, or "
     "white space at an end)"},
    {"instance_with_slash", {"-i", "../etc"},
     "command line: -i ../etc: an instance name cannot contain '/', ':', '%' or white space"},
    {"instance_twice", {"-i", "ib0", "ib1"}, "command line: ib1: the instance is given twice"},
    {"instance_with_a_control_character", {"i\x01" "b"},
     "command line: i\\x01b: an instance name cannot contain a control character 0x01 at column 2"},
    {"value_with_an_escape", {"--interface.name=a\x1b[31m"},
     "command line: --interface.name=a\\x1b[31m: the value has a control character 0x1b at column 2"},
    {"value_not_utf8", {"--daemon.capture=/tmp/\xff"},
     "command line: --daemon.capture=/tmp/\\xff: the value has a byte 0xff at column 6 is not UTF-8"},
    {"two_instances", {"ib0", "ib1"}, "command line: one instance name at most (options start with -)"},
    {"config_twice", {"--config=/b"}, "command line: --config=/b: --config is given twice"},
    {"cross_check_blames_command_line", {"--fabric.embedded=yes", "-t", "verbs"},
     "command line: --fabric.embedded=yes: the embedded fabric is soft: it needs transport = soft or auto, "
     "not verbs"},
    {"route_to_an_address_prefix", {"--interface.address=198.18.0.1/24", "--interface.route=198.18.0.0/24"},
     "command line: --interface.route=198.18.0.0/24: the kernel already routes 198.18.0.0/24 with [interface] "
     "address = 198.18.0.1/24"},
};

class BadCommandLineTest : public testing::TestWithParam<BadCommandLine> {};

TEST_P(BadCommandLineTest, FailsNamingTheArgument) {
    TempDir dir;
    auto config = load_text(dir, "[interface]\nmtu = 1500\n", GetParam().args);
    ASSERT_FALSE(config.has_value());
    EXPECT_EQ(config.error().message, GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(Config, BadCommandLineTest, testing::ValuesIn(kBadCommandLines),
                         [](const testing::TestParamInfo<BadCommandLine>& param) {
                             return std::string(param.param.name);
                         });

TEST(ConfigCommandLine, HelpListsEveryKey) {
    const std::string help = command_line_help();
    for (const KeySpec& key : config_keys()) EXPECT_NE(help.find("--" + key.full_name()), std::string::npos) << key.full_name();
    EXPECT_NE(help.find("-c [ --config ] FILE"), std::string::npos) << help;
}

// ---------------------------------------------------------------------------
// Which file is read.

TEST(ConfigFile, DefaultPathFromInstance) {
    EXPECT_EQ(default_config_path("ib0"), "/etc/ipoibd/ib0.conf");
    TempDir dir;
    dir.write("ib7.conf", "[interface]\nmtu = 2044\n");
    auto line = command_line({"-i", "ib7"});
    ASSERT_TRUE(line.has_value());
    auto c = load_config(*line, dir.path());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->interface.mtu, 2044u);
    EXPECT_EQ(c->interface.name, "ib7");
}

TEST(ConfigFile, NamedFileMustExist) {
    TempDir dir;
    const std::string missing = dir.path() + "/nope.conf";
    auto line = command_line({"-c", missing.c_str(), "--interface.mtu=2044"});
    ASSERT_TRUE(line.has_value());
    auto c = load_config(*line, dir.path());
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.error().message, missing + ": cannot read: No such file or directory");
}

TEST(ConfigFile, DefaultFileMayBeAbsentWhenTheCommandLineConfigures) {
    TempDir dir;
    auto bare = command_line({"-i", "ib3"});
    ASSERT_TRUE(bare.has_value());
    auto refused = load_config(*bare, dir.path());
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().message,
              dir.path() + "/ib3.conf: cannot read: No such file or directory (write it, name another with -c FILE, "
                           "or set keys with --SECTION.KEY=VALUE)");

    auto configured = command_line({"-i", "ib3", "--fabric.transport=soft"});
    ASSERT_TRUE(configured.has_value());
    auto c = load_config(*configured, dir.path());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    DaemonConfig expected_config = default_config("ib3");
    expected_config.fabric.transport = Transport::soft;
    EXPECT_EQ(*c, expected_config);
}

TEST(ConfigFile, DirectoryIsNotAFile) {
    TempDir dir;
    auto line = command_line({"-c", dir.path().c_str()});
    ASSERT_TRUE(line.has_value());
    auto c = load_config(*line, dir.path());
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.error().message, dir.path() + ": cannot read: Is a directory");
}

// ---------------------------------------------------------------------------
// describe() and reloads.

DaemonConfig everything_changed() {
    DaemonConfig c = default_config("ib0");
    c.fabric.transport = Transport::soft;
    c.fabric.device = "mlx4_0";
    c.fabric.port = 2;
    c.fabric.address = *parse_fabric_address("[2001:db8::fab]:18600", false);
    c.fabric.port_guid = 0x0002c90300a1b2c3;
    c.fabric.embedded = true;
    c.fabric.embedded_listen = *parse_fabric_address("[::]:18600", true);
    c.fabric.pkey = 0x8001;
    c.fabric.bind = *parse_socket_address("198.18.0.9:40000");
    c.fabric.key_file = "/etc/ipoibd/fabric.key";
    c.fabric.sm_silence = 90s;
    c.interface.name = "ib0.8001";
    c.interface.mtu = 2044;
    c.interface.addresses = {*parse_interface_address("198.18.0.1/24"), *parse_interface_address("2001:db8::1/64")};
    c.interface.routes = {*parse_route("198.19.0.0/24 via 198.18.0.2"), *parse_route("2001:db8:1::/64"),
                          *parse_route("::/0 via fe80::1")};
    c.multicast.send_only_join = SendOnlyJoin::send_only_non_member;
    c.multicast.scope = MulticastScope::organization_local;
    c.multicast.max_groups = 100;
    c.neighbour = {.reachable_time = 45s, .retrans_time = 250ms, .delay_first_probe_time = 3s,
                   .gc_stale_time = 1h, .multicast_solicits = 6, .unicast_probes = 2,
                   .max_entries = 20'000, .path_max_entries = 300};
    c.interface.connected_mode = true;
    c.interface.connected_idle = std::chrono::seconds(120);
    c.queues = {.send_depth = 512,
                .receive_depth = 1024,
                .sa_max_queued = 4096,
                .tun_max_batch = 16,
                .max_connections = 64,
                .connected_receive_buffers = 2048};
    c.daemon = {.log_level = LogLevel::warning, .control_socket = "/run/ipoibd-test.sock",
                .capture = "/var/log/ipoibd/ib0 capture.pcap", .watchdog = false, .busy_poll = 5ms,
                .metrics_listen = *parse_socket_address("127.0.0.1:9464"),
                .metrics_file = "/var/lib/node_exporter/ipoibd-ib0.prom"};
    return c;
}

TEST(ConfigDescribe, RoundTripsDefaults) {
    const DaemonConfig defaults = default_config("ib0");
    const std::string text = describe(defaults);
    auto again = parse_config(text, "described", "ib0");
    ASSERT_TRUE(again.has_value()) << again.error().message << "\n" << text;
    EXPECT_EQ(*again, defaults);
}

TEST(ConfigDescribe, RoundTripsEveryKeyChanged) {
    const DaemonConfig config = everything_changed();
    ASSERT_TRUE(config.daemon.control_socket != default_config("ib0").daemon.control_socket);
    const std::string text = describe(config);
    auto again = parse_config(text, "described", "ib0");
    ASSERT_TRUE(again.has_value()) << again.error().message << "\n" << text;
    EXPECT_EQ(*again, config) << text;
    // A different instance does not leak its own defaults in: every key is written.
    auto elsewhere = parse_config(text, "described", "ib9");
    ASSERT_TRUE(elsewhere.has_value());
    EXPECT_EQ(*elsewhere, config);
}

TEST(ConfigDescribe, WritesEveryKeyUnderItsSection) {
    const std::string text = describe(default_config("ib0"));
    for (const KeySpec& key : config_keys()) {
        const auto section = text.find("\n[" + std::string(key.section) + "]\n");
        ASSERT_NE(section, std::string::npos) << key.section;
        const auto next = text.find("\n[", section + 1);
        const std::string body = text.substr(section, next - section);
        const std::string line = (key.repeatable ? "\n#" : "\n") + std::string(key.name) + " =";
        EXPECT_NE(body.find(line), std::string::npos) << key.full_name() << "\n" << text;
    }
    EXPECT_NE(text.find("\nmtu = 0\n"), std::string::npos);
    EXPECT_NE(text.find("\ndevice =\n"), std::string::npos);
    EXPECT_NE(text.find("\nreachable-time = 30s\n"), std::string::npos);
    EXPECT_NE(text.find("\npkey = 0xffff\n"), std::string::npos);
}

TEST(ConfigChildren, ParseDescribeAndRoundTrip) {
    TempDir dir;
    auto c = load_text(dir,
                       "[interface]\naddress = 198.18.0.1/24\n"
                       "[child ib0.8001]\npkey = 0x8001\naddress = 198.18.1.1/24\naddress = 2001:db8:1::1/64\n"
                       "route = 198.19.1.0/24 via 198.18.1.2\n"
                       "[child ib0.0002]\npkey = 0x0002\nmode = tap\nmtu = 2044\nconnected-mode = yes\n");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    ASSERT_EQ(c->children.size(), 2u);
    const ChildSection& a = c->children[0];
    EXPECT_EQ(a.name, "ib0.8001");
    EXPECT_EQ(a.pkey, 0x8001);
    EXPECT_EQ(a.mode, InterfaceMode::tun);
    ASSERT_EQ(a.addresses.size(), 2u);
    EXPECT_EQ(format_prefix(a.addresses[1]), "2001:db8:1::1/64");
    ASSERT_EQ(a.routes.size(), 1u);
    const ChildSection& b = c->children[1];
    EXPECT_EQ(b.pkey, 0x0002);
    EXPECT_EQ(b.mode, InterfaceMode::tap);
    EXPECT_EQ(b.mtu, 2044u);
    EXPECT_TRUE(b.connected_mode);
    const std::string text = describe(*c);
    EXPECT_NE(text.find("\n[child ib0.8001]\npkey = 0x8001\n"), std::string::npos) << text;
    auto again = parse_config(text, "described", "ib0");
    ASSERT_TRUE(again.has_value()) << again.error().message << "\n" << text;
    EXPECT_EQ(*again, *c);
}

TEST(ConfigChildren, ATapParentsChildrenAreTapUnlessTheySay) {
    TempDir dir;
    auto c = load_text(dir, "[child ib0.8001]\npkey = 0x8001\n[child ib0.8002]\npkey = 0x8002\nmode = tun\n"
                            "[interface]\nmode = tap\n");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->children.at(0).mode, InterfaceMode::tap);  // the parent's, wherever the file sets it
    EXPECT_EQ(c->children.at(1).mode, InterfaceMode::tun);
    auto d = load_text(dir, "[child ib0.8001]\npkey = 0x8001\n", {"--interface.mode=tap"});
    ASSERT_TRUE(d.has_value()) << d.error().message;
    EXPECT_EQ(d->children.at(0).mode, InterfaceMode::tap);
}

// [interface] mode is "Reload: restart": a child without a mode line of its
// own follows it then too, not at the reload; its own mode line is live.
TEST(ConfigChildren, AChildThatTakesTheParentsModeChangesWithItAtARestart) {
    TempDir dir;
    const std::string children = "[child ib0.8001]\npkey = 0x8001\n[child ib0.8002]\npkey = 0x8002\nmode = tun\n";
    auto running = load_text(dir, children);
    ASSERT_TRUE(running.has_value()) << running.error().message;
    auto reloaded = load_text(dir, "[interface]\nmode = tap\n" + children);
    ASSERT_TRUE(reloaded.has_value()) << reloaded.error().message;
    ASSERT_EQ(reloaded->children.at(0).mode, InterfaceMode::tap);  // at the next start
    const auto plan = diff_for_reload(*running, *reloaded);
    EXPECT_TRUE(plan.live.empty()) << plan.live.front();
    EXPECT_EQ(plan.restart, std::vector<std::string>{"interface.mode"});
    const DaemonConfig applied = apply_live(*running, *reloaded);
    EXPECT_EQ(applied.interface.mode, InterfaceMode::tun);
    EXPECT_EQ(applied.children.at(0).mode, InterfaceMode::tun);

    auto own_line = load_text(dir, replace_all(children, "0x8001\n", "0x8001\nmode = tap\n"));
    ASSERT_TRUE(own_line.has_value()) << own_line.error().message;
    EXPECT_EQ(diff_for_reload(*running, *own_line).live, std::vector<std::string>{"child ib0.8001"});
    EXPECT_EQ(apply_live(*running, *own_line).children.at(0).mode, InterfaceMode::tap);
}

TEST(ConfigChildren, ReloadAddsRemovesAndChangesChildrenLive) {
    DaemonConfig running = default_config("ib0");
    running.children.push_back({.name = "ib0.8001", .pkey = 0x8001});
    running.children.push_back({.name = "ib0.8002", .pkey = 0x8002});
    DaemonConfig reloaded = running;
    reloaded.children.erase(reloaded.children.begin());                        // ib0.8001 removed
    reloaded.children[0].addresses.push_back(*parse_interface_address("198.18.2.1/24"));  // ib0.8002 changed
    reloaded.children.push_back({.name = "ib0.8003", .pkey = 0x8003});         // ib0.8003 added
    const auto plan = diff_for_reload(running, reloaded);
    EXPECT_EQ(plan.live, (std::vector<std::string>{"child ib0.8001", "child ib0.8002", "child ib0.8003"}));
    EXPECT_FALSE(plan.needs_restart());
    EXPECT_EQ(apply_live(running, reloaded).children, reloaded.children);
}

// The kernel's own route to an IPv6 address's prefix has metric 256, ours
// 1024: both can be there. A /32 brings no prefix route.
TEST(ConfigRoutes, RoutesTheKernelTakesAlongsideItsOwnAreAccepted) {
    TempDir dir;
    auto c = load_text(dir, "[interface]\naddress = 2001:db8:1::1/64\naddress = 198.18.0.1/32\n"
                            "route = 2001:db8:1::/64\nroute = 198.18.0.1/32\nroute = 198.18.0.0/24\n");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->interface.routes.size(), 3u);
}

// A gateway in an address's prefix, behind an on-link route listed before
// or after it (the interface adds on-link routes first), or IPv6
// link-local (every interface has its fe80::/64 address).
TEST(ConfigRoutes, GatewaysOnTheLinkAreAccepted) {
    TempDir dir;
    auto c = load_text(dir, "[interface]\naddress = 198.18.0.1/24\nroute = 198.19.0.0/16 via 198.18.0.2\n"
                            "route = 198.21.0.0/24 via 198.20.0.1\nroute = 198.20.0.0/24\n"
                            "route = 2001:db8:9::/64 via fe80::2\n"
                            "[child ib0.8001]\npkey = 0x8001\naddress = 198.18.1.1/24\n"
                            "route = 198.22.0.0/24 via 198.18.1.2\n");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->interface.routes.size(), 4u);
}

TEST(ConfigReload, NothingChanged) {
    const auto plan = diff_for_reload(everything_changed(), everything_changed());
    EXPECT_FALSE(plan.changed());
    EXPECT_FALSE(plan.needs_restart());
}

TEST(ConfigReload, LiveKeys) {
    const DaemonConfig running = default_config("ib0");
    DaemonConfig reloaded = running;
    reloaded.neighbour.reachable_time = 10s;
    reloaded.neighbour.retrans_time = 2s;
    reloaded.neighbour.unicast_probes = 5;
    reloaded.daemon.log_level = LogLevel::debug;
    reloaded.interface.addresses.push_back(*parse_interface_address("198.18.0.1/24"));
    reloaded.interface.routes.push_back(*parse_route("198.19.0.0/24 via 198.18.0.2"));
    reloaded.multicast.send_only_join = SendOnlyJoin::non_member;
    reloaded.daemon.capture = "/var/tmp/ib0.pcap";
    const auto plan = diff_for_reload(running, reloaded);
    EXPECT_EQ(plan.live, (std::vector<std::string>{"interface.address", "interface.route", "multicast.send-only-join",
                                                   "neighbour.reachable-time", "neighbour.retrans-time",
                                                   "neighbour.unicast-probes", "daemon.log-level", "daemon.capture"}));
    EXPECT_TRUE(plan.restart.empty());
    EXPECT_TRUE(plan.changed());
    EXPECT_FALSE(plan.needs_restart());
}

TEST(ConfigReload, ApplyLiveTakesTheLiveKeysAndKeepsTheRestartOnes) {
    const DaemonConfig running = default_config("ib0");
    const DaemonConfig reloaded = everything_changed();
    const DaemonConfig applied = apply_live(running, reloaded);
    // Every key, by the table: live ones read as the reloaded file says,
    // restart ones as they run.
    for (const KeySpec& key : config_keys()) {
        const DaemonConfig& expected_from = key.apply == Apply::live ? reloaded : running;
        EXPECT_EQ(key.get(applied), key.get(expected_from)) << key.full_name();
    }
    EXPECT_TRUE(diff_for_reload(applied, reloaded).needs_restart());
    EXPECT_TRUE(diff_for_reload(applied, reloaded).live.empty());
    // Applying the running file again changes nothing.
    EXPECT_EQ(apply_live(running, running), running);
}

TEST(ConfigReload, ApplyLiveEmptiesListsAndClearsTheCapture) {
    DaemonConfig running = default_config("ib0");
    running.interface.addresses.push_back(*parse_interface_address("198.18.0.1/24"));
    running.interface.routes.push_back(*parse_route("198.19.0.0/24 via 198.18.0.2"));
    running.daemon.capture = "/var/tmp/ib0.pcap";
    const DaemonConfig applied = apply_live(running, default_config("ib0"));
    EXPECT_TRUE(applied.interface.addresses.empty());
    EXPECT_TRUE(applied.interface.routes.empty());
    EXPECT_EQ(applied.daemon.capture, "");
}

TEST(ConfigReload, RestartKeys) {
    const DaemonConfig running = default_config("ib0");
    const auto plan = diff_for_reload(running, everything_changed());
    EXPECT_EQ(plan.restart,
              (std::vector<std::string>{"fabric.transport", "fabric.device", "fabric.port", "fabric.address",
                                        "fabric.bind", "fabric.key-file", "fabric.port-guid", "fabric.embedded",
                                        "fabric.embedded-listen",
                                        "fabric.pkey", "interface.name", "interface.mtu", "interface.connected-idle",
                                        "multicast.scope",
                                        "multicast.max-groups", "neighbour.max-entries",
                                        "neighbour.path-max-entries", "queues.send-depth", "queues.receive-depth",
                                        "queues.sa-max-queued", "queues.tun-max-batch", "queues.max-connections",
                                        "queues.connected-receive-buffers", "daemon.control-socket",
                                        "daemon.watchdog", "daemon.metrics-listen", "daemon.metrics-file"}));
    EXPECT_TRUE(plan.needs_restart());
    std::vector<std::string> every_live_key;
    for (const KeySpec& key : config_keys())
        if (key.apply == Apply::live) every_live_key.push_back(key.full_name());
    EXPECT_EQ(plan.live, every_live_key);
}

TEST(ConfigReload, AddressOrderAlone) {
    DaemonConfig a = default_config("ib0");
    a.interface.addresses = {*parse_interface_address("198.18.0.1/24"), *parse_interface_address("198.18.1.1/24")};
    DaemonConfig b = a;
    std::swap(b.interface.addresses[0], b.interface.addresses[1]);
    const auto plan = diff_for_reload(a, b);
    EXPECT_EQ(plan.live, std::vector<std::string>{"interface.address"});
}

// ---------------------------------------------------------------------------
// The example file and the man page.

bool in_test_ranges(const IpAddress& a) {
    const auto& b = a.bytes;
    if (a.is_v4()) return b[0] == 198 && (b[1] & 0xFE) == 18;
    return b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8;
}

// "#key = value" (no space after '#') is a setting commented out; "# text" is prose.
std::string uncomment_settings(const std::string& text) {
    std::istringstream in(text);
    std::string out, line;
    while (std::getline(in, line)) {
        if (line.size() > 1 && line[0] == '#' && line[1] != ' ' &&
            (line.find('=') != std::string::npos || line[1] == '['))
            line.erase(0, 1);
        out += line + "\n";
    }
    return out;
}

TEST(ConfigExample, ParsesAsShippedAndWithEverySettingUncommented) {
    const std::string text = read_source_file("config/ipoibd.conf.example");
    ASSERT_FALSE(text.empty());
    auto shipped = parse_config(text, "ipoibd.conf.example", "ib0");
    ASSERT_TRUE(shipped.has_value()) << shipped.error().message;
    const std::string uncommented = uncomment_settings(text);
    ASSERT_NE(uncommented, text);
    auto full = parse_config(uncommented, "ipoibd.conf.example (uncommented)", "ib0");
    ASSERT_TRUE(full.has_value()) << full.error().message;
    EXPECT_FALSE(full->interface.addresses.empty());
    EXPECT_FALSE(full->interface.routes.empty());
    ASSERT_EQ(full->children.size(), 1u);
    EXPECT_EQ(full->children[0].pkey, 0x8001);
    for (const auto& c : full->children)
        for (const auto& a : c.addresses) EXPECT_TRUE(in_test_ranges(a.address)) << format_prefix(a);
    for (const auto& a : full->interface.addresses) EXPECT_TRUE(in_test_ranges(a.address)) << format_prefix(a);
    for (const auto& r : full->interface.routes) {
        EXPECT_TRUE(in_test_ranges(r.destination.address)) << format_route(r);
        if (r.gateway) {
            EXPECT_TRUE(in_test_ranges(*r.gateway)) << format_route(r);
        }
    }
}

TEST(ConfigExample, NamesOnlyTestNetworkAddresses) {
    // Every token that reads as an IP address (after cutting /LEN and :PORT)
    // is in 198.18.0.0/15 or 2001:db8::/32, or is a default's 127.0.0.1 or 0.0.0.0.
    const std::string text = read_source_file("config/ipoibd.conf.example");
    std::string token;
    std::istringstream in(replace_all(replace_all(replace_all(text, "=", " "), "[", " "), "]", " "));
    int addresses = 0;
    while (in >> token) {
        token = token.substr(0, token.find('/'));
        std::optional<IpAddress> a;
        if (auto v6 = ipoibd::parse_ipv6(token)) {
            a = IpAddress::v6(*v6);
        } else if (auto v4 = ipoibd::parse_ipv4(token.substr(0, token.find(':')))) {
            a = IpAddress::v4(*v4);
        }
        if (!a) continue;
        ++addresses;
        const std::string shown = format_ip(*a);
        EXPECT_TRUE(in_test_ranges(*a) || shown == "127.0.0.1" || shown == "0.0.0.0") << token;
    }
    EXPECT_GT(addresses, 4);
}

// The man page's text with escapes and font changes removed.
std::string plain_man_text(std::string text) {
    text = replace_all(text, "\\-", "-");
    for (const char* font : {"\\fB", "\\fI", "\\fR", "\\fP", "\\(em", "\\&"}) text = replace_all(text, font, "");
    return text;
}

TEST(ConfigManPage, DocumentsEveryKeyInItsSectionWithItsDefault) {
    const std::string page = plain_man_text(read_source_file("man/ipoibd.conf.5"));
    ASSERT_FALSE(page.empty());
    const DaemonConfig defaults = default_config("ib0");
    const DaemonConfig other_instance = default_config("ib9");
    for (const KeySpec& key : config_keys()) {
        const std::string heading = ".SS \"[" + std::string(key.section) + "]\"";
        const auto section = page.find(heading);
        ASSERT_NE(section, std::string::npos) << heading;
        const auto section_end = page.find("\n.S", section + heading.size());
        const std::string body = page.substr(section, section_end - section);
        // Each key is a .TP entry whose tag starts "key = ".
        const std::string tag = "\n.TP\n" + std::string(key.name) + " = ";
        const auto entry = body.find(tag);
        ASSERT_NE(entry, std::string::npos) << key.full_name() << " has no entry under " << heading;
        const auto entry_end = body.find("\n.TP", entry + tag.size());
        const std::string text = body.substr(entry, entry_end - entry);
        const auto value = key.get(defaults);
        if (key.repeatable) {
            EXPECT_NE(text.find("Repeatable"), std::string::npos) << key.full_name();
        } else if (value != key.get(other_instance)) {
            EXPECT_NE(text.find("Default: the instance"), std::string::npos) << key.full_name();
        } else if (value.front().empty()) {
            EXPECT_NE(text.find("Default: empty"), std::string::npos) << key.full_name();
        } else {
            EXPECT_NE(text.find("Default: " + value.front()), std::string::npos) << key.full_name() << ":\n" << text;
        }
        EXPECT_NE(text.find(key.apply == Apply::live ? "Reload: live" : "Reload: restart"), std::string::npos)
            << key.full_name();
    }
    EXPECT_NE(page.find("/etc/ipoibd/ib0.conf:7: [interface] mtu = 70000: must be between 576 and 65520"),
              std::string::npos);
    // [child NAME]: every key a child takes.
    const auto children = page.find(".SS \"[child name]\"");
    ASSERT_NE(children, std::string::npos) << "no [child name] section";
    const std::string body = page.substr(children, page.find("\n.S", children + 10) - children);
    for (const ChildKeySpec& key : child_keys())
        EXPECT_NE(body.find("\n.TP\n" + std::string(key.name) + " = "), std::string::npos) << "[child] " << key.name;
}

}  // namespace
}  // namespace ipoibd::config
