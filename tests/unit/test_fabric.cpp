// The switch and SM engines with CA ports in memory and a fake clock: the SM
// finds and programs ports with directed-route SMPs answered by real SMAs,
// the switch forwards by the LIDs it assigned, and losses, restarts and
// silent ports are handled.
#include <gtest/gtest.h>

#include <deque>

#include "fabric/management.h"
#include "fabric/sm.h"
#include "fabric/switch.h"
#include "transport/managed_port.h"
#include "transport/wire/link.h"

namespace ipoibd::fabric {
namespace {

using transport::ManagedPort;
using transport::PortEvent;
using transport::PortState;
using Wire = std::vector<std::uint8_t>;

SocketAddress addr(int n) { return *parse_socket_address("198.18.0." + std::to_string(n) + ":4000"); }

Wire link_packet() {
    Wire w(ib::LinkPacket::size);
    ib::LinkPacket{}.write_to(w.data());
    return w;
}

struct Net;

struct Ca final : transport::LinkSink {
    Ca(Net& n, int id, std::uint64_t guid);
    bool transmit(bytes p) override;
    std::vector<PortEvent> events() {
        std::vector<PortEvent> out(64);
        out.resize(port.core().poll_events(out));
        return out;
    }
    Net& net;
    SocketAddress address;
    ManagedPort port;
    bool alive = true;     // sends link packets
    bool answers = true;   // hands QP0 to its SMA
    bool link_up = false;
};

struct Net final : SwitchOutput {
    std::deque<std::pair<SocketAddress, Wire>> down, up;  // switch->CA, CA->switch
    std::vector<Ca*> cas;
    void send(const SocketAddress& peer, bytes d) override { down.emplace_back(peer, Wire(d.begin(), d.end())); }
};

Ca::Ca(Net& n, int id, std::uint64_t guid)
    : net(n), address(addr(id)), port(transport::SmaIdentity{.node_guid = guid, .port_guid = guid, .node_description = "ca"}, *this) {
    net.cas.push_back(this);
}

bool Ca::transmit(bytes p) {
    net.up.emplace_back(address, Wire(p.begin(), p.end()));
    return true;
}

struct FabricTest : ::testing::Test {
    Net net;
    Clock::time_point now = Clock::time_point{} + std::chrono::hours(1);
    SmConfig sm_config;
    std::unique_ptr<Switch> sw;
    std::unique_ptr<SubnetManager> sm;

    void SetUp() override { start_fabric(); }

    void start_fabric() {
        sm.reset();
        sw = std::make_unique<Switch>(Switch::Config{.lid = 1, .num_ports = 8, .link_timeout = std::chrono::milliseconds(1000)}, net);
        sm_config.sweep_interval = std::chrono::milliseconds(500);
        sm = std::make_unique<SubnetManager>(sm_config, *sw);
        sw->set_management(sm.get());
        net.down.clear();
        net.up.clear();
    }

    // Moves datagrams both ways until nothing is left.
    void run() {
        for (int guard = 0; guard < 10000 && (!net.down.empty() || !net.up.empty()); ++guard) {
            while (!net.up.empty()) {
                auto [from, d] = std::move(net.up.front());
                net.up.pop_front();
                sw->on_datagram(from, d, now);
                LinkEvent le[8];
                for (std::size_t n = sw->poll_link_events(le), i = 0; i < n; ++i) sm->on_link_event(le[i], now);
            }
            while (!net.down.empty()) {
                auto [to, d] = std::move(net.down.front());
                net.down.pop_front();
                for (Ca* ca : net.cas) {
                    if (!(ca->address == to)) continue;
                    if (d.size() == ib::LinkPacket::size) {
                        if (!ca->link_up) ca->port.link_up();
                        ca->link_up = true;
                    } else if (ca->answers || (d.size() > 20 && load_be24(d.data() + 13) != 0)) {
                        ca->port.core().receive(d);
                    }
                }
            }
        }
    }

    void plug(Ca& ca) {
        net.up.emplace_back(ca.address, link_packet());
        run();
    }

