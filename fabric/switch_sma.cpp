// The soft switch's subnet management agent (switch.h, sma_answer): what the
// SMA on a real switch's port 0 answers (IBA vol. 1 14.2.5). The forwarding
// tables it gets and sets are the ones the switch forwards by.
//
// Choices where the spec leaves room (docs/smp.md):
//  - external ports: PortState Down while unplugged, Init when the link
//    comes up; a Set may move Init -> Armed -> Active, or Down (the link
//    retrains: Init again); Active is what the switch's admission counts as
//    "made ACTIVE by the SM"; their LID, SM LID and M_Key fields are 0;
//  - port 0 is always Active/LinkUp and carries the switch's LID, SM LID,
//    subnet prefix and M_Key; its M_Key is checked as a CA port's is (Gets
//    pass at M_KeyProtectBits 0 and 1, Sets need the key);
//  - one P_Key block (32 entries) per port; LinearFDBCap 0xC000 (every
//    unicast LID), MulticastFDBCap 0x4000 (every MLID);
//  - partition enforcement, inbound and outbound, on the external ports
//    whose PortInfo enables it, against their P_KeyTable (switch.cpp).
#include <algorithm>

#include "fabric/switch.h"

#include "common/byte_io.h"
#include "transport/wire/mad.h"
#include "transport/wire/smp_dr.h"

