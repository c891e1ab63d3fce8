// libFuzzer target for the fabric key's framing (transport/soft/fabric_auth.h).
//
// Input: records of one control byte, a 2-byte length and that many bytes.
// Control bit 0 clear: the bytes are a datagram as received, opened as is
// (from source port 4000 + control bits 4-7). Bit 0 set: they are a body the
// fuzzer's sender seals first, and bit 1 then flips one byte of the result
// (at the offset in the first body byte) before it is opened.
//
// Invariants checked (a violation aborts):
//   - open() never accepts a datagram shorter than the trailer, and the body
//     it returns is the datagram minus the trailer;
//   - a datagram this sender sealed opens, the first time, to its body;
//     opening it again is a replay;
//   - a sealed datagram with one byte flipped never opens;
//   - opened + every drop reason == datagrams opened.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "transport/soft/fabric_auth.h"

using namespace ipoibd;
using namespace ipoibd::transport;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

FabricKeys fuzz_keys() {
    FabricKeys k;
    Secret s;
    s.bytes.fill(0x5A);
    k.keys.push_back(s);
    return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FabricAuth tx(fuzz_keys()), rx(fuzz_keys());
    const auto now = FabricAuth::Clock::time_point{} + std::chrono::hours(1);
    std::uint64_t calls = 0;
    for (std::size_t at = 0; at + 3 <= size;) {
        const std::uint8_t control = data[at];
        const std::size_t length = std::min<std::size_t>((std::size_t{data[at + 1]} << 8) | data[at + 2], size - at - 3);
        std::vector<std::uint8_t> d(data + at + 3, data + at + 3 + length);
        at += 3 + length;
        const SocketAddress from = *parse_socket_address("198.18.0.1:" + std::to_string(4000 + (control >> 4)));
        if ((control & 1) == 0) {
            const auto r = rx.open(d.data(), d.size(), from, now);
            ++calls;
            if (r) check(d.size() >= FabricAuth::kTrailer && *r == d.size() - FabricAuth::kTrailer);
            continue;
        }
        const std::size_t body = d.size();
        d.resize(body + FabricAuth::kTrailer);
        check(tx.seal(d.data(), body) == d.size());
        if ((control & 2) != 0) {
            const std::size_t i = body > 0 ? data[at - length] % d.size() : 0;
            d[i] ^= static_cast<std::uint8_t>((control >> 2) | 1);
            check(!rx.open(d.data(), d.size(), from, now));
            ++calls;
            continue;
        }
        const auto r = rx.open(d.data(), d.size(), from, now);
        ++calls;
        // This sender's sequence numbers only grow: a first opening works
        // unless the fuzzer's own forged datagrams made the source newer.
        if (r) check(*r == body);
        const auto again = rx.open(d.data(), d.size(), from, now);
        ++calls;
        check(!again);
    }
    std::uint64_t total = rx.counters().opened;
    for (auto n : rx.counters().dropped) total += n;
    check(total == calls);
    return 0;
}
