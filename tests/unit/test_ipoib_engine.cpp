// The IPoIB engine with a fake clock, the in-memory transport and a
// scripted SA (engine_harness.h): every rule of issue #5's "Done when".
#include <gtest/gtest.h>

#include <algorithm>

#include "engine_harness.h"
#include "ipoib/link.h"
#include "transport/gid.h"
#include "sa_client/sa_mad.h"
#include "transport/wire/mad.h"

namespace ipoibd::ipoib::test {
namespace {

using sa::sa_attr::mc_member_record;
using sa::sa_attr::path_record;

bool contains(const std::vector<Packet>& v, const Packet& p) { return std::find(v.begin(), v.end(), p) != v.end(); }

// Two hosts A (198.18.0.1, 2001:db8::1) and B (198.18.0.2, 2001:db8::2), up.
struct Pair : ::testing::Test {
    World w;
    Host* a = nullptr;
    Host* b = nullptr;

    void SetUp() override {
        a = &w.add_host();
        b = &w.add_host();
        a->add_address("198.18.0.1/24");
        a->add_address("2001:db8::1/64");
        b->add_address("198.18.0.2/24");
        b->add_address("2001:db8::2/64");
        a->start();
        b->start();
        w.advance(2s);  // joins, DAD
    }

    // A resolves B (ARP), then forgets its path; the SA holds path answers
    // until released.
    void resolve_b_then_hold_paths() {
        a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
        w.pump();
        a->engine.flush_paths(w.now);
        w.sa.hold_paths = true;
        b->tun.clear();
    }
};

TEST_F(Pair, BroadcastJoinBringsTheLinkUpWithGroupParameters) {
    for (Host* h : {a, b}) {
        ASSERT_TRUE(h->engine.link().up);
        EXPECT_EQ(h->engine.link().mtu, 2044u);  // 2048-byte group less the 4-byte header
        EXPECT_EQ(h->engine.link().params.qkey, kTestQkey);
        EXPECT_NE(h->engine.link().qpn, 0u);
        EXPECT_EQ(h->engine.link().hw.gid, h->port->attributes().gid());
        EXPECT_EQ(h->count_events(EngineEventKind::link_up), 1u);
    }
    // all-hosts, all-nodes and the solicited-node groups were FullMember-joined.
    const auto all_nodes = *ipv6_group_mgid(kIpv6AllNodes, 0xFFFF);
    ASSERT_TRUE(w.sa.groups.count(all_nodes));
    EXPECT_EQ(w.sa.groups[all_nodes].members[a->port->attributes().gid()], sa::join_state::full_member);
    // DAD finished: every address preferred.
    for (const auto& v : a->engine.addresses()) EXPECT_EQ(v.dad, DadState::preferred) << format_interface_address(v.address);
}

TEST_F(Pair, ArpResolvesInBothDirectionsAndPingCrosses) {
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    a->from_host(ping);
    w.pump();
    ASSERT_TRUE(contains(b->tun, ping));
    EXPECT_EQ(a->engine.counters().arp_requests_tx, 1u);
    EXPECT_EQ(b->engine.counters().arp_replies_tx, 1u);
    // B learned A from the request: its answer needs no ARP of its own.
    const Packet pong = icmp_echo_v4("198.18.0.2", "198.18.0.1", 1);
    b->from_host(pong);
    w.pump();
    ASSERT_TRUE(contains(a->tun, pong));
    EXPECT_EQ(b->engine.counters().arp_requests_tx, 0u);
    const auto na = a->engine.neighbours().find(ip("198.18.0.2"));
    ASSERT_TRUE(na && na->hw);
    EXPECT_EQ(na->hw->qpn, b->engine.link().qpn);
    EXPECT_EQ(na->hw->gid, b->port->attributes().gid());
    // The ARP request on the wire: hardware type 32, length 20, to the broadcast group.
    const auto req = std::find_if(a->sent.begin(), a->sent.end(), [](const SentFrame& f) {
        return f.frame.size() >= 4 && load_be16(f.frame.data()) == 0x0806;
    });
    ASSERT_NE(req, a->sent.end());
    EXPECT_EQ(load_be16(req->frame.data() + 4), 32);
    EXPECT_EQ(req->frame[4 + 4], 20);
    EXPECT_EQ(req->remote_qpn, ib::kQpnMulticast);
    ASSERT_TRUE(req->ah.grh);
    EXPECT_EQ(req->ah.grh->dgid, broadcast_mgid(0xFFFF));
}

TEST_F(Pair, NdCarriesTheLongOptionWithAValidChecksum) {
    const Packet ping = icmp_echo_v6("2001:db8::1", "2001:db8::2", 7);
    a->from_host(ping);
    w.pump();
    ASSERT_TRUE(contains(b->tun, ping));
    const Packet pong = icmp_echo_v6("2001:db8::2", "2001:db8::1", 7);
    b->from_host(pong);
    w.pump();
    ASSERT_TRUE(contains(a->tun, pong));
    // The NS A sent: parse_nd checks the checksum and the option length 3.
    bool seen_ns = false, seen_na = false;
    for (const Host* h : {a, b})
        for (const SentFrame& f : h->sent) {
            if (h == b && f.frame.size() > 4 + 8 && f.frame[4 + 6] == kNextHeaderIcmpv6 && f.frame[4 + 40] == 135)
                continue;  // B's own solicitations (DAD) are not the one we look for
            if (load_be16(f.frame.data()) != 0x86DD) continue;
            auto m = parse_nd(bytes(f.frame).subspan(4));
            if (!m) continue;
            if (m->type == NdType::neighbor_solicitation && m->target == *parse_ipv6("2001:db8::2")) {
                seen_ns = true;
                ASSERT_TRUE(m->source_lla);
                EXPECT_EQ(m->source_lla->qpn, a->engine.link().qpn);
                // The option bytes: type 1, length 3 (24 octets), two zero octets, the address.
                const std::size_t opt = 4 + m->icmp_offset + 24;
                EXPECT_EQ(f.frame[opt], 1);
                EXPECT_EQ(f.frame[opt + 1], 3);
                EXPECT_EQ(f.frame[opt + 2], 0);
                EXPECT_EQ(f.frame[opt + 3], 0);
            }
            if (m->type == NdType::neighbor_advertisement && m->solicited) {
                seen_na = true;
                ASSERT_TRUE(m->target_lla);
                EXPECT_EQ(m->target_lla->qpn, b->engine.link().qpn);
            }
        }
    EXPECT_TRUE(seen_ns);
    EXPECT_TRUE(seen_na);
    EXPECT_EQ(b->engine.counters().rx_nd_errors, decltype(b->engine.counters().rx_nd_errors){});
}

TEST_F(Pair, PacketsWaitForThePathThenFlushAndOverflowIsCounted) {
    resolve_b_then_hold_paths();
    std::vector<Packet> sent;
    for (std::uint16_t i = 0; i < 5; ++i) {
        sent.push_back(icmp_echo_v4("198.18.0.1", "198.18.0.2", static_cast<std::uint16_t>(10 + i)));
        a->from_host(sent.back());
    }
    w.pump();
    EXPECT_TRUE(b->tun.empty());
    EXPECT_EQ(a->engine.paths().counters().drop_queue_full, 2u);
    // The answer arrives: the three queued packets go, in order.
    w.sa.hold_paths = false;
    for (const sa::SaMad& m : w.sa.release_held_paths()) w.pending.push_back({a, m});
    w.pump();
    ASSERT_EQ(b->tun.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(b->tun[i], sent[i]);
}

// Any port can write an SA answer (the TIDs are sequential): the engine
// takes one only from the port's SM LID, which the fabric vouches for. A
// forged PathRecord would send B's traffic to the forger.
TEST_F(Pair, APathAnswerFromAPortOtherThanTheSmIsDropped) {
    resolve_b_then_hold_paths();
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 2);
    a->from_host(ping);
    w.pump();
    const std::vector<sa::SaMad> held = w.sa.release_held_paths();
    ASSERT_EQ(held.size(), 1u);
    sa::SaMad forged = held[0];
    auto rec = sa::get_record<sa::PathRecord>(forged);
    rec.dlid = 0x77;  // the forger's LID
    ASSERT_TRUE(sa::put_record(rec, forged));
    std::array<std::uint8_t, sa::kSaMadSize> buf{};
    forged.write_to(buf.data());
    a->engine.on_sa_mad(buf, w.now, 0x77);
    EXPECT_FALSE(a->engine.paths().find(b->engine.link().hw.gid));
    EXPECT_EQ(a->engine.sa_client().counters().not_from_sm, 1u);
    // The SM's answer, from the SM's LID, resolves it.
    w.sa.hold_paths = false;
    held[0].write_to(buf.data());
    a->engine.on_sa_mad(buf, w.now, a->port->attributes().sm_lid);
    w.pump();
    const auto path = a->engine.paths().find(b->engine.link().hw.gid);
    ASSERT_TRUE(path);
    EXPECT_EQ(path->dlid, b->port->attributes().lid);
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, UnresolvedNeighbourQueuesThreeAndDropsTheRest) {
    w.sa.silent = true;  // nothing changes for ARP; keeps paths unanswered too
    for (std::uint16_t i = 0; i < 6; ++i) a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.77", i));
    w.pump();
    EXPECT_EQ(a->engine.neighbours().counters().drop_queue_full, 3u);
    // Nobody answers: after mcast_solicits tries the entry fails and the rest go, counted.
    w.advance(5s);
    EXPECT_EQ(a->engine.neighbours().counters().drop_unresolved, 3u);
    EXPECT_EQ(a->engine.counters().arp_requests_tx, 3u);
}

TEST_F(Pair, PeerRestartWithNewQpnHealsThroughItsAnnouncement) {
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    w.pump();
    const std::uint32_t old_qpn = b->engine.link().qpn;
    b = &w.restart_host(1);
    b->add_address("198.18.0.2/24");
    b->add_address("2001:db8::2/64");
    b->start();
    w.advance(2s);
    ASSERT_TRUE(b->engine.link().up);
    EXPECT_NE(b->engine.link().qpn, old_qpn);
    // B's gratuitous ARP updated A's entry: the next ping gets through.
    EXPECT_EQ(a->engine.counters().peer_changes, 1u);
    EXPECT_EQ(a->count_events(EngineEventKind::peer_changed), 1u);
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 2);
    a->from_host(ping);
    w.pump();
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, PeerRestartWithoutAnnouncementHealsByRevalidation) {
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    w.pump();
    const std::uint32_t old_qpn = b->engine.link().qpn;
    // B restarts and its announcements are lost: A keeps the old QPN.
    b = &w.restart_host(1);
    b->drop_outgoing = [](const SentFrame& f) { return load_be16(f.frame.data()) == 0x0806; };
    b->add_address("198.18.0.2/24");
    b->start();
    w.advance(2s);
    b->drop_outgoing = nullptr;
    ASSERT_NE(b->engine.link().qpn, old_qpn);
    EXPECT_EQ(a->engine.counters().peer_changes, 0u);
    // Only time passes now: A must reach B again with no operator action
    // (REACHABLE -> STALE -> DELAY -> PROBE fails -> FAILED -> resolved anew).
    bool reached = false;
    int seconds = 0;
    for (std::uint16_t i = 0; i < 120 && !reached; ++i, ++seconds) {
        const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", static_cast<std::uint16_t>(100 + i));
        a->from_host(ping);
        w.advance(1s);
        reached = contains(b->tun, ping);
    }
    EXPECT_TRUE(reached);
    EXPECT_LT(seconds, 60);
    EXPECT_GE(a->engine.neighbours().counters().probes, 1u);
    EXPECT_EQ(a->engine.neighbours().find(ip("198.18.0.2"))->hw->qpn, b->engine.link().qpn);
}

// Join MADs (Set MCMemberRecord) for `mgid` the SA saw, with their times.
std::vector<Clock::time_point> join_times(const ScriptedSa& sa, const ib::Gid& mgid) {
    std::vector<Clock::time_point> out;
    for (const auto& r : sa.requests)
        if (r.mad.header.attribute_id == mc_member_record && r.mad.header.method == ib::method::set &&
            sa::get_record<sa::McMemberRecord>(r.mad).mgid == mgid)
            out.push_back(r.at);
    return out;
}

TEST(Engine, SaTimeoutsAreRetriedWithTheBackoffSequence) {
    World w;
    EngineConfig cfg;
    // One SA try per join (no SaClient retries), 500 ms each.
    sa::SaClient::Config sac;
    sac.retries = 0;
    sac.timeout = 500ms;
    Host& h = *w.hosts.emplace_back(std::make_unique<Host>(w, cfg, transport::MemoryFabric::PortOptions{}, sac));
    w.sa.silent = true;
    h.start();
    w.advance(60s, 50ms);
    const auto times = join_times(w.sa, broadcast_mgid(0xFFFF));
    ASSERT_GE(times.size(), 7u);
    // Each try times out after 500 ms; the next comes 1, 2, 4, 8, 16, 16 s later.
    const std::vector<Clock::duration> gaps{1500ms, 2500ms, 4500ms, 8500ms, 16500ms};
    for (std::size_t i = 0; i < gaps.size(); ++i)
        EXPECT_EQ(times[i + 1] - times[i], gaps[i]) << "gap " << i;
    EXPECT_FALSE(h.engine.link().up);
    EXPECT_GE(h.count_events(EngineEventKind::broadcast_join_failed), 5u);
}

TEST(Engine, FailedBroadcastJoinKeepsTheLinkDownAndRetries) {
    World w;
    Host& h = w.add_host();
    h.add_address("198.18.0.1/24");
    w.sa.refuse_joins.insert(broadcast_mgid(0xFFFF));
    h.start();
    w.advance(3500ms);
    EXPECT_FALSE(h.engine.link().up);
    EXPECT_TRUE(h.link_changes.empty());
    EXPECT_EQ(join_times(w.sa, broadcast_mgid(0xFFFF)).size(), 3u);  // t=0, +1 s, +2 s
    // Nothing leaves a down link; the drop is counted.
    h.from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    EXPECT_EQ(h.engine.counters().tun_drop_link_down, 1u);
    // The SA recovers: the next retry (4 s later) brings the link up.
    w.sa.refuse_joins.clear();
    w.advance(5s);
    EXPECT_TRUE(h.engine.link().up);
    ASSERT_FALSE(h.link_changes.empty());
    EXPECT_TRUE(h.link_changes.back().up);
}

TEST_F(Pair, SendOnlyJoinThenTraffic) {
    // C listens on 239.1.2.3 (its host's IGMPv3 report through the TUN).
    Host& c = w.add_host();
    c.add_address("198.18.0.3/24");
    c.start();
    w.advance(2s);
    c.from_host(igmpv3_report("198.18.0.3", "239.1.2.3", true));
    w.pump();
    const auto mgid = *ipv4_group_mgid(*parse_ipv4("239.1.2.3"), 0xFFFF);
    ASSERT_TRUE(w.sa.groups.count(mgid));
    EXPECT_EQ(w.sa.groups[mgid].members[c.port->attributes().gid()], sa::join_state::full_member);
    // A sends to the group it is not in: a send-only join, then the frames.
    std::vector<Packet> sent;
    for (int i = 0; i < 3; ++i) {
        sent.push_back(udp_v4("198.18.0.1", "239.1.2.3", 100 + static_cast<std::size_t>(i)));
        a->from_host(sent.back());
    }
    w.pump();
    for (const Packet& p : sent) EXPECT_TRUE(contains(c.tun, p));
    EXPECT_EQ(w.sa.groups[mgid].members[a->port->attributes().gid()], sa::join_state::send_only_full_member);
    EXPECT_FALSE(contains(b->tun, sent[0]));  // B is not in the group
    // C leaves: its membership is gone.
    c.from_host(igmpv3_report("198.18.0.3", "239.1.2.3", false));
    w.pump();
    EXPECT_FALSE(w.sa.groups[mgid].members.count(c.port->attributes().gid()));
}

TEST_F(Pair, RepeatedHostReportsHoldOneMembershipThatOneLeaveEnds) {
    // The kernel sends each change two or three times, and current-state
    // records again when asked: one membership, and one leave ends it.
    const auto mgid = *ipv4_group_mgid(*parse_ipv4("239.1.2.3"), 0xFFFF);
    for (int i = 0; i < 3; ++i) a->from_host(igmpv3_report("198.18.0.1", "239.1.2.3", true));
    w.pump();
    ASSERT_TRUE(w.sa.groups.count(mgid));
    EXPECT_EQ(w.sa.groups[mgid].members[a->port->attributes().gid()], sa::join_state::full_member);
    EXPECT_EQ(a->engine.counters().host_group_joins, 1u);
    a->from_host(igmpv3_report("198.18.0.1", "239.1.2.3", false));
    w.pump();
    EXPECT_FALSE(w.sa.groups[mgid].members.count(a->port->attributes().gid()));
    EXPECT_FALSE(a->engine.multicast().is_joined(mgid));
    EXPECT_EQ(a->engine.counters().host_group_leaves, 1u);
    // A leave of a group the host never joined takes nothing: the engine's
    // own all-hosts membership stays.
    const auto all_hosts = *ipv4_group_mgid(*parse_ipv4("224.0.0.1"), 0xFFFF);
    a->from_host(igmpv3_report("198.18.0.1", "224.0.0.1", false));
    w.pump();
    EXPECT_EQ(w.sa.groups[all_hosts].members[a->port->attributes().gid()], sa::join_state::full_member);
    EXPECT_EQ(a->engine.counters().host_group_leaves, 1u);
    // The same for MLD.
    const auto v6 = *ipv6_group_mgid(ip("ff12::1:2").bytes, 0xFFFF);
    for (int i = 0; i < 2; ++i) a->from_host(mldv2_report("2001:db8::1", "ff12::1:2", true));
    w.pump();
    EXPECT_TRUE(a->engine.multicast().is_joined(v6));
    a->from_host(mldv2_report("2001:db8::1", "ff12::1:2", false));
    w.pump();
    EXPECT_FALSE(a->engine.multicast().is_joined(v6));
}

TEST(EngineHostGroups, AReportWhileTheLinkIsDownJoinsWhenItComesUp) {
    World w;
    w.sa.silent = true;  // no broadcast join yet: the link stays down
    Host& h = w.add_host();
    h.add_address("198.18.0.1/24");
    h.start();
    w.advance(1s);
    ASSERT_FALSE(h.engine.link().up);
    h.from_host(igmpv3_report("198.18.0.1", "239.1.2.3", true));
    EXPECT_EQ(h.engine.counters().tun_drop_link_down, 1u);  // the report itself goes nowhere
    w.sa.silent = false;
    w.advance(40s);
    ASSERT_TRUE(h.engine.link().up);
    const auto mgid = *ipv4_group_mgid(*parse_ipv4("239.1.2.3"), 0xFFFF);
    EXPECT_TRUE(h.engine.multicast().is_joined(mgid));
    EXPECT_EQ(w.sa.groups[mgid].members[h.port->attributes().gid()], sa::join_state::full_member);
}

TEST(EngineHostGroups, AJoinTheGroupTableRefusesIsCountedAndTakenWhenReportedAgain) {
    World w;
    EngineConfig cfg;
    // broadcast, all-hosts, all-nodes, the link-local solicited-node, the
    // reports' own 224.0.0.22 (send-only) and one more
    cfg.mcast.max_groups = 6;
    Host& h = w.add_host(cfg);
    h.add_address("198.18.0.1/24");
    h.start();
    w.advance(2s);
    ASSERT_TRUE(h.engine.link().up);
    h.from_host(igmpv3_report("198.18.0.1", "239.1.1.1", true));
    h.from_host(igmpv3_report("198.18.0.1", "239.1.1.2", true));
    w.pump();
    EXPECT_EQ(h.engine.counters().host_group_joins, 1u);
    EXPECT_EQ(h.engine.counters().host_groups_over_limit, 1u);
    const auto second = *ipv4_group_mgid(*parse_ipv4("239.1.1.2"), 0xFFFF);
    EXPECT_FALSE(h.engine.multicast().is_joined(second));
    // Room again: the next report of the refused group joins it.
    h.from_host(igmpv3_report("198.18.0.1", "239.1.1.1", false));
    h.from_host(igmpv3_report("198.18.0.1", "239.1.1.2", true));
    w.pump();
    EXPECT_TRUE(h.engine.multicast().is_joined(second));
    EXPECT_EQ(h.engine.counters().host_group_joins, 2u);
}

TEST_F(Pair, SendOnlyQueueHoldsSixtyFour) {
    w.sa.silent = true;
    for (int i = 0; i < 70; ++i) a->from_host(udp_v4("198.18.0.1", "239.9.9.9"));
    w.pump();
    EXPECT_EQ(a->engine.multicast().counters().drop_queue_full, 6u);
}

TEST_F(Pair, UnjoinableGroupGoesToAllRoutersWhenWiderThanLinkLocal) {
    // Send-only non-member joins cannot create a group (OpenSM's rule).
    World w2;
    EngineConfig cfg;
    cfg.mcast.send_only_join_state = sa::join_state::send_only_non_member;
    Host& s = w2.add_host(cfg);
    Host& r = w2.add_host();
    s.add_address("198.18.0.1/24");
    r.add_address("198.18.0.2/24");
    s.start();
    r.start();
    w2.advance(2s);
    // R is a router: it listens on all-routers.
    r.from_host(igmpv3_report("198.18.0.2", "224.0.0.2", true));
    w2.pump();
    const Packet global = udp_v4("198.18.0.1", "239.7.7.7");
    s.from_host(global);
    w2.pump();  // the join fails: backoff
    s.from_host(global);
    w2.pump();
    EXPECT_TRUE(contains(r.tun, global));
    EXPECT_EQ(s.engine.counters().tx_to_all_routers, 1u);
    // A link-local group that does not exist is dropped.
    const Packet local = udp_v4("198.18.0.1", "224.0.0.99");
    s.from_host(local);
    w2.pump();
    s.from_host(local);
    w2.pump();
    EXPECT_EQ(s.engine.counters().tun_drop_mcast_unavailable, 1u);
}

TEST_F(Pair, Ipv6MulticastFollowsMldReports) {
    b->from_host(mldv2_report("2001:db8::2", "ff05::1:3", true));
    w.pump();
    const auto mgid = *ipv6_group_mgid(*parse_ipv6("ff05::1:3"), 0xFFFF);
    ASSERT_TRUE(w.sa.groups.count(mgid));
    EXPECT_EQ(w.sa.groups[mgid].members[b->port->attributes().gid()], sa::join_state::full_member);
}

TEST_F(Pair, ClientReregisterRejoinsEveryGroup) {
    const std::size_t groups = a->engine.multicast().groups().size();
    const std::size_t before = w.sa.count(mc_member_record, ib::method::set);
    a->port->core().raise(transport::PortEvent::client_reregister);
    transport::PortEvent ev[4];
    const std::size_t n = a->port->poll_events(ev);
    ASSERT_EQ(n, 1u);
    a->engine.on_port_event(ev[0], a->port->attributes(), w.now);
    w.pump();
    EXPECT_EQ(w.sa.count(mc_member_record, ib::method::set) - before, groups);
    EXPECT_TRUE(a->engine.link().up);
    // Traffic still flows.
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 3);
    a->from_host(ping);
    w.pump();
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, LidChangeFlushesPathsAndRejoins) {
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    w.pump();
    ASSERT_EQ(a->engine.paths().size(), 1u);
    const std::size_t before = w.sa.count(mc_member_record, ib::method::set);
    a->engine.on_port_event(transport::PortEvent::lid_change, a->port->attributes(), w.now);
    EXPECT_EQ(a->engine.paths().size(), 0u);
    EXPECT_EQ(a->engine.paths().counters().flushes, 1u);
    w.pump();
    EXPECT_GT(w.sa.count(mc_member_record, ib::method::set), before);
    // The path is queried again on the next packet.
    const std::size_t paths_before = w.sa.count(path_record, ib::method::get);
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 2);
    a->from_host(ping);
    w.pump();
    EXPECT_EQ(w.sa.count(path_record, ib::method::get), paths_before + 1);
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, ArpFromANewLidRequeriesThePath) {
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    w.pump();
    const std::size_t before = w.sa.count(path_record, ib::method::get);
    // B's gratuitous ARP seen from another SLID (B moved).
    ReceivedDatagram d;
    Packet frame(4 + ArpPacket::size);
    store_be16(frame.data(), 0x0806);
    (void)encode_arp(make_gratuitous_arp(b->engine.link().hw, *parse_ipv4("198.18.0.2")), mutable_bytes(frame).subspan(4));
    d.payload = frame;
    d.src_qp = b->engine.link().qpn;
    d.slid = 77;
    a->engine.on_datagram(d, w.now);
    w.pump();
    EXPECT_EQ(w.sa.count(path_record, ib::method::get), before + 1);
    EXPECT_EQ(a->engine.paths().counters().refreshed, 1u);
}

