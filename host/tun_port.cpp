// The TUN host port; the flow is drawn in tun_port.h.
#include "host/tun_port.h"

#include "host/tun_queue.h"

#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

namespace ipoibd::host {

namespace {

constexpr std::size_t kMaxIpPacket = 65535 + VirtioNetHeader::size;

std::string text(const netlink::NetlinkError& e) { return e.message(); }

}  // namespace

expected<std::unique_ptr<TunPort>, std::string> TunPort::open(const std::string& name, netlink::NetlinkSocket& nl,
                                                            bool multi_queue) {
    auto tun = open_tun({.name = name, .multi_queue = multi_queue, .persist = false, .offload = true});
    if (!tun) return unexpected(tun.error().message());
    std::unique_ptr<TunPort> port(new TunPort(std::move(*tun), nl));
    port->multi_queue_ = multi_queue;
    port->no_kernel_link_local();
    return port;
}

expected<std::unique_ptr<HostQueue>, std::string> TunPort::open_queue() {
    if (!multi_queue_) return unexpected(device_.name + " is not a multi-queue TUN");
    auto q = open_tun({.name = device_.name, .multi_queue = true, .persist = false, .offload = device_.offload});
    if (!q) return unexpected(q.error().message());
    UniqueFd writer(::dup(q->fd.get()));
    if (!writer) return unexpected(std::string("dup: ") + std::strerror(errno));
    auto nl = netlink::NetlinkSocket::open();
    if (!nl) return unexpected("could not open rtnetlink for a queue of " + device_.name + ": " + nl.error().message());
    queue_fds_.push_back(std::move(writer));
    return std::unique_ptr<HostQueue>(std::make_unique<TunQueue>(std::move(*q), std::move(*nl)));
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

std::optional<IpAddress> destination_of(bytes p) {
    if (p.empty()) return std::nullopt;
    const unsigned version = p[0] >> 4;
    if (version == 4 && p.size() >= 20) return IpAddress::from_bytes(IpFamily::ipv4, p.data() + 16);
    if (version == 6 && p.size() >= 40) return IpAddress::from_bytes(IpFamily::ipv6, p.data() + 24);
    return std::nullopt;
}

GatewayOf gateway_of(bytes ip_packet, netlink::NextHopCache& next_hops, std::uint32_t ifindex) {
    // Group and broadcast destinations have no next hop to look up.
    auto dst = destination_of(ip_packet);
    if (!dst || is_multicast(*dst) || (dst->is_v4() && dst->v4_bytes() == kIpv4LimitedBroadcast)) return {};
    auto hop = next_hops.resolve(*dst);
    if (!hop) return {.failed = true};
    if (!hop->via_gateway) return {};
    // A gateway of another link's route is no neighbour on this fabric.
    if (hop->oif != 0 && hop->oif != ifindex) return {.other_interface = true};
    return {.gateway = hop->address};
}

void TunPort::deliver(bytes ip_packet, HostReceiver& receiver) {
    const GatewayOf hop = gateway_of(ip_packet, next_hops_, device_.ifindex);
    if (hop.failed) ++counters_.next_hop_failures;
    if (hop.other_interface) ++counters_.next_hop_other_interface;
    receiver.on_host_packet(ip_packet, hop.gateway);
}

void TunPort::on_read_error(int error) {
    if (error == EBADFD) {  // the device is gone: counted once
        if (!gone_) ++counters_.rx_errors;
        gone_ = true;
    } else if (error != EAGAIN && error != EINTR) {
        ++counters_.rx_errors;
    }
}

std::size_t TunPort::read_batch(HostReceiver& receiver, std::size_t max_reads) {
    std::size_t reads = 0, datagrams = 0;
    for (std::size_t i = 0; i < max_reads && datagrams < max_reads * kBatchDatagramsPerRead; ++i) {
        const ssize_t n = ::read(device_.fd.get(), read_buffer_.data(), read_buffer_.size());
        if (n < 0) {
            on_read_error(errno);
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
        datagrams += *segments;
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

std::size_t flow_queue(bytes p, bool offload, std::size_t queues) {
    if (queues <= 1) return 0;
    if (offload) {
        if (p.size() < VirtioNetHeader::size) return 0;
        p = p.subspan(VirtioNetHeader::size);
    }
    if (p.empty()) return 0;
    std::size_t a = 0, b = 0, l4 = 0;  // address offsets, address length
    std::size_t len = 0;
    std::uint8_t proto = 0;
    if ((p[0] >> 4) == 4 && p.size() >= 20) {
        a = 12, b = 16, len = 4, proto = p[9];
        l4 = static_cast<std::size_t>(p[0] & 0x0F) * 4;
        if ((load_be16(p.data() + 6) & 0x3FFF) != 0) proto = 0;  // a fragment: addresses only
    } else if ((p[0] >> 4) == 6 && p.size() >= 40) {
        a = 8, b = 24, len = 16, proto = p[6], l4 = 40;
    } else {
        return 0;
    }
    // FNV-1a over the smaller endpoint, then the larger: both directions
    // of a flow hash alike.
    auto endpoint = [&](std::size_t addr, std::size_t port) {
        std::uint64_t h = 0;
        for (std::size_t i = 0; i < len; ++i) h = (h << 8 | p[addr + i]) ^ (h >> 56);
        if ((proto == 6 || proto == 17) && p.size() >= l4 + 4) h = h * 65537 + load_be16(p.data() + l4 + port);
        return h;
    };
    std::uint64_t x = endpoint(a, 0), y = endpoint(b, 2);
    if (x > y) std::swap(x, y);
    std::uint64_t h = 1469598103934665603ULL;
    for (std::uint64_t v : {x, y, static_cast<std::uint64_t>(proto)}) {
        h ^= v;
        h *= 1099511628211ULL;
    }
    return static_cast<std::size_t>((h ^ (h >> 32)) % queues);
}

std::size_t write_queue(bytes p, bool offload, std::size_t queues) {
    if (queues <= 1) return 0;
    bytes ip = p;
    if (offload) ip = ip.size() >= VirtioNetHeader::size ? ip.subspan(VirtioNetHeader::size) : bytes{};
    if (ip.size() >= 20 && (ip[0] >> 4) == 4) {
        const std::size_t l4 = static_cast<std::size_t>(ip[0] & 0x0F) * 4;
        const bool first_fragment = (load_be16(ip.data() + 6) & 0x1FFF) == 0;
        if (ip[9] == 1 && first_fragment && l4 >= 20 && ip.size() > l4 && ip[l4] == 8) return 0;  // echo request
    } else if (ip.size() > 40 && (ip[0] >> 4) == 6) {
        if (ip[6] == 58 && ip[40] == 128) return 0;  // echo request (no extension headers before it)
    }
    return flow_queue(p, offload, queues);
}

void TunPort::write_now(bytes data) {
    // With several queues, a flow's packets are written on the queue its
    // datagrams should be read from: the kernel's flow table (a multi-queue
    // TUN with no steering program) sends a flow out on the queue that last
    // wrote it, so a flow whose packets all came in on the first queue
    // would leave only there and never reach a data thread. Packets the
    // host answers as they are written stay on the loop's queue
    // (write_queue()).
    int fd = device_.fd.get();
    if (!queue_fds_.empty() && queues_on_)
        if (const std::size_t q = write_queue(data, device_.offload, queue_fds_.size() + 1); q > 0)
            fd = queue_fds_[q - 1].get();
    if (::write(fd, data.data(), data.size()) < 0) {
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

expected<std::vector<IpPrefix>, std::string> TunPort::list_addresses() {
    auto listed = nl_.list_addresses(device_.ifindex);
    if (!listed) return unexpected(text(listed.error()));
    std::vector<IpPrefix> out;
    for (const netlink::AddressInfo& a : *listed) out.push_back(a.prefix);
    return out;
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
    out.counter("next_hop_other_interface", c.next_hop_other_interface);
    out.counter("rx_segmented", c.rx_segmented);
    visit_reasons<OffloadError>(out, "offload_", c.offload_errors, [](OffloadError e) { return to_string(e); });
}

void TunPort::visit_counters(CounterSink& out) const {
    visit(counters_, out);
    const netlink::NextHopCounters& nh = next_hops_.counters();
    out.counter("next_hop_hits", nh.hits);
    out.counter("next_hop_misses", nh.misses);
    out.counter("next_hop_no_route_hits", nh.no_route_hits);
    out.counter("next_hop_invalidations", nh.invalidations);
    out.counter("next_hop_evictions", nh.evictions);
    if (coalescer_) {
        out.counter("tx_coalesced_in", coalescer_->packets_in());
        out.counter("tx_coalesced_out", coalescer_->packets_out());
    }
}

}  // namespace ipoibd::host
