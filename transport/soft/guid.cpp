#include "transport/soft/guid.h"

#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <string>

namespace ipoibd::transport {

std::uint64_t derive_port_guid(std::string_view machine_id, std::string_view instance) {
    const std::string key = std::string(machine_id) + '\0' + std::string(instance);
    const auto* data = reinterpret_cast<const Bytef*>(key.data());
    // Two independent CRC-32s make 64 bits; collisions matter only within
    // one subnet, where the SM reports duplicate GUIDs.
    const std::uint64_t hi = crc32_z(0, data, key.size());
    const std::uint64_t lo = crc32_z(0x5A5A5A5AUL, data, key.size());
    std::uint64_t guid = (hi << 32) | lo;
    guid = (guid & 0x00FFFFFFFFFFFFFFULL) | 0x0200000000000000ULL;
    return guid;
}

std::uint64_t stable_port_guid(std::string_view instance) {
    std::string id;
    std::ifstream f("/etc/machine-id");
    if (!(f >> id) || id.empty()) {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        id = host;
    }
    return derive_port_guid(id, instance);
}

}  // namespace ipoibd::transport
