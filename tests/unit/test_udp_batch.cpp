// UdpBatchSocket on loopback: runs of equal-size datagrams leave as one GSO
// message and arrive as one GRO message, cut back into the same datagrams
// in order; mixed sizes, oversize datagrams (alone and inside a run) and
// the counters.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "transport/soft/udp_batch.h"

namespace ipoibd::transport {
namespace {

using Wire = std::vector<std::uint8_t>;

Wire datagram(std::size_t size, std::uint8_t tag) {
    Wire w(size);
    for (std::size_t i = 0; i < size; ++i) w[i] = static_cast<std::uint8_t>(tag + i * 7);
    return w;
}

struct Pair {
    Pair() {
        const auto any = *parse_socket_address("127.0.0.1:0");
        a.emplace(*UdpBatchSocket::open(any, nullptr));
        b.emplace(*UdpBatchSocket::open(any, nullptr));
        to_b = b->local_address();
    }
    // Receives on B until `want` datagrams came or 2 s passed.
    std::vector<Wire> receive(std::size_t want) {
        std::vector<Wire> got;
        for (int round = 0; round < 200 && got.size() < want; ++round) {
            pollfd p{b->fd(), POLLIN, 0};
            if (::poll(&p, 1, 10) <= 0) continue;
            b->receive([&](bytes d, const SocketAddress& from) {
                EXPECT_EQ(from, a->local_address());
                got.emplace_back(d.begin(), d.end());
            });
        }
        return got;
    }
    std::optional<UdpBatchSocket> a, b;
    SocketAddress to_b;
};

TEST(UdpBatch, RunLeavesAsOneGsoMessageAndArrivesAsTheSameDatagrams) {
    Pair p;
    std::vector<Wire> sent;
    for (std::uint8_t i = 0; i < 20; ++i) sent.push_back(datagram(1500, i));
    sent.push_back(datagram(700, 99));  // the last of a run may be shorter
    for (const Wire& w : sent) ASSERT_TRUE(p.a->queue(bytes(w), &p.to_b));
    p.a->flush();
    EXPECT_EQ(p.a->queued(), 0u);
    EXPECT_EQ(p.a->counters().tx_datagrams, sent.size());
    EXPECT_GE(p.a->counters().tx_gso_runs, 1u);

    EXPECT_EQ(p.receive(sent.size()), sent);
    EXPECT_EQ(p.b->counters().rx_datagrams, sent.size());
    EXPECT_EQ(p.b->counters().rx_oversized, 0u);
    // Loopback keeps a GSO message whole up to a GRO socket (kernel >= 5.0).
    EXPECT_GE(p.b->counters().rx_gro_messages, 1u);
}

TEST(UdpBatch, MixedSizesArriveOneByOneInOrder) {
    Pair p;
    std::vector<Wire> sent;
    for (std::uint8_t i = 0; i < 40; ++i) sent.push_back(datagram(100 + std::size_t{i} % 5 * 301, i));
    sent.push_back(datagram(0, 0));  // empty datagrams are datagrams too
    sent.push_back(datagram(ib::kMaxPacketSize, 7));
    for (const Wire& w : sent) ASSERT_TRUE(p.a->queue(bytes(w), &p.to_b));
    p.a->flush();
    EXPECT_EQ(p.receive(sent.size()), sent);
    EXPECT_EQ(p.b->counters().rx_datagrams, sent.size());
}

// A data thread's send ring (second_sender): its datagrams leave from the
// first socket's address, and it takes none of the datagrams that come to
// that address: they wait for the first.
TEST(UdpBatch, ASecondSenderSendsFromTheSameAddressAndReceivesNothing) {
    Pair p;
    auto second = UdpBatchSocket::second_sender(*p.a);
    ASSERT_TRUE(second) << second.error().message();
    const Wire w = datagram(300, 5);
    ASSERT_TRUE(second->queue(bytes(w), &p.to_b));
    second->flush();
    const auto got = p.receive(1);  // checks the source: A's address
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], w);

    const SocketAddress to_a = p.a->local_address();
    ASSERT_TRUE(p.b->queue(bytes(w), &to_a));
    p.b->flush();
    pollfd pf{p.a->fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pf, 1, 2000), 1);
    EXPECT_EQ(second->receive([](bytes, const SocketAddress&) { ADD_FAILURE() << "the second sender received"; }), 0u);
    std::size_t at_a = 0;
    EXPECT_EQ(p.a->receive([&](bytes d, const SocketAddress&) { at_a += Wire(d.begin(), d.end()) == w; }), 1u);
    EXPECT_EQ(at_a, 1u);
}

TEST(UdpBatch, ReceiveStopsAtItsLimitAndKeepsTheRestInOrder) {
    Pair p;
    std::vector<Wire> sent;
    for (std::uint8_t i = 0; i < 30; ++i) sent.push_back(datagram(1000, i));
    for (const Wire& w : sent) ASSERT_TRUE(p.a->queue(bytes(w), &p.to_b));
    p.a->flush();
    std::vector<Wire> got;
    const auto keep = [&](bytes d, const SocketAddress&) { got.emplace_back(d.begin(), d.end()); };
    pollfd pf{p.b->fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pf, 1, 2000), 1);
    EXPECT_EQ(p.b->receive(keep, 7), 7u);
    EXPECT_EQ(got.size(), 7u);
    // The kernel may have had only part of the run ready; pending() then
    // covers what it had, and the rest is still in the socket.
    EXPECT_TRUE(p.b->pending());
    const std::size_t drained = p.b->drain_pending(keep);
    EXPECT_FALSE(p.b->pending());
    EXPECT_EQ(got.size(), 7u + drained);
    for (int round = 0; round < 200 && got.size() < sent.size(); ++round) {
        if (::poll(&pf, 1, 10) == 1) p.b->receive(keep, 4);
        while (p.b->pending()) p.b->receive(keep, 4);
    }
    EXPECT_EQ(got, sent);
}

// Sends `count` datagrams of `size` bytes in one message with UDP_SEGMENT
// from a plain socket (UdpBatchSocket refuses to queue oversize ones).
void send_raw_run(const SocketAddress& to, std::size_t size, std::size_t count) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(fd, 0);
    const Wire w(size * count, 0x5a);
    if (count > 1) {
        const int seg = static_cast<int>(size);
        ASSERT_EQ(::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg), 0);
    }
    ASSERT_EQ(::sendto(fd, w.data(), w.size(), 0, to.get(), to.length), static_cast<ssize_t>(w.size()));
    ::close(fd);
}

TEST(UdpBatch, OversizeDatagramsAreCountedAndTheNextOnesStillArrive) {
    Pair p;
    const std::size_t big = ib::kMaxPacketSize + 1;
    send_raw_run(p.to_b, big, 1);  // one datagram
    send_raw_run(p.to_b, big, 3);  // a run of three: all three dropped
    const Wire after = datagram(200, 3);
    ASSERT_TRUE(p.a->queue(bytes(after), &p.to_b));
    p.a->flush();

    std::vector<Wire> got;
    for (int round = 0; round < 200 && p.b->counters().rx_datagrams < 5; ++round) {
        pollfd pf{p.b->fd(), POLLIN, 0};
        if (::poll(&pf, 1, 10) <= 0) continue;
        p.b->receive([&](bytes d, const SocketAddress&) { got.emplace_back(d.begin(), d.end()); });
    }
    EXPECT_EQ(p.b->counters().rx_datagrams, 5u);
    EXPECT_EQ(p.b->counters().rx_oversized, 4u);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], after);
}

}  // namespace
}  // namespace ipoibd::transport
