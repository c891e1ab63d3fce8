// The host presentation seam: how one IPoIB interface meets the host's IP
// stack. One narrow, batch-shaped interface, several implementations:
//   tun_port.h         a Linux TUN device (IP packets; the daemon resolves
//                      neighbours itself and asks the routing table for the
//                      next hop)
//   tap_port.h         a Linux TAP device (Ethernet frames; the kernel
//                      resolves neighbours, ipoib/ethernet_host.h answers
//                      it with synthetic MACs)
//   fake_host_port.h   packets in and out of memory, for tests of the
//                      layers above
//
// What crosses the seam are IP datagrams of at most the link MTU, or, from
// a host with a link layer (mac() set: TAP), Ethernet frames carrying them. Offloads
// are the implementation's own business: the TUN cuts the kernel's TSO/USO
// super-packets into datagrams before handing them over and coalesces what
// it is given back into super-packets (tun_offload.h), so the engine above
// never sees a virtio header. A packet comes with its next-hop hint: the
// gateway the host's routing chose, when it chose one (a TUN asks the
// kernel, RTM_GETROUTE; TAP reads it from the Ethernet destination).
//
// Configuration of the host side (MTU, addresses, routes, admin state,
// carrier) goes through the seam too, so that an Interface can be tested
// without a kernel.
//
// Threading: one thread, like transport::Port.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <string>

#include "common/byte_io.h"
#include "common/counters.h"
#include "common/ethernet.h"
#include "common/expected.h"
#include "common/ip_address.h"

namespace ipoibd::host {

// A read batch also ends after the read that brings its datagrams to
// max_reads x kBatchDatagramsPerRead. The host's own TCP cuts 64 KiB into a
// few dozen datagrams (32 at IPoIB's 2,044-byte MTU); a packet socket with
// PACKET_VNET_HDR can ask for up to 8,192 a read (tun_offload.h), and a
// batch of such reads would keep the loop from its SA MADs and timers for a
// long turn. Nothing is dropped: the rest waits for the next batch.
inline constexpr std::size_t kBatchDatagramsPerRead = 64;

// Where the packets of one read() go.
class HostReceiver {
public:
    virtual ~HostReceiver() = default;
    // One IP datagram from the host. `next_hop`: the gateway the host's
    // routing chose, nullopt when the destination is on-link, a group
    // address, or the lookup failed (counted by the port).
    virtual void on_host_packet(bytes ip_packet, const std::optional<IpAddress>& next_hop) = 0;
    // After a read that may have carried several datagrams (a TUN with
    // offloads: a TSO super-packet makes up to 45): `datagrams` is how many
    // on_host_packet() calls it made, `read_index` counts reads in this
    // batch from 0. Lets the owner hand a long run to its link before its
    // send queue fills.
    virtual void after_host_read(std::size_t datagrams, std::size_t read_index) = 0;
    // From a host with a link layer (TAP): one Ethernet frame (14-byte
    // header first) instead of on_host_packet(). Offloads are undone as for
    // IP: a TSO super-frame arrives as frames of the link MTU.
    virtual void on_host_frame(bytes /*ethernet_frame*/) {}
};

// A route on the interface: PREFIX [via GATEWAY].
struct HostRoute {
    IpPrefix destination;
    std::optional<IpAddress> gateway;
    bool operator==(const HostRoute&) const = default;
};

// Another queue of a multi-queue host port, read by a data thread
// (interface/data_worker.h) and only by it, apart from counters() and
// routes_changed(), which any thread may call.
class HostQueue {
public:
    // A datagram read (TSO super-packets already cut) and its next hop when
    // a route via a gateway carries it (as HostReceiver::on_host_packet).
    using Emit = std::function<void(bytes ip_packet, const std::optional<IpAddress>& next_hop)>;
    virtual ~HostQueue() = default;
    virtual int fd() const = 0;  // readable when read_batch() has work
    // At most `max_reads` reads (fewer when they make many datagrams:
    // kBatchDatagramsPerRead); returns how many read something.
    virtual std::size_t read_batch(std::size_t max_reads, const Emit& emit) = 0;
    // The host's routes changed: next hops are looked up again.
    virtual void routes_changed() = 0;
    // Attached (the default) or not: the host sends a detached queue
    // nothing, and its fd reports an error while detached. Any thread.
    virtual expected<void, std::string> set_attached(bool attached) = 0;
    // rx_packets, rx_errors, rx_segmented, next_hop_failures,
    // next_hop_other_interface, offload errors.
    virtual void visit_counters(CounterSink& out) const = 0;
};

class HostPort {
public:
    virtual ~HostPort() = default;

