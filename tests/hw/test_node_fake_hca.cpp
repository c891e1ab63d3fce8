// The daemon's hardware branch without hardware: a whole Node opening a
// verbs port (the fake libibverbs, fake_verbs.h) and the libibumad MAD path
// (the fake libibumad, fake_umad.h, with an SA behind it), then joining the
// broadcast group through umad and carrying a packet through verbs.
#include <gtest/gtest.h>

#include "config/daemon_config.h"
#include "runtime/event_loop.h"
#include "runtime/log.h"
#include "daemon/node.h"
#include "runtime/notify.h"
#include "host/fake_host_port.h"
#include "cm/cm_mad.h"
#include "ipoib/arp.h"
#include "ipoib/frame.h"
#include "ipoib/link.h"
#include "sa_client/mad_transport.h"
#include "tests/hw/fake_rdmacm.h"
#include "tests/hw/fake_umad.h"
#include "tests/hw/fake_verbs.h"
#include "tests/unit/engine_harness.h"

namespace ipoibd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct NodeOnFakeHca : ::testing::Test {
    void SetUp() override {
        fake_verbs::reset();
        fake_umad::reset({.lid = fake_verbs::config().lid,
                          .sm_lid = fake_verbs::config().sm_lid,
                          .port_guid = fake_verbs::config().port_guid});
        auto l = runtime::EventLoop::create();
        ASSERT_TRUE(l.has_value());
        loop = std::move(*l);
        log.set_min_level(runtime::LogLevel::warning);
        config = config::default_config("ib0");
        config.fabric.transport = config::Transport::verbs;
        config.daemon.watchdog = false;
        config.interface.addresses.push_back(*parse_ip_prefix("198.18.0.1/24"));
    }

    bool run_until(const std::function<bool()>& done, Clock::duration timeout = 5s) {
        const auto deadline = Clock::now() + timeout;
        while (!done()) {
            if (Clock::now() >= deadline) return false;
            (void)loop->run_once(std::chrono::milliseconds(5));
        }
        return true;
    }

    // Whether the interface's neighbour table has `ip` resolved.
    static bool knows(const iface::Interface& i, const char* ip) {
        for (const auto& e : i.engine().neighbours().entries())
            if (e.ip == ipoib::test::ip(ip) && e.hw) return true;
        return false;
    }

    std::unique_ptr<runtime::EventLoop> loop;
    runtime::Logger log;
    runtime::Notifier notify;
    config::DaemonConfig config;
};

TEST_F(NodeOnFakeHca, JoinsThroughUmadAndCarriesTrafficThroughVerbs) {
    {
        daemon::Node node(config, "ib0.conf", "ib0", log, notify, *loop);
        ASSERT_TRUE(node.open_fabric().has_value());
        auto owned = std::make_unique<host::FakeHostPort>("ib0");
        host::FakeHostPort& host = *owned;
        ASSERT_TRUE(node.add_interface(std::move(owned)).has_value());
        node.start();
        const iface::Interface& i = *node.interfaces().front();

        // The broadcast join went out through umad and its answer came back.
        ASSERT_TRUE(run_until([&] { return i.engine().link().up; }));
        EXPECT_GE(fake_umad::stats().sent, 1);
        EXPECT_GE(fake_umad::stats().received, 1);
        EXPECT_TRUE(host.carrier());
        EXPECT_EQ(host.mtu(), 2044u);  // the ScriptedSa's group: 2048
        EXPECT_NE(node.answer("status").find("\"port\":\"first HCA port 1\""), std::string::npos)
            << node.answer("status");

        // A broadcast from the host leaves through the verbs QP and, as on
        // an HCA, comes back to the sender's own attached QP (dropped as our
        // own multicast).
        host.inject(ipoib::test::udp_v4("198.18.0.1", "255.255.255.255"));
        ASSERT_TRUE(run_until([&] {
            const auto& c = i.engine().counters();
            return c.tx_multicast >= 1 && c.rx_own_multicast >= 1;
        }));
        EXPECT_GE(i.link().counters().tx_posted, 1u);
        EXPECT_EQ(i.link().counters().tx_errors, 0u);
        // SIGTERM's leave: the groups are left through umad within the grace.
        const int sent_before = fake_umad::stats().sent;
        node.stop("the test");
        EXPECT_TRUE(run_until([&] { return i.sa_idle(); }, 2s));
        EXPECT_GT(fake_umad::stats().sent, sent_before);
        EXPECT_FALSE(i.engine().link().up);
    }
    // Every verbs object the node made is gone, in an order verbs allows.
    EXPECT_TRUE(fake_verbs::stats().violations.empty())
        << testing::PrintToString(fake_verbs::stats().violations);
    EXPECT_EQ(fake_verbs::stats().live_qps, 0);
    EXPECT_EQ(fake_umad::stats().open_ports, 0);
}