    // Time passes in 50 ms ticks, as in ibfabricd; live CAs keep their links.
    void advance(std::chrono::milliseconds how_long) {
        for (auto t = std::chrono::milliseconds(0); t < how_long; t += std::chrono::milliseconds(50)) {
            now += std::chrono::milliseconds(50);
            for (Ca* ca : net.cas)
                if (ca->alive) net.up.emplace_back(ca->address, link_packet());
            run();
            sw->tick(now);
            LinkEvent le[8];
            for (std::size_t n = sw->poll_link_events(le), i = 0; i < n; ++i) sm->on_link_event(le[i], now);
            sm->tick(now);
            run();
        }
    }
};

bool has(const std::vector<PortEvent>& v, PortEvent e) { return std::find(v.begin(), v.end(), e) != v.end(); }

TEST_F(FabricTest, SmProgramsPortsToActive) {
    Ca a(net, 1, 0x0002C90300000A01), b(net, 2, 0x0002C90300000B02);
    plug(a);
    plug(b);
    const auto pa = a.port.core().attributes(), pb = b.port.core().attributes();
    EXPECT_EQ(pa.state, PortState::active);
    EXPECT_EQ(pb.state, PortState::active);
    EXPECT_EQ(pa.lid, 2);
    EXPECT_EQ(pb.lid, 3);
    EXPECT_EQ(pa.sm_lid, 1);
    EXPECT_EQ(pa.subnet_prefix, 0xFE80000000000000ULL);
    EXPECT_EQ(pa.pkey_table.at(0), 0xFFFF);
    EXPECT_EQ(sw->unicast_route(2), std::optional<std::uint8_t>(1));
    EXPECT_EQ(sw->unicast_route(3), std::optional<std::uint8_t>(2));
    const auto ev = a.events();
    EXPECT_TRUE(has(ev, PortEvent::port_active));
    EXPECT_TRUE(has(ev, PortEvent::lid_change));
    EXPECT_FALSE(has(ev, PortEvent::client_reregister)) << "a fresh port has nothing to re-register";
    EXPECT_EQ(sm->ports().at(1).description, "ca");
    EXPECT_EQ(sm->counters().ports_configured, 2u);
}

TEST_F(FabricTest, UnicastAndMulticastThroughTheSwitch) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    auto qa = *a.port.core().create_ud_qp({.qkey = 7});
    auto qb = *b.port.core().create_ud_qp({.qkey = 7});
    Wire buf(transport::kGrhSlotSize + 64), buf2(transport::kGrhSlotSize + 64);
    const transport::ReceiveBuffer rb[] = {{1, buf}, {2, buf2}};
    qb->post_receive(rb);
    Wire payload(10, 0x42);
    transport::SendRequest r{.wr_id = 1, .ah = {.dlid = b.port.core().attributes().lid}, .remote_qpn = qb->qpn(), .remote_qkey = 7, .payload = payload};
    ASSERT_EQ(*qa->post_send({&r, 1}), 1u);
    run();
    transport::Completion wc[4];
    ASSERT_EQ(qb->poll(wc), 1u);
    EXPECT_EQ(wc[0].slid, 2);
    EXPECT_EQ(wc[0].src_qp, qa->qpn());

    // A flooded group reaches the sender's own port as well.
    const ib::Gid mgid = {0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF};
    sw->set_multicast_flood(0xC000, true);
    Wire abuf(transport::kGrhSlotSize + 64);
    const transport::ReceiveBuffer ra[] = {{3, abuf}};
    qa->post_receive(ra);
    ASSERT_TRUE(qa->attach_multicast(mgid, 0xC000).has_value());
    ASSERT_TRUE(qb->attach_multicast(mgid, 0xC000).has_value());
    transport::SendRequest m{.wr_id = 2, .ah = {.dlid = 0xC000, .grh = transport::GrhAttributes{.dgid = mgid}},
                             .remote_qpn = ib::kQpnMulticast, .remote_qkey = 7, .payload = payload};
    qa->post_send({&m, 1});
    run();
    std::size_t got_a = 0;
    for (std::size_t n = qa->poll(wc), i = 0; i < n; ++i) got_a += wc[i].kind == transport::CompletionKind::receive;
    EXPECT_EQ(got_a, 1u);
    EXPECT_EQ(qb->poll(wc), 1u);
}

TEST_F(FabricTest, UnknownDlidAndBadVcrcAreCountedBySwitch) {
    Ca a(net, 1, 0xA1);
    plug(a);
    Wire junk(40, 0);
    junk[1] = 0x02;
    sw->on_datagram(a.address, junk, now);
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::link_check), 1u);
    sw->on_datagram(addr(77), junk, now);
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::unknown_peer), 1u);
}

TEST_F(FabricTest, TruncatedOrForeignMadsToTheSaAreCountedNotAnswered) {
    SaServer sa(SaServerConfig{}, *sw, [] { return std::vector<SaPort>{}; });
    FabricManagement m(*sw, *sm, sa);
    std::vector<std::uint8_t> short_mad(100, 0);
    ib::Packet p;
    p.bth.dest_qp = ib::kQp1;
    p.ext.deth = {ib::kGsiQKey, ib::kQp1};
    p.payload = short_mad;
    EXPECT_TRUE(m.on_packet(p, {}, 1));
    std::vector<std::uint8_t> wrong_qkey(256, 0);
    wrong_qkey[0] = 1;
    wrong_qkey[1] = ib::mgmt_class::subn_adm;
    p.payload = wrong_qkey;
    p.ext.deth.qkey = 0x1234;
    EXPECT_TRUE(m.on_packet(p, {}, 1));
    EXPECT_EQ(m.sa_malformed(), 2u);
    EXPECT_EQ(sa.counters().requests, 0u);
    EXPECT_TRUE(net.down.empty()) << "nothing answered";
    p.bth.dest_qp = 0x48;
    EXPECT_FALSE(m.on_packet(p, {}, 1)) << "not the SA's: the switch counts it";
}

