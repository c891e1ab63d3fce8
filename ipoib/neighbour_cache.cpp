// The neighbour state machine; the states and the flow are drawn in
// neighbour_cache.h. Every entry carries one deadline whose meaning follows
// its state, so tick() and next_deadline() are one scan each:
//
//   INCOMPLETE  retransmit the solicit, or give up (FAILED)
//   REACHABLE   reachable_time ran out: STALE
//   STALE       unused for gc_stale_time: remove
//   DELAY       no confirmation came: PROBE
//   PROBE       retransmit the unicast solicit, or give up (FAILED)
//   FAILED      gc_stale_time passed: remove
#include "ipoib/neighbour_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

namespace ipoibd::ipoib {

void visit(const NeighbourCounters& c, CounterSink& out) {
    out.counter("drop_queue_full", c.drop_queue_full);
    out.counter("drop_unresolved", c.drop_unresolved);
    out.counter("drop_table_full", c.drop_table_full);
    out.counter("drop_flushed", c.drop_flushed);
    out.counter("drop_queued_bytes", c.drop_queued_bytes);
    out.counter("solicits", c.solicits);
    out.counter("probes", c.probes);
    out.counter("resolved", c.resolved);
    out.counter("confirmed", c.confirmed);
    out.counter("address_changed", c.address_changed);
    out.counter("became_stale", c.became_stale);
    out.counter("failed", c.failed);
    out.counter("gc_removed", c.gc_removed);
    out.counter("evicted", c.evicted);
    out.counter("re_resolved", c.re_resolved);
}

std::string_view to_string(NeighbourState s) {
    switch (s) {
    case NeighbourState::incomplete: return "INCOMPLETE";
    case NeighbourState::reachable: return "REACHABLE";
    case NeighbourState::stale: return "STALE";
    case NeighbourState::delay: return "DELAY";
    case NeighbourState::probe: return "PROBE";
    case NeighbourState::failed: return "FAILED";
    }
    return "?";
}

std::string_view to_string(NeighbourDropReason r) {
    switch (r) {
    case NeighbourDropReason::queue_full: return "drop_queue_full";
    case NeighbourDropReason::unresolved: return "drop_unresolved";
    case NeighbourDropReason::table_full: return "drop_table_full";
    case NeighbourDropReason::flushed: return "drop_flushed";
    case NeighbourDropReason::queued_bytes: return "drop_queued_bytes";
    }
    return "?";
}

Resolution NeighbourCache::lookup_or_resolve(const IpAddress& ip, std::span<const std::uint8_t> packet,
                                             Clock::time_point now) {
    Resolution r;
    auto it = table_.find(ip);
    if (it == table_.end()) {
        if (table_.size() >= config_.max_entries && !make_room()) {
            ++counters_.drop_table_full;
            r.actions.drops.push_back({.ip = ip, .reason = NeighbourDropReason::table_full, .count = 1});
            return r;
        }
        Entry& e = table_[ip];
        start_resolution(ip, e, now, r.actions);
        if (!packet.empty()) queue_packet(ip, e, packet, r.actions);
        return r;
    }
    Entry& e = it->second;
    switch (e.state) {
    case NeighbourState::reachable:
        // tick() may not have run since reachable_time ran out: age now,
        // then this packet makes the entry "in use" as from STALE.
        if (now < e.deadline) break;
        ++counters_.became_stale;
        enter_delay(e, now);
        break;
    case NeighbourState::stale:
        // RFC 4861 7.3.3: "the first time a node sends a packet to a
        // neighbor whose entry is STALE, the sender changes the state to
        // DELAY".
        enter_delay(e, now);
        break;
    case NeighbourState::delay:
    case NeighbourState::probe:
        break;
    case NeighbourState::incomplete:
        if (!packet.empty()) queue_packet(ip, e, packet, r.actions);
        return r;
    case NeighbourState::failed:
        start_resolution(ip, e, now, r.actions);
        if (!packet.empty()) queue_packet(ip, e, packet, r.actions);
        return r;
    }
    r.send_to = e.hw;
    return r;
}

NeighbourActions NeighbourCache::learn(const IpAddress& ip, const HwAddress& hw, LearnKind kind,
                                       Clock::time_point now) {
    NeighbourActions out;
    auto it = table_.find(ip);
    if (it == table_.end()) {
        // RFC 4861 7.2.5: an NA for a neighbour without an entry is
        // discarded; we asked nobody. A peer that solicits us creates a
        // STALE entry (7.2.3), which saves a resolution when we answer.
        if (kind == LearnKind::solicited) return out;
        if (table_.size() >= config_.max_entries && !make_room()) return out;
        Entry& e = table_[ip];
        e.hw = hw;
        enter_stale(e, now);
        return out;
    }
    Entry& e = it->second;
    const bool had_address = e.hw.has_value();
    const bool changed = had_address && !e.hw->same_endpoint(hw);
    if (changed) ++counters_.address_changed;  // RFC 4391 9.4: a restarted peer has a new QPN
    e.hw = hw;  // also refreshes the flags of an unchanged endpoint

    switch (e.state) {
    case NeighbourState::incomplete:
    case NeighbourState::failed: {
        if (e.state == NeighbourState::incomplete) ++counters_.resolved;
        if (kind == LearnKind::solicited) {
            enter_reachable(e, now);
        } else {
            enter_stale(e, now);
        }
        if (!e.queue.empty()) {
            flush_queue(ip, e, out);
            // The queued packets just went to an unconfirmed address.
            if (e.state == NeighbourState::stale) enter_delay(e, now);
        }
        break;
    }
    case NeighbourState::reachable:
    case NeighbourState::stale:
    case NeighbourState::delay:
    case NeighbourState::probe:
        if (kind == LearnKind::solicited) {
            ++counters_.confirmed;
            enter_reachable(e, now);
        } else if (changed) {
            // RFC 4861 7.2.5/7.2.3: a different address that was not
            // asked for is used, but unconfirmed.
            enter_stale(e, now);
        }
        break;
    }
    return out;
}

NeighbourActions NeighbourCache::advertised(const IpAddress& ip, const std::optional<HwAddress>& target_lla,
                                            bool solicited, bool override_flag, Clock::time_point now) {
    auto it = table_.find(ip);
    if (it == table_.end()) return {};  // "there is no entry: the advertisement SHOULD be silently discarded"
    Entry& e = it->second;
    if (target_lla && !override_flag && e.hw && !e.hw->same_endpoint(*target_lla)) {
        // "If the Override flag is clear and the supplied link-layer
        // address differs from that in the cache, then ... If the state of
        // the entry is REACHABLE, set it to STALE, but do not update the
        // entry in any other way. ... Otherwise, the received advertisement
        // should be ignored and MUST NOT update the cache."
        if (e.state == NeighbourState::reachable) {
            ++counters_.became_stale;
            enter_stale(e, now);
        }
        return {};
    }
    if (target_lla) return learn(ip, *target_lla, solicited ? LearnKind::solicited : LearnKind::unsolicited, now);
    // "If the link layer has addresses and no Target Link-Layer Address
    // option is included, the receiving node SHOULD silently discard the
    // received advertisement" (INCOMPLETE); an entry with an address keeps
    // it, and "If the Solicited flag is set, the state of the entry MUST
    // be set to REACHABLE".
    if (!e.hw || !solicited) return {};
    ++counters_.confirmed;
    enter_reachable(e, now);
    return {};
}

void NeighbourCache::draw_reachable_time() {
    double factor = config_.reachable_factor ? config_.reachable_factor() : 1.0;
    if (!std::isfinite(factor)) factor = 1.0;
    factor = std::clamp(factor, kMinRandomFactor, kMaxRandomFactor);
    reachable_time_ = std::chrono::milliseconds(
        std::llround(static_cast<double>(config_.reachable_time.count()) * factor));
    redraw_at_.reset();
}

std::function<double()> make_reachable_factor(std::uint64_t seed) {
    auto generator = std::make_shared<std::mt19937_64>(seed);
    return [generator] {
        return std::uniform_real_distribution<double>(NeighbourCache::kMinRandomFactor,
                                                      NeighbourCache::kMaxRandomFactor)(*generator);
    };
}

NeighbourActions NeighbourCache::tick(Clock::time_point now) {
    NeighbourActions out;
    if (!redraw_at_) {
        redraw_at_ = now + kRedrawReachableEvery;
    } else if (now >= *redraw_at_) {
        draw_reachable_time();
        redraw_at_ = now + kRedrawReachableEvery;
    }
    for (auto it = table_.begin(); it != table_.end();) {
        if (it->second.deadline <= now) {
            it = expire(it, now, out);
        } else {
            ++it;
        }
    }
    return out;
}

std::optional<Clock::time_point> NeighbourCache::next_deadline() const {
    std::optional<Clock::time_point> next;
    for (const auto& [ip, e] : table_) {
        if (!next || e.deadline < *next) next = e.deadline;
    }
    return next;
}

NeighbourActions NeighbourCache::re_resolve(const HwAddress& gone, Clock::time_point now) {
    NeighbourActions out;
    for (auto& [ip, e] : table_) {
        if (!e.hw || !e.hw->same_endpoint(gone)) continue;
        ++counters_.re_resolved;
        start_resolution(ip, e, now, out);
    }
    return out;
}

NeighbourActions NeighbourCache::flush() {
    NeighbourActions out;
    for (auto& [ip, e] : table_) {
        if (e.queue.empty()) continue;
        counters_.drop_flushed += e.queue.size();
        out.drops.push_back({.ip = ip, .reason = NeighbourDropReason::flushed, .count = e.queue.size()});
    }
    table_.clear();
    queued_bytes_ = 0;
    return out;
}

std::vector<NeighbourEntryView> NeighbourCache::entries() const {
    std::vector<NeighbourEntryView> rows;
    rows.reserve(table_.size());
    for (const auto& [ip, e] : table_) rows.push_back(view(ip, e));
    return rows;
}

std::optional<NeighbourEntryView> NeighbourCache::find(const IpAddress& ip) const {
    auto it = table_.find(ip);
    if (it == table_.end()) return std::nullopt;
    return view(it->first, it->second);
}

NeighbourEntryView NeighbourCache::view(const IpAddress& ip, const Entry& e) {
    return NeighbourEntryView{
        .ip = ip,
        .state = e.state,
        .hw = e.hw,
        .queued = e.queue.size(),
        .solicits_sent = e.solicits_sent,
        .updated = e.updated,
    };
}

void NeighbourCache::start_resolution(const IpAddress& ip, Entry& e, Clock::time_point now, NeighbourActions& out) {
    e.state = NeighbourState::incomplete;
    e.hw.reset();
    e.solicits_sent = 1;
    e.updated = now;
    e.deadline = now + config_.retrans_time;
    ++counters_.solicits;
    out.solicits.push_back({.ip = ip, .unicast_to = std::nullopt});
}

void NeighbourCache::enter_reachable(Entry& e, Clock::time_point now) {
    e.state = NeighbourState::reachable;
    e.solicits_sent = 0;
    e.updated = now;
    e.deadline = now + reachable_time_;
}

void NeighbourCache::enter_stale(Entry& e, Clock::time_point now) {
    e.state = NeighbourState::stale;
    e.solicits_sent = 0;
    e.updated = now;
    e.deadline = now + config_.gc_stale_time;
}

void NeighbourCache::enter_delay(Entry& e, Clock::time_point now) {
    e.state = NeighbourState::delay;
    e.solicits_sent = 0;
    e.updated = now;
    e.deadline = now + config_.delay_first_probe_time;
}

void NeighbourCache::enter_failed(const IpAddress& ip, Entry& e, Clock::time_point now, NeighbourActions& out) {
    ++counters_.failed;
    if (!e.queue.empty()) {
        counters_.drop_unresolved += e.queue.size();
        out.drops.push_back({.ip = ip, .reason = NeighbourDropReason::unresolved, .count = e.queue.size()});
        (void)take_queue(e);
    }
    e.state = NeighbourState::failed;
    e.hw.reset();
    e.solicits_sent = 0;
    e.updated = now;
    e.deadline = now + config_.gc_stale_time;
}

void NeighbourCache::queue_packet(const IpAddress& ip, Entry& e, std::span<const std::uint8_t> packet,
                                  NeighbourActions& out) {
    if (e.queue.size() >= kMaxQueuedPerEntry) {
        ++counters_.drop_queue_full;
        out.drops.push_back({.ip = ip, .reason = NeighbourDropReason::queue_full, .count = 1});
        return;
    }
    if (packet.size() > config_.max_queued_bytes - std::min(queued_bytes_, config_.max_queued_bytes)) {
        ++counters_.drop_queued_bytes;
        out.drops.push_back({.ip = ip, .reason = NeighbourDropReason::queued_bytes, .count = 1});
        return;
    }
    e.queue.emplace_back(packet.begin(), packet.end());
    queued_bytes_ += packet.size();
}

void NeighbourCache::flush_queue(const IpAddress& ip, Entry& e, NeighbourActions& out) {
    out.flushes.push_back({.ip = ip, .to = *e.hw, .packets = take_queue(e)});
}

std::vector<Packet> NeighbourCache::take_queue(Entry& e) {
    for (const Packet& p : e.queue) queued_bytes_ -= p.size();
    std::vector<Packet> packets = std::move(e.queue);
    e.queue.clear();  // moved-from: make it empty for sure
    return packets;
}

NeighbourCache::Table::iterator NeighbourCache::expire(Table::iterator it, Clock::time_point now,
                                                       NeighbourActions& out) {
    const IpAddress& ip = it->first;
    Entry& e = it->second;
    switch (e.state) {
    case NeighbourState::incomplete:
        if (e.solicits_sent < config_.multicast_solicits) {
            ++e.solicits_sent;
            ++counters_.solicits;
            e.deadline = now + config_.retrans_time;
            out.solicits.push_back({.ip = ip, .unicast_to = std::nullopt});
        } else {
            enter_failed(ip, e, now, out);
        }
        break;
    case NeighbourState::reachable:
        ++counters_.became_stale;
        enter_stale(e, now);
        break;
    case NeighbourState::delay:
        e.state = NeighbourState::probe;
        e.solicits_sent = 0;
        e.updated = now;
        [[fallthrough]];
    case NeighbourState::probe:
        if (e.solicits_sent < config_.unicast_probes) {
            ++e.solicits_sent;
            ++counters_.probes;
            e.deadline = now + config_.retrans_time;
            out.solicits.push_back({.ip = ip, .unicast_to = e.hw});
        } else {
            enter_failed(ip, e, now, out);
        }
        break;
    case NeighbourState::stale:
    case NeighbourState::failed:
        ++counters_.gc_removed;
        return table_.erase(it);
    }
    return std::next(it);
}

// Evicts the STALE or FAILED entry changed longest ago: neither holds
// packets, and both would be re-resolved on use anyway. Entries being
// resolved or in use are never evicted, so a flood of new destinations
// cannot push out the ones carrying traffic.
bool NeighbourCache::make_room() {
    auto victim = table_.end();
    for (auto it = table_.begin(); it != table_.end(); ++it) {
        const Entry& e = it->second;
        if (e.state != NeighbourState::stale && e.state != NeighbourState::failed) continue;
        if (victim == table_.end() || e.updated < victim->second.updated) victim = it;
    }
    if (victim == table_.end()) return false;
    table_.erase(victim);
    ++counters_.evicted;
    return true;
}

}  // namespace ipoibd::ipoib
