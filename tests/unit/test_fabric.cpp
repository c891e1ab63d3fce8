// The switch and SM engines with CA ports in memory and a fake clock: the SM
// finds and programs ports with directed-route SMPs answered by real SMAs,
// the switch forwards by the LIDs it assigned, and losses, restarts and
// silent ports are handled. Then FabricService on loopback UDP: its open()
// errors, its stats, and a soft port brought to ACTIVE through it.
#include <gtest/gtest.h>

#include <functional>
#include <poll.h>
#include <unistd.h>

#include <netinet/in.h>

#include <cstring>
#include <atomic>
#include <deque>
#include <thread>
#include <filesystem>

#include "fabric/fabric_service.h"
#include "fabric/sa/sa_server.h"
#include "transport/gid.h"
#include "fabric/management.h"
#include "fabric/sm.h"
#include "fabric/switch.h"
#include "tests/tools/forge.h"
#include "transport/managed_port.h"
#include "transport/rc/rc_port.h"
#include "transport/rc/rc_wire.h"
#include "transport/soft/route_hint.h"
#include "transport/soft/soft_port.h"
#include "transport/wire/link.h"

namespace ipoibd::fabric {
namespace {

using transport::ManagedPort;
using transport::PortEvent;
using transport::PortState;
using Wire = std::vector<std::uint8_t>;

// The soft ports of these tests send a link packet every 10 ms (they come
// up at once) and drop their link after 10 s without one, not after 10 of
// their intervals: the switch sends one every 50 ms tick, and a test loop
// held up for 100 ms on a busy machine would take the link down and the
// port out of ACTIVE mid-test.
constexpr unsigned kTestLinkTimeoutIntervals = 1000;

SocketAddress addr(int n) { return *parse_socket_address("198.18.0." + std::to_string(n) + ":4000"); }

Wire link_packet() {
    Wire w(ib::LinkPacket::size);
    ib::LinkPacket{}.write_to(w.data());
    return w;
}

struct Net;

struct Ca final : transport::LinkSink {
    Ca(Net& n, int id, std::uint64_t guid, std::string description = "ca");
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
    const Clock::time_point* now = nullptr;  // the test's fake clock, for the SMAs' M_Key leases
    void send(const SocketAddress& peer, bytes d) override { down.emplace_back(peer, Wire(d.begin(), d.end())); }
};

Ca::Ca(Net& n, int id, std::uint64_t guid, std::string description)
    : net(n),
      address(addr(id)),
      port(transport::SmaIdentity{.node_guid = guid, .port_guid = guid, .node_description = std::move(description)},
           *this) {
    net.cas.push_back(this);
    if (net.now) port.set_clock([&n] { return *n.now; });
}

bool Ca::transmit(bytes p) {
    net.up.emplace_back(address, Wire(p.begin(), p.end()));
    return true;
}

// `ca`'s own SMA told, by a Set PortInfo from the switch's LID to `dlid`
// (its LID, or the permissive one), that the port has `lid`: what a port
// that lies about its LID does to itself.
void claim_lid(Ca& ca, std::uint16_t switch_lid, std::uint16_t dlid, std::uint16_t lid) {
    ib::PortInfo mine = ca.port.sma().port_info();
    mine.lid = lid;
    mine.port_state = ib::port_state::down;
    mine.port_physical_state = 0;
    ib::Smp set;
    set.mgmt_class = ib::mgmt_class::subn_lid_routed;
    set.method = ib::method::set;
    set.attribute_id = ib::smp_attr::port_info;
    set.m_key = mine.m_key;
    ASSERT_TRUE(ib::put_attribute(mine, set.data));
    std::array<std::uint8_t, ib::kMadSize> mad{};
    set.write_to(mad.data());
    ca.port.core().receive(test::forged_packet(switch_lid, dlid, ib::kQp0, 0, mad));
}

struct FabricTest : ::testing::Test {
    Net net;
    Clock::time_point now = Clock::time_point{} + std::chrono::hours(1);
    SmConfig sm_config;
    std::unique_ptr<Switch> sw;
    std::unique_ptr<SubnetManager> sm;

    void SetUp() override {
        net.now = &now;
        start_fabric();
    }

    // The default partition, and "storage" (0x8001) with GUID 0xA1 a full
    // and 0xB2 a limited member; the fabric started again with them.
    void start_storage_partitions() {
        start_with_partitions("Default=0x7fff, ipoib : ALL=full;\nstorage=0x8001 : 0xA1=full, 0xB2=limited;");
    }
    // The fabric started again with the partitions of `text` (partitions.conf syntax).
    void start_with_partitions(const std::string& text) {
        auto parts = parse_partitions(text, "p.conf");
        ASSERT_TRUE(parts.has_value());
        sm_config.partitions = *parts;
        start_fabric();
    }

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

// A port's NodeDescription is its own to write: the SM's log quotes it with
// control characters and bytes that are not UTF-8 as \xNN, so a port cannot
// put escape sequences on ibfabricd's terminal or in its journal.
TEST_F(FabricTest, TheLogQuotesAPortsDescriptionAsText) {
    std::vector<std::string> lines;
    sm = std::make_unique<SubnetManager>(sm_config, *sw, [&](const std::string& l) { lines.push_back(l); });
    sw->set_management(sm.get());
    Ca a(net, 1, 0x0002C90300000A01, "evil\x1b]0;owned\x07\xff caf\xc3\xa9");
    plug(a);
    ASSERT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_EQ(sm->ports().at(1).description, "evil\x1b]0;owned\x07\xff caf\xc3\xa9");  // as the port said
    const auto active = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.find("ACTIVE") != l.npos; });
    ASSERT_NE(active, lines.end());
    EXPECT_NE(active->find("\"evil\\x1b]0;owned\\x07\\xff caf\xc3\xa9\""), std::string::npos) << *active;
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

// `mad` from CA `a`'s QP `src_qp` to the fabric's QP1 with `pkey`, as
// port 1 of the switch hands it to the management: the packet (LRH, BTH,
// DETH, MAD) that goes back to `a`, if any.
std::optional<Wire> port_zero_answers(FabricManagement& m, const Ca& a, bytes mad, std::uint32_t src_qp,
                                      std::uint16_t pkey, Net& net) {
    ib::Packet p;
    p.lrh.slid = a.port.core().attributes().lid;
    p.bth.dest_qp = ib::kQp1;
    p.bth.pkey = pkey;
    p.ext.deth = {ib::kGsiQKey, src_qp};
    p.payload = mad;
    net.down.clear();
    if (!m.on_packet(p, {}, 1)) return std::nullopt;
    std::optional<Wire> answer;
    for (const auto& [to, d] : net.down)
        if (to == a.address && d.size() > ib::Lrh::size + ib::Bth::size + ib::Deth::size) answer = d;
    return answer;
}

// The same with the default partition's limited P_Key (0x7FFF): the
// P_Key of the answer, if any.
std::optional<std::uint16_t> limited_member_asks(FabricManagement& m, const Ca& a, bytes mad, std::uint32_t src_qp,
                                                 Net& net) {
    const auto answer = port_zero_answers(m, a, mad, src_qp, 0x7FFF, net);
    if (!answer) return std::nullopt;
    return load_be16(answer->data() + ib::Lrh::size + 2);
}

TEST_F(FabricTest, SaAnswersLimitedMembersWithTheFullMemberPKey) {
    // A limited member of the default partition asks with P_Key 0x7FFF; an
    // answer with 0x7FFF would be limited-to-limited, which its port drops
    // (IBA 10.9.3): the SM's port is a full member and answers as one.
    Ca a(net, 1, 0xA1);
    plug(a);
    advance(std::chrono::milliseconds(1600));
    const std::uint16_t lid = a.port.core().attributes().lid;
    ASSERT_NE(lid, 0);
    SaServer sa(SaServerConfig{}, *sw, [] { return std::vector<SaPort>{}; });
    FabricManagement m(*sw, *sm, sa);
    sa::McMemberQuery q;
    q.set_mgid(*parse_gid("ff12:401b:ffff::ffff:ffff"));
    auto mad = q.request(ib::method::get, 0x42);
    ASSERT_TRUE(mad.has_value());
    std::vector<std::uint8_t> payload(sa::kSaMadSize);
    mad->write_to(payload.data());
    const auto answer_pkey = limited_member_asks(m, a, payload, ib::kQp1, net);
    ASSERT_TRUE(answer_pkey.has_value()) << "the SA answered";
    EXPECT_EQ(*answer_pkey, 0xFFFF);
}

TEST_F(FabricTest, TheSwitchPmaAnswersLimitedMembersWithTheFullMemberPKey) {
    // perfquery from a limited member asks with its limited P_Key; the
    // switch's port 0 is a full member and answers as one, or the
    // requester's port would drop the answer (limited to limited).
    Ca a(net, 1, 0xA1);
    plug(a);
    const std::uint16_t lid = a.port.core().attributes().lid;
    ASSERT_NE(lid, 0);
    SaServer sa(SaServerConfig{}, *sw, [] { return std::vector<SaPort>{}; });
    FabricManagement m(*sw, *sm, sa);
    std::vector<std::uint8_t> payload(ib::kMadSize);
    ib::MadHeader h;
    h.mgmt_class = ib::mgmt_class::perf_mgt;
    h.class_version = transport::pma::kClassVersion;
    h.method = ib::method::get;
    h.attribute_id = transport::pma::attr::port_counters;
    h.transaction_id = 0x42;
    h.write_to(payload.data());
    payload[transport::pma::kDataOffset + 1] = 1;  // PortSelect
    const auto answer_pkey = limited_member_asks(m, a, payload, 0x77, net);
    ASSERT_TRUE(answer_pkey.has_value()) << "the PMA answered";
    EXPECT_EQ(*answer_pkey, 0xFFFF);
    EXPECT_EQ(m.pma_counters().responses, 1u);
}

TEST_F(FabricTest, PortZeroAnswersAGmpOfAClassItDoesNotServeClassNotSupported) {
    Ca a(net, 1, 0xA1);
    plug(a);
    ASSERT_NE(a.port.core().attributes().lid, 0);
    SaServer sa(SaServerConfig{}, *sw, [] { return std::vector<SaPort>{}; });
    FabricManagement m(*sw, *sm, sa);
    auto ask = [&](std::uint8_t method) -> std::optional<ib::MadHeader> {
        Wire payload(ib::kMadSize);
        ib::MadHeader h;
        h.mgmt_class = ib::mgmt_class::dev_mgt;
        h.class_version = 1;
        h.method = method;
        h.attribute_id = 0x0010;
        h.transaction_id = 0x4242;
        h.write_to(payload.data());
        const auto d = port_zero_answers(m, a, payload, 0x77, 0xFFFF, net);
        constexpr std::size_t mad_at = ib::Lrh::size + ib::Bth::size + ib::Deth::size;
        if (!d || d->size() < mad_at + ib::kMadSize) return std::nullopt;
        return ib::MadHeader::read_from(d->data() + mad_at);
    };
    const auto get = ask(ib::method::get);
    ASSERT_TRUE(get.has_value()) << "answered";
    EXPECT_EQ(get->mgmt_class, ib::mgmt_class::dev_mgt);
    EXPECT_EQ(get->method, ib::method::get_resp);
    EXPECT_EQ(get->status, ib::mad_status::bad_version);  // 0x0004: class not supported
    EXPECT_EQ(get->transaction_id, 0x4242u);
    EXPECT_FALSE(ask(ib::method::send).has_value()) << "a Send gets no answer";
    EXPECT_EQ(m.counters().class_not_supported_answers, 1u);
    EXPECT_EQ(m.counters().class_not_supported_dropped, 1u);
    EXPECT_EQ(m.counters().sa_malformed, 0u);
}

TEST_F(FabricTest, StaticLidFromConfig) {
    sm_config.static_lids[0xC3] = 0x0042;
    start_fabric();
    Ca c(net, 3, 0xC3);
    plug(c);
    EXPECT_EQ(c.port.core().attributes().lid, 0x42);
}

TEST_F(FabricTest, PKeyTablesFollowPartitions) {
    ASSERT_NO_FATAL_FAILURE(start_storage_partitions());
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

// The SM gives each switch port the P_Keys of the CA behind it and turns
// on partition enforcement both ways: a packet whose P_Key the ingress
// port lacks never enters, and none leaves by a port that lacks it (IBA
// 10.9.2); SMPs (VL15) pass regardless.
TEST_F(FabricTest, TheSwitchEnforcesPartitionsOnItsPorts) {
    ASSERT_NO_FATAL_FAILURE(start_storage_partitions());
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), c(net, 3, 0xC3);
    plug(a);
    plug(b);
    plug(c);
    EXPECT_TRUE(sw->port_info(3).partition_enforcement_inbound);
    EXPECT_TRUE(sw->port_info(3).partition_enforcement_outbound);
    auto send = [&](Ca& from, Ca& to, std::uint16_t pkey) {
        Wire payload(16, 0x5A);
        ib::PacketSpec spec;
        spec.lrh.dlid = to.port.core().attributes().lid;
        spec.lrh.slid = from.port.core().attributes().lid;
        spec.bth.opcode = ib::op::ud_send_only;
        spec.bth.pkey = pkey;
        spec.bth.dest_qp = 0x48;
        spec.ext.deth = {7, 0x49};
        spec.payload = payload;
        Wire wire(ib::packet_size(spec));
        ASSERT_TRUE(ib::build_packet(spec, wire));
        ASSERT_TRUE(from.port.core().transmit_raw(wire));
        run();
    };
    const auto drops = [&](SwitchDrop d) { return sw->counters().dropped_for(d); };
    // C is not in 0x8001: its packet with that P_Key stops at its own switch port.
    send(c, a, 0x8001);
    EXPECT_EQ(drops(SwitchDrop::pkey_inbound), 1u);
    EXPECT_EQ(sw->port_info(3).p_key_violations, 1);
    // A (full member) to C with 0x8001: C's switch port lacks it.
    send(a, c, 0x8001);
    EXPECT_EQ(drops(SwitchDrop::pkey_outbound), 1u);
    // A (full) to B (limited) in 0x8001, and anyone in the default partition: forwarded.
    // B (limited) to A with its own limited key: the switch passes it (the
    // membership bit is the receiving CA's business).
    const std::uint64_t forwarded = sw->counters().forwarded;
    send(a, b, 0x8001);
    send(b, a, 0x0001);
    send(c, a, 0xFFFF);
    EXPECT_EQ(sw->counters().forwarded, forwarded + 3);
    EXPECT_EQ(drops(SwitchDrop::pkey_inbound), 1u);
    EXPECT_EQ(drops(SwitchDrop::pkey_outbound), 1u);
    // The switch's PMA reports them as constraint errors of those ports.
    EXPECT_EQ(sw->pma_counters(3)->rcv_constraint_errors, 1u);
    EXPECT_EQ(sw->pma_counters(3)->xmit_constraint_errors, 1u);
    // The SMs' SMPs still reach every port: the sweeps keep them ACTIVE.
    advance(std::chrono::milliseconds(1200));
    EXPECT_EQ(sm->ports().at(3).phase, SmPortPhase::active);
}

// A UD packet as a port would write it, any field the test likes.
Wire ud_packet(std::uint16_t slid, std::uint16_t dlid, std::uint16_t pkey, std::uint32_t qpn, std::uint32_t qkey) {
    Wire payload(16, 0x5A);
    ib::PacketSpec spec;
    spec.lrh.dlid = dlid;
    spec.lrh.slid = slid;
    spec.bth.opcode = ib::op::ud_send_only;
    spec.bth.pkey = pkey;
    spec.bth.dest_qp = qpn;
    spec.ext.deth = {qkey, 0x49};
    spec.payload = payload;
    Wire wire(ib::packet_size(spec));
    EXPECT_TRUE(ib::build_packet(spec, wire));
    return wire;
}

// Only the fabric manages a port: a port the SM has not made ACTIVE (here
// one that ignores SMPs) sends and receives nothing but SMPs, and an ACTIVE
// port sends only with the LID the SM gave it.
TEST_F(FabricTest, OnlyActivePortsWithTheirOwnLidsPassData) {
    ASSERT_NO_FATAL_FAILURE(start_storage_partitions());
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    Ca x(net, 4, 0xEE);
    x.answers = false;
    plug(x);
    advance(std::chrono::milliseconds(200));
    ASSERT_NE(sm->ports().at(3).phase, SmPortPhase::active);
    const std::uint16_t lid_a = a.port.core().attributes().lid, lid_b = b.port.core().attributes().lid;
    auto qa = *a.port.core().create_ud_qp({.qkey = 7, .pkey_index = 1});  // 0x8001
    Wire buf(transport::kGrhSlotSize + 64);
    const transport::ReceiveBuffer rb[] = {{1, buf}, {2, buf}};
    qa->post_receive(rb);
    const auto drops = [&](SwitchDrop d) { return sw->counters().dropped_for(d); };
    // X, in INIT, with a made-up LID and a P_Key it does not hold.
    net.up.emplace_back(x.address, ud_packet(0x55, lid_a, 0x8001, qa->qpn(), 7));
    run();
    EXPECT_EQ(drops(SwitchDrop::port_not_active), 1u);
    // B, ACTIVE, writing A's LID as its source (to A itself, and to B's own QP).
    net.up.emplace_back(b.address, ud_packet(lid_a, lid_a, 0xFFFF, qa->qpn(), 7));
    net.up.emplace_back(b.address, ud_packet(lid_a, lid_b, 0xFFFF, 0x48, 7));
    run();
    EXPECT_EQ(drops(SwitchDrop::slid_not_port), 2u);
    transport::Completion wc[2];
    EXPECT_EQ(qa->poll(wc), 0u);
    // The real thing passes: A's own LID, a key it holds.
    std::uint64_t forwarded = sw->counters().forwarded;
    net.up.emplace_back(a.address, ud_packet(lid_a, lid_b, 0x8001, 0x48, 7));
    run();
    EXPECT_EQ(sw->counters().forwarded, forwarded + 1);
    // Nor does X receive data: of a group's copies, X's stops at its switch
    // port (SMPs still reach it: the SM keeps asking).
    sw->set_multicast_ports(0xC010, {1, 2, 3});
    forwarded = sw->counters().forwarded;
    net.up.emplace_back(a.address, ud_packet(lid_a, 0xC010, 0xFFFF, 0xFFFFFF, 7));
    run();
    EXPECT_EQ(sw->counters().forwarded, forwarded + 2);
    EXPECT_EQ(drops(SwitchDrop::port_not_active), 2u);
}

// A real HCA writes the membership bit its table gives; a soft port could
// write any. B and C are limited members of 0x8001: B claiming full
// membership would pass C's port (one side full, IBA 10.9.3), so the switch
// refuses it where B's table says limited.
TEST_F(FabricTest, ALimitedMemberCannotClaimFullMembership) {
    ASSERT_NO_FATAL_FAILURE(start_with_partitions(
        "Default=0x7fff, ipoib : ALL=full;\nstorage=0x8001 : 0xA1=full, 0xB2=limited, 0xC3=limited;"));
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), c(net, 3, 0xC3);
    plug(a);
    plug(b);
    plug(c);
    ASSERT_EQ(c.port.core().attributes().pkey_table.at(1), 0x0001);
    auto qc = *c.port.core().create_ud_qp({.qkey = 7, .pkey_index = 1});
    Wire buf(transport::kGrhSlotSize + 64);
    const transport::ReceiveBuffer rb[] = {{1, buf}};
    qc->post_receive(rb);
    const std::uint16_t lid_b = b.port.core().attributes().lid, lid_c = c.port.core().attributes().lid;
    ASSERT_TRUE(b.port.core().transmit_raw(ud_packet(lid_b, lid_c, 0x8001, qc->qpn(), 7)));
    run();
    transport::Completion wc[2];
    EXPECT_EQ(qc->poll(wc), 0u) << "limited B reached limited C by claiming full membership";
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::pkey_inbound), 1u);
    // With its own limited key, B's packet passes the switch, and C's port
    // refuses it (both limited).
    const std::uint64_t forwarded = sw->counters().forwarded;
    ASSERT_TRUE(b.port.core().transmit_raw(ud_packet(lid_b, lid_c, 0x0001, qc->qpn(), 7)));
    run();
    EXPECT_EQ(sw->counters().forwarded, forwarded + 1);
    EXPECT_EQ(qc->poll(wc), 0u);
    // A, a full member, reaches C.
    ASSERT_TRUE(a.port.core().transmit_raw(ud_packet(a.port.core().attributes().lid, lid_c, 0x8001, qc->qpn(), 7)));
    run();
    EXPECT_EQ(qc->poll(wc), 1u);
}

