#include "fabric/fabric_control.h"


#include "common/hex.h"
#include "ctl/json.h"
#include "transport/gid.h"

namespace ipoibd::fabric {
namespace {

class JsonCounters final : public CounterSink {
public:
    explicit JsonCounters(ctl::JsonWriter& j) : j_(j) {}
    void counter(std::string_view name, std::uint64_t value) override { j_.field(name, value); }

private:
    ctl::JsonWriter& j_;
};

}  // namespace

std::string default_fabric_socket(const SocketAddress& listen) {
    return "/run/ibfabricd/" + std::to_string(listen.port()) + ".sock";
}

std::string fabric_answer(const FabricService& fabric, const FabricDaemonInfo& info, std::string_view command) {
    ctl::JsonWriter j;
    const Switch& sw = fabric.fabric_switch();
    const auto& sm_ports = fabric.subnet_manager().ports();
    if (command == "status") {
        std::size_t active = 0;
        for (const auto& [sp, p] : sm_ports) active += p.phase == SmPortPhase::active;
        const FabricServiceOptions& o = fabric.options();
        j.begin_object()
            .field("listen", fabric.local_address().to_string())
            .field("switch_lid", hex(sw.lid(), 4))
            .field("sm", o.sm_enabled ? "master" : "off (an external SM manages the fabric)")
            .field("switch_ports", static_cast<unsigned>(sw.num_ports()))
            .field("ports_known", sm_ports.size())
            .field("ports_active", active)
            .field("groups", fabric.sa_server().groups().size())
            .field("subnet_prefix", hex(o.sm.subnet_prefix, 16))
            .field("sweep_interval_ms", static_cast<std::uint64_t>(o.sm.sweep_interval.count()))
            .field("m_key", o.sm.m_key.mode == MKeyPolicy::Mode::none    ? "none"
                            : o.sm.m_key.mode == MKeyPolicy::Mode::fixed ? "fixed"
                                                                         : "per port")
            .field("m_key_protect_bits", static_cast<unsigned>(o.sm.m_key.protect_bits))
            .field("m_key_lease_s", static_cast<unsigned>(o.sm.m_key.lease_seconds))
            .field("fabric_key", info.key_file.empty() ? std::string("none") : info.key_file)
            .field("capture", o.pcap.empty() ? std::string("none") : o.pcap)
            .field("cut_through", o.sw.cut_through && o.pcap.empty() && o.sw.faults.empty())
            .field("faults", o.sw.faults.size())
            .field("sim_socket", info.sim ? "@" + sim::server_ctl_name(info.sim->options().base_name) : std::string("none"))
            .field("sim_clients", info.sim ? info.sim->client_count() : 0)
            .field("uptime_s", std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                                info.started)
                                   .count())
            .end_object();
        return j.take();
    }
    if (command == "ports") {
        j.begin_array();
        const auto& sm_switches = fabric.subnet_manager().switches();
        for (const auto& [sp, p] : sm_ports) {
            const auto peer = sp.sw == 0 ? sw.peer_of(sp.port) : std::nullopt;
            j.begin_object()
                .field("switch", hex(sp.sw < sm_switches.size() ? sm_switches[sp.sw].guid : sw.guid(), 16))
                .field("port", static_cast<unsigned>(sp.port))
                .field("state", to_string(p.phase))
                .field("lid", hex(p.lid, 4))
                .field("guid", hex(p.port_guid, 16))
                .field("address", peer ? peer->to_string() : std::string("-"))
                .field("m_key", p.m_key != 0)
                .field("description", p.description)
                .end_object();
        }
        j.end_array();
        return j.take();
    }
    if (command == "groups") {
        j.begin_array();
        for (const auto& [mgid, g] : fabric.sa_server().groups())
            j.begin_object()
                .field("mgid", format_gid(mgid))
                .field("mlid", hex(g.params.mlid, 4))
                .field("pkey", hex(g.params.p_key, 4))
                .field("qkey", hex(g.params.q_key, 8))
                .field("mtu", static_cast<unsigned>(g.params.mtu))
                .field("rate", static_cast<unsigned>(g.params.rate))
                .field("members", g.members.size())
                .field("proxied", g.proxied.size())
                .field("broadcast", g.predefined)
                .end_object();
        j.end_array();
        return j.take();
    }
    if (command == "switches") {
        // Each switch of the process, its inter-switch links and their state.
        std::vector<FabricDaemonInfo::NamedSwitch> all = info.switches;
        if (all.empty()) all.push_back({"", &fabric});
        auto state_name = [](std::uint8_t s) {
            switch (s) {
                case ib::port_state::down: return "down";
                case ib::port_state::init: return "init";
                case ib::port_state::armed: return "armed";
                case ib::port_state::active: return "active";
            }
            return "?";
        };
        j.begin_array();
        for (const auto& [name, f] : all) {
            const Switch& s = f->fabric_switch();
            unsigned up = 0;
            for (unsigned p = 1; p <= s.num_ports(); ++p) up += s.port_up(static_cast<std::uint8_t>(p)) ? 1u : 0u;
            j.begin_object()
                .field("name", name)
                .field("guid", hex(s.guid(), 16))
                .field("description", s.description())
                .field("listen", f->local_address().to_string())
                .field("lid", hex(s.lid(), 4))
                .field("ports", static_cast<unsigned>(s.num_ports()))
                .field("ports_up", up)
                .field("sm", f->options().sm_enabled);
            j.key("links").begin_array();
            for (const IslConfig& l : f->options().sw.links) {
                const bool link_up = s.port_up(l.port);
                j.begin_object()
                    .field("port", static_cast<unsigned>(l.port))
                    .field("peer", l.peer.to_string())
                    .field("link", link_up ? "up" : "down")
                    .field("state", link_up ? state_name(s.port_info(l.port).port_state) : "down")
                    .end_object();
            }
            j.end_array();
            j.end_object();
        }
        j.end_array();
        return j.take();
    }
    // stats
    JsonCounters out(j);
    auto section = [&](std::string_view name, const auto& visit_section) {
        j.key(name).begin_object();
        visit_section(out);
        j.end_object();
    };
    j.begin_object();
    visit_fabric_sections(fabric, section);
    if (info.sim) visit_sim_sections(*info.sim, section);
    j.end_object();
    return j.take();
}

void fabric_metrics(const FabricService& fabric, PrometheusText& out) {
    visit_fabric_sections(fabric, [&](std::string_view name, const auto& visit_section) {
        PrometheusText::Sink sink(out, std::string(name), {});
        visit_section(sink);
    });
    std::map<std::string, std::uint64_t> by_state;
    for (const auto& [sp, p] : fabric.subnet_manager().ports()) ++by_state[to_string(p.phase)];
    for (const auto& [state, n] : by_state) out.add("sm", "ports", {{"state", state}}, n);
    out.add("sa", "groups", {}, fabric.sa_server().groups().size());
}

}  // namespace ipoibd::fabric
