#include "common/secret.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/byte_io.h"
#include "common/unique_fd.h"

namespace ipoibd {
namespace {

void init_sodium() {
    // Idempotent and thread-safe; fails only without a random source, where
    // nothing here can work.
    if (::sodium_init() < 0) std::abort();
}

std::string errno_text(int err) { return std::strerror(err); }

// A regular file that only its owner may read.
expected<void, std::string> check_key_file(int fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return unexpected("could not stat key file " + path + ": " + errno_text(errno));
    if (!S_ISREG(st.st_mode)) return unexpected("key file " + path + " is not a regular file");
    if ((st.st_mode & 077) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return unexpected("key file " + path + " has mode " + mode +
                          ": others may read it; make it 0600 and owned by the daemon's user");
    }
    return {};
}

}  // namespace

Secret random_secret() {
    init_sodium();
    Secret s;
    ::randombytes_buf(s.bytes.data(), s.bytes.size());
    return s;
}

std::string to_hex(const Secret& s) {
    std::string out(2 * Secret::size + 1, '\0');
    ::sodium_bin2hex(out.data(), out.size(), s.bytes.data(), s.bytes.size());
    out.pop_back();
    return out;
}

expected<Secret, std::string> parse_secret(std::string_view hex) {
    while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r' || hex.back() == ' ')) hex.remove_suffix(1);
    if (hex.size() != 2 * Secret::size)
        return unexpected("expected 64 hexadecimal digits, found " + std::to_string(hex.size()) + " characters");
    Secret s;
    std::size_t n = 0;
    const char* end = nullptr;
    if (::sodium_hex2bin(s.bytes.data(), s.bytes.size(), hex.data(), hex.size(), nullptr, &n, &end) != 0 ||
        n != Secret::size || end != hex.data() + hex.size())
        return unexpected(std::string("expected 64 hexadecimal digits"));
    return s;
}

expected<Secret, std::string> load_key_file(const std::string& path, bool create) {
    init_sodium();
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd && errno == ENOENT && create) {
        const Secret s = random_secret();
        UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (!out) return unexpected("could not create key file " + path + ": " + errno_text(errno));
        const std::string line = to_hex(s) + "\n";
        if (::write(out.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fsync(out.get()) != 0)
            return unexpected("could not write key file " + path + ": " + errno_text(errno));
        return s;
    }
    if (!fd) return unexpected("could not open key file " + path + ": " + errno_text(errno));
    if (auto checked = check_key_file(fd.get(), path); !checked) return unexpected(checked.error());
    char buf[128];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) return unexpected("could not read key file " + path + ": " + errno_text(errno));
    auto s = parse_secret(std::string_view(buf, static_cast<std::size_t>(n)));
    ::sodium_memzero(buf, sizeof buf);
    if (!s) return unexpected("key file " + path + ": " + s.error());
    return s;
}

std::uint64_t derive_u64(const Secret& s, std::string_view context, std::uint64_t input) {
    init_sodium();
    std::array<std::uint8_t, 64> message{};
    const std::size_t clen = std::min<std::size_t>(context.size(), 56);
    std::memcpy(message.data(), context.data(), clen);
    store_be64(message.data() + clen, input);
    std::array<std::uint8_t, crypto_generichash_BYTES_MIN> out{};
    ::crypto_generichash(out.data(), out.size(), message.data(), clen + 8, s.bytes.data(), s.bytes.size());
    return load_be64(out.data());
}

expected<FabricKeys, std::string> load_fabric_key_file(const std::string& path) {
    // The mode checks as any key file (which reads the first line).
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return unexpected("could not open key file " + path + ": " + errno_text(errno));
    if (auto checked = check_key_file(fd.get(), path); !checked) return unexpected(checked.error());
    std::string text;
    char buf[512];
    for (ssize_t n; text.size() < 4096 && (n = ::read(fd.get(), buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    ::sodium_memzero(buf, sizeof buf);
    std::istringstream in(text);
    FabricKeys keys;
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        if (line.empty() || line.front() == '#') continue;
        auto key = parse_secret(line);
        if (!key) return unexpected(path + ":" + std::to_string(number) + ": " + key.error());
        if (keys.keys.size() == 2) return unexpected(path + ":" + std::to_string(number) + ": at most two keys (the one to send with, and one more to accept)");
        keys.keys.push_back(*key);
    }
    if (keys.keys.empty()) return unexpected(path + ": no key");
    return keys;
}

}  // namespace ipoibd
