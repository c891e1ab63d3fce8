// The reliable connected service (IBA 9.7), sans-I/O: one RC queue pair,
// requester and responder, with a clock passed in. It carries SEND and RDMA
// WRITE (first, middle, last, only; with immediate data) and RDMA READ
// against registered memory (MemoryRegions: R_Keys, bounds, access
// rights); the soft and verbs backends and the tools follow (issue 20).
// Atomics are left out (docs/rc.md).
//
// The owner moves packets: output() gives what the QP wants sent (in
// order), receive() takes what came for it, and tick() runs its timers by
// next_deadline(). Packets are RcPacket values (opcode, PSN, AckReq, AETH,
// immediate, payload); their wire form is the owner's (BTH/AETH codecs in
// transport/wire). On the port's path a payload is copied once each way:
// a posted SEND or WRITE becomes one buffer its packets are read from (the
// first time and at every retransmission) as output() hands them to a
// PacketSink, and receive() takes a payload where the port received it,
// copying it into the message or memory it is for.
//
// Requester (9.7.2-9.7.6):
//  - a SEND or WRITE becomes packets of at most the path MTU, PSNs modulo
//    2^24, AckReq on the last packet of each message and every
//    kAckReqEvery packets; a READ is one request that takes as many PSNs
//    as its responses; at most kMaxOutstanding packets unacknowledged;
//  - read responses, in order, fill the READ's buffer and acknowledge what
//    came before the READ (implied ACK); a gap in them retransmits from the
//    oldest unacknowledged request (a retry); a buffer whose region was
//    deregistered since the post takes nothing: the READ completes with
//    local protection error and the QP goes to ERR;
//  - an ACK acknowledges every packet up to its PSN (later ones imply the
//    earlier: coalesced ACKs), completing the messages it covers in order;
//    duplicate and ghost ACKs (PSNs not outstanding, or not yet sent: a
//    limited SEND's held packets) are discarded;
//  - NAK PSN sequence error: retransmit from that PSN (a retry); RNR NAK:
//    wait the RNR timer it names, then retransmit from its PSN (rnr_retry,
//    7 = infinite; another for the same PSN while waiting is a copy,
//    folded); NAK invalid request / remote access / remote
//    operational: the message completes with that error and the QP goes to
//    ERR;
//  - local ACK timeout (4.096 us x 2^timeout; 0: none) with nothing
//    acknowledged: retransmit from the oldest unacknowledged PSN, at most
//    retry_count times, then retry_exceeded and ERR;
//  - a retry's count: a timeout always takes one; a NAK or a read gap
//    takes one when no retry is on its way (no progress since one was
//    sent). While a retry a NAK or gap started is on its way, a NAK or gap
//    about packets sent before it sends nothing again: it most likely left
//    the responder before the retry's packets arrived, and a responder
//    NAKs a sequence error once (rc_retries_folded); one about a packet
//    first sent after it is news. After a timeout's retry, a NAK or gap
//    sends again without a count: the responder either lost what the
//    timeout sent again or spoke before it arrived (rc_retries_uncounted).
//    Progress, which reloads the count, is a read response the READ takes
//    or an ACK or NAK newer than any before (a response's implied ACK
//    included), also one for packets behind a READ still missing
//    responses: each retry counts against the request packets it was for
//    (C9-137, C9-142). Timeouts also count against the request at the
//    head alone, reloaded only when it is cleared or takes a response, so
//    a READ whose responses never come runs out however the packets
//    behind it fare.
// Responder (9.7.3-9.7.5):
//  - a packet with the expected PSN is executed: the opcode sequence
//    checked (a MIDDLE or LAST needs a FIRST before it, a FIRST or ONLY
//    needs none open), lengths checked (FIRST and MIDDLE carry exactly the
//    PMTU, LAST and ONLY at most; the message at most its receive buffer);
//    no receive buffer for a new message: RNR NAK with min_rnr_timer, the
//    expected PSN unchanged;
//  - a PSN ahead of the expected one: one NAK PSN sequence error per
//    sequence error (no more until the expected PSN arrives), every one
//    dropped and counted (out_of_sequence);
//  - a PSN behind it (within 2^23): a duplicate, not executed again, and
//    re-acknowledged with the current MSN; a duplicate READ is executed
//    again (9.7.5.1.4), its responses with its own PSNs, at most
//    max_dest_rd_atomic of them answered at once (more are dropped, never
//    NAKed);
//  - a READ's responses are built as output() sends them, at most
//    kMaxResponseBytes per call (the rest, and everything queued behind,
//    waits for the next: next_deadline() says now), from the memory as it
//    is then: a region deregistered meanwhile ends a new READ's responses
//    with a NAK remote access error (and ERR), a duplicate's silently. One
//    over kMaxMessage bytes is beyond the responder's resources (NAK
//    invalid request; a duplicate is dropped);
//  - WRITE and READ name memory by R_Key, address and length: a region
//    that does not exist, does not hold the whole range or lacks the right
//    (remote write, remote read) is a NAK remote access error; a WRITE
//    that carries more or less than its DMALen is an invalid request; a
//    WRITE with immediate data takes a receive buffer at its last packet
//    (RNR NAK when there is none);
//  - ACKs are sent for packets with AckReq (and NAKs at once), an ACK not
//    yet handed over replaced by one for the same or a later PSN
//    (coalesced, 9.7.5.1.2: the owner hands over after each batch of
//    packets); every ACK and read response carries the MSN and the
//    receive queue's end-to-end credits (9.7.7.2: Table 52's code of the
//    WQEs posted beyond the MSN), and an unsolicited ACK hands credits over
//    at RTR and when receives are posted to a requester told of none;
//  - requests the port found invalid beyond their headers (receive_invalid:
//    reserved or unsupported opcodes, PadCnt, lengths) and a new READ while
//    max_dest_rd_atomic are being answered are NAKed invalid request.
// End-to-end credits, requester side (9.7.7.2.4-5): the limit is the MSN
// plus its credits plus the messages since that take no receive WQE; a
// SEND beyond it goes one packet at a time with AckReq, a WRITE with
// immediate whole, each then waiting for an ACK (one the requester takes:
// a ghost ends no wait), and nothing starts behind it; a responder that says 0x1F lifts the limit for good. At most
// kMaxOutstanding messages go beyond the MSN (more wait: only a responder
// whose MSN lags its ACKs gets there). At most max_rd_atomic READs are
// outstanding.
// Errors move the QP to ERR: every posted work request completes with
// flushed.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <optional>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/byte_io.h"
#include "common/counters.h"
#include "common/expected.h"
#include "transport/wire/headers.h"
#include "transport/wire/opcodes.h"

