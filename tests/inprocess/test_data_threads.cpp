// Data threads ([daemon] data-threads = 2, interface/data_worker.h) with
// whole nodes in one process (node_harness.h), over the soft fabric (the
// memory fabric's ports have no send queues of their own). Each fake host
// offers a second queue; a packet injected there is one the kernel hashed
// to the data thread's queue. The event loop runs on the test's thread,
// the data threads on their own.
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/inprocess/node_harness.h"

namespace ipoibd::inprocess {
namespace {

using ipoib::test::icmp_echo_v4;
using Packet = std::vector<std::uint8_t>;

constexpr std::uint64_t kGuidA = 0x0002c90300d30001ULL;
constexpr std::uint64_t kGuidB = 0x0002c90300d30002ULL;

bool received(const TestNode& n, const Packet& packet) {
    return n.take_written([&](const Packet& p) { return p == packet; }).has_value();
}

class DataThreads : public ::testing::Test {
protected:
    void SetUp() override {
        fabric_ = std::make_unique<Fabric>(FabricKind::soft);
        fabric_->host_queues = 2;
        fabric_->tune_config = [](config::DaemonConfig& c) {
            c.daemon.data_threads = 2;
            c.daemon.busy_poll = std::chrono::milliseconds(1);  // its windows show traffic() calls
        };
        a_ = &fabric_->add_node("a", {"198.18.0.1/24"}, kGuidA);
        b_ = &fabric_->add_node("b", {"198.18.0.2/24"}, kGuidB);
        ASSERT_TRUE(fabric_->run_until([&] { return a_->link_up() && b_->link_up(); }));
    }

    // Injects `packet` on A's thread queue until B's host receives it, and
    // then until the thread has taken every copy it injected (sent it or
    // handed it back): a copy injected again while the first waited for
    // ARP and a path would otherwise be counted (fast_path, misses) after
    // the caller read the counters. Copies B gets late stay in its list.
    bool deliver_from_thread(const Packet& packet) {
        const auto taken = [&] {
            return a_->counter("data_threads", "fast_path") + a_->counter("data_threads", "misses");
        };
        const std::uint64_t before = taken();
        for (std::uint64_t attempt = 1; attempt <= 20; ++attempt) {
            a_->host->inject_queue(1, packet);
            if (fabric_->run_until([&] { return received(*b_, packet); }, 500ms))
                return fabric_->run_until([&] { return taken() == before + attempt; });
        }
        return false;
    }

    std::unique_ptr<Fabric> fabric_;
    TestNode* a_ = nullptr;
    TestNode* b_ = nullptr;
};

// The first datagram of a flow on the thread's queue finds no neighbour in
// the snapshot: handed back to the loop, which resolves B and sends it.
// Once the loop has published B, the thread sends the rest itself.
TEST_F(DataThreads, AThreadSendsWhatTheLoopResolvedAndHandsBackTheRest) {
    ASSERT_EQ(a_->interface().data_threads(), 2u);
    ASSERT_EQ(a_->host->queues_open(), 1u);
    EXPECT_EQ(a_->counter("data_threads", "threads"), 2u);
    ASSERT_TRUE(deliver_from_thread(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1)));
    EXPECT_GE(a_->counter("data_threads", "misses"), 1u);
    EXPECT_GE(a_->counter("data_threads", "miss_queue_passed"), 1u);

    const std::uint64_t fast = a_->counter("data_threads", "fast_path");
    const std::uint64_t misses = a_->counter("data_threads", "misses");
    std::vector<Packet> sent;
    for (std::uint16_t seq = 2; seq < 22; ++seq) {
        sent.push_back(icmp_echo_v4("198.18.0.1", "198.18.0.2", seq));
        ASSERT_TRUE(a_->host->inject_queue(1, sent.back()));
    }
    std::size_t arrived = 0;
    ASSERT_TRUE(fabric_->run_until([&] {
        for (auto it = sent.begin(); it != sent.end();) {
            if (received(*b_, *it)) {
                it = sent.erase(it);
                ++arrived;
            } else {
                ++it;
            }
        }
        return sent.empty();
    })) << arrived << " of 20 arrived";
    EXPECT_EQ(a_->counter("data_threads", "fast_path"), fast + 20);
    EXPECT_EQ(a_->counter("data_threads", "misses"), misses);
    EXPECT_EQ(a_->counter("data_threads", "miss_queue_dropped"), 0u);
    EXPECT_EQ(a_->counter("data_threads", "tun_rx_packets"), fast + misses + 20);  // every read sent or handed back
}

// The loop's handler of the miss queue: a wake-up that finds nothing
// waiting is not traffic (it does not open a busy-polling window); one
// that serves a datagram is. The nodes share one loop and still send a
// packet now and then (DAD, MLD, ...), which opens windows of its own: an
// attempt counts only when the loop was quiet before and after it.
TEST_F(DataThreads, AWakeUpWithNoMissesIsNotTraffic) {
    const int fd = a_->interface().miss_fd();
    ASSERT_GE(fd, 0);
    const auto windows = [&] { return a_->counter("busy_poll", "windows"); };
    bool judged = false;
    for (int attempt = 0; attempt < 20 && !judged; ++attempt) {
        const std::uint64_t before = windows();
        fabric_->run_for(20ms);
        if (windows() != before) continue;  // traffic: not quiet yet
        const std::uint64_t one = 1;
        ASSERT_EQ(::write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
        fabric_->run_for(10ms);
        const std::uint64_t after = windows();
        fabric_->run_for(20ms);
        if (windows() != after) continue;
        EXPECT_EQ(after, before) << "attempt " << attempt;
        judged = true;
    }
    ASSERT_TRUE(judged) << "the loop was never quiet for 50 ms";
    // A datagram the thread hands back (B is not resolved yet): traffic.
    const std::uint64_t before = windows();
    ASSERT_TRUE(deliver_from_thread(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1)));
    EXPECT_GT(windows(), before);
}

}  // namespace
}  // namespace ipoibd::inprocess
