// The neighbour cache: IPv4 and IPv6 next hop -> 20-octet IPoIB link address
// (hw_address.h), sans-I/O (STYLE.md guideline 4). Events and `now` in,
// actions out; no sockets, no clocks, so every rule is tested with a fake
// clock.
//
// States follow Linux's neighbour machine, which is RFC 4861 7.3.2 applied
// to ARP as well:
//
//   (none) --egress--> INCOMPLETE --solicited reply--> REACHABLE
//                        |   \--unsolicited-----------> STALE (DELAY if it
//                        |                               had packets queued)
//                        \--multicast_solicits unanswered--> FAILED
//   REACHABLE --reachable_time without confirmation--> STALE
//   STALE --egress (packet sent to the old address)--> DELAY
//   STALE --gc_stale_time unused--> removed
//   DELAY --delay_first_probe_time--> PROBE (unicast solicit)
//   DELAY/PROBE --solicited reply--> REACHABLE
//   PROBE --unicast_probes unanswered--> FAILED
//   FAILED --egress--> INCOMPLETE (resolution starts again)
//   FAILED --gc_stale_time--> removed
//
// Flow of one egress packet:
//   1. The engine calls lookup_or_resolve() with the next hop and the packet.
//   2. A usable entry (REACHABLE, STALE, DELAY, PROBE) returns send_to: the
//      caller transmits the packet there itself; the cache keeps nothing.
//   3. Otherwise the cache keeps a copy (at most kMaxQueuedPerEntry, as
//      Linux's IPoIB driver does; RFC 4861 7.2.2 asks for a small queue
//      "of at least one packet"; and at most Config::max_queued_bytes in
//      all queues together, as Linux bounds each neighbour's by bytes; the
//      rest are dropped and counted) and asks for a solicit (ARP request /
//      NS).
//   4. learn() with the answer returns the queued packets in a FlushAction.
//
// RFC 4391 9.4: "the QPN ... may change" when a peer restarts. learn() with
// a different endpoint (QPN or GID) for a known address replaces it and
// counts address_changed, so the link heals without operator action; a
// silent restart is caught by the STALE -> DELAY -> PROBE revalidation.
//
// ReachableTime is RFC 4861 6.3.2's: reachable_time (BaseReachableTime)
// times a factor drawn uniformly from [0.5, 1.5) by Config::reachable_factor
// (none: exactly reachable_time), drawn again when the configuration changes
// and on the first tick() 300 s after the last draw (Linux redraws every
// 300 s, the RFC asks for "at least every few hours"); it applies to ARP
// too, as in Linux.
//
// Neighbor Advertisements go through advertised(), which applies RFC 4861
// 7.2.5's Override and Solicited rules; learn() is for ARP and the ND
// messages that carry no such flags (it always takes the address given).
//
// Not modelled: upper-layer reachability hints (TCP ACKs).
#pragma once

#include <array>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ipoib/hw_address.h"
#include "common/counters.h"
#include "common/ip_address.h"

