// Opening a Port by kind, for the tools and the daemon: the soft backend
// always, verbs when the build found libibverbs (port_open_verbs.cpp or
// port_open_noverbs.cpp is compiled in).
#pragma once

#include <memory>
#include <string>

#include "common/socket_address.h"
#include "transport/port.h"

namespace ipoibd::transport {

struct PortOpenOptions {
    enum class Kind { soft, verbs } kind = Kind::soft;
    // soft
    SocketAddress fabric;
    std::uint64_t guid = 0;
    std::string node_description = "ipoibd soft port";
    // verbs
    std::string device;  // empty: the first HCA
    unsigned port_num = 1;
};

expected<std::unique_ptr<Port>, Error> open_port(const PortOpenOptions& options);

// The verbs half; not_supported when built without libibverbs.
expected<std::unique_ptr<Port>, Error> open_verbs(const std::string& device, unsigned port_num);

}  // namespace ipoibd::transport
