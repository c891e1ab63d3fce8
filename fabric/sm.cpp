#include "fabric/sm.h"

#include <array>
#include <random>

#include "common/utf8.h"
#include "common/hex.h"
#include "transport/wire/smp_dr.h"

namespace ipoibd::fabric {
namespace {

template <class Attr>
ib::SmpData to_data(const Attr& a) {
    ib::SmpData d{};
    a.write_to(d.data());
    return d;
}

}  // namespace

SubnetManager::SubnetManager(const SmConfig& config, Switch& sw, SmLog log)
    : config_(config), switch_(sw), log_(std::move(log)) {
    // This SM runs on the switch's port 0: its IsSM bit (an SM sets its
    // own port's, as OpenSM does by opening the issm device).
    if (!config_.active) return;  // ibfabricd --sm=no: the switch is another SM's
    switch_.set_sm_present(true);
    SmSwitch own;
    own.guid = switch_.guid();
    own.node_info = switch_.node_info();
    own.description = switch_.description();
    own.lid = switch_.lid();
    own.reachable = true;
    own.ports.resize(std::size_t{switch_.num_ports()} + 1);
    switch_index_[own.guid] = 0;
    switches_.push_back(std::move(own));
    // Key the switch before any port can reach it with a forged SMP.
    key_switch();
    if (const auto info = program_switch(ib::method::get, ib::smp_attr::switch_info, 0, {}))
        switches_[0].switch_info = ib::SwitchInfo::read_from(info->data());
    switches_[0].keyed = switch_keyed_;
    switches_[0].m_key = switch_m_key_;
}

SubnetManager::~SubnetManager() {
    if (config_.active) switch_.set_sm_present(false);
}

void SubnetManager::on_link_event(const LinkEvent& event, Clock::time_point now) {
    now_ = now;
    if (!config_.active || event.port == 0 || event.port >= switches_[0].ports.size()) return;
    switches_[0].ports[event.port].info = switch_.port_info(event.port);
    if (!event.up) {
        unlink(0, event.port, "link down");
        lose(event.port, "link down");
        discovery_step_done();
        maybe_reroute();
        return;
    }
    if (switch_.is_isl(event.port)) {
        // Another switch, perhaps: found by NodeInfo through the port.
        if (switches_[0].ports[event.port].peer.kind == routing::PortPeer::Kind::none) probe(0, event.port);
        return;
    }
    switches_[0].ports[event.port].peer = routing::PortPeer{.kind = routing::PortPeer::Kind::endpoint};
    SmPort& port = ports_[event.port];
    if (port.port_guid != 0) mark_away(port.port_guid);
    port = SmPort{};
    port.switch_port = event.port;
    // Before NodeInfo names the port: the key of whoever was here last.
    const auto last = last_guid_at_.find(SmPortKey{event.port});
    port.m_key = config_.m_key.mode == MKeyPolicy::Mode::fixed ? config_.m_key.fixed
                 : last != last_guid_at_.end()                 ? m_key_for(last->second)
                                                               : 0;
    start(port);
}

void SubnetManager::start(SmPort& port) {
    port.phase = SmPortPhase::node_info;
    port.sweeping = false;
    send(port, ib::method::get, ib::smp_attr::node_info, 0, {});
}

void SubnetManager::send(SmPort& port, std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier,
                         const ib::SmpData& data) {
    const ib::Smp smp = dr_smp(method, attribute, modifier, port.m_key, data, path_to(port));
    in_flight_.erase(port.tid);
    port.tid = smp.transaction_id;
    port.tries = 0;
    in_flight_[port.tid] = smp;
    resend(port);
}

void SubnetManager::resend(SmPort& port) {
    // Along the route the port has now: a lost switch may have moved it.
    ib::Smp& smp = in_flight_.at(port.tid);
    ib::dr_set_initial_path(smp, path_to(port));
    if (!transmit_dr(smp)) return;
    ++port.tries;
    port.deadline = now_ + config_.smp_timeout;
}

bool SubnetManager::on_smp(const ib::Smp& smp, std::uint8_t in_port, std::uint16_t slid) {
    if (smp.method == ib::method::trap) {
        on_trap(smp, in_port);
        return true;
    }
    if (!config_.active) return true;
    if (!(smp.method & ib::method::response_bit)) {
        if (smp.attribute_id == ib::smp_attr::sm_info && smp.method == ib::method::get && !smp.is_directed_route() &&
            ib::is_unicast_lid(slid)) {
            answer_sm_info(smp, slid);
        } else {
            ++counters_.requests_refused;
        }
        return true;
    }
    // A response comes back in where its request went out: another port
    // answering (its TIDs are easy to guess) would speak for that port,
    // down to the GUID the SM files it under.
    for (auto& [key, port] : ports_) {
        if (port.tid != smp.transaction_id || port.phase == SmPortPhase::failed || first_hop(port) != in_port) continue;
        in_flight_.erase(port.tid);
        port.tid = 0;
        ++counters_.responses;
        on_response(port, smp);
        discovery_step_done();
        maybe_reroute();
        return true;
    }
    if (const auto it = requests_.find(smp.transaction_id);
        it != requests_.end() && !it->second.path.empty() && it->second.path.front() == in_port) {
        Request r = std::move(it->second);
        requests_.erase(it);
        ++counters_.responses;
        if (smp.status != 0) {
            ++counters_.error_responses;
            log(std::string("SM: ") + ib::smp_attribute_name(smp.attribute_id) + " (modifier " + hex(smp.attribute_modifier, 8) +
                ") along the directed route " + path_text(r.path) + " answered with status " +
                ib::describe_mad_status(smp.status));
            r.done(nullptr);
        } else {
            r.done(&smp);
        }
        discovery_step_done();
        maybe_reroute();
        return true;
    }
    ++counters_.unexpected_responses;
    return true;
}

void SubnetManager::on_response(SmPort& port, const ib::Smp& smp) {
    if (smp.status != 0) {
        ++counters_.error_responses;
        log("SM: " + where(port) + ": " + ib::smp_attribute_name(smp.attribute_id) +
            " answered with status " + ib::describe_mad_status(smp.status) + "; retrying at the next sweep");
        port.phase = SmPortPhase::failed;
        return;
    }
    switch (port.phase) {
        case SmPortPhase::node_info: {
            const auto ni = ib::NodeInfo::read_from(smp.data.data());
            if (ni.node_type != ib::node_type::channel_adapter) {
                if (ni.node_type == ib::node_type::switch_node) ++counters_.switches_refused;
                log("SM: " + where(port) + ": node type " + std::to_string(ni.node_type) +
                    " is not a channel adapter; a switch is taken only behind an inter-switch link");
                port.phase = SmPortPhase::failed;
                return;
            }
            port.node_guid = ni.node_guid;
            port.port_guid = ni.port_guid;
            port.local_port_num = ni.local_port_num;
            last_guid_at_[SmPortKey{port.sw, port.switch_port}] = port.port_guid;
            if (config_.m_key.mode == MKeyPolicy::Mode::derived) port.m_key = m_key_for(port.port_guid);
            // A GUID is in one place at a time. Where it is ACTIVE on
            // another switch port whose link is up, that port keeps it: this
            // one is a second port claiming it (cloned machines sharing a
            // machine-id, or a port that lies), refused and tried again at
            // every sweep, so it takes over once the first goes (a soft
            // port's process restarted: its old link times out). Otherwise
            // the GUID moved here, and the old attachment goes at once so
            // that the SA's paths and the LID (kept by GUID) follow it; an
            // old port whose link is still up is looked for again at the
            // sweeps (it may answer as itself).
            {
                std::vector<SmPortKey> stale;
                const SmPortKey self{port.sw, port.switch_port};
                for (const auto& [sp, other] : ports_) {
                    if (sp == self || other.port_guid != port.port_guid) continue;
                    if (other.phase == SmPortPhase::active && link_up(other)) {
                        ++counters_.duplicate_guids;
                        if (!port.duplicate_logged)
                            log("SM: " + where(port) + " claims GUID " + hex(port.port_guid, 16) +
                                ", ACTIVE on " + where(other) +
                                "; refused while that port is up (ports must have their own GUIDs)");
                        port.duplicate_logged = true;
                        port.phase = SmPortPhase::failed;
                        return;
                    }
                    stale.push_back(sp);
                }
                port.duplicate_logged = false;
                for (const SmPortKey sp : stale)
                    lose(sp, "its GUID reappeared on another switch port", /*keep=*/link_up(ports_.at(sp)));
            }
            port.phase = SmPortPhase::node_description;
            send(port, ib::method::get, ib::smp_attr::node_description, 0, {});
            return;
        }
        case SmPortPhase::node_description:
            port.description = ib::NodeDescription::read_from(smp.data.data()).text;
            port.phase = SmPortPhase::port_info;
            send(port, ib::method::get, ib::smp_attr::port_info, port.local_port_num, {});
            return;
        case SmPortPhase::port_info:
            after_port_info(port, ib::PortInfo::read_from(smp.data.data()));
            return;
        case SmPortPhase::set_pkeys:
            set_port_info(port);
            return;
        case SmPortPhase::set_port_info:
        case SmPortPhase::activate: {
            port.port_info = ib::PortInfo::read_from(smp.data.data());
            port.m_key = port.port_info.m_key;  // the Set gave it our key
            if (port.port_info.port_state == ib::port_state::armed) {
                ib::PortInfo next = port.port_info;
                next.port_state = ib::port_state::active;
                next.port_physical_state = 0;
                next.link_down_default_state = 0;
                next.client_reregister = false;
                port.phase = SmPortPhase::activate;
                send(port, ib::method::set, ib::smp_attr::port_info, port.local_port_num, to_data(next));
                return;
            }
            finish(port);
            return;
        }
        case SmPortPhase::active:
            if (port.setting_pkeys) {
                port.setting_pkeys = false;
                switch_port_pkeys(port.sw, port.switch_port, pkey_block(port));
                log("SM: " + where(port) + " GUID " + hex(port.port_guid, 16) +
                    ": P_KeyTable set for the new partitions");
                return;
            }
            if (port.sweeping) {
                port.sweeping = false;
                const auto info = ib::PortInfo::read_from(smp.data.data());
                if (info.port_state != ib::port_state::active || info.lid != port.lid) {
                    log("SM: " + where(port) + " (GUID " + hex(port.port_guid, 16) +
                        ") changed state behind the SM's back; configuring it again");
                    set_lft_entry(port.sw, port.lid, std::nullopt);
                    switch_port_active(port.sw, port.switch_port, false);
                    routes_dirty_ = true;
                    if (hooks_.port_lost) hooks_.port_lost(port);
                    after_port_info(port, info);
                }
            }
            return;
        case SmPortPhase::failed: return;
    }
}

void SubnetManager::after_port_info(SmPort& port, const ib::PortInfo& info) {
    port.port_info = info;
    // A Get shows the port's M_Key when it is ours or the protect bits are
    // 0 (then it may be anyone's, say a lost SM's whose lease ran out):
    // the Sets that follow carry the key the port has.
    if (info.m_key != 0) port.m_key = info.m_key;
    port.lid = choose_lid(port, info.lid);
    port.reregister = info.lid != 0;
    if (port.lid == 0) {
        // Tried again at every sweep; told once until it gets one.
        ++counters_.no_lid;
        if (!port.no_lid_logged)
            log("SM: no free LID for port GUID " + hex(port.port_guid, 16) + " (every LID is held by a port here); " +
                "trying again at every sweep");
        port.no_lid_logged = true;
        port.phase = SmPortPhase::failed;
        return;
    }
    port.no_lid_logged = false;
    // A GUID back from another host (no fabric key) is not recorded: the
    // LID given to it stays its old host's (choose_lid).
    if (lid_left_elsewhere(port) == 0) give(port.port_guid, port.lid, host_of(port));
    const ib::PKeyTableBlock block = pkey_block(port);
    port.pkeys_stale = false;
    const auto pkeys = pkeys_for_port(config_.partitions, port.port_guid);
    if (pkeys.size() > block.entries)
        log("SM: port GUID " + hex(port.port_guid, 16) + " is in " + std::to_string(pkeys.size()) +
            " partitions; only the first 32 fit P_KeyTable block 0");
    port.phase = SmPortPhase::set_pkeys;
    send(port, ib::method::set, ib::smp_attr::p_key_table, ib::p_key_table_modifier(0), to_data(block));
}

void SubnetManager::set_port_info(SmPort& port) {
    ib::PortInfo next = port.port_info;
    next.lid = port.lid;
    next.lmc = 0;
    next.master_sm_lid = switch_.lid();
    next.master_sm_sl = 0;
    next.gid_prefix = config_.subnet_prefix;
    next.subnet_timeout = config_.subnet_timeout;
    const std::uint8_t cap = port.port_info.mtu_cap ? port.port_info.mtu_cap : static_cast<std::uint8_t>(config_.mtu);
    next.neighbor_mtu = std::min(cap, static_cast<std::uint8_t>(config_.mtu));
    next.port_state = port.port_info.port_state == ib::port_state::init ? ib::port_state::armed : ib::port_state::no_change;
    next.port_physical_state = 0;
    next.link_down_default_state = 0;
    next.client_reregister = port.reregister;
    next.m_key = m_key_for(port.port_guid);
    next.m_key_protect_bits = config_.m_key.mode == MKeyPolicy::Mode::none ? 0 : config_.m_key.protect_bits;
    next.m_key_lease_period = config_.m_key.mode == MKeyPolicy::Mode::none ? 0 : config_.m_key.lease_seconds;
    port.phase = SmPortPhase::set_port_info;
    send(port, ib::method::set, ib::smp_attr::port_info, port.local_port_num, to_data(next));
}

void SubnetManager::finish(SmPort& port) {
    if (port.port_info.port_state != ib::port_state::active) {
        log("SM: " + where(port) + " did not become ACTIVE (state " +
            std::to_string(port.port_info.port_state) + ")");
        port.phase = SmPortPhase::failed;
        return;
    }
    // Its own switch routes it at once (whatever the engine, a LID goes
    // out of its own port there); the other switches at the next routing.
    set_lft_entry(port.sw, port.lid, port.switch_port);
    switch_port_active(port.sw, port.switch_port, true, pkey_block(port));
    port.phase = SmPortPhase::active;
    routes_dirty_ = true;
    ++counters_.ports_configured;
    if (hooks_.port_active) hooks_.port_active(port);
    log("SM: " + where(port) + " GUID " + hex(port.port_guid, 16) + " \"" + escape_text(port.description) +
        "\" ACTIVE with LID " + hex(port.lid, 4) + (port.reregister ? ", client reregister requested" : ""));
}

void SubnetManager::lose(SmPortKey key, const char* why, bool keep) {
    const auto it = ports_.find(key);
    if (it == ports_.end()) return;
    SmPort& port = it->second;
    if (port.phase == SmPortPhase::active) {
        set_lft_entry(port.sw, port.lid, std::nullopt);
        if (switches_.at(port.sw).reachable) switch_port_active(port.sw, port.switch_port, false);
        routes_dirty_ = true;
        ++counters_.ports_lost;
        if (hooks_.port_lost) hooks_.port_lost(port);
        log("SM: " + where(port) + " GUID " + hex(port.port_guid, 16) + " LID " +
            hex(port.lid, 4) + " gone (" + why + ")" + (keep ? "; looking for it at every sweep" : ""));
    }
    if (port.port_guid != 0) mark_away(port.port_guid);
    in_flight_.erase(port.tid);
    if (keep) {
        // The link is still up: the port may answer again (a stalled
        // process). It is discovered afresh at the next sweeps, keeps its
        // LID (it still has it, and given_lids_ holds it for its GUID) and
        // is asked to reregister.
        port.tid = 0;
        port.sweeping = false;
        port.phase = SmPortPhase::failed;
        return;
    }
    ports_.erase(it);
}

void SubnetManager::tick(Clock::time_point now) {
    now_ = now;
    if (!config_.active) return;
    expire_requests();
    std::vector<SmPortKey> lost;
    for (auto& [sp, port] : ports_) {
        if (port.tid == 0 || now < port.deadline) continue;
        ++counters_.timeouts;
        if (port.tries <= config_.smp_retries) {
            resend(port);
        } else if (port.phase == SmPortPhase::active) {
            lost.push_back(sp);
        } else {
            const bool a_set = port.phase == SmPortPhase::set_pkeys || port.phase == SmPortPhase::set_port_info ||
                               port.phase == SmPortPhase::activate;
            if (a_set) {
                // It answered the Gets: a port that drops the Sets holds an
                // M_Key this SM does not know (14.2.4).
                ++counters_.sets_unanswered;
                log("SM: " + where(port) + " GUID " + hex(port.port_guid, 16) +
                    " answers Gets but not Sets: it holds an M_Key this SM does not know; trying again at every "
                    "sweep until its M_Key lease runs out");
            }
            in_flight_.erase(port.tid);
            port.tid = 0;
            port.phase = SmPortPhase::failed;
        }
    }
    for (const SmPortKey sp : lost) lose(sp, "no answer to the sweep", true);
    discovery_step_done();
    if (now >= next_sweep_) {
        next_sweep_ = now + config_.sweep_interval;
        sweep_ports();
        light_sweep();
    }
    // Routed once no discovery is in flight, or at the latest a sweep
    // interval after the last routing (a switch that keeps timing out).
    if (routes_dirty_ && (discovering_ == 0 || !last_routing_ || now - *last_routing_ >= config_.sweep_interval)) reroute();
}

void SubnetManager::sweep_ports() {
    for (auto& [sp, port] : ports_) {
        if (port.tid != 0 || !switches_[port.sw].reachable) continue;
        if (port.phase == SmPortPhase::failed) {
            start(port);
        } else if (port.phase == SmPortPhase::active && port.pkeys_stale) {
            port.pkeys_stale = false;
            port.setting_pkeys = true;
            send(port, ib::method::set, ib::smp_attr::p_key_table, ib::p_key_table_modifier(0), to_data(pkey_block(port)));
        } else if (port.phase == SmPortPhase::active) {
            port.sweeping = true;
            send(port, ib::method::get, ib::smp_attr::port_info, port.local_port_num, {});
        }
    }
}

std::size_t SubnetManager::set_partitions(std::vector<Partition> partitions) {
    const std::vector<Partition> old = std::exchange(config_.partitions, std::move(partitions));
    std::size_t changed = 0;
    for (auto& [sp, port] : ports_) {
        if (port.phase != SmPortPhase::active) continue;
        if (pkeys_for_port(old, port.port_guid) == pkeys_for_port(config_.partitions, port.port_guid)) continue;
        port.pkeys_stale = true;
        ++changed;
    }
    if (changed > 0) next_sweep_ = now_;  // at the next tick, not a sweep interval away
    return changed;
}

ib::PKeyTableBlock SubnetManager::pkey_block(const SmPort& port) const {
    ib::PKeyTableBlock block;
    const auto pkeys = pkeys_for_port(config_.partitions, port.port_guid);
    for (std::size_t i = 0; i < pkeys.size() && i < block.entries; ++i) block.p_keys[i] = pkeys[i];
    return block;
}

std::uint64_t SubnetManager::m_key_for(std::uint64_t guid) const {
    switch (config_.m_key.mode) {
        case MKeyPolicy::Mode::none: return 0;
        case MKeyPolicy::Mode::fixed: return config_.m_key.fixed;
        case MKeyPolicy::Mode::derived: {
            const std::uint64_t k = derive_u64(config_.m_key.secret, "ipoibd M_Key", guid);
            return k != 0 ? k : 1;  // 0 would mean "no key"
        }
    }
    return 0;
}

// ---------------------------------------------------------------------------
// The switch, through its own SMA

void SubnetManager::key_switch() {
    switch_keyed_ = true;  // for the SMP below (program_switch would key again)
    ib::PortInfo pi;
    pi.lid = switch_.lid();
    pi.master_sm_lid = switch_.lid();
    pi.gid_prefix = config_.subnet_prefix;
    pi.subnet_timeout = config_.subnet_timeout;
    // The switch is keyed even with --m-key none (the CA ports then have
    // none): its tables decide where every packet goes, and this SM, in the
    // same process, never loses the key. With one fixed key for every port
    // each CA port holds it (the Set of its PortInfo carries it), so the
    // switch gets a random one of its own there too.
    const bool none = config_.m_key.mode == MKeyPolicy::Mode::none;
    const bool own_key = none || config_.m_key.mode == MKeyPolicy::Mode::fixed;
    pi.m_key = own_key ? (std::uint64_t{std::random_device{}()} << 32 | std::random_device{}()) | 1
                       : m_key_for(switch_.guid());
    pi.m_key_protect_bits = none ? std::uint8_t{1} : config_.m_key.protect_bits;
    pi.m_key_lease_period = 0;
    ib::SmpData data{};
    (void)ib::put_attribute(pi, data);
    // The Set carries the key it sets: a switch without a key takes any, and
    // one this SM's policy keyed before (an SM restarted in the same
    // process, the same secret) takes its own.
    switch_m_key_ = pi.m_key;
    if (!program_switch(ib::method::set, ib::smp_attr::port_info, 0, data)) {
        switch_m_key_ = 0;
        switch_keyed_ = false;  // tried again by the next SMP to the switch
    }
}

std::optional<ib::SmpData> SubnetManager::program_switch(std::uint8_t method, std::uint16_t attribute,
                                                         std::uint32_t modifier, const ib::SmpData& data) {
    if (!switch_keyed_) key_switch();
    ib::Smp smp = dr_smp(method, attribute, modifier, switch_m_key_, data, {});
    ++counters_.switch_smps;
    // C14-9:3 at the requester: HopCount 0, DrDLID permissive: this node's SMA.
    if (ib::dr_send_request(smp, switch_.num_ports()).action != ib::DrAction::deliver) {
        ++counters_.switch_smp_errors;
        return std::nullopt;
    }
    const auto reply = switch_.local_smp(smp);
    if (!reply || reply->status != 0) {
        ++counters_.switch_smp_errors;
        log("SM: the switch refused " + std::string(method == ib::method::set ? "Set " : "Get ") +
            ib::smp_attribute_name(attribute) + " (modifier " + hex(modifier, 8) + ")" +
            (reply ? ": status " + ib::describe_mad_status(reply->status) : std::string()));
        return std::nullopt;
    }
    return reply->data;
}

// Get SMInfo (IBA 14.4.1): this SM is the master. The SM_Key is shown as 0:
// nothing here authenticates the requester.
void SubnetManager::answer_sm_info(const ib::Smp& request, std::uint16_t slid) {
    ib::Smp reply = request;
    reply.method = ib::method::get_resp;
    reply.status = 0;
    reply.data = {};
    ib::SmInfo info;
    info.guid = config_.guid;
    info.sm_key = 0;
    info.act_count = static_cast<std::uint32_t>(counters_.smps_sent);
    info.priority = config_.priority;
    info.sm_state = ib::sm_state::master;
    info.write_to(reply.data.data());
    std::array<std::uint8_t, ib::kMadSize> mad{};
    reply.write_to(mad.data());
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    const auto n = ib::build_qp0_packet(mad, switch_.lid(), slid, out);
    if (!n) return;
    switch_.send_from_management(bytes(out).first(*n), 0);
    ++counters_.smps_sent;
    ++counters_.sm_info_answered;
}

// A Trap on QP0 (LID-routed to this SM): counted, Trap 256 logged, and
// answered with a TrapRepress so that the port stops repeating it.
void SubnetManager::on_trap(const ib::Smp& smp, std::uint8_t in_port) {
    ++counters_.traps;
    if (smp.attribute_id != ib::smp_attr::notice) return;
    const auto notice = ib::SmpNotice::read_from(smp.data.data());
    // A trap speaks for its issuer: it is taken only from the switch port
    // whose LID it names, as a response only from the port that was asked.
    // Another port of the fabric naming a victim's LID would have the SM
    // log a security event against the victim, and send the victim a
    // TrapRepress for each.
    // A switch's (Trap 128, a link changed): from the switch whose LID it
    // names, through an inter-switch link of this one.
    if (in_port != 0 && in_port < switches_[0].ports.size() &&
        switches_[0].ports[in_port].peer.kind == routing::PortPeer::Kind::link) {
        for (std::uint32_t i = 1; i < switches_.size(); ++i)
            if (switches_[i].reachable && switches_[i].lid != 0 && switches_[i].lid == notice.issuer_lid) {
                on_switch_trap(i, smp, notice);
                return;
            }
        ++counters_.traps_refused;
        return;
    }
    if (in_port == 0) return;  // this SM's own switch: its link events say the same
    const auto it = ports_.find(SmPortKey{in_port});
    if (it == ports_.end() || it->second.lid == 0 || it->second.lid != notice.issuer_lid) {
        ++counters_.traps_refused;
        return;
    }
    SmPort& issuer = it->second;
    if (notice.is_generic && notice.trap_number == ib::trap::bad_m_key) {
        ++counters_.m_key_traps;
        // A port's SMA sends at most one a second; one that sends more
        // would fill the log: the rest are only counted.
        if (issuer.trap_logged && now_ - *issuer.trap_logged < std::chrono::seconds(1)) {
            ++counters_.m_key_traps_unlogged;
        } else {
            issuer.trap_logged = now_;
            const auto t = ib::read_bad_m_key(notice.data_details);
            log("SM: port LID " + hex(notice.issuer_lid, 4) + " GUID " + hex(issuer.port_guid, 16) + " refused " +
                (t.method == ib::method::set ? "a Set " : "a request ") + ib::smp_attribute_name(t.attribute_id) +
                " from LID " + hex(t.lid, 4) + " with a bad M_Key (Trap 256)");
        }
    }
    send_trap_repress(smp, issuer.m_key, notice.issuer_lid);
}

void SubnetManager::send_trap_repress(const ib::Smp& trap, std::uint64_t m_key, std::uint16_t dlid) {
    ib::Smp repress = trap;
    repress.method = ib::method::trap_repress;
    repress.m_key = m_key;
    std::array<std::uint8_t, ib::kMadSize> mad{};
    repress.write_to(mad.data());
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    const auto n = ib::build_qp0_packet(mad, switch_.lid(), dlid, out);
    if (!n) return;
    switch_.send_from_management(bytes(out).first(*n), 0);
    ++counters_.smps_sent;
}

bool SubnetManager::lid_taken(std::uint16_t lid, SmPortKey except_port) const {
    if (lid == switch_.lid()) return true;
    for (const SmSwitch& s : switches_)
        if (s.lid == lid) return true;
    for (const auto& [sp, p] : ports_)
        if (sp != except_port && p.lid == lid && p.phase != SmPortPhase::failed) return true;
    for (const auto& [guid, l] : config_.static_lids)
        if (l == lid) return true;
    return false;
}

bool SubnetManager::given_to_another(std::uint16_t lid, std::uint64_t guid) const {
    const auto it = lid_owners_.find(lid);
    return it != lid_owners_.end() && it->second != guid;
}

std::string SubnetManager::host_of(const SmPort& port) const {
    if (port.sw != 0) return {};  // behind another switch: no address this SM sees
    const auto peer = switch_.peer_of(port.switch_port);
    return peer ? peer->host_key() : std::string();
}

std::uint16_t SubnetManager::lid_left_elsewhere(const SmPort& port) const {
    if (config_.guids_move_hosts) return 0;
    const auto it = given_lids_.find(port.port_guid);
    if (it == given_lids_.end() || it->second.host.empty()) return 0;
    const std::string host = host_of(port);
    return host.empty() || host == it->second.host ? 0 : it->second.lid;
}

void SubnetManager::give(std::uint64_t guid, std::uint16_t lid, const std::string& host) {
    if (const auto it = lid_owners_.find(lid); it != lid_owners_.end() && it->second != guid) {
        given_lids_.erase(it->second);
        lid_owners_.erase(it);
    }
    if (const auto it = given_lids_.find(guid); it != given_lids_.end() && it->second.lid != lid)
        lid_owners_.erase(it->second.lid);
    given_lids_[guid] = GivenLid{.lid = lid, .since = now_, .host = host};
    lid_owners_[lid] = guid;
}

void SubnetManager::mark_away(std::uint64_t guid) {
    if (const auto it = given_lids_.find(guid); it != given_lids_.end()) it->second.since = now_;
}

std::uint16_t SubnetManager::longest_away(const SmPort& port, const std::vector<bool>& held) const {
    std::set<std::uint64_t> here;  // GUIDs known on a switch port: their LIDs stay theirs
    for (const auto& [sp, p] : ports_)
        if (p.port_guid != 0) here.insert(p.port_guid);
    const GivenLid* oldest = nullptr;
    for (const auto& [guid, given] : given_lids_) {
        if (guid == port.port_guid || here.contains(guid) || !ib::is_unicast_lid(given.lid) || held[given.lid])
            continue;
        if (!oldest || given.since < oldest->since) oldest = &given;
    }
    return oldest ? oldest->lid : 0;
}

std::uint16_t SubnetManager::choose_lid(const SmPort& port, std::uint16_t current) {
    if (const auto it = config_.static_lids.find(port.port_guid); it != config_.static_lids.end()) return it->second;
    // Without a fabric key a GUID is only what a datagram says: one that
    // comes back from another host does not get the LID it had (a port
    // could claim the GUID of one that is away, and take its LID, its paths
    // and the traffic meant for it). That LID stays the old host's GUID's
    // until the LIDs run out (longest_away), and this port gets another.
    const std::uint16_t elsewhere = lid_left_elsewhere(port);
    if (elsewhere != 0) {
        ++counters_.lid_host_moves_refused;
        log("SM: " + where(port) + " claims GUID " + hex(port.port_guid, 16) +
            ", whose LID " + hex(elsewhere, 4) + " was given on another host; without a fabric key a GUID does not " +
            "take its LID to another host: it gets a new one");
    }
    // The LID the port says it has is kept (a restarted SM keeps the
    // subnet's addresses), unless this SM gave it to another GUID: a port
    // could claim the LID of one that is away (restarting, say), and take
    // the paths and traffic meant for it, which would find it gone.
    if (ib::is_unicast_lid(current) && current != elsewhere && !lid_taken(current, SmPortKey{port.sw, port.switch_port})) {
        if (!given_to_another(current, port.port_guid)) return current;
        ++counters_.lid_claims_refused;
    }
    if (const auto it = given_lids_.find(port.port_guid);
        it != given_lids_.end() && elsewhere == 0 && !lid_taken(it->second.lid, SmPortKey{port.sw, port.switch_port}))
        return it->second.lid;
    // The lowest LID nobody holds and this SM gave nobody: one pass over
    // the LID space (a check per LID against every port would make a full
    // subnet's new port cost LIDs times ports).
    std::vector<bool> held(std::size_t{ib::kLidUnicastLast} + 1);
    if (ib::is_unicast_lid(switch_.lid())) held[switch_.lid()] = true;
    for (const SmSwitch& s : switches_)
        if (ib::is_unicast_lid(s.lid)) held[s.lid] = true;
    for (const auto& [sp, p] : ports_)
        if (sp != SmPortKey{port.sw, port.switch_port} && p.phase != SmPortPhase::failed && ib::is_unicast_lid(p.lid)) held[p.lid] = true;
    for (const auto& [guid, l] : config_.static_lids)
        if (ib::is_unicast_lid(l)) held[l] = true;
    if (elsewhere != 0) held[elsewhere] = true;  // the old host's
    for (std::uint32_t lid = ib::kLidUnicastFirst; lid <= ib::kLidUnicastLast; ++lid)
        if (!held[lid] && !given_to_another(static_cast<std::uint16_t>(lid), port.port_guid))
            return static_cast<std::uint16_t>(lid);
    // Every LID is held or given: the GUID away longest gives its LID up
    // (it gets another when it comes back).
    const std::uint16_t lid = longest_away(port, held);
    if (lid != 0) {
        ++counters_.lids_reclaimed;
        log("SM: no free LID for port GUID " + hex(port.port_guid, 16) + "; it gets " + hex(lid, 4) +
            ", given before to GUID " + hex(lid_owners_.at(lid), 16) + ", away longest");
    }
    return lid;
}

void visit(const SmCounters& c, CounterSink& out) {
    out.counter("smps_sent", c.smps_sent);
    out.counter("responses", c.responses);
    out.counter("error_responses", c.error_responses);
    out.counter("timeouts", c.timeouts);
    out.counter("unexpected_responses", c.unexpected_responses);
    out.counter("ports_configured", c.ports_configured);
    out.counter("ports_lost", c.ports_lost);
    out.counter("traps", c.traps);
    out.counter("m_key_traps", c.m_key_traps);
    out.counter("traps_refused", c.traps_refused);
    out.counter("m_key_traps_unlogged", c.m_key_traps_unlogged);
    out.counter("lid_claims_refused", c.lid_claims_refused);
    out.counter("lid_host_moves_refused", c.lid_host_moves_refused);
    out.counter("lids_reclaimed", c.lids_reclaimed);
    out.counter("no_lid", c.no_lid);
    out.counter("sets_unanswered", c.sets_unanswered);
    out.counter("sm_info_answered", c.sm_info_answered);
    out.counter("switch_smps", c.switch_smps);
    out.counter("switch_smp_errors", c.switch_smp_errors);
    out.counter("requests_refused", c.requests_refused);
    out.counter("duplicate_guids", c.duplicate_guids);
    out.counter("switches_found", c.switches_found);
    out.counter("switches_lost", c.switches_lost);
    out.counter("switch_timeouts", c.switch_timeouts);
    out.counter("switches_refused", c.switches_refused);
    out.counter("isls_activated", c.isls_activated);
    out.counter("scans", c.scans);
    out.counter("routings", c.routings);
    out.counter("routing_failures", c.routing_failures);
    out.counter("lft_blocks_set", c.lft_blocks_set);
    out.counter("mft_blocks_set", c.mft_blocks_set);
}

const char* to_string(SmPortPhase p) {
    switch (p) {
        case SmPortPhase::node_info: return "node_info";
        case SmPortPhase::node_description: return "node_description";
        case SmPortPhase::port_info: return "port_info";
        case SmPortPhase::set_pkeys: return "set_pkeys";
        case SmPortPhase::set_port_info: return "set_port_info";
        case SmPortPhase::activate: return "activate";
        case SmPortPhase::active: return "active";
        case SmPortPhase::failed: return "failed";
    }
    return "?";
}

}  // namespace ipoibd::fabric
