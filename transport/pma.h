// The Performance Management Agent of a port (IBA vol. 1 16.1): the
// agent perfquery, OpenSM's PerfMgr and ibqueryerrors talk to on QP1,
// management class PerfMgt (0x04), class version 1.
//
// Sans-I/O: the owner hands it a request MAD and a way to read a port's
// counters, and sends back the response it returns. It serves:
//   - Get ClassPortInfo (0x0001): CapabilityMask
//     IsExtendedWidthSupportedNoIETF (bit 10): PortCountersExtended with the
//     four data counters, without the unicast and multicast packet counts
//     (the soft ports do not count those apart), which read 0;
//   - Get and Set PortCounters (0x0012): the 16- and 32-bit counters, each
//     stopping at its largest value (16.1.3.5: they do not wrap);
//     PortXmitData and PortRcvData count octets divided by 4;
//   - Get and Set PortCountersExtended (0x001D): the 64-bit ones.
// A Set resets the counters its CounterSelect names (the rest are kept)
// and answers with the counters after the reset. Counters are not kept
// here: a reset records the current value as the counter's zero, and every
// Get reports the source's value less that zero, so the owner's own
// statistics (ipoibctl stats) go on counting from the start. A port whose
// counters started again for another link (Selected::generation: a switch
// port's new occupant) forgets the zeros of the old one.
//
// Handling, the first failure decides:
//  1. a MAD of 256 bytes of class PerfMgt, else nothing (drop not_perf_mgt);
//  2. a response, Trap or TrapRepress needs no answer (drop not_a_request);
//  3. BaseVersion 1 and ClassVersion 1, else GetResp status 0x0004;
//  4. Get or Set, else 0x0008; a supported attribute for the method, else
//     0x000C; PortSelect a port the source knows (0xFF, all ports, is not
//     supported: CapabilityMask bit 8 is clear), else 0x001C. The owner's
//     source decides which ports it knows: a channel adapter's take 0 as
//     its only port as well (`perfquery LID` sends PortSelect 0).
// The GetResp keeps the request's TID, attribute and modifier; Data is the
// attribute, or the request's Data when the status is an error.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "common/byte_io.h"
#include "common/counters.h"
#include "transport/port_core.h"
#include "transport/wire/mad.h"

namespace ipoibd::transport {

// What a port has counted since it came up (the owner's counters, raw).
struct PmaPortCounters {
    std::uint64_t xmit_octets = 0;  // LRH through ICRC of every packet sent
    std::uint64_t rcv_octets = 0;
    std::uint64_t xmit_packets = 0;
    std::uint64_t rcv_packets = 0;
    std::uint64_t unicast_xmit_packets = 0;  // 0: not counted apart (NoIETF)
    std::uint64_t unicast_rcv_packets = 0;
    std::uint64_t multicast_xmit_packets = 0;
    std::uint64_t multicast_rcv_packets = 0;
    std::uint64_t rcv_errors = 0;     // malformed packets received
    std::uint64_t xmit_discards = 0;  // packets the port could not send
    std::uint64_t vl15_dropped = 0;   // SMPs dropped
    std::uint64_t rcv_constraint_errors = 0;   // dropped by inbound partition enforcement (switch)
    std::uint64_t xmit_constraint_errors = 0;  // dropped by outbound partition enforcement (switch)
};

namespace pma {
inline constexpr std::uint8_t kClassVersion = 1;
inline constexpr std::size_t kDataOffset = 64;  // 24-byte MAD header, 40 reserved
namespace attr {
inline constexpr std::uint16_t class_port_info = 0x0001;
inline constexpr std::uint16_t port_counters = 0x0012;
inline constexpr std::uint16_t port_counters_extended = 0x001D;
}  // namespace attr
namespace cap {  // ClassPortInfo CapabilityMask
inline constexpr std::uint16_t all_port_select = 1u << 8;
inline constexpr std::uint16_t extended_width = 1u << 9;         // with the unicast/multicast counters
inline constexpr std::uint16_t extended_width_noietf = 1u << 10; // without them
}  // namespace cap
inline constexpr std::uint8_t kAllPorts = 0xFF;

// PortCounters (IBA 16.1.3.5), 44 bytes of Data.
struct PortCounters {
    static constexpr std::size_t size = 44;
    std::uint8_t port_select = 0;
    std::uint16_t counter_select = 0;
    std::uint16_t symbol_errors = 0;
    std::uint8_t link_error_recoveries = 0;
    std::uint8_t link_downed = 0;
    std::uint16_t rcv_errors = 0;
    std::uint16_t rcv_remote_physical_errors = 0;
    std::uint16_t rcv_switch_relay_errors = 0;
    std::uint16_t xmit_discards = 0;
    std::uint8_t xmit_constraint_errors = 0;
    std::uint8_t rcv_constraint_errors = 0;
    std::uint8_t local_link_integrity_errors = 0;   // 4 bits
    std::uint8_t excessive_buffer_overruns = 0;     // 4 bits
    std::uint16_t vl15_dropped = 0;
    std::uint32_t xmit_data = 0;  // octets / 4
    std::uint32_t rcv_data = 0;
    std::uint32_t xmit_packets = 0;
    std::uint32_t rcv_packets = 0;
    std::uint32_t xmit_wait = 0;

