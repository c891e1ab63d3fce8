// Inter-switch links (fabric/switch.h, header comment 6): two switches of
// one test cabled port 8 to port 8, hosts as raw UDP addresses, the
// forwarding tables set by hand (the SM's part comes later), a fake clock.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/byte_io.h"
#include "fabric/sm.h"
#include "fabric/switch.h"
#include "transport/soft/route_hint.h"
#include "transport/wire/link.h"
#include "transport/wire/packet.h"
#include "transport/wire/smp.h"
#include "transport/wire/smp_dr.h"

namespace ipoibd::fabric {
namespace {

using namespace std::chrono_literals;
using Wire = std::vector<std::uint8_t>;

SocketAddress addr(const char* text) { return *parse_socket_address(text); }

const SocketAddress kSwitchA = addr("198.18.1.1:4791");
const SocketAddress kSwitchB = addr("198.18.1.2:4791");
const SocketAddress kHost1 = addr("198.18.1.11:5000");  // on A, port 1, LID 10
const SocketAddress kHost2 = addr("198.18.1.12:5000");  // on B, port 1, LID 20
constexpr std::uint8_t kIsl = 8;
constexpr std::uint16_t kLid1 = 10, kLid2 = 20, kMlid = 0xC000;

Wire link_packet() {
    Wire w(ib::LinkPacket::size);
    ib::LinkPacket{}.write_to(w.data());
    return w;
}

// A UD send from `slid` to `dlid`, with a payload byte to tell copies apart.
Wire ud_packet(std::uint16_t slid, std::uint16_t dlid, std::uint8_t tag) {
    const std::array<std::uint8_t, 8> payload{tag};
    ib::PacketSpec spec;
    spec.lrh.slid = slid;
    spec.lrh.dlid = dlid;
    spec.bth.opcode = ib::op::ud_send_only;
    spec.bth.pkey = ib::kPKeyDefault;
    spec.bth.dest_qp = ib::is_multicast_lid(dlid) ? 0xFFFFFF : 2;
    spec.ext.deth = {0x1234, 2};
    spec.payload = payload;
    Wire w(ib::packet_size(spec));
    EXPECT_TRUE(ib::build_packet(spec, w).has_value());
    return w;
}

// What reaches the agents of a switch's port 0.
struct Agents final : ManagementSink {
    std::vector<ib::Smp> smps;
    bool on_smp(const ib::Smp& smp, std::uint8_t, std::uint16_t) override {
        smps.push_back(smp);
        return true;
    }
    bool on_packet(const ib::Packet&, bytes, std::uint8_t) override { return false; }
};

// Two switches and the wire between them and their hosts. A datagram a
// switch sends to the other switch's address reaches it (from the sender's
// address) when the test runs the wire, unless that switch is cut off;
// one it sends anywhere else is a host's.
struct IslTest : ::testing::Test {
    struct Side final : SwitchOutput {
        IslTest& test;
        SocketAddress self;
        explicit Side(IslTest& t, SocketAddress a) : test(t), self(a) {}
        void send(const SocketAddress& to, bytes d) override { test.wire.push_back({self, to, Wire(d.begin(), d.end())}); }
    };
    struct Datagram {
        SocketAddress from, to;
        Wire data;
    };
    Clock::time_point now = Clock::time_point{} + 1h;
    std::deque<Datagram> wire;
    std::map<std::string, std::vector<Wire>> at_host;  // data datagrams by host address
    Side out_a{*this, kSwitchA}, out_b{*this, kSwitchB};
    std::unique_ptr<Switch> a, b;
    Agents agents_a, agents_b;
    bool b_reachable = true;  // false: what A sends B is lost, and B sends nothing