namespace ipoibd::transport::rc {

using ib::Aeth;
namespace op = ib::op;

using Clock = std::chrono::steady_clock;

// SQD (send queue drain): new send work requests wait while what was
// started completes; the responder keeps working. There is no SQE here:
// IBA's Send Queue Error state is for unreliable QPs (UD, UC); an error on
// an RC send queue takes the whole QP to ERR.
enum class QpState : std::uint8_t { reset, init, rtr, rts, sqd, err };
const char* to_string(QpState s);

// The attributes the transitions take (ibv_modify_qp's): INIT needs
// nothing here; RTR the destination QPN, PMTU, the first PSN to receive
// and min_rnr_timer; RTS the first PSN to send, timeout, retry counts.
struct RtrAttributes {
    std::uint32_t dest_qpn = 0;
    std::uint32_t pmtu = 4096;     // bytes: 256..4096
    std::uint32_t rq_psn = 0;      // 24 bits
    std::uint8_t min_rnr_timer = 12;  // the RNR NAK's timer code (0.64 ms)
    // The receive queue generates end-to-end credits (C9-150.2.1: an HCA's
    // does, unless on an SRQ); false: every ACK says 0x1F.
    bool generate_credits = true;
    // READs this responder takes at once (responder resources, verbs'
    // max_dest_rd_atomic): a new READ while this many have responses yet
    // to leave is NAKed invalid request (C9-86).
    std::uint8_t max_dest_rd_atomic = 16;
};
struct RtsAttributes {
    std::uint32_t sq_psn = 0;       // 24 bits
    std::uint8_t timeout = 14;      // local ACK timeout 4.096 us x 2^14 = 67 ms; 0: none
    std::uint8_t retry_count = 7;   // 0-7
    std::uint8_t rnr_retry = 7;     // 0-7; 7: infinite
    // READs this requester has outstanding at most (initiator depth,
    // verbs' max_rd_atomic); at most the peer's max_dest_rd_atomic.
    std::uint8_t max_rd_atomic = 16;
};

// AETH syndromes (9.7.5.2).
namespace nak {
inline constexpr std::uint8_t psn_sequence_error = 0;
inline constexpr std::uint8_t invalid_request = 1;
inline constexpr std::uint8_t remote_access_error = 2;
inline constexpr std::uint8_t remote_operational_error = 3;
}  // namespace nak
inline constexpr std::uint8_t kNoCredits = 0x1F;  // ACK credit field: end-to-end flow control not used

// End-to-end credits (9.7.7.2, Table 52): the credits a 5-bit code means
// (0..30: 0, 1, 2, 3, 4, 6, 8, 12, ... 32768), and the code of the largest
// value at most `credits`. kNoCredits means none are generated.
std::uint32_t credits_of(std::uint8_t code);
std::uint8_t credit_code(std::size_t credits);

// The RNR timer of a code (IBA Table 45): 0 is 655.36 ms, 1..31 from
// 0.01 ms to 491.52 ms.
std::chrono::microseconds rnr_timer(std::uint8_t code);
// The local ACK timeout of a code: 4.096 us x 2^code; 0: none.
std::optional<std::chrono::microseconds> local_ack_timeout(std::uint8_t code);

// Access rights of a memory region (the verbs' IBV_ACCESS_*).
namespace access {
inline constexpr std::uint32_t local_write = 1;
inline constexpr std::uint32_t remote_write = 2;
inline constexpr std::uint32_t remote_read = 4;
}  // namespace access

struct MemoryRegion {
    std::uint64_t va = 0;  // the address a peer names: the memory's own address
    std::uint32_t length = 0;
    std::uint32_t rkey = 0;
    std::uint32_t access = 0;
    std::uint8_t* data = nullptr;
};

// A protection domain's registered memory. Each region's key (its R_Key,
// and its L_Key: one key here) is 32 random bits from getrandom(2), drawn
// again until no live region of the domain has it and it is not 0. A peer
// that knows one key learns nothing of another (keys in a sequence would
// give away their neighbours: other connections' buffers on the same
// port). Not the layout HCAs use (24 bits of table
// index, the low 8 bits the consumer's key part): 8 random bits are 1 guess
// in 256, and a peer that can reconnect may guess again; here a guess hits
// one of n live regions with a chance of n in 2^32. A deregistered key is
// refused at once; it comes back only if a later registration draws it
// again (2^-32 each).
class MemoryRegions {
public:
    MemoryRegions() = default;
    // The owner keeps `memory` alive until it deregisters it.
    MemoryRegion register_region(std::span<std::uint8_t> memory, std::uint32_t access_flags);
    bool deregister(std::uint32_t rkey);
    // The key (L_Key) of a region that holds `local` wholly and allows
    // `needed` (a READ's buffer, by its address: a scan, at post).
    std::optional<std::uint32_t> find_local(std::span<const std::uint8_t> local, std::uint32_t needed) const;
    // [va, va + length) of the region `rkey` names, if it lies wholly inside
    // and the region allows `needed`; nullopt otherwise.
    std::optional<std::span<std::uint8_t>> find(std::uint32_t rkey, std::uint64_t va, std::uint32_t length,
                                                std::uint32_t needed) const;
    std::size_t size() const { return regions_.size(); }
    // Regions deregistered so far: what was found before is still there
    // while this has not moved (a READ's buffer need not be looked up
    // again for each response).
    std::uint64_t deregistrations() const { return deregistrations_; }

private:
    // By key: one hash lookup per WRITE packet and READ request (the keys
    // are random, so they spread over the buckets as they are).
    std::unordered_map<std::uint32_t, MemoryRegion> regions_;
    std::uint64_t deregistrations_ = 0;
};

struct RcPacket {
    std::uint8_t opcode = 0;  // op::rc_*
    std::uint32_t dest_qp = 0;
    std::uint32_t psn = 0;
    bool ack_req = false;
    std::optional<ib::Reth> reth;      // WRITE first/only, READ request
    std::optional<Aeth> aeth;          // ACK, NAK, read responses first/last/only
    std::optional<std::uint32_t> imm;  // SEND ... with immediate
    std::vector<std::uint8_t> payload;
    bool operator==(const RcPacket&) const = default;
};

enum class Status : std::uint8_t {
    success,
    local_length_error,     // a message longer than its receive buffer (responder)
    retry_exceeded,         // no ACK after retry_count retransmissions
    rnr_retry_exceeded,     // RNR NAKs after rnr_retry retries
    remote_invalid_request, // NAK invalid request (opcode sequence, length)
    remote_access_error,
    remote_operational_error,
    flushed,                // the QP went to ERR before this request ran
    local_protection_error, // a READ's buffer no longer registered when its data came (at post: refused)
    local_error,            // verbs: any other failure the HCA reports (local QP operation, fatal, ...)
};
const char* to_string(Status s);

struct Completion {
    std::uint64_t wr_id = 0;
    bool receive = false;
    Status status = Status::success;
    std::uint32_t byte_len = 0;            // receive: the message's length
    std::optional<std::uint32_t> imm;      // receive: the immediate data
    std::vector<std::uint8_t> data;        // receive: the message
};

enum class WrOpcode : std::uint8_t { send, rdma_write, rdma_read };

struct SendWr {
    std::uint64_t wr_id = 0;
    std::vector<std::uint8_t> payload;     // SEND, WRITE
    std::optional<std::uint32_t> imm;      // SEND, WRITE
    WrOpcode opcode = WrOpcode::send;
    std::uint64_t remote_va = 0;           // WRITE, READ
    std::uint32_t rkey = 0;                // WRITE, READ
    std::span<std::uint8_t> read_into;     // READ: where the data goes, in a region registered for local write
};
struct RecvWr {
    std::uint64_t wr_id = 0;
    std::uint32_t capacity = 0;  // bytes
};

struct RcCounters {
    std::uint64_t packets_sent = 0;
    std::uint64_t retransmitted = 0;   // packets sent again
    std::uint64_t timeouts = 0;        // local ACK timeouts
    std::uint64_t naks_sent = 0;       // PSN sequence error NAKs
    std::uint64_t out_of_sequence = 0;  // requests ahead of the expected PSN: dropped (the first of each sequence error NAKed)
    std::uint64_t not_receiving = 0;    // packets for a QP that takes none (RESET, INIT, ERR; responses in RTR): dropped
    std::uint64_t naks_received = 0;
    std::uint64_t rnr_naks_sent = 0;
    std::uint64_t rnr_naks_received = 0;
    std::uint64_t duplicates = 0;      // requests with an old PSN (re-acknowledged)
    std::uint64_t ghost_acks = 0;      // ACKs for nothing outstanding
    std::uint64_t acks_coalesced = 0;  // ACKs replaced by a later one before they left (9.7.5.1.2)
    std::uint64_t unsolicited_acks = 0;  // sent to hand over credits (9.7.7.2.1)
    std::uint64_t limited_waits = 0;     // a message had no credit: sent limited, then waited for an ACK (9.7.7.2.5)
    std::uint64_t msn_stalls = 0;        // new messages waited: kMaxOutstanding started beyond the peer's MSN (an MSN lagging its ACKs, C9-148)
    std::uint64_t invalid_requests = 0;  // NAKed invalid request (sequence, length)
    std::uint64_t access_errors = 0;     // NAKed remote access error (R_Key, range, rights)
    std::uint64_t duplicate_reads = 0;   // READ requests executed again
    std::uint64_t read_gaps = 0;         // read responses missing: the READ sent again
    std::uint64_t retries_folded = 0;    // a NAK or read gap about packets sent before a retry one started, while it was on its way, or a copy of the RNR NAK being waited out: nothing sent again
    std::uint64_t retries_uncounted = 0;  // a NAK or read gap after a timeout's retry: sent again without a count
    std::uint64_t read_resources_exhausted = 0;  // a new READ over max_dest_rd_atomic, or over kMaxMessage bytes: NAKed (C9-86)
    std::uint64_t duplicate_reads_dropped = 0;   // a duplicate READ over max_dest_rd_atomic answered at once, over kMaxMessage bytes, or whose region went while it was answered: dropped (C9-115)
    std::uint64_t read_responses_deferred = 0;   // output() stopped at kMaxResponseBytes of read responses: the rest went at the next
    std::uint64_t messages_sent = 0;
    std::uint64_t messages_received = 0;
};
void visit(const RcCounters& c, CounterSink& out);

class RcQp {
public:
    static constexpr std::size_t kMaxOutstanding = 256;  // packets unacknowledged
    static constexpr std::size_t kAckReqEvery = 32;      // AckReq at least this often in a long message
    static constexpr std::size_t kMaxSendQueue = 1024;
    static constexpr std::size_t kMaxRecvQueue = 1024;
    static constexpr std::size_t kMaxMessage = 16u << 20;  // bytes per message posted, and per READ a peer asks for (IBA allows 2^31; memory here is copied)
    static constexpr std::size_t kMaxResponseBytes = 1u << 20;  // read response payload built per output()

