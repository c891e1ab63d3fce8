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
    std::uint64_t per = 0;  // milliseconds per unit
    if (unit == "ms")
        per = 1;
    else if (unit.empty() || unit == "s")
        per = 1000;
    else if (unit == "m" || unit == "min")
        per = 60'000;
    else if (unit == "h")
        per = 3'600'000;
    else
        return unexpected("unknown unit '" + std::string(unit) + "' in '" + std::string(text) + "' (ms, s, m, h)");
    // Compared before multiplying: a product past 2^64 would wrap to a
    // small, valid-looking duration.
    constexpr std::uint64_t kYear = 365ULL * 24 * 3'600'000;
    if (value > kYear / per) return unexpected("'" + std::string(text) + "' is longer than a year");
    const std::uint64_t ms = value * per;
    return std::chrono::milliseconds(ms);
}

}  // namespace ipoibd
