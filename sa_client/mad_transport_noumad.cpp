// open_umad_transport() of a build without libibumad (libibumad-dev).
#include "sa_client/mad_transport.h"

namespace ipoibd::sa {

bool umad_transport_built() { return false; }

expected<std::unique_ptr<MadTransport>, MadTransportError> open_umad_transport(const UmadTransportConfig&) {
    return unexpected(MadTransportError{MadTransportErrc::not_supported,
                                        "this build has no libibumad (install libibumad-dev and rebuild)"});
}

}  // namespace ipoibd::sa
