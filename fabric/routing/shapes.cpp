#include "fabric/routing/shapes.h"

#include <stdexcept>
#include <string>

namespace ipoibd::fabric::routing {
namespace {

std::uint8_t port_number(unsigned p) {
    if (p == 0 || p > kMaxSwitchPorts) throw std::invalid_argument("the shape needs port " + std::to_string(p));
    return static_cast<std::uint8_t>(p);
}

std::uint16_t lid_number(unsigned lid) {
    if (lid == 0 || lid > 0xBFFF) throw std::invalid_argument("the shape needs more than 49,151 LIDs");
    return static_cast<std::uint16_t>(lid);
}

}  // namespace

Topology fat_tree(const FatTreeShape& shape) {
    Topology t;
    unsigned lid = 1;
    const unsigned leaf_ports = shape.hosts_per_leaf + shape.spines * shape.links_per_spine;
    const unsigned spine_ports = shape.leaves * shape.links_per_spine;
    for (unsigned l = 0; l < shape.leaves; ++l) t.add_switch(kShapeSwitchGuidBase + l, lid_number(lid++), leaf_ports);
    for (unsigned s = 0; s < shape.spines; ++s)
        t.add_switch(kShapeSwitchGuidBase + shape.leaves + s, lid_number(lid++), spine_ports);
    for (unsigned l = 0; l < shape.leaves; ++l)
        for (unsigned s = 0; s < shape.spines; ++s)
            for (unsigned k = 0; k < shape.links_per_spine; ++k)
                t.cable(l, port_number(shape.hosts_per_leaf + s * shape.links_per_spine + k + 1), shape.leaves + s,
                        port_number(l * shape.links_per_spine + k + 1));
    std::uint64_t guid = kShapeCaGuidBase;
    for (unsigned l = 0; l < shape.leaves; ++l)
        for (unsigned h = 0; h < shape.hosts_per_leaf; ++h) t.attach(l, port_number(h + 1), guid++, lid_number(lid++));
    return t;
}

Topology ring(unsigned switches, unsigned hosts_per_switch) {
    Topology t;
    unsigned lid = 1;
    for (unsigned s = 0; s < switches; ++s)
        t.add_switch(kShapeSwitchGuidBase + s, lid_number(lid++), 2 + hosts_per_switch);
    if (switches > 1)
        for (unsigned s = 0; s < switches; ++s) {
            if (switches == 2 && s == 1) break;  // two switches: one cable
            t.cable(s, 1, (s + 1) % switches, 2);
        }
    std::uint64_t guid = kShapeCaGuidBase;
    for (unsigned s = 0; s < switches; ++s)
        for (unsigned h = 0; h < hosts_per_switch; ++h) t.attach(s, port_number(h + 3), guid++, lid_number(lid++));
    return t;
}

}  // namespace ipoibd::fabric::routing
