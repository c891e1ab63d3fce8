// The path cache against a real SaClient whose MADs the test reads and
// answers: what frames waiting for paths may hold.
#include <gtest/gtest.h>

#include <algorithm>

#include "ipoib/path_cache.h"
#include "sa_client/sa_records.h"

namespace ipoibd::ipoib {
namespace {

using namespace std::chrono_literals;

struct NullPathSink final : PathSink {
    void path_ready(const ib::Gid&, const PathInfo&, std::vector<QueuedFrame>) override {}
    void path_failed(const ib::Gid&, std::uint16_t, std::size_t) override {}
};

ib::Gid gid(std::uint8_t last) { return {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last}; }

// The SA's answer to `request`: an error status, no record.
std::vector<std::uint8_t> refused(const sa::SaMad& request) {
    sa::SaMad r = request;
    r.header.method = ib::method::get_resp;
    r.header.status = sa::sa_status::err_no_records;
    std::vector<std::uint8_t> wire(sa::kSaMadSize);
    r.write_to(wire.data());
    return wire;
}

std::size_t queued(const PathCache& c, const ib::Gid& dgid) {
    for (const PathEntryView& e : c.entries())
        if (e.dgid == dgid) return e.queued;
    return 0;
}

// Frames waiting for paths are bounded all paths together, not only per
// path (3 frames x ~1,000 paths resolving, up to 64 KiB each in connected
// mode); a failed (or resolved) path gives its bytes back.
TEST(PathCacheBytes, AllQueuesHoldAtMostMaxQueuedBytes) {
    Clock::time_point now = Clock::time_point{} + 1h;
    sa::SaClient sa;
    NullPathSink sink;
    PathCache::Config config;
    config.max_queued_bytes = 10'000;
    PathCache cache(sa, sink, now, config);
    cache.set_source(gid(1), 0xFFFF);
    const std::vector<std::uint8_t> frame(4000, 0x45);
    EXPECT_FALSE(cache.lookup(gid(2), 0x48, frame, now));
    EXPECT_FALSE(cache.lookup(gid(2), 0x48, frame, now));
    EXPECT_FALSE(cache.lookup(gid(3), 0x49, frame, now));  // 12,000 > 10,000: not queued
    EXPECT_EQ(queued(cache, gid(2)), 2u);
    EXPECT_EQ(queued(cache, gid(3)), 0u);
    EXPECT_EQ(cache.counters().drop_queued_bytes, 1u);
    // The SA knows no path to gid(2): its two frames go, their bytes too.
    for (const sa::SaMad& mad : sa.take_outbound())
        if (sa::get_record<sa::PathRecord>(mad).dgid == gid(2)) sa.on_mad(refused(mad), now);
    EXPECT_EQ(cache.counters().drop_failed, 2u);
    EXPECT_FALSE(cache.lookup(gid(4), 0x4a, frame, now));
    EXPECT_FALSE(cache.lookup(gid(4), 0x4a, frame, now));
    EXPECT_EQ(queued(cache, gid(4)), 2u);
    EXPECT_EQ(cache.counters().drop_queued_bytes, 1u);
}

}  // namespace
}  // namespace ipoibd::ipoib
