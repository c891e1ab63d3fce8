// One RC queue pair; the rules are at the top of rc_qp.h.
#include "transport/rc/rc_qp.h"

#include <algorithm>
#include <array>

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
bool starts_message(std::uint8_t opcode) {
    return opcode == op::rc_send_first || opcode == op::rc_send_only || opcode == op::rc_send_only_imm;
}
bool ends_message(std::uint8_t opcode) {
    return opcode == op::rc_send_last || opcode == op::rc_send_last_imm || opcode == op::rc_send_only ||
           opcode == op::rc_send_only_imm;
}

}  // namespace

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

const char* to_string(QpState s) {
    switch (s) {
        case QpState::reset: return "RESET";
        case QpState::init: return "INIT";
        case QpState::rtr: return "RTR";
        case QpState::rts: return "RTS";
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
    }
    return "?";
}

void visit(const RcCounters& c, CounterSink& out) {
    out.counter("rc_packets_sent", c.packets_sent);
    out.counter("rc_retransmitted", c.retransmitted);
    out.counter("rc_timeouts", c.timeouts);
    out.counter("rc_naks_sent", c.naks_sent);
    out.counter("rc_naks_received", c.naks_received);
    out.counter("rc_rnr_naks_sent", c.rnr_naks_sent);
    out.counter("rc_rnr_naks_received", c.rnr_naks_received);
    out.counter("rc_duplicates", c.duplicates);
    out.counter("rc_ghost_acks", c.ghost_acks);
    out.counter("rc_invalid_requests", c.invalid_requests);
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
    return {};
}

expected<void, std::string> RcQp::to_rts(const RtsAttributes& a) {
    if (state_ != QpState::rtr) return unexpected(std::string("RTS is reached from RTR, not ") + to_string(state_));
    if (a.sq_psn > kPsnMask || a.timeout > 31 || a.retry_count > 7 || a.rnr_retry > 7)
        return unexpected(std::string("PSN 24 bits, timeout 0..31, retry counts 0..7"));
    rts_ = a;
    npsn_ = a.sq_psn;
    retries_left_ = a.retry_count;
    rnr_retries_left_ = a.rnr_retry;
    state_ = QpState::rts;
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
    for (const SendWr& w : send_queue_) completions_.push_back({.wr_id = w.wr_id, .status = Status::flushed});
    send_queue_.clear();
    if (open_) completions_.push_back({.wr_id = open_->wr.wr_id, .receive = true, .status = Status::flushed});
    open_.reset();
    for (const RecvWr& w : recv_queue_) completions_.push_back({.wr_id = w.wr_id, .receive = true, .status = Status::flushed});
    recv_queue_.clear();
    to_send_.clear();
    ack_deadline_.reset();
    rnr_until_.reset();
}

// ---------------------------------------------------------------------------
// Posting

expected<void, std::string> RcQp::post_send(SendWr wr) {
    if (state_ != QpState::rts) return unexpected(std::string("a send needs RTS; the QP is ") + to_string(state_));
    if (send_queue_.size() >= kMaxSendQueue) return unexpected(std::string("send queue full"));
    if (wr.payload.size() > kMaxMessage)
        return unexpected("a message of " + std::to_string(wr.payload.size()) + " bytes: at most 16 MiB");
    send_queue_.push_back(std::move(wr));
    return {};
}

expected<void, std::string> RcQp::post_recv(RecvWr wr) {
    if (state_ == QpState::reset || state_ == QpState::err)
        return unexpected(std::string("a receive needs INIT or later; the QP is ") + to_string(state_));
    if (recv_queue_.size() >= kMaxRecvQueue) return unexpected(std::string("receive queue full"));
    recv_queue_.push_back(wr);
    return {};
}

void RcQp::segment(const SendWr& wr) {
    const std::size_t pmtu = rtr_.pmtu;
    const std::size_t n = wr.payload.empty() ? 1 : (wr.payload.size() + pmtu - 1) / pmtu;
    for (std::size_t i = 0; i < n; ++i) {
        const bool first = i == 0, last = i + 1 == n;
        RcPacket p;
        p.dest_qp = rtr_.dest_qpn;
        p.psn = npsn_;
        npsn_ = psn_add(npsn_, 1);
        if (first && last)
            p.opcode = wr.imm ? op::rc_send_only_imm : op::rc_send_only;
        else if (first)
            p.opcode = op::rc_send_first;
        else if (last)
            p.opcode = wr.imm ? op::rc_send_last_imm : op::rc_send_last;
        else
            p.opcode = op::rc_send_middle;
        if (last) p.imm = wr.imm;
        const std::size_t begin = i * pmtu, end = std::min(wr.payload.size(), begin + pmtu);
        p.payload.assign(wr.payload.begin() + static_cast<std::ptrdiff_t>(begin),
                         wr.payload.begin() + static_cast<std::ptrdiff_t>(end));
        p.ack_req = last || ++since_ack_req_ >= kAckReqEvery;
        if (p.ack_req) since_ack_req_ = 0;
        unacked_.push_back({std::move(p), wr.wr_id, last});
    }
}

