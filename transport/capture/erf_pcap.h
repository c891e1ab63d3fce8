// Packet capture in the format ibdump writes: a pcap file with link type ERF
// (197) whose records are ERF type 21, InfiniBand. Each record holds one
// whole IBA packet, LRH through VCRC. Wireshark and tshark decode it with no
// options, down to MADs and IPoIB payloads.
//
// File layout:
//   pcap header (24 bytes, host order, magic 0xa1b2c3d4, microseconds)
//   per packet: pcap record header (16 bytes)
//               ERF header (16 bytes):
//                 ts    8 bytes little-endian, seconds<<32 | binary fraction
//                 type  1 byte  = 21 (InfiniBand)
//                 flags 1 byte  = interface (bits 1:0) | 0x04 varying length
//                 rlen  2 bytes big-endian, record length = 16 + packet
//                 lctr  2 bytes big-endian, loss counter (0)
//                 wlen  2 bytes big-endian, packet length on the wire
//               the packet
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/byte_io.h"
#include "common/expected.h"
#include "common/sys_error.h"

namespace ipoibd::capture {

inline constexpr std::uint32_t kPcapMagicMicroseconds = 0xA1B2C3D4;
inline constexpr std::uint16_t kPcapVersionMajor = 2;
inline constexpr std::uint16_t kPcapVersionMinor = 4;
inline constexpr std::uint32_t kLinkTypeErf = 197;
inline constexpr std::size_t kPcapFileHeaderSize = 24;
inline constexpr std::size_t kPcapRecordHeaderSize = 16;
inline constexpr std::size_t kErfHeaderSize = 16;
inline constexpr std::uint8_t kErfTypeInfiniband = 21;
inline constexpr std::uint8_t kErfFlagVaryingLength = 0x04;
inline constexpr std::uint8_t kErfInterfaceMask = 0x03;
inline constexpr std::uint32_t kSnapLen = 65535;

// Which way a packet went, recorded as the ERF capture interface so Wireshark
// can filter on erf.flags.cap.
enum class Direction : std::uint8_t { sent = 0, received = 1 };

// Fills the 16-byte ERF header for a packet of `wire_len` bytes.
void write_erf_header(std::uint8_t* out, std::chrono::system_clock::time_point ts, Direction dir,
                      std::size_t wire_len);

class ErfPcapWriter {
public:
    // Creates (truncates) `path` and writes the pcap file header.
    static expected<ErfPcapWriter, SysError> open(const std::string& path);

    // Appends one packet (LRH through VCRC). Returns false when the write
    // failed (disk full, ...); failures are counted in write_errors().
    bool write(bytes packet, std::chrono::system_clock::time_point ts, Direction dir = Direction::sent);

    // Pushes buffered records to the file; false on error.
    bool flush();

    std::uint64_t packets_written() const { return packets_; }
    std::uint64_t write_errors() const { return errors_; }
    const std::string& path() const { return path_; }

private:
    struct FileCloser {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    ErfPcapWriter(std::string path, std::unique_ptr<std::FILE, FileCloser> f)
        : path_(std::move(path)), file_(std::move(f)) {}

    std::string path_;
    std::unique_ptr<std::FILE, FileCloser> file_;
    std::uint64_t packets_ = 0;
    std::uint64_t errors_ = 0;
};

}  // namespace ipoibd::capture
