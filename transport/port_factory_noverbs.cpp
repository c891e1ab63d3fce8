// Built when libibverbs was not found.
#include "transport/port_factory.h"

namespace ipoibd::transport {

expected<std::unique_ptr<Port>, Error> open_verbs(const std::string&, unsigned) {
    return unexpected(Error{Errc::not_supported, "this build has no verbs backend (libibverbs was not found)"});
}

}  // namespace ipoibd::transport