    bool cut_through = false;
    Switch::Config config(std::uint64_t guid, const SocketAddress& peer) const {
        return Switch::Config{.lid = static_cast<std::uint16_t>(guid & 0xFF), .guid = guid, .num_ports = 8,
                              .link_timeout = 1000ms, .cut_through = cut_through, .links = {{kIsl, peer}}};
    }
    void SetUp() override { make_switches(); }
    void make_switches() {
        a = std::make_unique<Switch>(config(0x0200'00ff'fe00'00A1, kSwitchB), out_a);
        b = std::make_unique<Switch>(config(0x0200'00ff'fe00'00B2, kSwitchA), out_b);
        a->set_management(&agents_a);
        b->set_management(&agents_b);
    }
    void run() {
        for (int guard = 0; guard < 10000 && !wire.empty(); ++guard) {
            Datagram d = std::move(wire.front());
            wire.pop_front();
            const bool to_switch = d.to == kSwitchA || d.to == kSwitchB;
            if (!b_reachable && (d.to == kSwitchB || d.from == kSwitchB)) continue;
            if (to_switch)
                (d.to == kSwitchA ? *a : *b).on_datagram(d.from, d.data, now);
            else if (d.data.size() != ib::LinkPacket::size)
                at_host[d.to.to_string()].push_back(std::move(d.data));
        }
    }
    void from_host(const SocketAddress& host, const SocketAddress& to_switch, const Wire& d) {
        wire.push_back({host, to_switch, d});
        run();
    }
    // Time passes in 50 ms ticks; the hosts keep their links.
    void advance(std::chrono::milliseconds how_long) {
        for (auto t = 0ms; t < how_long; t += 50ms) {
            now += 50ms;
            wire.push_back({kHost1, kSwitchA, link_packet()});
            wire.push_back({kHost2, kSwitchB, link_packet()});
            a->tick(now);
            if (b_reachable) b->tick(now);
            run();
        }
    }
    // Both hosts up, every port the SM's ACTIVE, each switch routing its
    // host's LID to port 1 and the other's to the ISL.
    void bring_up() {
        advance(100ms);
        ASSERT_TRUE(a->port_up(1) && a->port_up(kIsl) && b->port_up(1) && b->port_up(kIsl));
        for (Switch* sw : {a.get(), b.get()}) {
            sw->set_port_active(1, true);
            sw->set_port_active(kIsl, true);
        }
        a->set_unicast_route(kLid1, 1);
        a->set_unicast_route(kLid2, kIsl);
        b->set_unicast_route(kLid2, 1);
        b->set_unicast_route(kLid1, kIsl);
    }
    std::vector<Wire>& received(const SocketAddress& host) { return at_host[host.to_string()]; }
};

TEST_F(IslTest, TheLinkComesUpFromEitherEndOnItsOwnPort) {
    EXPECT_TRUE(a->is_isl(kIsl));
    EXPECT_FALSE(a->is_isl(1));
    // Only A ticks: its link packets reach B, whose answer brings up A.
    a->tick(now);
    run();
    EXPECT_TRUE(a->port_up(kIsl));
    EXPECT_TRUE(b->port_up(kIsl));
    EXPECT_EQ(a->peer_of(kIsl), kSwitchB);
    LinkEvent events[8];
    ASSERT_EQ(b->poll_link_events(events), 1u);
    EXPECT_EQ(events[0].port, kIsl);
    EXPECT_TRUE(events[0].up);
    EXPECT_EQ(b->port_info(kIsl).port_state, ib::port_state::init);  // the SM's turn
}

TEST_F(IslTest, AHostNeverGetsTheIslPortEvenWhenEveryOtherIsTaken) {
    for (int h = 1; h <= 8; ++h) {
        const auto host = addr(("198.18.2." + std::to_string(h) + ":5000").c_str());
        from_host(host, kSwitchA, link_packet());
    }
    for (std::uint8_t p = 1; p < kIsl; ++p) EXPECT_TRUE(a->port_up(p));
    EXPECT_FALSE(a->port_up(kIsl));
    EXPECT_EQ(a->counters().dropped_for(SwitchDrop::ports_full), 1u);
    // The ISL's peer still gets its port.
    b->tick(now);
    run();
    EXPECT_TRUE(a->port_up(kIsl));
}

TEST_F(IslTest, UnicastCrossesBothSwitchesByTheirTables) {
    bring_up();
    from_host(kHost1, kSwitchA, ud_packet(kLid1, kLid2, 1));
    ASSERT_EQ(received(kHost2).size(), 1u);
    EXPECT_EQ(received(kHost2)[0], ud_packet(kLid1, kLid2, 1));
    from_host(kHost2, kSwitchB, ud_packet(kLid2, kLid1, 2));
    ASSERT_EQ(received(kHost1).size(), 1u);
    const auto pma = a->pma_counters(kIsl);
    ASSERT_TRUE(pma.has_value());
    EXPECT_EQ(pma->xmit_packets, 1u);
    EXPECT_EQ(pma->rcv_packets, 1u);
}

TEST_F(IslTest, TheSourceIsCheckedWhereThePacketEntersTheFabricNotOnTheIsl) {
    bring_up();
    // Host 1 claiming host 2's LID: refused at its own switch's edge.
    from_host(kHost1, kSwitchA, ud_packet(kLid2, kLid2, 1));
    EXPECT_EQ(a->counters().dropped_for(SwitchDrop::slid_not_port), 1u);
    EXPECT_TRUE(received(kHost2).empty());
    // From the ISL, an SLID that B routes elsewhere (here: nowhere) passes:
    // A checked it at its edge.
    b->clear_unicast_route(kLid1);
    from_host(kHost1, kSwitchA, ud_packet(kLid1, kLid2, 2));
    EXPECT_EQ(received(kHost2).size(), 1u);
    EXPECT_EQ(b->counters().dropped_for(SwitchDrop::slid_not_port), 0u);
}

TEST_F(IslTest, NothingCrossesAnIslTheSmHasNotMadeActive) {
    bring_up();
    b->set_port_active(kIsl, false);
    from_host(kHost1, kSwitchA, ud_packet(kLid1, kLid2, 1));
    EXPECT_TRUE(received(kHost2).empty());
    EXPECT_EQ(b->counters().dropped_for(SwitchDrop::port_not_active), 1u);
}

TEST_F(IslTest, AMulticastCopyNeverGoesBackOutOfTheIslItCameIn) {
    bring_up();
    a->set_multicast_ports(kMlid, {1, kIsl});
    b->set_multicast_ports(kMlid, {1, kIsl});
    from_host(kHost1, kSwitchA, ud_packet(kLid1, kMlid, 7));
    EXPECT_EQ(received(kHost1).size(), 1u);  // the sender's own copy (its port stands in for an HCA's loopback)
    EXPECT_EQ(received(kHost2).size(), 1u);
    EXPECT_EQ(b->pma_counters(kIsl)->xmit_packets, 0u);
    // A flooded group: the same.
    a->set_multicast_flood(kMlid + 1, true);
    b->set_multicast_flood(kMlid + 1, true);
    from_host(kHost1, kSwitchA, ud_packet(kLid1, kMlid + 1, 8));
    EXPECT_EQ(received(kHost2).size(), 2u);
    EXPECT_EQ(b->pma_counters(kIsl)->xmit_packets, 0u);
}

TEST_F(IslTest, NoCutThroughAcrossAnIsl) {
    cut_through = true;
    make_switches();
    bring_up();
    // A host on A and one more on A's port 2, so that the same switch does
    // give hints between its own host ports.
    const SocketAddress host3 = addr("198.18.1.13:5000");
    from_host(host3, kSwitchA, link_packet());
    ASSERT_TRUE(a->port_up(2));
    a->set_port_active(2, true);
    a->set_unicast_route(30, 2);
    from_host(kHost1, kSwitchA, ud_packet(kLid1, 30, 1));
    auto hints = [&](const SocketAddress& host) {
        std::size_t n = 0;
        for (const Wire& w : received(host)) n += transport::decode_route_hint(w).has_value() ? 1u : 0u;
        return n;
    };
    EXPECT_EQ(hints(kHost1), 1u);  // host port to host port: a hint
    // Host 1 to host 2 crosses the ISL: delivered, no hint either way, and
    // a route request for the far LID is refused.
    from_host(kHost1, kSwitchA, ud_packet(kLid1, kLid2, 2));
    from_host(kHost2, kSwitchB, ud_packet(kLid2, kLid1, 3));
    EXPECT_EQ(hints(kHost1), 1u);
    EXPECT_EQ(hints(kHost2), 0u);
    EXPECT_EQ(received(kHost2).size(), 1u);
    transport::SoftControlBuffer request{};
    transport::encode_route_request({.dlid = kLid2, .nonce = 99}, request);
    from_host(kHost1, kSwitchA, Wire(request.begin(), request.end()));
    EXPECT_EQ(hints(kHost1), 1u);
    EXPECT_EQ(a->counters().dropped_for(SwitchDrop::route_refused), 1u);
    EXPECT_EQ(a->counters().route_hints, 1u);
}

TEST_F(IslTest, ASilentPeerTakesTheLinkDownAndTheLinkTrainsAgainWhenItSpeaks) {
    bring_up();
    b_reachable = false;
    advance(1500ms);
    EXPECT_FALSE(a->port_up(kIsl));
    EXPECT_TRUE(a->is_isl(kIsl));
    LinkEvent events[8];
    bool went_down = false;
    for (std::size_t n = a->poll_link_events(events), i = 0; i < n; ++i)
        went_down |= events[i].port == kIsl && !events[i].up;
    EXPECT_TRUE(went_down);
    // A unplugged host port is a host's again; the ISL's stays the ISL's.
    from_host(addr("198.18.2.99:5000"), kSwitchA, link_packet());
    EXPECT_FALSE(a->port_up(kIsl));
    b_reachable = true;
    advance(100ms);
    EXPECT_TRUE(a->port_up(kIsl));
    EXPECT_EQ(a->port_info(kIsl).port_state, ib::port_state::init);  // a new link: the SM's turn again
}

TEST_F(IslTest, ADirectedRouteSmpCrossesTheIslAndItsAnswerComesBack) {
    bring_up();
    ib::Smp smp;
    smp.mgmt_class = ib::mgmt_class::subn_directed_route;
    smp.method = ib::method::get;
    smp.attribute_id = ib::smp_attr::node_info;
    smp.transaction_id = 77;
    const std::array<std::uint8_t, 1> path{kIsl};
    ASSERT_TRUE(ib::dr_set_initial_path(smp, path));
    const ib::DrDecision d = ib::dr_send_request(smp, a->num_ports());
    ASSERT_EQ(d.action, ib::DrAction::send_on_port);
    std::array<std::uint8_t, ib::kMadSize> mad{};
    smp.write_to(mad.data());
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    const auto n = ib::build_qp0_packet(mad, a->lid(), ib::kLidPermissive, out);
    ASSERT_TRUE(n.has_value());
    a->send_from_management(bytes(out).first(*n), d.port);
    run();
    ASSERT_EQ(agents_a.smps.size(), 1u);
    const ib::Smp& answer = agents_a.smps[0];
    EXPECT_EQ(answer.transaction_id, 77u);
    EXPECT_TRUE(answer.direction);
    const auto info = ib::NodeInfo::read_from(answer.data.data());
    EXPECT_EQ(info.node_guid, b->guid());
    EXPECT_EQ(info.node_type, ib::node_type::switch_node);
    EXPECT_EQ(info.local_port_num, kIsl);  // the port it came in on, at B
}

TEST_F(IslTest, TheSmFindsTheSwitchBehindAnIslKeysItAndRoutesThroughIt) {
    std::vector<std::string> log;
    SubnetManager sm(SmConfig{}, *a, [&](const std::string& line) { log.push_back(line); });
    a->set_management(&sm);
    auto step = [&] {
        LinkEvent events[8];
        for (std::size_t n = a->poll_link_events(events), i = 0; i < n; ++i) sm.on_link_event(events[i], now);
        run();
    };
    for (int i = 0; i < 20; ++i) {
        now += 50ms;
        a->tick(now);
        b->tick(now);
        run();
        step();
        sm.tick(now);
        run();
    }
    ASSERT_EQ(sm.switches().size(), 2u);
    const SmSwitch& found = sm.switches()[1];
    EXPECT_EQ(found.guid, b->guid());
    EXPECT_TRUE(found.reachable);
    EXPECT_TRUE(found.keyed);
    EXPECT_EQ(found.path, (std::vector<std::uint8_t>{kIsl}));
    // B's port 0 has a LID of its own, this SM as its master, and a key.
    EXPECT_NE(b->lid(), 0);
    EXPECT_NE(b->lid(), a->lid());
    EXPECT_EQ(found.lid, b->lid());
    EXPECT_EQ(b->port_info(0).master_sm_lid, a->lid());
    EXPECT_NE(b->port_info(0).m_key, 0u);
    // Both ends of the ISL ACTIVE, and each switch routes the other's LID over it.
    EXPECT_EQ(a->port_info(kIsl).port_state, ib::port_state::active);
    EXPECT_EQ(b->port_info(kIsl).port_state, ib::port_state::active);
    EXPECT_EQ(a->unicast_route(b->lid()), kIsl);
    EXPECT_EQ(b->unicast_route(a->lid()), kIsl);
    EXPECT_GE(b->node_info().node_type, ib::node_type::switch_node);
    EXPECT_EQ(sm.counters().switches_found, 1u);
    EXPECT_EQ(sm.counters().isls_activated, 2u);
    EXPECT_GE(sm.counters().routings, 1u);
    // Its link table: the ISL, seen from both ends.
    EXPECT_EQ(found.ports[kIsl].peer.kind, routing::PortPeer::Kind::link);
    EXPECT_EQ(found.ports[kIsl].peer.index, 0u);
    EXPECT_EQ(sm.switches()[0].ports[kIsl].peer.index, 1u);

    // B cut off: the ISL times out on A, B is lost and its route goes.
    b_reachable = false;
    for (int i = 0; i < 40; ++i) {
        now += 50ms;
        a->tick(now);
        run();
        step();
        sm.tick(now);
        run();
    }
    EXPECT_FALSE(sm.switches()[1].reachable);
    EXPECT_EQ(sm.counters().switches_lost, 1u);
    EXPECT_FALSE(a->unicast_route(found.lid).has_value());
}

// An SMP from an SM on this switch's own port 0 (HopCount 0), answered in
// place: the GetResp.
std::optional<ib::Smp> local(Switch& sw, std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier,
                             const ib::SmpData& data = {}) {
    ib::Smp smp;
    smp.mgmt_class = ib::mgmt_class::subn_directed_route;
    smp.method = method;
    smp.attribute_id = attribute;
    smp.attribute_modifier = modifier;
    smp.data = data;
    ib::dr_set_initial_path(smp, {});
    if (ib::dr_send_request(smp, sw.num_ports()).action != ib::DrAction::deliver) return std::nullopt;
    return sw.local_smp(smp);
}

// Trap 128 (a link changed) goes to the master SM named in port 0's
// PortInfo for every change, at most one each 100 ms (a change sooner is
// told 100 ms after the last trap), whether or not the SM has cleared
// PortStateChange; never to an SM on the switch itself. Here the "SM" is
// host 2, behind the ISL.
TEST_F(IslTest, EveryLinkChangeSendsTrap128ToTheMasterSmAtMostTenASecond) {
    bring_up();
    constexpr std::uint16_t kSmLid = 0x30;
    a->set_unicast_route(kSmLid, kIsl);
    b->set_unicast_route(kSmLid, 1);
    auto traps = [&] {
        std::vector<ib::SmpNotice> out;
        for (const Wire& w : received(kHost2)) {
            const auto pkt = ib::parse_packet(w);
            if (!pkt || pkt->lrh.dlid != kSmLid || pkt->payload.size() < ib::kMadSize) continue;
            const ib::Smp smp = ib::Smp::read_from(pkt->payload.data());
            if (smp.method == ib::method::trap && smp.attribute_id == ib::smp_attr::notice)
                out.push_back(ib::SmpNotice::read_from(smp.data.data()));
        }
        return out;
    };
    auto plug_host = [&](int h) {
        from_host(addr(("198.18.3." + std::to_string(h) + ":5000").c_str()), kSwitchA, link_packet());
    };
    // No master SM set yet: a link change sends nothing, and nothing later.
    plug_host(1);
    advance(200ms);
    EXPECT_TRUE(traps().empty());
    EXPECT_EQ(a->counters().traps_sent, 0u);
    // The SM sets port 0: the switch's LID and the SM's.
    const auto got = local(*a, ib::method::get, ib::smp_attr::port_info, 0);
    ASSERT_TRUE(got.has_value());
    ib::PortInfo p0 = ib::PortInfo::read_from(got->data.data());
    p0.master_sm_lid = kSmLid;
    p0.port_state = 0;
    p0.port_physical_state = 0;
    ib::SmpData data{};
    ASSERT_TRUE(ib::put_attribute(p0, data).has_value());
    ASSERT_TRUE(local(*a, ib::method::set, ib::smp_attr::port_info, 0, data));
    plug_host(2);
    auto seen = traps();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_TRUE(seen[0].is_generic);
    EXPECT_EQ(seen[0].trap_number, ib::trap::link_state_change);
    EXPECT_EQ(seen[0].type, ib::trap::type_urgent);
    EXPECT_EQ(seen[0].producer_type, ib::trap::producer_switch);
    EXPECT_EQ(seen[0].issuer_lid, a->lid());
    EXPECT_EQ(load_be16(seen[0].data_details.data()), a->lid());
    EXPECT_TRUE(ib::SwitchInfo::read_from(local(*a, ib::method::get, ib::smp_attr::switch_info, 0)->data.data())
                    .port_state_change);
    // Two more at once, PortStateChange still set: one trap, 100 ms later
    // (after the last change), not two and not none.
    plug_host(3);
    plug_host(4);
    EXPECT_EQ(traps().size(), 1u);
    advance(100ms);
    EXPECT_EQ(traps().size(), 2u);
    advance(300ms);
    EXPECT_EQ(traps().size(), 2u);
    EXPECT_EQ(a->counters().traps_sent, 2u);
    // An SM on the switch itself hears its links directly: no trap to it.
    p0.master_sm_lid = a->lid();
    ASSERT_TRUE(ib::put_attribute(p0, data).has_value());
    ASSERT_TRUE(local(*a, ib::method::set, ib::smp_attr::port_info, 0, data));
    plug_host(5);
    advance(200ms);
    EXPECT_EQ(a->counters().traps_sent, 2u);
}

// Three switches in a chain, A port 8 - port 7 B port 8 - port 7 C, their
// links trained by ticks: a directed-route SMP from A's port 0 crosses any
// number of hops by the initial path and comes back by the return path
// (IBA 14.2.2), each switch's SMA answering for itself.
struct ChainTest : ::testing::Test {
    struct Out final : SwitchOutput {
        ChainTest& t;
        SocketAddress self;
        Out(ChainTest& test, SocketAddress a) : t(test), self(a) {}
        void send(const SocketAddress& to, bytes d) override { t.wire.push_back({self, to, Wire(d.begin(), d.end())}); }
    };
    struct Datagram {
        SocketAddress from, to;
        Wire data;
    };
    const std::array<SocketAddress, 3> where{addr("198.18.4.1:4791"), addr("198.18.4.2:4791"), addr("198.18.4.3:4791")};
    std::deque<Datagram> wire;
    std::vector<std::unique_ptr<Out>> outs;
    std::vector<std::unique_ptr<Switch>> sw;
    Agents agents;  // A's port 0
    Clock::time_point now = Clock::time_point{} + 1h;

    void SetUp() override {
        for (std::size_t i = 0; i < 3; ++i) {
            Switch::Config c{.lid = static_cast<std::uint16_t>(i + 1), .guid = 0x0200'00ff'fe00'0C00 + i,
                             .num_ports = 8, .cut_through = false};
            if (i > 0) c.links.push_back({7, where[i - 1]});
            if (i < 2) c.links.push_back({8, where[i + 1]});
            outs.push_back(std::make_unique<Out>(*this, where[i]));
            sw.push_back(std::make_unique<Switch>(c, *outs.back()));
        }
        sw[0]->set_management(&agents);
        for (int t = 0; t < 3; ++t) {
            now += 50ms;
            for (auto& s : sw) s->tick(now);
            run();
        }
    }
    void run() {
        for (int guard = 0; guard < 10000 && !wire.empty(); ++guard) {
            Datagram d = std::move(wire.front());
            wire.pop_front();
            for (std::size_t i = 0; i < 3; ++i)
                if (d.to == where[i]) sw[i]->on_datagram(d.from, d.data, now);
        }
    }
    // A Get NodeInfo from A's SM along `path`; the answer, if one came back.
    std::optional<ib::Smp> node_info_along(std::span<const std::uint8_t> path, std::uint64_t tid) {
        ib::Smp smp;
        smp.mgmt_class = ib::mgmt_class::subn_directed_route;
        smp.method = ib::method::get;
        smp.attribute_id = ib::smp_attr::node_info;
        smp.transaction_id = tid;
        if (!ib::dr_set_initial_path(smp, path)) return std::nullopt;
        const ib::DrDecision d = ib::dr_send_request(smp, sw[0]->num_ports());
        if (d.action != ib::DrAction::send_on_port) return std::nullopt;
        std::array<std::uint8_t, ib::kMadSize> mad{};
        smp.write_to(mad.data());
        std::array<std::uint8_t, ib::kQp0PacketSize> out{};
        const auto n = ib::build_qp0_packet(mad, sw[0]->lid(), ib::kLidPermissive, out);
        if (!n) return std::nullopt;
        agents.smps.clear();
        sw[0]->send_from_management(bytes(out).first(*n), d.port);
        run();
        for (const ib::Smp& a : agents.smps)
            if (a.transaction_id == tid) return a;
        return std::nullopt;
    }
};

TEST_F(ChainTest, ADirectedRouteSmpCrossesTwoSwitchesAndComesBack) {
    for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(sw[i]->port_up(i == 0 ? 8 : 7)) << i;
    // One hop: B, entered on its port 7.
    const std::array<std::uint8_t, 1> to_b{8};
    auto b = node_info_along(to_b, 1);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(ib::NodeInfo::read_from(b->data.data()).node_guid, sw[1]->guid());
    // Two hops: C, entered on its port 7, the answer back through B.
    const std::array<std::uint8_t, 2> to_c{8, 8};
    auto c = node_info_along(to_c, 2);
    ASSERT_TRUE(c.has_value());
    const auto info = ib::NodeInfo::read_from(c->data.data());
    EXPECT_EQ(info.node_guid, sw[2]->guid());
    EXPECT_EQ(info.node_type, ib::node_type::switch_node);
    EXPECT_EQ(info.local_port_num, 7);
    EXPECT_TRUE(c->direction);
    EXPECT_EQ(c->hop_count, 2);
    EXPECT_EQ(c->status, 0);
    // There and back again: C, then out of C's port 7 to B (entered on 8).
    const std::array<std::uint8_t, 3> c_then_b{8, 8, 7};
    auto back = node_info_along(c_then_b, 3);
    ASSERT_TRUE(back.has_value());
    const auto b_again = ib::NodeInfo::read_from(back->data.data());
    EXPECT_EQ(b_again.node_guid, sw[1]->guid());
    EXPECT_EQ(b_again.local_port_num, 8);
    // Off the end of the chain: C's port 8 has no link; nothing comes back.
    const std::array<std::uint8_t, 3> past_c{8, 8, 8};
    const auto& cc = sw[2]->counters();
    const std::uint64_t dropped_before = cc.dropped_for(SwitchDrop::dr_discarded) + cc.dropped_for(SwitchDrop::egress_down);
    EXPECT_FALSE(node_info_along(past_c, 4).has_value());
    EXPECT_EQ(cc.dropped_for(SwitchDrop::dr_discarded) + cc.dropped_for(SwitchDrop::egress_down), dropped_before + 1)
        << "C counts the SMP it could not send on";
}

TEST(IslConfig, RefusesALinkOnNoPortTwoOnOnePortAndTwoToOnePeer) {
    const auto peer = kSwitchB;
    EXPECT_FALSE(Switch::config_error({.num_ports = 8, .links = {{8, peer}}}).has_value());
    EXPECT_EQ(Switch::config_error({.num_ports = 8, .links = {{9, peer}}}),
              "inter-switch link on port 9: the switch has ports 1-8");
    EXPECT_EQ(Switch::config_error({.num_ports = 8, .links = {{0, peer}}}),
              "inter-switch link on port 0: the switch has ports 1-8");
    EXPECT_EQ(Switch::config_error({.num_ports = 8, .links = {{3, peer}, {3, kSwitchA}}}),
              "port 3 has two inter-switch links");
    EXPECT_EQ(Switch::config_error({.num_ports = 8, .links = {{3, peer}, {4, peer}}}),
              "two inter-switch links to 198.18.1.2:4791");
}

}  // namespace
}  // namespace ipoibd::fabric
