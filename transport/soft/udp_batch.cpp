#include "transport/soft/udp_batch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>

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
    // One message per run of datagrams to the same peer with the same size
    // (the last of a run may be shorter): with UDP GSO the kernel cuts a run
    // into its datagrams, so a run costs one trip through the stack.
    constexpr std::size_t kMaxRun = 64;           // UDP_MAX_SEGMENTS
    constexpr std::size_t kMaxRunBytes = 65000;   // below the 64 KiB of one IP datagram
    union Control {
        char buf[CMSG_SPACE(sizeof(std::uint16_t))];
        cmsghdr align;
    };
    while (tx_count_ > 0) {
        std::array<mmsghdr, kBatch> msgs{};
        std::array<iovec, kSendRing> iov{};
        std::array<Control, kBatch> control{};
        std::array<std::size_t, kBatch> run_length{};
        std::size_t n = 0, slot = 0;
        for (; n < kBatch && slot < tx_count_; ++n) {
            const Slot& first = tx_ring_[(tx_head_ + slot) % kSendRing];
            std::size_t run = 1, bytes_in_run = first.length;
            iov[slot] = {const_cast<std::uint8_t*>(first.data.data()), first.length};
            if (gso_) {
                while (slot + run < tx_count_ && run < kMaxRun) {
                    const Slot& next = tx_ring_[(tx_head_ + slot + run) % kSendRing];
                    const Slot& prev = tx_ring_[(tx_head_ + slot + run - 1) % kSendRing];
                    if (next.has_to != first.has_to || (first.has_to && !(next.to == first.to)) ||
                        next.length > first.length || prev.length != first.length ||
                        bytes_in_run + next.length > kMaxRunBytes)
                        break;
                    iov[slot + run] = {const_cast<std::uint8_t*>(next.data.data()), next.length};
                    bytes_in_run += next.length;
                    ++run;
                }
            }
            msghdr& h = msgs[n].msg_hdr;
            h.msg_iov = &iov[slot];
            h.msg_iovlen = run;
            if (first.has_to) {
                h.msg_name = const_cast<sockaddr*>(first.to.get());
                h.msg_namelen = first.to.length;
            }
            if (run > 1) {
                h.msg_control = control[n].buf;
                h.msg_controllen = sizeof control[n].buf;
                cmsghdr* c = CMSG_FIRSTHDR(&h);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
                const auto size = static_cast<std::uint16_t>(first.length);
                std::memcpy(CMSG_DATA(c), &size, sizeof size);
            }
            run_length[n] = run;
            slot += run;
        }
        const int sent = ::sendmmsg(fd_.get(), msgs.data(), static_cast<unsigned>(n), MSG_DONTWAIT);
        if (sent < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
            if (run_length[0] > 1 && (errno == EINVAL || errno == EIO || errno == EMSGSIZE || errno == ENOPROTOOPT)) {
                // No UDP GSO here (old kernel, or datagrams over the path
                // MTU): datagram by datagram from now on.
                gso_ = false;
                ++counters_.gso_disabled;
                continue;
            }
            // The first datagram was refused (e.g. ECONNREFUSED from an
            // ICMP error of an earlier one): drop it and go on.
            ++counters_.tx_errors;
            tx_head_ = (tx_head_ + 1) % kSendRing;
            --tx_count_;
            continue;
        }
        std::size_t done = 0;
        for (int i = 0; i < sent; ++i) done += run_length[static_cast<std::size_t>(i)];
        counters_.tx_datagrams += done;
        if (done > static_cast<std::size_t>(sent)) counters_.tx_gso_runs += static_cast<std::uint64_t>(sent);
        tx_head_ = (tx_head_ + done) % kSendRing;
        tx_count_ -= done;
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
