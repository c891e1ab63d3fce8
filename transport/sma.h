// The Subnet Management Agent of one channel adapter port (IBA vol. 1 14.3,
// 14.2.5): the part of a port the subnet manager talks to on QP0.
//
// Sans-I/O. The owning port hands it every SMP that arrives on QP0, with the
// LRH SLID, and sends back what it returns; it reports the physical link
// with link_up()/link_down(). The Sma holds the port's identity and the
// state the SM programs (LID, LMC, SM LID/SL, PortState, P_Key table, MTU,
// M_Key) and reports each change as the PortEvents verbs would raise.
//
// Handling of one SMP, in order; the first failure decides:
//  1. decode: exactly 256 bytes, MgmtClass 0x01 or 0x81, else drop not_smp;
//  2. a response or TrapRepress is not a request for the SMA: drop;
//  3. directed route: the destination's hop rule (smp_dr.h,
//     dr_receive_request): records ReturnPath, advances HopPointer, or drops;
//  4. BaseVersion and ClassVersion must be 1: GetResp status 0x0004;
//  5. M_Key check (14.2.4), as below: drop silently, count an
//     M_KeyViolation, start the lease and send Trap 256 when it fails;
//  6. method: Get or Set, else status 0x0008; attribute and method: else
//     status 0x000C; AttributeModifier and Set values: else status 0x001C,
//     and an invalid Set changes nothing;
//  7. the GetResp: the request turned around (same TID, attribute, modifier,
//     M_Key, paths), Data = the attribute after the operation, or the
//     request's Data when the status is an error; for directed route D = 1
//     and the responder's hop rule (dr_send_response) picks the way back.
//
// The M_Key (14.2.4): a port whose M_Key is 0, or a request carrying it,
// passes. Otherwise a Get passes at M_KeyProtectBits 0 (PortInfo shows the
// M_Key) and 1 (PortInfo shows 0 in its place); a Get at 2 or 3, every Set
// and a TrapRepress fail: an M_Key violation. A violation starts the lease
// countdown (M_KeyLeasePeriod seconds; 0: it never runs) unless it is
// running; a request with the right M_Key stops it; when it runs out, the
// protect bits become 0, so that an SM that lost the key can read it with a
// Get and take the port back. Each violation sends Trap 256 (Bad M_Key) to
// the master SM, at most one a second (the rest counted).
//
// Supported: Get NodeInfo, NodeDescription, PortInfo, P_KeyTable, GUIDInfo
// (block 0); Set PortInfo, P_KeyTable; TrapRepress (consumed). Choices the
// spec leaves open are in docs/smp.md.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/byte_io.h"
#include "transport/port.h"
#include "transport/wire/smp.h"
#include "transport/wire/smp_dr.h"

namespace ipoibd::transport {

// What the port is: fixed for its lifetime.
struct SmaIdentity {
    std::uint64_t node_guid = 0;
    std::uint64_t port_guid = 0;
    std::uint64_t system_image_guid = 0;  // 0: the node GUID
    std::string node_description;         // at most 64 bytes are sent
    std::uint32_t vendor_id = 0;          // 24 bits, an IEEE OUI
    std::uint16_t device_id = 0;
    std::uint32_t revision = 0;
    std::uint8_t port_num = 1;            // LocalPortNum; a CA of one port
    std::uint16_t partition_cap = 32;     // P_Key table entries, 1..
    ib::Mtu mtu_cap = ib::Mtu::mtu4096;
    std::uint8_t link_width_supported = ib::link_width::x1 | ib::link_width::x4;
    std::uint8_t link_width_active = ib::link_width::x4;
    std::uint8_t link_speed_supported = ib::link_speed::sdr | ib::link_speed::ddr | ib::link_speed::qdr;
    std::uint8_t link_speed_active = ib::link_speed::qdr;
};

// Why an SMP got no response. Each is counted.
enum class SmaDrop : std::uint8_t {
    not_smp,         // not 256 bytes, or not a subnet management class
    not_a_request,   // a response (R bit) or TrapRepress: nothing to answer
    directed_route,  // the hop rules discard it; SmaResult::dr_discard says which
    m_key_mismatch,  // M_Key check failed (14.2.4); PortInfo M_KeyViolations counts it
    no_local_sm,     // the response would go to an SM on this node, and there is none
    count_
};
inline constexpr std::size_t kSmaDropCount = static_cast<std::size_t>(SmaDrop::count_);
const char* to_string(SmaDrop d);  // words, for logs
const char* token(SmaDrop d);      // m_key_mismatch, ...: counter names

// A GetResp to send on QP0 (VL15, to QP0, SL 0): LRH DLID `dlid`. The LRH
// SLID is the port's LID, or the permissive LID while it has none.
struct SmaResponse {
    std::array<std::uint8_t, ib::kMadSize> mad{};
    std::uint16_t dlid = ib::kLidPermissive;
};

struct SmaResult {
    std::optional<SmaResponse> response;
    // A Trap to send, LID-routed to the master SM (dlid), from QP0 to QP0.
    std::optional<SmaResponse> trap;
    // In this order: lid_change, sm_change, pkey_change, then port_down or
    // port_active, then client_reregister.
    std::vector<PortEvent> events;
    std::optional<SmaDrop> drop;
    // A directed-route response for an SM on this very node (a request of
    // HopCount 0 from it, set_local_sm): handed back, not sent.
    std::optional<SmaResponse> local_response;
    ib::DrDiscard dr_discard = ib::DrDiscard::none;  // when drop is directed_route
};

struct SmaCounters {
    std::uint64_t responses = 0;         // GetResps returned
    std::uint64_t error_responses = 0;   // of those, with a non-zero status
    std::uint64_t m_key_lease_expiries = 0;  // protection dropped to 0 after a lease ran out
    std::uint64_t traps_sent = 0;        // Trap 256 to the SM
    std::uint64_t traps_suppressed = 0;  // violations within a second of the last trap
    std::uint64_t trap_represses = 0;    // TrapRepresses taken
    std::array<std::uint64_t, kSmaDropCount> dropped{};
    std::uint64_t dropped_for(SmaDrop d) const { return dropped[static_cast<std::size_t>(d)]; }
};
// As "sma_responses", "sma_dropped_<reason>", ...
void visit(const SmaCounters& c, CounterSink& out);

class Sma {
public:
    // The port starts as hardware does: link down (PortState Down,
    // PortPhysicalState Polling), no LID, P_Key table {0xFFFF, 0, ...}.
    explicit Sma(SmaIdentity identity);

