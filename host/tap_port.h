// The TAP host port: HostPort (host_port.h) on a Linux TAP device, for TAP
// mode (`[interface] mode = tap`): the kernel sees an Ethernet device, runs
// ARP and ND on it and keeps `ip neigh`; ipoib/ethernet_host.h translates
// its frames to and from IPoIB.
//
// The same device, configuration (rtnetlink) and offloads as the TUN
// (tun_port.h), with an Ethernet header between the virtio header and the
// IP packet:
// 1. open(): IFF_TAP with the given MAC (the synthetic MAC of our own port:
//    02 + the low 40 bits of its GUID), offloads, carrier off.
// 2. read_batch(): one read() per frame; a TSO/USO super-frame is cut into
//    IP datagrams of the link MTU (tun_offload.h, with the virtio header's
//    offsets moved past the Ethernet header), each handed on with the
//    frame's header (HostReceiver::on_host_frame); other frames as read.
//    No next-hop lookups: the kernel chose the neighbour by MAC.
// 3. write_frame(): IP datagrams go through the TUN's coalescer, one run per
//    Ethernet header (a new header writes the open run first), and leave as
//    [virtio header][Ethernet header][IP] in one writev(); ARP is written at
//    once (after the open run, so order is kept).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "host/tun_port.h"

namespace ipoibd::host {

class TapPort final : public TunPort {
public:
    static expected<std::unique_ptr<TapPort>, std::string> open(const std::string& name, const MacAddress& mac,
                                                                netlink::NetlinkSocket& nl);

    std::size_t read_batch(HostReceiver& receiver, std::size_t max_reads) override;
    void write(bytes ip_packet) override;
    void flush() override;
    std::optional<MacAddress> mac() const override { return mac_; }
    void write_frame(const EthernetHeader& header, bytes payload) override;

private:
    TapPort(TunDevice device, const MacAddress& mac, netlink::NetlinkSocket& nl);
    // [virtio header][Ethernet header][payload], the virtio header's
    // checksum offsets moved past the Ethernet header.
    void write_with_header(bytes vnet_header_and_payload);
    void write_plain(const EthernetHeader& header, bytes payload);

    MacAddress mac_;
    EthernetHeader run_header_;       // of the IP packets in the coalescer
    std::vector<std::uint8_t> frame_;  // a segment with its Ethernet header, for on_host_frame()
};

}  // namespace ipoibd::host
