// P_Key child interfaces (issue 22) with whole nodes in one process
// (node_harness.h): A and B each serve ib0 (the default partition) and
// ib0.8001 (P_Key 0x8001) on one port, over the in-memory fabric and the
// soft fabric (whose SM gives both ports 0x8001). Each child has its own
// QP, engine, broadcast group and host device; the children talk to each
// other, the parents to each other. A child whose P_Key the port does not
// hold stays down, says why, and comes up when the SM adds it.
#include <gtest/gtest.h>

#include <algorithm>

#include "fabric/partitions.h"
#include "ipoib/mgid.h"
#include "tests/inprocess/node_harness.h"
#include "transport/memory/memory_fabric.h"

namespace ipoibd::inprocess {
namespace {

using ipoib::test::icmp_echo_v4;
using Packet = std::vector<std::uint8_t>;

constexpr std::uint64_t kGuidA = 0x0002c90300c40001ULL;
constexpr std::uint64_t kGuidB = 0x0002c90300c40002ULL;
constexpr std::uint64_t kGuidC = 0x0002c90300c40003ULL;
constexpr std::uint16_t kChildPkey = 0x8001;

bool delivered(Fabric& f, host::FakeHostPort& from, host::FakeHostPort& to, const Packet& p) {
    for (int attempt = 0; attempt < 20; ++attempt) {
        from.inject(p);
        if (f.run_until(
                [&] {
                    auto all = to.take_written();
                    return std::find(all.begin(), all.end(), p) != all.end();
                },
                500ms))
            return true;
    }
    return false;
}

void with_child(config::DaemonConfig& c, int index) {
    config::ChildSection child;
    child.name = "ib0.8001";
    child.pkey = kChildPkey;
    child.addresses.push_back(*parse_ip_prefix("198.18.1." + std::to_string(index) + "/24"));
    c.children.push_back(child);
}

// The memory fabric's ports hold only the default P_Key until told.
void give_pkey(TestNode& n, std::uint16_t pkey) {
    auto& port = dynamic_cast<transport::MemoryPort&>(n.node->port());
    transport::PortAttributes a = port.attributes();
    a.pkey_table.push_back(pkey);
    port.core().set_attributes(a);
}

class ChildNodes : public ::testing::TestWithParam<FabricKind> {
protected:
    void SetUp() override {
        fabric_ = std::make_unique<Fabric>(GetParam(), [](fabric::FabricServiceOptions& o) {
            auto parts = fabric::parse_partitions(
                "Default=0x7fff, ipoib : ALL=full ;\n"
                "P8001=0x8001, ipoib : 0x0002c90300c40001=full, 0x0002c90300c40002=full ;\n",
                "test");
            if (parts) o.sm.partitions = *parts;
        });
        fabric_->tune_config = [](config::DaemonConfig& c) {
            with_child(c, c.fabric.port_guid == kGuidA ? 1 : 2);
        };
        a_ = &fabric_->add_node("a", {"198.18.0.1/24"}, kGuidA);
        b_ = &fabric_->add_node("b", {"198.18.0.2/24"}, kGuidB);
        if (GetParam() == FabricKind::memory) {
            give_pkey(*a_, kChildPkey);
            give_pkey(*b_, kChildPkey);
        }
        ASSERT_TRUE(fabric_->run_until([&] { return all_up(*a_) && all_up(*b_); }, 15s))
            << a_->node->answer("stats ib0.8001");
    }
    static bool all_up(const TestNode& n) {
        for (const auto& i : n.node->interfaces())
            if (!i->engine().link().up) return false;
        return true;
    }
    static const iface::Interface& child(const TestNode& n) { return *n.node->interfaces().at(1); }

    std::unique_ptr<Fabric> fabric_;
    TestNode* a_ = nullptr;
    TestNode* b_ = nullptr;
};

TEST_P(ChildNodes, EachChildHasItsOwnQpGroupAndDeviceOnTheSharedPort) {
    ASSERT_EQ(a_->node->interfaces().size(), 2u);
    const iface::Interface& parent = *a_->node->interfaces().front();
    const iface::Interface& c = child(*a_);
    EXPECT_EQ(c.name(), "ib0.8001");
    EXPECT_EQ(c.engine().pkey(), kChildPkey);
    EXPECT_NE(c.engine().link().qpn, parent.engine().link().qpn);
    // One port: one GID for both.
    EXPECT_EQ(c.engine().link().hw.gid, parent.engine().link().hw.gid);
    EXPECT_EQ(c.engine().multicast().broadcast_mgid(), ipoib::broadcast_mgid(kChildPkey, ipoib::Scope::link_local));
    EXPECT_NE(parent.engine().multicast().broadcast_mgid(), c.engine().multicast().broadcast_mgid());
    // ipoibctl interfaces lists both; -I ib0.8001 picks the child.
    const std::string list = a_->node->answer("interfaces");
    EXPECT_NE(list.find("\"ib0.8001\""), std::string::npos) << list;
    EXPECT_NE(list.find("\"0x8001\""), std::string::npos) << list;
    const std::string status = a_->node->answer("status ib0.8001");
    EXPECT_NE(status.find("\"pkey\":\"0x8001\""), std::string::npos) << status;
}

TEST_P(ChildNodes, ChildrenTalkToChildrenAndParentsToParents) {
    ASSERT_EQ(a_->child_hosts.size(), 1u);
    ASSERT_TRUE(delivered(*fabric_, *a_->child_hosts[0], *b_->child_hosts[0],
                          icmp_echo_v4("198.18.1.1", "198.18.1.2", 1)));
    ASSERT_TRUE(delivered(*fabric_, *b_->child_hosts[0], *a_->child_hosts[0],
                          icmp_echo_v4("198.18.1.2", "198.18.1.1", 1)));
    ASSERT_TRUE(delivered(*fabric_, *a_->host, *b_->host, icmp_echo_v4("198.18.0.1", "198.18.0.2", 2)));
    // The child's frames went on the child's QP: its counters moved, the
    // parent's ARP did not resolve the child's address.
    EXPECT_GE(child(*a_).engine().counters().tx_unicast, 1u);
    EXPECT_FALSE(a_->node->interfaces().front()->engine().neighbours().find(ipoib::test::ip("198.18.1.2")));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ChildNodes, ::testing::Values(FabricKind::memory, FabricKind::soft),
                         [](const ::testing::TestParamInfo<FabricKind>& p) { return to_string(p.param); });

TEST(ChildWithoutItsPkey, StaysDownSaysWhyAndComesUpWhenTheSmAddsIt) {
    Fabric f(FabricKind::memory);
    f.tune_config = [](config::DaemonConfig& c) { with_child(c, 3); };
    TestNode& c = f.add_node("c", {"198.18.0.3/24"}, kGuidC);
    ASSERT_TRUE(f.run_until([&] { return c.link_up(); }));
    f.run_for(300ms);
    const iface::Interface& kid = *c.node->interfaces().at(1);
    EXPECT_FALSE(kid.engine().link().up);
    EXPECT_FALSE(c.child_hosts[0]->carrier());
    EXPECT_EQ(kid.engine().counters().qp_opens, 0u);
    // No join was tried: the SA would refuse a partition the port lacks.
    EXPECT_EQ(kid.engine().sa_client().counters().sent, 0u);
    give_pkey(c, kChildPkey);
    ASSERT_TRUE(f.run_until([&] { return kid.engine().link().up; }));
    EXPECT_TRUE(c.child_hosts[0]->carrier());
}

}  // namespace
}  // namespace ipoibd::inprocess
