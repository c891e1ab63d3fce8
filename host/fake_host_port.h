// A host port in memory, for tests of the layers above the host seam (the
// Interface, in-process node pairs): what the "host" sends is injected,
// what the interface writes is kept, and the configuration it asks for is
// recorded. Like a TUN it has an fd, an eventfd readable while injected
// packets wait, so the same event-loop code serves both. Given a MAC it
// plays a TAP: what is injected and written are Ethernet frames.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "host/host_port.h"

namespace ipoibd::host {

class FakeHostPort final : public HostPort {
public:
    static constexpr std::size_t kMaxInjected = 4096;

    explicit FakeHostPort(std::string name, std::optional<MacAddress> mac = std::nullopt);

    // The host sends `ip_packet` (a TAP: an Ethernet frame); `next_hop` as
    // the host's routing chose it. Refused (false, counted) beyond
    // kMaxInjected waiting packets.
    bool inject(bytes ip_packet, std::optional<IpAddress> next_hop = std::nullopt);
    // Queues for data threads: open_queue() gives up to `n` - 1 of them
    // (default 1: none, "has one queue", like a single-queue TUN). Before
    // the interface starts its threads.
    void set_queues(std::size_t n) { max_queues_ = n; }
    // The host sends `ip_packet` on queue `q` (1 for the first open_queue()
    // gave, ...), as the kernel does with a flow it hashes there; the
    // loop's thread (a data thread reads it). False (counted) when the
    // queue is not open, or is detached or full.
    bool inject_queue(std::size_t q, bytes ip_packet, std::optional<IpAddress> next_hop = std::nullopt);
    std::size_t queues_open() const { return queues_.size(); }
    // What the interface wrote to the host (flushed or not), oldest first
    // (a TAP: whole Ethernet frames).
    std::vector<std::vector<std::uint8_t>> take_written();
    std::size_t written_count() const { return written_.size(); }

    bool carrier() const { return carrier_; }
    bool up() const { return up_; }
    std::uint32_t mtu() const { return mtu_; }
    const std::vector<IpPrefix>& addresses() const { return addresses_; }
    const std::vector<HostRoute>& routes() const { return routes_; }
    // add_route() refuses routes to `destinations` from now on, as a kernel
    // that already has one does (File exists); {} takes them again.
    void refuse_routes(std::vector<IpPrefix> destinations) { refused_routes_ = std::move(destinations); }
    std::size_t flushes() const { return flushes_; }
    std::size_t route_changes() const { return route_changes_; }
    // The max_reads of every read_batch() call, oldest first.
    const std::vector<std::size_t>& read_requests() const { return read_requests_; }
    // As `ip link del`: the device is gone, its fd stays ready (a TUN's
    // reports an error) and reads find nothing.
    void delete_device();

    const std::string& name() const override { return name_; }
    std::uint32_t ifindex() const override { return 0; }
    int fd() const override { return event_.get(); }
    bool gone() const override { return gone_; }
    std::size_t read_batch(HostReceiver& receiver, std::size_t max_reads) override;
    void write(bytes ip_packet) override;
    void flush() override { ++flushes_; }
    std::optional<MacAddress> mac() const override { return mac_; }
    void write_frame(const EthernetHeader& header, bytes payload) override;
    expected<void, std::string> set_carrier(bool on) override;
    expected<void, std::string> set_mtu(std::uint32_t mtu) override;
    expected<void, std::string> set_up(bool up) override;
    expected<void, std::string> add_address(const IpPrefix& address) override;
    expected<void, std::string> remove_address(const IpPrefix& address) override;
    expected<std::vector<IpPrefix>, std::string> list_addresses() override { return addresses_; }
    expected<void, std::string> add_route(const HostRoute& route) override;
    expected<void, std::string> remove_route(const HostRoute& route) override;
    void routes_changed() override { ++route_changes_; }
    expected<std::unique_ptr<HostQueue>, std::string> open_queue() override;
    void close_queues() override { queues_.clear(); }
    void visit_counters(CounterSink& out) const override;

    struct Injected {
        std::vector<std::uint8_t> packet;
        std::optional<IpAddress> next_hop;
    };
    // One data thread's queue, shared by the port (inject_queue) and the
    // HostQueue open_queue() gave.
    struct Queue {
        std::mutex lock;
        std::deque<Injected> waiting;
        UniqueFd event;  // readable while packets wait
        bool attached = true;
        std::uint64_t rx_packets = 0;
        std::uint64_t refused = 0;
    };

private:
    void update_event();

    std::string name_;
    std::optional<MacAddress> mac_;
    UniqueFd event_;
    std::deque<Injected> injected_;
    std::vector<std::vector<std::uint8_t>> written_;
    bool carrier_ = false;
    bool up_ = false;
    bool gone_ = false;
    std::uint32_t mtu_ = 1500;
    std::vector<IpPrefix> addresses_;
    std::vector<HostRoute> routes_;
    std::vector<IpPrefix> refused_routes_;
    std::size_t flushes_ = 0;
    std::size_t route_changes_ = 0;
    std::uint64_t rx_packets_ = 0;
    std::vector<std::size_t> read_requests_;
    std::uint64_t tx_packets_ = 0;
    std::uint64_t inject_refused_ = 0;
    std::size_t max_queues_ = 1;
    std::vector<std::shared_ptr<Queue>> queues_;  // the port's hold on the queues it gave
};

}  // namespace ipoibd::host
