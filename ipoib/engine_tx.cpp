// Egress: IP datagrams from the host to IPoIB frames (engine.h, "Egress").
#include <algorithm>
#include <cstring>

#include "ipoib/engine.h"
#include "ipoib/too_big.h"

namespace ipoibd::ipoib {

namespace {

bool wider_than_link_local(const IpAddress& group) {
    if (group.family == IpFamily::ipv4) return !(group.bytes[0] == 224 && group.bytes[1] == 0 && group.bytes[2] == 0);
    return (group.bytes[1] & 0x0F) > static_cast<std::uint8_t>(Scope::link_local);
}

Ipv4Address v4_of(const IpAddress& ip) {
    Ipv4Address a{};
    std::copy_n(ip.bytes.begin(), 4, a.begin());
    return a;
}

bool is_nd_type(std::uint8_t t) { return t >= 133 && t <= 137; }

}  // namespace

bytes Engine::build_frame(EtherType type, bytes packet) {
    const std::size_t n = std::min(packet.size(), tx_.size() - EncapHeader::size);
    EncapHeader{.type = static_cast<std::uint16_t>(type), .reserved = 0}.write_to(tx_.data());
    std::memmove(tx_.data() + EncapHeader::size, packet.data(), n);
    return bytes(tx_.data(), n + EncapHeader::size);
}

bool Engine::is_broadcast_v4(const IpAddress& dst) const {
    if (dst.family != IpFamily::ipv4) return false;
    if (v4_of(dst) == kIpv4LimitedBroadcast) return true;
    for (const Address& a : addresses_) {
        const InterfaceAddress& ia = a.address;
        if (ia.ip.family != IpFamily::ipv4 || ia.prefix_length >= 31 || !ia.contains(dst)) continue;
        // All host bits set.
        bool all_ones = true;
        for (std::size_t bit = ia.prefix_length; bit < 32 && all_ones; ++bit)
            all_ones = (dst.bytes[bit / 8] >> (7 - bit % 8)) & 1;
        if (all_ones) return true;
    }
    return false;
}

std::optional<std::pair<bytes, IpPacketInfo>> Engine::accept_host_packet(bytes packet) {
    ++counters_.tun_packets;
    auto info = inspect_ip_packet(packet);
    if (!info) {
        ++counters_.tun_ip_errors[static_cast<std::size_t>(info.error())];
        return std::nullopt;
    }
    packet = packet.first(info->length);
    // The host's memberships hold while the link is down: the groups join
    // when it comes up.
    for (const GroupChange& c : host_group_changes(packet, *info)) host_group_change(c);
    if (!link_.up) {
        ++counters_.tun_drop_link_down;
        return std::nullopt;
    }
    if (packet.size() > link_.mtu) {
        ++counters_.tun_drop_too_big;
        return std::nullopt;
    }
    if (info->family == IpFamily::ipv6 && info->protocol == kNextHeaderIcmpv6 && info->upper_offset < packet.size() &&
        is_nd_type(packet[info->upper_offset])) {
        const std::uint8_t type = packet[info->upper_offset];
        if (type == static_cast<std::uint8_t>(NdType::neighbor_solicitation) ||
            type == static_cast<std::uint8_t>(NdType::neighbor_advertisement)) {
            ++counters_.tun_drop_host_nd;
            return std::nullopt;
        }
        // RS, RA, Redirect from the host: carry our IPoIB address (a TAP
        // host's 6-byte Ethernet option is replaced too).
        auto n = rewrite_link_layer_option(packet, link_.hw, scratch_);
        if (!n) {
            ++counters_.tun_drop_bad_nd;
            return std::nullopt;
        }
        packet = bytes(scratch_.data(), *n);
    }
    return std::pair{packet, *info};
}

void Engine::on_tun_packet(bytes packet, std::optional<IpAddress> next_hop, Clock::time_point now) {
    now_ = now;
    if (auto p = accept_host_packet(packet)) send_ip(p->first, p->second, next_hop);
    drain_sa();
}

void Engine::on_host_unicast(bytes packet, const HwAddress& to, Clock::time_point now) {
    now_ = now;
    if (auto p = accept_host_packet(packet)) {
        const IpAddress& dst = p->second.destination;
        if (is_multicast(dst) || is_broadcast_v4(dst))
            send_ip(p->first, p->second, std::nullopt);
        else
            send_to_neighbour(to, p->second.family == IpFamily::ipv4 ? EtherType::ipv4 : EtherType::ipv6, p->first);
    }
    drain_sa();
}

std::optional<HwAddress> Engine::resolve_for_host(const IpAddress& ip, Clock::time_point now) {
    now_ = now;
    if (!link_.up || is_ours(ip) || is_multicast(ip) || is_unspecified(ip)) return std::nullopt;
    Resolution r = neighbours_.lookup_or_resolve(ip, {}, now_);
    process(std::move(r.actions));
    drain_sa();
    return r.send_to;
}

void Engine::send_ip(bytes packet, const IpPacketInfo& info, const std::optional<IpAddress>& next_hop) {
    const IpAddress& dst = info.destination;
    const EtherType type = info.family == IpFamily::ipv4 ? EtherType::ipv4 : EtherType::ipv6;
    if (packet.size() > link_.datagram_mtu && (is_multicast(dst) || is_broadcast_v4(dst))) {
        ++counters_.tun_drop_too_big;  // multicast goes UD only (RFC 4755); no unicast sender to tell
        return;
    }
    if (is_broadcast_v4(dst)) {
        send_broadcast(type, packet);
        return;
    }
    if (is_multicast(dst)) {
        const auto mgid = group_mgid(dst);
        if (!mgid) {
            ++counters_.tun_drop_bad_destination;
            return;
        }
        send_multicast(*mgid, build_frame(type, packet), wider_than_link_local(dst), info.family);
        return;
    }
    const IpAddress hop = next_hop.value_or(dst);
    if (hop.bytes == IpAddress{}.bytes) {
        ++counters_.tun_drop_bad_destination;
        return;
    }
    send_ip_unicast(packet, type, hop);
}

void Engine::send_ip_unicast(bytes packet, EtherType type, const IpAddress& next_hop) {
    Resolution r = neighbours_.lookup_or_resolve(next_hop, packet, now_);
    if (r.send_to) send_to_neighbour(*r.send_to, type, packet);
    process(std::move(r.actions));
}

void Engine::send_to_neighbour(const HwAddress& to, EtherType type, bytes packet) {
    send_frame_unicast(to, build_frame(type, packet));
}

void Engine::send_frame_unicast(const HwAddress& to, bytes frame) {
    if (auto path = paths_.lookup(to.gid, to.qpn, frame, now_, to.flags, reply_origin_)) deliver_unicast(to, *path, frame);
}

namespace {

// RFC 4755 3: address resolution goes over UD, whatever the peer's mode:
// ARP, and ND's messages (ICMPv6 133-137 right after the IPv6 header, as
// ND sends them).
bool address_resolution(bytes frame) {
    if (frame.size() < EncapHeader::size + 2) return false;
    const std::uint16_t type = load_be16(frame.data());
    if (type == static_cast<std::uint16_t>(EtherType::arp)) return true;
    if (type != static_cast<std::uint16_t>(EtherType::ipv6) || frame.size() < EncapHeader::size + 41) return false;
    const std::uint8_t* ip = frame.data() + EncapHeader::size;
    return ip[6] == kNextHeaderIcmpv6 && is_nd_type(ip[40]);
}

}  // namespace

void Engine::deliver_unicast(const HwAddress& to, const PathInfo& path, bytes frame) {
    const bool fits_datagram = frame.size() <= link_.datagram_mtu + EncapHeader::size;
    if (connected_active() && (to.flags & HwAddress::kFlagConnectedRc) && !address_resolution(frame)) {
        const ConnectedSend r = link_io_.send_connected(to, path, frame, now_, fits_datagram);
        switch (r.outcome) {
        case ConnectedSend::Outcome::sent: ++counters_.tx_connected; return;
        case ConnectedSend::Outcome::queued:
        case ConnectedSend::Outcome::dropped: return;  // counted by the link
        case ConnectedSend::Outcome::too_big: too_big(frame, r.mtu, to, path); return;
        case ConnectedSend::Outcome::use_datagram: break;
        }
    }
    if (!fits_datagram) {
        too_big(frame, link_.datagram_mtu, to, path);
        return;
    }
    ++counters_.tx_unicast;
    link_io_.send_datagram(path.address_handle(), to.qpn, frame);
}

void Engine::too_big(bytes frame, std::uint32_t mtu, const HwAddress& to, const PathInfo& path) {
    ++counters_.tx_too_big;
    const bytes packet = frame.subspan(EncapHeader::size);
    if (may_fragment_v4(packet)) {
        // A router's job (RFC 791): the fragments go where the datagram
        // would have. `frame` may be tx_, which each fragment reuses.
        const std::vector<std::uint8_t> original(packet.begin(), packet.end());
        if (fragment_v4(original, mtu, [&](bytes f) { deliver_unicast(to, path, build_frame(EtherType::ipv4, f)); }) > 0) {
            ++counters_.tx_fragmented;
            return;
        }
        if (auto n = build_too_big(original, mtu, icmp_)) {
            ++counters_.icmp_too_big_tx;
            io_.write_tun(bytes(icmp_.data(), *n), PacketSource{path.dlid, to.qpn});
        }
        return;
    }
    if (auto n = build_too_big(packet, mtu, icmp_)) {
        ++counters_.icmp_too_big_tx;
        io_.write_tun(bytes(icmp_.data(), *n), PacketSource{path.dlid, to.qpn});
    }
}

void Engine::send_broadcast(EtherType type, bytes packet) {
    const bytes frame = build_frame(type, packet);
    if (auto ah = mcast_.address_of(mcast_.broadcast_mgid())) {
        ++counters_.tx_multicast;
        link_io_.send_datagram(*ah, ib::kQpnMulticast, frame);
    } else {
        ++counters_.tun_drop_link_down;
    }
}

void Engine::send_multicast(const ib::Gid& mgid, bytes frame, bool wider, IpFamily family) {
    McastSendResult r = mcast_.send(mgid, frame);
    if (r.outcome == McastSendResult::Outcome::send) {
        ++counters_.tx_multicast;
        link_io_.send_datagram(r.ah, ib::kQpnMulticast, frame);
        return;
    }
    if (r.outcome != McastSendResult::Outcome::unavailable) return;  // queued, or dropped and counted
    // RFC 4391 10: no such group. Beyond link-local scope the routers get it
    // through the all-routers group, if that exists; else drop.
    const IpAddress all_routers =
        family == IpFamily::ipv4 ? IpAddress::v4({224, 0, 0, 2}) : IpAddress::v6(kIpv6AllRouters);
    const auto routers = group_mgid(all_routers);
    if (!wider || !routers || *routers == mgid) {
        ++counters_.tun_drop_mcast_unavailable;
        return;
    }
    McastSendResult rr = mcast_.send(*routers, frame);
    if (rr.outcome == McastSendResult::Outcome::send || rr.outcome == McastSendResult::Outcome::queued)
        ++counters_.tx_to_all_routers;
    if (rr.outcome == McastSendResult::Outcome::send) {
        link_io_.send_datagram(rr.ah, ib::kQpnMulticast, frame);
    } else if (rr.outcome == McastSendResult::Outcome::unavailable) {
        ++counters_.tun_drop_mcast_unavailable;
    }
}

void Engine::process(NeighbourActions&& actions) {
    for (FlushAction& f : actions.flushes) {
        const EtherType type = f.ip.family == IpFamily::ipv4 ? EtherType::ipv4 : EtherType::ipv6;
        for (const Packet& p : f.packets) send_to_neighbour(f.to, type, p);
    }
    for (const SolicitAction& s : actions.solicits) solicit(s);
    // Drops are counted by the neighbour cache; nothing more to do.
}

std::optional<Ipv4Address> Engine::source_v4_for(const IpAddress& target) const {
    std::optional<Ipv4Address> any;
    for (const Address& a : addresses_) {
        if (a.address.ip.family != IpFamily::ipv4) continue;
        if (a.address.contains(target)) return v4_of(a.address.ip);
        if (!any) any = v4_of(a.address.ip);
    }
    return any;
}

std::optional<Ipv6Address> Engine::source_v6_for(const IpAddress& target) const {
    std::optional<Ipv6Address> link_local, any;
    for (const Address& a : addresses_) {
        if (a.address.ip.family != IpFamily::ipv6 || a.dad != DadState::preferred) continue;
        if (is_ipv6_link_local(a.address.ip.bytes)) {
            if (!link_local) link_local = a.address.ip.bytes;
            continue;
        }
        if (a.address.contains(target) && !is_ipv6_link_local(target.bytes)) return a.address.ip.bytes;
        if (!any) any = a.address.ip.bytes;
    }
    return link_local ? link_local : any;
}

void Engine::solicit(const SolicitAction& s) {
    if (s.ip.family == IpFamily::ipv4) {
        const auto source = source_v4_for(s.ip);
        if (!source) {
            ++counters_.tun_drop_no_source;
            return;
        }
        ++counters_.arp_requests_tx;
        send_arp(make_arp_request(link_.hw, *source, v4_of(s.ip)), s.unicast_to);
        return;
    }
    const auto source = source_v6_for(s.ip);
    if (!source) {
        ++counters_.tun_drop_no_source;
        return;
    }
    const NeighborSolicitation ns = s.unicast_to ? make_unicast_solicitation(*source, link_.hw, s.ip.bytes)
                                                 : make_resolution_solicitation(*source, link_.hw, s.ip.bytes);
    if (auto n = build_neighbor_solicitation(ns, scratch_)) {
        ++counters_.ns_tx;
        send_nd(bytes(scratch_.data(), *n), ns.destination, s.unicast_to);
    }
}

void Engine::send_arp(const ArpPacket& p, const std::optional<HwAddress>& unicast_to) {
    std::array<std::uint8_t, ArpPacket::size> buf{};
    if (!encode_arp(p, buf)) return;
    if (unicast_to) {
        send_to_neighbour(*unicast_to, EtherType::arp, buf);
        return;
    }
    send_broadcast(EtherType::arp, buf);
}

void Engine::send_nd(bytes ipv6_packet, const Ipv6Address& destination, const std::optional<HwAddress>& unicast_to) {
    if (unicast_to) {
        send_to_neighbour(*unicast_to, EtherType::ipv6, ipv6_packet);
        return;
    }
    if (is_ipv6_multicast(destination)) {
        if (auto mgid = ipv6_group_mgid(destination, config_.pkey, config_.scope))
            send_multicast(*mgid, build_frame(EtherType::ipv6, ipv6_packet), false, IpFamily::ipv6);
        return;
    }
    // Unicast without a known address: resolve like any datagram.
    send_ip_unicast(ipv6_packet, EtherType::ipv6, IpAddress::v6(destination));
}

}  // namespace ipoibd::ipoib
