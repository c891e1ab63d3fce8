// Creating the TUN device the daemon bridges to the fabric.
//
// Flow:
//   1. open /dev/net/tun non-blocking (the epoll loop reads it in batches;
//      a blocking read would wedge the control plane, STYLE.md guideline 6);
//   2. TUNSETIFF with IFF_TUN | IFF_NO_PI (IFF_TAP for TAP mode: Ethernet
//      frames): layer-3 packets with no 4-octet
//      packet-information prefix, so a read returns exactly one IP packet;
//      IFF_MULTI_QUEUE only when asked (one fd per queue, for data-plane
//      threads); the name is either exact ("ib0") or a pattern the kernel
//      completes ("ib%d" -> "ib0", "ib1", ...);
//   3. TUNSETPERSIST as asked, off by default: the device belongs to this
//      process and vanishes when the fd closes, so a crashed daemon leaves
//      no stale interface behind for systemd's restart to trip over;
//   4. read back the name the kernel chose and look up its ifindex, which
//      every later rtnetlink request (MTU, addresses, routes, up) names.
//
// Configuration (MTU, addresses, routes, up) is rtnetlink's job:
// netlink_socket.h. This file only owns the character device.
//
// Attaching to an existing persistent device (created beforehand with
// `ip tuntap add ib0 mode tun user ipoibd`, so the daemon may run without
// CAP_NET_ADMIN) works with the same call; with persist = false that
// device then goes away when the daemon exits, so set persist = true there.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "common/expected.h"
#include "common/sys_error.h"
#include "common/unique_fd.h"

namespace ipoibd::host {

struct TunOptions {
    // Exact name ("ib0") or a pattern with one %d ("ib%d"). Empty: the
    // kernel's default pattern, "tun%d". At most 15 characters (IFNAMSIZ-1).
    std::string name;
    bool multi_queue = false;  // IFF_MULTI_QUEUE: this fd is one of several queues
    bool persist = false;      // TUNSETPERSIST: keep the device after the fd closes
    bool offload = false;      // IFF_VNET_HDR + checksum/TSO offloads (tun_offload.h)
    // IFF_TAP: Ethernet frames instead of IP packets (TAP mode,
    // tap_port.h), with this MAC (SIOCSIFHWADDR); unset: the kernel's
    // random one.
    bool tap = false;
    std::optional<std::array<std::uint8_t, 6>> mac;
};

struct TunDevice {
    UniqueFd fd;             // O_NONBLOCK, O_CLOEXEC; one IP packet per read/write
    std::string name;        // the name the kernel gave ("ib0")
    std::uint32_t ifindex = 0;
    bool offload = false;    // reads and writes carry a virtio_net_hdr
    bool udp_segmentation = false;  // and UDP GSO (USO, kernel >= 6.2) both ways
};

// Creates (or attaches to) the TUN device. Errors name the step and the
// device: "could not create TUN ib0: Operation not permitted".
expected<TunDevice, SysError> open_tun(const TunOptions& options);

}  // namespace ipoibd::host
