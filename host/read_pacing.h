// How many reads a host reader (the event loop's read_host(), a data
// thread) makes when its descriptor is readable.
//
// Sparse traffic (a ping, a request and its answer) gets one read per
// wake-up and no read after it that finds nothing (EAGAIN): that read
// would stand between the packet's send and the reader going back to
// sleep, and on a busy CPU the task the send woke (the peer, the
// application) waits for the reader to sleep. A descriptor that still has
// packets is readable again at once, so the next wake-up comes soon after,
// and since it is within the quiet spell it reads a whole batch: a burst
// costs one wake-up more, a stream nothing.
#pragma once

#include <chrono>
#include <cstddef>

namespace ipoibd::host {

class ReadPacing {
public:
    using Clock = std::chrono::steady_clock;
    // Reads further apart than this are sparse.
    static constexpr std::chrono::microseconds kQuietSpell{100};

    explicit ReadPacing(std::size_t max_reads, Clock::duration quiet_spell = kQuietSpell)
        : max_reads_(max_reads == 0 ? 1 : max_reads), quiet_spell_(quiet_spell) {}

    // The reads to make on a wake-up at `now`.
    std::size_t reads(Clock::time_point now) const { return now - last_read_ >= quiet_spell_ ? 1 : max_reads_; }
    // A wake-up at `now` read something.
    void read_at(Clock::time_point now) { last_read_ = now; }

private:
    std::size_t max_reads_;
    Clock::duration quiet_spell_;
    Clock::time_point last_read_{};
};

}  // namespace ipoibd::host