    void write_to(std::uint8_t* p) const;
    static PortCounters read_from(const std::uint8_t* p);
    bool operator==(const PortCounters&) const = default;
};
// CounterSelect bits of PortCounters that this agent resets.
namespace select {
inline constexpr std::uint16_t rcv_errors = 0x0008;
inline constexpr std::uint16_t xmit_discards = 0x0040;
inline constexpr std::uint16_t xmit_constraint_errors = 0x0080;
inline constexpr std::uint16_t rcv_constraint_errors = 0x0100;
inline constexpr std::uint16_t vl15_dropped = 0x0800;
inline constexpr std::uint16_t xmit_data = 0x1000;
inline constexpr std::uint16_t rcv_data = 0x2000;
inline constexpr std::uint16_t xmit_packets = 0x4000;
inline constexpr std::uint16_t rcv_packets = 0x8000;
}  // namespace select

// PortCountersExtended (IBA 16.1.4.11), 72 bytes of Data.
struct PortCountersExtended {
    static constexpr std::size_t size = 72;
    std::uint8_t port_select = 0;
    std::uint16_t counter_select = 0;
    std::uint64_t xmit_data = 0;  // octets / 4
    std::uint64_t rcv_data = 0;
    std::uint64_t xmit_packets = 0;
    std::uint64_t rcv_packets = 0;
    std::uint64_t unicast_xmit_packets = 0;
    std::uint64_t unicast_rcv_packets = 0;
    std::uint64_t multicast_xmit_packets = 0;
    std::uint64_t multicast_rcv_packets = 0;

    void write_to(std::uint8_t* p) const;
    static PortCountersExtended read_from(const std::uint8_t* p);
    bool operator==(const PortCountersExtended&) const = default;
};
namespace select_ext {
inline constexpr std::uint16_t xmit_data = 0x0001;
inline constexpr std::uint16_t rcv_data = 0x0002;
inline constexpr std::uint16_t xmit_packets = 0x0004;
inline constexpr std::uint16_t rcv_packets = 0x0008;
inline constexpr std::uint16_t unicast_xmit_packets = 0x0010;
inline constexpr std::uint16_t unicast_rcv_packets = 0x0020;
inline constexpr std::uint16_t multicast_xmit_packets = 0x0040;
inline constexpr std::uint16_t multicast_rcv_packets = 0x0080;
}  // namespace select_ext
}  // namespace pma

// A PortCore's counters as the PMA reports them: octets without the VCRC,
// packets delivered, malformed packets as receive errors.
PmaPortCounters pma_port_counters(const PortCounters& c);

enum class PmaDrop : std::uint8_t {
    not_perf_mgt,   // not a 256-byte MAD of class PerfMgt
    not_a_request,  // a response, Trap or TrapRepress
    count_
};
inline constexpr std::size_t kPmaDropCount = static_cast<std::size_t>(PmaDrop::count_);
const char* to_string(PmaDrop d);

struct PmaCounters {
    std::uint64_t responses = 0;
    std::uint64_t error_responses = 0;  // of those, with a non-zero status
    std::uint64_t resets = 0;           // Sets that reset counters
    std::array<std::uint64_t, kPmaDropCount> dropped{};
};
// As "pma_responses", "pma_dropped_<reason>", ...
void visit(const PmaCounters& c, CounterSink& out);

class Pma {
public:
    // The port that PortSelect names and its counters, or nullopt for a
    // port this agent does not serve (status 0x001C).
    struct Selected {
        std::uint8_t port = 0;  // the port's own number (resets are kept by it)
        PmaPortCounters counters;
        // Another value when the port's counters started again from 0 for
        // another link (a switch port's new occupant): the resets of the
        // old one are forgotten, not taken from the new one's counts.
        std::uint64_t generation = 0;
    };
    using Source = std::function<std::optional<Selected>(std::uint8_t port_select)>;
    explicit Pma(Source source) : source_(std::move(source)) {}

    // A GetResp to send back to the requester, or nullopt (counted).
    std::optional<std::array<std::uint8_t, ib::kMadSize>> handle(bytes mad);

    const PmaCounters& counters() const { return counters_; }

private:
    std::uint16_t get_or_set(const ib::MadHeader& h, std::uint8_t* data);
    PmaPortCounters relative(std::uint8_t port, const PmaPortCounters& now) const;

    Source source_;
    std::map<std::uint8_t, PmaPortCounters> zero_;  // by port: the values at the last reset of each counter
    std::map<std::uint8_t, std::uint64_t> generation_;  // by port: Selected::generation when zero_ was kept
    PmaCounters counters_;
};

}  // namespace ipoibd::transport
