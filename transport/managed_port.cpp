#include "transport/managed_port.h"

namespace ipoibd::transport {

ManagedPort::ManagedPort(const SmaIdentity& identity, LinkSink& link)
    : link_(link), sma_(identity), core_(sma_.attributes(), link) {
    core_.set_smp_handler([this](const ib::Packet& p) { return handle_smp(p); });
}

void ManagedPort::apply(const SmaResult& result) {
    core_.replace_attributes(sma_.attributes());
    for (PortEvent e : result.events) {
        if (e == PortEvent::client_reregister) ++reregistrations_;
        core_.raise(e);
    }
}

bool ManagedPort::handle_smp(const ib::Packet& packet) {
    if (intercept_ && intercept_(packet)) return true;
    SmaResult result = sma_.handle(packet.payload, packet.lrh.slid, clock_());
    apply(result);
    if (result.trap) send_qp0(*result.trap);
    if (!result.response) return !result.drop.has_value();
    send_qp0(*result.response);
    return true;
}

std::optional<SmaResponse> ManagedPort::handle_local_smp(bytes mad) {
    const PortAttributes& a = core_.attributes();
    SmaResult result = sma_.handle(mad, a.lid != 0 ? a.lid : ib::kLidPermissive, clock_());
    apply(result);
    if (result.trap) send_qp0(*result.trap);
    return result.local_response;
}

// A GetResp or Trap goes out on VL15 from QP0 to QP0 (IBA 14.2.1).
void ManagedPort::send_qp0(const SmaResponse& mad) {
    const PortAttributes& a = core_.attributes();
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    const auto n = ib::build_qp0_packet(mad.mad, a.lid != 0 ? a.lid : ib::kLidPermissive, mad.dlid, out);
    if (!n) return;
    core_.transmit_raw(bytes(out).first(*n));
    link_.flush();
}

}  // namespace ipoibd::transport
