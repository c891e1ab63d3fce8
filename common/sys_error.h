// An error from the environment: the operation that failed and its errno.
// message() reads "could not open /x/y.pcap: Permission denied".
#pragma once

#include <cstring>
#include <string>

namespace ipoibd {

struct SysError {
    std::string operation;  // "open /var/log/x.pcap", "bind 198.18.0.1:18516"
    int error = 0;          // errno

    std::string message() const { return "could not " + operation + ": " + std::strerror(error); }
};

}  // namespace ipoibd
