// An in-process fabric for tests of the layers above the transport.
//
// MemoryFabric is a switch without sockets: ports added to it get LIDs 1, 2,
// 3... and are ACTIVE at once (the fabric stands in for the SM), and packets
// they send are real IBA packets, built and validated by the same PortCore
// as the soft backend, queued in the fabric and delivered by run(). Unicast
// goes by DLID; multicast goes to every port, which keeps what its QPs are
// attached to (so no SA is needed), including the sender's own port.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "transport/port_core.h"

namespace ipoibd::transport {

class MemoryPort;

class MemoryFabric {
public:
    static constexpr std::size_t kMaxQueuedPackets = 65536;

    struct PortOptions {
        std::uint64_t port_guid = 0;  // 0: a GUID derived from the LID
        std::uint16_t lid = 0;        // 0: the next free LID (a port coming back may keep its old one)
        ib::Mtu mtu = ib::Mtu::mtu4096;
        std::vector<std::uint16_t> pkey_table{ib::kPKeyDefault};
    };

    MemoryFabric() = default;
    MemoryFabric(const MemoryFabric&) = delete;
    MemoryFabric& operator=(const MemoryFabric&) = delete;
    ~MemoryFabric();

    // A new ACTIVE port. It must not outlive the fabric.
    std::unique_ptr<MemoryPort> add_port(const PortOptions& options);
    std::unique_ptr<MemoryPort> add_port();

    // Delivers queued packets, including ones sent while delivering, until
    // the queue is empty or `max_packets` were delivered. Returns how many.
    std::size_t run(std::size_t max_packets = kMaxQueuedPackets);

    std::uint64_t dropped_queue_full() const { return dropped_queue_full_; }
    std::uint64_t dropped_no_route() const { return dropped_no_route_; }

private:
    friend class MemoryPort;
    bool enqueue(bytes packet);
    void detach(MemoryPort* port);

    std::vector<MemoryPort*> ports_;
    std::deque<std::vector<std::uint8_t>> queue_;
    std::uint16_t next_lid_ = 1;
    std::uint64_t dropped_queue_full_ = 0;
    std::uint64_t dropped_no_route_ = 0;
};

class MemoryPort final : public Port, private LinkSink {
public:
    ~MemoryPort() override;

    PortAttributes attributes() const override { return core_.attributes(); }
    expected<std::unique_ptr<UdQp>, Error> create_ud_qp(const UdQpConfig& config) override {
        return core_.create_ud_qp(config);
    }
    std::size_t poll_events(std::span<PortEvent> out) override { return core_.poll_events(out); }
    int fd() const override { return -1; }
    // Runs this port's RC timers and delivers what the fabric holds.
    void process() override {
        core_.service_rc(std::chrono::steady_clock::now());
        fabric_.run();
    }
    // Sends are in the fabric's queue already; delivering them is process()'s.
    void flush() override {}

    expected<std::unique_ptr<UdQp>, Error> create_gsi_qp(std::uint32_t send_depth, std::uint32_t receive_depth) override {
        return core_.create_gsi_qp(send_depth, receive_depth);
    }
    expected<void, Error> set_capture(PacketTap tap) override {
        core_.set_tap(std::move(tap));
        return {};
    }
    void visit_counters(CounterSink& out) const override { visit(core_.counters(), out); }
    const PortCounters* packet_counters() const override { return &core_.counters(); }
    expected<std::unique_ptr<RcQueuePair>, Error> create_rc_qp(std::uint16_t pkey_index) override {
        return core_.create_rc_qp(pkey_index);
    }
    expected<rc::MemoryRegion, Error> register_memory(std::span<std::uint8_t> memory, std::uint32_t access) override {
        return core_.register_memory(memory, access);
    }
    expected<void, Error> deregister_memory(std::uint32_t rkey) override { return core_.deregister_memory(rkey); }
    std::optional<std::chrono::steady_clock::time_point> next_deadline() const override {
        return core_.next_rc_deadline();
    }
    // The port's engine, for tests that change attributes or read counters.
    PortCore& core() { return core_; }

private:
    friend class MemoryFabric;
    MemoryPort(MemoryFabric& fabric, PortAttributes attributes) : fabric_(fabric), core_(std::move(attributes), *this) {}
    bool transmit(bytes packet) override { return fabric_.enqueue(packet); }

    MemoryFabric& fabric_;
    PortCore core_;
};

}  // namespace ipoibd::transport
