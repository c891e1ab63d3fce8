// The forwarding snapshot: what a data thread needs to send the host's
// unicast datagrams without the engine ([daemon] data-threads,
// interface/data_worker.h).
//
// The engine (ipoib/engine.h) stays on the event loop with every table it
// keeps; after any loop turn that changed what forwarding depends on (its
// fingerprint, Engine::forwarding_fingerprint), the interface builds a new
// snapshot (Engine::forwarding_snapshot) and publishes it. A data thread
// takes the current one per batch and never writes to it, except for the
// entries' `reported` flags (atomics).
//
// Flow of one datagram on a data thread (fast_path() says which):
//  1. only what the engine would send as it is takes the fast path: a
//     valid unicast IPv4/IPv6 datagram that fits the UD link, neither IGMP
//     nor ICMPv6 ND/MLD (group state and ND rewriting are the engine's);
//  2. its next hop (the kernel's route, as the TUN port resolves it) must
//     be in the snapshot: a neighbour with an address (REACHABLE, or
//     STALE/DELAY/PROBE as the neighbour cache would use it) and a VALID
//     path, not a peer connected mode would carry over RC;
//  3. the datagram goes to that address as the engine's IPoIB frame;
//  4. an entry the cache would act on when used (not REACHABLE any more,
//     or its path older than its lifetime) is reported to the loop once
//     per snapshot (a "touch": the engine then does what one use does:
//     STALE -> DELAY and a probe, a path re-query);
//  5. everything else goes back to the loop whole (a "miss") and takes
//     the engine's path there (resolution, queueing, multicast, ICMP).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/byte_io.h"
#include "common/ip_address.h"
#include "ipoib/hw_address.h"
#include "transport/port.h"

namespace ipoibd::ipoib {

struct ForwardingEntry {
    IpAddress ip;
    HwAddress to;
    transport::AddressHandle ah;
    // Until then the entry is used without a word; from then on the first
    // use is reported (a touch).
    std::chrono::steady_clock::time_point quiet_until{};
};

struct ForwardingSnapshot {
    bool up = false;
    transport::SendAs as;  // the UD QP the interface sends from (filled by the interface)
    std::uint32_t datagram_mtu = 0;  // the largest IP datagram UD carries
    std::vector<ForwardingEntry> entries;
    std::unordered_map<IpAddress, std::size_t, IpAddressHash> index;  // ip -> entries[i]
    std::unique_ptr<std::atomic<bool>[]> reported;  // per entry: touched once already

    const ForwardingEntry* find(const IpAddress& ip) const {
        auto it = index.find(ip);
        return it == index.end() ? nullptr : &entries[it->second];
    }
    // True when entry `e`'s use must be reported now (and was not yet).
    bool report_once(const ForwardingEntry& e, std::chrono::steady_clock::time_point now) const {
        if (now < e.quiet_until) return false;
        std::atomic<bool>& r = reported[static_cast<std::size_t>(&e - entries.data())];
        return !r.exchange(true, std::memory_order_relaxed);
    }
};

// Whether a datagram from the host may take the fast path (step 1): its
// destination and own length when it may, nothing when it goes to the loop.
struct FastPath {
    IpAddress destination;
    std::size_t length = 0;
};
std::optional<FastPath> fast_path_destination(bytes ip_packet, std::uint32_t datagram_mtu);

}  // namespace ipoibd::ipoib
