// Whole nodes in one process (node_harness.h): the link comes up, ARP and
// ND resolve, IP crosses both ways, a peer restarts with a new QPN. Each
// test body runs over the in-memory fabric and over the soft fabric.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/inprocess/node_harness.h"

namespace ipoibd::inprocess {
namespace {

using ipoib::test::icmp_echo_v4;
using ipoib::test::icmp_echo_v6;
using ipoib::test::ip;

constexpr std::uint64_t kGuidA = 0x0002c90300a10001ULL;
constexpr std::uint64_t kGuidB = 0x0002c90300a10002ULL;
constexpr std::uint64_t kGuidC = 0x0002c90300a10003ULL;

bool received(const TestNode& n, const std::vector<std::uint8_t>& packet) {
    const auto written = n.host->take_written();
    // take_written() empties the list: put back what was not this packet.
    bool found = false;
    for (const auto& p : written) {
        if (p == packet) {
            found = true;
        } else {
            n.host->write(p);
        }
    }
    return found;
}

bool neighbour_has_hw(const TestNode& n, const IpAddress& address) {
    for (const auto& e : n.interface().engine().neighbours().entries())
        if (e.ip == address && e.hw) return true;
    return false;
}

class Nodes : public ::testing::TestWithParam<FabricKind> {
protected:
    void SetUp() override {
        fabric_ = std::make_unique<Fabric>(GetParam());
        a_ = &fabric_->add_node("a", {"198.18.0.1/24", "2001:db8::1/64"}, kGuidA);
        b_ = &fabric_->add_node("b", {"198.18.0.2/24", "2001:db8::2/64"}, kGuidB);
        ASSERT_TRUE(fabric_->run_until([&] { return a_->link_up() && b_->link_up(); }))
            << "a " << a_->link_up() << " b " << b_->link_up();
    }

    // Sends `packet` from `from`'s host until `to`'s host receives it (the
    // first ones may wait for ARP/ND and a path, or be dropped while a new
    // peer announces itself). A copy sent again while the first one still
    // waited arrives later: a test that counts what `to` gets afterwards
    // leaves copies of `packet` out.
    bool deliver(TestNode& from, TestNode& to, const std::vector<std::uint8_t>& packet) {
        for (int attempt = 0; attempt < 20; ++attempt) {
            from.host->inject(packet);
            if (fabric_->run_until([&] { return received(to, packet); }, 500ms)) return true;
        }
        return false;
    }

