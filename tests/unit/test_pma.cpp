// The Performance Management Agent (transport/pma.h): the PortCounters and
// PortCountersExtended codecs held to the byte offsets of IBA 16.1.3.5 and
// 16.1.4.11 (as in Linux's include/rdma/ib_pma.h), ClassPortInfo, counters
// read from a source that goes on counting, saturation, resets kept by port,
// every status it answers with, and what it drops.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "transport/pma.h"

namespace ipoibd::transport {
namespace {

using Mad = std::array<std::uint8_t, ib::kMadSize>;
using Bytes = std::vector<std::uint8_t>;

constexpr std::uint64_t kTwo40 = std::uint64_t{1} << 40;

// A node's ports as the agent's source sees them. PortSelect 0 and 1 both
// name port 1 (a channel adapter's only port); 2 names port 2. Values may be
// changed between requests: the source reads them when asked.
struct FakeNode {
    std::map<std::uint8_t, PmaPortCounters> ports{{1, {}}, {2, {}}};
    std::map<std::uint8_t, std::uint8_t> select_to_port{{0, 1}, {1, 1}, {2, 2}};
    std::map<std::uint8_t, std::uint64_t> generation;
    int asked = 0;

    Pma::Source source() {
        return [this](std::uint8_t port_select) -> std::optional<Pma::Selected> {
            ++asked;
            const auto it = select_to_port.find(port_select);
            if (it == select_to_port.end()) return std::nullopt;
            return Pma::Selected{it->second, ports.at(it->second), generation[it->second]};
        };
    }
};

// What port 1 has counted in most tests.
PmaPortCounters some_traffic() {
    PmaPortCounters c;
    c.xmit_octets = 4000;
    c.rcv_octets = 8000;
    c.xmit_packets = 10;
    c.rcv_packets = 20;
    c.rcv_errors = 3;
    c.xmit_discards = 4;
    c.vl15_dropped = 5;
    return c;
}

Mad request(std::uint8_t method, std::uint16_t attribute) {
    static std::uint64_t tid = 0x0000'0004'0000'1000ULL;
    ib::MadHeader h;
    h.mgmt_class = ib::mgmt_class::perf_mgt;
    h.class_version = pma::kClassVersion;
    h.method = method;
    h.transaction_id = ++tid;
    h.attribute_id = attribute;
    Mad m{};
    h.write_to(m.data());
    return m;
}

Mad counters_request(std::uint8_t method, std::uint8_t port_select, std::uint16_t counter_select = 0) {
    Mad m = request(method, pma::attr::port_counters);
    pma::PortCounters pc;
    pc.port_select = port_select;
    pc.counter_select = counter_select;
    pc.write_to(m.data() + pma::kDataOffset);
    return m;
}

Mad extended_request(std::uint8_t method, std::uint8_t port_select, std::uint16_t counter_select = 0) {
    Mad m = request(method, pma::attr::port_counters_extended);
    pma::PortCountersExtended pe;
    pe.port_select = port_select;
    pe.counter_select = counter_select;
    pe.write_to(m.data() + pma::kDataOffset);
    return m;
}

ib::MadHeader header_of(const Mad& m) { return ib::MadHeader::read_from(m.data()); }

// Hands `req` to the agent and checks the answer is a GetResp to it.
Mad answer(Pma& pma, const Mad& req) {
    const auto reply = pma.handle(req);
    EXPECT_TRUE(reply.has_value());
    if (!reply) return {};
    const ib::MadHeader q = header_of(req);
    const ib::MadHeader h = header_of(*reply);
    EXPECT_EQ(h.method, ib::method::get_resp);
    EXPECT_EQ(h.mgmt_class, ib::mgmt_class::perf_mgt);
    EXPECT_EQ(h.base_version, q.base_version);
    EXPECT_EQ(h.class_version, q.class_version);
    EXPECT_EQ(h.transaction_id, q.transaction_id);
    EXPECT_EQ(h.attribute_id, q.attribute_id);
    EXPECT_EQ(h.attribute_modifier, q.attribute_modifier);
    return *reply;
}

pma::PortCounters port_counters(Pma& pma, const Mad& req) {
    const Mad reply = answer(pma, req);
    EXPECT_EQ(header_of(reply).status, 0) << ib::describe_mad_status(header_of(reply).status);
    return pma::PortCounters::read_from(reply.data() + pma::kDataOffset);
}

pma::PortCountersExtended extended(Pma& pma, const Mad& req) {
    const Mad reply = answer(pma, req);
    EXPECT_EQ(header_of(reply).status, 0) << ib::describe_mad_status(header_of(reply).status);
    return pma::PortCountersExtended::read_from(reply.data() + pma::kDataOffset);
}

// ---------------------------------------------------------------------------
// Codecs

struct ByteCase {
    const char* name;
    std::size_t offset;
    Bytes bytes;
};

void expect_bytes(const std::uint8_t* p, const ByteCase& c) {
    SCOPED_TRACE(c.name);
    const Bytes got(p + c.offset, p + c.offset + c.bytes.size());
    EXPECT_EQ(got, c.bytes) << "at offset " << c.offset;
}

pma::PortCounters distinct_port_counters() {
    pma::PortCounters c;
    c.port_select = 0x07;
    c.counter_select = 0xC0DE;
    c.symbol_errors = 0x1122;
    c.link_error_recoveries = 0x33;
    c.link_downed = 0x44;
    c.rcv_errors = 0x5566;
    c.rcv_remote_physical_errors = 0x7788;
    c.rcv_switch_relay_errors = 0x99AA;
    c.xmit_discards = 0xBBCC;
    c.xmit_constraint_errors = 0xDD;
    c.rcv_constraint_errors = 0xEE;
    c.local_link_integrity_errors = 0xA;
    c.excessive_buffer_overruns = 0x5;
    c.vl15_dropped = 0x0F1E;
    c.xmit_data = 0x33445566;
    c.rcv_data = 0x778899AA;
    c.xmit_packets = 0xBBCCDDEE;
    c.rcv_packets = 0x01020304;
    c.xmit_wait = 0x0A0B0C0D;
    return c;
}

pma::PortCountersExtended distinct_extended() {
    pma::PortCountersExtended c;
    c.port_select = 0x07;
    c.counter_select = 0x00A5;
    c.xmit_data = 0x1122334455667788ULL;
    c.rcv_data = 0x2132435465768798ULL;
    c.xmit_packets = 0x31425364758697A8ULL;
    c.rcv_packets = 0x415263748596A7B8ULL;
    c.unicast_xmit_packets = 0x5162738495A6B7C8ULL;
    c.unicast_rcv_packets = 0x61728394A5B6C7D8ULL;
    c.multicast_xmit_packets = 0x718293A4B5C6D7E8ULL;
    c.multicast_rcv_packets = 0x8192A3B4C5D6E7F8ULL;
    return c;
}

TEST(PmaCodec, PortCountersFieldOffsets) {
    const ByteCase cases[] = {
        {"reserved byte 0", 0, {0x00}},
        {"PortSelect", 1, {0x07}},
        {"CounterSelect", 2, {0xC0, 0xDE}},
        {"SymbolErrorCounter", 4, {0x11, 0x22}},
        {"LinkErrorRecoveryCounter", 6, {0x33}},
        {"LinkDownedCounter", 7, {0x44}},
        {"PortRcvErrors", 8, {0x55, 0x66}},
        {"PortRcvRemotePhysicalErrors", 10, {0x77, 0x88}},
        {"PortRcvSwitchRelayErrors", 12, {0x99, 0xAA}},
        {"PortXmitDiscards", 14, {0xBB, 0xCC}},
        {"PortXmitConstraintErrors", 16, {0xDD}},
        {"PortRcvConstraintErrors", 17, {0xEE}},
        {"reserved byte 18", 18, {0x00}},
        {"LocalLinkIntegrityErrors/ExcessiveBufferOverrunErrors", 19, {0xA5}},
        {"reserved bytes 20-21", 20, {0x00, 0x00}},
        {"VL15Dropped", 22, {0x0F, 0x1E}},
        {"PortXmitData", 24, {0x33, 0x44, 0x55, 0x66}},
        {"PortRcvData", 28, {0x77, 0x88, 0x99, 0xAA}},
        {"PortXmitPkts", 32, {0xBB, 0xCC, 0xDD, 0xEE}},
        {"PortRcvPkts", 36, {0x01, 0x02, 0x03, 0x04}},
        {"PortXmitWait", 40, {0x0A, 0x0B, 0x0C, 0x0D}},
    };
    std::array<std::uint8_t, pma::PortCounters::size + 4> buf;
    buf.fill(0xFF);  // reserved bytes are written as 0, bytes past the 44 are not touched
    distinct_port_counters().write_to(buf.data());
    for (const auto& c : cases) expect_bytes(buf.data(), c);
    for (std::size_t i = pma::PortCounters::size; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xFF) << "byte " << i;
}

TEST(PmaCodec, PortCountersExtendedFieldOffsets) {
    const ByteCase cases[] = {
        {"reserved byte 0", 0, {0x00}},
        {"PortSelect", 1, {0x07}},
        {"CounterSelect", 2, {0x00, 0xA5}},
        {"reserved bytes 4-7", 4, {0x00, 0x00, 0x00, 0x00}},
        {"PortXmitData", 8, {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}},
        {"PortRcvData", 16, {0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98}},
        {"PortXmitPkts", 24, {0x31, 0x42, 0x53, 0x64, 0x75, 0x86, 0x97, 0xA8}},
        {"PortRcvPkts", 32, {0x41, 0x52, 0x63, 0x74, 0x85, 0x96, 0xA7, 0xB8}},
        {"PortUnicastXmitPkts", 40, {0x51, 0x62, 0x73, 0x84, 0x95, 0xA6, 0xB7, 0xC8}},
        {"PortUnicastRcvPkts", 48, {0x61, 0x72, 0x83, 0x94, 0xA5, 0xB6, 0xC7, 0xD8}},
        {"PortMulticastXmitPkts", 56, {0x71, 0x82, 0x93, 0xA4, 0xB5, 0xC6, 0xD7, 0xE8}},
        {"PortMulticastRcvPkts", 64, {0x81, 0x92, 0xA3, 0xB4, 0xC5, 0xD6, 0xE7, 0xF8}},
    };
    std::array<std::uint8_t, pma::PortCountersExtended::size + 4> buf;
    buf.fill(0xFF);
    distinct_extended().write_to(buf.data());
    for (const auto& c : cases) expect_bytes(buf.data(), c);
    for (std::size_t i = pma::PortCountersExtended::size; i < buf.size(); ++i)
        EXPECT_EQ(buf[i], 0xFF) << "byte " << i;
}

TEST(PmaCodec, RoundTrips) {
    {
        const pma::PortCounters c = distinct_port_counters();
        std::array<std::uint8_t, pma::PortCounters::size> buf{};
        c.write_to(buf.data());
        EXPECT_TRUE(pma::PortCounters::read_from(buf.data()) == c);
        const pma::PortCounters zero;
        zero.write_to(buf.data());
        EXPECT_TRUE(pma::PortCounters::read_from(buf.data()) == zero);
    }
    {
        const pma::PortCountersExtended c = distinct_extended();
        std::array<std::uint8_t, pma::PortCountersExtended::size> buf{};
        c.write_to(buf.data());
        EXPECT_TRUE(pma::PortCountersExtended::read_from(buf.data()) == c);
        const pma::PortCountersExtended zero;
        zero.write_to(buf.data());
        EXPECT_TRUE(pma::PortCountersExtended::read_from(buf.data()) == zero);
    }
}

TEST(PmaCodec, Byte19PacksTwoNibbles) {
    struct Case {
        const char* name;
        std::uint8_t local_link_integrity;
        std::uint8_t excessive_buffer_overrun;
        std::uint8_t byte19;
        bool round_trips;  // only 4-bit values come back as written
    };
    const Case cases[] = {
        {"both zero", 0x0, 0x0, 0x00, true},
        {"LocalLinkIntegrity high nibble", 0xF, 0x0, 0xF0, true},
        {"ExcessiveBufferOverrun low nibble", 0x0, 0xF, 0x0F, true},
        {"both", 0x1, 0x2, 0x12, true},
        {"wider values keep their low 4 bits", 0x3C, 0x4B, 0xCB, false},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        pma::PortCounters pc;
        pc.local_link_integrity_errors = c.local_link_integrity;
        pc.excessive_buffer_overruns = c.excessive_buffer_overrun;
        std::array<std::uint8_t, pma::PortCounters::size> buf{};
        pc.write_to(buf.data());
        EXPECT_EQ(buf[19], c.byte19);
        EXPECT_EQ(buf[18], 0);
        EXPECT_EQ(buf[20], 0);
        const pma::PortCounters back = pma::PortCounters::read_from(buf.data());
        EXPECT_EQ(back.local_link_integrity_errors, c.byte19 >> 4);
        EXPECT_EQ(back.excessive_buffer_overruns, c.byte19 & 0xF);
        EXPECT_EQ(back == pc, c.round_trips);
    }
}

// ---------------------------------------------------------------------------
// ClassPortInfo

TEST(Pma, ClassPortInfo) {
    FakeNode node;
    Pma pma(node.source());
    Mad req = request(ib::method::get, pma::attr::class_port_info);
    std::fill(req.begin() + pma::kDataOffset, req.end(), std::uint8_t{0x5A});  // all overwritten
    const Mad reply = answer(pma, req);
    EXPECT_EQ(header_of(reply).status, 0);
    const std::uint8_t* d = reply.data() + pma::kDataOffset;
    EXPECT_EQ(d[0], 1);  // BaseVersion
    EXPECT_EQ(d[1], 1);  // ClassVersion
    const std::uint16_t cap = load_be16(d + 2);
    EXPECT_NE(cap & pma::cap::extended_width_noietf, 0) << std::hex << cap;
    EXPECT_EQ(cap & (1u << 10), 1u << 10);
    EXPECT_EQ(cap & pma::cap::all_port_select, 0) << std::hex << cap;
    EXPECT_EQ(cap & (1u << 8), 0u);
    EXPECT_EQ(cap & pma::cap::extended_width, 0) << "the unicast/multicast counts are not kept";
    EXPECT_NE(d[7] & 0x1F, 0);  // RespTimeValue
    EXPECT_EQ(d[7] & 0xE0, 0);  // CapabilityMask2, none
    for (std::size_t i = 8; i < ib::kMadSize - pma::kDataOffset; ++i) EXPECT_EQ(d[i], 0) << "data byte " << i;
    EXPECT_EQ(node.asked, 0);
    EXPECT_EQ(pma.counters().responses, 1u);
    EXPECT_EQ(pma.counters().error_responses, 0u);
}

// ---------------------------------------------------------------------------
// Get

TEST(Pma, GetPortCountersFromTheSource) {
    FakeNode node;
    node.ports[1] = some_traffic();
    node.ports[1].xmit_octets = 4003;  // octets / 4, rounded down
    Pma pma(node.source());
    for (const std::uint8_t select : {std::uint8_t{0}, std::uint8_t{1}}) {
        SCOPED_TRACE("PortSelect " + std::to_string(select));
        const pma::PortCounters c = port_counters(pma, counters_request(ib::method::get, select));
        pma::PortCounters want;
        want.port_select = select;  // echoed
        want.xmit_data = 1000;
        want.rcv_data = 2000;
        want.xmit_packets = 10;
        want.rcv_packets = 20;
        want.rcv_errors = 3;
        want.xmit_discards = 4;
        want.vl15_dropped = 5;
        EXPECT_TRUE(c == want);
        EXPECT_EQ(c.xmit_data, 1000u);
        EXPECT_EQ(c.rcv_errors, 3);
    }
    const pma::PortCounters other = port_counters(pma, counters_request(ib::method::get, 2));
    EXPECT_EQ(other.port_select, 2);
    EXPECT_TRUE(other == pma::PortCounters{.port_select = 2});
    EXPECT_EQ(pma.counters().responses, 3u);
    EXPECT_EQ(pma.counters().resets, 0u);
}

TEST(Pma, GetPortCountersExtendedFromTheSource) {
    FakeNode node;
    node.ports[1] = some_traffic();
    node.ports[1].unicast_xmit_packets = 6;  // passed on when a source has them
    node.ports[1].multicast_rcv_packets = 7;
    Pma pma(node.source());
    const pma::PortCountersExtended e = extended(pma, extended_request(ib::method::get, 1));
    pma::PortCountersExtended want;
    want.port_select = 1;
    want.xmit_data = 1000;
    want.rcv_data = 2000;
    want.xmit_packets = 10;
    want.rcv_packets = 20;
    want.unicast_xmit_packets = 6;
    want.multicast_rcv_packets = 7;
    EXPECT_TRUE(e == want);
}

TEST(Pma, CountersStopAtTheirLargestValue) {
    struct Case {
        const char* name;
        PmaPortCounters source;
        pma::PortCounters want;  // PortSelect 1
    };
    const Case cases[] = {
        {"PortXmitPkts 2^40", {.xmit_packets = kTwo40}, {.port_select = 1, .xmit_packets = 0xFFFFFFFF}},
        {"PortRcvPkts 2^32", {.rcv_packets = std::uint64_t{1} << 32}, {.port_select = 1, .rcv_packets = 0xFFFFFFFF}},
        {"PortRcvPkts 2^32 - 1", {.rcv_packets = 0xFFFFFFFF}, {.port_select = 1, .rcv_packets = 0xFFFFFFFF}},
        {"PortXmitData 2^40 octets", {.xmit_octets = kTwo40}, {.port_select = 1, .xmit_data = 0xFFFFFFFF}},
        {"PortRcvData just below", {.rcv_octets = 0x3FFFFFFFFULL}, {.port_select = 1, .rcv_data = 0xFFFFFFFF}},
        {"PortRcvErrors 70000", {.rcv_errors = 70000}, {.port_select = 1, .rcv_errors = 0xFFFF}},
        {"PortRcvErrors 65535", {.rcv_errors = 65535}, {.port_select = 1, .rcv_errors = 0xFFFF}},
        {"PortRcvErrors 65534", {.rcv_errors = 65534}, {.port_select = 1, .rcv_errors = 0xFFFE}},
        {"PortXmitDiscards 2^40", {.xmit_discards = kTwo40}, {.port_select = 1, .xmit_discards = 0xFFFF}},
        {"VL15Dropped 65536", {.vl15_dropped = 65536}, {.port_select = 1, .vl15_dropped = 0xFFFF}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        FakeNode node;
        node.ports[1] = c.source;
        Pma pma(node.source());
        EXPECT_TRUE(port_counters(pma, counters_request(ib::method::get, 1)) == c.want);
    }
}

TEST(Pma, ExtendedCountersCarryTheFull64Bits) {
    FakeNode node;
    node.ports[1].xmit_packets = kTwo40;
    node.ports[1].rcv_packets = 0xFEDCBA9876543210ULL;
    node.ports[1].xmit_octets = 4 * kTwo40;
    node.ports[1].rcv_octets = 0xFFFFFFFFFFFFFFFFULL;
    node.ports[1].rcv_errors = 70000;
    Pma pma(node.source());
    const pma::PortCountersExtended e = extended(pma, extended_request(ib::method::get, 1));
    EXPECT_EQ(e.xmit_packets, kTwo40);
    EXPECT_EQ(e.rcv_packets, 0xFEDCBA9876543210ULL);
    EXPECT_EQ(e.xmit_data, kTwo40);
    EXPECT_EQ(e.rcv_data, 0x3FFFFFFFFFFFFFFFULL);
    // The same port through PortCounters: saturated.
    const pma::PortCounters c = port_counters(pma, counters_request(ib::method::get, 1));
    EXPECT_EQ(c.xmit_packets, 0xFFFFFFFFu);
    EXPECT_EQ(c.rcv_packets, 0xFFFFFFFFu);
    EXPECT_EQ(c.xmit_data, 0xFFFFFFFFu);
    EXPECT_EQ(c.rcv_errors, 0xFFFF);
}

// ---------------------------------------------------------------------------
// Set: resets

TEST(Pma, SetResetsTheSelectedCountersOnly) {
    FakeNode node;
    PmaPortCounters& port = node.ports[1];  // grows between requests
    port = some_traffic();
    Pma pma(node.source());

    const std::uint16_t select = pma::select::xmit_data | pma::select::xmit_packets;
    ASSERT_EQ(select, 0x5000);
    const pma::PortCounters after_reset = port_counters(pma, counters_request(ib::method::set, 1, select));
    EXPECT_EQ(after_reset.port_select, 1);
    EXPECT_EQ(after_reset.counter_select, select);  // echoed
    EXPECT_EQ(after_reset.xmit_data, 0u);
    EXPECT_EQ(after_reset.xmit_packets, 0u);
    EXPECT_EQ(after_reset.rcv_data, 2000u);
    EXPECT_EQ(after_reset.rcv_packets, 20u);
    EXPECT_EQ(after_reset.rcv_errors, 3);
    EXPECT_EQ(after_reset.xmit_discards, 4);
    EXPECT_EQ(after_reset.vl15_dropped, 5);
    EXPECT_EQ(pma.counters().resets, 1u);

    port.xmit_octets += 400;
    port.xmit_packets += 5;
    port.rcv_octets += 40;
    port.rcv_packets += 7;
    port.rcv_errors += 1;
    const pma::PortCounters later = port_counters(pma, counters_request(ib::method::get, 1));
    EXPECT_EQ(later.counter_select, 0);
    EXPECT_EQ(later.xmit_data, 100u);    // counting from the reset
    EXPECT_EQ(later.xmit_packets, 5u);
    EXPECT_EQ(later.rcv_data, 2010u);    // from the start
    EXPECT_EQ(later.rcv_packets, 27u);
    EXPECT_EQ(later.rcv_errors, 4);
    EXPECT_EQ(later.xmit_discards, 4);
    EXPECT_EQ(later.vl15_dropped, 5);
    // PortCountersExtended reads the same counters.
    const pma::PortCountersExtended ext = extended(pma, extended_request(ib::method::get, 1));
    EXPECT_EQ(ext.xmit_data, 100u);
    EXPECT_EQ(ext.xmit_packets, 5u);
    EXPECT_EQ(ext.rcv_data, 2010u);
    EXPECT_EQ(ext.rcv_packets, 27u);

    // CounterSelect 0 resets nothing; the answer is the counters as they are.
    const pma::PortCounters none = port_counters(pma, counters_request(ib::method::set, 1, 0));
    pma::PortCounters want = later;
    EXPECT_TRUE(none == want);
    EXPECT_EQ(pma.counters().resets, 1u);
    EXPECT_EQ(port_counters(pma, counters_request(ib::method::get, 1)).xmit_packets, 5u);

    // The others, reset in turn.
    const pma::PortCounters errors = port_counters(
        pma, counters_request(ib::method::set, 1,
                              pma::select::rcv_errors | pma::select::xmit_discards | pma::select::vl15_dropped));
    want.counter_select = pma::select::rcv_errors | pma::select::xmit_discards | pma::select::vl15_dropped;
    want.rcv_errors = 0;
    want.xmit_discards = 0;
    want.vl15_dropped = 0;
    EXPECT_TRUE(errors == want);
    EXPECT_EQ(pma.counters().resets, 2u);
    const pma::PortCounters data =
        port_counters(pma, counters_request(ib::method::set, 1, pma::select::rcv_data | pma::select::rcv_packets));
    EXPECT_EQ(data.rcv_data, 0u);
    EXPECT_EQ(data.rcv_packets, 0u);
    EXPECT_EQ(data.xmit_data, 100u);
    EXPECT_EQ(data.xmit_packets, 5u);
    EXPECT_EQ(pma.counters().resets, 3u);
    EXPECT_EQ(pma.counters().error_responses, 0u);
}

TEST(Pma, SetPortCountersExtendedResetsTheSelectedCountersOnly) {
    FakeNode node;
    PmaPortCounters& port = node.ports[1];
    port = some_traffic();
    port.unicast_xmit_packets = 8;
    port.multicast_rcv_packets = 9;
    Pma pma(node.source());
    const std::uint16_t select = pma::select_ext::rcv_data | pma::select_ext::rcv_packets |
                                 pma::select_ext::unicast_xmit_packets;
    const pma::PortCountersExtended e = extended(pma, extended_request(ib::method::set, 1, select));
    EXPECT_EQ(e.counter_select, select);
    EXPECT_EQ(e.rcv_data, 0u);
    EXPECT_EQ(e.rcv_packets, 0u);
    EXPECT_EQ(e.unicast_xmit_packets, 0u);
    EXPECT_EQ(e.xmit_data, 1000u);
    EXPECT_EQ(e.xmit_packets, 10u);
    EXPECT_EQ(e.multicast_rcv_packets, 9u);
    EXPECT_EQ(pma.counters().resets, 1u);
    port.rcv_packets += 2;
    port.rcv_octets += 8;
    const pma::PortCounters c = port_counters(pma, counters_request(ib::method::get, 1));
    EXPECT_EQ(c.rcv_packets, 2u);
    EXPECT_EQ(c.rcv_data, 2u);
    EXPECT_EQ(c.rcv_errors, 3);
}

TEST(Pma, ResetsAreKeptByPortNotByPortSelect) {
    FakeNode node;
    node.ports[1] = some_traffic();
    node.ports[2] = some_traffic();
    Pma pma(node.source());
    const std::uint16_t select = pma::select::xmit_data | pma::select::xmit_packets;
    port_counters(pma, counters_request(ib::method::set, 1, select));
    node.ports[1].xmit_packets += 2;
    node.ports[2].xmit_packets += 2;

    const pma::PortCounters via0 = port_counters(pma, counters_request(ib::method::get, 0));
    EXPECT_EQ(via0.port_select, 0);
    EXPECT_EQ(via0.xmit_data, 0u);
    EXPECT_EQ(via0.xmit_packets, 2u);
    EXPECT_EQ(via0.rcv_packets, 20u);
    EXPECT_EQ(extended(pma, extended_request(ib::method::get, 0)).xmit_packets, 2u);
    // Another port keeps its own.
    const pma::PortCounters port2 = port_counters(pma, counters_request(ib::method::get, 2));
    EXPECT_EQ(port2.xmit_data, 1000u);
    EXPECT_EQ(port2.xmit_packets, 12u);
}

TEST(Pma, ASourceBelowItsZeroCountsFromZeroAgain) {
    FakeNode node;
    PmaPortCounters& port = node.ports[1];
    port = some_traffic();
    port.xmit_packets = 100;
    Pma pma(node.source());
    port_counters(pma, counters_request(ib::method::set, 1, pma::select::xmit_packets | pma::select::xmit_data));
    // The port went down and came back: its own counters started again.
    port.xmit_packets = 30;
    port.xmit_octets = 400;
    const pma::PortCounters c = port_counters(pma, counters_request(ib::method::get, 1));
    EXPECT_EQ(c.xmit_packets, 30u);  // the raw value
    EXPECT_EQ(c.xmit_data, 100u);
    EXPECT_EQ(c.rcv_packets, 20u);  // not reset, not restarted
    const pma::PortCountersExtended e = extended(pma, extended_request(ib::method::get, 1));
    EXPECT_EQ(e.xmit_packets, 30u);
    EXPECT_EQ(e.xmit_data, 100u);
    // Past the old zero it keeps counting up, never back towards 0.
    port.xmit_packets = 130;
    EXPECT_EQ(port_counters(pma, counters_request(ib::method::get, 1)).xmit_packets, 130u);
}

// A switch port's new occupant counts from 0 on its own link: a reset of
// the old one is not subtracted from the new one's counts, even once they
// pass the old values.
TEST(Pma, ANewLinkOnAPortForgetsTheOldLinksResets) {
    FakeNode node;
    PmaPortCounters& port = node.ports[1];
    port = some_traffic();
    port.xmit_packets = 100;
    Pma pma(node.source());
    port_counters(pma, counters_request(ib::method::set, 1, pma::select::xmit_packets | pma::select::xmit_data));
    port = some_traffic();
    port.xmit_packets = 150;  // a new peer on the port, busier than the old one
    node.generation[1] = 1;
    const pma::PortCounters c = port_counters(pma, counters_request(ib::method::get, 1));
    EXPECT_EQ(c.xmit_packets, 150u);
    EXPECT_EQ(c.xmit_data, 1000u);
    EXPECT_EQ(extended(pma, extended_request(ib::method::get, 1)).xmit_packets, 150u);
    // Its own resets hold as before.
    port_counters(pma, counters_request(ib::method::set, 1, pma::select::xmit_packets));
    port.xmit_packets = 160;
    EXPECT_EQ(port_counters(pma, counters_request(ib::method::get, 1)).xmit_packets, 10u);
}

TEST(Pma, ASetOfCountersItDoesNotKeepResetsNothing) {
    FakeNode node;
    node.ports[1] = some_traffic();
    Pma pma(node.source());
    port_counters(pma, counters_request(ib::method::set, 1, 0x0001));  // SymbolErrorCounter: always 0 here
    EXPECT_EQ(pma.counters().resets, 0u);
}

// ---------------------------------------------------------------------------
// Statuses

TEST(Pma, ErrorsAnswerWithAStatusAndTheRequestData) {
    struct Case {
        const char* name;
        std::uint8_t base_version;
        std::uint8_t class_version;
        std::uint8_t method;
        std::uint16_t attribute;
        std::uint8_t port_select;
        std::uint16_t status;
    };
    using namespace ib::mad_status;
    namespace m = ib::method;
    namespace a = pma::attr;
    const Case cases[] = {
        {"BaseVersion 2", 2, 1, m::get, a::port_counters, 1, bad_version},
        {"ClassVersion 2", 1, 2, m::get, a::port_counters, 1, bad_version},
        {"ClassVersion 2 on a Set", 1, 2, m::set, a::port_counters, 1, bad_version},
        {"Send", 1, 1, m::send, a::port_counters, 1, method_not_supported},
        {"GetTable", 1, 1, m::get_table, a::port_counters, 1, method_not_supported},
        {"Report", 1, 1, m::report, a::class_port_info, 1, method_not_supported},
        {"unknown attribute 0x0099", 1, 1, m::get, 0x0099, 1, method_attr_not_supported},
        {"Set ClassPortInfo", 1, 1, m::set, a::class_port_info, 1, method_attr_not_supported},
        {"PortSelect 0xFF (all ports)", 1, 1, m::get, a::port_counters, pma::kAllPorts, invalid_attr_or_modifier},
        {"Extended PortSelect 0xFF", 1, 1, m::get, a::port_counters_extended, pma::kAllPorts,
         invalid_attr_or_modifier},
        {"Set PortSelect 0xFF", 1, 1, m::set, a::port_counters, pma::kAllPorts, invalid_attr_or_modifier},
        {"PortSelect the source refuses", 1, 1, m::get, a::port_counters, 9, invalid_attr_or_modifier},
        {"Extended PortSelect the source refuses", 1, 1, m::get, a::port_counters_extended, 9,
         invalid_attr_or_modifier},
        {"Set PortSelect the source refuses", 1, 1, m::set, a::port_counters, 9, invalid_attr_or_modifier},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        FakeNode node;
        node.ports[1] = some_traffic();
        node.select_to_port[pma::kAllPorts] = 1;  // even a source that would take 0xFF is not asked
        Pma pma(node.source());
        Mad req = request(c.method, c.attribute);
        req[0] = c.base_version;
        req[2] = c.class_version;
        std::fill(req.begin() + ib::kMadHeaderSize, req.end(), std::uint8_t{0x5A});
        req[pma::kDataOffset + 1] = c.port_select;  // CounterSelect 0x5A5A: a Set would reset
        const Mad reply = answer(pma, req);
        EXPECT_EQ(header_of(reply).status, c.status) << ib::describe_mad_status(header_of(reply).status);
        EXPECT_TRUE(std::equal(reply.begin() + ib::kMadHeaderSize, reply.end(), req.begin() + ib::kMadHeaderSize))
            << "the request's data is echoed";
        EXPECT_EQ(pma.counters().responses, 1u);
        EXPECT_EQ(pma.counters().error_responses, 1u);
        EXPECT_EQ(pma.counters().resets, 0u);
        if (c.port_select == pma::kAllPorts) {
            EXPECT_EQ(node.asked, 0);
        }
        // The agent still answers, with nothing reset.
        EXPECT_EQ(port_counters(pma, counters_request(ib::method::get, 1)).xmit_packets, 10u);
    }
}

// ---------------------------------------------------------------------------
// Drops

TEST(Pma, DropsWhatNeedsNoAnswer) {
    struct Case {
        const char* name;
        Bytes mad;
        PmaDrop why;
    };
    const auto with = [](std::uint8_t method, std::uint16_t attribute) {
        const Mad m = request(method, attribute);
        return Bytes(m.begin(), m.end());
    };
    const Mad good = counters_request(ib::method::get, 1);
    Bytes sa(good.begin(), good.end());
    sa[1] = ib::mgmt_class::subn_adm;
    Bytes longer(good.begin(), good.end());
    longer.push_back(0);
    const Case cases[] = {
        {"255 bytes", Bytes(good.begin(), good.end() - 1), PmaDrop::not_perf_mgt},
        {"257 bytes", longer, PmaDrop::not_perf_mgt},
        {"empty", Bytes{}, PmaDrop::not_perf_mgt},
        {"class SubnAdm (0x03)", sa, PmaDrop::not_perf_mgt},
        {"GetResp (0x81)", with(ib::method::get_resp, pma::attr::port_counters), PmaDrop::not_a_request},
        {"Trap (0x05)", with(ib::method::trap, pma::attr::port_counters), PmaDrop::not_a_request},
        {"TrapRepress (0x07)", with(ib::method::trap_repress, pma::attr::port_counters), PmaDrop::not_a_request},
        {"GetResp with a bad version", [&] {
             Bytes b = with(ib::method::get_resp, pma::attr::class_port_info);
             b[2] = 2;
             return b;
         }(),
         PmaDrop::not_a_request},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        FakeNode node;
        Pma pma(node.source());
        EXPECT_FALSE(pma.handle(c.mad).has_value());
        PmaCounters want;
        want.dropped[static_cast<std::size_t>(c.why)] = 1;
        EXPECT_EQ(pma.counters().dropped, want.dropped);
        EXPECT_EQ(pma.counters().responses, 0u);
        EXPECT_EQ(pma.counters().error_responses, 0u);
        EXPECT_EQ(node.asked, 0);
    }
    for (std::size_t i = 0; i < kPmaDropCount; ++i) EXPECT_STRNE(to_string(static_cast<PmaDrop>(i)), "unknown");
}

}  // namespace
}  // namespace ipoibd::transport
