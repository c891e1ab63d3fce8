// Data threads; the flow is drawn in data_worker.h.
#include "interface/data_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ipoib/frame.h"

namespace ipoibd::iface {

namespace {

void signal_fd(int fd) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(fd, &one, sizeof one);
}

}  // namespace

MissQueue::MissQueue() : event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

bool MissQueue::push(Item item) {
    bool wake = false;
    {
        std::lock_guard g(lock_);
        if (items_.size() >= kMaxItems || bytes_ + item.data.size() > kMaxBytes) {
            dropped_.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
        bytes_ += item.data.size();
        wake = items_.empty();
        items_.push_back(std::move(item));
    }
    passed_.fetch_add(1, std::memory_order_relaxed);
    if (wake) signal_fd(event_.get());
    return true;
}

bool MissQueue::push_packet(bytes ip_packet, const std::optional<IpAddress>& next_hop) {
    Item i;
    i.data.assign(ip_packet.begin(), ip_packet.end());
    if (next_hop) {
        i.ip = *next_hop;
        i.has_ip = true;
    }
    return push(std::move(i));
}

bool MissQueue::push_touch(const IpAddress& ip) {
    Item i;
    i.touch = true;
    i.ip = ip;
    i.has_ip = true;
    return push(std::move(i));
}

std::deque<MissQueue::Item> MissQueue::take() {
    std::uint64_t n = 0;
    [[maybe_unused]] auto r = ::read(event_.get(), &n, sizeof n);  // before taking: a push after it wakes again
    std::deque<Item> out;
    std::lock_guard g(lock_);
    out.swap(items_);
    bytes_ = 0;
    return out;
}

DataWorker::DataWorker(std::unique_ptr<host::HostQueue> queue, std::unique_ptr<transport::UdSendQueue> send,
                       std::shared_ptr<DataPlane> plane, std::size_t max_reads)
    : queue_(std::move(queue)),
      send_(std::move(send)),
      plane_(std::move(plane)),
      pacing_(max_reads),
      stop_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      frame_(ipoib::EncapHeader::size + 65535) {}

DataWorker::~DataWorker() { stop(); }

expected<void, std::string> DataWorker::start() {
    if (!stop_ || !wake_) return unexpected(std::string("eventfd: ") + std::strerror(errno));
    try {
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
        return unexpected(std::string("could not start a data thread: ") + e.what());
    }
    return {};
}

void DataWorker::stop() {
    if (!thread_.joinable()) return;
    signal_fd(stop_.get());
    thread_.join();
}

expected<void, std::string> DataWorker::set_enabled(bool on) {
    if (on == enabled()) return {};
    if (on) {
        if (auto r = queue_->set_attached(true); !r) return r;
        enabled_.store(true, std::memory_order_relaxed);
    } else {
        // The worker learns first, so that the detached queue's error
        // (poll() reports it) is not taken for a read to do.
        enabled_.store(false, std::memory_order_relaxed);
        signal_fd(wake_.get());
        if (auto r = queue_->set_attached(false); !r) {
            enabled_.store(true, std::memory_order_relaxed);
            return r;
        }
    }
    signal_fd(wake_.get());
    return {};
}

void DataWorker::run() {
    pollfd fds[4] = {{.fd = queue_->fd(), .events = POLLIN, .revents = 0},
                     {.fd = stop_.get(), .events = POLLIN, .revents = 0},
                     {.fd = wake_.get(), .events = POLLIN, .revents = 0},
                     {.fd = -1, .events = POLLOUT, .revents = 0}};
    bool broken = false;  // the queue reported an error while attached (the device went away)
    busy_.attach_to_this_thread();
    for (;;) {
        // Detached: poll() would report the queue's error at once.
        fds[0].fd = enabled() && !broken ? queue_->fd() : -1;
        // Sends the kernel did not take yet: go on when it can.
        fds[3].fd = send_->pending() ? send_->fd() : -1;
        const bool busy = busy_.enabled() && busy_.polling(std::chrono::steady_clock::now());
        const int ready = ::poll(fds, 4, busy ? 0 : -1);
        if (ready < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (busy) busy_.polled(ready > 0);  // nothing ready: yields the CPU first
        if (ready == 0) continue;
        if (fds[1].revents) break;
        if (fds[2].revents) {
            std::uint64_t n = 0;
            [[maybe_unused]] auto r = ::read(wake_.get(), &n, sizeof n);
        }
        if (fds[3].revents) send_->flush();
        if (!fds[0].revents || !enabled()) continue;
        if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
            broken = true;
            add(counters_.queue_errors);
            continue;
        }
        add(counters_.wakeups);
        const std::shared_ptr<const ipoib::ForwardingSnapshot> s = plane_->snapshot();
        const auto now = std::chrono::steady_clock::now();
        // After a quiet spell one read (host/read_pacing.h).
        if (queue_->read_batch(pacing_.reads(now), [&](bytes d, const std::optional<IpAddress>& hop) {
                on_datagram(d, hop, s.get(), now);
            }) > 0) {
            pacing_.read_at(now);
            busy_.keep_polling(now);
        }
        send_->flush();
    }
    send_->flush();
    // Whatever ended the thread, its queue must not keep the flows the host
    // hashes to it.
    (void)queue_->set_attached(false);
}

void DataWorker::on_datagram(bytes ip_packet, const std::optional<IpAddress>& next_hop,
                             const ipoib::ForwardingSnapshot* s, std::chrono::steady_clock::time_point now) {
    const ipoib::ForwardingEntry* e = nullptr;
    if (s && s->up) {
        if (const auto dst = ipoib::fast_path_destination(ip_packet, s->datagram_mtu)) {
            e = s->find(next_hop.value_or(dst->destination));
            ip_packet = ip_packet.first(dst->length);  // bytes past the datagram's own length go, as in the engine
        }
    }
    if (!e) {
        add(counters_.misses);
        plane_->misses().push_packet(ip_packet, next_hop);  // a full queue counts its drop
        return;
    }
    const std::uint16_t type = (ip_packet[0] >> 4) == 4 ? static_cast<std::uint16_t>(ipoib::EtherType::ipv4)
                                                          : static_cast<std::uint16_t>(ipoib::EtherType::ipv6);
    ipoib::EncapHeader{.type = type, .reserved = 0}.write_to(frame_.data());
    std::memcpy(frame_.data() + ipoib::EncapHeader::size, ip_packet.data(), ip_packet.size());
    transport::SendRequest req;
    req.ah = e->ah;
    req.remote_qpn = e->to.qpn;
    req.remote_qkey = s->as.qkey;
    req.payload = bytes(frame_.data(), ipoib::EncapHeader::size + ip_packet.size());
    if (send_->send(s->as, std::span<const transport::SendRequest>(&req, 1)) == 1) {
        add(counters_.fast_path);
    } else {
        // The send queue would not take it (counted there: refused, or
        // failed where an HCA queue could not make its QP or an AH): the
        // loop's path decides, from the interface's own QP.
        add(counters_.misses);
        plane_->misses().push_packet(ip_packet, next_hop);
    }
    if (s->report_once(*e, now) && plane_->misses().push_touch(e->ip)) add(counters_.touches);
}

void DataWorker::visit_counters(CounterSink& out) const {
    out.counter("fast_path", counters_.fast_path.load(std::memory_order_relaxed));
    out.counter("misses", counters_.misses.load(std::memory_order_relaxed));
    out.counter("touches", counters_.touches.load(std::memory_order_relaxed));
    out.counter("wakeups", counters_.wakeups.load(std::memory_order_relaxed));
    out.counter("queue_errors", counters_.queue_errors.load(std::memory_order_relaxed));
    PrefixedSink tun(out, "tun_");
    queue_->visit_counters(tun);
    PrefixedSink tx(out, "tx_");
    visit(send_->counters(), tx);
    PrefixedSink busy(out, "busy_poll_");
    visit(busy_.counters_snapshot(), busy);
}

}  // namespace ipoibd::iface
