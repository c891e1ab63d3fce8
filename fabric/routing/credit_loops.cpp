#include "fabric/routing/credit_loops.h"

#include <algorithm>

#include "common/hex.h"

namespace ipoibd::fabric::routing {

ChannelGraph check_credit_loops(const Topology& t, const Routes& routes) {
    const auto& sws = t.switches();
    // Channel ids: one per switch port, at offset[s] + port.
    std::vector<std::size_t> offset(sws.size() + 1, 0);
    for (std::size_t s = 0; s < sws.size(); ++s) offset[s + 1] = offset[s] + sws[s].ports.size();
    const std::size_t n = offset.back();
    auto is_link = [&](std::uint32_t s, std::uint8_t p) {
        return p != kNoPort && p != 0 && p < sws[s].ports.size() && sws[s].ports[p].kind == PortPeer::Kind::link;
    };

    // Edges: for every LID and every switch whose route leaves by a link,
    // the channel that route takes at the next switch, if it is a link too.
    std::vector<std::pair<std::size_t, std::size_t>> edges;
    std::vector<bool> used(n, false);
    const std::size_t top = routes.lft.empty() ? 0 : routes.lft.front().size();
    for (std::size_t lid = 1; lid < top; ++lid) {
        for (std::uint32_t s = 0; s < sws.size(); ++s) {
            const std::uint8_t p = routes.lft[s][lid];
            if (!is_link(s, p)) continue;
            used[offset[s] + p] = true;
            const PortPeer& peer = sws[s].ports[p];
            const std::uint8_t q = routes.lft[peer.index][lid];
            if (!is_link(peer.index, q)) continue;
            edges.emplace_back(offset[s] + p, offset[peer.index] + q);
        }
    }
    std::sort(edges.begin(), edges.end());
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());

    ChannelGraph graph;
    graph.channels = static_cast<std::size_t>(std::count(used.begin(), used.end(), true));
    graph.dependencies = edges.size();

    // Adjacency in CSR form, then an iterative depth-first search with
    // three colours: an edge to a grey channel closes a cycle.
    std::vector<std::size_t> first(n + 1, 0);
    for (const auto& [from, to] : edges) ++first[from + 1];
    for (std::size_t i = 0; i < n; ++i) first[i + 1] += first[i];
    std::vector<std::size_t> next(edges.size());
    {
        std::vector<std::size_t> fill(first.begin(), first.end() - 1);
        for (const auto& [from, to] : edges) next[fill[from]++] = to;
    }
    enum : std::uint8_t { white, grey, black };
    std::vector<std::uint8_t> colour(n, white);
    std::vector<std::size_t> parent(n, n);
    std::vector<std::pair<std::size_t, std::size_t>> stack;  // channel, next edge to follow
    auto channel_of = [&](std::size_t id) {
        const auto s = static_cast<std::uint32_t>(std::upper_bound(offset.begin(), offset.end(), id) - offset.begin() - 1);
        return Channel{.sw = s, .port = static_cast<std::uint8_t>(id - offset[s])};
    };
    for (std::size_t root = 0; root < n && graph.cycle.empty(); ++root) {
        if (colour[root] != white || first[root] == first[root + 1]) continue;
        colour[root] = grey;
        stack.assign(1, {root, first[root]});
        while (!stack.empty() && graph.cycle.empty()) {
            auto& [v, e] = stack.back();
            if (e == first[v + 1]) {
                colour[v] = black;
                stack.pop_back();
                continue;
            }
            const std::size_t w = next[e++];
            if (colour[w] == grey) {
                // The cycle: w, then down the stack to v.
                std::vector<std::size_t> ids;
                for (std::size_t at = v; at != w; at = parent[at]) ids.push_back(at);
                ids.push_back(w);
                std::reverse(ids.begin(), ids.end());
                for (std::size_t id : ids) graph.cycle.push_back(channel_of(id));
            } else if (colour[w] == white) {
                colour[w] = grey;
                parent[w] = v;
                stack.emplace_back(w, first[w]);
            }
        }
    }
    return graph;
}

std::string describe(const Topology& t, const std::vector<Channel>& cycle) {
    std::string out;
    for (const Channel& c : cycle) {
        if (!out.empty()) out += " -> ";
        out += "switch " + hex(t.switches().at(c.sw).guid, 16) + " port " + std::to_string(c.port);
    }
    return out;
}

}  // namespace ipoibd::fabric::routing
