#include "transport/soft/udp_batch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ipoibd::transport {

void visit(const UdpCounters& c, CounterSink& out) {
    out.counter("udp_rx", c.rx_datagrams);
    out.counter("udp_rx_gro_messages", c.rx_gro_messages);
    out.counter("udp_rx_oversized", c.rx_oversized);
    out.counter("udp_rx_errors", c.rx_errors);
    out.counter("udp_tx", c.tx_datagrams);
    out.counter("udp_tx_queue_full", c.tx_queue_full);
    out.counter("udp_tx_errors", c.tx_errors);
    out.counter("udp_tx_gso_runs", c.tx_gso_runs);
    out.counter("udp_gso_disabled", c.gso_disabled);
}

struct UdpBatchSocket::RxHeaders {
    union Control {
        char buf[CMSG_SPACE(sizeof(int))];
        cmsghdr align;
    };
    std::array<mmsghdr, kReceiveMessages> msgs;
    std::array<iovec, kReceiveMessages> iov;
    std::array<sockaddr_storage, kReceiveMessages> from;  // filled by the kernel
    std::array<Control, kReceiveMessages> control;        // filled by the kernel

    RxHeaders(std::uint8_t* buffers, bool gro) {
        for (std::size_t i = 0; i < kReceiveMessages; ++i) {
            // A whole GRO run fits; a single datagram over kSlotSize is visible.
            iov[i] = {buffers + i * kReceiveBuffer, kReceiveBuffer};
            msgs[i].msg_len = 0;
            msgs[i].msg_hdr = msghdr{};
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &from[i];
            if (gro) msgs[i].msg_hdr.msg_control = control[i].buf;
            reset(i, gro);
        }
    }
    // What recvmmsg changes in a header it used: the lengths it wrote back.
    void reset(std::size_t i, bool gro) {
        msgs[i].msg_hdr.msg_namelen = sizeof from[i];
        msgs[i].msg_hdr.msg_controllen = gro ? sizeof control[i].buf : 0;
    }
};

UdpBatchSocket::UdpBatchSocket(UniqueFd fd, bool receives) : fd_(std::move(fd)), tx_ring_(kSendRing) {
    if (!receives) return;  // a second sender: the socket's datagrams are the first one's
    rx_buffers_.reset(new std::uint8_t[kReceiveMessages * kReceiveBuffer]);  // NOLINT: left uninitialised on purpose
    // Receive GSO runs whole (kernel >= 5.0); without it the kernel cuts
    // them before queueing, datagram by datagram, which also works.
    const int on = 1;
    gro_ = ::setsockopt(fd_.get(), SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
    rx_headers_ = std::make_unique<RxHeaders>(rx_buffers_.get(), gro_);
}

UdpBatchSocket::UdpBatchSocket(UdpBatchSocket&&) noexcept = default;
UdpBatchSocket& UdpBatchSocket::operator=(UdpBatchSocket&&) noexcept = default;
UdpBatchSocket::~UdpBatchSocket() = default;

expected<UdpBatchSocket, SysError> UdpBatchSocket::second_sender(const UdpBatchSocket& other) {
    UniqueFd fd(::fcntl(other.fd(), F_DUPFD_CLOEXEC, 0));
    if (!fd) return unexpected(SysError{"dup a UDP socket", errno});
    return UdpBatchSocket(std::move(fd), false);
}

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
    return UdpBatchSocket(std::move(fd), true);
}

SocketAddress UdpBatchSocket::local_address() const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    return socket_address_from(ss, len);
}

