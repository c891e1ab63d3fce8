// PortCore: the behaviour of an HCA port and its UD queue pairs, with no I/O.
//
// The soft and in-memory backends are a PortCore plus a way to move bytes:
// the backend hands every datagram it receives to receive(), and PortCore
// hands every packet it sends to the backend's LinkSink. Everything between
// (packet validation, QP demultiplexing, P_Key/Q_Key checks, receive queues,
// completions, the GRH slot, multicast attachment, port events) lives here
// once and is tested without sockets.
//
// Inbound flow (receive):
//  1. parse_packet() against the port's MTU: malformed packets counted by
//     ib::DropReason
//  2. port state: INIT passes only QP0 SMPs; ARMED and ACTIVE pass all;
//     a packet straight from a peer (not via the switch) may not be an SMP
//     or multicast
//  3. QP0 (SMPs) go to the subnet management agent hook
//  4. unicast: DLID must be the port's LID range; multicast: QPs attached to
//     (MLID, GRH DGID); each target QP then:
//  5. UD opcode; P_Key matches the QP's (IBA 10.9.3); Q_Key equals the QP's
//  6. a receive buffer is posted and large enough (else a local length error
//     completion consumes it)
//  7. GRH (if any) into the 40-byte slot, payload after it, completion queued
// Each refusal in 2-6 is counted by DeliveryDrop.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "transport/port.h"
#include "transport/rc/rc_port.h"
#include "transport/wire/packet.h"

namespace ipoibd::transport {

enum class DeliveryDrop : std::uint8_t {
    port_not_ready,          // port DOWN/INIT and the packet is not an SMP
    dlid_not_ours,           // unicast DLID outside this port's LID range
    multicast_without_grh,   // multicast needs the GRH to name the group
    multicast_not_attached,  // no QP attached to (MLID, MGID)
    unknown_qp,              // no QP with the DestQP number
    opcode_not_for_qp,       // not a UD opcode
    pkey_mismatch,           // BTH P_Key does not match the QP's P_Key
    qkey_mismatch,           // DETH Q_Key differs from the QP's Q_Key
    no_receive_buffer,       // receive queue empty (UD: silently dropped)
    buffer_too_small,        // completed with local_length_error
    smp_not_handled,         // QP0 packet the subnet management agent refused
    not_via_switch,          // an SMP or multicast straight from a peer: only the switch sends those
    rc_not_connected,        // an RC packet from another port than the RC QP's peer
    rc_malformed,            // an RC response this core cannot take (an atomic ACK), or a missing header
    rc_invalid_request,      // an RC request NAKed invalid (reserved/unsupported opcode, PadCnt, length; C9-83..85, C9-93)
    count_
};
inline constexpr std::size_t kDeliveryDropCount = static_cast<std::size_t>(DeliveryDrop::count_);
const char* to_string(DeliveryDrop d);

struct PortCounters {
    std::uint64_t rx_packets = 0;  // delivered to at least one QP or the SMA
    std::uint64_t rx_bytes = 0;
    std::uint64_t tx_packets = 0;
    std::uint64_t tx_bytes = 0;
    std::uint64_t events_dropped = 0;  // event queue overflow
    std::array<std::uint64_t, ib::kDropReasonCount> malformed{};
    std::array<std::uint64_t, kDeliveryDropCount> undelivered{};
};
void visit(const PortCounters& c, CounterSink& out);

// Where a PortCore's outbound packets go (LRH through VCRC).
class LinkSink {
public:
    virtual ~LinkSink() = default;
    // Takes a packet; returns false when the link could not accept it (the
    // send completes with general_error).
    virtual bool transmit(bytes packet) = 0;
    // Called after a batch of transmit()s (the end of a post_send): a
    // batching backend sends what it holds.
    virtual void flush() {}
};

class PortCore {
public:
    // Subnet management agent hook for QP0: given a received SMP packet,
    // returns false when the SMA refused it. Installed by the backend.
    using SmpHandler = std::function<bool(const ib::Packet& packet)>;

    static constexpr std::size_t kMaxEvents = 64;
    static constexpr std::size_t kMaxMulticastAttachments = 4096;
    static constexpr std::size_t kMaxMemoryRegions = 4096;

    PortCore(PortAttributes initial, LinkSink& link);
    ~PortCore();
    PortCore(const PortCore&) = delete;
    PortCore& operator=(const PortCore&) = delete;

