// Secrets of the soft fabric: the SM's M_Key base and the fabric key
// (docs/soft-fabric.md). The cryptography is libsodium's: random bytes
// (randombytes_buf), keyed BLAKE2b (crypto_generichash) to derive per-port
// values. Nothing here is hand-rolled.
//
// A key file holds one line of 64 hexadecimal digits (32 bytes). It must be
// a regular file readable and writable by its owner only (mode 0600 or
// 0400): a key others can read is no key, and the error says so.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"

namespace ipoibd {

struct Secret {
    static constexpr std::size_t size = 32;
    std::array<std::uint8_t, size> bytes{};
    bool operator==(const Secret&) const = default;
};

Secret random_secret();
// 64 lowercase hex digits.
std::string to_hex(const Secret& s);
// Exactly 64 hex digits, else an error in words.
expected<Secret, std::string> parse_secret(std::string_view hex);

// Reads `path`. With create, a missing file is created (mode 0600) holding a
// new random key. Errors name the path and what is wrong.
expected<Secret, std::string> load_key_file(const std::string& path, bool create);

// The keys of a fabric key file: the first seals, all open
// (transport/soft/fabric_auth.h).
struct FabricKeys {
    std::vector<Secret> keys;  // 1 or 2
    bool operator==(const FabricKeys&) const = default;
};

// A fabric key file: one or two lines of 64 hex digits (the first is the
// key to send with, a second one is also accepted; lines starting with #
// are comments), mode 0600 or 0400. Errors name the file, the line and
// what is wrong.
expected<FabricKeys, std::string> load_fabric_key_file(const std::string& path);

// A 64-bit value for `input` under the secret, separated by `context` (so
// that one secret serves several uses): keyed BLAKE2b.
std::uint64_t derive_u64(const Secret& s, std::string_view context, std::uint64_t input);

}  // namespace ipoibd
