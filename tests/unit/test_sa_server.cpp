// The SA server engine: the request list of the OpenSM comparison (issue 4)
// against ibfabricd's SA, plus forwarding and partitions.
#include <gtest/gtest.h>

#include <optional>

#include "fabric/sa/sa_server.h"
#include "sa_client/rmpp.h"
#include "transport/gid.h"

namespace ipoibd::fabric {
namespace {

namespace mc = sa::mc_member_comp;
using sa::McMemberQuery;
using sa::SaMad;

struct NullOutput final : SwitchOutput {
    void send(const SocketAddress&, bytes) override {}
};

ib::Gid gid_of(std::uint64_t guid) {
    ib::Gid g{};
    store_be64(g.data(), 0xFE80000000000000ULL);
    store_be64(g.data() + 8, guid);
    return g;
}

const ib::Gid kBroadcast = *parse_gid("ff12:401b:ffff::ffff:ffff");

struct SaServerTest : ::testing::Test {
    NullOutput out;
    Switch sw{Switch::Config{}, out};
    std::vector<SaPort> ports = {
        {.lid = 2, .guid = 0xA, .gid = gid_of(0xA), .mtu = 4, .rate = 7, .pkeys = {0xFFFF}, .switch_port = 1},
        {.lid = 3, .guid = 0xB, .gid = gid_of(0xB), .mtu = 5, .rate = 7, .pkeys = {0xFFFF}, .switch_port = 2},
        {.lid = 4, .guid = 0xC, .gid = gid_of(0xC), .mtu = 4, .rate = 7, .pkeys = {0x8001}, .switch_port = 3},
    };
    SaServer sa{SaServerConfig{}, sw, [this] { return ports; }};

