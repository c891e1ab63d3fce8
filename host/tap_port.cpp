// The TAP host port; the flow is drawn in tap_port.h.
#include "host/tap_port.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ipoibd::host {

namespace {
constexpr std::size_t kMaxFrame = VirtioNetHeader::size + EthernetHeader::size + 65535;
}  // namespace

expected<std::unique_ptr<TapPort>, std::string> TapPort::open(const std::string& name, const MacAddress& mac,
                                                              netlink::NetlinkSocket& nl) {
    auto tap = open_tun({.name = name, .multi_queue = false, .persist = false, .offload = true, .tap = true, .mac = mac});
    if (!tap) return unexpected(tap.error().message());
    std::unique_ptr<TapPort> port(new TapPort(std::move(*tap), mac, nl));
    port->no_kernel_link_local();
    return port;
}

TapPort::TapPort(TunDevice device, const MacAddress& mac, netlink::NetlinkSocket& nl)
    : TunPort(std::move(device), nl), mac_(mac) {
    read_buffer_.resize(kMaxFrame);
    frame_.resize(kMaxFrame);
    if (device_.offload)
        coalescer_ = std::make_unique<TunCoalescer>([this](bytes d) { write_with_header(d); },
                                                    device_.udp_segmentation);
    else
        coalescer_.reset();
}

std::size_t TapPort::read_batch(HostReceiver& receiver, std::size_t max_reads) {
    constexpr std::size_t kVnet = VirtioNetHeader::size;
    constexpr std::size_t kEth = EthernetHeader::size;
    std::size_t reads = 0, datagrams = 0;
    for (std::size_t i = 0; i < max_reads && datagrams < max_reads * kBatchDatagramsPerRead; ++i) {
        const ssize_t n = ::read(device_.fd.get(), read_buffer_.data(), read_buffer_.size());
        if (n < 0) {
            on_read_error(errno);
            break;
        }
        ++counters_.rx_packets;
        ++reads;
        const std::size_t len = static_cast<std::size_t>(n);
        if (!device_.offload) {
            receiver.on_host_frame(bytes(read_buffer_.data(), len));
            continue;
        }
        if (len < kVnet + kEth) {
            ++counters_.offload_errors[static_cast<std::size_t>(OffloadError::truncated)];
            continue;
        }
        VirtioNetHeader h = VirtioNetHeader::read_from(read_buffer_.data());
        if (h.gso_type == VirtioNetHeader::kGsoNone && !(h.flags & VirtioNetHeader::kFlagNeedsCsum)) {
            receiver.on_host_frame(bytes(read_buffer_.data() + kVnet, len - kVnet));  // as the kernel wrote it
            receiver.after_host_read(1, i);
            continue;
        }
        // The offsets count from the frame's start: make it a TUN's read
        // ([virtio header][IP]) by moving the header over the Ethernet one.
        if ((h.flags & VirtioNetHeader::kFlagNeedsCsum) && h.csum_start < kEth) {
            ++counters_.offload_errors[static_cast<std::size_t>(OffloadError::bad_csum_offsets)];
            continue;
        }
        std::memcpy(frame_.data(), read_buffer_.data() + kVnet, kEth);  // the Ethernet header, for every segment
        if (h.flags & VirtioNetHeader::kFlagNeedsCsum) h.csum_start = static_cast<std::uint16_t>(h.csum_start - kEth);
        h.hdr_len = h.hdr_len > kEth ? static_cast<std::uint16_t>(h.hdr_len - kEth) : 0;
        h.write_to(read_buffer_.data() + kEth);
        const mutable_bytes read(read_buffer_.data() + kEth, len - kEth);
        auto segments = segment_tun_packet(read, segment_buffer_, [&](bytes ip) {
            std::memcpy(frame_.data() + kEth, ip.data(), ip.size());
            receiver.on_host_frame(bytes(frame_.data(), kEth + ip.size()));
        });
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

void TapPort::write(bytes ip_packet) {
    // Without a header from the translation: from and to ourselves.
    const bool v4 = !ip_packet.empty() && (ip_packet[0] >> 4) == 4;
    write_frame(EthernetHeader{.destination = mac_, .source = mac_, .type = v4 ? kEtherTypeIpv4 : kEtherTypeIpv6},
                ip_packet);
}

void TapPort::write_frame(const EthernetHeader& header, bytes payload) {
    const bool ip = header.type == kEtherTypeIpv4 || header.type == kEtherTypeIpv6;
    if (coalescer_ && ip) {
        if (!(header == run_header_)) {
            coalescer_->flush();  // the open run leaves with its own header
            run_header_ = header;
        }
        coalescer_->add(payload);
        return;
    }
    if (coalescer_) coalescer_->flush();  // keep the order
    write_plain(header, payload);
}

void TapPort::flush() {
    if (coalescer_) coalescer_->flush();
}

void TapPort::write_with_header(bytes data) {
    constexpr std::size_t kVnet = VirtioNetHeader::size;
    VirtioNetHeader h = VirtioNetHeader::read_from(data.data());
    if (h.flags & VirtioNetHeader::kFlagNeedsCsum) h.csum_start = static_cast<std::uint16_t>(h.csum_start + EthernetHeader::size);
    if (h.hdr_len != 0) h.hdr_len = static_cast<std::uint16_t>(h.hdr_len + EthernetHeader::size);
    std::uint8_t vnet[kVnet];
    std::uint8_t eth[EthernetHeader::size];
    h.write_to(vnet);
    run_header_.write_to(eth);
    iovec iov[3] = {{vnet, kVnet},
                    {eth, EthernetHeader::size},
                    {const_cast<std::uint8_t*>(data.data() + kVnet), data.size() - kVnet}};
    if (::writev(device_.fd.get(), iov, 3) < 0) {
        ++counters_.tx_errors;
        if (write_error_) write_error_(errno);
        return;
    }
    ++counters_.tx_packets;
}

void TapPort::write_plain(const EthernetHeader& header, bytes payload) {
    std::uint8_t vnet[VirtioNetHeader::size] = {};  // a plain frame
    std::uint8_t eth[EthernetHeader::size];
    header.write_to(eth);
    iovec iov[3] = {{vnet, device_.offload ? VirtioNetHeader::size : 0},
                    {eth, EthernetHeader::size},
                    {const_cast<std::uint8_t*>(payload.data()), payload.size()}};
    if (::writev(device_.fd.get(), iov, 3) < 0) {
        ++counters_.tx_errors;
        if (write_error_) write_error_(errno);
        return;
    }
    ++counters_.tx_packets;
}

}  // namespace ipoibd::host
