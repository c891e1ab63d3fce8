// libFuzzer target for the files an operator writes: ipoibd.conf
// (config/load.h parse_config), partitions.conf (fabric/partitions.h,
// ibfabricd --partitions and [fabric] embedded-partitions) and topology
// files (fabric/routing/net_file.h).
//
// Input: the first byte picks the parser (modulo 3: 0 ipoibd.conf, 1
// partitions.conf, 2 a .net file); the rest is the file's text.
//
// Invariants checked (a violation aborts):
//   - ipoibd.conf: a refusal says why, starting with the file's name (or
//     "command line"); an accepted file's describe() parses back to the same
//     configuration, and describes the same again;
//   - partitions.conf: a refusal names the file, a line within the text and
//     a reason; an accepted file has named partitions with valid P_Keys (a
//     15-bit base, not 0), and pkeys_for_port() gives no
//     P_Key twice and none that is not one of them;
//   - .net: a refusal names the file, a line within the text and a reason;
//     an accepted file's cables join ports that exist, each port in one
//     cable at most; its topology (or a refusal naming a line) routes
//     (min-hop, when it has at most 32 switches), every route leaving by a
//     port that exists, and path_hops never exceeds the switch count.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "config/daemon_config.h"
#include "config/load.h"
#include "fabric/partitions.h"
#include "fabric/routing/credit_loops.h"
#include "fabric/routing/net_file.h"
#include "fabric/routing/routing.h"

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

void net_file(std::string_view text) {
    using namespace fabric::routing;
    const auto lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
    auto net = parse_net(text, "f.net");
    if (!net) {
        const auto& e = net.error();
        check(e.file == "f.net" && !e.message.empty() && e.line >= 1 && e.line <= lines);
        return;
    }
    std::set<std::pair<std::size_t, unsigned>> used;
    for (const NetCable& c : net->cables) {
        check(c.a < net->nodes.size() && c.b < net->nodes.size());
        check(c.a_port >= 1 && c.a_port <= net->nodes[c.a].num_ports);
        check(c.b_port >= 1 && c.b_port <= net->nodes[c.b].num_ports);
        check(used.insert({c.a, c.a_port}).second);
        check(used.insert({c.b, c.b_port}).second);
    }
    auto t = to_topology(*net, "f.net");
    if (!t) {
        check(t.error().line >= 1 && t.error().line <= lines);
        return;
    }
    if (t->switches().size() > 32) return;
    const RoutingResult r = route(*t, {});
    check(r.routes.has_value());
    for (std::size_t s = 0; s < t->switches().size(); ++s)
        for (std::uint8_t p : r.routes->lft[s]) check(p == kNoPort || p <= t->switches()[s].num_ports());
    for (const Endpoint& a : t->endpoints())
        for (const Endpoint& b : t->endpoints()) {
            const auto hops = path_hops(*t, *r.routes, a.lid, b.lid);
            check(!hops || *hops <= t->switches().size());
        }
    (void)check_credit_loops(*t, *r.routes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0 || size > 1 << 16) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 3) {
        case 0: daemon_config(text); break;
        case 1: partitions(text); break;
        default: net_file(text); break;
    }
    return 0;
}