    SaMad ask(std::uint8_t method, const McMemberQuery& q, std::uint16_t lid, std::uint64_t sm_key = 0) {
        auto req = q.request(method, 0x1234);
        EXPECT_TRUE(req.has_value());
        req->sm_key = sm_key;
        const auto resp = sa.handle(*req, lid);
        EXPECT_EQ(resp.size(), 1u);
        return resp.at(0);
    }
    McMemberQuery join_bcast(std::uint64_t guid, std::uint8_t state = sa::join_state::full_member) {
        McMemberQuery q;
        q.set_mgid(kBroadcast).set_port_gid(gid_of(guid)).set_join_state(state);
        return q;
    }
    McMemberQuery create(const ib::Gid& mgid, std::uint64_t guid) {
        McMemberQuery q;
        q.set_mgid(mgid).set_port_gid(gid_of(guid)).set_join_state(sa::join_state::full_member)
            .set_q_key(0x1234).set_tclass(0).set_p_key(0xFFFF).set_flow_label(0).set_sl(0);
        return q;
    }
};

TEST_F(SaServerTest, BroadcastGroupExistsWithOpenSmDefaults) {
    McMemberQuery q;
    q.set_mgid(kBroadcast);
    const SaMad r = ask(ib::method::get, q, 2);
    EXPECT_EQ(r.header.status, 0);
    EXPECT_EQ(r.header.method, ib::method::get_resp);
    const auto g = sa::get_record<sa::McMemberRecord>(r);
    EXPECT_EQ(g.mgid, kBroadcast);
    EXPECT_EQ(g.q_key, 0x0B1Bu);
    EXPECT_EQ(g.mlid, 0xC000);
    EXPECT_EQ(g.mtu, 4);   // 2048
    EXPECT_EQ(g.rate, 3);  // 10 Gb/s
    EXPECT_EQ(g.p_key, 0xFFFF);
    EXPECT_EQ(g.scope, 2);
}

TEST_F(SaServerTest, JoinBroadcastAsFullMemberProgramsTheSwitch) {
    const SaMad r = ask(ib::method::set, join_bcast(0xA), 2);
    ASSERT_EQ(r.header.status, 0);
    EXPECT_EQ(r.header.method, ib::method::get_resp) << "a Set is answered with GetResp";
    const auto g = sa::get_record<sa::McMemberRecord>(r);
    EXPECT_EQ(g.join_state, sa::join_state::full_member);
    EXPECT_EQ(g.port_gid, gid_of(0xA));
    EXPECT_EQ(g.mlid, 0xC000);
    EXPECT_EQ(g.q_key, 0x0B1Bu);
    // A send-only member does not receive: its port is not in the tree.
    ASSERT_EQ(ask(ib::method::set, join_bcast(0xB, sa::join_state::send_only_non_member), 3).header.status, 0);
    // (forwarding checked through the switch's public behaviour in the
    // fabric tests; here the membership is what matters)
    EXPECT_EQ(sa.groups().at(kBroadcast).members.size(), 2u);
}

TEST_F(SaServerTest, UnknownGroupNeedsCreationComponents) {
    const ib::Gid mgid = *parse_gid("ff15:a01b:ffff::42");
    const SaMad r = ask(ib::method::set, join_bcast(0xA).set_mgid(mgid), 2);
    EXPECT_EQ(r.header.status, sa::sa_status::err_req_insufficient_components);
    const SaMad ok = ask(ib::method::set, create(mgid, 0xA), 2);
    ASSERT_EQ(ok.header.status, 0);
    const auto g = sa::get_record<sa::McMemberRecord>(ok);
    EXPECT_EQ(g.mlid, 0xC001);
    EXPECT_EQ(g.q_key, 0x1234u);
    EXPECT_EQ(g.mtu, 4) << "the requester's MTU when none is asked";
    EXPECT_EQ(sa.counters().groups_created, 1u);
}

// A create is refused as OpenSM refuses it (ERR_REQ_INVALID): named cases.
TEST_F(SaServerTest, CreatesWithReservedCodesOrMgidsAreRefused) {
    struct Case {
        const char* name;
        const char* mgid;
        std::optional<std::uint8_t> mtu;   // Selector exactly
        std::optional<std::uint8_t> rate;  // Selector exactly
        std::uint16_t status;
    };
    const Case cases[] = {
        {"MTU code 0 (below 256)", "ff15:e01b::11", 0, std::nullopt, sa::sa_status::err_req_invalid},
        {"MTU code 6 (reserved)", "ff15:e01b::12", 6, std::nullopt, sa::sa_status::err_req_invalid},
        {"rate code 0 (reserved)", "ff15:e01b::13", std::nullopt, 0, sa::sa_status::err_req_invalid},
        {"rate code 1 (reserved)", "ff15:e01b::14", std::nullopt, 1, sa::sa_status::err_req_invalid},
        {"rate code 63 (unknown)", "ff15:e01b::15", std::nullopt, 63, sa::sa_status::err_req_invalid},
        {"not a multicast prefix", "fe15:e01b::16", std::nullopt, std::nullopt, sa::sa_status::err_req_invalid},
        {"reserved flag bits set", "ff35:e01b::17", std::nullopt, std::nullopt, sa::sa_status::err_req_invalid},
        {"SA signature with link-local scope", "ff12:a01b:ffff::18", std::nullopt, std::nullopt,
         sa::sa_status::err_req_invalid},
        {"SA signature, site-local scope", "ff15:a01b:ffff::19", std::nullopt, std::nullopt, 0},
        {"transient flag, any signature", "ff12:e01b::1a", std::nullopt, std::nullopt, 0},
        {"MTU 2048 and 10 Gb/s", "ff15:e01b::1b", 4, 3, 0},
    };
    for (const Case& c : cases) {
        auto q = create(*parse_gid(c.mgid), 0xA);
        if (c.mtu) q.set_mtu(sa::Selector::exactly, *c.mtu);
        if (c.rate) q.set_rate(sa::Selector::exactly, *c.rate);
        EXPECT_EQ(ask(ib::method::set, q, 2).header.status, c.status) << c.name;
    }
}

TEST_F(SaServerTest, GroupsOfAnotherPartitionAreNotShown) {
    // Port C (LID 4) is in partition 0x8001 only: the default partition's
    // broadcast group and a group created there are not its to see.
    ASSERT_EQ(ask(ib::method::set, create(*parse_gid("ff15:e01b::21"), 0xA), 2).header.status, 0);
    McMemberQuery all;
    auto table = all.request(ib::method::get_table, 0x77);
    ASSERT_TRUE(table.has_value());
    const auto seen_by_a = sa.handle(*table, 2);
    const auto seen_by_c = sa.handle(*table, 4);
    ASSERT_FALSE(seen_by_a.empty());
    ASSERT_FALSE(seen_by_c.empty());
    EXPECT_EQ(seen_by_c[0].header.status, 0);
    const sa::SaData none{};
    EXPECT_EQ(seen_by_c[0].data, none) << "no record for C";
    EXPECT_NE(seen_by_a[0].data, none) << "A sees its partition's groups";
    McMemberQuery one;
    one.set_mgid(kBroadcast);
    EXPECT_EQ(ask(ib::method::get, one, 4).header.status, sa::sa_status::err_no_records);
    EXPECT_EQ(ask(ib::method::get, one, 2).header.status, 0);
}

TEST_F(SaServerTest, AnSaNamedMgidNeverTakesAnExistingGroupsName) {
    // A requester took the name the SA's counter would give next.
    const ib::Gid taken = *parse_gid("ff15:a01b:ffff::1");
    auto mine = create(taken, 0xA);
    mine.set_q_key(0x1111);
    ASSERT_EQ(ask(ib::method::set, mine, 2).header.status, 0);
    auto named = create(ib::Gid{}, 0xB);
    named.set_scope(sa::mgid_scope::site_local).set_q_key(0x2222);
    const SaMad r = ask(ib::method::set, named, 3);
    ASSERT_EQ(r.header.status, 0);
    const auto g = sa::get_record<sa::McMemberRecord>(r);
    EXPECT_NE(g.mgid, taken);
    EXPECT_EQ(g.q_key, 0x2222u) << "a group of its own, not someone else's";
    EXPECT_EQ(sa.groups().at(taken).params.q_key, 0x1111u);
    EXPECT_EQ(sa.counters().groups_created, 2u);
}

TEST_F(SaServerTest, MismatchingMtuSelectorAndQKeyAreRefused) {
    auto q = join_bcast(0xB);
    q.set_mtu(sa::Selector::exactly, 5);  // group is 2048, asked 4096
    EXPECT_EQ(ask(ib::method::set, q, 3).header.status, sa::sa_status::err_req_invalid);
    auto q2 = join_bcast(0xB);
    q2.set_mtu(sa::Selector::greater_than, 3);  // > 1024: 2048 fits
    EXPECT_EQ(ask(ib::method::set, q2, 3).header.status, 0);
    auto q3 = join_bcast(0xA);
    q3.set_q_key(0xBAD);
    EXPECT_EQ(ask(ib::method::set, q3, 2).header.status, sa::sa_status::err_req_invalid);
}

TEST_F(SaServerTest, JoinOutsideThePartitionIsRefused) {
    EXPECT_EQ(ask(ib::method::set, join_bcast(0xC), 4).header.status, sa::sa_status::err_req_invalid);
}

// Proxy joins and leaves (IBA o15-0.1.2, with OpenSM's rules): a port may
// join another port that shares a partition with it; that membership is
// then any partition member's to change, while one a port made itself is
// its own alone.
TEST_F(SaServerTest, ProxyJoinAndLeaveAsIbaAndOpenSmDefineThem) {
    struct Case {
        const char* name;
        std::uint8_t method;
        std::uint64_t member;
        std::uint16_t requester_lid;
        std::uint16_t status;
    };
    const Case cases[] = {
        {"A joins B (they share 0xffff)", ib::method::set, 0xB, 2, 0},
        {"C joins A (no shared partition)", ib::method::set, 0xA, 4, sa::sa_status::err_req_invalid},
        {"A joins an unknown port", ib::method::set, 0xEE, 2, sa::sa_status::err_req_invalid},
        {"B, the member, leaves its proxied membership", ib::method::del, 0xB, 3, 0},
        {"A joins itself", ib::method::set, 0xA, 2, 0},
        {"B leaves A's own membership", ib::method::del, 0xA, 3, sa::sa_status::err_req_invalid},
        {"B joins A again (A's own membership)", ib::method::set, 0xA, 3, sa::sa_status::err_req_invalid},
        {"A leaves itself", ib::method::del, 0xA, 2, 0},
    };
    for (const Case& c : cases) {
        const SaMad r = ask(c.method, join_bcast(c.member), c.requester_lid);
        EXPECT_EQ(r.header.status, c.status) << c.name;
    }
    // A proxied membership reads as such, programs the member's switch
    // port, and is changed by another member of the partition.
    ASSERT_EQ(ask(ib::method::set, join_bcast(0xB), 2).header.status, 0);
    const auto& g = sa.groups().at(kBroadcast);
    EXPECT_TRUE(g.proxied.contains(0xB));
    McMemberQuery mine;
    mine.set_mgid(kBroadcast).set_port_gid(gid_of(0xB));
    const SaMad seen = ask(ib::method::get, mine, 2, /*sm_key=*/1);
    ASSERT_EQ(seen.header.status, 0);
    EXPECT_TRUE(sa::get_record<sa::McMemberRecord>(seen).proxy_join);
    EXPECT_EQ(ask(ib::method::del, join_bcast(0xB), 2).header.status, 0) << "A leaves the membership it made";
    EXPECT_FALSE(sa.groups().at(kBroadcast).members.contains(0xB));
}

TEST_F(SaServerTest, AForeignSmKeyIsDiscardedUnanswered) {
    McMemberQuery q;
    q.set_mgid(kBroadcast);
    auto req = q.request(ib::method::get, 0x55);
    req->sm_key = 0xBAD;
    EXPECT_TRUE(sa.handle(*req, 2).empty());
    EXPECT_EQ(sa.counters().sm_key_refused, 1u);
    req->sm_key = 0;  // untrusted, answered
    EXPECT_EQ(sa.handle(*req, 2).size(), 1u);
}

// PacketLifeTime codes and selectors (6 bits; 3 is "smallest available").
TEST_F(SaServerTest, PacketLifeTimeSelectorsAreChecked) {
    struct Case {
        const char* name;
        sa::Selector selector;
        std::uint8_t life;
        std::uint16_t create_status;
        std::uint8_t created_life;
    };
    const Case cases[] = {
        {"exactly 20", sa::Selector::exactly, 20, 0, 20},
        {"greater than 63: cannot be had", sa::Selector::greater_than, 63, sa::sa_status::err_req_invalid, 0},
        {"less than 0: cannot be had", sa::Selector::less_than, 0, sa::sa_status::err_req_invalid, 0},
        {"greater than 30", sa::Selector::greater_than, 30, 0, 31},
        {"less than 5", sa::Selector::less_than, 5, 0, 4},
        {"smallest available", sa::Selector::largest_available, 9, 0, 0x12},
    };
    std::uint32_t n = 0x30;
    for (const Case& c : cases) {
        auto q = create(*parse_gid("ff15:e01b::" + std::to_string(n++)), 0xA);
        q.set_packet_life_time(c.selector, c.life);
        const SaMad r = ask(ib::method::set, q, 2);
        EXPECT_EQ(r.header.status, c.create_status) << c.name;
        if (c.create_status == 0) {
            EXPECT_EQ(sa::get_record<sa::McMemberRecord>(r).packet_life_time, c.created_life) << c.name;
        }
    }
    // Joining the broadcast group (life 0x12) with a selector it fails.
    auto join = join_bcast(0xA);
    join.set_packet_life_time(sa::Selector::less_than, 0x12);
    EXPECT_EQ(ask(ib::method::set, join, 2).header.status, sa::sa_status::err_req_invalid);
    join = join_bcast(0xA);
    join.set_packet_life_time(sa::Selector::greater_than, 0x11);
    EXPECT_EQ(ask(ib::method::set, join, 2).header.status, 0);
    // PathRecords are filtered by it too.
    sa::PathQuery p;
    p.set_sgid(gid_of(0xA)).set_dgid(gid_of(0xB)).set_packet_life_time(sa::Selector::less_than, 0x12);
    EXPECT_EQ(sa.handle(*p.request(ib::method::get, 11), 2).at(0).header.status, sa::sa_status::err_no_records);
    sa::PathQuery rate;
    rate.set_sgid(gid_of(0xA)).set_dgid(gid_of(0xB)).set_rate(sa::Selector::greater_than, 7);
    EXPECT_EQ(sa.handle(*rate.request(ib::method::get, 12), 2).at(0).header.status, sa::sa_status::err_no_records);
}

TEST_F(SaServerTest, LeaveAndQueryAfterLeave) {
    const ib::Gid mgid = *parse_gid("ff15:a01b:ffff::77");
    ASSERT_EQ(ask(ib::method::set, create(mgid, 0xA), 2).header.status, 0);
    ASSERT_EQ(ask(ib::method::set, join_bcast(0xA), 2).header.status, 0);
    McMemberQuery members;
    members.set_mgid(kBroadcast);
    auto table = [&](std::uint64_t sm_key) {
        auto req = members.request(ib::method::get_table, 1);
        req->sm_key = sm_key;
        return sa.handle(*req, 2);
    };
    // Trusted (SM_Key 1): one record per member; untrusted: one per group.
    EXPECT_EQ(table(1).at(0).header.status, 0);
    EXPECT_EQ(ask(ib::method::del, join_bcast(0xA), 2).header.status, 0);
    // An empty GetTable is a success with no records, as OpenSM answers it.
    const auto empty = table(1);
    ASSERT_EQ(empty.size(), 1u);
    EXPECT_EQ(empty[0].header.status, 0);
    auto none = sa::reassemble(empty);
    ASSERT_TRUE(none.has_value());
    EXPECT_TRUE(none->payload.empty());
    EXPECT_EQ(table(0).at(0).header.status, 0) << "the broadcast group stays";
    EXPECT_EQ(ask(ib::method::del, join_bcast(0xA), 2).header.status, sa::sa_status::err_req_invalid) << "not a member now";

    McMemberQuery leave;
    leave.set_mgid(mgid).set_port_gid(gid_of(0xA)).set_join_state(sa::join_state::full_member);
    EXPECT_EQ(ask(ib::method::del, leave, 2).header.status, 0);
    McMemberQuery get;
    get.set_mgid(mgid);
    EXPECT_EQ(ask(ib::method::get, get, 2).header.status, sa::sa_status::err_no_records) << "deleted with its last member";
    EXPECT_EQ(sa.counters().groups_deleted, 1u);
}

TEST_F(SaServerTest, IpoibGroupsTakeTheBroadcastGroupsParameters) {
    const ib::Gid mgid = *parse_gid("ff12:401b:ffff::e000:1");
    auto q = create(mgid, 0xA);
    EXPECT_EQ(ask(ib::method::set, q, 2).header.status, sa::sa_status::err_req_invalid) << "Q_Key 0x1234 is not the partition's";
    q.set_q_key(0x0B1B);
    const SaMad r = ask(ib::method::set, q, 2);
    ASSERT_EQ(r.header.status, 0);
    const auto g = sa::get_record<sa::McMemberRecord>(r);
    EXPECT_EQ(g.mtu, 4);
    EXPECT_EQ(g.rate, 3);
}

TEST_F(SaServerTest, PathRecordBetweenTwoPorts) {
    sa::PathQuery q;
    q.set_sgid(gid_of(0xA)).set_dgid(gid_of(0xB));
    auto req = q.request(ib::method::get, 9);
    const auto resp = sa.handle(*req, 2);
    ASSERT_EQ(resp.size(), 1u);
    ASSERT_EQ(resp[0].header.status, 0);
    const auto p = sa::get_record<sa::PathRecord>(resp[0]);
    EXPECT_EQ(p.slid, 2);
    EXPECT_EQ(p.dlid, 3);
    EXPECT_EQ(p.p_key, 0xFFFF);
    EXPECT_EQ(p.mtu, 4) << "the smaller of the two ports";
    EXPECT_EQ(p.rate, 7);
    EXPECT_TRUE(p.reversible);
    EXPECT_EQ(p.mtu_selector, sa::Selector::exactly);

    sa::PathQuery none;
    none.set_sgid(gid_of(0xA)).set_dgid(gid_of(0xC));
    EXPECT_EQ(sa.handle(*none.request(ib::method::get, 10), 2).at(0).header.status, sa::sa_status::err_no_records)
        << "no shared partition";
}

TEST_F(SaServerTest, PathRecordTableComesInRmppSegments) {
    sa::PathQuery q;  // every destination from the requester
    auto req = q.request(ib::method::get_table, 11);
    const auto resp = sa.handle(*req, 2);
    ASSERT_FALSE(resp.empty());
    EXPECT_TRUE(resp[0].rmpp.active());
    EXPECT_EQ(resp[0].header.method, ib::method::get_table_resp);
    auto whole = sa::reassemble(resp);
    ASSERT_TRUE(whole.has_value());
    auto records = sa::unpack_records<sa::PathRecord>(whole->payload, whole->header.attribute_offset);
    ASSERT_TRUE(records.has_value());
    EXPECT_EQ(records->size(), 2u) << "to itself and to LID 3; LID 4 shares no partition";

    // A destination and no source: paths from every port to it.
    sa::PathQuery to3;
    to3.set_dlid(3);
    auto whole3 = sa::reassemble(sa.handle(*to3.request(ib::method::get_table, 12), 2));
    ASSERT_TRUE(whole3.has_value());
    auto to3_records = sa::unpack_records<sa::PathRecord>(whole3->payload, whole3->header.attribute_offset);
    ASSERT_TRUE(to3_records.has_value());
    EXPECT_EQ(to3_records->size(), 2u) << "from LIDs 2 and 3; LID 4 shares no partition";
}

TEST_F(SaServerTest, BadRequestsGetStatusesOrAreIgnored) {
    auto req = join_bcast(0xA).request(ib::method::set, 1);
    req->header.class_version = 1;
    EXPECT_EQ(sa.handle(*req, 2).at(0).header.status, ib::mad_status::bad_version);
    auto unknown = join_bcast(0xA).request(ib::method::set, 2);
    unknown->header.attribute_id = 0x00AB;
    EXPECT_EQ(sa.handle(*unknown, 2).at(0).header.status, ib::mad_status::method_attr_not_supported);
    auto from_nowhere = join_bcast(0xA).request(ib::method::set, 3);
    EXPECT_EQ(sa.handle(*from_nowhere, 99).at(0).header.status, sa::sa_status::err_req_invalid);
    auto response = join_bcast(0xA).request(ib::method::get_resp, 4);
    EXPECT_TRUE(sa.handle(*response, 2).empty());
    EXPECT_EQ(sa.counters().malformed, 1u);
    // Wrong method for the attribute: Delete of a PathRecord, Set of one,
    // GetTable of an InformInfo.
    sa::PathQuery pq;
    pq.set_dlid(3);
    EXPECT_EQ(sa.handle(*pq.request(ib::method::del, 5), 2).at(0).header.status, ib::mad_status::method_attr_not_supported);
    EXPECT_EQ(sa.handle(*pq.request(ib::method::set, 6), 2).at(0).header.status, ib::mad_status::method_attr_not_supported);
    auto inform = sa::make_sa_request(ib::method::get_table, 7, sa::generic_trap_subscription(64, true));
    EXPECT_EQ(sa.handle(*inform, 2).at(0).header.status, ib::mad_status::method_attr_not_supported);
    // A request whose AttributeOffset is nonsense is answered on its record
    // all the same (the offset describes responses, not requests).
    auto odd = join_bcast(0xA).request(ib::method::set, 8);
    odd->attribute_offset = 0xFFFF;
    EXPECT_EQ(sa.handle(*odd, 2).at(0).header.status, 0);
    // Still serving.
    McMemberQuery q;
    q.set_mgid(kBroadcast);
    EXPECT_EQ(ask(ib::method::get, q, 3).header.status, 0);
}

TEST_F(SaServerTest, LostPortLeavesItsGroups) {
    const ib::Gid mgid = *parse_gid("ff15:a01b:ffff::99");
    ASSERT_EQ(ask(ib::method::set, create(mgid, 0xA), 2).header.status, 0);
    ASSERT_EQ(ask(ib::method::set, join_bcast(0xA), 2).header.status, 0);
    sa.port_gone(0xA);
    EXPECT_EQ(sa.groups().count(mgid), 0u);
    EXPECT_TRUE(sa.groups().at(kBroadcast).members.empty());
}

}  // namespace
}  // namespace ipoibd::fabric

