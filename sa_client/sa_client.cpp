#include "sa_client/sa_client.h"

#include <algorithm>

namespace ipoibd::sa {

void visit(const SaClientCounters& c, CounterSink& out) {
    out.counter("requests", c.requests);
    out.counter("sent", c.sent);
    out.counter("retries", c.retries);
    out.counter("timeouts", c.timeouts);
    out.counter("responses", c.responses);
    out.counter("unmatched", c.unmatched);
    out.counter("mismatched", c.mismatched);
    out.counter("not_from_sm", c.not_from_sm);
    out.counter("malformed", c.malformed);
    out.counter("queue_full", c.queue_full);
    out.counter("cancelled", c.cancelled);
    out.counter("reports", c.reports);
    out.counter("report_duplicates", c.report_duplicates);
}

const char* to_string(SaFailure f) {
    switch (f) {
        case SaFailure::timeout: return "no response from the SA";
        case SaFailure::malformed_response: return "malformed response from the SA";
        case SaFailure::queue_full: return "too many SA requests waiting";
    }
    return "?";
}

void SaClient::Handle::cancel() {
    if (client_) client_->cancel(key_);
    client_ = nullptr;
}

bool SaClient::Handle::pending() const { return client_ && client_->transactions_.count(key_) > 0; }

SaClient::SaClient(Config config) : config_(config), next_key_(config.first_key) {}

SaClient::Handle SaClient::submit(SaMad request, SaCallback callback, Clock::time_point now) {
    last_now_ = now;
    ++counters_.requests;
    if (queued_.size() >= config_.max_queued && in_flight_ >= config_.max_outstanding) {
        ++counters_.queue_full;
        callback(unexpected(SaFailure::queue_full));
        return {};
    }
    std::uint32_t key = next_key_++;
    if (key == 0) key = next_key_++;  // 0 marks "no request"
    request.header.transaction_id = (std::uint64_t{config_.tid_high} << 32) | key;
    Transaction& t = transactions_[key];
    t.request = request;
    t.callback = std::move(callback);
    t.timeout = config_.timeout;
    if (in_flight_ < config_.max_outstanding) {
        ++in_flight_;
        send(t, now);
    } else {
        queued_.push_back(key);
    }
    return Handle(this, key);
}

void SaClient::send(Transaction& t, Clock::time_point now) {
    t.sent = true;
    ++t.tries;
    t.deadline = now + t.timeout;
    outbound_.push_back(t.request);
    ++counters_.sent;
}

void SaClient::start_queued(Clock::time_point now) {
    while (in_flight_ < config_.max_outstanding && !queued_.empty()) {
        const std::uint32_t key = queued_.front();
        queued_.pop_front();
        auto it = transactions_.find(key);
        if (it == transactions_.end()) continue;  // cancelled while queued
        ++in_flight_;
        send(it->second, now);
    }
}

void SaClient::finish(std::uint32_t key, const expected<SaResult, SaFailure>& result) {
    auto it = transactions_.find(key);
    if (it == transactions_.end()) return;
    SaCallback cb = std::move(it->second.callback);
    if (it->second.sent) --in_flight_;
    transactions_.erase(it);
    // The callback may submit or cancel: the table is consistent by now.
    if (cb) cb(result);
}

void SaClient::cancel(std::uint32_t key) {
    auto it = transactions_.find(key);
    if (it == transactions_.end()) return;
    if (it->second.sent) --in_flight_;
    // Not handed out yet (take_outbound): it never leaves.
    const std::uint64_t tid = it->second.request.header.transaction_id;
    counters_.sent -= std::erase_if(outbound_, [&](const SaMad& m) { return m.header.transaction_id == tid; });
    const bool was_sent = it->second.sent;
    transactions_.erase(it);
    std::erase(queued_, key);
    ++counters_.cancelled;
    // Its slot goes to the next queued request now: nothing else might
    // come to send it (next_deadline() knows only requests sent).
    if (was_sent) start_queued(last_now_);
}

namespace {

// The method that answers `request` (IBA 15.2.5: a Set is answered with
// GetResp, the others with their own method and the R bit).
std::uint8_t response_method(std::uint8_t request) {
    return request == ib::method::set ? ib::method::get_resp
                                      : static_cast<std::uint8_t>(request | ib::method::response_bit);
}

}  // namespace

void SaClient::on_mad(bytes mad, Clock::time_point now, std::uint16_t from_lid) {
    last_now_ = now;
    if (from_lid != 0 && sm_lid_ != 0 && from_lid != sm_lid_) {
        ++counters_.not_from_sm;
        return;
    }
    auto decoded = decode_sa_mad(mad);
    if (decoded && decoded->header.method == ib::method::report) {
        SaMad resp = *decoded;
        resp.header.method = ib::method::report_resp;
        outbound_.push_back(resp);
        last_answer_ = now;
        const std::uint64_t tid = decoded->header.transaction_id;
        if (std::find(recent_reports_.begin(), recent_reports_.end(), tid) != recent_reports_.end()) {
            ++counters_.report_duplicates;
            return;
        }
        recent_reports_.push_back(tid);
        if (recent_reports_.size() > 64) recent_reports_.pop_front();
        ++counters_.reports;
        if (report_handler_) report_handler_(*decoded);
        return;
    }
    if (!decoded || !decoded->header.is_response()) {
        ++counters_.malformed;
        return;
    }
    const auto key = static_cast<std::uint32_t>(decoded->header.transaction_id);
    auto it = transactions_.find(key);
    if (it == transactions_.end() || !it->second.sent) {
        ++counters_.unmatched;
        return;
    }
    Transaction& t = it->second;
    if (decoded->header.method != response_method(t.request.header.method) ||
        decoded->header.attribute_id != t.request.header.attribute_id) {
        ++counters_.mismatched;  // the request stays: retried, or timed out
        return;
    }
    last_answer_ = now;  // the SA answered this request (whatever the status, or a segment of it)
    // RMPPVersion 0 means RMPP is not in use, whatever the flags say (an
    // unsegmented table from OpenSM arrives like that through libumad2sim).
    if (!decoded->rmpp.active() || decoded->rmpp.rmpp_version == 0) {
        ++counters_.responses;
        SaResult r{*decoded, std::vector<std::uint8_t>(decoded->data.begin(), decoded->data.end())};
        finish(key, r);
        start_queued(now);
        return;
    }
    if (!t.rmpp) {
        // A straggler of a transfer we aborted (its window was on the way):
        // a new transfer starts at segment 1.
        if (decoded->rmpp.segment_number() != 1) {
            ++counters_.unmatched;
            return;
        }
        t.rmpp.emplace();
    }
    auto step = t.rmpp->add(*decoded);
    if (!step) {
        ++counters_.malformed;
        // The SA ended the transfer itself (STOP or ABORT): nothing to
        // answer, and asking again would meet the same end.
        const bool stopped = step.error() == RmppError::stopped;
        if (!stopped) outbound_.push_back(make_rmpp_abort(*decoded, rmpp_abort_status(step.error())));
        if (!stopped && t.tries <= config_.retries) {
            // A lost or broken segment: the whole request again (docs/sa.md).
            ++counters_.retries;
            t.rmpp.reset();
            send(t, now);
            return;
        }
        finish(key, unexpected(SaFailure::malformed_response));
        start_queued(now);
        return;
    }
    if (step->ack) outbound_.push_back(*step->ack);
    t.deadline = now + t.timeout;  // progress: the transfer is alive
    if (step->step != RmppReassembler::Step::complete) return;
    ++counters_.responses;
    SaResult r{t.rmpp->header(), std::vector<std::uint8_t>(t.rmpp->payload().begin(), t.rmpp->payload().end())};
    finish(key, r);
    start_queued(now);
}

void SaClient::tick(Clock::time_point now) {
    last_now_ = now;
    std::vector<std::uint32_t> expired;
    for (auto& [key, t] : transactions_) {
        if (!t.sent || now < t.deadline) continue;
        if (t.tries > config_.retries) {
            expired.push_back(key);
            continue;
        }
        ++counters_.retries;
        t.timeout = std::min(t.timeout * 2, config_.max_timeout);
        t.rmpp.reset();  // a retried request starts its transfer over
        send(t, now);
    }
    for (std::uint32_t key : expired) {
        ++counters_.timeouts;
        finish(key, unexpected(SaFailure::timeout));
    }
    start_queued(now);
}

std::optional<Clock::time_point> SaClient::next_deadline() const {
    std::optional<Clock::time_point> next;
    for (const auto& [key, t] : transactions_)
        if (t.sent && (!next || t.deadline < *next)) next = t.deadline;
    return next;
}

std::vector<SaMad> SaClient::take_outbound() { return std::exchange(outbound_, {}); }

}  // namespace ipoibd::sa
