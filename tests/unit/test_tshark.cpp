// The capture writer checked against an independent decoder: the four sample
// packets are written with ErfPcapWriter and read back by tshark (Debian
// package `tshark`) with no decode options, and every field tshark shows must
// equal what was built. A missing tshark is a failure, not a skip: the test
// command installs it.
//
// How tshark 4.0 prints these fields with -T fields (`tshark -G fields`
// gives each field's type and base):
//   - BASE_DEC integers in decimal: lrh.dlid/slid/sl/pktlen, bth.opcode,
//     bth.p_key, bth.psn, bth.padcnt, aeth.syndrome, aeth.msn, erf.*;
//   - BASE_HEX integers as 0x plus zero padding to the field's width:
//     lrh.vl, lrh.lnh, bth.destqp (0x000001), deth.q_key (an FT_UINT64:
//     0x0000000080010000), deth.srcqp, mad.*, invariant.crc, variant.crc;
//   - GIDs (FT_IPv6) in compressed IPv6 text.
// parse_uint() accepts both integer forms, so a tshark that changes a
// field's display base still passes; GIDs are compared as 16 bytes after
// inet_pton, not as text.
//
// Byte order of the CRCs: our ICRC and VCRC are stored least-significant byte
// first (crc.h), but tshark reads the 4 ICRC and 2 VCRC wire bytes as a
// big-endian number. So tshark's infiniband.invariant.crc is
// byteswap32(ICRC) and infiniband.variant.crc is byteswap16(VCRC): ICRC
// 0xc29702b6 is on the wire as b6 02 97 c2 and shown as 0xb60297c2.
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "transport/capture/erf_pcap.h"
#include "transport/wire/mad.h"
#include "transport/wire/opcodes.h"
#include "tshark_util.h"
#include "wire_test_util.h"

