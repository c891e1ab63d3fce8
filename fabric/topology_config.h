// `ibfabricd --topology FILE`: the switches of a .net file (routing/net_file.h)
// as switches of this process, each a FabricService of its own with its own
// UDP socket, cabled to each other by inter-switch links over those sockets,
// so that a link inside one process runs the same link, fault and PMA code
// as one between two machines.
//
// Every switch of the file has an address: `--switch-address NAME=ADDR:PORT`,
// or else the --listen address with its port plus the switch's index among
// the file's switches (file order). A process runs the switches named with
// --topology-switch (all when none is): the same file on several machines,
// each naming its own, splits one fabric over them, and a cable to a switch
// run elsewhere becomes a link to that switch's address. Hca nodes are
// ignored: hosts plug into any free port that is no link's.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/expected.h"
#include "common/socket_address.h"
#include "fabric/fabric_service.h"
#include "fabric/routing/net_file.h"

namespace ipoibd::fabric {

struct TopologySwitch {
    std::string name;  // the node id in the file
    FabricServiceOptions options;
};

struct TopologyRequest {
    const routing::NetFile* net = nullptr;
    std::string file;                                   // for messages
    FabricServiceOptions base;                          // every option but the switch's own
    std::vector<std::string> run_here;                  // empty: every switch of the file
    std::map<std::string, SocketAddress> addresses;     // by switch name
};

// The switches this process runs, in file order, each with its GUID,
// description (the file's), number of ports, address and links. The first
// keeps base's SM setting; the others run none. Errors name the switch or
// option at fault.
expected<std::vector<TopologySwitch>, std::string> topology_switches(const TopologyRequest& request);

}  // namespace ipoibd::fabric
