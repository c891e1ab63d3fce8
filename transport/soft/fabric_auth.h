// The fabric key: authenticated datagrams between soft ports and switches
// (docs/soft-fabric.md, "Fabric key").
//
// With a key, every datagram on the soft fabric's UDP sockets carries a
// 36-byte trailer, appended by the sender's socket and checked and removed
// by the receiver's before anything else looks at the datagram:
//   0-3   key id: which key sealed it (the first 4 bytes of a keyed BLAKE2b
//         of the key), so that two keys can be accepted while one replaces
//         the other
//   4-11  session: the sender's socket's start (CLOCK_REALTIME, µs) << 12 |
//         12 random bits; a restarted sender has a newer one
//   12-19 sequence number, from 1, per session
//   20-35 tag: XChaCha20-Poly1305 (libsodium) with an empty message, the
//         datagram and bytes 0-19 as additional data, and the nonce key id |
//         session | sequence | 4 zero bytes (unique per key: a session is
//         never reused, a sequence never repeats in it)
// The datagram is not encrypted: the fabric key makes the fabric's traffic
// authentic, not secret (IBA packets are not secret on a real fabric
// either).
//
// Replay protection, per source address (IP and UDP port): the newest
// session seen and a window of its last 4096 sequence numbers (a port's data
// threads share one counter, so theirs arrive a little out of order). A sequence
// number below the window or seen before is a replay; a session older than
// the newest is stale, unless the newest has been silent for
// kSessionTakeover (a sender restarted after its clock stepped back). State
// is created only by datagrams that authenticate, so the table (at most
// kMaxSources) holds only key holders.
//
// Sans-I/O: the owner's socket calls seal() and open() (udp_batch.h).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/counters.h"
#include "common/expected.h"
#include "common/secret.h"
#include "common/socket_address.h"

namespace ipoibd::transport {

enum class AuthDrop : std::uint8_t {
    too_short,      // shorter than the trailer
    unknown_key,    // a key id none of our keys has
    bad_tag,        // the tag does not match: forged, altered, or another key
    replayed,       // a sequence number seen before or below the window
    stale_session,  // an older session of a source that has a newer one
    sources_full,   // kMaxSources senders known already
    count_
};
inline constexpr std::size_t kAuthDropCount = static_cast<std::size_t>(AuthDrop::count_);
const char* to_string(AuthDrop d);

struct FabricAuthCounters {
    std::uint64_t sealed = 0;
    std::uint64_t opened = 0;
    std::array<std::uint64_t, kAuthDropCount> dropped{};
    std::uint64_t key_rotations = 0;  // set_keys() with other keys
};
// As "auth_sealed", "auth_dropped_bad_tag", ...
void visit(const FabricAuthCounters& c, CounterSink& out);

class FabricAuth {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr std::size_t kTrailer = 36;
    static constexpr std::size_t kWindow = 4096;
    static constexpr std::size_t kMaxSources = 4096;
    static constexpr std::chrono::seconds kSessionTakeover{120};

    explicit FabricAuth(FabricKeys keys);

    // Rotation: seal with keys.keys[0] from now on, open with all of them.
    // The session and the replay state stay.
    void set_keys(FabricKeys keys);
    const FabricKeys& keys() const { return keys_; }

    // Appends the trailer to the `length` bytes at `data`, which has room
    // for kTrailer more; returns the new length.
    std::size_t seal(std::uint8_t* data, std::size_t length);
    // A sealer for another thread's socket at the same address (a soft
    // port's send queues, soft_port.h): the same keys, the same session
    // and one sequence counter shared with this one, so a receiver's
    // replay state for the address sees one sender. Seal close to the send
    // (udp_batch.h seals at flush): the two threads' datagrams then arrive
    // well within kWindow of each other. Its set_keys() follows rotations.
    std::unique_ptr<FabricAuth> share_session() const;
    // Checks a received datagram from `from`: its body length (the datagram
    // without the trailer), or why it is refused (counted).
    expected<std::size_t, AuthDrop> open(const std::uint8_t* data, std::size_t length, const SocketAddress& from,
                                         Clock::time_point now);

    const FabricAuthCounters& counters() const { return counters_; }
    std::size_t sources() const { return sources_.size(); }

private:
    struct Key {
        std::array<std::uint8_t, 4> id{};
        Secret secret;
    };
    struct Source {
        std::uint64_t session = 0;
        std::uint64_t top = 0;  // highest sequence number accepted
        std::array<std::uint64_t, kWindow / 64> seen{};  // bit (seq % kWindow): seen
        Clock::time_point last{};
    };
    AuthDrop drop(AuthDrop d) {
        ++counters_.dropped[static_cast<std::size_t>(d)];
        return d;
    }

    FabricKeys keys_;
    std::vector<Key> derived_;
    std::uint64_t session_ = 0;
    // Shared with share_session()'s sealers.
    std::shared_ptr<std::atomic<std::uint64_t>> sequence_ = std::make_shared<std::atomic<std::uint64_t>>(0);
    std::unordered_map<std::string, Source> sources_;  // by address bytes and port
    FabricAuthCounters counters_;
};

}  // namespace ipoibd::transport
