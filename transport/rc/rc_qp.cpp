// One RC queue pair; the rules are at the top of rc_qp.h.
#include "transport/rc/rc_qp.h"

#include <algorithm>
#include <array>
#include <cerrno>

#include "common/random.h"
#include "transport/wire/opcodes.h"

namespace ipoibd::transport::rc {
namespace {

constexpr std::uint32_t kPsnMask = 0xFFFFFF;

std::uint32_t psn_add(std::uint32_t a, std::int64_t n) {
    return static_cast<std::uint32_t>((static_cast<std::int64_t>(a) + n) & kPsnMask);
}
// a - b as a signed distance in [-2^23, 2^23): modulo-2^24 order (9.7.1).
std::int32_t psn_diff(std::uint32_t a, std::uint32_t b) {
    auto d = static_cast<std::int32_t>((a - b) & kPsnMask);
    if (d >= 0x800000) d -= 0x1000000;
    return d;
}

bool is_send(std::uint8_t opcode) {
    switch (opcode) {
        case op::rc_send_first:
        case op::rc_send_middle:
        case op::rc_send_last:
        case op::rc_send_last_imm:
        case op::rc_send_only:
        case op::rc_send_only_imm: return true;
        default: return false;
    }
}
bool is_write(std::uint8_t opcode) {
    switch (opcode) {
        case op::rc_rdma_write_first:
        case op::rc_rdma_write_middle:
        case op::rc_rdma_write_last:
        case op::rc_rdma_write_last_imm:
        case op::rc_rdma_write_only:
        case op::rc_rdma_write_only_imm: return true;
        default: return false;
    }
}
bool is_read_response(std::uint8_t opcode) {
    return opcode == op::rc_rdma_read_response_first || opcode == op::rc_rdma_read_response_middle ||
           opcode == op::rc_rdma_read_response_last || opcode == op::rc_rdma_read_response_only;
}
bool starts_message(std::uint8_t opcode) {
    return opcode == op::rc_send_first || opcode == op::rc_send_only || opcode == op::rc_send_only_imm ||
           opcode == op::rc_rdma_write_first || opcode == op::rc_rdma_write_only ||
           opcode == op::rc_rdma_write_only_imm;
}
bool ends_message(std::uint8_t opcode) {
    return opcode == op::rc_send_last || opcode == op::rc_send_last_imm || opcode == op::rc_send_only ||
           opcode == op::rc_send_only_imm || opcode == op::rc_rdma_write_last ||
           opcode == op::rc_rdma_write_last_imm || opcode == op::rc_rdma_write_only ||
           opcode == op::rc_rdma_write_only_imm;
}
bool carries_imm(std::uint8_t opcode) {
    return opcode == op::rc_send_last_imm || opcode == op::rc_send_only_imm || opcode == op::rc_rdma_write_last_imm ||
           opcode == op::rc_rdma_write_only_imm;
}
std::uint32_t packets_for(std::size_t bytes, std::uint32_t pmtu) {
    return bytes == 0 ? 1 : static_cast<std::uint32_t>((bytes + pmtu - 1) / pmtu);
}

}  // namespace


MemoryRegion MemoryRegions::register_region(std::span<std::uint8_t> memory, std::uint32_t access_flags) {
    MemoryRegion r;
    r.data = memory.data();
    r.va = reinterpret_cast<std::uintptr_t>(memory.data());
    r.length = static_cast<std::uint32_t>(memory.size());
    r.access = access_flags;
    // Unpredictable, unique among the live regions, never 0.
    do r.rkey = random_u32();
    while (r.rkey == 0 || regions_.contains(r.rkey));
    regions_.emplace(r.rkey, r);
    return r;
}

bool MemoryRegions::deregister(std::uint32_t rkey) {
    if (regions_.erase(rkey) == 0) return false;
    ++deregistrations_;
    return true;
}

std::optional<std::uint32_t> MemoryRegions::find_local(std::span<const std::uint8_t> local, std::uint32_t needed) const {
    for (const auto& [rkey, r] : regions_)
        if (local.data() >= r.data && local.data() + local.size() <= r.data + r.length && (r.access & needed) == needed)
            return rkey;
    return std::nullopt;
}

std::optional<std::span<std::uint8_t>> MemoryRegions::find(std::uint32_t rkey, std::uint64_t va, std::uint32_t length,
                                                           std::uint32_t needed) const {
    const auto it = regions_.find(rkey);
    if (it == regions_.end()) return std::nullopt;
    const MemoryRegion& r = it->second;
    if ((r.access & needed) != needed) return std::nullopt;
    if (va < r.va || va - r.va > r.length || length > r.length - (va - r.va)) return std::nullopt;
    return std::span<std::uint8_t>(r.data + (va - r.va), length);
}

std::chrono::microseconds rnr_timer(std::uint8_t code) {
    // IBA Table 45, in units of 10 us.
    static constexpr std::array<std::uint32_t, 32> k10us = {
        65536, 1,   2,   3,   4,    6,    8,    12,   16,   24,   32,    48,    64,    96,    128,   192,
        256,   384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
    return std::chrono::microseconds(std::int64_t{k10us[code & 0x1F]} * 10);
}

std::optional<std::chrono::microseconds> local_ack_timeout(std::uint8_t code) {
    if (code == 0) return std::nullopt;
    // 4.096 us x 2^code, in ns to keep the small ones.
    const std::int64_t ns = std::int64_t{4096} << std::min<std::uint8_t>(code, 31);
    return std::chrono::microseconds(std::max<std::int64_t>(ns / 1000, 1));
}

namespace {
// Table 52: the credits of codes 0..30.
constexpr std::array<std::uint32_t, 31> kCredits{0,    1,    2,    3,    4,    6,    8,     12,    16,    24,   32,
                                                 48,   64,   96,   128,  192,  256,  384,   512,   768,   1024, 1536,
                                                 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};
}  // namespace

std::uint32_t credits_of(std::uint8_t code) { return code < kCredits.size() ? kCredits[code] : 0; }

std::uint8_t credit_code(std::size_t credits) {
    std::size_t code = 0;
    while (code + 1 < kCredits.size() && kCredits[code + 1] <= credits) ++code;
    return static_cast<std::uint8_t>(code);
}

const char* to_string(QpState s) {
    switch (s) {
        case QpState::reset: return "RESET";
        case QpState::init: return "INIT";
        case QpState::rtr: return "RTR";
        case QpState::rts: return "RTS";
        case QpState::sqd: return "SQD";
        case QpState::err: return "ERR";
    }
    return "?";
}

const char* to_string(Status s) {
    switch (s) {
        case Status::success: return "success";
        case Status::local_length_error: return "local length error";
        case Status::retry_exceeded: return "transport retry counter exceeded";
        case Status::rnr_retry_exceeded: return "RNR retry counter exceeded";
        case Status::remote_invalid_request: return "remote invalid request";
        case Status::remote_access_error: return "remote access error";
        case Status::remote_operational_error: return "remote operational error";
        case Status::flushed: return "flushed";
        case Status::local_protection_error: return "local protection error";
        case Status::local_error: return "local error";
    }
    return "?";
}

void visit(const RcCounters& c, CounterSink& out) {
    out.counter("rc_packets_sent", c.packets_sent);
    out.counter("rc_retransmitted", c.retransmitted);
    out.counter("rc_timeouts", c.timeouts);
    out.counter("rc_naks_sent", c.naks_sent);
    out.counter("rc_out_of_sequence", c.out_of_sequence);
    out.counter("rc_not_receiving", c.not_receiving);
    out.counter("rc_naks_received", c.naks_received);
    out.counter("rc_rnr_naks_sent", c.rnr_naks_sent);
    out.counter("rc_rnr_naks_received", c.rnr_naks_received);
    out.counter("rc_duplicates", c.duplicates);
    out.counter("rc_ghost_acks", c.ghost_acks);
    out.counter("rc_acks_coalesced", c.acks_coalesced);
    out.counter("rc_unsolicited_acks", c.unsolicited_acks);
    out.counter("rc_limited_waits", c.limited_waits);
    out.counter("rc_msn_stalls", c.msn_stalls);
    out.counter("rc_read_resources_exhausted", c.read_resources_exhausted);
    out.counter("rc_duplicate_reads_dropped", c.duplicate_reads_dropped);
    out.counter("rc_read_responses_deferred", c.read_responses_deferred);
    out.counter("rc_invalid_requests", c.invalid_requests);
    out.counter("rc_access_errors", c.access_errors);
    out.counter("rc_duplicate_reads", c.duplicate_reads);
    out.counter("rc_read_gaps", c.read_gaps);
    out.counter("rc_retries_folded", c.retries_folded);
    out.counter("rc_retries_uncounted", c.retries_uncounted);
    out.counter("rc_messages_sent", c.messages_sent);
    out.counter("rc_messages_received", c.messages_received);
}

// ---------------------------------------------------------------------------
// States

expected<void, std::string> RcQp::to_init() {
    if (state_ != QpState::reset) return unexpected(std::string("INIT is reached from RESET, not ") + to_string(state_));
    state_ = QpState::init;
    return {};
}

expected<void, std::string> RcQp::to_rtr(const RtrAttributes& a) {
    if (state_ != QpState::init) return unexpected(std::string("RTR is reached from INIT, not ") + to_string(state_));
    if (a.pmtu < 256 || a.pmtu > 4096 || (a.pmtu & (a.pmtu - 1)) != 0)
        return unexpected("path MTU " + std::to_string(a.pmtu) + ": must be 256, 512, 1024, 2048 or 4096");
    if (a.dest_qpn > kPsnMask || a.rq_psn > kPsnMask || a.min_rnr_timer > 31)
        return unexpected(std::string("destination QPN and PSN are 24 bits, the RNR timer code 0..31"));
    rtr_ = a;
    epsn_ = a.rq_psn;
    state_ = QpState::rtr;
    // Initial credits (C9-155): an unsolicited ACK with the PSN before the
    // first expected one, when receives were posted in INIT.
    if (rtr_.generate_credits && !recv_queue_.empty()) {
        send_ack(Aeth::kSyndromeAck, psn_add(epsn_, -1));
        ++counters_.unsolicited_acks;
    }
    return {};
}

expected<void, std::string> RcQp::to_rts(const RtsAttributes& a) {
    if (state_ != QpState::rtr && state_ != QpState::sqd)
        return unexpected(std::string("RTS is reached from RTR or SQD, not ") + to_string(state_));
    if (a.sq_psn > kPsnMask || a.timeout > 31 || a.retry_count > 7 || a.rnr_retry > 7)
        return unexpected(std::string("PSN 24 bits, timeout 0..31, retry counts 0..7"));
    if (state_ == QpState::sqd) {
        // Back from draining: the PSNs carry on.
        rts_.timeout = a.timeout;
        rts_.retry_count = a.retry_count;
        rts_.rnr_retry = a.rnr_retry;
    } else {
        rts_ = a;
        npsn_ = a.sq_psn;
        sent_end_ = npsn_;
        acked_psn_ = psn_add(npsn_, -1);
    }
    progress();
    head_timeouts_left_ = rts_.retry_count;
    state_ = QpState::rts;
    return {};
}

expected<void, std::string> RcQp::to_sqd() {
    if (state_ != QpState::rts) return unexpected(std::string("SQD is reached from RTS, not ") + to_string(state_));
    state_ = QpState::sqd;
    return {};
}

void RcQp::to_error() {
    if (state_ == QpState::err) return;
    state_ = QpState::err;
    // Every work request still posted completes flushed, in order.
    std::uint64_t last_wr = ~0ULL;
    for (const Outstanding& o : unacked_)
        if (o.wr_id != last_wr) {
            completions_.push_back({.wr_id = o.wr_id, .status = Status::flushed});
            last_wr = o.wr_id;
        }
    unacked_.clear();
    next_to_send_ = 0;
    reads_outstanding_ = 0;
    for (const Queued& q : send_queue_) completions_.push_back({.wr_id = q.wr.wr_id, .status = Status::flushed});
    send_queue_.clear();
    if (open_) completions_.push_back({.wr_id = open_->wr.wr_id, .receive = true, .status = Status::flushed});
    open_.reset();
    for (const RecvWr& w : recv_queue_) completions_.push_back({.wr_id = w.wr_id, .receive = true, .status = Status::flushed});
    recv_queue_.clear();
    to_send_.clear();
    reads_answering_ = 0;
    duplicate_reads_answering_ = 0;
    responses_deferred_.reset();
    ack_deadline_.reset();
    rnr_until_.reset();
}

// ---------------------------------------------------------------------------
// Posting

expected<void, std::string> RcQp::post_send(SendWr wr) {
    if (state_ != QpState::rts && state_ != QpState::sqd)
        return unexpected(std::string("a send needs RTS or SQD; the QP is ") + to_string(state_));
    if (send_queue_.size() >= kMaxSendQueue) return unexpected(std::string("send queue full"));
    if (wr.payload.size() > kMaxMessage || wr.read_into.size() > kMaxMessage)
        return unexpected("a message of more than 16 MiB");
    if (wr.opcode == WrOpcode::rdma_read && (!wr.payload.empty() || wr.imm))
        return unexpected(std::string("a READ carries no payload and no immediate data"));
    // A READ's buffer lies in memory registered for local write (the
    // verbs' lkey check); its region is remembered, to be checked again
    // when the data comes (it may be deregistered meanwhile).
    Queued q;
    if (wr.opcode == WrOpcode::rdma_read && !wr.read_into.empty()) {
        const auto lkey = memory_ ? memory_->find_local(wr.read_into, access::local_write) : std::nullopt;
        if (!lkey) return unexpected(std::string("the READ's buffer is not in a region registered for local write"));
        q.read_lkey = *lkey;
        q.read_checked = memory_->deregistrations();
    }
    q.wr = std::move(wr);
    send_queue_.push_back(std::move(q));
    return {};
}

expected<void, std::string> RcQp::post_recv(RecvWr wr) {
    if (state_ == QpState::reset || state_ == QpState::err)
        return unexpected(std::string("a receive needs INIT or later; the QP is ") + to_string(state_));
    if (recv_queue_.size() >= kMaxRecvQueue) return unexpected(std::string("receive queue full"));
    recv_queue_.push_back(wr);
    // The requester may be waiting for credits: tell it (9.7.7.2.1).
    if (rtr_.generate_credits && advertised_ == 0 && (state_ == QpState::rtr || sending())) credit_update_ = true;
    return {};
}

void RcQp::segment(Queued& q) {
    SendWr& wr = q.wr;
    const std::size_t pmtu = rtr_.pmtu;
    if (wr.opcode == WrOpcode::rdma_read) {
        // One request; its responses take as many PSNs as they are packets.
        Outstanding o{};
        o.packet.opcode = op::rc_rdma_read_request;
        o.packet.dest_qp = rtr_.dest_qpn;
        o.packet.psn = npsn_;
        o.packet.ack_req = true;
        o.packet.reth = ib::Reth{wr.remote_va, wr.rkey, static_cast<std::uint32_t>(wr.read_into.size())};
        o.wr_id = wr.wr_id;
        o.last = true;
        o.read_packets = packets_for(wr.read_into.size(), rtr_.pmtu);
        o.read_into = wr.read_into;
        o.read_lkey = q.read_lkey;
        o.read_checked = q.read_checked;
        npsn_ = psn_add(npsn_, o.read_packets);
        unacked_.push_back(std::move(o));
        return;
    }
    const bool write = wr.opcode == WrOpcode::rdma_write;
    const std::size_t n = packets_for(wr.payload.size(), rtr_.pmtu);
    const std::size_t size = wr.payload.size();
    // The packets read the payload where it is (one buffer per message, kept
    // until its last packet is acknowledged).
    const auto message = std::make_shared<const std::vector<std::uint8_t>>(std::move(wr.payload));
    for (std::size_t i = 0; i < n; ++i) {
        const bool first = i == 0, last = i + 1 == n;
        RcPacket p;
        p.dest_qp = rtr_.dest_qpn;
        p.psn = npsn_;
        npsn_ = psn_add(npsn_, 1);
        if (first && last)
            p.opcode = write ? (wr.imm ? op::rc_rdma_write_only_imm : op::rc_rdma_write_only)
                             : (wr.imm ? op::rc_send_only_imm : op::rc_send_only);
        else if (first)
            p.opcode = write ? op::rc_rdma_write_first : op::rc_send_first;
        else if (last)
            p.opcode = write ? (wr.imm ? op::rc_rdma_write_last_imm : op::rc_rdma_write_last)
                             : (wr.imm ? op::rc_send_last_imm : op::rc_send_last);
        else
            p.opcode = write ? op::rc_rdma_write_middle : op::rc_send_middle;
        if (write && first) p.reth = ib::Reth{wr.remote_va, wr.rkey, static_cast<std::uint32_t>(size)};
        if (last) p.imm = wr.imm;
        const std::size_t begin = i * pmtu, end = std::min(size, begin + pmtu);
        p.ack_req = last || ++since_ack_req_ >= kAckReqEvery;
        if (p.ack_req) since_ack_req_ = 0;
        Outstanding o{};
        o.packet = std::move(p);
        o.message = message;
        o.offset = static_cast<std::uint32_t>(begin);
        o.length = static_cast<std::uint32_t>(end - begin);
        o.wr_id = wr.wr_id;
        o.last = last;
        unacked_.push_back(std::move(o));
    }
}

// ---------------------------------------------------------------------------
// Moving packets

void RcQp::output(std::vector<RcPacket>& out, Clock::time_point now) {
    struct Collect final : PacketSink {
        explicit Collect(std::vector<RcPacket>& v) : into(v) {}
        void send(const RcPacket& p, bytes payload) override {
            into.push_back(p);
            if (p.payload.empty()) assign_bytes(into.back().payload, payload);
        }
        std::vector<RcPacket>& into;
    } collect(out);
    output(collect, now);
}

void RcQp::output(PacketSink& out, Clock::time_point now) {
    if (credit_update_ && (state_ == QpState::rtr || sending())) {
        // An unsolicited ACK: the newest positive ACK again, with the credits.
        send_ack(Aeth::kSyndromeAck, psn_add(epsn_, -1));
        ++counters_.unsolicited_acks;
    }
    credit_update_ = false;
    // ACKs, NAKs and read responses first; a NAK that put this QP in ERR
    // still leaves.
    output_responses(out, now);
    if (!sending()) return;
    if (rnr_until_) {
        if (now < *rnr_until_) return;
        rnr_until_.reset();
    }
    release_limited(now);
    // New messages while the window has room (a message larger than the
    // window goes alone); none while the send queue drains.
    while (state_ == QpState::rts && !send_queue_.empty() && !limited_ssn_) {
        const std::size_t pmtu = rtr_.pmtu;
        const SendWr& next = send_queue_.front().wr;
        // The window counts PSNs, a READ's responses included (C9-61: at most
        // 2^23 outstanding; this window is far below).
        const std::size_t psns = packets_for(next.opcode == WrOpcode::rdma_read ? next.read_into.size() : next.payload.size(),
                                             static_cast<std::uint32_t>(pmtu));
        const std::size_t in_flight =
            unacked_.empty() ? 0 : static_cast<std::size_t>(psn_diff(npsn_, unacked_.front().packet.psn));
        if (!unacked_.empty() && in_flight + psns > kMaxOutstanding) break;
        // At most a window's worth of messages beyond the peer's MSN. A
        // conforming responder's MSN covers every message it acknowledges
        // (C9-148), so only one whose MSN lags its ACKs gets here: what it
        // acknowledged is not taken as completed, and the rest wait.
        if (started_.size() >= kMaxOutstanding) {
            if (!msn_stalled_) ++counters_.msn_stalls;
            msn_stalled_ = true;
            break;
        }
        msn_stalled_ = false;
        // No more READs outstanding than the initiator depth.
        if (next.opcode == WrOpcode::rdma_read && reads_outstanding_ >= std::max<std::size_t>(rts_.max_rd_atomic, 1)) break;
        if (next.opcode == WrOpcode::rdma_read) ++reads_outstanding_;
        // End-to-end credits (9.7.7.2.4-5): a message that takes a receive
        // WQE (SEND, WRITE with immediate) beyond the limit goes limited: a
        // SEND one packet at a time with AckReq, a WRITE whole, each then
        // waiting for an ACK; nothing after it starts meanwhile (C9-160).
        const bool is_send_wr = next.opcode == WrOpcode::send;
        const bool consumes = is_send_wr || (next.opcode == WrOpcode::rdma_write && next.imm);
        const std::uint32_t ssn = psn_add(ssn_, 1);
        const bool limited = flow_ != Flow::none && consumes && psn_diff(ssn, limit_sequence()) > 0;
        const std::uint32_t first_psn = npsn_;
        segment(send_queue_.front());
        send_queue_.pop_front();
        ssn_ = ssn;
        if (flow_ != Flow::none) started_.push_back({ssn, consumes});
        if (limited) {
            ++counters_.limited_waits;
            limited_ssn_ = ssn;
            awaiting_ack_ = true;
            hand_until_.reset();
            if (is_send_wr) {
                hand_until_ = psn_add(first_psn, 1);
                for (Outstanding& o : unacked_)
                    if (o.packet.psn == first_psn) o.packet.ack_req = true;
            }
            break;
        }
    }
    bool handed = false;
    for (; next_to_send_ < unacked_.size(); ++next_to_send_) {
        const Outstanding& o = unacked_[next_to_send_];
        if (hand_until_ && psn_diff(o.packet.psn, *hand_until_) >= 0) break;
        const std::uint32_t end = psn_add(o.packet.psn, o.read_packets > 0 ? o.read_packets : 1);
        if (psn_diff(end, sent_end_) > 0) sent_end_ = end;
        out.send(o.packet, o.message ? bytes(*o.message).subspan(o.offset, o.length) : bytes{});
        ++counters_.packets_sent;
        handed = true;
    }
    if (handed && !ack_deadline_)
        if (const auto t = local_ack_timeout(rts_.timeout)) ack_deadline_ = now + *t;
}

void RcQp::receive(const RcPacket& p, Clock::time_point now) { receive(p, p.payload, now); }

void RcQp::receive(const RcPacket& p, bytes payload, Clock::time_point now) {
    if (state_ != QpState::rtr && !sending()) {
        ++counters_.not_receiving;
        return;
    }
    if ((p.opcode == op::rc_acknowledge || is_read_response(p.opcode)) && p.aeth &&
        (p.aeth->syndrome & Aeth::kSyndromeTypeMask) == Aeth::kSyndromeAck) {
        take_credits(*p.aeth);
    }
    if (p.opcode == op::rc_acknowledge) {
        if (sending() && p.aeth) {
            const auto before = unacked_.size();
            requester(p);
            if (unacked_.size() != before || unacked_.empty()) restart_ack_timer(now);
            if (rnr_until_ && *rnr_until_ == Clock::time_point::max())
                rnr_until_ = now + rnr_timer(p.aeth->syndrome & 0x1F);
        } else {
            ++counters_.not_receiving;
        }
        return;
    }
    if (is_read_response(p.opcode)) {
        if (sending()) {
            const auto before = unacked_.size();
            const std::uint32_t received = unacked_.empty() ? 0 : unacked_.front().read_received;
            read_response(p, payload);
            // Every response in order is an acknowledgement: the timer
            // starts again (9.7.6.1.3), also in the middle of a long READ.
            if (unacked_.size() != before || (!unacked_.empty() && unacked_.front().read_received != received))
                restart_ack_timer(now);
        } else {
            ++counters_.not_receiving;
        }
        return;
    }
    if (is_send(p.opcode) || is_write(p.opcode) || p.opcode == op::rc_rdma_read_request) {
        responder(p, payload);
        return;
    }
    // A request this engine does not carry (SEND with Invalidate): C9-83.
    if (p.opcode != op::rc_acknowledge && !is_read_response(p.opcode) && p.opcode != op::rc_atomic_acknowledge)
        receive_invalid(p.psn, now);
}

// ---------------------------------------------------------------------------
// End-to-end credits (9.7.7.2)

std::uint8_t RcQp::credit_field() const {
    if (!rtr_.generate_credits) return kNoCredits;
    // WQEs for the messages after the MSN: those posted, and the one a SEND
    // being received holds (C9-161).
    return credit_code(recv_queue_.size() + (open_ && !open_->write ? 1 : 0));
}

// The credit field of an ACK, a duplicate or an unsolicited one included
// (C9-144, C9-164): a newer MSN with its credits moves the limit.
void RcQp::take_credits(const Aeth& a) {
    const std::uint8_t code = a.syndrome & 0x1F;
    if (code == kNoCredits) {
        // The responder generates none: send freely from now on (9.7.7.2.4).
        flow_ = Flow::none;
        started_.clear();
        return;
    }
    if (flow_ == Flow::none) return;
    if (flow_ == Flow::credits && psn_diff(a.msn, peer_msn_) < 0) return;  // older news
    flow_ = Flow::credits;
    peer_msn_ = a.msn;
    peer_credits_ = credits_of(code);
    while (!started_.empty() && psn_diff(started_.front().ssn, peer_msn_) <= 0) started_.pop_front();
}

// LSN: the MSN, its credits, and one for every message since the MSN that
// takes no receive WQE (9.7.7.2.4).
std::uint32_t RcQp::limit_sequence() const {
    std::uint32_t lsn = psn_add(peer_msn_, std::min<std::uint32_t>(peer_credits_, 1u << 22));
    for (const Started& s : started_)
        if (!s.consumes) lsn = psn_add(lsn, 1);
    return lsn;
}

// A message sent limited: released once the limit covers it or the MSN
// says it completed; otherwise, after each ACK, one more packet of a SEND.
void RcQp::release_limited(Clock::time_point) {
    if (!limited_ssn_) return;
    if (flow_ == Flow::none || psn_diff(*limited_ssn_, limit_sequence()) <= 0 ||
        (flow_ == Flow::credits && psn_diff(peer_msn_, *limited_ssn_) >= 0)) {
        limited_ssn_.reset();
        hand_until_.reset();
        awaiting_ack_ = false;
        return;
    }
    if (awaiting_ack_ || !hand_until_) return;
    for (Outstanding& o : unacked_) {
        if (o.packet.psn != *hand_until_) continue;
        o.packet.ack_req = true;
        hand_until_ = psn_add(*hand_until_, 1);
        awaiting_ack_ = true;
        ++counters_.limited_waits;
        return;
    }
    hand_until_.reset();  // every packet of it is out: wait for its ACK
}

// Forward progress restarts the local ACK timer for what is still out.
void RcQp::restart_ack_timer(Clock::time_point now) {
    ack_deadline_.reset();
    if (next_to_send_ > 0)
        if (const auto t = local_ack_timeout(rts_.timeout)) ack_deadline_ = now + *t;
}

void RcQp::tick(Clock::time_point now) {
    if (!sending() || !ack_deadline_ || now < *ack_deadline_) return;
    ++counters_.timeouts;
    ack_deadline_.reset();
    if (unacked_.empty()) return;
    // C9-142: timeouts count against the request at the head; what the
    // responder acknowledges behind a READ does not give them back.
    if (head_timeouts_left_ == 0) {
        complete_error(Status::retry_exceeded);
        return;
    }
    --head_timeouts_left_;
    retry(RetryCause::timeout, unacked_.front().packet.psn);
}

std::optional<Clock::time_point> RcQp::next_deadline() const {
    std::optional<Clock::time_point> d = ack_deadline_;
    if (responses_deferred_ && (!d || *responses_deferred_ < *d)) d = responses_deferred_;
    if (rnr_until_ && (!d || *rnr_until_ < *d)) d = rnr_until_;
    return d;
}

std::vector<Completion> RcQp::poll() {
    std::vector<Completion> out;
    out.swap(completions_);
    return out;
}

// ---------------------------------------------------------------------------
// Requester: ACKs and NAKs

void RcQp::requester(const RcPacket& p) {
    const Aeth& a = *p.aeth;
    const auto type = static_cast<std::uint8_t>(a.syndrome & Aeth::kSyndromeTypeMask);
    // Reserved syndromes (type 0b10) and reserved NAK codes (4-31) are
    // dropped silently (C9-120, C9-135).
    if (type == 0x40 || (type == Aeth::kSyndromeNak && (a.syndrome & 0x1F) > nak::remote_operational_error)) {
        ++counters_.ghost_acks;
        return;
    }
    // Only a PSN among those sent and not yet acknowledged means anything:
    // the rest are duplicate or ghost ACKs (9.7.5.1.1). Sent: handed over;
    // a limited SEND's packets still held are not.
    if (unacked_.empty()) {
        ++counters_.ghost_acks;
        return;
    }
    const std::uint32_t oldest = unacked_.front().packet.psn;
    const std::uint32_t newest = psn_add(sent_end_, -1);
    // A NAK too names an outstanding PSN: the one it refuses or expects
    // (one naming the PSN just acknowledged is a late copy).
    const bool in_window = psn_diff(p.psn, oldest) >= 0 && psn_diff(p.psn, newest) <= 0;
    if (!in_window) {
        ++counters_.ghost_acks;
        return;
    }
    if (type == Aeth::kSyndromeAck) {
        // A limited SEND's next packet waits for the ACK of the one before
        // (C9-163): this one, now that its PSN names a packet sent (a ghost
        // naming a held one, or one far ahead, released it before). NAKs
        // and read responses do not count: nothing starts behind a limited
        // message, so no READ's responses come after its packets.
        if (awaiting_ack_ && hand_until_ && psn_diff(p.psn, psn_add(*hand_until_, -1)) >= 0) awaiting_ack_ = false;
        acknowledged(p.psn);
        acknowledge_up_to(p.psn);
        // An ACK for a PSN past a READ whose responses are missing: they
        // were lost (responses come in order); the READ goes again, once.
        if (!unacked_.empty()) {
            Outstanding& o = unacked_.front();
            if (o.read_packets > 0 && psn_diff(p.psn, psn_add(o.packet.psn, o.read_packets - 1)) > 0 && !o.read_resent) {
                o.read_resent = true;
                ++counters_.read_gaps;
                retry(RetryCause::read_gap, o.packet.psn);
            }
        }
        return;
    }
    // A NAK acknowledges what came before its PSN (9.7.5.1.2); forward
    // progress gives the retry counters back, as an ACK does.
    acknowledged(psn_add(p.psn, -1));
    acknowledge_up_to(psn_add(p.psn, -1));
    if (type == Aeth::kSyndromeRnrNak) {
        ++counters_.rnr_naks_received;
        // While one is waited out nothing is sent again: another for the
        // same PSN is a copy. It spends no retry and leaves the timer be.
        if (rnr_until_ && rnr_psn_ == p.psn) {
            ++counters_.retries_folded;
            return;
        }
        if (rts_.rnr_retry != 7) {
            if (rnr_retries_left_ == 0) {
                complete_error(Status::rnr_retry_exceeded);
                return;
            }
            --rnr_retries_left_;
        }
        // The timer starts now (receive() sets it from the code).
        rnr_until_ = Clock::time_point::max();
        rnr_psn_ = p.psn;
        retransmit_from_oldest();
        return;
    }
    ++counters_.naks_received;
    switch (a.syndrome & 0x1F) {
        case nak::psn_sequence_error: retry(RetryCause::nak, p.psn); return;
        case nak::invalid_request: complete_error(Status::remote_invalid_request); return;
        case nak::remote_access_error: complete_error(Status::remote_access_error); return;
        case nak::remote_operational_error: complete_error(Status::remote_operational_error); return;
        default: return;  // reserved: dropped above
    }
}

void RcQp::acknowledge_up_to(std::uint32_t psn) {
    while (!unacked_.empty() && psn_diff(psn, unacked_.front().packet.psn) >= 0) {
        const Outstanding& o = unacked_.front();
        if (o.read_packets > 0) break;  // a READ completes by its responses only
        if (o.last) {
            completions_.push_back({.wr_id = o.wr_id, .status = Status::success});
            ++counters_.messages_sent;
        }
        unacked_.pop_front();
        if (next_to_send_ > 0) --next_to_send_;
        head_timeouts_left_ = rts_.retry_count;
    }
}

void RcQp::read_response(const RcPacket& p, bytes payload) {
    // The READ whose PSNs hold this response.
    auto it = std::find_if(unacked_.begin(), unacked_.end(), [&](const Outstanding& o) {
        const std::int32_t k = psn_diff(p.psn, o.packet.psn);
        return o.read_packets > 0 && k >= 0 && static_cast<std::uint32_t>(k) < o.read_packets;
    });
    if (it == unacked_.end()) {
        ++counters_.ghost_acks;
        return;
    }
    // A response acknowledges everything before its READ (9.7.5.1.1).
    acknowledged(psn_add(it->packet.psn, -1));
    acknowledge_up_to(psn_add(it->packet.psn, -1));
    Outstanding& o = unacked_.front();
    const auto k = static_cast<std::uint32_t>(psn_diff(p.psn, o.packet.psn));
    if (o.read_packets == 0 || psn_diff(p.psn, o.packet.psn) < 0 || k >= o.read_packets || k > o.read_received) {
        // An earlier READ is still missing responses, or this one skipped
        // some: they were lost; the READ goes again (a retry), once per gap:
        // the rest of the old responses are on their way.
        if (o.read_packets > 0 && o.read_resent) return;
        if (o.read_packets > 0) o.read_resent = true;
        ++counters_.read_gaps;
        retry(RetryCause::read_gap, o.packet.psn);
        return;
    }
    if (k < o.read_received) return;  // a duplicate response
    const std::size_t offset = std::size_t{k} * rtr_.pmtu;
    const std::size_t expected_len = std::min<std::size_t>(rtr_.pmtu, o.read_into.size() - std::min(offset, o.read_into.size()));
    const bool last = k + 1 == o.read_packets;
    const bool opcode_ok = o.read_packets == 1 ? p.opcode == op::rc_rdma_read_response_only
                           : k == 0            ? p.opcode == op::rc_rdma_read_response_first
                           : last              ? p.opcode == op::rc_rdma_read_response_last
                                               : p.opcode == op::rc_rdma_read_response_middle;
    if (!opcode_ok || payload.size() != expected_len) {
        ++counters_.ghost_acks;  // not a response this READ can take: ignored
        return;
    }
    // The buffer's region may have been deregistered since the READ was
    // posted, its memory freed: the data has nowhere to go. Verbs
    // completes the READ with a local protection error and the QP goes to
    // ERR. Looked up again only after some deregistration, not for every
    // response.
    if (!o.read_into.empty() && o.read_checked != memory_->deregistrations()) {
        if (!memory_->find(o.read_lkey, reinterpret_cast<std::uintptr_t>(o.read_into.data()),
                           static_cast<std::uint32_t>(o.read_into.size()), access::local_write)) {
            complete_error(Status::local_protection_error);
            return;
        }
        o.read_checked = memory_->deregistrations();
    }
    std::copy(payload.begin(), payload.end(), o.read_into.begin() + static_cast<std::ptrdiff_t>(offset));
    ++o.read_received;
    o.read_resent = false;
    progress();
    head_timeouts_left_ = rts_.retry_count;
    if (!last) return;
    completions_.push_back({.wr_id = o.wr_id, .status = Status::success,
                            .byte_len = static_cast<std::uint32_t>(o.read_into.size())});
    ++counters_.messages_sent;
    if (reads_outstanding_ > 0) --reads_outstanding_;
    unacked_.pop_front();
    if (next_to_send_ > 0) --next_to_send_;
    // What the responder acknowledged behind this READ while it waited
    // completes now.
    acknowledge_up_to(acked_psn_);
}

void RcQp::acknowledged(std::uint32_t psn) {
    if (psn_diff(psn, acked_psn_) <= 0) return;
    acked_psn_ = psn;
    progress();
}

void RcQp::progress() {
    retries_left_ = rts_.retry_count;
    rnr_retries_left_ = rts_.rnr_retry;
    retry_under_way_ = RetryUnderWay::none;
}

// One retry (9.7.6.1.2): from the oldest unacknowledged request, while the
// retry count lasts; then retry exceeded.
void RcQp::retry(RetryCause cause, std::uint32_t psn) {
    if (cause != RetryCause::timeout) {
        // A NAK or gap about packets sent before a retry a NAK or gap
        // started, while that is on its way: the retry answers it too.
        // About a packet first sent after it: news.
        if (retry_under_way_ == RetryUnderWay::after_response && psn_diff(psn, retry_end_) < 0) {
            ++counters_.retries_folded;
            return;
        }
        // After a timeout's retry: the responder lost what it sent again or
        // spoke before it arrived; send again, without a count.
        if (retry_under_way_ == RetryUnderWay::after_timeout) {
            ++counters_.retries_uncounted;
            retry_under_way_ = RetryUnderWay::after_response;
            retransmit_from_oldest();
            return;
        }
    }
    if (retries_left_ == 0) {
        complete_error(Status::retry_exceeded);
        return;
    }
    --retries_left_;
    retry_under_way_ = cause == RetryCause::timeout ? RetryUnderWay::after_timeout : RetryUnderWay::after_response;
    retransmit_from_oldest();
}

void RcQp::retransmit_from_oldest() {
    retry_end_ = npsn_;
    counters_.retransmitted += next_to_send_;
    next_to_send_ = 0;
    ack_deadline_.reset();
}

void RcQp::complete_error(Status s) {
    if (!unacked_.empty()) {
        const std::uint64_t wr = unacked_.front().wr_id;
        completions_.push_back({.wr_id = wr, .status = s});
        while (!unacked_.empty() && unacked_.front().wr_id == wr) unacked_.pop_front();
    }
    to_error();
}

// ---------------------------------------------------------------------------
// Responder

void RcQp::send_ack(std::uint8_t syndrome, std::uint32_t psn) {
    // Every ACK carries the current credits (C9-158.2.1).
    if ((syndrome & Aeth::kSyndromeTypeMask) == Aeth::kSyndromeAck) {
        syndrome = static_cast<std::uint8_t>(Aeth::kSyndromeAck | credit_field());
        advertised_ = rtr_.generate_credits ? credits_of(syndrome & 0x1F) : 0;
    }
    RcPacket ack;
    ack.opcode = op::rc_acknowledge;
    ack.dest_qp = rtr_.dest_qpn;
    ack.psn = psn;
    ack.aeth = Aeth{syndrome, msn_};
    // Coalescing (9.7.5.1.2): an ACK not yet handed over is replaced by one
    // for the same or a later PSN, which acknowledges everything it did (a
    // duplicate's ACK for an older PSN goes as it is).
    const auto is_ack = [](std::uint8_t s) { return (s & Aeth::kSyndromeTypeMask) == Aeth::kSyndromeAck; };
    RcPacket* last = to_send_.empty() ? nullptr : std::get_if<RcPacket>(&to_send_.back());
    if (is_ack(syndrome) && last && last->opcode == op::rc_acknowledge && last->aeth && is_ack(last->aeth->syndrome) &&
        psn_diff(psn, last->psn) >= 0) {
        *last = std::move(ack);
        ++counters_.acks_coalesced;
        return;
    }
    to_send_.push_back(std::move(ack));
}

void RcQp::responder_error(std::uint8_t nak_code, std::uint32_t psn, Status receive_status) {
    (nak_code == nak::remote_access_error ? counters_.access_errors : counters_.invalid_requests)++;
    send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeNak | nak_code), psn);
    if (open_ && !open_->write) {
        completions_.push_back({.wr_id = open_->wr.wr_id, .receive = true, .status = receive_status});
    }
    open_.reset();
    // The requester's QP goes to ERR on this NAK; so does this one, after
    // the NAK (and the responses queued before it) has left.
    auto queued = std::move(to_send_);
    const std::size_t reads = reads_answering_, duplicates = duplicate_reads_answering_;
    to_error();
    to_send_ = std::move(queued);
    reads_answering_ = reads;
    duplicate_reads_answering_ = duplicates;
}