// The SA takes a request's SLID for the requester: B, writing A's LID,
// must not leave A's own broadcast group for it.
TEST_F(FabricTest, APortCannotActForAnotherInTheSa) {
    SaServer sa(SaServerConfig{}, *sw,
                [this] { return FabricManagement::sa_ports(*sm, 0xFE80000000000000ULL, sm_config.partitions); });
    FabricManagement m(*sw, *sm, sa);
    sw->set_management(&m);
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    sa.refresh_forwarding();
    const std::uint16_t lid_a = a.port.core().attributes().lid;
    const ib::Gid bcast = *parse_gid("ff12:401b:ffff::ffff:ffff");
    ib::Gid gid_a{};
    store_be64(gid_a.data(), 0xFE80000000000000ULL);
    store_be64(gid_a.data() + 8, 0xA1);
    auto sa_packet = [&](std::uint16_t slid, std::uint8_t method) {
        sa::McMemberQuery q;
        q.set_mgid(bcast).set_port_gid(gid_a).set_join_state(sa::join_state::full_member);
        auto mad = q.request(method, 0x77);
        EXPECT_TRUE(mad.has_value());
        std::vector<std::uint8_t> payload(sa::kSaMadSize);
        mad->write_to(payload.data());
        ib::PacketSpec spec;
        spec.lrh.dlid = sw->lid();
        spec.lrh.slid = slid;
        spec.bth.opcode = ib::op::ud_send_only;
        spec.bth.pkey = 0xFFFF;
        spec.bth.dest_qp = ib::kQp1;
        spec.ext.deth = {ib::kGsiQKey, ib::kQp1};
        spec.payload = payload;
        Wire wire(ib::packet_size(spec));
        EXPECT_TRUE(ib::build_packet(spec, wire));
        return wire;
    };
    net.up.emplace_back(a.address, sa_packet(lid_a, ib::method::set));  // A joins
    run();
    ASSERT_TRUE(sa.groups().at(bcast).members.contains(0xA1));
    net.up.emplace_back(b.address, sa_packet(lid_a, ib::method::del));  // B, as A
    run();
    EXPECT_TRUE(sa.groups().at(bcast).members.contains(0xA1)) << "B removed A's membership by writing A's SLID";
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::slid_not_port), 1u);
    sw->set_management(sm.get());
}

// The SM's TIDs are easy to guess: a response is taken only from the port
// its request went out of, or one port could answer for another (here A
// answering the NodeInfo Get of a slow port X with A's own GUID, which
// would make the SM drop A as moved).
TEST_F(FabricTest, TheSmTakesAResponseOnlyFromThePortItAsked) {
    Ca a(net, 1, 0xA1);
    plug(a);
    Ca x(net, 2, 0xEE);
    x.answers = false;  // its NodeInfo Get stays outstanding
    plug(x);
    const auto& sp = sm->ports().at(2);
    ASSERT_NE(sp.tid, 0u);
    ASSERT_EQ(sp.phase, SmPortPhase::node_info);
    ib::Smp smp;
    smp.mgmt_class = ib::mgmt_class::subn_lid_routed;
    smp.method = ib::method::get_resp;
    smp.attribute_id = ib::smp_attr::node_info;
    smp.transaction_id = sp.tid;
    ib::NodeInfo ni;
    ni.node_type = ib::node_type::channel_adapter;
    ni.num_ports = 1;
    ni.node_guid = ni.port_guid = 0xA1;
    ni.local_port_num = 1;
    (void)ib::put_attribute(ni, smp.data);
    std::array<std::uint8_t, ib::kMadSize> mad{};
    smp.write_to(mad.data());
    const auto unexpected = sm->counters().unexpected_responses;
    net.up.emplace_back(a.address, test::forged_packet(a.port.core().attributes().lid, sw->lid(), ib::kQp0, 0, mad));
    run();
    EXPECT_EQ(sm->counters().unexpected_responses, unexpected + 1);
    ASSERT_EQ(sm->ports().count(1), 1u);
    EXPECT_EQ(sm->ports().at(1).phase, SmPortPhase::active) << "A dropped for a NodeInfo another port was asked for";
    EXPECT_EQ(sm->ports().at(2).phase, SmPortPhase::node_info);
}

// A second port claiming the GUID of an ACTIVE port whose link is up (a
// cloned machine-id, or a port that lies) is refused, and the first keeps
// its LID and route; once the first goes, the GUID has moved and the second
// takes over: from another host and without a fabric key with a LID of its
// own (AGuidFromAnotherHostDoesNotTakeItsLidWithoutAFabricKey), with one
// with the first's LID.
TEST_F(FabricTest, ASecondPortWithAnActivePortsGuidWaitsUntilTheFirstGoes) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    const std::uint16_t lid_a = a.port.core().attributes().lid;
    Ca twin(net, 9, 0xA1);
    plug(twin);
    advance(std::chrono::milliseconds(1200));  // sweeps try the twin again
    EXPECT_GE(sm->counters().duplicate_guids, 2u);
    EXPECT_EQ(sw->unicast_route(lid_a), std::optional<std::uint8_t>(1));
    EXPECT_EQ(sm->ports().at(1).phase, SmPortPhase::active);
    EXPECT_EQ(sm->ports().at(3).phase, SmPortPhase::failed);
    EXPECT_NE(twin.port.core().attributes().state, PortState::active);
    // A goes silent: its link times out, and the twin is the GUID's port now.
    a.alive = false;
    a.answers = false;
    advance(std::chrono::milliseconds(2500));
    EXPECT_EQ(sm->ports().count(1), 0u);
    ASSERT_EQ(sm->ports().count(3), 1u);
    EXPECT_EQ(sm->ports().at(3).phase, SmPortPhase::active);
    EXPECT_NE(twin.port.core().attributes().lid, lid_a);
    EXPECT_FALSE(sw->unicast_route(lid_a).has_value());
    EXPECT_EQ(sw->unicast_route(twin.port.core().attributes().lid), std::optional<std::uint8_t>(3));
}

TEST_F(FabricTest, WithAFabricKeyTheSecondPortTakesOverWithTheFirstsLid) {
    sm_config.guids_move_hosts = true;
    start_fabric();
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    const std::uint16_t lid_a = a.port.core().attributes().lid;
    Ca twin(net, 9, 0xA1);
    plug(twin);
    a.alive = false;
    a.answers = false;
    advance(std::chrono::milliseconds(2500));
    ASSERT_EQ(sm->ports().count(3), 1u);
    EXPECT_EQ(sm->ports().at(3).phase, SmPortPhase::active);
    EXPECT_EQ(twin.port.core().attributes().lid, lid_a);
    EXPECT_EQ(sw->unicast_route(lid_a), std::optional<std::uint8_t>(3));
}

TEST_F(FabricTest, NewPartitionsReachActivePortsWithoutAReregister) {
    Ca a(net, 1, 0xA1), c(net, 3, 0xC3);
    plug(a);
    plug(c);
    advance(std::chrono::milliseconds(200));
    auto table = [](Ca& ca) {
        auto t = ca.port.core().attributes().pkey_table;
        std::erase(t, std::uint16_t{0});
        return t;
    };
    ASSERT_EQ(table(c), (std::vector<std::uint16_t>{0xFFFF}));
    const std::uint16_t lid_c = c.port.core().attributes().lid;
    std::vector<PortEvent> drained(16);
    c.port.core().poll_events(drained);  // what configuring it raised
    const auto configured = sm->counters().ports_configured;
    // ibfabricd's SIGHUP: C joins partition 0x8001; A's tables stay.
    auto parts = parse_partitions("Default=0x7fff, ipoib : ALL=full;\nP=0x8001, ipoib : 0xC3=full;", "p.conf");
    ASSERT_TRUE(parts.has_value());
    EXPECT_EQ(sm->set_partitions(*parts), 1u);
    advance(std::chrono::milliseconds(100));  // the next tick, not a sweep interval away
    EXPECT_EQ(table(c), (std::vector<std::uint16_t>{0xFFFF, 0x8001}));
    EXPECT_EQ(table(a), (std::vector<std::uint16_t>{0xFFFF}));
    std::vector<PortEvent> events(16);
    events.resize(c.port.core().poll_events(events));
    EXPECT_TRUE(has(events, PortEvent::pkey_change));
    EXPECT_FALSE(has(events, PortEvent::client_reregister));
    EXPECT_EQ(c.port.core().attributes().lid, lid_c);
    EXPECT_EQ(c.port.core().attributes().state, transport::PortState::active);
    EXPECT_EQ(sm->counters().ports_configured, configured);  // set in place, not configured again
    // Taken away again.
    ASSERT_TRUE((parts = parse_partitions("Default=0x7fff, ipoib : ALL=full;", "p.conf")).has_value());
    EXPECT_EQ(sm->set_partitions(*parts), 1u);
    advance(std::chrono::milliseconds(100));
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

// A port silent for 3 s (its link up: a stalled process) is given up, then
// found again by the sweeps once it answers: same LID, reprogrammed, asked
// to reregister, within a sweep interval (plus the SMPs' time) of answering.
TEST_F(FabricTest, APortThatStopsAnsweringComesBackWithItsLid) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    const std::uint16_t lid = a.port.core().attributes().lid;
    a.events();
    a.answers = false;
    advance(std::chrono::milliseconds(3000));
    ASSERT_EQ(sm->counters().ports_lost, 1u);
    EXPECT_FALSE(sw->unicast_route(lid).has_value());
    ASSERT_EQ(sm->ports().count(1), 1u);  // still known: sought at every sweep
    EXPECT_NE(sm->ports().at(1).phase, SmPortPhase::active);
    a.answers = true;
    advance(sm_config.sweep_interval + std::chrono::milliseconds(1000));
    EXPECT_EQ(sm->ports().at(1).phase, SmPortPhase::active);
    EXPECT_EQ(a.port.core().attributes().lid, lid);
    EXPECT_EQ(sw->unicast_route(lid), std::optional<std::uint8_t>(1));
    EXPECT_TRUE(has(a.events(), PortEvent::client_reregister));
    EXPECT_EQ(sm->counters().ports_lost, 1u);  // lost once, not at every failed sweep
    EXPECT_EQ(b.port.core().attributes().state, PortState::active);
}

TEST_F(FabricTest, SmRestartKeepsLidsAndAsksForReregistration) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(b);  // b first: LID 2
    plug(a);  // a: LID 3
    a.events();
    const std::uint64_t reregistrations = a.port.reregistrations();
    start_fabric();  // a new switch and SM; the ports keep their state
    plug(a);         // a now comes first, but keeps LID 3
    plug(b);
    EXPECT_EQ(a.port.core().attributes().lid, 3);
    EXPECT_EQ(b.port.core().attributes().lid, 2);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_TRUE(has(a.events(), PortEvent::client_reregister));
    // What a soft port's cut-through hints are checked against: they came
    // from the old SM's fabric and are forgotten.
    EXPECT_EQ(a.port.reregistrations(), reregistrations + 1);
    EXPECT_EQ(sw->unicast_route(3), std::optional<std::uint8_t>(1));
}

// A port keeps the LID it says it has, unless this SM gave that LID to
// another GUID: a port claiming the LID of one that is away would take the
// paths and traffic meant for it.
TEST_F(FabricTest, APortCannotClaimTheLidOfAnotherThatIsAway) {
    Ca a(net, 1, 0xA1), evil(net, 2, 0xE2);
    plug(a);
    plug(evil);
    const std::uint16_t lid_a = a.port.core().attributes().lid, lid_evil = evil.port.core().attributes().lid;
    a.alive = false;  // A goes away (a restart, say)
    a.answers = false;
    advance(std::chrono::milliseconds(1600));
    ASSERT_FALSE(sw->unicast_route(lid_a).has_value());
    // The evil port now says it has A's LID (its SMA is its own to set).
    claim_lid(evil, sw->lid(), lid_evil, lid_a);
    ASSERT_EQ(evil.port.core().attributes().lid, lid_a);
    advance(sm_config.sweep_interval + std::chrono::milliseconds(500));
    EXPECT_EQ(sm->ports().at(2).phase, SmPortPhase::active);
    EXPECT_EQ(evil.port.core().attributes().lid, lid_evil) << "given back its own";
    EXPECT_FALSE(sw->unicast_route(lid_a).has_value());
    EXPECT_EQ(sm->counters().lid_claims_refused, 1u);
    // A comes back to its LID.
    a.alive = a.answers = true;
    plug(a);
    EXPECT_EQ(a.port.core().attributes().lid, lid_a);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_TRUE(sw->unicast_route(lid_a).has_value());
}

// Without a fabric key a GUID is only what a datagram says (issue 44, item
// 8): a port that claims the GUID of one that is away, from another host,
// does not get that port's LID, even when it says it has it; the LID stays
// the GUID's on its own host, and the real port comes back to it. The same
// host on another UDP port (a restarted daemon) keeps the LID. With a
// fabric key (guids_move_hosts) a GUID may take its LID to another host.
TEST_F(FabricTest, AGuidFromAnotherHostDoesNotTakeItsLidWithoutAFabricKey) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    const std::uint16_t lid_a = a.port.core().attributes().lid;
    a.alive = false;
    a.answers = false;
    advance(std::chrono::milliseconds(1600));
    ASSERT_FALSE(sw->unicast_route(lid_a).has_value());
    // Another machine, A's GUID, and A's LID in its PortInfo.
    Ca impostor(net, 9, 0xA1);
    claim_lid(impostor, sw->lid(), ib::kLidPermissive, lid_a);
    ASSERT_EQ(impostor.port.core().attributes().lid, lid_a);
    plug(impostor);
    advance(sm_config.sweep_interval);
    ASSERT_EQ(impostor.port.core().attributes().state, PortState::active);
    const std::uint16_t lid_impostor = impostor.port.core().attributes().lid;
    EXPECT_NE(lid_impostor, lid_a);
    EXPECT_FALSE(sw->unicast_route(lid_a).has_value()) << "nothing routes A's LID to the impostor";
    EXPECT_EQ(sm->counters().lid_host_moves_refused, 1u);
    // The impostor goes; A comes back from its own host, to its LID.
    impostor.alive = impostor.answers = false;
    advance(std::chrono::milliseconds(1600));
    a.alive = a.answers = true;
    plug(a);
    advance(sm_config.sweep_interval);
    EXPECT_EQ(a.port.core().attributes().lid, lid_a);
    EXPECT_TRUE(sw->unicast_route(lid_a).has_value());
    // A restarted on its own host (another UDP port) keeps it too.
    a.alive = a.answers = false;
    advance(std::chrono::milliseconds(1600));
    a.address = *parse_socket_address("198.18.0.1:4001");
    a.alive = a.answers = true;
    plug(a);
    advance(sm_config.sweep_interval);
    EXPECT_EQ(a.port.core().attributes().lid, lid_a);
    EXPECT_EQ(sm->counters().lid_host_moves_refused, 1u);
}

TEST_F(FabricTest, WithAFabricKeyAGuidTakesItsLidToAnotherHost) {
    sm_config.guids_move_hosts = true;
    start_fabric();
    Ca a(net, 1, 0xA1);
    plug(a);
    const std::uint16_t lid_a = a.port.core().attributes().lid;
    a.alive = a.answers = false;
    advance(std::chrono::milliseconds(1600));
    a.address = *parse_socket_address("198.18.0.77:4000");  // the machine got another address
    a.alive = a.answers = true;
    plug(a);
    advance(sm_config.sweep_interval);
    EXPECT_EQ(a.port.core().attributes().lid, lid_a);
    EXPECT_EQ(sm->counters().lid_host_moves_refused, 0u);
}

