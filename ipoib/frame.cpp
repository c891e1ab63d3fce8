#include "ipoib/frame.h"

#include <cstring>

namespace ipoibd::ipoib {

const char* to_string(EtherType t) {
    switch (t) {
        case EtherType::ipv4: return "ipv4";
        case EtherType::arp: return "arp";
        case EtherType::rarp: return "rarp";
        case EtherType::ipv6: return "ipv6";
    }
    return "unknown";
}

const char* to_string(FrameError e) {
    switch (e) {
        case FrameError::truncated: return "truncated";
        case FrameError::other_ether_type: return "other_ether_type";
        case FrameError::short_buffer: return "short_buffer";
        case FrameError::count_: break;
    }
    return "unknown";
}

expected<Frame, FrameError> decapsulate(bytes received) {
    if (received.size() < EncapHeader::size) return unexpected(FrameError::truncated);
    const EncapHeader h = EncapHeader::read_from(received.data());
    if (!is_ipoib_ether_type(h.type)) return unexpected(FrameError::other_ether_type);
    return Frame{static_cast<EtherType>(h.type), h.reserved, received.subspan(EncapHeader::size)};
}

expected<std::size_t, FrameError> write_encap_header(EtherType type, mutable_bytes out) {
    if (out.size() < EncapHeader::size) return unexpected(FrameError::short_buffer);
    EncapHeader{static_cast<std::uint16_t>(type), 0}.write_to(out.data());
    return EncapHeader::size;
}

expected<std::size_t, FrameError> encapsulate(EtherType type, bytes payload, mutable_bytes out) {
    if (out.size() < EncapHeader::size || out.size() - EncapHeader::size < payload.size())
        return unexpected(FrameError::short_buffer);
    // memmove: the payload may already sit at out[4..] (built in place).
    if (!payload.empty()) std::memmove(out.data() + EncapHeader::size, payload.data(), payload.size());
    EncapHeader{static_cast<std::uint16_t>(type), 0}.write_to(out.data());
    return EncapHeader::size + payload.size();
}

}  // namespace ipoibd::ipoib