// ---------------------------------------------------------------------------
// Moving packets

void RcQp::output(std::vector<RcPacket>& out, Clock::time_point now) {
    // ACKs and NAKs first; a NAK that put this QP in ERR still leaves.
    for (RcPacket& p : to_send_) out.push_back(std::move(p));
    to_send_.clear();
    if (state_ != QpState::rts) return;
    if (rnr_until_) {
        if (now < *rnr_until_) return;
        rnr_until_.reset();
    }
    // New messages while the window has room (a message larger than the
    // window goes alone).
    while (!send_queue_.empty()) {
        const std::size_t pmtu = rtr_.pmtu;
        const std::size_t packets = send_queue_.front().payload.empty()
                                        ? 1
                                        : (send_queue_.front().payload.size() + pmtu - 1) / pmtu;
        if (!unacked_.empty() && unacked_.size() + packets > kMaxOutstanding) break;
        segment(send_queue_.front());
        send_queue_.pop_front();
    }
    bool handed = false;
    for (; next_to_send_ < unacked_.size(); ++next_to_send_) {
        out.push_back(unacked_[next_to_send_].packet);
        ++counters_.packets_sent;
        handed = true;
    }
    if (handed && !ack_deadline_)
        if (const auto t = local_ack_timeout(rts_.timeout)) ack_deadline_ = now + *t;
}

void RcQp::receive(const RcPacket& p, Clock::time_point now) {
    if (state_ != QpState::rtr && state_ != QpState::rts) return;
    if (p.opcode == op::rc_acknowledge) {
        if (state_ == QpState::rts && p.aeth) {
            const auto before = unacked_.size();
            requester(p);
            // Forward progress restarts the local ACK timer.
            if (unacked_.size() != before || unacked_.empty()) {
                ack_deadline_.reset();
                if (next_to_send_ > 0)
                    if (const auto t = local_ack_timeout(rts_.timeout)) ack_deadline_ = now + *t;
            }
            if (rnr_until_ && *rnr_until_ == Clock::time_point::max())
                rnr_until_ = now + rnr_timer(p.aeth->syndrome & 0x1F);
        }
        return;
    }
    if (is_send(p.opcode)) responder(p);
}

void RcQp::tick(Clock::time_point now) {
    if (state_ != QpState::rts || !ack_deadline_ || now < *ack_deadline_) return;
    ++counters_.timeouts;
    ack_deadline_.reset();
    if (unacked_.empty()) return;
    if (retries_left_ == 0) {
        complete_error(Status::retry_exceeded);
        return;
    }
    --retries_left_;
    retransmit_from_oldest();
}

std::optional<Clock::time_point> RcQp::next_deadline() const {
    std::optional<Clock::time_point> d = ack_deadline_;
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
    // Only a PSN among those sent and not yet acknowledged means anything:
    // the rest are duplicate or ghost ACKs (9.7.5.1.1).
    if (unacked_.empty()) {
        ++counters_.ghost_acks;
        return;
    }
    const std::uint32_t oldest = unacked_.front().packet.psn;
    const std::uint32_t newest = psn_add(npsn_, -1);
    const bool in_window = psn_diff(p.psn, oldest) >= -1 && psn_diff(p.psn, newest) <= 0;
    if (!in_window || (type == Aeth::kSyndromeAck && psn_diff(p.psn, oldest) < 0)) {
        ++counters_.ghost_acks;
        return;
    }
    if (type == Aeth::kSyndromeAck) {
        acknowledge_up_to(p.psn);
        retries_left_ = rts_.retry_count;
        rnr_retries_left_ = rts_.rnr_retry;
        return;
    }
    // A NAK acknowledges what came before its PSN (9.7.5.1.2).
    acknowledge_up_to(psn_add(p.psn, -1));
    if (type == Aeth::kSyndromeRnrNak) {
        ++counters_.rnr_naks_received;
        if (rts_.rnr_retry != 7) {
            if (rnr_retries_left_ == 0) {
                complete_error(Status::rnr_retry_exceeded);
                return;
            }
            --rnr_retries_left_;
        }
        // The timer starts now (receive() sets it from the code).
        rnr_until_ = Clock::time_point::max();
        retransmit_from_oldest();
        return;
    }
    ++counters_.naks_received;
    switch (a.syndrome & 0x1F) {
        case nak::psn_sequence_error:
            if (retries_left_ == 0) {
                complete_error(Status::retry_exceeded);
                return;
            }
            --retries_left_;
            retransmit_from_oldest();
            return;
        case nak::invalid_request: complete_error(Status::remote_invalid_request); return;
        case nak::remote_access_error: complete_error(Status::remote_access_error); return;
        default: complete_error(Status::remote_operational_error); return;
    }
}

