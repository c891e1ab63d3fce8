#include "fabric/routing/routing.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <unordered_map>

namespace ipoibd::fabric::routing {
namespace {

constexpr std::uint32_t kNoRank = std::numeric_limits<std::uint32_t>::max();

// Hops from every switch port to every destination switch: one row of
// total_ports() entries per destination, the ports of switch s at offset[s].
class HopTable {
public:
    explicit HopTable(const Topology& t) : t_(t), n_(t.switches().size()) {
        offset_.reserve(n_);
        std::size_t at = 0;
        for (const SwitchNode& s : t.switches()) {
            offset_.push_back(at);
            at += s.ports.size();
        }
        port_hops_.assign(n_ * t.total_ports(), kUnreachable);
        least_.assign(n_ * n_, kUnreachable);
    }
    std::uint8_t port(std::size_t dest, std::size_t sw, std::uint8_t p) const {
        return port_hops_[dest * t_.total_ports() + offset_[sw] + p];
    }
    std::uint8_t least(std::size_t dest, std::size_t sw) const { return least_[dest * n_ + sw]; }
    void set(std::size_t dest, std::size_t sw, std::uint8_t p, std::uint8_t hops) {
        port_hops_[dest * t_.total_ports() + offset_[sw] + p] = hops;
        std::uint8_t& l = least_[dest * n_ + sw];
        l = std::min(l, hops);
    }
    std::vector<std::uint8_t> take_least() { return std::move(least_); }

private:
    const Topology& t_;
    std::size_t n_;
    std::vector<std::size_t> offset_;
    std::vector<std::uint8_t> port_hops_;
    std::vector<std::uint8_t> least_;
};

std::uint8_t plus_one(std::uint8_t hops) {
    return hops >= kUnreachable - 1 ? kUnreachable : static_cast<std::uint8_t>(hops + 1);
}

// minhop: breadth-first from each destination switch, then each port's
// hops are its neighbour's least plus one.
void minhop_hops(const Topology& t, HopTable& h) {
    const auto& sws = t.switches();
    std::vector<std::uint8_t> dist(sws.size());
    std::deque<std::uint32_t> queue;
    for (std::uint32_t d = 0; d < sws.size(); ++d) {
        std::fill(dist.begin(), dist.end(), kUnreachable);
        dist[d] = 0;
        queue.assign(1, d);
        while (!queue.empty()) {
            const std::uint32_t u = queue.front();
            queue.pop_front();
            for (const PortPeer& peer : sws[u].ports) {
                if (peer.kind != PortPeer::Kind::link || dist[peer.index] != kUnreachable) continue;
                dist[peer.index] = plus_one(dist[u]);
                queue.push_back(peer.index);
            }
        }
        h.set(d, d, 0, 0);
        for (std::uint32_t s = 0; s < sws.size(); ++s)
            for (unsigned p = 1; p < sws[s].ports.size(); ++p) {
                const PortPeer& peer = sws[s].ports[p];
                if (peer.kind == PortPeer::Kind::link && dist[peer.index] != kUnreachable)
                    h.set(d, s, static_cast<std::uint8_t>(p), plus_one(dist[peer.index]));
            }
    }
}

enum class Dir : std::uint8_t { up, down };

// OpenSM's updn_get_dir: the direction of the step from `cur` to `rem`.
Dir direction(std::uint32_t cur_rank, std::uint32_t rem_rank, std::uint64_t cur_guid, std::uint64_t rem_guid) {
    if (cur_rank == 0 && rem_rank == 0) return Dir::up;  // two roots cabled together
    if (cur_rank < rem_rank) return Dir::down;
    if (cur_rank > rem_rank) return Dir::up;
    return cur_guid > rem_guid ? Dir::up : Dir::down;
}

std::vector<std::uint32_t> rank_from(const Topology& t, const std::vector<std::uint32_t>& roots) {
    const auto& sws = t.switches();
    std::vector<std::uint32_t> rank(sws.size(), kNoRank);
    std::deque<std::uint32_t> queue;
    for (std::uint32_t r : roots) {
        rank[r] = 0;
        queue.push_back(r);
    }
    while (!queue.empty()) {
        const std::uint32_t u = queue.front();
        queue.pop_front();
        for (const PortPeer& peer : sws[u].ports) {
            if (peer.kind != PortPeer::Kind::link || rank[peer.index] <= rank[u] + 1) continue;
            rank[peer.index] = rank[u] + 1;
            queue.push_back(peer.index);
        }
    }
    return rank;
}

// updn: OpenSM's updn_bfs_by_node from each destination switch. A switch
// is reached with the direction of the step that first improved it, and no
// step goes up after a step down.
void updn_hops(const Topology& t, const std::vector<std::uint32_t>& rank, HopTable& h) {
    const auto& sws = t.switches();
    std::vector<Dir> dir(sws.size(), Dir::up);
    std::vector<bool> queued(sws.size(), false);
    std::deque<std::uint32_t> queue;
    for (std::uint32_t d = 0; d < sws.size(); ++d) {
        h.set(d, d, 0, 0);
        dir[d] = Dir::up;
        queue.assign(1, d);
        while (!queue.empty()) {
            const std::uint32_t u = queue.front();
            queue.pop_front();
            queued[u] = false;
            const Dir current = dir[u];
            for (unsigned p = 1; p < sws[u].ports.size(); ++p) {
                const PortPeer& peer = sws[u].ports[p];
                if (peer.kind != PortPeer::Kind::link) continue;
                const std::uint32_t r = peer.index;
                const Dir next = direction(rank[u], rank[r], sws[u].guid, sws[r].guid);
                if (current == Dir::down && next == Dir::up) continue;
                const std::uint8_t via = plus_one(h.least(d, u));
                if (via >= h.port(d, r, peer.port)) continue;
                h.set(d, r, peer.port, via);
                if (!queued[r]) {
                    dir[r] = next;
                    queued[r] = true;
                    queue.push_back(r);
                }
            }
        }
    }
}

struct Target {
    std::uint64_t guid = 0;
    std::uint16_t lid = 0;
    std::uint32_t sw = 0;     // the switch it is, or is plugged into
    std::uint8_t port = 0;    // 0 for a switch; the endpoint's switch port
    bool is_switch = false;
};

// Every target with a LID in port GUID order (OpenSM's port_order_list);
// an endpoint whose switch port no longer leads to it is left out.
std::vector<Target> targets_of(const Topology& t) {
    std::vector<Target> out;
    out.reserve(t.switches().size() + t.endpoints().size());
    for (std::uint32_t s = 0; s < t.switches().size(); ++s) {
        const SwitchNode& sw = t.switches()[s];
        if (sw.lid != 0) out.push_back(Target{.guid = sw.guid, .lid = sw.lid, .sw = s, .port = 0, .is_switch = true});
    }
    for (std::uint32_t e = 0; e < t.endpoints().size(); ++e) {
        const Endpoint& ep = t.endpoints()[e];
        if (ep.lid == 0) continue;
        const PortPeer& there = t.peer(ep.switch_index, ep.switch_port);
        if (there.kind != PortPeer::Kind::endpoint || there.index != e) continue;
        out.push_back(Target{.guid = ep.guid, .lid = ep.lid, .sw = ep.switch_index, .port = ep.switch_port});
    }
    std::stable_sort(out.begin(), out.end(), [](const Target& a, const Target& b) { return a.guid < b.guid; });
    return out;
}

// osm_switch_recommend_path for LMC 0, without port shifting or scatter.
void build_lfts(const Topology& t, const HopTable& h, const RoutingOptions& options, Routes& routes) {
    const auto& sws = t.switches();
    const std::vector<Target> targets = targets_of(t);
    const std::size_t top = std::size_t{t.max_lid()} + 1;
    std::unordered_map<std::uint64_t, std::size_t> previous_index;
    if (options.previous)
        for (std::size_t i = 0; i < options.previous->switch_guids.size(); ++i)
            previous_index[options.previous->switch_guids[i]] = i;
    std::size_t ca_lids = 0;
    for (const Target& target : targets) ca_lids += target.is_switch ? 0u : 1u;

    routes.lft.assign(sws.size(), {});
    std::vector<std::uint32_t> paths;  // CA LIDs routed out of each port of this switch
    for (std::uint32_t s = 0; s < sws.size(); ++s) {
        const SwitchNode& sw = sws[s];
        std::vector<std::uint8_t>& lft = routes.lft[s];
        lft.assign(top, kNoPort);
        paths.assign(sw.ports.size(), 0);
        const std::vector<std::uint8_t>* before = nullptr;
        if (const auto it = previous_index.find(sw.guid); it != previous_index.end())
            before = &options.previous->lft[it->second];
        std::size_t routed_cas = 0;
        for (const Target& target : targets) {
            if (target.sw == s) {
                lft[target.lid] = target.port;
                if (!target.is_switch) {
                    ++paths[target.port];
                    ++routed_cas;
                }
                continue;
            }
            const std::uint8_t least = h.least(target.sw, s);
            if (least == kUnreachable) continue;
            std::uint8_t best = kNoPort;
            if (before && target.lid < before->size()) {
                const std::uint8_t p = (*before)[target.lid];
                if (p != kNoPort && p != 0 && p < sw.ports.size() && sw.ports[p].kind == PortPeer::Kind::link &&
                    h.port(target.sw, s, p) == least)
                    best = p;
            }
            if (best == kNoPort) {
                std::uint32_t fewest = std::numeric_limits<std::uint32_t>::max();
                for (unsigned p = 1; p < sw.ports.size(); ++p) {
                    if (sw.ports[p].kind != PortPeer::Kind::link) continue;
                    if (h.port(target.sw, s, static_cast<std::uint8_t>(p)) != least) continue;
                    if (paths[p] < fewest) {
                        fewest = paths[p];
                        best = static_cast<std::uint8_t>(p);
                    }
                }
            }
            if (best == kNoPort) continue;
            lft[target.lid] = best;
            if (!target.is_switch) {
                ++paths[best];
                ++routed_cas;
            }
        }
        routes.unrouted += ca_lids - routed_cas;
    }
}

}  // namespace

const char* to_string(Engine e) {
    switch (e) {
        case Engine::minhop: return "minhop";
        case Engine::updn: return "updn";
    }
    return "?";
}

std::optional<Engine> parse_engine(const std::string& name) {
    if (name == "minhop") return Engine::minhop;
    if (name == "updn") return Engine::updn;
    return std::nullopt;
}

std::vector<std::uint32_t> updn_roots_by_min_hop(const Topology& t) {
    HopTable h(t);
    minhop_hops(t, h);
    // CA ports per switch, and in all.
    std::vector<unsigned> cas(t.switches().size(), 0);
    unsigned total = 0;
    for (std::uint32_t e = 0; e < t.endpoints().size(); ++e) {
        const Endpoint& ep = t.endpoints()[e];
        const PortPeer& there = t.peer(ep.switch_index, ep.switch_port);
        if (there.kind != PortPeer::Kind::endpoint || there.index != e) continue;
        ++cas[ep.switch_index];
        ++total;
    }
    const double over90 = total * 0.9;
    const double over5 = total * 0.05;
    std::vector<std::uint32_t> roots;
    for (std::uint32_t s = 0; s < t.switches().size(); ++s) {
        // Hops from s to the CA ports, by the switch each is plugged into
        // (OpenSM counts them at the hops to that switch's LID).
        std::map<unsigned, unsigned> histogram;
        for (std::uint32_t d = 0; d < t.switches().size(); ++d) {
            if (cas[d] == 0) continue;
            const std::uint8_t hops = h.least(d, s);
            if (hops == kUnreachable) continue;
            histogram[hops] += cas[d];
        }
        unsigned bars90 = 0;
        unsigned bars5 = 0;
        for (const auto& [hops, n] : histogram) {
            bars90 += n > over90 ? 1u : 0u;
            bars5 += n > over5 ? 1u : 0u;
        }
        if (bars90 == 1 && bars5 == 1) roots.push_back(s);
    }
    return roots;
}

RoutingResult route(const Topology& t, const RoutingOptions& options) {
    RoutingResult result;
    Routes routes;
    routes.engine = options.engine;
    routes.switches = t.switches().size();
    for (const SwitchNode& s : t.switches()) routes.switch_guids.push_back(s.guid);
    HopTable h(t);
    if (options.engine == Engine::minhop) {
        minhop_hops(t, h);
    } else {
        if (t.switches().empty()) {
            result.error = "updn needs a switched subnet: there is no switch";
            return result;
        }
        if (options.root_guids.empty()) {
            routes.roots = updn_roots_by_min_hop(t);
            if (routes.roots.empty()) {
                result.error = "updn found no root switch (no switch sees 90% of the CA ports at one hop count); "
                               "name the roots";
                return result;
            }
        } else {
            for (std::uint64_t guid : options.root_guids) {
                const auto& sws = t.switches();
                const auto it = std::find_if(sws.begin(), sws.end(), [&](const SwitchNode& s) { return s.guid == guid; });
                if (it == sws.end()) continue;  // a root not in the subnet now: OpenSM skips it too
                routes.roots.push_back(static_cast<std::uint32_t>(it - sws.begin()));
            }
            if (routes.roots.empty()) {
                result.error = "updn: none of the root GUIDs named is a switch of the subnet";
                return result;
            }
        }
        updn_hops(t, rank_from(t, routes.roots), h);
    }
    build_lfts(t, h, options, routes);
    routes.switch_hops = h.take_least();
    result.routes = std::move(routes);
    return result;
}

std::optional<unsigned> path_hops(const Topology& t, const Routes& routes, std::uint16_t slid, std::uint16_t dlid) {
    std::optional<std::uint32_t> at;
    for (std::uint32_t s = 0; s < t.switches().size() && !at; ++s)
        if (t.switches()[s].lid == slid) at = s;
    for (std::uint32_t e = 0; e < t.endpoints().size() && !at; ++e)
        if (t.endpoints()[e].lid == slid) at = t.endpoints()[e].switch_index;
    if (!at) return std::nullopt;
    unsigned crossed = 0;
    std::uint32_t sw = *at;
    for (std::size_t guard = 0; guard <= t.switches().size(); ++guard) {
        ++crossed;
        const auto& lft = routes.lft.at(sw);
        if (dlid >= lft.size() || lft[dlid] == kNoPort) return std::nullopt;
        const std::uint8_t p = lft[dlid];
        if (p == 0) return t.switches()[sw].lid == dlid ? std::optional<unsigned>(crossed) : std::nullopt;
        const PortPeer& peer = t.peer(sw, p);
        switch (peer.kind) {
            case PortPeer::Kind::none: return std::nullopt;
            case PortPeer::Kind::endpoint:
                return t.endpoints()[peer.index].lid == dlid ? std::optional<unsigned>(crossed) : std::nullopt;
            case PortPeer::Kind::link: sw = peer.index; break;
        }
    }
    return std::nullopt;  // a loop
}

}  // namespace ipoibd::fabric::routing