bool UdpBatchSocket::queue(bytes datagram, const SocketAddress* to) {
    if (datagram.size() > ib::kMaxPacketSize) {
        ++counters_.tx_errors;
        return false;
    }
    if (tx_count_ == kSendRing) flush();
    if (tx_count_ == kSendRing) {
        ++counters_.tx_queue_full;
        return false;
    }
    Slot& s = tx_ring_[(tx_head_ + tx_count_) % kSendRing];
    if (!datagram.empty()) std::memcpy(s.data.data(), datagram.data(), datagram.size());  // data() may be null
    s.length = datagram.size();
    s.sealed = false;
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
    // With a fabric key each sendmmsg's datagrams are sealed just before
    // it and unsealed again if the kernel did not take them: another thread
    // sealing for the same address (FabricAuth::share_session) takes
    // sequence numbers meanwhile, and a receiver's replay window must see
    // ours soon after theirs.
    const auto seal = [this](std::size_t count) {
        for (std::size_t i = 0; i < count; ++i) {
            Slot& s = tx_ring_[(tx_head_ + i) % kSendRing];
            if (s.sealed) continue;
            s.length = auth_->seal(s.data.data(), s.length);
            s.sealed = true;
        }
    };
    const auto unseal = [this]() {
        for (std::size_t i = 0; i < tx_count_; ++i) {
            Slot& s = tx_ring_[(tx_head_ + i) % kSendRing];
            if (!s.sealed) continue;
            s.length -= FabricAuth::kTrailer;
            s.sealed = false;
        }
    };
    while (tx_count_ > 0) {
        // At most kBatch messages of at most kMaxRun datagrams: the first
        // kBatch * kMaxRun slots (all of them, the ring holds fewer).
        if (auth_) seal(tx_count_);
        // Not zeroed (some 10 KiB, for what is mostly one datagram when
        // latency matters): every field of the entries used is set below.
        std::array<mmsghdr, kBatch> msgs;
        std::array<iovec, kSendRing> iov;
        std::array<Control, kBatch> control;
        std::array<std::size_t, kBatch> run_length;
        std::size_t n = 0, slot = 0;
        for (; n < kBatch && slot < tx_count_; ++n) {
            const Slot& first = tx_ring_[(tx_head_ + slot) % kSendRing];
            std::size_t run = 1, bytes_in_run = first.length;
            iov[slot] = {const_cast<std::uint8_t*>(first.data.data()), first.length};
            if (gso_) {
                while (slot + run < tx_count_ && run < kMaxRun) {
                    const Slot& next = tx_ring_[(tx_head_ + slot + run) % kSendRing];
                    const Slot& prev = tx_ring_[(tx_head_ + slot + run - 1) % kSendRing];
                    // An empty datagram cannot end a run: GSO would lose it.
                    if (next.has_to != first.has_to || (first.has_to && !(next.to == first.to)) ||
                        next.length > first.length || next.length == 0 || prev.length != first.length ||
                        bytes_in_run + next.length > kMaxRunBytes)
                        break;
                    iov[slot + run] = {const_cast<std::uint8_t*>(next.data.data()), next.length};
                    bytes_in_run += next.length;
                    ++run;
                }
            }
            msgs[n].msg_len = 0;
            msghdr& h = msgs[n].msg_hdr;
            h = msghdr{};
            h.msg_iov = &iov[slot];
            h.msg_iovlen = run;
            if (first.has_to) {
                h.msg_name = const_cast<sockaddr*>(first.to.get());
                h.msg_namelen = first.to.length;
            }
            if (run > 1) {
                control[n] = Control{};
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
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                if (auth_) unseal();
                return;
            }
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
        // Empty: start again at the first slots, which are still in the
        // CPU's caches (the ring is over a megabyte; going round it would
        // touch cold memory for every datagram).
        if (tx_count_ == 0) tx_head_ = 0;
        if (static_cast<std::size_t>(sent) < n) {  // kernel full for now
            if (auth_) unseal();
            return;
        }
    }
}

UdpBatchSocket::Read UdpBatchSocket::read_batch() {
    if (!rx_headers_) return Read::nothing;  // a second sender receives nothing
    RxHeaders& rx = *rx_headers_;
    auto& msgs = rx.msgs;
    rx_count_ = rx_next_ = rx_offset_ = 0;
    const int got = ::recvmmsg(fd_.get(), msgs.data(), kReceiveMessages, MSG_DONTWAIT, nullptr);
    if (got <= 0) {
        if (got == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Read::nothing;
        // ECONNREFUSED and friends (an ICMP error for an earlier send) are
        // reported once: counted, and reading goes on.
        ++counters_.rx_errors;
        return Read::error;
    }
    for (std::size_t i = 0; i < static_cast<std::size_t>(got); ++i) {
        msghdr& h = msgs[i].msg_hdr;
        Received& r = rx_[i];
        r.length = msgs[i].msg_len;
        r.segment = r.length;
        r.truncated = (h.msg_flags & MSG_TRUNC) != 0;  // not with 64 KiB buffers; counted if it is
        r.from = socket_address_from(rx.from[i], h.msg_namelen);
        for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int size = 0;
                std::memcpy(&size, CMSG_DATA(c), sizeof size);
                if (size > 0 && static_cast<std::size_t>(size) < r.length) {
                    r.segment = static_cast<std::size_t>(size);
                    ++counters_.rx_gro_messages;
                }
            }
        }
        rx.reset(i, gro_);  // ready for the next recvmmsg
    }
    rx_count_ = static_cast<std::size_t>(got);
    return Read::got;
}

void UdpBatchSocket::hand_over(const DatagramHandler& on_datagram) {
    const std::size_t message = rx_next_;
    const Received& r = rx_[message];
    const std::size_t piece = r.truncated ? 0 : std::min(r.segment, r.length - rx_offset_);
    const std::size_t offset = rx_offset_;
    rx_offset_ += piece;
    if (r.truncated || rx_offset_ >= r.length) {  // the message is done (also when empty)
        ++rx_next_;
        rx_offset_ = 0;
    }
    ++counters_.rx_datagrams;
    if (r.truncated || piece > (auth_ ? kSlotSize : ib::kMaxPacketSize)) {
        ++counters_.rx_oversized;
        return;
    }
    const std::uint8_t* data = rx_buffers_.get() + message * kReceiveBuffer + offset;
    if (!auth_) {
        on_datagram(bytes(data, piece), r.from);
        return;
    }
    const auto body = auth_->open(data, piece, r.from, rx_now_);
    if (body) on_datagram(bytes(data, *body), r.from);  // refusals are counted by the authenticator
}

std::size_t UdpBatchSocket::receive(const DatagramHandler& on_datagram, std::size_t max_datagrams) {
    constexpr int kMaxReads = 8;  // recvmmsg calls per receive(), also when each fails
    std::size_t total = 0;
    int reads = 0;
    bool drained = false;  // a batch came back short: the socket is empty for now
    if (auth_) rx_now_ = FabricAuth::Clock::now();
    while (total < max_datagrams) {
        if (!pending()) {
            if (drained || reads++ == kMaxReads) break;
            const Read r = read_batch();
            if (r == Read::nothing) break;
            drained = r == Read::got && rx_count_ < kReceiveMessages;
            continue;
        }
        hand_over(on_datagram);
        ++total;
    }
    return total;
}

std::size_t UdpBatchSocket::drain_pending(const DatagramHandler& on_datagram) {
    std::size_t total = 0;
    if (auth_) rx_now_ = FabricAuth::Clock::now();
    for (; pending(); ++total) hand_over(on_datagram);
    return total;
}

}  // namespace ipoibd::transport
