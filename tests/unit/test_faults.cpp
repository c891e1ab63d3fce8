// The soft switch's fault injector (fabric/faults.h): rules parsed with
// named errors; loss, corruption, duplication, reordering and delay at their
// rates, deterministic per seed, every fault counted; a switch with faults
// sends no route hints.
#include <gtest/gtest.h>

#include <map>

#include "fabric/faults.h"

namespace ipoibd::fabric {
namespace {

using namespace std::chrono_literals;
using Clock = FaultInjector::Clock;
using Wire = std::vector<std::uint8_t>;

TEST(FaultRule, ParsesWhatIsGivenAndNamesWhatIsWrong) {
    auto r = parse_fault_rule("port=3,loss=5%,dup=0.01,reorder=2%,corrupt=0.1%,delay=20ms");
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->port, std::optional<std::uint8_t>(3));
    EXPECT_DOUBLE_EQ(r->loss, 0.05);
    EXPECT_DOUBLE_EQ(r->dup, 0.01);
    EXPECT_DOUBLE_EQ(r->reorder, 0.02);
    EXPECT_DOUBLE_EQ(r->corrupt, 0.001);
    EXPECT_EQ(r->delay, 20ms);
    struct Case {
        const char* spec;
        const char* error;
    };
    const Case bad[] = {
        {"loss=150%", "loss: must be between 0 and 100%"},
        {"loss=x", "loss 'x': not a number"},
        {"port=0,loss=1%", "port '0': a switch port, 1..254"},
        {"jitter=5ms", "'jitter': not a fault (loss, corrupt, dup, reorder, delay, port)"},
        {"loss", "'loss': expected KEY=VALUE"},
        {"port=2", "no fault given (loss, corrupt, dup, reorder or delay)"},
        {"delay=1h", "delay: at most 10s"},
    };
    for (const Case& c : bad) {
        auto e = parse_fault_rule(c.spec);
        ASSERT_FALSE(e) << c.spec;
        EXPECT_EQ(e.error(), c.error) << c.spec;
    }
}

struct Out {
    std::vector<std::pair<std::uint8_t, Wire>> sent;
    FaultInjector::Send send() {
        return [this](std::uint8_t p, bytes d) { sent.emplace_back(p, Wire(d.begin(), d.end())); };
    }
};

Wire packet(std::uint32_t n) { return Wire{static_cast<std::uint8_t>(n >> 24), static_cast<std::uint8_t>(n >> 16),
                                           static_cast<std::uint8_t>(n >> 8), static_cast<std::uint8_t>(n), 0x5A}; }
std::uint32_t number(const Wire& w) {
    return (std::uint32_t{w[0]} << 24) | (std::uint32_t{w[1]} << 16) | (std::uint32_t{w[2]} << 8) | w[3];
}

TEST(FaultInjector, LossAtItsRateTheSameForTheSameSeedOnlyOnItsPort) {
    const auto run = [](std::uint64_t seed) {
        FaultInjector f({*parse_fault_rule("port=2,loss=5%")}, seed);
        Out o;
        const auto now = Clock::time_point{} + 1h;
        for (std::uint32_t i = 0; i < 20000; ++i) f.out(i % 2 ? 2 : 3, packet(i), now, o.send());
        return std::make_pair(o.sent, f.counters().lost);
    };
    const auto [sent, lost] = run(7);
    EXPECT_GT(lost, 350u);  // 5% of 10,000 = 500
    EXPECT_LT(lost, 650u);
    EXPECT_EQ(sent.size(), 20000 - lost);
    std::size_t to_3 = 0;
    for (const auto& [p, w] : sent) to_3 += p == 3;
    EXPECT_EQ(to_3, 10000u) << "port 3 has no rule";
    EXPECT_EQ(run(7).first, sent) << "deterministic for a seed";
    EXPECT_NE(run(8).first, sent);
}

TEST(FaultInjector, DuplicationAndCorruption) {
    FaultInjector f({*parse_fault_rule("dup=100%,corrupt=100%")}, 1);
    Out o;
    f.out(1, packet(0x01020304), Clock::time_point{} + 1h, o.send());
    ASSERT_EQ(o.sent.size(), 2u);
    EXPECT_EQ(o.sent[0].second, o.sent[1].second);
    int bits = 0;
    const Wire original = packet(0x01020304);
    for (std::size_t i = 0; i < original.size(); ++i) bits += __builtin_popcount(original[i] ^ o.sent[0].second[i]);
    EXPECT_EQ(bits, 1) << "one bit flipped";
    EXPECT_EQ(f.counters().duplicated, 1u);
    EXPECT_EQ(f.counters().corrupted, 1u);
}

TEST(FaultInjector, ReorderedPacketsArriveOnceEachAndOutOfOrder) {
    FaultInjector f({*parse_fault_rule("reorder=20%")}, 3);
    Out o;
    auto now = Clock::time_point{} + 1h;
    for (std::uint32_t i = 0; i < 1000; ++i) f.out(4, packet(i), now, o.send());
    f.tick(now + 100ms, o.send());  // whatever is still held
    ASSERT_EQ(o.sent.size(), 1000u);
    std::map<std::uint32_t, int> seen;
    std::size_t inversions = 0;
    for (std::size_t i = 0; i < o.sent.size(); ++i) {
        ++seen[number(o.sent[i].second)];
        if (i > 0 && number(o.sent[i].second) < number(o.sent[i - 1].second)) ++inversions;
    }
    EXPECT_EQ(seen.size(), 1000u);
    EXPECT_GT(inversions, 100u);
    EXPECT_GT(f.counters().reordered, 100u);
}

TEST(FaultInjector, DelayedPacketsWaitForTheirTime) {
    FaultInjector f({*parse_fault_rule("port=5,delay=20ms")}, 1);
    Out o;
    const auto t0 = Clock::time_point{} + 1h;
    f.out(5, packet(1), t0, o.send());
    EXPECT_TRUE(o.sent.empty());
    f.tick(t0 + 10ms, o.send());
    EXPECT_TRUE(o.sent.empty());
    f.tick(t0 + 20ms, o.send());
    ASSERT_EQ(o.sent.size(), 1u);
    EXPECT_EQ(f.counters().delayed, 1u);
}

}  // namespace
}  // namespace ipoibd::fabric
