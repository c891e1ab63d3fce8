#include "transport/wire/smp.h"

#include "transport/wire/packet.h"

#include <algorithm>
#include <cstring>

namespace ipoibd::ib {

// ---------------------------------------------------------------------------
// The SMP

void Smp::write_to(std::uint8_t* p) const {
    std::memset(p, 0, size);
    MadHeader h;
    h.base_version = base_version;
    h.mgmt_class = mgmt_class;
    h.class_version = class_version;
    h.method = method;
    h.status = status;
    h.transaction_id = transaction_id;
    h.attribute_id = attribute_id;
    h.attribute_modifier = attribute_modifier;
    if (is_directed_route()) {
        h.status = static_cast<std::uint16_t>((direction ? kSmpDirectionBit : 0) | (status & kSmpDrStatusMask));
        h.class_specific = static_cast<std::uint16_t>((hop_pointer << 8) | hop_count);
    }
    h.write_to(p);
    store_be64(p + smp_offset::m_key, m_key);
    std::memcpy(p + smp_offset::data, data.data(), data.size());
    if (!is_directed_route()) return;
    store_be16(p + smp_offset::dr_slid, dr_slid);
    store_be16(p + smp_offset::dr_dlid, dr_dlid);
    std::memcpy(p + smp_offset::initial_path, initial_path.data(), initial_path.size());
    std::memcpy(p + smp_offset::return_path, return_path.data(), return_path.size());
}

Smp Smp::read_from(const std::uint8_t* p) {
    const MadHeader h = MadHeader::read_from(p);
    Smp s;
    s.base_version = h.base_version;
    s.mgmt_class = h.mgmt_class;
    s.class_version = h.class_version;
    s.method = h.method;
    s.status = h.status;
    s.transaction_id = h.transaction_id;
    s.attribute_id = h.attribute_id;
    s.attribute_modifier = h.attribute_modifier;
    s.m_key = load_be64(p + smp_offset::m_key);
    std::memcpy(s.data.data(), p + smp_offset::data, s.data.size());
    if (!s.is_directed_route()) return s;
    s.status = h.status & kSmpDrStatusMask;
    s.direction = (h.status & kSmpDirectionBit) != 0;
    s.hop_pointer = p[smp_offset::hop_pointer];
    s.hop_count = p[smp_offset::hop_count];
    s.dr_slid = load_be16(p + smp_offset::dr_slid);
    s.dr_dlid = load_be16(p + smp_offset::dr_dlid);
    std::memcpy(s.initial_path.data(), p + smp_offset::initial_path, s.initial_path.size());
    std::memcpy(s.return_path.data(), p + smp_offset::return_path, s.return_path.size());
    return s;
}

expected<Smp, SmpError> decode_smp(bytes mad) {
    if (mad.size() != Smp::size) return unexpected(SmpError::wrong_size);
    const std::uint8_t mgmt = mad[1];
    if (mgmt != mgmt_class::subn_lid_routed && mgmt != mgmt_class::subn_directed_route)
        return unexpected(SmpError::not_smp_class);
    return Smp::read_from(mad.data());
}

const char* to_string(SmpError e) {
    switch (e) {
        case SmpError::wrong_size: return "SMP is not 256 bytes";
        case SmpError::not_smp_class: return "MgmtClass is not a subnet management class";
    }
    return "unknown";
}

const char* smp_attribute_name(std::uint16_t attribute_id) {
    switch (attribute_id) {
        case smp_attr::notice: return "Notice";
        case smp_attr::node_description: return "NodeDescription";
        case smp_attr::node_info: return "NodeInfo";
        case smp_attr::switch_info: return "SwitchInfo";
        case smp_attr::guid_info: return "GUIDInfo";
        case smp_attr::port_info: return "PortInfo";
        case smp_attr::p_key_table: return "P_KeyTable";
        case smp_attr::sl_to_vl_mapping_table: return "SLtoVLMappingTable";
        case smp_attr::vl_arbitration_table: return "VLArbitrationTable";
        case smp_attr::linear_forwarding_table: return "LinearForwardingTable";
        case smp_attr::random_forwarding_table: return "RandomForwardingTable";
        case smp_attr::multicast_forwarding_table: return "MulticastForwardingTable";
        case smp_attr::sm_info: return "SMInfo";
        case smp_attr::vendor_diag: return "VendorDiag";
        case smp_attr::led_info: return "LedInfo";
        default: return "unknown attribute";
    }
}

// ---------------------------------------------------------------------------
// NodeInfo, NodeDescription

void NodeInfo::write_to(std::uint8_t* p) const {
    p[0] = base_version;
    p[1] = class_version;
    p[2] = node_type;
    p[3] = num_ports;
    store_be64(p + 4, system_image_guid);
    store_be64(p + 12, node_guid);
    store_be64(p + 20, port_guid);
    store_be16(p + 28, partition_cap);
    store_be16(p + 30, device_id);
    store_be32(p + 32, revision);
    p[36] = local_port_num;
    store_be24(p + 37, vendor_id);
}

NodeInfo NodeInfo::read_from(const std::uint8_t* p) {
    NodeInfo n;
    n.base_version = p[0];
    n.class_version = p[1];
    n.node_type = p[2];
    n.num_ports = p[3];
    n.system_image_guid = load_be64(p + 4);
    n.node_guid = load_be64(p + 12);
    n.port_guid = load_be64(p + 20);
    n.partition_cap = load_be16(p + 28);
    n.device_id = load_be16(p + 30);
    n.revision = load_be32(p + 32);
    n.local_port_num = p[36];
    n.vendor_id = load_be24(p + 37);
    return n;
}

void NodeDescription::write_to(std::uint8_t* p) const {
    std::memset(p, 0, size);
    std::memcpy(p, text.data(), std::min(text.size(), size));
}

NodeDescription NodeDescription::read_from(const std::uint8_t* p) {
    const auto* end = std::find(p, p + size, std::uint8_t{0});
    NodeDescription d;
    d.text.assign(p, end);
    return d;
}

// ---------------------------------------------------------------------------
// PortInfo: one function per wire region, one line per field in wire order.

namespace {

std::uint8_t nibbles(std::uint8_t high, std::uint8_t low) {
    return static_cast<std::uint8_t>((high << 4) | (low & 0xF));
}
std::uint8_t high_nibble(std::uint8_t b) { return static_cast<std::uint8_t>(b >> 4); }
std::uint8_t low_nibble(std::uint8_t b) { return static_cast<std::uint8_t>(b & 0xF); }
std::uint8_t bit(bool set, unsigned position) { return static_cast<std::uint8_t>(set ? 1u << position : 0u); }

// Bytes 0-31: keys, LIDs, capabilities, widths.
void write_port_identity(const PortInfo& pi, std::uint8_t* p) {
    store_be64(p + 0, pi.m_key);
    store_be64(p + 8, pi.gid_prefix);
    store_be16(p + 16, pi.lid);
    store_be16(p + 18, pi.master_sm_lid);
    store_be32(p + 20, pi.capability_mask);
    store_be16(p + 24, pi.diag_code);
    store_be16(p + 26, pi.m_key_lease_period);
    p[28] = pi.local_port_num;
    p[29] = pi.link_width_enabled;
    p[30] = pi.link_width_supported;
    p[31] = pi.link_width_active;
}

// Bytes 32-43: the packed state, speed, MTU and VL fields.
void write_port_link(const PortInfo& pi, std::uint8_t* p) {
    p[32] = nibbles(pi.link_speed_supported, pi.port_state);
    p[33] = nibbles(pi.port_physical_state, pi.link_down_default_state);
    p[34] = static_cast<std::uint8_t>((pi.m_key_protect_bits << 6) | (pi.lmc & 0x7));
    p[35] = nibbles(pi.link_speed_active, pi.link_speed_enabled);
    p[36] = nibbles(pi.neighbor_mtu, pi.master_sm_sl);
    p[37] = nibbles(pi.vl_cap, pi.init_type);
    p[38] = pi.vl_high_limit;
    p[39] = pi.vl_arbitration_high_cap;
    p[40] = pi.vl_arbitration_low_cap;
    p[41] = nibbles(pi.init_type_reply, pi.mtu_cap);
    p[42] = static_cast<std::uint8_t>((pi.vl_stall_count << 5) | (pi.hoq_life & 0x1F));
    p[43] = static_cast<std::uint8_t>((pi.operational_vls << 4) | bit(pi.partition_enforcement_inbound, 3) |
                                      bit(pi.partition_enforcement_outbound, 2) | bit(pi.filter_raw_inbound, 1) |
                                      bit(pi.filter_raw_outbound, 0));
}

// Bytes 44-63: violation counters, timers, error thresholds, extended speeds.
void write_port_counters(const PortInfo& pi, std::uint8_t* p) {
    store_be16(p + 44, pi.m_key_violations);
    store_be16(p + 46, pi.p_key_violations);
    store_be16(p + 48, pi.q_key_violations);
    p[50] = pi.guid_cap;
    p[51] = static_cast<std::uint8_t>(bit(pi.client_reregister, 7) |
                                      (pi.multicast_pkey_trap_suppression_enabled << 5) | pi.subnet_timeout);
    p[52] = pi.resp_time_value;
    p[53] = nibbles(pi.local_phy_errors, pi.overrun_errors);
    store_be16(p + 54, pi.max_credit_hint);
    store_be32(p + 56, pi.link_round_trip_latency);  // byte 56 is Reserved: the value has 24 bits
    store_be16(p + 60, pi.capability_mask2);
    p[62] = nibbles(pi.link_speed_ext_active, pi.link_speed_ext_supported);
    p[63] = pi.link_speed_ext_enabled;
}

void read_port_identity(PortInfo& pi, const std::uint8_t* p) {
    pi.m_key = load_be64(p + 0);
    pi.gid_prefix = load_be64(p + 8);
    pi.lid = load_be16(p + 16);
    pi.master_sm_lid = load_be16(p + 18);
    pi.capability_mask = load_be32(p + 20);
    pi.diag_code = load_be16(p + 24);
    pi.m_key_lease_period = load_be16(p + 26);
    pi.local_port_num = p[28];
    pi.link_width_enabled = p[29];
    pi.link_width_supported = p[30];
    pi.link_width_active = p[31];
}

void read_port_link(PortInfo& pi, const std::uint8_t* p) {
    pi.link_speed_supported = high_nibble(p[32]);
    pi.port_state = low_nibble(p[32]);
    pi.port_physical_state = high_nibble(p[33]);
    pi.link_down_default_state = low_nibble(p[33]);
    pi.m_key_protect_bits = static_cast<std::uint8_t>(p[34] >> 6);
    pi.lmc = static_cast<std::uint8_t>(p[34] & 0x7);
    pi.link_speed_active = high_nibble(p[35]);
    pi.link_speed_enabled = low_nibble(p[35]);
    pi.neighbor_mtu = high_nibble(p[36]);
    pi.master_sm_sl = low_nibble(p[36]);
    pi.vl_cap = high_nibble(p[37]);
    pi.init_type = low_nibble(p[37]);
    pi.vl_high_limit = p[38];
    pi.vl_arbitration_high_cap = p[39];
    pi.vl_arbitration_low_cap = p[40];
    pi.init_type_reply = high_nibble(p[41]);
    pi.mtu_cap = low_nibble(p[41]);
    pi.vl_stall_count = static_cast<std::uint8_t>(p[42] >> 5);
    pi.hoq_life = static_cast<std::uint8_t>(p[42] & 0x1F);
    pi.operational_vls = high_nibble(p[43]);
    pi.partition_enforcement_inbound = (p[43] & 0x08) != 0;
    pi.partition_enforcement_outbound = (p[43] & 0x04) != 0;
    pi.filter_raw_inbound = (p[43] & 0x02) != 0;
    pi.filter_raw_outbound = (p[43] & 0x01) != 0;
}

void read_port_counters(PortInfo& pi, const std::uint8_t* p) {
    pi.m_key_violations = load_be16(p + 44);
    pi.p_key_violations = load_be16(p + 46);
    pi.q_key_violations = load_be16(p + 48);
    pi.guid_cap = p[50];
    pi.client_reregister = (p[51] & 0x80) != 0;
    pi.multicast_pkey_trap_suppression_enabled = static_cast<std::uint8_t>((p[51] >> 5) & 0x3);
    pi.subnet_timeout = static_cast<std::uint8_t>(p[51] & 0x1F);
    pi.resp_time_value = static_cast<std::uint8_t>(p[52] & 0x1F);
    pi.local_phy_errors = high_nibble(p[53]);
    pi.overrun_errors = low_nibble(p[53]);
    pi.max_credit_hint = load_be16(p + 54);
    pi.link_round_trip_latency = load_be24(p + 57);
    pi.capability_mask2 = load_be16(p + 60);
    pi.link_speed_ext_active = high_nibble(p[62]);
    pi.link_speed_ext_supported = low_nibble(p[62]);
    pi.link_speed_ext_enabled = static_cast<std::uint8_t>(p[63] & 0x1F);
}

}  // namespace

bool PortInfo::fields_in_range() const {
    const std::uint8_t nibble_fields[] = {link_speed_supported, port_state, port_physical_state,
                                          link_down_default_state, link_speed_active, link_speed_enabled,
                                          neighbor_mtu, master_sm_sl, vl_cap, init_type, init_type_reply,
                                          mtu_cap, operational_vls, local_phy_errors, overrun_errors,
                                          link_speed_ext_active, link_speed_ext_supported};
    for (std::uint8_t v : nibble_fields)
        if (v > 0xF) return false;
    return m_key_protect_bits <= 3 && lmc <= 7 && vl_stall_count <= 7 && hoq_life <= 0x1F &&
           multicast_pkey_trap_suppression_enabled <= 3 && subnet_timeout <= 0x1F && resp_time_value <= 0x1F &&
           link_round_trip_latency <= 0xFFFFFF && link_speed_ext_enabled <= 0x1F;
}

void PortInfo::write_to(std::uint8_t* p) const {
    write_port_identity(*this, p);
    write_port_link(*this, p);
    write_port_counters(*this, p);
}

PortInfo PortInfo::read_from(const std::uint8_t* p) {
    PortInfo pi;
    read_port_identity(pi, p);
    read_port_link(pi, p);
    read_port_counters(pi, p);
    return pi;
}

// ---------------------------------------------------------------------------
// Tables

void PKeyTableBlock::write_to(std::uint8_t* p) const {
    for (std::size_t i = 0; i < entries; ++i) store_be16(p + 2 * i, p_keys[i]);
}

PKeyTableBlock PKeyTableBlock::read_from(const std::uint8_t* p) {
    PKeyTableBlock b;
    for (std::size_t i = 0; i < entries; ++i) b.p_keys[i] = load_be16(p + 2 * i);
    return b;
}

std::optional<std::size_t> build_qp0_packet(bytes mad, std::uint16_t slid, std::uint16_t dlid,
                                            std::span<std::uint8_t> out) {
    if (mad.size() != kMadSize) return std::nullopt;
    PacketSpec spec;
    spec.lrh.vl = kVl15;
    spec.lrh.dlid = dlid;
    spec.lrh.slid = slid;
    spec.bth.opcode = op::ud_send_only;
    spec.bth.pkey = kPKeyDefault;
    spec.bth.dest_qp = kQp0;
    spec.ext.deth = {0, kQp0};
    spec.payload = mad;
    const auto n = build_packet(spec, out);
    if (!n) return std::nullopt;
    return *n;
}

void SmpNotice::write_to(std::uint8_t* p) const {
    p[0] = static_cast<std::uint8_t>((is_generic ? 0x80 : 0) | (type & 0x7F));
    store_be24(p + 1, producer_type);
    store_be16(p + 4, trap_number);
    store_be16(p + 6, issuer_lid);
    store_be16(p + 8, static_cast<std::uint16_t>((notice_toggle ? 0x8000 : 0) | (notice_count & 0x7FFF)));
    std::copy(data_details.begin(), data_details.end(), p + 10);
}

SmpNotice SmpNotice::read_from(const std::uint8_t* p) {
    SmpNotice n;
    n.is_generic = (p[0] & 0x80) != 0;
    n.type = p[0] & 0x7F;
    n.producer_type = load_be24(p + 1);
    n.trap_number = load_be16(p + 4);
    n.issuer_lid = load_be16(p + 6);
    n.notice_toggle = (p[8] & 0x80) != 0;
    n.notice_count = load_be16(p + 8) & 0x7FFF;
    std::copy(p + 10, p + 64, n.data_details.begin());
    return n;
}

void write_bad_m_key(const BadMKeyTrap& t, std::array<std::uint8_t, 54>& d) {
    d.fill(0);
    store_be16(d.data(), t.lid);
    store_be16(d.data() + 2, t.dr_slid);
    d[4] = t.method;
    store_be16(d.data() + 6, t.attribute_id);
    store_be32(d.data() + 8, t.attribute_modifier);
    store_be64(d.data() + 12, t.m_key);
}

BadMKeyTrap read_bad_m_key(const std::array<std::uint8_t, 54>& d) {
    return BadMKeyTrap{.lid = load_be16(d.data()),
                       .dr_slid = load_be16(d.data() + 2),
                       .method = d[4],
                       .attribute_id = load_be16(d.data() + 6),
                       .attribute_modifier = load_be32(d.data() + 8),
                       .m_key = load_be64(d.data() + 12)};
}

void GuidInfoBlock::write_to(std::uint8_t* p) const {
    for (std::size_t i = 0; i < entries; ++i) store_be64(p + 8 * i, guids[i]);
}

GuidInfoBlock GuidInfoBlock::read_from(const std::uint8_t* p) {
    GuidInfoBlock b;
    for (std::size_t i = 0; i < entries; ++i) b.guids[i] = load_be64(p + 8 * i);
    return b;
}

void MulticastForwardingTableBlock::write_to(std::uint8_t* p) const {
    for (std::size_t i = 0; i < entries; ++i) store_be16(p + 2 * i, port_masks[i]);
}

MulticastForwardingTableBlock MulticastForwardingTableBlock::read_from(const std::uint8_t* p) {
    MulticastForwardingTableBlock b;
    for (std::size_t i = 0; i < entries; ++i) b.port_masks[i] = load_be16(p + 2 * i);
    return b;
}

// ---------------------------------------------------------------------------
// SwitchInfo

void SwitchInfo::write_to(std::uint8_t* p) const {
    store_be16(p + 0, linear_fdb_cap);
    store_be16(p + 2, random_fdb_cap);
    store_be16(p + 4, multicast_fdb_cap);
    store_be16(p + 6, linear_fdb_top);
    p[8] = default_port;
    p[9] = default_multicast_primary_port;
    p[10] = default_multicast_not_primary_port;
    p[11] = static_cast<std::uint8_t>((life_time_value << 3) | bit(port_state_change, 2) |
                                      optimized_sl_to_vl_mapping_programming);
    store_be16(p + 12, lids_per_port);
    store_be16(p + 14, partition_enforcement_cap);
    p[16] = static_cast<std::uint8_t>(bit(inbound_enforcement_cap, 7) | bit(outbound_enforcement_cap, 6) |
                                      bit(filter_raw_inbound_cap, 5) | bit(filter_raw_outbound_cap, 4) |
                                      bit(enhanced_port0, 3));
    p[17] = 0;
    store_be16(p + 18, multicast_fdb_top);
}

SwitchInfo SwitchInfo::read_from(const std::uint8_t* p) {
    SwitchInfo s;
    s.linear_fdb_cap = load_be16(p + 0);
    s.random_fdb_cap = load_be16(p + 2);
    s.multicast_fdb_cap = load_be16(p + 4);
    s.linear_fdb_top = load_be16(p + 6);
    s.default_port = p[8];
    s.default_multicast_primary_port = p[9];
    s.default_multicast_not_primary_port = p[10];
    s.life_time_value = static_cast<std::uint8_t>(p[11] >> 3);
    s.port_state_change = (p[11] & 0x04) != 0;
    s.optimized_sl_to_vl_mapping_programming = static_cast<std::uint8_t>(p[11] & 0x3);
    s.lids_per_port = load_be16(p + 12);
    s.partition_enforcement_cap = load_be16(p + 14);
    s.inbound_enforcement_cap = (p[16] & 0x80) != 0;
    s.outbound_enforcement_cap = (p[16] & 0x40) != 0;
    s.filter_raw_inbound_cap = (p[16] & 0x20) != 0;
    s.filter_raw_outbound_cap = (p[16] & 0x10) != 0;
    s.enhanced_port0 = (p[16] & 0x08) != 0;
    s.multicast_fdb_top = load_be16(p + 18);
    return s;
}

}  // namespace ipoibd::ib
