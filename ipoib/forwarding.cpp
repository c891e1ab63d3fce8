// The forwarding snapshot's fast-path test (forwarding.h, step 1) and the
// engine's side of it: the fingerprint and the snapshot.
#include "ipoib/forwarding.h"

#include "ipoib/engine.h"
#include "ipoib/ip_packet.h"
#include "ipoib/nd.h"

namespace ipoibd::ipoib {

std::optional<FastPath> fast_path_destination(bytes ip_packet, std::uint32_t datagram_mtu) {
    auto info = inspect_ip_packet(ip_packet);
    if (!info || info->length > datagram_mtu || is_multicast(info->destination) || is_unspecified(info->destination))
        return std::nullopt;
    if (info->destination.is_v4() && info->destination.v4_bytes() == kIpv4LimitedBroadcast) return std::nullopt;
    if (info->family == IpFamily::ipv4 && info->protocol == kIpProtocolIgmp) return std::nullopt;
    if (info->family == IpFamily::ipv6 && info->protocol == kNextHeaderIcmpv6) {
        // MLD (130-132, 143) and ND (133-137) and what lies between: the
        // engine's (group state, link-layer options).
        if (info->upper_offset >= info->length) return std::nullopt;
        const std::uint8_t type = ip_packet[info->upper_offset];
        if (type >= 130 && type <= 143) return std::nullopt;
    }
    return FastPath{info->destination, info->length};
}

std::uint64_t Engine::forwarding_fingerprint() const {
    // Every change of a neighbour's state or address, of a path, of the
    // link or of connected mode moves one of these.
    const NeighbourCounters& n = neighbours_.counters();
    const PathCounters& p = paths_.counters();
    std::uint64_t f = n.resolved + n.confirmed + n.address_changed + n.became_stale + n.failed + n.gc_removed +
                      n.evicted + n.re_resolved + n.drop_flushed + n.probes;
    f = f * 31 + p.resolved + p.refreshed + p.changed + p.failures + p.flushes + p.evicted;
    f = f * 31 + (link_.up ? 1 : 0) + (connected_active() ? 2 : 0);
    f = f * 31 + link_.datagram_mtu;
    f = f * 31 + link_.qpn;
    f = f * 31 + neighbours_.size();
    f = f * 31 + paths_.size();
    return f;
}

std::shared_ptr<ForwardingSnapshot> Engine::forwarding_snapshot(Clock::time_point now) const {
    auto s = std::make_shared<ForwardingSnapshot>();
    s->up = link_.up;
    s->datagram_mtu = link_.datagram_mtu;
    if (!link_.up) return s;
    const bool connected = connected_active();
    const auto lifetime = paths_.config().lifetime;
    for (const NeighbourEntryView& v : neighbours_.entries()) {
        if (!v.hw || v.state == NeighbourState::incomplete || v.state == NeighbourState::failed) continue;
        if (connected && (v.hw->flags & HwAddress::kFlagConnectedRc)) continue;
        if (is_broadcast_v4(v.ip)) continue;  // the engine broadcasts to it, whatever the table says
        const auto path = paths_.find(v.hw->gid);
        if (!path) continue;
        ForwardingEntry e{.ip = v.ip, .to = *v.hw, .ah = path->address_handle(), .quiet_until = now};
        if (v.state == NeighbourState::reachable) e.quiet_until = v.updated + neighbours_.reachable_time();
        e.quiet_until = std::min(e.quiet_until, path->resolved_at + lifetime);
        s->index.emplace(e.ip, s->entries.size());
        s->entries.push_back(e);
    }
    s->reported = std::make_unique<std::atomic<bool>[]>(s->entries.size());
    return s;
}

void Engine::touch_neighbour(const IpAddress& ip, Clock::time_point now) {
    now_ = now;
    const auto v = neighbours_.find(ip);
    if (!v || !v->hw) return;  // gone meanwhile: the next datagram misses
    Resolution r = neighbours_.lookup_or_resolve(ip, {}, now_);
    if (r.send_to && paths_.find(r.send_to->gid))
        (void)paths_.lookup(r.send_to->gid, r.send_to->qpn, {}, now_, r.send_to->flags);
    process(std::move(r.actions));
    drain_sa();
}

}  // namespace ipoibd::ipoib
