#include "transport/port_factory.h"

#include <poll.h>

#include <cstdio>

#include "transport/memory/memory_fabric.h"
#include "transport/soft/soft_port.h"

namespace ipoibd::transport {

namespace {

expected<OpenedPort, Error> open_soft(const PortOptions& o) {
    SoftPortConfig c;
    c.fabric = o.fabric;
    c.bind_to = o.bind_to;
    c.keys = o.keys;
    c.port_guid = o.guid;
    c.node_description = o.node_description;
    if (o.receive_budget != 0) c.receive_budget = o.receive_budget;
    auto p = SoftPort::open(c);
    if (!p) return unexpected(p.error());
    (*p)->set_deferred_flush(o.deferred_flush);
    char guid[24];
    std::snprintf(guid, sizeof guid, "0x%016llx", static_cast<unsigned long long>(o.guid));
    return OpenedPort{.port = std::move(*p),
                      .name = std::string("soft ") + guid + " via " + o.fabric.to_string(),
                      .device = "soft",
                      .verbs_unavailable = {}};
}

std::string verbs_name(const PortOptions& o) {
    return (o.device.empty() ? std::string("first HCA") : o.device) + " port " + std::to_string(o.port_num);
}

expected<OpenedPort, Error> open_memory(const PortOptions& o) {
    if (!o.memory) return unexpected(Error{Errc::invalid_argument, "a memory port needs its fabric"});
    auto port = o.memory->add_port({.port_guid = o.guid, .lid = o.lid});
    PortEvent programmed[8];
    (void)port->poll_events(programmed);  // the fabric's "SM programmed the port" events
    char guid[24];
    std::snprintf(guid, sizeof guid, "0x%016llx", static_cast<unsigned long long>(port->attributes().port_guid));
    return OpenedPort{.port = std::move(port), .name = std::string("memory ") + guid, .device = "memory",
                      .verbs_unavailable = {}};
}

}  // namespace

expected<OpenedPort, Error> open_port(const PortOptions& o) {
    if (o.kind == PortOptions::Kind::soft) return open_soft(o);
    if (o.kind == PortOptions::Kind::memory) return open_memory(o);
    auto verbs = open_verbs(o.device, o.port_num);
    if (verbs)
        return OpenedPort{.port = std::move(*verbs), .name = verbs_name(o), .device = o.device, .verbs_unavailable = {}};
    if (o.kind == PortOptions::Kind::verbs) return unexpected(verbs.error());
    auto soft = open_soft(o);
    if (soft) soft->verbs_unavailable = verbs.error().message();
    return soft;
}

bool wait_until_active(Port& port, std::chrono::milliseconds timeout, const std::function<void(PortEvent)>& on_event,
                       const std::function<bool()>& stop) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout;
    for (;;) {
        const PortAttributes a = port.attributes();
        if (a.state == PortState::active && a.sm_lid != 0) return true;
        if (Clock::now() >= deadline || (stop && stop())) return false;
        if (port.fd() >= 0) {
            pollfd pfd{.fd = port.fd(), .events = POLLIN, .revents = 0};
            ::poll(&pfd, 1, 20);
        }
        port.process();
        PortEvent events[8];
        for (std::size_t n = port.poll_events(events), i = 0; i < n; ++i)
            if (on_event) on_event(events[i]);
    }
}

}  // namespace ipoibd::transport
