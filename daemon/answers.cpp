// The control socket's answers: one JSON document per command. Arrays of
// objects become tables in ipoibctl, objects "key: value" lines.
#include <algorithm>

#include "daemon/daemon.h"
#include "daemon/journal_fields.h"
#include "daemon/json.h"
#include "ipoib/hw_address.h"
#include "netlink/tun_offload.h"
#include "sa_client/sa_records.h"
#include "transport/gid.h"
#include "transport/soft/soft_port.h"
#include "transport/wire/packet.h"

namespace ipoibd::daemon {

namespace {

std::string dad_name(ipoib::DadState s) {
    switch (s) {
    case ipoib::DadState::tentative: return "tentative";
    case ipoib::DadState::preferred: return "preferred";
    case ipoib::DadState::duplicate: return "duplicate";
    }
    return "?";
}

template <std::size_t N, class Name>
void counter_array(JsonWriter& j, const std::array<std::uint64_t, N>& a, Name name) {
    for (std::size_t i = 0; i < N; ++i)
        if (a[i]) j.field(name(i), a[i]);
}

}  // namespace

std::string Daemon::answer(std::string_view command) {
    const Clock::time_point now = Clock::now();
    if (command == "status") return answer_status();
    if (command == "neigh") return answer_neigh();
    if (command == "paths") return answer_paths();
    if (command == "mcast") return answer_mcast();
    if (command == "stats") return answer_stats();
    JsonWriter j;
    if (command == "flush neigh") {
        const std::size_t n = engine_->neighbours().size();
        engine_->flush_neighbours(now);
        flush_sends();
        j.begin_object().field("flushed", "neigh").field("entries", n).end_object();
        log_.info("neighbour cache flushed by the operator", {{field::kIfname, tun_->name}});
        return j.take();
    }
    if (command == "flush paths") {
        const std::size_t n = engine_->paths().size();
        engine_->flush_paths(now);
        j.begin_object().field("flushed", "paths").field("entries", n).end_object();
        log_.info("path cache flushed by the operator", {{field::kIfname, tun_->name}});
        return j.take();
    }
    return json_error("unknown command");
}

std::string Daemon::answer_status() const {
    const ipoib::LinkStatus& l = engine_->link();
    const transport::PortAttributes a = port_->attributes();
    JsonWriter j;
    j.begin_object();
    j.field("instance", instance_);
    j.field("interface", tun_->name);
    j.field("ifindex", tun_->ifindex);
    j.field("link", l.up ? "up" : "down");
    j.field("mtu", l.mtu);
    j.field("port", port_name_);
    j.field("port_state", transport::to_string(a.state));
    j.field("lid", field::format_lid(a.lid));
    j.field("sm_lid", field::format_lid(a.sm_lid));
    j.field("gid", format_gid(a.gid()));
    j.field("qpn", field::format_qpn(l.qpn));
    j.field("hw_address", ipoib::format_hw_address(l.hw));
    j.field("pkey", field::format_pkey(config_.fabric.pkey));
    j.field("broadcast_mgid", format_gid(engine_->multicast().broadcast_mgid()));
    j.field("broadcast_mlid", field::format_lid(l.broadcast_mlid));
    j.field("qkey", l.params.qkey);
    j.field("embedded_fabric", fabric_service_ != nullptr);
    j.field("uptime_s", std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started_at_).count());
    j.key("addresses").begin_array();
    for (const ipoib::AddressView& v : engine_->addresses())
        j.begin_object()
            .field("address", ipoib::format_interface_address(v.address))
            .field("dad", dad_name(v.dad))
            .end_object();
    j.end_array();
    j.end_object();
    return j.take();
}

std::string Daemon::answer_neigh() const {
    JsonWriter j;
    j.begin_array();
    const auto now = Clock::now();
    for (const ipoib::NeighbourEntryView& e : engine_->neighbours().entries()) {
        j.begin_object();
        j.field("address", ipoib::format_neighbour_ip(e.ip));
        j.field("state", std::string(ipoib::to_string(e.state)));
        j.field("lladdr", e.hw ? ipoib::format_hw_address(*e.hw) : std::string("-"));
        j.field("qpn", e.hw ? field::format_qpn(e.hw->qpn) : std::string("-"));
        j.field("queued", e.queued);
        j.field("age_ms", std::chrono::duration_cast<std::chrono::milliseconds>(now - e.updated).count());
        j.end_object();
    }
    j.end_array();
    return j.take();
}