namespace ipoibd::fabric {
namespace {

struct SaTrapTest : SaServerTest {
    Clock::time_point now = Clock::time_point{} + std::chrono::hours(1);

    void subscribe(std::uint16_t lid, std::uint16_t trap, std::uint32_t qpn = 0x48, bool on = true) {
        auto req = sa::make_sa_request(ib::method::set, 77, sa::generic_trap_subscription(trap, on));
        const auto resp = sa.handle(*req, lid, qpn, now);
        ASSERT_EQ(resp.size(), 1u);
        ASSERT_EQ(resp[0].header.status, 0);
        EXPECT_EQ(resp[0].header.method, ib::method::get_resp);
    }
    std::vector<SaOutgoing> reports() { return sa.take_outbound(); }
};

TEST_F(SaTrapTest, GroupCreatedAndDeletedAreReported) {
    subscribe(3, sa::trap_number::mcast_group_created);
    subscribe(3, sa::trap_number::mcast_group_deleted);
    const ib::Gid mgid = *parse_gid("ff15:a01b:ffff::5");
    ASSERT_EQ(ask(ib::method::set, create(mgid, 0xA), 2).header.status, 0);
    auto r = reports();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].dlid, 3);
    EXPECT_EQ(r[0].dest_qp, 0x48u);
    EXPECT_EQ(r[0].mad.header.method, ib::method::report);
    EXPECT_EQ(r[0].mad.header.attribute_id, sa::sa_attr::notice);
    const auto n = sa::get_record<sa::Notice>(r[0].mad);
    EXPECT_TRUE(n.is_generic);
    EXPECT_EQ(n.trap_number_device_id, sa::trap_number::mcast_group_created);
    EXPECT_EQ(sa::trap_gid(n), std::optional<ib::Gid>(mgid));