// An IPoIB frame of `type` around `payload`, as it comes off the link.
Packet link_frame(std::uint16_t type, bytes payload) {
    Packet f(4 + payload.size());
    store_be16(f.data(), type);
    std::copy(payload.begin(), payload.end(), f.begin() + 4);
    return f;
}

Packet arp_frame(const ArpPacket& arp) {
    std::array<std::uint8_t, ArpPacket::size> buf{};
    EXPECT_TRUE(encode_arp(arp, buf));
    return link_frame(0x0806, buf);
}

// An ND message as the fabric delivers it, built by `build`.
template <class Message, class Build>
Packet nd_frame(const Message& m, Build build) {
    Packet buf(kNsNaPacketMaxSize);
    const auto n = build(m, buf);
    EXPECT_TRUE(n);
    buf.resize(n ? *n : 0);
    return link_frame(0x86DD, buf);
}
Packet na_frame(const NeighborAdvertisement& na) {
    return nd_frame(na, [](const auto& m, Packet& b) { return build_neighbor_advertisement(m, b); });
}
Packet ns_frame(const NeighborSolicitation& ns) {
    return nd_frame(ns, [](const auto& m, Packet& b) { return build_neighbor_solicitation(m, b); });
}

// Fills `h`'s SA client (the SA silent): ARP requests for `ours` from `n`
// made-up GIDs, each answered, so each needs a path query of its own; from
// `per_lid` GIDs a LID (many ports, or one when per_lid >= n). Returns the
// address of the first requester.
HwAddress flood_path_queries(World& w, Host& h, const std::string& ours, std::uint32_t n, std::uint32_t per_lid = 8) {
    w.sa.silent = true;
    HwAddress first;
    for (std::uint32_t i = 0; i < n; ++i) {
        HwAddress from{.flags = 0, .qpn = 0x100 + i, .gid = h.engine.link().hw.gid};
        from.gid[8] = 0xAB;
        store_be32(from.gid.data() + 12, i);
        if (i == 0) first = from;
        const auto sender = *parse_ipv4("198.18.7." + std::to_string(i % 250 + 1));
        const Packet f = arp_frame(make_arp_request(from, sender, *parse_ipv4(ours)));
        h.engine.on_datagram({.payload = f, .src_qp = from.qpn, .slid = static_cast<std::uint16_t>(0x100 + i / per_lid)},
                             w.now);
    }
    return first;
}

