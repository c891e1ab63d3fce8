// The two CRCs of an IBA packet (IBA vol. 1 7.8).
//
// ICRC, invariant CRC, 4 bytes after the payload and pad: the Ethernet CRC-32
// (polynomial 0x04C11DB7 reflected, init 0xFFFFFFFF, final complement;
// zlib's crc32(); computed with ISA-L's crc32_gzip_refl) over LRH..pad with the variant fields replaced by ones:
//   - always BTH Resv8a;
//   - LNH = IBA local: the LRH VL nibble;
//   - LNH = IBA global: the whole LRH, and the GRH TClass, FlowLabel, HopLmt.
// VCRC, variant CRC, the last 2 bytes: CRC-16 with polynomial 0x100B
// (x^16+x^12+x^3+x+1), reflected, init 0xFFFF, final complement, over LRH
// through the ICRC (every byte, nothing masked: a switch recomputes it).
//
// Byte order on the wire: both CRCs are stored least-significant byte first,
// the natural order of a reflected CRC (its low-order bit is transmitted
// first). store_icrc()/load_icrc() and store_vcrc()/load_vcrc() do this.
#pragma once

#include <cstdint>

#include "common/byte_io.h"
#include "transport/wire/headers.h"

namespace ipoibd::ib {

inline constexpr std::size_t kIcrcSize = 4;
inline constexpr std::size_t kVcrcSize = 2;

// CRC-16/IBA-VCRC of arbitrary bytes (the raw algorithm; check value over
// "123456789" is documented in the tests).
// Folds with PCLMULQDQ where the CPU has it (64 bytes and more), else
// slicing-by-8 tables.
std::uint16_t crc16_vcrc(bytes data);
// The table path alone, whatever the CPU (tests compare the two).
std::uint16_t crc16_vcrc_portable(bytes data);

// ICRC of an IBA transport packet. `covered` spans LRH through the end of the
// pad (everything before the ICRC field) and must hold at least the LRH, the
// GRH when lnh == iba_global, and the BTH. lnh must be iba_local or
// iba_global; raw packets have no ICRC.
std::uint32_t compute_icrc(bytes covered, Lnh lnh);

// VCRC over `covered` = LRH through ICRC.
inline std::uint16_t compute_vcrc(bytes covered) { return crc16_vcrc(covered); }

inline void store_icrc(std::uint8_t* p, std::uint32_t icrc) { store_le32(p, icrc); }
inline std::uint32_t load_icrc(const std::uint8_t* p) { return load_le32(p); }
inline void store_vcrc(std::uint8_t* p, std::uint16_t vcrc) { store_le16(p, vcrc); }
inline std::uint16_t load_vcrc(const std::uint8_t* p) { return load_le16(p); }

}  // namespace ipoibd::ib