    McMemberQuery leave;
    leave.set_mgid(mgid).set_port_gid(gid_of(0xA)).set_join_state(sa::join_state::full_member);
    ASSERT_EQ(ask(ib::method::del, leave, 2).header.status, 0);
    r = reports();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(sa::get_record<sa::Notice>(r[0].mad).trap_number_device_id, sa::trap_number::mcast_group_deleted);
}

TEST_F(SaTrapTest, PortOutOfServiceGoesOnlyToSubscribersSharingAPartition) {
    subscribe(3, sa::kInformAllTraps);  // 0xB, partition 0xffff
    subscribe(4, sa::kInformAllTraps);  // 0xC, partition 0x8001 only
    sa.port_gone(0xA, now);
    const auto r = reports();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].dlid, 3);
    const auto n = sa::get_record<sa::Notice>(r[0].mad);
    EXPECT_EQ(n.trap_number_device_id, sa::trap_number::gid_out_of_service);
    EXPECT_EQ(sa::trap_gid(n), std::optional<ib::Gid>(gid_of(0xA)));
}

TEST_F(SaTrapTest, ReportsAreRetriedUntilAcknowledged) {
    subscribe(3, sa::trap_number::gid_in_service);
    sa.port_active(0xA, now);
    auto r = reports();
    ASSERT_EQ(r.size(), 1u);
    now += std::chrono::milliseconds(1000);
    sa.tick(now);
    auto again = reports();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].mad.header.transaction_id, r[0].mad.header.transaction_id);
    // The ReportResp ends it.
    SaMad resp = again[0].mad;
    resp.header.method = ib::method::report_resp;
    EXPECT_TRUE(sa.handle(resp, 3, 0x48, now).empty());
    now += std::chrono::seconds(5);
    sa.tick(now);
    EXPECT_TRUE(reports().empty());
    EXPECT_EQ(sa.counters().reports_acked, 1u);
}

