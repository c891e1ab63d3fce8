// IPoIB connected mode (RFC 4755, issue 21) with whole nodes in one process
// (node_harness.h): A and B in connected mode, C in datagram mode, over the
// in-memory fabric and the soft fabric. A and B reach each other over RC
// connections at MTU 65520; everyone reaches C over UD, and what is too
// long for C's link is answered with ICMP (or fragmented, IPv4 without DF).
#include <gtest/gtest.h>

#include <algorithm>

#include "ipoib/hw_address.h"
#include "ipoib/link.h"
#include "tests/inprocess/node_harness.h"

namespace ipoibd::inprocess {
namespace {

using ipoib::test::icmp_echo_v4;
using ipoib::test::icmp_echo_v6;
using ipoib::test::ip;
using Packet = std::vector<std::uint8_t>;

constexpr std::uint64_t kGuidA = 0x0002c90300c20001ULL;
constexpr std::uint64_t kGuidB = 0x0002c90300c20002ULL;
constexpr std::uint64_t kGuidC = 0x0002c90300c20003ULL;

std::uint16_t header_checksum(const Packet& p) {
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < 20; i += 2)
        if (i != 10) sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum);
}

Packet with_df(Packet p) {
    p[6] |= 0x40;
    const std::uint16_t c = header_checksum(p);
    p[10] = static_cast<std::uint8_t>(c >> 8);
    p[11] = static_cast<std::uint8_t>(c);
    return p;
}

class ConnectedNodes : public ::testing::TestWithParam<FabricKind> {
protected:
    void SetUp() override {
        fabric_ = std::make_unique<Fabric>(GetParam());
        connected(true);
        a_ = &fabric_->add_node("a", {"198.18.0.1/24", "2001:db8::1/64"}, kGuidA);
        b_ = &fabric_->add_node("b", {"198.18.0.2/24", "2001:db8::2/64"}, kGuidB);
        connected(false);
        c_ = &fabric_->add_node("c", {"198.18.0.3/24", "2001:db8::3/64"}, kGuidC);
        ASSERT_TRUE(fabric_->run_until([&] { return a_->link_up() && b_->link_up() && c_->link_up(); }));
    }

    void connected(bool on) {
        fabric_->tune_config = [on](config::DaemonConfig& c) { c.interface.connected_mode = on; };
    }

    bool deliver(TestNode& from, TestNode& to, const Packet& packet) {
        for (int attempt = 0; attempt < 20; ++attempt) {
            from.host->inject(packet);
            if (fabric_->run_until([&] { return to.take_written([&](const Packet& p) { return p == packet; }).has_value(); },
                                   500ms))
                return true;
        }
        return false;
    }

    std::unique_ptr<Fabric> fabric_;
    TestNode* a_ = nullptr;
    TestNode* b_ = nullptr;
    TestNode* c_ = nullptr;
};

TEST_P(ConnectedNodes, ConnectedInterfacesRunAt65520AndAdvertiseRc) {
    for (TestNode* n : {a_, b_}) {
        EXPECT_EQ(n->host->mtu(), ipoib::kConnectedModeMtu) << n->name;
        EXPECT_TRUE(n->interface().engine().link().connected) << n->name;
        EXPECT_EQ(n->interface().engine().link().hw.flags, ipoib::HwAddress::kFlagConnectedRc) << n->name;
        EXPECT_TRUE(n->interface().connected()->is_open()) << n->name;
    }
    EXPECT_EQ(c_->host->mtu(), c_->interface().engine().link().datagram_mtu);
    EXPECT_TRUE(c_->host->mtu() == 2044 || c_->host->mtu() == 4092) << c_->host->mtu();
    EXPECT_EQ(c_->interface().engine().link().hw.flags, 0);
    EXPECT_FALSE(c_->interface().connected()->is_open());
}

