// Built when libibverbs was found.
#include "transport/port_factory.h"
#include "transport/verbs/verbs_port.h"

namespace ipoibd::transport {

expected<std::unique_ptr<Port>, Error> open_verbs(const std::string& device, unsigned port_num) {
    if (port_num == 0 || port_num > 255) return unexpected(Error{Errc::invalid_argument, "port number must be 1..255"});
    return open_verbs_port(device, static_cast<std::uint8_t>(port_num));
}

}  // namespace ipoibd::transport
