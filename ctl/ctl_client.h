// ipoibctl's side of the control socket (protocol in control_protocol.h):
// connect, send one request line, read the answer until the daemon closes,
// all within one deadline.
//
// Errors are for an operator at a shell, each saying what to do next:
//   not_running:  "ipoibd is not running (no control socket at
//                 /run/ipoibd/ib0.sock)": the path is absent, or nothing
//                 listens on it (a stale socket of a killed daemon);
//   permission:   the socket is 0600 root: "permission denied ... (run as
//                 root)";
//   timeout:      the daemon accepted but did not answer in time (its loop
//                 is stuck or busy);
//   failed:       anything else, with the operation and errno.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/expected.h"
#include "ctl/control_protocol.h"

namespace ipoibd::ctl {

struct CtlError {
    enum class Kind : std::uint8_t { not_running, permission, timeout, failed };
    Kind kind = Kind::failed;
    std::string message;
};

// Sends `command` to the daemon at `socket_path` and returns its answer as
// received (JSON text). The answer is limited to control::kMaxAnswer bytes.
expected<std::string, CtlError> ctl_request(const std::string& socket_path, std::string_view command,
                                            std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace ipoibd::ctl
