// The switch's management port 0: the SM on QP0 and the SA on QP1.
//
// SMP responses go to the SubnetManager. SA requests (LID-routed to the
// switch LID, QP1, Q_Key 0x80010000) go to the SaServer, whose answers are
// sent back to the requester's LID and QPN with the request's P_Key (and a
// GRH when the request had one). The SM's view of the ports feeds the SA;
// a lost port ends its memberships.
#pragma once

#include "fabric/sa/sa_server.h"
#include "fabric/sm.h"
#include "fabric/switch.h"
#include "transport/pma.h"

namespace ipoibd::fabric {

// What port 0's QP1 refuses or answers for nobody.
struct ManagementCounters {
    std::uint64_t sa_malformed = 0;  // to the SA: not a whole SubnAdm MAD, or the wrong Q_Key
    // Requests of a class port 0 does not serve (neither SubnAdm nor
    // PerfMgt) answered with MAD status 0x0004, class not supported.
    std::uint64_t class_not_supported_answers = 0;
    std::uint64_t class_not_supported_dropped = 0;  // of such a class, needing no answer: a Send, Trap or response
};
// As "sa_malformed", "class_not_supported_answers", "class_not_supported_dropped".
void visit(const ManagementCounters& c, CounterSink& out);

class FabricManagement final : public ManagementSink {
public:
    FabricManagement(Switch& sw, SubnetManager& sm, SaServer& sa);

    bool on_smp(const ib::Smp& smp, std::uint8_t in_port, std::uint16_t slid) override {
        return enabled_ && sm_.on_smp(smp, in_port, slid);
    }
    // Off (ibfabricd --sm=no): neither the SM nor the SA takes anything;
    // the switch counts what comes (management_no_agent).
    void set_enabled(bool enabled) { enabled_ = enabled; }
    bool on_packet(const ib::Packet& packet, bytes wire, std::uint8_t in_port) override;

    // The SM's ACTIVE ports as the SA sees them.
    static std::vector<SaPort> sa_ports(const SubnetManager& sm, std::uint64_t subnet_prefix,
                                        const std::vector<Partition>& partitions);

    std::uint64_t sa_malformed() const { return counters_.sa_malformed; }
    const ManagementCounters& counters() const { return counters_; }
    const transport::PmaCounters& pma_counters() const { return pma_.counters(); }

    // Time passes: SA report retries; sends what the SA has queued.
    void tick(Clock::time_point now);
    // Sends the SA's queued Reports.
    void flush();

private:
    Switch& switch_;
    SubnetManager& sm_;
    SaServer& sa_;
    void send_mad(const sa::SaMad& mad, std::uint16_t dlid, std::uint32_t dest_qp, std::uint16_t pkey,
                  std::uint8_t sl, const std::optional<ib::Grh>& grh);

    ManagementCounters counters_;
    bool enabled_ = true;
    // The switch's performance management agent: its ports' counters.
    transport::Pma pma_;
    // Sends a MAD port 0 answers a GMP request with back to its sender.
    void answer_gmp(const ib::Packet& request, bytes mad);
    Clock::time_point now_{};
};

// IBA rate code of a link: active width times active speed.
std::uint8_t link_rate_code(std::uint8_t link_width_active, std::uint8_t link_speed_active);

}  // namespace ipoibd::fabric
