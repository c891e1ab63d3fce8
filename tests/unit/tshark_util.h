// Running tshark over captures the tests write, shared by the tshark
// cross-checks of the wire, SMP and SA codecs.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ipoibd::test {

using TsharkRow = std::map<std::string, std::string>;  // field -> text as tshark shows it

std::string shell_quote(const std::string& s);
std::vector<std::string> split(const std::string& s, char sep);
// Decimal, or hex with 0x.
std::optional<std::uint64_t> parse_uint(const std::string& text);

// A fresh directory under /tmp, removed by the destructor.
class ScratchDir {
public:
    ScratchDir();
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// Writes `packets` (LRH..VCRC each) as an ERF-21 pcap; false on failure.
bool write_capture(const std::string& pcap, const std::vector<std::vector<std::uint8_t>>& packets,
                   std::chrono::system_clock::time_point first = std::chrono::system_clock::time_point{std::chrono::seconds{1'700'000'000}});

// tshark -n -r PCAP -T fields (first occurrence of each field), with an empty
// Wireshark configuration in `dir` so no personal profile changes decoding.
// One row per frame; a failed tshark is a test failure naming the command.
std::vector<TsharkRow> tshark_rows(const std::string& dir, const std::string& pcap, const std::vector<std::string>& fields);

// EXPECTs `row[field]` equals `want`: as GIDs when `want` is IPv6 text, as
// numbers when it is a number (tshark prints some in hex, some in decimal),
// as text otherwise.
void expect_field(const TsharkRow& row, const std::string& field, const std::string& want);

}  // namespace ipoibd::test
