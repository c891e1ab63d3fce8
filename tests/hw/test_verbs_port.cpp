// The verbs backend against a real HCA.
//
// VerbsPortNoHardware runs everywhere: opening what does not exist must be a
// clear error, never a crash. VerbsHardware needs an RDMA device with an
// InfiniBand port and skips, saying why, when there is none (this machine
// and CI); the send/receive tests also skip unless the port is ACTIVE.
// Every wait is bounded (kWait).
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transport/verbs/verbs_port.h"

namespace ipoibd::transport {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = 5s;
constexpr std::uint32_t kTestQKey = 0x1B0E0001;  // not controlled: no CAP_NET_RAW needed
constexpr std::size_t kBufferSize = kGrhSlotSize + 256;

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : fallback;
}

std::string test_device() { return env_or("IPOIBD_TEST_VERBS_DEVICE", ""); }
std::uint8_t test_port() { return static_cast<std::uint8_t>(std::stoul(env_or("IPOIBD_TEST_VERBS_PORT", "1"), nullptr, 0)); }
std::uint16_t test_mlid() {
    return static_cast<std::uint16_t>(std::stoul(env_or("IPOIBD_TEST_VERBS_MLID", "0xC0F0"), nullptr, 0));
}

// A link-local multicast GID no IPoIB interface uses (signature 0xA01B).
ib::Gid test_mgid() {
    return ib::Gid{0xff, 0x12, 0xa0, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x19, 0x05, 0x00, 0x01};
}

std::vector<std::uint8_t> pattern(std::size_t size, std::uint8_t seed) {
    std::vector<std::uint8_t> v(size);
    for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
    return v;
}

// ---------------------------------------------------------------------------
// No hardware needed

TEST(VerbsPortNoHardware, NonexistentDeviceIsAClearError) {
    auto port = open_verbs_port("ipoibd-no-such-hca", 1);
    ASSERT_FALSE(port);
    const Error& e = port.error();
    // No RDMA support or no device at all: not_supported; devices present
    // but none of that name: invalid_argument listing them.
    EXPECT_TRUE(e.code == Errc::not_supported || e.code == Errc::invalid_argument) << e.message();
    EXPECT_NE(e.message().find("ipoibd-no-such-hca"), std::string::npos) << e.message();
    EXPECT_NE(e.sys_errno, 0) << e.message();
}

TEST(VerbsPortNoHardware, PortZeroIsInvalid) {
    auto port = open_verbs_port("", 0);
    ASSERT_FALSE(port);
    EXPECT_EQ(port.error().code, Errc::invalid_argument) << port.error().message();
    EXPECT_NE(port.error().message().find("port 0"), std::string::npos) << port.error().message();
}

TEST(VerbsPortNoHardware, ListingDevicesNeverFailsOddly) {
    auto devices = list_verbs_devices();
    if (!devices) {
        EXPECT_EQ(devices.error().code, Errc::not_supported) << devices.error().message();
        EXPECT_EQ(devices.error().sys_errno, ENOSYS);
    }
}

// ---------------------------------------------------------------------------
// With an HCA

class VerbsHardware : public ::testing::Test {
protected:
    void SetUp() override {
        auto devices = list_verbs_devices();
        if (!devices)
            GTEST_SKIP() << "no RDMA device: " << devices.error().message()
                         << "; the verbs hardware tests need an InfiniBand HCA";
        if (devices->empty())
            GTEST_SKIP() << "no RDMA device: ibv_get_device_list() found none; the verbs hardware tests need an "
                            "InfiniBand HCA";
        auto port = open_verbs_port(test_device(), test_port());
        if (!port && port.error().code == Errc::not_supported) GTEST_SKIP() << port.error().message();
        ASSERT_TRUE(port) << port.error().message();
        port_ = std::move(*port);
        attrs_ = port_->attributes();
    }

    bool active() const { return attrs_.state == PortState::active; }
    std::string inactive_reason() const {
        return std::string("port is ") + to_string(attrs_.state) + ", not ACTIVE: is a subnet manager running?";
    }

    std::unique_ptr<UdQp> make_qp(std::uint32_t send_depth = 16, std::uint32_t receive_depth = 16) {
        auto qp = port_->create_ud_qp(UdQpConfig{kTestQKey, 0, send_depth, receive_depth});
        EXPECT_TRUE(qp) << qp.error().message();
        return qp ? std::move(*qp) : nullptr;
    }