TEST_F(SaTrapTest, UnacknowledgedReportsAreDroppedAfterRetries) {
    subscribe(3, sa::trap_number::gid_in_service);
    sa.port_active(0xA, now);
    std::size_t sent = reports().size();
    for (int i = 0; i < 10; ++i) {
        now += std::chrono::milliseconds(1000);
        sa.tick(now);
        sent += reports().size();
    }
    EXPECT_EQ(sent, 4u) << "the first send and 3 retries";
    EXPECT_EQ(sa.counters().reports_dropped, 1u);
}

TEST_F(SaTrapTest, SubscriptionsAreListedAsInformInfoRecords) {
    subscribe(3, sa::trap_number::gid_in_service, 0x48);
    subscribe(3, sa::trap_number::mcast_group_created, 0x48);
    subscribe(2, sa::kInformAllTraps, 1);
    sa::InformInfoRecord q;
    auto all = sa::make_sa_request(ib::method::get_table, 90, q);
    auto whole = sa::reassemble(sa.handle(*all, 2, 1, now));
    ASSERT_TRUE(whole.has_value());
    auto records = sa::unpack_records<sa::InformInfoRecord>(whole->payload, whole->header.attribute_offset);
    ASSERT_TRUE(records.has_value());
    ASSERT_EQ(records->size(), 3u);
    EXPECT_EQ((*records)[0].subscriber_gid, gid_of(0xB));
    EXPECT_EQ((*records)[0].enum_, 0);
    EXPECT_EQ((*records)[1].enum_, 1);
    EXPECT_EQ((*records)[1].inform_info.trap_number_device_id, sa::trap_number::mcast_group_created);
    EXPECT_EQ((*records)[0].inform_info.qpn, 0x48u);
    q.subscriber_gid = gid_of(0xA);
    auto mine = sa::make_sa_request(ib::method::get_table, 91, q, sa::inform_info_record_comp::subscriber_gid);
    auto whole_a = sa::reassemble(sa.handle(*mine, 2, 1, now));
    ASSERT_TRUE(whole_a.has_value());
    auto a_records = sa::unpack_records<sa::InformInfoRecord>(whole_a->payload, whole_a->header.attribute_offset);
    ASSERT_TRUE(a_records.has_value());
    ASSERT_EQ(a_records->size(), 1u);
    EXPECT_EQ((*a_records)[0].inform_info.trap_number_device_id, sa::kInformAllTraps);
}

