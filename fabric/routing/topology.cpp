#include "fabric/routing/topology.h"

#include <algorithm>
#include <stdexcept>

namespace ipoibd::fabric::routing {

std::uint32_t Topology::add_switch(std::uint64_t guid, std::uint16_t lid, unsigned num_ports) {
    if (num_ports == 0 || num_ports > kMaxSwitchPorts)
        throw std::invalid_argument("a switch has 1 to 254 ports, not " + std::to_string(num_ports));
    SwitchNode node;
    node.guid = guid;
    node.lid = lid;
    node.ports.resize(std::size_t{num_ports} + 1);
    switches_.push_back(std::move(node));
    total_ports_ += std::size_t{num_ports} + 1;
    return static_cast<std::uint32_t>(switches_.size() - 1);
}

void Topology::check_free(std::uint32_t sw, std::uint8_t port) const {
    if (sw >= switches_.size()) throw std::invalid_argument("no switch " + std::to_string(sw));
    const SwitchNode& node = switches_[sw];
    if (port == 0 || port > node.num_ports())
        throw std::invalid_argument("switch " + std::to_string(sw) + " has no port " + std::to_string(port));
    if (node.ports[port].kind != PortPeer::Kind::none)
        throw std::invalid_argument("switch " + std::to_string(sw) + " port " + std::to_string(port) + " is cabled already");
}

void Topology::cable(std::uint32_t a, std::uint8_t a_port, std::uint32_t b, std::uint8_t b_port) {
    check_free(a, a_port);
    check_free(b, b_port);
    if (a == b && a_port == b_port) throw std::invalid_argument("a port cannot be cabled to itself");
    switches_[a].ports[a_port] = PortPeer{.kind = PortPeer::Kind::link, .index = b, .port = b_port};
    switches_[b].ports[b_port] = PortPeer{.kind = PortPeer::Kind::link, .index = a, .port = a_port};
    ++links_;
}

std::uint32_t Topology::attach(std::uint32_t sw, std::uint8_t port, std::uint64_t guid, std::uint16_t lid) {
    check_free(sw, port);
    const auto index = static_cast<std::uint32_t>(endpoints_.size());
    endpoints_.push_back(Endpoint{.guid = guid, .lid = lid, .switch_index = sw, .switch_port = port});
    switches_[sw].ports[port] = PortPeer{.kind = PortPeer::Kind::endpoint, .index = index};
    return index;
}

void Topology::cut(std::uint32_t sw, std::uint8_t port) {
    PortPeer& here = switches_.at(sw).ports.at(port);
    if (here.kind == PortPeer::Kind::link) {
        switches_.at(here.index).ports.at(here.port) = PortPeer{};
        --links_;
    }
    here = PortPeer{};
}

std::uint16_t Topology::max_lid() const {
    std::uint16_t top = 0;
    for (const SwitchNode& s : switches_) top = std::max(top, s.lid);
    for (const Endpoint& e : endpoints_) top = std::max(top, e.lid);
    return top;
}

}  // namespace ipoibd::fabric::routing
