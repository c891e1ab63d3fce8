// A non-blocking UDP socket with batched I/O (recvmmsg/sendmmsg), used by
// the soft HCA port and by ibfabricd's switch. One datagram is one IBA
// packet (or a 6-byte link packet).
//
// Sends are queued in a bounded ring and leave in sendmmsg batches on
// flush(); when the ring is full and the kernel will not take more, the
// datagram is dropped and counted. Receives come in recvmmsg batches;
// datagrams larger than the largest IBA packet are dropped and counted.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/byte_io.h"
#include "common/expected.h"
#include "common/socket_address.h"
#include "common/sys_error.h"
#include "common/unique_fd.h"
#include "transport/wire/packet.h"

namespace ipoibd::transport {

struct UdpCounters {
    std::uint64_t rx_datagrams = 0;
    std::uint64_t rx_oversized = 0;   // larger than an IBA packet: dropped
    std::uint64_t rx_errors = 0;      // recvmmsg failures other than EAGAIN
    std::uint64_t tx_datagrams = 0;
    std::uint64_t tx_queue_full = 0;  // dropped: ring full, kernel busy
    std::uint64_t tx_errors = 0;      // dropped: sendmmsg refused it (ECONNREFUSED, ...)
    std::uint64_t tx_gso_runs = 0;    // messages that carried several datagrams (UDP GSO)
    std::uint64_t gso_disabled = 0;   // 1 when the kernel refused UDP GSO (then one by one)
};

class UdpBatchSocket {
public:
    static constexpr std::size_t kBatch = 64;         // datagrams per syscall
    static constexpr std::size_t kSendRing = 256;     // queued datagrams at most
    static constexpr std::size_t kSlotSize = ib::kMaxPacketSize;

    // Opens a UDP socket bound to `bind_to` (port 0: any), and connected to
    // `peer` when given (then only the peer's datagrams are received).
    static expected<UdpBatchSocket, SysError> open(const SocketAddress& bind_to, const SocketAddress* peer);

    int fd() const { return fd_.get(); }
    SocketAddress local_address() const;
    const UdpCounters& counters() const { return counters_; }

    // Queues a datagram (to the connected peer when `to` is null). Returns
    // false when it was dropped (counted).
    bool queue(bytes datagram, const SocketAddress* to = nullptr);
    // Sends what is queued; what the kernel does not take stays queued.
    void flush();
    std::size_t queued() const { return tx_count_; }

    // Receives at most `max_batches` batches, calling on_datagram(data, from)
    // for each datagram. Returns the number received.
    using DatagramHandler = std::function<void(bytes, const SocketAddress&)>;
    std::size_t receive(const DatagramHandler& on_datagram, std::size_t max_batches = 4);

private:
    explicit UdpBatchSocket(UniqueFd fd);

    struct Slot {
        std::array<std::uint8_t, kSlotSize> data;
        std::size_t length;
        SocketAddress to;
        bool has_to;
    };

    UniqueFd fd_;
    std::vector<Slot> tx_ring_;  // kSendRing slots
    std::size_t tx_head_ = 0;    // oldest queued
    std::size_t tx_count_ = 0;
    std::vector<std::uint8_t> rx_buffers_;  // kBatch * (kSlotSize + 1)
    bool gso_ = true;                       // send runs with UDP_SEGMENT until the kernel refuses
    UdpCounters counters_;
};

}  // namespace ipoibd::transport