    using Clock = std::chrono::steady_clock;
    // One SMP received on QP0; `lrh_slid` is the LRH SLID it came from;
    // `now` runs the M_Key lease.
    SmaResult handle(bytes mad, std::uint16_t lrh_slid, Clock::time_point now = Clock::now());

    // The physical link came up (PortPhysicalState LinkUp; PortState Down ->
    // Init) or went down (Polling; PortState Down, port_down if it was Active).
    // Repeating the current state changes nothing.
    SmaResult link_up();
    SmaResult link_down();

    // The port as the layers above see it. pkey_table has partition_cap
    // entries, 0 for an empty one, so that indexes are stable.
    PortAttributes attributes() const;
    // PortInfo as a Get would return it to a requester holding the M_Key.
    ib::PortInfo port_info() const { return port_info_; }
    // NodeInfo as a Get returns it.
    ib::NodeInfo node_info() const;
    // Whether an SM (or a management application) runs on this node: then
    // the responses to its directed-route requests of HopCount 0, which
    // never leave the node, come back in SmaResult::local_response instead
    // of being dropped as no_local_sm.
    void set_local_sm(bool present) { local_sm_ = present; }
    // PortInfo CapabilityMask IsSM (IBA 14.2.5.6): an SM runs on this port.
    void set_is_sm(bool is_sm);
    const SmaIdentity& identity() const { return identity_; }
    const SmaCounters& counters() const { return counters_; }
    // When an SMP request carrying the port's M_Key (any, while it has
    // none) was last answered: the SM's sweeps; nullopt before the first.
    std::optional<Clock::time_point> last_request() const { return last_request_; }

private:
    enum class MKeyCheck : std::uint8_t { pass, pass_hide_m_key, fail };

    MKeyCheck check_m_key(const ib::Smp& request, Clock::time_point now);
    void on_m_key_violation(const ib::Smp& request, std::uint16_t lrh_slid, Clock::time_point now, SmaResult& result);
    std::uint16_t process(const ib::Smp& request, ib::SmpData& data, MKeyCheck m_key, SmaResult& result);
    std::uint16_t process_get(const ib::Smp& request, ib::SmpData& data, MKeyCheck m_key) const;
    std::uint16_t set_port_info(const ib::Smp& request, ib::SmpData& data, SmaResult& result);
    std::uint16_t set_p_key_table(const ib::Smp& request, ib::SmpData& data, SmaResult& result);
    std::optional<ib::PortInfo> port_info_after_set(const ib::PortInfo& requested) const;
    bool selects_this_port(std::uint32_t attribute_modifier) const;
    std::optional<std::size_t> p_key_block_start(std::uint32_t attribute_modifier) const;
    ib::PKeyTableBlock p_key_block(std::size_t first) const;
    SmaResult respond(ib::Smp reply, std::uint16_t lrh_slid, SmaResult result);
    SmaResult drop(SmaDrop why, SmaResult result = {});

    SmaIdentity identity_;
    ib::PortInfo port_info_;
    std::vector<std::uint16_t> p_keys_;
    SmaCounters counters_;
    std::optional<Clock::time_point> lease_ends_;  // the M_Key lease is running
    std::optional<Clock::time_point> last_trap_;
    std::optional<Clock::time_point> last_request_;
    std::uint64_t next_trap_tid_ = 1;
    bool local_sm_ = false;
};

}  // namespace ipoibd::transport
