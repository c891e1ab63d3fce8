// The control socket protocol, shared by ipoibd (control.h) and ipoibctl
// (ctl_client.h). Every limit of the protocol is here.
//
//   client: connects to /run/ipoibd/<instance>.sock (AF_UNIX, stream),
//           writes one request line, "status\n", and may shut down writing;
//   daemon: answers with one JSON document (compact, ending in '\n') and
//           closes the connection.
//
// A request is one of kCommands, optionally followed by the name of the
// interface it asks about ("neigh ib0", "flush paths ib0.8001"; without
// one: every interface for neigh, paths, mcast and the flushes, the first
// for status and stats); "interfaces" lists them. Blanks around and between
// its words are forgiven ("flush   neigh " is "flush neigh"). A failed
// request is answered with {"error": "..."}; an unknown command's answer
// also lists the commands. A request without its newline is taken as
// complete when the client shuts down writing.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ipoibd::ctl::control {

inline constexpr std::array<std::string_view, 8> kCommands = {
    "status", "neigh", "paths", "mcast", "stats", "flush neigh", "flush paths", "interfaces",
};
// Commands that take no interface name.
inline constexpr std::array<std::string_view, 1> kNodeCommands = {"interfaces"};

// A daemon's commands: ipoibd's above; ibfabricd's (fabric/ibfabricd.cpp)
// take no interface.
struct CommandSet {
    std::span<const std::string_view> commands;
    std::span<const std::string_view> node_commands;  // of those, the ones without an interface name
};
inline constexpr CommandSet kIpoibdCommands{kCommands, kNodeCommands};
inline constexpr std::size_t kMaxInterfaceName = 15;  // IFNAMSIZ - 1

inline constexpr std::string_view kSocketDir = "/run/ipoibd";  // created 0700
inline constexpr std::size_t kMaxRequestLine = 256;            // bytes, newline included
inline constexpr std::size_t kMaxClients = 16;                 // connections served at once
inline constexpr std::chrono::milliseconds kClientTimeout{5000};  // from accept to close
inline constexpr std::size_t kMaxAnswer = 64u << 20;           // bytes a client accepts

// The command `request` names, blanks normalised, or nullopt when it is
// not one of kCommands (with no interface name).
std::optional<std::string_view> find_command(std::string_view request, const CommandSet& set = kIpoibdCommands);

struct Request {
    std::string_view command;  // one of kCommands
    std::string interface;     // empty: none named
    // "neigh ib0": what the client sends, and the daemon's handler gets.
    std::string text() const;
};
// A command and an optional interface name (1 to 15 characters, no '/',
// ':' or blank, as Linux allows); nullopt for anything else.
std::optional<Request> parse_request(std::string_view request, const CommandSet& set = kIpoibdCommands);

// "/run/ipoibd/ib0.sock" for instance "ib0".
std::string socket_path(std::string_view instance);

// An instance name usable in a socket path: 1 to 64 characters of
// [A-Za-z0-9_.:@-], not starting with '.'.
bool valid_instance_name(std::string_view instance);

}  // namespace ipoibd::ctl::control
