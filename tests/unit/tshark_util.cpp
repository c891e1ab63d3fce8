#include "tshark_util.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "transport/capture/erf_pcap.h"

namespace ipoibd::test {

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    std::string::size_type start = 0;
    for (auto pos = s.find(sep); pos != std::string::npos; pos = s.find(sep, start)) {
        parts.push_back(s.substr(start, pos - start));
        start = pos + 1;
    }
    parts.push_back(s.substr(start));
    return parts;
}

std::optional<std::uint64_t> parse_uint(const std::string& text) {
    const char* begin = text.data();
    const char* const end = text.data() + text.size();
    int base = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        begin += 2;
    }
    if (begin == end) return std::nullopt;
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(begin, end, value, base);
    if (ec != std::errc{} || ptr != end) return std::nullopt;
    return value;
}

ScratchDir::ScratchDir() {
    char tmpl[] = "/tmp/ipoibd_tshark_XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
}

ScratchDir::~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

bool write_capture(const std::string& pcap, const std::vector<std::vector<std::uint8_t>>& packets,
                   std::chrono::system_clock::time_point first) {
    auto writer = capture::ErfPcapWriter::open(pcap);
    if (!writer) return false;
    for (const auto& p : packets)
        if (!writer->write(p, first)) return false;
    return writer->flush();
}

std::vector<TsharkRow> tshark_rows(const std::string& dir, const std::string& pcap, const std::vector<std::string>& fields) {
    const std::string config = dir + "/wireshark-config";
    std::filesystem::create_directory(config);
    std::string command = "WIRESHARK_CONFIG_DIR=" + shell_quote(config) + " tshark -n -r " + shell_quote(pcap) +
                          " -T fields -E " + shell_quote("separator=|") + " -E occurrence=f";
    for (const auto& f : fields) command += " -e " + shell_quote(f);
    command += " 2>" + shell_quote(dir + "/tshark.stderr");
    std::vector<TsharkRow> rows;
    std::FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
        ADD_FAILURE() << "could not run " << command;
        return rows;
    }
    std::string output;
    std::array<char, 4096> buf;
    for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) output.append(buf.data(), n);
    const int status = ::pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "tshark failed (install the Debian package tshark): " << command;
    for (const auto& line : split(output, '\n')) {
        if (line.empty()) continue;
        const auto columns = split(line, '|');
        EXPECT_EQ(columns.size(), fields.size()) << line;
        TsharkRow row;
        for (std::size_t i = 0; i < fields.size() && i < columns.size(); ++i) row[fields[i]] = columns[i];
        rows.push_back(std::move(row));
    }
    return rows;
}

namespace {
std::optional<std::array<std::uint8_t, 16>> parse_gid_text(const std::string& text) {
    std::array<std::uint8_t, 16> g{};
    if (::inet_pton(AF_INET6, text.c_str(), g.data()) != 1) return std::nullopt;
    return g;
}
}  // namespace

void expect_field(const TsharkRow& row, const std::string& field, const std::string& want) {
    const auto it = row.find(field);
    if (it == row.end()) {
        ADD_FAILURE() << field << " not in tshark's output";
        return;
    }
    const std::string& shown = it->second;
    if (const auto want_gid = parse_gid_text(want); want_gid && want.find(':') != std::string::npos) {
        EXPECT_EQ(parse_gid_text(shown), want_gid) << field << ": tshark shows \"" << shown << "\"";
        return;
    }
    const auto want_number = parse_uint(want);
    if (!want_number) {
        EXPECT_EQ(shown, want) << field;
        return;
    }
    EXPECT_EQ(parse_uint(shown), want_number) << field << ": tshark shows \"" << shown << "\"";
}

}  // namespace ipoibd::test
