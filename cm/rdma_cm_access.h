// The connection manager on an HCA, where the kernel's ib_cm owns class
// 0x07: librdmacm (rdma-core's RDMA CM) with AF_IB addresses, as a
// cm::CmAccess for connected mode's active side
// (../shared/reference/ipoib-cm.md sec. 6):
//
//  1. connect(): rdma_create_id(RDMA_PS_IB), rdma_resolve_addr() from our
//     port GID to the peer's (struct sockaddr_ib: P_Key, GID, and the
//     ServiceID 0x10..00 | the peer's UD QPN with a full mask),
//     rdma_resolve_route() (the kernel asks the SA for the path), then
//     rdma_connect() with our own RC QP (conn_param.qp_num: the QP is the
//     verbs backend's, not librdmacm's) and the 8-byte IPoIB private data;
//  2. RDMA_CM_EVENT_CONNECT_RESPONSE: rep_received, carrying the REP's
//     private data and what rdma_init_qp_attr() says for RTR and RTS (the
//     peer's QPN, its Starting PSN, the RNR retry count; our receive PSN and
//     the path MTU, which the kernel chose); the owner brings the QP to
//     RTS and calls establish(): rdma_establish() sends the RTU;
//  3. REJECTED (reason in `status`), UNREACHABLE, ADDR_ERROR, ROUTE_ERROR,
//     CONNECT_ERROR: rejected or timed_out, and the id goes; DISCONNECTED
//     (the peer's DREQ): rdma_disconnect() answers with the DREP,
//     disconnect_requested; TIMEWAIT_EXIT: timewait_exit, the id goes.
//
// What it cannot do: listen. librdmacm binds AF_IB ids only inside its own
// port spaces (0x0000_0000_013F..., 0x0106..., 0x0111...) and rdma-core has
// no userspace ib_cm any more, so a REQ for IPoIB's ServiceID reaches the
// kernel's ib_cm, which rejects it (REJ 8). listen() says so; connected
// mode then keeps flag 0x80 out of the interface's address, and peers
// reach it over UD (RFC 4755 lets a node accept unicast in every mode it
// supports).
//
// The event channel's fd is non-blocking; the owner calls process() when it
// is readable. Threading: one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <rdma/rdma_cma.h>

#include "cm/cm_access.h"
#include "common/counters.h"

namespace ipoibd::cm {

struct RdmaCmCounters {
    std::uint64_t connects = 0;
    std::uint64_t connect_responses = 0;
    std::uint64_t established = 0;
    std::uint64_t rejected = 0;
    std::uint64_t unreachable = 0;      // UNREACHABLE, ADDR_ERROR, ROUTE_ERROR, CONNECT_ERROR
    std::uint64_t disconnected = 0;     // DISCONNECTED (the peer's DREQ, or our own)
    std::uint64_t call_errors = 0;      // an rdma_* call failed
    std::uint64_t events = 0;
};
void visit(const RdmaCmCounters& c, CounterSink& out);

class RdmaCmAccess final : public CmAccess {
public:
    // An event channel, and a probe that AF_IB works (librdmacm binds an
    // AF_IB id at start-up; without kernel support it cannot): nullptr and
    // why not otherwise.
    static expected<std::unique_ptr<RdmaCmAccess>, std::string> open(std::uint64_t ca_guid);
    ~RdmaCmAccess() override;
    RdmaCmAccess(const RdmaCmAccess&) = delete;
    RdmaCmAccess& operator=(const RdmaCmAccess&) = delete;

    int fd() const { return channel_->fd; }
    // Reads and handles the events waiting (at most `max`).
    void process(Clock::time_point now, std::size_t max = 64);

    // CmAccess
    std::uint64_t ca_guid() const override { return ca_guid_; }
    expected<void, std::string> listen(std::uint64_t service_id, CmUser& user) override;
    void unlisten(std::uint64_t) override {}
    expected<ConnectionId, std::string> connect(const ConnectParams& p, CmUser& user, Clock::time_point now) override;
    expected<void, std::string> accept(ConnectionId id, const AcceptParams& p, Clock::time_point now) override;
    expected<void, std::string> reject(ConnectionId id, std::uint16_t reason, bytes ari, Clock::time_point now) override;
    expected<void, std::string> establish(ConnectionId id, Clock::time_point now) override;
    expected<void, std::string> disconnect(ConnectionId id, Clock::time_point now) override;
    void forget(CmUser& user) override;

    std::size_t connections() const { return conns_.size(); }
    const RdmaCmCounters& counters() const { return counters_; }

private:
    struct Conn {
        ConnectionId id = 0;
        rdma_cm_id* cm_id = nullptr;
        CmUser* user = nullptr;
        ConnectParams params;
        bool connected = false;  // rdma_connect() done: a DREQ or REJ is the way out
        bool closing = false;    // we disconnected: the rest is quiet
    };
    RdmaCmAccess(rdma_event_channel* channel, std::uint64_t ca_guid) : channel_(channel), ca_guid_(ca_guid) {}
    void handle(const rdma_cm_event& ev, Conn& c, Clock::time_point now);
    void deliver(Conn& c, Event e, Clock::time_point now);
    void destroy(ConnectionId id);
    Conn* find(ConnectionId id);

    rdma_event_channel* channel_;
    std::uint64_t ca_guid_;
    ConnectionId next_id_ = 1;
    std::map<ConnectionId, std::unique_ptr<Conn>> conns_;
    RdmaCmCounters counters_;
};

}  // namespace ipoibd::cm