    virtual const std::string& name() const = 0;  // "ib0"
    virtual std::uint32_t ifindex() const = 0;    // 0 for a fake
    // Readable when read_batch() has packets (the fake's is an eventfd).
    virtual int fd() const = 0;
    // The device was deleted under the daemon (ip link del): a read found
    // its file detached (EBADFD), and fd() now reports an error at every
    // wait. Nothing comes or goes any more.
    virtual bool gone() const { return false; }

    // Reads up to `max_reads` packets from the host without blocking (fewer
    // when they make many datagrams: kBatchDatagramsPerRead) and hands
    // their datagrams to `receiver`; returns the number of reads that
    // brought a packet. Malformed packets are dropped and counted here.
    virtual std::size_t read_batch(HostReceiver& receiver, std::size_t max_reads) = 0;

    // One IP datagram for the host. May be held (coalesced) until flush();
    // a failed write is dropped and counted, never retried.
    virtual void write(bytes ip_packet) = 0;
    // A host with a link layer (TAP): its MAC; nullopt for a TUN.
    virtual std::optional<MacAddress> mac() const { return std::nullopt; }
    // A host with a link layer: one frame, `header` and then `payload` (an
    // IP datagram, coalesced as write() does, or an ARP packet). A host
    // without one writes the payload if it is IP.
    virtual void write_frame(const EthernetHeader& header, bytes payload) {
        if (header.type == kEtherTypeIpv4 || header.type == kEtherTypeIpv6) write(payload);
    }
    // Writes what write() holds. Call before waiting for input again.
    virtual void flush() = 0;

    // The host-side link state and configuration.
    virtual expected<void, std::string> set_carrier(bool on) = 0;
    virtual expected<void, std::string> set_mtu(std::uint32_t mtu) = 0;
    virtual expected<void, std::string> set_up(bool up) = 0;
    // The host does no duplicate address detection on it (IPv6 NODAD): the
    // IPoIB engine does DAD on the fabric.
    virtual expected<void, std::string> add_address(const IpPrefix& address) = 0;
    virtual expected<void, std::string> remove_address(const IpPrefix& address) = 0;
    // Every address the host has on the device now (the IPv6 link-local
    // included), as the kernel lists them.
    virtual expected<std::vector<IpPrefix>, std::string> list_addresses() = 0;
    virtual expected<void, std::string> add_route(const HostRoute& route) = 0;
    virtual expected<void, std::string> remove_route(const HostRoute& route) = 0;
    // The host's routes or addresses changed: next-hop hints taken from it
    // before are stale.
    virtual void routes_changed() = 0;
    // Another queue for a data thread; refused where the port has none
    // (a single-queue TUN, TAP, the fake).
    virtual expected<std::unique_ptr<HostQueue>, std::string> open_queue() {
        return unexpected(name() + " has one queue");
    }
    // Lets go of every queue open_queue() gave (the port's own hold on
    // them): once their readers are gone too, the host sends them nothing.
    virtual void close_queues() {}
    // Off: writes go to the first queue only (the others are detached, and
    // a write on one would teach the host's flow table a queue that is not
    // there).
    virtual void use_queues(bool) {}

    // Packets read and written, drops by reason, offload and next-hop
    // figures, by name.
    virtual void visit_counters(CounterSink& out) const = 0;
};

}  // namespace ipoibd::host
