// The control socket protocol, shared by ipoibd (control.h) and ipoibctl
// (ctl_client.h). Every limit of the protocol is here.
//
//   client: connects to /run/ipoibd/<instance>.sock (AF_UNIX, stream),
//           writes one request line, "status\n", and may shut down writing;
//   daemon: answers with one JSON document (compact, ending in '\n') and
//           closes the connection.
//
// A request is one of kCommands; blanks around and between its words are
// forgiven ("flush   neigh " is "flush neigh"). A failed request is answered
// with {"error": "..."}; an unknown command's answer also lists the
// commands. A request without its newline is taken as complete when the
// client shuts down writing.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ipoibd::daemon::control {

inline constexpr std::array<std::string_view, 7> kCommands = {
    "status", "neigh", "paths", "mcast", "stats", "flush neigh", "flush paths",
};

inline constexpr std::string_view kSocketDir = "/run/ipoibd";  // created 0700
inline constexpr std::size_t kMaxRequestLine = 256;            // bytes, newline included
inline constexpr std::size_t kMaxClients = 16;                 // connections served at once
inline constexpr std::chrono::milliseconds kClientTimeout{5000};  // from accept to close
inline constexpr std::size_t kMaxAnswer = 64u << 20;           // bytes a client accepts

// The command `request` names, blanks normalised, or nullopt when it is
// not one of kCommands.
std::optional<std::string_view> find_command(std::string_view request);

// "/run/ipoibd/ib0.sock" for instance "ib0".
std::string socket_path(std::string_view instance);

// An instance name usable in a socket path: 1 to 64 characters of
// [A-Za-z0-9_.:@-], not starting with '.'.
bool valid_instance_name(std::string_view instance);

}  // namespace ipoibd::daemon::control
