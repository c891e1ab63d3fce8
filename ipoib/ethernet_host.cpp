// TAP mode's translation; the flow is drawn in ethernet_host.h.
#include "ipoib/ethernet_host.h"

#include <cstring>
#include <set>

#include "ipoib/nd.h"

namespace ipoibd::ipoib {

namespace {

// An NA for the kernel with a 6-byte target link-layer option (RFC 2464 8):
// IPv6 header, the 24-byte NA, the 8-byte option.
constexpr std::size_t kNaSize = Ipv6Header::size + 24 + 8;
constexpr std::size_t kNsFixed = 24;  // type, code, checksum, reserved, target

bool usable(NeighbourState s) {
    return s == NeighbourState::reachable || s == NeighbourState::stale || s == NeighbourState::delay ||
           s == NeighbourState::probe;
}

MacAddress source_mac(const PacketSource& from) {
    // 06: locally administered (0x02) and marked as made from LID/QPN (0x04).
    return {0x06, static_cast<std::uint8_t>(from.slid >> 8), static_cast<std::uint8_t>(from.slid),
            static_cast<std::uint8_t>(from.qpn >> 16), static_cast<std::uint8_t>(from.qpn >> 8),
            static_cast<std::uint8_t>(from.qpn)};
}

}  // namespace

const char* to_string(HostFrameDrop d) {
    switch (d) {
        case HostFrameDrop::forged_source: return "forged_source";
        case HostFrameDrop::other_ether_type: return "other_ether_type";
        case HostFrameDrop::unknown_mac: return "unknown_mac";
        case HostFrameDrop::bad_nd: return "bad_nd";
        case HostFrameDrop::host_na: return "host_na";
        case HostFrameDrop::host_arp_reply: return "host_arp_reply";
        case HostFrameDrop::announcement: return "announcement";
        case HostFrameDrop::unanswered_probe: return "unanswered_probe";
        case HostFrameDrop::own_address: return "own_address";
        case HostFrameDrop::pending_full: return "pending_full";
        case HostFrameDrop::count_: break;
    }
    return "unknown";
}

void visit(const EthernetHostCounters& c, CounterSink& out) {
    out.counter("frames_in", c.frames_in);
    visit_reasons<EthernetError>(out, "frame_", c.frame_errors, [](EthernetError e) { return to_string(e); });
    visit_reasons<EthernetArpError>(out, "arp_", c.arp_errors, [](EthernetArpError e) { return to_string(e); });
    visit_reasons<HostFrameDrop>(out, "drop_", c.drops, [](HostFrameDrop d) { return to_string(d); });
    out.counter("arp_requests", c.arp_requests);
    out.counter("ns_requests", c.ns_requests);
    out.counter("answered_at_once", c.answered_at_once);
    out.counter("answered_later", c.answered_later);
    out.counter("unresolved", c.unresolved);
    out.counter("probes_answered", c.probes_answered);
    out.counter("frames_out", c.frames_out);
    out.counter("unknown_source", c.unknown_source);
    out.counter("address_not_vouched", c.address_not_vouched);
}

EthernetHost::EthernetHost(Config config, const MacAddress& own, Engine& engine, EthernetHostIo& io)
    : config_(config), own_(own), engine_(engine), io_(io), table_(config.table) {
    table_.reserve(own_);
    out_.resize(kNaSize);
}

void EthernetHost::on_host_frame(bytes frame, Clock::time_point now) {
    ++counters_.frames_in;
    auto f = parse_ethernet(frame);
    if (!f) {
        ++counters_.frame_errors[static_cast<std::size_t>(f.error())];
        return;
    }
    const EthernetHeader& h = f->header;
    if (h.source != own_) {
        drop(HostFrameDrop::forged_source);
        return;
    }
    switch (h.type) {
    case kEtherTypeArp:
        on_arp(f->payload, now);
        return;
    case kEtherTypeIpv4:
    case kEtherTypeIpv6:
        break;
    default:
        drop(HostFrameDrop::other_ether_type);
        return;
    }
    const bytes ip = f->payload;
    // The kernel's own ND is answered here (NS) or dropped (NA); the rest
    // of ND (RS, RA, Redirect) is the engine's, as from a TUN.
    if (h.type == kEtherTypeIpv6 && ip.size() > Ipv6Header::size && (ip[0] >> 4) == 6 &&
        ip[Ipv6Header::kOffsetNextHeader] == kNextHeaderIcmpv6) {
        const std::uint8_t type = ip[Ipv6Header::size];
        if (type == static_cast<std::uint8_t>(NdType::neighbor_solicitation)) {
            on_ns(ip, now);
            return;
        }
        if (type == static_cast<std::uint8_t>(NdType::neighbor_advertisement)) {
            drop(HostFrameDrop::host_na);
            return;
        }
    }
    if (is_group_mac(h.destination)) {
        engine_.on_tun_packet(ip, std::nullopt, now);
        return;
    }
    auto hw = table_.find(h.destination, now);
    if (!hw) {
        drop(HostFrameDrop::unknown_mac);
        return;
    }
    engine_.on_host_unicast(ip, *hw, now);
}

void EthernetHost::on_arp(bytes payload, Clock::time_point now) {
    auto arp = parse_ethernet_arp(payload);
    if (!arp) {
        ++counters_.arp_errors[static_cast<std::size_t>(arp.error())];
        return;
    }
    if (arp->sender_mac != own_) {
        drop(HostFrameDrop::forged_source);
        return;
    }
    if (arp->op == EthernetArp::kOpReply) {
        drop(HostFrameDrop::host_arp_reply);
        return;
    }
    const IpAddress target = IpAddress::v4(arp->target_ip);
    if (arp->is_probe()) {
        // RFC 5227 2.1.1: a conflict is real when a neighbour holds it.
        if (auto mac = known_mac(target, now)) {
            ++counters_.probes_answered;
            answer(target, IpAddress::v4(kIpv4Unspecified), *mac, true);
        } else {
            drop(HostFrameDrop::unanswered_probe);
        }
        return;
    }
    if (arp->is_gratuitous()) {
        drop(HostFrameDrop::announcement);
        return;
    }
    ++counters_.arp_requests;
    ask(target, IpAddress::v4(arp->sender_ip), now);
}

void EthernetHost::on_ns(bytes packet, Clock::time_point now) {
    // Checks of RFC 4861 7.1.1 that matter here: the whole message present,
    // Hop Limit 255, Code 0, the checksum, a unicast target. (parse_nd()
    // wants IPoIB's 24-byte options; the kernel's are Ethernet's 8.)
    const Ipv6Header ip = Ipv6Header::read_from(packet.data());
    if (ip.payload_length < kNsFixed || packet.size() < Ipv6Header::size + ip.payload_length ||
        ip.hop_limit != kNdHopLimit) {
        drop(HostFrameDrop::bad_nd);
        return;
    }
    const bytes message = packet.subspan(Ipv6Header::size, ip.payload_length);
    if (message[1] != 0 || icmpv6_checksum(ip.source, ip.destination, message) !=
                               load_be16(message.data() + kIcmpv6OffsetChecksum)) {
        drop(HostFrameDrop::bad_nd);
        return;
    }
    Ipv6Address target_bytes;
    std::memcpy(target_bytes.data(), message.data() + kNdOffsetTarget, target_bytes.size());
    if (is_ipv6_multicast(target_bytes)) {
        drop(HostFrameDrop::bad_nd);
        return;
    }
    const IpAddress target = IpAddress::v6(target_bytes);
    if (is_ipv6_unspecified(ip.source)) {
        // DAD (RFC 4862 5.4): answer for a neighbour that holds the address.
        if (auto mac = known_mac(target, now)) {
            ++counters_.probes_answered;
            answer(target, IpAddress::v6(kIpv6AllNodes), *mac, true);
        } else {
            drop(HostFrameDrop::unanswered_probe);
        }
        return;
    }
    ++counters_.ns_requests;
    ask(target, IpAddress::v6(ip.source), now);
}

void EthernetHost::ask(const IpAddress& target, const IpAddress& requester, Clock::time_point now) {
    if (engine_.owns(target)) {
        drop(HostFrameDrop::own_address);
        return;
    }
    if (auto hw = engine_.resolve_for_host(target, now)) {
        if (auto mac = mac_for(*hw, 0, now)) {
            ++counters_.answered_at_once;
            answer(target, requester, *mac, false);
        }
        return;
    }
    auto it = pending_.find(target);
    if (it == pending_.end()) {
        if (pending_.size() >= config_.max_pending) {
            drop(HostFrameDrop::pending_full);
            return;
        }
        it = pending_.emplace(target, Pending{}).first;
    }
    it->second = Pending{.requester = requester, .expires = now + config_.pending_for};
}

std::optional<MacAddress> EthernetHost::mac_for(const HwAddress& hw, std::uint16_t slid, Clock::time_point now) {
    if (auto held = table_.entry_of(hw.gid); held && !vouches_for(*held, hw, slid)) {
        ++counters_.address_not_vouched;
        table_.find(held->mac, now);  // used, as learn() would have marked it
        return held->mac;
    }
    return table_.learn(hw, slid, now);  // nullopt: full, counted by the table
}

bool EthernetHost::vouches_for(const MacEntryView& held, const HwAddress& hw, std::uint16_t slid) const {
    // The fabric vouches for a datagram's source LID, not for the GID its
    // ARP/ND names: a port's MAC stands for what that port said from its
    // own LID (or, after the SM moved it, from the LID the SA's PathRecord
    // gives for its GID). Anyone else naming its GID, or the neighbour
    // cache repeating what someone named (slid 0), leaves it as it is.
    if (held.hw == hw && (slid == 0 || slid == held.lid)) return true;  // nothing changes
    if (held.lid == 0) return true;  // nothing heard from the port itself yet
    if (slid == 0) return false;
    if (slid == held.lid) return true;
    const auto path = engine_.paths().find(hw.gid);
    return path && path->dlid == slid;
}

std::optional<MacAddress> EthernetHost::known_mac(const IpAddress& ip, Clock::time_point now) {
    auto e = engine_.neighbours().find(ip);
    if (!e || !e->hw || !usable(e->state)) return std::nullopt;
    return mac_for(*e->hw, 0, now);
}

void EthernetHost::answer(const IpAddress& target, const IpAddress& requester, const MacAddress& mac, bool dad) {
    EthernetHeader h{.destination = own_, .source = mac, .type = 0};
    if (target.is_v4()) {
        // RFC 826: the reply swaps the roles; to a probe (sender 0.0.0.0)
        // it goes broadcast, as RFC 5227 2.1.1 has defenders answer.
        if (dad) h.destination = kMacBroadcast;
        h.type = kEtherTypeArp;
        EthernetArp reply{.op = EthernetArp::kOpReply,
                          .sender_mac = mac,
                          .sender_ip = target.v4_bytes(),
                          .target_mac = dad ? MacAddress{} : own_,
                          .target_ip = requester.v4_bytes()};
        reply.write_to(out_.data());
        ++counters_.frames_out;
        io_.write_frame(h, bytes(out_.data(), EthernetArp::size));
        return;
    }
    // RFC 4861 7.2.4: from the target, Solicited (not for DAD), Override,
    // the target's link-layer address.
    h.type = kEtherTypeIpv6;
    if (dad) h.destination = multicast_mac(IpAddress::v6(kIpv6AllNodes));
    Ipv6Header ip;
    ip.payload_length = 24 + 8;
    ip.next_header = kNextHeaderIcmpv6;
    ip.hop_limit = kNdHopLimit;
    ip.source = target.bytes;
    ip.destination = requester.bytes;
    std::uint8_t* p = out_.data();
    ip.write_to(p);
    std::uint8_t* m = p + Ipv6Header::size;
    std::memset(m, 0, 32);
    m[0] = static_cast<std::uint8_t>(NdType::neighbor_advertisement);
    m[kNaOffsetFlags] = static_cast<std::uint8_t>(kNaFlagOverride | (dad ? 0 : kNaFlagSolicited));
    std::memcpy(m + kNdOffsetTarget, target.bytes.data(), 16);
    m[24] = static_cast<std::uint8_t>(NdOptionType::target_link_layer_address);
    m[25] = 1;  // 8 octets
    std::memcpy(m + 26, mac.data(), mac.size());
    store_be16(m + kIcmpv6OffsetChecksum, icmpv6_checksum(ip.source, ip.destination, bytes(m, 32)));
    ++counters_.frames_out;
    io_.write_frame(h, bytes(p, kNaSize));
}

void EthernetHost::neighbour_learned(const IpAddress& ip, const HwAddress& hw, std::uint16_t slid,
                                     Clock::time_point now) {
    const auto mac = mac_for(hw, slid, now);
    auto it = pending_.find(ip);
    if (it == pending_.end()) return;
    const Pending p = it->second;
    pending_.erase(it);
    if (!mac) return;
    ++counters_.answered_later;
    answer(ip, p.requester, *mac, false);
}

void EthernetHost::to_host(bytes ip_packet, const PacketSource& from) {
    if (ip_packet.empty()) return;
    const bool v4 = (ip_packet[0] >> 4) == 4;
    EthernetHeader h{.destination = own_, .source = {}, .type = v4 ? kEtherTypeIpv4 : kEtherTypeIpv6};
    // The engine checked the packet; its destination picks the MAC.
    if (v4 && ip_packet.size() >= 20) {
        const IpAddress dst = IpAddress::from_bytes(IpFamily::ipv4, ip_packet.data() + 16);
        if (is_multicast(dst))
            h.destination = multicast_mac(dst);
        else if (engine_.is_broadcast(dst))
            h.destination = kMacBroadcast;
    } else if (!v4 && ip_packet.size() >= Ipv6Header::size) {
        const IpAddress dst = IpAddress::from_bytes(IpFamily::ipv6, ip_packet.data() + Ipv6Header::kOffsetDestination);
        if (is_multicast(dst)) h.destination = multicast_mac(dst);
    }
    if (auto mac = table_.mac_of_source(from.slid, from.qpn)) {
        h.source = *mac;
    } else {
        h.source = source_mac(from);
        ++counters_.unknown_source;
    }
    ++counters_.frames_out;
    io_.write_frame(h, ip_packet);
}

void EthernetHost::tick(Clock::time_point now) {
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (now < it->second.expires) {
            ++it;
            continue;
        }
        ++counters_.unresolved;
        it = pending_.erase(it);
    }
    if (now < next_prune_) return;
    next_prune_ = now + config_.prune_every;
    std::set<ib::Gid> gids;
    for (const NeighbourEntryView& e : engine_.neighbours().entries())
        if (e.hw) gids.insert(e.hw->gid);
    table_.prune([&](const ib::Gid& g) { return gids.count(g) > 0; }, now);
}

std::optional<EthernetHost::Clock::time_point> EthernetHost::next_deadline() const {
    std::optional<Clock::time_point> d;
    for (const auto& [ip, p] : pending_)
        if (!d || p.expires < *d) d = p.expires;
    if (table_.size() > 0 && (!d || next_prune_ < *d)) d = next_prune_;
    return d;
}

void EthernetHost::flush() { pending_.clear(); }

}  // namespace ipoibd::ipoib