namespace ipoibd {
namespace {

using Row = std::map<std::string, std::string>;

// Everything asked of tshark, in column order.
const std::vector<std::string> kFields = {
    "frame.protocols",
    "frame.len",
    "frame.time_epoch",
    "erf.types.type",
    "erf.flags.cap",
    "erf.flags.vlen",
    "erf.flags.trunc",
    "erf.rlen",
    "erf.wlen",
    "infiniband.lrh.vl",
    "infiniband.lrh.sl",
    "infiniband.lrh.lnh",
    "infiniband.lrh.dlid",
    "infiniband.lrh.pktlen",
    "infiniband.lrh.slid",
    "infiniband.grh.paylen",
    "infiniband.grh.sgid",
    "infiniband.grh.dgid",
    "infiniband.bth.opcode",
    "infiniband.bth.padcnt",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.mad.baseversion",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.classversion",
    "infiniband.mad.method",
    "infiniband.mad.transactionid",
    "infiniband.mad.attributeid",
    "infiniband.invariant.crc",
    "infiniband.variant.crc",
};

constexpr std::int64_t kBaseSeconds = 1'700'000'000;
constexpr std::int64_t kStepMillis = 250;  // a binary fraction: exact in ERF's 32.32 time

std::chrono::system_clock::time_point timestamp_of(std::size_t index) {
    const std::chrono::milliseconds offset{kStepMillis * static_cast<std::int64_t>(index)};
    return std::chrono::system_clock::time_point{std::chrono::seconds{kBaseSeconds} + offset};
}

capture::Direction direction_of(std::size_t index) {
    return index % 2 == 0 ? capture::Direction::sent : capture::Direction::received;
}

using test::parse_uint;
using test::shell_quote;
using test::split;

// A mkdtemp directory, removed with everything in it.
class ScratchDir {
public:
    ScratchDir() {
        std::string base = ::testing::TempDir();
        if (base.empty()) base = "/tmp/";
        if (base.back() != '/') base += '/';
        std::string tmpl = base + "ipoibd_tshark_XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) != nullptr) path_ = buf.data();
    }
    ~ScratchDir() {
        if (path_.empty()) return;
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    bool ok() const { return !path_.empty(); }
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

std::string read_file_text(const std::string& path) {
    std::string text;
    if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
        std::array<char, 4096> buf;
        std::size_t n;
        while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) text.append(buf.data(), n);
        std::fclose(f);
    }
    return text;
}

std::uint32_t byteswap32(std::uint32_t v) {
    return ((v & 0x000000FFu) << 24) | ((v & 0x0000FF00u) << 8) | ((v & 0x00FF0000u) >> 8) | (v >> 24);
}
std::uint16_t byteswap16(std::uint16_t v) { return static_cast<std::uint16_t>((v << 8) | (v >> 8)); }

std::string hex(std::uint64_t v) {
    std::ostringstream out;
    out << "0x" << std::hex << v;
    return out.str();
}

::testing::AssertionResult field_is(const Row& row, const std::string& field, std::uint64_t expected) {
    const auto it = row.find(field);
    if (it == row.end()) return ::testing::AssertionFailure() << field << " was not requested from tshark";
    const auto value = parse_uint(it->second);
    if (!value)
        return ::testing::AssertionFailure() << field << ": tshark shows \"" << it->second
                                             << "\", not a single unsigned integer; expected " << expected;
    if (*value != expected)
        return ::testing::AssertionFailure() << field << ": tshark shows \"" << it->second << "\" = " << *value
                                             << " (" << hex(*value) << "), expected " << expected << " ("
                                             << hex(expected) << ")";
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult field_absent(const Row& row, const std::string& field) {
    const auto it = row.find(field);
    if (it == row.end()) return ::testing::AssertionFailure() << field << " was not requested from tshark";
    if (!it->second.empty())
        return ::testing::AssertionFailure() << field << ": tshark shows \"" << it->second
                                             << "\" for a header this packet does not have";
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult gid_is(const Row& row, const std::string& field, const ib::Gid& expected) {
    const auto it = row.find(field);
    if (it == row.end()) return ::testing::AssertionFailure() << field << " was not requested from tshark";
    ib::Gid shown{};
    if (::inet_pton(AF_INET6, it->second.c_str(), shown.data()) != 1)
        return ::testing::AssertionFailure() << field << ": tshark shows \"" << it->second
                                             << "\", not one IPv6-form GID";
    if (shown != expected) {
        std::array<char, INET6_ADDRSTRLEN> text{};
        ::inet_ntop(AF_INET6, expected.data(), text.data(), static_cast<socklen_t>(text.size()));
        return ::testing::AssertionFailure() << field << ": tshark shows " << it->second << ", expected "
                                             << text.data();
    }
    return ::testing::AssertionSuccess();
}

class TsharkTest : public ::testing::Test {
protected:
    void SetUp() override {
        samples_ = test::all_samples();
        ASSERT_TRUE(dir_.ok()) << "mkdtemp under " << ::testing::TempDir() << " failed";
        const std::string capture_path = dir_.file("samples.pcap");
        {
            auto writer = capture::ErfPcapWriter::open(capture_path);
            ASSERT_TRUE(writer.has_value()) << "cannot create " << capture_path;
            for (std::size_t i = 0; i < samples_.size(); ++i)
                ASSERT_TRUE(writer->write(samples_[i].wire, timestamp_of(i), direction_of(i))) << samples_[i].name;
            ASSERT_TRUE(writer->flush());
            ASSERT_EQ(writer->packets_written(), samples_.size());
        }  // closed here

        // An empty personal configuration directory, so that a developer's
        // own Wireshark preferences ("Decode As", disabled protocols) cannot
        // change the result. -n: no name resolution (no DNS lookups).
        const std::string config_dir = dir_.file("wireshark-config");
        std::error_code ec;
        std::filesystem::create_directory(config_dir, ec);
        ASSERT_FALSE(ec) << "create " << config_dir << ": " << ec.message();
        const std::string stderr_path = dir_.file("tshark.stderr");
        std::string command = "WIRESHARK_CONFIG_DIR=" + shell_quote(config_dir) + " tshark -n -r " +
                              shell_quote(capture_path) + " -T fields -E " + shell_quote("separator=|");
        for (const auto& field : kFields) command += " -e " + shell_quote(field);
        // tshark's stderr (a warning when run as root) is kept out of the
        // output and shown only when tshark fails.
        command += " 2>" + shell_quote(stderr_path);

        std::FILE* pipe = ::popen(command.c_str(), "r");
        ASSERT_NE(pipe, nullptr) << "popen failed: " << command;
        std::string output;
        std::array<char, 4096> buf;
        std::size_t n;
        while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) output.append(buf.data(), n);
        const int status = ::pclose(pipe);
        ASSERT_NE(status, -1) << "pclose failed: " << command;
        ASSERT_TRUE(WIFEXITED(status)) << "tshark did not exit normally (wait status " << status << "): " << command;
        const int exit_code = WEXITSTATUS(status);
        ASSERT_NE(exit_code, 127) << "tshark is not installed (the shell could not run it): install the Debian "
                                     "package tshark. stderr: "
                                  << read_file_text(stderr_path);
        ASSERT_EQ(exit_code, 0) << "tshark failed: " << command << "\nstderr:\n" << read_file_text(stderr_path);

        auto lines = split(output, '\n');
        if (!lines.empty() && lines.back().empty()) lines.pop_back();
        for (const auto& line : lines) {
            const auto columns = split(line, '|');
            ASSERT_EQ(columns.size(), kFields.size()) << "unexpected tshark line: " << line;
            Row row;
            for (std::size_t i = 0; i < kFields.size(); ++i) row[kFields[i]] = columns[i];
            rows_.push_back(std::move(row));
        }
        ASSERT_EQ(rows_.size(), samples_.size()) << "tshark decoded " << rows_.size() << " frames, expected "
                                                 << samples_.size() << "; output:\n" << output;
    }

    ScratchDir dir_;
    std::vector<test::SamplePacket> samples_;
    std::vector<Row> rows_;
};

TEST_F(TsharkTest, DecodesEveryRecordAsErfInfiniband) {
    for (std::size_t i = 0; i < samples_.size(); ++i) {
        SCOPED_TRACE(samples_[i].name);
        const auto protocols = split(rows_[i].at("frame.protocols"), ':');
        ASSERT_GE(protocols.size(), 2u) << rows_[i].at("frame.protocols");
        EXPECT_EQ(protocols[0], "erf") << rows_[i].at("frame.protocols");
        EXPECT_EQ(protocols[1], "infiniband") << rows_[i].at("frame.protocols");
    }
}

TEST_F(TsharkTest, ErfRecordHeaderIsAsWritten) {
    for (std::size_t i = 0; i < samples_.size(); ++i) {
        const auto& s = samples_[i];
        const Row& row = rows_[i];
        SCOPED_TRACE(s.name);
        EXPECT_TRUE(field_is(row, "erf.types.type", capture::kErfTypeInfiniband));
        EXPECT_TRUE(field_is(row, "erf.flags.cap", static_cast<std::uint64_t>(direction_of(i))));
        EXPECT_TRUE(field_is(row, "erf.flags.vlen", 1));
        EXPECT_TRUE(field_is(row, "erf.flags.trunc", 0));
        EXPECT_TRUE(field_is(row, "erf.rlen", capture::kErfHeaderSize + s.wire.size()));
        EXPECT_TRUE(field_is(row, "erf.wlen", s.wire.size()));
        // The frame is the IBA packet, LRH through VCRC, ERF header excluded.
        EXPECT_TRUE(field_is(row, "frame.len", s.wire.size()));
        // Frame time comes from the ERF 32.32 timestamp: seconds.fraction.
        const auto time = split(row.at("frame.time_epoch"), '.');
        ASSERT_EQ(time.size(), 2u) << row.at("frame.time_epoch");
        EXPECT_EQ(parse_uint(time[0]), static_cast<std::uint64_t>(kBaseSeconds)) << row.at("frame.time_epoch");
        std::string nanos = time[1].substr(0, 9);
        nanos.append(9 - nanos.size(), '0');
        EXPECT_EQ(parse_uint(nanos), static_cast<std::uint64_t>(kStepMillis) * 1'000'000u * i)
            << row.at("frame.time_epoch");
    }
}

TEST_F(TsharkTest, RouteAndBaseTransportHeadersAreAsBuilt) {
    for (std::size_t i = 0; i < samples_.size(); ++i) {
        const auto& s = samples_[i];
        const Row& row = rows_[i];
        SCOPED_TRACE(s.name);
        const auto& lrh = s.spec.lrh;
        const auto& bth = s.spec.bth;
        EXPECT_TRUE(field_is(row, "infiniband.lrh.vl", lrh.vl));
        EXPECT_TRUE(field_is(row, "infiniband.lrh.sl", lrh.sl));
        EXPECT_TRUE(field_is(row, "infiniband.lrh.lnh", static_cast<std::uint64_t>(lrh.lnh)));
        EXPECT_TRUE(field_is(row, "infiniband.lrh.dlid", lrh.dlid));
        EXPECT_TRUE(field_is(row, "infiniband.lrh.slid", lrh.slid));
        // PktLen: 4-byte words from the LRH through the ICRC (the VCRC is not counted).
        EXPECT_TRUE(field_is(row, "infiniband.lrh.pktlen", (s.wire.size() - ib::kVcrcSize) / 4));
        if (s.spec.grh) {
            // PayLen: bytes from the BTH through the ICRC.
            EXPECT_TRUE(field_is(row, "infiniband.grh.paylen",
                                 s.wire.size() - ib::kVcrcSize - ib::Lrh::size - ib::Grh::size));
            EXPECT_TRUE(gid_is(row, "infiniband.grh.sgid", s.spec.grh->sgid));
            EXPECT_TRUE(gid_is(row, "infiniband.grh.dgid", s.spec.grh->dgid));
        } else {
            EXPECT_TRUE(field_absent(row, "infiniband.grh.paylen"));
            EXPECT_TRUE(field_absent(row, "infiniband.grh.dgid"));
        }
        EXPECT_TRUE(field_is(row, "infiniband.bth.opcode", bth.opcode));
        EXPECT_TRUE(field_is(row, "infiniband.bth.padcnt", (4 - s.payload.size() % 4) % 4));
        EXPECT_TRUE(field_is(row, "infiniband.bth.p_key", bth.pkey));
        EXPECT_TRUE(field_is(row, "infiniband.bth.destqp", bth.dest_qp));
        EXPECT_TRUE(field_is(row, "infiniband.bth.psn", bth.psn));
    }
}

TEST_F(TsharkTest, ExtendedTransportHeadersAreAsBuilt) {
    bool saw_deth = false;
    bool saw_aeth = false;
    for (std::size_t i = 0; i < samples_.size(); ++i) {
        const auto& s = samples_[i];
        const Row& row = rows_[i];
        SCOPED_TRACE(s.name);
        const std::uint16_t headers = ib::opcode_info(s.spec.bth.opcode).headers;
        if ((headers & ib::eth_deth) != 0) {
            saw_deth = true;
            EXPECT_TRUE(field_is(row, "infiniband.deth.q_key", s.spec.ext.deth.qkey));
            EXPECT_TRUE(field_is(row, "infiniband.deth.srcqp", s.spec.ext.deth.src_qp));
        } else {
            EXPECT_TRUE(field_absent(row, "infiniband.deth.q_key"));
            EXPECT_TRUE(field_absent(row, "infiniband.deth.srcqp"));
        }
        if ((headers & ib::eth_aeth) != 0) {
            saw_aeth = true;
            EXPECT_TRUE(field_is(row, "infiniband.aeth.syndrome", s.spec.ext.aeth.syndrome));
            EXPECT_TRUE(field_is(row, "infiniband.aeth.msn", s.spec.ext.aeth.msn));
        } else {
            EXPECT_TRUE(field_absent(row, "infiniband.aeth.syndrome"));
            EXPECT_TRUE(field_absent(row, "infiniband.aeth.msn"));
        }
    }
    EXPECT_TRUE(saw_deth) << "no sample carries a DETH";
    EXPECT_TRUE(saw_aeth) << "no sample carries an AETH";
}

TEST_F(TsharkTest, MadCommonHeaderIsAsBuilt) {
    bool saw_mad = false;
    for (std::size_t i = 0; i < samples_.size(); ++i) {
        const auto& s = samples_[i];
        const Row& row = rows_[i];
        SCOPED_TRACE(s.name);
        // MADs are UD sends to QP0 or QP1.
        const bool is_mad = ib::transport_of(s.spec.bth.opcode) == ib::Transport::ud &&
                            (s.spec.bth.dest_qp == ib::kQp0 || s.spec.bth.dest_qp == ib::kQp1);
        if (!is_mad) {
            EXPECT_TRUE(field_absent(row, "infiniband.mad.mgmtclass"));
            EXPECT_TRUE(field_absent(row, "infiniband.mad.method"));
            continue;
        }
        saw_mad = true;
        ASSERT_EQ(s.payload.size(), ib::kMadSize);
        const auto mad = ib::MadHeader::read_from(s.payload.data());
        EXPECT_TRUE(field_is(row, "infiniband.mad.baseversion", mad.base_version));
        EXPECT_TRUE(field_is(row, "infiniband.mad.mgmtclass", mad.mgmt_class));
        EXPECT_TRUE(field_is(row, "infiniband.mad.classversion", mad.class_version));
        EXPECT_TRUE(field_is(row, "infiniband.mad.method", mad.method));
        EXPECT_TRUE(field_is(row, "infiniband.mad.transactionid", mad.transaction_id));
        EXPECT_TRUE(field_is(row, "infiniband.mad.attributeid", mad.attribute_id));
    }
    EXPECT_TRUE(saw_mad) << "no sample carries a MAD";
}

TEST_F(TsharkTest, CrcsMatchTheReferenceComputation) {
    for (std::size_t i = 0; i < samples_.size(); ++i) {
        const auto& s = samples_[i];
        const Row& row = rows_[i];
        SCOPED_TRACE(s.name);
        // tshark shows the wire bytes as a big-endian number; ours are stored
        // least-significant byte first (see the comment at the top).
        EXPECT_TRUE(field_is(row, "infiniband.invariant.crc", byteswap32(test::reference_icrc(s.wire))));
        EXPECT_TRUE(field_is(row, "infiniband.variant.crc", byteswap16(test::reference_vcrc(s.wire))));
    }
}

}  // namespace
}  // namespace ipoibd
