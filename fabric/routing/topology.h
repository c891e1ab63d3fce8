// A subnet as an SM sees it once it has swept it: switches, the cable on
// each switch port, and the CA ports (endpoints) with their LIDs. The
// routing engines (routing.h) read it; the SM builds it from what its
// directed-route SMPs found, tests and benches from shapes.h or a .net file
// (net_file.h).
//
// Switches and endpoints are kept in vectors and named by index; a switch's
// ports are 0 (the management port, where its own LID ends) to num_ports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ipoibd::fabric::routing {

// A LinearForwardingTable entry with no route (IBA 14.2.5.10: 0xFF, "no
// port"; OpenSM's OSM_NO_PATH).
inline constexpr std::uint8_t kNoPort = 0xFF;
// A hop count that means unreachable.
inline constexpr std::uint8_t kUnreachable = 0xFF;
// The largest NumPorts NodeInfo can state for a switch: port 255 would be
// kNoPort.
inline constexpr unsigned kMaxSwitchPorts = 254;

// What a switch port is cabled to.
struct PortPeer {
    enum class Kind : std::uint8_t {
        none,      // no cable, or the link is down
        link,      // a port of another switch (an inter-switch link)
        endpoint,  // a CA port
    };
    Kind kind = Kind::none;
    std::uint32_t index = 0;  // the peer switch, or the endpoint
    std::uint8_t port = 0;    // the peer switch's port (Kind::link)
};

struct SwitchNode {
    std::uint64_t guid = 0;
    std::uint16_t lid = 0;        // its port 0's
    std::vector<PortPeer> ports;  // [0]: the management port, never cabled
    unsigned num_ports() const { return static_cast<unsigned>(ports.size()) - 1; }
};

struct Endpoint {
    std::uint64_t guid = 0;  // the port GUID
    std::uint16_t lid = 0;
    std::uint32_t switch_index = 0;  // where it is plugged
    std::uint8_t switch_port = 0;
};

class Topology {
public:
    // Each returns the new node's index; throws std::invalid_argument on a
    // port out of range or one already cabled (a program error: the SM and
    // the parsers check what they are given first).
    std::uint32_t add_switch(std::uint64_t guid, std::uint16_t lid, unsigned num_ports);
    void cable(std::uint32_t a, std::uint8_t a_port, std::uint32_t b, std::uint8_t b_port);
    std::uint32_t attach(std::uint32_t sw, std::uint8_t port, std::uint64_t guid, std::uint16_t lid);
    // The link on this port goes (both ends); an endpoint there stays in
    // the list, unreachable.
    void cut(std::uint32_t sw, std::uint8_t port);

    const std::vector<SwitchNode>& switches() const { return switches_; }
    const std::vector<Endpoint>& endpoints() const { return endpoints_; }
    const PortPeer& peer(std::uint32_t sw, std::uint8_t port) const { return switches_.at(sw).ports.at(port); }
    // The largest LID of any switch or endpoint: the LFTs' top.
    std::uint16_t max_lid() const;
    // Every switch port, management ports included: the size of a table
    // with one entry per switch port.
    std::size_t total_ports() const { return total_ports_; }
    std::size_t links() const { return links_; }  // inter-switch links, each counted once

private:
    void check_free(std::uint32_t sw, std::uint8_t port) const;
    std::vector<SwitchNode> switches_;
    std::vector<Endpoint> endpoints_;
    std::size_t total_ports_ = 0;
    std::size_t links_ = 0;
};

}  // namespace ipoibd::fabric::routing