    std::unique_ptr<Fabric> fabric_;
    TestNode* a_ = nullptr;
    TestNode* b_ = nullptr;
};

TEST_P(Nodes, LinkComesUpWithTheGroupMtuAndCarrier) {
    for (TestNode* n : {a_, b_}) {
        EXPECT_TRUE(n->host->carrier()) << n->name;
        EXPECT_TRUE(n->host->up()) << n->name;
        EXPECT_EQ(n->host->mtu(), n->interface().engine().link().mtu) << n->name;
        EXPECT_TRUE(n->host->mtu() == 2044 || n->host->mtu() == 4092) << n->host->mtu();
        // The configured addresses and the RFC 4391 link-local one.
        EXPECT_EQ(n->host->addresses().size(), 3u) << n->name;
        EXPECT_NE(n->qpn(), 0u);
    }
}

// The netlink monitor lost notifications (ENOBUFS): what the admin did
// meanwhile is read back, removals included.
TEST_P(Nodes, AResyncForgetsTheAddressesTheHostNoLongerHas) {
    ASSERT_TRUE(a_->host->remove_address(*parse_ip_prefix("198.18.0.1/24")));
    ASSERT_TRUE(a_->host->add_address(*parse_ip_prefix("198.18.0.7/24")));
    a_->node->resync_hosts(Clock::now());
    auto has = [&](const char* address) {
        for (const auto& a : a_->interface().engine().addresses())
            if (a.address.ip == ip(address)) return true;
        return false;
    };
    EXPECT_FALSE(has("198.18.0.1"));
    EXPECT_TRUE(has("198.18.0.7"));
    EXPECT_TRUE(has("2001:db8::1"));
    // The engine's own link-local address stays.
    const auto addresses = a_->interface().engine().addresses();
    EXPECT_TRUE(std::any_of(addresses.begin(), addresses.end(), [](const auto& a) { return a.implicit; }));
}

// `ip link del` of a node's device: its fd reports an error at every wait
// (the loop spun on it at full speed, silently). The node stops watching it,
// says so and stops with exit status 1, for the service manager to start
// it again with its devices; the other node is untouched.
TEST_P(Nodes, ADeletedDeviceStopsTheNodeWithStatusOne) {
    a_->host->delete_device();
    ASSERT_TRUE(fabric_->run_until([&] { return a_->node->exit_status() == 1; }));
    const std::size_t reads = a_->host->read_requests().size();
    fabric_->run_for(300ms);
    EXPECT_EQ(a_->host->read_requests().size(), reads) << "the gone device's fd is still watched";
    EXPECT_EQ(b_->node->exit_status(), 0);
    EXPECT_TRUE(b_->link_up());
}

TEST_P(Nodes, Ipv4CrossesBothWaysAfterArp) {
    const auto request = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    ASSERT_TRUE(deliver(*a_, *b_, request));
    EXPECT_TRUE(neighbour_has_hw(*a_, ip("198.18.0.2")));
    const auto reply = icmp_echo_v4("198.18.0.2", "198.18.0.1", 1);
    ASSERT_TRUE(deliver(*b_, *a_, reply));
    EXPECT_GE(a_->interface().engine().counters().arp_requests_tx + b_->interface().engine().counters().arp_requests_tx,
              1u);
}

TEST_P(Nodes, Ipv6CrossesBothWaysAfterNeighbourDiscovery) {
    const auto request = icmp_echo_v6("2001:db8::1", "2001:db8::2", 7);
    ASSERT_TRUE(deliver(*a_, *b_, request));
    EXPECT_TRUE(neighbour_has_hw(*a_, ip("2001:db8::2")));
    // Learned from ND only (an NA, or the Source Link-Layer Address option
    // of B's NS): IPv6 has no other way.
    const auto& c = a_->interface().engine().counters();
    EXPECT_GE(c.na_rx + c.ns_rx, 1u);
    ASSERT_TRUE(deliver(*b_, *a_, icmp_echo_v6("2001:db8::2", "2001:db8::1", 7)));
}

TEST_P(Nodes, ThreeNodesReachEachOther) {
    TestNode& c = fabric_->add_node("c", {"198.18.0.3/24", "2001:db8::3/64"}, kGuidC);
    ASSERT_TRUE(fabric_->run_until([&] { return c.link_up(); }));
    EXPECT_TRUE(deliver(c, *a_, icmp_echo_v4("198.18.0.3", "198.18.0.1", 3)));
    EXPECT_TRUE(deliver(*b_, c, icmp_echo_v4("198.18.0.2", "198.18.0.3", 4)));
    EXPECT_TRUE(deliver(c, *b_, icmp_echo_v6("2001:db8::3", "2001:db8::2", 5)));
}

// host/read_pacing.h: after a quiet spell the node reads the host once per
// wake-up, and what else waits is read on the wake-ups that follow: a burst
// crosses whole, in order.
TEST_P(Nodes, ABurstAfterAQuietSpellCrossesWholeInOrder) {
    const auto first = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    ASSERT_TRUE(deliver(*a_, *b_, first));
    b_->host->take_written();
    // What B gets from here on, but for late copies of `first` (deliver()
    // may have sent it more than once).
    const auto drop_first = [&] {
        while (b_->take_written([&](const std::vector<std::uint8_t>& p) { return p == first; })) {
        }
    };
    fabric_->run_until([] { return false; }, 10 * host::ReadPacing::kQuietSpell);  // a quiet spell, the loop running
    const std::size_t calls_before = a_->host->read_requests().size();
    std::vector<std::vector<std::uint8_t>> burst;
    for (std::uint16_t seq = 10; seq < 16; ++seq) {
        burst.push_back(icmp_echo_v4("198.18.0.1", "198.18.0.2", seq));
        ASSERT_TRUE(a_->host->inject(burst.back()));
    }
    ASSERT_TRUE(fabric_->run_until([&] {
        drop_first();
        return b_->host->written_count() >= burst.size();
    }));
    EXPECT_EQ(b_->host->take_written(), burst);
    const auto& calls = a_->host->read_requests();
    ASSERT_GT(calls.size(), calls_before);
    EXPECT_EQ(calls[calls_before], 1u);  // the first wake-up after the quiet spell
}

TEST_P(Nodes, PeerRestartingWithANewQpnIsReachedAgain) {
    ASSERT_TRUE(deliver(*a_, *b_, icmp_echo_v4("198.18.0.1", "198.18.0.2", 1)));
    const std::uint32_t old_qpn = b_->qpn();
    TestNode& b = fabric_->restart_node(1);
    b_ = &b;
    ASSERT_TRUE(fabric_->run_until([&] { return b.link_up(); }));
    EXPECT_NE(b.qpn(), old_qpn);
    // A learns the new QPN (B's gratuitous ARP, or a new resolution) and
    // its packets reach the new B.
    ASSERT_TRUE(deliver(*a_, b, icmp_echo_v4("198.18.0.1", "198.18.0.2", 2)));
    bool knows_new_qpn = false;
    for (const auto& e : a_->interface().engine().neighbours().entries())
        if (e.ip == ip("198.18.0.2") && e.hw) knows_new_qpn = e.hw->qpn == b.qpn();
    EXPECT_TRUE(knows_new_qpn);
    ASSERT_TRUE(deliver(b, *a_, icmp_echo_v4("198.18.0.2", "198.18.0.1", 2)));
}

TEST_P(Nodes, ControlAnswersComeFromTheNode) {
    ASSERT_TRUE(deliver(*a_, *b_, icmp_echo_v4("198.18.0.1", "198.18.0.2", 9)));
    const std::string status = a_->node->answer("status");
    EXPECT_NE(status.find("\"link\":\"up\""), std::string::npos) << status;
    EXPECT_NE(status.find("\"interface\":\"ib0\""), std::string::npos) << status;
    EXPECT_NE(status.find("\"qkey\":\"0x00000b1b\""), std::string::npos) << status;  // hex, as the journal
    const std::string stats = a_->node->answer("stats");
    EXPECT_NE(stats.find("\"tx_unicast\":"), std::string::npos) << stats;
    EXPECT_NE(stats.find("\"port\":{"), std::string::npos) << stats;
    const std::string neigh = a_->node->answer("neigh");
    EXPECT_NE(neigh.find("198.18.0.2"), std::string::npos) << neigh;
    // Named interfaces: the one there is, and one that is not.
    const std::string list = a_->node->answer("interfaces");
    EXPECT_NE(list.find("\"interface\":\"ib0\""), std::string::npos) << list;
    EXPECT_NE(list.find("\"pkey\":\"0xffff\""), std::string::npos) << list;
    EXPECT_NE(a_->node->answer("neigh ib0").find("198.18.0.2"), std::string::npos);
    EXPECT_NE(a_->node->answer("stats ib0").find("\"tx_unicast\":"), std::string::npos);
    EXPECT_NE(a_->node->answer("neigh ib9").find("\"error\":\"no interface ib9 on this node\""), std::string::npos);
    EXPECT_NE(a_->node->answer("flush neigh ib0").find("\"flushed\":\"neigh\""), std::string::npos);
    EXPECT_TRUE(a_->interface().engine().neighbours().entries().empty());
}

// A healthy SM may leave a CA port alone for long (OpenSM's light sweeps
// read only the switches): here ibfabricd's sweeps are an hour apart, so
// after programming the port the SM sends it nothing. After half of
// [fabric] sm-silence the node asks the SA, whose answer shows the SM is
// alive: no warning, and sm_contact_age_s stays under sm-silence. (An SM
// that neither sweeps nor answers is reported: tests/opensm/external_sm.sh
// with OpenSM killed.)
TEST(NodeSmSilence, AQuietSmWhoseSaAnswersIsNoSilence) {
    Fabric fabric(FabricKind::soft, [](fabric::FabricServiceOptions& o) { o.sm.sweep_interval = 1h; });
    fabric.tune_config = [](config::DaemonConfig& c) { c.fabric.sm_silence = 2s; };
    TestNode& a = fabric.add_node("a", {"198.18.0.1/24"}, kGuidA);
    ASSERT_TRUE(fabric.run_until([&] { return a.link_up(); }));
    const auto probes = [&] { return a.interface().engine().counters().sa_probes; };
    // Three times sm-silence with no SMP to the port.
    ASSERT_TRUE(fabric.run_until([&] { return probes() >= 3; }, 20s)) << a.node->answer("stats");
    EXPECT_FALSE(a.node->sm_silent());
    const std::string status = a.node->answer("status");
    EXPECT_NE(status.find("\"sm_silent\":false"), std::string::npos) << status;
    const auto age = status.find("\"sm_contact_age_s\":");
    ASSERT_NE(age, std::string::npos) << status;
    EXPECT_LE(std::stoi(status.substr(age + 19)), 2) << status;
    EXPECT_NE(a.node->answer("stats").find("\"sa_probes\":"), std::string::npos);
}

// Over the memory fabric the port has no SMA of ours to watch: never silent.
TEST(NodeSmSilence, APortWithoutAnSmaOfOursIsNeverSilent) {
    Fabric fabric(FabricKind::memory);
    fabric.tune_config = [](config::DaemonConfig& c) { c.fabric.sm_silence = 100ms; };
    TestNode& a = fabric.add_node("a", {"198.18.0.1/24"}, kGuidA);
    ASSERT_TRUE(fabric.run_until([&] { return a.link_up(); }));
    fabric.run_for(500ms);
    EXPECT_FALSE(a.node->sm_silent());
    EXPECT_NE(a.node->answer("status").find("\"sm_contact_age_s\":null"), std::string::npos);
}

// Each node's connection manager answers on QP1 (issue 21): a REQ for a
// ServiceID nobody listens on is rejected with reason 8, and the asking
// side hears it; both count it in `ipoibctl stats`.
TEST_P(Nodes, TheConnectionManagerAnswersOnQp1) {
    daemon::CmService* cm = a_->node->cm();
    ASSERT_NE(cm, nullptr);
    ASSERT_NE(b_->node->cm(), nullptr);
    const std::uint16_t b_lid = b_->node->port().attributes().lid;
    cm::ConnectParams p{.peer = {.lid = b_lid}, .service_id = cm::ipoib_service_id(b_->qpn()), .local_qpn = 0x1234};
    p.primary.local_lid = a_->node->port().attributes().lid;
    p.primary.remote_lid = b_lid;
    ASSERT_TRUE(cm->engine().connect(p, Clock::now()));
    cm->tick(Clock::now());  // sends the REQ
    ASSERT_TRUE(fabric_->run_until([&] { return cm->engine().counters().received[2] == 1; }))  // REJ
        << b_->node->answer("stats");
    EXPECT_EQ(b_->node->cm()->engine().counters().unknown_service, 1u);
    EXPECT_EQ(cm->engine().connections(), 0u);
    const std::string stats = b_->node->answer("stats");
    EXPECT_NE(stats.find("\"cm\":{"), std::string::npos) << stats;
    EXPECT_NE(stats.find("\"cm_unknown_service\":1"), std::string::npos) << stats;
}

INSTANTIATE_TEST_SUITE_P(Fabrics, Nodes, ::testing::Values(FabricKind::memory, FabricKind::soft),
                         [](const ::testing::TestParamInfo<FabricKind>& p) { return to_string(p.param); });

}  // namespace
}  // namespace ipoibd::inprocess