// The SM remembers the LID it gave each GUID, so that a port away for a
// while comes back to it, but not at the price of the LID space: with
// every LID held or given, a new port gets the LID of the GUID away
// longest. A host cycling GUIDs would otherwise run the subnet out of LIDs
// for good (and a full subnet's search for a free LID must not cost LIDs
// times ports: 49,148 configured LIDs below).
TEST_F(FabricTest, WithEveryLidGivenANewPortGetsTheOneOfTheGuidAwayLongest) {
    for (std::uint32_t lid = 2; lid <= 0xBFFD; ++lid) sm_config.static_lids[0x5000'0000 + lid] = static_cast<std::uint16_t>(lid);
    start_fabric();
    std::vector<std::string> lines;
    sm = std::make_unique<SubnetManager>(sm_config, *sw, [&](const std::string& l) { lines.push_back(l); });
    sw->set_management(sm.get());
    const auto away = [&](Ca& ca) {  // the process is gone: its link times out
        const auto lost = sm->counters().ports_lost;
        ca.alive = ca.answers = false;
        advance(std::chrono::milliseconds(1600));
        ASSERT_EQ(sm->counters().ports_lost, lost + 1);
    };
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), c(net, 3, 0xC3), d(net, 4, 0xD4);
    b.alive = c.alive = d.alive = false;  // each plugs in when its turn comes
    plug(a);
    ASSERT_EQ(a.port.core().attributes().lid, 0xBFFE);
    away(a);
    b.alive = true;
    plug(b);
    ASSERT_EQ(b.port.core().attributes().lid, 0xBFFF);
    away(b);
    EXPECT_EQ(sm->counters().lids_reclaimed, 0u);
    // C finds nothing free: A has been away longest.
    c.alive = true;
    plug(c);
    EXPECT_EQ(c.port.core().attributes().state, PortState::active);
    EXPECT_EQ(c.port.core().attributes().lid, 0xBFFE);
    EXPECT_EQ(sm->counters().lids_reclaimed, 1u);
    // A comes back (still saying 0xBFFE, now C's): it gets B's.
    a.alive = a.answers = true;
    plug(a);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_EQ(a.port.core().attributes().lid, 0xBFFF);
    EXPECT_EQ(sm->counters().lids_reclaimed, 2u);
    EXPECT_TRUE(sw->unicast_route(0xBFFE).has_value());
    EXPECT_TRUE(sw->unicast_route(0xBFFF).has_value());
    // No GUID is away now: a fourth port gets no LID (none is taken from a
    // port that is here), is tried again at every sweep, and logged once.
    d.alive = true;
    plug(d);
    EXPECT_NE(d.port.core().attributes().state, PortState::active);
    advance(4 * sm_config.sweep_interval);
    EXPECT_GE(sm->counters().no_lid, 3u);
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string& l) { return l.find("no free LID for port GUID 0x00000000000000d4") != l.npos; }),
              1);
    EXPECT_EQ(c.port.core().attributes().lid, 0xBFFE);
    EXPECT_EQ(a.port.core().attributes().lid, 0xBFFF);
    EXPECT_EQ(sm->counters().lids_reclaimed, 2u);
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

// ---------------------------------------------------------------------------
// Admission: one sender cannot take the switch's port table.

SocketAddress host_port(int host, int port) {
    return *parse_socket_address("198.18.1." + std::to_string(host) + ":" + std::to_string(port));
}

struct AdmissionTest : FabricTest {
    void SetUp() override {
        net.now = &now;
        sw = std::make_unique<Switch>(Switch::Config{.lid = 1,
                                                     .num_ports = 8,
                                                     .link_timeout = std::chrono::milliseconds(1000),
                                                     .admission_burst = 4,
                                                     .admission_rate = 1.0,
                                                     .max_pending_per_host = 3,
                                                     .reclaim_after = std::chrono::milliseconds(5000)},
                                       net);
        sm_config.sweep_interval = std::chrono::milliseconds(500);
        sm = std::make_unique<SubnetManager>(sm_config, *sw);
        sw->set_management(sm.get());
    }
    // A sender that only sends link packets (it never answers an SMP).
    std::vector<SocketAddress> squatters;
    void squat(int host, int first, int count) {
        for (int i = 0; i < count; ++i) squatters.push_back(host_port(host, first + i));
    }
    void keep_squatting() {
        for (const auto& s : squatters) sw->on_datagram(s, link_packet(), now);
        net.down.clear();
        net.up.clear();
        LinkEvent le[8];
        for (std::size_t n = sw->poll_link_events(le), i = 0; i < n; ++i) sm->on_link_event(le[i], now);
    }
    std::size_t plugged() const {
        std::size_t n = 0;
        for (std::uint8_t p = 1; p <= 8; ++p) n += sw->port_up(p);
        return n;
    }
};

TEST_F(AdmissionTest, OneHostGetsAtMostItsPendingPortsAndRealHostsStillComeUp) {
    squat(50, 5000, 200);
    for (int i = 0; i < 10; ++i) {
        keep_squatting();
        now += std::chrono::milliseconds(300);
    }
    EXPECT_EQ(plugged(), 3u);  // max_pending_per_host
    EXPECT_GT(sw->counters().dropped_for(SwitchDrop::admission_pending), 0u);
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_EQ(b.port.core().attributes().state, PortState::active);
}

TEST_F(AdmissionTest, NewPortsFromOneHostAreRateLimited) {
    // ACTIVE ports do not count as pending: only the rate holds them back.
    std::vector<std::unique_ptr<Ca>> cas;
    for (int i = 0; i < 6; ++i) cas.push_back(std::make_unique<Ca>(net, 10, 0xC0 + static_cast<std::uint64_t>(i)));
    for (int i = 0; i < 6; ++i) cas[static_cast<std::size_t>(i)]->address = host_port(9, 6000 + i);
    for (auto& ca : cas) plug(*ca);
    std::size_t active = 0;
    for (auto& ca : cas) active += ca->port.core().attributes().state == PortState::active;
    EXPECT_EQ(active, 4u);  // the burst
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::admission_rate), 2u);
    advance(std::chrono::milliseconds(2100));  // two more tokens; the CAs keep sending link packets
    active = 0;
    for (auto& ca : cas) active += ca->port.core().attributes().state == PortState::active;
    EXPECT_EQ(active, 6u);
}

TEST_F(AdmissionTest, AFullTableReclaimsPortsThatNeverBecameActiveNotActiveOnes) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    squat(60, 5000, 3);
    squat(61, 5000, 3);
    keep_squatting();
    ASSERT_EQ(plugged(), 8u);
    Ca c(net, 3, 0xC3);
    plug(c);
    EXPECT_NE(c.port.core().attributes().state, PortState::active);
    EXPECT_GT(sw->counters().dropped_for(SwitchDrop::ports_full), 0u);
    // The squatters had reclaim_after to become ACTIVE and did not.
    for (int i = 0; i < 60; ++i) {
        now += std::chrono::milliseconds(100);
        keep_squatting();
        for (Ca* ca : {&a, &b, &c}) net.up.emplace_back(ca->address, link_packet());
        run();
        sw->tick(now);
        LinkEvent le[8];
        for (std::size_t n = sw->poll_link_events(le), k = 0; k < n; ++k) sm->on_link_event(le[k], now);
        sm->tick(now);
        run();
    }
    EXPECT_EQ(c.port.core().attributes().state, PortState::active);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_EQ(b.port.core().attributes().state, PortState::active);
    EXPECT_GE(sw->counters().ports_reclaimed, 1u);
}

// FabricService on loopback: no namespace, no root.
FabricServiceOptions loopback_options() {
    FabricServiceOptions o;
    o.listen = *parse_socket_address("127.0.0.1:0");
    o.sw.num_ports = 8;
    return o;
}

TEST(FabricService, OpensOnLoopbackAndReportsTheSwitch) {
    auto fabric = FabricService::open(loopback_options());
    ASSERT_TRUE(fabric) << fabric.error();
    EXPECT_GE((*fabric)->fd(), 0);
    EXPECT_NE((*fabric)->local_address().port(), 0);
    const std::string stats = (*fabric)->stats();
    EXPECT_NE(stats.find("switch: lid 0x0001 forwarded 0 "), std::string::npos) << stats;
    EXPECT_NE(stats.find("\nudp: rx 0 "), std::string::npos) << stats;
    EXPECT_NE(stats.find("\nsm: smps 0 "), std::string::npos) << stats;
    EXPECT_NE(stats.find("\nsa: requests 0 "), std::string::npos) << stats;
    EXPECT_NE(stats.find("(partition broadcast group)\n"), std::string::npos) << stats;
    EXPECT_EQ(stats.back(), '\n');
}

TEST(FabricService, OpenErrorsNameWhatFailed) {
    auto bad_pcap = loopback_options();
    bad_pcap.pcap = "/nonexistent-dir/x.pcap";
    auto a = FabricService::open(bad_pcap);
    ASSERT_FALSE(a);
    EXPECT_EQ(a.error().rfind("could not open capture file /nonexistent-dir/x.pcap: ", 0), 0u) << a.error();

    auto first = FabricService::open(loopback_options());
    ASSERT_TRUE(first) << first.error();
    auto taken = loopback_options();
    taken.listen = (*first)->local_address();
    auto b = FabricService::open(taken);
    ASSERT_FALSE(b);
    EXPECT_EQ(b.error(), "could not bind UDP socket to " + taken.listen.to_string() + ": Address already in use");

    auto no_ports = loopback_options();
    no_ports.sw.num_ports = 0;
    auto c = FabricService::open(no_ports);
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error(), "switch ports 0: must be 1..254");

    auto roce = loopback_options();
    roce.listen = *parse_socket_address("127.0.0.1:4791");
    auto d = FabricService::open(roce);
    ASSERT_FALSE(d);
    EXPECT_NE(d.error().find("4791 is RoCEv2's"), std::string::npos) << d.error();

    auto same_lid = loopback_options();
    same_lid.sm.static_lids = {{0xA1, 0x20}, {0xB2, 0x20}};
    auto e = FabricService::open(same_lid);
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error(), "fixed LID 0x0020 of GUID 0x00000000000000b2: also fixed for GUID 0x00000000000000a1");
    auto switch_lid = loopback_options();
    switch_lid.sm.static_lids = {{0xA1, switch_lid.sw.lid}};
    auto f = FabricService::open(switch_lid);
    ASSERT_FALSE(f);
    EXPECT_EQ(f.error(), "fixed LID 0x0001 of GUID 0x00000000000000a1: the switch's LID");
    auto multicast = loopback_options();
    multicast.sm.static_lids = {{0xA1, 0xC000}};
    auto g = FabricService::open(multicast);
    ASSERT_FALSE(g);
    EXPECT_EQ(g.error(), "fixed LID 0xc000 of GUID 0x00000000000000a1: not a unicast LID (0x1..0xbfff)");
}

// The owner's contract from fabric_service.h, with a soft port as the peer:
// the port comes up ACTIVE with the LID the SM gives it, the SM's log and
// the capture file see it.
TEST(FabricService, SoftPortBecomesActiveThroughTheService) {
    const auto pcap = std::filesystem::path(::testing::TempDir()) /
                      ("fabric_service_" + std::to_string(::getpid()) + ".pcap");
    auto options = loopback_options();
    options.pcap = pcap.string();
    options.sm.static_lids[0x1234] = 0x0042;
    std::vector<std::string> log;
    options.log = [&](const std::string& line) { log.push_back(line); };
    auto opened = FabricService::open(std::move(options));
    ASSERT_TRUE(opened) << opened.error();
    FabricService& fabric = **opened;

    auto port = transport::SoftPort::open({.fabric = fabric.local_address(),
                                           .bind_to = *parse_socket_address("127.0.0.1:0"),
                                           .port_guid = 0x1234,
                                           .node_description = "fabric service test",
                                           .link_interval = std::chrono::milliseconds(10),
                                           .link_timeout_intervals = kTestLinkTimeoutIntervals});
    ASSERT_TRUE(port) << port.error().message();

    // The port is ACTIVE when it takes the last Set PortInfo; the SM when
    // the response comes back.
    const auto configured = [&] {
        const auto& ports = fabric.subnet_manager().ports();
        return (*port)->attributes().state == PortState::active && ports.contains(1) &&
               ports.at(1).phase == SmPortPhase::active;
    };
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    auto next_tick = Clock::now();
    while (!configured() && Clock::now() < give_up) {
        pollfd fds[2] = {{.fd = fabric.fd(), .events = POLLIN}, {.fd = (*port)->fd(), .events = POLLIN}};
        ASSERT_GE(::poll(fds, 2, 10), 0);
        const auto now = Clock::now();
        if (fds[0].revents & POLLIN) fabric.on_readable(now);
        if (now >= next_tick) {
            fabric.tick(now);
            next_tick = now + FabricService::kTickInterval;
        }
        fabric.after_wakeup(now);
        (*port)->process();
    }
    ASSERT_EQ((*port)->attributes().state, PortState::active) << fabric.stats();
    EXPECT_EQ((*port)->attributes().lid, 0x0042);
    EXPECT_EQ((*port)->attributes().sm_lid, 0x0001);

    const auto& ports = fabric.subnet_manager().ports();
    ASSERT_EQ(ports.size(), 1u);
    EXPECT_EQ(ports.begin()->second.phase, SmPortPhase::active);
    EXPECT_GE(fabric.udp_counters().rx_datagrams, 1u);
    EXPECT_NE(fabric.stats().find("port 1: active lid 0x0042 guid 0x0000000000001234 peer 127.0.0.1:"),
              std::string::npos)
        << fabric.stats();
    ASSERT_FALSE(log.empty());
    EXPECT_NE(log.back().find("ACTIVE with LID 0x0042"), std::string::npos) << log.back();

    fabric.flush();
    EXPECT_GT(std::filesystem::file_size(pcap), 24u);  // the pcap header and some records
    std::filesystem::remove(pcap);
}


// --sm=no: no SM and no SA in the fabric. A port plugs in and stays INIT
// with no LID; the switch has no LID and its SMA still answers by directed
// route (an external SM's way in); an SA request reaches no agent.
TEST(FabricService, WithoutItsSmThePortsWaitForAnExternalOne) {
    auto options = loopback_options();
    options.sm_enabled = false;
    auto opened = FabricService::open(std::move(options));
    ASSERT_TRUE(opened) << opened.error();
    FabricService& fabric = **opened;
    EXPECT_EQ(fabric.fabric_switch().lid(), 0);
    auto port = transport::SoftPort::open({.fabric = fabric.local_address(),
                                           .bind_to = *parse_socket_address("127.0.0.1:0"),
                                           .port_guid = 0x4321,
                                           .node_description = "no SM",
                                           .link_interval = std::chrono::milliseconds(10),
                                           .link_timeout_intervals = kTestLinkTimeoutIntervals});
    ASSERT_TRUE(port) << port.error().message();
    std::vector<ib::Smp> got;
    (*port)->managed().set_smp_intercept([&](const ib::Packet& p) {
        auto smp = ib::decode_smp(p.payload);
        if (!smp || !(smp->method & ib::method::response_bit)) return false;
        got.push_back(*smp);
        return true;
    });
    auto pump = [&](std::chrono::milliseconds how_long, const std::function<bool()>& done) {
        const auto until = Clock::now() + how_long;
        auto next_tick = Clock::now();
        while (Clock::now() < until && !done()) {
            pollfd fds[2] = {{.fd = fabric.fd(), .events = POLLIN}, {.fd = (*port)->fd(), .events = POLLIN}};
            ASSERT_GE(::poll(fds, 2, 10), 0);
            const auto now = Clock::now();
            if (fds[0].revents & POLLIN) fabric.on_readable(now);
            if (now >= next_tick) {
                fabric.tick(now);
                next_tick = now + FabricService::kTickInterval;
            }
            fabric.after_wakeup(now);
            (*port)->process();
        }
    };
    pump(std::chrono::milliseconds(600), [] { return false; });
    EXPECT_EQ((*port)->attributes().state, PortState::init);
    EXPECT_EQ((*port)->attributes().lid, 0);
    EXPECT_EQ(fabric.subnet_manager().counters().smps_sent, 0u);
    EXPECT_EQ(fabric.subnet_manager().counters().switch_smps, 0u);
    // A directed-route Get NodeInfo out of the port reaches the switch's SMA.
    ib::Smp q;
    q.mgmt_class = ib::mgmt_class::subn_directed_route;
    q.method = ib::method::get;
    q.attribute_id = ib::smp_attr::node_info;
    q.transaction_id = 0x99;
    const std::uint8_t path[] = {1};
    ASSERT_TRUE(ib::dr_set_initial_path(q, path));
    ASSERT_EQ(ib::dr_send_request(q, 1).action, ib::DrAction::send_on_port);
    std::array<std::uint8_t, ib::kMadSize> mad{};
    q.write_to(mad.data());
    std::array<std::uint8_t, ib::kQp0PacketSize> out{};
    const auto n = ib::build_qp0_packet(mad, ib::kLidPermissive, ib::kLidPermissive, out);
    ASSERT_TRUE((*port)->send_raw(bytes(out).first(*n)));
    pump(std::chrono::seconds(5), [&] { return !got.empty(); });
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(ib::NodeInfo::read_from(got[0].data.data()).node_type, ib::node_type::switch_node);
    EXPECT_EQ(fabric.fabric_switch().counters().sma_responses, 1u);
}

// ---------------------------------------------------------------------------
// Cut-through route hints (transport/soft/route_hint.h).

