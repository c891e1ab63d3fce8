// The control protocol: command names, socket paths, instance names.
#include <gtest/gtest.h>

#include <optional>

#include "ctl/control_protocol.h"

namespace ipoibd::ctl {
namespace {

TEST(ControlProtocol, CommandsAndPaths) {
    EXPECT_EQ(control::find_command("status"), "status");
    EXPECT_EQ(control::find_command(" flush\tpaths "), "flush paths");
    EXPECT_EQ(control::find_command("flush"), std::nullopt);
    EXPECT_EQ(control::find_command("STATUS"), std::nullopt);
    EXPECT_EQ(control::find_command(""), std::nullopt);
    EXPECT_EQ(control::socket_path("ib0"), "/run/ipoibd/ib0.sock");
    EXPECT_TRUE(control::valid_instance_name("ib0.8001"));
    EXPECT_FALSE(control::valid_instance_name("../etc"));
    EXPECT_FALSE(control::valid_instance_name("a/b"));
    EXPECT_FALSE(control::valid_instance_name(""));
}

TEST(ControlProtocol, RequestsNameAnInterfaceOrNone) {
    auto r = control::parse_request("neigh");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->command, "neigh");
    EXPECT_EQ(r->interface, "");
    r = control::parse_request("  flush   paths\tib0.8001 ");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->command, "flush paths");
    EXPECT_EQ(r->interface, "ib0.8001");
    EXPECT_EQ(r->text(), "flush paths ib0.8001");
    EXPECT_EQ(control::parse_request("interfaces")->command, "interfaces");
}

TEST(ControlProtocol, BadInterfaceNamesAndExtraWordsAreRefused) {
    for (const char* bad : {"interfaces ib0",          // takes no interface
                            "neigh ib0 ib1",           // one name at most
                            "neigh a/b", "neigh a:b",  // not a Linux name
                            "neigh 0123456789abcdef",  // 16 characters
                            "neigh ..", "flush ib0", "ib0", "NEIGH ib0"})
        EXPECT_FALSE(control::parse_request(bad)) << bad;
    EXPECT_TRUE(control::parse_request("neigh 0123456789abcde"));  // 15
}

}  // namespace
}  // namespace ipoibd::ctl