TEST_P(ConnectedNodes, ConnectedPeersTalkOverRcConnectionsUpTo65520) {
    ASSERT_TRUE(deliver(*a_, *b_, icmp_echo_v4("198.18.0.1", "198.18.0.2", 1)));
    ASSERT_TRUE(deliver(*b_, *a_, icmp_echo_v4("198.18.0.2", "198.18.0.1", 1)));
    // Small packets: over UD while the first of them sets up the connections
    // ([interface] connected-datagram-when-idle).
    EXPECT_GE(a_->interface().connected()->counters().idle_datagram, 1u);
    EXPECT_GE(b_->interface().connected()->counters().idle_datagram, 1u);
    // One connection each way: A's to B and B's to A.
    ASSERT_TRUE(fabric_->run_until([&] {
        return a_->interface().connected()->counters().connected >= 1 &&
               b_->interface().connected()->counters().connected >= 1;
    }));
    EXPECT_GE(a_->interface().connected()->counters().accepted, 1u);
    EXPECT_GE(b_->interface().connected()->counters().accepted, 1u);
    // 60,000 bytes with DF (ping -s 60000 -M do) in one RC message.
    const Packet big = with_df(icmp_echo_v4("198.18.0.1", "198.18.0.2", 2, 60000));
    ASSERT_TRUE(deliver(*a_, *b_, big));
    const Packet big6 = icmp_echo_v6("2001:db8::2", "2001:db8::1", 3, 65000);
    ASSERT_TRUE(deliver(*b_, *a_, big6));
    EXPECT_GE(a_->interface().engine().counters().tx_connected, 1u);
    EXPECT_EQ(a_->interface().engine().counters().icmp_too_big_tx, 0u);
    EXPECT_GE(b_->interface().connected()->counters().rx_messages, 1u);
    EXPECT_GE(a_->interface().connected()->counters().rx_messages, 1u);
    const std::string neigh = a_->node->answer("neigh");
    EXPECT_NE(neigh.find("\"mode\":\"connected\",\"connection\":\"up\""), std::string::npos) << neigh;
    const std::string stats = a_->node->answer("stats");
    EXPECT_NE(stats.find("\"connected\":{"), std::string::npos) << stats;
    EXPECT_NE(stats.find("\"rc_messages_sent\":"), std::string::npos) << stats;
    EXPECT_GE(a_->counter("cm", "cm_established"), 1u) << stats;
}

TEST_P(ConnectedNodes, DatagramPeersGetUdAndTooBigIsAnsweredWithIcmp) {
    ASSERT_TRUE(deliver(*a_, *c_, icmp_echo_v4("198.18.0.1", "198.18.0.3", 1)));
    ASSERT_TRUE(deliver(*c_, *a_, icmp_echo_v4("198.18.0.3", "198.18.0.1", 1)));
    ASSERT_TRUE(deliver(*a_, *c_, icmp_echo_v6("2001:db8::1", "2001:db8::3", 1)));
    EXPECT_EQ(a_->interface().connected()->counters().connects, 0u);  // C has no flag 0x80
    const std::uint32_t ud = a_->interface().engine().link().datagram_mtu;
    ASSERT_EQ(ud, c_->host->mtu());

    // DF set, longer than C's link: ICMP Fragmentation Needed back to A's
    // host, from C's address, with C's link MTU.
    const Packet big = with_df(icmp_echo_v4("198.18.0.1", "198.18.0.3", 2, 60000));
    a_->host->inject(big);
    std::optional<Packet> icmp;
    ASSERT_TRUE(fabric_->run_until([&] {
        icmp = a_->take_written([](const Packet& p) { return p.size() > 28 && p[9] == 1 && p[20] == 3 && p[21] == 4; });
        return icmp.has_value();
    }));
    EXPECT_EQ(ipoibd::load_be16(icmp->data() + 26), ud);
    EXPECT_TRUE(std::equal(icmp->begin() + 12, icmp->begin() + 16, big.begin() + 16));  // from C
    EXPECT_TRUE(std::equal(icmp->begin() + 16, icmp->begin() + 20, big.begin() + 12));  // to A
    EXPECT_TRUE(std::equal(icmp->begin() + 28, icmp->begin() + 48, big.begin()));       // quoting A's header
    EXPECT_EQ(icmp->size(), 576u);
    EXPECT_EQ(a_->interface().engine().counters().icmp_too_big_tx, 1u);

    // IPv6: Packet Too Big.
    a_->host->inject(icmp_echo_v6("2001:db8::1", "2001:db8::3", 2, 30000));
    std::optional<Packet> ptb;
    ASSERT_TRUE(fabric_->run_until([&] {
        ptb = a_->take_written([](const Packet& p) { return p.size() > 48 && p[6] == 58 && p[40] == 2; });
        return ptb.has_value();
    }));
    EXPECT_EQ(ipoibd::load_be32(ptb->data() + 44), ud);
    EXPECT_EQ(ptb->size(), 1280u);

    // IPv4 without DF: fragmented on the way, C's host gets the pieces.
    const Packet loose = icmp_echo_v4("198.18.0.1", "198.18.0.3", 3, 9000);
    a_->host->inject(loose);
    std::size_t data_bytes = 0, fragments = 0;
    ASSERT_TRUE(fabric_->run_until([&] {
        const auto is_fragment = [](const Packet& p) {
            return (p[0] >> 4) == 4 && p[9] == 1 && ((p[6] & 0x3F) != 0 || p[7] != 0);  // MF or an offset
        };
        while (auto f = c_->take_written(is_fragment)) {
            ++fragments;
            data_bytes += f->size() - 20;
            EXPECT_LE(f->size(), ud);
        }
        return data_bytes == loose.size() - 20;
    })) << fragments << " fragments, " << data_bytes << " bytes";
    EXPECT_GE(fragments, 3u);
    EXPECT_EQ(a_->interface().engine().counters().tx_fragmented, 1u);
}

