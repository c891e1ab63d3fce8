// The verbs backend: transport::Port and UdQp on a real HCA port through
// libibverbs. Built only when libibverbs is found (transport/verbs/
// CMakeLists.txt); targets that link ipoibd_verbs get IPOIBD_HAVE_VERBS=1.
// This header needs no verbs headers, so users of the backend do not either.
//
// What differs from the soft and in-memory backends, and why, is in
// transport/verbs/README.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/port.h"

namespace ipoibd::transport {

// The RDMA devices libibverbs sees ("mlx5_0", ...), in its order. An empty
// list means no device is present; an error (not_supported, ENOSYS) means
// the kernel has no RDMA support at all, as in most containers.
expected<std::vector<std::string>, Error> list_verbs_devices();

// Opens port `port_num` (1-based) of the HCA named `device_name`, or of the
// first device when the name is empty, and returns it as a transport::Port.
//
// Errors, each naming the device and port:
//   invalid_argument  port 0, no device of that name (the detail lists the
//                     devices present), or a port number the HCA lacks
//   not_supported     no RDMA support in the kernel, no device at all, or a
//                     port whose link layer is Ethernet (RoCE has no LIDs, SM
//                     or SA, so IPoIB cannot run on it)
//   system_error      a verbs call failed (operation and errno in the error)
//
// The port's fd() is an epoll fd holding the completion channel, the async
// event fd and a wake-up eventfd; it is readable whenever process() has work.
// A Port and its QPs may be destroyed in any order: each QP keeps the device
// open until it is gone.
expected<std::unique_ptr<Port>, Error> open_verbs_port(const std::string& device_name, std::uint8_t port_num);

}  // namespace ipoibd::transport
