// Durations as operators write them in options and config files: "250ms",
// "1s", "2m", "1h"; a bare number is seconds.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/expected.h"

namespace ipoibd {

expected<std::chrono::milliseconds, std::string> parse_duration(std::string_view text);

}  // namespace ipoibd
