#include "sa_client/sa_topology.h"

#include <algorithm>
#include <cstring>

namespace ipoibd::sa {

void NodeRecord::write_to(std::uint8_t* p) const {
    store_be16(p, lid);
    store_be16(p + 2, 0);
    node_info.write_to(p + 4);
    node_description.write_to(p + 4 + ib::NodeInfo::size);
}

NodeRecord NodeRecord::read_from(const std::uint8_t* p) {
    NodeRecord r;
    r.lid = load_be16(p);
    r.node_info = ib::NodeInfo::read_from(p + 4);
    r.node_description = ib::NodeDescription::read_from(p + 4 + ib::NodeInfo::size);
    return r;
}

void PortInfoRecord::write_to(std::uint8_t* p) const {
    store_be16(p, endport_lid);
    p[2] = port_num;
    p[3] = options;
    port_info.write_to(p + 4);
}

PortInfoRecord PortInfoRecord::read_from(const std::uint8_t* p) {
    PortInfoRecord r;
    r.endport_lid = load_be16(p);
    r.port_num = p[2];
    r.options = p[3];
    r.port_info = ib::PortInfo::read_from(p + 4);
    return r;
}

void LinkRecord::write_to(std::uint8_t* p) const {
    store_be16(p, from_lid);
    p[2] = from_port;
    p[3] = to_port;
    store_be16(p + 4, to_lid);
    store_be16(p + 6, 0);
}

LinkRecord LinkRecord::read_from(const std::uint8_t* p) {
    return {load_be16(p), p[2], p[3], load_be16(p + 4)};
}

}  // namespace ipoibd::sa
