// The transport seam: an HCA port and its UD queue pairs.
//
// One narrow, batch-shaped interface with several implementations:
//   transport/memory/  in-process fabric for tests of the layers above
//   transport/soft/    the soft HCA port, IBA packets over UDP to ibfabricd
//   transport/verbs/   real HCAs through libibverbs
// Everything above the transport (SA client, IPoIB engine, daemon) sees only
// this header.
//
// Threading: a Port and its QPs belong to one thread (the event loop); no
// method is safe to call concurrently.
//
// Queue pair kinds. UD (IBA 9.8) carries IPoIB datagram mode, and QP1 (the
// GSI, a UD QP with a fixed Q_Key) carries MADs. RC (IBA 9.7) plugs in
// beside UdQp as a second QP class created by a second factory method,
// create_rc_qp(), with the same batch shape (post_send, post_receive, poll)
// plus the connection's state transitions (INIT, RTR, RTS with the remote
// QPN, PSNs, path and retry counts); every backend implements both or
// refuses RC with not_supported. Completions say which QP and which kind
// they belong to, so one poll loop can serve QPs of both kinds.
//
// Receive buffers look like hardware's: every buffer starts with a 40-byte
// GRH slot. A received packet's payload lands at offset 40; when the packet
// carried a GRH it is copied into the slot (Completion::grh_present), else
// the slot's contents are undefined. Completion::byte_len counts the slot,
// as verbs does: payload bytes = byte_len - 40.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/byte_io.h"
#include "common/counters.h"
#include "common/expected.h"
#include "common/secret.h"
#include "transport/rc/rc_port.h"
#include "transport/wire/headers.h"

namespace ipoibd::transport {

struct PortCounters;  // port_core.h

inline constexpr std::size_t kGrhSlotSize = ib::Grh::size;

// PortInfo PortState values (IBA 14.2.5.6).
enum class PortState : std::uint8_t { down = 1, init = 2, armed = 3, active = 4 };
const char* to_string(PortState s);

struct PortAttributes {
    PortState state = PortState::down;
    std::uint16_t lid = 0;
    std::uint8_t lmc = 0;
    std::uint16_t sm_lid = 0;
    std::uint8_t sm_sl = 0;
    std::uint64_t subnet_prefix = 0xFE80000000000000ULL;
    std::uint64_t port_guid = 0;
    std::uint64_t node_guid = 0;
    std::uint8_t port_num = 1;
    ib::Mtu active_mtu = ib::Mtu::mtu4096;
    std::vector<std::uint16_t> pkey_table{ib::kPKeyDefault};

