// Data threads (interface/data_worker.h): the miss queue's bounds, the
// fast-path test, the flow-to-queue hash, and a worker on a thread of its
// own against a fake host queue and send queue while the test thread
// publishes snapshots (run under ThreadSanitizer by scripts/test.sh).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "host/tun_port.h"
#include "interface/data_worker.h"
#include "ipoib/forwarding.h"

namespace ipoibd::iface {
namespace {

using Bytes = std::vector<std::uint8_t>;

// An IPv4 UDP datagram from 198.18.0.1:sport to `dst`:dport.
Bytes udp4(std::array<std::uint8_t, 4> dst, std::uint16_t sport = 1000, std::uint16_t dport = 2000,
           std::size_t payload = 8, std::uint8_t proto = 17) {
    Bytes p(28 + payload, 0);
    p[0] = 0x45;
    const auto total = static_cast<std::uint16_t>(p.size());
    p[2] = static_cast<std::uint8_t>(total >> 8);
    p[3] = static_cast<std::uint8_t>(total);
    p[8] = 64;
    p[9] = proto;
    p[12] = 198, p[13] = 18, p[14] = 0, p[15] = 1;
    std::copy(dst.begin(), dst.end(), p.begin() + 16);
    p[20] = static_cast<std::uint8_t>(sport >> 8), p[21] = static_cast<std::uint8_t>(sport);
    p[22] = static_cast<std::uint8_t>(dport >> 8), p[23] = static_cast<std::uint8_t>(dport);
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    const auto c = static_cast<std::uint16_t>(~sum);
    p[10] = static_cast<std::uint8_t>(c >> 8), p[11] = static_cast<std::uint8_t>(c);
    return p;
}

TEST(FastPath, OnlyWhatTheEngineWouldSendAsItIs) {
    const IpAddress peer = IpAddress::v4({198, 18, 0, 2});
    const auto fp = ipoib::fast_path_destination(udp4({198, 18, 0, 2}), 2044);
    ASSERT_TRUE(fp);
    EXPECT_EQ(fp->destination, peer);
    EXPECT_EQ(fp->length, 36u);
    Bytes padded = udp4({198, 18, 0, 2});
    padded.resize(padded.size() + 5, 0xEE);  // bytes past the datagram's length
    EXPECT_EQ(ipoib::fast_path_destination(padded, 2044)->length, 36u);
    EXPECT_FALSE(ipoib::fast_path_destination(udp4({198, 18, 0, 2}, 1, 2, 3000), 2044));  // too big for UD
    EXPECT_FALSE(ipoib::fast_path_destination(udp4({224, 0, 0, 5}), 2044));               // multicast
    EXPECT_FALSE(ipoib::fast_path_destination(udp4({255, 255, 255, 255}), 2044));          // broadcast
    EXPECT_FALSE(ipoib::fast_path_destination(udp4({198, 18, 0, 2}, 1, 2, 8, 2), 2044));  // IGMP
    Bytes truncated = udp4({198, 18, 0, 2});
    truncated.resize(10);
    EXPECT_FALSE(ipoib::fast_path_destination(truncated, 2044));
    EXPECT_FALSE(ipoib::fast_path_destination({}, 2044));
}

TEST(FlowQueue, BothDirectionsOfAFlowPickTheSameQueueAndFlowsSpread) {
    std::set<std::size_t> used;
    for (std::uint16_t port = 1000; port < 1064; ++port) {
        const Bytes out = udp4({198, 18, 0, 2}, port, 5201);
        Bytes back = udp4({198, 18, 0, 1}, 5201, port);
        back[12] = 198, back[13] = 18, back[14] = 0, back[15] = 2;
        const std::size_t q = host::flow_queue(out, false, 4);
        EXPECT_EQ(q, host::flow_queue(back, false, 4)) << port;
        EXPECT_LT(q, 4u);
        used.insert(q);
    }
    EXPECT_EQ(used.size(), 4u);
    EXPECT_EQ(host::flow_queue(udp4({198, 18, 0, 2}), false, 1), 0u);
    EXPECT_EQ(host::flow_queue(Bytes{0x00}, false, 4), 0u);
}

// write_queue(): a flow's queue, but the loop's (0) for an echo request,
// which the host answers as it is written.
TEST(FlowQueue, EchoRequestsAreWrittenOnTheLoopsQueue) {
    // Sources whose flows the hash alone puts on queue 1 of 2.
    std::vector<Bytes> other;
    for (std::uint8_t h = 2; h < 40 && other.size() < 3; ++h) {
        Bytes echo = udp4({198, 18, 0, 1}, 0, 0, 8, 1);
        echo[15] = h;
        echo[20] = 8;  // echo request
        if (host::flow_queue(echo, false, 2) == 1) other.push_back(echo);
    }
    ASSERT_EQ(other.size(), 3u);
    for (Bytes e : other) {
        EXPECT_EQ(host::write_queue(e, false, 2), 0u);
        e[20] = 0;  // an echo reply: the host does not answer it
        EXPECT_EQ(host::write_queue(e, false, 2), 1u);
        e[20] = 8;
        e[6] = 0x00, e[7] = 0x10;  // a later fragment: no ICMP header in it
        EXPECT_EQ(host::write_queue(e, false, 2), host::flow_queue(e, false, 2));
        e[7] = 0x00;
        Bytes with_header(host::VirtioNetHeader::size, 0);  // the offload header first
        with_header.insert(with_header.end(), e.begin(), e.end());
        EXPECT_EQ(host::write_queue(with_header, true, 2), 0u);
        EXPECT_EQ(host::write_queue(e, false, 1), 0u);
    }
    // IPv6: an echo request (type 128) whatever the hash; UDP by its flow.
    Bytes v6(40 + 8, 0);
    v6[0] = 0x60, v6[5] = 8, v6[6] = 58, v6[7] = 64;
    v6[8] = 0x20, v6[9] = 0x01, v6[10] = 0x0d, v6[11] = 0xb8, v6[23] = 1;
    v6[24] = 0x20, v6[25] = 0x01, v6[26] = 0x0d, v6[27] = 0xb8;
    std::size_t echo_other = 0;
    for (std::uint8_t h = 2; h < 40; ++h) {
        v6[39] = h;
        v6[40] = 128;
        echo_other += host::flow_queue(v6, false, 2) == 1;
        EXPECT_EQ(host::write_queue(v6, false, 2), 0u);
        v6[40] = 129;  // an echo reply
        EXPECT_EQ(host::write_queue(v6, false, 2), host::flow_queue(v6, false, 2));
    }
    EXPECT_GT(echo_other, 0u);
    const Bytes udp = udp4({198, 18, 0, 2}, 1000, 2000);
    EXPECT_EQ(host::write_queue(udp, false, 4), host::flow_queue(udp, false, 4));
}

TEST(MissQueue, BoundedCountedAndReadableWhileItemsWait) {
    MissQueue q;
    ASSERT_GE(q.fd(), 0);
    const auto readable = [&] {
        pollfd p{.fd = q.fd(), .events = POLLIN, .revents = 0};
        return ::poll(&p, 1, 0) == 1;
    };
    EXPECT_FALSE(readable());
    const Bytes d = udp4({198, 18, 0, 2});
    EXPECT_TRUE(q.push_packet(d, IpAddress::v4({198, 18, 0, 9})));
    EXPECT_TRUE(q.push_touch(IpAddress::v4({198, 18, 0, 3})));
    EXPECT_TRUE(readable());
    int packets = 0, touches = 0;
    q.drain(
        [&](bytes p, const std::optional<IpAddress>& hop) {
            ++packets;
            EXPECT_EQ(Bytes(p.begin(), p.end()), d);
            EXPECT_EQ(hop, IpAddress::v4({198, 18, 0, 9}));
        },
        [&](const IpAddress& ip) {
            ++touches;
            EXPECT_EQ(ip, IpAddress::v4({198, 18, 0, 3}));
        });
    EXPECT_EQ(packets, 1);
    EXPECT_EQ(touches, 1);
    EXPECT_FALSE(readable());
    for (std::size_t i = 0; i < MissQueue::kMaxItems; ++i) ASSERT_TRUE(q.push_packet(d, std::nullopt));
    EXPECT_FALSE(q.push_packet(d, std::nullopt));
    EXPECT_FALSE(q.push_touch(IpAddress::v4({198, 18, 0, 3})));
    EXPECT_EQ(q.dropped(), 2u);
    std::size_t n = 0;
    q.drain([&](bytes, const std::optional<IpAddress>&) { ++n; }, [](const IpAddress&) {});
    EXPECT_EQ(n, MissQueue::kMaxItems);
    // Bytes are bounded too.
    const Bytes big(60000, 0x45);
    std::size_t taken = 0;
    while (q.push_packet(big, std::nullopt)) ++taken;
    EXPECT_EQ(taken, MissQueue::kMaxBytes / big.size());
}

TEST(ReadPacing, OneReadAfterAQuietSpellAWholeBatchWithinIt) {
    using namespace std::chrono_literals;
    const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
    host::ReadPacing p(64, 100us);
    EXPECT_EQ(p.reads(t0), 1u);  // nothing read yet: quiet
    p.read_at(t0);
    struct Case {
        std::chrono::microseconds after;
        std::size_t reads;
    };
    for (const Case c : {Case{0us, 64}, Case{99us, 64}, Case{100us, 1}, Case{5000us, 1}})
        EXPECT_EQ(p.reads(t0 + c.after), c.reads) << c.after.count() << " us after a read";
    p.read_at(t0 + 5ms);  // a read resets the spell
    EXPECT_EQ(p.reads(t0 + 5ms + 50us), 64u);
    EXPECT_EQ(host::ReadPacing(0).reads(t0), 1u);  // at least one read
}

// A host queue fed by the test: datagrams wait in a list, an eventfd says so.
class FakeQueue final : public host::HostQueue {
public:
    FakeQueue() : event_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
    int fd() const override { return event_.get(); }
    void put(Bytes d) {
        {
            std::lock_guard g(lock_);
            waiting_.push_back(std::move(d));
        }
        const std::uint64_t one = 1;
        [[maybe_unused]] auto r = ::write(event_.get(), &one, sizeof one);
    }
    std::size_t read_batch(std::size_t max_reads, const Emit& emit) override {
        std::size_t unset = 0;
        first_max_reads.compare_exchange_strong(unset, max_reads);
        std::uint64_t n = 0;
        [[maybe_unused]] auto r = ::read(event_.get(), &n, sizeof n);
        std::vector<Bytes> batch;
        {
            std::lock_guard g(lock_);
            while (!waiting_.empty() && batch.size() < max_reads) {
                batch.push_back(std::move(waiting_.front()));
                waiting_.erase(waiting_.begin());
            }
            if (!waiting_.empty()) {
                const std::uint64_t one = 1;
                r = ::write(event_.get(), &one, sizeof one);
            }
        }
        for (const Bytes& b : batch) emit(b, std::nullopt);
        return batch.size();
    }
    void routes_changed() override { ++routes_changed_; }
    expected<void, std::string> set_attached(bool a) override {
        attached = a;
        return {};
    }
    std::atomic<bool> attached{true};
    void visit_counters(CounterSink& out) const override { out.counter("rx_packets", 0); }
    std::atomic<int> routes_changed_{0};
    std::atomic<std::size_t> first_max_reads{0};  // of the first read_batch() call

private:
    UniqueFd event_;
    std::mutex lock_;
    std::vector<Bytes> waiting_;
};

// Records what the worker sent, for the test thread to read.
class FakeSend final : public transport::UdSendQueue {
public:
    struct Sent {
        transport::SendAs as;
        std::uint16_t dlid;
        std::uint32_t qpn;
        Bytes frame;
    };
    std::size_t send(const transport::SendAs& as, std::span<const transport::SendRequest> requests) override {
        std::lock_guard g(lock);
        if (refuse_next > 0) {  // as a queue that could not make its QP (verbs) or refused them
            refuse_next -= static_cast<int>(requests.size());
            counters_.add(counters_.failed, requests.size());
            return 0;
        }
        for (const auto& r : requests) sent.push_back({as, r.ah.dlid, r.remote_qpn, Bytes(r.payload.begin(), r.payload.end())});
        counters_.add(counters_.packets, requests.size());
        if (!requests.empty()) has_sent = true;
        return requests.size();
    }
    // A kernel that is full: once something was sent, the first `refusals`
    // flushes leave it waiting (pending()), with fd() writable, as a
    // socket's is once the kernel has room again. Nothing is pending before
    // the first send: a worker that flushed an empty queue must not use up
    // the refusals (the test would then stop it before the datagram).
    void flush() override {
        ++flushes;
        if (has_sent && refusals > 0) --refusals;
    }
    bool pending() const override { return has_sent && refusals > 0; }
    int fd() const override { return writable_.get(); }
    const transport::SendQueueCounters& counters() const override { return counters_; }
    std::mutex lock;
    std::vector<Sent> sent;
    std::atomic<int> flushes{0};
    std::atomic<int> refusals{0};
    std::atomic<int> refuse_next{0};  // requests send() takes none of
    std::atomic<bool> has_sent{false};

private:
    transport::SendQueueCounters counters_;
    UniqueFd writable_{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
};

std::shared_ptr<ipoib::ForwardingSnapshot> snapshot_with(const IpAddress& ip, std::uint32_t qpn, std::uint16_t dlid,
                                                         std::chrono::steady_clock::time_point quiet_until) {
    auto s = std::make_shared<ipoib::ForwardingSnapshot>();
    s->up = true;
    s->datagram_mtu = 2044;
    s->as = {.qpn = 0x48, .qkey = 0x0B1B, .pkey = 0xFFFF};
    ipoib::ForwardingEntry e{.ip = ip, .to = {}, .ah = {.dlid = dlid}, .quiet_until = quiet_until};
    e.to.qpn = qpn;
    s->index.emplace(ip, 0);
    s->entries.push_back(e);
    s->reported = std::make_unique<std::atomic<bool>[]>(1);
    return s;
}

// Until `done` holds; false after 10 s (a bound for a stuck worker, far
// above what a loaded machine or ThreadSanitizer takes).
bool wait_for(const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
}

// A worker's counters by name.
std::map<std::string, std::uint64_t> counters_of(const DataWorker& w) {
    struct Collect final : CounterSink {
        std::map<std::string, std::uint64_t> v;
        void counter(std::string_view n, std::uint64_t x) override { v[std::string(n)] = x; }
    } c;
    w.visit_counters(c);
    return c.v;
}

// A worker on a fake TUN queue and send queue, with a snapshot that covers
// `peer` (QPN 0x99, LID 7) for the next hour; a test sets its fakes up, then
// starts it.
struct DataWorkerOnFakes : ::testing::Test {
    std::unique_ptr<FakeQueue> queue_ = std::make_unique<FakeQueue>();
    std::unique_ptr<FakeSend> send_ = std::make_unique<FakeSend>();
    FakeQueue& q = *queue_;
    FakeSend& s = *send_;
    const IpAddress peer = IpAddress::v4({198, 18, 0, 2});
    const std::chrono::steady_clock::time_point later = std::chrono::steady_clock::now() + std::chrono::hours(1);
    std::shared_ptr<DataPlane> plane = std::make_shared<DataPlane>();
    DataWorker w{std::move(queue_), std::move(send_), plane, 64};
    DataWorkerOnFakes() { plane->publish(snapshot_with(peer, 0x99, 7, later)); }
};

TEST_F(DataWorkerOnFakes, SendsWhatTheSnapshotCoversAndHandsBackTheRest) {
    ASSERT_TRUE(w.start());

    q.put(udp4({198, 18, 0, 2}));
    q.put(udp4({198, 18, 0, 3}));  // not in the snapshot
    ASSERT_TRUE(wait_for([&] { return plane->misses().passed() == 1; }));
    EXPECT_EQ(q.first_max_reads.load(), 1u);  // a quiet start: one read, the second on the next wake-up
    ASSERT_TRUE(wait_for([&] {
        std::lock_guard g(s.lock);
        return s.sent.size() == 1;
    }));
    {
        std::lock_guard g(s.lock);
        EXPECT_EQ(s.sent[0].as.qpn, 0x48u);
        EXPECT_EQ(s.sent[0].qpn, 0x99u);
        EXPECT_EQ(s.sent[0].dlid, 7);
        // The IPoIB frame: EtherType 0x0800, reserved, the datagram.
        EXPECT_EQ(s.sent[0].frame[0], 0x08);
        EXPECT_EQ(s.sent[0].frame[1], 0x00);
        EXPECT_EQ(Bytes(s.sent[0].frame.begin() + 4, s.sent[0].frame.end()), udp4({198, 18, 0, 2}));
    }
    int missed = 0;
    plane->misses().drain([&](bytes p, const std::optional<IpAddress>&) { missed += p[19] == 3; },
                          [](const IpAddress&) { ADD_FAILURE() << "no touch expected"; });
    EXPECT_EQ(missed, 1);

    // Past its quiet time the entry is still used, and reported once.
    plane->publish(snapshot_with(peer, 0x99, 7, std::chrono::steady_clock::now()));
    for (int i = 0; i < 3; ++i) q.put(udp4({198, 18, 0, 2}));
    ASSERT_TRUE(wait_for([&] {
        std::lock_guard g(s.lock);
        return s.sent.size() == 4;
    }));
    int touches = 0;
    plane->misses().drain([](bytes, const std::optional<IpAddress>&) { ADD_FAILURE() << "no miss expected"; },
                          [&](const IpAddress& ip) { touches += ip == peer; });
    EXPECT_EQ(touches, 1);

    // Snapshots replaced while the worker sends (ThreadSanitizer's case):
    // every datagram is sent or handed back, none lost.
    std::thread feeder([&] {
        for (int i = 0; i < 500; ++i) q.put(udp4({198, 18, 0, static_cast<std::uint8_t>(i % 2 ? 2 : 3)}));
    });
    for (int i = 0; i < 200; ++i) plane->publish(snapshot_with(peer, 0x99, static_cast<std::uint16_t>(i), later));
    feeder.join();
    std::size_t handed_back = 0;
    ASSERT_TRUE(wait_for([&] {
        plane->misses().drain([&](bytes, const std::optional<IpAddress>&) { ++handed_back; }, [](const IpAddress&) {});
        std::lock_guard g(s.lock);
        return s.sent.size() + handed_back == 4 + 500;
    }));
    EXPECT_EQ(handed_back, 250u);
    w.routes_changed();
    EXPECT_EQ(q.routes_changed_.load(), 1);

    // Disabled (connected mode): the queue detached, nothing read; enabled
    // again: what waited is read.
    ASSERT_TRUE(w.set_enabled(false));
    EXPECT_FALSE(q.attached);
    q.put(udp4({198, 18, 0, 2}));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    {
        std::lock_guard g(s.lock);
        EXPECT_EQ(s.sent.size(), 4u + 250u);
    }
    ASSERT_TRUE(w.set_enabled(true));
    EXPECT_TRUE(q.attached);
    ASSERT_TRUE(wait_for([&] {
        std::lock_guard g(s.lock);
        return s.sent.size() == 4u + 250u + 1u;
    }));
    w.stop();
    w.stop();  // idempotent

    const auto c = counters_of(w);
    EXPECT_EQ(c.at("fast_path"), 255u);
    EXPECT_EQ(c.at("misses"), 251u);
    EXPECT_EQ(c.at("touches"), 1u);
    EXPECT_EQ(c.at("tx_packets"), 255u);
    EXPECT_TRUE(c.contains("tun_rx_packets"));
}

// A datagram the send queue would not take (refused, or failed: an HCA
// queue without its QP) goes back to the loop, which sends it from the
// interface's QP or drops it with its own reason: none is lost unseen.
TEST_F(DataWorkerOnFakes, WhatTheSendQueueWouldNotTakeGoesBackToTheLoop) {
    s.refuse_next = 2;
    ASSERT_TRUE(w.start());
    for (int i = 0; i < 3; ++i) q.put(udp4({198, 18, 0, 2}));
    ASSERT_TRUE(wait_for([&] {
        std::lock_guard g(s.lock);
        return s.sent.size() == 1 && plane->misses().passed() == 2;
    }));
    w.stop();
    int back = 0;
    plane->misses().drain([&](bytes p, const std::optional<IpAddress>&) { back += Bytes(p.begin(), p.end()) == udp4({198, 18, 0, 2}); },
                          [](const IpAddress&) {});
    EXPECT_EQ(back, 2);
    const auto c = counters_of(w);
    EXPECT_EQ(c.at("fast_path"), 1u);
    EXPECT_EQ(c.at("misses"), 2u);
    EXPECT_EQ(c.at("tx_failed"), 2u);
}

// What the kernel would not take is flushed again when the socket is
// writable, with no new datagram to wake the worker.
TEST_F(DataWorkerOnFakes, SendsTheKernelRefusedLeaveWhenItHasRoom) {
    s.refusals = 3;
    ASSERT_TRUE(w.start());
    q.put(udp4({198, 18, 0, 2}));
    ASSERT_TRUE(wait_for([&] { return s.refusals.load() == 0; }));
    EXPECT_GE(s.flushes.load(), 3);
    w.stop();
    std::lock_guard g(s.lock);
    EXPECT_EQ(s.sent.size(), 1u);
}

// Busy polling ([daemon] busy-poll): off, a worker sleeps between
// datagrams; on, it polls without sleeping for the window after each read,
// then sleeps again. Set from another thread while the worker runs.
TEST_F(DataWorkerOnFakes, BusyPollsForTheWindowAfterADatagramThenSleeps) {
    using namespace std::chrono_literals;
    ASSERT_TRUE(w.start());
    const auto sent = [&](std::size_t n) {
        return wait_for([&] {
            std::lock_guard g(s.lock);
            return s.sent.size() == n;
        });
    };

    q.put(udp4({198, 18, 0, 2}));
    ASSERT_TRUE(sent(1));
    std::this_thread::sleep_for(20ms);
    auto c = counters_of(w);
    EXPECT_EQ(c.at("busy_poll_windows"), 0u);  // off by default: it slept
    EXPECT_EQ(c.at("busy_poll_polls"), 0u);

    w.set_busy_poll(300ms);
    q.put(udp4({198, 18, 0, 2}));
    ASSERT_TRUE(sent(2));
    // Nothing more comes, and it polls on: an empty poll, one window. (Only
    // one is sure: on a loaded machine the first yield may take a time
    // slice, and the window ends there, yielded_away.)
    ASSERT_TRUE(wait_for([&] { return counters_of(w).at("busy_poll_empty_polls") >= 1; }));
    EXPECT_EQ(counters_of(w).at("busy_poll_windows"), 1u);
    // Past the window it sleeps: the polls stop (none for 200 ms, where a
    // polling worker polls thousands of times). Waited for, not timed: a
    // loaded machine or ThreadSanitizer may hold the worker between its
    // check and its count for long.
    const auto polls_stop = [&](std::chrono::steady_clock::duration within) {
        const auto give_up = std::chrono::steady_clock::now() + within;
        auto polls = counters_of(w).at("busy_poll_polls");
        do {
            std::this_thread::sleep_for(200ms);
            const auto now_polls = counters_of(w).at("busy_poll_polls");
            if (now_polls == polls) return true;
            polls = now_polls;
        } while (std::chrono::steady_clock::now() < give_up);
        return false;
    };
    EXPECT_TRUE(polls_stop(10s));

    // Turned off in a window of a minute: it sleeps (well before the
    // window would end).
    w.set_busy_poll(60s);
    q.put(udp4({198, 18, 0, 2}));
    ASSERT_TRUE(sent(3));
    ASSERT_TRUE(wait_for([&] { return counters_of(w).at("busy_poll_windows") == 2; }));
    w.set_busy_poll(0s);
    EXPECT_TRUE(polls_stop(10s));
    w.stop();
    c = counters_of(w);
    EXPECT_EQ(c.at("fast_path"), 3u);
    EXPECT_EQ(c.at("busy_poll_windows"), 2u);
}

// A TUN queue that fails: poll() reports POLLERR on it (what a TUN queue
// whose device went away reports) or POLLHUP. A pipe stands in: its write
// end with the reader closed reports POLLERR, its read end with the writer
// closed POLLHUP. The worker counts it once and stops watching the queue,
// rather than spinning on an fd that is always ready; it still answers
// stop() and lets go of the queue.
class FailedQueue final : public host::HostQueue {
public:
    explicit FailedQueue(bool error) {
        int p[2];
        if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return;
        kept_.reset(p[error ? 1 : 0]);
        ::close(p[error ? 0 : 1]);
    }
    int fd() const override { return kept_.get(); }
    std::size_t read_batch(std::size_t, const Emit&) override {
        ++reads;
        return 0;
    }
    void routes_changed() override {}
    expected<void, std::string> set_attached(bool a) override {
        attached = a;
        return {};
    }
    void visit_counters(CounterSink& out) const override { out.counter("rx_packets", 0); }
    std::atomic<int> reads{0};
    std::atomic<bool> attached{true};

private:
    UniqueFd kept_;
};

TEST(DataWorker, AQueueThatFailsIsCountedOnceAndNoLongerWatched) {
    for (const bool error : {true, false}) {
        SCOPED_TRACE(error ? "POLLERR" : "POLLHUP");
        auto queue = std::make_unique<FailedQueue>(error);
        FailedQueue& q = *queue;
        ASSERT_GE(q.fd(), 0);
        pollfd p{.fd = q.fd(), .events = POLLIN, .revents = 0};
        ASSERT_EQ(::poll(&p, 1, 0), 1);
        ASSERT_NE(p.revents & (error ? POLLERR : POLLHUP), 0);
        auto plane = std::make_shared<DataPlane>();
        plane->publish(snapshot_with(IpAddress::v4({198, 18, 0, 2}), 0x99, 7,
                                     std::chrono::steady_clock::now() + std::chrono::hours(1)));
        DataWorker w(std::move(queue), std::make_unique<FakeSend>(), plane, 64);
        ASSERT_TRUE(w.start());
        ASSERT_TRUE(wait_for([&] { return counters_of(w).at("queue_errors") >= 1; }));
        // Still one a while later: the worker sleeps instead of polling the
        // failed queue again; it read nothing from it.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const auto c = counters_of(w);
        EXPECT_EQ(c.at("queue_errors"), 1u);
        EXPECT_EQ(c.at("wakeups"), 0u);
        EXPECT_EQ(q.reads.load(), 0);
        w.stop();
        EXPECT_FALSE(q.attached);  // a worker that ends lets go of its queue
    }
}

}  // namespace
}  // namespace ipoibd::iface