TEST_P(ConnectedNodes, APeerRestartedWithANewQpnIsConnectedAgain) {
    ASSERT_TRUE(deliver(*a_, *b_, icmp_echo_v4("198.18.0.1", "198.18.0.2", 1)));
    const std::uint32_t old_qpn = b_->qpn();
    connected(true);
    b_ = &fabric_->restart_node(1);
    ASSERT_TRUE(fabric_->run_until([&] { return b_->link_up(); }));
    EXPECT_NE(b_->qpn(), old_qpn);
    ASSERT_TRUE(deliver(*a_, *b_, with_df(icmp_echo_v4("198.18.0.1", "198.18.0.2", 2, 20000))));
    EXPECT_GE(a_->interface().connected()->counters().connects, 2u);
    ASSERT_TRUE(deliver(*b_, *a_, icmp_echo_v4("198.18.0.2", "198.18.0.1", 2)));
}

TEST_P(ConnectedNodes, ConnectedModeGoesOffAndOnLive) {
    ASSERT_TRUE(deliver(*a_, *b_, icmp_echo_v4("198.18.0.1", "198.18.0.2", 1)));
    ASSERT_TRUE(deliver(*b_, *a_, icmp_echo_v4("198.18.0.2", "198.18.0.1", 1)));
    iface::Interface& ia = *a_->node->interfaces().front();
    EXPECT_EQ(ia.set_connected(false, Clock::now()), "");
    EXPECT_EQ(a_->host->mtu(), ia.engine().link().datagram_mtu);
    EXPECT_EQ(ia.engine().link().hw.flags, 0);
    EXPECT_EQ(ia.connected()->connections(), 0u);
    // B hears A's announcement: A no longer has flag 0x80, so B sends UD.
    ASSERT_TRUE(fabric_->run_until([&] {
        for (const auto& e : b_->interface().engine().neighbours().entries())
            if (e.ip == ip("198.18.0.1") && e.hw) return e.hw->flags == 0;
        return false;
    }));
    const std::uint64_t ud_before = b_->interface().engine().counters().tx_unicast;
    ASSERT_TRUE(deliver(*b_, *a_, icmp_echo_v4("198.18.0.2", "198.18.0.1", 2)));
    EXPECT_GT(b_->interface().engine().counters().tx_unicast, ud_before);
    ASSERT_TRUE(deliver(*a_, *b_, icmp_echo_v4("198.18.0.1", "198.18.0.2", 2)));

    EXPECT_EQ(ia.set_connected(true, Clock::now()), "");
    EXPECT_EQ(a_->host->mtu(), ipoib::kConnectedModeMtu);
    ASSERT_TRUE(deliver(*a_, *b_, with_df(icmp_echo_v4("198.18.0.1", "198.18.0.2", 3, 30000))));
}