    // Posts one kBufferSize receive buffer per element of `buffers`.
    void post_receives(UdQp& qp, std::vector<std::vector<std::uint8_t>>& buffers) {
        std::vector<ReceiveBuffer> rb;
        for (std::size_t i = 0; i < buffers.size(); ++i) {
            buffers[i].assign(kBufferSize, 0);
            rb.push_back(ReceiveBuffer{1000 + i, mutable_bytes(buffers[i])});
        }
        auto posted = qp.post_receive(rb);
        ASSERT_TRUE(posted) << posted.error().message();
        ASSERT_EQ(*posted, rb.size());
    }

    // Waits on the port's fd, processes and polls until `want` completions
    // arrived or kWait passed.
    std::vector<Completion> collect(UdQp& qp, std::size_t want) {
        std::vector<Completion> got;
        std::array<Completion, 8> batch;
        const auto deadline = std::chrono::steady_clock::now() + kWait;
        while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
            pollfd pfd{port_->fd(), POLLIN, 0};
            ::poll(&pfd, 1, 100);
            port_->process();
            for (std::size_t n; (n = qp.poll(batch)) > 0;) got.insert(got.end(), batch.begin(), batch.begin() + static_cast<long>(n));
        }
        return got;
    }

    std::unique_ptr<Port> port_;
    PortAttributes attrs_;
};

TEST_F(VerbsHardware, ReportsPortAttributes) {
    EXPECT_EQ(attrs_.port_num, test_port());
    EXPECT_NE(attrs_.port_guid, 0u);
    EXPECT_NE(attrs_.node_guid, 0u);
    EXPECT_FALSE(attrs_.pkey_table.empty());
    EXPECT_GE(attrs_.active_mtu, ib::Mtu::mtu256);
    EXPECT_LE(attrs_.active_mtu, ib::Mtu::mtu4096);
    EXPECT_EQ(attrs_.gid()[0], 0xFE) << "GID 0 has the link-local or a site prefix";
    if (active()) {
        EXPECT_TRUE(ib::is_unicast_lid(attrs_.lid));
        EXPECT_TRUE(ib::is_unicast_lid(attrs_.sm_lid));
    }
    EXPECT_GE(port_->fd(), 0);
    port_->process();  // nothing pending: must return at once
    std::array<PortEvent, 4> events;
    port_->poll_events(events);
}

TEST_F(VerbsHardware, CreatesUdQpsWithFreshQpns) {
    auto a = make_qp();
    auto b = make_qp();
    ASSERT_TRUE(a && b);
    for (const auto* qp : {a.get(), b.get()}) {
        EXPECT_NE(qp->qpn(), ib::kQp0);
        EXPECT_NE(qp->qpn(), ib::kQp1);
        EXPECT_LE(qp->qpn(), ib::kQpnMask);
        EXPECT_NE(qp->qpn(), ib::kQpnMulticast);
        EXPECT_EQ(qp->qkey(), kTestQKey);
        EXPECT_EQ(qp->pkey(), attrs_.pkey_table[0]);
    }
    EXPECT_NE(a->qpn(), b->qpn());
    const std::uint32_t old_qpn = a->qpn();
    a.reset();
    auto c = make_qp();
    ASSERT_TRUE(c);
    EXPECT_NE(c->qpn(), old_qpn) << "QPNs are not reused while the port lives";
}

TEST_F(VerbsHardware, RefusesBadQpConfigAndRequests) {
    auto bad = port_->create_ud_qp(UdQpConfig{kTestQKey, 0xFFFF, 16, 16});
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, Errc::bad_pkey_index) << bad.error().message();
    auto zero = port_->create_ud_qp(UdQpConfig{kTestQKey, 0, 0, 16});
    ASSERT_FALSE(zero);
    EXPECT_EQ(zero.error().code, Errc::invalid_argument);

    auto qp = make_qp();
    ASSERT_TRUE(qp);
    std::array<std::uint8_t, 8> tiny{};
    auto r = qp->post_receive(std::array{ReceiveBuffer{1, mutable_bytes(tiny)}});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::invalid_argument);
    auto m = qp->attach_multicast(test_mgid(), 0x0001);
    ASSERT_FALSE(m);
    EXPECT_EQ(m.error().code, Errc::invalid_argument);
    auto d = qp->detach_multicast(test_mgid(), test_mlid());
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().code, Errc::not_attached);

    if (!active()) return;
    const std::vector<std::uint8_t> big(ib::mtu_bytes(attrs_.active_mtu) + 1, 0xAB);
    auto s = qp->post_send(std::array{SendRequest{7, AddressHandle{attrs_.lid}, qp->qpn(), kTestQKey, bytes(big)}});
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, Errc::payload_too_long);
}