// An SA that stops answering (the SM down) says nothing about a path: a
// refresh that times out keeps the path in use, and the next one waits
// refresh_retry. An SA that answers "no such path" ends it.
TEST_F(Pair, APathRefreshWithNoAnswerKeepsThePathAndOneRefusedEndsIt) {
    const ib::Gid bgid = b->engine.link().hw.gid;
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    w.pump();
    ASSERT_TRUE(a->engine.paths().find(bgid));
    w.advance(301s);  // the path is due for revalidation
    w.sa.silent = true;
    b->tun.clear();
    std::uint16_t seq = 2;
    const Packet first = icmp_echo_v4("198.18.0.1", "198.18.0.2", seq++);
    a->from_host(first);
    w.pump();
    EXPECT_TRUE(contains(b->tun, first));
    EXPECT_EQ(a->engine.paths().counters().refreshed, 1u);
    w.advance(8s);  // the refresh's retries run out (0.5 + 1 + 2 + 4 s)
    EXPECT_EQ(a->engine.paths().counters().refresh_kept, 1u);
    ASSERT_TRUE(a->engine.paths().find(bgid));
    // Unicast goes on during the outage, and the next refresh waits.
    const Packet during = icmp_echo_v4("198.18.0.1", "198.18.0.2", seq++);
    a->from_host(during);
    w.pump();
    EXPECT_TRUE(contains(b->tun, during));
    EXPECT_EQ(a->engine.paths().counters().refreshed, 1u);
    // The SA is back and says B is gone: the next refresh ends the path.
    w.sa.silent = false;
    w.sa.forget_port(bgid);
    w.advance(11s);
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", seq++));
    w.advance(1s);
    EXPECT_FALSE(a->engine.paths().find(bgid));
}

