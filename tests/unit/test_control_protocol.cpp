// The control protocol: command names, socket paths, instance names.
#include <gtest/gtest.h>

#include <optional>

#include "daemon/control_protocol.h"

namespace ipoibd::daemon {
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

}  // namespace
}  // namespace ipoibd::daemon
