// libFuzzer target for the files an operator writes: ipoibd.conf
// (config/load.h parse_config) and partitions.conf (fabric/partitions.h,
// ibfabricd --partitions and [fabric] embedded-partitions).
//
// Input: the first byte picks the parser (even: ipoibd.conf, odd:
// partitions.conf); the rest is the file's text.
//
// Invariants checked (a violation aborts):
//   - ipoibd.conf: a refusal says why, starting with the file's name (or
//     "command line"); an accepted file's describe() parses back to the same
//     configuration, and describes the same again;
//   - partitions.conf: a refusal names the file, a line within the text and
//     a reason; an accepted file has named partitions with valid P_Keys (a
//     15-bit base, not 0), and pkeys_for_port() gives no
//     P_Key twice and none that is not one of them.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/daemon_config.h"
#include "config/load.h"
#include "fabric/partitions.h"

using namespace ipoibd;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

void daemon_config(std::string_view text) {
    auto config = config::parse_config(text, "fuzz.conf", "ib0");
    if (!config) {
        const std::string& m = config.error().message;
        check(!m.empty());
        check(m.rfind("fuzz.conf", 0) == 0 || m.rfind("command line", 0) == 0);
        return;
    }
    const std::string described = config::describe(*config);
    auto again = config::parse_config(described, "described", "ib0");
    check(again.has_value());
    check(*again == *config);
    check(config::describe(*again) == described);
}

void partitions(std::string_view text) {
    auto parts = fabric::parse_partitions(text, "p.conf");
    if (!parts) {
        const auto& e = parts.error();
        check(e.file == "p.conf" && !e.message.empty());
        const auto lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
        check(e.line >= 0 && e.line <= lines);
        return;
    }
    for (const fabric::Partition& p : *parts) {
        check(!p.name.empty());
        check(p.pkey != 0 && (p.pkey & 0x8000) == 0);  // the 15-bit base
    }
    for (std::uint64_t guid : {0ULL, 1ULL, 0x0002c90300a1b2c3ULL}) {
        const auto keys = fabric::pkeys_for_port(*parts, guid);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            check((keys[i] & 0x7FFF) != 0);
            check(std::count(keys.begin(), keys.end(), keys[i]) == 1);
            check(std::any_of(parts->begin(), parts->end(),
                              [&](const fabric::Partition& p) { return (p.pkey & 0x7FFF) == (keys[i] & 0x7FFF); }));
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0 || size > 1 << 16) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] & 1)
        partitions(text);
    else
        daemon_config(text);
    return 0;
}
