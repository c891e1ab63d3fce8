// Send queues (transport/soft/soft_port.h): another thread sends as a
// port's UD QP through a FabricService on loopback. A program of its own
// (send_queue_tests) so that the ThreadSanitizer stage of scripts/test.sh
// builds this file alone, not the whole of the fabric's tests.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "fabric/fabric_service.h"
#include "transport/soft/soft_port.h"

namespace ipoibd::fabric {
namespace {

using transport::PortState;
using Wire = std::vector<std::uint8_t>;

FabricServiceOptions loopback_options() {
    FabricServiceOptions o;
    o.listen = *parse_socket_address("127.0.0.1:0");
    o.sw.num_ports = 8;
    return o;
}

// Send queues (soft_port.h, item 6): another thread sends as a port's UD QP
// from a send ring of its own on the port's socket while the port's thread
// sends and receives; with
// and without the fabric key (one session, one sequence: nothing refused
// as a replay).
class SendQueueTest : public ::testing::TestWithParam<bool> {};

TEST_P(SendQueueTest, AnotherThreadSendsAsTheQpAndTheAddressStillReceivesEverything) {
    const bool keyed = GetParam();
    auto options = loopback_options();
    FabricKeys keys;
    Secret k;
    k.bytes.fill(0x5A);
    keys.keys.push_back(k);
    if (keyed) options.keys = keys;
    auto opened = FabricService::open(std::move(options));
    ASSERT_TRUE(opened) << opened.error();
    FabricService& fabric = **opened;
    auto open_port = [&](std::uint64_t guid) {
        transport::SoftPortConfig c{.fabric = fabric.local_address(),
                                    .bind_to = *parse_socket_address("127.0.0.1:0"),
                                    .port_guid = guid,
                                    .node_description = "send queue test",
                                    .link_interval = std::chrono::milliseconds(10),
                                    // 10 s without a link packet, not 10 intervals: a
                                    // busy machine holds the loop up for more than 100 ms.
                                    .link_timeout_intervals = 1000};
        if (keyed) c.keys = keys;
        return transport::SoftPort::open(c);
    };
    auto a = open_port(0xA1);
    auto b = open_port(0xB2);
    ASSERT_TRUE(a && b);
    transport::SoftPort& pa = **a;
    transport::SoftPort& pb = **b;

    auto next_tick = Clock::now();
    const auto turn = [&] {
        pollfd fds[3] = {{.fd = fabric.fd(), .events = POLLIN}, {.fd = pa.fd(), .events = POLLIN}, {.fd = pb.fd(), .events = POLLIN}};
        ASSERT_GE(::poll(fds, 3, 5), 0);
        const auto now = Clock::now();
        if (fds[0].revents & POLLIN) fabric.on_readable(now);
        if (now >= next_tick) {
            fabric.tick(now);
            next_tick = now + FabricService::kTickInterval;
        }
        fabric.after_wakeup(now);
        pa.process();
        pb.process();
    };
    const auto run_until = [&](const std::function<bool()>& done) {
        for (auto give_up = Clock::now() + std::chrono::seconds(10); !done() && Clock::now() < give_up;) turn();
        return done();
    };
    ASSERT_TRUE(run_until([&] {
        return pa.attributes().state == PortState::active && pb.attributes().state == PortState::active;
    })) << fabric.stats();

    constexpr std::uint32_t kQkey = 0x1B;
    auto qa = *pa.create_ud_qp({.qkey = kQkey, .receive_depth = 512});
    auto qb = *pb.create_ud_qp({.qkey = kQkey, .receive_depth = 512});
    std::vector<Wire> bufs_a(300, Wire(transport::kGrhSlotSize + 256)), bufs_b(300, Wire(transport::kGrhSlotSize + 256));
    for (std::size_t i = 0; i < 300; ++i) {
        const transport::ReceiveBuffer ra{i, bufs_a[i]}, rb{i, bufs_b[i]};
        ASSERT_EQ(*qa->post_receive({&ra, 1}), 1u);
        ASSERT_EQ(*qb->post_receive({&rb, 1}), 1u);
    }
    auto queue = pa.create_send_queue();
    ASSERT_TRUE(queue) << queue.error().message();
    pa.process();  // publishes what the queue sees
    const transport::SendAs as{qa->qpn(), qa->qkey(), qa->pkey(), qa->pkey_index()};
    const std::uint16_t lid_a = pa.attributes().lid, lid_b = pb.attributes().lid;

    // 150 from the queue's thread, 100 from the port's QP meanwhile, 100
    // from B to A's QP (which must all reach A's own socket).
    Wire payload(64, 0x42);
    std::atomic<bool> done{false};
    std::thread other([&] {
        transport::SendRequest r{.ah = {.dlid = lid_b}, .remote_qpn = qb->qpn(), .remote_qkey = kQkey, .payload = payload};
        for (int i = 0; i < 150; ++i) {
            (*queue)->send(as, {&r, 1});
            if (i % 10 == 9) (*queue)->flush();
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        (*queue)->flush();
        done = true;
    });
    std::size_t got_b = 0, from_a_qp = 0, got_a = 0;
    transport::Completion wc[64];
    int sent_here = 0;
    const auto drain = [&] {
        for (std::size_t n = qb->poll(wc), i = 0; i < n; ++i) {
            if (wc[i].kind != transport::CompletionKind::receive) continue;
            ++got_b;
            from_a_qp += wc[i].src_qp == qa->qpn() && wc[i].slid == lid_a;
        }
        for (std::size_t n = qa->poll(wc), i = 0; i < n; ++i) got_a += wc[i].kind == transport::CompletionKind::receive;
    };
    const bool all = run_until([&] {
        if (sent_here < 100) {
            transport::SendRequest r{.ah = {.dlid = lid_b}, .remote_qpn = qb->qpn(), .remote_qkey = kQkey, .payload = payload};
            transport::SendRequest back{.ah = {.dlid = lid_a}, .remote_qpn = qa->qpn(), .remote_qkey = kQkey, .payload = payload};
            if (qa->post_send({&r, 1}) && qb->post_send({&back, 1})) ++sent_here;
        }
        drain();
        return done && got_b == 250 && got_a == 100;
    });
    other.join();
    EXPECT_TRUE(all) << "B got " << got_b << ", A got " << got_a << "\n" << fabric.stats();
    EXPECT_EQ(from_a_qp, got_b);
    EXPECT_EQ((*queue)->counters().packets.load(), 150u);
    EXPECT_EQ((*queue)->counters().refused.load(), 0u);
    if (keyed) {
        ASSERT_NE(pb.auth(), nullptr);
        for (std::uint64_t d : pb.auth()->counters().dropped) EXPECT_EQ(d, 0u);
    }

    // A P_Key the port does not hold, or a multicast DLID: refused, counted.
    transport::SendRequest bad{.ah = {.dlid = lid_b}, .remote_qpn = qb->qpn(), .remote_qkey = kQkey, .payload = payload};
    EXPECT_EQ((*queue)->send({as.qpn, as.qkey, 0x1234}, {&bad, 1}), 0u);
    bad.ah.dlid = 0xC001;
    EXPECT_EQ((*queue)->send(as, {&bad, 1}), 0u);
    EXPECT_EQ((*queue)->counters().refused.load(), 2u);
}

INSTANTIATE_TEST_SUITE_P(FabricKey, SendQueueTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? std::string("keyed") : std::string("open"); });

}  // namespace
}  // namespace ipoibd::fabric