bool RcQp::execute_read(const RcPacket& p, bool duplicate, std::uint32_t msn) {
    // A zero-length READ names no memory: its R_Key is not checked (C9-88).
    const auto src = p.reth->dma_len == 0 ? std::optional<std::span<std::uint8_t>>(std::span<std::uint8_t>())
                     : memory_ ? memory_->find(p.reth->rkey, p.reth->va, p.reth->dma_len, access::remote_read)
                               : std::nullopt;
    if (!src) {
        // A duplicate that fails is dropped, never NAKed (C9-108, C9-115).
        if (!duplicate) responder_error(nak::remote_access_error, p.psn, Status::flushed);
        return false;
    }
    // Its responses are built as they go (output()): queued whole, a READ
    // of 16 MiB was 16 MiB of packets at once, max_dest_rd_atomic of them
    // (and as many duplicates) in one batch.
    to_send_.push_back(ReadResponses{.psn = p.psn, .packets = packets_for(p.reth->dma_len, rtr_.pmtu),
                                     .rkey = p.reth->rkey, .va = p.reth->va, .length = p.reth->dma_len, .msn = msn,
                                     .duplicate = duplicate, .source = *src,
                                     .checked = memory_ ? memory_->deregistrations() : 0});
    ++(duplicate ? duplicate_reads_answering_ : reads_answering_);
    return true;
}