TEST(RouteHint, RoundTripsAndRefusesWhatIsNotOne) {
    transport::RouteHint h;
    h.dlid = 0x0042;
    h.ttl_ms = 2000;
    h.peer = *parse_socket_address("198.18.100.2:40000");
    std::array<std::uint8_t, transport::RouteHint::size> buf;
    ASSERT_TRUE(transport::encode_route_hint(h, buf));
    EXPECT_TRUE(transport::is_soft_control(buf));
    auto back = transport::decode_route_hint(buf);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->dlid, 0x42);
    EXPECT_EQ(back->ttl_ms, 2000);
    EXPECT_EQ(back->peer, h.peer);

    h.peer = *parse_socket_address("[2001:db8::2]:40001");
    ASSERT_TRUE(transport::encode_route_hint(h, buf));
    back = transport::decode_route_hint(buf);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->peer, h.peer);

    auto bad = buf;
    bad[4] = 1;  // version 1: no nonce
    EXPECT_FALSE(transport::decode_route_hint(bad));
    bad = buf;
    bad[11] = 1;  // reserved
    EXPECT_FALSE(transport::decode_route_hint(bad));
    bad = buf;
    store_be16(bad.data() + 12, 0);  // UDP port 0
    EXPECT_FALSE(transport::decode_route_hint(bad));
    bad = buf;
    bad[10] = 5;  // family
    EXPECT_FALSE(transport::decode_route_hint(bad));
    bad = buf;
    store_be16(bad.data() + 6, 0xC001);  // a multicast DLID
    EXPECT_FALSE(transport::decode_route_hint(bad));
    EXPECT_FALSE(transport::decode_route_hint(bytes(buf).first(37)));
    EXPECT_FALSE(transport::decode_peer_permit(buf));  // a hint is not a permit
    EXPECT_FALSE(transport::is_soft_control(link_packet()));
}

std::size_t hints_to(const Net& net, const SocketAddress& to) {
    std::size_t n = 0;
    for (const auto& [peer, d] : net.down) n += peer == to && transport::is_soft_control(d);
    return n;
}

TEST_F(FabricTest, ForwardedUnicastEarnsTheSenderARouteHint) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    const std::uint16_t lid_b = b.port.core().attributes().lid;
    auto qa = *a.port.core().create_ud_qp({.qkey = 7});
    Wire payload(10, 0x42);
    transport::SendRequest r{.wr_id = 1, .ah = {.dlid = lid_b}, .remote_qpn = 0x99, .remote_qkey = 7, .payload = payload};
    auto send_once = [&] {
        ASSERT_EQ(*qa->post_send({&r, 1}), 1u);
        auto [from, d] = std::move(net.up.back());
        net.up.pop_back();
        net.down.clear();
        sw->on_datagram(from, d, now);
    };
    send_once();
    ASSERT_EQ(hints_to(net, a.address), 1u);
    for (const auto& [peer, d] : net.down)
        if (transport::is_soft_control(d)) {
            const auto h = transport::decode_route_hint(d);
            ASSERT_TRUE(h);
            EXPECT_EQ(h->dlid, lid_b);
            EXPECT_EQ(h->peer, b.address);
            EXPECT_EQ(h->ttl_ms, 2000);
            EXPECT_EQ(h->nonce, 0u);  // unsolicited: names no route a port may take
        }
    // Within half the TTL no second hint; after it, one again.
    now += std::chrono::milliseconds(500);
    send_once();
    EXPECT_EQ(hints_to(net, a.address), 0u);
    now += std::chrono::milliseconds(600);
    send_once();
    EXPECT_EQ(hints_to(net, a.address), 1u);
    EXPECT_EQ(sw->counters().route_hints, 2u);
    // A capturing switch sends none: every packet must pass it.
    sw->set_tap([](bytes, bool) {});
    now += std::chrono::milliseconds(2000);
    send_once();
    EXPECT_EQ(hints_to(net, a.address), 0u);
}

// A switch that injects faults sends no hints either: every packet must
// meet the faults.
TEST_F(FabricTest, AFaultySwitchSendsNoRouteHints) {
    sm.reset();
    sw = std::make_unique<Switch>(
        Switch::Config{.lid = 1, .num_ports = 8, .faults = {*parse_fault_rule("port=7,loss=1%")}}, net);
    sm = std::make_unique<SubnetManager>(sm_config, *sw);
    sw->set_management(sm.get());
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    auto qa = *a.port.core().create_ud_qp({.qkey = 7});
    Wire payload(10, 0x42);
    transport::SendRequest r{.wr_id = 1, .ah = {.dlid = b.port.core().attributes().lid}, .remote_qpn = 0x99,
                             .remote_qkey = 7, .payload = payload};
    ASSERT_EQ(*qa->post_send({&r, 1}), 1u);
    net.down.clear();
    auto [from, d] = std::move(net.up.back());
    net.up.pop_back();
    sw->on_datagram(from, d, now);
    EXPECT_EQ(hints_to(net, a.address), 0u);
    EXPECT_EQ(sw->counters().route_hints, 0u);
}

TEST(RouteHint, RequestsRoundTripWithTheirNonce) {
    transport::SoftControlBuffer buf;
    transport::encode_route_request({.dlid = 0x0042, .nonce = 0x1122334455667788}, buf);
    EXPECT_TRUE(transport::is_soft_control(buf));
    const auto r = transport::decode_route_request(buf);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->dlid, 0x42);
    EXPECT_EQ(r->nonce, 0x1122334455667788u);
    EXPECT_FALSE(transport::decode_route_hint(buf));  // a request is not a hint
    transport::encode_route_request({.dlid = 0xC000, .nonce = 1}, buf);
    EXPECT_FALSE(transport::decode_route_request(buf));  // multicast DLID
    transport::encode_route_request({.dlid = 0x0042, .nonce = 0}, buf);
    EXPECT_FALSE(transport::decode_route_request(buf));  // a request must carry a nonce
}

TEST(RouteHint, NonceRoundTrips) {
    transport::RouteHint h;
    h.dlid = 0x0042;
    h.ttl_ms = 2000;
    h.peer = *parse_socket_address("198.18.100.2:40000");
    h.nonce = 0xFEDCBA9876543210;
    transport::SoftControlBuffer buf;
    ASSERT_TRUE(transport::encode_route_hint(h, buf));
    EXPECT_EQ(load_be64(buf.data() + 30), 0xFEDCBA9876543210u);
    const auto back = transport::decode_route_hint(buf);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->nonce, 0xFEDCBA9876543210u);
}

TEST(RouteHint, PermitsRoundTripAndRefuseWhatIsNotOne) {
    transport::PeerPermit p{.ttl_ms = 4000, .peer = *parse_socket_address("[2001:db8::7]:4711"), .lid = 0x0040,
                            .lmc = 2, .first = true, .any_pkey = false, .pkeys = {0xFFFF, 0x0001, 0, 0}};
    transport::SoftControlBuffer buf;
    ASSERT_TRUE(transport::encode_peer_permit(p, buf));
    EXPECT_EQ(buf[4], 3);  // version 3: a permit names LIDs and P_Keys
    EXPECT_EQ(buf[11], 0x42);
    EXPECT_EQ(load_be16(buf.data() + 30), 0xFFFF);
    auto back = transport::decode_peer_permit(buf);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->ttl_ms, 4000);
    EXPECT_EQ(back->peer, p.peer);
    EXPECT_EQ(back->lid, 0x0040);
    EXPECT_EQ(back->lmc, 2);
    EXPECT_TRUE(back->first);
    EXPECT_FALSE(back->any_pkey);
    EXPECT_EQ(back->pkeys, p.pkeys);
    EXPECT_FALSE(transport::decode_route_hint(buf));
    EXPECT_FALSE(transport::decode_route_request(buf));
    // Any P_Key, a later one of a set, and a withdrawal (TTL 0, the peer alone).
    ASSERT_TRUE(transport::encode_peer_permit({.ttl_ms = 10, .peer = p.peer, .lid = 9, .first = false, .any_pkey = true}, buf));
    back = transport::decode_peer_permit(buf);
    ASSERT_TRUE(back);
    EXPECT_TRUE(back->any_pkey);
    EXPECT_FALSE(back->first);
    ASSERT_TRUE(transport::encode_peer_permit({.ttl_ms = 0, .peer = p.peer, .first = false}, buf));
    back = transport::decode_peer_permit(buf);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->ttl_ms, 0);
    EXPECT_EQ(back->peer, p.peer);
    // Refused: what grants nothing or to no LID, or is not version 3.
    const std::vector<std::pair<const char*, transport::PeerPermit>> bad_permits = {
        {"no P_Key", {.ttl_ms = 10, .peer = p.peer, .lid = 9}},
        {"only invalid P_Keys", {.ttl_ms = 10, .peer = p.peer, .lid = 9, .pkeys = {0x8000, 0, 0, 0}}},
        {"any P_Key and some", {.ttl_ms = 10, .peer = p.peer, .lid = 9, .any_pkey = true, .pkeys = {0xFFFF, 0, 0, 0}}},
        {"no LID", {.ttl_ms = 10, .peer = p.peer, .lid = 0, .any_pkey = true}},
        {"a multicast LID", {.ttl_ms = 10, .peer = p.peer, .lid = 0xC001, .any_pkey = true}},
        {"a base LID not aligned to its LMC", {.ttl_ms = 10, .peer = p.peer, .lid = 0x41, .lmc = 1, .any_pkey = true}},
        {"a withdrawal naming a LID", {.ttl_ms = 0, .peer = p.peer, .lid = 9, .first = false}},
        {"a withdrawal naming P_Keys", {.ttl_ms = 0, .peer = p.peer, .first = false, .pkeys = {0xFFFF, 0, 0, 0}}},
        {"a withdrawal with flags", {.ttl_ms = 0, .peer = p.peer, .first = true}},
    };
    for (const auto& [what, permit] : bad_permits) {
        ASSERT_TRUE(transport::encode_peer_permit(permit, buf)) << what;
        EXPECT_FALSE(transport::decode_peer_permit(buf)) << what;
    }
    ASSERT_TRUE(transport::encode_peer_permit(p, buf));
    auto bad = buf;
    bad[11] |= 0x08;  // a flag no version gives
    EXPECT_FALSE(transport::decode_peer_permit(bad));
    bad = buf;
    bad[4] = 2;  // the version before permits named LIDs and P_Keys
    EXPECT_FALSE(transport::decode_peer_permit(bad));
    // What a P_Key of a permit allows: the same partition, no fuller membership.
    EXPECT_TRUE(transport::permit_allows_pkey(0xFFFF, 0xFFFF));
    EXPECT_TRUE(transport::permit_allows_pkey(0xFFFF, 0x7FFF));
    EXPECT_TRUE(transport::permit_allows_pkey(0x0001, 0x0001));
    EXPECT_FALSE(transport::permit_allows_pkey(0x0001, 0x8001));
    EXPECT_FALSE(transport::permit_allows_pkey(0x8001, 0x8002));
    EXPECT_FALSE(transport::permit_allows_pkey(0x8000, 0x8000));
}

TEST_F(FabricTest, RouteRequestRenewsTheHintWithoutData) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    const std::uint16_t lid_b = b.port.core().attributes().lid;
    transport::SoftControlBuffer req;
    transport::encode_route_request({.dlid = lid_b, .nonce = 9}, req);
    net.down.clear();
    sw->on_datagram(a.address, req, now);
    ASSERT_EQ(hints_to(net, a.address), 1u);
    // The answer echoes the request's nonce (the only hint a port takes,
    // route_hint.h); and B, the destination, is told that A may send to it
    // for twice the hint's TTL, before A hears of the route.
    ASSERT_EQ(net.down.size(), 2u);
    EXPECT_EQ(net.down[0].first, b.address);
    const auto permit = transport::decode_peer_permit(net.down[0].second);
    ASSERT_TRUE(permit);
    EXPECT_EQ(permit->peer, a.address);
    EXPECT_EQ(permit->ttl_ms, 4000);
    // What B may take from A: A's LID, the P_Keys they share.
    EXPECT_EQ(permit->lid, a.port.core().attributes().lid);
    EXPECT_EQ(permit->lmc, 0);
    EXPECT_TRUE(permit->first);
    EXPECT_FALSE(permit->any_pkey);
    EXPECT_EQ(permit->pkeys, (std::array<std::uint16_t, 4>{0xFFFF, 0, 0, 0}));
    EXPECT_EQ(net.down[1].first, a.address);
    EXPECT_EQ(transport::decode_route_hint(net.down[1].second)->nonce, 9u);
    EXPECT_EQ(sw->counters().permits, 1u);
    // A request for a LID with no route is dropped and counted.
    net.down.clear();
    transport::encode_route_request({.dlid = 0x0999, .nonce = 1}, req);
    const auto before = sw->counters().dropped_for(SwitchDrop::bad_route_request);
    sw->on_datagram(a.address, req, now);
    EXPECT_EQ(hints_to(net, a.address), 0u);
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::bad_route_request), before + 1);
}

// A direct path skips the switch's checks, so the switch grants one only
// between ACTIVE ports that share a partition (and the permit says what the
// destination may take from the requester).
TEST_F(FabricTest, RouteRequestsAreRefusedBetweenPortsThatShareNoPartition) {
    ASSERT_NO_FATAL_FAILURE(start_with_partitions("Default=0x7fff : 0xA1=full;\nother=0x8002 : 0xC3=full, 0xB2=full;"));
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), c(net, 3, 0xC3);
    plug(a);
    plug(b);
    plug(c);
    Ca x(net, 4, 0xEE);
    x.answers = false;  // stays in INIT
    plug(x);
    const std::uint16_t lid_a = a.port.core().attributes().lid, lid_b = b.port.core().attributes().lid;
    const auto permits_for = [&](const SocketAddress& from, std::uint16_t dlid) {
        transport::SoftControlBuffer req;
        transport::encode_route_request({.dlid = dlid, .nonce = 9}, req);
        net.down.clear();
        sw->on_datagram(from, req, now);
        std::size_t n = 0;
        for (const auto& [to, d] : net.down)
            if (const auto p = transport::decode_peer_permit(d); p && p->peer == from) ++n;
        return n;
    };
    const auto refused = [&] { return sw->counters().dropped_for(SwitchDrop::route_refused); };
    EXPECT_EQ(permits_for(c.address, lid_a), 0u) << "A and C share no partition";
    EXPECT_EQ(refused(), 1u);
    EXPECT_EQ(permits_for(x.address, lid_a), 0u) << "X is not ACTIVE";
    EXPECT_EQ(refused(), 2u);
    EXPECT_EQ(permits_for(c.address, lid_b), 1u) << "B and C share 0x8002";
    EXPECT_EQ(refused(), 2u);
}

// The permits name the P_Keys the two ports share, with the requester's
// membership; more than four take more permits, the first replacing. When
// the requester's partitions change, the switch takes its routes and
// permits back, and the next request gets what holds then.
TEST_F(FabricTest, PermitsNameTheSharedPartitionsAndAreWithdrawnWhenTheyChange) {
    ASSERT_NO_FATAL_FAILURE(start_with_partitions(
        "Default=0x7fff : ALL=full;\np1=0x0011 : 0xA1=limited, 0xB2=full;\np2=0x0012 : ALL=full;\n"
        "p3=0x0013 : ALL=full;\np4=0x0014 : ALL=full;\np5=0x0015 : 0xA1=full;\n"));
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    const std::uint16_t lid_b = b.port.core().attributes().lid;
    const auto request = [&] {
        transport::SoftControlBuffer req;
        transport::encode_route_request({.dlid = lid_b, .nonce = 9}, req);
        net.down.clear();
        sw->on_datagram(a.address, req, now);
        std::vector<transport::PeerPermit> permits;
        for (const auto& [to, d] : net.down)
            if (const auto p = transport::decode_peer_permit(d); p && to == b.address) permits.push_back(*p);
        return permits;
    };
    auto permits = request();
    ASSERT_EQ(permits.size(), 2u);
    EXPECT_TRUE(permits[0].first);
    EXPECT_FALSE(permits[1].first);
    std::vector<std::uint16_t> keys;
    for (const auto& p : permits)
        for (std::uint16_t k : p.pkeys)
            if (k) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    // A's limited 0x0011, full 0x8012..0x8014 and 0xFFFF; not 0x8015 (B lacks it).
    EXPECT_EQ(keys, (std::vector<std::uint16_t>{0x0011, 0x8012, 0x8013, 0x8014, 0xFFFF}));
    // A leaves p2 (the SM gives it new P_Keys): B is told to forget A's
    // permit, and A its route, before the SM's Set is answered.
    auto parts = parse_partitions(
        "Default=0x7fff : ALL=full;\np1=0x0011 : 0xA1=limited, 0xB2=full;\np2=0x0012 : 0xB2=full;\n", "p.conf");
    ASSERT_TRUE(parts.has_value());
    net.down.clear();
    sm->set_partitions(*parts);
    advance(std::chrono::milliseconds(100));
    EXPECT_GE(sw->counters().permit_withdrawals, 1u);
    permits = request();
    ASSERT_EQ(permits.size(), 1u);
    keys.assign(permits[0].pkeys.begin(), permits[0].pkeys.end());
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(keys, (std::vector<std::uint16_t>{0, 0, 0x0011, 0xFFFF}));
}

// Switching a route to direct keeps its order (route_hint.h, the marker):
// two soft ports on a FabricService on loopback, the fabric run only when
// the test says so.
struct MarkerNet {
    std::unique_ptr<FabricService> fabric;
    std::unique_ptr<transport::SoftPort> a, b;
    std::unique_ptr<transport::UdQp> qa, qb;
    std::vector<std::vector<std::uint8_t>> buffers;
    std::vector<int> received;  // sequence numbers in the order B got them
    bool repost = false;        // give B's buffers back as they complete
    Clock::time_point next_tick = Clock::now();

