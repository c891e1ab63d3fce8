// The value grammar of ipoibd.conf: each parser takes the text after '='
// (or after --section.key=) and returns the typed value, or the reason it is
// wrong in words that read well after "[section] key = value: ", which
// load.cpp puts in front together with file:line.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/expected.h"
#include "common/socket_address.h"
#include "common/utf8.h"
#include "config/daemon_config.h"

namespace ipoibd::config {

using Reason = std::string;

// A decimal whole number in [min, max].
expected<std::uint64_t, Reason> parse_unsigned(std::string_view text, std::uint64_t min, std::uint64_t max);

// yes/no; true/false and on/off are accepted as well (systemd's words).
expected<bool, Reason> parse_yes_no(std::string_view text);
std::string_view format_yes_no(bool value);

// common/duration.h syntax ("250ms", "30s", "2m", "1h"), in [min, max].
expected<std::chrono::milliseconds, Reason> parse_duration_between(std::string_view text,
                                                                   std::chrono::milliseconds min,
                                                                   std::chrono::milliseconds max);
// Whole hours as "1h", else whole seconds as "60s" (Linux's neighbour
// timers are read in seconds), else "250ms"; parse_duration reads it back.
std::string format_duration(std::chrono::milliseconds duration);

// 0x0001..0xffff except 0x8000 (the low 15 bits 0 is the invalid P_Key,
// IBA 10.9.1.2); "0x" and 1-4 hex digits.
expected<std::uint16_t, Reason> parse_pkey(std::string_view text);
std::string format_pkey(std::uint16_t pkey);  // "0xffff"

// "0" or "0x" and 1-16 hex digits.
expected<std::uint64_t, Reason> parse_guid(std::string_view text);
std::string format_guid(std::uint64_t guid);  // "0", else "0x0002c90300a1b2c3"

expected<IpAddress, Reason> parse_ip_address(std::string_view text);
// An interface address, "198.18.0.1/24": unicast, prefix length 1..32 or 1..128.
expected<IpPrefix, Reason> parse_interface_address(std::string_view text);
// "PREFIX" (on-link) or "PREFIX via GATEWAY"; the prefix's host bits zero.
expected<Route, Reason> parse_route(std::string_view text);

// ADDR:PORT or [ADDR]:PORT, numeric; not port 0 nor RoCEv2's 4791.
// `listen` allows the wildcard address (0.0.0.0, ::), which cannot be sent to.
expected<SocketAddress, Reason> parse_fabric_address(std::string_view text, bool listen);
bool is_wildcard(const SocketAddress& address);  // 0.0.0.0 or ::, any port

// A Linux interface name (dev_valid_name): 1-15 bytes, not "." or "..", no
// '/', ':' or white space; nor '%' (a kernel pattern) or controls and
// bytes that are not UTF-8 (text_problem), which the kernel would take.
expected<std::string, Reason> parse_interface_name(std::string_view text);

// An absolute path of at most `max_length` bytes.
expected<std::string, Reason> parse_absolute_path(std::string_view text, std::size_t max_length);


}  // namespace ipoibd::config
