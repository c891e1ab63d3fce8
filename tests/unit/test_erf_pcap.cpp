// The capture writer's bytes, field by field (the tshark test checks that a
// real decoder agrees).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "transport/capture/erf_pcap.h"
#include "wire_test_util.h"

namespace ipoibd::capture {
namespace {

std::vector<std::uint8_t> slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::uint32_t host32(const std::uint8_t* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

TEST(ErfPcap, FileAndRecordLayout) {
    const std::string path = ::testing::TempDir() + "erf_layout.pcap";
    const auto pkt = test::sample_ud_payload().wire;
    // 2024-01-02T03:04:05.5 UTC
    const auto ts = std::chrono::system_clock::time_point(std::chrono::seconds(1704164645)) +
                    std::chrono::milliseconds(500);
    {
        auto w = ErfPcapWriter::open(path);
        ASSERT_TRUE(w.has_value()) << w.error().message();
        EXPECT_TRUE(w->write(pkt, ts, Direction::received));
        EXPECT_TRUE(w->flush());
        EXPECT_EQ(w->packets_written(), 1u);
        EXPECT_EQ(w->write_errors(), 0u);
    }
    const auto f = slurp(path);
    ASSERT_EQ(f.size(), kPcapFileHeaderSize + kPcapRecordHeaderSize + kErfHeaderSize + pkt.size());
    EXPECT_EQ(host32(f.data()), kPcapMagicMicroseconds);
    EXPECT_EQ(host32(f.data() + 20), kLinkTypeErf);
    const std::uint8_t* rec = f.data() + kPcapFileHeaderSize;
    EXPECT_EQ(host32(rec), 1704164645u);
    EXPECT_EQ(host32(rec + 4), 500000u);
    EXPECT_EQ(host32(rec + 8), kErfHeaderSize + pkt.size());
    const std::uint8_t* erf = rec + kPcapRecordHeaderSize;
    std::uint64_t erf_ts = 0;
    for (int i = 7; i >= 0; --i) erf_ts = (erf_ts << 8) | erf[i];
    EXPECT_EQ(erf_ts >> 32, 1704164645u);
    EXPECT_EQ(erf_ts & 0xFFFFFFFF, 0x80000000u);  // half a second
    EXPECT_EQ(erf[8], kErfTypeInfiniband);
    EXPECT_EQ(erf[9], kErfFlagVaryingLength | 1);
    EXPECT_EQ(load_be16(erf + 10), kErfHeaderSize + pkt.size());
    EXPECT_EQ(load_be16(erf + 12), 0);
    EXPECT_EQ(load_be16(erf + 14), pkt.size());
    EXPECT_TRUE(std::equal(pkt.begin(), pkt.end(), erf + kErfHeaderSize));
    std::remove(path.c_str());
}

TEST(ErfPcap, OpenFailureNamesFileAndReason) {
    auto w = ErfPcapWriter::open("/nonexistent-dir/x.pcap");
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error().message(), "could not open capture file /nonexistent-dir/x.pcap: No such file or directory");
}

// The capture holds the tunnel's traffic: a new file is the owner's alone
// whatever the umask, and a symlink at the path is refused rather than
// written through (its target was truncated).
TEST(ErfPcap, TheFileIsPrivateAndASymlinkIsRefused) {
    const std::string dir = ::testing::TempDir() + "erf_private." + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const mode_t old_umask = ::umask(022);
    auto w = ErfPcapWriter::open(dir + "/a.pcap");
    ::umask(old_umask);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_EQ(std::filesystem::status(dir + "/a.pcap").permissions(),
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    std::ofstream(dir + "/victim") << "precious";
    std::filesystem::create_symlink(dir + "/victim", dir + "/b.pcap");
    auto refused = ErfPcapWriter::open(dir + "/b.pcap");
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().error, ELOOP);
    EXPECT_EQ(slurp(dir + "/victim").size(), 8u);
    std::filesystem::remove_all(dir);
}

TEST(ErfPcap, OversizedRecordIsCountedNotWritten) {
    const std::string path = ::testing::TempDir() + "erf_big.pcap";
    auto w = ErfPcapWriter::open(path);
    ASSERT_TRUE(w.has_value());
    std::vector<std::uint8_t> big(70000);
    EXPECT_FALSE(w->write(big, std::chrono::system_clock::now()));
    EXPECT_EQ(w->write_errors(), 1u);
    EXPECT_EQ(w->packets_written(), 0u);
    std::remove(path.c_str());
}

}  // namespace
}  // namespace ipoibd::capture
