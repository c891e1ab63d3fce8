// Big-endian (network order) field access on byte spans.
//
// InfiniBand headers are big-endian on the wire. Receive buffers are never
// cast to structs of host integers: every field is read with memcpy at its
// byte offset, so alignment and aliasing never matter. The 24-bit helpers
// carry QPNs, PSNs, SrcQP and MSN.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace ipoibd {

using bytes = std::span<const std::uint8_t>;
using mutable_bytes = std::span<std::uint8_t>;

// A byte vector set to, or extended by, `b`: one memmove, nothing zeroed
// first (resize() then memcpy wrote every byte twice: connected mode's 64
// KiB messages spent as long zeroing as copying). Raw pointers, so that
// unoptimized builds (the sanitizers' Debug) copy with memmove too instead
// of byte by byte through span iterators. `b` must not lie in `v`.
inline void assign_bytes(std::vector<std::uint8_t>& v, bytes b) {
    v.assign(b.data(), b.data() + b.size());
}
inline void append_bytes(std::vector<std::uint8_t>& v, bytes b) {
    v.insert(v.end(), b.data(), b.data() + b.size());
}

namespace detail {
template <class T>
constexpr T byteswap_if_little(T v) {
    if constexpr (std::endian::native == std::endian::little) {
        if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
        if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
        if constexpr (sizeof(T) == 8) return static_cast<T>(__builtin_bswap64(v));
    }
    return v;
}
}  // namespace detail

inline std::uint8_t load_u8(const std::uint8_t* p) { return *p; }

inline std::uint16_t load_be16(const std::uint8_t* p) {
    std::uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return detail::byteswap_if_little(v);
}

inline std::uint32_t load_be24(const std::uint8_t* p) {
    return (std::uint32_t{p[0]} << 16) | (std::uint32_t{p[1]} << 8) | p[2];
}

inline std::uint32_t load_be32(const std::uint8_t* p) {
    std::uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return detail::byteswap_if_little(v);
}

inline std::uint64_t load_be64(const std::uint8_t* p) {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return detail::byteswap_if_little(v);
}

inline void store_u8(std::uint8_t* p, std::uint8_t v) { *p = v; }

inline void store_be16(std::uint8_t* p, std::uint16_t v) {
    v = detail::byteswap_if_little(v);
    std::memcpy(p, &v, sizeof v);
}

inline void store_be24(std::uint8_t* p, std::uint32_t v) {
    p[0] = static_cast<std::uint8_t>(v >> 16);
    p[1] = static_cast<std::uint8_t>(v >> 8);
    p[2] = static_cast<std::uint8_t>(v);
}

inline void store_be32(std::uint8_t* p, std::uint32_t v) {
    v = detail::byteswap_if_little(v);
    std::memcpy(p, &v, sizeof v);
}

inline void store_be64(std::uint8_t* p, std::uint64_t v) {
    v = detail::byteswap_if_little(v);
    std::memcpy(p, &v, sizeof v);
}

inline void store_le32(std::uint8_t* p, std::uint32_t v) {
    p[0] = static_cast<std::uint8_t>(v);
    p[1] = static_cast<std::uint8_t>(v >> 8);
    p[2] = static_cast<std::uint8_t>(v >> 16);
    p[3] = static_cast<std::uint8_t>(v >> 24);
}

inline std::uint32_t load_le32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
           (std::uint32_t{p[3]} << 24);
}

inline void store_le16(std::uint8_t* p, std::uint16_t v) {
    p[0] = static_cast<std::uint8_t>(v);
    p[1] = static_cast<std::uint8_t>(v >> 8);
}

inline std::uint16_t load_le16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

inline void store_le64(std::uint8_t* p, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

inline std::uint64_t load_le64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

}  // namespace ipoibd