namespace ipoibd::ipoib {

using Clock = std::chrono::steady_clock;
using Packet = std::vector<std::uint8_t>;


enum class NeighbourState : std::uint8_t {
    incomplete,  // solicits sent, no address yet, packets may be queued
    reachable,   // address confirmed within reachable_time
    stale,       // address usable but unconfirmed; no traffic since
    delay,       // stale and in use: wait for an upper-layer confirmation
    probe,       // unicast solicits to the known address
    failed,      // resolution or probing gave up; no address
};
std::string_view to_string(NeighbourState s);

// How learn() came to know an address. RFC 4861 7.2.5 and Linux arp_process.
enum class LearnKind : std::uint8_t {
    // An answer to our solicit: an ARP reply addressed to us, an NA with the
    // Solicited flag. Confirms reachability.
    solicited,
    // The peer spoke first: an ARP request for one of our addresses, a
    // gratuitous ARP, an NS with a Source Link-Layer Address option, an
    // unsolicited NA with the Override flag. Proves nothing about the
    // forward path, so a new or changed address becomes STALE.
    unsolicited,
};

enum class NeighbourDropReason : std::uint8_t {
    queue_full,  // an unresolved neighbour already holds kMaxQueuedPerEntry
    unresolved,  // resolution failed; the queued packets go
    table_full,  // max_entries reached and no STALE/FAILED entry to evict
    flushed,     // flush(): port event dropped the queues
    queued_bytes,  // the queues together already hold Config::max_queued_bytes
};
std::string_view to_string(NeighbourDropReason r);

// Send an ARP request (IPv4) or NS (IPv6) for `ip`: to the broadcast group
// / solicited-node group when unicast_to is empty (resolution), else
// unicast to that address (PROBE, RFC 4861 7.3.3).
struct SolicitAction {
    IpAddress ip;
    std::optional<HwAddress> unicast_to;
    bool operator==(const SolicitAction&) const = default;
};

// Transmit `packets`, in the order they were queued, to `to`.
struct FlushAction {
    IpAddress ip;
    HwAddress to;
    std::vector<Packet> packets;
};

// `count` packets for `ip` were dropped; already added to the counters.
struct DropAction {
    IpAddress ip;
    NeighbourDropReason reason = NeighbourDropReason::queue_full;
    std::size_t count = 0;
    bool operator==(const DropAction&) const = default;
};

struct NeighbourActions {
    std::vector<SolicitAction> solicits;
    std::vector<FlushAction> flushes;
    std::vector<DropAction> drops;
    bool empty() const { return solicits.empty() && flushes.empty() && drops.empty(); }
};

// What to do with one egress packet.
struct Resolution {
    std::optional<HwAddress> send_to;  // set: transmit now; empty: queued or dropped
    NeighbourActions actions;
};

// Every drop by reason and every state change worth seeing in ipoibctl.
struct NeighbourCounters {
    std::uint64_t drop_queue_full = 0;
    std::uint64_t drop_unresolved = 0;
    std::uint64_t drop_table_full = 0;
    std::uint64_t drop_flushed = 0;
    std::uint64_t drop_queued_bytes = 0;  // over Config::max_queued_bytes in all queues
    std::uint64_t solicits = 0;  // broadcast/multicast ARP requests and NS
    std::uint64_t probes = 0;    // unicast solicits from PROBE
    std::uint64_t resolved = 0;  // INCOMPLETE -> usable
    std::uint64_t confirmed = 0; // DELAY/PROBE/STALE/REACHABLE -> REACHABLE
    std::uint64_t address_changed = 0;
    std::uint64_t became_stale = 0;
    std::uint64_t failed = 0;
    std::uint64_t gc_removed = 0;
    std::uint64_t evicted = 0;   // removed to make room for a new entry
    std::uint64_t re_resolved = 0;  // resolved again: the link said the address is gone (re_resolve)
    bool operator==(const NeighbourCounters&) const = default;
};
void visit(const NeighbourCounters& c, CounterSink& out);

// One row of `ipoibctl neigh`.
struct NeighbourEntryView {
    IpAddress ip;
    NeighbourState state = NeighbourState::incomplete;
    std::optional<HwAddress> hw;
    std::size_t queued = 0;
    unsigned solicits_sent = 0;  // in the current INCOMPLETE or PROBE round
    Clock::time_point updated{};  // last state change or confirmation
};

class NeighbourCache {
public:
    // Linux ulp/ipoib IPOIB_MAX_PATH_REC_QUEUE: 3 packets wait per unresolved path.
    static constexpr std::size_t kMaxQueuedPerEntry = 3;

