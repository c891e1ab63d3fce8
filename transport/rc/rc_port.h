// RC queue pairs on a port that PortCore carries (the soft and in-memory
// backends): the engine (rc_qp.h) with its packets on the port's link in
// their wire form (rc_wire.h), connected to one remote port and QP.
//
// Inbound, PortCore takes an RC packet for one of these QPs when its DLID
// is the port's, its P_Key matches the QP's and its SLID is the connected
// remote port's (an RC QP talks to one peer; anything else is dropped and
// counted: rc_not_connected), and hands it to the engine. Outbound, the
// QP's packets leave after each post, each inbound packet and each
// PortCore::service_rc() (the backend calls it on every process(), so the
// engine's timers run at least as often as the port is processed: a soft
// port every link interval, 100 ms, when idle).
//
// The port's registered memory (one protection domain per port,
// Port::register_memory) is what WRITE and READ requests from a peer may
// reach, and where a READ's data may land.
//
// Verbs (verbs/verbs_rc.h) implements the same interface with an HCA's RC
// QP: the same work requests, completions and states, the engine's rules
// carried out by the hardware.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/expected.h"
#include "transport/rc/rc_qp.h"

namespace ipoibd::transport {

class RcQueuePair {
public:
    virtual ~RcQueuePair() = default;
    virtual std::uint32_t qpn() const = 0;
    // A new QP is in INIT, so receives may be posted before it connects
    // (their credits then go in its first, unsolicited ACK). connect():
    // INIT -> RTR -> RTS in one go, to `remote_lid`'s QP rtr.dest_qpn
    // (what rdma_connect and ibv_rc_pingpong do).
    virtual expected<void, std::string> connect(std::uint16_t remote_lid, const rc::RtrAttributes& rtr,
                                                const rc::RtsAttributes& rts) = 0;
    virtual expected<void, std::string> post_send(rc::SendWr wr) = 0;
    virtual expected<void, std::string> post_recv(rc::RecvWr wr) = 0;
    virtual std::vector<rc::Completion> poll() = 0;
    virtual rc::QpState state() const = 0;
    // What the QP counted: everything for the software engine; what the
    // backend can see otherwise (verbs: messages and completions).
    virtual rc::RcCounters counters() const = 0;
    // The software engine behind the QP (tests); nullptr on an HCA.
    virtual const rc::RcQp* engine() const { return nullptr; }
};

}  // namespace ipoibd::transport
