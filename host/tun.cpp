#include "host/tun.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>

namespace ipoibd::host {
namespace {

constexpr const char* kTunControlPath = "/dev/net/tun";

std::string describe(const std::string& name) { return name.empty() ? std::string("tun%d") : name; }

}  // namespace

expected<TunDevice, SysError> open_tun(const TunOptions& options) {
    const std::string kind = options.tap ? "TAP " : "TUN ";
    const std::string what = kind + describe(options.name);
    if (options.name.size() >= IFNAMSIZ) return unexpected(SysError{"create " + what, ENAMETOOLONG});

    UniqueFd fd(::open(kTunControlPath, O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!fd) return unexpected(SysError{std::string("open ") + kTunControlPath, errno});

    ifreq request{};
    request.ifr_flags = static_cast<short>((options.tap ? IFF_TAP : IFF_TUN) | IFF_NO_PI | (options.multi_queue ? IFF_MULTI_QUEUE : 0) |
                                           (options.offload ? IFF_VNET_HDR : 0));
    std::memcpy(request.ifr_name, options.name.data(), options.name.size());
    if (::ioctl(fd.get(), TUNSETIFF, &request) < 0) return unexpected(SysError{"create " + what, errno});

    // The kernel wrote back the final name (a pattern is now "ib0").
    TunDevice device;
    device.name.assign(request.ifr_name, strnlen(request.ifr_name, IFNAMSIZ));

    // Always set, so a persistent device we attached to follows the option
    // too (see tun.h). Multi-queue devices take it per fd the same way.
    if (::ioctl(fd.get(), TUNSETPERSIST, options.persist ? 1UL : 0UL) < 0)
        return unexpected(SysError{"set persist on " + kind + device.name, errno});

    if (options.offload) {
        // tun_offload.h: a 10-byte virtio_net_hdr on every read and write;
        // checksum offload and TSO for IPv4 and IPv6 (the daemon segments).
        int hdr = 10;
        if (::ioctl(fd.get(), TUNSETVNETHDRSZ, &hdr) < 0)
            return unexpected(SysError{"set the vnet header size of " + kind + device.name, errno});
        // UDP segmentation offload too where the kernel has it (6.2 on;
        // EINVAL before): the coalescer then merges UDP runs as well.
        constexpr unsigned long kTso = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
        constexpr unsigned long kUso = 0x20 | 0x40;  // TUN_F_USO4 | TUN_F_USO6 (<linux/if_tun.h> of 6.2)
        if (::ioctl(fd.get(), TUNSETOFFLOAD, kTso | kUso) == 0) {
            device.udp_segmentation = true;
        } else if (errno != EINVAL || ::ioctl(fd.get(), TUNSETOFFLOAD, kTso) < 0) {
            return unexpected(SysError{"set offloads on " + kind + device.name, errno});
        }
        device.offload = true;
    }

    if (options.tap && options.mac) {
        ifreq hw{};
        std::memcpy(hw.ifr_name, device.name.data(), device.name.size());
        hw.ifr_hwaddr.sa_family = ARPHRD_ETHER;
        std::memcpy(hw.ifr_hwaddr.sa_data, options.mac->data(), options.mac->size());
        if (::ioctl(fd.get(), SIOCSIFHWADDR, &hw) < 0)
            return unexpected(SysError{"set the MAC address of TAP " + device.name, errno});
    }

    device.ifindex = ::if_nametoindex(device.name.c_str());
    if (device.ifindex == 0) return unexpected(SysError{"look up the ifindex of " + kind + device.name, errno});
    device.fd = std::move(fd);
    return device;
}

}  // namespace ipoibd::host
