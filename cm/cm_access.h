// The node's connection manager as its users see it: an interface's
// connected mode listens on its ServiceID, opens connections and answers
// REQs through this, and hears about its own connections only
// (daemon/cm_service.h dispatches the engine's events: a REQ by its
// ServiceID, everything else by the connection's ID). Calls take effect at
// once: the MADs they make leave before they return.
#pragma once

#include <cstdint>
#include <string>

#include "cm/cm_engine.h"
#include "common/byte_io.h"
#include "common/expected.h"

namespace ipoibd::cm {

class CmUser {
public:
    virtual ~CmUser() = default;
    // A REQ for a ServiceID this user listens on, or an event of a
    // connection it opened or was handed. Calls back into CmAccess are
    // allowed.
    virtual void cm_event(const Event& e, Clock::time_point now) = 0;
};

class CmAccess {
public:
    virtual ~CmAccess() = default;
    // The Local CA GUID our REQs and REPs carry.
    virtual std::uint64_t ca_guid() const = 0;
    // Fails when another user holds the ServiceID.
    virtual expected<void, std::string> listen(std::uint64_t service_id, CmUser& user) = 0;
    virtual void unlisten(std::uint64_t service_id) = 0;
    virtual expected<ConnectionId, std::string> connect(const ConnectParams& p, CmUser& user, Clock::time_point now) = 0;
    virtual expected<void, std::string> accept(ConnectionId id, const AcceptParams& p, Clock::time_point now) = 0;
    // `ari`: the REJ's Additional Rejection Information (at most 72 bytes).
    virtual expected<void, std::string> reject(ConnectionId id, std::uint16_t reason, bytes ari,
                                               Clock::time_point now) = 0;
    virtual expected<void, std::string> establish(ConnectionId id, Clock::time_point now) = 0;
    virtual expected<void, std::string> disconnect(ConnectionId id, Clock::time_point now) = 0;
    // The user goes away: its ServiceIDs are released and its connections'
    // events dropped (the connections themselves run their course).
    virtual void forget(CmUser& user) = 0;
};

}  // namespace ipoibd::cm
