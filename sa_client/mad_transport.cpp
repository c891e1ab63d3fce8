#include "sa_client/mad_transport.h"

#include "sa_client/mad_transport_soft.h"

namespace ipoibd::sa {

void visit(const MadTransportCounters& c, CounterSink& out) {
    out.counter("mad_sent", c.sent);
    out.counter("mad_send_errors", c.send_errors);
    out.counter("mad_received", c.received);
    out.counter("mad_receive_errors", c.receive_errors);
    out.counter("mad_short_received", c.short_received);
    out.counter("mad_dropped", c.dropped);
}

std::size_t MadTransport::receive_from(const SourcedMadCallback& on_mad, std::size_t max) {
    return receive([&](bytes mad) { on_mad(mad, MadAddress{}); }, max);
}

expected<void, MadTransportError> MadTransport::send_to(bytes, const MadAddress&) {
    return unexpected(MadTransportError{MadTransportErrc::not_supported, "this MAD path reaches the SM only"});
}

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

expected<std::unique_ptr<MadTransport>, MadTransportError> open_mad_path(transport::Port& port,
                                                                         const MadPathOptions& o) {
    auto gsi = port.create_gsi_qp(64, 64);
    if (gsi) {
        auto soft = SoftMadTransport::open(port, std::move(*gsi), {.process_port = o.process_port});
        if (!soft) return unexpected(soft.error());
        return std::unique_ptr<MadTransport>(std::move(*soft));
    }
    if (gsi.error().code != transport::Errc::not_supported)
        return unexpected(MadTransportError{MadTransportErrc::open_failed, "could not create QP1: " + gsi.error().message()});
    UmadTransportConfig u;
    u.ca = o.ca;
    u.port_num = o.port_num;
    return open_umad_transport(u);
}

}  // namespace ipoibd::sa