// An unused connection is closed after [interface] connected-idle (a DREQ
// the peer answers), and the next packet opens a new one.
TEST_P(ConnectedNodes, IdleConnectionsAreReapedAndOpenedAgainWhenNeeded) {
    connected(true);
    fabric_->tune_config = [](config::DaemonConfig& c) {
        c.interface.connected_mode = true;
        c.interface.connected_idle = 1s;
    };
    TestNode& d = fabric_->add_node("d", {"198.18.0.4/24"}, 0x0002c90300c20004ULL);
    ASSERT_TRUE(fabric_->run_until([&] { return d.link_up(); }));
    ASSERT_TRUE(deliver(d, *a_, icmp_echo_v4("198.18.0.4", "198.18.0.1", 1)));
    const ipoib::ConnectedLink& link = *d.interface().connected();
    ASSERT_TRUE(fabric_->run_until([&] { return link.counters().connected >= 1; }));  // set up behind the ping
    ASSERT_EQ(link.counters().connected, 1u);
    ASSERT_TRUE(fabric_->run_until([&] { return link.counters().reaped_idle >= 1; }, 20s));
    EXPECT_FALSE(link.connection_to(ipoib::HwAddress{.qpn = a_->qpn(), .gid = a_->node->port().attributes().gid()}));
    ASSERT_TRUE(fabric_->run_until(
        [&] { return a_->interface().connected()->counters().disconnected_by_peer >= 1; }, 20s));
    ASSERT_TRUE(deliver(d, *a_, icmp_echo_v4("198.18.0.4", "198.18.0.1", 2)));
    ASSERT_TRUE(fabric_->run_until([&] { return link.counters().connected >= 2; }));
    EXPECT_EQ(link.counters().connected, 2u);
}

// A REQ that names another GID than ours is refused with REJ 12 (our GID
// as ARI, as ib_cm); one port holds at most 8 passive connections (REJ 1
// past them: max-connections and the receive pool are shared by every
// port, ConnectedLinkTest covers them); a new REQ from a UD QP that holds
// one replaces it.
TEST_P(ConnectedNodes, BadAndExcessRequestsAreRejectedAndConnectionsStayBounded) {
    daemon::CmService* cm = c_->node->cm();
    ASSERT_NE(cm, nullptr);
    const auto& attrs_b = b_->node->port().attributes();
    const auto& attrs_c = c_->node->port().attributes();
    auto req = [&](std::uint32_t qpn, const ib::Gid& remote_gid, std::uint32_t ud_qpn) {
        cm::ConnectParams p{.peer = {.lid = attrs_b.lid}, .service_id = cm::ipoib_service_id(b_->qpn()), .local_qpn = qpn};
        p.pkey = 0xFFFF;
        p.primary.local_lid = attrs_c.lid;
        p.primary.remote_lid = attrs_b.lid;
        p.primary.local_gid = attrs_c.gid();
        p.primary.remote_gid = remote_gid;
        cm::write_ipoib_data(p.private_data, {.ud_qpn = ud_qpn, .receive_size = ipoib::kConnectedReceiveSize});
        return cm->engine().connect(p, Clock::now());
    };
    ASSERT_TRUE(req(0x111, attrs_c.gid(), c_->qpn()));  // not B's GID
    cm->tick(Clock::now());
    const ipoib::ConnectedLink& link = *b_->interface().connected();
    ASSERT_TRUE(fabric_->run_until([&] { return link.counters().rejected_bad_req == 1; }));
    // C's port asks from 20 UD QPNs: 8 are accepted.
    for (std::uint32_t i = 0; i < 20; ++i) ASSERT_TRUE(req(0x200 + i, attrs_b.gid(), 0x5000 + i));
    cm->tick(Clock::now());
    ASSERT_TRUE(fabric_->run_until([&] { return link.counters().rejected_peer_limit == 12; }))
        << b_->node->answer("stats");
    EXPECT_EQ(link.counters().accepted, 8u);
    EXPECT_EQ(link.connections(), 8u);
    EXPECT_EQ(link.buffers_in_use(), 8u * 64u);
    // The first UD QP connects again: it replaces its old connection.
    ASSERT_TRUE(req(0x300, attrs_b.gid(), 0x5000));
    cm->tick(Clock::now());
    ASSERT_TRUE(fabric_->run_until([&] { return link.counters().accepted == 9; })) << b_->node->answer("stats");
    EXPECT_EQ(link.counters().replaced_by_peer, 1u);
    EXPECT_EQ(link.connections(), 8u);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ConnectedNodes, ::testing::Values(FabricKind::memory, FabricKind::soft),
                         [](const ::testing::TestParamInfo<FabricKind>& p) { return to_string(p.param); });

}  // namespace
}  // namespace ipoibd::inprocess
