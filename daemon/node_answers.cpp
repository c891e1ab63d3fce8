// The control socket's answers: one JSON document per command. Arrays of
// objects become tables in ipoibctl, objects "key: value" lines.
#include <algorithm>

#include "daemon/node.h"
#include "runtime/journal_fields.h"
#include "ctl/control_protocol.h"
#include "common/prometheus.h"
#include "fabric/fabric_control.h"
#include "ctl/json.h"
#include "ipoib/hw_address.h"
#include "sa_client/sa_records.h"
#include "transport/gid.h"
#include "transport/wire/packet.h"
#ifdef IPOIBD_HAVE_RDMACM
#include "cm/rdma_cm_access.h"
#endif

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


// Counters as the fields of the JSON object being written.
class JsonCounters final : public CounterSink {
public:
    explicit JsonCounters(ctl::JsonWriter& j) : j_(j) {}
    void counter(std::string_view name, std::uint64_t value) override { j_.field(name, value); }

private:
    ctl::JsonWriter& j_;
};

}  // namespace

std::string Node::answer(std::string_view text) {
    const runtime::Clock::time_point now = runtime::Clock::now();
    const auto request = ctl::control::parse_request(text);
    if (!request) return ctl::json_error("unknown command");
    const std::string_view command = request->command;
    if (command == "interfaces") return answer_interfaces();
    // The interfaces asked about: the one named, else every one.
    std::vector<iface::Interface*> chosen;
    if (!request->interface.empty()) {
        iface::Interface* named = interface_named(request->interface);
        if (!named) return ctl::json_error("no interface " + request->interface + " on this node");
        chosen.push_back(named);
    } else {
        for (const auto& i : interfaces_) chosen.push_back(i.get());
    }
    if (chosen.empty()) return ctl::json_error("no interface");
    if (command == "status") return answer_status(*chosen.front());
    const std::vector<const iface::Interface*> shown(chosen.begin(), chosen.end());
    if (command == "neigh") return answer_neigh(shown);
    if (command == "paths") return answer_paths(shown);
    if (command == "mcast") return answer_mcast(shown);
    if (command == "stats") return answer_stats(*chosen.front());
    ctl::JsonWriter j;
    const bool neigh = command == "flush neigh";
    if (!neigh && command != "flush paths") return ctl::json_error("unknown command");
    std::size_t n = 0;
    for (iface::Interface* c : chosen) {
        iface::Interface& i = *c;
        if (neigh) {
            n += i.engine().neighbours().size();
            i.flush_neighbours(now);
        } else {
            n += i.engine().paths().size();
            i.flush_paths(now);
        }
        log_.info(neigh ? "neighbour cache flushed by the operator" : "path cache flushed by the operator",
                  {{runtime::field::kIfname, i.name()}});
    }
    end_of_turn();
    j.begin_object().field("flushed", neigh ? "neigh" : "paths").field("entries", n).end_object();
    return j.take();
}

std::string Node::answer_interfaces() const {
    ctl::JsonWriter j;
    j.begin_array();
    for (const auto& i : interfaces_) {
        const ipoib::LinkStatus& l = i->engine().link();
        j.begin_object();
        j.field("interface", i->name());
        j.field("ifindex", i->host().ifindex());
        j.field("pkey", runtime::field::format_pkey(i->engine().pkey()));
        j.field("link", l.up ? "up" : "down");
        j.field("mtu", l.mtu);
        j.field("qpn", runtime::field::format_qpn(l.qpn));
        j.end_object();
    }
    j.end_array();
    return j.take();
}