    void pump(bool fabric_runs) {
        pollfd fds[3] = {{.fd = fabric->fd(), .events = POLLIN}, {.fd = a->fd(), .events = POLLIN},
                         {.fd = b->fd(), .events = POLLIN}};
        ASSERT_GE(::poll(fds, 3, 2), 0);
        const auto now = Clock::now();
        if (fabric_runs) {
            if (fds[0].revents & POLLIN) fabric->on_readable(now);
            if (now >= next_tick) {
                fabric->tick(now);
                next_tick = now + FabricService::kTickInterval;
            }
            fabric->after_wakeup(now);
        }
        a->process();
        b->process();
        if (qb) {
            transport::Completion wc[16];
            for (std::size_t n = qb->poll(wc), i = 0; i < n; ++i) {
                if (wc[i].kind != transport::CompletionKind::receive) continue;
                received.push_back(buffers[wc[i].wr_id][transport::kGrhSlotSize]);
                const transport::ReceiveBuffer rb{.wr_id = wc[i].wr_id, .buffer = buffers[wc[i].wr_id]};
                if (repost) {
                    ASSERT_EQ(qb->post_receive({&rb, 1}).value_or(0), 1u);
                }
            }
        }
    }
    template <class Pred>
    bool pump_until(Pred done, bool fabric_runs = true) {
        const auto give_up = Clock::now() + std::chrono::seconds(10);
        while (!done() && Clock::now() < give_up) pump(fabric_runs);
        return done();
    }
    void send(std::uint8_t seq) {
        const std::array<std::uint8_t, 4> payload{seq, 0x5A, 0x5A, 0x5A};
        const transport::SendRequest r{.wr_id = seq, .ah = {.dlid = b->attributes().lid}, .remote_qpn = qb->qpn(),
                                       .remote_qkey = 7, .payload = payload};
        ASSERT_EQ(qa->post_send({&r, 1}).value_or(0), 1u);
    }
    const transport::SoftCutThroughCounters& cut() const { return a->cut_through_counters(); }
};

// b_budget: B's receive_budget; b_depth: its QP's receive depth (and the
// buffers posted); tune: adjusts both ports' configurations. The ports
// hold packets behind a marker for 10 s (drain_timeout), not the default
// 20 ms: the tests count held and direct packets exactly, and a test
// descheduled for 20 ms between the marker and its next send must not see
// the hold give up. Only the test of a marker not answered in time sets a
// short one. Their link lasts kTestLinkTimeoutIntervals, as every soft
// port's here.

void open_marker_net(MarkerNet& n, std::size_t b_budget = transport::UdpBatchSocket::kReceiveBudget,
                     std::uint32_t b_depth = 96,
                     const std::function<void(transport::SoftPortConfig&)>& tune = {}) {
    auto opened = FabricService::open(loopback_options());
    ASSERT_TRUE(opened) << opened.error();
    n.fabric = std::move(*opened);
    auto open_port = [&](std::uint64_t guid, std::unique_ptr<transport::SoftPort>& out, std::size_t budget) {
        transport::SoftPortConfig config{.fabric = n.fabric->local_address(),
                                         .bind_to = *parse_socket_address("127.0.0.1:0"),
                                         .port_guid = guid,
                                         .node_description = "marker test",
                                         .link_interval = std::chrono::milliseconds(10),
                                         .link_timeout_intervals = kTestLinkTimeoutIntervals,
                                         .receive_budget = budget,
                                         .drain_timeout = std::chrono::seconds(10)};
        if (tune) tune(config);
        auto p = transport::SoftPort::open(config);
        ASSERT_TRUE(p) << p.error().message();
        out = std::move(*p);
    };
    open_port(0xA1, n.a, transport::UdpBatchSocket::kReceiveBudget);
    open_port(0xB2, n.b, b_budget);
    ASSERT_TRUE(n.pump_until([&] {
        return n.a->attributes().state == PortState::active && n.b->attributes().state == PortState::active;
    }));
    n.qa = *n.a->create_ud_qp({.qkey = 7});
    n.qb = *n.b->create_ud_qp({.qkey = 7, .receive_depth = b_depth});
    n.buffers.assign(b_depth, std::vector<std::uint8_t>(transport::kGrhSlotSize + 64));
    for (std::size_t i = 0; i < n.buffers.size(); ++i) {
        const transport::ReceiveBuffer rb{.wr_id = i, .buffer = n.buffers[i]};
        ASSERT_EQ(n.qb->post_receive({&rb, 1}).value_or(0), 1u);
    }
}

// B restarts (same GUID, another UDP address) and the SM moves its LID to
// the new switch port: the switch withdraws the route it hinted to A at
// once, so A's next packets go through the switch to the new B instead of
// into B's old address until the hint would have expired.
TEST(CutThrough, AMovedLidWithdrawsTheRouteAndPacketsFollowIt) {
    MarkerNet n;
    open_marker_net(n);
    if (HasFatalFailure()) return;
    n.repost = true;
    for (std::uint8_t i = 0; i < 10; ++i) {
        n.send(i);
        ASSERT_TRUE(n.pump_until([&] { return n.received.size() == i + 1u; }));
    }
    ASSERT_GT(n.cut().direct_tx, 0u) << "A never sent straight to B";
    const std::uint16_t lid = n.b->attributes().lid;
    n.qb.reset();
    n.b.reset();
    auto reopened = transport::SoftPort::open({.fabric = n.fabric->local_address(),
                                               .bind_to = *parse_socket_address("127.0.0.1:0"),
                                               .port_guid = 0xB2,
                                               .node_description = "marker test, restarted",
                                               .link_interval = std::chrono::milliseconds(10),
                                               .link_timeout_intervals = kTestLinkTimeoutIntervals});
    ASSERT_TRUE(reopened) << reopened.error().message();
    n.b = std::move(*reopened);
    ASSERT_TRUE(n.pump_until([&] { return n.b->attributes().state == PortState::active; }));
    EXPECT_EQ(n.b->attributes().lid, lid);
    ASSERT_TRUE(n.pump_until([&] { return n.cut().withdrawals >= 1; }));
    EXPECT_GE(n.fabric->fabric_switch().counters().route_withdrawals, 1u);
    n.qb = *n.b->create_ud_qp({.qkey = 7});
    for (std::size_t i = 0; i < n.buffers.size(); ++i) {
        const transport::ReceiveBuffer rb{.wr_id = i, .buffer = n.buffers[i]};
        ASSERT_EQ(n.qb->post_receive({&rb, 1}).value_or(0), 1u);
    }
    n.received.clear();
    for (std::uint8_t i = 0; i < 5; ++i) {
        n.send(i);
        ASSERT_TRUE(n.pump_until([&] { return n.received.size() == i + 1u; })) << "packet " << int(i) << " was lost";
    }
    EXPECT_EQ(n.received, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(CutThrough, ANewRouteHoldsPacketsUntilTheMarkerComesBackAndKeepsTheOrder) {
    MarkerNet n;
    open_marker_net(n);
    if (HasFatalFailure()) return;
    // Packet 0 goes through the switch and earns a hint; the port answers
    // it with a marker (the fabric has not read it yet: it ran before the
    // port in that turn, and is stopped now).
    // (via_switch_tx also counts the port's SMP answers: compared by delta.)
    const std::uint64_t via = n.cut().via_switch_tx;
    n.send(0);
    ASSERT_TRUE(n.pump_until([&] { return n.cut().markers == 1; }));
    EXPECT_GE(n.cut().via_switch_tx, via + 1);
    // Meanwhile packets to that LID are held, not sent straight to B.
    n.send(1);
    n.send(2);
    n.send(3);
    EXPECT_EQ(n.cut().held, 3u);
    EXPECT_EQ(n.cut().direct_tx, 0u);
    // The switch forwards 0, answers the marker; the held packets follow.
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 4; }));
    EXPECT_EQ(n.received, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(n.cut().direct_tx, 3u);
    EXPECT_EQ(n.cut().drain_timeouts, 0u);
    // From now on straight to B.
    n.send(4);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 5; }));
    EXPECT_EQ(n.cut().direct_tx, 4u);
    EXPECT_EQ(n.b->cut_through_counters().direct_rx, 4u);
}

TEST(CutThrough, ABurstOverTheHoldGoesThroughTheSwitchBehindANewMarker) {
    MarkerNet n;
    open_marker_net(n);
    if (HasFatalFailure()) return;
    n.send(0);
    ASSERT_TRUE(n.pump_until([&] { return n.cut().markers == 1; }));
    // 64 are held; the 65th sends them and itself through the switch with a
    // new marker behind; the next five are held for that one.
    for (std::uint8_t i = 1; i <= 70; ++i) n.send(i);
    EXPECT_EQ(n.cut().held, 64u + 5u);
    EXPECT_EQ(n.cut().marker_retries, 1u);
    EXPECT_EQ(n.cut().markers, 2u);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 71; }));
    std::vector<int> expected(71);
    for (int i = 0; i < 71; ++i) expected[static_cast<std::size_t>(i)] = i;
    EXPECT_EQ(n.received, expected);
    EXPECT_EQ(n.cut().direct_tx, 5u);  // the first request's answer was refused: not the current nonce
    EXPECT_EQ(n.cut().hints_refused, 1u);
    EXPECT_EQ(n.cut().drain_timeouts, 0u);
}

TEST(CutThrough, AMarkerNotAnsweredInTimeSendsTheHeldPacketsThroughTheSwitch) {
    MarkerNet n;
    open_marker_net(n, transport::UdpBatchSocket::kReceiveBudget, 96, [](transport::SoftPortConfig& c) {
        // Short enough to wait out, long enough (against the microseconds
        // between the marker and the next send) that packet 1 is held.
        // (The link stays up meanwhile: kTestLinkTimeoutIntervals. A
        // link gone down releases the held packets too, but not as a drain
        // timeout.)
        c.drain_timeout = std::chrono::milliseconds(200);
    });
    if (HasFatalFailure()) return;
    n.send(0);
    ASSERT_TRUE(n.pump_until([&] { return n.cut().markers == 1; }));
    n.send(1);
    EXPECT_EQ(n.cut().held, 1u);
    const std::uint64_t via = n.cut().via_switch_tx;
    // The fabric stays stopped past the drain timeout: the port gives up
    // the route.
    ASSERT_TRUE(n.pump_until([&] { return n.cut().drain_timeouts >= 1; }, /*fabric_runs=*/false));
    EXPECT_EQ(n.cut().drain_timeouts, 1u);
    EXPECT_GE(n.cut().via_switch_tx, via + 1);  // the held packet
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 2; }));
    EXPECT_EQ(n.received, (std::vector<int>{0, 1}));
    EXPECT_EQ(n.cut().direct_tx, 0u);
}
// A burst sent straight to B leaves A as one GSO message and reaches B as
// one GRO message of 60 datagrams, more than B's QP has buffers for: B's
// port hands over receive_budget at a time and its fd stays readable for
// the rest, so with buffers given back between turns nothing is dropped.
TEST(CutThrough, AGroBurstLargerThanTheReceiveQueueIsHandedOverInTurns) {
    MarkerNet n;
    open_marker_net(n, /*b_budget=*/8, /*b_depth=*/16);
    if (HasFatalFailure()) return;
    n.repost = true;
    n.send(0);  // earns the route (held behind its marker, if need be)
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 1; }));
    n.send(1);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 2; }));
    const std::uint64_t direct = n.cut().direct_tx;
    // One post_send of 60: flushed once, as a GSO run.
    std::vector<transport::SendRequest> burst;
    std::vector<std::array<std::uint8_t, 4>> payloads(60);
    for (std::uint8_t i = 0; i < 60; ++i) {
        payloads[i] = {static_cast<std::uint8_t>(i + 2), 0x5A, 0x5A, 0x5A};
        burst.push_back({.wr_id = i, .ah = {.dlid = n.b->attributes().lid}, .remote_qpn = n.qb->qpn(),
                         .remote_qkey = 7, .payload = payloads[i]});
    }
    const std::uint64_t gro_before = n.b->udp_counters().rx_gro_messages;
    const std::uint64_t rx_before = n.b->udp_counters().rx_datagrams;
    ASSERT_EQ(n.qa->post_send(burst).value_or(0), 60u);
    EXPECT_EQ(n.cut().direct_tx, direct + 60);
    // The turn that reads the message hands over 8 and keeps the rest; B's
    // fd stays readable for them (the socket's own fd would not be).
    ASSERT_TRUE(n.pump_until([&] { return n.b->udp_counters().rx_gro_messages > gro_before; }));
    EXPECT_LT(n.b->udp_counters().rx_datagrams - rx_before, 60u) << "all handed over in one turn";
    pollfd more{.fd = n.b->fd(), .events = POLLIN};
    EXPECT_EQ(::poll(&more, 1, 0), 1);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 62; }));
    std::vector<int> expected(62);
    for (int i = 0; i < 62; ++i) expected[static_cast<std::size_t>(i)] = i;
    EXPECT_EQ(n.received, expected);
    EXPECT_EQ(n.b->core().counters().undelivered[static_cast<std::size_t>(transport::DeliveryDrop::no_receive_buffer)],
              0u);
    EXPECT_GE(n.b->udp_counters().rx_gro_messages, 1u);
}

// ---------------------------------------------------------------------------
// Who may send what to a soft port (soft_port.h, route_hint.h).

using test::forged_packet;
using test::forged_port_down;

struct Udp {
    UniqueFd fd{::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
    SocketAddress address;
    Udp() {
        const auto any = *parse_socket_address("127.0.0.1:0");
        EXPECT_EQ(::bind(fd.get(), any.get(), any.length), 0);
        address.length = sizeof address.storage;
        ::getsockname(fd.get(), address.get(), &address.length);
    }
    void send(const Wire& d, const SocketAddress& to) const {
        EXPECT_EQ(::sendto(fd.get(), d.data(), d.size(), 0, to.get(), to.length), static_cast<ssize_t>(d.size()));
    }
    std::size_t pending() const {
        std::size_t n = 0;
        std::array<std::uint8_t, 4200> buf;
        while (::recv(fd.get(), buf.data(), buf.size(), MSG_DONTWAIT) >= 0) ++n;
        return n;
    }
};

TEST(SoftPortTrust, ForgedSmpsAndDataFromAForeignAddressChangeNothingAndAreCounted) {
    MarkerNet n;
    open_marker_net(n);
    if (HasFatalFailure()) return;
    const std::uint16_t lid_a = n.a->attributes().lid, lid_b = n.b->attributes().lid;
    std::vector<std::string> logged;
    n.b->set_drop_log([&](std::string_view reason, const std::string& m) { logged.push_back(std::string(reason) + ": " + m); });
    Udp forger;
    const std::array<std::uint8_t, 4> data{9, 9, 9, 9};
    forger.send(forged_port_down(1, lid_b), n.b->local_address());
    forger.send(forged_packet(lid_a, lid_b, n.qb->qpn(), 7, data), n.b->local_address());
    transport::SoftControlBuffer ctl;
    transport::encode_route_hint({.dlid = lid_a, .ttl_ms = 60000, .peer = forger.address, .nonce = 0}, ctl);
    forger.send(Wire(ctl.begin(), ctl.end()), n.b->local_address());
    transport::encode_peer_permit({.ttl_ms = 60000, .peer = forger.address, .lid = lid_a, .any_pkey = true}, ctl);
    forger.send(Wire(ctl.begin(), ctl.end()), n.b->local_address());
    forger.send(link_packet(), n.b->local_address());
    ASSERT_TRUE(n.pump_until([&] { return n.b->trust_counters().foreign == 5; }));
    for (int i = 0; i < 20; ++i) n.pump(true);
    EXPECT_EQ(n.b->attributes().state, PortState::active);
    EXPECT_TRUE(n.received.empty());
    EXPECT_EQ(n.b->cut_through_counters().permits, 0u);
    ASSERT_FALSE(logged.empty());
    EXPECT_NE(logged[0].find("foreign_source: dropped a packet from " + forger.address.to_string()), std::string::npos)
        << logged[0];

    // A real peer the switch named may send unicast data, never an SMP.
    n.send(0);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 1 && n.cut().hints >= 1; }));
    n.send(1);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 2; }));
    EXPECT_EQ(n.cut().direct_tx, 1u);
    EXPECT_EQ(n.b->cut_through_counters().direct_rx, 1u);
    EXPECT_GE(n.b->cut_through_counters().permits, 1u);
    const auto smp_drops = [&] {
        return n.b->core().counters().undelivered[static_cast<std::size_t>(transport::DeliveryDrop::not_via_switch)];
    };
    // What a peer's SMP straight to B would meet (a port sends its own SMPs
    // through the switch even with a route: SoftPort::transmit).
    n.b->core().receive(forged_port_down(lid_a, lid_b), /*via_switch=*/false);
    EXPECT_EQ(smp_drops(), 1u);
    EXPECT_EQ(n.b->attributes().state, PortState::active);
    const std::uint64_t via = n.cut().via_switch_tx, direct = n.cut().direct_tx;
    ASSERT_TRUE(n.a->send_raw(forged_port_down(lid_a, lid_b)));
    EXPECT_EQ(n.cut().via_switch_tx, via + 1) << "an SMP leaves through the switch";
    EXPECT_EQ(n.cut().direct_tx, direct);
    EXPECT_EQ(forger.pending(), 0u);
}

// A peer the switch named may send straight to a port, but only what the
// switch would have passed: with its own LID and a P_Key the two share.
TEST(SoftPortTrust, APermittedPeerSendsOnlyWithItsOwnLidAndASharedPartition) {
    MarkerNet n;
    open_marker_net(n);
    if (HasFatalFailure()) return;
    n.repost = true;
    std::vector<std::string> logged;
    n.b->set_drop_log([&](std::string_view reason, const std::string& m) { logged.push_back(std::string(reason) + ": " + m); });
    const std::uint16_t lid_a = n.a->attributes().lid, lid_b = n.b->attributes().lid;
    n.send(0);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 1 && n.cut().hints >= 1; }));
    n.send(1);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 2; }));
    ASSERT_EQ(n.b->cut_through_counters().direct_rx, 1u);
    const auto direct = [&](std::uint16_t slid, std::uint16_t pkey, std::uint8_t seq) {
        const std::array<std::uint8_t, 4> data{seq, 0x5A, 0x5A, 0x5A};
        ib::PacketSpec spec;
        spec.lrh.dlid = lid_b;
        spec.lrh.slid = slid;
        spec.bth.opcode = ib::op::ud_send_only;
        spec.bth.pkey = pkey;
        spec.bth.dest_qp = n.qb->qpn();
        spec.ext.deth = {7, n.qa->qpn()};
        spec.payload = data;
        Wire w(ib::packet_size(spec));
        ASSERT_TRUE(ib::build_packet(spec, w));
        const std::uint64_t sent = n.cut().direct_tx;
        ASSERT_TRUE(n.a->send_raw(w));
        ASSERT_EQ(n.cut().direct_tx, sent + 1) << "not sent straight to B";
    };
    direct(static_cast<std::uint16_t>(lid_b + 7), ib::kPKeyDefault, 10);  // another port's LID
    direct(lid_a, 0x8005, 11);  // a partition neither is in
    direct(lid_a, 0x7FFF, 12);  // limited in the default partition: A may
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 3; }));
    for (int i = 0; i < 10; ++i) n.pump(true);
    EXPECT_EQ(n.received, (std::vector<int>{0, 1, 12}));
    EXPECT_EQ(n.b->trust_counters().peer_slid, 1u);
    EXPECT_EQ(n.b->trust_counters().peer_pkey, 1u);
    ASSERT_EQ(logged.size(), 2u);
    EXPECT_NE(logged[0].find("peer_slid: dropped a packet from " + n.a->local_address().to_string()), std::string::npos)
        << logged[0];
}

