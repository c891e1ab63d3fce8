#include "host/fake_host_port.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace ipoibd::host {

FakeHostPort::FakeHostPort(std::string name, std::optional<MacAddress> mac)
    : name_(std::move(name)), mac_(mac), event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

void FakeHostPort::update_event() {
    std::uint64_t value = 0;
    if (injected_.empty()) {
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
    while (reads < max_reads && !injected_.empty()) {
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
    routes_.push_back(route);
    return {};
}

expected<void, std::string> FakeHostPort::remove_route(const HostRoute& route) {
    auto it = std::find(routes_.begin(), routes_.end(), route);
    if (it == routes_.end()) return unexpected(to_string(route.destination) + ": no such route on " + name_);
    routes_.erase(it);
    return {};
}

void FakeHostPort::visit_counters(CounterSink& out) const {
    out.counter("rx_packets", rx_packets_);
    out.counter("tx_packets", tx_packets_);
    out.counter("inject_refused", inject_refused_);
}

}  // namespace ipoibd::host