    // Defaults are Linux's (net.ipv4.neigh.default.*), except max_entries.
    struct Config {
        std::size_t max_entries = 10'000;
        // What the queues of all unresolved neighbours hold together. One
        // local sender naming a new next hop per datagram fills every
        // entry's queue: 10,000 entries x 3 datagrams of a 65,520-byte
        // connected-mode MTU would be 2 GB. Linux bounds each neighbour's
        // queue by bytes (unres_qlen_bytes, 212,992) and has at most 1,024
        // (gc_thresh3).
        std::size_t max_queued_bytes = 16 * 1024 * 1024;
        unsigned multicast_solicits = 3;  // mcast_solicit: tries while INCOMPLETE
        unsigned unicast_probes = 3;      // ucast_solicit: tries while PROBE
        std::chrono::milliseconds retrans_time{1000};
        std::chrono::milliseconds reachable_time{30'000};
        std::chrono::milliseconds delay_first_probe_time{5000};
        std::chrono::milliseconds gc_stale_time{60'000};
        // RFC 4861 6.3.2's random factor for ReachableTime, values in
        // [0.5, 1.5) (others are clamped; not finite: 1); empty: 1. See
        // make_reachable_factor().
        std::function<double()> reachable_factor;
    };
    static constexpr double kMinRandomFactor = 0.5;  // RFC 4861 10, MIN_RANDOM_FACTOR
    static constexpr double kMaxRandomFactor = 1.5;  // MAX_RANDOM_FACTOR
    static constexpr std::chrono::seconds kRedrawReachableEvery{300};

    NeighbourCache() : NeighbourCache(Config{}) {}
    explicit NeighbourCache(Config config) : config_(std::move(config)) { draw_reachable_time(); }

    // An egress packet for next hop `ip`. Returns send_to when the entry has
    // an address (REACHABLE, STALE, DELAY, PROBE; STALE moves to DELAY).
    // Otherwise copies `packet` into the entry's queue, or drops and counts
    // it (queue_full, table_full), and returns a SolicitAction when
    // resolution starts (new entry, or a FAILED one retried). An empty
    // `packet` asks for the address only (TAP mode: the kernel's own ARP
    // request or NS): nothing is queued.
    Resolution lookup_or_resolve(const IpAddress& ip, std::span<const std::uint8_t> packet, Clock::time_point now);

    // `ip` is at `hw`, heard from ARP or ND (see LearnKind). Unknown `ip`:
    // solicited is ignored (RFC 4861 7.2.5: no entry, no update), unsolicited
    // creates a STALE entry. Known: fills or replaces the address and moves
    // the state; returns the queued packets as a FlushAction.
    NeighbourActions learn(const IpAddress& ip, const HwAddress& hw, LearnKind kind, Clock::time_point now);

    // A Neighbor Advertisement for `ip` (RFC 4861 7.2.5), `target_lla` its
    // Target Link-Layer Address option if it had one. No entry: ignored.
    // With the option, to an entry with another address and the Override
    // flag clear: the address is NOT replaced; a REACHABLE entry becomes
    // STALE, any other is left alone. Otherwise with the option: as
    // learn(), solicited or not. Without it the entry's address stands: an
    // entry with none (INCOMPLETE, FAILED) ignores the NA; otherwise the
    // Solicited flag confirms it (REACHABLE), and an unsolicited NA changes
    // nothing. Linux answers a unicast NS (our PROBE) so: Solicited, no
    // Override, no option.
    NeighbourActions advertised(const IpAddress& ip, const std::optional<HwAddress>& target_lla, bool solicited,
                                bool override_flag, Clock::time_point now);

    // Timers: retransmit solicits, give up, age, probe, collect garbage.
    // Call at next_deadline() or later; calling early is harmless.
    NeighbourActions tick(Clock::time_point now);

    // The earliest time tick() has work, or nullopt for an empty cache.
    std::optional<Clock::time_point> next_deadline() const;

    // The link learned that `gone` no longer exists (connected mode: a REQ
    // to its QPN rejected as an unknown ServiceID: the peer restarted and
    // its announcement was lost). Every entry at that endpoint is resolved
    // again at once (INCOMPLETE, a broadcast solicit) instead of waiting
    // for reachable_time and the unicast probes to fail.
    NeighbourActions re_resolve(const HwAddress& gone, Clock::time_point now);

    // Port event (down, LID or P_Key change): forget every entry, queued
    // packets dropped and counted as `flushed`.
    NeighbourActions flush();

    std::vector<NeighbourEntryView> entries() const;
    std::optional<NeighbourEntryView> find(const IpAddress& ip) const;
    std::size_t size() const { return table_.size(); }
    // Bytes of the packets all entries hold, waiting for resolution.
    std::size_t queued_bytes() const { return queued_bytes_; }
    const NeighbourCounters& counters() const { return counters_; }
    const Config& config() const { return config_; }
    // New timers and limits (SIGHUP); entries keep their current deadlines.
    // ReachableTime is drawn again.
    void set_config(const Config& config) {
        config_ = config;
        draw_reachable_time();
    }
    // ReachableTime as drawn: how long a confirmed entry stays REACHABLE.
    std::chrono::milliseconds reachable_time() const { return reachable_time_; }

private:
    struct Entry {
        NeighbourState state = NeighbourState::incomplete;
        std::optional<HwAddress> hw;
        std::vector<Packet> queue;
        unsigned solicits_sent = 0;
        Clock::time_point updated{};
        // When tick() next has work for this entry; its meaning follows
        // the state (retransmit, expiry, probe, garbage collection).
        Clock::time_point deadline{};
    };
    using Table = std::map<IpAddress, Entry>;

    void start_resolution(const IpAddress& ip, Entry& e, Clock::time_point now, NeighbourActions& out);
    void enter_reachable(Entry& e, Clock::time_point now);
    void enter_stale(Entry& e, Clock::time_point now);
    void enter_delay(Entry& e, Clock::time_point now);
    void enter_failed(const IpAddress& ip, Entry& e, Clock::time_point now, NeighbourActions& out);
    void queue_packet(const IpAddress& ip, Entry& e, std::span<const std::uint8_t> packet, NeighbourActions& out);
    void flush_queue(const IpAddress& ip, Entry& e, NeighbourActions& out);
    // Empties e.queue into the result, taking its bytes off queued_bytes_.
    std::vector<Packet> take_queue(Entry& e);
    // Removes the expired entry at `it`, or advances its timer; returns the
    // next iterator.
    Table::iterator expire(Table::iterator it, Clock::time_point now, NeighbourActions& out);
    bool make_room();
    void draw_reachable_time();
    static NeighbourEntryView view(const IpAddress& ip, const Entry& e);

    Config config_;
    std::chrono::milliseconds reachable_time_{};
    std::optional<Clock::time_point> redraw_at_;  // set by the first tick() after a draw
    Table table_;
    std::size_t queued_bytes_ = 0;  // in all entries' queues
    NeighbourCounters counters_;
};

// A Config::reachable_factor: uniform in [0.5, 1.5) from a generator of its
// own, seeded with `seed` (the daemon seeds it from std::random_device).
std::function<double()> make_reachable_factor(std::uint64_t seed);

}  // namespace ipoibd::ipoib
