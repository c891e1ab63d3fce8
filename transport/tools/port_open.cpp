#include "transport/tools/port_open.h"

#include "transport/soft/soft_port.h"

namespace ipoibd::transport {

expected<std::unique_ptr<Port>, Error> open_port(const PortOpenOptions& o) {
    if (o.kind == PortOpenOptions::Kind::verbs) return open_verbs(o.device, o.port_num);
    SoftPortConfig c;
    c.fabric = o.fabric;
    c.port_guid = o.guid;
    c.node_description = o.node_description;
    auto p = SoftPort::open(c);
    if (!p) return unexpected(p.error());
    return std::unique_ptr<Port>(std::move(*p));
}

}  // namespace ipoibd::transport
