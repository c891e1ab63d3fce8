// Directed-route SMP hop processing (IBA vol. 1 14.2.2): how the nodes on a
// directed route move HopPointer, fill ReturnPath and pick the next port.
//
// A directed route has up to three parts:
//   [LID-routed from the SM, DrSLID = its LID]  directed part  [LID-routed
//   to DrDLID]
// The directed part is a list of egress ports, InitialPath[1..HopCount]: node
// i sends the SMP out of InitialPath[i]. Node 0 is the requester (or the
// switch where a LID-routed first part ends). On the way out every node that
// receives the SMP records its ingress port in ReturnPath[HopPointer]; on the
// way back node i sends the response out of ReturnPath[i]. HopPointer counts
// the hops done: it reaches HopCount + 1 at the destination and 0 again back
// at the requester. A DrSLID or DrDLID equal to the permissive LID (0xFFFF)
// means "no LID-routed part at this end".
//
// Example, HopCount 2: SM (CA) -> switch S -> CA A.
//   SM sends         HopPointer 0 -> 1, out InitialPath[1]        (C14-9:1)
//   S receives on p  ReturnPath[1] = p, HopPointer 2, out InitialPath[2] (C14-9:2)
//   A receives on q  ReturnPath[2] = q, HopPointer 3, deliver to SMA (C14-9:3)
//   A responds       D = 1, HopPointer 2, out ReturnPath[2] = q    (C14-13:1)
//   S receives       HopPointer 1, out ReturnPath[1] = p           (C14-13:2)
//   SM receives      HopPointer 0, deliver to SM                   (C14-13:3)
//
// The functions are pure: each applies one node's rule to the SMP in place
// and says what to do next. The numbered comments name the clauses of
// 14.2.2.2 (outbound, D = 0, C14-9) and 14.2.2.4 (returning, D = 1, C14-13);
// every node checks C14-6 (HopCount at most 63) first. A node applies them
// to a DR SMP addressed to it: LRH DLID permissive or one of its LIDs. Along a
// LID-routed part switches forward the SMP like any packet.
//
// Where 14.2.2 leaves a choice this code decides (docs/smp.md):
//   - a responder reached through a LID-routed last part sends its response
//     LID-routed back to the request's LRH SLID with HopPointer unchanged
//     (HopCount + 1); the switch that ended the directed part then applies
//     C14-13:1 and starts the directed way back;
//   - a requester whose route starts with a LID-routed part (DrSLID not
//     permissive) sends the SMP with HopPointer 0 LID-routed to the first
//     switch itself; that switch applies C14-9:1 (dr_switch_outbound).
#pragma once

#include <cstdint>
#include <span>

#include "transport/wire/smp.h"

namespace ipoibd::ib {

enum class DrAction : std::uint8_t {
    deliver,          // to this node's SMA (outbound) or SM (returning)
    send_on_port,     // out of `port`, on the directed part (LRH DLID permissive)
    send_lid_routed,  // by LID to `lid` (a LID-routed part)
    discard,          // `reason` says why
};

enum class DrDiscard : std::uint8_t {
    none,
    bad_hop_count,             // C14-6: HopCount above 63
    wrong_direction,           // the D bit does not match the rule applied
    hop_pointer_not_advanced,  // C14-9:1: received outbound with HopPointer 0 and no LID-routed first part
    not_a_switch,              // C14-9:2, C14-13:2: an intermediate hop reached a CA or router
    invalid_port,              // the path names a port this node does not have
    dr_dlid_not_permissive,    // C14-9:3: only a switch can start a LID-routed last part
    dr_slid_not_permissive,    // C14-13:3: only a switch can start a LID-routed first part back
    bad_hop_pointer,           // C14-9:5, C14-13:5: HopPointer fits no rule
    count_
};
inline constexpr std::size_t kDrDiscardCount = static_cast<std::size_t>(DrDiscard::count_);
const char* to_string(DrDiscard d);
const char* to_string(DrAction a);

struct DrDecision {
    DrAction action = DrAction::discard;
    std::uint8_t port = 0;   // send_on_port
    std::uint16_t lid = 0;   // send_lid_routed
    DrDiscard reason = DrDiscard::none;

