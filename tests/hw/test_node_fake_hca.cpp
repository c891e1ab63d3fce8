// The daemon's hardware branch without hardware: a whole Node opening a
// verbs port (the fake libibverbs, fake_verbs.h) and the libibumad MAD path
// (the fake libibumad, fake_umad.h, with an SA behind it), then joining the
// broadcast group through umad and carrying a packet through verbs.
#include <gtest/gtest.h>

#include "config/daemon_config.h"
#include "daemon/event_loop.h"
#include "daemon/log.h"
#include "daemon/node.h"
#include "daemon/notify.h"
#include "host/fake_host_port.h"
#include "tests/hw/fake_umad.h"
#include "tests/hw/fake_verbs.h"
#include "tests/unit/engine_harness.h"

namespace ipoibd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct NodeOnFakeHca : ::testing::Test {
    void SetUp() override {
        fake_verbs::reset();
        fake_umad::reset({.lid = fake_verbs::config().lid,
                          .sm_lid = fake_verbs::config().sm_lid,
                          .port_guid = fake_verbs::config().port_guid});
        auto l = daemon::EventLoop::create();
        ASSERT_TRUE(l.has_value());
        loop = std::move(*l);
        log.set_min_level(daemon::LogLevel::warning);
        config = config::default_config("ib0");
        config.fabric.transport = config::Transport::verbs;
        config.daemon.watchdog = false;
        config.interface.addresses.push_back(*parse_ip_prefix("198.18.0.1/24"));
    }

    bool run_until(const std::function<bool()>& done, Clock::duration timeout = 5s) {
        const auto deadline = Clock::now() + timeout;
        while (!done()) {
            if (Clock::now() >= deadline) return false;
            (void)loop->run_once(std::chrono::milliseconds(5));
        }
        return true;
    }

    std::unique_ptr<daemon::EventLoop> loop;
    daemon::Logger log;
    daemon::Notifier notify;
    config::DaemonConfig config;
};

TEST_F(NodeOnFakeHca, JoinsThroughUmadAndCarriesTrafficThroughVerbs) {
    {
        daemon::Node node(config, "ib0.conf", "ib0", log, notify, *loop);
        ASSERT_TRUE(node.open_fabric().has_value());
        auto owned = std::make_unique<host::FakeHostPort>("ib0");
        host::FakeHostPort& host = *owned;
        ASSERT_TRUE(node.add_interface(std::move(owned)).has_value());
        node.start();
        const iface::Interface& i = *node.interfaces().front();

        // The broadcast join went out through umad and its answer came back.
        ASSERT_TRUE(run_until([&] { return i.engine().link().up; }));
        EXPECT_GE(fake_umad::stats().sent, 1);
        EXPECT_GE(fake_umad::stats().received, 1);
        EXPECT_TRUE(host.carrier());
        EXPECT_EQ(host.mtu(), 2044u);  // the ScriptedSa's group: 2048
        EXPECT_NE(node.answer("status").find("\"port\":\"first HCA port 1\""), std::string::npos)
            << node.answer("status");

        // A broadcast from the host leaves through the verbs QP and, as on
        // an HCA, comes back to the sender's own attached QP (dropped as our
        // own multicast).
        host.inject(ipoib::test::udp_v4("198.18.0.1", "255.255.255.255"));
        ASSERT_TRUE(run_until([&] {
            const auto& c = i.engine().counters();
            return c.tx_multicast >= 1 && c.rx_own_multicast >= 1;
        }));
        EXPECT_GE(i.link().counters().tx_posted, 1u);
        EXPECT_EQ(i.link().counters().tx_errors, 0u);
        // SIGTERM's leave: the groups are left through umad within the grace.
        const int sent_before = fake_umad::stats().sent;
        node.stop("the test");
        EXPECT_TRUE(run_until([&] { return i.sa_idle(); }, 2s));
        EXPECT_GT(fake_umad::stats().sent, sent_before);
        EXPECT_FALSE(i.engine().link().up);
    }
    // Every verbs object the node made is gone, in an order verbs allows.
    EXPECT_TRUE(fake_verbs::stats().violations.empty())
        << testing::PrintToString(fake_verbs::stats().violations);
    EXPECT_EQ(fake_verbs::stats().live_qps, 0);
    EXPECT_EQ(fake_umad::stats().open_ports, 0);
}

}  // namespace
}  // namespace ipoibd
