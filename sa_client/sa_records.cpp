#include "sa_client/sa_records.h"

#include <cstring>
#include <iterator>
#include <string>

namespace ipoibd::sa {

namespace {

// Selector(7:6) value(5:0), the byte of MTU, Rate and PacketLifeTime.
std::uint8_t selector_byte(Selector s, std::uint8_t value) {
    return static_cast<std::uint8_t>((static_cast<unsigned>(s) << 6) | (value & 0x3F));
}
Selector selector_of(std::uint8_t b) { return static_cast<Selector>(b >> 6); }
std::uint8_t value_of(std::uint8_t b) { return static_cast<std::uint8_t>(b & 0x3F); }

bool selector_in_range(Selector s) { return static_cast<unsigned>(s) <= 3; }

void put_gid(std::uint8_t* p, const Gid& g) { std::memcpy(p, g.data(), g.size()); }
Gid get_gid(const std::uint8_t* p) {
    Gid g;
    std::memcpy(g.data(), p, g.size());
    return g;
}

}  // namespace

// ---------------------------------------------------------------------------
// Encodings

const char* to_string(Selector s) {
    switch (s) {
        case Selector::greater_than: return "greater than";
        case Selector::less_than: return "less than";
        case Selector::exactly: return "exactly";
        case Selector::largest_available: return "largest available";
    }
    return "unknown selector";
}

std::uint32_t mtu_bytes(std::uint8_t mtu) {
    if (mtu < static_cast<std::uint8_t>(ib::Mtu::mtu256) || mtu > static_cast<std::uint8_t>(ib::Mtu::mtu4096))
        return 0;
    return ib::mtu_bytes(static_cast<ib::Mtu>(mtu));
}

std::uint8_t mtu_code(std::uint32_t bytes) {
    for (std::uint8_t code = 1; code <= 5; ++code)
        if (mtu_bytes(code) == bytes) return code;
    return 0;
}

namespace {

struct RateInfo {
    std::uint32_t mbps;
    const char* name;
};

// Indexed by rate code; 0 and 1 are reserved.
constexpr RateInfo kRates[] = {
    {0, nullptr},           {0, nullptr},           {2500, "2.5 Gb/s"},     {10000, "10 Gb/s"},
    {30000, "30 Gb/s"},     {5000, "5 Gb/s"},       {20000, "20 Gb/s"},     {40000, "40 Gb/s"},
    {60000, "60 Gb/s"},     {80000, "80 Gb/s"},     {120000, "120 Gb/s"},   {14000, "14 Gb/s"},
    {56000, "56 Gb/s"},     {112000, "112 Gb/s"},   {168000, "168 Gb/s"},   {25000, "25 Gb/s"},
    {100000, "100 Gb/s"},   {200000, "200 Gb/s"},   {300000, "300 Gb/s"},   {28000, "28 Gb/s"},
    {50000, "50 Gb/s"},     {400000, "400 Gb/s"},   {600000, "600 Gb/s"},   {800000, "800 Gb/s"},
    {1200000, "1200 Gb/s"},
};

}  // namespace

std::uint32_t rate_mbps(std::uint8_t rate) { return rate < std::size(kRates) ? kRates[rate].mbps : 0; }

const char* rate_name(std::uint8_t rate) {
    if (rate >= std::size(kRates) || kRates[rate].name == nullptr) return "unknown rate";
    return kRates[rate].name;
}

std::string join_state_names(std::uint8_t js) {
    static constexpr struct {
        std::uint8_t bit;
        const char* name;
    } kBits[] = {{join_state::full_member, "FullMember"},
                 {join_state::non_member, "NonMember"},
                 {join_state::send_only_non_member, "SendOnlyNonMember"},
                 {join_state::send_only_full_member, "SendOnlyFullMember"}};
    std::string out;
    for (const auto& b : kBits) {
        if ((js & b.bit) == 0) continue;
        if (!out.empty()) out += '|';
        out += b.name;
    }
    return out.empty() ? "none" : out;
}

// ---------------------------------------------------------------------------
// MCMemberRecord

bool McMemberRecord::fields_in_range() const {
    return selector_in_range(mtu_selector) && mtu <= 0x3F && selector_in_range(rate_selector) && rate <= 0x3F &&
           selector_in_range(packet_life_time_selector) && packet_life_time <= 0x3F && sl <= 0xF &&
           flow_label <= 0xFFFFF && scope <= 0xF && join_state <= 0xF;
}

void McMemberRecord::write_to(std::uint8_t* p) const {
    put_gid(p + 0, mgid);
    put_gid(p + 16, port_gid);
    store_be32(p + 32, q_key);
    store_be16(p + 36, mlid);
    p[38] = selector_byte(mtu_selector, mtu);
    p[39] = tclass;
    store_be16(p + 40, p_key);
    p[42] = selector_byte(rate_selector, rate);
    p[43] = selector_byte(packet_life_time_selector, packet_life_time);
    store_be32(p + 44, (std::uint32_t{sl} << 28) | ((flow_label & 0xFFFFF) << 8) | hop_limit);
    p[48] = static_cast<std::uint8_t>((scope << 4) | (join_state & 0xF));
    p[49] = proxy_join ? 0x80 : 0x00;
    p[50] = 0;
    p[51] = 0;
}

McMemberRecord McMemberRecord::read_from(const std::uint8_t* p) {
    McMemberRecord r;
    r.mgid = get_gid(p + 0);
    r.port_gid = get_gid(p + 16);
    r.q_key = load_be32(p + 32);
    r.mlid = load_be16(p + 36);
    r.mtu_selector = selector_of(p[38]);
    r.mtu = value_of(p[38]);
    r.tclass = p[39];
    r.p_key = load_be16(p + 40);
    r.rate_selector = selector_of(p[42]);
    r.rate = value_of(p[42]);
    r.packet_life_time_selector = selector_of(p[43]);
    r.packet_life_time = value_of(p[43]);
    const std::uint32_t sl_flow_hop = load_be32(p + 44);
    r.sl = static_cast<std::uint8_t>(sl_flow_hop >> 28);
    r.flow_label = (sl_flow_hop >> 8) & 0xFFFFF;
    r.hop_limit = static_cast<std::uint8_t>(sl_flow_hop);
    r.scope = static_cast<std::uint8_t>(p[48] >> 4);
    r.join_state = static_cast<std::uint8_t>(p[48] & 0xF);
    r.proxy_join = (p[49] & 0x80) != 0;
    return r;
}

// Each setter: the field, then its component bit(s).
McMemberQuery& McMemberQuery::set_mgid(const Gid& v) {
    record.mgid = v;
    component_mask |= mc_member_comp::mgid;
    return *this;
}
McMemberQuery& McMemberQuery::set_port_gid(const Gid& v) {
    record.port_gid = v;
    component_mask |= mc_member_comp::port_gid;
    return *this;
}
McMemberQuery& McMemberQuery::set_q_key(std::uint32_t v) {
    record.q_key = v;
    component_mask |= mc_member_comp::q_key;
    return *this;
}
McMemberQuery& McMemberQuery::set_mlid(std::uint16_t v) {
    record.mlid = v;
    component_mask |= mc_member_comp::mlid;
    return *this;
}
McMemberQuery& McMemberQuery::set_mtu(Selector selector, std::uint8_t mtu) {
    record.mtu_selector = selector;
    record.mtu = mtu;
    component_mask |= mc_member_comp::mtu_selector | mc_member_comp::mtu;
    return *this;
}
McMemberQuery& McMemberQuery::set_tclass(std::uint8_t v) {
    record.tclass = v;
    component_mask |= mc_member_comp::tclass;
    return *this;
}
McMemberQuery& McMemberQuery::set_p_key(std::uint16_t v) {
    record.p_key = v;
    component_mask |= mc_member_comp::p_key;
    return *this;
}
McMemberQuery& McMemberQuery::set_rate(Selector selector, std::uint8_t rate) {
    record.rate_selector = selector;
    record.rate = rate;
    component_mask |= mc_member_comp::rate_selector | mc_member_comp::rate;
    return *this;
}
McMemberQuery& McMemberQuery::set_packet_life_time(Selector selector, std::uint8_t v) {
    record.packet_life_time_selector = selector;
    record.packet_life_time = v;
    component_mask |= mc_member_comp::packet_life_time_selector | mc_member_comp::packet_life_time;
    return *this;
}
McMemberQuery& McMemberQuery::set_sl(std::uint8_t v) {
    record.sl = v;
    component_mask |= mc_member_comp::sl;
    return *this;
}
McMemberQuery& McMemberQuery::set_flow_label(std::uint32_t v) {
    record.flow_label = v;
    component_mask |= mc_member_comp::flow_label;
    return *this;
}
McMemberQuery& McMemberQuery::set_hop_limit(std::uint8_t v) {
    record.hop_limit = v;
    component_mask |= mc_member_comp::hop_limit;
    return *this;
}
McMemberQuery& McMemberQuery::set_scope(std::uint8_t v) {
    record.scope = v;
    component_mask |= mc_member_comp::scope;
    return *this;
}
McMemberQuery& McMemberQuery::set_join_state(std::uint8_t v) {
    record.join_state = v;
    component_mask |= mc_member_comp::join_state;
    return *this;
}
McMemberQuery& McMemberQuery::set_proxy_join(bool v) {
    record.proxy_join = v;
    component_mask |= mc_member_comp::proxy_join;
    return *this;
}

// ---------------------------------------------------------------------------
// PathRecord

bool PathRecord::fields_in_range() const {
    return flow_label <= 0xFFFFF && numb_path <= 0x7F && qos_class <= 0xFFF && sl <= 0xF &&
           selector_in_range(mtu_selector) && mtu <= 0x3F && selector_in_range(rate_selector) && rate <= 0x3F &&
           selector_in_range(packet_life_time_selector) && packet_life_time <= 0x3F;
}

void PathRecord::write_to(std::uint8_t* p) const {
    store_be64(p + 0, service_id);
    put_gid(p + 8, dgid);
    put_gid(p + 24, sgid);
    store_be16(p + 40, dlid);
    store_be16(p + 42, slid);
    store_be32(p + 44, (raw_traffic ? 0x80000000u : 0u) | ((flow_label & 0xFFFFF) << 8) | hop_limit);
    p[48] = tclass;
    p[49] = static_cast<std::uint8_t>((reversible ? 0x80 : 0x00) | (numb_path & 0x7F));
    store_be16(p + 50, p_key);
    store_be16(p + 52, static_cast<std::uint16_t>((qos_class << 4) | (sl & 0xF)));
    p[54] = selector_byte(mtu_selector, mtu);
    p[55] = selector_byte(rate_selector, rate);
    p[56] = selector_byte(packet_life_time_selector, packet_life_time);
    p[57] = preference;
    std::memset(p + 58, 0, 6);
}

PathRecord PathRecord::read_from(const std::uint8_t* p) {
    PathRecord r;
    r.service_id = load_be64(p + 0);
    r.dgid = get_gid(p + 8);
    r.sgid = get_gid(p + 24);
    r.dlid = load_be16(p + 40);
    r.slid = load_be16(p + 42);
    const std::uint32_t raw_flow_hop = load_be32(p + 44);
    r.raw_traffic = (raw_flow_hop & 0x80000000u) != 0;
    r.flow_label = (raw_flow_hop >> 8) & 0xFFFFF;
    r.hop_limit = static_cast<std::uint8_t>(raw_flow_hop);
    r.tclass = p[48];
    r.reversible = (p[49] & 0x80) != 0;
    r.numb_path = static_cast<std::uint8_t>(p[49] & 0x7F);
    r.p_key = load_be16(p + 50);
    const std::uint16_t qos_sl = load_be16(p + 52);
    r.qos_class = static_cast<std::uint16_t>(qos_sl >> 4);
    r.sl = static_cast<std::uint8_t>(qos_sl & 0xF);
    r.mtu_selector = selector_of(p[54]);
    r.mtu = value_of(p[54]);
    r.rate_selector = selector_of(p[55]);
    r.rate = value_of(p[55]);
    r.packet_life_time_selector = selector_of(p[56]);
    r.packet_life_time = value_of(p[56]);
    r.preference = p[57];
    return r;
}

PathQuery& PathQuery::set_service_id(std::uint64_t v) {
    record.service_id = v;
    component_mask |= path_comp::service_id;
    return *this;
}
PathQuery& PathQuery::set_dgid(const Gid& v) {
    record.dgid = v;
    component_mask |= path_comp::dgid;
    return *this;
}
PathQuery& PathQuery::set_sgid(const Gid& v) {
    record.sgid = v;
    component_mask |= path_comp::sgid;
    return *this;
}
PathQuery& PathQuery::set_dlid(std::uint16_t v) {
    record.dlid = v;
    component_mask |= path_comp::dlid;
    return *this;
}
PathQuery& PathQuery::set_slid(std::uint16_t v) {
    record.slid = v;
    component_mask |= path_comp::slid;
    return *this;
}
PathQuery& PathQuery::set_raw_traffic(bool v) {
    record.raw_traffic = v;
    component_mask |= path_comp::raw_traffic;
    return *this;
}
PathQuery& PathQuery::set_flow_label(std::uint32_t v) {
    record.flow_label = v;
    component_mask |= path_comp::flow_label;
    return *this;
}
PathQuery& PathQuery::set_hop_limit(std::uint8_t v) {
    record.hop_limit = v;
    component_mask |= path_comp::hop_limit;
    return *this;
}
PathQuery& PathQuery::set_tclass(std::uint8_t v) {
    record.tclass = v;
    component_mask |= path_comp::tclass;
    return *this;
}
PathQuery& PathQuery::set_reversible(bool v) {
    record.reversible = v;
    component_mask |= path_comp::reversible;
    return *this;
}
PathQuery& PathQuery::set_numb_path(std::uint8_t v) {
    record.numb_path = v;
    component_mask |= path_comp::numb_path;
    return *this;
}
PathQuery& PathQuery::set_p_key(std::uint16_t v) {
    record.p_key = v;
    component_mask |= path_comp::p_key;
    return *this;
}
PathQuery& PathQuery::set_qos_class(std::uint16_t v) {
    record.qos_class = v;
    component_mask |= path_comp::qos_class;
    return *this;
}
PathQuery& PathQuery::set_sl(std::uint8_t v) {
    record.sl = v;
    component_mask |= path_comp::sl;
    return *this;
}
PathQuery& PathQuery::set_mtu(Selector selector, std::uint8_t mtu) {
    record.mtu_selector = selector;
    record.mtu = mtu;
    component_mask |= path_comp::mtu_selector | path_comp::mtu;
    return *this;
}
PathQuery& PathQuery::set_rate(Selector selector, std::uint8_t rate) {
    record.rate_selector = selector;
    record.rate = rate;
    component_mask |= path_comp::rate_selector | path_comp::rate;
    return *this;
}
PathQuery& PathQuery::set_packet_life_time(Selector selector, std::uint8_t v) {
    record.packet_life_time_selector = selector;
    record.packet_life_time = v;
    component_mask |= path_comp::packet_life_time_selector | path_comp::packet_life_time;
    return *this;
}
PathQuery& PathQuery::set_preference(std::uint8_t v) {
    record.preference = v;
    component_mask |= path_comp::preference;
    return *this;
}

}  // namespace ipoibd::sa