    // GID index 0: subnet prefix + port GUID.
    ib::Gid gid() const;
    bool operator==(const PortAttributes&) const = default;
};

// Asynchronous port events, as verbs reports them (IBV_EVENT_PORT_ACTIVE ...).
enum class PortEvent : std::uint8_t {
    port_active,        // state became ACTIVE
    port_down,          // state left ACTIVE (link down, SM set it down)
    lid_change,         // LID or LMC changed
    pkey_change,        // P_Key table changed
    sm_change,          // SM LID or SL changed
    client_reregister,  // the SM asks clients to re-register with the SA
};
const char* to_string(PortEvent e);

// Where a UD send goes (an ibv_ah).
struct GrhAttributes {
    ib::Gid dgid{};
    std::uint32_t flow_label = 0;  // 20 bits
    std::uint8_t sgid_index = 0;
    std::uint8_t hop_limit = 0;
    std::uint8_t traffic_class = 0;
    bool operator==(const GrhAttributes&) const = default;
};

struct AddressHandle {
    std::uint16_t dlid = 0;
    std::uint8_t sl = 0;
    std::uint8_t src_path_bits = 0;
    std::optional<GrhAttributes> grh;  // required for multicast
    bool operator==(const AddressHandle&) const = default;
};

struct SendRequest {
    std::uint64_t wr_id = 0;
    AddressHandle ah;
    std::uint32_t remote_qpn = 0;   // 0xFFFFFF for multicast
    std::uint32_t remote_qkey = 0;  // high bit set: use the QP's own Q_Key
    bytes payload;                  // copied before post_send returns
    std::optional<std::uint32_t> immediate;
    bool solicited = false;
};

struct ReceiveBuffer {
    std::uint64_t wr_id = 0;
    mutable_bytes buffer;  // kGrhSlotSize + room for the payload; must outlive the completion
};

enum class CompletionKind : std::uint8_t { send, receive };

enum class QpType : std::uint8_t {
    ud,   // unreliable datagram, QP1 included
    rc,   // reliable connected (rc/rc_port.h)
};
const char* to_string(QpType t);

enum class CompletionStatus : std::uint8_t {
    success,
    local_length_error,  // send payload over the path MTU
    flushed,             // the QP was destroyed or moved to error with the request queued
    general_error,       // transmit failed in the backend (e.g. socket error)
};
const char* to_string(CompletionStatus s);

struct Completion {
    std::uint64_t wr_id = 0;
    CompletionKind kind = CompletionKind::receive;
    QpType qp_type = QpType::ud;  // the QP the work request was posted on
    std::uint32_t qp_num = 0;
    CompletionStatus status = CompletionStatus::success;
    std::uint32_t byte_len = 0;  // receives: GRH slot + payload
    std::uint32_t src_qp = 0;
    std::uint16_t slid = 0;
    std::uint8_t sl = 0;
    bool grh_present = false;
    std::uint16_t pkey_index = 0;
    std::optional<std::uint32_t> immediate;
};

enum class Errc : std::uint8_t {
    invalid_argument,    // malformed request (e.g. empty receive buffer)
    payload_too_long,    // send larger than the port's MTU
    queue_full,          // send or receive queue at its depth
    port_not_active,     // sends need an ACTIVE port
    bad_pkey_index,      // no such P_Key table entry
    resource_exhausted,  // QPNs, multicast attachments
    not_attached,        // detach of a group the QP is not attached to
    system_error,        // a syscall failed; see Error::sys_errno
    not_supported,
};

struct Error {
    Errc code = Errc::invalid_argument;
    std::string detail;  // "P_Key index 3 of a 1-entry table"
    int sys_errno = 0;
    std::string message() const;
};

struct UdQpConfig {
    std::uint32_t qkey = 0;
    std::uint16_t pkey_index = 0;
    std::uint32_t send_depth = 256;     // bounded send queue
    std::uint32_t receive_depth = 256;  // bounded receive queue
};

class UdQp {
public:
    virtual ~UdQp() = default;

    virtual std::uint32_t qpn() const = 0;
    virtual std::uint32_t qkey() const = 0;
    virtual std::uint16_t pkey() const = 0;
    // The P_Key table index the QP was made on (UdQpConfig::pkey_index).
    virtual std::uint16_t pkey_index() const = 0;

    // Queues sends in order. Returns how many of `requests` were accepted:
    // all of them, or fewer when the send queue filled (the rest may be
    // posted again after polling send completions). A request that can never
    // be sent (payload over the MTU, port not active) is refused with an
    // error when it is the first one; later ones stop the batch there.
    // Every accepted request yields exactly one send completion.
    virtual expected<std::size_t, Error> post_send(std::span<const SendRequest> requests) = 0;

    // Adds receive buffers in order; same partial-acceptance rule as sends.
    // A buffer is used for at most one packet and returned in exactly one
    // receive completion (success, or flushed when the QP goes away).
    virtual expected<std::size_t, Error> post_receive(std::span<const ReceiveBuffer> buffers) = 0;

    // Moves up to out.size() completions, oldest first, into `out`; returns
    // how many. Never blocks.
    virtual std::size_t poll(std::span<Completion> out) = 0;