    // `memory`: the protection domain WRITE and READ requests from the peer
    // may reach (none: every one is a remote access error).
    explicit RcQp(std::uint32_t qpn, const MemoryRegions* memory = nullptr) : qpn_(qpn), memory_(memory) {}

    std::uint32_t qpn() const { return qpn_; }
    QpState state() const { return state_; }
    // RESET -> INIT -> RTR -> RTS; any state -> ERR. A transition out of
    // order is refused (the state does not change).
    expected<void, std::string> to_init();
    expected<void, std::string> to_rtr(const RtrAttributes& a);
    // From RTR, or from SQD (then the send PSN carries on and only the
    // timeout and retry counts are taken from `a`).
    expected<void, std::string> to_rts(const RtsAttributes& a);
    // RTS -> SQD: no new message starts; drained() once every started one
    // has been acknowledged (verbs' IBV_EVENT_SQ_DRAINED).
    expected<void, std::string> to_sqd();
    bool drained() const { return state_ == QpState::sqd && unacked_.empty(); }
    void to_error();

    // Send requests need RTS or SQD (where they wait); receive requests INIT
    // or later.
    expected<void, std::string> post_send(SendWr wr);
    expected<void, std::string> post_recv(RecvWr wr);

    void receive(const RcPacket& p, Clock::time_point now);
    // The same with the payload apart (`header.payload` is ignored): the
    // port's receive buffer, read where it lies (what a SEND carries is
    // copied once, into its message).
    void receive(const RcPacket& header, bytes payload, Clock::time_point now);
    // A request packet for this QP that the port found invalid beyond its
    // headers (a reserved or unsupported opcode: atomics, SEND with
    // Invalidate; a bad PadCnt; a payload length the opcode does not allow):
    // at the expected PSN a NAK invalid request (C9-83 to C9-85, C9-93) and
    // ERR; ahead of it a sequence error; behind it, a duplicate, dropped.
    void receive_invalid(std::uint32_t psn, Clock::time_point now);
    // Hands the packets to send to `out`, in order (each only for the call:
    // the owner encodes it there and then, nothing copied); starts the timer
    // of what it hands over.
    class PacketSink {
    public:
        // `payload` is the packet's (`p.payload` is empty or the same).
        virtual void send(const RcPacket& p, bytes payload) = 0;

