// The TUN host port: HostPort (host_port.h) on a Linux TUN device.
//
// 1. open(): the TUN (tun.h: IFF_TUN | IFF_NO_PI, offloads when the kernel
//    has them), carrier off; a GRO-like coalescer for writes when the TUN
//    takes offloads.
//    With several queues (IFF_MULTI_QUEUE) this port reads the first; data
//    threads read the others (open_queue(), interface/data_worker.h).
// 2. read_batch(): one read() per packet; a TSO/USO super-packet is cut
//    into datagrams of the link MTU (tun_offload.h); each datagram's
//    destination is looked up in the next-hop cache (RTM_GETROUTE on a
//    miss) so that `ip route ... via G dev ib0` works: the kernel does not
//    tell a TUN which gateway it chose.
// 3. write(): into the coalescer (written by flush()), or written at once.
// 4. configuration (MTU, addresses with IFA_F_NODAD, routes, up) through
//    rtnetlink (netlink/netlink_socket.h).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "host/host_port.h"
#include "host/tun.h"
#include "host/tun_offload.h"
#include "netlink/netlink_socket.h"
#include "netlink/next_hop_cache.h"

namespace ipoibd::host {

struct TunCounters {
    std::uint64_t rx_packets = 0;         // read from the TUN
    std::uint64_t rx_errors = 0;          // read() failed
    std::uint64_t tx_packets = 0;         // written to the TUN
    std::uint64_t tx_errors = 0;          // write() failed (the kernel's queue full, ...)
    std::uint64_t next_hop_failures = 0;  // RTM_GETROUTE failed: sent as on-link
    std::uint64_t next_hop_other_interface = 0;  // the route leaves by another link: sent as on-link
    std::uint64_t rx_segmented = 0;       // datagrams cut from TSO super-packets
    std::array<std::uint64_t, kOffloadErrorCount> offload_errors{};
};
// As "rx_packets", "offload_<reason>", ...
void visit(const TunCounters& c, CounterSink& out);

// The destination of an IPv4 or IPv6 packet, if its fixed header is there;
// the engine validates the rest (and counts what is wrong).
std::optional<IpAddress> destination_of(bytes ip_packet);
// The gateway a unicast packet read from the TUN `ifindex` goes through
// (the next hop of a route via one), from `next_hops`.
struct GatewayOf {
    std::optional<IpAddress> gateway;  // nothing: on-link, a group or broadcast
    bool failed = false;               // the lookup failed: sent as on-link
    // The kernel's route for the destination leaves by another link (a
    // packet written to the TUN by hand, sent with IP_PKTINFO or
    // SO_BINDTODEVICE, or a route changed since): its gateway is not on
    // this fabric, so the packet goes as on-link, as the kernel sends a
    // packet bound to a link that has no route for it.
    bool other_interface = false;
};
GatewayOf gateway_of(bytes ip_packet, netlink::NextHopCache& next_hops, std::uint32_t ifindex);

class TunPort : public HostPort {
public:
    // Creates `name` (exact, or a pattern with %d). `nl` must outlive the
    // port. The owner turns the carrier off until its link is up. With
    // `multi_queue` the device is a multi-queue TUN whose first queue this
    // port reads; open_queue() adds the others.
    static expected<std::unique_ptr<TunPort>, std::string> open(const std::string& name, netlink::NetlinkSocket& nl,
                                                                bool multi_queue = false);
    // Another queue of a multi-queue TUN (the kernel spreads flows over the
    // queues by hash), for a data thread to read (interface/data_worker.h),
    // with its own rtnetlink socket for next hops.
    expected<std::unique_ptr<HostQueue>, std::string> open_queue() override;
    void close_queues() override { queue_fds_.clear(); }
    void use_queues(bool on) override { queues_on_ = on; }
    bool multi_queue() const { return multi_queue_; }
    ~TunPort() override;

    const std::string& name() const override { return device_.name; }
    std::uint32_t ifindex() const override { return device_.ifindex; }
    int fd() const override { return device_.fd.get(); }
    bool gone() const override { return gone_; }
    std::size_t read_batch(HostReceiver& receiver, std::size_t max_reads) override;
    void write(bytes ip_packet) override;
    void flush() override;
    expected<void, std::string> set_carrier(bool on) override;
    expected<void, std::string> set_mtu(std::uint32_t mtu) override;
    expected<void, std::string> set_up(bool up) override;
    expected<void, std::string> add_address(const IpPrefix& address) override;
    expected<void, std::string> remove_address(const IpPrefix& address) override;
    expected<std::vector<IpPrefix>, std::string> list_addresses() override;
    expected<void, std::string> add_route(const HostRoute& route) override;
    expected<void, std::string> remove_route(const HostRoute& route) override;
    void routes_changed() override { next_hops_.invalidate(); }
    void visit_counters(CounterSink& out) const override;

    const TunCounters& counters() const { return counters_; }
    // Called with errno for every write() the TUN refused (counted in
    // tx_errors whether or not a hook is set): for a rate-limited log.
    void on_write_error(std::function<void(int error)> hook) { write_error_ = std::move(hook); }

protected:
    TunPort(TunDevice device, netlink::NetlinkSocket& nl);
    void deliver(bytes ip_packet, HostReceiver& receiver);
    void write_now(bytes data);
    // A read that failed with `error`: counted, and EBADFD (the device was
    // deleted) marks the port gone(), counted once.
    void on_read_error(int error);
    // /proc/sys/net/ipv6/conf/<name>/addr_gen_mode = none: the link-local
    // address is RFC 4391's, added by the owner.
    void no_kernel_link_local();

    TunDevice device_;
    netlink::NetlinkSocket& nl_;
    netlink::NextHopCache next_hops_;
    std::vector<std::uint8_t> read_buffer_;
    std::vector<std::uint8_t> segment_buffer_;
    std::unique_ptr<TunCoalescer> coalescer_;  // offload TUNs: GRO-like writes
    TunCounters counters_;
    bool gone_ = false;  // a read found the device deleted (EBADFD)
    std::function<void(int)> write_error_;
    bool multi_queue_ = false;
    // The other queues' fds (dup()s), written to by flow: see write_now().
    std::vector<UniqueFd> queue_fds_;
    bool queues_on_ = true;
};

// Which of `queues` a packet's flow belongs to (the IPv4/IPv6 addresses and
// TCP/UDP ports, taken symmetrically so both directions agree); `offload`:
// a virtio_net_hdr comes first. 0 for what it cannot parse.
std::size_t flow_queue(bytes packet, bool offload, std::size_t queues);
// The queue TunPort writes a packet from the fabric on: its flow's, but for
// a packet the host answers while it is being written (an ICMP or ICMPv6
// echo request), which stays on the first queue, the event loop's. The
// host's answer then leaves on that queue too (the flow table follows the
// last write), where the loop reads it in the same pass; on a data
// thread's queue it would wake the thread for one packet, which costs a
// ping a wake-up per echo (docs/performance.md).
std::size_t write_queue(bytes packet, bool offload, std::size_t queues);

}  // namespace ipoibd::host
