#include "transport/soft/fabric_auth.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "common/byte_io.h"

namespace ipoibd::transport {
namespace {

constexpr std::size_t kIdOffset = 0, kSessionOffset = 4, kSequenceOffset = 12, kTagOffset = 20;
static_assert(kTagOffset + crypto_aead_xchacha20poly1305_ietf_ABYTES == FabricAuth::kTrailer);
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == Secret::size);

std::array<std::uint8_t, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES> nonce_of(const std::uint8_t* trailer) {
    std::array<std::uint8_t, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES> n{};
    std::memcpy(n.data(), trailer, kTagOffset);  // key id, session, sequence; 4 zero bytes
    return n;
}

std::string source_key(const SocketAddress& from) {
    std::string k = from.host_key();
    const std::uint16_t port = from.port();
    k.push_back(static_cast<char>(port >> 8));
    k.push_back(static_cast<char>(port & 0xFF));
    return k;
}

std::uint64_t new_session() {
    if (::sodium_init() < 0) std::abort();
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    const auto us = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<std::uint64_t>(ts.tv_nsec) / 1000;
    return (us << 12) | (::randombytes_random() & 0xFFF);
}

}  // namespace

FabricAuth::FabricAuth(FabricKeys keys) : session_(new_session()) { set_keys(std::move(keys)); }

void FabricAuth::set_keys(FabricKeys keys) {
    if (!derived_.empty() && keys != keys_) ++counters_.key_rotations;
    keys_ = std::move(keys);
    derived_.clear();
    for (const Secret& s : keys_.keys) {
        Key k;
        k.secret = s;
        store_be32(k.id.data(), static_cast<std::uint32_t>(derive_u64(s, "ipoibd fabric key id", 0) >> 32));
        derived_.push_back(k);
    }
}

std::unique_ptr<FabricAuth> FabricAuth::share_session() const {
    auto s = std::make_unique<FabricAuth>(keys_);
    s->session_ = session_;
    s->sequence_ = sequence_;
    return s;
}

std::size_t FabricAuth::seal(std::uint8_t* data, std::size_t length) {
    const Key& k = derived_.front();
    std::uint8_t* t = data + length;
    std::memcpy(t + kIdOffset, k.id.data(), 4);
    store_be64(t + kSessionOffset, session_);
    store_be64(t + kSequenceOffset, sequence_->fetch_add(1, std::memory_order_relaxed) + 1);
    const auto nonce = nonce_of(t);
    unsigned long long tag_length = 0;
    std::uint8_t none = 0;  // the empty message (libsodium wants a pointer)
    ::crypto_aead_xchacha20poly1305_ietf_encrypt_detached(&none, t + kTagOffset, &tag_length, &none, 0, data,
                                                          length + kTagOffset, nullptr, nonce.data(),
                                                          k.secret.bytes.data());
    ++counters_.sealed;
    return length + kTrailer;
}

expected<std::size_t, AuthDrop> FabricAuth::open(const std::uint8_t* data, std::size_t length,
                                                  const SocketAddress& from, Clock::time_point now) {
    if (length < kTrailer) return unexpected(drop(AuthDrop::too_short));
    const std::size_t body = length - kTrailer;
    const std::uint8_t* t = data + body;
    const auto key = std::find_if(derived_.begin(), derived_.end(),
                                  [&](const Key& k) { return std::memcmp(k.id.data(), t + kIdOffset, 4) == 0; });
    if (key == derived_.end()) return unexpected(drop(AuthDrop::unknown_key));
    const auto nonce = nonce_of(t);
    std::uint8_t none = 0;
    if (::crypto_aead_xchacha20poly1305_ietf_decrypt_detached(&none, nullptr, &none, 0, t + kTagOffset, data,
                                                              body + kTagOffset, nonce.data(),
                                                              key->secret.bytes.data()) != 0)
        return unexpected(drop(AuthDrop::bad_tag));
    // Authentic: now whether it is new.
    const std::uint64_t session = load_be64(t + kSessionOffset);
    const std::uint64_t seq = load_be64(t + kSequenceOffset);
    if (seq == 0) return unexpected(drop(AuthDrop::replayed));  // no sender uses 0
    const std::string k = source_key(from);
    auto it = sources_.find(k);
    if (it == sources_.end()) {
        if (sources_.size() >= kMaxSources) {
            std::erase_if(sources_, [&](const auto& kv) { return now - kv.second.last > kSessionTakeover; });
            if (sources_.size() >= kMaxSources) return unexpected(drop(AuthDrop::sources_full));
        }
        it = sources_.emplace(k, Source{}).first;
        it->second.session = 0;
    }
    Source& s = it->second;
    const bool fresh = it->second.session == 0;
    if (fresh || session > s.session || (session < s.session && now - s.last > kSessionTakeover)) {
        s = Source{.session = session, .top = seq, .seen = {}, .last = now};
        s.seen[(seq % kWindow) / 64] |= std::uint64_t{1} << (seq % 64);
        ++counters_.opened;
        return body;
    }
    if (session < s.session) return unexpected(drop(AuthDrop::stale_session));
    const auto bit = [&](std::uint64_t n) -> std::uint64_t& { return s.seen[(n % kWindow) / 64]; };
    const auto mask = [](std::uint64_t n) { return std::uint64_t{1} << (n % 64); };
    if (seq > s.top) {
        if (seq - s.top >= kWindow) {
            s.seen.fill(0);
        } else {
            for (std::uint64_t n = s.top + 1; n < seq; ++n) bit(n) &= ~mask(n);
        }
        s.top = seq;
    } else if (s.top - seq >= kWindow || (bit(seq) & mask(seq)) != 0) {
        return unexpected(drop(AuthDrop::replayed));
    }
    bit(seq) |= mask(seq);
    s.last = now;
    ++counters_.opened;
    return body;
}

void visit(const FabricAuthCounters& c, CounterSink& out) {
    out.counter("auth_sealed", c.sealed);
    out.counter("auth_opened", c.opened);
    out.counter("auth_key_rotations", c.key_rotations);
    visit_reasons<AuthDrop>(out, "auth_dropped_", c.dropped, [](AuthDrop d) { return to_string(d); });
}

const char* to_string(AuthDrop d) {
    switch (d) {
        case AuthDrop::too_short: return "too_short";
        case AuthDrop::unknown_key: return "unknown_key";
        case AuthDrop::bad_tag: return "bad_tag";
        case AuthDrop::replayed: return "replayed";
        case AuthDrop::stale_session: return "stale_session";
        case AuthDrop::sources_full: return "sources_full";
        case AuthDrop::count_: break;
    }
    return "unknown";
}

}  // namespace ipoibd::transport