    protected:
        ~PacketSink() = default;
    };
    void output(PacketSink& out, Clock::time_point now);
    // The same, appended to `out` (copies: for tests and tools).
    void output(std::vector<RcPacket>& out, Clock::time_point now);
    void tick(Clock::time_point now);
    std::optional<Clock::time_point> next_deadline() const;
    std::vector<Completion> poll();

    const RcCounters& counters() const { return counters_; }
    std::uint32_t expected_psn() const { return epsn_; }
    std::uint32_t path_mtu() const { return rtr_.pmtu; }

private:
    struct Outstanding {
        RcPacket packet;  // SEND, WRITE: without its payload, which is
        std::shared_ptr<const std::vector<std::uint8_t>> message;  // [offset, offset + length) of the message's
        std::uint32_t offset = 0;
        std::uint32_t length = 0;
        std::uint64_t wr_id;
        bool last;  // the message's last packet (a READ: itself)
        // READ: the responses expected, those received in order, the buffer.
        std::uint32_t read_packets = 0;
        std::uint32_t read_received = 0;
        std::span<std::uint8_t> read_into;
        std::uint32_t read_lkey = 0;       // the region that holds read_into,
        std::uint64_t read_checked = 0;    // found there at this many deregistrations
        bool read_resent = false;  // sent again for a gap: later gaps wait for its responses
    };
    struct Queued {
        SendWr wr;
        std::uint32_t read_lkey = 0;     // READ: the region of its buffer, found at post
        std::uint64_t read_checked = 0;
    };
    // A READ being answered (responder): its responses are built as
    // output() sends them, from the region as it is then.
    struct ReadResponses {
        std::uint32_t psn = 0;      // the READ's: its first response's
        std::uint32_t packets = 0;  // responses in all
        std::uint32_t next = 0;     // responses built so far
        std::uint32_t rkey = 0;
        std::uint64_t va = 0;
        std::uint32_t length = 0;
        std::uint32_t msn = 0;      // what its responses carry
        bool duplicate = false;
        bytes source;               // the range read, found at this many deregistrations:
        std::uint64_t checked = 0;
    };
    enum class Built : std::uint8_t { all, budget_spent, region_gone };
    struct OpenReceive {  // a SEND or WRITE being received
        bool write = false;
        RecvWr wr;                       // SEND
        std::vector<std::uint8_t> data;  // SEND
        std::uint32_t rkey = 0;          // WRITE: the region, found again for every packet
        std::uint64_t va = 0;
        std::uint32_t length = 0;        // WRITE: DMALen
        std::size_t written = 0;         // WRITE
    };

