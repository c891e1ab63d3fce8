#include "transport/memory/memory_fabric.h"

#include <algorithm>

namespace ipoibd::transport {

MemoryFabric::~MemoryFabric() = default;

std::unique_ptr<MemoryPort> MemoryFabric::add_port(const PortOptions& options) {
    PortAttributes a;
    a.lid = options.lid ? options.lid : next_lid_++;
    a.sm_lid = 1;
    a.port_guid = options.port_guid ? options.port_guid : 0x0002C90300000000ULL | a.lid;
    a.node_guid = a.port_guid;
    a.active_mtu = options.mtu;
    a.pkey_table = options.pkey_table;
    // The port starts unprogrammed, as after link-up; programming it the way
    // an SM would raises lid_change, sm_change and port_active.
    PortAttributes blank = a;
    blank.lid = 0;
    blank.sm_lid = 0;
    blank.state = PortState::down;
    std::unique_ptr<MemoryPort> port(new MemoryPort(*this, blank));
    ports_.push_back(port.get());
    a.state = PortState::active;
    port->core_.set_attributes(a);
    return port;
}

std::unique_ptr<MemoryPort> MemoryFabric::add_port() { return add_port(PortOptions{}); }

bool MemoryFabric::enqueue(bytes packet) {
    if (queue_.size() >= kMaxQueuedPackets) {
        ++dropped_queue_full_;
        return false;
    }
    queue_.emplace_back(packet.begin(), packet.end());
    return true;
}

void MemoryFabric::detach(MemoryPort* port) { std::erase(ports_, port); }

std::size_t MemoryFabric::run(std::size_t max_packets) {
    std::size_t delivered = 0;
    while (!queue_.empty() && delivered < max_packets) {
        const std::vector<std::uint8_t> packet = std::move(queue_.front());
        queue_.pop_front();
        ++delivered;
        // The DLID sits at the same offset in every IBA packet.
        const std::uint16_t dlid = packet.size() >= ib::Lrh::size ? load_be16(packet.data() + 2) : 0;
        if (ib::is_multicast_lid(dlid)) {
            for (MemoryPort* p : std::vector<MemoryPort*>(ports_)) p->core_.receive(packet);
            continue;
        }
        auto it = std::find_if(ports_.begin(), ports_.end(),
                               [&](MemoryPort* p) { return p->core_.attributes().lid == dlid; });
        if (it == ports_.end()) {
            ++dropped_no_route_;
            continue;
        }
        (*it)->core_.receive(packet);
        // The end of a batch: the RC QPs answer what it brought (their
        // ACKs coalesce over the batch, as on the soft port).
        if (queue_.empty())
            for (MemoryPort* p : std::vector<MemoryPort*>(ports_)) p->core_.service_rc(std::chrono::steady_clock::now());
    }
    return delivered;
}

MemoryPort::~MemoryPort() { fabric_.detach(this); }

}  // namespace ipoibd::transport
