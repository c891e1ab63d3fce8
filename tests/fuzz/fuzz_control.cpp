// libFuzzer target for the control socket's two ends (ctl/
// control_protocol.h, ctl/json_parse.h): the request line a client sends
// the daemon, and the JSON answer ipoibctl reads back.
//
// Input: the first byte picks the end (even: a request line, odd: an
// answer); the rest is what the socket carried.
//
// Invariants checked (a violation aborts):
//   - a request is refused, or names one of the commands and an interface
//     name of at most 15 bytes; its text() parses back to the same;
//   - an answer is refused with an offset within the text and a reason
//     that quotes no byte outside printable ASCII, or parses; to_json() of
//     it parses again and is a fixed point of parse and to_json.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ctl/control_protocol.h"
#include "ctl/json_parse.h"

using namespace ipoibd;
using namespace ipoibd::ctl;
using namespace ipoibd::ctl::control;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

void request(std::string_view text) {
    const auto r = parse_request(text);
    if (!r) return;
    check(std::find(kCommands.begin(), kCommands.end(), r->command) != kCommands.end());
    check(r->interface.size() <= kMaxInterfaceName);
    const std::string again_text = r->text();
    const auto again = parse_request(again_text);
    check(again && again->command == r->command && again->interface == r->interface);
}

void answer(std::string_view text) {
    auto v = parse_json(text, JsonLimits{.max_length = 1 << 16, .max_depth = 64});
    if (!v) {
        check(v.error().offset <= text.size());
        for (char c : v.error().what) check(c >= 0x20 && c < 0x7F);
        return;
    }
    const std::string once = to_json(*v);
    auto again = parse_json(once);
    check(again.has_value());
    check(to_json(*again) == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0 || size > 1 << 16) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] & 1)
        answer(text);
    else
        request(text);
    return 0;
}