    // Multicast membership of this QP: packets to `mlid` whose GRH DGID is
    // `mgid` are delivered to it. Joining the group at the SA is the
    // caller's business; this only programs the port.
    virtual expected<void, Error> attach_multicast(const ib::Gid& mgid, std::uint16_t mlid) = 0;
    virtual expected<void, Error> detach_multicast(const ib::Gid& mgid, std::uint16_t mlid) = 0;
};

// Counters of a send queue, written by its thread and read by the port's
// (relaxed atomics: each is exact, a set of them is not a snapshot).
struct SendQueueCounters {
    std::atomic<std::uint64_t> packets{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> refused{0};     // port not ACTIVE, payload over the MTU, multicast
    std::atomic<std::uint64_t> direct{0};      // soft port: straight to the peer (cut-through)
    std::atomic<std::uint64_t> via_switch{0};  // soft port: through the switch
    std::atomic<std::uint64_t> dropped{0};     // taken, but the socket's ring was full or the kernel refused it
    std::atomic<std::uint64_t> failed{0};      // verbs: what it sends with (its QP, an AH) could not be made
    void add(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) { c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
};
// As "packets", "bytes", "refused", "direct", "via_switch", "dropped", "failed".
void visit(const SendQueueCounters& c, CounterSink& out);

// The UD QP a send queue sends as: its QPN (the packets' source QPN), its
// Q_Key (for requests with the controlled bit) and its P_Key, with that
// P_Key's index in the port's table (an HCA's send queue takes the index).
struct SendAs {
    std::uint32_t qpn = 0;
    std::uint32_t qkey = 0;
    std::uint16_t pkey = 0;
    std::uint16_t pkey_index = 0;  // where the QP's P_Key is in the port's table
    bool operator==(const SendAs&) const = default;
};

// Another send queue of the port's UD QPs, for another thread (the
// daemon's data threads, [daemon] data-threads): created on the port's
// thread, then used by one other thread only. Its packets are those of the
// QP it is told to send as (source QPN, Q_Key, P_Key: peers see one
// sender), which the owner takes from the QP (its QPN changes when the QP
// is made again), but they leave from the queue's own send ring (soft
// port: on a dup() of the port's socket), with no completions: what could
// not be sent is counted. On an HCA the source QPN is the queue's own
// QP's (an HCA sends as the QP a request is posted on); Q_Key and P_Key
// are still those of the QP it sends as. Unicast only (the port's thread keeps multicast
// and its group state). Destroy it on the port's thread once its thread
// has stopped using it.
class UdSendQueue {
public:
    virtual ~UdSendQueue() = default;
    // Builds and queues the requests' packets as `as`; returns how many
    // were taken (a refused one is counted and skipped). wr_id is ignored.
    virtual std::size_t send(const SendAs& as, std::span<const SendRequest> requests) = 0;
    // Sends what send() queued; what the kernel would not take yet waits.
    virtual void flush() = 0;
    // Whether sends wait for the kernel (then flush() again when fd() is
    // writable); fd() is -1 where nothing ever waits.
    virtual bool pending() const { return false; }
    virtual int fd() const { return -1; }
    // Safe from the port's thread while the queue's thread runs.
    virtual const SendQueueCounters& counters() const = 0;
};

// Sees every packet a port sends (outbound = true) and every datagram it
// receives, before validation: for pcap captures.
using PacketTap = std::function<void(bytes packet, bool outbound)>;
// Told of what a port drops because of who sent it (a datagram from outside
// the fabric, a forged route hint): a short reason token and a sentence
// naming the source. The owner rate-limits it.
using PortDropLog = std::function<void(std::string_view reason, const std::string& message)>;

class Port {
public:
    virtual ~Port() = default;

    virtual PortAttributes attributes() const = 0;

    // Creates a UD QP in RTS on this port with the given Q_Key and P_Key
    // index. QPNs are never 0, 1 or 0xFFFFFF and are not reused while the
    // port lives.
    virtual expected<std::unique_ptr<UdQp>, Error> create_ud_qp(const UdQpConfig& config) = 0;

    // Moves up to out.size() pending port events into `out`; returns how many.
    virtual std::size_t poll_events(std::span<PortEvent> out) = 0;

    // A file descriptor that becomes readable when process() has work
    // (a datagram arrived, a completion or event is ready); -1 if the backend
    // needs no polling (the in-memory fabric).
    virtual int fd() const = 0;

    // Does the backend's pending I/O without blocking: receives and
    // dispatches what arrived, flushes queued sends. Call when fd() is
    // readable, and after posting sends.
    virtual void process() = 0;

    // Sends what post_send() queued and receives nothing: for an owner that
    // reaps its QPs before every process() (a process() may fill a receive
    // queue) and so must not receive at other points of its loop turn.
    // Backends that send at post_send() do their other pending work here.
    virtual void flush() { process(); }

    // Whether the owner must call process() (and poll its QPs) now and then
    // without fd() being readable: the in-memory fabric, which has no fd,
    // and backends that do not trust their fd alone (verbs, verbs_port.cpp).
    virtual bool needs_periodic_process() const { return fd() < 0; }

    // Creates QP1, the GSI (Q_Key 0x80010000, any P_Key of the table), for
    // a MAD path over this port; not_supported where the platform owns QP1
    // (verbs: the kernel's MAD layer, reached through libibumad).
    virtual expected<std::unique_ptr<UdQp>, Error> create_gsi_qp(std::uint32_t send_depth,
                                                                 std::uint32_t receive_depth);

    // Starts (or with an empty tap, stops) handing every packet to `tap`;
    // not_supported where the packets are not the backend's to see (verbs).
    virtual expected<void, Error> set_capture(PacketTap tap);
    // When a subnet manager last reached the port's SMA (its sweeps), on
    // the steady clock: ports whose SMA is ours (soft); nullopt on an HCA,
    // whose SMA is the kernel's, and before the first SMP.
    virtual std::optional<std::chrono::steady_clock::time_point> last_sm_contact() const { return std::nullopt; }
    // The port's own address on the underlay (a soft port's UDP address),
    // for `ipoibctl status`; "" for an HCA.
    virtual std::string underlay_address() const { return {}; }
    // The soft fabric's key (transport/soft/fabric_auth.h): a port of the
    // soft fabric seals and checks every datagram with it from now on;
    // calling it again rotates the keys. Others: not_supported.
    virtual expected<void, Error> set_fabric_keys(const FabricKeys& keys);
    // Where the port reports drops by source (PortDropLog); ports that
    // have none ignore it.
    virtual void set_drop_log(PortDropLog) {}

    // The backend's own counters (packets, drops by reason, its link), by
    // name; nothing for backends that keep none.
    virtual void visit_counters(CounterSink& out) const;

    // A send queue for another thread (UdSendQueue); not_supported where
    // the backend has none (memory). Verbs: a send-only UD QP of the
    // queue's own, so its packets carry that QP's number as their source
    // QPN (transport/verbs/verbs_send_queue.h).
    virtual expected<std::unique_ptr<UdSendQueue>, Error> create_send_queue();

    // The reliable service (rc/rc_port.h). An RC QP with the P_Key at
    // `pkey_index`; not_supported where the backend has none.
    virtual expected<std::unique_ptr<RcQueuePair>, Error> create_rc_qp(std::uint16_t pkey_index = 0);
    // Registers `memory` (kept alive by the owner until it deregisters it)
    // in the port's protection domain with rc::access rights: RDMA WRITE
    // and READ requests from a peer reach it by the region's R_Key and
    // address, and a READ's local buffer (SendWr::read_into) must lie in a
    // region registered with access::local_write.
    virtual expected<rc::MemoryRegion, Error> register_memory(std::span<std::uint8_t> memory, std::uint32_t access);
    virtual expected<void, Error> deregister_memory(std::uint32_t rkey);
    // When the port's RC QPs next need process() without fd() becoming
    // readable (their ACK and RNR timers); nullopt: no timer running.
    virtual std::optional<std::chrono::steady_clock::time_point> next_deadline() const { return std::nullopt; }
    // The packets the port moved and refused (port_core.h), for its
    // performance management agent (pma.h): backends built on PortCore;
    // null on an HCA, whose PMA is the adapter's.
    virtual const PortCounters* packet_counters() const { return nullptr; }
};

}  // namespace ipoibd::transport
