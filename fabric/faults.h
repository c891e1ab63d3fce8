// Faults the soft switch injects on purpose (ibfabricd --fault), so that
// the reliable service and everything above it is tested against a fabric
// that loses, duplicates, reorders, delays and corrupts packets. There is
// no netem in the test kernel; this is how loss is made.
//
// A rule applies to the IBA packets the switch sends out of a port (to the
// host on that port; every port when none is named): link packets and the
// soft fabric's control datagrams are never touched. For a link, give a
// rule for each of its two ports. Per packet, in this order, each with its
// probability:
//   loss     the packet is dropped;
//   corrupt  one bit of it is flipped (the receiver's CRC checks drop it);
//   dup      it is sent twice;
//   reorder  it is held and sent right after the next packet to that port
//            (or at the next tick, at most one tick late, when none comes);
//   delay    it is held for `delay` (released at the next event or tick
//            after that: with a 50 ms tick, up to 50 ms more).
// Decisions come from one pseudo-random generator seeded at start
// (--fault-seed): the same packets in the same order meet the same faults.
// Every injected fault is counted. With faults the switch sends no route
// hints: every packet must pass it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/byte_io.h"
#include "common/counters.h"
#include "common/expected.h"

namespace ipoibd::fabric {

struct FaultRule {
    std::optional<std::uint8_t> port;  // none: every port
    double loss = 0, corrupt = 0, dup = 0, reorder = 0;  // probabilities, 0..1
    std::chrono::milliseconds delay{0};
    bool operator==(const FaultRule&) const = default;
};

// "port=3,loss=5%,dup=1%,reorder=2%,corrupt=0.1%,delay=20ms": any subset,
// percentages 0-100 (or fractions 0-1 without '%'). The error names the part
// that is wrong.
expected<FaultRule, std::string> parse_fault_rule(std::string_view spec);

struct FaultCounters {
    std::uint64_t lost = 0;
    std::uint64_t corrupted = 0;
    std::uint64_t duplicated = 0;
    std::uint64_t reordered = 0;
    std::uint64_t delayed = 0;
    std::uint64_t hold_full = 0;  // a packet to hold with kMaxHeld held already: sent at once
};
// As "fault_lost", ...
void visit(const FaultCounters& c, CounterSink& out);

class FaultInjector {
public:
    using Clock = std::chrono::steady_clock;
    using Send = std::function<void(std::uint8_t port, bytes datagram)>;
    static constexpr std::size_t kMaxHeld = 4096;  // per port
    static constexpr std::chrono::milliseconds kReorderHold{50};

    FaultInjector(std::vector<FaultRule> rules, std::uint64_t seed);

    bool active() const { return !rules_.empty(); }
    // A packet for `port`: sends it (through `send`) now, later, twice,
    // damaged or not at all, as the rules say; then what was held for the
    // port behind it.
    void out(std::uint8_t port, bytes datagram, Clock::time_point now, const Send& send);
    // Sends held packets that are due (every tick).
    void tick(Clock::time_point now, const Send& send);
    const FaultCounters& counters() const { return counters_; }

private:
    struct Held {
        Clock::time_point due;
        bool reorder;
        std::vector<std::uint8_t> packet;
    };
    const FaultRule* rule_for(std::uint8_t port) const;
    bool chance(double p);
    void release(std::uint8_t port, Clock::time_point now, bool behind_a_packet, const Send& send);

    std::vector<FaultRule> rules_;
    std::mt19937_64 random_;
    std::array<std::deque<Held>, 256> held_;
    FaultCounters counters_;
};

}  // namespace ipoibd::fabric