// What a raw socket can do: a route hint with the fabric's source address.
// Only a hint echoing one of the port's own nonces moves a route.
TEST(SoftPortTrust, ASpoofedRouteHintFromTheFabricsAddressRedirectsNothing) {
    UniqueFd raw(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW));
    if (!raw) GTEST_SKIP() << "needs a raw socket (root)";
    MarkerNet n;
    open_marker_net(n);
    if (HasFatalFailure()) return;
    const std::uint16_t lid_b = n.b->attributes().lid;
    n.send(0);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 1 && n.cut().hints >= 1; }));
    Udp forger;
    const auto spoof = [&](std::uint64_t nonce) {
        transport::SoftControlBuffer ctl;
        transport::encode_route_hint({.dlid = lid_b, .ttl_ms = 60000, .peer = forger.address, .nonce = nonce}, ctl);
        // IPv4 + UDP headers by hand: source = the fabric's address.
        Wire d(20 + 8 + ctl.size());
        sockaddr_in from{}, to{};
        const SocketAddress fabric = n.fabric->local_address(), port = n.a->local_address();
        std::memcpy(&from, &fabric.storage, sizeof from);
        std::memcpy(&to, &port.storage, sizeof to);
        d[0] = 0x45;
        store_be16(d.data() + 2, static_cast<std::uint16_t>(d.size()));
        d[8] = 64;
        d[9] = IPPROTO_UDP;
        std::memcpy(d.data() + 12, &from.sin_addr, 4);
        std::memcpy(d.data() + 16, &to.sin_addr, 4);
        std::memcpy(d.data() + 20, &from.sin_port, 2);
        std::memcpy(d.data() + 22, &to.sin_port, 2);
        store_be16(d.data() + 24, static_cast<std::uint16_t>(8 + ctl.size()));  // checksum 0: none (IPv4)
        std::copy(ctl.begin(), ctl.end(), d.begin() + 28);
        sockaddr_in dst = to;
        ASSERT_EQ(::sendto(raw.get(), d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&dst), sizeof dst),
                  static_cast<ssize_t>(d.size()));
    };
    const std::uint64_t refused = n.cut().hints_refused;
    spoof(0x1234567890ABCDEF);  // a guessed nonce
    spoof(0);                   // "a route exists": the port asks the real switch
    ASSERT_TRUE(n.pump_until([&] { return n.cut().hints_refused == refused + 1; }));
    for (std::uint8_t i = 1; i <= 20; ++i) n.send(i);
    ASSERT_TRUE(n.pump_until([&] { return n.received.size() == 21; }));
    EXPECT_EQ(forger.pending(), 0u);
}

// Get SMInfo, LID-routed to the switch LID (what sminfo sends): the SM
// answers with its GUID, priority and MASTER; a Set SMInfo (a handover this
// SM does not do) gets nothing and is counted.
TEST_F(FabricTest, TheSmAnswersGetSmInfo) {
    Ca a(net, 1, 0xA1);
    plug(a);
    std::vector<ib::Smp> got;
    a.port.set_smp_intercept([&](const ib::Packet& p) {
        auto smp = ib::decode_smp(p.payload);
        if (!smp || !(smp->method & ib::method::response_bit)) return false;
        got.push_back(*smp);
        return true;
    });
    auto ask = [&](std::uint8_t method, std::uint64_t tid) {
        ib::Smp q;
        q.mgmt_class = ib::mgmt_class::subn_lid_routed;
        q.method = method;
        q.attribute_id = ib::smp_attr::sm_info;
        q.transaction_id = tid;
        std::array<std::uint8_t, ib::kMadSize> mad{};
        q.write_to(mad.data());
        std::array<std::uint8_t, ib::kQp0PacketSize> out{};
        const auto n = ib::build_qp0_packet(mad, a.port.core().attributes().lid, sw->lid(), out);
        ASSERT_TRUE(n.has_value());
        ASSERT_TRUE(a.port.core().transmit_raw(bytes(out).first(*n)));
        run();
    };
    ask(ib::method::get, 0x77);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].method, ib::method::get_resp);
    EXPECT_EQ(got[0].transaction_id, 0x77u);
    EXPECT_EQ(got[0].status, 0);
    const auto info = ib::SmInfo::read_from(got[0].data.data());
    EXPECT_EQ(info.guid, sm_config.guid);
    EXPECT_EQ(info.sm_state, ib::sm_state::master);
    EXPECT_EQ(info.priority, sm_config.priority);
    EXPECT_EQ(info.sm_key, 0u);
    EXPECT_EQ(sm->counters().sm_info_answered, 1u);
    ask(ib::method::set, 0x78);
    EXPECT_EQ(got.size(), 1u);
    EXPECT_EQ(sm->counters().requests_refused, 1u);
}

// ---------------------------------------------------------------------------
// The switch's own SMA: what an SM (ours, OpenSM under libumad2sim) and the
// diagnostics read and set; the SM programs the switch only through it.

struct SwitchSmaTest : FabricTest {
    std::vector<ib::Smp> got;  // responses that reached CA a's QP0

    void capture(Ca& a) {
        a.port.set_smp_intercept([this](const ib::Packet& p) {
            auto smp = ib::decode_smp(p.payload);
            if (!smp || !(smp->method & ib::method::response_bit)) return false;
            got.push_back(*smp);
            return true;
        });
    }
    // A directed-route request from `from` to the switch (path: out of the
    // CA's port 1), or LID-routed to the switch LID when `lid_routed`.
    std::optional<ib::Smp> ask(Ca& from, std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier,
                               const ib::SmpData& data = {}, std::uint64_t m_key = 0, bool lid_routed = false) {
        ib::Smp q;
        q.mgmt_class = lid_routed ? ib::mgmt_class::subn_lid_routed : ib::mgmt_class::subn_directed_route;
        q.method = method;
        q.attribute_id = attribute;
        q.attribute_modifier = modifier;
        q.transaction_id = ++tid;
        q.m_key = m_key;
        q.data = data;
        std::uint16_t dlid = sw->lid();
        if (!lid_routed) {
            const std::uint8_t path[] = {1};
            EXPECT_TRUE(ib::dr_set_initial_path(q, path));
            EXPECT_EQ(ib::dr_send_request(q, 1).action, ib::DrAction::send_on_port);
            dlid = ib::kLidPermissive;
        }
        std::array<std::uint8_t, ib::kMadSize> mad{};
        q.write_to(mad.data());
        std::array<std::uint8_t, ib::kQp0PacketSize> out{};
        const std::uint16_t own = from.port.core().attributes().lid;
        const auto n = ib::build_qp0_packet(mad, own ? own : ib::kLidPermissive, dlid, out);
        EXPECT_TRUE(from.port.core().transmit_raw(bytes(out).first(*n)));
        const std::size_t before = got.size();
        run();
        if (got.size() == before) return std::nullopt;
        ib::Smp r = got.back();
        if (r.is_directed_route()) {
            EXPECT_EQ(ib::dr_receive_response(r), ib::DrDecision::deliver());
        }
        EXPECT_EQ(r.transaction_id, tid);
        return r;
    }
    std::uint64_t tid = 0x5000;
};

TEST_F(SwitchSmaTest, NodeInfoSwitchInfoAndPortInfoOfEveryPort) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    capture(a);
    auto r = ask(a, ib::method::get, ib::smp_attr::node_info, 0);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 0);
    EXPECT_TRUE(r->direction);
    const auto ni = ib::NodeInfo::read_from(r->data.data());
    EXPECT_EQ(ni.node_type, ib::node_type::switch_node);
    EXPECT_EQ(ni.num_ports, 8);
    EXPECT_EQ(ni.node_guid, sw->guid());
    EXPECT_EQ(ni.port_guid, sw->guid());
    EXPECT_EQ(ni.local_port_num, 1) << "the port the SMP came in on";

    r = ask(a, ib::method::get, ib::smp_attr::node_description, 0, {}, 0, /*lid_routed=*/true);
    ASSERT_TRUE(r);
    EXPECT_EQ(ib::NodeDescription::read_from(r->data.data()).text, "ibfabricd soft switch");

    r = ask(a, ib::method::get, ib::smp_attr::switch_info, 0);
    ASSERT_TRUE(r);
    const auto si = ib::SwitchInfo::read_from(r->data.data());
    EXPECT_EQ(si.linear_fdb_cap, 0xC000);
    EXPECT_GE(si.linear_fdb_top, 3);
    EXPECT_EQ(si.partition_enforcement_cap, 32);

    // Port 0: the switch's LID, this SM, IsSM; the M_Key hidden (protect bits 1).
    r = ask(a, ib::method::get, ib::smp_attr::port_info, 0);
    ASSERT_TRUE(r);
    auto pi = ib::PortInfo::read_from(r->data.data());
    EXPECT_EQ(pi.lid, 1);
    EXPECT_EQ(pi.master_sm_lid, 1);
    EXPECT_NE(pi.capability_mask & ib::port_capability::is_sm, 0u);
    EXPECT_EQ(pi.m_key, 0u);
    EXPECT_EQ(pi.m_key_protect_bits, 1);
    // Port 2 (B's): ACTIVE, set so by the SM; port 5: nobody there.
    r = ask(a, ib::method::get, ib::smp_attr::port_info, 2);
    ASSERT_TRUE(r);
    pi = ib::PortInfo::read_from(r->data.data());
    EXPECT_EQ(pi.port_state, ib::port_state::active);
    EXPECT_EQ(pi.port_physical_state, ib::port_physical_state::link_up);
    r = ask(a, ib::method::get, ib::smp_attr::port_info, 5);
    ASSERT_TRUE(r);
    pi = ib::PortInfo::read_from(r->data.data());
    EXPECT_EQ(pi.port_state, ib::port_state::down);
    EXPECT_EQ(pi.port_physical_state, ib::port_physical_state::polling);
    // Port 9 does not exist; an attribute the switch does not have.
    r = ask(a, ib::method::get, ib::smp_attr::port_info, 9);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status & 0x7FFF, ib::mad_status::invalid_attr_or_modifier);
    r = ask(a, ib::method::get, ib::smp_attr::guid_info, 0);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status & 0x7FFF, ib::mad_status::method_attr_not_supported);
    EXPECT_GE(sw->counters().sma_responses, 8u);
}

TEST_F(SwitchSmaTest, TheSmProgramsTheForwardingTablesThroughTheSma) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    capture(a);
    EXPECT_GT(sm->counters().switch_smps, 0u);
    EXPECT_EQ(sm->counters().switch_smp_errors, 0u);
    // What the SM set is what a Get shows and what the switch forwards by.
    auto r = ask(a, ib::method::get, ib::smp_attr::linear_forwarding_table, 0);
    ASSERT_TRUE(r);
    const auto lft = ib::LinearForwardingTableBlock::read_from(r->data.data());
    EXPECT_EQ(lft.ports[1], 0) << "the switch's own LID";
    EXPECT_EQ(lft.ports[2], 1);
    EXPECT_EQ(lft.ports[3], 2);
    EXPECT_EQ(lft.ports[4], 0xFF);
    EXPECT_EQ(sw->unicast_route(3), std::optional<std::uint8_t>(2));
    // A port that goes: its LID's entry is cleared through the SMA too.
    b.alive = false;
    b.answers = false;
    advance(std::chrono::milliseconds(1600));
    EXPECT_FALSE(sw->unicast_route(3).has_value());
    r = ask(a, ib::method::get, ib::smp_attr::linear_forwarding_table, 0);
    ASSERT_TRUE(r);
    EXPECT_EQ(ib::LinearForwardingTableBlock::read_from(r->data.data()).ports[3], 0xFF);
    EXPECT_EQ(sm->counters().switch_smp_errors, 0u);
}

TEST_F(SwitchSmaTest, MulticastForwardingTableBlocksGetAndSetByPosition) {
    sm_config.m_key.mode = MKeyPolicy::Mode::fixed;
    sm_config.m_key.fixed = 0x5EC2E7;
    start_fabric();
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2);
    plug(a);
    plug(b);
    capture(a);
    // MLIDs 0xC000 and 0xC001 (block 0, position 0): ports 1+2, port 2.
    ib::MulticastForwardingTableBlock block;
    block.port_masks[0] = 0b110;
    block.port_masks[1] = 0b100;
    ib::SmpData data{};
    ASSERT_TRUE(ib::put_attribute(block, data));
    auto r = ask(a, ib::method::set, ib::smp_attr::multicast_forwarding_table,
                 ib::multicast_forwarding_table_modifier(0, 0), data, sw->port_info(0).m_key);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 0);
    r = ask(a, ib::method::get, ib::smp_attr::multicast_forwarding_table, ib::multicast_forwarding_table_modifier(0, 0));
    ASSERT_TRUE(r);
    EXPECT_EQ(ib::MulticastForwardingTableBlock::read_from(r->data.data()), block);
    // Position 1 (ports 16..31) of an 8-port switch does not exist.
    r = ask(a, ib::method::get, ib::smp_attr::multicast_forwarding_table, ib::multicast_forwarding_table_modifier(0, 1));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status & 0x7FFF, ib::mad_status::invalid_attr_or_modifier);
    // The switch forwards 0xC001 to port 2 only.
    auto qa = *a.port.core().create_ud_qp({.qkey = 7});
    auto qb = *b.port.core().create_ud_qp({.qkey = 7});
    const ib::Gid mgid = {0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};
    ASSERT_TRUE(qb->attach_multicast(mgid, 0xC001).has_value());
    Wire buf(transport::kGrhSlotSize + 64);
    const transport::ReceiveBuffer rb[] = {{1, buf}};
    ASSERT_EQ(qb->post_receive(rb).value_or(0), 1u);
    Wire payload(8, 0x11);
    transport::GrhAttributes grh;
    grh.dgid = mgid;
    const transport::SendRequest s{.wr_id = 1, .ah = {.dlid = 0xC001, .grh = grh}, .remote_qpn = 0xFFFFFF,
                                   .remote_qkey = 7, .payload = payload};
    ASSERT_EQ(qa->post_send({&s, 1}).value_or(0), 1u);
    run();
    transport::Completion wc[2];
    EXPECT_EQ(qb->poll(wc), 1u);
}

// With one fixed M_Key for every port each CA port holds it (the SM's Set
// of its PortInfo carries it): the switch has a key of its own, or any
// port could rewrite the forwarding tables.
TEST_F(SwitchSmaTest, WithAFixedKeyAPortsKeyDoesNotOpenTheSwitch) {
    sm_config.m_key.mode = MKeyPolicy::Mode::fixed;
    sm_config.m_key.fixed = 0x5EC2E7;
    start_fabric();
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), evil(net, 3, 0xE3);
    plug(a);
    plug(b);
    plug(evil);
    capture(evil);
    ASSERT_EQ(evil.port.sma().port_info().m_key, 0x5EC2E7u) << "what every port is given";
    EXPECT_NE(sw->port_info(0).m_key, 0x5EC2E7u);
    ib::LinearForwardingTableBlock hijack;
    hijack.ports.fill(0xFF);
    hijack.ports[3] = 3;  // B's LID to the evil port
    ib::SmpData data{};
    ASSERT_TRUE(ib::put_attribute(hijack, data));
    EXPECT_FALSE(ask(evil, ib::method::set, ib::smp_attr::linear_forwarding_table, 0, data, 0x5EC2E7));
    EXPECT_EQ(sw->unicast_route(3), std::optional<std::uint8_t>(2));
    EXPECT_EQ(sw->port_info(0).m_key_violations, 1);
    // The SM still programs it.
    Ca c(net, 4, 0xC4);
    plug(c);
    EXPECT_EQ(c.port.core().attributes().state, PortState::active);
    EXPECT_EQ(sm->counters().switch_smp_errors, 0u);
}

// The SM keys the switch when it starts, before any port can reach it,
// and does so with --m-key none too (the switch's tables route everyone).
TEST_F(SwitchSmaTest, TheSwitchIsKeyedBeforeAnyPortPlugsIn) {
    EXPECT_NE(sw->port_info(0).m_key, 0u);
    EXPECT_EQ(sw->port_info(0).m_key_protect_bits, 1);
    sm_config.m_key.mode = MKeyPolicy::Mode::none;
    start_fabric();
    EXPECT_NE(sw->port_info(0).m_key, 0u);
    Ca a(net, 1, 0xA1), evil(net, 3, 0xE3);
    plug(a);
    plug(evil);
    EXPECT_EQ(a.port.sma().port_info().m_key, 0u) << "--m-key none: the CA ports have none";
    capture(evil);
    ib::PortInfo mine;
    mine.m_key = 0xBAD;
    mine.m_key_protect_bits = 3;
    ib::SmpData data{};
    ASSERT_TRUE(ib::put_attribute(mine, data));
    EXPECT_FALSE(ask(evil, ib::method::set, ib::smp_attr::port_info, 0, data));
    EXPECT_NE(sw->port_info(0).m_key, 0xBADu);
    EXPECT_EQ(sw->port_info(0).m_key_violations, 1);
    Ca b(net, 2, 0xB2);
    plug(b);
    EXPECT_EQ(sw->unicast_route(b.port.core().attributes().lid), std::optional<std::uint8_t>(3))
        << "the SM still programs its switch";
    EXPECT_EQ(sm->counters().switch_smp_errors, 0u);
}

