#include "fabric/switch.h"

#include "transport/soft/route_hint.h"

#include <algorithm>

#include "transport/wire/link.h"
#include "transport/wire/smp_dr.h"

namespace ipoibd::fabric {

namespace {

// Whether an SMP is of the directed-route class (its MgmtClass, after the
// BTH and DETH); false for a packet too short to say.
bool directed_route_smp(bytes datagram, const ib::Lrh& lrh) {
    const std::size_t mgmt_class = ib::Lrh::size + (lrh.lnh == ib::Lnh::iba_global ? ib::Grh::size : 0) +
                                   ib::Bth::size + ib::Deth::size + 1;
    return datagram.size() > mgmt_class && datagram[mgmt_class] == ib::mgmt_class::subn_directed_route;
}

}  // namespace

Switch::Switch(const Config& config, SwitchOutput& output)
    : config_(config), output_(output), faults_(config.faults, config.fault_seed) {
    config_.num_ports = std::min(config.num_ports, kMaxPorts);
    ports_.resize(std::size_t{config_.num_ports} + 1);  // index = port number; 0 is the management port
    isl_peers_.resize(ports_.size());
    if (!config_error(config_))
        for (const IslConfig& l : config_.links) isl_peers_[l.port] = l.peer;
    init_sma();
}

std::optional<std::string> Switch::config_error(const Config& config) {
    const unsigned num_ports = std::min(config.num_ports, kMaxPorts);
    std::set<std::uint8_t> ports;
    std::vector<SocketAddress> peers;
    for (const IslConfig& l : config.links) {
        if (l.port < 1 || l.port > num_ports)
            return "inter-switch link on port " + std::to_string(l.port) + ": the switch has ports 1-" +
                   std::to_string(num_ports);
        if (!ports.insert(l.port).second) return "port " + std::to_string(l.port) + " has two inter-switch links";
        if (std::find(peers.begin(), peers.end(), l.peer) != peers.end())
            return "two inter-switch links to " + l.peer.to_string();
        peers.push_back(l.peer);
    }
    return std::nullopt;
}

std::optional<std::uint8_t> Switch::isl_of(const SocketAddress& peer) const {
    for (std::size_t p = 1; p < isl_peers_.size(); ++p)
        if (isl_peers_[p] && *isl_peers_[p] == peer) return static_cast<std::uint8_t>(p);
    return std::nullopt;
}

std::optional<std::uint8_t> Switch::port_of(const SocketAddress& peer) const {
    for (std::size_t p = 1; p < ports_.size(); ++p)
        if (ports_[p].plugged && ports_[p].peer == peer) return static_cast<std::uint8_t>(p);
    return std::nullopt;
}

bool Switch::slid_routed_to(std::uint16_t slid, std::uint8_t port) const {
    const auto source = lft_.find(slid);
    return source != lft_.end() && source->second == port;
}

bool Switch::port_up(std::uint8_t port) const { return port >= 1 && port < ports_.size() && ports_[port].plugged; }

std::optional<SocketAddress> Switch::peer_of(std::uint8_t port) const {
    if (!port_up(port)) return std::nullopt;
    return ports_[port].peer;
}

void Switch::on_datagram(const SocketAddress& from, bytes datagram, Clock::time_point now) {
    now_ = now;
    if (datagram.size() == ib::LinkPacket::size) {
        on_link_packet(from, datagram, now);
        return;
    }
    const auto port = port_of(from);
    if (!port) {
        count(SwitchDrop::unknown_peer);
        return;
    }
    ports_[*port].last_heard = now;
    ++ports_[*port].rx_packets;
    if (transport::is_soft_control(datagram)) {
        // A port asks for a cut-through route (route_hint.h).
        const auto request = transport::decode_route_request(datagram);
        const auto route = request ? lft_.find(request->dlid) : lft_.end();
        if (!request || route == lft_.end() || !hints_allowed()) {
            count(SwitchDrop::bad_route_request);
            return;
        }
        // Answered in the order of the port's datagrams: everything it sent
        // before the request has been forwarded by now.
        answer_route_request(*port, route->second, request->dlid, request->nonce, now);
        return;
    }
    if (tap_) tap_(datagram, false);
    const auto lrh = ib::link_check(datagram);
    if (!lrh) {
        ++ports_[*port].rx_errors;
        count(SwitchDrop::link_check);
        ++counters_.link_drops[static_cast<std::size_t>(lrh.error())];
        return;
    }
    ++ports_[*port].rx_iba_packets;
    ports_[*port].rx_bytes += datagram.size();
    const bool for_management = lrh->dlid == lid() || lrh->dlid == ib::kLidPermissive;
    if (lrh->vl != ib::kVl15) {
        // Only SMPs before the SM made the port ACTIVE, and only the LIDs
        // the SM gave it (header comment, 5).
        if (!ports_[*port].active) {
            count(SwitchDrop::port_not_active);
            return;
        }
        if (!is_isl(*port) && !slid_routed_to(lrh->slid, *port)) {
            count(SwitchDrop::slid_not_port);
            return;
        }
    } else if (!is_isl(*port) && !slid_routed_to(lrh->slid, *port) && lrh->slid != ib::kLidPermissive &&
               !(for_management && directed_route_smp(datagram, *lrh))) {
        // An SMP that goes by LID carries the sender's own LID too, or the
        // permissive one (a port the SM has not given a LID yet): whoever
        // gets it answers the LRH SLID, and a CA's Trap 256 names it as
        // the one that tried. A directed-route SMP for this switch is let
        // in whatever its SLID (a CA answers the SM's Set of its new LID
        // from that LID, before the SM routes it): the hop rules send it
        // on and back by its paths, and handle_dr_smp checks the SLID
        // where it would leave by LID.
        count(SwitchDrop::slid_not_port);
        return;
    }
    if (for_management) {
        to_management(datagram, *port);
        return;
    }
    forward(datagram, *lrh, *port, now);
}

void Switch::on_link_packet(const SocketAddress& from, bytes datagram, Clock::time_point now) {
    if (!ib::parse_link_packet(datagram)) {
        count(SwitchDrop::bad_link_packet);
        return;
    }
    ++counters_.link_packets_in;
    auto port = port_of(from);
    if (!port) {
        // The configured peer of an ISL plugs that ISL, never a host port.
        port = isl_of(from);
        if (!port) port = admit(from, now);
        if (!port) return;
        plug(*port, from, now);
    }
    ports_[*port].last_heard = now;
}

void Switch::plug(std::uint8_t port, const SocketAddress& from, Clock::time_point now) {
    ports_[port] = PortSlot{.plugged = true, .peer = from, .last_heard = now, .plugged_at = now, .link_number = ++links_};
    sma_ports_[port].info.port_state = ib::port_state::init;  // the link trained: the SM's turn
    port_state_changed();
    link_events_.push_back({port, true});
    send_link_packet(port);  // answer at once: the peer's link comes up now
}

std::optional<std::uint8_t> Switch::admit(const SocketAddress& from, Clock::time_point now) {
    const std::string host = from.host_key();
    std::uint32_t pending = 0;
    for (std::size_t p = 1; p < ports_.size(); ++p)
        if (ports_[p].plugged && !ports_[p].active && !is_isl(static_cast<std::uint8_t>(p)) &&
            ports_[p].peer.host_key() == host)
            ++pending;
    if (pending >= config_.max_pending_per_host) {
        count(SwitchDrop::admission_pending);
        return std::nullopt;
    }
    // The host's token bucket: full for a host not seen lately.
    auto it = admission_.find(host);
    if (it == admission_.end()) {
        if (admission_.size() >= kMaxAdmissionHosts) {
            const double full = config_.admission_burst;
            std::erase_if(admission_, [&](const auto& kv) {
                const std::chrono::duration<double> idle = now - kv.second.refilled;
                return kv.second.tokens + idle.count() * config_.admission_rate >= full;
            });
        }
        if (admission_.size() >= kMaxAdmissionHosts) {
            count(SwitchDrop::admission_rate);
            return std::nullopt;
        }
        it = admission_.emplace(host, Admission{static_cast<double>(config_.admission_burst), now}).first;
    }
    Admission& a = it->second;
    const std::chrono::duration<double> elapsed = now - a.refilled;
    a.tokens = std::min<double>(config_.admission_burst, a.tokens + elapsed.count() * config_.admission_rate);
    a.refilled = now;
    if (a.tokens < 1.0) {
        count(SwitchDrop::admission_rate);
        return std::nullopt;
    }
    std::optional<std::uint8_t> port;
    for (std::size_t p = 1; p < ports_.size() && !port; ++p)
        if (!ports_[p].plugged && !is_isl(static_cast<std::uint8_t>(p))) port = static_cast<std::uint8_t>(p);
    if (!port) {
        // Full: the longest-plugged port that has had its chance to become
        // ACTIVE and did not gives way.
        std::optional<std::uint8_t> oldest;
        for (std::size_t p = 1; p < ports_.size(); ++p) {
            const PortSlot& slot = ports_[p];
            if (slot.active || is_isl(static_cast<std::uint8_t>(p)) || now - slot.plugged_at < config_.reclaim_after)
                continue;
            if (!oldest || slot.plugged_at < ports_[*oldest].plugged_at) oldest = static_cast<std::uint8_t>(p);
        }
        if (!oldest) {
            count(SwitchDrop::ports_full);
            return std::nullopt;
        }
        unplug(*oldest);
        ++counters_.ports_reclaimed;
        port = oldest;
    }
    a.tokens -= 1.0;
    return port;
}

std::optional<transport::PmaPortCounters> Switch::pma_counters(std::uint8_t port) const {
    if (port < 1 || port >= ports_.size()) return std::nullopt;
    const PortSlot& s = ports_[port];
    constexpr std::uint64_t kVcrc = 2;
    transport::PmaPortCounters c;
    c.xmit_packets = s.tx_packets;
    c.rcv_packets = s.rx_iba_packets;
    c.xmit_octets = s.tx_bytes >= kVcrc * s.tx_packets ? s.tx_bytes - kVcrc * s.tx_packets : 0;
    c.rcv_octets = s.rx_bytes >= kVcrc * s.rx_iba_packets ? s.rx_bytes - kVcrc * s.rx_iba_packets : 0;
    c.rcv_errors = s.rx_errors;
    c.rcv_constraint_errors = s.rx_pkey_drops;
    c.xmit_constraint_errors = s.tx_pkey_drops;
    return c;
}

void Switch::set_port_active(std::uint8_t port, bool active) {
    if (!port_up(port)) return;
    if (ports_[port].active && !active) reset_cut_through(port);
    ports_[port].active = active;
}

void Switch::tick(Clock::time_point now) {
    now_ = now;
    send_link_state_trap();  // one held back by kTrapInterval
    if (faults_.active()) faults_.tick(now, [this](std::uint8_t p, bytes d) { transmit(p, d); });
    for (std::size_t p = 1; p < ports_.size(); ++p) {
        if (!ports_[p].plugged) {
            // An ISL trains from both ends: its peer hears from us whether
            // or not it has spoken yet.
            if (isl_peers_[p]) send_link_packet_to(*isl_peers_[p]);
            continue;
        }
        if (now - ports_[p].last_heard > config_.link_timeout) {
            unplug(static_cast<std::uint8_t>(p));
            continue;
        }
        send_link_packet(static_cast<std::uint8_t>(p));
    }
}

void Switch::unplug(std::uint8_t port) {
    reset_cut_through(port);
    ports_[port] = PortSlot{};
    sma_ports_[port].info.port_state = ib::port_state::down;
    // The next port here starts from the table a port has out of reset,
    // not the last one's partitions.
    sma_ports_[port].p_keys.assign(kPartitionCap, 0);
    sma_ports_[port].p_keys[0] = ib::kPKeyDefault;
    port_state_changed();
    link_events_.push_back({port, false});
}

std::size_t Switch::poll_link_events(std::span<LinkEvent> out) {
    const std::size_t n = std::min(out.size(), link_events_.size());
    std::copy_n(link_events_.begin(), n, out.begin());
    link_events_.erase(link_events_.begin(), link_events_.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
}

void Switch::send_link_packet(std::uint8_t port) { send_link_packet_to(ports_[port].peer); }

void Switch::send_link_packet_to(const SocketAddress& peer) {
    std::array<std::uint8_t, ib::LinkPacket::size> buf{};
    ib::LinkPacket{}.write_to(buf.data());
    output_.send(peer, buf);
    ++counters_.link_packets_out;
}

void Switch::send_to_port(std::uint8_t port, bytes datagram) {
    if (!port_up(port)) {
        count(SwitchDrop::egress_down);
        return;
    }
    if (faults_.active()) {
        faults_.out(port, datagram, now_, [this](std::uint8_t p, bytes d) { transmit(p, d); });
        return;
    }
    transmit(port, datagram);
}

void Switch::transmit(std::uint8_t port, bytes datagram) {
    if (!port_up(port)) {  // unplugged while a held packet waited
        count(SwitchDrop::egress_down);
        return;
    }
    output_.send(ports_[port].peer, datagram);
    ++ports_[port].tx_packets;
    ports_[port].tx_bytes += datagram.size();
    ++counters_.forwarded;
}

namespace {

// The BTH P_Key of a data packet (after the LRH, and the GRH when LNH says
// so); nullopt for a packet too short or not IBA.
std::optional<std::uint16_t> packet_pkey(bytes datagram, const ib::Lrh& lrh) {
    std::size_t at = ib::Lrh::size;
    if (lrh.lnh == ib::Lnh::iba_global)
        at += ib::Grh::size;
    else if (lrh.lnh != ib::Lnh::iba_local)
        return std::nullopt;
    if (datagram.size() < at + 4) return std::nullopt;
    return load_be16(datagram.data() + at + 2);
}

}  // namespace

bool Switch::pkey_allowed(std::uint8_t port, std::uint16_t pkey, bool inbound) const {
    // The P_Key's low 15 bits must be in the port's table (IBA 10.9.2).
    // Whether two limited members may talk is decided by the receiving CA
    // port (IBA 10.9.3), which trusts the membership bit of the packet: an
    // HCA takes it from the table its SM set, a soft port could write any.
    // So inbound, the bit may not claim more than the table gives.
    const std::uint16_t key = pkey & 0x7FFF;
    if (key == 0) return false;  // the invalid P_Key
    const bool claims_full = (pkey & 0x8000) != 0;
    for (std::uint16_t entry : sma_ports_[port].p_keys)
        if ((entry & 0x7FFF) == key && (!inbound || !claims_full || (entry & 0x8000))) return true;
    return false;
}

void Switch::forward(bytes datagram, const ib::Lrh& lrh, std::uint8_t in_port, Clock::time_point now) {
    // Partition enforcement on the switch ports the SM turned it on for;
    // SMPs (VL15) are never partitioned.
    std::optional<std::uint16_t> pkey;
    // Raw packets carry no P_Key (FilterRaw* is not supported): not checked.
    const bool partitioned = lrh.vl != ib::kVl15 && (lrh.lnh == ib::Lnh::iba_local || lrh.lnh == ib::Lnh::iba_global);
    if (partitioned && in_port != 0 && enforcing(in_port, true)) {
        pkey = packet_pkey(datagram, lrh);
        if (!pkey || !pkey_allowed(in_port, *pkey, true)) {
            ++ports_[in_port].rx_pkey_drops;
            if (sma_ports_[in_port].info.p_key_violations < 0xFFFF) ++sma_ports_[in_port].info.p_key_violations;
            count(SwitchDrop::pkey_inbound);
            return;
        }
    }
    auto egress_allowed = [&](std::uint8_t out) {
        if (lrh.vl != ib::kVl15 && port_up(out) && !ports_[out].active) {  // header comment, 5
            count(SwitchDrop::port_not_active);
            return false;
        }
        if (!partitioned || !enforcing(out, false)) return true;
        if (!pkey) pkey = packet_pkey(datagram, lrh);
        if (pkey && pkey_allowed(out, *pkey, false)) return true;
        ++ports_[out].tx_pkey_drops;
        count(SwitchDrop::pkey_outbound);
        return false;
    };
    if (ib::is_multicast_lid(lrh.dlid)) {
        // The ingress port is a member like any other: the sender's own
        // port receives its multicast, as DESIGN.md asks.
        // An ISL is no member: a copy never goes back to the switch it came from.
        const auto back_out = [&](std::size_t p) { return p == in_port && is_isl(in_port); };
        if (flooded_.count(lrh.dlid)) {
            bool any = false;
            for (std::size_t p = 1; p < ports_.size(); ++p)
                if (ports_[p].plugged && !back_out(p) && egress_allowed(static_cast<std::uint8_t>(p))) {
                    send_to_port(static_cast<std::uint8_t>(p), datagram);
                    any = true;
                }
            if (!any) count(SwitchDrop::no_multicast_members);
            return;
        }
        const auto it = mft_.find(lrh.dlid);
        if (it == mft_.end() || it->second.empty()) {
            count(SwitchDrop::no_multicast_members);
            return;
        }
        for (std::uint8_t p : it->second)
            if (!back_out(p) && egress_allowed(p)) send_to_port(p, datagram);
        return;
    }
    const auto it = lft_.find(lrh.dlid);
    if (it == lft_.end()) {
        count(SwitchDrop::no_route);
        return;
    }
    if (!egress_allowed(it->second)) return;
    send_to_port(it->second, datagram);
    if (hints_allowed() && now != Clock::time_point{}) maybe_send_hint(in_port, it->second, lrh.dlid, now);
}

std::optional<std::vector<std::uint16_t>> Switch::cut_through_keys(std::uint8_t in_port, std::uint8_t out_port) const {
    const bool in = enforcing(in_port, true), out = enforcing(out_port, false);
    if (!in && !out) return std::nullopt;
    std::vector<std::uint16_t> keys;
    auto add = [&](std::uint16_t key) {
        if ((key & 0x7FFF) == 0) return;
        for (std::uint16_t& k : keys)
            if ((k & 0x7FFF) == (key & 0x7FFF)) {
                k |= key & 0x8000;
                return;
            }
        keys.push_back(key);
    };
    if (in) {
        // What the ingress port may send, with its membership, that the
        // egress port (when it enforces) lets out.
        for (std::uint16_t key : sma_ports_[in_port].p_keys)
            if (!out || pkey_allowed(out_port, key, false)) add(key);
    } else {
        // Any membership: the switch would not look at the bit.
        for (std::uint16_t key : sma_ports_[out_port].p_keys) add(static_cast<std::uint16_t>(key | 0x8000));
    }
    return keys;
}

void Switch::maybe_send_hint(std::uint8_t in_port, std::uint8_t out_port, std::uint16_t dlid, Clock::time_point now) {
    // Cut-through only between two host ports of this switch: a packet that
    // crosses an ISL passes every switch on its path (their tables, their
    // partition checks, a lost link noticed), and an ISL's peer is a switch
    // that takes no hints.
    if (in_port == out_port || !port_up(in_port) || !port_up(out_port) || is_isl(in_port) || is_isl(out_port)) return;
    auto& last = hints_sent_[{in_port, dlid}];
    if (last != Clock::time_point{} && now - last < config_.hint_ttl / 2) return;
    last = now;
    send_hint(in_port, out_port, dlid, 0);
}

void Switch::answer_route_request(std::uint8_t in_port, std::uint8_t out_port, std::uint16_t dlid,
                                  std::uint64_t nonce, Clock::time_point now) {
    if (in_port == out_port || !port_up(in_port) || !port_up(out_port)) {
        count(SwitchDrop::bad_route_request);
        return;
    }
    if (is_isl(in_port) || is_isl(out_port)) {  // no cut-through across switches (maybe_send_hint)
        count(SwitchDrop::route_refused);
        return;
    }
    // A direct path skips this switch's checks: only between ACTIVE ports
    // that share a partition, and the permit says what the destination may
    // take (header comment, 5).
    const auto keys = cut_through_keys(in_port, out_port);
    if (!ports_[in_port].active || !ports_[out_port].active || (keys && keys->empty())) {
        count(SwitchDrop::route_refused);
        return;
    }
    const auto lids = lids_of(in_port);
    if (!lids) {
        count(SwitchDrop::route_refused);
        return;
    }
    hints_sent_[{in_port, dlid}] = now;
    // The destination first: the permit must be there before the first
    // direct packet (both leave in this order on one socket). One permit
    // holds four P_Keys; more go in more, the first replacing what the
    // destination held for the requester.
    transport::PeerPermit permit;
    permit.ttl_ms = static_cast<std::uint16_t>(std::min<std::int64_t>(2 * config_.hint_ttl.count(), 60'000));
    permit.peer = ports_[in_port].peer;
    permit.lid = lids->first;
    permit.lmc = lids->second;
    permit.any_pkey = !keys;
    std::size_t next = 0;
    do {
        permit.pkeys.fill(0);
        for (std::size_t i = 0; keys && i < permit.pkeys.size() && next < keys->size(); ++i) permit.pkeys[i] = (*keys)[next++];
        transport::SoftControlBuffer buf;
        if (!transport::encode_peer_permit(permit, buf)) return;
        output_.send(ports_[out_port].peer, buf);
        ++counters_.permits;
        permit.first = false;
    } while (keys && next < keys->size());
    send_hint(in_port, out_port, dlid, nonce);
}

std::optional<std::pair<std::uint16_t, std::uint8_t>> Switch::lids_of(std::uint8_t port) const {
    // The LIDs the forwarding table routes to the port: one aligned block
    // of 2^LMC (IBA 7.11.1), as an SM assigns them.
    std::uint16_t base = 0;
    std::size_t n = 0;
    for (const auto& [lid, p] : lft_)
        if (p == port) {
            if (n == 0) base = lid;
            ++n;
        }
    if (n == 0) return std::nullopt;
    std::uint8_t lmc = 0;
    while (lmc < 7 && (std::size_t{1} << lmc) < n) ++lmc;
    // A block that is not whole and aligned: the base LID alone.
    if ((std::size_t{1} << lmc) != n || (base & ((1u << lmc) - 1)) != 0) lmc = 0;
    for (std::uint16_t lid = base; lid < base + (1u << lmc); ++lid) {
        const auto it = lft_.find(lid);
        if (it == lft_.end() || it->second != port) return std::pair{base, std::uint8_t{0}};
    }
    return std::pair{base, lmc};
}

// What the switch told about a port (its routes and permits) no longer
// holds: its state or partitions change, or it goes. Every route it was
// hinted and every route to it is withdrawn, and so are the permits for
// those routes, so that the packets pass the switch again and the next
// route request is answered by what holds now.
void Switch::reset_cut_through(std::uint8_t port) {
    for (auto it = hints_sent_.begin(); it != hints_sent_.end();) {
        const auto [in_port, dlid] = it->first;
        const auto route = lft_.find(dlid);
        const std::uint8_t out_port = route == lft_.end() ? 0 : route->second;
        if (in_port != port && out_port != port) {
            ++it;
            continue;
        }
        if (port_up(in_port)) {
            transport::RouteHint withdrawal;
            withdrawal.dlid = dlid;
            withdrawal.peer = ports_[in_port].peer;  // not used by a withdrawal; any valid address
            transport::SoftControlBuffer buf;
            if (transport::encode_route_hint(withdrawal, buf)) {
                output_.send(ports_[in_port].peer, buf);
                ++counters_.route_withdrawals;
            }
            if (port_up(out_port)) {
                transport::PeerPermit none;
                none.peer = ports_[in_port].peer;
                none.first = false;
                if (transport::encode_peer_permit(none, buf)) {
                    output_.send(ports_[out_port].peer, buf);
                    ++counters_.permit_withdrawals;
                }
            }
        }
        it = hints_sent_.erase(it);
    }
}

void Switch::send_hint(std::uint8_t in_port, std::uint8_t out_port, std::uint16_t dlid, std::uint64_t nonce) {
    transport::RouteHint hint;
    hint.dlid = dlid;
    hint.ttl_ms = static_cast<std::uint16_t>(std::min<std::int64_t>(config_.hint_ttl.count(), 60'000));
    hint.peer = ports_[out_port].peer;
    hint.nonce = nonce;
    transport::SoftControlBuffer buf;
    if (!transport::encode_route_hint(hint, buf)) return;
    output_.send(ports_[in_port].peer, buf);
    ++counters_.route_hints;
}

void Switch::to_management(bytes datagram, std::uint8_t in_port) {
    const auto pkt = ib::parse_packet(datagram);
    if (!pkt) {
        count(SwitchDrop::management_malformed);
        return;
    }
    ++counters_.to_management;
    if (pkt->bth.dest_qp == ib::kQp0) {
        auto smp = ib::decode_smp(pkt->payload);
        if (!smp) {
            count(SwitchDrop::management_malformed);
            return;
        }
        if (smp->is_directed_route()) {
            handle_dr_smp(*smp, *pkt, in_port);
            return;
        }
        // LID-routed to this switch: requests for its SMA; responses,
        // traps and SMInfo for the SM on its port 0.
        const bool for_sm = (smp->method & ib::method::response_bit) != 0 || smp->method == ib::method::trap ||
                            smp->attribute_id == ib::smp_attr::sm_info;
        if (!for_sm) {
            if (auto reply = sma_answer(*smp, in_port)) send_sma_reply(*reply, *pkt);
        } else if (management_) {
            if (!management_->on_smp(*smp, in_port, pkt->lrh.slid)) count(SwitchDrop::management_no_agent);
        } else {
            count(SwitchDrop::management_no_agent);
        }
        return;
    }
    if (!management_ || !management_->on_packet(*pkt, datagram, in_port)) count(SwitchDrop::management_no_agent);
}

void Switch::handle_dr_smp(ib::Smp smp, const ib::Packet& pkt, std::uint8_t in_port) {
    const ib::DrDecision d = smp.direction ? ib::dr_switch_returning(smp, config_.num_ports)
                                           : ib::dr_switch_outbound(smp, in_port, config_.num_ports);
    switch (d.action) {
        case ib::DrAction::discard: count(SwitchDrop::dr_discarded); return;
        case ib::DrAction::deliver:
            if (!smp.direction) {
                // An outbound request for this switch: its SMA answers,
                // SMInfo and traps excepted (the SM's).
                if (smp.attribute_id != ib::smp_attr::sm_info && smp.method != ib::method::trap) {
                    if (auto reply = sma_answer(smp, in_port)) send_sma_reply(*reply, pkt);
                    return;
                }
            }
            if (!management_) {
                count(SwitchDrop::management_no_agent);
                return;
            }
            if (!management_->on_smp(smp, in_port, pkt.lrh.slid)) count(SwitchDrop::management_no_agent);
            return;
        case ib::DrAction::send_on_port:
        case ib::DrAction::send_lid_routed: break;
    }
    // A request starting a LID-routed last part (C14-9:3, DrDLID not
    // permissive) goes on by LID, and is answered by LID to its LRH SLID:
    // from a port, that must be the port's own (as in on_datagram).
    const bool from_edge = in_port != 0 && !is_isl(in_port);
    if (d.action == ib::DrAction::send_lid_routed && !smp.direction && from_edge &&
        !slid_routed_to(pkt.lrh.slid, in_port) && pkt.lrh.slid != ib::kLidPermissive) {
        count(SwitchDrop::slid_not_port);
        return;
    }
    // Re-encode the SMP with its new hop fields into the same headers.
    std::array<std::uint8_t, ib::kMadSize> mad{};
    smp.write_to(mad.data());
    ib::PacketSpec spec{pkt.lrh, pkt.grh, pkt.bth, pkt.ext, mad};
    if (d.action == ib::DrAction::send_lid_routed) spec.lrh.dlid = d.lid;
    // A request on the directed part goes by its paths, not by the LRH
    // SLID; but the CA that gets it names that SLID in its Trap 256 as the
    // one that tried. From a port, an SLID that is not the port's own
    // leaves as the permissive LID (unknown), not as another port's.
    if (!smp.direction && from_edge && !slid_routed_to(spec.lrh.slid, in_port)) spec.lrh.slid = ib::kLidPermissive;
    std::vector<std::uint8_t> out(ib::packet_size(spec));
    if (!ib::build_packet(spec, out)) {
        count(SwitchDrop::management_malformed);
        return;
    }
    if (d.action == ib::DrAction::send_on_port) {
        send_to_port(d.port, out);
    } else {
        const auto lrh = ib::Lrh::read_from(out.data());
        forward(out, lrh, in_port);
    }
}

void Switch::send_from_management(bytes packet, std::uint8_t port) {
    if (tap_) tap_(packet, true);
    if (port != 0) {
        send_to_port(port, packet);
        return;
    }
    if (packet.size() < ib::Lrh::size) return;
    forward(packet, ib::Lrh::read_from(packet.data()), 0);
}

void Switch::set_unicast_route(std::uint16_t lid, std::uint8_t port) {
    const auto old = lft_.find(lid);
    if (old != lft_.end() && old->second != port) withdraw_hints(lid);
    lft_[lid] = port;
    std::erase_if(hints_sent_, [lid](const auto& kv) { return kv.first.second == lid; });
}
void Switch::clear_unicast_route(std::uint16_t lid) {
    if (lft_.contains(lid)) withdraw_hints(lid);
    lft_.erase(lid);
    std::erase_if(hints_sent_, [lid](const auto& kv) { return kv.first.second == lid; });
}

// The LID moved (a port that came back on another switch port, with another
// UDP address) or went: the ports this switch told where it was must stop
// sending there at once, not when their hint expires. A hint of TTL 0 and
// nonce 0 withdraws the route (route_hint.h); the packets go through the
// switch again, which hints the new place as usual.
void Switch::withdraw_hints(std::uint16_t lid) {
    for (const auto& [key, when] : hints_sent_) {
        const std::uint8_t in_port = key.first;
        if (key.second != lid || !port_up(in_port)) continue;
        transport::RouteHint hint;
        hint.dlid = lid;
        hint.ttl_ms = 0;
        hint.nonce = 0;
        hint.peer = ports_[in_port].peer;  // not used by a withdrawal; any valid address
        transport::SoftControlBuffer buf;
        if (!transport::encode_route_hint(hint, buf)) continue;
        output_.send(ports_[in_port].peer, buf);
        ++counters_.route_withdrawals;
    }
}
std::optional<std::uint8_t> Switch::unicast_route(std::uint16_t lid) const {
    const auto it = lft_.find(lid);
    if (it == lft_.end()) return std::nullopt;
    return it->second;
}

void Switch::set_multicast_ports(std::uint16_t mlid, std::set<std::uint8_t> ports) {
    if (ports.empty())
        mft_.erase(mlid);
    else
        mft_[mlid] = std::move(ports);
}

void Switch::set_multicast_flood(std::uint16_t mlid, bool flood) {
    if (flood)
        flooded_.insert(mlid);
    else
        flooded_.erase(mlid);
}

void visit(const SwitchCounters& c, CounterSink& out) {
    out.counter("forwarded", c.forwarded);
    out.counter("route_hints", c.route_hints);
    out.counter("route_withdrawals", c.route_withdrawals);
    out.counter("sma_responses", c.sma_responses);
    out.counter("sma_error_responses", c.sma_error_responses);
    out.counter("traps_sent", c.traps_sent);
    out.counter("permits", c.permits);
    out.counter("permit_withdrawals", c.permit_withdrawals);
    out.counter("to_management", c.to_management);
    out.counter("link_packets_in", c.link_packets_in);
    out.counter("link_packets_out", c.link_packets_out);
    out.counter("ports_reclaimed", c.ports_reclaimed);
    visit_reasons<SwitchDrop>(out, "dropped_", c.dropped, [](SwitchDrop d) { return to_string(d); });
    visit_reasons<ib::DropReason>(out, "link_check_", c.link_drops, [](ib::DropReason d) { return ib::to_string(d); });
}

const char* to_string(SwitchDrop d) {
    switch (d) {
        case SwitchDrop::bad_link_packet: return "bad_link_packet";
        case SwitchDrop::unknown_peer: return "unknown_peer";
        case SwitchDrop::ports_full: return "ports_full";
        case SwitchDrop::link_check: return "link_check";
        case SwitchDrop::no_route: return "no_route";
        case SwitchDrop::egress_down: return "egress_down";
        case SwitchDrop::no_multicast_members: return "no_multicast_members";
        case SwitchDrop::sma_dropped: return "sma_dropped";
        case SwitchDrop::pkey_inbound: return "pkey_inbound";
        case SwitchDrop::pkey_outbound: return "pkey_outbound";
        case SwitchDrop::port_not_active: return "port_not_active";
        case SwitchDrop::slid_not_port: return "slid_not_port";
        case SwitchDrop::management_malformed: return "management_malformed";
        case SwitchDrop::management_no_agent: return "management_no_agent";
        case SwitchDrop::dr_discarded: return "dr_discarded";
        case SwitchDrop::bad_route_request: return "bad_route_request";
        case SwitchDrop::route_refused: return "route_refused";
        case SwitchDrop::admission_rate: return "admission_rate";
        case SwitchDrop::admission_pending: return "admission_pending";
        case SwitchDrop::count_: break;
    }
    return "unknown";
}

}  // namespace ipoibd::fabric