// Subscriptions are listed only to ports that share a partition with the
// subscriber (as the topology records): C (0x8001 only) sees its own alone.
TEST_F(SaTrapTest, SubscriptionsAreListedWithinAPartition) {
    subscribe(3, sa::trap_number::gid_in_service);  // B, 0xFFFF
    subscribe(4, sa::trap_number::gid_in_service);  // C, 0x8001
    const auto listed = [&](std::uint16_t lid) {
        auto all = sa::make_sa_request(ib::method::get_table, 90, sa::InformInfoRecord{});
        auto whole = sa::reassemble(sa.handle(*all, lid, 1, now));
        EXPECT_TRUE(whole.has_value());
        std::vector<ib::Gid> gids;
        if (auto records = sa::unpack_records<sa::InformInfoRecord>(whole->payload, whole->header.attribute_offset))
            for (const auto& r : *records) gids.push_back(r.subscriber_gid);
        return gids;
    };
    EXPECT_EQ(listed(4), std::vector<ib::Gid>{gid_of(0xC)});
    EXPECT_EQ(listed(2), std::vector<ib::Gid>{gid_of(0xB)});
}

// One port's share: its subscriptions and its groups are bounded (refused
// with ERR_NO_RESOURCES and counted); other ports still have theirs.
TEST(SaServerLimits, OnePortsSubscriptionsAndGroupsAreBounded) {
    NullOutput out;
    Switch sw{Switch::Config{}, out};
    std::vector<SaPort> ports = {
        {.lid = 2, .guid = 0xA, .gid = gid_of(0xA), .mtu = 4, .rate = 7, .pkeys = {0xFFFF}, .switch_port = 1},
        {.lid = 3, .guid = 0xB, .gid = gid_of(0xB), .mtu = 5, .rate = 7, .pkeys = {0xFFFF}, .switch_port = 2},
    };
    SaServer sa{SaServerConfig{.max_groups_per_port = 4, .max_subscriptions_per_port = 3}, sw, [&] { return ports; }};
    const auto now = Clock::time_point{} + std::chrono::hours(1);
    const auto subscribe = [&](std::uint16_t lid, std::uint16_t trap) {
        auto req = sa::make_sa_request(ib::method::set, 77, sa::generic_trap_subscription(trap, true));
        return sa.handle(*req, lid, 0x48, now).at(0).header.status;
    };
    for (const int trap : {64, 65, 66}) EXPECT_EQ(subscribe(2, static_cast<std::uint16_t>(trap)), 0);
    EXPECT_EQ(subscribe(2, 64), 0);  // again: already held
    EXPECT_EQ(subscribe(2, 67), sa::sa_status::err_no_resources);
    EXPECT_EQ(subscribe(3, 67), 0);
    EXPECT_EQ(sa.counters().subscriptions_over_limit, 1u);
    EXPECT_EQ(sa.subscriptions().size(), 4u);

    const auto join = [&](std::uint16_t lid, std::uint64_t guid, std::uint32_t n) {
        ib::Gid mgid = *parse_gid("ff15:1234::");
        store_be32(mgid.data() + 12, n);
        McMemberQuery q;
        q.set_mgid(mgid).set_port_gid(gid_of(guid)).set_join_state(sa::join_state::full_member)
            .set_q_key(0x1234).set_tclass(0).set_p_key(0xFFFF).set_flow_label(0).set_sl(0);
        auto req = q.request(ib::method::set, 0x1234);
        return sa.handle(*req, lid).at(0).header.status;
    };
    // Four groups of its own, no more.
    std::set<std::uint16_t> mlids;
    for (std::uint32_t n = 1; n <= 4; ++n) EXPECT_EQ(join(2, 0xA, n), 0) << n;
    EXPECT_EQ(join(2, 0xA, 5), sa::sa_status::err_no_resources);
    EXPECT_EQ(join(2, 0xA, 1), 0);  // a group it is in: joined again
    EXPECT_EQ(join(3, 0xB, 5), 0);  // B creates what A could not
    EXPECT_EQ(join(3, 0xB, 1), 0);  // and joins A's
    EXPECT_EQ(sa.counters().joins_over_limit, 1u);
    for (const auto& [mgid, g] : sa.groups()) mlids.insert(g.params.mlid);
    EXPECT_EQ(mlids.size(), sa.groups().size()) << "every group its own MLID";
}

