#include "common/duration.h"

#include <charconv>

namespace ipoibd {

expected<std::chrono::milliseconds, std::string> parse_duration(std::string_view text) {
    std::uint64_t value = 0;
    const char* begin = text.data();
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr == begin)
        return unexpected("'" + std::string(text) + "' is not a duration (e.g. 250ms, 1s, 2m)");
    const std::string_view unit(ptr, static_cast<std::size_t>(end - ptr));
    std::uint64_t ms;
    if (unit == "ms")
        ms = value;
    else if (unit.empty() || unit == "s")
        ms = value * 1000;
    else if (unit == "m" || unit == "min")
        ms = value * 60'000;
    else if (unit == "h")
        ms = value * 3'600'000;
    else
        return unexpected("unknown unit '" + std::string(unit) + "' in '" + std::string(text) + "' (ms, s, m, h)");
    if (ms > 365ULL * 24 * 3'600'000) return unexpected("'" + std::string(text) + "' is longer than a year");
    return std::chrono::milliseconds(ms);
}

}  // namespace ipoibd
