// The verbs <-> port.h mappings and the AH cache, on synthetic verbs
// structures: no device needed, so these run everywhere.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "transport/verbs/lru_cache.h"
#include "transport/verbs/verbs_convert.h"

namespace ipoibd::transport::verbs {
namespace {

TEST(VerbsConvert, PortStates) {
    EXPECT_EQ(port_state_from_verbs(IBV_PORT_NOP), PortState::down);
    EXPECT_EQ(port_state_from_verbs(IBV_PORT_DOWN), PortState::down);
    EXPECT_EQ(port_state_from_verbs(IBV_PORT_INIT), PortState::init);
    EXPECT_EQ(port_state_from_verbs(IBV_PORT_ARMED), PortState::armed);
    EXPECT_EQ(port_state_from_verbs(IBV_PORT_ACTIVE), PortState::active);
    EXPECT_EQ(port_state_from_verbs(IBV_PORT_ACTIVE_DEFER), PortState::active);
}

TEST(VerbsConvert, MtusShareTheIbaEncoding) {
    EXPECT_EQ(mtu_from_verbs(IBV_MTU_256), ib::Mtu::mtu256);
    EXPECT_EQ(mtu_from_verbs(IBV_MTU_512), ib::Mtu::mtu512);
    EXPECT_EQ(mtu_from_verbs(IBV_MTU_1024), ib::Mtu::mtu1024);
    EXPECT_EQ(mtu_from_verbs(IBV_MTU_2048), ib::Mtu::mtu2048);
    EXPECT_EQ(mtu_from_verbs(IBV_MTU_4096), ib::Mtu::mtu4096);
    EXPECT_EQ(mtu_from_verbs(static_cast<ibv_mtu>(0)), ib::Mtu::mtu256);
    EXPECT_EQ(mtu_from_verbs(static_cast<ibv_mtu>(7)), ib::Mtu::mtu256);
}

TEST(VerbsConvert, LinkLayers) {
    EXPECT_TRUE(is_infiniband_link_layer(IBV_LINK_LAYER_INFINIBAND));
    EXPECT_TRUE(is_infiniband_link_layer(IBV_LINK_LAYER_UNSPECIFIED));
    EXPECT_FALSE(is_infiniband_link_layer(IBV_LINK_LAYER_ETHERNET));
}

TEST(VerbsConvert, AsyncEventsToPortEvents) {
    struct Case {
        ibv_event_type type;
        std::optional<PortEvent> expected;
    };
    const Case cases[] = {
        {IBV_EVENT_PORT_ACTIVE, PortEvent::port_active},
        {IBV_EVENT_PORT_ERR, PortEvent::port_down},
        {IBV_EVENT_LID_CHANGE, PortEvent::lid_change},
        {IBV_EVENT_PKEY_CHANGE, PortEvent::pkey_change},
        {IBV_EVENT_SM_CHANGE, PortEvent::sm_change},
        {IBV_EVENT_CLIENT_REREGISTER, PortEvent::client_reregister},
        {IBV_EVENT_GID_CHANGE, PortEvent::lid_change},
        {IBV_EVENT_DEVICE_FATAL, PortEvent::port_down},
        {IBV_EVENT_QP_FATAL, std::nullopt},
        {IBV_EVENT_CQ_ERR, std::nullopt},
        {IBV_EVENT_COMM_EST, std::nullopt},
        {IBV_EVENT_SRQ_LIMIT_REACHED, std::nullopt},
    };
    for (const Case& c : cases) EXPECT_EQ(port_event_from_verbs(c.type), c.expected) << ibv_event_type_str(c.type);
}

TEST(VerbsConvert, EventsAreFilteredByPort) {
    ibv_async_event e{};
    e.event_type = IBV_EVENT_PORT_ACTIVE;
    e.element.port_num = 2;
    EXPECT_TRUE(event_concerns_port(e, 2));
    EXPECT_FALSE(event_concerns_port(e, 1));
    e.event_type = IBV_EVENT_DEVICE_FATAL;
    e.element.port_num = 0;
    EXPECT_TRUE(event_concerns_port(e, 1));
    e = ibv_async_event{};
    e.event_type = IBV_EVENT_QP_FATAL;
    EXPECT_FALSE(event_concerns_port(e, 1));
}

TEST(VerbsConvert, CompletionStatuses) {
    EXPECT_EQ(status_from_verbs(IBV_WC_SUCCESS), CompletionStatus::success);
    EXPECT_EQ(status_from_verbs(IBV_WC_LOC_LEN_ERR), CompletionStatus::local_length_error);
    EXPECT_EQ(status_from_verbs(IBV_WC_WR_FLUSH_ERR), CompletionStatus::flushed);
    EXPECT_EQ(status_from_verbs(IBV_WC_LOC_QP_OP_ERR), CompletionStatus::general_error);
    EXPECT_EQ(status_from_verbs(IBV_WC_GENERAL_ERR), CompletionStatus::general_error);
}

TEST(VerbsConvert, ControlledQKeyMeansTheQpsOwn) {
    EXPECT_EQ(effective_qkey(0x0000001B, 0x0B1B), 0x0000001Bu);
    EXPECT_EQ(effective_qkey(0x80000000, 0x0B1B), 0x0B1Bu);
    EXPECT_EQ(effective_qkey(0x80010000, 0x0B1B), 0x0B1Bu);
    EXPECT_EQ(effective_qkey(0x7FFFFFFF, 0x0B1B), 0x7FFFFFFFu);
}

TEST(VerbsConvert, AddressHandleWithoutGrh) {
    const ibv_ah_attr a = ah_attr_from(AddressHandle{0x0012, 3, 1, std::nullopt}, 2);
    EXPECT_EQ(a.dlid, 0x0012);
    EXPECT_EQ(a.sl, 3);
    EXPECT_EQ(a.src_path_bits, 1);
    EXPECT_EQ(a.port_num, 2);
    EXPECT_EQ(a.is_global, 0);
    EXPECT_EQ(a.static_rate, 0);
}

TEST(VerbsConvert, AddressHandleWithGrh) {
    GrhAttributes g;
    g.dgid = ib::Gid{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    g.flow_label = 0x1234567;  // over 20 bits: masked
    g.sgid_index = 2;
    g.hop_limit = 64;
    g.traffic_class = 0xA0;
    const ibv_ah_attr a = ah_attr_from(AddressHandle{0xC001, 0, 0, g}, 1);
    EXPECT_EQ(a.is_global, 1);
    EXPECT_EQ(std::memcmp(a.grh.dgid.raw, g.dgid.data(), 16), 0);
    EXPECT_EQ(a.grh.flow_label, 0x34567u);
    EXPECT_EQ(a.grh.sgid_index, 2);
    EXPECT_EQ(a.grh.hop_limit, 64);
    EXPECT_EQ(a.grh.traffic_class, 0xA0);
}

TEST(VerbsConvert, ReceiveCompletion) {
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = 40 + 100;
    wc.src_qp = 0x000123;
    wc.slid = 0x0007;
    wc.sl = 5;
    wc.pkey_index = 77;  // verbs: meaningful for the GSI QP only
    wc.wc_flags = IBV_WC_GRH | IBV_WC_WITH_IMM;
    wc.imm_data = host_to_be32(0x01020304);
    const Completion c = receive_completion_from_wc(wc, 3);
    EXPECT_EQ(c.kind, CompletionKind::receive);
    EXPECT_EQ(c.status, CompletionStatus::success);
    EXPECT_EQ(c.byte_len, 140u);
    EXPECT_EQ(c.src_qp, 0x123u);
    EXPECT_EQ(c.slid, 7);
    EXPECT_EQ(c.sl, 5);
    EXPECT_TRUE(c.grh_present);
    EXPECT_EQ(c.pkey_index, 3) << "the QP's own P_Key index";
    ASSERT_TRUE(c.immediate);
    EXPECT_EQ(*c.immediate, 0x01020304u);

    wc.wc_flags = 0;
    const Completion plain = receive_completion_from_wc(wc, 0);
    EXPECT_FALSE(plain.grh_present);
    EXPECT_FALSE(plain.immediate);
}

TEST(VerbsConvert, BigEndianFields) {
    const __be32 v = host_to_be32(0x11223344);
    std::uint8_t b[4];
    std::memcpy(b, &v, 4);
    EXPECT_EQ(b[0], 0x11);
    EXPECT_EQ(b[3], 0x44);
    EXPECT_EQ(be32_to_host(v), 0x11223344u);
    const std::uint8_t pk[2] = {0xFF, 0xFF};
    __be16 p;
    std::memcpy(&p, pk, 2);
    EXPECT_EQ(be16_to_host(p), 0xFFFF);
    const std::uint8_t g[8] = {0x00, 0x02, 0xc9, 0x03, 0x00, 0x0a, 0x0b, 0x0c};
    __be64 guid;
    std::memcpy(&guid, g, 8);
    EXPECT_EQ(be64_to_host(guid), 0x0002c903000a0b0cULL);
}

TEST(VerbsConvert, ErrorsNeverReadSuccess) {
    const Error e = verbs_error("ibv_create_qp", 0);
    EXPECT_EQ(e.code, Errc::system_error);
    EXPECT_EQ(e.sys_errno, EIO);
    EXPECT_NE(e.message().find("ibv_create_qp"), std::string::npos);
}

TEST(AddressHandleCache, HashFollowsEquality) {
    AddressHandleHash h;
    AddressHandle a{0x10, 0, 0, std::nullopt};
    AddressHandle b = a;
    EXPECT_EQ(h(a), h(b));
    b.dlid = 0x11;
    EXPECT_NE(h(a), h(b));
    AddressHandle g1{0xC000, 0, 0, GrhAttributes{}};
    AddressHandle g2 = g1;
    g2.grh->dgid[15] = 1;
    EXPECT_NE(h(g1), h(g2));
    EXPECT_NE(h(a), h(g1));
}

using Cache = LruCache<int, std::string, std::hash<int>>;

TEST(AddressHandleCache, FindsWhatWasInserted) {
    Cache c(4);
    EXPECT_EQ(c.find(1), nullptr);
    c.insert(1, "one");
    ASSERT_NE(c.find(1), nullptr);
    EXPECT_EQ(*c.find(1), "one");
    c.insert(1, "uno");
    EXPECT_EQ(*c.find(1), "uno");
    EXPECT_EQ(c.size(), 1u);
}

TEST(AddressHandleCache, EvictsTheLeastRecentlyUsed) {
    Cache c(3);
    c.insert(1, "a");
    c.insert(2, "b");
    c.insert(3, "c");
    ASSERT_NE(c.find(1), nullptr);  // 1 is now the most recent; 2 the least
    c.insert(4, "d");
    EXPECT_EQ(c.size(), 3u);
    EXPECT_EQ(c.evictions(), 1u);
    EXPECT_EQ(c.find(2), nullptr);
    EXPECT_NE(c.find(1), nullptr);
    EXPECT_NE(c.find(3), nullptr);
    EXPECT_NE(c.find(4), nullptr);
}

TEST(AddressHandleCache, EvictedSharedValuesLiveWhileInUse) {
    LruCache<int, std::shared_ptr<int>, std::hash<int>> c(1);
    auto in_flight = c.insert(1, std::make_shared<int>(11));  // a send holds a copy
    c.insert(2, std::make_shared<int>(22));
    EXPECT_EQ(c.find(1), nullptr);
    EXPECT_EQ(*in_flight, 11);
    EXPECT_EQ(in_flight.use_count(), 1);
}

}  // namespace
}  // namespace ipoibd::transport::verbs