RcQp::Built RcQp::build_read_responses(ReadResponses& r, PacketSink& out, std::size_t& budget) {
    // The region may have been deregistered since the last responses were
    // built (its memory freed): looked up again then, not for every packet.
    if (r.length > 0 && r.checked != memory_->deregistrations()) {
        const auto src = memory_->find(r.rkey, r.va, r.length, access::remote_read);
        if (!src) return Built::region_gone;
        r.source = *src;
        r.checked = memory_->deregistrations();
    }
    for (; r.next < r.packets; ++r.next) {
        const std::size_t offset = std::size_t{r.next} * rtr_.pmtu;
        const std::size_t len = std::min<std::size_t>(rtr_.pmtu, r.source.size() - offset);
        if (len > budget) return Built::budget_spent;
        budget -= len;
        RcPacket p;
        p.opcode = r.packets == 1        ? op::rc_rdma_read_response_only
                   : r.next == 0         ? op::rc_rdma_read_response_first
                   : r.next + 1 == r.packets ? op::rc_rdma_read_response_last
                                         : op::rc_rdma_read_response_middle;
        p.dest_qp = rtr_.dest_qpn;
        p.psn = psn_add(r.psn, r.next);
        if (p.opcode != op::rc_rdma_read_response_middle)
            p.aeth = Aeth{static_cast<std::uint8_t>(Aeth::kSyndromeAck | credit_field()), r.msn};
        out.send(p, r.source.subspan(offset, len));  // read from the region as the sink encodes it
    }
    return Built::all;
}

