// Topology files (.net, ibsim's and ibnetdiscover's syntax): what the
// subset takes, the GUIDs ibsim would give, and every refusal naming its
// line.
#include <gtest/gtest.h>

#include <algorithm>

#include "fabric/routing/credit_loops.h"
#include "fabric/routing/net_file.h"
#include "fabric/routing/routing.h"

#ifndef IPOIBD_SOURCE_DIR
#error "tests/unit/CMakeLists.txt defines IPOIBD_SOURCE_DIR for this file"
#endif

namespace ipoibd::fabric::routing {
namespace {

NetFile must_parse(std::string_view text) {
    auto r = parse_net(text, "test.net");
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().to_string());
    return r ? std::move(*r) : NetFile{};
}

// Two leaves, two spines, two hosts per leaf; every cable from both ends,
// in ibnetdiscover's layout for one node and ibsim's for the rest.
constexpr std::string_view kLeafSpine = R"(# a leaf-spine fabric
switchguid=0x0002c90000001000(2c90000001000)
Switch	4 "leaf0"		# "leaf0 desc" enhanced port 0 lid 1 lmc 0
[1]	"h0"[1](100001) 		# "h0" lid 5 4xQDR
[2]	"h1"[1]
[3]	"spine0"[1]
[4]	"spine1"[1]

Switch 4 "leaf1"
[1] "h2"[1]
[2] "h3"
[3] "spine0"[2] w=4 s=4
[4] "spine1"[2]

Switch 2 "spine0"
[1] "leaf0"[3]
[2] "leaf1"[3]

Switch 2 "spine1"
[1] "leaf0"[4]

caguid=0x100000
Hca 1 "h0"
[1](100001) "leaf0"[1]

Hca 1 "h1"
[1] "leaf0"[2]

Ca 1 "h2"
[1] "leaf1"[1]

Hca 2 "h3"
[1] "leaf1"[2]
)";

TEST(NetFile, ParsesTheLeafSpineFile) {
    const NetFile net = must_parse(kLeafSpine);
    ASSERT_EQ(net.nodes.size(), 8u);
    EXPECT_EQ(net.nodes[0].id, "leaf0");
    EXPECT_EQ(net.nodes[0].description, "leaf0 desc");
    EXPECT_EQ(net.nodes[1].description, "leaf1");  // none given: the id
    EXPECT_EQ(net.nodes[0].num_ports, 4u);
    // GUIDs as ibsim gives them: switchguid= once, then one per switch;
    // CAs from caguid=, each taking its ports + 1.
    EXPECT_EQ(net.nodes[0].node_guid, 0x0002c90000001000u);
    EXPECT_EQ(net.nodes[3].node_guid, 0x0002c90000001003u);
    EXPECT_EQ(net.nodes[4].node_guid, 0x100000u);
    EXPECT_EQ(net.nodes[5].node_guid, 0x100002u);
    EXPECT_EQ(net.nodes[7].node_guid, 0x100006u);
    EXPECT_EQ(net.nodes[7].port_guid(1), 0x100007u);
    EXPECT_EQ(net.nodes[7].type, NetNode::Type::ca);
    // Each cable once, whether listed from one end (spine1 - leaf1) or both.
    EXPECT_EQ(net.cables.size(), 8u);
    const std::size_t h3 = net.find("h3");
    const auto it = std::find_if(net.cables.begin(), net.cables.end(), [&](const NetCable& c) { return c.b == h3; });
    ASSERT_NE(it, net.cables.end());
    EXPECT_EQ(it->a, net.find("leaf1"));
    EXPECT_EQ(it->a_port, 2);
    EXPECT_EQ(it->b_port, 1);  // "[2] "h3"": the peer's port 1 by default
}

TEST(NetFile, BecomesATopologyThatRoutes) {
    const auto t = to_topology(must_parse(kLeafSpine), "test.net");
    ASSERT_TRUE(t.has_value()) << t.error().to_string();
    EXPECT_EQ(t->switches().size(), 4u);
    EXPECT_EQ(t->links(), 4u);
    ASSERT_EQ(t->endpoints().size(), 4u);
    EXPECT_EQ(t->switches()[0].lid, 1);  // switches first, in file order
    EXPECT_EQ(t->endpoints()[0].lid, 5);
    EXPECT_EQ(t->endpoints()[0].guid, 0x100001u);
    const auto r = route(*t, {});
    ASSERT_TRUE(r.routes.has_value());
    EXPECT_EQ(path_hops(*t, *r.routes, 5, 8), 3u);  // h0 to h3: leaf, spine, leaf
    EXPECT_EQ(path_hops(*t, *r.routes, 5, 6), 1u);
    EXPECT_TRUE(check_credit_loops(*t, *r.routes).cycle.empty());
}

TEST(NetFile, ReadsTheOpenSmHarnessFile) {
    const auto net = load_net(std::string(IPOIBD_SOURCE_DIR) + "/tests/opensm/fabric.net");
    ASSERT_TRUE(net.has_value()) << net.error().to_string();
    ASSERT_EQ(net->nodes.size(), 4u);
    // What that file's comment says ibsim gives: the switch 0x200000, the
    // CAs 0x100000, 0x100002, 0x100004.
    EXPECT_EQ(net->nodes[0].node_guid, 0x200000u);
    EXPECT_EQ(net->nodes[1].node_guid, 0x100000u);
    EXPECT_EQ(net->nodes[3].node_guid, 0x100004u);
    EXPECT_EQ(net->cables.size(), 3u);
}