// One port flooding ARP requests from made-up GIDs: each answer needs a
// path, but at most kMaxResolvingPerOrigin resolve at once for the LID it
// comes from; the SA client's queue stays open for everyone else.
TEST_F(Pair, APortFloodingArpFromMadeUpGidsGetsSixteenPathQueriesAtOnce) {
    const std::size_t queries_before = a->engine.paths().counters().queries;
    (void)flood_path_queries(w, *a, "198.18.0.1", 1000, 1000);  // all from LID 0x100
    EXPECT_EQ(a->engine.paths().counters().queries, queries_before + PathCache::kMaxResolvingPerOrigin);
    EXPECT_EQ(a->engine.paths().counters().drop_origin_busy, 1000 - PathCache::kMaxResolvingPerOrigin);
    EXPECT_EQ(a->engine.sa_client().counters().queue_full, 0u);
    // The host's own traffic still resolves, once the SA answers again.
    w.sa.silent = false;
    a->engine.flush_paths(w.now);
    b->tun.clear();
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 7);
    a->from_host(ping);
    w.pump();
    EXPECT_TRUE(contains(b->tun, ping));
    // The flood's queries ended (flushed): its LID may ask again.
    const std::size_t dropped = a->engine.paths().counters().drop_origin_busy;
    (void)flood_path_queries(w, *a, "198.18.0.1", 20, 1000);
    EXPECT_EQ(a->engine.paths().counters().drop_origin_busy, dropped + 20 - PathCache::kMaxResolvingPerOrigin);
}