TEST_F(SwitchSmaTest, AForgedSetFromAPortChangesNothing) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), evil(net, 3, 0xE3);
    plug(a);
    plug(b);
    plug(evil);
    capture(evil);
    // Point B's LID at the attacker's port, with no M_Key (or a guess).
    ib::LinearForwardingTableBlock hijack;
    hijack.ports.fill(0xFF);
    hijack.ports[3] = 3;
    ib::SmpData data{};
    ASSERT_TRUE(ib::put_attribute(hijack, data));
    const std::uint64_t dropped = sw->counters().dropped_for(SwitchDrop::sma_dropped);
    EXPECT_FALSE(ask(evil, ib::method::set, ib::smp_attr::linear_forwarding_table, 0, data));
    EXPECT_FALSE(ask(evil, ib::method::set, ib::smp_attr::linear_forwarding_table, 0, data, 0x1234, true));
    // Nor may it take the switch's ports down.
    ib::PortInfo down;
    down.port_state = ib::port_state::down;
    ib::SmpData pdata{};
    ASSERT_TRUE(ib::put_attribute(down, pdata));
    EXPECT_FALSE(ask(evil, ib::method::set, ib::smp_attr::port_info, 2, pdata));
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::sma_dropped), dropped + 3);
    EXPECT_EQ(sw->unicast_route(3), std::optional<std::uint8_t>(2));
    EXPECT_EQ(sm->ports().at(2).phase, SmPortPhase::active);
    // Gets still answer (protect bits 1), without the key.
    auto r = ask(evil, ib::method::get, ib::smp_attr::port_info, 0);
    ASSERT_TRUE(r);
    EXPECT_EQ(ib::PortInfo::read_from(r->data.data()).m_key, 0u);
}

// ---------------------------------------------------------------------------
// M_Key: the SM keys every port; a forged Set from inside the fabric fails.

TEST_F(FabricTest, TheSmKeysEveryPortAndAForgedSetFailsWithATrap) {
    std::vector<std::string> log;
    sm = std::make_unique<SubnetManager>(sm_config, *sw, [&](const std::string& l) { log.push_back(l); });
    sw->set_management(sm.get());
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), evil(net, 3, 0xE3);
    plug(a);
    plug(b);
    plug(evil);
    const ib::PortInfo pa = a.port.sma().port_info(), pb = b.port.sma().port_info();
    EXPECT_NE(pa.m_key, 0u);
    EXPECT_NE(pa.m_key, pb.m_key);  // one per port
    EXPECT_EQ(pa.m_key_protect_bits, 1);
    EXPECT_EQ(pa.m_key_lease_period, 15);
    EXPECT_EQ(sm->ports().at(1).m_key, pa.m_key);
    a.events();

    // Another port of the fabric tries SubnSet(PortInfo) PortState Down.
    ASSERT_TRUE(evil.port.core().transmit_raw(forged_port_down(evil.port.core().attributes().lid, pa.lid)));
    run();
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_TRUE(a.events().empty());
    EXPECT_EQ(a.port.sma().port_info().m_key_violations, 1);
    EXPECT_EQ(a.port.sma().counters().traps_sent, 1u);
    EXPECT_EQ(sm->counters().m_key_traps, 1u);
    EXPECT_EQ(a.port.sma().counters().trap_represses, 1u);  // the SM answered
    ASSERT_FALSE(log.empty());
    EXPECT_NE(log.back().find("refused a Set PortInfo from LID " + std::string(evil.port.core().attributes().lid == 4 ? "0x0004" : "?")),
              std::string::npos)
        << log.back();
    // The sweeps go on with the key: the port stays ACTIVE.
    advance(std::chrono::milliseconds(2000));
    EXPECT_EQ(sm->ports().at(1).phase, SmPortPhase::active);
    EXPECT_EQ(sm->counters().ports_lost, 0u);
}

// An SMP that goes by LID carries its sender's own LID (or the permissive
// one): the port that gets it answers that LID, and its Trap 256 names it
// as the one that tried. Another port's LID is dropped at the switch, for
// a LID-routed SMP and for a directed-route one that goes by LID.
TEST_F(FabricTest, AnSmpByLidCarriesItsSendersOwnLid) {
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), evil(net, 3, 0xE3);
    plug(a);
    plug(b);
    plug(evil);
    const std::uint16_t lid_a = a.port.core().attributes().lid, lid_b = b.port.core().attributes().lid,
                        lid_evil = evil.port.core().attributes().lid;
    auto dr_set_down = [&](std::uint16_t slid, std::uint16_t dlid, std::uint16_t dr_dlid) {
        ib::Smp smp;
        smp.mgmt_class = ib::mgmt_class::subn_directed_route;
        smp.method = ib::method::set;
        smp.attribute_id = ib::smp_attr::port_info;
        smp.transaction_id = 0x0bad;
        smp.dr_slid = ib::kLidPermissive;
        smp.dr_dlid = dr_dlid;
        ib::PortInfo down;
        down.port_state = ib::port_state::down;
        (void)ib::put_attribute(down, smp.data);
        std::array<std::uint8_t, ib::kMadSize> mad{};
        smp.write_to(mad.data());
        return test::forged_packet(slid, dlid, ib::kQp0, 0, mad);
    };
    const auto spoofed = sw->counters().dropped_for(SwitchDrop::slid_not_port);
    ASSERT_TRUE(evil.port.core().transmit_raw(forged_port_down(lid_b, lid_a)));
    ASSERT_TRUE(evil.port.core().transmit_raw(dr_set_down(lid_b, lid_a, ib::kLidPermissive)));  // by LID to A
    ASSERT_TRUE(evil.port.core().transmit_raw(dr_set_down(lid_b, sw->lid(), lid_a)));  // a LID-routed last part
    run();
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::slid_not_port), spoofed + 3);
    EXPECT_EQ(a.port.sma().port_info().m_key_violations, 0);
    EXPECT_EQ(sm->counters().m_key_traps, 0u);
    // With its own LID, or the permissive one, the Sets reach A, which
    // refuses them for the M_Key and names the sender it was given.
    ASSERT_TRUE(evil.port.core().transmit_raw(forged_port_down(lid_evil, lid_a)));
    ASSERT_TRUE(evil.port.core().transmit_raw(dr_set_down(lid_evil, sw->lid(), lid_a)));
    ASSERT_TRUE(evil.port.core().transmit_raw(forged_port_down(ib::kLidPermissive, lid_a)));
    run();
    EXPECT_EQ(sw->counters().dropped_for(SwitchDrop::slid_not_port), spoofed + 3);
    EXPECT_EQ(a.port.sma().port_info().m_key_violations, 3);
    EXPECT_EQ(a.port.core().attributes().state, PortState::active);
    EXPECT_EQ(sm->counters().m_key_traps, 1u);  // one a second
}

// A directed-route SMP goes by its paths, whatever its LRH SLID (a CA
// answers the SM's Set of its new LID from that LID); but a CA names the
// LRH SLID in its Trap 256: a request from a port leaves the switch on its
// directed part with the port's own LID or the permissive one.
TEST_F(FabricTest, ADirectedRouteSmpReachesACaWithoutAnotherPortsLid) {
    std::vector<std::string> log;
    sm = std::make_unique<SubnetManager>(sm_config, *sw, [&](const std::string& l) { log.push_back(l); });
    sw->set_management(sm.get());
    Ca a(net, 1, 0xA1), b(net, 2, 0xB2), evil(net, 3, 0xE3);
    plug(a);
    plug(b);
    plug(evil);
    const std::uint16_t lid_b = b.port.core().attributes().lid;
    ASSERT_EQ(sw->unicast_route(a.port.core().attributes().lid), std::optional<std::uint8_t>(1));
    ib::Smp set;
    set.mgmt_class = ib::mgmt_class::subn_directed_route;
    set.method = ib::method::set;
    set.attribute_id = ib::smp_attr::port_info;
    set.transaction_id = 0x0bad;
    ib::PortInfo down;
    down.port_state = ib::port_state::down;
    ASSERT_TRUE(ib::put_attribute(down, set.data));
    const std::uint8_t path[] = {1, 1};  // out of the CA's port, then the switch's port 1: A
    ASSERT_TRUE(ib::dr_set_initial_path(set, path));
    ASSERT_EQ(ib::dr_send_request(set, 1).action, ib::DrAction::send_on_port);
    std::array<std::uint8_t, ib::kMadSize> mad{};
    set.write_to(mad.data());
    ASSERT_TRUE(evil.port.core().transmit_raw(test::forged_packet(lid_b, ib::kLidPermissive, ib::kQp0, 0, mad)));
    run();
    EXPECT_EQ(a.port.sma().port_info().m_key_violations, 1);
    ASSERT_EQ(sm->counters().m_key_traps, 1u);
    EXPECT_NE(log.back().find("from LID 0xffff"), std::string::npos) << log.back();
}

// A trap speaks for the port that issued it: another port naming a
// victim's LID as the issuer gets no log line and no TrapRepress to the
// victim, only a count.
TEST_F(FabricTest, TheSmTakesATrapOnlyFromThePortItNamesAsIssuer) {
    std::vector<std::string> log;
    sm = std::make_unique<SubnetManager>(sm_config, *sw, [&](const std::string& l) { log.push_back(l); });
    sw->set_management(sm.get());
    Ca a(net, 1, 0xA1), evil(net, 2, 0xE2);
    plug(a);
    plug(evil);
    const std::uint16_t lid_a = a.port.core().attributes().lid, lid_evil = evil.port.core().attributes().lid;
    auto trap_from = [&](std::uint16_t issuer) {
        ib::SmpNotice notice;
        notice.type = ib::trap::type_security;
        notice.producer_type = ib::trap::producer_channel_adapter;
        notice.trap_number = ib::trap::bad_m_key;
        notice.issuer_lid = issuer;
        ib::write_bad_m_key({.lid = 0x0bad, .method = ib::method::set, .attribute_id = ib::smp_attr::port_info},
                            notice.data_details);
        ib::Smp trap;
        trap.mgmt_class = ib::mgmt_class::subn_lid_routed;
        trap.method = ib::method::trap;
        trap.attribute_id = ib::smp_attr::notice;
        trap.transaction_id = 0x77;
        notice.write_to(trap.data.data());
        std::array<std::uint8_t, ib::kMadSize> mad{};
        trap.write_to(mad.data());
        return test::forged_packet(lid_evil, sw->lid(), ib::kQp0, 0, mad);
    };
    const std::size_t logged = log.size();
    ASSERT_TRUE(evil.port.core().transmit_raw(trap_from(lid_a)));
    run();
    EXPECT_EQ(sm->counters().traps_refused, 1u);
    EXPECT_EQ(sm->counters().m_key_traps, 0u);
    EXPECT_EQ(log.size(), logged) << log.back();
    EXPECT_EQ(a.port.sma().counters().trap_represses, 0u);
    EXPECT_EQ(a.port.sma().counters().dropped_for(transport::SmaDrop::m_key_mismatch), 0u);
    // Its own traps are taken (and repressed) as before.
    ASSERT_TRUE(evil.port.core().transmit_raw(trap_from(lid_evil)));
    run();
    EXPECT_EQ(sm->counters().traps_refused, 1u);
    EXPECT_EQ(sm->counters().m_key_traps, 1u);
    EXPECT_EQ(evil.port.sma().counters().trap_represses, 1u);
}

// A port's SMA sends at most one Trap 256 a second; a port sending more
// gets one log line a second, the rest counted (and each repressed).
TEST_F(FabricTest, TheSmLogsAPortsTrapsAtMostOnceASecond) {
    std::vector<std::string> log;
    sm = std::make_unique<SubnetManager>(sm_config, *sw, [&](const std::string& l) { log.push_back(l); });
    sw->set_management(sm.get());
    Ca evil(net, 1, 0xE1);
    plug(evil);
    const std::uint16_t lid = evil.port.core().attributes().lid;
    ib::SmpNotice notice;
    notice.type = ib::trap::type_security;
    notice.producer_type = ib::trap::producer_channel_adapter;
    notice.trap_number = ib::trap::bad_m_key;
    notice.issuer_lid = lid;
    ib::Smp trap;
    trap.mgmt_class = ib::mgmt_class::subn_lid_routed;
    trap.method = ib::method::trap;
    trap.attribute_id = ib::smp_attr::notice;
    notice.write_to(trap.data.data());
    std::array<std::uint8_t, ib::kMadSize> mad{};
    trap.write_to(mad.data());
    const auto count_logged = [&] {
        return std::count_if(log.begin(), log.end(), [](const std::string& l) { return l.find("Trap 256") != l.npos; });
    };
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(evil.port.core().transmit_raw(test::forged_packet(lid, sw->lid(), ib::kQp0, 0, mad)));
    run();
    EXPECT_EQ(sm->counters().m_key_traps, 100u);
    EXPECT_EQ(sm->counters().m_key_traps_unlogged, 99u);
    EXPECT_EQ(count_logged(), 1);
    advance(std::chrono::milliseconds(1000));
    ASSERT_TRUE(evil.port.core().transmit_raw(test::forged_packet(lid, sw->lid(), ib::kQp0, 0, mad)));
    run();
    EXPECT_EQ(count_logged(), 2);
    EXPECT_EQ(sm->counters().m_key_traps_unlogged, 99u);
}

// An SM that lost the keys (a restart with another secret) cannot Set the
// ports until their leases run out; then it reads the keys (protect bits 0)
// and takes them back, with a client reregister.
TEST_F(FabricTest, AnSmThatLostTheKeysTakesThePortsBackAfterTheLease) {
    sm_config.m_key.lease_seconds = 3;
    sm_config.m_key.secret.bytes[0] = 1;
    start_fabric();
    Ca a(net, 1, 0xA1);
    plug(a);
    const std::uint64_t old_key = a.port.sma().port_info().m_key;
    a.events();
    sm_config.m_key.secret.bytes[0] = 2;  // the new SM's keys are others
    start_fabric();
    plug(a);
    advance(std::chrono::milliseconds(1200));  // the Set's retries
    EXPECT_NE(sm->ports().at(1).phase, SmPortPhase::active);
    EXPECT_GE(sm->counters().sets_unanswered, 1u);
    EXPECT_EQ(a.port.sma().port_info().m_key, old_key);
    // The lease (3 s from the first refused Set) runs out; the next sweep's
    // Get shows the key.
    advance(std::chrono::milliseconds(4000));
    EXPECT_EQ(sm->ports().at(1).phase, SmPortPhase::active);
    EXPECT_NE(a.port.sma().port_info().m_key, old_key);
    EXPECT_EQ(a.port.sma().port_info().m_key_protect_bits, 1);
    EXPECT_EQ(a.port.sma().counters().m_key_lease_expiries, 1u);
    EXPECT_TRUE(has(a.events(), PortEvent::client_reregister));
}

// ---------------------------------------------------------------------------
// The fabric key: ports with the fabric's key come up and talk; others are
// refused by the switch; keys rotate without dropping anything.

FabricKeys key_set(std::initializer_list<std::uint8_t> fills) {
    FabricKeys k;
    for (auto f : fills) {
        Secret s;
        s.bytes.fill(f);
        k.keys.push_back(s);
    }
    return k;
}

// A FabricService on loopback and soft ports of it, run by hand: the
// harness of the fabric key, fault and RC tests.
struct Loopback {
    std::unique_ptr<FabricService> fabric;
    std::vector<std::unique_ptr<transport::SoftPort>> ports;
    Clock::time_point next_tick = Clock::now();

    explicit Loopback(FabricServiceOptions options) {
        auto opened = FabricService::open(std::move(options));
        EXPECT_TRUE(opened) << opened.error();
        if (opened) fabric = std::move(*opened);
    }
    transport::SoftPort& add(std::uint64_t guid, std::optional<FabricKeys> keys = std::nullopt) {
        auto p = transport::SoftPort::open({.fabric = fabric->local_address(),
                                            .bind_to = *parse_socket_address("127.0.0.1:0"),
                                            .port_guid = guid,
                                            .link_interval = std::chrono::milliseconds(10),
                                            .link_timeout_intervals = kTestLinkTimeoutIntervals,
                                            .keys = std::move(keys)});
        EXPECT_TRUE(p) << p.error().message();
        ports.push_back(std::move(*p));
        return *ports.back();
    }
    void pump() {
        std::vector<pollfd> fds{{.fd = fabric->fd(), .events = POLLIN}};
        for (const auto& p : ports) fds.push_back({.fd = p->fd(), .events = POLLIN});
        ASSERT_GE(::poll(fds.data(), fds.size(), 1), 0);
        const auto now = Clock::now();
        if (fds[0].revents & POLLIN) fabric->on_readable(now);
        if (now >= next_tick) {
            fabric->tick(now);
            next_tick = now + FabricService::kTickInterval;
        }
        fabric->after_wakeup(now);
        for (const auto& p : ports) p->process();
    }
    template <class Done>
    bool until(Done done, std::chrono::seconds limit = std::chrono::seconds(20)) {
        const auto give_up = Clock::now() + limit;
        while (!done() && Clock::now() < give_up) pump();
        return done();
    }
    bool all_active(std::size_t n) {
        return until([&] {
            return std::all_of(ports.begin(), ports.begin() + static_cast<std::ptrdiff_t>(n),
                               [](const auto& p) { return p->attributes().state == PortState::active; });
        });
    }
};

