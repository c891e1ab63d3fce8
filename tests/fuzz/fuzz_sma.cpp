// libFuzzer target for the SMP codecs, the directed-route hop rules and the
// Subnet Management Agent.
//
// Input: consecutive 257-byte records, one control byte then a 256-byte MAD;
// a short last record is passed as is (a wrong-size MAD). Control bit 0 set
// makes the MAD likely to reach the agent's attribute code: versions 1, a
// subnet class, Get or Set of a supported attribute, and for directed route
// HopPointer = HopCount with a permissive DrDLID. Every MAD goes, in order,
// to one Sma, so Sets build up state for later Gets.
//
// Invariants checked (a violation aborts):
//   - decode_smp(encode(decode_smp(x))) == decode_smp(x);
//   - each handle() gives a response or a drop, never both, and neither
//     only for a TrapRepress it took (counted as such); a trap only with a
//     drop (an M_Key violation) and addressed to the SM LID; a
//     response is a 256-byte GetResp to the same TID, class and attribute,
//     with D set for directed route;
//   - responses + drops + TrapRepresses taken equals the MADs handled;
//   - the port's state stays Down..Active, its P_Key table keeps its size,
//     and its PortInfo stays encodable;
//   - the switch hop rules never pick a port outside 1..num_ports, and never
//     leave HopPointer beyond HopCount + 1 unless they discard.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <vector>

#include "transport/sma.h"
#include "transport/wire/smp.h"
#include "transport/wire/smp_dr.h"

namespace {

using namespace ipoibd;

constexpr std::size_t kRecord = 1 + ib::kMadSize;
constexpr std::uint8_t kSwitchPorts = 36;

void check(bool ok) {
    if (!ok) std::abort();
}

void normalize(std::vector<std::uint8_t>& mad) {
    static constexpr std::uint16_t kAttributes[] = {
        ib::smp_attr::node_info, ib::smp_attr::node_description, ib::smp_attr::port_info,
        ib::smp_attr::p_key_table, ib::smp_attr::guid_info, ib::smp_attr::switch_info};
    mad[0] = ib::kMadBaseVersion;
    const bool directed = (mad[1] & 1) != 0;
    mad[1] = directed ? ib::mgmt_class::subn_directed_route : ib::mgmt_class::subn_lid_routed;
    mad[2] = ib::class_version::subn;
    mad[3] = (mad[3] & 1) != 0 ? ib::method::get : ib::method::set;
    store_be16(mad.data() + 16, kAttributes[mad[16] % std::size(kAttributes)]);
    if (directed) {
        mad[ib::smp_offset::hop_count] &= 0x3F;
        mad[ib::smp_offset::hop_pointer] = mad[ib::smp_offset::hop_count];
        mad[4] &= 0x7F;  // D = 0
        store_be16(mad.data() + ib::smp_offset::dr_dlid, ib::kLidPermissive);
    }
}

void check_round_trip(const ib::Smp& smp) {
    std::vector<std::uint8_t> again(ib::Smp::size);
    if (!smp.fields_in_range()) return;
    smp.write_to(again.data());
    auto back = ib::decode_smp(again);
    check(back.has_value() && *back == smp);
}

void check_switch_rules(ib::Smp smp, std::uint8_t in_port) {
    const auto hop = smp.direction ? ib::dr_switch_returning(smp, kSwitchPorts)
                                   : ib::dr_switch_outbound(smp, in_port, kSwitchPorts);
    if (hop.action == ib::DrAction::discard) return;
    check(smp.hop_count <= ib::kSmpMaxHopCount);
    check(smp.hop_pointer <= smp.hop_count + 1);
    if (hop.action == ib::DrAction::send_on_port) check(hop.port >= 1 && hop.port <= kSwitchPorts);
}

void check_result(const ib::Smp* request, const transport::SmaResult& r, const transport::Sma& sma) {
    check(!(r.response.has_value() && r.drop.has_value()));
    if (!r.response && !r.drop) check(request != nullptr && request->method == ib::method::trap_repress);
    if (r.trap) {
        check(r.drop == transport::SmaDrop::m_key_mismatch);
        check(r.trap->dlid == sma.port_info().master_sm_lid);
        auto trap = ib::decode_smp(r.trap->mad);
        check(trap.has_value() && trap->method == ib::method::trap);
    }
    if (!r.response) return;
    check(request != nullptr);
    auto reply = ib::decode_smp(r.response->mad);
    check(reply.has_value());
    check(reply->method == ib::method::get_resp);
    check(reply->transaction_id == request->transaction_id);
    check(reply->mgmt_class == request->mgmt_class);
    check(reply->attribute_id == request->attribute_id);
    if (reply->is_directed_route()) check(reply->direction);
}

void check_port(const transport::Sma& sma, std::uint64_t handled) {
    const auto a = sma.attributes();
    check(a.state >= transport::PortState::down && a.state <= transport::PortState::active);
    check(a.pkey_table.size() == sma.identity().partition_cap);
    check(sma.port_info().fields_in_range());
    std::uint64_t total = sma.counters().responses + sma.counters().trap_represses;
    for (auto n : sma.counters().dropped) total += n;
    check(total == handled);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    transport::SmaIdentity id;
    id.node_guid = 0x0002C90300000010ULL;
    id.port_guid = 0x0002C90300000011ULL;
    id.node_description = "fuzz";
    id.partition_cap = 40;  // a partial second P_KeyTable block
    transport::Sma sma(id);
    if (size > 0 && (data[0] & 0x80) != 0) sma.link_up();

    std::uint64_t handled = 0;
    // A fake clock for the M_Key lease: each record moves it 0-31 s on.
    transport::Sma::Clock::time_point now{};
    for (std::size_t at = 0; at < size; at += kRecord) {
        const std::uint8_t control = data[at];
        std::vector<std::uint8_t> mad(data + at + 1, data + std::min(size, at + kRecord));
        if (mad.size() == ib::kMadSize && (control & 1) != 0) normalize(mad);
        auto smp = ib::decode_smp(mad);
        if (smp) {
            check_round_trip(*smp);
            check_switch_rules(*smp, static_cast<std::uint8_t>(control >> 1));
        }
        now += std::chrono::seconds(control & 0x1F);
        const auto r = sma.handle(mad, static_cast<std::uint16_t>(control << 4), now);
        ++handled;
        check_result(smp ? &*smp : nullptr, r, sma);
        if ((control & 0x40) != 0) (void)((control & 0x20) != 0 ? sma.link_down() : sma.link_up());
        check_port(sma, handled);
    }
    return 0;
}
