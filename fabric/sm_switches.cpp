// The subnet manager's switches: requests along directed routes, discovery
// of the switches and their links, routing of every LinearForwardingTable,
// multicast trees, and the switch ports' states (sm.h, "Switches").
#include <algorithm>
#include <deque>

#include "common/hex.h"
#include "fabric/sm.h"
#include "transport/wire/smp_dr.h"

namespace ipoibd::fabric {
namespace {

using Kind = routing::PortPeer::Kind;

constexpr std::uint32_t kNotRouted = 0xFFFF'FFFF;
// Directed routes hold at most 63 hops (IBA 14.2.2: HopCount 0..63).
constexpr std::size_t kMaxDrHops = 63;
// Events close together are routed once, at the next tick.
constexpr std::chrono::milliseconds kRouteSpacing{10};
// A switch that misses this many light sweeps in a row has the subnet scanned again.
constexpr unsigned kLightSweepMisses = 2;

template <class Attr>
ib::SmpData data_of(const Attr& a) {
    ib::SmpData d{};
    (void)ib::put_attribute(a, d);
    return d;
}

}  // namespace

std::string path_text(const std::vector<std::uint8_t>& path) {
    if (path.empty()) return "-";
    std::string out;
    for (std::uint8_t p : path) out += (out.empty() ? "" : ",") + std::to_string(p);
    return out;
}

std::uint8_t SubnetManager::first_hop(const SmPort& port) const {
    if (port.sw == 0 || port.sw >= switches_.size() || switches_[port.sw].path.empty()) return port.switch_port;
    return switches_[port.sw].path.front();
}

std::vector<std::uint8_t> SubnetManager::path_to(const SmPort& port) const {
    std::vector<std::uint8_t> p = port.sw < switches_.size() ? switches_[port.sw].path : std::vector<std::uint8_t>{};
    p.push_back(port.switch_port);
    return p;
}

bool SubnetManager::link_up(const SmPort& port) const {
    if (port.sw == 0) return switch_.port_up(port.switch_port);
    return port.sw < switches_.size() && switches_[port.sw].reachable && switches_[port.sw].port_up(port.switch_port);
}

std::string SubnetManager::where(const SmPort& port) const {
    if (port.sw == 0 || port.sw >= switches_.size()) return "port " + std::to_string(port.switch_port);
    return "switch " + hex(switches_[port.sw].guid, 16) + " port " + std::to_string(port.switch_port);
}

std::uint64_t SubnetManager::switch_m_key(std::uint64_t guid) {
    if (config_.m_key.mode == MKeyPolicy::Mode::derived) return m_key_for(guid);
    // One key for every CA port, or none: the switches get keys of their
    // own, from a secret of this run (a CA port's key never opens a switch).
    if (switch_key_secret_ == Secret{}) switch_key_secret_ = random_secret();
    const std::uint64_t k = derive_u64(switch_key_secret_, "ipoibd switch M_Key", guid);
    return k != 0 ? k : 1;
}

// ---------------------------------------------------------------------------
// Requests

ib::Smp SubnetManager::dr_smp(std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier, std::uint64_t m_key,
                              const ib::SmpData& data, std::span<const std::uint8_t> path) {
    ib::Smp smp;
    smp.mgmt_class = ib::mgmt_class::subn_directed_route;
    smp.method = method;
    smp.attribute_id = attribute;
    smp.attribute_modifier = modifier;
    smp.transaction_id = next_tid_++;
    smp.m_key = m_key;
    smp.data = data;
    ib::dr_set_initial_path(smp, path);
    return smp;
}

bool SubnetManager::transmit_dr(ib::Smp smp) {
    // C14-9:1 at the requester: HopPointer 0 -> 1, out InitialPath[1].
    const ib::DrDecision d = ib::dr_send_request(smp, switch_.num_ports());
    if (d.action != ib::DrAction::send_on_port) return false;
    std::array<std::uint8_t, ib::kMadSize> mad{};
    smp.write_to(mad.data());
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    const auto n = ib::build_qp0_packet(mad, switch_.lid(), ib::kLidPermissive, out);
    if (!n) return false;
    switch_.send_from_management(bytes(out).first(*n), d.port);
    ++counters_.smps_sent;
    return true;
}

void SubnetManager::dr_request(std::vector<std::uint8_t> path, std::uint64_t m_key, std::uint8_t method,
                               std::uint16_t attribute, std::uint32_t modifier, const ib::SmpData& data, SmpDone done,
                               std::optional<std::uint32_t> route_of, std::optional<std::uint8_t> beyond) {
    if (path.empty()) {
        // The SM's own switch: its SMA answers in place.
        const auto got = program_switch(method, attribute, modifier, data);
        if (!done) return;
        if (!got) {
            done(nullptr);
            return;
        }
        ib::Smp reply;
        reply.method = ib::method::get_resp;
        reply.attribute_id = attribute;
        reply.attribute_modifier = modifier;
        reply.data = *got;
        done(&reply);
        return;
    }
    if (path.size() > kMaxDrHops) {
        if (done) done(nullptr);
        return;
    }
    const ib::Smp smp = dr_smp(method, attribute, modifier, m_key, data, path);
    Request& r = requests_[smp.transaction_id];
    r.smp = smp;
    r.path = std::move(path);
    r.done = done ? std::move(done) : [](const ib::Smp*) {};
    r.tries = 1;
    r.route_of = route_of;
    r.beyond = beyond;
    r.deadline = now_ + config_.smp_timeout;
    (void)transmit_dr(r.smp);
}

void SubnetManager::switch_request(std::uint32_t sw, std::uint8_t method, std::uint16_t attribute,
                                   std::uint32_t modifier, const ib::SmpData& data, SmpDone done) {
    const SmSwitch& s = switches_.at(sw);
    dr_request(s.path, s.m_key, method, attribute, modifier, data, std::move(done), sw);
}

void SubnetManager::expire_requests() {
    std::vector<std::uint64_t> expired;
    for (const auto& [tid, r] : requests_)
        if (now_ >= r.deadline) expired.push_back(tid);
    for (std::uint64_t tid : expired) {
        const auto it = requests_.find(tid);
        if (it == requests_.end()) continue;
        ++counters_.timeouts;
        Request& r = it->second;
        if (r.tries <= config_.smp_retries) {
            ++r.tries;
            r.deadline = now_ + config_.smp_timeout;
            if (r.route_of && *r.route_of < switches_.size() && switches_[*r.route_of].reachable) {
                // The switch's route as it is now (a lost spine may have moved it).
                std::vector<std::uint8_t> path = switches_[*r.route_of].path;
                if (r.beyond) path.push_back(*r.beyond);
                if (!path.empty() && path != r.path) {
                    r.path = std::move(path);
                    ib::dr_set_initial_path(r.smp, r.path);
                }
            }
            (void)transmit_dr(r.smp);
            continue;
        }
        Request gone = std::move(r);
        requests_.erase(it);
        ++counters_.switch_timeouts;
        gone.done(nullptr);
    }
}

// ---------------------------------------------------------------------------
// Discovery

void SubnetManager::scan(std::uint32_t sw) {
    SmSwitch& s = switches_.at(sw);
    if (!s.reachable) return;
    if (s.scans > 0) {
        s.rescan = true;
        return;
    }
    ++counters_.scans;
    const auto n = static_cast<unsigned>(s.ports.size() - 1);
    s.scans = n;
    s.rescan = false;
    discovering_ += n;
    for (unsigned p = 1; p <= n; ++p) {
        const auto port = static_cast<std::uint8_t>(p);
        switch_request(sw, ib::method::get, ib::smp_attr::port_info, port, {}, [this, sw, port](const ib::Smp* r) {
            --discovering_;
            on_scanned_port(sw, port, r);
            SmSwitch& again = switches_[sw];  // on_scanned_port may have found switches
            if (again.scans > 0 && --again.scans == 0 && again.rescan) scan(sw);
        });
    }
}

void SubnetManager::on_scanned_port(std::uint32_t sw, std::uint8_t p, const ib::Smp* reply) {
    if (!reply || !switches_[sw].reachable) return;
    switches_[sw].ports[p].info = ib::PortInfo::read_from(reply->data.data());
    const Kind kind = switches_[sw].ports[p].peer.kind;
    if (!switches_[sw].port_up(p)) {
        if (kind != Kind::none) unlink(sw, p, "link down");
        return;
    }
    if (kind == Kind::link) {
        activate_isl(sw, p);
    } else if (kind == Kind::none && (sw != 0 || switch_.is_isl(p))) {
        // (This SM's own CA ports are its link events'.)
        probe(sw, p);
    }
}

void SubnetManager::probe(std::uint32_t sw, std::uint8_t p, bool counted) {
    std::vector<std::uint8_t> path = switches_[sw].path;
    path.push_back(p);
    if (path.size() > kMaxDrHops) return;
    if (counted) ++discovering_;
    dr_request(
        std::move(path), 0, ib::method::get, ib::smp_attr::node_info, 0, {},
        [this, sw, p, counted](const ib::Smp* r) {
            if (counted) --discovering_;
            on_probed(sw, p, r);
        },
        sw, p);
}

void SubnetManager::on_probed(std::uint32_t sw, std::uint8_t p, const ib::Smp* reply) {
    if (!reply || !switches_[sw].reachable || switches_[sw].ports[p].peer.kind != Kind::none) return;
    const auto ni = ib::NodeInfo::read_from(reply->data.data());
    std::vector<std::uint8_t> path = switches_[sw].path;
    path.push_back(p);
    if (ni.node_type == ib::node_type::switch_node) {
        if (sw == 0 && !switch_.is_isl(p)) {
            ++counters_.switches_refused;
            log("SM: port " + std::to_string(p) + " answers as switch " + hex(ni.node_guid, 16) +
                ", but it is a host port: refused");
            return;
        }
        if (ni.local_port_num == 0 || ni.local_port_num > ni.num_ports) return;
        const std::uint32_t j = adopt(ni, std::move(path));
        cable(sw, p, j, ni.local_port_num);
        return;
    }
    if (ni.node_type != ib::node_type::channel_adapter) return;
    const SmPortKey key{sw, p};
    if (ports_.contains(key)) return;
    switches_[sw].ports[p].peer = routing::PortPeer{.kind = Kind::endpoint};
    SmPort& port = ports_[key];
    port.sw = sw;
    port.switch_port = p;
    const auto last = last_guid_at_.find(key);
    port.m_key = config_.m_key.mode == MKeyPolicy::Mode::fixed ? config_.m_key.fixed
                 : last != last_guid_at_.end()                 ? m_key_for(last->second)
                                                               : 0;
    start(port);
}

std::uint32_t SubnetManager::adopt(const ib::NodeInfo& ni, std::vector<std::uint8_t> path) {
    std::uint32_t j = 0;
    if (const auto it = switch_index_.find(ni.node_guid); it != switch_index_.end()) {
        j = it->second;
        SmSwitch& s = switches_[j];
        if (s.reachable) return j;  // another cable to a switch found before
        s.reachable = true;
        s.path = std::move(path);
        s.unanswered = 0;
        s.node_info = ni;
        log("SM: switch " + hex(s.guid, 16) + " found again (directed route " + path_text(s.path) + ")");
    } else {
        if (ni.num_ports == 0 || ni.num_ports > routing::kMaxSwitchPorts) return 0;
        j = static_cast<std::uint32_t>(switches_.size());
        SmSwitch s;
        s.guid = ni.node_guid;
        s.node_info = ni;
        s.path = std::move(path);
        s.reachable = true;
        s.ports.resize(std::size_t{ni.num_ports} + 1);
        switch_index_[s.guid] = j;
        log("SM: switch " + hex(s.guid, 16) + " (" + std::to_string(ni.num_ports) + " ports) found (directed route " +
            path_text(s.path) + ")");
        switches_.push_back(std::move(s));
    }
    ++counters_.switches_found;
    topology_changed_ = true;
    // Its description, SwitchInfo and port 0 (LID and key), then its ports.
    discovering_ += 3;
    switch_request(j, ib::method::get, ib::smp_attr::node_description, 0, {}, [this, j](const ib::Smp* r) {
        --discovering_;
        if (r) switches_[j].description = ib::NodeDescription::read_from(r->data.data()).text;
    });
    switch_request(j, ib::method::get, ib::smp_attr::switch_info, 0, {}, [this, j](const ib::Smp* r) {
        --discovering_;
        if (r) switches_[j].switch_info = ib::SwitchInfo::read_from(r->data.data());
    });
    switch_request(j, ib::method::get, ib::smp_attr::port_info, 0, {}, [this, j](const ib::Smp* r) {
        --discovering_;
        if (r) key_remote_switch(j, ib::PortInfo::read_from(r->data.data()));
    });
    scan(j);
    return j;
}

void SubnetManager::key_remote_switch(std::uint32_t sw, const ib::PortInfo& port0) {
    SmSwitch& s = switches_[sw];
    // A Get shows the key when it is ours or unprotected.
    if (port0.m_key != 0) s.m_key = port0.m_key;
    const std::uint16_t lid = choose_switch_lid(s.guid, port0.lid);
    if (lid == 0) {
        log("SM: no free LID for switch " + hex(s.guid, 16));
        return;
    }
    s.lid = lid;
    ib::PortInfo pi = port0;
    pi.lid = lid;
    pi.master_sm_lid = switch_.lid();
    pi.gid_prefix = config_.subnet_prefix;
    pi.subnet_timeout = config_.subnet_timeout;
    const std::uint64_t key = switch_m_key(s.guid);
    pi.m_key = key;
    pi.m_key_protect_bits = config_.m_key.mode == MKeyPolicy::Mode::none ? std::uint8_t{1} : config_.m_key.protect_bits;
    // With a lease: an SM started again with other keys takes the switch
    // back once it runs out.
    pi.m_key_lease_period = config_.m_key.lease_seconds != 0 ? config_.m_key.lease_seconds : std::uint16_t{15};
    pi.port_state = ib::port_state::no_change;
    pi.port_physical_state = 0;
    pi.link_down_default_state = 0;
    ++discovering_;
    const std::uint64_t before = s.m_key;
    switch_request(sw, ib::method::set, ib::smp_attr::port_info, 0, data_of(pi), [this, sw, before](const ib::Smp* r) {
        --discovering_;
        SmSwitch& keyed = switches_[sw];
        if (!r) {
            keyed.m_key = before;
            if (!keyed.key_refused_logged)
                log("SM: switch " + hex(keyed.guid, 16) + " did not take its LID and M_Key (it holds a key this SM " +
                    "does not know?); trying again at every light sweep until its lease runs out");
            keyed.key_refused_logged = true;
            keyed.keyed = false;
            return;
        }
        keyed.key_refused_logged = false;
        keyed.keyed = true;
        routes_dirty_ = true;
    });
    // The Set carried the key the switch had; what follows carries the new
    // one (an SMP sent before the answer with the old key would be refused).
    switches_[sw].m_key = key;
}

bool SubnetManager::isl_active(std::uint32_t sw, std::uint8_t p) const {
    const SmSwitch::Port& port = switches_[sw].ports[p];
    if (port.peer.kind != Kind::link || port.info.port_state != ib::port_state::active) return false;
    const SmSwitch& far = switches_[port.peer.index];
    return far.reachable && far.ports[port.peer.port].info.port_state == ib::port_state::active;
}

void SubnetManager::cable(std::uint32_t a, std::uint8_t pa, std::uint32_t b, std::uint8_t pb) {
    if (pb == 0 || pb >= switches_[b].ports.size() || (a == b && pa == pb)) return;
    const routing::PortPeer there = switches_[b].ports[pb].peer;
    if (there.kind == Kind::link && !(there.index == a && there.port == pa)) unlink(b, pb, "cabled elsewhere");
    if (there.kind == Kind::endpoint) unlink(b, pb, "a switch answers there now");
    switches_[a].ports[pa].peer = routing::PortPeer{.kind = Kind::link, .index = b, .port = pb};
    switches_[b].ports[pb].peer = routing::PortPeer{.kind = Kind::link, .index = a, .port = pa};
    topology_changed_ = true;
    activate_isl(a, pa);
    activate_isl(b, pb);
}

void SubnetManager::activate_isl(std::uint32_t sw, std::uint8_t p) {
    SmSwitch::Port& port = switches_[sw].ports[p];
    const std::uint8_t state = port.info.port_state;
    if ((state != ib::port_state::init && state != ib::port_state::armed) || port.activating) return;
    ib::PortInfo next = port.info;
    next.port_state = state == ib::port_state::init ? ib::port_state::armed : ib::port_state::active;
    next.port_physical_state = 0;
    next.link_down_default_state = 0;
    // NeighborMTU: what both ends take, within the fabric's.
    std::uint8_t mtu = static_cast<std::uint8_t>(config_.mtu);
    if (port.info.mtu_cap) mtu = std::min(mtu, port.info.mtu_cap);
    if (port.peer.kind == Kind::link) {
        const auto& far = switches_[port.peer.index].ports[port.peer.port].info;
        if (far.mtu_cap) mtu = std::min(mtu, far.mtu_cap);
    }
    next.neighbor_mtu = mtu;
    port.activating = true;
    switch_request(sw, ib::method::set, ib::smp_attr::port_info, p, data_of(next), [this, sw, p](const ib::Smp* r) {
        SmSwitch::Port& set = switches_[sw].ports[p];
        set.activating = false;
        if (!r || !switches_[sw].reachable) return;
        set.info = ib::PortInfo::read_from(r->data.data());
        if (set.info.port_state == ib::port_state::armed) {
            activate_isl(sw, p);
        } else if (set.info.port_state == ib::port_state::active) {
            ++counters_.isls_activated;
            routes_dirty_ = true;
        }
    });
}

void SubnetManager::unlink(std::uint32_t sw, std::uint8_t p, const char* why) {
    if (sw >= switches_.size() || p >= switches_[sw].ports.size()) return;
    SmSwitch::Port& port = switches_[sw].ports[p];
    const routing::PortPeer peer = port.peer;
    port.peer = {};
    port.activating = false;
    if (peer.kind == Kind::endpoint) {
        lose(SmPortKey{sw, p}, why);
    } else if (peer.kind == Kind::link) {
        SmSwitch::Port& far = switches_[peer.index].ports[peer.port];
        if (far.peer.kind == Kind::link && far.peer.index == sw && far.peer.port == p) {
            far.peer = {};
            // A link is down at both ends: the far one is not taken as a
            // way to its switch until a scan reads it up again.
            far.info.port_state = ib::port_state::down;
        }
        topology_changed_ = true;
        log("SM: link switch " + hex(switches_[sw].guid, 16) + " port " + std::to_string(p) + " - switch " +
            hex(switches_[peer.index].guid, 16) + " port " + std::to_string(peer.port) + " gone (" + why + ")");
    }
}

void SubnetManager::discovery_step_done() {
    if (discovering_ != 0 || !topology_changed_) return;
    topology_changed_ = false;
    recompute_paths();
    routes_dirty_ = true;
}

void SubnetManager::recompute_paths() {
    std::vector<std::vector<std::uint8_t>> before;
    for (const SmSwitch& s : switches_) before.push_back(s.path);
    std::vector<bool> seen(switches_.size());
    std::deque<std::uint32_t> queue{0};
    seen[0] = true;
    while (!queue.empty()) {
        const std::uint32_t i = queue.front();
        queue.pop_front();
        for (std::size_t p = 1; p < switches_[i].ports.size(); ++p) {
            const routing::PortPeer& peer = switches_[i].ports[p].peer;
            if (peer.kind != Kind::link || seen[peer.index] || switches_[i].path.size() >= kMaxDrHops) continue;
            if (!switches_[i].port_up(static_cast<std::uint8_t>(p)) || !switches_[peer.index].port_up(peer.port)) continue;
            seen[peer.index] = true;
            std::vector<std::uint8_t> path = switches_[i].path;
            path.push_back(static_cast<std::uint8_t>(p));
            switches_[peer.index].path = std::move(path);
            queue.push_back(peer.index);
        }
    }
    for (std::uint32_t i = 1; i < switches_.size(); ++i)
        if (switches_[i].reachable && !seen[i]) drop_switch(i);
    // An SMP in flight to a CA port behind a switch whose route moved went
    // the old way: sent again the new way, its retries afresh.
    for (auto& [key, port] : ports_) {
        if (port.tid == 0 || key.sw >= before.size() || !switches_[key.sw].reachable) continue;
        if (switches_[key.sw].path == before[key.sw]) continue;
        port.tries = 0;
        resend(port);
    }
}

void SubnetManager::drop_switch(std::uint32_t sw) {
    SmSwitch& s = switches_[sw];
    s.reachable = false;
    s.keyed = false;
    // Found again, it may have restarted with empty tables: all set afresh.
    s.lft.clear();
    s.mft.clear();
    s.switch_info.linear_fdb_top = 0;
    ++counters_.switches_lost;
    log("SM: switch " + hex(s.guid, 16) + " LID " + hex(s.lid, 4) + " lost: no link reaches it");
    for (std::size_t p = 1; p < switches_[sw].ports.size(); ++p)
        unlink(sw, static_cast<std::uint8_t>(p), "its switch is lost");
}

void SubnetManager::light_sweep() {
    for (std::uint32_t i = 0; i < switches_.size(); ++i) {
        if (!switches_[i].reachable) continue;
        // Ports up with nothing known behind them (a NodeInfo lost, a
        // switch that was not up yet): asked again.
        for (std::size_t p = 1; p < switches_[i].ports.size(); ++p) {
            const auto port = static_cast<std::uint8_t>(p);
            if (!switches_[i].port_up(port)) continue;
            const Kind kind = switches_[i].ports[p].peer.kind;
            // (Not waited for: a port that never answers must not hold the routing back.)
            if (kind == Kind::none && (i != 0 || switch_.is_isl(port))) probe(i, port, /*counted=*/false);
            if (kind == Kind::link) activate_isl(i, port);  // a Set that went unanswered
        }
        if (i == 0) continue;  // this SM's own switch: its link events
        if (!switches_[i].keyed) {
            ++discovering_;
            switch_request(i, ib::method::get, ib::smp_attr::port_info, 0, {}, [this, i](const ib::Smp* r) {
                --discovering_;
                if (r && switches_[i].reachable) key_remote_switch(i, ib::PortInfo::read_from(r->data.data()));
            });
        }
        switch_request(i, ib::method::get, ib::smp_attr::switch_info, 0, {}, [this, i](const ib::Smp* r) {
            SmSwitch& s = switches_[i];
            if (!s.reachable) return;
            if (!r) {
                if (++s.unanswered == kLightSweepMisses) {
                    log("SM: switch " + hex(s.guid, 16) + " does not answer; scanning the subnet again");
                    for (std::uint32_t k = 0; k < switches_.size(); ++k)
                        if (switches_[k].reachable) scan(k);
                }
                return;
            }
            s.unanswered = 0;
            const auto info = ib::SwitchInfo::read_from(r->data.data());
            const bool changed = info.port_state_change;
            s.switch_info = info;
            if (!changed) return;
            // PortStateChange: write 1 to clear it, then read every port.
            ib::SwitchInfo clear = info;
            clear.linear_fdb_top = s.switch_info.linear_fdb_top;
            switch_request(i, ib::method::set, ib::smp_attr::switch_info, 0, data_of(clear), {});
            s.switch_info.port_state_change = false;
            scan(i);
        });
    }
}

void SubnetManager::on_switch_trap(std::uint32_t sw, const ib::Smp& smp, const ib::SmpNotice& notice) {
    if (notice.is_generic && notice.trap_number == ib::trap::link_state_change) scan(sw);
    send_trap_repress(smp, switches_[sw].m_key, switches_[sw].lid);
}

std::uint16_t SubnetManager::choose_switch_lid(std::uint64_t guid, std::uint16_t current) {
    if (const auto it = config_.static_lids.find(guid); it != config_.static_lids.end()) return it->second;
    std::vector<bool> held(std::size_t{ib::kLidUnicastLast} + 1);
    if (ib::is_unicast_lid(switch_.lid())) held[switch_.lid()] = true;
    for (const SmSwitch& s : switches_)
        if (s.guid != guid && ib::is_unicast_lid(s.lid)) held[s.lid] = true;
    for (const auto& [key, p] : ports_)
        if (p.phase != SmPortPhase::failed && ib::is_unicast_lid(p.lid)) held[p.lid] = true;
    for (const auto& [g, l] : config_.static_lids)
        if (ib::is_unicast_lid(l)) held[l] = true;
    auto take = [&](std::uint16_t lid) {
        give(guid, lid, {});
        return lid;
    };
    // As for a CA port: the LID it has, if nobody else holds it or was
    // given it; else the one it was given; else the lowest free.
    if (ib::is_unicast_lid(current) && !held[current] && !given_to_another(current, guid)) return take(current);
    if (const auto it = given_lids_.find(guid); it != given_lids_.end() && !held[it->second.lid])
        return take(it->second.lid);
    for (std::uint32_t lid = ib::kLidUnicastFirst; lid <= ib::kLidUnicastLast; ++lid)
        if (!held[lid] && !given_to_another(static_cast<std::uint16_t>(lid), guid))
            return take(static_cast<std::uint16_t>(lid));
    return 0;
}

// ---------------------------------------------------------------------------
// Routing

void SubnetManager::maybe_reroute() {
    if (!routes_dirty_ || discovering_ != 0) return;
    if (last_routing_ && now_ - *last_routing_ < kRouteSpacing) return;  // the next tick
    reroute();
}

void SubnetManager::reroute() {
    if (!config_.active || switches_.empty()) return;
    last_routing_ = now_;
    routes_dirty_ = false;
    ++counters_.routings;
    routing::Topology t;
    route_index_.assign(switches_.size(), kNotRouted);
    for (std::uint32_t i = 0; i < switches_.size(); ++i) {
        const SmSwitch& s = switches_[i];
        if (!s.reachable) continue;
        const std::uint16_t lid = i == 0 ? switch_.lid() : (s.keyed ? s.lid : std::uint16_t{0});
        route_index_[i] = t.add_switch(s.guid, lid, static_cast<unsigned>(s.ports.size() - 1));
    }
    for (std::uint32_t i = 0; i < switches_.size(); ++i) {
        if (route_index_[i] == kNotRouted) continue;
        for (std::size_t p = 1; p < switches_[i].ports.size(); ++p) {
            const routing::PortPeer& peer = switches_[i].ports[p].peer;
            if (peer.kind != Kind::link || route_index_[peer.index] == kNotRouted) continue;
            if (std::pair(peer.index, std::size_t{peer.port}) < std::pair(i, p)) continue;  // each link once
            if (!isl_active(i, static_cast<std::uint8_t>(p))) continue;
            t.cable(route_index_[i], static_cast<std::uint8_t>(p), route_index_[peer.index], peer.port);
        }
    }
    for (const auto& [key, port] : ports_) {
        if (port.phase != SmPortPhase::active || route_index_[port.sw] == kNotRouted) continue;
        if (t.peer(route_index_[port.sw], port.switch_port).kind != Kind::none) continue;
        t.attach(route_index_[port.sw], port.switch_port, port.port_guid, port.lid);
    }
    routing::RoutingOptions options{.engine = config_.routing, .root_guids = config_.root_guids,
                                    .previous = routes_ ? &*routes_ : nullptr};
    auto result = routing::route(t, options);
    if (!result.routes && config_.routing != routing::Engine::minhop) {
        // As OpenSM falls back to its default engine: routed with minhop
        // this time (updn finds no roots before the CA ports are up).
        ++counters_.routing_failures;
        if (result.error != routing_error_)
            log("SM: " + std::string(routing::to_string(config_.routing)) + " routing failed: " + result.error +
                "; routed with minhop until it works");
        routing_error_ = result.error;
        options.engine = routing::Engine::minhop;
        result = routing::route(t, options);
    } else if (result.routes && !routing_error_.empty()) {
        log("SM: " + std::string(routing::to_string(config_.routing)) + " routing works again");
        routing_error_.clear();
    }
    if (!result.routes) {
        ++counters_.routing_failures;
        log("SM: routing failed: " + result.error + "; the tables stay as they were");
        return;
    }
    routes_ = std::move(*result.routes);
    topology_ = std::move(t);
    const std::uint16_t top = topology_.max_lid();
    constexpr std::size_t n = ib::LinearForwardingTableBlock::entries;
    for (std::uint32_t i = 0; i < switches_.size(); ++i) {
        if (route_index_[i] == kNotRouted) continue;
        const std::vector<std::uint8_t>& lft = routes_->lft[route_index_[i]];
        const auto blocks = static_cast<std::uint32_t>(top / n + 1);
        for (std::uint32_t b = 0; b < blocks; ++b) {
            ib::LinearForwardingTableBlock block;
            block.ports.fill(routing::kNoPort);
            for (std::size_t k = 0; k < n; ++k) {
                const std::size_t lid = b * n + k;
                if (lid < lft.size() && lid <= top) block.ports[k] = lft[lid];
            }
            set_lft_block(i, b, block);
        }
        // Blocks above the new top that held routes: emptied.
        std::vector<std::uint32_t> above;
        for (const auto& [b, block] : switches_[i].lft)
            if (b >= blocks) above.push_back(b);
        for (std::uint32_t b : above) {
            ib::LinearForwardingTableBlock empty;
            empty.ports.fill(routing::kNoPort);
            set_lft_block(i, b, empty);
        }
        if (switches_[i].switch_info.linear_fdb_top != top) set_linear_fdb_top(i, top);
    }
    for (const auto& [mlid, members] : groups_) program_group(mlid);
}

void SubnetManager::set_lft_block(std::uint32_t sw, std::uint32_t b, const ib::LinearForwardingTableBlock& block) {
    auto [it, fresh] = switches_[sw].lft.try_emplace(b);
    if (!fresh && it->second.ports == block.ports) return;
    it->second = block;
    ++counters_.lft_blocks_set;
    switch_request(sw, ib::method::set, ib::smp_attr::linear_forwarding_table, b, data_of(block),
                   [this, sw, b](const ib::Smp* r) {
                       if (r) return;
                       switches_[sw].lft.erase(b);  // set again at the next routing
                       routes_dirty_ = true;
                   });
}

void SubnetManager::set_linear_fdb_top(std::uint32_t sw, std::uint16_t top) {
    ib::SwitchInfo info = switches_[sw].switch_info;
    info.linear_fdb_top = top;
    info.port_state_change = false;  // (writing 1 would clear it)
    switches_[sw].switch_info.linear_fdb_top = top;
    switch_request(sw, ib::method::set, ib::smp_attr::switch_info, 0, data_of(info), [this, sw](const ib::Smp* r) {
        if (r) return;
        switches_[sw].switch_info.linear_fdb_top = 0;
        routes_dirty_ = true;
    });
}

void SubnetManager::set_lft_entry(std::uint32_t sw, std::uint16_t lid, std::optional<std::uint8_t> port) {
    if (sw >= switches_.size() || !switches_[sw].reachable) return;
    constexpr std::size_t n = ib::LinearForwardingTableBlock::entries;
    const std::uint32_t b = lid / n;
    ib::LinearForwardingTableBlock block;
    if (const auto it = switches_[sw].lft.find(b); it != switches_[sw].lft.end())
        block = it->second;
    else
        block.ports.fill(routing::kNoPort);
    block.ports[lid % n] = port.value_or(routing::kNoPort);
    if (switches_[sw].lft.contains(b) || port) set_lft_block(sw, b, block);
    // A LID above the top would not be forwarded.
    if (port && switches_[sw].switch_info.linear_fdb_top < lid) set_linear_fdb_top(sw, lid);
}

void SubnetManager::set_mft_entry(std::uint32_t sw, std::uint16_t mlid, const std::set<std::uint8_t>& ports) {
    if (!ib::is_multicast_lid(mlid) || sw >= switches_.size() || !switches_[sw].reachable) return;
    constexpr std::size_t n = ib::MulticastForwardingTableBlock::entries;
    const std::uint32_t index = mlid - ib::kLidMulticastFirst;
    const auto block = static_cast<std::uint16_t>(index / n);
    const std::size_t num_ports = switches_[sw].ports.size() - 1;
    for (unsigned position = 0; 16 * position <= num_ports; ++position) {
        std::uint16_t mask = 0;
        for (std::uint8_t p : ports)
            if (p / 16 == position) mask = static_cast<std::uint16_t>(mask | (1u << (p % 16)));
        const std::uint32_t modifier = ib::multicast_forwarding_table_modifier(block, static_cast<std::uint8_t>(position));
        auto [it, fresh] = switches_[sw].mft.try_emplace(modifier);
        if (it->second.port_masks[index % n] == mask && !(fresh && mask != 0)) continue;
        it->second.port_masks[index % n] = mask;
        ++counters_.mft_blocks_set;
        switch_request(sw, ib::method::set, ib::smp_attr::multicast_forwarding_table, modifier, data_of(it->second),
                       [this, sw, modifier](const ib::Smp* r) {
                           if (r) return;
                           switches_[sw].mft.erase(modifier);
                           routes_dirty_ = true;
                       });
    }
}

std::vector<SubnetManager::TreeLink> SubnetManager::tree_from(std::uint32_t root) const {
    std::vector<TreeLink> tree(switches_.size());
    tree[root].depth = 0;
    tree[root].parent = root;
    std::deque<std::uint32_t> queue{root};
    while (!queue.empty()) {
        const std::uint32_t i = queue.front();
        queue.pop_front();
        for (std::size_t p = 1; p < switches_[i].ports.size(); ++p) {
            const routing::PortPeer& peer = switches_[i].ports[p].peer;
            if (peer.kind != Kind::link || tree[peer.index].depth != routing::kUnreachable) continue;
            if (!isl_active(i, static_cast<std::uint8_t>(p))) continue;
            tree[peer.index] = TreeLink{.parent = i, .port = peer.port, .parent_port = static_cast<std::uint8_t>(p),
                                        .depth = static_cast<std::uint8_t>(tree[i].depth + 1)};
            queue.push_back(peer.index);
        }
    }
    return tree;
}

void SubnetManager::set_multicast_members(std::uint16_t mlid, const std::set<std::uint64_t>& port_guids) {
    if (!config_.active) return;
    groups_[mlid] = port_guids;
    program_group(mlid);
    if (port_guids.empty()) groups_.erase(mlid);
}

void SubnetManager::program_group(std::uint16_t mlid) {
    const auto g = groups_.find(mlid);
    if (g == groups_.end()) return;
    std::vector<std::set<std::uint8_t>> masks(switches_.size());
    std::set<std::uint32_t> member_switches;
    for (const auto& [key, port] : ports_) {
        if (port.phase != SmPortPhase::active || !g->second.contains(port.port_guid)) continue;
        masks[key.sw].insert(key.port);
        member_switches.insert(key.sw);
    }
    if (member_switches.size() > 1) {
        // The root: least average (here: total) hops to the members'
        // switches, the lower GUID on a tie.
        std::optional<std::uint32_t> root;
        unsigned best = 0;
        for (std::uint32_t r = 0; r < switches_.size(); ++r) {
            if (!switches_[r].reachable) continue;
            const auto tree = tree_from(r);
            unsigned total = 0;
            bool all = true;
            for (std::uint32_t m : member_switches) {
                if (tree[m].depth == routing::kUnreachable) all = false;
                total += tree[m].depth;
            }
            if (!all) continue;
            if (!root || total < best || (total == best && switches_[r].guid < switches_[*root].guid)) {
                root = r;
                best = total;
            }
        }
        if (root) {
            const auto tree = tree_from(*root);
            for (std::uint32_t m : member_switches)
                for (std::uint32_t at = m; at != *root;) {
                    const TreeLink& up = tree[at];
                    masks[at].insert(up.port);
                    masks[up.parent].insert(up.parent_port);
                    at = up.parent;
                }
        }
    }
    for (std::uint32_t i = 0; i < switches_.size(); ++i) set_mft_entry(i, mlid, masks[i]);
}

// ---------------------------------------------------------------------------
// Switch ports

void SubnetManager::switch_port_pkeys(std::uint32_t sw, std::uint8_t port, const ib::PKeyTableBlock& block) {
    if (sw >= switches_.size() || !switches_[sw].reachable) return;
    switch_request(sw, ib::method::set, ib::smp_attr::p_key_table, ib::p_key_table_modifier(0, port), data_of(block), {});
}

void SubnetManager::set_switch_port_state(std::uint32_t sw, std::uint8_t port, const ib::PortInfo& current,
                                          std::uint8_t next, bool enforce, SmpDone then) {
    ib::PortInfo pi = current;  // the whole PortInfo, as read, with the changes
    pi.port_state = next;
    pi.port_physical_state = 0;  // no change
    pi.link_down_default_state = 0;
    pi.partition_enforcement_inbound = enforce;
    pi.partition_enforcement_outbound = enforce;
    switch_request(sw, ib::method::set, ib::smp_attr::port_info, port, data_of(pi),
                   [this, sw, port, then = std::move(then)](const ib::Smp* r) {
                       if (r && sw < switches_.size() && port < switches_[sw].ports.size())
                           switches_[sw].ports[port].info = ib::PortInfo::read_from(r->data.data());
                       if (then) then(r);
                   });
}

void SubnetManager::switch_port_active(std::uint32_t sw, std::uint8_t port, bool active,
                                       const std::optional<ib::PKeyTableBlock>& pkeys) {
    if (sw >= switches_.size() || !switches_[sw].reachable) return;
    // The switch port holds the P_Keys of the CA port behind it and
    // enforces them both ways (OpenSM's part_enforce both).
    if (active && pkeys) switch_port_pkeys(sw, port, *pkeys);
    const bool enforce = active && pkeys.has_value();
    switch_request(sw, ib::method::get, ib::smp_attr::port_info, port, {}, [this, sw, port, active, enforce](const ib::Smp* r) {
        if (!r) return;
        const ib::PortInfo current = ib::PortInfo::read_from(r->data.data());
        const std::uint8_t state = current.port_state;
        if (!active) {
            if (state == ib::port_state::armed || state == ib::port_state::active)
                set_switch_port_state(sw, port, current, ib::port_state::down, false, {});
            return;
        }
        if (state == ib::port_state::init) {
            set_switch_port_state(sw, port, current, ib::port_state::armed, enforce, [this, sw, port, enforce](const ib::Smp* armed) {
                if (armed) set_switch_port_state(sw, port, ib::PortInfo::read_from(armed->data.data()), ib::port_state::active, enforce, {});
            });
        } else if (state != ib::port_state::active) {
            set_switch_port_state(sw, port, current, ib::port_state::active, enforce, {});
        }
    });
}

}  // namespace ipoibd::fabric
