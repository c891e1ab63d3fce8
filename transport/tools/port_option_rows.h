// The command-line rows ibudping and ibrcperf share: which port to open
// (transport/port_factory.h's PortOptions), in the order they must apply
// (--transport before the soft-only rows, --guid before --instance). The
// soft-only rows leave their value unread under verbs.
#pragma once

#include <array>
#include <string>

#include "common/option_table.h"
#include "common/socket_address.h"
#include "transport/port_factory.h"
#include "transport/soft/guid.h"

namespace ipoibd::transport {

// `Options` has a `PortOptions port`; `instance` is the name the automatic
// GUID is derived from when --instance is not given (the tool's name).
template <class Options>
constexpr std::array<cli::Option<Options>, 6> port_option_rows(const char* instance) {
    using Applied = cli::Applied;
    return {{
        {"transport", cli::Takes::value, "soft | verbs",
         [](Options& o, const std::string& v) -> Applied {
             if (v == "soft") {
                 o.port.kind = PortOptions::Kind::soft;
             } else if (v == "verbs") {
                 o.port.kind = PortOptions::Kind::verbs;
             } else {
                 return unexpected("--transport is soft or verbs, not '" + v + "'");
             }
             return {};
         },
         "soft"},
        {"fabric", cli::Takes::value, "soft: ibfabricd address ADDR:PORT",
         [](Options& o, const std::string& v) -> Applied {
             if (o.port.kind != PortOptions::Kind::soft) return {};
             auto f = parse_socket_address(v);
             if (!f) return unexpected("bad --fabric '" + v + "': " + f.error());
             o.port.fabric = *f;
             return {};
         },
         "127.0.0.1:18516"},
        {"guid", cli::Takes::value, "soft: port GUID (hex) or auto",
         [](Options& o, const std::string& v) -> Applied {
             if (o.port.kind != PortOptions::Kind::soft || v == "auto") return {};  // auto: --instance derives it
             const auto g = cli::number(v, ~0ULL);
             if (!g || *g == 0) return unexpected("bad --guid '" + v + "'");
             o.port.guid = *g;
             return {};
         },
         "auto"},
        {"instance", cli::Takes::value, "soft: name the automatic GUID is derived from",
         [](Options& o, const std::string& v) -> Applied {
             if (o.port.kind == PortOptions::Kind::soft && o.port.guid == 0) o.port.guid = stable_port_guid(v);
             return {};
         },
         instance},
        {"device", cli::Takes::value, "verbs: HCA name (default: first)",
         [](Options& o, const std::string& v) -> Applied {
             o.port.device = v;
             return {};
         }},
        {"port", cli::Takes::value, "verbs: port number",
         [](Options& o, const std::string& v) -> Applied {
             const auto n = cli::typed<unsigned>("port", v);
             if (!n) return unexpected(n.error());
             o.port.port_num = *n;
             return {};
         }},
    }};
}

}  // namespace ipoibd::transport
