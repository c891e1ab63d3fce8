// The node's connection manager (daemon/cm_service.h) over a fake MAD path:
// MADs in through on_mad_from(), out through send_to(), events to the user
// that owns each connection.
#include <gtest/gtest.h>

#include <vector>

#include "daemon/cm_service.h"

namespace ipoibd::daemon {
namespace {

using namespace std::chrono_literals;

// A MAD path that keeps what is sent to peers and receives nothing.
class FakePath final : public sa::MadTransport {
public:
    std::vector<std::vector<std::uint8_t>> sent;

    sa::MadPortInfo port_info() const override { return {.name = "fake", .lid = 1, .active = true}; }
    void refresh_port() override {}
    expected<void, sa::MadTransportError> send(const sa::SaMad&) override { return {}; }
    std::size_t receive(const MadCallback&, std::size_t) override { return 0; }
    expected<void, sa::MadTransportError> send_to(bytes mad, const sa::MadAddress&) override {
        sent.emplace_back(mad.begin(), mad.end());
        return {};
    }
    bool can_address_peers() const override { return true; }
    sa::MadWaitSource wait_source() const override { return {}; }
    bool wait(std::chrono::milliseconds) override { return false; }
    const sa::MadTransportCounters& counters() const override { return counters_; }

private:
    sa::MadTransportCounters counters_;
};

struct User final : cm::CmUser {
    std::vector<cm::Event> events;
    void cm_event(const cm::Event& e, cm::Clock::time_point) override { events.push_back(e); }
};

TEST(CmService, AnOwnerGoesWithItsConnectionEvenWhenItsLastEventWasDropped) {
    auto path = std::make_unique<FakePath>();
    FakePath& fake = *path;
    sa::MadAgent agent(std::move(path));
    // Room for one event at a time: two connections leaving TimeWait in the
    // same tick give two timewait_exit, and the second is dropped.
    CmService cm(agent, {.local_ca_guid = 0x0002C90300000A0AULL, .max_events = 1}, 1);
    User user;
    const auto now = cm::Clock::now();
    std::vector<cm::ConnectionId> ids;
    for (std::uint32_t qpn : {0x101u, 0x102u}) {
        auto id = cm.connect({.peer = {.lid = 2}, .service_id = 0x1000000000000048ULL, .local_qpn = qpn}, user, now);
        ASSERT_TRUE(id);
        ids.push_back(*id);
    }
    EXPECT_EQ(fake.sent.size(), 2u);
    EXPECT_EQ(cm.owned(), 2u);
    // The peer rejects both as stale: TimeWait (rejected reaches the user).
    for (cm::ConnectionId id : ids) {
        const cm::Rej rej{.local_comm_id = 0x77, .remote_comm_id = id, .message_rejected = cm::MessageKind::req,
                          .reason = cm::rej::stale_connection};
        cm.on_mad_from(cm::encode(rej, 1), {.lid = 2});
        ASSERT_EQ(cm.engine().state(id), cm::State::timewait);
    }
    ASSERT_EQ(user.events.size(), 2u);
    cm.tick(cm::Clock::now() + 1h);
    EXPECT_EQ(cm.engine().connections(), 0u);
    EXPECT_EQ(cm.engine().counters().events_dropped, 1u);
    ASSERT_EQ(user.events.size(), 3u);
    EXPECT_EQ(user.events.back().kind, cm::EventKind::timewait_exit);
    EXPECT_EQ(cm.owned(), 0u) << "the connection whose timewait_exit was dropped keeps its owner entry";
}

}  // namespace
}  // namespace ipoibd::daemon