    static DrDecision deliver() { return {DrAction::deliver, 0, 0, DrDiscard::none}; }
    static DrDecision on_port(std::uint8_t p) { return {DrAction::send_on_port, p, 0, DrDiscard::none}; }
    static DrDecision lid_routed(std::uint16_t l) { return {DrAction::send_lid_routed, 0, l, DrDiscard::none}; }
    static DrDecision discard(DrDiscard why) { return {DrAction::discard, 0, 0, why}; }
    bool operator==(const DrDecision&) const = default;
};

// Sets the directed part of an outbound request: HopCount = ports.size(),
// InitialPath[1..] = ports, HopPointer 0, D 0. InitialPath[0] is unused.
// False (SMP unchanged) when there are more than 63 ports.
bool dr_set_initial_path(Smp& smp, std::span<const std::uint8_t> ports);

// --- The requester (the SM's node) -----------------------------------------

// Sends a request built with HopPointer 0 and D 0 (C14-9:1; C14-9:3 when
// HopCount is 0). `num_ports`: this node's ports, numbered 1..num_ports.
//   HopCount > 0:  HopPointer 1, out InitialPath[1].
//   HopCount == 0: HopPointer 1; deliver to this node's own SMA when DrDLID
//                  is permissive, else LID-routed to DrDLID.
DrDecision dr_send_request(Smp& smp, std::uint8_t num_ports);

// The requester receives a response (C14-13:3, C14-13:4) on a CA or router.
//   HopPointer 1: the end of the directed part; HopPointer 0, deliver to
//                 the SM. DrSLID must be permissive: a CA cannot route.
//   HopPointer 0: arrived by the LID-routed first part; deliver.
//   2..HopCount:  an intermediate hop of a switch: discard.
DrDecision dr_receive_response(Smp& smp);

// --- The destination (the responder's node) --------------------------------

// A CA or router receives a request on `in_port` (C14-9).
//   HopPointer == HopCount: the end of the directed part. DrDLID must be
//       permissive; ReturnPath[HopCount] = in_port when HopCount > 0;
//       HopPointer HopCount + 1; deliver to the SMA.
//   HopPointer == HopCount + 1: arrived by the LID-routed last part; deliver.
//   0 < HopPointer < HopCount: an intermediate hop of a switch: discard.
//   HopPointer 0 with HopCount > 0: the sender did not advance it: discard.
DrDecision dr_receive_request(Smp& smp, std::uint8_t in_port);

// The SMA (of a CA, router or switch) turns a delivered request, HopPointer
// HopCount + 1, into its response and sends it. Sets D = 1.
//   HopCount == 0 (C14-13:3): HopPointer 0; deliver to the SM of this very
//       node when DrSLID is permissive, else LID-routed to DrSLID.
//   DrDLID not permissive: the request came by a LID-routed last part;
//       LID-routed back to `request_slid` (its LRH SLID), HopPointer kept.
//   otherwise (C14-13:1): HopPointer HopCount, out ReturnPath[HopCount],
//       the port the request came in on.
DrDecision dr_send_response(Smp& smp, std::uint8_t num_ports, std::uint16_t request_slid);

// --- A switch on the route --------------------------------------------------

// A switch with external ports 1..num_ports receives an outbound SMP (D 0)
// on `in_port` (C14-9).
//   HopPointer 0, HopCount > 0 (C14-9:1): only after a LID-routed first part
//       (DrSLID not permissive): this switch starts the directed part,
//       HopPointer 1, out InitialPath[1].
//   0 < HopPointer < HopCount (C14-9:2): ReturnPath[HopPointer] = in_port,
//       HopPointer + 1, out InitialPath[HopPointer].
//   HopPointer == HopCount (C14-9:3): ReturnPath[HopPointer] = in_port when
//       HopCount > 0, HopPointer + 1; deliver to this switch's SMA when
//       DrDLID is permissive, else LID-routed to DrDLID.
//   HopPointer == HopCount + 1 (C14-9:4): deliver to this switch's SMA.
DrDecision dr_switch_outbound(Smp& smp, std::uint8_t in_port, std::uint8_t num_ports);

// A switch receives a returning SMP (D 1) (C14-13).
//   HopPointer == HopCount + 1, HopCount > 0 (C14-13:1): it came back by the
//       LID-routed last part; HopPointer HopCount, out ReturnPath[HopCount].
//   2 <= HopPointer <= HopCount (C14-13:2): HopPointer - 1, out
//       ReturnPath[HopPointer].
//   HopPointer 1 (C14-13:3): HopPointer 0; deliver to this switch's SM when
//       DrSLID is permissive, else LID-routed to DrSLID.
//   HopPointer 0 (C14-13:4): arrived by the LID-routed first part; deliver.
DrDecision dr_switch_returning(Smp& smp, std::uint8_t num_ports);

}  // namespace ipoibd::ib
