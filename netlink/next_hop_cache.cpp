#include "netlink/next_hop_cache.h"

#include <algorithm>
#include <cerrno>
#include <utility>

namespace ipoibd::netlink {

NextHopCache::NextHopCache(NextHopLookup lookup, std::size_t capacity)
    : lookup_(std::move(lookup)), capacity_(std::max<std::size_t>(capacity, 1)) {
    entries_.reserve(capacity_);
}

expected<NextHop, NetlinkError> NextHopCache::resolve(const IpAddress& destination) {
    if (auto it = entries_.find(destination); it != entries_.end()) {
        ++counters_.hits;
        if (it->second.hop) return *it->second.hop;
        ++counters_.no_route_hits;
        return unexpected(NetlinkError{.operation = "RTM_GETROUTE " + to_string(destination) + " (cached)",
                                       .error = it->second.error});
    }
    ++counters_.misses;
    auto hop = lookup_(destination);
    if (!hop) ++counters_.lookups_failed;
    const bool no_route = !hop && (hop.error().error == ENETUNREACH || hop.error().error == EHOSTUNREACH);
    if (!hop && !no_route) return hop;
    if (entries_.size() >= capacity_) {
        entries_.erase(insertion_order_.front());
        insertion_order_.pop_front();
        ++counters_.evictions;
    }
    entries_.emplace(destination, hop ? Entry{.hop = *hop} : Entry{.error = hop.error().error});
    insertion_order_.push_back(destination);
    return hop;
}

std::optional<NextHop> NextHopCache::peek(const IpAddress& destination) const {
    if (auto it = entries_.find(destination); it != entries_.end()) return it->second.hop;
    return std::nullopt;
}

void NextHopCache::invalidate() {
    ++counters_.invalidations;
    entries_.clear();
    insertion_order_.clear();
}

}  // namespace ipoibd::netlink