TEST(NetFile, MissingFileIsNamed) {
    const auto net = load_net("/nonexistent/fabric.net");
    ASSERT_FALSE(net.has_value());
    EXPECT_EQ(net.error().to_string(), "/nonexistent/fabric.net:0: cannot open the topology file");
}

struct BadCase {
    const char* name;
    const char* text;
    int line;
    const char* message;  // a part of it
};

const BadCase kBad[] = {
    {"port_before_node", "[1] \"a\"[1]\n", 1, "outside a node"},
    {"port_after_blank_line", "Switch 2 \"s\"\n[1] \"h\"[1]\n\n[2] \"h\"[1]\nHca 1 \"h\"\n", 4, "outside a node"},
    {"zero_ports", "Switch 0 \"s\"\n", 1, "1 to 254"},
    {"too_many_ports", "Switch 255 \"s\"\n", 1, "1 to 254"},
    {"no_id", "Switch 4 s\n", 1, "double quotes"},
    {"unterminated_id", "Switch 4 \"s\n", 1, "double quotes"},
    {"junk_after_id", "Switch 4 \"s\" junk\n", 1, "after the id"},
    {"duplicate_id", "Switch 4 \"s\"\n\nHca 1 \"s\"\n", 3, "defined twice (first on line 1)"},
    {"duplicate_guid", "switchguid=0x10\nSwitch 4 \"a\"\nswitchguid=0x10\nSwitch 4 \"b\"\n", 4, "GUID 0x10"},
    {"port_out_of_range", "Switch 2 \"s\"\n[3] \"h\"[1]\n", 2, "ports 1 to 2, not 3"},
    {"port_zero", "Switch 2 \"s\"\n[0] \"h\"[1]\n", 2, "not 0"},
    {"bad_port_bracket", "Switch 2 \"s\"\n[1 \"h\"[1]\n", 2, "[port]"},
    {"bad_local_guid", "Switch 2 \"s\"\n[1](xyz) \"h\"[1]\n", 2, "port GUID"},
    {"no_peer", "Switch 2 \"s\"\n[1]\n", 2, "peer's id"},
    {"bad_peer_port", "Switch 2 \"s\"\n[1] \"h\"[x]\n", 2, "peer's \"[port]\""},
    {"bad_option", "Switch 2 \"s\"\n[1] \"h\"[1] speed=fast\n", 2, "options are"},
    {"port_twice", "Switch 2 \"s\"\n[1] \"h\"[1]\n[1] \"g\"[1]\nHca 1 \"h\"\nHca 1 \"g\"\n", 3, "listed twice (first on line 2)"},
    {"unknown_peer", "Switch 2 \"s\"\n[1] \"nobody\"[1]\n", 2, "no node \"nobody\""},
    {"peer_port_out_of_range", "Switch 2 \"s\"\n[1] \"h\"[2]\n\nHca 1 \"h\"\n", 2, "\"h\" has ports 1 to 1, not 2"},
    {"self_cable", "Switch 2 \"s\"\n[1] \"s\"[1]\n", 2, "cabled to itself"},
    {"ends_disagree", "Switch 2 \"s\"\n[1] \"t\"[1]\n\nSwitch 2 \"t\"\n[1] \"s\"[2]\n", 2,
     "line 5 cables that port to \"s\"[2]"},
    {"router", "Rt 2 \"r\"\n", 1, "routers"},
    {"alias", "@s \"x\"\n", 1, "aliases"},
    {"include", "include other.net\n", 1, "\"include\" lines are not supported"},
    {"unknown_line", "Bridge 2 \"b\"\n", 1, "unknown line"},
    {"bad_guid_base", "switchguid 0x10\n", 1, "'=' or '+'"},
    {"bad_guid_value", "caguid=zz\n", 1, "GUID in hex"},
};

class NetFileRefuses : public testing::TestWithParam<BadCase> {};

TEST_P(NetFileRefuses, NamingTheLine) {
    const BadCase& c = GetParam();
    const auto r = parse_net(c.text, "bad.net");
    ASSERT_FALSE(r.has_value()) << c.name;
    EXPECT_EQ(r.error().file, "bad.net");
    EXPECT_EQ(r.error().line, c.line) << r.error().to_string();
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().to_string();
}

INSTANTIATE_TEST_SUITE_P(Table, NetFileRefuses, testing::ValuesIn(kBad),
                         [](const testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

TEST(NetFile, CablesBetweenTwoCasAreRefusedAsATopology) {
    const NetFile net = must_parse("Hca 1 \"a\"\n[1] \"b\"[1]\n\nHca 1 \"b\"\n[1] \"a\"[1]\n");
    const auto t = to_topology(net, "x.net");
    ASSERT_FALSE(t.has_value());
    EXPECT_EQ(t.error().line, 2);
    EXPECT_NE(t.error().message.find("two CAs"), std::string::npos);
}

TEST(NetFile, AcceptsIbsimAttributesAndRelativeGuids) {
    const NetFile net = must_parse(
        "vendid=0x2c9\ndevid=0xb924\nsysimgguid=0x5\nwidth=4\nspeed=2\n"
        "switchguid=0x100\nswitchguid+0x10\nSwitch 1 \"s\"\n[1] \"h\"\n\nHca 1 \"h\"\n\r\n");
    ASSERT_EQ(net.nodes.size(), 2u);
    EXPECT_EQ(net.nodes[0].node_guid, 0x110u);
    EXPECT_EQ(net.cables.size(), 1u);
}

}  // namespace
}  // namespace ipoibd::fabric::routing