void RcQp::acknowledge_up_to(std::uint32_t psn) {
    while (!unacked_.empty() && psn_diff(psn, unacked_.front().packet.psn) >= 0) {
        const Outstanding& o = unacked_.front();
        if (o.last) {
            completions_.push_back({.wr_id = o.wr_id, .status = Status::success});
            ++counters_.messages_sent;
        }
        unacked_.pop_front();
        if (next_to_send_ > 0) --next_to_send_;
    }
}

void RcQp::retransmit_from_oldest() {
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
    RcPacket ack;
    ack.opcode = op::rc_acknowledge;
    ack.dest_qp = rtr_.dest_qpn;
    ack.psn = psn;
    ack.aeth = Aeth{syndrome, msn_};
    to_send_.push_back(std::move(ack));
}

void RcQp::responder(const RcPacket& p) {
    const std::int32_t d = psn_diff(p.psn, epsn_);
    if (d < 0) {
        // A duplicate (9.7.5.1.4): not executed again; acknowledged with
        // the newest PSN taken, which covers it.
        ++counters_.duplicates;
        if (p.ack_req) send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeAck | kNoCredits), psn_add(epsn_, -1));
        return;
    }
    if (d > 0) {
        // Packets were lost: one NAK per sequence error, naming the PSN
        // expected (9.7.5.1.3).
        if (!nak_sent_) {
            send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeNak | nak::psn_sequence_error), epsn_);
            ++counters_.naks_sent;
            nak_sent_ = true;
        }
        return;
    }
    nak_sent_ = false;
    const auto invalid = [&] {
        ++counters_.invalid_requests;
        send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeNak | nak::invalid_request), p.psn);
        if (open_) {
            completions_.push_back({.wr_id = open_->wr.wr_id, .receive = true, .status = Status::local_length_error});
            open_.reset();
        }
        // The requester's QP goes to ERR on this NAK; so does this one,
        // after the NAK has left.
        std::vector<RcPacket> nak = std::move(to_send_);
        to_error();
        to_send_ = std::move(nak);
        state_ = QpState::err;
    };
    // Opcode sequence (9.7.5.1.5) and lengths (9.7.5.1.6).
    const bool starts = starts_message(p.opcode), ends = ends_message(p.opcode);
    if (starts == open_.has_value()) {
        invalid();
        return;
    }
    const bool full_packet = !ends;  // FIRST and MIDDLE carry exactly the PMTU
    if ((full_packet && p.payload.size() != rtr_.pmtu) || p.payload.size() > rtr_.pmtu) {
        invalid();
        return;
    }
    if (starts) {
        if (recv_queue_.empty()) {
            // Receiver not ready (9.7.5.2.8): the requester waits and sends
            // this PSN again.
            ++counters_.rnr_naks_sent;
            send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeRnrNak | rtr_.min_rnr_timer), p.psn);
            return;
        }
        open_ = OpenReceive{recv_queue_.front(), {}, false};
        recv_queue_.pop_front();
    }
    if (open_->data.size() + p.payload.size() > open_->wr.capacity) {
        invalid();  // longer than the posted buffer: local length error here, invalid request there
        return;
    }
    open_->data.insert(open_->data.end(), p.payload.begin(), p.payload.end());
    epsn_ = psn_add(epsn_, 1);
    if (ends) {
        msn_ = (msn_ + 1) & kPsnMask;
        ++counters_.messages_received;
        Completion c{.wr_id = open_->wr.wr_id, .receive = true, .status = Status::success};
        c.byte_len = static_cast<std::uint32_t>(open_->data.size());
        c.imm = p.imm;
        c.data = std::move(open_->data);
        completions_.push_back(std::move(c));
        open_.reset();
    }
    if (p.ack_req) send_ack(static_cast<std::uint8_t>(Aeth::kSyndromeAck | kNoCredits), p.psn);
}

}  // namespace ipoibd::transport::rc
