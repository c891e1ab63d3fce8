// A number as "0x" and at least `digits` lower-case hex digits
// ("0x0002", "0x0002c90300a1b2c3"), as the logs and tools print LIDs,
// GUIDs and keys.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ipoibd {

inline std::string hex(std::uint64_t value, int digits) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(value));
    return buf;
}

}  // namespace ipoibd