    void responder(const RcPacket& p, bytes payload);
    void requester(const RcPacket& p);
    bool sending() const { return state_ == QpState::rts || state_ == QpState::sqd; }
    std::uint8_t credit_field() const;
    void take_credits(const Aeth& a);
    std::uint32_t limit_sequence() const;
    void release_limited(Clock::time_point now);
    void send_ack(std::uint8_t syndrome, std::uint32_t psn);
    void acknowledge_up_to(std::uint32_t psn);  // inclusive
    void retransmit_from_oldest();
    // What sends the oldest request again, and what it counts (see the
    // requester rules above).
    enum class RetryCause : std::uint8_t { timeout, nak, read_gap };
    // `psn`: the PSN the NAK names, the READ with the gap, the head.
    void retry(RetryCause cause, std::uint32_t psn);
    // The responder acknowledged up to `psn` (an ACK's PSN, a NAK's less
    // one): forward progress when it is newer than any before, even while
    // a READ before it waits for its responses (C9-137, C9-142: a retry
    // counts against the request packets it was for).
    void acknowledged(std::uint32_t psn);
    void progress();  // the retry counts reloaded
    void restart_ack_timer(Clock::time_point now);
    void complete_error(Status s);
    void segment(Queued& q);  // takes the payload
    void read_response(const RcPacket& p, bytes payload);
    // Queues the responses to a READ request (new or duplicate) carrying
    // `msn`; false when its memory check failed (a new one has been NAKed,
    // a duplicate dropped).
    bool execute_read(const RcPacket& p, bool duplicate, std::uint32_t msn);
    // Builds `r`'s next responses into `out` while `budget` (bytes) lasts.
    Built build_read_responses(ReadResponses& r, PacketSink& out, std::size_t& budget);
    // Moves ACKs, NAKs and read responses to `out`, in order.
    void output_responses(PacketSink& out, Clock::time_point now);
    void responder_error(std::uint8_t nak_code, std::uint32_t psn, Status receive_status);