TEST_F(VerbsHardware, UnicastToItself) {
    if (!active()) GTEST_SKIP() << inactive_reason();
    auto qp = make_qp();
    ASSERT_TRUE(qp);
    std::vector<std::vector<std::uint8_t>> buffers(4);
    post_receives(*qp, buffers);

    std::vector<std::vector<std::uint8_t>> payloads;
    for (std::uint8_t i = 0; i < 4; ++i) payloads.push_back(pattern(16u + 50u * i, i));
    const AddressHandle self{attrs_.lid, 0, 0, std::nullopt};
    std::vector<SendRequest> sends;
    for (std::size_t i = 0; i < payloads.size(); ++i)
        sends.push_back(SendRequest{i, self, qp->qpn(), kTestQKey, bytes(payloads[i]), std::nullopt, false});
    sends[1].immediate = 0xDEADBEEF;
    sends[2].remote_qkey = ib::kQKeyControlledBit;  // "use the QP's own Q_Key"
    sends[3].solicited = true;
    auto posted = qp->post_send(sends);
    ASSERT_TRUE(posted) << posted.error().message();
    ASSERT_EQ(*posted, sends.size());

    const auto got = collect(*qp, 8);
    ASSERT_EQ(got.size(), 8u) << "4 send and 4 receive completions within " << kWait.count() << " s";
    std::size_t receives = 0;
    for (const Completion& c : got) {
        EXPECT_EQ(c.status, CompletionStatus::success) << to_string(c.status);
        if (c.kind == CompletionKind::send) continue;
        ++receives;
        ASSERT_GE(c.wr_id, 1000u);
        const auto& buf = buffers[c.wr_id - 1000];
        EXPECT_EQ(c.src_qp, qp->qpn());
        EXPECT_EQ(c.slid, attrs_.lid);
        EXPECT_FALSE(c.grh_present);
        EXPECT_EQ(c.pkey_index, 0);
        // Which payload arrived in which buffer: found by size.
        const std::size_t len = c.byte_len - kGrhSlotSize;
        const auto it = std::find_if(payloads.begin(), payloads.end(), [&](const auto& p) { return p.size() == len; });
        ASSERT_NE(it, payloads.end()) << "byte_len " << c.byte_len;
        EXPECT_EQ(std::memcmp(buf.data() + kGrhSlotSize, it->data(), len), 0);
        EXPECT_EQ(c.immediate.has_value(), it == payloads.begin() + 1);
        if (c.immediate) {
            EXPECT_EQ(*c.immediate, 0xDEADBEEFu);
        }
    }
    EXPECT_EQ(receives, 4u);
}

TEST_F(VerbsHardware, SendQueueAcceptsUpToItsDepth) {
    if (!active()) GTEST_SKIP() << inactive_reason();
    auto qp = make_qp(2, 2);
    ASSERT_TRUE(qp);
    const auto payload = pattern(32, 1);
    const AddressHandle self{attrs_.lid, 0, 0, std::nullopt};
    std::vector<SendRequest> sends(4, SendRequest{0, self, qp->qpn(), kTestQKey, bytes(payload), std::nullopt, false});
    auto posted = qp->post_send(sends);
    ASSERT_TRUE(posted) << posted.error().message();
    EXPECT_EQ(*posted, 2u);
    const auto got = collect(*qp, 2);
    EXPECT_EQ(got.size(), 2u);  // the two sends; nothing was posted to receive
}

TEST_F(VerbsHardware, MulticastLoopsBackToTheSender) {
    if (!active()) GTEST_SKIP() << inactive_reason();
    auto qp = make_qp();
    ASSERT_TRUE(qp);
    std::vector<std::vector<std::uint8_t>> buffers(2);
    post_receives(*qp, buffers);
    const ib::Gid mgid = test_mgid();
    auto attached = qp->attach_multicast(mgid, test_mlid());
    ASSERT_TRUE(attached) << attached.error().message();
    EXPECT_TRUE(qp->attach_multicast(mgid, test_mlid())) << "attaching twice is harmless";

    const auto payload = pattern(100, 9);
    GrhAttributes grh;
    grh.dgid = mgid;
    grh.hop_limit = 1;
    const SendRequest send{42, AddressHandle{test_mlid(), 0, 0, grh}, ib::kQpnMulticast, kTestQKey, bytes(payload),
                           std::nullopt, false};
    auto posted = qp->post_send(std::span(&send, 1));
    ASSERT_TRUE(posted) << posted.error().message();

    const auto got = collect(*qp, 2);
    const Completion* rx = nullptr;
    for (const Completion& c : got)
        if (c.kind == CompletionKind::receive) rx = &c;
    ASSERT_NE(rx, nullptr) << "no multicast loopback within " << kWait.count()
                           << " s (the HCA delivers multicast to attached QPs on the sending port)";
    EXPECT_EQ(rx->status, CompletionStatus::success);
    EXPECT_TRUE(rx->grh_present);
    EXPECT_EQ(rx->src_qp, qp->qpn());
    EXPECT_EQ(rx->slid, attrs_.lid);
    ASSERT_EQ(rx->byte_len, kGrhSlotSize + payload.size());
    const auto& buf = buffers[rx->wr_id - 1000];
    EXPECT_EQ(std::memcmp(buf.data() + 24, mgid.data(), mgid.size()), 0) << "GRH DGID in the slot";
    const ib::Gid sgid = attrs_.gid();
    EXPECT_EQ(std::memcmp(buf.data() + 8, sgid.data(), sgid.size()), 0) << "GRH SGID in the slot";
    EXPECT_EQ(std::memcmp(buf.data() + kGrhSlotSize, payload.data(), payload.size()), 0);

    EXPECT_TRUE(qp->detach_multicast(mgid, test_mlid()));
    auto again = qp->detach_multicast(mgid, test_mlid());
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, Errc::not_attached);
}