// The SaClient refuses a request at once when its queue is full, calling
// back before submit() returns; the path cache must not hold the entry
// across that (ASan saw a use after free here when a refused refresh
// erased it). A refused refresh keeps the path.
TEST_F(Pair, APathRefreshTheSaClientRefusesAtOnceIsSafe) {
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    w.pump();
    ASSERT_TRUE(a->engine.paths().find(b->engine.link().hw.gid));
    (void)flood_path_queries(w, *a, "198.18.0.1", 1100);
    ASSERT_GT(a->engine.sa_client().counters().queue_full, 0u);
    // B's gratuitous ARP from another LID re-queries its path (note_source).
    const Packet garp = arp_frame(make_gratuitous_arp(b->engine.link().hw, *parse_ipv4("198.18.0.2")));
    a->engine.on_datagram({.payload = garp, .src_qp = b->engine.link().qpn, .slid = 77}, w.now);
    EXPECT_EQ(a->engine.paths().counters().refreshed, 1u);
    EXPECT_TRUE(a->engine.paths().find(b->engine.link().hw.gid));  // no answer: the path held stays
    EXPECT_EQ(a->engine.paths().counters().refresh_kept, 1u);
    // A path due for revalidation, used while the queue is full: the frame
    // still goes on the path held.
    w.sa.silent = false;
    w.advance(301s);  // the flood's queries end
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 2));
    w.pump();
    ASSERT_TRUE(a->engine.paths().find(b->engine.link().hw.gid));
    w.advance(301s);
    (void)flood_path_queries(w, *a, "198.18.0.1", 1100);
    b->tun.clear();
    const std::uint64_t refreshed = a->engine.paths().counters().refreshed;
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 4);
    a->from_host(ping);
    w.pump();
    EXPECT_EQ(a->engine.paths().counters().refreshed, refreshed + 1);
    EXPECT_TRUE(contains(b->tun, ping));
}

