#include "host/tun_queue.h"

#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "host/tun_offload.h"
#include "host/tun_port.h"

namespace ipoibd::host {

TunQueue::TunQueue(TunDevice device, netlink::NetlinkSocket nl)
    : device_(std::move(device)),
      nl_(std::move(nl)),
      next_hops_([this](const IpAddress& dst) { return nl_.lookup_next_hop(dst); }),
      read_buffer_(65535 + VirtioNetHeader::size) {}

void TunQueue::deliver(bytes ip_packet, const Emit& emit) {
    const GatewayOf hop = gateway_of(ip_packet, next_hops_, device_.ifindex);
    if (hop.failed) add(counters_.next_hop_failures);
    if (hop.other_interface) add(counters_.next_hop_other_interface);
    emit(ip_packet, hop.gateway);
}

std::size_t TunQueue::read_batch(std::size_t max_reads, const Emit& emit) {
    if (const auto g = routes_generation_.load(std::memory_order_relaxed); g != routes_seen_) {
        routes_seen_ = g;
        next_hops_.invalidate();
    }
    std::size_t reads = 0, datagrams = 0;
    for (; reads < max_reads && datagrams < max_reads * kBatchDatagramsPerRead; ++reads) {
        const ssize_t n = ::read(device_.fd.get(), read_buffer_.data(), read_buffer_.size());
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) add(counters_.rx_errors);
            break;
        }
        add(counters_.rx_packets);
        const mutable_bytes read(read_buffer_.data(), static_cast<std::size_t>(n));
        if (!device_.offload) {
            deliver(read, emit);
            continue;
        }
        auto segments = segment_tun_packet(read, segment_buffer_, [&](bytes d) { deliver(d, emit); });
        if (!segments) {
            add(counters_.offload_errors[static_cast<std::size_t>(segments.error())]);
            continue;
        }
        if (*segments > 1) add(counters_.rx_segmented, *segments);
        datagrams += *segments;
    }
    return reads;
}

expected<void, std::string> TunQueue::set_attached(bool attached) {
    ifreq r{};
    r.ifr_flags = static_cast<short>(attached ? IFF_ATTACH_QUEUE : IFF_DETACH_QUEUE);
    if (::ioctl(device_.fd.get(), TUNSETQUEUE, &r) != 0)
        return unexpected(std::string(attached ? "attach" : "detach") + " a queue of " + device_.name + ": " +
                          std::strerror(errno));
    return {};
}

void TunQueue::visit_counters(CounterSink& out) const {
    out.counter("rx_packets", counters_.rx_packets.load(std::memory_order_relaxed));
    out.counter("rx_errors", counters_.rx_errors.load(std::memory_order_relaxed));
    out.counter("rx_segmented", counters_.rx_segmented.load(std::memory_order_relaxed));
    out.counter("next_hop_failures", counters_.next_hop_failures.load(std::memory_order_relaxed));
    out.counter("next_hop_other_interface", counters_.next_hop_other_interface.load(std::memory_order_relaxed));
    for (std::size_t i = 0; i < kOffloadErrorCount; ++i)
        out.counter(std::string("offload_") + to_string(static_cast<OffloadError>(i)),
                    counters_.offload_errors[i].load(std::memory_order_relaxed));
}

}  // namespace ipoibd::host
