// Tables for ipoibctl: aligned columns, display width, JSON shown as text.
#include <gtest/gtest.h>

#include <string>

#include "ctl/json_parse.h"
#include "ctl/table.h"

namespace ipoibd::ctl {
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

// A terminal takes U+0080..U+009F as C1 controls (U+009B is CSI, as
// "\x1b[") and a stray byte of a broken sequence may be one: the daemon's
// JSON can carry both from a node description (as \u009b or raw bytes), so
// they print as '?' too, one per code point or byte.
TEST(Table, C1ControlsAndBrokenUtf8AreNotPrinted) {
    EXPECT_EQ(printable("evil\xc2\x9b" "2Jx"), "evil?2Jx");
    EXPECT_EQ(printable("a\xc2\x80z\xc2\x9f"), "a?z?");
    EXPECT_EQ(printable("raw\x9b" "2J\xff\xc3"), "raw?2J??");
    EXPECT_EQ(printable("caf\xc3\xa9 \xc2\xa0\xe2\x82\xac"), "caf\xc3\xa9 \xc2\xa0\xe2\x82\xac");
    auto doc = parse_json(R"({"node":"x\u009b31my"})");
    ASSERT_TRUE(doc.has_value());
    EXPECT_EQ(format_json_text(*doc), "node: x?31my\n");
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
}  // namespace ipoibd::ctl
