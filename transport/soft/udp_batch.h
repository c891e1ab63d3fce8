// A non-blocking UDP socket with batched I/O (recvmmsg/sendmmsg), used by
// the soft HCA port and by ibfabricd's switch. One datagram is one IBA
// packet (or a 6-byte link packet).
//
// Sends are queued in a bounded ring and leave in sendmmsg batches on
// flush(); when the ring is full and the kernel will not take more, the
// datagram is dropped and counted. Receives come in recvmmsg batches, with
// UDP GRO where the kernel has it: a run of datagrams that a peer sent as
// one GSO message (or that the kernel coalesced) arrives as one message and
// is cut back into its datagrams here, so the stack is crossed once per run
// on both ends. Datagrams larger than the largest IBA packet are dropped
// and counted. With a fabric key (set_auth, fabric_auth.h) every datagram
// sent is sealed (at flush, just before the send) and every datagram received is checked and stripped
// before it is handed over; what fails is dropped and counted there.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/byte_io.h"
#include "common/counters.h"
#include "common/expected.h"
#include "common/socket_address.h"
#include "common/sys_error.h"
#include "common/unique_fd.h"
#include "transport/soft/fabric_auth.h"
#include "transport/wire/packet.h"

namespace ipoibd::transport {

struct UdpCounters {
    std::uint64_t rx_datagrams = 0;
    std::uint64_t rx_oversized = 0;   // larger than an IBA packet: dropped
    std::uint64_t rx_errors = 0;      // recvmmsg failures other than EAGAIN
    std::uint64_t rx_gro_messages = 0;  // messages that carried several datagrams (UDP GRO)
    std::uint64_t tx_datagrams = 0;
    std::uint64_t tx_queue_full = 0;  // dropped: ring full, kernel busy
    std::uint64_t tx_errors = 0;      // dropped: sendmmsg refused it (ECONNREFUSED, ...)
    std::uint64_t tx_gso_runs = 0;    // messages that carried several datagrams (UDP GSO)
    std::uint64_t gso_disabled = 0;   // 1 when the kernel refused UDP GSO (then one by one)
};
// As "udp_rx", "udp_tx_queue_full", ...
void visit(const UdpCounters& c, CounterSink& out);

class UdpBatchSocket {
public:
    static constexpr std::size_t kBatch = 64;         // messages per sendmmsg
    static constexpr std::size_t kSendRing = 256;     // queued datagrams at most
    static constexpr std::size_t kSlotSize = ib::kMaxPacketSize + FabricAuth::kTrailer;  // room for the trailer
    static constexpr std::size_t kReceiveMessages = 32;       // messages per recvmmsg
    static constexpr std::size_t kReceiveBuffer = 64 * 1024;  // one message: a whole GRO run
    static constexpr std::size_t kReceiveBudget = 256;         // datagrams per receive() by default

    // Opens a UDP socket bound to `bind_to` (port 0: any), and connected to
    // `peer` when given (then only the peer's datagrams are received).
    static expected<UdpBatchSocket, SysError> open(const SocketAddress& bind_to, const SocketAddress* peer);
    // Another send ring on `other`'s socket (a dup() of its fd), for another
    // thread: sendmmsg on one UDP socket from two threads is safe, and the
    // datagrams leave from the same address. It receives nothing (the
    // socket's datagrams are `other`'s) and has no receive buffers.
    static expected<UdpBatchSocket, SysError> second_sender(const UdpBatchSocket& other);

    int fd() const { return fd_.get(); }
    // Seal and check every datagram with `auth` (owned by the caller, who
    // keeps it alive while set); nullptr: no fabric key.
    void set_auth(FabricAuth* auth) { auth_ = auth; }
    SocketAddress local_address() const;
    const UdpCounters& counters() const { return counters_; }

    // Queues a datagram (to the connected peer when `to` is null). Returns
    // false when it was dropped (counted).
    bool queue(bytes datagram, const SocketAddress* to = nullptr);
    // Sends what is queued; what the kernel does not take stays queued
    // (unsealed again: a fabric key's trailer is put on just before the
    // send, with a fresh sequence number).
    void flush();
    std::size_t queued() const { return tx_count_; }

    // Receives and hands over at most `max_datagrams` datagrams, calling
    // on_datagram(data, from) for each (which must not call receive()
    // itself); returns how many. A GRO message is
    // cut into its datagrams; what a recvmmsg batch brought beyond the
    // limit stays pending, in order, for the next call (see pending()).
    using DatagramHandler = std::function<void(bytes, const SocketAddress&)>;
    std::size_t receive(const DatagramHandler& on_datagram, std::size_t max_datagrams = kReceiveBudget);
    // Datagrams already received from the kernel but not handed over: the
    // socket's fd is not readable for them, so a caller that stopped at
    // its limit must come back while this is true.
    bool pending() const { return rx_next_ < rx_count_; }
    // Hands over only what is pending, without reading from the kernel.
    std::size_t drain_pending(const DatagramHandler& on_datagram);

    UdpBatchSocket(UdpBatchSocket&&) noexcept;
    UdpBatchSocket& operator=(UdpBatchSocket&&) noexcept;
    ~UdpBatchSocket();

private:
    UdpBatchSocket(UniqueFd fd, bool receives);
    enum class Read { got, nothing, error };
    Read read_batch();  // one recvmmsg into rx_
    void hand_over(const DatagramHandler& on_datagram);  // the next pending datagram

    struct Received {  // one message of the last recvmmsg batch
        std::size_t length = 0;
        std::size_t segment = 0;  // datagram size (GRO); == length for one datagram
        bool truncated = false;
        SocketAddress from;
    };

    struct Slot {
        std::array<std::uint8_t, kSlotSize> data;
        std::size_t length;
        SocketAddress to;
        bool has_to;
        bool sealed;  // a fabric key's trailer is on (sealed at flush, just before the send)
    };

    UniqueFd fd_;
    std::vector<Slot> tx_ring_;  // kSendRing slots
    std::size_t tx_head_ = 0;    // oldest queued
    std::size_t tx_count_ = 0;
    // kReceiveMessages * kReceiveBuffer, not zeroed: the kernel touches
    // only the pages that datagrams fill. None for a second sender.
    std::unique_ptr<std::uint8_t[]> rx_buffers_;
    // recvmmsg's headers, set up once (they point into rx_buffers_ and
    // into themselves: on the heap, so that a move keeps them valid); a
    // receive resets only the fields the kernel changed in the headers it
    // used, instead of writing all kReceiveMessages of them (some 2.5 KiB,
    // 40 cache lines, cold after a sleep) for what is mostly one datagram.
    struct RxHeaders;
    std::unique_ptr<RxHeaders> rx_headers_;
    bool gso_ = true;                       // send runs with UDP_SEGMENT until the kernel refuses
    bool gro_ = false;                      // UDP_GRO accepted: messages may hold several datagrams
    std::array<Received, kReceiveMessages> rx_{};
    std::size_t rx_count_ = 0;   // messages in rx_
    std::size_t rx_next_ = 0;    // the message being handed over
    std::size_t rx_offset_ = 0;  // bytes of it already handed over
    UdpCounters counters_;
    FabricAuth* auth_ = nullptr;
    FabricAuth::Clock::time_point rx_now_{};  // read once per receive(), for the replay state
};

}  // namespace ipoibd::transport
