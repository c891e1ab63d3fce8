#include "transport/wire/crc.h"

#include <zlib.h>

#include <array>
#include <cstring>

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

}  // namespace

std::uint16_t crc16_vcrc(bytes data) {
    std::uint16_t c = 0xFFFF;
    const std::uint8_t* p = data.data();
    std::size_t n = data.size();
    for (; n >= 8; n -= 8, p += 8) {
        const std::uint16_t x = static_cast<std::uint16_t>(c ^ (p[0] | (p[1] << 8)));
        c = static_cast<std::uint16_t>(kVcrc[7][x & 0xFF] ^ kVcrc[6][x >> 8] ^ kVcrc[5][p[2]] ^ kVcrc[4][p[3]] ^
                                       kVcrc[3][p[4]] ^ kVcrc[2][p[5]] ^ kVcrc[1][p[6]] ^ kVcrc[0][p[7]]);
    }
    for (; n > 0; --n, ++p) c = static_cast<std::uint16_t>(kVcrc[0][(c ^ *p) & 0xFF] ^ (c >> 8));
    return static_cast<std::uint16_t>(c ^ 0xFFFF);
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

    uLong crc = crc32_z(0L, Z_NULL, 0);
    crc = crc32_z(crc, head.data(), head_len);
    crc = crc32_z(crc, covered.data() + head_len, covered.size() - head_len);
    return static_cast<std::uint32_t>(crc);
}

}  // namespace ipoibd::ib