    const PortAttributes& attributes() const { return attributes_; }
    const PortCounters& counters() const { return counters_; }

    // Replaces the attributes and queues the events the change implies
    // (port_active/port_down, lid_change, sm_change, pkey_change).
    void set_attributes(const PortAttributes& next);
    // Replaces the attributes without raising events: for a backend whose
    // subnet management agent reports the events itself (raise()).
    void replace_attributes(const PortAttributes& next) { attributes_ = next; }
    // Queues an event that no attribute diff shows (client_reregister).
    void raise(PortEvent e);
    std::size_t poll_events(std::span<PortEvent> out);

    void set_smp_handler(SmpHandler handler) { smp_handler_ = std::move(handler); }

    // Sees every packet the port sends (outbound = true) and every datagram
    // it receives, before validation (for captures); empty: none.
    void set_tap(PacketTap tap) { tap_ = std::move(tap); }

    // One datagram from the link. via_switch false: it came straight from
    // a peer (soft fabric cut-through), which may send unicast data only.
    void receive(bytes datagram, bool via_switch = true);

    // Sends a raw packet built by the caller (SMA responses) and counts it.
    bool transmit_raw(bytes packet);

    // QPs live no longer than their PortCore.
    expected<std::unique_ptr<UdQp>, Error> create_ud_qp(const UdQpConfig& config);
    // QP1, the GSI: Q_Key 0x80010000; accepts any P_Key in the port's table
    // and reports its index. At most one at a time.
    expected<std::unique_ptr<UdQp>, Error> create_gsi_qp(std::uint32_t send_depth, std::uint32_t receive_depth);

    // An RC QP on this port (rc/rc_port.h), with the P_Key at `pkey_index`.
    expected<std::unique_ptr<RcQueuePair>, Error> create_rc_qp(std::uint16_t pkey_index = 0);
    // The memory peers' WRITE and READ requests may reach.
    rc::MemoryRegions& memory_regions() { return memory_; }
    expected<rc::MemoryRegion, Error> register_memory(std::span<std::uint8_t> memory, std::uint32_t access);
    expected<void, Error> deregister_memory(std::uint32_t rkey);
    // Runs the RC QPs' timers and sends what they have: the backend calls
    // it on every process().
    void service_rc(std::chrono::steady_clock::time_point now);
    // The earliest timer of the RC QPs.
    std::optional<std::chrono::steady_clock::time_point> next_rc_deadline() const;

private:
    struct Qp;
    class QpHandle;
    struct Attachment {
        std::uint16_t mlid;
        ib::Gid mgid;
        Qp* qp;
    };

    struct RcEntry;
    class RcHandle;
    expected<std::unique_ptr<UdQp>, Error> make_qp(std::uint32_t qpn, const UdQpConfig& config, bool gsi);
    void receive_rc(const ib::Packet& pkt, std::chrono::steady_clock::time_point now);
    void invalid_rc_request(bytes datagram, ib::DropReason why);
    void send_rc(RcEntry& e, std::chrono::steady_clock::time_point now);
    void destroy(Qp* qp);
    bool deliver(const ib::Packet& pkt, bytes datagram, Qp& qp);
    void count(DeliveryDrop d) { ++counters_.undelivered[static_cast<std::size_t>(d)]; }
    bool lid_is_ours(std::uint16_t dlid) const;
    std::optional<std::size_t> pkey_index_matching(std::uint16_t pkey) const;
    expected<std::size_t, Error> send(Qp& qp, std::span<const SendRequest> requests);

    PortAttributes attributes_;
    LinkSink& link_;
    PortCounters counters_;
    std::deque<PortEvent> events_;
    SmpHandler smp_handler_;
    PacketTap tap_;
    std::map<std::uint32_t, std::unique_ptr<Qp>> qps_;
    std::vector<Attachment> attachments_;
    // The first dynamic QPN: 0x48 plus a random offset, so that a process
    // that restarts gets other QPNs, as on hardware where the kernel and
    // other processes take QPNs too (RFC 4391 9.4: QPNs are not stable).
    std::uint32_t next_qpn_ = 0x48;
    std::vector<std::uint8_t> tx_buffer_;
    rc::MemoryRegions memory_;
    std::map<std::uint32_t, RcEntry*> rc_qps_;  // by QPN; the entries belong to their handles
    std::vector<std::uint8_t> rc_wire_;  // the RC packet being sent (send_rc), its capacity reused
};

}  // namespace ipoibd::transport
