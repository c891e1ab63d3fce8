// Engine lifecycle: start, the broadcast join bringing the link up, port
// events, addresses and DAD, timers. Egress is in engine_tx.cpp, ingress in
// engine_rx.cpp; the flow is drawn in engine.h.
#include "ipoib/engine.h"

#include <algorithm>
#include <cstdio>

#include "ipoib/link.h"
#include "sa_client/sa_mad.h"
#include "transport/gid.h"

namespace ipoibd::ipoib {

void visit(const EngineCounters& c, CounterSink& out) {
    out.counter("rx_datagrams", c.rx_datagrams);
    out.counter("rx_own_multicast", c.rx_own_multicast);
    visit_reasons<FrameError>(out, "rx_frame_", c.rx_frame_errors, [](FrameError r) { return to_string(r); });
    out.counter("rx_rarp", c.rx_rarp);
    out.counter("rx_nonzero_reserved", c.rx_nonzero_reserved);
    visit_reasons<IpPacketError>(out, "rx_ip_", c.rx_ip_errors, [](IpPacketError r) { return to_string(r); });
    visit_reasons<ArpError>(out, "rx_arp_", c.rx_arp_errors, [](ArpError r) { return to_string(r); });
    visit_reasons<NdError>(out, "rx_nd_", c.rx_nd_errors, [](NdError r) { return to_string(r); });
    out.counter("rx_to_tun", c.rx_to_tun);
    out.counter("rx_drop_link_down", c.rx_drop_link_down);
    out.counter("arp_requests_rx", c.arp_requests_rx);
    out.counter("arp_replies_rx", c.arp_replies_rx);
    out.counter("ns_rx", c.ns_rx);
    out.counter("rx_drop_ns_not_ours", c.rx_drop_ns_not_ours);
    out.counter("na_rx", c.na_rx);
    out.counter("tun_packets", c.tun_packets);
    visit_reasons<IpPacketError>(out, "tun_ip_", c.tun_ip_errors, [](IpPacketError r) { return to_string(r); });
    out.counter("tun_drop_link_down", c.tun_drop_link_down);
    out.counter("tun_drop_host_nd", c.tun_drop_host_nd);
    out.counter("tun_drop_too_big", c.tun_drop_too_big);
    out.counter("tun_drop_no_source", c.tun_drop_no_source);
    out.counter("tun_drop_bad_nd", c.tun_drop_bad_nd);
    out.counter("tun_drop_mcast_unavailable", c.tun_drop_mcast_unavailable);
    out.counter("tun_drop_bad_destination", c.tun_drop_bad_destination);
    out.counter("tx_too_big", c.tx_too_big);
    out.counter("icmp_too_big_tx", c.icmp_too_big_tx);
    out.counter("tx_fragmented", c.tx_fragmented);
    out.counter("tx_connected", c.tx_connected);
    out.counter("tx_unicast", c.tx_unicast);
    out.counter("tx_multicast", c.tx_multicast);
    out.counter("tx_to_all_routers", c.tx_to_all_routers);
    out.counter("arp_requests_tx", c.arp_requests_tx);
    out.counter("arp_replies_tx", c.arp_replies_tx);
    out.counter("gratuitous_arp_tx", c.gratuitous_arp_tx);
    out.counter("ns_tx", c.ns_tx);
    out.counter("na_tx", c.na_tx);
    out.counter("dad_ns_tx", c.dad_ns_tx);
    out.counter("peer_changes", c.peer_changes);
    out.counter("address_conflicts", c.address_conflicts);
    out.counter("dad_conflicts", c.dad_conflicts);
    out.counter("host_group_joins", c.host_group_joins);
    out.counter("host_group_leaves", c.host_group_leaves);
    out.counter("host_groups_over_limit", c.host_groups_over_limit);
    out.counter("link_ups", c.link_ups);
    out.counter("link_downs", c.link_downs);
    out.counter("qp_opens", c.qp_opens);
    out.counter("qp_open_failures", c.qp_open_failures);
    out.counter("port_events", c.port_events);
    out.counter("sa_probes", c.sa_probes);
}

namespace {
constexpr std::size_t kMaxFrame = 65536 + EncapHeader::size;

}  // namespace

// The journal's spellings (docs/journal.md): 0x + 4 or 6 hex digits.
std::string hex16(std::uint16_t v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%04x", static_cast<unsigned>(v));
    return buf;
}
std::string hex_qpn(std::uint32_t v) {
    char buf[12];
    std::snprintf(buf, sizeof buf, "0x%06x", static_cast<unsigned>(v & 0xFFFFFF));
    return buf;
}

bool InterfaceAddress::contains(const IpAddress& other) const {
    if (other.family != ip.family) return false;
    const std::size_t bits = prefix_length;
    for (std::size_t i = 0; i < bits / 8; ++i)
        if (ip.bytes[i] != other.bytes[i]) return false;
    if (bits % 8 == 0) return true;
    const auto mask = static_cast<std::uint8_t>(0xFF << (8 - bits % 8));
    return (ip.bytes[bits / 8] & mask) == (other.bytes[bits / 8] & mask);
}

std::string format_interface_address(const InterfaceAddress& a) {
    return to_string(a.ip) + "/" + std::to_string(a.prefix_length);
}

const char* to_string(EngineEventKind k) {
    switch (k) {
    case EngineEventKind::link_up: return "link_up";
    case EngineEventKind::link_down: return "link_down";
    case EngineEventKind::broadcast_join_failed: return "broadcast_join_failed";
    case EngineEventKind::group_joined: return "group_joined";
    case EngineEventKind::group_join_failed: return "group_join_failed";
    case EngineEventKind::group_left: return "group_left";
    case EngineEventKind::peer_changed: return "peer_changed";
    case EngineEventKind::address_conflict: return "address_conflict";
    case EngineEventKind::dad_failed: return "dad_failed";
    case EngineEventKind::qp_opened: return "qp_opened";
    case EngineEventKind::qp_open_failed: return "qp_open_failed";
    case EngineEventKind::path_failed: return "path_failed";
    case EngineEventKind::connection_failed: return "connection_failed";
    }
    return "?";
}

Engine::Engine(EngineConfig config, EngineLink& link, EngineIo& io, sa::SaClient::Config sa_config)
    : config_(config),
      link_io_(link),
      io_(io),
      sa_(sa_config),
      neighbours_(config.neighbour),
      paths_(sa_, *this, now_, config.path),
      mcast_(sa_, *this, now_, config.mcast) {
    tx_.resize(kMaxFrame);
    scratch_.resize(kMaxFrame);
}

Engine::~Engine() = default;

void Engine::emit(EngineEventKind kind, std::string message, std::vector<std::pair<std::string, std::string>> fields) {
    fields.emplace_back("IB_PKEY", hex16(config_.pkey));
    io_.event(EngineEvent{.kind = kind, .message = std::move(message), .fields = std::move(fields)});
}

void Engine::drain_sa() {
    for (const sa::SaMad& mad : sa_.take_outbound()) io_.send_sa(mad);
}

void Engine::set_port(const transport::PortAttributes& port) {
    port_ = port;
    sa_.set_sm_lid(port.sm_lid);
    paths_.set_source(port.gid(), config_.pkey);
    mcast_.set_port_gid(port.gid());
    link_.hw.gid = port.gid();
}

void Engine::start(const transport::PortAttributes& port, Clock::time_point now) {
    now_ = now;
    started_ = true;
    stopped_ = false;
    set_port(port);
    if (config_.link_local_address) {
        Address a;
        a.address = {.ip = IpAddress::v6(link_local_address(port.port_guid)), .prefix_length = 64};
        a.implicit = true;
        a.dad = config_.dad_transmits > 0 ? DadState::tentative : DadState::preferred;
        addresses_.insert(addresses_.begin(), a);
    }
    // The groups every IPoIB host receives: all-hosts, all-nodes, and the
    // solicited-node group of each IPv6 address (RFC 4861 7.2.1).
    want_group(IpAddress::v4({224, 0, 0, 1}), true);
    want_group(IpAddress::v6(kIpv6AllNodes), true);
    for (const Address& a : addresses_)
        if (a.address.ip.family == IpFamily::ipv6)
            want_group(IpAddress::v6(solicited_node_multicast(a.address.ip.bytes)), true);
    mcast_.start(broadcast_mgid(config_.pkey, config_.scope), port.gid(), config_.pkey);
    if (!pkey_in_table(port)) {
        // A child whose partition the SM has not given this port: no join
        // (the SA would refuse it) until a P_Key change brings it.
        mcast_.port_down();
        emit(EngineEventKind::link_down,
             "P_Key " + hex16(config_.pkey) +
                 " is not in the port's P_Key table: the link stays down until the subnet manager adds it",
             {{"IPOIB_REASON", "P_Key not in the port's table"}});
    }
    drain_sa();
}

bool Engine::pkey_in_table(const transport::PortAttributes& port) const { return pkey_index(port).has_value(); }

std::optional<std::size_t> Engine::pkey_index(const transport::PortAttributes& port) const {
    for (std::size_t i = 0; i < port.pkey_table.size(); ++i)
        if ((port.pkey_table[i] & 0x7FFF) == (config_.pkey & 0x7FFF)) return i;
    return std::nullopt;
}

void Engine::stop(Clock::time_point now) {
    now_ = now;
    if (stopped_) return;
    stopped_ = true;
    mcast_.leave_all();
    link_down("stopping");
    paths_.flush();
    process(neighbours_.flush());
    drain_sa();
}

void Engine::link_down(const char* why) {
    if (!link_.up) return;
    link_.up = false;
    ++counters_.link_downs;
    io_.link_changed(link_);
    emit(EngineEventKind::link_down, std::string("link down: ") + why, {{"IPOIB_REASON", why}});
}

void Engine::broadcast_joined(const LinkParameters& params, std::uint16_t mlid) {
    if (stopped_) return;
    const bool new_qp = qp_stale_ || link_.qpn == 0 || params.qkey != qp_qkey_;
    if (new_qp) {
        auto qpn = link_io_.open_qp(params.qkey, config_.pkey);
        if (!qpn) {
            ++counters_.qp_open_failures;
            emit(EngineEventKind::qp_open_failed, "could not create the UD QP: " + qpn.error(),
                 {{"IPOIB_REASON", qpn.error()}});
            link_down("no QP");
            return;
        }
        ++counters_.qp_opens;
        qp_stale_ = false;
        qp_qkey_ = params.qkey;
        const std::uint32_t old = link_.qpn;
        link_.qpn = *qpn;
        emit(EngineEventKind::qp_opened, "UD QP " + hex_qpn(*qpn) + " ready",
             {{"IB_QPN", hex_qpn(*qpn)}, {"IB_QPN_OLD", hex_qpn(old)}});
    }
    link_.params = params;
    link_.broadcast_mlid = mlid;
    apply_link_parameters();
    const bool was_up = link_.up;
    link_.up = true;
    if (!was_up) ++counters_.link_ups;
    io_.link_changed(link_);
    if (!was_up)
        emit(EngineEventKind::link_up, "link up: broadcast group joined",
             {{"IB_MGID", ipoibd::format_gid(mcast_.broadcast_mgid())},
              {"IB_MLID", hex16(mlid)},
              {"IB_QKEY", [&] {
                   char b[16];
                   std::snprintf(b, sizeof b, "0x%08x", static_cast<unsigned>(params.qkey));
                   return std::string(b);
               }()},
              {"IB_QPN", hex_qpn(link_.qpn)},
              {"IB_LID", hex16(port_.lid)},
              {"IB_GID", ipoibd::format_gid(port_.gid())},
              {"IPOIB_MTU", std::to_string(link_.mtu)}});
    if (!was_up || new_qp) announce();
}

void Engine::apply_link_parameters() {
    link_.connected = connected_active();
    const bool accepts = config_.connected && link_io_.connected_accepts();
    link_.hw = HwAddress{.flags = accepts ? HwAddress::kFlagConnectedRc : std::uint8_t{0},
                         .qpn = link_.qpn,
                         .gid = port_.gid()};
    link_.datagram_mtu = clamp_interface_mtu(config_.mtu, static_cast<ib::Mtu>(link_.params.mtu));
    link_.mtu = link_.connected ? (config_.mtu ? std::min(config_.mtu, kConnectedModeMtu) : kConnectedModeMtu)
                                : link_.datagram_mtu;
}

void Engine::set_connected(bool on, Clock::time_point now) {
    now_ = now;
    if (config_.connected == on) return;
    config_.connected = on;
    paths_.flush();  // as the kernel does on a mode change
    connected_changed(now);
}

void Engine::connected_changed(Clock::time_point now) {
    now_ = now;
    if (!link_.up) return;
    const LinkStatus before = link_;
    apply_link_parameters();
    if (link_.mtu == before.mtu && link_.hw == before.hw) return;
    io_.link_changed(link_);
    // Peers learn the new flags from our announcements (RFC 4755: the flag
    // says whether we accept connections).
    announce();
    drain_sa();
}

void Engine::announce() {
    for (Address& a : addresses_) {
        if (a.address.ip.family == IpFamily::ipv4) {
            Ipv4Address ip{};
            std::copy_n(a.address.ip.bytes.begin(), 4, ip.begin());
            ++counters_.gratuitous_arp_tx;
            send_arp(make_gratuitous_arp(link_.hw, ip), std::nullopt);
        } else if (a.dad == DadState::tentative) {
            a.dad_sent = 0;
            a.dad_deadline = now_;  // dad_tick() sends the first probe
        } else if (a.dad == DadState::preferred) {
            const auto na = make_unsolicited_advertisement(a.address.ip.bytes, link_.hw, false);
            if (auto n = build_neighbor_advertisement(na, scratch_)) {
                ++counters_.na_tx;
                send_nd(bytes(scratch_.data(), *n), na.destination, std::nullopt);
            }
        }
    }
    dad_tick();
}

void Engine::dad_tick() {
    if (!link_.up) return;
    for (Address& a : addresses_) {
        if (a.address.ip.family != IpFamily::ipv6 || a.dad != DadState::tentative || now_ < a.dad_deadline) continue;
        if (a.dad_sent >= config_.dad_transmits) {
            // RFC 4862 5.4: no answer within RetransTimer of the last probe.
            a.dad = DadState::preferred;
            const auto na = make_unsolicited_advertisement(a.address.ip.bytes, link_.hw, false);
            if (auto n = build_neighbor_advertisement(na, scratch_)) {
                ++counters_.na_tx;
                send_nd(bytes(scratch_.data(), *n), na.destination, std::nullopt);
            }
            continue;
        }
        const auto ns = make_dad_solicitation(a.address.ip.bytes);
        if (auto n = build_neighbor_solicitation(ns, scratch_)) {
            ++counters_.dad_ns_tx;
            send_nd(bytes(scratch_.data(), *n), ns.destination, std::nullopt);
        }
        ++a.dad_sent;
        a.dad_deadline = now_ + config_.dad_retrans;
    }
}

std::optional<ib::Gid> Engine::group_mgid(const IpAddress& group) const {
    if (group.family == IpFamily::ipv4) {
        Ipv4Address a{};
        std::copy_n(group.bytes.begin(), 4, a.begin());
        auto m = ipv4_group_mgid(a, config_.pkey, config_.scope);
        if (!m) return std::nullopt;
        return *m;
    }
    auto m = ipv6_group_mgid(group.bytes, config_.pkey, config_.scope);
    if (!m) return std::nullopt;
    return *m;
}

bool Engine::want_group(const IpAddress& group, bool join) {
    const auto mgid = group_mgid(group);
    if (!mgid) return false;
    if (join) return mcast_.add_full(*mgid);
    mcast_.remove_full(*mgid);
    return true;
}

void Engine::host_group_change(const GroupChange& change) {
    if (change.join) {
        if (host_groups_.count(change.group)) return;  // a repeated report
        if (host_groups_.size() >= kMaxHostGroups || !want_group(change.group, true)) {
            ++counters_.host_groups_over_limit;
            return;
        }
        host_groups_.insert(change.group);
        ++counters_.host_group_joins;
        return;
    }
    if (!host_groups_.erase(change.group)) return;  // not a group the host joined
    ++counters_.host_group_leaves;
    want_group(change.group, false);
}

Engine::Address* Engine::find_address(const IpAddress& ip) {
    for (Address& a : addresses_)
        if (a.address.ip == ip) return &a;
    return nullptr;
}

bool Engine::is_ours(const IpAddress& ip) const {
    return std::any_of(addresses_.begin(), addresses_.end(), [&](const Address& a) { return a.address.ip == ip; });
}

void Engine::add_address(const InterfaceAddress& address, Clock::time_point now) {
    now_ = now;
    if (Address* existing = find_address(address.ip)) {
        existing->address.prefix_length = address.prefix_length;
        return;
    }
    Address a;
    a.address = address;
    const bool v6 = address.ip.family == IpFamily::ipv6;
    a.dad = v6 && config_.dad_transmits > 0 ? DadState::tentative : DadState::preferred;
    addresses_.push_back(a);
    if (v6 && started_) want_group(IpAddress::v6(solicited_node_multicast(address.ip.bytes)), true);
    if (link_.up) {
        Address& added = addresses_.back();
        if (!v6) {
            Ipv4Address ip{};
            std::copy_n(address.ip.bytes.begin(), 4, ip.begin());
            ++counters_.gratuitous_arp_tx;
            send_arp(make_gratuitous_arp(link_.hw, ip), std::nullopt);
        } else {
            added.dad_deadline = now_;
            dad_tick();
        }
    }
    drain_sa();
}

void Engine::remove_address(const InterfaceAddress& address, Clock::time_point now) {
    now_ = now;
    auto it = std::find_if(addresses_.begin(), addresses_.end(),
                           [&](const Address& a) { return a.address.ip == address.ip; });
    if (it == addresses_.end()) return;
    const bool v6 = it->address.ip.family == IpFamily::ipv6;
    const IpAddress ip = it->address.ip;
    addresses_.erase(it);
    if (v6 && started_) {
        // Another address may share the solicited-node group.
        const auto group = solicited_node_multicast(ip.bytes);
        const bool shared = std::any_of(addresses_.begin(), addresses_.end(), [&](const Address& a) {
            return a.address.ip.family == IpFamily::ipv6 && solicited_node_multicast(a.address.ip.bytes) == group;
        });
        if (!shared) want_group(IpAddress::v6(group), false);
    }
    drain_sa();
}

void Engine::peer_gone(const HwAddress& gone, Clock::time_point now) {
    now_ = now;
    if (!link_.up) return;
    process(neighbours_.re_resolve(gone, now_));
    drain_sa();
}

std::vector<AddressView> Engine::addresses() const {
    std::vector<AddressView> out;
    for (const Address& a : addresses_) out.push_back({a.address, a.dad, a.implicit});
    return out;
}

void Engine::on_sa_mad(bytes mad, Clock::time_point now, std::uint16_t from_lid) {
    now_ = now;
    sa_.on_mad(mad, now, from_lid);
    drain_sa();
}

void Engine::on_port_event(transport::PortEvent e, const transport::PortAttributes& port, Clock::time_point now) {
    now_ = now;
    ++counters_.port_events;
    if (stopped_ || !started_) return;
    const bool gid_changed = port.gid() != port_.gid();
    const std::optional<std::size_t> old_index = pkey_index(port_);
    set_port(port);
    using transport::PortEvent;
    switch (e) {
    case PortEvent::client_reregister:
    case PortEvent::sm_change:
        if (pkey_in_table(port)) mcast_.rejoin_all();
        break;
    case PortEvent::lid_change:
        paths_.flush();
        if (pkey_in_table(port)) mcast_.rejoin_all();
        break;
    case PortEvent::port_down:
        link_down("port down");
        paths_.flush();
        process(neighbours_.flush());
        mcast_.port_down();
        break;
    case PortEvent::port_active:
        paths_.flush();
        if (pkey_in_table(port)) mcast_.rejoin_all();
        break;
    case PortEvent::pkey_change: {
        // Another partition came or went (a child's, say) and ours kept its
        // index: nothing to do; the QP stays.
        if (link_.up && old_index && pkey_index(port) == old_index) break;
        // The P_Key's index may have moved, or the key gone: a new QP on it
        // (a new QPN, announced) once the broadcast group answers again.
        const bool present = pkey_in_table(port);
        qp_stale_ = true;
        paths_.flush();
        if (!present) {
            link_down("P_Key not in the port's table");
            mcast_.port_down();
        } else {
            mcast_.rejoin_all();
        }
        break;
    }
    }
    if (gid_changed) {
        link_.hw.gid = port.gid();
        qp_stale_ = true;  // our 20-byte address changed: announce it again
    }
    drain_sa();
}

void Engine::join_failed(const ib::Gid& mgid, GroupRole role, std::uint16_t sa_status, unsigned failures,
                         std::chrono::milliseconds retry_in, std::size_t dropped) {
    const bool broadcast = role == GroupRole::broadcast;
    if (broadcast) link_down("broadcast join failed");
    emit(broadcast ? EngineEventKind::broadcast_join_failed : EngineEventKind::group_join_failed,
         std::string(broadcast ? "broadcast group join failed" : "multicast join failed") + " (" +
             (sa_status ? sa::describe_sa_status(sa_status) : std::string("no answer")) + "), retry in " +
             std::to_string(retry_in.count()) + " ms",
         [&] {
             std::vector<std::pair<std::string, std::string>> f{
                 {"IB_MGID", ipoibd::format_gid(mgid)},
                 {"IB_JOIN_STATE", role == GroupRole::send_only ? "send_only" : "full"},
                 {"IPOIB_REASON", sa_status ? "sa_status" : "join_timeout"},
                 {"IPOIB_GROUP_ROLE", std::string(to_string(role))},
                 {"IPOIB_FAILURES", std::to_string(failures)},
                 {"IPOIB_DROPPED", std::to_string(dropped)}};
             if (sa_status) f.emplace_back("IB_SA_STATUS", hex16(sa_status));
             return f;
         }());
}

void Engine::group_joined(const ib::Gid& mgid, GroupRole role, std::uint16_t mlid, std::vector<Packet> frames) {
    emit(EngineEventKind::group_joined, "joined multicast group " + ipoibd::format_gid(mgid),
         {{"IB_MGID", ipoibd::format_gid(mgid)},
          {"IB_MLID", hex16(mlid)},
          {"IB_JOIN_STATE", role == GroupRole::send_only ? "send_only" : "full"},
          {"IPOIB_GROUP_ROLE", std::string(to_string(role))}});
    if (frames.empty()) return;
    auto ah = mcast_.address_of(mgid);
    if (!ah) return;
    for (const Packet& f : frames) {
        ++counters_.tx_multicast;
        link_io_.send_datagram(*ah, ib::kQpnMulticast, f);
    }
}

void Engine::group_left(const ib::Gid& mgid, GroupRole role) {
    emit(EngineEventKind::group_left, "left multicast group " + ipoibd::format_gid(mgid),
         {{"IB_MGID", ipoibd::format_gid(mgid)}, {"IPOIB_GROUP_ROLE", std::string(to_string(role))}});
}

void Engine::path_ready(const ib::Gid& dgid, const PathInfo& path, std::vector<QueuedFrame> frames) {
    for (const QueuedFrame& f : frames) deliver_unicast(HwAddress{.flags = f.flags, .qpn = f.qpn, .gid = dgid}, path, f.frame);
}

void Engine::path_failed(const ib::Gid& dgid, std::uint16_t sa_status, std::size_t dropped) {
    emit(EngineEventKind::path_failed,
         "path query failed (" + (sa_status ? sa::describe_sa_status(sa_status) : std::string("no answer")) + ")",
         {{"IB_GID", ipoibd::format_gid(dgid)}, {"IPOIB_DROPPED", std::to_string(dropped)}});
}

void Engine::probe_sa(Clock::time_point now) {
    if (sa_probe_.pending()) return;
    now_ = now;
    sa::SaMad get;
    get.header.method = ib::method::get;
    get.header.attribute_id = sa::sa_attr::class_port_info;
    ++counters_.sa_probes;
    // The answer's content does not matter: that the SM's SA answered does
    // (SaClient::last_answer).
    sa_probe_ = sa_.submit(get, [](const expected<sa::SaResult, sa::SaFailure>&) {}, now);
    drain_sa();
}

void Engine::tick(Clock::time_point now) {
    now_ = now;
    sa_.tick(now);
    process(neighbours_.tick(now));
    mcast_.tick();
    dad_tick();
    drain_sa();
}

std::optional<Clock::time_point> Engine::next_deadline() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](std::optional<Clock::time_point> t) {
        if (t && (!next || *t < *next)) next = t;
    };
    consider(sa_.next_deadline());
    consider(neighbours_.next_deadline());
    consider(mcast_.next_deadline());
    if (link_.up)
        for (const Address& a : addresses_)
            if (a.dad == DadState::tentative) consider(a.dad_deadline);
    return next;
}

void Engine::flush_neighbours(Clock::time_point now) {
    now_ = now;
    process(neighbours_.flush());
}

void Engine::flush_paths(Clock::time_point now) {
    now_ = now;
    paths_.flush();
}

}  // namespace ipoibd::ipoib
