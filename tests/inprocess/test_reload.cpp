// Configuration reload (SIGHUP, Node::reload()) of whole nodes in one
// process (node_harness.h): the node's file is written, the node reloads
// it, and what each interface then runs with is read back from its engine
// and its fake host.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "tests/inprocess/node_harness.h"

namespace ipoibd::inprocess {
namespace {

constexpr std::uint64_t kGuidA = 0x0002c90300d10001ULL;

// The file that says what the harness gave node "a": reloading it changes
// nothing; tests append what they change.
const std::string kFileA =
    "[fabric]\ntransport = soft\nport-guid = 0x0002c90300d10001\n"
    "[interface]\naddress = 198.18.0.1/24\n"
    "[daemon]\nwatchdog = no\n";

class Reload : public ::testing::Test {
protected:
    void SetUp() override {
        a_ = &fabric_.add_node("a", {"198.18.0.1/24"}, kGuidA);
        ASSERT_TRUE(fabric_.run_until([&] { return a_->link_up(); }));
    }
    const iface::Interface& interface(std::size_t i) const { return *a_->node->interfaces().at(i); }
    const ipoib::NeighbourCache::Config& neighbour_config(std::size_t i) const {
        return interface(i).engine().neighbours().config();
    }

    Fabric fabric_{FabricKind::memory};
    TestNode* a_ = nullptr;
};

TEST_F(Reload, AChildTheReloadAddsRunsWithTheReloadedNeighbourSettings) {
    a_->reload(kFileA + "[neighbour]\nretrans-time = 3s\n[child a.8001]\npkey = 0x8001\n");
    ASSERT_EQ(a_->node->interfaces().size(), 2u);
    EXPECT_EQ(interface(1).name(), "a.8001");
    EXPECT_EQ(neighbour_config(0).retrans_time, 3s);
    EXPECT_EQ(neighbour_config(1).retrans_time, 3s);
}

// ipoibd.conf(5): max-entries is "Reload: restart"; the live keys of the
// same section still apply, to the parent and to a child alike.
TEST_F(Reload, ARestartOnlyNeighbourKeyKeepsItsRunningValue) {
    const std::string child = "[child a.8001]\npkey = 0x8001\n";
    a_->reload(kFileA + child);
    ASSERT_EQ(a_->node->interfaces().size(), 2u);
    a_->reload(kFileA + "[neighbour]\nmax-entries = 500\nretrans-time = 2s\n" + child);
    for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(neighbour_config(i).max_entries, 10'000u) << interface(i).name();
        EXPECT_EQ(neighbour_config(i).retrans_time, 2s) << interface(i).name();
    }
}

// [interface] mode needs a restart; a child without a mode line of its own
// follows the parent's then, and is not rebuilt by the reload.
TEST_F(Reload, AChildThatTakesTheParentsModeKeepsItUntilARestart) {
    const std::string child = "[child a.8001]\npkey = 0x8001\n";
    a_->reload(kFileA + child);
    ASSERT_EQ(a_->child_hosts.size(), 1u);
    a_->reload(kFileA + "[interface]\nmode = tap\n" + child);
    ASSERT_EQ(a_->node->interfaces().size(), 2u);
    EXPECT_EQ(a_->child_hosts.size(), 1u);  // no new device
    EXPECT_EQ(interface(1).ethernet(), nullptr);
    EXPECT_EQ(interface(0).ethernet(), nullptr);
}

// A route the host refused is not recorded as applied: the next reload
// (once the host takes it) adds it.
TEST_F(Reload, ARouteTheHostRefusedIsTriedAgainByTheNextReload) {
    const std::string file = kFileA + "[interface]\nroute = 198.19.0.0/24 via 198.18.0.2\n";
    const IpPrefix destination = *parse_ip_prefix("198.19.0.0/24");
    auto routed = [&] {
        const auto& routes = a_->host->routes();
        return std::any_of(routes.begin(), routes.end(), [&](const auto& r) { return r.destination == destination; });
    };
    a_->host->refuse_routes({destination});
    a_->reload(file);
    EXPECT_FALSE(routed());
    EXPECT_EQ(a_->interface().routes().size(), 0u);
    a_->host->refuse_routes({});
    a_->reload(file);
    EXPECT_TRUE(routed());
    EXPECT_EQ(a_->interface().routes().size(), 1u);
}

// A capture file the daemon cannot open leaves the running capture as it
// was (it took every packet up to the failed reload, and goes on); the new
// path is tried again at the next reload.
TEST_F(Reload, ACaptureFileThatCannotBeOpenedKeepsTheRunningCapture) {
    const std::string old_capture = std::filesystem::path(a_->config_file).parent_path() / "a.pcap";
    a_->reload(kFileA + "[daemon]\ncapture = " + old_capture + "\n");
    ASSERT_TRUE(std::filesystem::exists(old_capture));
    a_->reload(kFileA + "[daemon]\ncapture = /nonexistent-ipoibd-test/b.pcap\n");
    const auto size_then = std::filesystem::file_size(old_capture);
    // Traffic: a second node joins and resolves a (ARP, multicast, SA).
    fabric_.add_node("b", {"198.18.0.2/24"}, kGuidA + 1);
    // Housekeeping flushes the capture.
    EXPECT_TRUE(fabric_.run_until([&] { return std::filesystem::file_size(old_capture) > size_then; }, 10s))
        << std::filesystem::file_size(old_capture) << " bytes, " << size_then << " before";
}

// The kernel takes a route through a gateway only once the gateway is on
// the link (the fake host says so as the kernel does): on-link routes go in
// first, wherever the file lists them, at start-up and at a reload.
TEST_F(Reload, AGatewayBehindALaterOnLinkRouteIsAdded) {
    const std::string routes = "[interface]\nroute = 198.19.0.0/24 via 198.20.0.1\nroute = 198.20.0.0/24\n";
    a_->reload(kFileA + routes);
    EXPECT_EQ(a_->host->routes().size(), 2u);
    EXPECT_EQ(a_->interface().routes().size(), 2u);

    Fabric f(FabricKind::memory);
    f.tune_config = [](config::DaemonConfig& c) {
        c.interface.routes = {{*parse_ip_prefix("198.19.0.0/24"), *parse_ip_address("198.20.0.1")},
                              {*parse_ip_prefix("198.20.0.0/24"), std::nullopt}};
    };
    TestNode& b = f.add_node("b", {"198.18.0.2/24"}, kGuidA + 1);
    ASSERT_TRUE(f.run_until([&] { return b.link_up(); }));
    EXPECT_EQ(b.host->routes().size(), 2u);
}

// ipoibd.conf(5): the command line wins over the file, at every reload.
TEST(ReloadWithACommandLine, KeepsTheCommandLinesKeysOverTheFile) {
    Fabric f(FabricKind::memory);
    f.overrides = {{.key = "neighbour.retrans-time", .value = "4s"}, {.key = "interface.address", .value = "198.18.0.9/24"}};
    TestNode& a = f.add_node("a", {"198.18.0.1/24"}, kGuidA);
    ASSERT_TRUE(f.run_until([&] { return a.link_up(); }));
    ASSERT_EQ(a.host->addresses().front(), *parse_ip_prefix("198.18.0.9/24"));
    a.reload(kFileA + "[neighbour]\nretrans-time = 2s\nreachable-time = 20s\n");
    const auto& neighbour = a.interface().engine().neighbours().config();
    EXPECT_EQ(neighbour.retrans_time, 4s);
    EXPECT_EQ(neighbour.reachable_time, 20s);
    // The file's address (198.18.0.1/24) stays replaced by the command line's.
    const auto& addresses = a.host->addresses();
    EXPECT_EQ(std::count(addresses.begin(), addresses.end(), *parse_ip_prefix("198.18.0.9/24")), 1);
    EXPECT_EQ(std::count(addresses.begin(), addresses.end(), *parse_ip_prefix("198.18.0.1/24")), 0);
}

}  // namespace
}  // namespace ipoibd::inprocess
