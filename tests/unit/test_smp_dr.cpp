// Directed-route hop rules (IBA 14.2.2): every clause of each node's rule as
// a table case, then whole routes walked hop by hop (requester, switches,
// responder, and back) with and without LID-routed first and last parts.
#include <gtest/gtest.h>

#include <vector>

#include "transport/wire/smp_dr.h"

namespace ipoibd::ib {
namespace {

constexpr std::uint16_t P = kLidPermissive;

// A DR SMP with the route fields a case needs; InitialPath = 1, 2, 3, ...
// so that InitialPath[i] == i, and ReturnPath[i] == 10 + i.
Smp dr_smp(std::uint8_t hop_pointer, std::uint8_t hop_count, bool returning, std::uint16_t dr_slid = P,
           std::uint16_t dr_dlid = P) {
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    s.method = returning ? method::get_resp : method::get;
    s.direction = returning;
    s.hop_pointer = hop_pointer;
    s.hop_count = hop_count;
    s.dr_slid = dr_slid;
    s.dr_dlid = dr_dlid;
    for (std::size_t i = 1; i < kSmpPathSize; ++i) {
        s.initial_path[i] = static_cast<std::uint8_t>(i);
        s.return_path[i] = static_cast<std::uint8_t>(10 + i);
    }
    return s;
}

struct Case {
    const char* name;
    Smp smp;
    DrDecision want;
    std::uint8_t hop_pointer_after;
};

void run(const std::vector<Case>& cases, DrDecision (*rule)(Smp&)) {
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        Smp s = c.smp;
        const DrDecision got = rule(s);
        EXPECT_EQ(to_string(got.action), std::string(to_string(c.want.action)));
        EXPECT_EQ(to_string(got.reason), std::string(to_string(c.want.reason)));
        EXPECT_TRUE(got == c.want) << "port " << int{got.port} << " lid " << got.lid;
        EXPECT_EQ(int{s.hop_pointer}, int{c.hop_pointer_after});
    }
}

const auto deliver = DrDecision::deliver();
DrDecision port(std::uint8_t p) { return DrDecision::on_port(p); }
DrDecision lid(std::uint16_t l) { return DrDecision::lid_routed(l); }
DrDecision discard(DrDiscard why) { return DrDecision::discard(why); }

TEST(DrPath, SetInitialPath) {
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    s.hop_pointer = 9;
    const std::uint8_t ports[] = {1, 5, 7};
    ASSERT_TRUE(dr_set_initial_path(s, ports));
    EXPECT_EQ(s.hop_count, 3);
    EXPECT_EQ(s.hop_pointer, 0);
    EXPECT_EQ(s.initial_path[0], 0);
    EXPECT_EQ(s.initial_path[1], 1);
    EXPECT_EQ(s.initial_path[3], 7);
    EXPECT_EQ(s.initial_path[4], 0);
    std::vector<std::uint8_t> too_long(64, 1);
    EXPECT_FALSE(dr_set_initial_path(s, too_long));
    EXPECT_EQ(s.hop_count, 3);
    too_long.pop_back();
    EXPECT_TRUE(dr_set_initial_path(s, too_long));
    EXPECT_EQ(s.hop_count, 63);
}

// ---------------------------------------------------------------------------
// One rule at a time

TEST(DrRules, RequesterSends) {
    run({
            {"C14-9:1 first hop out InitialPath[1]", dr_smp(0, 3, false), port(1), 1},
            {"C14-9:3 HopCount 0: own SMA", dr_smp(0, 0, false), deliver, 1},
            {"C14-9:3 HopCount 0 to a LID", dr_smp(0, 0, false, P, 0x0042), lid(0x0042), 1},
            {"C14-6 HopCount 64", dr_smp(0, 64, false), discard(DrDiscard::bad_hop_count), 0},
            {"HopPointer already moved", dr_smp(1, 3, false), discard(DrDiscard::bad_hop_pointer), 1},
            {"returning", dr_smp(0, 3, true), discard(DrDiscard::wrong_direction), 0},
        },
        [](Smp& s) { return dr_send_request(s, 1); });
    // InitialPath[1] must be a port of the requester.
    Smp s = dr_smp(0, 2, false);
    s.initial_path[1] = 2;
    EXPECT_EQ(dr_send_request(s, 1).reason, DrDiscard::invalid_port);
    s = dr_smp(0, 2, false);
    s.initial_path[1] = 0;
    EXPECT_EQ(dr_send_request(s, 4).reason, DrDiscard::invalid_port);
}

TEST(DrRules, DestinationReceives) {
    run({
            {"C14-9:3 end of the directed part", dr_smp(3, 3, false), deliver, 4},
            {"C14-9:3 HopCount 0", dr_smp(0, 0, false), deliver, 1},
            {"C14-9:4 after a LID-routed last part", dr_smp(4, 3, false, P, 0x0007), deliver, 4},
            {"C14-9:3 DrDLID not permissive at a CA", dr_smp(3, 3, false, P, 0x0007),
             discard(DrDiscard::dr_dlid_not_permissive), 3},
            {"C14-9:1 HopPointer 0", dr_smp(0, 3, false), discard(DrDiscard::hop_pointer_not_advanced), 0},
            {"C14-9:2 intermediate hop", dr_smp(2, 3, false), discard(DrDiscard::not_a_switch), 2},
            {"C14-9:5 HopPointer beyond", dr_smp(5, 3, false), discard(DrDiscard::bad_hop_pointer), 5},
            {"C14-6 HopCount 200", dr_smp(200, 200, false), discard(DrDiscard::bad_hop_count), 200},
            {"returning", dr_smp(3, 3, true), discard(DrDiscard::wrong_direction), 3},
        },
        [](Smp& s) { return dr_receive_request(s, 1); });
    // The ingress port lands in ReturnPath[HopCount].
    Smp s = dr_smp(3, 3, false);
    s.return_path[3] = 0;
    ASSERT_EQ(dr_receive_request(s, 9).action, DrAction::deliver);
    EXPECT_EQ(s.return_path[3], 9);
    EXPECT_EQ(s.return_path[2], 12);  // untouched
    s = dr_smp(0, 0, false);
    ASSERT_EQ(dr_receive_request(s, 9).action, DrAction::deliver);
    EXPECT_EQ(s.return_path[0], 0);  // HopCount 0: nothing recorded
}

TEST(DrRules, ResponderSends) {
    run({
            {"C14-13:1 back out ReturnPath[HopCount]", dr_smp(4, 3, false), port(13), 3},
            {"C14-13:3 HopCount 0, SM on this node", dr_smp(1, 0, false), deliver, 0},
            {"C14-13:3 HopCount 0, SM at DrSLID", dr_smp(1, 0, false, 0x0009), lid(0x0009), 0},
            {"LID-routed last part: back to the request's SLID", dr_smp(4, 3, false, P, 0x0007), lid(0x0033), 4},
            {"not delivered yet", dr_smp(3, 3, false), discard(DrDiscard::bad_hop_pointer), 3},
            {"C14-6", dr_smp(65, 64, false), discard(DrDiscard::bad_hop_count), 65},
        },
        [](Smp& s) { return dr_send_response(s, 16, 0x0033); });
    Smp s = dr_smp(4, 3, false);
    EXPECT_EQ(dr_send_response(s, 12, 0).reason, DrDiscard::invalid_port);  // ReturnPath[3] = 13 > 12
    EXPECT_TRUE(s.direction);
}

TEST(DrRules, RequesterReceivesResponse) {
    run({
            {"C14-13:3 end of the directed part", dr_smp(1, 3, true), deliver, 0},
            {"C14-13:4 after a LID-routed first part", dr_smp(0, 3, true, 0x0009), deliver, 0},
            {"C14-13:3 DrSLID not permissive at a CA", dr_smp(1, 3, true, 0x0009),
             discard(DrDiscard::dr_slid_not_permissive), 1},
            {"C14-13:2 intermediate hop", dr_smp(2, 3, true), discard(DrDiscard::not_a_switch), 2},
            {"C14-13:1 is the sender's", dr_smp(4, 3, true), discard(DrDiscard::bad_hop_pointer), 4},
            {"C14-13:5", dr_smp(9, 3, true), discard(DrDiscard::bad_hop_pointer), 9},
            {"outbound", dr_smp(1, 3, false), discard(DrDiscard::wrong_direction), 1},
        },
        [](Smp& s) { return dr_receive_response(s); });
}

TEST(DrRules, SwitchOutbound) {
    run({
            {"C14-9:2 intermediate", dr_smp(1, 3, false), port(2), 2},
            {"C14-9:2 last intermediate", dr_smp(2, 3, false), port(3), 3},
            {"C14-9:3 end, own SMA", dr_smp(3, 3, false), deliver, 4},
            {"C14-9:3 end, LID-routed last part", dr_smp(3, 3, false, P, 0x0044), lid(0x0044), 4},
            {"C14-9:3 HopCount 0", dr_smp(0, 0, false), deliver, 1},
            {"C14-9:4 own SMA after a LID-routed last part", dr_smp(4, 3, false, P, 0x0044), deliver, 4},
            {"C14-9:1 after a LID-routed first part", dr_smp(0, 3, false, 0x0009), port(1), 1},
            {"C14-9:1 HopPointer 0 on the directed part", dr_smp(0, 3, false),
             discard(DrDiscard::hop_pointer_not_advanced), 0},
            {"C14-9:5", dr_smp(6, 3, false), discard(DrDiscard::bad_hop_pointer), 6},
            {"C14-6", dr_smp(1, 64, false), discard(DrDiscard::bad_hop_count), 1},
            {"returning", dr_smp(1, 3, true), discard(DrDiscard::wrong_direction), 1},
        },
        [](Smp& s) { return dr_switch_outbound(s, 7, 36); });
    // ReturnPath[HopPointer] takes the ingress port before HopPointer moves.
    Smp s = dr_smp(1, 3, false);
    ASSERT_EQ(dr_switch_outbound(s, 7, 36).port, 2);
    EXPECT_EQ(s.return_path[1], 7);
    EXPECT_EQ(s.return_path[2], 12);
    s = dr_smp(3, 3, false);
    ASSERT_EQ(dr_switch_outbound(s, 7, 36).action, DrAction::deliver);
    EXPECT_EQ(s.return_path[3], 7);
    // The next port must exist on this switch; port 0 is not an egress port.
    s = dr_smp(1, 3, false);
    s.initial_path[2] = 37;
    EXPECT_EQ(dr_switch_outbound(s, 7, 36).reason, DrDiscard::invalid_port);
    s = dr_smp(1, 3, false);
    s.initial_path[2] = 0;
    EXPECT_EQ(dr_switch_outbound(s, 7, 36).reason, DrDiscard::invalid_port);
}

TEST(DrRules, SwitchReturning) {
    run({
            {"C14-13:1 back from a LID-routed last part", dr_smp(4, 3, true, P, 0x0044), port(13), 3},
            {"C14-13:2", dr_smp(3, 3, true), port(12), 2},
            {"C14-13:2 lowest", dr_smp(2, 3, true), port(11), 1},
            {"C14-13:3 own SM", dr_smp(1, 3, true), deliver, 0},
            {"C14-13:3 LID-routed first part back", dr_smp(1, 3, true, 0x0009), lid(0x0009), 0},
            {"C14-13:4 own SM after a LID-routed first part", dr_smp(0, 3, true, 0x0009), deliver, 0},
            {"C14-13:5", dr_smp(5, 3, true), discard(DrDiscard::bad_hop_pointer), 5},
            {"C14-13:5 HopCount 0", dr_smp(2, 0, true), discard(DrDiscard::bad_hop_pointer), 2},
            {"C14-6", dr_smp(1, 70, true), discard(DrDiscard::bad_hop_count), 1},
            {"outbound", dr_smp(2, 3, false), discard(DrDiscard::wrong_direction), 2},
        },
        [](Smp& s) { return dr_switch_returning(s, 36); });
}

TEST(DrRules, Names) {
    for (std::size_t i = 0; i < kDrDiscardCount; ++i)
        EXPECT_STRNE(to_string(static_cast<DrDiscard>(i)), "unknown") << i;
    EXPECT_STREQ(to_string(DrAction::send_on_port), "send on port");
}

// ---------------------------------------------------------------------------
// Whole routes. The fabric:
//
//   SM (CA, port 1) --- 3 [S1] 5 --- 2 [S2] 7 --- 1 (CA A)
//
// S1 and S2 have 36 ports. The SM's directed route to A is 1, 5, 7.

TEST(DrRoute, ThereAndBackThroughTwoSwitches) {
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    s.method = method::get;
    const std::uint8_t path[] = {1, 5, 7};
    ASSERT_TRUE(dr_set_initial_path(s, path));

    EXPECT_EQ(dr_send_request(s, 1), DrDecision::on_port(1));  // SM
    EXPECT_EQ(dr_switch_outbound(s, 3, 36), DrDecision::on_port(5));  // S1, in on 3
    EXPECT_EQ(dr_switch_outbound(s, 2, 36), DrDecision::on_port(7));  // S2, in on 2
    EXPECT_EQ(dr_receive_request(s, 1), DrDecision::deliver());  // A, in on 1
    EXPECT_EQ(s.hop_pointer, 4);
    EXPECT_EQ(s.return_path[1], 3);
    EXPECT_EQ(s.return_path[2], 2);
    EXPECT_EQ(s.return_path[3], 1);

    s.method = method::get_resp;
    EXPECT_EQ(dr_send_response(s, 1, P), DrDecision::on_port(1));  // A
    EXPECT_TRUE(s.direction);
    EXPECT_EQ(dr_switch_returning(s, 36), DrDecision::on_port(2));  // S2 back toward S1
    EXPECT_EQ(dr_switch_returning(s, 36), DrDecision::on_port(3));  // S1 back toward the SM
    EXPECT_EQ(dr_receive_response(s), DrDecision::deliver());  // SM
    EXPECT_EQ(s.hop_pointer, 0);
    // The response carries the route back for the SM to read.
    EXPECT_EQ(s.initial_path[3], 7);
    EXPECT_EQ(s.return_path[1], 3);
}

TEST(DrRoute, QueryOfTheFirstSwitchItself) {
    // SM -> S1's own SMA: path {1}. S1 answers out of the port it heard on.
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    const std::uint8_t path[] = {1};
    ASSERT_TRUE(dr_set_initial_path(s, path));
    EXPECT_EQ(dr_send_request(s, 1), DrDecision::on_port(1));
    EXPECT_EQ(dr_switch_outbound(s, 3, 36), DrDecision::deliver());
    EXPECT_EQ(dr_send_response(s, 36, P), DrDecision::on_port(3));
    EXPECT_EQ(dr_receive_response(s), DrDecision::deliver());
    EXPECT_EQ(s.hop_pointer, 0);
}

TEST(DrRoute, OwnPortWithNoHops) {
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    ASSERT_TRUE(dr_set_initial_path(s, {}));
    EXPECT_EQ(dr_send_request(s, 1), DrDecision::deliver());  // to this node's SMA
    EXPECT_EQ(dr_send_response(s, 1, P), DrDecision::deliver());  // back to this node's SM
    EXPECT_EQ(s.hop_pointer, 0);
}

TEST(DrRoute, LidRoutedFirstAndLastParts) {
    // The SM (LID 9) reaches S1 by LID; the directed part is S1 -5-> S2;
    // S2 forwards by LID to DrDLID 0x44, a CA behind further switches.
    Smp s;
    s.mgmt_class = mgmt_class::subn_directed_route;
    s.dr_slid = 0x0009;
    s.dr_dlid = 0x0044;
    const std::uint8_t path[] = {5};
    ASSERT_TRUE(dr_set_initial_path(s, path));
    // The SM sends it as is, LID-routed to S1; S1 starts the directed part.
    EXPECT_EQ(dr_switch_outbound(s, 3, 36), DrDecision::on_port(5));
    EXPECT_EQ(dr_switch_outbound(s, 2, 36), DrDecision::lid_routed(0x0044));  // S2
    EXPECT_EQ(s.return_path[1], 2);
    EXPECT_EQ(dr_receive_request(s, 1), DrDecision::deliver());  // the CA, LID 0x44
    EXPECT_EQ(s.hop_pointer, 2);
    // The CA answers by LID to the SLID the request came from (S2, LID 0x20).
    EXPECT_EQ(dr_send_response(s, 1, 0x0020), DrDecision::lid_routed(0x0020));
    EXPECT_EQ(dr_switch_returning(s, 36), DrDecision::on_port(2));  // S2, C14-13:1
    EXPECT_EQ(dr_switch_returning(s, 36), DrDecision::lid_routed(0x0009));  // S1, C14-13:3
    EXPECT_EQ(dr_receive_response(s), DrDecision::deliver());  // the SM, C14-13:4
    EXPECT_EQ(s.hop_pointer, 0);
}

}  // namespace
}  // namespace ipoibd::ib