std::string Daemon::answer_paths() const {
    JsonWriter j;
    j.begin_array();
    for (const ipoib::PathEntryView& p : engine_->paths().entries()) {
        j.begin_object();
        j.field("dgid", format_gid(p.dgid));
        j.field("state", std::string(ipoib::to_string(p.state)));
        j.field("dlid", p.path ? field::format_lid(p.path->dlid) : std::string("-"));
        j.field("sl", p.path ? static_cast<unsigned>(p.path->sl) : 0u);
        j.field("mtu", p.path ? sa::mtu_bytes(p.path->mtu) : 0u);
        j.field("rate", p.path ? std::string(sa::rate_name(p.path->rate)) : std::string("-"));
        j.field("queued", p.queued);
        j.end_object();
    }
    j.end_array();
    return j.take();
}

std::string Daemon::answer_mcast() const {
    JsonWriter j;
    j.begin_array();
    for (const ipoib::McastGroupView& g : engine_->multicast().groups()) {
        j.begin_object();
        j.field("mgid", format_gid(g.mgid));
        j.field("role", std::string(ipoib::to_string(g.role)));
        j.field("state", std::string(ipoib::to_string(g.state)));
        j.field("mlid", field::format_lid(g.mlid));
        j.field("join_state", sa::join_state_names(g.join_state));
        j.field("queued", g.queued);
        j.field("sent", g.sent);
        j.field("failures", g.failures);
        j.end_object();
    }
    j.end_array();
    return j.take();
}