void RcQp::output_responses(PacketSink& out, Clock::time_point now) {
    responses_deferred_.reset();
    std::size_t budget = kMaxResponseBytes;
    while (!to_send_.empty()) {
        if (RcPacket* p = std::get_if<RcPacket>(&to_send_.front())) {
            out.send(*p, p->payload);
            to_send_.pop_front();
            continue;
        }
        ReadResponses& r = std::get<ReadResponses>(to_send_.front());
        const Built built = build_read_responses(r, out, budget);
        if (built == Built::budget_spent) {
            // The rest, and what is queued behind it, at the next output():
            // the owner is told to come back at once (next_deadline()).
            ++counters_.read_responses_deferred;
            responses_deferred_ = now;
            return;
        }
        if (built == Built::region_gone && !r.duplicate) {
            // A NAK in place of the next response (its PSN), and ERR; what is
            // queued behind it is about later PSNs and does not go.
            ++counters_.access_errors;
            RcPacket refusal{.opcode = op::rc_acknowledge, .dest_qp = rtr_.dest_qpn, .psn = psn_add(r.psn, r.next)};
            refusal.aeth = Aeth{static_cast<std::uint8_t>(Aeth::kSyndromeNak | nak::remote_access_error), msn_};
            out.send(refusal, {});
            to_send_.clear();  // also when the QP is in ERR already (a NAK behind this READ)
            reads_answering_ = 0;
            duplicate_reads_answering_ = 0;
            to_error();
            return;
        }
        if (built == Built::region_gone) ++counters_.duplicate_reads_dropped;  // never NAKed (C9-115)
        --(r.duplicate ? duplicate_reads_answering_ : reads_answering_);
        to_send_.pop_front();
    }
}

