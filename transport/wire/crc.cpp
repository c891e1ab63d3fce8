#include "transport/wire/crc.h"

#include <isa-l/crc.h>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define IPOIBD_VCRC_CLMUL 1
#endif

namespace ipoibd::ib {
namespace {

constexpr std::uint16_t kVcrcPolyReflected = 0xD008;  // 0x100B bit-reversed

// Slicing-by-8: kVcrc[k][n] is the register after byte n followed by k zero
// bytes, so eight bytes cost eight lookups and no loop-carried shifts per
// byte (the VCRC is computed on every hop: sender, switch, receiver).
using VcrcTables = std::array<std::array<std::uint16_t, 256>, 8>;
constexpr VcrcTables kVcrc = [] {
    VcrcTables t{};
    for (unsigned n = 0; n < 256; ++n) {
        std::uint16_t c = static_cast<std::uint16_t>(n);
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? static_cast<std::uint16_t>(kVcrcPolyReflected ^ (c >> 1)) : static_cast<std::uint16_t>(c >> 1);
        t[0][n] = c;
    }
    for (std::size_t k = 1; k < t.size(); ++k)
        for (unsigned n = 0; n < 256; ++n)
            t[k][n] = static_cast<std::uint16_t>((t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFF]);
    return t;
}();

// The raw reflected register update over n bytes (no init, no final
// complement): the portable path, and the last bytes of the folding one.
std::uint16_t vcrc_table(std::uint16_t c, const std::uint8_t* p, std::size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        const std::uint16_t x = static_cast<std::uint16_t>(c ^ (p[0] | (p[1] << 8)));
        c = static_cast<std::uint16_t>(kVcrc[7][x & 0xFF] ^ kVcrc[6][x >> 8] ^ kVcrc[5][p[2]] ^ kVcrc[4][p[3]] ^
                                       kVcrc[3][p[4]] ^ kVcrc[2][p[5]] ^ kVcrc[1][p[6]] ^ kVcrc[0][p[7]]);
    }
    for (; n > 0; --n, ++p) c = static_cast<std::uint16_t>(kVcrc[0][(c ^ *p) & 0xFF] ^ (c >> 8));
    return c;
}

#ifdef IPOIBD_VCRC_CLMUL
// Folding with carry-less multiplication (the method of Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ"), for the VCRC's
// polynomial, which no library at hand offers.
//
// A 16-byte block loaded little-endian is the 128-bit vector v of a block
// polynomial B, bit i of v being the coefficient of x^(127-i) (a reflected
// CRC takes each byte's low bit first). v's low half is then the reflected
// high half of B (B_H, degrees 64..127) and its high half the reflected low
// half (B_L). Shifting a block D bits further down the message multiplies it
// by x^D; modulo P that is B_H*x^(64+D) + B_L*x^D, congruent to
// B_H*(x^(64+D-1) mod P)*x + B_L*(x^(D-1) mod P)*x. The carry-less product of
// two reflected 64-bit operands is the reflected product times x, so two
// PCLMULQDQs by the reflected constants give a 128-bit vector congruent to
// the shifted block, which is XORed into the block D bits later. Folding
// leaves one 16-byte block with the same residue as everything before it;
// the table finishes it and the tail. The initial value 0xFFFF is XORed
// into the first two bytes (the same thing for a reflected CRC).

// x^n mod P (P = x^16 + 0x100B), as a polynomial of degree < 16.
constexpr std::uint32_t xpow_mod_p(unsigned n) {
    std::uint32_t r = 1;
    for (unsigned i = 0; i < n; ++i) {
        r <<= 1;
        if (r & 0x10000) r ^= 0x1100B;
    }
    return r;
}
// A polynomial of degree < 64 as the reflected 64-bit operand: x^d at bit 63-d.
constexpr std::uint64_t reflect64(std::uint32_t poly) {
    std::uint64_t r = 0;
    for (unsigned d = 0; d < 16; ++d)
        if (poly & (1u << d)) r |= std::uint64_t{1} << (63 - d);
    return r;
}
// {low half's constant, high half's constant} for a fold over D bits.
struct FoldConstants {
    std::uint64_t lo, hi;
};
constexpr FoldConstants fold_constants(unsigned d) {
    return {reflect64(xpow_mod_p(64 + d - 1)), reflect64(xpow_mod_p(d - 1))};
}
constexpr FoldConstants kFold16 = fold_constants(128);   // one block on
constexpr FoldConstants kFold64 = fold_constants(512);   // four blocks on

__attribute__((target("pclmul,sse2"))) inline __m128i fold(__m128i v, __m128i k, __m128i next) {
    const __m128i lo = _mm_clmulepi64_si128(v, k, 0x00);
    const __m128i hi = _mm_clmulepi64_si128(v, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

__attribute__((target("pclmul,sse2"))) std::uint16_t vcrc_clmul(const std::uint8_t* p, std::size_t n) {
    auto load = [](const std::uint8_t* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
    const __m128i k16 = _mm_set_epi64x(static_cast<long long>(kFold16.hi), static_cast<long long>(kFold16.lo));
    __m128i x = _mm_xor_si128(load(p), _mm_cvtsi32_si128(0xFFFF));
    p += 16;
    n -= 16;
    if (n >= 64 + 48) {
        // Four accumulators 64 bytes apart hide PCLMULQDQ's latency.
        const __m128i k64 = _mm_set_epi64x(static_cast<long long>(kFold64.hi), static_cast<long long>(kFold64.lo));
        __m128i x1 = load(p), x2 = load(p + 16), x3 = load(p + 32);
        p += 48;
        n -= 48;
        for (; n >= 64; n -= 64, p += 64) {
            x = fold(x, k64, load(p));
            x1 = fold(x1, k64, load(p + 16));
            x2 = fold(x2, k64, load(p + 32));
            x3 = fold(x3, k64, load(p + 48));
        }
        x = fold(fold(fold(x, k16, x1), k16, x2), k16, x3);
    }
    for (; n >= 16; n -= 16, p += 16) x = fold(x, k16, load(p));
    alignas(16) std::uint8_t last[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(last), x);
    return vcrc_table(vcrc_table(0, last, sizeof last), p, n);
}

// Initialised with the program's statics: __builtin_cpu_init() first, as the
// CPU model may not be read yet then. Before (another static's CRC), false:
// the tables.
const bool kHaveClmul = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
}();
#endif

}  // namespace

std::uint16_t crc16_vcrc(bytes data) {
#ifdef IPOIBD_VCRC_CLMUL
    if (data.size() >= 64 && kHaveClmul) return static_cast<std::uint16_t>(vcrc_clmul(data.data(), data.size()) ^ 0xFFFF);
#endif
    return static_cast<std::uint16_t>(vcrc_table(0xFFFF, data.data(), data.size()) ^ 0xFFFF);
}

std::uint16_t crc16_vcrc_portable(bytes data) {
    return static_cast<std::uint16_t>(vcrc_table(0xFFFF, data.data(), data.size()) ^ 0xFFFF);
}

std::uint32_t compute_icrc(bytes covered, Lnh lnh) {
    // Copy the headers that hold variant fields, mask them, then CRC the
    // masked copy followed by the untouched rest of the packet.
    std::array<std::uint8_t, Lrh::size + Grh::size + Bth::size> head;
    const bool global = lnh == Lnh::iba_global;
    const std::size_t bth_offset = Lrh::size + (global ? Grh::size : 0);
    const std::size_t head_len = bth_offset + Bth::size;
    std::memcpy(head.data(), covered.data(), head_len);
    if (global) {
        std::memset(head.data(), 0xFF, Lrh::size);
        std::uint8_t* grh = head.data() + Lrh::size;
        grh[0] |= 0x0F;                          // TClass high nibble (IPVer kept)
        grh[1] = grh[2] = grh[3] = 0xFF;         // TClass low nibble, FlowLabel
        grh[7] = 0xFF;                           // HopLmt
    } else {
        head[0] |= 0xF0;                         // VL
    }
    head[bth_offset + Bth::kOffsetResv8a] = 0xFF;

    // ISA-L's crc32_gzip_refl() is zlib's crc32() (same polynomial, init and
    // complement, chainable), with PCLMULQDQ/VPCLMULQDQ where the CPU has them.
    std::uint32_t crc = crc32_gzip_refl(0, head.data(), head_len);
    return crc32_gzip_refl(crc, covered.data() + head_len, covered.size() - head_len);
}

}  // namespace ipoibd::ib
