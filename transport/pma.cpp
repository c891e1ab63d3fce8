#include "transport/pma.h"

#include <algorithm>
#include <limits>

namespace ipoibd::transport {

namespace pma {

void PortCounters::write_to(std::uint8_t* p) const {
    std::fill(p, p + size, std::uint8_t{0});
    p[1] = port_select;
    store_be16(p + 2, counter_select);
    store_be16(p + 4, symbol_errors);
    p[6] = link_error_recoveries;
    p[7] = link_downed;
    store_be16(p + 8, rcv_errors);
    store_be16(p + 10, rcv_remote_physical_errors);
    store_be16(p + 12, rcv_switch_relay_errors);
    store_be16(p + 14, xmit_discards);
    p[16] = xmit_constraint_errors;
    p[17] = rcv_constraint_errors;
    p[19] = static_cast<std::uint8_t>(((local_link_integrity_errors & 0xF) << 4) | (excessive_buffer_overruns & 0xF));
    store_be16(p + 22, vl15_dropped);
    store_be32(p + 24, xmit_data);
    store_be32(p + 28, rcv_data);
    store_be32(p + 32, xmit_packets);
    store_be32(p + 36, rcv_packets);
    store_be32(p + 40, xmit_wait);
}

PortCounters PortCounters::read_from(const std::uint8_t* p) {
    PortCounters c;
    c.port_select = p[1];
    c.counter_select = load_be16(p + 2);
    c.symbol_errors = load_be16(p + 4);
    c.link_error_recoveries = p[6];
    c.link_downed = p[7];
    c.rcv_errors = load_be16(p + 8);
    c.rcv_remote_physical_errors = load_be16(p + 10);
    c.rcv_switch_relay_errors = load_be16(p + 12);
    c.xmit_discards = load_be16(p + 14);
    c.xmit_constraint_errors = p[16];
    c.rcv_constraint_errors = p[17];
    c.local_link_integrity_errors = static_cast<std::uint8_t>(p[19] >> 4);
    c.excessive_buffer_overruns = static_cast<std::uint8_t>(p[19] & 0xF);
    c.vl15_dropped = load_be16(p + 22);
    c.xmit_data = load_be32(p + 24);
    c.rcv_data = load_be32(p + 28);
    c.xmit_packets = load_be32(p + 32);
    c.rcv_packets = load_be32(p + 36);
    c.xmit_wait = load_be32(p + 40);
    return c;
}

void PortCountersExtended::write_to(std::uint8_t* p) const {
    std::fill(p, p + size, std::uint8_t{0});
    p[1] = port_select;
    store_be16(p + 2, counter_select);
    store_be64(p + 8, xmit_data);
    store_be64(p + 16, rcv_data);
    store_be64(p + 24, xmit_packets);
    store_be64(p + 32, rcv_packets);
    store_be64(p + 40, unicast_xmit_packets);
    store_be64(p + 48, unicast_rcv_packets);
    store_be64(p + 56, multicast_xmit_packets);
    store_be64(p + 64, multicast_rcv_packets);
}

PortCountersExtended PortCountersExtended::read_from(const std::uint8_t* p) {
    PortCountersExtended c;
    c.port_select = p[1];
    c.counter_select = load_be16(p + 2);
    c.xmit_data = load_be64(p + 8);
    c.rcv_data = load_be64(p + 16);
    c.xmit_packets = load_be64(p + 24);
    c.rcv_packets = load_be64(p + 32);
    c.unicast_xmit_packets = load_be64(p + 40);
    c.unicast_rcv_packets = load_be64(p + 48);
    c.multicast_xmit_packets = load_be64(p + 56);
    c.multicast_rcv_packets = load_be64(p + 64);
    return c;
}

}  // namespace pma

namespace {

constexpr std::uint8_t kRespTimeValue = 18;  // 4.096 us * 2^18, about 1 s: the agent runs in a daemon's loop

template <class T>
T saturated(std::uint64_t v) {
    return static_cast<T>(std::min<std::uint64_t>(v, std::numeric_limits<T>::max()));
}

}  // namespace

const char* to_string(PmaDrop d) {
    switch (d) {
        case PmaDrop::not_perf_mgt: return "not_perf_mgt";
        case PmaDrop::not_a_request: return "not_a_request";
        case PmaDrop::count_: break;
    }
    return "unknown";
}

void visit(const PmaCounters& c, CounterSink& out) {
    out.counter("pma_responses", c.responses);
    out.counter("pma_error_responses", c.error_responses);
    out.counter("pma_resets", c.resets);
    visit_reasons<PmaDrop>(out, "pma_dropped_", c.dropped, [](PmaDrop d) { return to_string(d); });
}

PmaPortCounters pma_port_counters(const PortCounters& c) {
    constexpr std::uint64_t kVcrc = 2;
    PmaPortCounters p;
    p.xmit_packets = c.tx_packets;
    p.rcv_packets = c.rx_packets;
    p.xmit_octets = c.tx_bytes >= kVcrc * c.tx_packets ? c.tx_bytes - kVcrc * c.tx_packets : 0;
    p.rcv_octets = c.rx_bytes >= kVcrc * c.rx_packets ? c.rx_bytes - kVcrc * c.rx_packets : 0;
    for (std::uint64_t m : c.malformed) p.rcv_errors += m;
    return p;
}

PmaPortCounters Pma::relative(std::uint8_t port, const PmaPortCounters& now) const {
    const auto it = zero_.find(port);
    if (it == zero_.end()) return now;
    const PmaPortCounters& z = it->second;
    // A source that restarted below its zero (a port that came back) counts from 0 again.
    auto less = [](std::uint64_t a, std::uint64_t b) { return a >= b ? a - b : a; };
    PmaPortCounters r;
    r.xmit_octets = less(now.xmit_octets, z.xmit_octets);
    r.rcv_octets = less(now.rcv_octets, z.rcv_octets);
    r.xmit_packets = less(now.xmit_packets, z.xmit_packets);
    r.rcv_packets = less(now.rcv_packets, z.rcv_packets);
    r.unicast_xmit_packets = less(now.unicast_xmit_packets, z.unicast_xmit_packets);
    r.unicast_rcv_packets = less(now.unicast_rcv_packets, z.unicast_rcv_packets);
    r.multicast_xmit_packets = less(now.multicast_xmit_packets, z.multicast_xmit_packets);
    r.multicast_rcv_packets = less(now.multicast_rcv_packets, z.multicast_rcv_packets);
    r.rcv_errors = less(now.rcv_errors, z.rcv_errors);
    r.xmit_discards = less(now.xmit_discards, z.xmit_discards);
    r.vl15_dropped = less(now.vl15_dropped, z.vl15_dropped);
    r.rcv_constraint_errors = less(now.rcv_constraint_errors, z.rcv_constraint_errors);
    r.xmit_constraint_errors = less(now.xmit_constraint_errors, z.xmit_constraint_errors);
    return r;
}

std::optional<std::array<std::uint8_t, ib::kMadSize>> Pma::handle(bytes mad) {
    if (mad.size() != ib::kMadSize || mad[1] != ib::mgmt_class::perf_mgt) {
        ++counters_.dropped[static_cast<std::size_t>(PmaDrop::not_perf_mgt)];
        return std::nullopt;
    }
    const ib::MadHeader h = ib::MadHeader::read_from(mad.data());
    if (h.is_response() || h.method == ib::method::trap || h.method == ib::method::trap_repress) {
        ++counters_.dropped[static_cast<std::size_t>(PmaDrop::not_a_request)];
        return std::nullopt;
    }
    std::array<std::uint8_t, ib::kMadSize> out{};
    std::copy(mad.begin(), mad.end(), out.begin());
    ib::MadHeader reply = h;
    reply.method = ib::method::get_resp;
    reply.status = 0;
    if (h.base_version != ib::kMadBaseVersion || h.class_version != pma::kClassVersion)
        reply.status = ib::mad_status::bad_version;
    else
        reply.status = get_or_set(h, out.data() + pma::kDataOffset);
    if (reply.status != 0) std::copy(mad.begin() + pma::kDataOffset, mad.end(), out.begin() + pma::kDataOffset);
    reply.write_to(out.data());
    ++counters_.responses;
    if (reply.status != 0) ++counters_.error_responses;
    return out;
}

std::uint16_t Pma::get_or_set(const ib::MadHeader& h, std::uint8_t* data) {
    if (h.method != ib::method::get && h.method != ib::method::set) return ib::mad_status::method_not_supported;
    const bool set = h.method == ib::method::set;
    if (h.attribute_id == pma::attr::class_port_info) {
        if (set) return ib::mad_status::method_attr_not_supported;
        std::fill(data, data + ib::kMadSize - pma::kDataOffset, std::uint8_t{0});
        data[0] = ib::kMadBaseVersion;
        data[1] = pma::kClassVersion;
        store_be16(data + 2, pma::cap::extended_width_noietf);
        data[7] = kRespTimeValue;  // CapabilityMask2 0, RespTimeValue in the low 5 bits
        return 0;
    }
    if (h.attribute_id != pma::attr::port_counters && h.attribute_id != pma::attr::port_counters_extended)
        return ib::mad_status::method_attr_not_supported;
    const std::uint8_t port_select = data[1];
    const auto selected = port_select == pma::kAllPorts ? std::nullopt : source_(port_select);
    if (!selected) return ib::mad_status::invalid_attr_or_modifier;
    const std::uint8_t port = selected->port;
    const PmaPortCounters* raw = &selected->counters;
    if (auto g = generation_.try_emplace(port, selected->generation).first; g->second != selected->generation) {
        zero_.erase(port);  // another link's counters: the old one's resets are not theirs
        g->second = selected->generation;
    }
    const std::uint16_t select = load_be16(data + 2);
    constexpr std::uint16_t kKept = pma::select::rcv_errors | pma::select::xmit_discards | pma::select::vl15_dropped |
                                    pma::select::xmit_constraint_errors | pma::select::rcv_constraint_errors |
                                    pma::select::xmit_data | pma::select::rcv_data | pma::select::xmit_packets |
                                    pma::select::rcv_packets;
    constexpr std::uint16_t kKeptExt = 0x00FF;
    const std::uint16_t kept = h.attribute_id == pma::attr::port_counters ? kKept : kKeptExt;
    if (set && (select & kept) != 0) {
        // The named counters start again from 0: their current values become their zero.
        PmaPortCounters& z = zero_.try_emplace(port, PmaPortCounters{}).first->second;
        if (h.attribute_id == pma::attr::port_counters) {
            if (select & pma::select::xmit_data) z.xmit_octets = raw->xmit_octets;
            if (select & pma::select::rcv_data) z.rcv_octets = raw->rcv_octets;
            if (select & pma::select::xmit_packets) z.xmit_packets = raw->xmit_packets;
            if (select & pma::select::rcv_packets) z.rcv_packets = raw->rcv_packets;
            if (select & pma::select::rcv_errors) z.rcv_errors = raw->rcv_errors;
            if (select & pma::select::xmit_discards) z.xmit_discards = raw->xmit_discards;
            if (select & pma::select::vl15_dropped) z.vl15_dropped = raw->vl15_dropped;
            if (select & pma::select::xmit_constraint_errors) z.xmit_constraint_errors = raw->xmit_constraint_errors;
            if (select & pma::select::rcv_constraint_errors) z.rcv_constraint_errors = raw->rcv_constraint_errors;
        } else {
            if (select & pma::select_ext::xmit_data) z.xmit_octets = raw->xmit_octets;
            if (select & pma::select_ext::rcv_data) z.rcv_octets = raw->rcv_octets;
            if (select & pma::select_ext::xmit_packets) z.xmit_packets = raw->xmit_packets;
            if (select & pma::select_ext::rcv_packets) z.rcv_packets = raw->rcv_packets;
            if (select & pma::select_ext::unicast_xmit_packets) z.unicast_xmit_packets = raw->unicast_xmit_packets;
            if (select & pma::select_ext::unicast_rcv_packets) z.unicast_rcv_packets = raw->unicast_rcv_packets;
            if (select & pma::select_ext::multicast_xmit_packets)
                z.multicast_xmit_packets = raw->multicast_xmit_packets;
            if (select & pma::select_ext::multicast_rcv_packets) z.multicast_rcv_packets = raw->multicast_rcv_packets;
        }
        ++counters_.resets;
    }
    // A counter below its zero: the port came back and counts from 0 again;
    // forget that zero, or the counter would go backwards once it passes it.
    if (auto z = zero_.find(port); z != zero_.end()) {
        auto forget = [](std::uint64_t& zero, std::uint64_t now) {
            if (now < zero) zero = 0;
        };
        PmaPortCounters& zz = z->second;
        forget(zz.xmit_octets, raw->xmit_octets);
        forget(zz.rcv_octets, raw->rcv_octets);
        forget(zz.xmit_packets, raw->xmit_packets);
        forget(zz.rcv_packets, raw->rcv_packets);
        forget(zz.unicast_xmit_packets, raw->unicast_xmit_packets);
        forget(zz.unicast_rcv_packets, raw->unicast_rcv_packets);
        forget(zz.multicast_xmit_packets, raw->multicast_xmit_packets);
        forget(zz.multicast_rcv_packets, raw->multicast_rcv_packets);
        forget(zz.rcv_errors, raw->rcv_errors);
        forget(zz.xmit_discards, raw->xmit_discards);
        forget(zz.vl15_dropped, raw->vl15_dropped);
        forget(zz.rcv_constraint_errors, raw->rcv_constraint_errors);
        forget(zz.xmit_constraint_errors, raw->xmit_constraint_errors);
    }
    const PmaPortCounters c = relative(port, *raw);
    if (h.attribute_id == pma::attr::port_counters) {
        pma::PortCounters pc;
        pc.port_select = port_select;
        pc.counter_select = select;
        pc.rcv_errors = saturated<std::uint16_t>(c.rcv_errors);
        pc.xmit_discards = saturated<std::uint16_t>(c.xmit_discards);
        pc.vl15_dropped = saturated<std::uint16_t>(c.vl15_dropped);
        pc.rcv_constraint_errors = saturated<std::uint8_t>(c.rcv_constraint_errors);
        pc.xmit_constraint_errors = saturated<std::uint8_t>(c.xmit_constraint_errors);
        pc.xmit_data = saturated<std::uint32_t>(c.xmit_octets / 4);
        pc.rcv_data = saturated<std::uint32_t>(c.rcv_octets / 4);
        pc.xmit_packets = saturated<std::uint32_t>(c.xmit_packets);
        pc.rcv_packets = saturated<std::uint32_t>(c.rcv_packets);
        std::fill(data, data + ib::kMadSize - pma::kDataOffset, std::uint8_t{0});
        pc.write_to(data);
    } else {
        pma::PortCountersExtended pe;
        pe.port_select = port_select;
        pe.counter_select = select;
        pe.xmit_data = c.xmit_octets / 4;
        pe.rcv_data = c.rcv_octets / 4;
        pe.xmit_packets = c.xmit_packets;
        pe.rcv_packets = c.rcv_packets;
        pe.unicast_xmit_packets = c.unicast_xmit_packets;
        pe.unicast_rcv_packets = c.unicast_rcv_packets;
        pe.multicast_xmit_packets = c.multicast_xmit_packets;
        pe.multicast_rcv_packets = c.multicast_rcv_packets;
        std::fill(data, data + ib::kMadSize - pma::kDataOffset, std::uint8_t{0});
        pe.write_to(data);
    }
    return 0;
}

}  // namespace ipoibd::transport
