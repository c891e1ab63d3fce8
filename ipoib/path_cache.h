// The path cache: destination GID -> how to reach it (DLID, SL, MTU, rate),
// from SA PathRecords, sans-I/O around the SaClient (which is itself
// sans-I/O: the owner moves its MADs).
//
// Flow of one unicast frame (the neighbour cache already gave its 20-byte
// address, QPN + GID):
//  1. lookup(): a VALID path returns at once and the caller sends.
//  2. Otherwise the frame waits in the entry (at most kMaxQueuedPerPath, the
//     Linux driver's IPOIB_MAX_PATH_REC_QUEUE; the rest are dropped and
//     counted) and, unless one is in flight, a PathRecord Get (SGID = ours,
//     DGID, P_Key, NumbPath 1) goes to the SA.
//  3. The answer calls PathSink::path_ready() with the queued frames, to be
//     sent in order; a failure (SA error status, timeout after the
//     SaClient's retries, an unusable record, or the SaClient refusing the
//     query because its queue is full: then before lookup() returns) drops
//     them, counted, and the entry stays FAILED for failed_hold: frames to
//     it meanwhile are dropped at once instead of hammering the SA.
//  4. A refresh of a VALID path the SA answers with an error, or with no
//     usable record, removes the entry (resolved afresh next time: the
//     destination may be gone). One that gets no answer (timeout, a broken
//     transfer, our own SaClient queue full) keeps the path in use: the SA
//     is unreachable or busy, which says nothing about the path, and
//     unicast must not stop during an SM outage (the Linux driver keeps its
//     path too). The next refresh waits refresh_retry.
//
// A query a fabric packet asks for (the reply to a peer's ARP request or
// NS, from a GID the packet names) counts against the LID it came from,
// which the fabric vouches for: at most kMaxResolvingPerOrigin such paths
// resolve at once per LID, the rest are dropped (drop_origin_busy). A port
// that floods ARP requests from made-up GIDs would otherwise cost one SA
// query each and fill the SA client's queue, starving every other query.
//
// Paths are revalidated, not trusted forever: a path older than `lifetime`
// is queried again when used (the old one stays in use meanwhile), and
// note_source() re-queries at once when a peer's ARP/ND arrives from a LID
// other than the DLID we hold (the peer moved, or its port got a new LID).
// Port events (LID change, port down/up, P_Key change) flush the cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/counters.h"
#include "common/byte_io.h"
#include "ipoib/neighbour_cache.h"
#include "sa_client/sa_client.h"
#include "sa_client/sa_records.h"
#include "transport/port.h"

namespace ipoibd::ipoib {

struct PathInfo {
    std::uint16_t dlid = 0;
    std::uint8_t sl = 0;
    std::uint8_t mtu = 0;   // IBA MTU code of the path
    std::uint8_t rate = 0;  // IBA rate code
    Clock::time_point resolved_at{};
    transport::AddressHandle address_handle() const { return {.dlid = dlid, .sl = sl, .src_path_bits = 0, .grh = {}}; }
    bool operator==(const PathInfo&) const = default;
};

// A frame waiting for its path: the IPoIB frame (encapsulation header
// included) and the destination QPN of its neighbour.
struct QueuedFrame {
    std::uint32_t qpn = 0;
    Packet frame;
    std::uint8_t flags = 0;  // the destination's link-address flags (RFC 4755: 0x80 connected)
};

enum class PathState : std::uint8_t { resolving, valid, failed };
std::string_view to_string(PathState s);

struct PathCounters {
    std::uint64_t queries = 0;         // PathRecord Gets sent (first tries)
    std::uint64_t resolved = 0;
    std::uint64_t refreshed = 0;       // a valid path re-queried (lifetime, SLID change)
    std::uint64_t changed = 0;         // a re-query gave a different DLID/SL/MTU
    std::uint64_t failures = 0;        // queries that failed (status, timeout, bad record)
    std::uint64_t refresh_kept = 0;    // refreshes with no answer: the path held stays in use
    std::uint64_t drop_queue_full = 0;
    std::uint64_t drop_queued_bytes = 0;  // over Config::max_queued_bytes in all paths' queues
    std::uint64_t drop_failed = 0;     // queued frames of a failed query, and frames during failed_hold
    std::uint64_t drop_table_full = 0;
    std::uint64_t drop_origin_busy = 0;  // kMaxResolvingPerOrigin paths already resolving for that LID
    std::uint64_t drop_flushed = 0;
    std::uint64_t flushes = 0;
    std::uint64_t evicted = 0;
};
void visit(const PathCounters& c, CounterSink& out);

struct PathEntryView {
    ib::Gid dgid{};
    PathState state = PathState::resolving;
    std::optional<PathInfo> path;
    std::size_t queued = 0;
    Clock::time_point last_used{};
};

class PathSink {
public:
    virtual ~PathSink() = default;
    // The path to `dgid` is known (first time, or changed); send `frames`.
    virtual void path_ready(const ib::Gid& dgid, const PathInfo& path, std::vector<QueuedFrame> frames) = 0;
    // Resolution failed; `dropped` frames were discarded (already counted).
    virtual void path_failed(const ib::Gid& dgid, std::uint16_t sa_status, std::size_t dropped) = 0;
};

class PathCache {
public:
    static constexpr std::size_t kMaxQueuedPerPath = 3;
    static constexpr std::size_t kMaxResolvingPerOrigin = 16;

