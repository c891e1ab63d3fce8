// ibfabricd --topology (fabric/topology_config.h): a .net file's switches
// as this process's switches, their addresses, links and SM, and the
// refusals naming the switch or option at fault.
#include <gtest/gtest.h>

#include "fabric/topology_config.h"

namespace ipoibd::fabric {
namespace {

SocketAddress addr(const char* text) { return *parse_socket_address(text); }

constexpr std::string_view kFile = R"(switchguid=0x100
Switch 8 "leaf1"  # "leaf one"
[8] "spine"[1]
[1] "h1"[1]

Switch 8 "leaf2"
[8] "spine"[2]

Switch 4 "spine"

Hca 1 "h1"
)";

routing::NetFile net() { return *routing::parse_net(kFile, "f.net"); }

TopologyRequest request(const routing::NetFile& n) {
    TopologyRequest r;
    r.net = &n;
    r.file = "f.net";
    r.base.listen = addr("198.18.5.1:18516");
    r.base.sm_enabled = false;
    return r;
}

TEST(TopologyConfig, EverySwitchOfTheFileOnConsecutivePorts) {
    const routing::NetFile n = net();
    const auto made = topology_switches(request(n));
    ASSERT_TRUE(made.has_value()) << made.error();
    ASSERT_EQ(made->size(), 3u);
    const TopologySwitch& leaf1 = (*made)[0];
    EXPECT_EQ(leaf1.name, "leaf1");
    EXPECT_EQ(leaf1.options.listen, addr("198.18.5.1:18516"));
    EXPECT_EQ(leaf1.options.sw.guid, 0x100u);
    EXPECT_EQ(leaf1.options.sm.guid, 0x100u);
    EXPECT_EQ(leaf1.options.sw.description, "leaf one");
    EXPECT_EQ(leaf1.options.sw.num_ports, 8);
    // The host's cable is no link: hosts take any free port.
    ASSERT_EQ(leaf1.options.sw.links.size(), 1u);
    EXPECT_EQ(leaf1.options.sw.links[0].port, 8);
    EXPECT_EQ(leaf1.options.sw.links[0].peer, addr("198.18.5.1:18518"));
    const TopologySwitch& spine = (*made)[2];
    EXPECT_EQ(spine.options.listen, addr("198.18.5.1:18518"));
    EXPECT_EQ(spine.options.sw.guid, 0x102u);
    EXPECT_EQ(spine.options.sw.description, "spine");
    ASSERT_EQ(spine.options.sw.links.size(), 2u);  // listed from the leaves' ends only
    EXPECT_EQ(spine.options.sw.links[0].port, 1);
    EXPECT_EQ(spine.options.sw.links[0].peer, addr("198.18.5.1:18516"));
    EXPECT_EQ(spine.options.sw.links[1].peer, addr("198.18.5.1:18517"));
}

TEST(TopologyConfig, OnlyTheFirstSwitchKeepsTheSm) {
    const routing::NetFile n = net();
    TopologyRequest r = request(n);
    r.base.sm_enabled = true;
    const auto made = topology_switches(r);
    ASSERT_TRUE(made.has_value());
    EXPECT_TRUE((*made)[0].options.sm_enabled);
    EXPECT_FALSE((*made)[1].options.sm_enabled);
    EXPECT_FALSE((*made)[2].options.sm_enabled);
}

TEST(TopologyConfig, ASplitFabricLinksToSwitchesRunElsewhere) {
    const routing::NetFile n = net();
    TopologyRequest r = request(n);
    r.run_here = {"spine"};
    r.addresses = {{"leaf1", addr("198.18.6.1:18516")}, {"spine", addr("198.18.6.3:18516")}};
    const auto made = topology_switches(r);
    ASSERT_TRUE(made.has_value()) << made.error();
    ASSERT_EQ(made->size(), 1u);
    const TopologySwitch& spine = made->front();
    EXPECT_EQ(spine.options.listen, addr("198.18.6.3:18516"));
    EXPECT_EQ(spine.options.sw.links[0].peer, addr("198.18.6.1:18516"));  // given
    EXPECT_EQ(spine.options.sw.links[1].peer, addr("198.18.5.1:18517"));  // the default rule
}

struct BadCase {
    const char* name;
    std::vector<std::string> run_here;
    std::map<std::string, std::string> addresses;
    const char* listen;
    const char* message;
};

TEST(TopologyConfig, RefusesNamingTheSwitchOrOption) {
    const routing::NetFile n = net();
    const BadCase cases[] = {
        {"unknown_run_here", {"leaf9"}, {}, "198.18.5.1:18516", "--topology-switch leaf9: no switch \"leaf9\" in f.net"},
        {"run_here_a_ca", {"h1"}, {}, "198.18.5.1:18516", "--topology-switch h1: no switch"},
        {"unknown_address", {}, {{"nobody", "198.18.5.9:1"}}, "198.18.5.1:18516", "--switch-address nobody: no switch"},
        {"same_address", {}, {{"spine", "198.18.5.1:18516"}}, "198.18.5.1:18516",
         "switches \"leaf1\" and \"spine\" would both listen on 198.18.5.1:18516"},
        {"no_address", {}, {}, "198.18.5.1:0", "switch \"leaf1\" has no address: give --switch-address leaf1=ADDR:PORT"},
        {"past_65535", {}, {}, "198.18.5.1:65535", "switch \"leaf2\" has no address"},
        {"roce_port", {}, {}, "198.18.5.1:4790", "switch \"leaf2\": port 4791 is RoCEv2's"},
    };
    for (const BadCase& c : cases) {
        TopologyRequest r = request(n);
        r.run_here = c.run_here;
        for (const auto& [name, a] : c.addresses) r.addresses[name] = addr(a.c_str());
        r.base.listen = addr(c.listen);
        const auto made = topology_switches(r);
        ASSERT_FALSE(made.has_value()) << c.name;
        EXPECT_NE(made.error().find(c.message), std::string::npos) << c.name << ": " << made.error();
    }
}

TEST(TopologyConfig, RefusesAFileWithoutSwitchesAndASwitchCabledToItself) {
    const auto cas = *routing::parse_net("Hca 1 \"h\"\n", "f.net");
    EXPECT_NE(topology_switches(request(cas)).error().find("has no switch"), std::string::npos);
    const auto loop = *routing::parse_net("Switch 4 \"s\"\n[1] \"s\"[2]\n", "f.net");
    const auto made = topology_switches(request(loop));
    ASSERT_FALSE(made.has_value());
    EXPECT_NE(made.error().find("switch \"s\" is cabled to itself (line 2)"), std::string::npos) << made.error();
}

}  // namespace
}  // namespace ipoibd::fabric