// A FAILED path retried while the SaClient's queue is full fails again at
// once: the frame that asked is dropped and counted, not left waiting in
// a FAILED entry.
TEST_F(Pair, AFrameForAFailedPathTheSaClientRefusesAtOnceIsDropped) {
    const HwAddress first = flood_path_queries(w, *a, "198.18.0.1", 1100);
    ASSERT_GT(a->engine.sa_client().counters().queue_full, 0u);
    // The last requesters' paths were refused: FAILED for failed_hold.
    HwAddress last = first;
    store_be32(last.gid.data() + 12, 1099);
    const auto failed = [&] {
        for (const PathEntryView& v : a->engine.paths().entries())
            if (v.dgid == last.gid) return std::optional(v);
        return std::optional<PathEntryView>();
    };
    ASSERT_TRUE(failed());
    ASSERT_EQ(failed()->state, PathState::failed);
    w.advance(1100ms);  // past failed_hold; the queries in flight are still being retried
    ASSERT_GT(a->engine.sa_client().outstanding(), 0u);
    const std::uint64_t drops = a->engine.paths().counters().drop_failed;
    const Packet f = arp_frame(make_arp_request(last, *parse_ipv4("198.18.7.100"), *parse_ipv4("198.18.0.1")));
    a->engine.on_datagram({.payload = f, .src_qp = last.qpn, .slid = 0x99}, w.now);
    ASSERT_EQ(failed()->state, PathState::failed);
    EXPECT_EQ(failed()->queued, 0u);
    EXPECT_EQ(a->engine.paths().counters().drop_failed, drops + 1);
}

// RFC 4861 7.2.5: a solicited NA without a Target Link-Layer option
// confirms the address held. Linux answers our unicast NS (PROBE) so
// (ndisc_recv_ns includes the option only when the NS went to a multicast
// address); ignoring it took every Linux neighbour PROBE -> FAILED.
TEST_F(Pair, ASolicitedNaWithoutTargetOptionConfirmsAProbedNeighbour) {
    a->from_host(icmp_echo_v6("2001:db8::1", "2001:db8::2", 1));
    w.pump();
    ASSERT_EQ(a->engine.neighbours().find(ip("2001:db8::2"))->state, NeighbourState::reachable);
    const HwAddress held = *a->engine.neighbours().find(ip("2001:db8::2"))->hw;
    b->drop_outgoing = [](const SentFrame&) { return true; };  // B answers nothing itself
    w.advance(46s);                                             // REACHABLE -> STALE
    a->from_host(icmp_echo_v6("2001:db8::1", "2001:db8::2", 2));  // STALE -> DELAY
    w.advance(5500ms);                                          // DELAY -> PROBE
    ASSERT_EQ(a->engine.neighbours().find(ip("2001:db8::2"))->state, NeighbourState::probe);
    const Packet na = na_frame({.source = *parse_ipv6("2001:db8::2"), .destination = *parse_ipv6("2001:db8::1"),
                                .target = *parse_ipv6("2001:db8::2"), .router = false, .solicited = true,
                                .override_flag = false, .target_lla = std::nullopt});
    a->engine.on_datagram({.payload = na, .src_qp = b->engine.link().qpn, .slid = b->port->attributes().lid}, w.now);
    const auto e = a->engine.neighbours().find(ip("2001:db8::2"));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->state, NeighbourState::reachable);
    EXPECT_TRUE(e->hw->same_endpoint(held));
    w.advance(4s);  // past the unicast probes' 3 s
    EXPECT_EQ(a->engine.neighbours().find(ip("2001:db8::2"))->state, NeighbourState::reachable);
}

