// The error of one rtnetlink request: which request, on which link, the
// errno, and the kernel's own words when it gave them (extended ACK).
//   "RTM_NEWADDR 198.18.0.1/24 on ib0: File exists (kernel: ipv4: Address
//    already assigned)"
// A reply that could not be parsed is reported the same way, with errno
// EBADMSG and the parser's reason in `malformed`.
#pragma once

#include <cstring>
#include <string>

namespace ipoibd::netlink {

struct NetlinkError {
    std::string operation;       // "RTM_NEWADDR 198.18.0.1/24 on ib0"
    int error = 0;               // errno: the kernel's, a syscall's, ETIMEDOUT; EBADMSG for a malformed reply
    std::string kernel_message;  // the kernel's extended-ACK text (NLMSGERR_ATTR_MSG), may be empty
    std::string malformed;       // why the reply was refused, when it was

    // "<operation>: <strerror> (kernel: <kernel_message>)", or
    // "<operation>: malformed reply: <malformed>".
    std::string message() const {
        if (!malformed.empty()) return operation + ": malformed reply: " + malformed;
        std::string text = operation + ": " + std::strerror(error);
        if (!kernel_message.empty()) text += " (kernel: " + kernel_message + ")";
        return text;
    }
};

}  // namespace ipoibd::netlink