TEST_F(SaTrapTest, UnsubscribeStopsReports) {
    subscribe(3, sa::trap_number::gid_in_service);
    subscribe(3, sa::trap_number::gid_in_service, 0x48, false);
    sa.port_active(0xA, now);
    EXPECT_TRUE(reports().empty());
    auto again = sa::make_sa_request(ib::method::set, 78, sa::generic_trap_subscription(64, false));
    EXPECT_EQ(sa.handle(*again, 3, 0x48, now).at(0).header.status, sa::sa_status::err_req_invalid);
}

}  // namespace
}  // namespace ipoibd::fabric

namespace ipoibd::fabric {
namespace {

TEST(SaServerRmpp, LargeTablesGoOneWindowAtATime) {
    NullOutput out;
    Switch sw{Switch::Config{}, out};
    std::vector<SaPort> ports;
    for (std::uint64_t i = 0; i < 50; ++i)
        ports.push_back({.lid = static_cast<std::uint16_t>(2 + i), .guid = 0x100 + i, .gid = gid_of(0x100 + i), .pkeys = {0xFFFF}});
    SaServer sa{SaServerConfig{}, sw, [&] { return ports; }};
    for (const SaPort& p : ports) {
        McMemberQuery q;
        q.set_mgid(kBroadcast).set_port_gid(p.gid).set_join_state(sa::join_state::full_member);
        ASSERT_EQ(sa.handle(*q.request(ib::method::set, 1), p.lid).at(0).header.status, 0);
    }
    McMemberQuery all;
    auto req = all.request(ib::method::get_table, 0x77);
    req->sm_key = 1;
    auto segments = sa.handle(*req, 2);
    ASSERT_EQ(segments.size(), 1u) << "the first window is one segment";
    sa::RmppReassembler rx;
    int rounds = 0;
    while (!rx.complete() && rounds++ < 100) {
        std::vector<SaMad> next;
        for (const SaMad& s : segments) {
            auto step = rx.add(s);
            ASSERT_TRUE(step.has_value()) << sa::to_string(step.error());
            if (step->ack) {
                auto more = sa.handle(*step->ack, 2);
                next.insert(next.end(), more.begin(), more.end());
            }
        }
        segments = next;
    }
    ASSERT_TRUE(rx.complete());
    auto records = sa::unpack_records<sa::McMemberRecord>(rx.payload(), rx.header().attribute_offset);
    ASSERT_TRUE(records.has_value());
    EXPECT_EQ(records->size(), 50u);
    EXPECT_EQ(sa.counters().rmpp_transfers, 1u);
}

TEST(SaServerRmpp, UnacknowledgedWindowIsResentThenAbandoned) {
    NullOutput out;
    Switch sw{Switch::Config{}, out};
    std::vector<SaPort> ports;
    for (std::uint64_t i = 0; i < 20; ++i)
        ports.push_back({.lid = static_cast<std::uint16_t>(2 + i), .guid = 0x100 + i, .gid = gid_of(0x100 + i), .pkeys = {0xFFFF}});
    SaServer sa{SaServerConfig{}, sw, [&] { return ports; }};
    sa::PathQuery q;  // 20 paths from LID 2: 1,280 bytes, 7 segments
    auto first = sa.handle(*q.request(ib::method::get_table, 5), 2, 1, Clock::time_point{} + std::chrono::hours(1));
    ASSERT_EQ(first.size(), 1u);
    auto now = Clock::time_point{} + std::chrono::hours(1);
    std::size_t resent = 0;
    for (int i = 0; i < 10; ++i) {
        now += std::chrono::seconds(1);
        sa.tick(now);
        resent += sa.take_outbound().size();
    }
    EXPECT_EQ(resent, 3u);
    EXPECT_EQ(sa.counters().rmpp_aborted, 1u);
}

}  // namespace
}  // namespace ipoibd::fabric
