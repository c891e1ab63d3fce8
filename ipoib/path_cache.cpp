#include "ipoib/path_cache.h"

#include <algorithm>

#include "transport/wire/mad.h"

namespace ipoibd::ipoib {

void visit(const PathCounters& c, CounterSink& out) {
    out.counter("queries", c.queries);
    out.counter("resolved", c.resolved);
    out.counter("refreshed", c.refreshed);
    out.counter("changed", c.changed);
    out.counter("failures", c.failures);
    out.counter("refresh_kept", c.refresh_kept);
    out.counter("drop_queue_full", c.drop_queue_full);
    out.counter("drop_queued_bytes", c.drop_queued_bytes);
    out.counter("drop_failed", c.drop_failed);
    out.counter("drop_table_full", c.drop_table_full);
    out.counter("drop_origin_busy", c.drop_origin_busy);
    out.counter("drop_flushed", c.drop_flushed);
    out.counter("flushes", c.flushes);
    out.counter("evicted", c.evicted);
}

std::string_view to_string(PathState s) {
    switch (s) {
    case PathState::resolving: return "RESOLVING";
    case PathState::valid: return "VALID";
    case PathState::failed: return "FAILED";
    }
    return "?";
}

bool PathCache::origin_busy(std::uint16_t origin) const {
    if (origin == 0) return false;
    const auto it = resolving_by_origin_.find(origin);
    return it != resolving_by_origin_.end() && it->second >= kMaxResolvingPerOrigin;
}

void PathCache::start_resolving(Entry& e, std::uint16_t origin) {
    e.state = PathState::resolving;
    e.origin = origin;
    if (origin != 0) ++resolving_by_origin_[origin];
}

void PathCache::stop_resolving(Entry& e) {
    if (e.state != PathState::resolving || e.origin == 0) return;
    if (auto it = resolving_by_origin_.find(e.origin); it != resolving_by_origin_.end() && --it->second == 0)
        resolving_by_origin_.erase(it);
    e.origin = 0;
}

void PathCache::enqueue(Entry& e, std::uint32_t qpn, bytes frame, std::uint8_t flags) {
    if (queued_bytes_ + frame.size() > config_.max_queued_bytes) {
        ++counters_.drop_queued_bytes;
        return;
    }
    e.queue.push_back({qpn, Packet(frame.begin(), frame.end()), flags});
    queued_bytes_ += frame.size();
}

std::vector<QueuedFrame> PathCache::take_queue(Entry& e) {
    for (const QueuedFrame& f : e.queue) queued_bytes_ -= f.frame.size();
    std::vector<QueuedFrame> out = std::move(e.queue);
    e.queue.clear();
    return out;
}

std::optional<PathInfo> PathCache::lookup(const ib::Gid& dgid, std::uint32_t qpn, bytes frame,
                                          Clock::time_point now, std::uint8_t flags, std::uint16_t origin) {
    auto it = table_.find(dgid);
    if (it == table_.end()) {
        if (origin_busy(origin)) {
            ++counters_.drop_origin_busy;
            return std::nullopt;
        }
        if (table_.size() >= config_.max_entries && !make_room()) {
            ++counters_.drop_table_full;
            return std::nullopt;
        }
        it = table_.emplace(dgid, Entry{}).first;
        start_resolving(it->second, origin);
        it->second.last_used = now;
        enqueue(it->second, qpn, frame, flags);
        start_query(dgid, now);  // a refusal drops the frame, counted
        return std::nullopt;
    }
    Entry& e = it->second;
    e.last_used = now;
    switch (e.state) {
    case PathState::valid: {
        // Revalidate an old path in the background; keep using it meanwhile
        // (also when the refresh fails at once).
        const std::optional<PathInfo> path = e.path;
        if (now - e.path->resolved_at >= config_.lifetime && now >= e.refresh_after && !e.query.pending()) {
            ++counters_.refreshed;
            start_query(dgid, now);
        }
        return path;
    }
    case PathState::failed:
        if (now < e.failed_until) {
            ++counters_.drop_failed;
            return std::nullopt;
        }
        if (origin_busy(origin)) {
            ++counters_.drop_origin_busy;
            return std::nullopt;
        }
        start_resolving(e, origin);
        start_query(dgid, now);
        // Refused at once (the SaClient's queue full): FAILED again.
        it = table_.find(dgid);
        if (it == table_.end() || it->second.state != PathState::resolving) {
            ++counters_.drop_failed;
            return std::nullopt;
        }
        [[fallthrough]];
    case PathState::resolving:
        if (it->second.queue.size() >= kMaxQueuedPerPath) {
            ++counters_.drop_queue_full;
            return std::nullopt;
        }
        enqueue(it->second, qpn, frame, flags);
        return std::nullopt;
    }
    return std::nullopt;
}

std::optional<PathInfo> PathCache::find(const ib::Gid& dgid) const {
    auto it = table_.find(dgid);
    if (it == table_.end() || it->second.state != PathState::valid) return std::nullopt;
    return it->second.path;
}

bool PathCache::note_source(const ib::Gid& dgid, std::uint16_t slid, Clock::time_point now) {
    auto it = table_.find(dgid);
    if (it == table_.end() || it->second.state != PathState::valid) return false;
    const Entry& e = it->second;
    if (e.path->dlid == slid || e.query.pending() || now < e.refresh_after) return false;
    ++counters_.refreshed;
    start_query(dgid, now);
    return true;
}

void PathCache::start_query(const ib::Gid& dgid, Clock::time_point now) {
    sa::PathQuery q;
    q.set_dgid(dgid).set_sgid(sgid_).set_p_key(pkey_).set_numb_path(1).set_reversible(true);
    auto mad = q.request(ib::method::get, 0);
    if (!mad) {  // our own fields out of range: cannot happen with a 16-bit P_Key
        on_answer(dgid, unexpected(sa::SaFailure::malformed_response));
        return;
    }
    ++counters_.queries;
    sa::SaClient::Handle query =
        sa_.submit(*mad, [this, dgid](const expected<sa::SaResult, sa::SaFailure>& r) { on_answer(dgid, r); }, now);
    // A refused submit has called on_answer() already, which may have
    // erased the entry: look it up again rather than hold it across.
    if (auto it = table_.find(dgid); it != table_.end()) it->second.query = std::move(query);
}

void PathCache::on_answer(const ib::Gid& dgid, const expected<sa::SaResult, sa::SaFailure>& result) {
    auto it = table_.find(dgid);
    if (it == table_.end()) return;
    Entry& e = it->second;
    std::uint16_t status = 0;
    std::optional<PathInfo> path;
    if (result) {
        status = result->status();
        if (status == 0) {
            const auto rec = sa::get_record<sa::PathRecord>(result->header);
            // A record for some other destination, or with no LID, is no path.
            if (rec.dgid == dgid && rec.dlid != 0)
                path = PathInfo{.dlid = rec.dlid, .sl = rec.sl, .mtu = rec.mtu, .rate = rec.rate, .resolved_at = now_};
        }
    }
    if (!path) {
        ++counters_.failures;
        if (e.state == PathState::valid && !result) {
            // No answer: the path held stays (header, 4.).
            ++counters_.refresh_kept;
            e.refresh_after = now_ + config_.refresh_retry;
            sink_.path_failed(dgid, status, 0);
            return;
        }
        if (e.state == PathState::valid) {
            // The SA says there is no such path now: resolve afresh next time.
            (void)take_queue(e);
            table_.erase(it);
            sink_.path_failed(dgid, status, 0);
            return;
        }
        const std::size_t dropped = take_queue(e).size();
        counters_.drop_failed += dropped;
        stop_resolving(e);
        e.state = PathState::failed;
        e.failed_until = now_ + config_.failed_hold;
        sink_.path_failed(dgid, status, dropped);
        return;
    }
    const bool was_valid = e.state == PathState::valid;
    const bool changed = was_valid && (e.path->dlid != path->dlid || e.path->sl != path->sl || e.path->mtu != path->mtu);
    if (changed) ++counters_.changed;
    if (!was_valid) ++counters_.resolved;
    stop_resolving(e);
    e.state = PathState::valid;
    e.path = path;
    std::vector<QueuedFrame> frames = take_queue(e);
    if (!was_valid || changed || !frames.empty()) sink_.path_ready(dgid, *path, std::move(frames));
}

std::size_t PathCache::flush() {
    std::size_t dropped = 0;
    for (auto& [gid, e] : table_) dropped += e.queue.size();
    counters_.drop_flushed += dropped;
    ++counters_.flushes;
    table_.clear();  // Handles cancel the queries in flight
    queued_bytes_ = 0;
    resolving_by_origin_.clear();
    return dropped;
}

bool PathCache::make_room() {
    // Evict the least recently used entry that holds no frames.
    auto victim = table_.end();
    for (auto it = table_.begin(); it != table_.end(); ++it) {
        if (!it->second.queue.empty()) continue;
        if (victim == table_.end() || it->second.last_used < victim->second.last_used) victim = it;
    }
    if (victim == table_.end()) return false;
    stop_resolving(victim->second);
    table_.erase(victim);
    ++counters_.evicted;
    return true;
}

std::vector<PathEntryView> PathCache::entries() const {
    std::vector<PathEntryView> out;
    out.reserve(table_.size());
    for (const auto& [gid, e] : table_)
        out.push_back({.dgid = gid, .state = e.state, .path = e.path, .queued = e.queue.size(), .last_used = e.last_used});
    return out;
}

}  // namespace ipoibd::ipoib
