// Unpredictable numbers for what a forger must not guess (identifiers a
// peer names us by): the kernel's CSPRNG through getrandom(2), which blocks
// only until the pool is seeded at boot; where the call is missing
// (ENOSYS), std::random_device, which reads the same pool through
// /dev/urandom. Not for anything that has to be repeatable (seeded engines
// keep their own generators).
#pragma once

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <random>

namespace ipoibd {

inline std::uint32_t random_u32() {
    std::uint32_t n = 0;
    for (;;) {
        if (::getrandom(&n, sizeof n, 0) == static_cast<ssize_t>(sizeof n)) return n;
        if (errno != EINTR) return static_cast<std::uint32_t>(std::random_device{}());
    }
}
inline std::uint64_t random_u64() { return std::uint64_t{random_u32()} << 32 | random_u32(); }

}  // namespace ipoibd
