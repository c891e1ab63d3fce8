// Data threads ([daemon] data-threads = N): the host's datagrams read from
// N queues of a multi-queue TUN, the first by the event loop as always, the
// other N-1 each by a DataWorker on a thread of its own with a send queue
// of its own (transport/port.h, UdSendQueue: a send ring of its own on the
// soft port's socket, a send-only UD QP on an HCA), so that reading the TUN and sending to the fabric, the bulk of
// a datagram's cost, run on several cores.
//
// Division of labour:
//  - the event loop keeps the control plane and every table (the engine:
//    SA, joins, ARP/ND, neighbours, paths, timers), receives from the
//    fabric and writes to the host, and publishes the forwarding snapshot
//    (ipoib/forwarding.h) to the workers after any loop turn that changed
//    it (DataPlane::publish);
//  - a worker reads its queue, and for each datagram (TSO super-packets cut
//    by the queue) whose next hop the snapshot holds, sends the IPoIB frame
//    itself as the interface's UD QP (on the soft port with the same
//    source QPN; on an HCA from a send-only QP of its own, whose number
//    peers see: docs/ipoib-engine.md, "Data threads", says why nothing
//    needs it to be the interface's);
//  - everything else (unresolved next hops, multicast and broadcast, IGMP,
//    ND and MLD, datagrams too big for UD, connected-mode peers) goes back
//    to the loop through the MissQueue, a bounded queue (kMaxItems,
//    kMaxBytes) whose overflow is counted, and takes the engine's path
//    there; so do the "touches" that tell the engine a neighbour or path
//    was used past its quiet time, and what the worker's send queue would
//    not take (refused or failed; a full send ring is a drop, as the
//    loop's);
//  - in connected mode the workers' queues are detached (set_enabled):
//    the host then sends every flow to the loop's queue, since traffic to
//    connected peers goes over RC, which is the loop's.
// A flow stays on one queue (the kernel hashes flows to queues), so its
// datagrams keep their order except where a miss is overtaken by a later
// datagram sent after the snapshot changed (the first datagrams of a flow
// whose neighbour was being resolved): UD promises no order either.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/busy_poll.h"
#include "common/counters.h"
#include "common/expected.h"
#include "common/ip_address.h"
#include "common/unique_fd.h"
#include "host/host_port.h"
#include "host/read_pacing.h"
#include "ipoib/forwarding.h"
#include "transport/port.h"

namespace ipoibd::iface {

// Workers -> loop: datagrams the fast path does not take, and touches.
class MissQueue {
public:
    static constexpr std::size_t kMaxItems = 1024;
    static constexpr std::size_t kMaxBytes = 4 << 20;

    MissQueue();
    // Readable while items wait (an eventfd).
    int fd() const { return event_.get(); }
    // Any thread. False when full (counted in dropped()).
    bool push_packet(bytes ip_packet, const std::optional<IpAddress>& next_hop);
    bool push_touch(const IpAddress& ip);
    // The loop: every waiting item, in order.
    template <class Packet, class Touch>
    void drain(Packet&& packet, Touch&& touch);
    std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
    std::uint64_t passed() const { return passed_.load(std::memory_order_relaxed); }

private:
    struct Item {
        bool touch = false;
        IpAddress ip;  // touch: the neighbour; packet: the next hop, if any
        bool has_ip = false;
        std::vector<std::uint8_t> data;
    };
    bool push(Item item);
    std::deque<Item> take();

    UniqueFd event_;
    std::mutex lock_;
    std::deque<Item> items_;
    std::size_t bytes_ = 0;
    std::atomic<std::uint64_t> dropped_{0};
    std::atomic<std::uint64_t> passed_{0};
};

template <class Packet, class Touch>
void MissQueue::drain(Packet&& packet, Touch&& touch) {
    for (Item& i : take()) {
        if (i.touch)
            touch(i.ip);
        else
            packet(bytes(i.data), i.has_ip ? std::optional<IpAddress>(i.ip) : std::nullopt);
    }
}

// What an interface shares with its workers.
class DataPlane {
public:
    void publish(std::shared_ptr<const ipoib::ForwardingSnapshot> s) {
        std::lock_guard g(lock_);
        snapshot_ = std::move(s);
    }
    std::shared_ptr<const ipoib::ForwardingSnapshot> snapshot() {
        std::lock_guard g(lock_);
        return snapshot_;
    }
    MissQueue& misses() { return misses_; }

private:
    std::mutex lock_;
    std::shared_ptr<const ipoib::ForwardingSnapshot> snapshot_;
    MissQueue misses_;
};

struct DataWorkerCounters {
    std::atomic<std::uint64_t> fast_path{0};   // datagrams sent by the worker
    std::atomic<std::uint64_t> misses{0};      // handed to the loop
    std::atomic<std::uint64_t> touches{0};     // neighbours/paths reported used
    std::atomic<std::uint64_t> wakeups{0};
    std::atomic<std::uint64_t> queue_errors{0};  // the TUN queue failed (the device went away): no more reads
};

class DataWorker {
public:
    DataWorker(std::unique_ptr<host::HostQueue> queue, std::unique_ptr<transport::UdSendQueue> send,
               std::shared_ptr<DataPlane> plane, std::size_t max_reads);
    ~DataWorker();
    DataWorker(const DataWorker&) = delete;
    DataWorker& operator=(const DataWorker&) = delete;

    expected<void, std::string> start();
    // Stops and joins the thread; idempotent.
    void stop();
    void routes_changed() { queue_->routes_changed(); }
    // Off: the worker's queue is detached (the host sends it nothing, so
    // every flow comes to the loop's queue) and the worker waits; on:
    // attached again. For connected mode, whose peers' traffic is the
    // loop's (RC). The loop's thread; idempotent.
    expected<void, std::string> set_enabled(bool on);
    bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
    // Busy polling ([daemon] busy-poll, common/busy_poll.h): for `window`
    // after the worker read datagrams it polls its queue without sleeping.
    // Zero (the default) turns it off. Any thread.
    void set_busy_poll(std::chrono::steady_clock::duration window) { busy_.set_window(window); }
    // The worker's, its queue's ("tun_" ...), its send queue's ("tx_" ...)
    // and its busy polling's ("busy_poll_" ...).
    void visit_counters(CounterSink& out) const;

private:
    void run();
    void on_datagram(bytes ip_packet, const std::optional<IpAddress>& next_hop, const ipoib::ForwardingSnapshot* s,
                     std::chrono::steady_clock::time_point now);
    static void add(std::atomic<std::uint64_t>& c) {
        c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // one writer
    }

    std::unique_ptr<host::HostQueue> queue_;
    std::unique_ptr<transport::UdSendQueue> send_;
    std::shared_ptr<DataPlane> plane_;
    host::ReadPacing pacing_;  // reads per wake-up
    BusyPoller busy_;
    UniqueFd stop_;  // eventfd: readable once stop() was called
    UniqueFd wake_;  // eventfd: enabled_ changed
    std::atomic<bool> enabled_{true};
    std::atomic<bool> stopping_{false};
    std::thread thread_;
    std::vector<std::uint8_t> frame_;
    DataWorkerCounters counters_;
};

}  // namespace ipoibd::iface