TEST_F(FabricTest, StaticLidFromConfig) {
    sm_config.static_lids[0xC3] = 0x0042;
    start_fabric();
    Ca c(net, 3, 0xC3);
    plug(c);
    EXPECT_EQ(c.port.core().attributes().lid, 0x42);
}

TEST_F(FabricTest, PKeyTablesFollowPartitions) {
    auto parts = parse_partitions("Default=0x7fff, ipoib : ALL=full;\nstorage=0x8001 : 0xA1=full, 0xB2=limited;", "p.conf");
    ASSERT_TRUE(parts.has_value());
    sm_config.partitions = *parts;
    start_fabric();
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), c(net, 3, 0xC3);
    plug(a);
    plug(b);
    plug(c);
    auto table = [](Ca& ca) {
        auto t = ca.port.core().attributes().pkey_table;
        std::erase(t, std::uint16_t{0});
        return t;
    };
    EXPECT_EQ(table(a), (std::vector<std::uint16_t>{0xFFFF, 0x8001}));
    EXPECT_EQ(table(b), (std::vector<std::uint16_t>{0xFFFF, 0x0001}));
    EXPECT_EQ(table(c), (std::vector<std::uint16_t>{0xFFFF}));
}

TEST_F(FabricTest, SubnetPrefixFromConfig) {
    sm_config.subnet_prefix = 0x20010DB800010000ULL;
    start_fabric();
    Ca c(net, 3, 0xC3);
    plug(c);
    EXPECT_EQ(c.port.core().attributes().subnet_prefix, 0x20010DB800010000ULL);
    EXPECT_EQ(c.port.core().attributes().gid()[0], 0x20);
}

TEST_F(FabricTest, SilentPortIsUnpluggedAndItsRouteCleared) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    b.alive = false;  // the process is gone: no link packets, no answers
    b.answers = false;
    advance(std::chrono::milliseconds(1600));
    EXPECT_FALSE(sw->unicast_route(3).has_value());
    EXPECT_TRUE(sw->unicast_route(2).has_value());
    EXPECT_EQ(sm->counters().ports_lost, 1u);
    EXPECT_EQ(sm->ports().count(2), 0u);
}

TEST_F(FabricTest, SweepDropsAPortThatStopsAnswering) {
    Ca a(net, 1, 0xA1);
    plug(a);
    a.answers = false;  // the link stays up, the SMA is gone
    advance(std::chrono::milliseconds(3000));
    EXPECT_EQ(sm->counters().ports_lost, 1u);
    EXPECT_GT(sm->counters().timeouts, 0u);
    EXPECT_FALSE(sw->unicast_route(2).has_value());
}

TEST_F(FabricTest, SmRestartKeepsLidsAndAsksForReregistration) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(b);  // b first: LID 2
    plug(a);  // a: LID 3
    a.events();
    start_fabric();  // a new switch and SM; the ports keep their state
    plug(a);         // a now comes first, but keeps LID 3
    plug(b);
    EXPECT_EQ(a.port.core().attributes().lid, 3);
    EXPECT_EQ(b.port.core().attributes().lid, 2);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_TRUE(has(a.events(), PortEvent::client_reregister));
    EXPECT_EQ(sw->unicast_route(3), std::optional<std::uint8_t>(1));
}

TEST_F(FabricTest, LinkFlapReprogramsThePort) {
    Ca a(net, 1, 0xA1);
    plug(a);
    a.alive = false;  // the cable is pulled: nothing gets through either way
    a.answers = false;
    advance(std::chrono::milliseconds(1200));
    EXPECT_EQ(sm->counters().ports_lost, 1u);
    a.port.link_down();
    a.link_up = false;
    EXPECT_NE(a.port.core().attributes().state, PortState::active);
    a.events();
    a.alive = true;
    a.answers = true;
    plug(a);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_EQ(a.port.core().attributes().lid, 2);
    const auto ev = a.events();
    EXPECT_TRUE(has(ev, PortEvent::port_active));
    EXPECT_TRUE(has(ev, PortEvent::client_reregister));
}

}  // namespace
}  // namespace ipoibd::fabric