std::string Node::answer_status(const iface::Interface& i) const {
    ctl::JsonWriter j;
    const ipoib::Engine& engine = i.engine();
    const ipoib::LinkStatus& l = engine.link();
    const transport::PortAttributes a = port_->attributes();
    j.begin_object();
    j.field("instance", instance_);
    j.field("interface", i.name());
    j.field("ifindex", i.host().ifindex());
    j.field("link", l.up ? "up" : "down");
    j.field("mtu", l.mtu);
    j.field("port", port_name_);
    j.field("port_address", port_->underlay_address());  // a soft port's UDP address; "" on an HCA
    j.field("port_state", transport::to_string(a.state));
    // Seconds since the SM last showed it is alive (an SMP to the port, or
    // its SA's answer); null where the port cannot tell (an HCA) or before
    // the first SMP.
    j.key("sm_contact_age_s");
    if (const auto last = last_sm_contact())
        j.value(std::chrono::duration_cast<std::chrono::seconds>(runtime::Clock::now() - *last).count());
    else
        j.null();
    j.field("sm_silent", sm_silent_);
    j.field("lid", runtime::field::format_lid(a.lid));
    j.field("sm_lid", runtime::field::format_lid(a.sm_lid));
    j.field("gid", format_gid(a.gid()));
    j.field("qpn", runtime::field::format_qpn(l.qpn));
    j.field("hw_address", ipoib::format_hw_address(l.hw));
    j.field("pkey", runtime::field::format_pkey(engine.pkey()));
    j.field("broadcast_mgid", format_gid(engine.multicast().broadcast_mgid()));
    j.field("broadcast_mlid", runtime::field::format_lid(l.broadcast_mlid));
    j.field("qkey", runtime::field::format_qkey(l.params.qkey));  // hex, as the journal and the LIDs and QPNs beside it
    j.field("embedded_fabric", fabric_service_ != nullptr);
    j.field("uptime_s", std::chrono::duration_cast<std::chrono::seconds>(runtime::Clock::now() - started_at_).count());
    j.key("addresses").begin_array();
    for (const ipoib::AddressView& v : engine.addresses())
        j.begin_object()
            .field("address", ipoib::format_interface_address(v.address))
            .field("dad", dad_name(v.dad))
            .end_object();
    j.end_array();
    j.end_object();
    return j.take();
}

std::string Node::answer_neigh(const std::vector<const iface::Interface*>& chosen) const {
    ctl::JsonWriter j;
    j.begin_array();
    const auto now = runtime::Clock::now();
    for (const iface::Interface* i : chosen)
        for (const ipoib::NeighbourEntryView& e : i->engine().neighbours().entries()) {
            j.begin_object();
            j.field("address", to_string(e.ip));
            j.field("state", std::string(ipoib::to_string(e.state)));
            j.field("lladdr", e.hw ? ipoib::format_hw_address(*e.hw) : std::string("-"));
            j.field("qpn", e.hw ? runtime::field::format_qpn(e.hw->qpn) : std::string("-"));
            // TAP mode: the synthetic MAC the kernel knows the neighbour by.
            if (const ipoib::EthernetHost* eth = i->ethernet()) {
                std::optional<MacAddress> mac;
                if (e.hw) mac = eth->table().mac_of(e.hw->gid);
                j.field("mac", mac ? format_mac(*mac) : std::string("-"));
            }
            // RFC 4755: connected when both ends are (the peer's flag 0x80
            // and ours); then the state of our connection to it.
            const bool connected = i->engine().link().connected && e.hw &&
                                   (e.hw->flags & ipoib::HwAddress::kFlagConnectedRc);
            j.field("mode", std::string(connected ? "connected" : "datagram"));
            std::string conn = "-";
            if (connected) {
                conn = "none";
                if (const ipoib::ConnectedLink* cl = i->connected())
                    if (auto v = cl->connection_to(*e.hw)) conn = ipoib::to_string(v->state);
            }
            j.field("connection", conn);
            j.field("queued", e.queued);
            j.field("age_ms", std::chrono::duration_cast<std::chrono::milliseconds>(now - e.updated).count());
            j.end_object();
        }
    j.end_array();
    return j.take();
}

std::string Node::answer_paths(const std::vector<const iface::Interface*>& chosen) const {
    ctl::JsonWriter j;
    j.begin_array();
    for (const iface::Interface* i : chosen)
        for (const ipoib::PathEntryView& p : i->engine().paths().entries()) {
            j.begin_object();
            j.field("dgid", format_gid(p.dgid));
            j.field("state", std::string(ipoib::to_string(p.state)));
            j.field("dlid", p.path ? runtime::field::format_lid(p.path->dlid) : std::string("-"));
            j.field("sl", p.path ? static_cast<unsigned>(p.path->sl) : 0u);
            j.field("mtu", p.path ? sa::mtu_bytes(p.path->mtu) : 0u);
            j.field("rate", p.path ? std::string(sa::rate_name(p.path->rate)) : std::string("-"));
            j.field("queued", p.queued);
            j.end_object();
        }
    j.end_array();
    return j.take();
}

