// The logger: stderr lines, levels, journal entries, journald when there is
// one, message ids and field formats.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <string_view>

#include "runtime/journal_fields.h"
#include "runtime/log.h"
#include "runtime/message_ids.h"
#include "runtime_test_util.h"

namespace ipoibd::runtime {
namespace {

using namespace test;

TEST(Log, StderrLineFormat) {
    Pipe p;
    Logger log({.identifier = "ipoibd", .target = LogTarget::stderr_lines, .stderr_fd = p.write.get()});
    EXPECT_EQ(log.target(), LogTarget::stderr_lines);
    log.info("link up", {{field::kIfname, "ib0"}, {field::kMgid, "ff12:401b:ffff::1"}}, msgid::kLinkUp);
    log.warning("join failed");
    const std::string pid = std::to_string(::getpid());
    EXPECT_EQ(p.drain(), "ipoibd[" + pid + "]: info: link up (IPOIB_IFNAME=ib0 IB_MGID=ff12:401b:ffff::1)\n" +
                             "ipoibd[" + pid + "]: warning: join failed\n");
}

TEST(Log, StderrLineQuotesAndEscapes) {
    const LogField fields[] = {{"IPOIB_REASON", "two words"}, {"X", ""}, {"Y", "say \"hi\"\n"}, {"lower", "a=b"}};
    EXPECT_EQ(stderr_line("ipoibd", 7, LogLevel::notice, "first\nsecond", fields),
              "ipoibd[7]: notice: first\\nsecond (IPOIB_REASON=\"two words\" X=\"\" Y=\"say \\\"hi\\\"\\n\" "
              "LOWER=\"a=b\")\n");
}

// A terminal takes U+009B for CSI as it takes ESC [: C1 controls and bytes
// that are not UTF-8 are escaped like C0; text in other scripts is kept.
TEST(Log, StderrLineEscapesC1AndBytesThatAreNotUtf8) {
    const LogField fields[] = {{"X", "caf\xc3\xa9"}, {"Y", "\xc2\x9b" "2J\xff"}};
    EXPECT_EQ(stderr_line("ipoibd", 7, LogLevel::info, "a\xc2\x9b" "31m \xe2\x82 caf\xc3\xa9", fields),
              "ipoibd[7]: info: a\\xc2\\x9b31m \\xe2\\x82 caf\xc3\xa9 (X=\"caf\xc3\xa9\" Y=\"\\xc2\\x9b2J\\xff\")\n");
}

TEST(Log, LevelFiltering) {
    Pipe p;
    Logger log({.target = LogTarget::stderr_lines, .min_level = LogLevel::warning, .stderr_fd = p.write.get()});
    log.debug("d");
    log.info("i");
    log.notice("n");
    log.warning("w");
    log.error("e");
    EXPECT_FALSE(log.enabled(LogLevel::notice));
    EXPECT_TRUE(log.enabled(LogLevel::error));
    std::string out = p.drain();
    EXPECT_EQ(out.find(": debug: "), std::string::npos);
    EXPECT_EQ(out.find(": info: "), std::string::npos);
    EXPECT_EQ(out.find(": notice: "), std::string::npos);
    EXPECT_NE(out.find(": warning: w\n"), std::string::npos);
    EXPECT_NE(out.find(": error: e\n"), std::string::npos);

    log.set_min_level(LogLevel::debug);
    log.debug("now visible");
    EXPECT_NE(p.drain().find(": debug: now visible\n"), std::string::npos);
}

TEST(Log, ParseLevel) {
    EXPECT_EQ(parse_log_level("debug").value(), LogLevel::debug);
    EXPECT_EQ(parse_log_level("notice").value(), LogLevel::notice);
    EXPECT_EQ(parse_log_level("warn").value(), LogLevel::warning);
    EXPECT_EQ(parse_log_level("err").value(), LogLevel::error);
    auto bad = parse_log_level("loud");
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error(), "unknown log level 'loud' (debug, info, notice, warning, error)");
    EXPECT_EQ(syslog_priority(LogLevel::debug), 7);
    EXPECT_EQ(syslog_priority(LogLevel::error), 3);
}

TEST(Log, JournalFieldNames) {
    EXPECT_EQ(journal_field_name("IPOIB_IFNAME"), "IPOIB_IFNAME");
    EXPECT_EQ(journal_field_name("ib_gid"), "IB_GID");
    EXPECT_EQ(journal_field_name("peer-hw"), "PEER_HW");
    EXPECT_EQ(journal_field_name("_PID"), "F_PID") << "trusted fields cannot be forged";
    EXPECT_EQ(journal_field_name("1X"), "F1X");
    EXPECT_EQ(journal_field_name(""), "F");
    EXPECT_EQ(journal_field_name(std::string(100, 'A')).size(), 64u);
}

TEST(Log, JournalEntryFields) {
    const std::string qpn = field::format_qpn(0x48);  // fields are views: the string must outlive them
    const LogField fields[] = {{field::kIfname, "ib0"}, {field::kQpn, qpn}};
    const auto here = SourceLocation::current();
    auto entry = journal_entry("ipoibd", LogLevel::info, "link up", fields, msgid::kLinkUp, here);
    ASSERT_EQ(entry.size(), 9u);
    EXPECT_EQ(entry[0], "MESSAGE=link up");
    EXPECT_EQ(entry[1], "PRIORITY=6");
    EXPECT_EQ(entry[2], "SYSLOG_IDENTIFIER=ipoibd");
    EXPECT_EQ(entry[3], "MESSAGE_ID=e6679c3ea3fe4299bcf2506d6fa52b6e");
    EXPECT_EQ(entry[4], "CODE_FILE=" + std::string(here.file));
    EXPECT_TRUE(entry[4].ends_with("test_log.cpp"));
    EXPECT_EQ(entry[5], "CODE_LINE=" + std::to_string(here.line));
    EXPECT_EQ(entry[6], "CODE_FUNC=TestBody");
    EXPECT_EQ(entry[7], "IPOIB_IFNAME=ib0");
    EXPECT_EQ(entry[8], "IB_QPN=0x000048");

    auto no_id = journal_entry("ipoibd", LogLevel::error, "x", {}, std::nullopt, here);
    EXPECT_EQ(no_id[1], "PRIORITY=3");
    EXPECT_TRUE(no_id[3].starts_with("CODE_FILE=")) << "no MESSAGE_ID field without an id";
}

SourceLocation caller(const SourceLocation& where = SourceLocation::current()) { return where; }

TEST(Log, LocationIsTheCallers) {
    const unsigned line = __LINE__ + 1;
    const SourceLocation got = caller();
    EXPECT_EQ(got.line, line);
    EXPECT_STREQ(got.function, "TestBody");
}

TEST(Log, JournalStreamDetection) {
    Pipe p;
    struct stat st {};
    ASSERT_EQ(::fstat(p.write.get(), &st), 0);
    const std::string match = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    const std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
    EXPECT_TRUE(is_journal_stream(p.write.get(), match.c_str()));
    EXPECT_FALSE(is_journal_stream(p.write.get(), other.c_str()));
    EXPECT_FALSE(is_journal_stream(p.write.get(), nullptr));
    EXPECT_FALSE(is_journal_stream(p.write.get(), ""));
    EXPECT_FALSE(is_journal_stream(p.write.get(), "12"));
    EXPECT_FALSE(is_journal_stream(p.write.get(), (match + "x").c_str()));

    {
        ScopedEnv env("JOURNAL_STREAM", match.c_str());
        Logger log({.target = LogTarget::automatic, .stderr_fd = p.write.get()});
        EXPECT_EQ(log.target(), LogTarget::journal);
    }
    {
        ScopedEnv env("JOURNAL_STREAM", nullptr);
        Logger log({.target = LogTarget::automatic, .stderr_fd = p.write.get()});
        EXPECT_EQ(log.target(), LogTarget::stderr_lines);
    }
}

bool journald_reachable() { return ::access("/run/systemd/journal/socket", F_OK) == 0; }

TEST(Log, JournalTargetWithoutJournaldWritesStderr) {
    if (journald_reachable()) GTEST_SKIP() << "journald is running here";
    Pipe p;
    Logger log({.target = LogTarget::journal, .stderr_fd = p.write.get()});
    EXPECT_EQ(log.target(), LogTarget::stderr_lines) << "sd_journal_sendv would drop messages silently";
    log.notice("journald is gone", {{field::kIfname, "ib0"}});
    EXPECT_NE(p.drain().find(": notice: journald is gone (IPOIB_IFNAME=ib0)\n"), std::string::npos);
}

TEST(Log, SendsToARealJournald) {
    if (!journald_reachable()) GTEST_SKIP() << "no journald (/run/systemd/journal/socket)";
    const LogField fields[] = {{field::kIfname, "test0"}, {field::kReason, "unit_test"}};
    auto entry = journal_entry("ipoibd-test", LogLevel::debug, "runtime_tests journal entry", fields,
                               msgid::kDaemonStarted, SourceLocation::current());
    auto sent = send_journal_entry(entry);
    EXPECT_TRUE(sent.has_value()) << sent.error().message();
    Pipe p;
    Logger log({.identifier = "ipoibd-test", .target = LogTarget::journal, .min_level = LogLevel::debug,
                .stderr_fd = p.write.get()});
    log.debug("runtime_tests logger entry", {{field::kIfname, "test0"}});
    EXPECT_EQ(p.drain(), "") << "went to the journal, not to the fallback";
}

TEST(Log, MessageIdsAreDistinct) {
    const MessageId all[] = {msgid::kDaemonStarted, msgid::kDaemonStopping, msgid::kConfigReloaded,
                             msgid::kLinkUp,        msgid::kLinkDown,       msgid::kBroadcastJoined,
                             msgid::kJoinFailed,    msgid::kGroupJoined,    msgid::kGroupLeft,
                             msgid::kPeerChanged, msgid::kConnectionFailed};
    std::set<std::string_view> seen;
    for (const auto& id : all) EXPECT_TRUE(seen.insert(id.hex).second) << id.hex;
}

TEST(Log, FieldFormats) {
    EXPECT_EQ(field::format_lid(0x12), "0x0012");
    EXPECT_EQ(field::format_lid(0xc001), "0xc001");
    EXPECT_EQ(field::format_qpn(0x48), "0x000048");
    EXPECT_EQ(field::format_qpn(0xffffffff), "0xffffff");
    EXPECT_EQ(field::format_pkey(0xffff), "0xffff");
    EXPECT_EQ(field::format_mad_status(0x0200), "0x0200");
}

}  // namespace
}  // namespace ipoibd::runtime