    std::uint32_t qpn_;
    const MemoryRegions* memory_;
    QpState state_ = QpState::reset;
    RtrAttributes rtr_;
    RtsAttributes rts_;
    // requester
    std::deque<Queued> send_queue_;         // not yet segmented
    std::deque<Outstanding> unacked_;       // sent (or to send), oldest first
    std::size_t next_to_send_ = 0;          // index into unacked_ of the first not yet handed over
    std::uint32_t npsn_ = 0;                // next PSN to assign
    std::uint32_t sent_end_ = 0;            // the PSN after the newest handed over (a READ's responses included)
    std::optional<Clock::time_point> ack_deadline_;
    std::optional<Clock::time_point> rnr_until_;  // waiting out an RNR NAK
    std::uint32_t rnr_psn_ = 0;                   // the PSN it named
    unsigned retries_left_ = 0;
    unsigned rnr_retries_left_ = 0;
    std::uint32_t acked_psn_ = 0;  // the newest PSN the responder acknowledged
    std::uint32_t retry_end_ = 0;  // npsn_ when packets were last sent again
    unsigned head_timeouts_left_ = 0;  // timeouts the request at the head may still take
    // Sent again, no progress since: after a timeout, or after a NAK or a
    // gap in a READ's responses.
    enum class RetryUnderWay : std::uint8_t { none, after_timeout, after_response } retry_under_way_ = RetryUnderWay::none;
    std::size_t since_ack_req_ = 0;
    // End-to-end credits, requester side (9.7.7.2.4-5): unknown until the
    // first ACK, then credits (limited by LSN = MSN + credits + the
    // messages since the MSN that take no receive WQE) or none (0x1F).
    enum class Flow : std::uint8_t { unknown, credits, none } flow_ = Flow::unknown;
    std::uint32_t ssn_ = 0;          // SSN of the newest message started (24 bits, as the MSN)
    std::uint32_t peer_msn_ = 0;     // the newest MSN an ACK brought
    std::uint32_t peer_credits_ = 0;
    struct Started { std::uint32_t ssn; bool consumes; };
    std::deque<Started> started_;    // messages after peer_msn_: at most kMaxOutstanding
    bool msn_stalled_ = false;       // new messages wait for the MSN (counted once per stall)
    std::optional<std::uint32_t> limited_ssn_;   // a message sent limited, not yet acknowledged
    std::optional<std::uint32_t> hand_until_;    // packets from this PSN on wait (a limited SEND's rest)
    bool awaiting_ack_ = false;
    std::size_t reads_outstanding_ = 0;  // READs sent, not yet completed (initiator depth)
    std::size_t reads_answering_ = 0;             // new READs in to_send_ (responder resources)
    std::size_t duplicate_reads_answering_ = 0;   // duplicate READs in to_send_ (their own budget)
    // Responder side: credits the requester was last told of, less the
    // WQEs consumed since; posting a receive while it is 0 sends them.
    std::uint32_t advertised_ = 0;
    bool credit_update_ = false;
    // responder
    std::uint32_t epsn_ = 0;  // expected PSN
    std::uint32_t msn_ = 0;
    bool nak_sent_ = false;   // one NAK per sequence error
    std::deque<RecvWr> recv_queue_;
    std::optional<OpenReceive> open_;
    // ACKs, NAKs and READs being answered, in the order they go.
    std::deque<std::variant<RcPacket, ReadResponses>> to_send_;
    std::optional<Clock::time_point> responses_deferred_;  // output() left read responses to build
    std::vector<Completion> completions_;
    RcCounters counters_;
};

}  // namespace ipoibd::transport::rc
