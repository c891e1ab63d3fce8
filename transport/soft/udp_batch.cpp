#include "transport/soft/udp_batch.h"

#include <fcntl.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

namespace ipoibd::transport {

UdpBatchSocket::UdpBatchSocket(UniqueFd fd)
    : fd_(std::move(fd)), tx_ring_(kSendRing), rx_buffers_(kBatch * (kSlotSize + 1)) {}

expected<UdpBatchSocket, SysError> UdpBatchSocket::open(const SocketAddress& bind_to, const SocketAddress* peer) {
    UniqueFd fd(::socket(bind_to.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return unexpected(SysError{"create UDP socket", errno});
    // Room for bursts: a few hundred full-size packets each way.
    const int buf = 4 << 20;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    if (::bind(fd.get(), bind_to.get(), bind_to.length) != 0)
        return unexpected(SysError{"bind UDP socket to " + bind_to.to_string(), errno});
    if (peer && ::connect(fd.get(), peer->get(), peer->length) != 0)
        return unexpected(SysError{"connect UDP socket to " + peer->to_string(), errno});
    return UdpBatchSocket(std::move(fd));
}

SocketAddress UdpBatchSocket::local_address() const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    return socket_address_from(ss, len);
}

bool UdpBatchSocket::queue(bytes datagram, const SocketAddress* to) {
    if (datagram.size() > kSlotSize) {
        ++counters_.tx_errors;
        return false;
    }
    if (tx_count_ == kSendRing) flush();
    if (tx_count_ == kSendRing) {
        ++counters_.tx_queue_full;
        return false;
    }
    Slot& s = tx_ring_[(tx_head_ + tx_count_) % kSendRing];
    std::memcpy(s.data.data(), datagram.data(), datagram.size());
    s.length = datagram.size();
    s.has_to = to != nullptr;
    if (to) s.to = *to;
    ++tx_count_;
    return true;
}

void UdpBatchSocket::flush() {
    while (tx_count_ > 0) {
        std::array<mmsghdr, kBatch> msgs{};
        std::array<iovec, kBatch> iov{};
        std::size_t n = 0;
        for (; n < kBatch && n < tx_count_; ++n) {
            Slot& s = tx_ring_[(tx_head_ + n) % kSendRing];
            iov[n] = {s.data.data(), s.length};
            msgs[n].msg_hdr.msg_iov = &iov[n];
            msgs[n].msg_hdr.msg_iovlen = 1;
            if (s.has_to) {
                msgs[n].msg_hdr.msg_name = s.to.get();
                msgs[n].msg_hdr.msg_namelen = s.to.length;
            }
        }
        const int sent = ::sendmmsg(fd_.get(), msgs.data(), static_cast<unsigned>(n), MSG_DONTWAIT);
        if (sent < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
            // The first datagram was refused (e.g. ECONNREFUSED from an
            // ICMP error of an earlier one): drop it and go on.
            ++counters_.tx_errors;
            tx_head_ = (tx_head_ + 1) % kSendRing;
            --tx_count_;
            continue;
        }
        counters_.tx_datagrams += static_cast<std::uint64_t>(sent);
        tx_head_ = (tx_head_ + static_cast<std::size_t>(sent)) % kSendRing;
        tx_count_ -= static_cast<std::size_t>(sent);
        if (static_cast<std::size_t>(sent) < n) return;  // kernel full for now
    }
}

std::size_t UdpBatchSocket::receive(const DatagramHandler& on_datagram, std::size_t max_batches) {
    std::size_t total = 0;
    for (std::size_t batch = 0; batch < max_batches; ++batch) {
        std::array<mmsghdr, kBatch> msgs{};
        std::array<iovec, kBatch> iov{};
        std::array<sockaddr_storage, kBatch> from{};
        for (std::size_t i = 0; i < kBatch; ++i) {
            // One byte more than the largest packet, so oversize is visible.
            iov[i] = {rx_buffers_.data() + i * (kSlotSize + 1), kSlotSize + 1};
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &from[i];
            msgs[i].msg_hdr.msg_namelen = sizeof from[i];
        }
        const int got = ::recvmmsg(fd_.get(), msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
        if (got < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ++counters_.rx_errors;
            // ECONNREFUSED and friends are reported once; keep reading.
            if (errno == ECONNREFUSED) continue;
            break;
        }
        for (int i = 0; i < got; ++i) {
            const std::size_t len = msgs[static_cast<std::size_t>(i)].msg_len;
            ++counters_.rx_datagrams;
            if (len > kSlotSize || (msgs[static_cast<std::size_t>(i)].msg_hdr.msg_flags & MSG_TRUNC)) {
                ++counters_.rx_oversized;
                continue;
            }
            const auto& hdr = msgs[static_cast<std::size_t>(i)].msg_hdr;
            on_datagram(bytes(static_cast<const std::uint8_t*>(iov[static_cast<std::size_t>(i)].iov_base), len),
                        socket_address_from(from[static_cast<std::size_t>(i)], hdr.msg_namelen));
        }
        total += static_cast<std::size_t>(got);
        if (static_cast<std::size_t>(got) < kBatch) break;
    }
    return total;
}

}  // namespace ipoibd::transport
