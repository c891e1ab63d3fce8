// The node's connection manager: the CM engine (cm/cm_engine.h) as a
// client of the port's QP1 MAD agent (class 0x07, version 2, method Send),
// answering peers by the address their MADs came from, and shared by the
// node's interfaces (cm/cm_access.h): each interface in connected mode
// listens on its ServiceID; a REQ goes to the user listening on its
// ServiceID, every other event to the user that owns the connection (the
// one that connected, or was handed its REQ). A REQ for a ServiceID nobody
// listens on is rejected with reason 8 (no listener), DREQs get their DREP,
// LAPs an APR "unsupported": a peer probing this node learns the truth
// rather than timing out.
//
// The owner calls tick() at next_deadline(); received MADs come through
// the agent. Sends the path refuses are counted (send_errors). A
// connection's user is forgotten when the connection ends, even when the
// engine dropped the event that said so (its queue full).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "cm/cm_access.h"
#include "cm/cm_engine.h"
#include "common/counters.h"
#include "sa_client/mad_agent.h"

namespace ipoibd::daemon {

class CmService final : public sa::MadClient, public cm::CmAccess {
public:
    CmService(sa::MadAgent& agent, cm::CmEngine::Config config, std::uint64_t seed);

    void on_mad(bytes mad) override { on_mad_from(mad, {}); }
    void on_mad_from(bytes mad, const sa::MadAddress& from) override;
    void tick(cm::Clock::time_point now);
    std::optional<cm::Clock::time_point> next_deadline() const { return engine_.next_deadline(); }

    // cm::CmAccess
    std::uint64_t ca_guid() const override { return ca_guid_; }
    expected<void, std::string> listen(std::uint64_t service_id, cm::CmUser& user) override;
    void unlisten(std::uint64_t service_id) override;
    expected<cm::ConnectionId, std::string> connect(const cm::ConnectParams& p, cm::CmUser& user,
                                                    cm::Clock::time_point now) override;
    expected<void, std::string> accept(cm::ConnectionId id, const cm::AcceptParams& p,
                                       cm::Clock::time_point now) override;
    expected<void, std::string> reject(cm::ConnectionId id, std::uint16_t reason, bytes ari,
                                       cm::Clock::time_point now) override;
    expected<void, std::string> establish(cm::ConnectionId id, cm::Clock::time_point now) override;
    expected<void, std::string> disconnect(cm::ConnectionId id, cm::Clock::time_point now) override;
    void forget(cm::CmUser& user) override;

    cm::CmEngine& engine() { return engine_; }
    // Connections with a user to hand their events to.
    std::size_t owned() const { return owners_.size(); }
    void visit_counters(CounterSink& out) const;

private:
    // Sends what the engine made and hands its events to their users.
    void flush(cm::Clock::time_point now);
    void send_output();
    template <class R>
    R after(R r, cm::Clock::time_point now) {
        flush(now);
        return r;
    }

    sa::MadAgent& agent_;
    cm::CmEngine engine_;
    std::uint64_t ca_guid_;
    std::map<std::uint64_t, cm::CmUser*> listeners_;       // by ServiceID
    std::map<cm::ConnectionId, cm::CmUser*> owners_;       // by our communication ID
    bool dispatching_ = false;
    std::uint64_t drops_swept_ = 0;  // the engine's events_dropped at the last sweep of owners_
    std::uint64_t send_errors_ = 0;
    std::uint64_t events_unhandled_ = 0;  // events of connections no user owns (any more)
};

}  // namespace ipoibd::daemon
