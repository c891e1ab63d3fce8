// The fabric key (transport/soft/fabric_auth.h): sealing and opening,
// tampering, unknown keys, replays, sessions, rotation; key files; and two
// UDP sockets on loopback sealing and checking each other.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/secret.h"
#include "transport/soft/fabric_auth.h"
#include "transport/soft/udp_batch.h"

namespace ipoibd::transport {
namespace {

using namespace std::chrono_literals;
using Wire = std::vector<std::uint8_t>;

Secret key(std::uint8_t fill) {
    Secret s;
    s.bytes.fill(fill);
    return s;
}
FabricKeys keys(std::initializer_list<std::uint8_t> fills) {
    FabricKeys k;
    for (auto f : fills) k.keys.push_back(key(f));
    return k;
}

SocketAddress from(int port = 4000) { return *parse_socket_address("198.18.0.7:" + std::to_string(port)); }
const FabricAuth::Clock::time_point t0 = FabricAuth::Clock::time_point{} + 1h;

Wire sealed(FabricAuth& a, Wire body) {
    const std::size_t n = body.size();
    body.resize(n + FabricAuth::kTrailer);
    body.resize(a.seal(body.data(), n));
    return body;
}
std::uint64_t drops(const FabricAuth& a, AuthDrop d) { return a.counters().dropped[static_cast<std::size_t>(d)]; }

TEST(FabricAuth, SealedDatagramsOpenToTheirBody) {
    FabricAuth tx(keys({1})), rx(keys({1}));
    const Wire body{1, 2, 3, 4, 5, 6};
    const Wire d = sealed(tx, body);
    ASSERT_EQ(d.size(), body.size() + 36);
    EXPECT_TRUE(std::equal(body.begin(), body.end(), d.begin()));  // not encrypted
    const auto n = rx.open(d.data(), d.size(), from(), t0);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, body.size());
    EXPECT_EQ(rx.counters().opened, 1u);
    EXPECT_EQ(tx.counters().sealed, 1u);
    // An empty body too (nothing on the fabric is empty, but nothing breaks).
    const Wire e = sealed(tx, {});
    EXPECT_EQ(rx.open(e.data(), e.size(), from(), t0).value_or(99), 0u);
}

TEST(FabricAuth, EveryAlteredByteIsRefused) {
    FabricAuth tx(keys({1}));
    const Wire d = sealed(tx, Wire(100, 0x5A));
    for (std::size_t i = 0; i < d.size(); ++i) {
        FabricAuth rx(keys({1}));
        Wire bad = d;
        bad[i] ^= 0x01;
        const auto r = rx.open(bad.data(), bad.size(), from(), t0);
        ASSERT_FALSE(r) << "byte " << i;
        EXPECT_TRUE(r.error() == AuthDrop::bad_tag || r.error() == AuthDrop::unknown_key) << "byte " << i;
    }
    FabricAuth rx(keys({1}));
    EXPECT_EQ(rx.open(d.data(), 35, from(), t0).error(), AuthDrop::too_short);
    EXPECT_EQ(rx.open(d.data(), d.size() - 1, from(), t0).error(), AuthDrop::unknown_key);  // the trailer moved
}

TEST(FabricAuth, AnotherKeyIsUnknownAndAnUnsealedDatagramIsRefused) {
    FabricAuth tx(keys({1})), rx(keys({2}));
    const Wire d = sealed(tx, Wire(64, 7));
    EXPECT_EQ(rx.open(d.data(), d.size(), from(), t0).error(), AuthDrop::unknown_key);
    const Wire plain(64, 7);
    EXPECT_FALSE(rx.open(plain.data(), plain.size(), from(), t0));
    EXPECT_EQ(drops(rx, AuthDrop::unknown_key), 2u);
}

TEST(FabricAuth, ReplaysAreRefusedReorderingWithinTheWindowIsNot) {
    FabricAuth tx(keys({1})), rx(keys({1}));
    std::vector<Wire> d;
    constexpr std::size_t W = FabricAuth::kWindow;
    for (std::size_t i = 0; i < 2 * W; ++i) d.push_back(sealed(tx, Wire(10, static_cast<std::uint8_t>(i))));
    ASSERT_TRUE(rx.open(d[5].data(), d[5].size(), from(), t0));
    EXPECT_EQ(rx.open(d[5].data(), d[5].size(), from(), t0).error(), AuthDrop::replayed);
    ASSERT_TRUE(rx.open(d[3].data(), d[3].size(), from(), t0));  // late, not seen: fine
    EXPECT_EQ(rx.open(d[3].data(), d[3].size(), from(), t0).error(), AuthDrop::replayed);
    ASSERT_TRUE(rx.open(d[W + 476].data(), d[W + 476].size(), from(), t0));
    EXPECT_EQ(rx.open(d[400].data(), d[400].size(), from(), t0).error(), AuthDrop::replayed);  // below the window
    ASSERT_TRUE(rx.open(d[1000].data(), d[1000].size(), from(), t0));                          // inside it
    EXPECT_EQ(drops(rx, AuthDrop::replayed), 3u);
    // The same datagram from another address is another sender's sequence:
    // a replay there is as new (the address is part of the state key), but
    // only a key holder could have sealed it.
    EXPECT_TRUE(rx.open(d[5].data(), d[5].size(), from(4001), t0));
}

TEST(FabricAuth, ANewerSessionReplacesAnOlderOneWhichIsThenStale) {
    FabricAuth old_tx(keys({1}));
    const Wire before = sealed(old_tx, Wire(10, 1));
    const Wire before2 = sealed(old_tx, Wire(10, 2));
    ::usleep(2000);  // sessions are microsecond times
    FabricAuth new_tx(keys({1})), rx(keys({1}));
    const Wire after = sealed(new_tx, Wire(10, 3));
    ASSERT_TRUE(rx.open(before.data(), before.size(), from(), t0));
    ASSERT_TRUE(rx.open(after.data(), after.size(), from(), t0 + 1s));  // the sender restarted
    EXPECT_EQ(rx.open(before2.data(), before2.size(), from(), t0 + 2s).error(), AuthDrop::stale_session);
    // A source silent for kSessionTakeover may come back with an older
    // session (its clock stepped back).
    EXPECT_TRUE(rx.open(before2.data(), before2.size(), from(), t0 + 1s + FabricAuth::kSessionTakeover + 1s));
}

TEST(FabricAuth, RotationAcceptsBothKeysThenOnlyTheNewOne) {
    FabricAuth a(keys({1})), b(keys({1}));
    // Step 1: both accept the new key 2, still send with 1.
    a.set_keys(keys({1, 2}));
    b.set_keys(keys({1, 2}));
    Wire d = sealed(a, Wire(8, 1));
    EXPECT_TRUE(b.open(d.data(), d.size(), from(), t0));
    // Step 2: a sends with 2 first; b (not yet switched) accepts it.
    a.set_keys(keys({2, 1}));
    d = sealed(a, Wire(8, 2));
    EXPECT_TRUE(b.open(d.data(), d.size(), from(), t0));
    // Step 3: the old key is gone everywhere.
    b.set_keys(keys({2}));
    FabricAuth stale(keys({1}));
    d = sealed(stale, Wire(8, 3));
    EXPECT_EQ(b.open(d.data(), d.size(), from(5000), t0).error(), AuthDrop::unknown_key);
    EXPECT_EQ(a.counters().key_rotations, 2u);
}

struct TempDir {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("fabric-auth-" + std::to_string(::getpid()));
    TempDir() { std::filesystem::create_directories(path); }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string write(const std::string& name, const std::string& text, mode_t mode) const {
        const auto p = path / name;
        std::ofstream(p) << text;
        ::chmod(p.c_str(), mode);
        return p.string();
    }
};

TEST(FabricKeyFile, OneOrTwoKeysModeChecked) {
    TempDir dir;
    const std::string k1 = to_hex(key(1)), k2 = to_hex(key(2));
    auto one = load_fabric_key_file(dir.write("one", "# the fabric key\n" + k1 + "\n", 0600));
    ASSERT_TRUE(one) << one.error();
    EXPECT_EQ(*one, keys({1}));
    auto two = load_fabric_key_file(dir.write("two", k2 + "\n" + k1 + "\n", 0400));
    ASSERT_TRUE(two) << two.error();
    EXPECT_EQ(*two, keys({2, 1}));
    const std::string open_path = dir.write("open", k1 + "\n", 0644);
    EXPECT_EQ(load_fabric_key_file(open_path).error(),
              "key file " + open_path + " has mode 0644: others may read it; make it 0600 and owned by the daemon's user");
    const std::string three = dir.write("three", k1 + "\n" + k2 + "\n" + k1 + "\n", 0600);
    EXPECT_EQ(load_fabric_key_file(three).error(),
              three + ":3: at most two keys (the one to send with, and one more to accept)");
    const std::string bad = dir.write("bad", k1 + "\nxyz\n", 0600);
    EXPECT_EQ(load_fabric_key_file(bad).error(), bad + ":2: expected 64 hexadecimal digits, found 3 characters");
    const std::string empty = dir.write("empty", "# nothing\n", 0600);
    EXPECT_EQ(load_fabric_key_file(empty).error(), empty + ": no key");
    EXPECT_NE(load_fabric_key_file((dir.path / "missing").string()).error().find("could not open key file"),
              std::string::npos);
}

TEST(FabricKeyFile, CreatedWhenAskedWithMode0600) {
    TempDir dir;
    const std::string p = (dir.path / "m_key").string();
    auto made = load_key_file(p, true);
    ASSERT_TRUE(made) << made.error();
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    auto again = load_key_file(p, true);
    ASSERT_TRUE(again);
    EXPECT_EQ(*again, *made);
}

// Two sockets on loopback with the same key talk; a third without it, or
// with another, is refused and counted.
TEST(FabricAuth, SocketsSealAndCheckOnTheWire) {
    auto a = UdpBatchSocket::open(*parse_socket_address("127.0.0.1:0"), nullptr);
    auto b = UdpBatchSocket::open(*parse_socket_address("127.0.0.1:0"), nullptr);
    auto c = UdpBatchSocket::open(*parse_socket_address("127.0.0.1:0"), nullptr);
    ASSERT_TRUE(a && b && c);
    FabricAuth ka(keys({9})), kb(keys({9})), kc(keys({8}));
    a->set_auth(&ka);
    b->set_auth(&kb);
    const SocketAddress to_b = b->local_address();
    const Wire body(ib::kMaxPacketSize, 0x42);  // the largest IBA packet still fits with its trailer
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(a->queue(body, &to_b));
    a->flush();
    c->set_auth(&kc);
    ASSERT_TRUE(c->queue(Wire(100, 1), &to_b));
    c->flush();
    c->set_auth(nullptr);
    ASSERT_TRUE(c->queue(Wire(100, 2), &to_b));
    c->flush();
    std::vector<std::size_t> got;
    for (int i = 0; i < 100 && got.size() + kb.counters().dropped[static_cast<std::size_t>(AuthDrop::unknown_key)] < 7; ++i) {
        b->receive([&](bytes d, const SocketAddress&) { got.push_back(d.size()); });
        ::usleep(1000);
    }
    EXPECT_EQ(got, std::vector<std::size_t>(5, body.size()));
    EXPECT_EQ(kb.counters().opened, 5u);
    EXPECT_EQ(kb.counters().dropped[static_cast<std::size_t>(AuthDrop::unknown_key)], 2u);
}

}  // namespace
}  // namespace ipoibd::transport