std::string Node::answer_mcast(const std::vector<const iface::Interface*>& chosen) const {
    ctl::JsonWriter j;
    j.begin_array();
    for (const iface::Interface* i : chosen)
        for (const ipoib::McastGroupView& g : i->engine().multicast().groups()) {
            j.begin_object();
            j.field("mgid", format_gid(g.mgid));
            j.field("role", std::string(ipoib::to_string(g.role)));
            j.field("state", std::string(ipoib::to_string(g.state)));
            j.field("mlid", runtime::field::format_lid(g.mlid));
            j.field("join_state", sa::join_state_names(g.join_state));
            j.field("queued", g.queued);
            j.field("sent", g.sent);
            j.field("failures", g.failures);
            j.end_object();
        }
    j.end_array();
    return j.take();
}

// Every counter, from the visit functions beside the counter structs: one
// JSON object per section. The interface's sections come first (one
// interface per node today; several will nest under their names), then
// the node's: port (the backend's own counters), netlink, busy_poll,
// control.
template <class Section>
void Node::visit_node_sections(Section&& section) const {
    section("mad", [&](CounterSink& o) {
        visit(mad_->path().counters(), o);
        visit(mad_->counters(), o);
    });
    if (cm_) section("cm", [&](CounterSink& o) { cm_->visit_counters(o); });
    if (pma_) section("pma", [&](CounterSink& o) { pma_->visit_counters(o); });
#ifdef IPOIBD_HAVE_RDMACM
    if (rdma_cm_) section("rdmacm", [&](CounterSink& o) {
            visit(rdma_cm_->counters(), o);
            o.counter("rdmacm_connections", rdma_cm_->connections());
        });
#endif
    section("port", [&](CounterSink& o) {
        port_->visit_counters(o);
        visit(counters_, o);
    });
    if (monitor_)
        section("netlink", [&](CounterSink& o) {
            visit(monitor_->counters(), o);
        });
    section("busy_poll", [&](CounterSink& o) {
        // The window in force ([daemon] busy-poll, live on reload); 0: off.
        o.counter("window_us", static_cast<std::uint64_t>(
                                   std::chrono::duration_cast<std::chrono::microseconds>(loop_.busy_poll()).count()));
        visit(loop_.busy_poll_counters(), o);
    });
    if (control_) section("control", [&](CounterSink& o) { visit(control_->counters(), o); });
    if (metrics_http_) section("metrics_http", [&](CounterSink& o) { visit(metrics_http_->counters(), o); });
    // The embedded fabric's switch, SM, SA, socket and authenticator.
    if (fabric_service_)
        fabric::visit_fabric_sections(*fabric_service_, [&](std::string_view name, const auto& visit_section) {
            section("fabric_" + std::string(name), visit_section);
        });
}

std::string Node::answer_stats(const iface::Interface& i) const {
    ctl::JsonWriter j;
    JsonCounters out(j);
    auto section = [&](std::string_view name, const auto& visit_section) {
        j.key(name).begin_object();
        visit_section(out);
        j.end_object();
    };
    j.begin_object();
    i.visit_sections(section);
    visit_node_sections(section);
    j.end_object();
    return j.take();
}

// The same counters as `stats`, every interface's labelled with it, all
// with the instance: PREFIX ipoibd, e.g.
// ipoibd_engine_tx_unicast{instance="ib0",interface="ib0"} 12.
std::string Node::metrics() const {
    PrometheusText text("ipoibd");
    for (const auto& i : interfaces_) {
        const MetricLabels labels{{"instance", instance_}, {"interface", i->name()}};
        i->visit_sections([&](std::string_view name, const auto& visit_section) {
            PrometheusText::Sink sink(text, std::string(name), labels);
            visit_section(sink);
        });
        text.add("interface", "link_up", labels, i->engine().link().up ? 1 : 0);
    }
    const MetricLabels node{{"instance", instance_}};
    visit_node_sections([&](std::string_view name, const auto& visit_section) {
        PrometheusText::Sink sink(text, std::string(name), node);
        visit_section(sink);
    });
    text.add("port", "active", node, port_->attributes().state == transport::PortState::active ? 1 : 0);
    text.add("port", "sm_silent", node, sm_silent_ ? 1 : 0);
    return text.render();
}

}  // namespace ipoibd::daemon