void RcQp::receive_invalid(std::uint32_t psn, Clock::time_point) {
    if (state_ != QpState::rtr && !sending()) {
        ++counters_.not_receiving;
        return;
    }
    const std::int32_t d = psn_diff(psn, epsn_);
    if (d < 0) {
        ++counters_.duplicates;
        return;
    }
    if (d > 0) {
        ++counters_.out_of_sequence;
        if (!nak_sent_) {
            send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeNak | nak::psn_sequence_error), epsn_);
            ++counters_.naks_sent;
            nak_sent_ = true;
        }
        return;
    }
    responder_error(nak::invalid_request, psn, Status::flushed);
}

void RcQp::responder(const RcPacket& p, bytes payload) {
    const bool read = p.opcode == op::rc_rdma_read_request;
    if (read && !p.reth) return;  // not a READ request this engine can parse
    const std::int32_t d = psn_diff(p.psn, epsn_);
    if (d < 0) {
        // A duplicate (9.7.5.1.4): a READ is executed again, its responses
        // with its own PSNs; anything else is not executed again, and is
        // acknowledged with the newest PSN taken, which covers it.
        ++counters_.duplicates;
        if (read) {
            // Each one is executed again, whole: they take responder
            // resources as new READs do, from their own budget (a retry that
            // crosses the originals in one batch must not cost a conforming
            // requester its connection). Over it, dropped: never NAKed (C9-115).
            if (duplicate_reads_answering_ >= std::max<std::size_t>(rtr_.max_dest_rd_atomic, 1) ||
                p.reth->dma_len > kMaxMessage) {
                ++counters_.duplicate_reads_dropped;
                return;
            }
            ++counters_.duplicate_reads;
            (void)execute_read(p, true, msn_);
            return;
        }
        if (p.ack_req) send_ack(Aeth::kSyndromeAck, psn_add(epsn_, -1));
        return;
    }
    if (d > 0) {
        // Packets were lost: one NAK per sequence error, naming the PSN
        // expected (9.7.5.1.3); every one dropped is counted.
        ++counters_.out_of_sequence;
        if (!nak_sent_) {
            send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeNak | nak::psn_sequence_error), epsn_);
            ++counters_.naks_sent;
            nak_sent_ = true;
        }
        return;
    }
    nak_sent_ = false;
    if (read) {
        // A READ between the packets of a SEND or WRITE breaks the sequence.
        if (open_) {
            responder_error(nak::invalid_request, p.psn, Status::local_length_error);
            return;
        }
        if (p.reth->dma_len > (1u << 31)) {  // C9-94
            responder_error(nak::invalid_request, p.psn, Status::flushed);
            return;
        }
        // Responder resources (C9-86): READs being answered, and the bytes
        // of one (no more than the largest message this engine sends).
        if (reads_answering_ >= std::max<std::size_t>(rtr_.max_dest_rd_atomic, 1) || p.reth->dma_len > kMaxMessage) {
            ++counters_.read_resources_exhausted;
            responder_error(nak::invalid_request, p.psn, Status::flushed);
            return;
        }
        // Its responses carry the MSN after it.
        if (!execute_read(p, false, (msn_ + 1) & kPsnMask)) return;
        epsn_ = psn_add(epsn_, packets_for(p.reth->dma_len, rtr_.pmtu));
        msn_ = (msn_ + 1) & kPsnMask;
        return;
    }
    // Opcode sequence (9.7.5.1.5) and lengths (9.7.5.1.6); an opcode "with
    // immediate" carries ImmDt, the others none (9.3.4), and a WRITE's
    // first packet a RETH.
    const bool write = is_write(p.opcode);
    const bool starts = starts_message(p.opcode), ends = ends_message(p.opcode);
    if (starts == open_.has_value() || (open_ && open_->write != write) || carries_imm(p.opcode) != p.imm.has_value()) {
        responder_error(nak::invalid_request, p.psn, Status::local_length_error);
        return;
    }
    const bool full_packet = !ends;  // FIRST and MIDDLE carry exactly the PMTU
    const bool last_of_several = ends && !starts;  // a LAST carries 1..PMTU (C9-92)
    if ((full_packet && payload.size() != rtr_.pmtu) || payload.size() > rtr_.pmtu ||
        (last_of_several && payload.empty())) {
        responder_error(nak::invalid_request, p.psn, Status::local_length_error);
        return;
    }
    // A SEND, or a WRITE with immediate data, needs a receive buffer: at
    // its first packet (SEND) or its last (WRITE). None: receiver not ready
    // (9.7.5.2.8); the requester waits and sends this PSN again.
    const bool needs_buffer = (!write && starts) || (write && carries_imm(p.opcode));
    if (needs_buffer && recv_queue_.empty()) {
        ++counters_.rnr_naks_sent;
        send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeRnrNak | rtr_.min_rnr_timer), p.psn);
        // The packets behind it are dropped quietly until this PSN comes
        // again, as after a sequence NAK (9.7.5.2.8): no NAK for them.
        nak_sent_ = true;
        return;
    }
    if (starts) {
        OpenReceive o;
        o.write = write;
        if (write) {
            if (!p.reth) {
                responder_error(nak::invalid_request, p.psn, Status::flushed);
                return;
            }
            // A zero-length WRITE names no memory: no R_Key check (C9-88).
            const auto target = p.reth->dma_len == 0 ? std::optional<std::span<std::uint8_t>>(std::span<std::uint8_t>())
                                : memory_ ? memory_->find(p.reth->rkey, p.reth->va, p.reth->dma_len, access::remote_write)
                                          : std::nullopt;
            if (!target) {
                responder_error(nak::remote_access_error, p.psn, Status::flushed);
                return;
            }
            o.rkey = p.reth->rkey;
            o.va = p.reth->va;
            o.length = p.reth->dma_len;
        } else {
            o.wr = recv_queue_.front();
            recv_queue_.pop_front();
            if (advertised_ > 0) --advertised_;
        }
        open_ = std::move(o);
    }
    if (open_->write) {
        if (open_->written + payload.size() > open_->length ||
            (ends && open_->written + payload.size() != open_->length)) {
            responder_error(nak::invalid_request, p.psn, Status::flushed);  // more or less than DMALen
            return;
        }
        // Looked up again for every packet: the region may have gone since
        // the first (deregistered memory is never written).
        if (!payload.empty()) {
            const auto target = memory_ ? memory_->find(open_->rkey, open_->va, open_->length, access::remote_write)
                                        : std::nullopt;
            if (!target) {
                responder_error(nak::remote_access_error, p.psn, Status::flushed);
                return;
            }
            std::copy(payload.begin(), payload.end(), target->begin() + static_cast<std::ptrdiff_t>(open_->written));
        }
        open_->written += payload.size();
    } else {
        if (open_->data.size() + payload.size() > open_->wr.capacity) {
            responder_error(nak::invalid_request, p.psn, Status::local_length_error);  // longer than its buffer
            return;
        }
        if (open_->data.empty()) open_->data.reserve(std::min<std::size_t>(open_->wr.capacity, 1u << 16));  // one allocation per message
        append_bytes(open_->data, payload);
    }
    epsn_ = psn_add(epsn_, 1);
    if (ends) {
        msn_ = (msn_ + 1) & kPsnMask;
        ++counters_.messages_received;
        if (!open_->write) {
            Completion c{.wr_id = open_->wr.wr_id, .receive = true, .status = Status::success};
            c.byte_len = static_cast<std::uint32_t>(open_->data.size());
            c.imm = p.imm;
            c.data = std::move(open_->data);
            completions_.push_back(std::move(c));
        } else if (carries_imm(p.opcode)) {
            const RecvWr wr = recv_queue_.front();
            recv_queue_.pop_front();
            if (advertised_ > 0) --advertised_;
            completions_.push_back({.wr_id = wr.wr_id, .receive = true, .status = Status::success,
                                    .byte_len = static_cast<std::uint32_t>(open_->written), .imm = p.imm});
        }
        open_.reset();
    }
    if (p.ack_req) send_ack(Aeth::kSyndromeAck, p.psn);
}

}  // namespace ipoibd::transport::rc
