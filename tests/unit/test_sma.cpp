// The Subnet Management Agent: an SM's bring-up sequence over directed
// route, the PortState machine, M_Key, every status it answers with, and
// what it drops. Requests reach the SMA the way they would on the fabric:
// built by an SM and passed through one switch with the hop rules of
// smp_dr.h; responses are walked back to the SM the same way.
//
//   SM (CA, port 1) --- 3 [S, 36 ports] 7 --- 1 (this CA)
#include <gtest/gtest.h>

#include <vector>

#include "transport/sma.h"

namespace ipoibd::transport {
namespace {

using ib::Smp;
namespace ps = ib::port_state;

constexpr std::uint64_t kNodeGuid = 0x0002C90300A1B2C0ULL;
constexpr std::uint64_t kPortGuid = 0x0002C90300A1B2C1ULL;
constexpr std::uint16_t kPermissive = ib::kLidPermissive;
constexpr std::uint16_t kSmLid = 0x0001;

SmaIdentity test_identity() {
    SmaIdentity id;
    id.node_guid = kNodeGuid;
    id.port_guid = kPortGuid;
    id.node_description = "ipoibd test node";
    id.vendor_id = 0x0002C9;
    id.device_id = 0x1003;
    id.revision = 0xB0;
    id.partition_cap = 64;  // two P_KeyTable blocks
    return id;
}

std::vector<std::uint8_t> wire(const Smp& s) {
    std::vector<std::uint8_t> out(Smp::size);
    s.write_to(out.data());
    return out;
}

Smp smp(std::uint8_t mgmt_class, std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier) {
    static std::uint64_t tid = 0x100;
    Smp s;
    s.mgmt_class = mgmt_class;
    s.method = method;
    s.attribute_id = attribute;
    s.attribute_modifier = modifier;
    s.transaction_id = ++tid;
    return s;
}

// A DR request from the SM as it arrives here: sent by the SM, forwarded by
// the switch (in on 3, out on 7).
Smp dr_arriving(std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier = 0) {
    Smp s = smp(ib::mgmt_class::subn_directed_route, method, attribute, modifier);
    const std::uint8_t path[] = {1, 7};
    EXPECT_TRUE(ib::dr_set_initial_path(s, path));
    EXPECT_EQ(ib::dr_send_request(s, 1).action, ib::DrAction::send_on_port);
    EXPECT_EQ(ib::dr_switch_outbound(s, 3, 36), ib::DrDecision::on_port(7));
    return s;
}

template <class Attribute>
Smp dr_set(std::uint16_t attribute, const Attribute& value, std::uint32_t modifier = 0) {
    Smp s = dr_arriving(ib::method::set, attribute, modifier);
    EXPECT_TRUE(ib::put_attribute(value, s.data).has_value());
    return s;
}

// Hands `request` to the SMA, checks the response is a well-formed GetResp to
// it, walks a DR response back to the SM, and returns it decoded.
Smp answer(Sma& sma, const Smp& request, SmaResult* result_out = nullptr, std::uint16_t lrh_slid = kPermissive) {
    SmaResult r = sma.handle(wire(request), lrh_slid);
    if (result_out) *result_out = r;
    EXPECT_FALSE(r.drop.has_value()) << to_string(*r.drop) << " / " << ib::to_string(r.dr_discard);
    if (!r.response) return {};
    auto reply = ib::decode_smp(r.response->mad);
    EXPECT_TRUE(reply.has_value());
    EXPECT_EQ(reply->method, ib::method::get_resp);
    EXPECT_EQ(reply->transaction_id, request.transaction_id);
    EXPECT_EQ(reply->attribute_id, request.attribute_id);
    EXPECT_EQ(reply->attribute_modifier, request.attribute_modifier);
    if (reply->is_directed_route()) {
        EXPECT_TRUE(reply->direction);
        EXPECT_EQ(r.response->dlid, kPermissive);
        EXPECT_EQ(ib::dr_switch_returning(*reply, 36), ib::DrDecision::on_port(3));
        EXPECT_EQ(ib::dr_receive_response(*reply), ib::DrDecision::deliver());
    } else {
        EXPECT_EQ(r.response->dlid, lrh_slid);
    }
    return *reply;
}

template <class Attribute>
Attribute data_of(const Smp& reply) {
    auto a = ib::decode<Attribute>(reply.data);
    EXPECT_TRUE(a.has_value());
    return *a;
}

ib::PortInfo get_port_info(Sma& sma) {
    const Smp reply = answer(sma, dr_arriving(ib::method::get, ib::smp_attr::port_info));
    EXPECT_EQ(reply.status, 0);
    return data_of<ib::PortInfo>(reply);
}

// PortInfo as an SM writes it back: what it read, with PortPhysicalState 0
// (no change). OpenSM does the same: LinkUp (5) is not a value a Set may carry.
ib::PortInfo settable(ib::PortInfo pi) {
    pi.port_physical_state = ib::port_physical_state::no_change;
    return pi;
}

// Sets PortInfo to `pi` and returns the response status and the events.
std::pair<std::uint16_t, std::vector<PortEvent>> set_port_info(Sma& sma, const ib::PortInfo& pi) {
    SmaResult r;
    const Smp reply = answer(sma, dr_set(ib::smp_attr::port_info, pi), &r);
    return {reply.status, r.events};
}

// A port the SM has taken to Armed: LID 0x10, SM LID 1.
Sma armed_port() {
    Sma sma(test_identity());
    sma.link_up();
    ib::PortInfo pi = settable(sma.port_info());
    pi.lid = 0x0010;
    pi.master_sm_lid = kSmLid;
    pi.port_state = ps::armed;
    EXPECT_EQ(set_port_info(sma, pi).first, 0);
    return sma;
}

using Events = std::vector<PortEvent>;

// ---------------------------------------------------------------------------
// The SM's bring-up sequence

TEST(Sma, StartsLikeHardwareWithTheLinkDown) {
    Sma sma(test_identity());
    const PortAttributes a = sma.attributes();
    EXPECT_EQ(a.state, PortState::down);
    EXPECT_EQ(a.lid, 0);
    EXPECT_EQ(a.port_guid, kPortGuid);
    EXPECT_EQ(a.node_guid, kNodeGuid);
    EXPECT_EQ(a.subnet_prefix, 0xFE80000000000000ULL);
    ASSERT_EQ(a.pkey_table.size(), 64u);
    EXPECT_EQ(a.pkey_table[0], 0xFFFF);
    EXPECT_EQ(a.pkey_table[1], 0);
    EXPECT_EQ(sma.port_info().port_physical_state, ib::port_physical_state::polling);
}

TEST(Sma, SubnetManagerBringsThePortUp) {
    Sma sma(test_identity());
    EXPECT_TRUE(sma.link_up().events.empty());
    EXPECT_EQ(sma.attributes().state, PortState::init);

    // 1. DR Get NodeInfo.
    const Smp ni_reply = answer(sma, dr_arriving(ib::method::get, ib::smp_attr::node_info));
    EXPECT_EQ(ni_reply.status, 0);
    const auto ni = data_of<ib::NodeInfo>(ni_reply);
    EXPECT_EQ(ni.base_version, 1);
    EXPECT_EQ(ni.class_version, 1);
    EXPECT_EQ(ni.node_type, ib::node_type::channel_adapter);
    EXPECT_EQ(ni.num_ports, 1);
    EXPECT_EQ(ni.system_image_guid, kNodeGuid);
    EXPECT_EQ(ni.node_guid, kNodeGuid);
    EXPECT_EQ(ni.port_guid, kPortGuid);
    EXPECT_EQ(ni.partition_cap, 64);
    EXPECT_EQ(ni.device_id, 0x1003);
    EXPECT_EQ(ni.revision, 0xB0u);
    EXPECT_EQ(ni.local_port_num, 1);
    EXPECT_EQ(ni.vendor_id, 0x0002C9u);

    // 2. DR Get PortInfo.
    const ib::PortInfo got = get_port_info(sma);
    ib::PortInfo pi = settable(got);
    EXPECT_EQ(got.port_state, ps::init);
    EXPECT_EQ(got.port_physical_state, ib::port_physical_state::link_up);
    EXPECT_EQ(got.lid, 0);
    EXPECT_EQ(got.local_port_num, 1);
    EXPECT_EQ(got.mtu_cap, static_cast<std::uint8_t>(ib::Mtu::mtu4096));
    EXPECT_EQ(got.neighbor_mtu, static_cast<std::uint8_t>(ib::Mtu::mtu4096));
    EXPECT_NE(got.capability_mask & ib::port_capability::is_client_reregistration_supported, 0u);
    EXPECT_EQ(got.capability_mask & ib::port_capability::is_sm, 0u);
    EXPECT_EQ(got.guid_cap, 1);
    EXPECT_EQ(got.gid_prefix, 0xFE80000000000000ULL);

    // 3. DR Set PortInfo: LID, SM LID, MTU, timeout, Armed.
    pi.lid = 0x0010;
    pi.master_sm_lid = kSmLid;
    pi.master_sm_sl = 0;
    pi.neighbor_mtu = static_cast<std::uint8_t>(ib::Mtu::mtu2048);
    pi.subnet_timeout = 18;
    pi.port_state = ps::armed;
    SmaResult r;
    Smp reply = answer(sma, dr_set(ib::smp_attr::port_info, pi), &r);
    EXPECT_EQ(reply.status, 0);
    EXPECT_EQ(r.events, (Events{PortEvent::lid_change, PortEvent::sm_change}));
    auto shown = data_of<ib::PortInfo>(reply);
    EXPECT_EQ(shown.lid, 0x0010);
    EXPECT_EQ(shown.master_sm_lid, kSmLid);
    EXPECT_EQ(shown.port_state, ps::armed);
    EXPECT_EQ(shown.subnet_timeout, 18);
    EXPECT_FALSE(shown.client_reregister);
    PortAttributes a = sma.attributes();
    EXPECT_EQ(a.state, PortState::armed);
    EXPECT_EQ(a.lid, 0x0010);
    EXPECT_EQ(a.sm_lid, kSmLid);
    EXPECT_EQ(a.active_mtu, ib::Mtu::mtu2048);

    // 4. DR Set PortInfo: Active, with ClientReregister.
    pi.port_state = ps::active;
    pi.client_reregister = true;
    reply = answer(sma, dr_set(ib::smp_attr::port_info, pi), &r);
    EXPECT_EQ(reply.status, 0);
    EXPECT_EQ(r.events, (Events{PortEvent::port_active, PortEvent::client_reregister}));
    shown = data_of<ib::PortInfo>(reply);
    EXPECT_EQ(shown.port_state, ps::active);
    EXPECT_TRUE(shown.client_reregister);  // echoed in the Set's GetResp
    EXPECT_EQ(sma.attributes().state, PortState::active);
    EXPECT_FALSE(get_port_info(sma).client_reregister);  // not state

    // 5. DR Set P_KeyTable block 0.
    ib::PKeyTableBlock block;
    block.p_keys[0] = 0xFFFF;
    block.p_keys[1] = 0x8001;
    reply = answer(sma, dr_set(ib::smp_attr::p_key_table, block, ib::p_key_table_modifier(0)), &r);
    EXPECT_EQ(reply.status, 0);
    EXPECT_EQ(r.events, (Events{PortEvent::pkey_change}));
    EXPECT_TRUE(data_of<ib::PKeyTableBlock>(reply) == block);
    EXPECT_EQ(sma.attributes().pkey_table[1], 0x8001);
    // The same table again changes nothing.
    answer(sma, dr_set(ib::smp_attr::p_key_table, block), &r);
    EXPECT_TRUE(r.events.empty());

    EXPECT_EQ(sma.counters().responses, 7u);
    EXPECT_EQ(sma.counters().error_responses, 0u);
}

TEST(Sma, LidRoutedRequestsAnswerTheSourceLid) {
    Sma sma = armed_port();
    const Smp request = smp(ib::mgmt_class::subn_lid_routed, ib::method::get, ib::smp_attr::port_info, 0);
    const Smp reply = answer(sma, request, nullptr, kSmLid);
    EXPECT_EQ(reply.mgmt_class, ib::mgmt_class::subn_lid_routed);
    EXPECT_EQ(reply.status, 0);
    EXPECT_EQ(data_of<ib::PortInfo>(reply).lid, 0x0010);
}

TEST(Sma, OtherGets) {
    Sma sma(test_identity());
    Smp reply = answer(sma, dr_arriving(ib::method::get, ib::smp_attr::node_description));
    EXPECT_EQ(data_of<ib::NodeDescription>(reply).text, "ipoibd test node");
    reply = answer(sma, dr_arriving(ib::method::get, ib::smp_attr::guid_info, 0));
    const auto guids = data_of<ib::GuidInfoBlock>(reply);
    EXPECT_EQ(guids.guids[0], kPortGuid);
    EXPECT_EQ(guids.guids[1], 0u);
    reply = answer(sma, dr_arriving(ib::method::get, ib::smp_attr::p_key_table, 1));
    EXPECT_EQ(reply.status, 0);
    EXPECT_TRUE(data_of<ib::PKeyTableBlock>(reply) == ib::PKeyTableBlock{});
    reply = answer(sma, dr_arriving(ib::method::get, ib::smp_attr::port_info, 1));  // port 1 by number
    EXPECT_EQ(reply.status, 0);
}

TEST(Sma, SetOfTheSecondPKeyBlock) {
    Sma sma(test_identity());
    ib::PKeyTableBlock block;
    block.p_keys[31] = 0x8002;
    SmaResult r;
    const Smp reply = answer(sma, dr_set(ib::smp_attr::p_key_table, block, 1), &r);
    EXPECT_EQ(reply.status, 0);
    EXPECT_EQ(r.events, (Events{PortEvent::pkey_change}));
    EXPECT_EQ(sma.attributes().pkey_table[63], 0x8002);
    EXPECT_EQ(sma.attributes().pkey_table[0], 0xFFFF);
}

// ---------------------------------------------------------------------------
// PortState

TEST(Sma, IllegalTransitionsChangeNothing) {
    struct Case {
        const char* name;
        std::uint8_t from;  // reached through link_up / Set Armed / Set Active
        std::uint8_t requested;
    };
    const Case cases[] = {
        {"Init -> Active", ps::init, ps::active},
        {"Init -> Init", ps::init, ps::init},
        {"Armed -> Init", ps::armed, ps::init},
        {"Active -> Armed", ps::active, ps::armed},
        {"Active -> Init", ps::active, ps::init},
        {"reserved state 5", ps::armed, 5},
        {"reserved state 15", ps::init, 15},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        Sma sma(test_identity());
        sma.link_up();
        ib::PortInfo pi = settable(sma.port_info());
        if (c.from >= ps::armed) {
            pi.port_state = ps::armed;
            ASSERT_EQ(set_port_info(sma, pi).first, 0);
        }
        if (c.from == ps::active) {
            pi.port_state = ps::active;
            ASSERT_EQ(set_port_info(sma, pi).first, 0);
        }
        const ib::PortInfo before = sma.port_info();
        pi.port_state = c.requested;
        pi.lid = 0x0099;  // must not be applied either: a Set is all or nothing
        const auto [status, events] = set_port_info(sma, pi);
        EXPECT_EQ(status, ib::mad_status::invalid_attr_or_modifier);
        EXPECT_TRUE(events.empty());
        EXPECT_TRUE(sma.port_info() == before);
    }
}

TEST(Sma, NoStateChangeOnAPortWhoseLinkIsDown) {
    Sma sma(test_identity());
    ib::PortInfo pi = settable(sma.port_info());
    pi.port_state = ps::armed;
    EXPECT_EQ(set_port_info(sma, pi).first, ib::mad_status::invalid_attr_or_modifier);
    pi.port_state = ps::no_change;
    pi.lid = 0x0005;
    const auto [status, events] = set_port_info(sma, pi);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(events, (Events{PortEvent::lid_change}));
    EXPECT_EQ(sma.attributes().state, PortState::down);
}

TEST(Sma, RepeatedStatesAreAccepted) {
    Sma sma = armed_port();
    ib::PortInfo pi = settable(sma.port_info());
    auto [status, events] = set_port_info(sma, pi);  // Armed again, nothing else
    EXPECT_EQ(status, 0);
    EXPECT_TRUE(events.empty());
    pi.port_state = ps::active;
    EXPECT_EQ(set_port_info(sma, pi).second, (Events{PortEvent::port_active}));
    std::tie(status, events) = set_port_info(sma, pi);
    EXPECT_EQ(status, 0);
    EXPECT_TRUE(events.empty());
}

TEST(Sma, SetDownRetrainsTheLinkBackToInit) {
    Sma sma = armed_port();
    ib::PortInfo pi = settable(sma.port_info());
    pi.port_state = ps::active;
    ASSERT_EQ(set_port_info(sma, pi).first, 0);
    pi.port_state = ps::down;
    const auto [status, events] = set_port_info(sma, pi);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(events, (Events{PortEvent::port_down}));
    EXPECT_EQ(sma.attributes().state, PortState::init);
    EXPECT_EQ(sma.attributes().lid, 0x0010);  // the LID stays
}

TEST(Sma, LinkDownAndUp) {
    Sma sma = armed_port();
    ib::PortInfo pi = settable(sma.port_info());
    pi.port_state = ps::active;
    ASSERT_EQ(set_port_info(sma, pi).first, 0);

    EXPECT_EQ(sma.link_down().events, (Events{PortEvent::port_down}));
    EXPECT_EQ(sma.attributes().state, PortState::down);
    EXPECT_EQ(sma.port_info().port_physical_state, ib::port_physical_state::polling);
    EXPECT_TRUE(sma.link_down().events.empty());  // already down

    EXPECT_TRUE(sma.link_up().events.empty());
    EXPECT_EQ(sma.attributes().state, PortState::init);
    EXPECT_EQ(sma.port_info().port_physical_state, ib::port_physical_state::link_up);
    EXPECT_TRUE(sma.link_up().events.empty());
    EXPECT_EQ(sma.attributes().state, PortState::init);

    // Down from Armed is no port_down: the port was never Active.
    Sma armed = armed_port();
    EXPECT_TRUE(armed.link_down().events.empty());
    EXPECT_EQ(armed.attributes().state, PortState::down);
}

TEST(Sma, InvalidSetValues) {
    struct Case {
        const char* name;
        void (*change)(ib::PortInfo&);
    };
    const Case cases[] = {
        {"multicast LID", [](ib::PortInfo& p) { p.lid = 0xC000; }},
        {"permissive LID", [](ib::PortInfo& p) { p.lid = 0xFFFF; }},
        {"NeighborMTU above MTUCap", [](ib::PortInfo& p) { p.neighbor_mtu = 6; }},
        {"OperationalVLs above VLCap", [](ib::PortInfo& p) { p.operational_vls = 2; }},
        {"PortPhysicalState Disabled", [](ib::PortInfo& p) { p.port_physical_state = 3; }},
        {"PortPhysicalState LinkUp", [](ib::PortInfo& p) { p.port_physical_state = 5; }},
        {"LinkDownDefaultState 3", [](ib::PortInfo& p) { p.link_down_default_state = 3; }},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        Sma sma = armed_port();
        const ib::PortInfo before = sma.port_info();
        ib::PortInfo pi = settable(before);
        c.change(pi);
        EXPECT_EQ(set_port_info(sma, pi).first, ib::mad_status::invalid_attr_or_modifier);
        EXPECT_TRUE(sma.port_info() == before);
    }
}

TEST(Sma, ReadOnlyFieldsIgnoredAndNoChangeValuesKept) {
    Sma sma = armed_port();
    const ib::PortInfo before = sma.port_info();
    ib::PortInfo pi = settable(before);
    pi.capability_mask = 0xFFFFFFFF;
    pi.link_width_active = 0x08;
    pi.mtu_cap = 1;
    pi.local_port_num = 9;
    pi.neighbor_mtu = 0;      // no change
    pi.operational_vls = 0;   // no change
    pi.port_physical_state = ib::port_physical_state::polling;  // enable: it is
    pi.link_down_default_state = 0;
    const auto [status, events] = set_port_info(sma, pi);
    EXPECT_EQ(status, 0);
    EXPECT_TRUE(events.empty());
    EXPECT_TRUE(sma.port_info() == before);
}

TEST(Sma, SmAndGidPrefixChanges) {
    Sma sma = armed_port();
    ib::PortInfo pi = settable(sma.port_info());
    pi.master_sm_sl = 3;
    pi.gid_prefix = 0xFEC0000000000001ULL;
    pi.lmc = 2;
    const auto [status, events] = set_port_info(sma, pi);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(events, (Events{PortEvent::lid_change, PortEvent::sm_change}));
    const PortAttributes a = sma.attributes();
    EXPECT_EQ(a.sm_sl, 3);
    EXPECT_EQ(a.lmc, 2);
    EXPECT_EQ(a.subnet_prefix, 0xFEC0000000000001ULL);
}

// ---------------------------------------------------------------------------
// M_Key

TEST(Sma, MKeyProtection) {
    Sma sma = armed_port();
    ib::PortInfo pi = settable(sma.port_info());
    pi.m_key = 0xABCD;
    pi.m_key_protect_bits = 1;
    ASSERT_EQ(set_port_info(sma, pi).first, 0);  // the port's M_Key was 0: no check

    Smp get = dr_arriving(ib::method::get, ib::smp_attr::port_info);
    get.m_key = 0xABCD;
    EXPECT_EQ(data_of<ib::PortInfo>(answer(sma, get)).m_key, 0xABCDu);
    get = dr_arriving(ib::method::get, ib::smp_attr::port_info);
    get.m_key = 0x1111;  // wrong key, protect bits 1: Get works, M_Key hidden
    EXPECT_EQ(data_of<ib::PortInfo>(answer(sma, get)).m_key, 0u);

    Smp set = dr_set(ib::smp_attr::port_info, pi);
    set.m_key = 0x1111;  // wrong key: a Set fails silently
    SmaResult r = sma.handle(wire(set), kPermissive);
    EXPECT_EQ(r.drop, SmaDrop::m_key_mismatch);
    EXPECT_FALSE(r.response.has_value());
    EXPECT_EQ(sma.port_info().m_key_violations, 1);
    EXPECT_EQ(sma.counters().dropped_for(SmaDrop::m_key_mismatch), 1u);

    pi.m_key_protect_bits = 2;
    set = dr_set(ib::smp_attr::port_info, pi);
    set.m_key = 0xABCD;
    ASSERT_EQ(answer(sma, set).status, 0);
    get = dr_arriving(ib::method::get, ib::smp_attr::node_info);
    get.m_key = 0x1111;  // protect bits 2: no Get either
    EXPECT_EQ(sma.handle(wire(get), kPermissive).drop, SmaDrop::m_key_mismatch);

    pi.m_key_protect_bits = 0;
    set = dr_set(ib::smp_attr::port_info, pi);
    set.m_key = 0xABCD;
    ASSERT_EQ(answer(sma, set).status, 0);
    get = dr_arriving(ib::method::get, ib::smp_attr::port_info);
    get.m_key = 0x1111;  // protect bits 0: Get shows the key
    EXPECT_EQ(data_of<ib::PortInfo>(answer(sma, get)).m_key, 0xABCDu);
}

// The SM's contact (what ipoibd's sm-silence watches) is a request with
// the port's M_Key: the Gets any port may send without it do not count.
TEST(Sma, OnlyRequestsWithTheKeyCountAsSmContact) {
    using namespace std::chrono_literals;
    Sma sma = armed_port();
    ib::PortInfo pi = settable(sma.port_info());
    pi.m_key = 0xABCD;
    pi.m_key_protect_bits = 1;
    ASSERT_EQ(set_port_info(sma, pi).first, 0);
    const auto t0 = Sma::Clock::time_point{} + 1h;
    Smp get = dr_arriving(ib::method::get, ib::smp_attr::port_info);
    get.m_key = 0xABCD;
    ASSERT_FALSE(sma.handle(wire(get), kPermissive, t0).drop.has_value());
    EXPECT_EQ(sma.last_request(), t0);
    get = dr_arriving(ib::method::get, ib::smp_attr::node_info);
    get.m_key = 0x1111;  // answered (protect bits 1), but not the SM
    ASSERT_TRUE(sma.handle(wire(get), kPermissive, t0 + 30s).response.has_value());
    EXPECT_EQ(sma.last_request(), t0);
    get.m_key = 0xABCD;
    ASSERT_TRUE(sma.handle(wire(get), kPermissive, t0 + 40s).response.has_value());
    EXPECT_EQ(sma.last_request(), t0 + 40s);
}

// A violation starts the lease (M_KeyLeasePeriod seconds); a request with
// the key stops it; when it runs out the protect bits become 0, so that a
// Get shows the key to an SM that lost it. Each violation sends Trap 256 to
// the master SM, at most one a second.
// A port the SM gave M_Key 0xABCD, protect bits 2 and a 10 s lease.
ib::PortInfo protect(Sma& sma) {
    ib::PortInfo pi = settable(sma.port_info());
    pi.m_key = 0xABCD;
    pi.m_key_protect_bits = 2;
    pi.m_key_lease_period = 10;
    EXPECT_EQ(set_port_info(sma, pi).first, 0);
    return pi;
}

TEST(Sma, MKeyLeaseAndTraps) {
    using namespace std::chrono_literals;
    Sma sma = armed_port();
    const auto t0 = Sma::Clock::time_point{} + 1h;
    ib::PortInfo pi = protect(sma);
    ASSERT_NE(sma.port_info().master_sm_lid, 0);
    ASSERT_NE(sma.port_info().lid, 0);

    // A forged Set from LID 0x0007: dropped, a trap to the SM.
    ib::PortInfo down = pi;
    down.port_state = ib::port_state::down;
    Smp forged = smp(ib::mgmt_class::subn_lid_routed, ib::method::set, ib::smp_attr::port_info, 0);
    ASSERT_TRUE(ib::put_attribute(down, forged.data));
    forged.m_key = 0x6666;
    SmaResult r = sma.handle(wire(forged), 0x0007, t0);
    EXPECT_EQ(r.drop, SmaDrop::m_key_mismatch);
    EXPECT_TRUE(r.events.empty());
    EXPECT_EQ(sma.port_info().port_state, pi.port_state);
    ASSERT_TRUE(r.trap);
    EXPECT_EQ(r.trap->dlid, sma.port_info().master_sm_lid);
    const auto trap = *ib::decode_smp(r.trap->mad);
    EXPECT_EQ(trap.method, ib::method::trap);
    EXPECT_EQ(trap.mgmt_class, ib::mgmt_class::subn_lid_routed);
    EXPECT_EQ(trap.attribute_id, ib::smp_attr::notice);
    const auto notice = ib::SmpNotice::read_from(trap.data.data());
    EXPECT_TRUE(notice.is_generic);
    EXPECT_EQ(notice.type, ib::trap::type_security);
    EXPECT_EQ(notice.trap_number, ib::trap::bad_m_key);
    EXPECT_EQ(notice.issuer_lid, sma.port_info().lid);
    EXPECT_EQ(ib::read_bad_m_key(notice.data_details),
              (ib::BadMKeyTrap{.lid = 0x0007, .method = ib::method::set, .attribute_id = ib::smp_attr::port_info,
                               .m_key = 0x6666}));
    // Within the second: counted, no second trap.
    r = sma.handle(wire(forged), 0x0007, t0 + 500ms);
    EXPECT_FALSE(r.trap);
    EXPECT_EQ(sma.counters().traps_suppressed, 1u);
    EXPECT_EQ(sma.counters().traps_sent, 1u);

    // The lease started at the first violation: 10 s later protection is off
    // and a Get with any key shows the M_Key.
    Smp get = smp(ib::mgmt_class::subn_lid_routed, ib::method::get, ib::smp_attr::port_info, 0);
    get.m_key = 0x1111;
    EXPECT_EQ(sma.handle(wire(get), 0x0001, t0 + 9s).drop, SmaDrop::m_key_mismatch);
    r = sma.handle(wire(get), 0x0001, t0 + 10s);
    ASSERT_TRUE(r.response);
    EXPECT_EQ(ib::PortInfo::read_from(ib::decode_smp(r.response->mad)->data.data()).m_key, 0xABCDu);
    EXPECT_EQ(sma.port_info().m_key_protect_bits, 0);
    EXPECT_EQ(sma.counters().m_key_lease_expiries, 1u);
    // Still no Set without the key; with it, the SM takes the port back.
    EXPECT_EQ(sma.handle(wire(forged), 0x0007, t0 + 11s).drop, SmaDrop::m_key_mismatch);
    pi.m_key = 0x5EC7E7;
    Smp take = smp(ib::mgmt_class::subn_lid_routed, ib::method::set, ib::smp_attr::port_info, 0);
    ASSERT_TRUE(ib::put_attribute(pi, take.data));
    take.m_key = 0xABCD;
    r = sma.handle(wire(take), 0x0001, t0 + 12s);
    ASSERT_TRUE(r.response);
    EXPECT_EQ(sma.port_info().m_key, 0x5EC7E7u);
    EXPECT_EQ(sma.port_info().m_key_protect_bits, 2);
}

TEST(Sma, TheRightKeyStopsTheLease) {
    using namespace std::chrono_literals;
    Sma sma = armed_port();
    const auto t0 = Sma::Clock::time_point{} + 1h;
    protect(sma);
    Smp get = smp(ib::mgmt_class::subn_lid_routed, ib::method::get, ib::smp_attr::port_info, 0);
    get.m_key = 0x1111;
    EXPECT_EQ(sma.handle(wire(get), 0x0009, t0).drop, SmaDrop::m_key_mismatch);
    get.m_key = 0xABCD;  // the SM's sweep
    EXPECT_TRUE(sma.handle(wire(get), 0x0001, t0 + 5s).response);
    get.m_key = 0x1111;
    EXPECT_EQ(sma.handle(wire(get), 0x0009, t0 + 20s).drop, SmaDrop::m_key_mismatch);  // a new lease from here
    EXPECT_EQ(sma.port_info().m_key_protect_bits, 2);
    EXPECT_EQ(sma.counters().m_key_lease_expiries, 0u);
}

// ---------------------------------------------------------------------------
// Statuses

TEST(Sma, UnsupportedMethodsAttributesAndModifiers) {
    struct Case {
        const char* name;
        std::uint8_t method;
        std::uint16_t attribute;
        std::uint32_t modifier;
        std::uint16_t status;
    };
    using namespace ib::mad_status;
    const Case cases[] = {
        {"Get SwitchInfo on a CA", ib::method::get, ib::smp_attr::switch_info, 0, method_attr_not_supported},
        {"Get LinearForwardingTable", ib::method::get, ib::smp_attr::linear_forwarding_table, 0,
         method_attr_not_supported},
        {"Get SMInfo without an SM", ib::method::get, ib::smp_attr::sm_info, 0, method_attr_not_supported},
        {"Get Notice", ib::method::get, ib::smp_attr::notice, 0, method_attr_not_supported},
        {"Get unknown attribute", ib::method::get, 0x7777, 0, method_attr_not_supported},
        {"Set NodeInfo", ib::method::set, ib::smp_attr::node_info, 0, method_attr_not_supported},
        {"Set NodeDescription", ib::method::set, ib::smp_attr::node_description, 0, method_attr_not_supported},
        {"Set GUIDInfo", ib::method::set, ib::smp_attr::guid_info, 0, method_attr_not_supported},
        {"Send", ib::method::send, ib::smp_attr::port_info, 0, method_not_supported},
        {"GetTable", ib::method::get_table, ib::smp_attr::port_info, 0, method_not_supported},
        {"NodeInfo modifier 1", ib::method::get, ib::smp_attr::node_info, 1, invalid_attr_or_modifier},
        {"NodeDescription modifier 1", ib::method::get, ib::smp_attr::node_description, 1,
         invalid_attr_or_modifier},
        {"PortInfo of port 2", ib::method::get, ib::smp_attr::port_info, 2, invalid_attr_or_modifier},
        {"Set PortInfo of port 2", ib::method::set, ib::smp_attr::port_info, 2, invalid_attr_or_modifier},
        {"P_KeyTable block 2 of 2", ib::method::get, ib::smp_attr::p_key_table, 2, invalid_attr_or_modifier},
        {"Set P_KeyTable block 2", ib::method::set, ib::smp_attr::p_key_table, 2, invalid_attr_or_modifier},
        {"GUIDInfo block 1", ib::method::get, ib::smp_attr::guid_info, 1, invalid_attr_or_modifier},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        Sma sma = armed_port();
        const PortAttributes before = sma.attributes();
        Smp request = dr_arriving(c.method, c.attribute, c.modifier);
        request.data.fill(0x5A);
        SmaResult r;
        const Smp reply = answer(sma, request, &r);
        EXPECT_EQ(reply.status, c.status) << ib::describe_mad_status(reply.status);
        EXPECT_EQ(reply.data, request.data);  // an error echoes the request's Data
        EXPECT_TRUE(r.events.empty());
        EXPECT_TRUE(sma.attributes() == before);
        EXPECT_EQ(sma.counters().error_responses, 1u);
    }
}

TEST(Sma, BadVersionsAnswerBadVersion) {
    Sma sma(test_identity());
    Smp request = dr_arriving(ib::method::get, ib::smp_attr::node_info);
    request.class_version = 2;
    EXPECT_EQ(answer(sma, request).status, ib::mad_status::bad_version);
    request = dr_arriving(ib::method::get, ib::smp_attr::node_info);
    request.base_version = 2;
    const Smp reply = answer(sma, request);
    EXPECT_EQ(reply.status, ib::mad_status::bad_version);
    EXPECT_EQ(reply.base_version, 2);  // turned around as received
}

// ---------------------------------------------------------------------------
// Drops

TEST(Sma, DropsWhatItCannotAnswer) {
    Sma sma(test_identity());
    const auto expect_drop = [&](bytes mad, SmaDrop why, const char* name) {
        SCOPED_TRACE(name);
        const SmaResult r = sma.handle(mad, kPermissive);
        EXPECT_EQ(r.drop, why);
        EXPECT_FALSE(r.response.has_value());
        EXPECT_TRUE(r.events.empty());
    };
    auto good = wire(dr_arriving(ib::method::get, ib::smp_attr::node_info));
    expect_drop(bytes(good).first(255), SmaDrop::not_smp, "255 bytes");
    auto sa = good;
    sa[1] = ib::mgmt_class::subn_adm;
    expect_drop(sa, SmaDrop::not_smp, "SubnAdm class");
    expect_drop(wire(dr_arriving(ib::method::get_resp, ib::smp_attr::node_info)), SmaDrop::not_a_request,
                "GetResp");
    // A TrapRepress (with the M_Key, here none) is taken quietly.
    const SmaResult repress = sma.handle(wire(dr_arriving(ib::method::trap_repress, ib::smp_attr::notice)), kPermissive);
    EXPECT_FALSE(repress.drop);
    EXPECT_FALSE(repress.response);
    EXPECT_EQ(sma.counters().trap_represses, 1u);
    expect_drop(wire(dr_arriving(ib::method::trap, ib::smp_attr::notice)), SmaDrop::not_a_request, "Trap");

    Smp mid = dr_arriving(ib::method::get, ib::smp_attr::node_info);
    mid.hop_pointer = 1;  // still on the directed part: this CA is not a switch
    SmaResult r = sma.handle(wire(mid), kPermissive);
    EXPECT_EQ(r.drop, SmaDrop::directed_route);
    EXPECT_EQ(r.dr_discard, ib::DrDiscard::not_a_switch);
    Smp far = dr_arriving(ib::method::get, ib::smp_attr::node_info);
    far.dr_dlid = 0x0033;  // a LID-routed last part would have to start here
    EXPECT_EQ(sma.handle(wire(far), kPermissive).dr_discard, ib::DrDiscard::dr_dlid_not_permissive);

    const SmaCounters& c = sma.counters();
    EXPECT_EQ(c.dropped_for(SmaDrop::not_smp), 2u);
    EXPECT_EQ(c.dropped_for(SmaDrop::not_a_request), 2u);
    EXPECT_EQ(c.dropped_for(SmaDrop::directed_route), 2u);
    EXPECT_EQ(c.responses, 0u);
    for (std::size_t i = 0; i < kSmaDropCount; ++i) EXPECT_STRNE(to_string(static_cast<SmaDrop>(i)), "unknown");
}

TEST(Sma, DirectedRouteWithALidRoutedLastPart) {
    // The directed part ended at the switch, which forwarded by LID to us
    // (DrDLID = our LID): HopPointer is HopCount + 1 on arrival, and the
    // response goes back by LID to the switch (the request's LRH SLID).
    Sma sma = armed_port();
    Smp s = smp(ib::mgmt_class::subn_directed_route, ib::method::get, ib::smp_attr::node_info, 0);
    s.dr_dlid = 0x0010;
    const std::uint8_t path[] = {1};
    ASSERT_TRUE(ib::dr_set_initial_path(s, path));
    ASSERT_EQ(ib::dr_send_request(s, 1).action, ib::DrAction::send_on_port);
    ASSERT_EQ(ib::dr_switch_outbound(s, 3, 36), ib::DrDecision::lid_routed(0x0010));
    const SmaResult r = sma.handle(wire(s), 0x0020);
    ASSERT_TRUE(r.response.has_value());
    EXPECT_EQ(r.response->dlid, 0x0020);
    auto reply = ib::decode_smp(r.response->mad);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->hop_pointer, 2);
    EXPECT_EQ(ib::dr_switch_returning(*reply, 36), ib::DrDecision::on_port(3));
    EXPECT_EQ(ib::dr_receive_response(*reply), ib::DrDecision::deliver());
}

TEST(Sma, HopCountZeroHasNoLocalSm) {
    // HopCount 0 is an SM querying its own node; this node has no SM.
    Sma sma(test_identity());
    Smp s = smp(ib::mgmt_class::subn_directed_route, ib::method::get, ib::smp_attr::node_info, 0);
    ASSERT_TRUE(ib::dr_set_initial_path(s, {}));
    const SmaResult r = sma.handle(wire(s), kPermissive);
    EXPECT_EQ(r.drop, SmaDrop::no_local_sm);
    EXPECT_FALSE(r.response.has_value());
}

TEST(Sma, HopCountZeroAnswersAnSmOnThisNode) {
    // An SM (or a management tool, ibfabricd's sim clients) on this node:
    // the response of HopCount 0 never leaves the node, it is handed back.
    Sma sma(test_identity());
    sma.set_local_sm(true);
    Smp s = smp(ib::mgmt_class::subn_directed_route, ib::method::get, ib::smp_attr::node_info, 0);
    ASSERT_TRUE(ib::dr_set_initial_path(s, {}));
    ASSERT_EQ(ib::dr_send_request(s, 1), ib::DrDecision::deliver());
    const SmaResult r = sma.handle(wire(s), kPermissive);
    EXPECT_FALSE(r.drop.has_value());
    EXPECT_FALSE(r.response.has_value());
    ASSERT_TRUE(r.local_response.has_value());
    auto reply = ib::decode_smp(r.local_response->mad);
    ASSERT_TRUE(reply.has_value());
    EXPECT_TRUE(reply->direction);
    EXPECT_EQ(reply->method, ib::method::get_resp);
    EXPECT_EQ(reply->hop_pointer, 0);
    EXPECT_EQ(ib::NodeInfo::read_from(reply->data.data()).node_guid, test_identity().node_guid);
    EXPECT_EQ(sma.counters().responses, 1u);
}

TEST(Sma, IsSmIsACapabilityBit) {
    Sma sma(test_identity());
    EXPECT_EQ(sma.port_info().capability_mask & ib::port_capability::is_sm, 0u);
    sma.set_is_sm(true);
    EXPECT_NE(sma.port_info().capability_mask & ib::port_capability::is_sm, 0u);
    EXPECT_NE(sma.port_info().capability_mask & ib::port_capability::is_client_reregistration_supported, 0u);
    sma.set_is_sm(false);
    EXPECT_EQ(sma.port_info().capability_mask & ib::port_capability::is_sm, 0u);
}

}  // namespace
}  // namespace ipoibd::transport
