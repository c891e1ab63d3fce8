#include "sa_client/mad_transport.h"

namespace ipoibd::sa {

const char* to_string(MadTransportErrc e) {
    switch (e) {
        case MadTransportErrc::no_sm: return "no subnet manager known";
        case MadTransportErrc::queue_full: return "send queue full";
        case MadTransportErrc::send_failed: return "send failed";
        case MadTransportErrc::not_supported: return "not supported";
        case MadTransportErrc::open_failed: return "could not open the MAD port";
    }
    return "unknown error";
}

std::string MadTransportError::message() const {
    std::string m = to_string(code);
    if (!detail.empty()) m += ": " + detail;
    return m;
}

}  // namespace ipoibd::sa
