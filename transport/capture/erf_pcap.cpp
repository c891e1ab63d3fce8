#include "transport/capture/erf_pcap.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace ipoibd::capture {
namespace {

void store_host16(std::uint8_t* p, std::uint16_t v) { std::memcpy(p, &v, sizeof v); }
void store_host32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, sizeof v); }

}  // namespace

void write_erf_header(std::uint8_t* out, std::chrono::system_clock::time_point ts, Direction dir,
                      std::size_t wire_len) {
    using namespace std::chrono;
    const auto since_epoch = ts.time_since_epoch();
    const auto secs = duration_cast<seconds>(since_epoch);
    const auto nanos = duration_cast<nanoseconds>(since_epoch - secs).count();
    // ERF time: 32.32 fixed point seconds, little-endian.
    const std::uint64_t fraction = (static_cast<std::uint64_t>(nanos) << 32) / 1'000'000'000ULL;
    store_le64(out, (static_cast<std::uint64_t>(secs.count()) << 32) | fraction);
    out[8] = kErfTypeInfiniband;
    out[9] = static_cast<std::uint8_t>(kErfFlagVaryingLength | (static_cast<std::uint8_t>(dir) & kErfInterfaceMask));
    store_be16(out + 10, static_cast<std::uint16_t>(kErfHeaderSize + wire_len));
    store_be16(out + 12, 0);
    store_be16(out + 14, static_cast<std::uint16_t>(wire_len));
}

// Mode 0600 whatever the umask: the packets carry the tunnel's traffic.
// A symlink at `path` is refused (O_NOFOLLOW), not written through: the
// path may be in a directory others write to.
expected<ErfPcapWriter, SysError> ErfPcapWriter::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return unexpected(SysError{"open capture file " + path, errno});
    std::unique_ptr<std::FILE, FileCloser> f(::fdopen(fd, "wb"));
    if (!f) {
        const int err = errno;
        ::close(fd);
        return unexpected(SysError{"open capture file " + path, err});
    }
    std::array<std::uint8_t, kPcapFileHeaderSize> h{};
    store_host32(h.data(), kPcapMagicMicroseconds);
    store_host16(h.data() + 4, kPcapVersionMajor);
    store_host16(h.data() + 6, kPcapVersionMinor);
    // bytes 8-15: thiszone and sigfigs, zero
    store_host32(h.data() + 16, kSnapLen);
    store_host32(h.data() + 20, kLinkTypeErf);
    if (std::fwrite(h.data(), h.size(), 1, f.get()) != 1)
        return unexpected(SysError{"write capture header to " + path, errno});
    return ErfPcapWriter(path, std::move(f));
}

bool ErfPcapWriter::write(bytes packet, std::chrono::system_clock::time_point ts, Direction dir) {
    using namespace std::chrono;
    const std::size_t record_len = kErfHeaderSize + packet.size();
    if (record_len > kSnapLen) {
        ++errors_;
        return false;
    }
    std::array<std::uint8_t, kPcapRecordHeaderSize + kErfHeaderSize> h{};
    const auto since_epoch = ts.time_since_epoch();
    const auto secs = duration_cast<seconds>(since_epoch);
    const auto usecs = duration_cast<microseconds>(since_epoch - secs).count();
    store_host32(h.data(), static_cast<std::uint32_t>(secs.count()));
    store_host32(h.data() + 4, static_cast<std::uint32_t>(usecs));
    store_host32(h.data() + 8, static_cast<std::uint32_t>(record_len));
    store_host32(h.data() + 12, static_cast<std::uint32_t>(record_len));
    write_erf_header(h.data() + kPcapRecordHeaderSize, ts, dir, packet.size());
    if (std::fwrite(h.data(), h.size(), 1, file_.get()) != 1 ||
        (!packet.empty() && std::fwrite(packet.data(), packet.size(), 1, file_.get()) != 1)) {
        ++errors_;
        return false;
    }
    ++packets_;
    return true;
}

bool ErfPcapWriter::flush() {
    if (std::fflush(file_.get()) == 0) return true;
    ++errors_;
    return false;
}

}  // namespace ipoibd::capture
