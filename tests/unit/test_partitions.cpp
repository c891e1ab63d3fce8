#include <gtest/gtest.h>

#include "fabric/partitions.h"

namespace ipoibd::fabric {
namespace {

TEST(Partitions, DefaultIsOpenSmsDefault) {
    const auto d = default_partitions();
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].pkey, 0x7FFF);
    EXPECT_TRUE(d[0].ipoib);
    EXPECT_EQ(d[0].broadcast.qkey, 0x0B1Bu);
    EXPECT_EQ(d[0].broadcast.mtu, 4);
    EXPECT_EQ(d[0].broadcast.rate, 3);
    EXPECT_EQ(d[0].broadcast.scope, 2);
    EXPECT_EQ(pkeys_for_port(d, 0x1234), (std::vector<std::uint16_t>{0xFFFF}));
}

TEST(Partitions, ParsesFlagsMembersAndComments) {
    const char* text =
        "# the default partition\n"
        "Default=0x7fff, ipoib, mtu=5, rate=7, sl=1, scope=5, qkey=0x1b1b : ALL=full ;\n"
        "storage = 0x8001 , ipoib, defmember=full :\n"
        "   0x0002c90300001234,   # one host\n"
        "   0x0002c90300005678=limited ;\n"
        "mgmt=0x0002 : ALL=limited, SELF=both;\n";
    auto p = parse_partitions(text, "p.conf");
    ASSERT_TRUE(p.has_value()) << p.error().to_string();
    ASSERT_EQ(p->size(), 3u);
    const Partition& d = (*p)[0];
    EXPECT_EQ(d.broadcast.mtu, 5);
    EXPECT_EQ(d.broadcast.rate, 7);
    EXPECT_EQ(d.broadcast.sl, 1);
    EXPECT_EQ(d.broadcast.scope, 5);
    EXPECT_EQ(d.broadcast.qkey, 0x1B1Bu);
    const Partition& s = (*p)[1];
    EXPECT_EQ(s.name, "storage");
    EXPECT_EQ(s.pkey, 0x0001);
    EXPECT_EQ(s.line, 3);
    ASSERT_EQ(s.members.size(), 2u);
    EXPECT_EQ(s.members[0].membership, Membership::full);  // defmember
    EXPECT_EQ(s.members[1].membership, Membership::limited);
    EXPECT_FALSE((*p)[2].ipoib);

    EXPECT_EQ(pkeys_for_port(*p, 0x0002c90300001234), (std::vector<std::uint16_t>{0xFFFF, 0x8001, 0x0002}));
    EXPECT_EQ(pkeys_for_port(*p, 0x0002c90300005678), (std::vector<std::uint16_t>{0xFFFF, 0x0001, 0x0002}));
    EXPECT_EQ(pkeys_for_port(*p, 0x99), (std::vector<std::uint16_t>{0xFFFF, 0x0002}));
    EXPECT_EQ(pkeys_for_port(*p, 0x77, 0x77), (std::vector<std::uint16_t>{0xFFFF, 0x8002, 0x0002}));
}

TEST(Partitions, ErrorsNameFileAndLine) {
    struct Case {
        const char* text;
        int line;
        const char* message;
    } cases[] = {
        {"A=0x1 : ALL;\nB : ALL;\n", 2, "partition 'B' has no P_Key (write B=0x...)"},
        {"A=0x8000 : ALL;", 1, "P_Key '0x8000' of 'A' is not a valid P_Key"},
        {"A=0x1, fast : ALL;", 1, "unknown flag 'fast' in partition 'A'"},
        {"\n\nA=0x1, mtu=9 : ALL;", 3, "bad value '9' for mtu in partition 'A'"},
        {"A=0x1 : bob;", 1, "member 'bob' is not ALL, ALL_CAS, ALL_SWITCHES, SELF or a port GUID"},
        {"A=0x1 : ALL=most;", 1, "membership of 'ALL' must be full, limited or both"},
        {"A=0x1 : ALL;\nA=0x2 : ALL;", 2, "partition 'A' defined again (first at line 1)"},
        {"A=0x1 : ALL;\nB=0x8001 : ALL;", 2, "P_Key of 'B' already used by 'A' (line 1)"},
        {"A=0x1 : ALL", 1, "statement not ended with ';'"},
        {"A=0x1 ALL;", 1, "expected 'Name=PKey[,flags] : members ;'"},
        {"# nothing\n", 2, "no partitions defined"},
        // Text only: the bytes never reach the message.
        {"A=0x7fff, ipoib : ALL;\nB=0x8001\x01zz : ALL;\n", 2, "control character 0x01 at column 9 (not text)"},
        {"A=0x7fff, ipoib\x1b[31m : ALL;\n", 1, "control character 0x1b at column 16 (not text)"},
        {"A=0x7fff : ALL; # caf\xe9\r\n", 1, "byte 0xe9 at column 22 is not UTF-8 (not text)"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.text);
        auto p = parse_partitions(c.text, "/etc/ibfabricd/partitions.conf");
        ASSERT_FALSE(p.has_value());
        EXPECT_EQ(p.error().line, c.line);
        EXPECT_EQ(p.error().message, c.message);
        EXPECT_EQ(p.error().to_string(), "/etc/ibfabricd/partitions.conf:" + std::to_string(c.line) + ": " + c.message);
    }
}

// A NUL is named too (the message quoted the statement up to it); CRLF
// line ends and UTF-8 comments are text, and a byte order mark is skipped.
TEST(Partitions, ANulIsNamedAndTextIsTaken) {
    auto nul = parse_partitions(std::string("A=0x7fff : ALL;\nB=0x8001\0 : ALL;\n", 32), "p.conf");
    ASSERT_FALSE(nul.has_value());
    EXPECT_EQ(nul.error().to_string(), "p.conf:2: control character 0x00 at column 9 (not text)");
    auto text = parse_partitions("\xef\xbb\xbf# caf\xc3\xa9\r\nDefault=0x7fff, ipoib :\tALL=full;\r\n", "p.conf");
    ASSERT_TRUE(text.has_value()) << text.error().to_string();
    ASSERT_EQ(text->size(), 1u);
    EXPECT_EQ(text->front().name, "Default");
}

TEST(Partitions, MissingFile) {
    auto p = load_partitions("/nonexistent/partitions.conf");
    ASSERT_FALSE(p.has_value());
    EXPECT_EQ(p.error().to_string(), "/nonexistent/partitions.conf:0: cannot be read");
}

}  // namespace
}  // namespace ipoibd::fabric