    struct Config {
        std::size_t max_entries = 10'000;
        std::chrono::milliseconds lifetime{300'000};   // re-query a path this old when it is used
        std::chrono::milliseconds failed_hold{1000};   // after a failure, drop for this long
        std::chrono::milliseconds refresh_retry{10'000};  // after a refresh with no answer
        // Frames waiting for paths, all together (3 frames x ~1,000 paths
        // resolving at once, up to 64 KiB each in connected mode).
        std::size_t max_queued_bytes = 16 * 1024 * 1024;
    };

    // `now` is the owner's clock reading, current whenever the SaClient runs
    // (answers arrive inside SaClient::on_mad() and tick()).
    PathCache(sa::SaClient& sa, PathSink& sink, const Clock::time_point& now, Config config)
        : sa_(sa), sink_(sink), now_(now), config_(config) {}
    PathCache(const PathCache&) = delete;
    PathCache& operator=(const PathCache&) = delete;

    // Who asks: our GID and the link's P_Key (set before any lookup, and
    // again after a port event).
    void set_source(const ib::Gid& sgid, std::uint16_t pkey) {
        sgid_ = sgid;
        pkey_ = pkey;
    }

    // The path for a frame to `dgid`, or nullopt: then `frame` was queued
    // or dropped (counted). `origin`: the LID of the fabric packet that
    // asks for the frame (0: the host).
    std::optional<PathInfo> lookup(const ib::Gid& dgid, std::uint32_t qpn, bytes frame, Clock::time_point now,
                                   std::uint8_t flags = 0, std::uint16_t origin = 0);
    const Config& config() const { return config_; }
    // The path if VALID, without queueing anything.
    std::optional<PathInfo> find(const ib::Gid& dgid) const;

    // An ARP/ND from `dgid` came from `slid`: re-query when it differs from
    // the DLID held. Returns true when a query was started.
    bool note_source(const ib::Gid& dgid, std::uint16_t slid, Clock::time_point now);

    // Forget every path; queued frames dropped and counted.
    std::size_t flush();

    std::vector<PathEntryView> entries() const;
    std::size_t size() const { return table_.size(); }
    const PathCounters& counters() const { return counters_; }

private:
    struct Entry {
        PathState state = PathState::resolving;
        std::optional<PathInfo> path;
        std::vector<QueuedFrame> queue;
        sa::SaClient::Handle query;
        Clock::time_point last_used{};
        Clock::time_point failed_until{};
        Clock::time_point refresh_after{};  // no refresh before (one got no answer)
        std::uint16_t origin = 0;  // RESOLVING for a fabric packet from this LID (0: the host)
    };

    // RESOLVING entries by the LID that asked for them.
    bool origin_busy(std::uint16_t origin) const;
    void start_resolving(Entry& e, std::uint16_t origin);
    void stop_resolving(Entry& e);
    // Queues `frame` on `e` if the byte budget allows (else counted).
    void enqueue(Entry& e, std::uint32_t qpn, bytes frame, std::uint8_t flags);
    // Empties e.queue into the result, taking its bytes off queued_bytes_.
    std::vector<QueuedFrame> take_queue(Entry& e);
    // Sends a PathRecord Get for the entry of `dgid`. The SaClient calls
    // back before submit() returns when it refuses the request (its queue
    // full, sa_client.h): then on_answer() has run, and the entry may be
    // FAILED or gone (a failed refresh). Callers hold no reference to the
    // entry across this call; they look it up again.
    void start_query(const ib::Gid& dgid, Clock::time_point now);
    void on_answer(const ib::Gid& dgid, const expected<sa::SaResult, sa::SaFailure>& result);
    bool make_room();

    sa::SaClient& sa_;
    PathSink& sink_;
    const Clock::time_point& now_;
    Config config_;
    ib::Gid sgid_{};
    std::uint16_t pkey_ = ib::kPKeyDefault;
    std::map<ib::Gid, Entry> table_;
    std::map<std::uint16_t, std::size_t> resolving_by_origin_;
    PathCounters counters_;
    std::size_t queued_bytes_ = 0;  // in all entries' queues
};

}  // namespace ipoibd::ipoib
