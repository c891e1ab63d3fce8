#include "common/inet_checksum.h"

#include <bit>
#include <cstring>

namespace ipoibd {

std::uint32_t checksum_add(std::uint32_t sum, bytes data) {
    // RFC 1071's byte-order independence: sum the data as little-endian
    // 32-bit words (two 16-bit words each, carries kept in 64 bits), fold
    // to 16 bits, swap the two bytes, then add to `sum` (big-endian words).
    static_assert(std::endian::native == std::endian::little, "the bulk loop reads little-endian words");
    std::uint64_t acc = 0;
    const std::uint8_t* p = data.data();
    std::size_t n = data.size();
    for (; n >= 16; n -= 16, p += 16) {
        std::uint64_t a, b;
        std::memcpy(&a, p, 8);
        std::memcpy(&b, p + 8, 8);
        acc += (a & 0xFFFFFFFF) + (a >> 32) + (b & 0xFFFFFFFF) + (b >> 32);
    }
    for (; n >= 2; n -= 2, p += 2) acc += static_cast<std::uint64_t>(p[0]) | (static_cast<std::uint64_t>(p[1]) << 8);
    if (n) acc += p[0];  // a last odd byte is the high byte of a big-endian word
    while (acc >> 16) acc = (acc & 0xFFFF) + (acc >> 16);
    std::uint64_t s = sum;
    s += ((acc & 0xFF) << 8) | (acc >> 8);
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    return static_cast<std::uint32_t>(s);
}

std::uint16_t checksum_fold(std::uint32_t sum) {
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum);
}

}  // namespace ipoibd
