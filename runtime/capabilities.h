// Dropping privileges after set-up: the daemon needs root (or the
// capabilities) to open the HCA or the TUN device and configure the link,
// and afterwards only CAP_NET_ADMIN (netlink changes on events) and
// CAP_NET_RAW; everything else goes, so a bug reachable from the fabric
// cannot use it.
//
// keep_only_capabilities(), as root:
//   1. drops every other capability from the bounding set (needs
//      CAP_SETPCAP, so this comes first), so not even an exec can get
//      them back;
//   2. sets permitted and effective to the kept ones (those held now;
//      the others are reported missing), inheritable to none;
//   3. clears the ambient set.
// No uid change happens, so PR_SET_KEEPCAPS is not involved. Not root:
// nothing to do (the unit's CapabilityBoundingSet= and
// AmbientCapabilities= decide), logged as a notice.
#pragma once

#include <sys/capability.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"
#include "common/sys_error.h"
#include "runtime/log.h"

namespace ipoibd::runtime {

struct CapabilityReport {
    bool changed = false;               // the sets were reduced
    std::vector<std::string> kept;      // names now permitted and effective
    std::vector<std::string> missing;   // asked for but not held (not granted by the unit)
};

expected<CapabilityReport, SysError> keep_only_capabilities(std::span<const cap_value_t> keep, Logger& log);

// "cap_net_admin" (libcap's spelling; "CAP_NET_ADMIN" also accepted).
expected<cap_value_t, std::string> parse_capability(std::string_view name);
std::string capability_name(cap_value_t cap);

}  // namespace ipoibd::runtime