// RFC 4861 7.2.5: an NA with the Override flag clear does not replace a
// different cached address (anyone on the fabric could send one); a
// REACHABLE entry only becomes STALE, to be probed.
TEST_F(Pair, AnNaWithoutOverrideDoesNotReplaceTheAddress) {
    a->from_host(icmp_echo_v6("2001:db8::1", "2001:db8::2", 1));
    w.pump();
    const HwAddress held = *a->engine.neighbours().find(ip("2001:db8::2"))->hw;
    HwAddress other = held;
    other.qpn = 0x123456;
    for (const bool solicited : {false, true}) {
        const Packet na = na_frame({.source = *parse_ipv6("2001:db8::2"), .destination = solicited ? *parse_ipv6("2001:db8::1") : kIpv6AllNodes,
                                    .target = *parse_ipv6("2001:db8::2"), .router = false, .solicited = solicited,
                                    .override_flag = false, .target_lla = other});
        a->engine.on_datagram({.payload = na, .src_qp = 0x777, .slid = 0x99}, w.now);
    }
    const auto e = a->engine.neighbours().find(ip("2001:db8::2"));
    EXPECT_TRUE(e->hw->same_endpoint(held));
    EXPECT_EQ(e->state, NeighbourState::stale);
    EXPECT_EQ(a->engine.counters().peer_changes, 0u);
    EXPECT_EQ(a->count_events(EngineEventKind::peer_changed), 0u);
    EXPECT_EQ(a->engine.paths().counters().refreshed, 0u);  // nor is the path re-queried for it
}

// RFC 4861 7.2.3: an NS whose target is not ours is silently discarded,
// counted; its source option neither creates nor replaces an entry.
TEST_F(Pair, AnNsForAnotherTargetLeavesTheNeighbourCacheAlone) {
    a->from_host(icmp_echo_v6("2001:db8::1", "2001:db8::2", 1));
    w.pump();
    const HwAddress held = *a->engine.neighbours().find(ip("2001:db8::2"))->hw;
    HwAddress other = held;
    other.qpn = 0x654321;
    const std::uint64_t answered = a->engine.counters().na_tx;
    for (const char* source : {"2001:db8::99", "2001:db8::2"}) {
        const Packet ns = ns_frame({.source = *parse_ipv6(source), .destination = *parse_ipv6("2001:db8::1"),
                                    .target = *parse_ipv6("2001:db8::55"), .source_lla = other});
        a->engine.on_datagram({.payload = ns, .src_qp = 0x777, .slid = 0x99}, w.now);
    }
    EXPECT_FALSE(a->engine.neighbours().find(ip("2001:db8::99")).has_value());
    EXPECT_TRUE(a->engine.neighbours().find(ip("2001:db8::2"))->hw->same_endpoint(held));
    EXPECT_EQ(a->engine.counters().peer_changes, 0u);
    EXPECT_EQ(a->engine.counters().rx_drop_ns_not_ours, 2u);
    EXPECT_EQ(a->engine.counters().na_tx, answered);
}

TEST_F(Pair, PortDownTakesTheLinkDownAndPortUpRestoresIt) {
    a->engine.on_port_event(transport::PortEvent::port_down, a->port->attributes(), w.now);
    EXPECT_FALSE(a->engine.link().up);
    EXPECT_EQ(a->count_events(EngineEventKind::link_down), 1u);
    a->engine.on_port_event(transport::PortEvent::port_active, a->port->attributes(), w.now);
    w.pump();
    EXPECT_TRUE(a->engine.link().up);
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 5);
    a->from_host(ping);
    w.pump();
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, PkeyChangeOpensANewQpAndAnnouncesIt) {
    a->from_host(icmp_echo_v4("198.18.0.1", "198.18.0.2", 1));
    w.pump();
    const std::uint32_t old_qpn = b->engine.link().qpn;
    // Our P_Key moved to another index of the table: the QP must follow.
    transport::PortAttributes moved = b->port->attributes();
    moved.pkey_table = {0x8001, ib::kPKeyDefault};
    b->port->core().set_attributes(moved);
    b->engine.on_port_event(transport::PortEvent::pkey_change, moved, w.now);
    w.pump();
    ASSERT_TRUE(b->engine.link().up);
    EXPECT_NE(b->engine.link().qpn, old_qpn);
    EXPECT_EQ(a->engine.counters().peer_changes, 1u);  // the re-announcement taught A
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 2);
    a->from_host(ping);
    w.pump();
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, PkeyChangeThatLeavesOursInPlaceKeepsTheQp) {
    // Another partition added behind ours (a P_Key child's): same index.
    const std::uint32_t old_qpn = b->engine.link().qpn;
    transport::PortAttributes more = b->port->attributes();
    more.pkey_table.push_back(0x8001);
    b->port->core().set_attributes(more);
    b->engine.on_port_event(transport::PortEvent::pkey_change, more, w.now);
    w.pump();
    EXPECT_TRUE(b->engine.link().up);
    EXPECT_EQ(b->engine.link().qpn, old_qpn);
    EXPECT_EQ(b->engine.counters().qp_opens, 1u);
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 3);
    a->from_host(ping);
    w.pump();
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, PkeyMissingAtStartMeansNoJoinUntilItComes) {
    World w2;
    EngineConfig child;
    child.pkey = 0x8001;
    Host& c = w2.add_host(child);
    c.add_address("198.18.1.3/24");
    c.start();
    w2.advance(3s);
    EXPECT_FALSE(c.engine.link().up);
    EXPECT_EQ(c.engine.sa_client().counters().sent, 0u);  // no join the SA would refuse
    ASSERT_EQ(c.count_events(EngineEventKind::link_down), 1u);
    EXPECT_NE(c.events.back().message.find("P_Key 0x8001 is not in the port's P_Key table"), std::string::npos)
        << c.events.back().message;
    // A client reregister does not make it try either.
    c.engine.on_port_event(transport::PortEvent::client_reregister, c.port->attributes(), w2.now);
    w2.pump();
    EXPECT_EQ(c.engine.sa_client().counters().sent, 0u);
    // The SM adds the P_Key: the child joins and comes up.
    transport::PortAttributes with = c.port->attributes();
    with.pkey_table.push_back(0x8001);
    c.port->core().set_attributes(with);
    c.engine.on_port_event(transport::PortEvent::pkey_change, with, w2.now);
    w2.advance(2s);
    EXPECT_TRUE(c.engine.link().up);
    EXPECT_EQ(c.engine.pkey(), 0x8001);
}

