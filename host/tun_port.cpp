// The TUN host port; the flow is drawn in tun_port.h.
#include "host/tun_port.h"

#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace ipoibd::host {

namespace {

constexpr std::size_t kMaxIpPacket = 65535 + VirtioNetHeader::size;

// The destination of an IPv4 or IPv6 packet, if its fixed header is there;
// the engine validates the rest (and counts what is wrong).
std::optional<IpAddress> destination_of(bytes p) {
    if (p.empty()) return std::nullopt;
    const unsigned version = p[0] >> 4;
    if (version == 4 && p.size() >= 20) return IpAddress::from_bytes(IpFamily::ipv4, p.data() + 16);
    if (version == 6 && p.size() >= 40) return IpAddress::from_bytes(IpFamily::ipv6, p.data() + 24);
    return std::nullopt;
}

std::string text(const netlink::NetlinkError& e) { return e.message(); }

}  // namespace

expected<std::unique_ptr<TunPort>, std::string> TunPort::open(const std::string& name, netlink::NetlinkSocket& nl) {
    auto tun = open_tun({.name = name, .multi_queue = false, .persist = false, .offload = true});
    if (!tun) return unexpected(tun.error().message());
    std::unique_ptr<TunPort> port(new TunPort(std::move(*tun), nl));
    port->no_kernel_link_local();
    return port;
}

void TunPort::no_kernel_link_local() {
    // The link-local address is RFC 4391's (port GUID as EUI-64), which the
    // owner adds; not one the kernel would invent (for a TUN from nothing,
    // for a TAP from its synthetic MAC).
    std::ofstream gen("/proc/sys/net/ipv6/conf/" + name() + "/addr_gen_mode");
    if (gen) gen << "1\n";  // IN6_ADDR_GEN_MODE_NONE
}

TunPort::TunPort(TunDevice device, netlink::NetlinkSocket& nl)
    : device_(std::move(device)),
      nl_(nl),
      next_hops_([this](const IpAddress& dst) { return nl_.lookup_next_hop(dst); }),
      read_buffer_(kMaxIpPacket) {
    if (device_.offload)
        coalescer_ = std::make_unique<TunCoalescer>([this](bytes d) { write_now(d); }, device_.udp_segmentation);
}

TunPort::~TunPort() = default;

void TunPort::deliver(bytes ip_packet, HostReceiver& receiver) {
    std::optional<IpAddress> next_hop;
    // Group and broadcast destinations have no next hop to look up.
    if (auto dst = destination_of(ip_packet);
        dst && !is_multicast(*dst) && !(dst->is_v4() && dst->v4_bytes() == kIpv4LimitedBroadcast)) {
        auto hop = next_hops_.resolve(*dst);
        if (hop && hop->via_gateway)
            next_hop = hop->address;
        else if (!hop)
            ++counters_.next_hop_failures;
    }
    receiver.on_host_packet(ip_packet, next_hop);
}

std::size_t TunPort::read_batch(HostReceiver& receiver, std::size_t max_reads) {
    std::size_t reads = 0;
    for (std::size_t i = 0; i < max_reads; ++i) {
        const ssize_t n = ::read(device_.fd.get(), read_buffer_.data(), read_buffer_.size());
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) ++counters_.rx_errors;
            break;
        }
        ++counters_.rx_packets;
        ++reads;
        const mutable_bytes read(read_buffer_.data(), static_cast<std::size_t>(n));
        if (!device_.offload) {
            deliver(read, receiver);  // one datagram: the batch leaves at its end
            continue;
        }
        // A TSO super-packet becomes datagrams of the link MTU here.
        auto segments = segment_tun_packet(read, segment_buffer_, [&](bytes d) { deliver(d, receiver); });
        if (!segments) {
            ++counters_.offload_errors[static_cast<std::size_t>(segments.error())];
            continue;
        }
        if (*segments > 1) counters_.rx_segmented += *segments;
        receiver.after_host_read(*segments, i);
    }
    return reads;
}

void TunPort::write(bytes ip_packet) {
    if (coalescer_) {
        coalescer_->add(ip_packet);  // written by flush(), at the end of this loop turn
        return;
    }
    write_now(ip_packet);
}

void TunPort::write_now(bytes data) {
    if (::write(device_.fd.get(), data.data(), data.size()) < 0) {
        ++counters_.tx_errors;
        if (write_error_) write_error_(errno);
        return;
    }
    ++counters_.tx_packets;
}

void TunPort::flush() {
    if (coalescer_) coalescer_->flush();
}

expected<void, std::string> TunPort::set_carrier(bool on) {
    int carrier = on ? 1 : 0;
    if (::ioctl(device_.fd.get(), TUNSETCARRIER, &carrier) != 0)
        return unexpected(std::string("could not set the carrier of ") + device_.name + ": " + std::strerror(errno));
    return {};
}

expected<void, std::string> TunPort::set_mtu(std::uint32_t mtu) {
    if (auto r = nl_.set_mtu(device_.ifindex, mtu); !r) return unexpected(text(r.error()));
    return {};
}

expected<void, std::string> TunPort::set_up(bool up) {
    if (auto r = nl_.set_link_up(device_.ifindex, up); !r) return unexpected(text(r.error()));
    return {};
}

expected<void, std::string> TunPort::add_address(const IpPrefix& address) {
    if (auto r = nl_.add_address(device_.ifindex, address, {.nodad = true}); !r) return unexpected(text(r.error()));
    return {};
}

expected<void, std::string> TunPort::remove_address(const IpPrefix& address) {
    if (auto r = nl_.remove_address(device_.ifindex, address); !r) return unexpected(text(r.error()));
    return {};
}

namespace {
netlink::RouteSpec route_spec(const HostRoute& route, std::uint32_t ifindex) {
    netlink::RouteSpec spec;
    spec.destination = route.destination;
    spec.gateway = route.gateway;
    spec.oif = ifindex;
    return spec;
}
}  // namespace

expected<void, std::string> TunPort::add_route(const HostRoute& route) {
    if (auto r = nl_.add_route(route_spec(route, device_.ifindex)); !r) return unexpected(text(r.error()));
    return {};
}

expected<void, std::string> TunPort::remove_route(const HostRoute& route) {
    if (auto r = nl_.remove_route(route_spec(route, device_.ifindex)); !r) return unexpected(text(r.error()));
    return {};
}

void visit(const TunCounters& c, CounterSink& out) {
    out.counter("rx_packets", c.rx_packets);
    out.counter("rx_errors", c.rx_errors);
    out.counter("tx_packets", c.tx_packets);
    out.counter("tx_errors", c.tx_errors);
    out.counter("next_hop_failures", c.next_hop_failures);
    out.counter("rx_segmented", c.rx_segmented);
    visit_reasons<OffloadError>(out, "offload_", c.offload_errors, [](OffloadError e) { return to_string(e); });
}

void TunPort::visit_counters(CounterSink& out) const {
    visit(counters_, out);
    const netlink::NextHopCounters& nh = next_hops_.counters();
    out.counter("next_hop_hits", nh.hits);
    out.counter("next_hop_misses", nh.misses);
    out.counter("next_hop_invalidations", nh.invalidations);
    out.counter("next_hop_evictions", nh.evictions);
    if (coalescer_) {
        out.counter("tx_coalesced_in", coalescer_->packets_in());
        out.counter("tx_coalesced_out", coalescer_->packets_out());
    }
}

}  // namespace ipoibd::host
