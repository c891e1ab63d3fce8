// Tables for ipoibctl: aligned columns, display width, JSON shown as text.
#include <gtest/gtest.h>

#include <string>

#include "daemon/json_parse.h"
#include "daemon/table.h"

namespace ipoibd::daemon {
namespace {

TEST(Table, ColumnsAlignedNumbersRight) {
    Table t({"ip", "state", "rx"});
    t.add_row({"198.18.0.2", "REACHABLE", "5"});
    t.add_row({"fe80::1", "STALE", "12345"});
    t.add_row({"198.18.0.3"});
    EXPECT_EQ(t.render(),
              "ip          state         rx\n"
              "198.18.0.2  REACHABLE      5\n"
              "fe80::1     STALE      12345\n"
              "198.18.0.3  -              -\n");
    EXPECT_EQ(t.render("  ").substr(0, 6), "  ip  ");
}

TEST(Table, WidthCountsCodePointsAndControlsArePrinted) {
    Table t({"node", "n"});
    t.add_row({"caf\xc3\xa9", "1"});
    t.add_row({printable("evil\x1b[2Jx"), "22"});
    EXPECT_EQ(t.render(),
              "node        n\n"
              "caf\xc3\xa9        1\n"
              "evil?[2Jx  22\n");
    EXPECT_EQ(display_width("caf\xc3\xa9"), 4u);
}

TEST(Table, JsonAsText) {
    auto doc = parse_json(R"({"ifname":"ib0","state":"up","mtu":2044,"flags":["a","b"],"gw":null,
        "counters":{"rx_packets":10,"tx_packets":7},
        "neigh":[{"ip":"198.18.0.2","qpn":"0x000048","age":12},{"ip":"198.18.0.3","age":3,"state":"STALE"}],
        "groups":[]})");
    ASSERT_TRUE(doc.has_value());
    EXPECT_EQ(format_json_text(*doc),
              "ifname: ib0\n"
              "state: up\n"
              "mtu: 2044\n"
              "flags: a, b\n"
              "gw: -\n"
              "counters:\n"
              "  rx_packets: 10\n"
              "  tx_packets: 7\n"
              "neigh:\n"
              "  ip          qpn       age  state\n"
              "  198.18.0.2  0x000048   12  -\n"
              "  198.18.0.3  -           3  STALE\n"
              "groups: (none)\n");
    auto rows = parse_json(R"([{"mgid":"ff12:401b::1","members":["a","b"],"x":{"y":1}}])");
    EXPECT_EQ(format_json_text(*rows),
              "mgid          members  x\n"
              "ff12:401b::1  a,b      {\"y\":1}\n");
}

}  // namespace
}  // namespace ipoibd::daemon
