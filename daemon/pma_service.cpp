#include "daemon/pma_service.h"

#include "transport/port_core.h"

namespace ipoibd::daemon {

PmaService::PmaService(sa::MadAgent& agent, const transport::Port& port)
    : agent_(agent),
      pma_([&port](std::uint8_t port_select) -> std::optional<transport::Pma::Selected> {
          const transport::PortCounters* c = port.packet_counters();
          const std::uint8_t num = port.attributes().port_num;
          // PortSelect 0 names the only port of a CA too (perfquery LID sends it).
          if (!c || (port_select != 0 && port_select != num)) return std::nullopt;
          return transport::Pma::Selected{num, transport::pma_port_counters(*c)};
      }) {}

void PmaService::on_mad_from(bytes mad, const sa::MadAddress& from) {
    auto reply = pma_.handle(mad);
    if (!reply) return;
    if (from.lid == 0 || !agent_.send_to(*this, *reply, from)) ++send_errors_;
}

void PmaService::visit_counters(CounterSink& out) const {
    visit(pma_.counters(), out);
    out.counter("pma_send_errors", send_errors_);
}

}  // namespace ipoibd::daemon