TEST(FabricKey, PortsWithTheKeyComeUpAndTalkOthersAreRefused) {
    auto options = loopback_options();
    options.keys = key_set({1});
    Loopback net(std::move(options));
    ASSERT_TRUE(net.fabric);
    FabricService& fabric = *net.fabric;
    transport::SoftPort* a = &net.add(0xA1, key_set({1}));
    transport::SoftPort* b = &net.add(0xB2, key_set({1}));
    transport::SoftPort* wrong = &net.add(0xC3, key_set({2}));
    transport::SoftPort* none = &net.add(0xD4);
    const auto pump = [&] { net.pump(); };
    const auto until = [&](auto done) { return net.until(done, std::chrono::seconds(10)); };
    ASSERT_TRUE(net.all_active(2));
    for (int i = 0; i < 30; ++i) pump();
    EXPECT_EQ(wrong->attributes().state, PortState::down);  // not even a link
    EXPECT_EQ(none->attributes().state, PortState::down);
    const auto& drops = fabric.auth()->counters().dropped;
    EXPECT_GT(drops[static_cast<std::size_t>(transport::AuthDrop::unknown_key)], 0u);
    EXPECT_EQ(fabric.subnet_manager().ports().size(), 2u);

    // Unicast A -> B, then the keys rotate (both, then the new one first,
    // then the new one only) while it flows.
    auto qa = *a->create_ud_qp({.qkey = 7});
    auto qb = *b->create_ud_qp({.qkey = 7, .receive_depth = 64});
    std::vector<std::vector<std::uint8_t>> buffers(64, std::vector<std::uint8_t>(transport::kGrhSlotSize + 64));
    for (std::size_t i = 0; i < buffers.size(); ++i) {
        const transport::ReceiveBuffer rb{.wr_id = i, .buffer = buffers[i]};
        ASSERT_EQ(qb->post_receive({&rb, 1}).value_or(0), 1u);
    }
    std::size_t received = 0;
    const auto send_and_receive = [&](int n) {
        const std::array<std::uint8_t, 4> payload{1, 2, 3, 4};
        for (int i = 0; i < n; ++i) {
            const transport::SendRequest r{.wr_id = 1, .ah = {.dlid = b->attributes().lid}, .remote_qpn = qb->qpn(),
                                           .remote_qkey = 7, .payload = payload};
            ASSERT_EQ(qa->post_send({&r, 1}).value_or(0), 1u);
            const std::size_t want = received + 1;
            ASSERT_TRUE(until([&] {
                transport::Completion wc[8];
                for (std::size_t k = 0, m = qb->poll(wc); k < m; ++k) {
                    received += wc[k].kind == transport::CompletionKind::receive;
                    const transport::ReceiveBuffer rb{.wr_id = wc[k].wr_id, .buffer = buffers[wc[k].wr_id]};
                    (void)qb->post_receive({&rb, 1});
                }
                return received >= want;
            }));
        }
    };
    send_and_receive(5);
    for (const auto& step : {key_set({1, 3}), key_set({3, 1}), key_set({3})}) {
        ASSERT_TRUE(fabric.set_fabric_keys(step));
        ASSERT_TRUE(a->set_fabric_keys(step));
        ASSERT_TRUE(b->set_fabric_keys(step));
        send_and_receive(5);
    }
    EXPECT_EQ(received, 20u);
    EXPECT_EQ(a->attributes().state, PortState::active);
    EXPECT_EQ(fabric.auth()->counters().key_rotations, 3u);
    EXPECT_NE(fabric.stats().find("auth: sealed"), std::string::npos);
}

// Faults through a FabricService on loopback: of 400 datagrams A sends to
// B, the switch loses about 30% and counts each; B receives the rest.
TEST(FabricFaults, LossThroughTheServiceIsCountedAndTheRestArrives) {
    auto options = loopback_options();
    options.sw.faults = {*parse_fault_rule("loss=30%")};
    options.sw.fault_seed = 42;
    Loopback net(std::move(options));
    ASSERT_TRUE(net.fabric);
    FabricService& fabric = *net.fabric;
    transport::SoftPort* a = &net.add(0xA1);
    transport::SoftPort* b = &net.add(0xB2);
    const auto pump = [&] { net.pump(); };
    const auto until = [&](auto done, std::chrono::seconds limit = std::chrono::seconds(20)) {
        return net.until(done, limit);
    };
    // The SM's SMPs meet the loss too: it retries until both are ACTIVE.
    ASSERT_TRUE(net.all_active(2));
    auto qa = *a->create_ud_qp({.qkey = 7});
    auto qb = *b->create_ud_qp({.qkey = 7, .receive_depth = 512});
    std::vector<std::vector<std::uint8_t>> buffers(512, std::vector<std::uint8_t>(transport::kGrhSlotSize + 64));
    for (std::size_t i = 0; i < buffers.size(); ++i) {
        const transport::ReceiveBuffer rb{.wr_id = i, .buffer = buffers[i]};
        ASSERT_EQ(qb->post_receive({&rb, 1}).value_or(0), 1u);
    }
    const auto lost_before = fabric.fabric_switch().faults().counters().lost;
    const std::array<std::uint8_t, 8> payload{};
    std::size_t received = 0;
    for (int i = 0; i < 400; ++i) {
        const transport::SendRequest r{.wr_id = 1, .ah = {.dlid = b->attributes().lid}, .remote_qpn = qb->qpn(),
                                       .remote_qkey = 7, .payload = payload};
        ASSERT_EQ(qa->post_send({&r, 1}).value_or(0), 1u);
        transport::Completion sent[16];
        while (qa->poll(sent) > 0) {
        }
        if (i % 8 == 7) pump();
    }
    const auto settled = [&] {
        transport::Completion wc[64];
        for (std::size_t k = 0, n = qb->poll(wc); k < n; ++k) received += wc[k].kind == transport::CompletionKind::receive;
        return received + (fabric.fabric_switch().faults().counters().lost - lost_before) >= 400;
    };
    ASSERT_TRUE(until(settled, std::chrono::seconds(10)));
    const auto lost = fabric.fabric_switch().faults().counters().lost - lost_before;
    EXPECT_EQ(received + lost, 400u);
    EXPECT_GT(lost, 80u);   // 30% of 400 = 120
    EXPECT_LT(lost, 160u);
    EXPECT_EQ(a->cut_through_counters().direct_tx, 0u) << "no cut-through past the faults";
    EXPECT_NE(fabric.stats().find("faults: lost "), std::string::npos);
}

// RC between two soft ports through a FabricService on loopback: SEND,
// WRITE with immediate data and READ, every message intact, byte exact
// through the switch (and by cut-through); then again with 5% loss and 1%
// duplication injected by the switch.
namespace rc = transport::rc;

void rc_through_the_fabric(std::vector<FaultRule> faults, std::size_t messages) {
    auto options = loopback_options();
    options.sw.faults = std::move(faults);
    Loopback net(std::move(options));
    ASSERT_TRUE(net.fabric);
    FabricService& fabric = *net.fabric;
    transport::SoftPort* a = &net.add(0xA1);
    transport::SoftPort* b = &net.add(0xB2);
    const auto until = [&](auto done, std::chrono::seconds limit) { return net.until(done, limit); };
    ASSERT_TRUE(net.all_active(2));
    auto qa = *a->create_rc_qp(0);
    auto qb = *b->create_rc_qp(0);
    const rc::RtsAttributes rts{.timeout = 12, .retry_count = 7, .rnr_retry = 7};  // 16 ms
    ASSERT_TRUE(qa->connect(b->attributes().lid, {.dest_qpn = qb->qpn(), .pmtu = 1024}, rts));
    ASSERT_TRUE(qb->connect(a->attributes().lid, {.dest_qpn = qa->qpn(), .pmtu = 1024}, rts));
    std::vector<std::uint8_t> window(messages * 4096), source(messages * 4096);
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::uint8_t>(i * 13);
    const auto w = *b->register_memory(window, rc::access::remote_write);
    const auto r = *b->register_memory(source, rc::access::remote_read);
    // The READs land in memory registered for local write.
    std::vector<std::uint8_t> read_memory(messages * 4096);
    ASSERT_TRUE(a->register_memory(read_memory, rc::access::local_write));
    std::vector<std::span<std::uint8_t>> reads(messages);
    for (std::size_t i = 0; i < messages; ++i) ASSERT_TRUE(qb->post_recv({.wr_id = i, .capacity = 4096}));
    const auto body = [](std::size_t i) {
        std::vector<std::uint8_t> m(1 + (i * 211) % 4000);
        for (std::size_t k = 0; k < m.size(); ++k) m[k] = static_cast<std::uint8_t>(i + k);
        return m;
    };
    for (std::size_t i = 0; i < messages; ++i) {
        if (i % 3 == 0) {
            ASSERT_TRUE(qa->post_send({.wr_id = i, .payload = body(i)}));
        } else if (i % 3 == 1) {
            ASSERT_TRUE(qa->post_send({.wr_id = i, .payload = body(i), .imm = static_cast<std::uint32_t>(i),
                                       .opcode = rc::WrOpcode::rdma_write, .remote_va = w.va + i * 4096, .rkey = w.rkey}));
        } else {
            reads[i] = std::span(read_memory).subspan(i * 4096, body(i).size());
            ASSERT_TRUE(qa->post_send({.wr_id = i, .opcode = rc::WrOpcode::rdma_read, .remote_va = r.va + i * 4096,
                                       .rkey = r.rkey, .read_into = reads[i]}));
        }
    }
    std::vector<rc::Completion> done_a, done_b;
    ASSERT_TRUE(until([&] {
        for (auto& c : qa->poll()) done_a.push_back(std::move(c));
        for (auto& c : qb->poll()) done_b.push_back(std::move(c));
        return done_a.size() == messages;
    }, std::chrono::seconds(60))) << done_a.size() << " of " << messages;
    for (std::size_t i = 0; i < messages; ++i) {
        ASSERT_EQ(done_a[i].wr_id, i);
        ASSERT_EQ(done_a[i].status, rc::Status::success) << i << ": " << rc::to_string(done_a[i].status) << " " << [&] {
            std::string out;
            struct S final : CounterSink {
                std::string& o;
                explicit S(std::string& x) : o(x) {}
                void counter(std::string_view n, std::uint64_t v) override {
                    if (v) o += std::string(n) + "=" + std::to_string(v) + " ";
                }
            } sink(out);
            visit(b->core().counters(), sink);
            out += "| ";
            visit(qa->counters(), sink);
            out += "| ";
            visit(qb->counters(), sink);
            return out;
        }();
        if (i % 3 == 1) {
            const auto m = body(i);
            EXPECT_TRUE(std::equal(m.begin(), m.end(), window.begin() + static_cast<std::ptrdiff_t>(i * 4096))) << i;
        }
        if (i % 3 == 2) {
            EXPECT_TRUE(std::equal(reads[i].begin(), reads[i].end(), source.begin() + static_cast<std::ptrdiff_t>(i * 4096)))
                << i;
        }
    }
    std::size_t n = 0;
    for (std::size_t i = 0; i < messages; ++i) {
        if (i % 3 == 2) continue;
        ASSERT_LT(n, done_b.size());
        const rc::Completion& c = done_b[n++];
        ASSERT_EQ(c.status, rc::Status::success);
        if (i % 3 == 0) {
            EXPECT_EQ(c.data, body(i)) << i;
        } else {
            EXPECT_EQ(c.imm, std::optional<std::uint32_t>(static_cast<std::uint32_t>(i)));
        }
    }
    if (!fabric.fabric_switch().faults().active()) {
        // (No claim about retransmissions here: a slow build can see a
        // local ACK timeout expire with nothing lost.)
        // A third port speaking RC to B's QP: not its peer, dropped.
        transport::SoftPort* c = &net.add(0xC3);
        ASSERT_TRUE(net.all_active(3));
        const auto forged = rc::encode_rc_packet(
            rc::RcPacket{.opcode = ib::op::rc_send_only, .dest_qp = qb->qpn(), .psn = qb->engine()->expected_psn(),
                         .ack_req = true, .payload = std::vector<std::uint8_t>(8, 0x66)},
            {.slid = c->attributes().lid, .dlid = b->attributes().lid});
        ASSERT_TRUE(forged);
        ASSERT_TRUE(c->send_raw(*forged));
        const auto dropped = [&] {
            return b->core().counters().undelivered[static_cast<std::size_t>(transport::DeliveryDrop::rc_not_connected)];
        };
        ASSERT_TRUE(until([&] { return dropped() == 1; }, std::chrono::seconds(5)));
        EXPECT_EQ(qb->counters().messages_received, done_b.size());
    } else {
        EXPECT_GT(fabric.fabric_switch().faults().counters().lost, 0u);
        EXPECT_GT(qa->counters().retransmitted, 0u);
    }
}

TEST(RcSoft, SendWriteAndReadThroughTheFabric) { rc_through_the_fabric({}, 60); }
TEST(RcSoft, NothingIsLostOverALossyFabric) {
    rc_through_the_fabric({*parse_fault_rule("loss=5%,dup=1%")}, 90);
}

TEST(RcSoft, MemoryRulesOfThePort) {
    Loopback net(loopback_options());
    ASSERT_TRUE(net.fabric);
    transport::SoftPort& a = net.add(0xA1);
    transport::SoftPort& b = net.add(0xB2);
    ASSERT_TRUE(net.all_active(2));
    auto qa = *a.create_rc_qp(0);
    auto qb = *b.create_rc_qp(0);
    ASSERT_TRUE(qa->connect(b.attributes().lid, {.dest_qpn = qb->qpn()}, {}));
    std::vector<std::uint8_t> unregistered(64), readable(64), local(64);
    // A READ must land in registered memory with local write.
    auto r = qa->post_send({.wr_id = 1, .opcode = rc::WrOpcode::rdma_read, .remote_va = 0, .rkey = 1,
                            .read_into = unregistered});
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("not in a region registered"), std::string::npos) << r.error();
    const auto ro = *a.register_memory(readable, rc::access::remote_read);
    EXPECT_FALSE(qa->post_send({.wr_id = 2, .opcode = rc::WrOpcode::rdma_read, .rkey = 1, .read_into = readable}));
    ASSERT_TRUE(a.register_memory(local, rc::access::local_write));
    EXPECT_TRUE(qa->post_send({.wr_id = 3, .opcode = rc::WrOpcode::rdma_read, .rkey = 1, .read_into = local}));
    // Registration refuses what it cannot mean; deregistration what is not there.
    EXPECT_FALSE(a.register_memory({}, rc::access::remote_read));
    EXPECT_FALSE(a.register_memory(readable, 0x100));
    EXPECT_TRUE(a.deregister_memory(ro.rkey));
    EXPECT_FALSE(a.deregister_memory(ro.rkey));
    EXPECT_EQ(qa->state(), rc::QpState::rts);
    EXPECT_EQ(qb->state(), rc::QpState::init) << "a new QP is in INIT";
    EXPECT_TRUE(qb->post_recv({.wr_id = 1, .capacity = 64})) << "receives may be posted before connect()";
}

// The responder's QP goes away: the requester's work request ends with
// retry exceeded and its QP in ERR, while another connection between the
// same ports carries on.
TEST(RcSoft, RetryExceededLeavesThePortServing) {
    Loopback net(loopback_options());
    ASSERT_TRUE(net.fabric);
    transport::SoftPort& a = net.add(0xA1);
    transport::SoftPort& b = net.add(0xB2);
    ASSERT_TRUE(net.all_active(2));
    auto lost_a = *a.create_rc_qp(0);
    auto lost_b = *b.create_rc_qp(0);
    auto kept_a = *a.create_rc_qp(0);
    auto kept_b = *b.create_rc_qp(0);
    const rc::RtsAttributes quick{.timeout = 8, .retry_count = 2, .rnr_retry = 7};  // 1 ms
    ASSERT_TRUE(lost_a->connect(b.attributes().lid, {.dest_qpn = lost_b->qpn()}, quick));
    ASSERT_TRUE(lost_b->connect(a.attributes().lid, {.dest_qpn = lost_a->qpn()}, quick));
    ASSERT_TRUE(kept_a->connect(b.attributes().lid, {.dest_qpn = kept_b->qpn()}, quick));
    ASSERT_TRUE(kept_b->connect(a.attributes().lid, {.dest_qpn = kept_a->qpn()}, quick));
    lost_b.reset();
    ASSERT_TRUE(lost_a->post_send({.wr_id = 7, .payload = std::vector<std::uint8_t>(100, 1)}));
    ASSERT_TRUE(lost_a->post_send({.wr_id = 8, .payload = std::vector<std::uint8_t>(100, 2)}));
    std::vector<rc::Completion> done;
    ASSERT_TRUE(net.until([&] {
        for (auto& c : lost_a->poll()) done.push_back(std::move(c));
        return done.size() == 2;
    }, std::chrono::seconds(10)));
    EXPECT_EQ(done[0].wr_id, 7u);
    EXPECT_EQ(done[0].status, rc::Status::retry_exceeded);
    EXPECT_EQ(done[1].status, rc::Status::flushed);
    EXPECT_EQ(lost_a->state(), rc::QpState::err);
    EXPECT_EQ(lost_a->counters().timeouts, 3u);  // the first send and its 2 retries
    EXPECT_GT(b.counters().undelivered[static_cast<std::size_t>(transport::DeliveryDrop::unknown_qp)], 0u);
    ASSERT_TRUE(kept_b->post_recv({.wr_id = 1, .capacity = 256}));
    ASSERT_TRUE(kept_a->post_send({.wr_id = 9, .payload = std::vector<std::uint8_t>(200, 3)}));
    std::vector<rc::Completion> kept;
    ASSERT_TRUE(net.until([&] {
        for (auto& c : kept_a->poll()) kept.push_back(std::move(c));
        for (auto& c : kept_b->poll()) kept.push_back(std::move(c));
        return kept.size() == 2;
    }, std::chrono::seconds(10)));
    for (const auto& c : kept) EXPECT_EQ(c.status, rc::Status::success);
    EXPECT_EQ(kept_a->state(), rc::QpState::rts);
    EXPECT_EQ(a.attributes().state, transport::PortState::active);
}

TEST(SoftPortOpen, RefusesAConfigurationItCannotRun) {
    const transport::SoftPortConfig good{.fabric = *parse_socket_address("127.0.0.1:9"),
                                         .bind_to = *parse_socket_address("127.0.0.1:0"),
                                         .port_guid = 0x1234};
    ASSERT_TRUE(transport::SoftPort::open(good));
    auto no_guid = good;
    no_guid.port_guid = 0;
    auto no_budget = good;
    no_budget.receive_budget = 0;
    auto no_interval = good;
    no_interval.link_interval = std::chrono::milliseconds(0);
    for (const auto& bad : {no_guid, no_budget, no_interval}) {
        auto r = transport::SoftPort::open(bad);
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error().code, transport::Errc::invalid_argument) << r.error().message();
    }
}
}  // namespace
}  // namespace ipoibd::fabric
