// The QP1 MAD agent: one per port, owning the port's MAD path (a
// MadTransport: QP1 and its receive buffers on the soft and in-memory
// fabrics, a libibumad port on HCAs) and sharing it among clients, as the
// kernel's ib_mad shares QP1 among its agents. Clients today: the SA client
// of each interface (SubnAdm); next: the connection manager (class 0x07).
//
// 1. register_client(): a client names its management class and version
//    and the methods it takes unsolicited (an SA Report, a CM REQ); the
//    path is told of a class it does not carry yet (umad: one more
//    umad_register).
// 2. send(): a client's MAD goes out on the path; a request's management
//    class and transaction ID (its low 32 bits: the kernel and libumad2sim
//    rewrite the high ones) are remembered for that client, in a bounded
//    table.
// 3. receive(): every MAD the path has is dispatched, in order:
//      a response (R bit) to the client whose request had its class and
//      TID; a single-MAD response completes the request and frees its
//      entry, RMPP segments keep it (more follow, and the client's ACKs
//      carry the TID again);
//      anything else to the clients of its class that take its method;
//    what no client claims is dropped and counted by reason.
//
// Threading: one thread, like the path.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/byte_io.h"
#include "common/counters.h"
#include "common/expected.h"
#include "sa_client/mad_transport.h"
#include "sa_client/sa_mad.h"

namespace ipoibd::sa {

class MadClient {
public:
    virtual ~MadClient() = default;
    // One MAD for this client: a response to one of its requests, or an
    // unsolicited MAD of its class and methods.
    virtual void on_mad(bytes mad) = 0;
    // The same with the sender (MadTransport::receive_from): clients that
    // answer peers (the CM) take this one.
    virtual void on_mad_from(bytes mad, const MadAddress& from) {
        (void)from;
        on_mad(mad);
    }
};

struct MadAgentCounters {
    std::uint64_t dispatched = 0;          // MADs handed to a client
    std::uint64_t unmatched_response = 0;  // a response to no request of any client (late, foreign)
    std::uint64_t unclaimed_class = 0;     // a request or trap of a class no client registered
    std::uint64_t class_not_supported_sent = 0;  // of those, Get/Set and other requests answered "class not supported"
    std::uint64_t unclaimed_method = 0;    // of a registered class, a method no client takes
    std::uint64_t too_short = 0;           // shorter than a MAD header
    std::uint64_t requests_forgotten = 0;  // outstanding requests pushed out of the bounded table
    std::uint64_t response_wrong_source = 0;  // a response with a request's TID from a LID the request did not go to: dropped, the request kept
};
void visit(const MadAgentCounters& c, CounterSink& out);

class MadAgent {
public:
    // TIDs remembered at once; the oldest goes first (a request that old has
    // long been retried or given up by its client).
    static constexpr std::size_t kMaxOutstanding = 4096;

    explicit MadAgent(std::unique_ptr<MadTransport> path);

    // A client of `mgmt_class` (version `class_version`) that also takes the
    // unsolicited MADs whose method is in `methods` (responses to its own
    // requests always reach it). Fails when the path cannot carry the class.
    expected<void, MadTransportError> register_client(MadClient& client, std::uint8_t mgmt_class,
                                                      std::uint8_t class_version,
                                                      std::vector<std::uint8_t> methods = {});
    // Forgets `client` and its outstanding requests.
    void unregister_client(MadClient& client);

    // Sends `mad` for `client` (SA MADs go to the SM's QP1).
    expected<void, MadTransportError> send(MadClient& client, const SaMad& mad);
    // Sends a whole MAD for `client` to QP1 of `to` (a peer, not the SM):
    // no request bookkeeping (the CM's Sends expect no responses).
    expected<void, MadTransportError> send_to(MadClient& client, bytes mad, const MadAddress& to);
    // Dispatches up to `max` received MADs; returns how many were read.
    std::size_t receive(std::size_t max = 64);
    // Requests whose responses the agent still waits for.
    std::size_t outstanding() const { return outstanding_.size(); }
    // Records of the order requests were sent in (stale ones included): at
    // most twice kMaxOutstanding.
    std::size_t order_records() const { return outstanding_order_.size(); }

    MadTransport& path() { return *path_; }
    const MadTransport& path() const { return *path_; }
    const MadAgentCounters& counters() const { return counters_; }

private:
    struct Registration {
        MadClient* client = nullptr;
        std::uint8_t mgmt_class = 0;
        std::vector<std::uint8_t> methods;
    };
    // (management class, TID low 32 bits)
    static std::uint64_t key(std::uint8_t mgmt_class, std::uint64_t tid) {
        return (std::uint64_t{mgmt_class} << 32) | (tid & 0xFFFFFFFFu);
    }
    struct Outstanding {
        MadClient* client = nullptr;
        std::uint64_t generation = 0;  // which entry of outstanding_order_ is this one's
        std::uint16_t lid = 0;         // where the request went (the SM's LID); 0: unknown
    };
    void dispatch(bytes mad, const MadAddress& from);
    void remember(std::uint64_t k, MadClient& client, std::uint16_t lid);
    bool registered(const MadClient* client) const;

    std::unique_ptr<MadTransport> path_;
    std::vector<Registration> clients_;
    std::vector<std::pair<std::uint8_t, std::uint8_t>> classes_;  // (class, version) the path carries
    std::unordered_map<std::uint64_t, Outstanding> outstanding_;  // by key()
    std::deque<std::pair<std::uint64_t, std::uint64_t>> outstanding_order_;  // (key, generation), oldest first
    std::uint64_t next_generation_ = 1;
    MadAgentCounters counters_;
};

}  // namespace ipoibd::sa
