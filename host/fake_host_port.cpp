#include "host/fake_host_port.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace ipoibd::host {

FakeHostPort::FakeHostPort(std::string name, std::optional<MacAddress> mac)
    : name_(std::move(name)), mac_(mac), event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

void FakeHostPort::delete_device() {
    gone_ = true;
    update_event();
}

void FakeHostPort::update_event() {
    std::uint64_t value = 0;
    if (injected_.empty() && !gone_) {
        while (::read(event_.get(), &value, sizeof value) > 0) {
        }
    } else {
        value = 1;
        (void)::write(event_.get(), &value, sizeof value);
    }
}

bool FakeHostPort::inject(bytes ip_packet, std::optional<IpAddress> next_hop) {
    if (injected_.size() >= kMaxInjected) {
        ++inject_refused_;
        return false;
    }
    injected_.push_back({{ip_packet.begin(), ip_packet.end()}, next_hop});
    update_event();
    return true;
}

std::size_t FakeHostPort::read_batch(HostReceiver& receiver, std::size_t max_reads) {
    read_requests_.push_back(max_reads);
    std::size_t reads = 0;
    while (!gone_ && reads < max_reads && !injected_.empty()) {
        const Injected p = std::move(injected_.front());
        injected_.pop_front();
        ++rx_packets_;
        if (mac_)
            receiver.on_host_frame(p.packet);
        else
            receiver.on_host_packet(p.packet, p.next_hop);
        receiver.after_host_read(1, reads);
        ++reads;
    }
    update_event();
    return reads;
}

void FakeHostPort::write(bytes ip_packet) {
    ++tx_packets_;
    written_.emplace_back(ip_packet.begin(), ip_packet.end());
}

void FakeHostPort::write_frame(const EthernetHeader& header, bytes payload) {
    if (!mac_) {
        HostPort::write_frame(header, payload);
        return;
    }
    ++tx_packets_;
    std::vector<std::uint8_t> frame(EthernetHeader::size + payload.size());
    header.write_to(frame.data());
    std::copy(payload.begin(), payload.end(), frame.begin() + EthernetHeader::size);
    written_.push_back(std::move(frame));
}

std::vector<std::vector<std::uint8_t>> FakeHostPort::take_written() { return std::exchange(written_, {}); }

expected<void, std::string> FakeHostPort::set_carrier(bool on) {
    carrier_ = on;
    return {};
}

expected<void, std::string> FakeHostPort::set_mtu(std::uint32_t mtu) {
    mtu_ = mtu;
    return {};
}

expected<void, std::string> FakeHostPort::set_up(bool up) {
    up_ = up;
    return {};
}

expected<void, std::string> FakeHostPort::add_address(const IpPrefix& address) {
    if (std::find(addresses_.begin(), addresses_.end(), address) != addresses_.end())
        return unexpected(to_string(address) + " is already on " + name_);
    addresses_.push_back(address);
    return {};
}

expected<void, std::string> FakeHostPort::remove_address(const IpPrefix& address) {
    auto it = std::find(addresses_.begin(), addresses_.end(), address);
    if (it == addresses_.end()) return unexpected(to_string(address) + " is not on " + name_);
    addresses_.erase(it);
    return {};
}

expected<void, std::string> FakeHostPort::add_route(const HostRoute& route) {
    if (std::find(refused_routes_.begin(), refused_routes_.end(), route.destination) != refused_routes_.end())
        return unexpected("could not add the route to " + to_string(route.destination) + " on " + name_ +
                          ": File exists");
    // The kernel takes a gateway only on the link: in the prefix of an
    // address of the device or of an on-link route through it (IPv6: its
    // link-local prefix too).
    if (route.gateway && !is_link_local(*route.gateway)) {
        const IpAddress& g = *route.gateway;
        auto covers = [&](const IpPrefix& p) {
            return p.address.family == g.family && network_of(p.address, p.length) == network_of(g, p.length);
        };
        const bool on_link = std::any_of(addresses_.begin(), addresses_.end(), covers) ||
                             std::any_of(routes_.begin(), routes_.end(),
                                         [&](const HostRoute& r) { return !r.gateway && covers(r.destination); });
        if (!on_link)
            return unexpected("could not add the route to " + to_string(route.destination) + " on " + name_ +
                              ": Nexthop has invalid gateway");
    }
    routes_.push_back(route);
    return {};
}

expected<void, std::string> FakeHostPort::remove_route(const HostRoute& route) {
    auto it = std::find(routes_.begin(), routes_.end(), route);
    if (it == routes_.end()) return unexpected(to_string(route.destination) + ": no such route on " + name_);
    routes_.erase(it);
    return {};
}

namespace {

// A data thread's end of a FakeHostPort::Queue.
class FakeHostQueue final : public HostQueue {
public:
    explicit FakeHostQueue(std::shared_ptr<FakeHostPort::Queue> q) : q_(std::move(q)) {}
    int fd() const override { return q_->event.get(); }
    std::size_t read_batch(std::size_t max_reads, const Emit& emit) override {
        std::vector<FakeHostPort::Injected> batch;
        {
            std::lock_guard g(q_->lock);
            while (batch.size() < max_reads && !q_->waiting.empty()) {
                batch.push_back(std::move(q_->waiting.front()));
                q_->waiting.pop_front();
            }
            q_->rx_packets += batch.size();
            if (q_->waiting.empty()) {
                std::uint64_t n = 0;
                [[maybe_unused]] auto r = ::read(q_->event.get(), &n, sizeof n);
            }
        }
        for (const auto& p : batch) emit(p.packet, p.next_hop);
        return batch.size();
    }
    void routes_changed() override {}
    expected<void, std::string> set_attached(bool attached) override {
        std::lock_guard g(q_->lock);
        q_->attached = attached;
        return {};
    }
    void visit_counters(CounterSink& out) const override {
        std::lock_guard g(q_->lock);
        out.counter("rx_packets", q_->rx_packets);
        out.counter("inject_refused", q_->refused);
    }

private:
    std::shared_ptr<FakeHostPort::Queue> q_;
};

}  // namespace

expected<std::unique_ptr<HostQueue>, std::string> FakeHostPort::open_queue() {
    if (queues_.size() + 1 >= max_queues_) return unexpected(name_ + " has " + std::to_string(max_queues_) + " queue(s)");
    auto q = std::make_shared<Queue>();
    q->event.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!q->event) return unexpected(std::string("eventfd failed"));
    queues_.push_back(q);
    return std::unique_ptr<HostQueue>(std::make_unique<FakeHostQueue>(std::move(q)));
}

bool FakeHostPort::inject_queue(std::size_t q, bytes ip_packet, std::optional<IpAddress> next_hop) {
    if (q == 0 || q > queues_.size()) {
        ++inject_refused_;
        return false;
    }
    Queue& queue = *queues_[q - 1];
    std::lock_guard g(queue.lock);
    if (!queue.attached || queue.waiting.size() >= kMaxInjected) {
        ++queue.refused;
        return false;
    }
    queue.waiting.push_back({{ip_packet.begin(), ip_packet.end()}, next_hop});
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(queue.event.get(), &one, sizeof one);
    return true;
}

void FakeHostPort::visit_counters(CounterSink& out) const {
    out.counter("rx_packets", rx_packets_);
    out.counter("tx_packets", tx_packets_);
    out.counter("inject_refused", inject_refused_);
}

}  // namespace ipoibd::host
