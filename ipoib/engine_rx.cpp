// Ingress: IPoIB frames from the fabric (engine.h, "Ingress").
#include <algorithm>

#include "ipoib/engine.h"
#include "transport/gid.h"

namespace ipoibd::ipoib {

void Engine::on_datagram(const ReceivedDatagram& d, Clock::time_point now) {
    now_ = now;
    ++counters_.rx_datagrams;
    // Multicast comes back to the sending port too; ours is not news.
    if (d.src_qp == link_.qpn && d.slid == port_.lid) {
        ++counters_.rx_own_multicast;
        return;
    }
    if (!link_.up) {
        ++counters_.rx_drop_link_down;
        return;
    }
    rx_source_ = PacketSource{d.slid, d.src_qp};
    auto frame = decapsulate(d.payload);
    if (!frame) {
        ++counters_.rx_frame_errors[static_cast<std::size_t>(frame.error())];
        return;
    }
    if (frame->reserved != 0) ++counters_.rx_nonzero_reserved;
    switch (frame->type) {
    case EtherType::arp:
        on_arp(frame->payload, d.slid);
        break;
    case EtherType::rarp:
        ++counters_.rx_rarp;  // nobody here answers RARP
        break;
    case EtherType::ipv4: {
        auto info = inspect_ip_packet(frame->payload);
        if (!info || info->family != IpFamily::ipv4) {
            ++counters_.rx_ip_errors[static_cast<std::size_t>(info ? IpPacketError::bad_version : info.error())];
            break;
        }
        write_tun(frame->payload.first(info->length));
        break;
    }
    case EtherType::ipv6: {
        auto info = inspect_ip_packet(frame->payload);
        if (!info || info->family != IpFamily::ipv6) {
            ++counters_.rx_ip_errors[static_cast<std::size_t>(info ? IpPacketError::bad_version : info.error())];
            break;
        }
        on_ipv6(frame->payload.first(info->length), *info, d.slid);
        break;
    }
    }
    drain_sa();
}

void Engine::write_tun(bytes packet) {
    ++counters_.rx_to_tun;
    io_.write_tun(packet, rx_source_);
}

void Engine::learn(const IpAddress& ip, const HwAddress& hw, LearnKind kind, std::uint16_t slid) {
    const auto before = neighbours_.find(ip);
    NeighbourActions actions = neighbours_.learn(ip, hw, kind, now_);
    heard(ip, before, hw, slid);
    process(std::move(actions));
}

void Engine::heard(const IpAddress& ip, const std::optional<NeighbourEntryView>& before, const HwAddress& hw,
                   std::uint16_t slid) {
    if (before && before->hw && !before->hw->same_endpoint(hw)) {
        ++counters_.peer_changes;
        emit(EngineEventKind::peer_changed, "neighbour " + to_string(ip) + " changed its link address",
             {{"IPOIB_PEER_IP", to_string(ip)},
              {"IPOIB_PEER_HW", format_hw_address(hw)},
              {"IPOIB_PEER_OLD_HW", format_hw_address(*before->hw)},
              {"IB_GID", ipoibd::format_gid(hw.gid)},
              {"IB_QPN", hex_qpn(hw.qpn)}});
    }
    paths_.note_source(hw.gid, slid, now_);
    if (auto e = neighbours_.find(ip); e && e->hw) io_.neighbour_learned(ip, *e->hw, slid);
}

void Engine::on_arp(bytes payload, std::uint16_t slid) {
    auto arp = parse_arp(payload);
    if (!arp) {
        ++counters_.rx_arp_errors[static_cast<std::size_t>(arp.error())];
        return;
    }
    const bool request = arp->op == ArpOp::request;
    ++(request ? counters_.arp_requests_rx : counters_.arp_replies_rx);
    const IpAddress sender = IpAddress::v4(arp->sender_ip);
    const IpAddress target = IpAddress::v4(arp->target_ip);
    if (arp->sender_hw.same_endpoint(link_.hw)) return;  // our own, looped back some other way
    if (arp->sender_ip == kIpv4Unspecified) {
        // An RFC 5227 probe: answer it if it asks for our address, learn nothing.
        if (request && is_ours(target)) {
            ++counters_.arp_replies_tx;
            const ReplyOrigin origin(*this, slid);
            send_arp(make_arp_reply(*arp, link_.hw), arp->sender_hw);
        }
        return;
    }
    if (is_ours(sender)) {
        ++counters_.address_conflicts;
        emit(EngineEventKind::address_conflict, "another host claims " + to_string(sender),
             {{"IPOIB_PEER_IP", to_string(sender)}, {"IPOIB_PEER_HW", format_hw_address(arp->sender_hw)}});
        return;
    }
    const bool for_us = is_ours(target);
    if (request && for_us) {
        // The requester will talk to us: remember it (Linux arp_process).
        learn(sender, arp->sender_hw, LearnKind::unsolicited, slid);
        ++counters_.arp_replies_tx;
        const ReplyOrigin origin(*this, slid);
        send_arp(make_arp_reply(*arp, link_.hw), arp->sender_hw);
        return;
    }
    if (!request && for_us && arp->target_hw.same_endpoint(link_.hw)) {
        learn(sender, arp->sender_hw, LearnKind::solicited, slid);
        return;
    }
    // Gratuitous ARP, or traffic between others: refresh what we know only.
    if (neighbours_.find(sender)) learn(sender, arp->sender_hw, LearnKind::unsolicited, slid);
}

void Engine::on_ipv6(bytes packet, const IpPacketInfo& info, std::uint16_t slid) {
    const bool nd_type = info.protocol == kNextHeaderIcmpv6 && info.upper_offset < packet.size() &&
                         packet[info.upper_offset] >= 133 && packet[info.upper_offset] <= 137;
    if (!nd_type) {
        write_tun(packet);
        return;
    }
    auto m = parse_nd(packet);
    if (!m) {
        ++counters_.rx_nd_errors[static_cast<std::size_t>(m.error())];
        return;
    }
    switch (m->type) {
    case NdType::neighbor_solicitation:
        ++counters_.ns_rx;
        on_neighbor_solicitation(*m, slid);
        return;
    case NdType::neighbor_advertisement:
        ++counters_.na_rx;
        on_neighbor_advertisement(*m, slid);
        return;
    case NdType::router_advertisement:
        if (m->source_lla) learn(IpAddress::v6(m->ip.source), *m->source_lla, LearnKind::unsolicited, slid);
        break;
    case NdType::redirect:
        if (m->target_lla) learn(IpAddress::v6(m->target), *m->target_lla, LearnKind::unsolicited, slid);
        break;
    case NdType::router_solicitation:
        if (m->source_lla && neighbours_.find(IpAddress::v6(m->ip.source)))
            learn(IpAddress::v6(m->ip.source), *m->source_lla, LearnKind::unsolicited, slid);
        break;
    }
    // The host's IPv6 stack sees RS/RA/Redirect without our 24-byte option:
    // a TUN has no link-layer addresses.
    auto n = rewrite_link_layer_option(packet, std::nullopt, scratch_);
    if (!n) {
        ++counters_.rx_nd_errors[static_cast<std::size_t>(n.error())];
        return;
    }
    write_tun(bytes(scratch_.data(), *n));
}

void Engine::on_neighbor_solicitation(const NdMessage& m, std::uint16_t slid) {
    const IpAddress target = IpAddress::v6(m.target);
    Address* ours = find_address(target);
    const bool dad_probe = is_ipv6_unspecified(m.ip.source);
    if (ours && ours->dad == DadState::tentative) {
        // RFC 4862 5.4.3: another node probing the same tentative address.
        if (dad_probe) {
            ++counters_.dad_conflicts;
            ours->dad = DadState::duplicate;
            emit(EngineEventKind::dad_failed, "duplicate address detected: " + to_string(target),
                 {{"IPOIB_ADDRESS", to_string(target)}});
        }
        return;  // a tentative address answers nothing
    }
    // RFC 4861 7.2.3: "If the Target Address is not a valid unicast or
    // anycast address assigned to the receiving interface ..., the
    // solicitation MUST be silently discarded": its source option is not
    // learned either (anyone could plant entries for others' addresses).
    if (!ours || ours->dad != DadState::preferred) {
        ++counters_.rx_drop_ns_not_ours;
        return;
    }
    if (m.source_lla && !dad_probe) learn(IpAddress::v6(m.ip.source), *m.source_lla, LearnKind::unsolicited, slid);
    const NeighborAdvertisement na = make_solicited_advertisement(m, link_.hw, false);
    auto n = build_neighbor_advertisement(na, scratch_);
    if (!n) return;
    ++counters_.na_tx;
    if (dad_probe || !m.source_lla) {
        send_nd(bytes(scratch_.data(), *n), na.destination, std::nullopt);
        return;
    }
    const ReplyOrigin origin(*this, slid);
    send_nd(bytes(scratch_.data(), *n), na.destination, *m.source_lla);
}

void Engine::on_neighbor_advertisement(const NdMessage& m, std::uint16_t slid) {
    const IpAddress target = IpAddress::v6(m.target);
    if (Address* ours = find_address(target)) {
        if (m.target_lla && m.target_lla->same_endpoint(link_.hw)) return;
        if (ours->dad == DadState::tentative) {
            ++counters_.dad_conflicts;
            ours->dad = DadState::duplicate;
            emit(EngineEventKind::dad_failed, "duplicate address detected: " + to_string(target),
                 {{"IPOIB_ADDRESS", to_string(target)}});
        } else {
            ++counters_.address_conflicts;
            emit(EngineEventKind::address_conflict, "another host claims " + to_string(target),
                 {{"IPOIB_PEER_IP", to_string(target)}});
        }
        return;
    }
    // RFC 4861 7.2.5 (NeighbourCache::advertised()): no entry, no update;
    // without Override a different address is not taken; without the
    // option (Linux's answer to our unicast NS) Solicited confirms the
    // address held.
    const auto before = neighbours_.find(target);
    NeighbourActions actions = neighbours_.advertised(target, m.target_lla, m.solicited, m.override_flag, now_);
    const auto after = neighbours_.find(target);
    if (m.target_lla && after && after->hw && after->hw->same_endpoint(*m.target_lla))
        heard(target, before, *m.target_lla, slid);
    process(std::move(actions));
}

}  // namespace ipoibd::ipoib
