#include "ipoib/mac_table.h"

#include <algorithm>
#include <cstring>

namespace ipoibd::ipoib {

namespace {
constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

std::uint64_t fnv1a(const std::uint8_t* p, std::size_t n, std::uint64_t h = kFnvOffset) {
    for (std::size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= kFnvPrime;
    }
    return h;
}
}  // namespace

MacAddress synthetic_mac(const ib::Gid& gid, unsigned attempt) {
    MacAddress m{};
    m[0] = kMacLocallyAdministered;
    if (attempt == 0) {
        // The GUID is gid[8..16); its low 40 bits are gid[11..16).
        std::memcpy(m.data() + 1, gid.data() + 11, 5);
        return m;
    }
    const std::uint8_t a[4] = {static_cast<std::uint8_t>(attempt >> 24), static_cast<std::uint8_t>(attempt >> 16),
                               static_cast<std::uint8_t>(attempt >> 8), static_cast<std::uint8_t>(attempt)};
    const std::uint64_t h = fnv1a(a, sizeof a, fnv1a(gid.data(), gid.size()));
    for (std::size_t i = 0; i < 5; ++i) m[1 + i] = static_cast<std::uint8_t>(h >> (8 * i));
    return m;
}

void visit(const MacTableCounters& c, CounterSink& out) {
    out.counter("added", c.added);
    out.counter("removed", c.removed);
    out.counter("collisions", c.collisions);
    out.counter("full", c.full);
    out.counter("lid_full", c.lid_full);
    out.counter("address_changed", c.address_changed);
}

std::size_t MacTable::MacHash::operator()(const MacAddress& m) const noexcept {
    return static_cast<std::size_t>(fnv1a(m.data(), m.size()));
}

std::size_t MacTable::GidHash::operator()(const ib::Gid& g) const noexcept {
    return static_cast<std::size_t>(fnv1a(g.data(), g.size()));
}

void MacTable::forget_source(const Entry& e) {
    if (e.lid == 0) return;
    auto it = by_source_.find(source_key(e.lid, e.hw.qpn));
    if (it != by_source_.end() && by_gid_.count(e.hw.gid) && it->second == by_gid_.at(e.hw.gid)) by_source_.erase(it);
}

void MacTable::add_lid(std::uint16_t lid, const MacAddress& mac) {
    if (lid == 0) return;
    AtLid& at = by_lid_[lid];
    if (at.entries++ == 0) at.mac = mac;
}

void MacTable::drop_lid(std::uint16_t lid, const MacAddress& mac) {
    auto it = by_lid_.find(lid);
    if (lid == 0 || it == by_lid_.end()) return;
    if (--it->second.entries == 0) {
        by_lid_.erase(it);
        return;
    }
    if (it->second.mac != mac) return;
    // The MAC it kept is going: another entry at the LID (a scan, only when
    // endpoints share a port's LID).
    for (const auto& [m, e] : by_mac_)
        if (e.lid == lid && m != mac) {
            it->second.mac = m;
            return;
        }
}

std::optional<MacAddress> MacTable::learn(const HwAddress& hw, std::uint16_t lid, Clock::time_point now) {
    if (auto g = by_gid_.find(hw.gid); g != by_gid_.end()) {
        Entry& e = by_mac_.at(g->second);
        if (e.hw != hw || (lid != 0 && lid != e.lid)) {
            if (!e.hw.same_endpoint(hw)) ++counters_.address_changed;
            forget_source(e);
            e.hw = hw;
            if (lid != 0 && lid != e.lid) {
                drop_lid(e.lid, g->second);
                e.lid = lid;
                add_lid(lid, g->second);
            }
            if (e.lid != 0) by_source_[source_key(e.lid, e.hw.qpn)] = g->second;
        }
        e.used = now;
        return g->second;
    }
    if (auto at = by_lid_.find(lid); lid != 0 && at != by_lid_.end() && at->second.entries >= config_.max_per_lid) {
        ++counters_.lid_full;
        return std::nullopt;
    }
    if (by_mac_.size() >= config_.max_entries && !make_room(now)) {
        ++counters_.full;
        return std::nullopt;
    }
    // The GUID's MAC unless taken; then hashed ones (bounded: the table is
    // far smaller than 2^40, so a free one comes within a few attempts).
    auto taken = [&](const MacAddress& m) { return by_mac_.count(m) > 0 || m == reserved_; };
    MacAddress mac = synthetic_mac(hw.gid, 0);
    for (unsigned attempt = 1; taken(mac) && attempt < 64; ++attempt) {
        if (attempt == 1) ++counters_.collisions;
        mac = synthetic_mac(hw.gid, attempt);
    }
    if (taken(mac)) {
        ++counters_.full;
        return std::nullopt;
    }
    by_mac_.emplace(mac, Entry{.hw = hw, .lid = lid, .used = now});
    by_gid_.emplace(hw.gid, mac);
    if (lid != 0) by_source_[source_key(lid, hw.qpn)] = mac;
    add_lid(lid, mac);
    ++counters_.added;
    return mac;
}

std::optional<HwAddress> MacTable::find(const MacAddress& mac, Clock::time_point now) {
    auto it = by_mac_.find(mac);
    if (it == by_mac_.end()) return std::nullopt;
    it->second.used = now;
    return it->second.hw;
}

std::optional<MacAddress> MacTable::mac_of_source(std::uint16_t slid, std::uint32_t qpn) const {
    if (auto it = by_source_.find(source_key(slid, qpn)); it != by_source_.end()) return it->second;
    if (auto at = by_lid_.find(slid); at != by_lid_.end() && at->second.entries == 1) return at->second.mac;
    return std::nullopt;
}

std::optional<MacAddress> MacTable::mac_of(const ib::Gid& gid) const {
    auto it = by_gid_.find(gid);
    if (it == by_gid_.end()) return std::nullopt;
    return it->second;
}

std::optional<MacEntryView> MacTable::entry_of(const ib::Gid& gid) const {
    auto it = by_gid_.find(gid);
    if (it == by_gid_.end()) return std::nullopt;
    const Entry& e = by_mac_.at(it->second);
    return MacEntryView{it->second, e.hw, e.lid};
}

void MacTable::prune(const std::function<bool(const ib::Gid&)>& referenced, Clock::time_point now) {
    for (auto it = by_mac_.begin(); it != by_mac_.end();) {
        const Entry& e = it->second;
        if (referenced(e.hw.gid) || now - e.used < config_.idle) {
            ++it;
            continue;
        }
        forget_source(e);
        by_gid_.erase(e.hw.gid);
        const std::uint16_t lid = e.lid;
        const MacAddress mac = it->first;
        it = by_mac_.erase(it);
        drop_lid(lid, mac);
        ++counters_.removed;
    }
}

bool MacTable::make_room(Clock::time_point now) {
    // The least recently used entry, if it has been idle long enough.
    auto oldest = std::min_element(by_mac_.begin(), by_mac_.end(),
                                   [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    if (oldest == by_mac_.end() || now - oldest->second.used < config_.idle) return false;
    forget_source(oldest->second);
    by_gid_.erase(oldest->second.hw.gid);
    const std::uint16_t lid = oldest->second.lid;
    const MacAddress mac = oldest->first;
    by_mac_.erase(oldest);
    drop_lid(lid, mac);
    ++counters_.removed;
    return true;
}

void MacTable::clear() {
    counters_.removed += by_mac_.size();
    by_mac_.clear();
    by_gid_.clear();
    by_source_.clear();
    by_lid_.clear();
}

std::vector<MacEntryView> MacTable::entries() const {
    std::vector<MacEntryView> out;
    out.reserve(by_mac_.size());
    for (const auto& [mac, e] : by_mac_) out.push_back({mac, e.hw, e.lid});
    std::sort(out.begin(), out.end(), [](const MacEntryView& a, const MacEntryView& b) { return a.mac < b.mac; });
    return out;
}

}  // namespace ipoibd::ipoib
