// Topology files in the ibnetdiscover / ibsim ".net" syntax, the subset of
// Switch and Hca nodes and their cables, so that one file drives ibsim,
// OpenSM's tests and ibfabricd alike:
//
//   switchguid=0x200000            # optional: the next switch's GUID
//   Switch 24 "leaf0"  # "description" enhanced port 0 lid 2 lmc 0
//   [1]  "host0"[1]                # this port's cable: the peer and its port
//   [23] "spine0"[1]  # anything after '#' is a comment
//
//   caguid=0x100000
//   Hca 1 "host0"
//   [1](100001) "leaf0"[1]
//
// A node header names its type, number of ports and a quoted id (unique);
// the port lines that follow (until a line that is not one) give a cable
// each: "[port]", an optional "(port GUID)", the peer's quoted id and
// "[its port]" (1 when left out), then options ("w=4", "s=2", ibsim's) and
// comments, which are ignored. A cable may be listed from one end or from
// both; both ends must agree. GUIDs as ibsim gives them: switches from
// 0x200000 and CAs from 0x100000 in file order (switchguid= and caguid= /
// hcaguids= set the next one, '+' to add), a CA's port GUIDs node GUID +
// port number, a switch's its node GUID. vendid=, devid=, sysimgguid=,
// width=, speed= and extspeed= lines are accepted and ignored; routers,
// aliases ('@'), include, module and do lines are refused, as is anything
// else the subset does not know, naming the line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"
#include "fabric/routing/topology.h"

namespace ipoibd::fabric::routing {

struct NetNode {
    enum class Type : std::uint8_t { switch_node, ca };
    Type type = Type::switch_node;
    std::string id;           // as quoted in the file
    std::string description;  // the quoted text after '#', or the id
    unsigned num_ports = 0;
    std::uint64_t node_guid = 0;
    int line = 0;
    std::uint64_t port_guid(unsigned port) const { return type == Type::ca ? node_guid + port : node_guid; }
};

struct NetCable {
    std::size_t a = 0;  // node indices, a <= b
    std::uint8_t a_port = 0;
    std::size_t b = 0;
    std::uint8_t b_port = 0;
    int line = 0;  // where it was first listed
};

struct NetFile {
    std::vector<NetNode> nodes;
    std::vector<NetCable> cables;  // each once
    // The node with this id, or nodes.size().
    std::size_t find(std::string_view id) const;
};

struct NetError {
    std::string file;
    int line = 0;
    std::string message;
    std::string to_string() const;
};

expected<NetFile, NetError> parse_net(std::string_view text, const std::string& file);
expected<NetFile, NetError> load_net(const std::string& path);

// The subnet the file describes, as a routing topology: switch LIDs 1, 2,
// ... in file order, then the CA ports in file order. A cable between two
// CAs has no switch to route it and is refused.
expected<Topology, NetError> to_topology(const NetFile& net, const std::string& file);

}  // namespace ipoibd::fabric::routing
