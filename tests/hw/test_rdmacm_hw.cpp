// connected mode's active side on a real HCA (cm/rdma_cm_access.h): the
// real librdmacm resolves our own port's GID, asks the SA for the path and
// sends a REQ for an IPoIB ServiceID nobody listens on; the kernel's ib_cm
// answers REJ 8 (invalid ServiceID). Skips without an HCA, AF_IB support,
// or an ACTIVE port (no subnet manager).
#include <gtest/gtest.h>

#include <cstdlib>
#include <poll.h>

#include "cm/cm_mad.h"
#include "cm/rdma_cm_access.h"
#include "transport/verbs/verbs_port.h"

namespace ipoibd::transport {
namespace {

struct Recorder final : cm::CmUser {
    std::vector<cm::Event> events;
    void cm_event(const cm::Event& e, cm::Clock::time_point) override { events.push_back(e); }
};

TEST(RdmaCmHardware, ARequestForAServiceIdNobodyListensOnIsRejected) {
    auto devices = list_verbs_devices();
    if (!devices || devices->empty()) GTEST_SKIP() << "no RDMA device: the RDMA CM hardware test needs an HCA";
    const char* dev = std::getenv("IPOIBD_TEST_VERBS_DEVICE");
    const char* port_env = std::getenv("IPOIBD_TEST_VERBS_PORT");
    auto port = open_verbs_port(dev ? dev : "", port_env ? static_cast<std::uint8_t>(std::atoi(port_env)) : 1);
    if (!port) GTEST_SKIP() << port.error().message();
    const PortAttributes attrs = (*port)->attributes();
    if (attrs.state != PortState::active) GTEST_SKIP() << "the port is not ACTIVE: is a subnet manager running?";
    auto access = cm::RdmaCmAccess::open(attrs.node_guid);
    if (!access) GTEST_SKIP() << "no RDMA CM with AF_IB: " << access.error();
    auto qp = (*port)->create_rc_qp(0);
    ASSERT_TRUE(qp) << qp.error().message();

    Recorder user;
    cm::ConnectParams p;
    p.peer = {.lid = attrs.lid};
    p.service_id = cm::ipoib_service_id(0xFFFFFE);  // no such UD QP: ib_cm has no listener
    p.local_qpn = (*qp)->qpn();
    p.pkey = 0xFFFF;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    p.primary.local_gid = attrs.gid();
    p.primary.remote_gid = attrs.gid();
    cm::write_ipoib_data(p.private_data, {.ud_qpn = 0x000100, .receive_size = 65524});
    auto id = (*access)->connect(p, user, cm::Clock::now());
    ASSERT_TRUE(id) << id.error();
    const auto deadline = cm::Clock::now() + std::chrono::seconds(10);
    while (user.events.empty() && cm::Clock::now() < deadline) {
        pollfd pfd{.fd = (*access)->fd(), .events = POLLIN, .revents = 0};
        (void)::poll(&pfd, 1, 100);
        (*access)->process(cm::Clock::now());
    }
    ASSERT_FALSE(user.events.empty()) << "no answer in 10 s";
    EXPECT_EQ(user.events.front().kind, cm::EventKind::rejected) << cm::to_string(user.events.front().kind);
    EXPECT_EQ(user.events.front().reason, cm::rej::invalid_service_id);
    EXPECT_EQ((*access)->connections(), 0u);
}

}  // namespace
}  // namespace ipoibd::transport
