// Opening a Port by kind: the one factory the daemon and every tool use.
// The soft backend is always built; verbs when the build found libibverbs
// (port_factory_verbs.cpp or port_factory_noverbs.cpp is compiled in).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/socket_address.h"
#include "transport/port.h"

namespace ipoibd::transport {

class MemoryFabric;

struct PortOptions {
    enum class Kind : std::uint8_t {
        automatic,  // verbs when an HCA answers, else soft
        soft,
        verbs,
        memory,     // a port of `memory` (tests: the in-process layer)
    } kind = Kind::soft;
    // soft
    SocketAddress fabric;  // where ibfabricd (or an embedded fabric) listens
    std::optional<SocketAddress> bind_to;  // the port's own UDP address; none: any address, a free port
    std::optional<FabricKeys> keys;        // the fabric key (soft_port.h); none: unsealed
    std::uint64_t guid = 0;  // the port GUID; required, non-zero
    std::string node_description = "ipoibd soft port";
    std::size_t receive_budget = 0;  // datagrams per process(); 0: the backend's default
    // Sends wait in the socket's ring until Port::flush() or process(), so
    // that a loop turn's sends leave in sendmmsg batches (soft_port.h).
    bool deferred_flush = false;
    // verbs
    std::string device;  // empty: the first HCA
    unsigned port_num = 1;
    // memory: the fabric (must outlive the port) and the port's LID (0:
    // the next free one; a port coming back may keep its old one)
    MemoryFabric* memory = nullptr;
    std::uint16_t lid = 0;
};

struct OpenedPort {
    std::unique_ptr<Port> port;
    // For logs and `ipoibctl status`: "soft 0x0200... via 198.18.0.254:18516",
    // "mlx5_0 port 1".
    std::string name;
    // The HCA's name ("mlx5_0"), or "soft": the journal's IB_DEVICE.
    std::string device;
    // automatic: why the verbs backend was not used ("" when it was).
    std::string verbs_unavailable;
};

expected<OpenedPort, Error> open_port(const PortOptions& options);

// The verbs half; not_supported when built without libibverbs.
expected<std::unique_ptr<Port>, Error> open_verbs(const std::string& device, unsigned port_num);

// Processes `port` until it is ACTIVE with an SM LID (the SM has programmed
// it), `timeout` passes, or `stop()` says so; every port event is handed to
// `on_event` (may be empty). Returns whether the port became ACTIVE. For
// the tools; the daemon waits in its event loop.
bool wait_until_active(Port& port, std::chrono::milliseconds timeout,
                       const std::function<void(PortEvent)>& on_event = {},
                       const std::function<bool()>& stop = {});

}  // namespace ipoibd::transport
