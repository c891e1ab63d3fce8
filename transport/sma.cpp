// The Subnet Management Agent; the handling order is at the top of sma.h.
#include "transport/sma.h"

#include <algorithm>

namespace ipoibd::transport {

void visit(const SmaCounters& c, CounterSink& out) {
    out.counter("sma_responses", c.responses);
    out.counter("sma_error_responses", c.error_responses);
    out.counter("sma_m_key_lease_expiries", c.m_key_lease_expiries);
    out.counter("sma_traps_sent", c.traps_sent);
    out.counter("sma_traps_suppressed", c.traps_suppressed);
    out.counter("sma_trap_represses", c.trap_represses);
    visit_reasons<SmaDrop>(out, "sma_dropped_", c.dropped, [](SmaDrop d) { return token(d); });
}

const char* token(SmaDrop d) {
    switch (d) {
        case SmaDrop::not_smp: return "not_smp";
        case SmaDrop::not_a_request: return "not_a_request";
        case SmaDrop::directed_route: return "directed_route";
        case SmaDrop::m_key_mismatch: return "m_key_mismatch";
        case SmaDrop::no_local_sm: return "no_local_sm";
        case SmaDrop::count_: break;
    }
    return "unknown";
}

namespace {

using ib::mad_status::bad_version;
using ib::mad_status::invalid_attr_or_modifier;
using ib::mad_status::method_attr_not_supported;
using ib::mad_status::method_not_supported;
namespace ps = ib::port_state;
namespace pps = ib::port_physical_state;

constexpr std::uint64_t kDefaultGidPrefix = 0xFE80000000000000ULL;  // link-local, until the SM sets one
constexpr std::uint8_t kVlCap = 1;                                  // VL0 (and VL15) only
constexpr std::uint8_t kGuidCap = 1;                                // GUID index 0: the port GUID
// 4.096 us * 2^16, about 268 ms: the agent runs in a daemon's event loop.
constexpr std::uint8_t kRespTimeValue = 16;
constexpr std::uint8_t kLinkDownDefaultPolling = 2;  // LinkDownDefaultState: 1 Sleep, 2 Polling
constexpr std::uint32_t kCapabilityMask = ib::port_capability::is_client_reregistration_supported |
                                          ib::port_capability::is_system_image_guid_supported;

// Writes a successful Get or Set's attribute into the response Data and
// returns status 0. The Sma only builds attributes with in-range fields, so
// the encode cannot fail; if it ever did the response says so.
template <class Attribute>
std::uint16_t reply_with(const Attribute& attribute, ib::SmpData& data) {
    constexpr std::uint16_t kSuccess = 0;
    return ib::put_attribute(attribute, data) ? kSuccess : invalid_attr_or_modifier;
}

// LIDs a Set may assign: a unicast LID, or 0 (none).
bool settable_lid(std::uint16_t lid) { return lid == ib::kLidReserved || ib::is_unicast_lid(lid); }

// PortState after a Set asking for `requested` (IBA 14.2.5.6 and the port
// state machine of 7.2). Init is entered when the link comes up, never by a
// Set. Down makes the link retrain; a soft link retrains at once, so with the
// link physically up the port is back in Init when the response leaves.
std::optional<std::uint8_t> port_state_after_set(std::uint8_t current, std::uint8_t requested, bool link_up) {
    switch (requested) {
        case ps::no_change: return current;
        case ps::down: return link_up ? ps::init : ps::down;
        case ps::armed:
            if (current == ps::init || current == ps::armed) return ps::armed;
            return std::nullopt;
        case ps::active:
            if (current == ps::armed || current == ps::active) return ps::active;
            return std::nullopt;
        default: return std::nullopt;
    }
}

// The Set values that must be valid for any of the Set to happen.
bool set_values_valid(const ib::PortInfo& want, const ib::PortInfo& now) {
    const bool physical_ok =  // 2 (Polling) enables a port, which it already is; it cannot be disabled
        want.port_physical_state == pps::no_change || want.port_physical_state == pps::polling;
    const bool down_default_ok = want.link_down_default_state <= kLinkDownDefaultPolling;
    const bool mtu_ok = want.neighbor_mtu == 0 ||
                        (want.neighbor_mtu >= static_cast<std::uint8_t>(ib::Mtu::mtu256) && want.neighbor_mtu <= now.mtu_cap);
    const bool vls_ok = want.operational_vls <= now.vl_cap;
    return settable_lid(want.lid) && physical_ok && down_default_ok && mtu_ok && vls_ok;
}

// Copies the fields an SM may set. The link's width and speed are fixed, and
// so are the capabilities and the other read-only fields.
void copy_settable_fields(const ib::PortInfo& want, ib::PortInfo& next) {
    next.m_key = want.m_key;
    next.gid_prefix = want.gid_prefix;
    next.lid = want.lid;
    next.master_sm_lid = want.master_sm_lid;
    next.m_key_lease_period = want.m_key_lease_period;
    if (want.link_down_default_state != 0) next.link_down_default_state = want.link_down_default_state;
    next.m_key_protect_bits = want.m_key_protect_bits;
    next.lmc = want.lmc;
    if (want.neighbor_mtu != 0) next.neighbor_mtu = want.neighbor_mtu;
    next.master_sm_sl = want.master_sm_sl;
    next.vl_high_limit = want.vl_high_limit;
    next.vl_stall_count = want.vl_stall_count;
    next.hoq_life = want.hoq_life;
    if (want.operational_vls != 0) next.operational_vls = want.operational_vls;
    next.m_key_violations = want.m_key_violations;
    next.p_key_violations = want.p_key_violations;
    next.q_key_violations = want.q_key_violations;
    next.multicast_pkey_trap_suppression_enabled = want.multicast_pkey_trap_suppression_enabled;
    next.subnet_timeout = want.subnet_timeout;
    next.local_phy_errors = want.local_phy_errors;
    next.overrun_errors = want.overrun_errors;
}

void report_port_changes(const ib::PortInfo& before, const ib::PortInfo& after, std::vector<PortEvent>& events) {
    if (before.lid != after.lid || before.lmc != after.lmc) events.push_back(PortEvent::lid_change);
    if (before.master_sm_lid != after.master_sm_lid || before.master_sm_sl != after.master_sm_sl)
        events.push_back(PortEvent::sm_change);
    const bool was_active = before.port_state == ps::active;
    const bool is_active = after.port_state == ps::active;
    if (was_active && !is_active) events.push_back(PortEvent::port_down);
    if (!was_active && is_active) events.push_back(PortEvent::port_active);
}

ib::PortInfo initial_port_info(const SmaIdentity& id) {
    ib::PortInfo pi;
    pi.gid_prefix = kDefaultGidPrefix;
    pi.capability_mask = kCapabilityMask;
    pi.local_port_num = id.port_num;
    pi.link_width_enabled = id.link_width_supported;
    pi.link_width_supported = id.link_width_supported;
    pi.link_width_active = id.link_width_active;
    pi.link_speed_supported = id.link_speed_supported;
    pi.link_speed_enabled = id.link_speed_supported;
    pi.link_speed_active = id.link_speed_active;
    pi.port_state = ps::down;
    pi.port_physical_state = pps::polling;
    pi.link_down_default_state = kLinkDownDefaultPolling;
    pi.neighbor_mtu = static_cast<std::uint8_t>(id.mtu_cap);
    pi.mtu_cap = static_cast<std::uint8_t>(id.mtu_cap);
    pi.vl_cap = kVlCap;
    pi.vl_arbitration_low_cap = 1;
    pi.operational_vls = kVlCap;
    pi.guid_cap = kGuidCap;
    pi.resp_time_value = kRespTimeValue;
    return pi;
}

}  // namespace

Sma::Sma(SmaIdentity identity)
    : identity_(std::move(identity)),
      port_info_(initial_port_info(identity_)),
      p_keys_(std::max<std::size_t>(identity_.partition_cap, 1), 0) {
    p_keys_[0] = ib::kPKeyDefault;
}

// ---------------------------------------------------------------------------
// One SMP

SmaResult Sma::handle(bytes mad, std::uint16_t lrh_slid, Clock::time_point now) {
    auto decoded = ib::decode_smp(mad);
    if (!decoded) return drop(SmaDrop::not_smp);
    ib::Smp request = *decoded;
    const bool repress = request.method == ib::method::trap_repress;
    const bool response_or_trap = (request.method & ib::method::response_bit) != 0 || request.method == ib::method::trap;
    if (response_or_trap) return drop(SmaDrop::not_a_request);
    if (request.is_directed_route()) {
        const auto hop = ib::dr_receive_request(request, identity_.port_num);
        if (hop.action == ib::DrAction::discard) {
            SmaResult r;
            r.dr_discard = hop.reason;
            return drop(SmaDrop::directed_route, std::move(r));
        }
    }

    SmaResult result;
    ib::Smp reply = request;
    reply.method = ib::method::get_resp;
    if (!repress && (request.base_version != ib::kMadBaseVersion || request.class_version != ib::class_version::subn)) {
        reply.status = bad_version;
        return respond(reply, lrh_slid, std::move(result));
    }
    const MKeyCheck m_key = check_m_key(request, now);
    if (m_key == MKeyCheck::fail) {
        on_m_key_violation(request, lrh_slid, now, result);
        return drop(SmaDrop::m_key_mismatch, std::move(result));
    }
    if (repress) {  // the SM got our trap: nothing to answer
        ++counters_.trap_represses;
        return result;
    }
    // Contact with the SM (last_request): a request carrying the port's
    // M_Key. A Get without it passes at protect bits 0 and 1, from any port
    // of the fabric, and would hide that the SM stopped sweeping.
    const bool key_holder = port_info_.m_key == 0 || request.m_key == port_info_.m_key;
    reply.status = process(request, reply.data, m_key, result);
    if (key_holder) last_request_ = now;
    return respond(reply, lrh_slid, std::move(result));
}

Sma::MKeyCheck Sma::check_m_key(const ib::Smp& request, Clock::time_point now) {
    if (lease_ends_ && now >= *lease_ends_) {
        // The lease ran out: whoever holds the key has not used it for the
        // whole period. Protection off; the M_Key stays (a Get shows it).
        lease_ends_.reset();
        port_info_.m_key_protect_bits = 0;
        ++counters_.m_key_lease_expiries;
    }
    if (port_info_.m_key == 0 || request.m_key == port_info_.m_key) {
        lease_ends_.reset();
        return MKeyCheck::pass;
    }
    if (request.method == ib::method::get) {
        if (port_info_.m_key_protect_bits == 0) return MKeyCheck::pass;
        if (port_info_.m_key_protect_bits == 1) return MKeyCheck::pass_hide_m_key;
    }
    return MKeyCheck::fail;
}

void Sma::on_m_key_violation(const ib::Smp& request, std::uint16_t lrh_slid, Clock::time_point now,
                             SmaResult& result) {
    if (port_info_.m_key_violations != 0xFFFF) ++port_info_.m_key_violations;
    if (!lease_ends_ && port_info_.m_key_lease_period != 0)
        lease_ends_ = now + std::chrono::seconds(port_info_.m_key_lease_period);
    // Trap 256 to the master SM, if there is one to tell; one a second.
    if (port_info_.master_sm_lid == 0 || port_info_.lid == 0) return;
    if (last_trap_ && now - *last_trap_ < std::chrono::seconds(1)) {
        ++counters_.traps_suppressed;
        return;
    }
    last_trap_ = now;
    ib::SmpNotice notice;
    notice.type = ib::trap::type_security;
    notice.producer_type = ib::trap::producer_channel_adapter;
    notice.trap_number = ib::trap::bad_m_key;
    notice.issuer_lid = port_info_.lid;
    ib::write_bad_m_key({.lid = lrh_slid,
                         .dr_slid = request.is_directed_route() ? request.dr_slid : std::uint16_t{0},
                         .method = request.method,
                         .attribute_id = request.attribute_id,
                         .attribute_modifier = request.attribute_modifier,
                         .m_key = request.m_key},
                        notice.data_details);
    ib::Smp trap;
    trap.mgmt_class = ib::mgmt_class::subn_lid_routed;
    trap.method = ib::method::trap;
    trap.attribute_id = ib::smp_attr::notice;
    trap.transaction_id = next_trap_tid_++;
    trap.m_key = port_info_.m_key;
    notice.write_to(trap.data.data());
    SmaResponse out;
    trap.write_to(out.mad.data());
    out.dlid = port_info_.master_sm_lid;
    result.trap = out;
    ++counters_.traps_sent;
}

// Returns the MAD status; fills `data` when the status is 0.
std::uint16_t Sma::process(const ib::Smp& request, ib::SmpData& data, MKeyCheck m_key, SmaResult& result) {
    switch (request.method) {
        case ib::method::get: return process_get(request, data, m_key);
        case ib::method::set:
            if (request.attribute_id == ib::smp_attr::port_info) return set_port_info(request, data, result);
            if (request.attribute_id == ib::smp_attr::p_key_table) return set_p_key_table(request, data, result);
            return method_attr_not_supported;
        default: return method_not_supported;
    }
}

std::uint16_t Sma::process_get(const ib::Smp& request, ib::SmpData& data, MKeyCheck m_key) const {
    const std::uint32_t modifier = request.attribute_modifier;
    switch (request.attribute_id) {
        case ib::smp_attr::node_info:
            if (modifier != 0) return invalid_attr_or_modifier;
            return reply_with(node_info(), data);
        case ib::smp_attr::node_description:
            if (modifier != 0) return invalid_attr_or_modifier;
            return reply_with(ib::NodeDescription{identity_.node_description.substr(0, 64)}, data);
        case ib::smp_attr::port_info: {
            if (!selects_this_port(modifier)) return invalid_attr_or_modifier;
            ib::PortInfo shown = port_info_;
            if (m_key == MKeyCheck::pass_hide_m_key) shown.m_key = 0;
            return reply_with(shown, data);
        }
        case ib::smp_attr::p_key_table: {
            const auto first = p_key_block_start(modifier);
            if (!first) return invalid_attr_or_modifier;
            return reply_with(p_key_block(*first), data);
        }
        case ib::smp_attr::guid_info: {
            if (modifier != 0) return invalid_attr_or_modifier;  // GUIDCap 1: block 0 only
            ib::GuidInfoBlock block;
            block.guids[0] = identity_.port_guid;
            return reply_with(block, data);
        }
        default: return method_attr_not_supported;
    }
}

// ---------------------------------------------------------------------------
// Sets

std::uint16_t Sma::set_port_info(const ib::Smp& request, ib::SmpData& data, SmaResult& result) {
    if (!selects_this_port(request.attribute_modifier)) return invalid_attr_or_modifier;
    const auto want = ib::decode<ib::PortInfo>(request.data);
    if (!want) return invalid_attr_or_modifier;
    const auto next = port_info_after_set(*want);
    if (!next) return invalid_attr_or_modifier;
    const ib::PortInfo before = port_info_;
    port_info_ = *next;
    report_port_changes(before, port_info_, result.events);
    // ClientReregister is not state: it asks for one event now. The GetResp
    // echoes it so the SM sees the request was taken (as hardware agents do).
    ib::PortInfo shown = port_info_;
    if (want->client_reregister) {
        result.events.push_back(PortEvent::client_reregister);
        shown.client_reregister = true;
    }
    return reply_with(shown, data);
}

std::optional<ib::PortInfo> Sma::port_info_after_set(const ib::PortInfo& want) const {
    const bool link_up = port_info_.port_physical_state == pps::link_up;
    const auto state = port_state_after_set(port_info_.port_state, want.port_state, link_up);
    if (!state || !set_values_valid(want, port_info_)) return std::nullopt;
    ib::PortInfo next = port_info_;
    copy_settable_fields(want, next);
    next.port_state = *state;
    return next;
}

std::uint16_t Sma::set_p_key_table(const ib::Smp& request, ib::SmpData& data, SmaResult& result) {
    const auto first = p_key_block_start(request.attribute_modifier);
    if (!first) return invalid_attr_or_modifier;
    const auto block = ib::decode<ib::PKeyTableBlock>(request.data);
    if (!block) return invalid_attr_or_modifier;
    const std::size_t count = std::min(ib::PKeyTableBlock::entries, p_keys_.size() - *first);
    bool changed = false;
    for (std::size_t i = 0; i < count; ++i) {
        changed = changed || p_keys_[*first + i] != block->p_keys[i];
        p_keys_[*first + i] = block->p_keys[i];
    }
    if (changed) result.events.push_back(PortEvent::pkey_change);
    return reply_with(p_key_block(*first), data);
}

// ---------------------------------------------------------------------------
// Attribute modifiers and attributes

// PortInfo on a CA: 0 (the port the SMP came in on) or this port's number.
bool Sma::selects_this_port(std::uint32_t attribute_modifier) const {
    const std::uint32_t port = attribute_modifier & ib::kPortInfoPortMask;
    return port == 0 || port == identity_.port_num;
}

// P_KeyTable: block number in bits 15:0; a CA has no port number to give.
std::optional<std::size_t> Sma::p_key_block_start(std::uint32_t attribute_modifier) const {
    const std::size_t first = std::size_t{attribute_modifier & 0xFFFF} * ib::PKeyTableBlock::entries;
    if (first >= p_keys_.size()) return std::nullopt;
    return first;
}

ib::PKeyTableBlock Sma::p_key_block(std::size_t first) const {
    ib::PKeyTableBlock block;
    const std::size_t count = std::min(ib::PKeyTableBlock::entries, p_keys_.size() - first);
    std::copy_n(p_keys_.begin() + static_cast<std::ptrdiff_t>(first), count, block.p_keys.begin());
    return block;
}

ib::NodeInfo Sma::node_info() const {
    ib::NodeInfo n;
    n.node_type = ib::node_type::channel_adapter;
    n.num_ports = 1;
    n.system_image_guid = identity_.system_image_guid != 0 ? identity_.system_image_guid : identity_.node_guid;
    n.node_guid = identity_.node_guid;
    n.port_guid = identity_.port_guid;
    n.partition_cap = static_cast<std::uint16_t>(p_keys_.size());
    n.device_id = identity_.device_id;
    n.revision = identity_.revision;
    n.local_port_num = identity_.port_num;
    n.vendor_id = identity_.vendor_id & 0xFFFFFF;
    return n;
}

// ---------------------------------------------------------------------------
// Responses, drops, the link

SmaResult Sma::respond(ib::Smp reply, std::uint16_t lrh_slid, SmaResult result) {
    std::uint16_t dlid = lrh_slid;
    if (reply.is_directed_route()) {
        // A CA's only port is the one the request came in on.
        const auto hop = ib::dr_send_response(reply, identity_.port_num, lrh_slid);
        switch (hop.action) {
            case ib::DrAction::discard:
                result.dr_discard = hop.reason;
                return drop(SmaDrop::directed_route, std::move(result));
            case ib::DrAction::deliver: {
                if (!local_sm_) return drop(SmaDrop::no_local_sm, std::move(result));
                SmaResponse local;
                reply.write_to(local.mad.data());
                local.dlid = ib::kLidPermissive;
                result.local_response = local;
                ++counters_.responses;
                if (reply.status != 0) ++counters_.error_responses;
                return result;
            }
            case ib::DrAction::send_on_port: dlid = ib::kLidPermissive; break;
            case ib::DrAction::send_lid_routed: dlid = hop.lid; break;
        }
    }
    SmaResponse response;
    reply.write_to(response.mad.data());
    response.dlid = dlid;
    result.response = response;
    ++counters_.responses;
    if (reply.status != 0) ++counters_.error_responses;
    return result;
}

void Sma::set_is_sm(bool is_sm) {
    if (is_sm)
        port_info_.capability_mask |= ib::port_capability::is_sm;
    else
        port_info_.capability_mask &= ~ib::port_capability::is_sm;
}

SmaResult Sma::drop(SmaDrop why, SmaResult result) {
    ++counters_.dropped[static_cast<std::size_t>(why)];
    result.drop = why;
    return result;
}

SmaResult Sma::link_up() {
    SmaResult result;
    if (port_info_.port_physical_state == pps::link_up) return result;
    port_info_.port_physical_state = pps::link_up;
    if (port_info_.port_state == ps::down) port_info_.port_state = ps::init;
    return result;
}

SmaResult Sma::link_down() {
    SmaResult result;
    if (port_info_.port_physical_state != pps::link_up) return result;
    const ib::PortInfo before = port_info_;
    port_info_.port_physical_state = pps::polling;
    port_info_.port_state = ps::down;
    report_port_changes(before, port_info_, result.events);
    return result;
}

PortAttributes Sma::attributes() const {
    PortAttributes a;
    a.state = static_cast<PortState>(port_info_.port_state);
    a.lid = port_info_.lid;
    a.lmc = port_info_.lmc;
    a.sm_lid = port_info_.master_sm_lid;
    a.sm_sl = port_info_.master_sm_sl;
    a.subnet_prefix = port_info_.gid_prefix;
    a.port_guid = identity_.port_guid;
    a.node_guid = identity_.node_guid;
    a.port_num = identity_.port_num;
    a.active_mtu = static_cast<ib::Mtu>(port_info_.neighbor_mtu);
    a.pkey_table = p_keys_;
    return a;
}

const char* to_string(SmaDrop d) {
    switch (d) {
        case SmaDrop::not_smp: return "not an SMP";
        case SmaDrop::not_a_request: return "not a request";
        case SmaDrop::directed_route: return "directed route rules";
        case SmaDrop::m_key_mismatch: return "M_Key mismatch";
        case SmaDrop::no_local_sm: return "no SM on this node";
        case SmaDrop::count_: break;
    }
    return "unknown";
}

}  // namespace ipoibd::transport