std::string Daemon::answer_stats() const {
    JsonWriter j;
    j.begin_object();
    const ipoib::EngineCounters& c = engine_->counters();
    j.key("engine").begin_object();
    j.field("rx_datagrams", c.rx_datagrams).field("rx_to_tun", c.rx_to_tun).field("rx_own_multicast", c.rx_own_multicast);
    j.field("rx_drop_link_down", c.rx_drop_link_down).field("rx_rarp", c.rx_rarp);
    j.field("rx_nonzero_reserved", c.rx_nonzero_reserved);
    counter_array(j, c.rx_frame_errors, [](std::size_t i) {
        return std::string("rx_frame_") + ipoib::to_string(static_cast<ipoib::FrameError>(i));
    });
    counter_array(j, c.rx_ip_errors, [](std::size_t i) {
        return std::string("rx_ip_") + ipoib::to_string(static_cast<ipoib::IpPacketError>(i));
    });
    counter_array(j, c.rx_arp_errors, [](std::size_t i) {
        return std::string("rx_arp_") + ipoib::to_string(static_cast<ipoib::ArpError>(i));
    });
    counter_array(j, c.rx_nd_errors, [](std::size_t i) {
        return std::string("rx_nd_") + ipoib::to_string(static_cast<ipoib::NdError>(i));
    });
    j.field("arp_requests_rx", c.arp_requests_rx).field("arp_replies_rx", c.arp_replies_rx);
    j.field("ns_rx", c.ns_rx).field("na_rx", c.na_rx);
    j.field("tun_packets", c.tun_packets);
    counter_array(j, c.tun_ip_errors, [](std::size_t i) {
        return std::string("tun_ip_") + ipoib::to_string(static_cast<ipoib::IpPacketError>(i));
    });
    j.field("tun_drop_link_down", c.tun_drop_link_down).field("tun_drop_host_nd", c.tun_drop_host_nd);
    j.field("tun_drop_too_big", c.tun_drop_too_big).field("tun_drop_no_source", c.tun_drop_no_source);
    j.field("tun_drop_bad_nd", c.tun_drop_bad_nd).field("tun_drop_mcast_unavailable", c.tun_drop_mcast_unavailable);
    j.field("tun_drop_bad_destination", c.tun_drop_bad_destination);
    j.field("tx_unicast", c.tx_unicast).field("tx_multicast", c.tx_multicast).field("tx_to_all_routers", c.tx_to_all_routers);
    j.field("arp_requests_tx", c.arp_requests_tx).field("arp_replies_tx", c.arp_replies_tx);
    j.field("gratuitous_arp_tx", c.gratuitous_arp_tx).field("ns_tx", c.ns_tx).field("na_tx", c.na_tx);
    j.field("dad_ns_tx", c.dad_ns_tx).field("peer_changes", c.peer_changes);
    j.field("address_conflicts", c.address_conflicts).field("dad_conflicts", c.dad_conflicts);
    j.field("host_group_joins", c.host_group_joins).field("host_group_leaves", c.host_group_leaves);
    j.field("link_ups", c.link_ups).field("link_downs", c.link_downs);
    j.field("qp_opens", c.qp_opens).field("qp_open_failures", c.qp_open_failures).field("port_events", c.port_events);
    j.end_object();

    const ipoib::NeighbourCounters& n = engine_->neighbours().counters();
    j.key("neighbour").begin_object();
    j.field("entries", engine_->neighbours().size());
    j.field("reachable_time_ms", static_cast<std::uint64_t>(engine_->neighbours().reachable_time().count()));
    j.field("drop_queue_full", n.drop_queue_full).field("drop_unresolved", n.drop_unresolved);
    j.field("drop_table_full", n.drop_table_full).field("drop_flushed", n.drop_flushed);
    j.field("solicits", n.solicits).field("probes", n.probes).field("resolved", n.resolved);
    j.field("confirmed", n.confirmed).field("address_changed", n.address_changed);
    j.field("became_stale", n.became_stale).field("failed", n.failed).field("gc_removed", n.gc_removed);
    j.field("evicted", n.evicted);
    j.end_object();

    const ipoib::PathCounters& p = engine_->paths().counters();
    j.key("path").begin_object();
    j.field("entries", engine_->paths().size());
    j.field("queries", p.queries).field("resolved", p.resolved).field("refreshed", p.refreshed);
    j.field("changed", p.changed).field("failures", p.failures).field("drop_queue_full", p.drop_queue_full);
    j.field("drop_failed", p.drop_failed).field("drop_table_full", p.drop_table_full);
    j.field("drop_flushed", p.drop_flushed).field("flushes", p.flushes).field("evicted", p.evicted);
    j.end_object();

    const ipoib::McastCounters& m = engine_->multicast().counters();
    j.key("multicast").begin_object();
    j.field("groups", engine_->multicast().groups().size());
    j.field("joins", m.joins).field("joined", m.joined).field("join_failures", m.join_failures);
    j.field("leaves", m.leaves).field("rejoins", m.rejoins).field("send_only_created", m.send_only_created);
    j.field("send_only_expired", m.send_only_expired).field("mlid_changed", m.mlid_changed);
    j.field("drop_queue_full", m.drop_queue_full).field("drop_join_failed", m.drop_join_failed);
    j.field("drop_table_full", m.drop_table_full).field("drop_flushed", m.drop_flushed);
    j.end_object();

    const sa::SaClientCounters& s = engine_->sa_client().counters();
    j.key("sa_client").begin_object();
    j.field("requests", s.requests).field("sent", s.sent).field("retries", s.retries).field("timeouts", s.timeouts);
    j.field("responses", s.responses).field("unmatched", s.unmatched).field("malformed", s.malformed);
    j.field("queue_full", s.queue_full).field("cancelled", s.cancelled).field("reports", s.reports);
    j.field("send_errors", tun_counters_.sa_send_errors);
    const sa::MadTransportCounters& mt = mad_->counters();
    j.field("mad_sent", mt.sent).field("mad_send_errors", mt.send_errors).field("mad_received", mt.received);
    j.field("mad_receive_errors", mt.receive_errors).field("mad_dropped", mt.dropped);
    j.end_object();

    const ipoib::PortLinkCounters& lc = link_->counters();
    j.key("qp").begin_object();
    j.field("tx_posted", lc.tx_posted).field("tx_queue_full", lc.tx_queue_full).field("tx_refused", lc.tx_refused);
    j.field("tx_errors", lc.tx_errors).field("rx_completions", lc.rx_completions).field("rx_errors", lc.rx_errors);
    j.field("rx_repost_failures", lc.rx_repost_failures).field("attach_failures", lc.attach_failures);
    j.end_object();

    if (soft_port_) {
        const transport::SoftPort& sp = *soft_port_;
        const transport::PortCounters& pc = sp.counters();
        j.key("port").begin_object();
        j.field("rx_packets", pc.rx_packets).field("rx_bytes", pc.rx_bytes);
        j.field("tx_packets", pc.tx_packets).field("tx_bytes", pc.tx_bytes);
        counter_array(j, pc.malformed, [](std::size_t i) {
            return std::string("malformed_") + ib::to_string(static_cast<ib::DropReason>(i));
        });
        counter_array(j, pc.undelivered, [](std::size_t i) {
            return std::string("undelivered_") + transport::to_string(static_cast<transport::DeliveryDrop>(i));
        });
        const auto& u = sp.udp_counters();
        j.field("udp_rx", u.rx_datagrams).field("udp_rx_gro_messages", u.rx_gro_messages);
        j.field("udp_rx_oversized", u.rx_oversized).field("udp_rx_errors", u.rx_errors).field("udp_tx", u.tx_datagrams);
        j.field("udp_tx_queue_full", u.tx_queue_full).field("udp_tx_errors", u.tx_errors);
        const auto& ct = sp.cut_through_counters();
        j.field("route_hints", ct.hints).field("route_hints_bad", ct.hints_bad);
        j.field("direct_tx", ct.direct_tx).field("direct_rx", ct.direct_rx).field("via_switch_tx", ct.via_switch_tx);
        j.field("route_refresh_requests", ct.refresh_requests).field("route_markers", ct.markers);
        j.field("route_held", ct.held).field("route_marker_retries", ct.marker_retries);
        j.field("route_drain_timeouts", ct.drain_timeouts);
        j.field("udp_tx_gso_runs", u.tx_gso_runs).field("udp_gso_disabled", u.gso_disabled);
        j.end_object();
    }

    j.key("tun").begin_object();
    j.field("rx_packets", tun_counters_.rx_packets).field("rx_errors", tun_counters_.rx_errors);
    j.field("tx_packets", tun_counters_.tx_packets).field("tx_errors", tun_counters_.tx_errors);
    j.field("next_hop_failures", tun_counters_.next_hop_failures);
    const netlink::NextHopCounters& nh = next_hops_->counters();
    j.field("next_hop_hits", nh.hits).field("next_hop_misses", nh.misses);
    j.field("next_hop_invalidations", nh.invalidations);
    const netlink::MonitorCounters& mc = monitor_->counters();
    j.field("netlink_events", mc.link_events + mc.address_events + mc.route_events);
    j.field("netlink_malformed", mc.malformed).field("netlink_overruns", mc.overruns);
    j.field("capture_errors", tun_counters_.capture_errors);
    j.field("rx_segmented", tun_counters_.rx_segmented);
    if (coalescer_) j.field("tx_coalesced_in", coalescer_->packets_in()).field("tx_coalesced_out", coalescer_->packets_out());
    counter_array(j, tun_counters_.offload_errors, [](std::size_t i) {
        return std::string("offload_") + netlink::to_string(static_cast<netlink::OffloadError>(i));
    });
    j.end_object();

    const BusyPollCounters& bp = loop_.busy_poll_counters();
    j.key("busy_poll").begin_object();
    // The window in force ([daemon] busy-poll, live on reload); 0: off.
    j.field("window_us", static_cast<std::uint64_t>(
                             std::chrono::duration_cast<std::chrono::microseconds>(loop_.busy_poll()).count()));
    j.field("windows", bp.windows).field("polls", bp.polls).field("empty_polls", bp.empty_polls);
    j.field("slow_yields", bp.slow_yields).field("host_preempted", bp.host_preempted).field("yielded_away", bp.yielded_away);
    j.end_object();

    if (control_) {
        const ControlCounters& cc = control_->counters();
        j.key("control").begin_object();
        j.field("accepted", cc.accepted).field("answered", cc.answered).field("rejected_busy", cc.rejected_busy);
        j.field("oversize", cc.oversize).field("unknown_command", cc.unknown_command).field("timeouts", cc.timeouts);
        j.end_object();
    }
    j.end_object();
    return j.take();
}

}  // namespace ipoibd::daemon