namespace ipoibd::fabric {

namespace {

namespace ps = ib::port_state;
namespace pps = ib::port_physical_state;

constexpr std::uint16_t kLinearFdbCap = 0xC000;
constexpr std::uint16_t kMulticastFdbCap = 0x4000;
constexpr std::uint8_t kNoRoute = 0xFF;
constexpr std::uint8_t kLifeTimeValue = 18;
constexpr std::uint8_t kRespTimeValue = 16;

template <class Attribute>
std::uint16_t reply_with(const Attribute& attribute, ib::SmpData& data) {
    return ib::put_attribute(attribute, data) ? std::uint16_t{0} : ib::mad_status::invalid_attr_or_modifier;
}

}  // namespace

void Switch::init_sma() {
    sma_ports_.assign(std::size_t{config_.num_ports} + 1, SmaPort{});
    for (std::size_t p = 0; p < sma_ports_.size(); ++p) {
        ib::PortInfo& pi = sma_ports_[p].info;
        pi.local_port_num = static_cast<std::uint8_t>(p);
        pi.link_width_enabled = ib::link_width::x1 | ib::link_width::x4;
        pi.link_width_supported = ib::link_width::x1 | ib::link_width::x4;
        pi.link_width_active = ib::link_width::x4;
        pi.link_speed_supported = ib::link_speed::sdr | ib::link_speed::ddr | ib::link_speed::qdr;
        pi.link_speed_enabled = pi.link_speed_supported;
        pi.link_speed_active = ib::link_speed::qdr;
        pi.port_state = p == 0 ? ps::active : ps::down;
        pi.port_physical_state = p == 0 ? pps::link_up : pps::polling;
        pi.link_down_default_state = pps::polling;
        pi.mtu_cap = static_cast<std::uint8_t>(ib::Mtu::mtu4096);
        pi.neighbor_mtu = pi.mtu_cap;
        pi.vl_cap = 1;
        pi.operational_vls = 1;
        pi.vl_high_limit = 0;
        pi.init_type_reply = 0;
        pi.resp_time_value = kRespTimeValue;
        sma_ports_[p].p_keys.assign(kPartitionCap, 0);
        sma_ports_[p].p_keys[0] = ib::kPKeyDefault;
    }
    ib::PortInfo& p0 = sma_ports_[0].info;
    p0.lid = config_.lid;
    p0.master_sm_lid = config_.lid;
    p0.gid_prefix = 0xFE80000000000000ULL;
    p0.guid_cap = 1;
    p0.capability_mask = ib::port_capability::is_system_image_guid_supported;
    p0.subnet_timeout = 18;
    switch_info_.life_time_value = kLifeTimeValue;
}

void Switch::set_sm_present(bool present) {
    ib::PortInfo& p0 = sma_ports_[0].info;
    if (present)
        p0.capability_mask |= ib::port_capability::is_sm;
    else
        p0.capability_mask &= ~ib::port_capability::is_sm;
}

ib::NodeInfo Switch::sma_node_info(std::uint8_t in_port) const {
    ib::NodeInfo n;
    n.node_type = ib::node_type::switch_node;
    n.num_ports = config_.num_ports;
    n.system_image_guid = config_.guid;
    n.node_guid = config_.guid;
    n.port_guid = config_.guid;  // a switch's port GUID is port 0's
    n.partition_cap = static_cast<std::uint16_t>(kPartitionCap);
    n.local_port_num = in_port;
    return n;
}

ib::SwitchInfo Switch::sma_switch_info() const {
    ib::SwitchInfo s = switch_info_;
    s.linear_fdb_cap = kLinearFdbCap;
    s.random_fdb_cap = 0;
    s.multicast_fdb_cap = kMulticastFdbCap;
    if (s.linear_fdb_top == 0 && !lft_.empty()) s.linear_fdb_top = lft_.rbegin()->first;
    s.port_state_change = port_state_change_;
    s.lids_per_port = 0;
    s.partition_enforcement_cap = static_cast<std::uint16_t>(kPartitionCap);
    s.inbound_enforcement_cap = true;
    s.outbound_enforcement_cap = true;
    s.filter_raw_inbound_cap = false;
    s.filter_raw_outbound_cap = false;
    s.enhanced_port0 = false;
    return s;
}

ib::PortInfo Switch::sma_port_info(std::uint8_t port) const {
    ib::PortInfo pi = sma_ports_[port].info;
    if (port == 0) return pi;
    const bool up = port_up(port);
    pi.port_physical_state = up ? pps::link_up : pps::polling;
    if (!up) pi.port_state = ps::down;
    return pi;
}

std::optional<ib::Smp> Switch::sma_answer(const ib::Smp& request, std::uint8_t in_port) {
    const bool response_or_trap = (request.method & ib::method::response_bit) != 0 ||
                                  request.method == ib::method::trap || request.method == ib::method::trap_repress;
    if (response_or_trap) {
        count(SwitchDrop::sma_dropped);
        return std::nullopt;
    }
    ib::Smp reply = request;
    reply.method = ib::method::get_resp;
    reply.status = 0;
    const ib::PortInfo& p0 = sma_ports_[0].info;
    const bool has_key = p0.m_key == 0 || request.m_key == p0.m_key;
    if (request.base_version != ib::kMadBaseVersion || request.class_version != ib::class_version::subn) {
        reply.status = ib::mad_status::bad_version;
    } else if (!has_key && (request.method != ib::method::get || p0.m_key_protect_bits >= 2)) {
        // M_Key check (14.2.4): dropped, no answer, counted in M_KeyViolations.
        if (sma_ports_[0].info.m_key_violations < 0xFFFF) ++sma_ports_[0].info.m_key_violations;
        count(SwitchDrop::sma_dropped);
        return std::nullopt;
    } else if (request.method == ib::method::get) {
        reply.status = sma_get(request, reply.data, in_port);
        if (reply.status == 0 && request.attribute_id == ib::smp_attr::port_info && !has_key) {
            auto pi = ib::PortInfo::read_from(reply.data.data());
            pi.m_key = 0;  // protect bits 1: a Get without the key shows 0
            (void)reply_with(pi, reply.data);
        }
    } else if (request.method == ib::method::set) {
        reply.status = sma_set(request, reply.data, in_port);
    } else {
        reply.status = ib::mad_status::method_not_supported;
    }
    if (reply.status != 0) {
        reply.data = request.data;
        ++counters_.sma_error_responses;
    }
    ++counters_.sma_responses;
    return reply;
}

std::uint16_t Switch::sma_get(const ib::Smp& request, ib::SmpData& data, std::uint8_t in_port) const {
    const std::uint32_t mod = request.attribute_modifier;
    switch (request.attribute_id) {
        case ib::smp_attr::node_info: return reply_with(sma_node_info(in_port), data);
        case ib::smp_attr::node_description: {
            ib::NodeDescription d;
            d.text = config_.description;
            return reply_with(d, data);
        }
        case ib::smp_attr::switch_info: return reply_with(sma_switch_info(), data);
        case ib::smp_attr::port_info: {
            const std::uint32_t port = mod & ib::kPortInfoPortMask;
            if (port > config_.num_ports) return ib::mad_status::invalid_attr_or_modifier;
            ib::PortInfo pi = sma_port_info(static_cast<std::uint8_t>(port));
            pi.local_port_num = in_port;  // a switch reports the port the SMP came in on
            return reply_with(pi, data);
        }
        case ib::smp_attr::p_key_table: {
            const std::uint32_t port = mod >> 16, block = mod & 0xFFFF;
            if (port > config_.num_ports || block != 0) return ib::mad_status::invalid_attr_or_modifier;
            ib::PKeyTableBlock b;
            std::copy_n(sma_ports_[port].p_keys.begin(), b.entries, b.p_keys.begin());
            return reply_with(b, data);
        }
        case ib::smp_attr::linear_forwarding_table: {
            if (mod >= kLinearFdbCap / ib::LinearForwardingTableBlock::entries)
                return ib::mad_status::invalid_attr_or_modifier;
            ib::LinearForwardingTableBlock b;
            for (std::size_t i = 0; i < b.entries; ++i) {
                const auto entry = static_cast<std::uint16_t>(mod * b.entries + i);
                const auto it = lft_.find(entry);
                b.ports[i] = entry == lid() ? std::uint8_t{0} : it == lft_.end() ? kNoRoute : it->second;
            }
            return reply_with(b, data);
        }
        case ib::smp_attr::multicast_forwarding_table: {
            const std::uint32_t block = mod & ib::kMftBlockMask, position = mod >> ib::kMftPositionShift;
            if (block >= kMulticastFdbCap / ib::MulticastForwardingTableBlock::entries ||
                16 * position > config_.num_ports)
                return ib::mad_status::invalid_attr_or_modifier;
            ib::MulticastForwardingTableBlock b;
            for (std::size_t i = 0; i < b.entries; ++i) {
                const auto mlid = static_cast<std::uint16_t>(ib::kLidMulticastFirst + block * b.entries + i);
                const auto it = mft_.find(mlid);
                if (it == mft_.end()) continue;
                for (std::uint8_t p : it->second)
                    if (p / 16 == position) b.port_masks[i] |= static_cast<std::uint16_t>(1u << (p % 16));
            }
            return reply_with(b, data);
        }
        default: return ib::mad_status::method_attr_not_supported;
    }
}

std::uint16_t Switch::sma_set(const ib::Smp& request, ib::SmpData& data, std::uint8_t in_port) {
    const std::uint32_t mod = request.attribute_modifier;
    switch (request.attribute_id) {
        case ib::smp_attr::switch_info: {
            const auto s = ib::SwitchInfo::read_from(request.data.data());
            switch_info_.linear_fdb_top = s.linear_fdb_top;
            switch_info_.default_port = s.default_port;
            switch_info_.default_multicast_primary_port = s.default_multicast_primary_port;
            switch_info_.default_multicast_not_primary_port = s.default_multicast_not_primary_port;
            switch_info_.life_time_value = s.life_time_value;
            switch_info_.multicast_fdb_top = s.multicast_fdb_top;
            if (s.port_state_change) port_state_change_ = false;  // write 1 to clear
            return reply_with(sma_switch_info(), data);
        }
        case ib::smp_attr::port_info: {
            const std::uint32_t port = mod & ib::kPortInfoPortMask;
            if (port > config_.num_ports) return ib::mad_status::invalid_attr_or_modifier;
            const auto requested = ib::PortInfo::read_from(request.data.data());
            if (const std::uint16_t status = set_port_info(static_cast<std::uint8_t>(port), requested); status != 0)
                return status;
            ib::PortInfo pi = sma_port_info(static_cast<std::uint8_t>(port));
            pi.local_port_num = in_port;
            return reply_with(pi, data);
        }
        case ib::smp_attr::p_key_table: {
            const std::uint32_t port = mod >> 16, block = mod & 0xFFFF;
            if (port > config_.num_ports || block != 0) return ib::mad_status::invalid_attr_or_modifier;
            const auto b = ib::PKeyTableBlock::read_from(request.data.data());
            if (port != 0 && !std::equal(b.p_keys.begin(), b.p_keys.begin() + b.entries, sma_ports_[port].p_keys.begin()))
                reset_cut_through(static_cast<std::uint8_t>(port));  // the permits name P_Keys
            std::copy_n(b.p_keys.begin(), b.entries, sma_ports_[port].p_keys.begin());
            return reply_with(b, data);
        }
        case ib::smp_attr::linear_forwarding_table: {
            if (mod >= kLinearFdbCap / ib::LinearForwardingTableBlock::entries)
                return ib::mad_status::invalid_attr_or_modifier;
            const auto b = ib::LinearForwardingTableBlock::read_from(request.data.data());
            for (std::size_t i = 0; i < b.entries; ++i) {
                const auto entry = static_cast<std::uint16_t>(mod * b.entries + i);
                if (entry == 0 || entry == lid()) continue;  // LID 0 is reserved; the switch's own is port 0
                const std::uint8_t port = b.ports[i];
                const auto it = lft_.find(entry);
                if (port == 0 || port > config_.num_ports) {
                    if (it != lft_.end()) clear_unicast_route(entry);
                } else if (it == lft_.end() || it->second != port) {
                    set_unicast_route(entry, port);
                }
            }
            return sma_get(request, data, in_port);
        }
        case ib::smp_attr::multicast_forwarding_table: {
            const std::uint32_t block = mod & ib::kMftBlockMask, position = mod >> ib::kMftPositionShift;
            if (block >= kMulticastFdbCap / ib::MulticastForwardingTableBlock::entries ||
                16 * position > config_.num_ports)
                return ib::mad_status::invalid_attr_or_modifier;
            const auto b = ib::MulticastForwardingTableBlock::read_from(request.data.data());
            for (std::size_t i = 0; i < b.entries; ++i) {
                const auto mlid = static_cast<std::uint16_t>(ib::kLidMulticastFirst + block * b.entries + i);
                auto it = mft_.find(mlid);
                std::set<std::uint8_t> ports = it == mft_.end() ? std::set<std::uint8_t>{} : it->second;
                std::erase_if(ports, [&](std::uint8_t p) { return p / 16 == position; });
                for (unsigned bit = 0; bit < 16; ++bit) {
                    const unsigned p = 16 * position + bit;
                    // Port 0 (the management port) takes no multicast here.
                    if ((b.port_masks[i] >> bit & 1u) && p >= 1 && p <= config_.num_ports)
                        ports.insert(static_cast<std::uint8_t>(p));
                }
                set_multicast_ports(mlid, std::move(ports));
            }
            return sma_get(request, data, in_port);
        }
        default: return ib::mad_status::method_attr_not_supported;
    }
}

std::uint16_t Switch::set_port_info(std::uint8_t port, const ib::PortInfo& requested) {
    ib::PortInfo& pi = sma_ports_[port].info;
    if (port == 0) {
        if (requested.lid != 0 && !ib::is_unicast_lid(requested.lid)) return ib::mad_status::invalid_attr_or_modifier;
        if (requested.lmc > 7) return ib::mad_status::invalid_attr_or_modifier;
        pi.lid = requested.lid != 0 ? requested.lid : pi.lid;
        pi.lmc = requested.lmc;
        pi.master_sm_lid = requested.master_sm_lid;
        pi.master_sm_sl = requested.master_sm_sl;
        pi.gid_prefix = requested.gid_prefix;
        pi.m_key = requested.m_key;
        pi.m_key_protect_bits = requested.m_key_protect_bits;
        pi.m_key_lease_period = requested.m_key_lease_period;
        pi.subnet_timeout = requested.subnet_timeout;
        return 0;
    }
    // External ports: the link state machine, the MTU, the VLs.
    const std::uint8_t now = sma_port_info(port).port_state;
    std::uint8_t next = now;
    switch (requested.port_state) {
        case ps::no_change: break;
        case ps::down: next = port_up(port) ? ps::init : ps::down; break;  // the link retrains
        case ps::armed:
            if (now != ps::init && now != ps::armed) return ib::mad_status::invalid_attr_or_modifier;
            next = ps::armed;
            break;
        case ps::active:
            if (now != ps::armed && now != ps::active) return ib::mad_status::invalid_attr_or_modifier;
            next = ps::active;
            break;
        default: return ib::mad_status::invalid_attr_or_modifier;
    }
    if (requested.neighbor_mtu != 0 &&
        (requested.neighbor_mtu > pi.mtu_cap || requested.neighbor_mtu < static_cast<std::uint8_t>(ib::Mtu::mtu256)))
        return ib::mad_status::invalid_attr_or_modifier;
    if (requested.operational_vls > pi.vl_cap) return ib::mad_status::invalid_attr_or_modifier;
    if (requested.neighbor_mtu != 0) pi.neighbor_mtu = requested.neighbor_mtu;
    if (requested.operational_vls != 0) pi.operational_vls = requested.operational_vls;
    if (pi.partition_enforcement_inbound != requested.partition_enforcement_inbound ||
        pi.partition_enforcement_outbound != requested.partition_enforcement_outbound)
        reset_cut_through(port);  // the permits say whether P_Keys are checked
    pi.partition_enforcement_inbound = requested.partition_enforcement_inbound;
    pi.partition_enforcement_outbound = requested.partition_enforcement_outbound;
    if (next != now) {
        pi.port_state = next;
        // PortStateChange marks link changes (a retrain here), not the SM's
        // own Armed/Active (OpenSM's light sweep would turn heavy each time).
        if (next == ps::init || next == ps::down) port_state_changed();
        set_port_active(port, next == ps::active);
    }
    return 0;
}

std::optional<ib::Smp> Switch::local_smp(ib::Smp smp) {
    // The SM's own switch: HopCount 0, delivered by the requester's rule.
    auto reply = sma_answer(smp, 0);
    if (!reply) return std::nullopt;
    reply->direction = true;
    if (reply->is_directed_route()) (void)ib::dr_send_response(*reply, config_.num_ports, lid());
    return reply;
}

void Switch::port_state_changed() {
    port_state_change_ = true;
    trap_pending_ = true;
    send_link_state_trap();
}

// Trap 128 (IBA 14.2.5.1: "link state of at least one port of switch at
// LIDADDR has changed"; urgent, from a switch) to the master SM that port
// 0's PortInfo names, so that it sweeps now rather than at its next light
// sweep (OpenSM forces a heavy sweep on it). One for every change, not
// only when PortStateChange goes from 0 to 1: the SM clears the bit after
// its discovery, and a link that came up between its reading this switch
// and the clear would otherwise wait for a change after it (seen: a host
// plugged just after another never configured). At most one each
// kTrapInterval: a change sooner is told that long after the last trap
// (tick), so the last change is always followed by one. None before an SM
// gave the switch its LID and its own, nor to an SM on the switch's own
// port 0 (it hears of its links directly).
void Switch::send_link_state_trap() {
    if (!trap_pending_) return;
    const ib::PortInfo& p0 = sma_ports_[0].info;
    if (p0.master_sm_lid == 0 || p0.lid == 0 || p0.master_sm_lid == p0.lid) {
        trap_pending_ = false;  // nobody to tell: an SM that comes reads PortStateChange
        return;
    }
    if (last_trap_ && now_ - *last_trap_ < kTrapInterval) return;  // tick() sends it
    trap_pending_ = false;
    last_trap_ = now_;
    ib::SmpNotice notice;
    notice.type = ib::trap::type_urgent;
    notice.producer_type = ib::trap::producer_switch;
    notice.trap_number = ib::trap::link_state_change;
    notice.issuer_lid = p0.lid;
    store_be16(notice.data_details.data(), p0.lid);  // LIDADDR: this switch
    ib::Smp trap;
    trap.mgmt_class = ib::mgmt_class::subn_lid_routed;
    trap.method = ib::method::trap;
    trap.attribute_id = ib::smp_attr::notice;
    trap.transaction_id = next_trap_tid_++;
    trap.m_key = p0.m_key;
    notice.write_to(trap.data.data());
    std::array<std::uint8_t, ib::kMadSize> mad{};
    trap.write_to(mad.data());
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    const auto n = ib::build_qp0_packet(mad, p0.lid, p0.master_sm_lid, out);
    if (!n) return;
    ++counters_.traps_sent;
    send_from_management(bytes(out).first(*n), 0);
}

void Switch::send_sma_reply(ib::Smp reply, const ib::Packet& request) {
    std::uint16_t dlid = request.lrh.slid;
    std::optional<std::uint8_t> out_port;
    if (reply.is_directed_route()) {
        reply.direction = true;
        const auto d = ib::dr_send_response(reply, config_.num_ports, request.lrh.slid);
        switch (d.action) {
            case ib::DrAction::discard:
            case ib::DrAction::deliver:  // HopCount 0 comes only from this switch's SM (local_smp)
                count(SwitchDrop::dr_discarded);
                return;
            case ib::DrAction::send_on_port:
                out_port = d.port;
                dlid = ib::kLidPermissive;
                break;
            case ib::DrAction::send_lid_routed: dlid = d.lid; break;
        }
    }
    std::array<std::uint8_t, ib::kMadSize> mad{};
    reply.write_to(mad.data());
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    // Before an SM gave the switch a LID (--sm=no), its SMPs come from the
    // permissive LID, as a CA's SMA answers before it has one.
    const auto n = ib::build_qp0_packet(mad, lid() != 0 ? lid() : ib::kLidPermissive, dlid, out);
    if (!n) return;
    send_from_management(bytes(out).first(*n), out_port.value_or(0));
}

}  // namespace ipoibd::fabric
