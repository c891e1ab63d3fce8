// Directed-route hop rules; each function documents its rule in smp_dr.h.
#include "transport/wire/smp_dr.h"

#include <algorithm>

namespace ipoibd::ib {
namespace {

constexpr bool valid_port(std::uint8_t port, std::uint8_t num_ports) { return port >= 1 && port <= num_ports; }

// Sends out of `port` when this node has it.
DrDecision out_of(std::uint8_t port, std::uint8_t num_ports) {
    if (!valid_port(port, num_ports)) return DrDecision::discard(DrDiscard::invalid_port);
    return DrDecision::on_port(port);
}

// C14-6, and the D bit the rule expects: the discard reason, or none.
DrDiscard precheck(const Smp& smp, bool returning) {
    if (smp.hop_count > kSmpMaxHopCount) return DrDiscard::bad_hop_count;
    if (smp.direction != returning) return DrDiscard::wrong_direction;
    return DrDiscard::none;
}

// The end of the directed part on the way out: deliver here, or start the
// LID-routed last part (switches only).
DrDecision end_of_outbound_part(const Smp& smp) {
    if (smp.dr_dlid == kLidPermissive) return DrDecision::deliver();
    return DrDecision::lid_routed(smp.dr_dlid);
}

// The end of the directed part on the way back (HopPointer now 0).
DrDecision end_of_returning_part(const Smp& smp) {
    if (smp.dr_slid == kLidPermissive) return DrDecision::deliver();
    return DrDecision::lid_routed(smp.dr_slid);
}

}  // namespace

bool dr_set_initial_path(Smp& smp, std::span<const std::uint8_t> ports) {
    if (ports.size() > kSmpMaxHopCount) return false;
    smp.hop_count = static_cast<std::uint8_t>(ports.size());
    smp.hop_pointer = 0;
    smp.direction = false;
    smp.initial_path.fill(0);
    std::copy(ports.begin(), ports.end(), smp.initial_path.begin() + 1);
    return true;
}

DrDecision dr_send_request(Smp& smp, std::uint8_t num_ports) {
    if (auto why = precheck(smp, false); why != DrDiscard::none) return DrDecision::discard(why);
    if (smp.hop_pointer != 0) return DrDecision::discard(DrDiscard::bad_hop_pointer);
    smp.hop_pointer = 1;
    if (smp.hop_count == 0) return end_of_outbound_part(smp);  // C14-9:3, no hops
    return out_of(smp.initial_path[1], num_ports);              // C14-9:1
}

DrDecision dr_receive_response(Smp& smp) {
    if (auto why = precheck(smp, true); why != DrDiscard::none) return DrDecision::discard(why);
    const std::uint8_t hp = smp.hop_pointer;
    if (hp == 1) {  // C14-13:3
        if (smp.dr_slid != kLidPermissive) return DrDecision::discard(DrDiscard::dr_slid_not_permissive);
        smp.hop_pointer = 0;
        return DrDecision::deliver();
    }
    if (hp == 0) return DrDecision::deliver();  // C14-13:4
    if (hp <= smp.hop_count) return DrDecision::discard(DrDiscard::not_a_switch);  // C14-13:2
    return DrDecision::discard(DrDiscard::bad_hop_pointer);  // C14-13:1 belongs to the sender; C14-13:5
}

DrDecision dr_receive_request(Smp& smp, std::uint8_t in_port) {
    if (auto why = precheck(smp, false); why != DrDiscard::none) return DrDecision::discard(why);
    const unsigned hp = smp.hop_pointer;
    const unsigned hc = smp.hop_count;
    if (hp == 0 && hc != 0) return DrDecision::discard(DrDiscard::hop_pointer_not_advanced);  // C14-9:1
    if (hp < hc) return DrDecision::discard(DrDiscard::not_a_switch);                        // C14-9:2
    if (hp == hc) {                                                                           // C14-9:3
        if (smp.dr_dlid != kLidPermissive) return DrDecision::discard(DrDiscard::dr_dlid_not_permissive);
        if (hc != 0) smp.return_path[hc] = in_port;
        smp.hop_pointer = static_cast<std::uint8_t>(hc + 1);
        return DrDecision::deliver();
    }
    if (hp == hc + 1) return DrDecision::deliver();          // C14-9:4
    return DrDecision::discard(DrDiscard::bad_hop_pointer);  // C14-9:5
}

DrDecision dr_send_response(Smp& smp, std::uint8_t num_ports, std::uint16_t request_slid) {
    smp.direction = true;
    if (auto why = precheck(smp, true); why != DrDiscard::none) return DrDecision::discard(why);
    const unsigned hc = smp.hop_count;
    if (smp.hop_pointer != hc + 1) return DrDecision::discard(DrDiscard::bad_hop_pointer);
    if (hc == 0) {  // C14-13:3 on the requester's own node
        smp.hop_pointer = 0;
        return end_of_returning_part(smp);
    }
    if (smp.dr_dlid != kLidPermissive) return DrDecision::lid_routed(request_slid);
    smp.hop_pointer = static_cast<std::uint8_t>(hc);  // C14-13:1
    return out_of(smp.return_path[hc], num_ports);
}

DrDecision dr_switch_outbound(Smp& smp, std::uint8_t in_port, std::uint8_t num_ports) {
    if (auto why = precheck(smp, false); why != DrDiscard::none) return DrDecision::discard(why);
    const unsigned hp = smp.hop_pointer;
    const unsigned hc = smp.hop_count;
    if (hp == 0 && hc != 0) {  // C14-9:1, after a LID-routed first part
        if (smp.dr_slid == kLidPermissive) return DrDecision::discard(DrDiscard::hop_pointer_not_advanced);
        smp.hop_pointer = 1;
        return out_of(smp.initial_path[1], num_ports);
    }
    if (hp < hc) {  // C14-9:2
        smp.return_path[hp] = in_port;
        smp.hop_pointer = static_cast<std::uint8_t>(hp + 1);
        return out_of(smp.initial_path[hp + 1], num_ports);
    }
    if (hp == hc) {  // C14-9:3
        if (hc != 0) smp.return_path[hc] = in_port;
        smp.hop_pointer = static_cast<std::uint8_t>(hc + 1);
        return end_of_outbound_part(smp);
    }
    if (hp == hc + 1) return DrDecision::deliver();          // C14-9:4
    return DrDecision::discard(DrDiscard::bad_hop_pointer);  // C14-9:5
}

DrDecision dr_switch_returning(Smp& smp, std::uint8_t num_ports) {
    if (auto why = precheck(smp, true); why != DrDiscard::none) return DrDecision::discard(why);
    const unsigned hp = smp.hop_pointer;
    const unsigned hc = smp.hop_count;
    if (hc != 0 && hp == hc + 1) {  // C14-13:1, back from a LID-routed last part
        smp.hop_pointer = static_cast<std::uint8_t>(hc);
        return out_of(smp.return_path[hc], num_ports);
    }
    if (hp >= 2 && hp <= hc) {  // C14-13:2
        smp.hop_pointer = static_cast<std::uint8_t>(hp - 1);
        return out_of(smp.return_path[hp - 1], num_ports);
    }
    if (hp == 1) {  // C14-13:3
        smp.hop_pointer = 0;
        return end_of_returning_part(smp);
    }
    if (hp == 0) return DrDecision::deliver();               // C14-13:4
    return DrDecision::discard(DrDiscard::bad_hop_pointer);  // C14-13:5
}

const char* to_string(DrDiscard d) {
    switch (d) {
        case DrDiscard::none: return "none";
        case DrDiscard::bad_hop_count: return "HopCount above 63";
        case DrDiscard::wrong_direction: return "D bit does not match the rule";
        case DrDiscard::hop_pointer_not_advanced: return "HopPointer 0 received on the directed part";
        case DrDiscard::not_a_switch: return "intermediate hop at a node that is not a switch";
        case DrDiscard::invalid_port: return "path names a port this node does not have";
        case DrDiscard::dr_dlid_not_permissive: return "DrDLID not permissive at a CA";
        case DrDiscard::dr_slid_not_permissive: return "DrSLID not permissive at a CA";
        case DrDiscard::bad_hop_pointer: return "HopPointer fits no rule";
        case DrDiscard::count_: break;
    }
    return "unknown";
}

const char* to_string(DrAction a) {
    switch (a) {
        case DrAction::deliver: return "deliver";
        case DrAction::send_on_port: return "send on port";
        case DrAction::send_lid_routed: return "send LID-routed";
        case DrAction::discard: return "discard";
    }
    return "unknown";
}

}  // namespace ipoibd::ib