TEST_F(Pair, APeerWhoseAddressIsGoneIsResolvedAgainAtOnce) {
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1);
    a->from_host(ping);
    w.pump();
    const HwAddress old = *a->engine.neighbours().find(ip("198.18.0.2"))->hw;
    // B restarts and its announcements never reach A (lost).
    b = &w.restart_host(1);
    b->drop_outgoing = [](const SentFrame&) { return true; };
    b->add_address("198.18.0.2/24");
    b->add_address("2001:db8::2/64");
    b->start();
    w.advance(2s);
    b->drop_outgoing = {};
    ASSERT_NE(b->engine.link().qpn, old.qpn);
    ASSERT_EQ(a->engine.neighbours().find(ip("198.18.0.2"))->hw->qpn, old.qpn);  // A still has the old one
    // The link says the old address is gone: A asks again and learns the new one.
    const auto requests = a->engine.counters().arp_requests_tx;
    a->engine.peer_gone(old, w.now);
    w.pump();
    EXPECT_EQ(a->engine.counters().arp_requests_tx, requests + 1);
    EXPECT_EQ(a->engine.neighbours().find(ip("198.18.0.2"))->hw->qpn, b->engine.link().qpn);
    EXPECT_EQ(a->engine.neighbours().counters().re_resolved, 1u);
    const Packet again = icmp_echo_v4("198.18.0.1", "198.18.0.2", 2);
    a->from_host(again);
    w.pump();
    EXPECT_TRUE(contains(b->tun, again));
}

TEST_F(Pair, OwnMulticastCopiesAreDropped) {
    a->from_host(udp_v4("198.18.0.1", "198.18.0.255"));  // subnet broadcast
    w.pump();
    EXPECT_GE(a->engine.counters().rx_own_multicast, 1u);
    EXPECT_EQ(b->tun.size(), 1u);
    EXPECT_TRUE(a->tun.empty());
}

TEST_F(Pair, MalformedInputIsCountedAndTrafficGoesOn) {
    // From the fabric: a short frame, an unknown EtherType, a broken ARP.
    const Packet short_frame{0x08};
    const Packet other_type{0x88, 0xcc, 0, 0, 1, 2, 3};
    const Packet bad_arp{0x08, 0x06, 0, 0, 0, 1};
    for (const Packet* p : {&short_frame, &other_type, &bad_arp})
        b->engine.on_datagram({.payload = *p, .src_qp = 99, .slid = 1}, w.now);
    const auto& c = b->engine.counters();
    EXPECT_EQ(c.rx_frame_errors[static_cast<std::size_t>(FrameError::truncated)], 1u);
    EXPECT_EQ(c.rx_frame_errors[static_cast<std::size_t>(FrameError::other_ether_type)], 1u);
    EXPECT_EQ(c.rx_arp_errors[static_cast<std::size_t>(ArpError::truncated)], 1u);
    // From the host: garbage.
    a->from_host(Packet{0x45, 0, 0});
    a->from_host(Packet{0x10, 1, 2, 3});
    EXPECT_EQ(a->engine.counters().tun_ip_errors[static_cast<std::size_t>(IpPacketError::truncated_header)], 1u);
    EXPECT_EQ(a->engine.counters().tun_ip_errors[static_cast<std::size_t>(IpPacketError::bad_version)], 1u);
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 9);
    a->from_host(ping);
    w.pump();
    EXPECT_TRUE(contains(b->tun, ping));
}

TEST_F(Pair, HostNeighbourDiscoveryIsNotForwarded) {
    NeighborSolicitation ns = make_resolution_solicitation(*parse_ipv6("2001:db8::1"), a->engine.link().hw,
                                                           *parse_ipv6("2001:db8::2"));
    Packet buf(kNsNaPacketMaxSize);
    auto n = build_neighbor_solicitation(ns, buf);
    ASSERT_TRUE(n);
    buf.resize(*n);
    a->from_host(buf);
    EXPECT_EQ(a->engine.counters().tun_drop_host_nd, 1u);
}

TEST_F(Pair, StopLeavesEveryGroup) {
    const ib::Gid gid = a->port->attributes().gid();
    a->engine.stop(w.now);
    w.pump();
    for (const auto& [mgid, g] : w.sa.groups) EXPECT_FALSE(g.members.count(gid)) << ipoibd::format_gid(mgid);
    EXPECT_FALSE(a->engine.link().up);
    EXPECT_TRUE(a->engine.sa_idle());
}

TEST_F(Pair, DuplicateAddressIsDetected) {
    Host& c = w.add_host();
    c.add_address("2001:db8::2/64");  // B's
    c.start();
    w.advance(2s);
    EXPECT_EQ(c.count_events(EngineEventKind::dad_failed), 1u);
    const auto v = c.engine.addresses();
    const auto it = std::find_if(v.begin(), v.end(), [](const AddressView& x) { return x.address.ip == ip("2001:db8::2"); });
    ASSERT_NE(it, v.end());
    EXPECT_EQ(it->dad, DadState::duplicate);
}

TEST_F(Pair, RoutedTrafficResolvesTheGateway) {
    // 198.19.5.0/24 is behind B: the caller names B as next hop.
    const Packet p = icmp_echo_v4("198.18.0.1", "198.19.5.7", 1);
    a->from_host(p, ip("198.18.0.2"));
    w.pump();
    EXPECT_TRUE(contains(b->tun, p));
    EXPECT_FALSE(a->engine.neighbours().find(ip("198.19.5.7")).has_value());
}

}  // namespace
}  // namespace ipoibd::ipoib::test
