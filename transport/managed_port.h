// A port that a subnet manager programs: PortCore plus the port's subnet
// management agent, wired together.
//
//  - SMPs arriving on QP0 go to the SMA; its GetResp (and a Trap 256 for an
//    M_Key violation) goes out on VL15 from QP0, through the same link;
//  - every change the SMA makes (LID, SM LID, P_Keys, state, MTU) reaches
//    the PortCore, and the SMA's events are raised on it in the SMA's order;
//  - the backend reports the physical link with link_up()/link_down().
// The soft backend is a ManagedPort plus UDP; engine tests drive one with a
// switch and SM in memory.
#pragma once

#include <functional>

#include "transport/port_core.h"
#include "transport/sma.h"

namespace ipoibd::transport {

class ManagedPort {
public:
    ManagedPort(const SmaIdentity& identity, LinkSink& link);
    ManagedPort(const ManagedPort&) = delete;
    ManagedPort& operator=(const ManagedPort&) = delete;

    PortCore& core() { return core_; }
    const PortCore& core() const { return core_; }
    const Sma& sma() const { return sma_; }

    // What runs the SMA's M_Key lease: the steady clock, or a test's fake.
    using Clock = Sma::Clock;
    void set_clock(std::function<Clock::time_point()> clock) { clock_ = std::move(clock); }

    // Sees every QP0 packet before the SMA: returns true when it took the
    // packet (an SMP response for a management application on this node,
    // an SMInfo request for its SM), false to leave it to the SMA.
    using SmpIntercept = std::function<bool(const ib::Packet& packet)>;
    void set_smp_intercept(SmpIntercept intercept) { intercept_ = std::move(intercept); }
    // A directed-route SMP of HopCount 0 from a management application on
    // this node, already past its requester's hop rule (HopPointer 1): the
    // SMA answers it in place; the response, if any, is returned (the SMA
    // must have set_local_sm). Events and traps apply as for any SMP.
    std::optional<SmaResponse> handle_local_smp(bytes mad);
    void set_local_sm(bool present) { sma_.set_local_sm(present); }
    void set_is_sm(bool is_sm) { sma_.set_is_sm(is_sm); }

    void link_up() { apply(sma_.link_up()); }
    void link_down() { apply(sma_.link_down()); }

    // How many times an SM asked for a client re-register (PortInfo
    // ClientReregister): a new or restarted SM, whose subnet state may
    // differ from what the port learnt before.
    std::uint64_t reregistrations() const { return reregistrations_; }
    // When the SM last reached the port's SMA (Port::last_sm_contact).
    std::optional<Clock::time_point> last_sm_contact() const { return sma_.last_request(); }

private:
    bool handle_smp(const ib::Packet& packet);
    void send_qp0(const SmaResponse& mad);
    void apply(const SmaResult& result);

    LinkSink& link_;
    SmpIntercept intercept_;
    Sma sma_;  // before core_: the core starts from the SMA's attributes
    PortCore core_;
    std::uint64_t reregistrations_ = 0;
    std::function<Clock::time_point()> clock_ = [] { return Clock::now(); };
};

}  // namespace ipoibd::transport