// A UD QP of the test's on the fake device: the "peer" whose ARP teaches
// the node its address (flag 0x80, this QP's QPN, the port's GID).
struct PeerUdQp {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_mr* mr = nullptr;
    ibv_ah* ah = nullptr;
    std::vector<std::uint8_t> buffer = std::vector<std::uint8_t>(4096);

    explicit PeerUdQp(std::uint32_t qkey) {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        ctx = ibv_open_device(list[0]);
        ibv_free_device_list(list);
        pd = ibv_alloc_pd(ctx);
        cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = cq;
        init.qp_type = IBV_QPT_UD;
        init.cap.max_send_wr = init.cap.max_recv_wr = 4;
        init.cap.max_send_sge = init.cap.max_recv_sge = 1;
        qp = ibv_create_qp(pd, &init);
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qkey = qkey;
        (void)ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
        a = {};
        a.qp_state = IBV_QPS_RTR;
        (void)ibv_modify_qp(qp, &a, IBV_QP_STATE);
        a.qp_state = IBV_QPS_RTS;
        (void)ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
        mr = (ibv_reg_mr)(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);  // the function: the macro mixes enums
        ibv_ah_attr ah_attr{};
        ah_attr.dlid = fake_verbs::config().lid;
        ah_attr.port_num = 1;
        ah = ibv_create_ah(pd, &ah_attr);
    }
    ~PeerUdQp() {
        ibv_wc wc[4];
        while (ibv_poll_cq(cq, 4, wc) > 0) {
        }
        ibv_destroy_ah(ah);
        ibv_destroy_qp(qp);
        ibv_dereg_mr(mr);
        if (rx_mr != nullptr) ibv_dereg_mr(rx_mr);
        ibv_destroy_cq(cq);
        ibv_dealloc_pd(pd);
        ibv_close_device(ctx);
    }
    void send(std::uint32_t to_qpn, std::uint32_t qkey, const std::vector<std::uint8_t>& frame) {
        std::copy(frame.begin(), frame.end(), buffer.begin());
        ibv_sge sge{.addr = reinterpret_cast<std::uintptr_t>(buffer.data()),
                    .length = static_cast<std::uint32_t>(frame.size()),
                    .lkey = mr->lkey};
        ibv_send_wr wr{};
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = to_qpn;
        wr.wr.ud.remote_qkey = qkey;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    }
    // An ARP request from `hw` at `ip` for 198.18.0.1, sent to the node's
    // UD QP: it teaches the node that `ip` is at `hw`.
    void announce(const ipoib::HwAddress& hw, const Ipv4Address& ip, std::uint32_t to_qpn, std::uint32_t qkey) {
        std::vector<std::uint8_t> frame(4 + ipoib::ArpPacket::size);
        ipoib::EncapHeader{.type = static_cast<std::uint16_t>(ipoib::EtherType::arp), .reserved = 0}.write_to(frame.data());
        ASSERT_TRUE(ipoib::encode_arp(ipoib::make_arp_request(hw, ip, {198, 18, 0, 1}), std::span(frame).subspan(4)));
        send(to_qpn, qkey, frame);
    }
    // A receive for what the node sends it: `rx`, 40-byte GRH slot first.
    std::vector<std::uint8_t> rx = std::vector<std::uint8_t>(40 + 4096);
    ibv_mr* rx_mr = nullptr;
    void post_receive() {
        if (rx_mr == nullptr) rx_mr = (ibv_reg_mr)(pd, rx.data(), rx.size(), IBV_ACCESS_LOCAL_WRITE);
        ibv_sge sge{.addr = reinterpret_cast<std::uintptr_t>(rx.data()),
                    .length = static_cast<std::uint32_t>(rx.size()),
                    .lkey = rx_mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = 7;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
    }
    // The next receive completion, if one came (send completions skipped).
    std::optional<ibv_wc> received() {
        ibv_wc wc{};
        while (ibv_poll_cq(cq, 1, &wc) == 1)
            if (wc.opcode == IBV_WC_RECV) return wc;
        return std::nullopt;
    }
};

// Data threads on an HCA ([daemon] data-threads = 2): the thread's send
// queue is a UD QP of its own (verbs_send_queue.h). A flow the host hashes
// to the thread's queue reaches the peer from that QP, whose number is not
// the interface's: the peer sees another source QPN, as the docs say. The
// thread's first QP cannot be made: what it could not send goes back to
// the loop, which sends it from the interface's QP; none is lost.
TEST_F(NodeOnFakeHca, ADataThreadSendsFromAQpOfItsOwn) {
    config.daemon.data_threads = 2;
    {
        daemon::Node node(config, "ib0.conf", "ib0", log, notify, *loop);
        ASSERT_TRUE(node.open_fabric().has_value());
        auto owned = std::make_unique<host::FakeHostPort>("ib0");
        host::FakeHostPort& host = *owned;
        host.set_queues(2);
        ASSERT_TRUE(node.add_interface(std::move(owned)).has_value());
        node.start();
        const iface::Interface& i = *node.interfaces().front();
        ASSERT_TRUE(run_until([&] { return i.engine().link().up; }));
        ASSERT_EQ(i.data_threads(), 2u) << "the verbs port gives a send queue";
        ASSERT_EQ(host.queues_open(), 1u);

        // The peer, taught to the node by its ARP.
        const std::uint32_t qkey = i.engine().link().params.qkey;
        {
            PeerUdQp peer(qkey);
            for (int k = 0; k < 4; ++k) peer.post_receive();
            const ib::Gid gid = node.port().attributes().gid();
            fake_umad::sa().add_port(gid, fake_verbs::config().lid);
            const ipoib::HwAddress peer_hw{.flags = 0, .qpn = peer.qp->qp_num, .gid = gid};
            peer.announce(peer_hw, {198, 18, 0, 9}, i.engine().link().qpn, qkey);
            ASSERT_TRUE(run_until([&] { return knows(i, "198.18.0.9"); }));

            // Injected on the thread's queue until one arrives from another
            // QPN than the interface's (the first may be handed back to the
            // loop, which sends it from the interface's QP; so are those
            // sent while the thread has no QP).
            fake_verbs::config().fail_create_qp = 1;
            std::optional<ibv_wc> from_thread;
            std::size_t arrived = 0;
            std::uint16_t seq = 0;
            auto next_inject = Clock::now();
            ASSERT_TRUE(run_until([&] {
                if (Clock::now() >= next_inject) {
                    host.inject_queue(1, ipoib::test::icmp_echo_v4("198.18.0.1", "198.18.0.9", ++seq));
                    next_inject = Clock::now() + 50ms;
                }
                while (auto wc = peer.received()) {
                    EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
                    const bool ipv4 = peer.rx[40] == 0x08 && peer.rx[41] == 0x00;  // not the node's ARP reply
                    peer.post_receive();
                    if (!ipv4) continue;
                    ++arrived;
                    if (wc->src_qp != i.engine().link().qpn) from_thread = wc;
                }
                return from_thread.has_value();
            })) << arrived << " arrived; " << node.answer("stats");
            EXPECT_NE(from_thread->src_qp, 0u);
            EXPECT_EQ(fake_verbs::config().fail_create_qp, 0) << "the thread tried, and failed, once";
            ASSERT_TRUE(run_until([&] {
                while (peer.received()) {
                    if (peer.rx[40] == 0x08 && peer.rx[41] == 0x00) ++arrived;
                    peer.post_receive();
                }
                return arrived >= seq;
            }, 2s)) << arrived << " of " << seq << " arrived; " << node.answer("stats");
            EXPECT_EQ(arrived, seq);
            const std::string stats = node.answer("stats");
            EXPECT_EQ(stats.find("\"fast_path\":0,"), std::string::npos) << stats;
            node.stop("the test");
            EXPECT_TRUE(run_until([&] { return i.sa_idle(); }, 2s));
        }
    }
    EXPECT_TRUE(fake_verbs::stats().violations.empty())
        << testing::PrintToString(fake_verbs::stats().violations);
    EXPECT_EQ(fake_verbs::stats().live_qps, 0);
}

#ifdef IPOIBD_TEST_RDMACM
// Connected mode on an HCA (issue 21): the kernel's ib_cm holds class
// 0x07, so the node connects through librdmacm (the fake, fake_rdmacm.h)
// and accepts nothing: MTU 65520, no flag 0x80 in its address; a packet
// too long for UD reaches a capable peer over an RC connection opened with
// Linux ipoib_cm's ServiceID and private data.
TEST_F(NodeOnFakeHca, ConnectedModeConnectsThroughLibrdmacm) {
    fake_rdmacm::reset();
    config.interface.connected_mode = true;
    {
        daemon::Node node(config, "ib0.conf", "ib0", log, notify, *loop);
        ASSERT_TRUE(node.open_fabric().has_value());
        ASSERT_EQ(node.cm(), nullptr);  // no CM of ours on an HCA
        ASSERT_NE(node.connection_manager(), nullptr);
        auto owned = std::make_unique<host::FakeHostPort>("ib0");
        host::FakeHostPort& host = *owned;
        ASSERT_TRUE(node.add_interface(std::move(owned)).has_value());
        node.start();
        const iface::Interface& i = *node.interfaces().front();
        ASSERT_TRUE(run_until([&] { return i.engine().link().up; }));
        EXPECT_EQ(host.mtu(), ipoib::kConnectedModeMtu);
        EXPECT_EQ(i.engine().link().hw.flags, 0);  // librdmacm cannot listen
        ASSERT_NE(i.connected(), nullptr);
        EXPECT_TRUE(i.connected()->is_open());
        EXPECT_FALSE(i.connected()->is_listening());

        // The peer: a UD QP on the fake port, and a passive side for its
        // ServiceID behind the fake librdmacm.
        const std::uint32_t qkey = i.engine().link().params.qkey;
        {
            PeerUdQp peer(qkey);
            const ib::Gid gid = node.port().attributes().gid();
            fake_rdmacm::Peer p;
            std::copy(gid.begin(), gid.end(), p.gid.begin());
            p.ud_qpn = peer.qp->qp_num;
            p.service_id = cm::ipoib_service_id(p.ud_qpn);
            fake_rdmacm::add_peer(p);
            fake_umad::sa().add_port(gid, fake_verbs::config().lid);  // the SA's PathRecord for it
            const ipoib::HwAddress peer_hw{.flags = ipoib::HwAddress::kFlagConnectedRc, .qpn = p.ud_qpn, .gid = gid};
            peer.announce(peer_hw, {198, 18, 0, 9}, i.engine().link().qpn, qkey);
            ASSERT_TRUE(run_until([&] { return knows(i, "198.18.0.9"); }));

            // 20,000 bytes: more than UD carries, so only RC gets it there.
            const auto packet = ipoib::test::icmp_echo_v4("198.18.0.1", "198.18.0.9", 1, 20000);
            std::vector<std::vector<std::uint8_t>> got;
            auto next_inject = Clock::now();
            ASSERT_TRUE(run_until([&] {
                if (got.empty() && Clock::now() >= next_inject) {
                    host.inject(packet);
                    next_inject = Clock::now() + 200ms;
                }
                for (auto& m : fake_rdmacm::peer_messages()) got.push_back(std::move(m));
                return !got.empty();
            })) << node.answer("stats");
            ASSERT_EQ(got.front().size(), 4 + packet.size());
            EXPECT_EQ(got.front()[0], 0x08);  // IPv4 EtherType
            EXPECT_TRUE(std::equal(packet.begin(), packet.end(), got.front().begin() + 4));
            EXPECT_EQ(i.engine().counters().icmp_too_big_tx, 0u);
            const auto& st = fake_rdmacm::stats();
            EXPECT_EQ(st.connects, 1);
            EXPECT_EQ(st.established, 1);
            EXPECT_EQ(st.last_retry_count, 7);
            EXPECT_EQ(st.last_rnr_retry, 7);
            // The REQ's private data: reserved, our UD QPN, receive size 65524.
            ASSERT_EQ(st.last_private_data.size(), 8u);
            EXPECT_EQ(cm::read_ipoib_data(st.last_private_data),
                      (cm::IpoibCmData{.ud_qpn = i.engine().link().qpn, .receive_size = ipoib::kConnectedReceiveSize}));
            EXPECT_EQ(i.connected()->counters().connected, 1u);
            EXPECT_NE(node.answer("stats").find("\"rdmacm_established\":1"), std::string::npos);

            // A peer without a listener: rejected (REJ 8), then UD for a while.
            fake_rdmacm::Peer nobody = p;
            nobody.ud_qpn = 0x00ABCD;  // no such ServiceID registered
            const ipoib::HwAddress other{.flags = ipoib::HwAddress::kFlagConnectedRc, .qpn = nobody.ud_qpn, .gid = gid};
            peer.announce(other, {198, 18, 0, 10}, i.engine().link().qpn, qkey);
            next_inject = Clock::now();
            ASSERT_TRUE(run_until([&] {
                if (Clock::now() >= next_inject) {
                    host.inject(ipoib::test::icmp_echo_v4("198.18.0.1", "198.18.0.10", 2));
                    next_inject = Clock::now() + 200ms;
                }
                return i.connected()->counters().rejected_by_peer >= 1;
            })) << node.answer("stats");
            node.stop("the test");
            EXPECT_TRUE(run_until([&] { return i.sa_idle(); }, 2s));
        }
    }
    EXPECT_EQ(fake_rdmacm::stats().live_ids, 0);
    EXPECT_EQ(fake_rdmacm::stats().live_channels, 0);
    EXPECT_TRUE(fake_rdmacm::stats().violations.empty())
        << testing::PrintToString(fake_rdmacm::stats().violations);
    fake_rdmacm::reset();
    EXPECT_TRUE(fake_verbs::stats().violations.empty())
        << testing::PrintToString(fake_verbs::stats().violations);
    EXPECT_EQ(fake_verbs::stats().live_qps, 0);
}

// Where the kernel's ib_cm is not loaded, the CM's class is free: the node
// registers for it through libibumad (a method mask with Send) and runs its
// own CM on the HCA, so connected mode accepts too (flag 0x80): a REQ from
// a peer gets a REP with a passive RC QP behind it; one naming another GID
// gets REJ 12.
TEST_F(NodeOnFakeHca, OwnCmOverUmadWhereTheKernelsIsNotLoaded) {
    fake_umad::reset({.lid = fake_verbs::config().lid,
                      .sm_lid = fake_verbs::config().sm_lid,
                      .port_guid = fake_verbs::config().port_guid,
                      .cm_class_free = true});
    fake_rdmacm::reset();
    config.interface.connected_mode = true;
    {
        daemon::Node node(config, "ib0.conf", "ib0", log, notify, *loop);
        ASSERT_TRUE(node.open_fabric().has_value());
        ASSERT_NE(node.cm(), nullptr);
        EXPECT_EQ(node.connection_manager(), node.cm());
        auto owned = std::make_unique<host::FakeHostPort>("ib0");
        host::FakeHostPort& host = *owned;
        ASSERT_TRUE(node.add_interface(std::move(owned)).has_value());
        node.start();
        const iface::Interface& i = *node.interfaces().front();
        ASSERT_TRUE(run_until([&] { return i.engine().link().up; }));
        EXPECT_EQ(host.mtu(), ipoib::kConnectedModeMtu);
        EXPECT_EQ(i.engine().link().hw.flags, ipoib::HwAddress::kFlagConnectedRc);
        EXPECT_TRUE(i.connected()->is_listening());

        const ib::Gid gid = node.port().attributes().gid();
        const std::uint16_t lid = fake_verbs::config().lid;
        auto req = [&](std::uint32_t comm_id, const ib::Gid& remote_gid) {
            cm::Req r;
            r.local_comm_id = comm_id;
            r.service_id = cm::ipoib_service_id(i.engine().link().qpn);
            r.local_ca_guid = 0x0002C903000ABCDEULL;
            r.local_qpn = comm_id;  // one QP per connection (the same CA GUID and QPN again would be stale)
            r.remote_cm_response_timeout = 20;
            r.local_cm_response_timeout = 20;
            r.retry_count = 7;
            r.rnr_retry_count = 7;
            r.max_cm_retries = 15;
            r.pkey = 0xFFFF;
            r.path_mtu = 4;
            r.starting_psn = 0x1234;
            r.primary.local_lid = lid;  // the fake device's one port
            r.primary.remote_lid = lid;
            r.primary.local_gid = gid;
            r.primary.remote_gid = remote_gid;
            r.primary.local_ack_timeout = 14;
            cm::write_ipoib_data(r.private_data, {.ud_qpn = 0x000777, .receive_size = ipoib::kConnectedReceiveSize});
            return cm::encode(r, 0x0000ABCD00000000ULL | comm_id);
        };
        auto answer = [&](std::uint32_t comm_id) -> std::optional<cm::Decoded> {
            for (const fake_umad::SentMad& m : fake_umad::stats().cm_sent) {
                auto d = cm::decode(m.mad);
                if (!d || m.dlid != lid) continue;
                if (auto* rep = std::get_if<cm::Rep>(&d->message); rep && rep->remote_comm_id == comm_id) return *d;
                if (auto* rej = std::get_if<cm::Rej>(&d->message); rej && rej->remote_comm_id == comm_id) return *d;
            }
            return std::nullopt;
        };
        fake_umad::inject_cm(req(0x1111, gid), lid);
        ASSERT_TRUE(run_until([&] { return answer(0x1111).has_value(); })) << node.answer("stats");
        const auto rep_mad = answer(0x1111);
        const auto* rep = std::get_if<cm::Rep>(&rep_mad->message);
        ASSERT_NE(rep, nullptr);
        EXPECT_EQ(cm::read_ipoib_data(rep->private_data),
                  (cm::IpoibCmData{.ud_qpn = i.engine().link().qpn, .receive_size = ipoib::kConnectedReceiveSize}));
        EXPECT_NE(rep->local_qpn, 0u);
        EXPECT_EQ(i.connected()->counters().accepted, 1u);

        ib::Gid other = gid;
        other[15] ^= 1;
        fake_umad::inject_cm(req(0x2222, other), lid);
        ASSERT_TRUE(run_until([&] { return answer(0x2222).has_value(); }));
        const auto rej_mad = answer(0x2222);
        const auto* rej = std::get_if<cm::Rej>(&rej_mad->message);
        ASSERT_NE(rej, nullptr);
        EXPECT_EQ(rej->reason, cm::rej::invalid_gid);
        EXPECT_TRUE(std::equal(gid.begin(), gid.end(), rej->ari.begin()));  // ib_cm's ARI: our GID
        node.stop("the test");
        EXPECT_TRUE(run_until([&] { return i.sa_idle(); }, 2s));
    }
    EXPECT_EQ(fake_rdmacm::stats().live_channels, 0);  // librdmacm not needed
    fake_rdmacm::reset();
    EXPECT_TRUE(fake_verbs::stats().violations.empty())
        << testing::PrintToString(fake_verbs::stats().violations);
    EXPECT_EQ(fake_verbs::stats().live_qps, 0);
}
#endif  // IPOIBD_TEST_RDMACM

// The SubnAdm agent's method mask: the SA's Reports are unsolicited, and
// the kernel's MAD layer hands them only to an agent registered for them,
// one per port. ipoibd does not ask (it subscribes to nothing, and would
// keep a subscriber from running); ibsaquery subscribe --listen does.
TEST(UmadTransportOnFakeHca, OnlyASubscriberRegistersForTheSasReports) {
    fake_umad::reset();
    {
        auto plain = sa::open_umad_transport({});
        ASSERT_TRUE(plain) << plain.error().message();
        EXPECT_FALSE(fake_umad::stats().sa_takes_reports);
    }
    fake_umad::reset();
    auto subscriber = sa::open_umad_transport({.take_reports = true});
    ASSERT_TRUE(subscriber) << subscriber.error().message();
    EXPECT_TRUE(fake_umad::stats().sa_takes_reports);
}

TEST(UmadTransportOnFakeHca, ReportsHeldByAnotherAgentFailTheSubscriberNotTheOthers) {
    fake_umad::reset({.sa_reports_free = false});
    auto subscriber = sa::open_umad_transport({.take_reports = true});
    ASSERT_FALSE(subscriber);
    EXPECT_NE(subscriber.error().message().find("Report method"), std::string::npos) << subscriber.error().message();
    fake_umad::reset({.sa_reports_free = false});
    EXPECT_TRUE(sa::open_umad_transport({}));
}

}  // namespace
}  // namespace ipoibd
