// One more queue of a multi-queue TUN (tun_port.h, open_queue()), read by
// a data thread: reads, TSO super-packets cut into datagrams of the link
// MTU, next hops from a cache of its own over its own rtnetlink socket
// (the TUN port's belong to the event loop). Counters are atomics, read by
// the loop.
#pragma once

#include <array>
#include <atomic>
#include <vector>

#include "host/host_port.h"
#include "host/tun.h"
#include "host/tun_offload.h"
#include "netlink/netlink_socket.h"
#include "netlink/next_hop_cache.h"

namespace ipoibd::host {

class TunQueue final : public HostQueue {
public:
    TunQueue(TunDevice device, netlink::NetlinkSocket nl);
    int fd() const override { return device_.fd.get(); }
    std::size_t read_batch(std::size_t max_reads, const Emit& emit) override;
    void routes_changed() override { routes_generation_.fetch_add(1, std::memory_order_relaxed); }
    expected<void, std::string> set_attached(bool attached) override;
    void visit_counters(CounterSink& out) const override;

private:
    struct Counters {
        std::atomic<std::uint64_t> rx_packets{0}, rx_errors{0}, rx_segmented{0}, next_hop_failures{0},
            next_hop_other_interface{0};
        std::array<std::atomic<std::uint64_t>, kOffloadErrorCount> offload_errors{};
    };
    static void add(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
        c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // one writer
    }
    void deliver(bytes ip_packet, const Emit& emit);

    TunDevice device_;
    netlink::NetlinkSocket nl_;
    netlink::NextHopCache next_hops_;
    std::atomic<std::uint64_t> routes_generation_{0};
    std::uint64_t routes_seen_ = 0;
    std::vector<std::uint8_t> read_buffer_;
    std::vector<std::uint8_t> segment_buffer_;
    Counters counters_;
};

}  // namespace ipoibd::host