TEST_F(VerbsHardware, QpOutlivesItsPort) {
    auto qp = make_qp();
    ASSERT_TRUE(qp);
    const std::uint32_t qpn = qp->qpn();
    port_.reset();  // the QP keeps the device open
    EXPECT_EQ(qp->qpn(), qpn);
    std::array<Completion, 4> out;
    EXPECT_EQ(qp->poll(out), 0u);
    qp.reset();
}

// Two RC QPs of this port connected to each other through the HCA's
// loopback: SEND, RDMA WRITE with immediate data and READ, as ibrcperf does
// between two hosts.
TEST_F(VerbsHardware, RcLoopbackSendWriteRead) {
    if (!active()) GTEST_SKIP() << inactive_reason();
    auto a = port_->create_rc_qp(0);
    auto b = port_->create_rc_qp(0);
    ASSERT_TRUE(a) << a.error().message();
    ASSERT_TRUE(b) << b.error().message();
    const std::uint32_t mtu = ib::mtu_bytes(attrs_.active_mtu);
    ASSERT_TRUE((*a)->connect(attrs_.lid, {.dest_qpn = (*b)->qpn(), .pmtu = mtu, .rq_psn = 1}, {.sq_psn = 2}));
    ASSERT_TRUE((*b)->connect(attrs_.lid, {.dest_qpn = (*a)->qpn(), .pmtu = mtu, .rq_psn = 2}, {.sq_psn = 1}));
    std::vector<std::uint8_t> window(65536, 0), source = pattern(65536, 3), landing(65536, 0);
    const auto w = port_->register_memory(window, rc::access::remote_write);
    const auto r = port_->register_memory(source, rc::access::remote_read);
    ASSERT_TRUE(w && r);
    ASSERT_TRUE(port_->register_memory(landing, rc::access::local_write));
    ASSERT_TRUE((*b)->post_recv({.wr_id = 1, .capacity = 20000}));
    ASSERT_TRUE((*b)->post_recv({.wr_id = 2, .capacity = 16}));
    const auto message = pattern(20000, 4);
    ASSERT_TRUE((*a)->post_send({.wr_id = 10, .payload = message}));
    ASSERT_TRUE((*a)->post_send({.wr_id = 11, .payload = pattern(30000, 5), .imm = 9, .opcode = rc::WrOpcode::rdma_write,
                                 .remote_va = w->va, .rkey = w->rkey}));
    ASSERT_TRUE((*a)->post_send({.wr_id = 12, .opcode = rc::WrOpcode::rdma_read, .remote_va = r->va, .rkey = r->rkey,
                                 .read_into = landing}));
    std::vector<rc::Completion> sent, got;
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while ((sent.size() < 3 || got.size() < 2) && std::chrono::steady_clock::now() < deadline) {
        port_->process();
        for (auto& c : (*a)->poll()) sent.push_back(std::move(c));
        for (auto& c : (*b)->poll()) got.push_back(std::move(c));
    }
    ASSERT_EQ(sent.size(), 3u);
    ASSERT_EQ(got.size(), 2u);
    for (const auto& c : sent) EXPECT_EQ(c.status, rc::Status::success) << rc::to_string(c.status);
    EXPECT_EQ(got[0].data, message);
    EXPECT_EQ(got[1].imm, 9u);
    const auto written = pattern(30000, 5);
    EXPECT_TRUE(std::equal(written.begin(), written.end(), window.begin()));
    EXPECT_EQ(landing, source);
}

}  // namespace
}  // namespace ipoibd::transport
