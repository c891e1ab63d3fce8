// The Internet checksum (RFC 1071): the one's-complement sum of 16-bit
// big-endian words, folded. IP headers, ICMP, TCP and UDP (with their
// pseudo-headers) all use it.
#pragma once

#include <cstdint>

#include "common/byte_io.h"

namespace ipoibd {

// `sum` plus the words of `data` (an odd last byte padded with zero),
// unfolded: sums of several pieces add up.
std::uint32_t checksum_add(std::uint32_t sum, bytes data);
// Folded to 16 bits and complemented: the value a checksum field holds.
std::uint16_t checksum_fold(std::uint32_t sum);
// Both, over one piece.
inline std::uint16_t internet_checksum(bytes data) { return checksum_fold(checksum_add(0, data)); }

}  // namespace ipoibd
