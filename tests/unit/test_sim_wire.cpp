// The ibsim <-> libumad2sim wire codecs (fabric/sim_wire.h): control
// messages and their payloads, the data channel's sim_request, the TID
// slot/agent bits and the socket names.
//
// Known bytes are written out from the layouts and measurements in
// /work/shared/reference/ibsim-protocol.md (sections 1, 3, 4 and 9), not from
// this code: the control channel little-endian, the data channel's header
// big-endian with each LID in the first two bytes of a four-byte field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "fabric/sim_wire.h"
#include "wire_test_util.h"

namespace ipoibd::fabric::sim {
namespace {

using test::from_hex;
using test::to_hex;

std::string zeros(std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += "00 ";
    return s;
}

std::vector<std::uint8_t> to_vector(const CtlBytes& b) { return {b.begin(), b.end()}; }
std::vector<std::uint8_t> to_vector(const SimRequestBytes& b) { return {b.begin(), b.end()}; }

// The measured shape of a CONNECT from smpquery without SIM_HOST: client 0,
// type 1, len 44, id = the pid (20187 = 0x4edb), qp 0, issm 0, nodeid "".
const std::string kConnectRequestHex =
    "ef be ad de | 00 00 00 00 | 01 00 00 00 | 2c 00 00 00 |"
    "db 4e 00 00 | 00 00 00 00 | 00 00 00 00 |" + zeros(32) + zeros(20);

// ---------------------------------------------------------------------------
// Sizes

TEST(SimWire, SizesAreTheProtocols) {
    static_assert(kCtlMessageSize == 80 && kCtlDataSize == 64 && kCtlMagic == 0xDEADBEEF);
    static_assert(kSimRequestSize == 288 && kMadAreaSize == 256 && kClientReceiveLimit == 224);
    static_assert(kStatusTimedOut == 110 && kMaxClients == 10);
    static_assert(ClientInfo::size == 44 && Vendor::size == 24 && GetPortReply::size == 4);
    static_assert(request_offset::length == 24 && request_offset::mad == 32);
    EXPECT_EQ(kDefaultSocketBaseName, "sim");
    EXPECT_EQ(CtlMessage::size, 80u);
    EXPECT_EQ(SimRequest::size, 288u);
}

TEST(SimWire, EachTypeCarriesTheLenOfItsPayload) {
    struct Case {
        CtlType type;
        std::size_t len;
    };
    const Case cases[] = {
        {CtlType::error, 0},         {CtlType::connect, 44},      {CtlType::disconnect, 0},
        {CtlType::get_port, 4},      {CtlType::get_vendor, 24},   {CtlType::get_gid, 16},
        {CtlType::get_guid, 8},      {CtlType::get_nodeinfo, 64}, {CtlType::get_portinfo, 64},
        {CtlType::set_issm, 4},      {CtlType::get_pkeys, 64},
    };
    for (const Case& c : cases) EXPECT_EQ(ctl_payload_size(c.type), c.len) << to_string(c.type);
}

// ---------------------------------------------------------------------------
// Control messages

TEST(SimCtl, TypesHaveTheProtocolsNumbersAndNames) {
    struct Case {
        std::uint32_t value;
        const char* name;
    };
    const Case cases[] = {
        {0, "ERROR"},      {1, "CONNECT"},      {2, "DISCONNECT"},    {3, "GET_PORT"},
        {4, "GET_VENDOR"}, {5, "GET_GID"},      {6, "GET_GUID"},      {7, "GET_NODEINFO"},
        {8, "GET_PORTINFO"}, {9, "SET_ISSM"},   {10, "GET_PKEYS"},    {11, "unknown"},
        {0xFFFFFFFF, "unknown"},
    };
    for (const Case& c : cases) {
        const auto t = static_cast<CtlType>(c.value);
        EXPECT_STREQ(to_string(t), c.name) << c.value;
        EXPECT_EQ(is_known(t), c.value <= 10) << c.value;
    }
}

TEST(SimCtl, ParseTakesTheMeasuredConnect) {
    auto m = parse_ctl(from_hex(kConnectRequestHex));
    ASSERT_TRUE(m.has_value()) << to_string(m.error());
    EXPECT_EQ(m->client_id, 0u);
    EXPECT_EQ(m->type, CtlType::connect);
    EXPECT_EQ(m->len, 44u);
    auto info = read_client_info(*m);
    ASSERT_TRUE(info.has_value()) << to_string(info.error());
    EXPECT_EQ(*info, (ClientInfo{.id = 20187, .qp = 0, .issm = 0, .nodeid = ""}));
}

struct CtlParseCase {
    const char* name;
    std::vector<std::uint8_t> message;
    bool ok;
    CtlError want;  // when !ok
};

std::vector<std::uint8_t> connect_with(std::size_t offset, std::vector<std::uint8_t> field) {
    auto b = from_hex(kConnectRequestHex);
    std::copy(field.begin(), field.end(), b.begin() + static_cast<std::ptrdiff_t>(offset));
    return b;
}

TEST(SimCtl, ParseTable) {
    auto one_short = from_hex(kConnectRequestHex);
    one_short.pop_back();
    auto one_long = from_hex(kConnectRequestHex);
    one_long.push_back(0);
    const CtlParseCase cases[] = {
        {"the measured CONNECT", from_hex(kConnectRequestHex), true, {}},
        {"magic in network order", connect_with(ctl_offset::magic, {0xde, 0xad, 0xbe, 0xef}), false,
         CtlError::bad_magic},
        {"magic zero", connect_with(ctl_offset::magic, {0, 0, 0, 0}), false, CtlError::bad_magic},
        {"79 bytes", one_short, false, CtlError::wrong_size},
        {"81 bytes", one_long, false, CtlError::wrong_size},
        {"nothing", {}, false, CtlError::wrong_size},
        {"type 11, one past GET_PKEYS", connect_with(ctl_offset::type, {11, 0, 0, 0}), false,
         CtlError::unknown_type},
        {"type 1 in network order (16777216)", connect_with(ctl_offset::type, {0, 0, 0, 1}), false,
         CtlError::unknown_type},
        {"type 0, ERROR, is a type", connect_with(ctl_offset::type, {0, 0, 0, 0}), true, {}},
        {"type 10, GET_PKEYS", connect_with(ctl_offset::type, {10, 0, 0, 0}), true, {}},
        {"len 65", connect_with(ctl_offset::len, {65, 0, 0, 0}), false, CtlError::bad_length},
        {"len 2^32-1", connect_with(ctl_offset::len, {0xff, 0xff, 0xff, 0xff}), false, CtlError::bad_length},
        {"len 64, all of data", connect_with(ctl_offset::len, {64, 0, 0, 0}), true, {}},
        {"client id 10 (the server's to judge)", connect_with(ctl_offset::client_id, {10, 0, 0, 0}), true, {}},
    };
    for (const CtlParseCase& c : cases) {
        SCOPED_TRACE(c.name);
        auto m = parse_ctl(c.message);
        ASSERT_EQ(m.has_value(), c.ok);
        if (c.ok) {
            auto again = encode_ctl(*m);
            ASSERT_TRUE(again.has_value());
            EXPECT_EQ(to_hex(to_vector(*again)), to_hex(c.message)) << "every byte is kept";
        } else {
            EXPECT_EQ(m.error(), c.want) << to_string(m.error());
        }
    }
}

TEST(SimCtl, FieldsAreLittleEndianAtTheirOffsets) {
    CtlMessage m;
    m.client_id = 0x04030201;
    m.type = CtlType::get_portinfo;
    m.len = 64;
    for (std::size_t i = 0; i < kCtlDataSize; ++i) m.data[i] = static_cast<std::uint8_t>(0xC0 + i);
    auto b = encode_ctl(m);
    ASSERT_TRUE(b.has_value());
    std::string data_hex;
    for (std::size_t i = 0; i < kCtlDataSize; ++i) data_hex += to_hex({static_cast<std::uint8_t>(0xC0 + i)});
    EXPECT_EQ(to_hex(to_vector(*b)), to_hex(from_hex("ef be ad de 01 02 03 04 08 00 00 00 40 00 00 00" + data_hex)));
}

TEST(SimCtl, EveryTypeRoundTrips) {
    for (std::uint32_t t = 0; t <= static_cast<std::uint32_t>(kLastCtlType); ++t) {
        CtlMessage m;
        m.client_id = static_cast<std::uint32_t>(t % kMaxClients);
        m.type = static_cast<CtlType>(t);
        m.len = static_cast<std::uint32_t>(ctl_payload_size(m.type));
        for (std::size_t i = 0; i < kCtlDataSize; ++i) m.data[i] = static_cast<std::uint8_t>(t * 31 + i);
        SCOPED_TRACE(to_string(m.type));
        auto b = encode_ctl(m);
        ASSERT_TRUE(b.has_value());
        EXPECT_EQ(load_le32(b->data() + ctl_offset::type), t);
        auto back = parse_ctl(*b);
        ASSERT_TRUE(back.has_value()) << to_string(back.error());
        EXPECT_EQ(*back, m);
    }
}

TEST(SimCtl, EncodeRefusesWhatParseWouldRefuse) {
    CtlMessage m;
    m.type = static_cast<CtlType>(11);
    EXPECT_EQ(encode_ctl(m).error(), CtlError::unknown_type);
    m.type = CtlType::get_pkeys;
    m.len = 65;
    EXPECT_EQ(encode_ctl(m).error(), CtlError::bad_length);
    m.len = 64;
    EXPECT_TRUE(encode_ctl(m).has_value());
}

TEST(SimCtl, ErrorsHaveDistinctNames) {
    const CtlError ctl[] = {CtlError::wrong_size, CtlError::bad_magic, CtlError::unknown_type, CtlError::bad_length};
    const PayloadError payload[] = {PayloadError::wrong_type,         PayloadError::short_payload,
                                    PayloadError::nodeid_too_long,    PayloadError::nodeid_has_nul,
                                    PayloadError::nodeid_unterminated, PayloadError::nodeid_not_printable,
                                    PayloadError::bad_issm_value};
    const RequestError request[] = {RequestError::wrong_size, RequestError::bad_length};
    std::vector<std::string> names;
    for (auto e : ctl) names.emplace_back(to_string(e));
    for (auto e : payload) names.emplace_back(to_string(e));
    for (auto e : request) names.emplace_back(to_string(e));
    for (std::size_t i = 0; i < names.size(); ++i) {
        EXPECT_NE(names[i], "unknown");
        for (std::size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
    }
    EXPECT_EQ(static_cast<std::size_t>(kLastCtlError) + 1, std::size(ctl));
    EXPECT_EQ(static_cast<std::size_t>(kLastPayloadError) + 1, std::size(payload));
    EXPECT_EQ(static_cast<std::size_t>(kLastRequestError) + 1, std::size(request));
}

// ---------------------------------------------------------------------------
// CONNECT payload

TEST(SimClientInfo, TheMeasuredRequestIsWrittenByteForByte) {
    CtlMessage m;
    ASSERT_TRUE(put_client_info({.id = 20187, .qp = 0, .issm = 0, .nodeid = ""}, m).has_value());
    auto b = encode_ctl(m);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(to_hex(to_vector(*b)), to_hex(from_hex(kConnectRequestHex)));
}

TEST(SimClientInfo, TheReplyNamesTheSlotAndTheNode) {
    // OpenSM with SIM_HOST=Hca1 and SIM_SET_ISSM: attached as slot 0.
    CtlMessage m;
    m.client_id = 0;
    ASSERT_TRUE(put_client_info({.id = 0, .qp = 0, .issm = 1, .nodeid = "Hca1"}, m).has_value());
    EXPECT_EQ(m.type, CtlType::connect);
    EXPECT_EQ(m.len, 44u);
    auto b = encode_ctl(m);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(to_hex(to_vector(*b)),
              to_hex(from_hex("ef be ad de 00 00 00 00 01 00 00 00 2c 00 00 00"
                              "00 00 00 00 00 00 00 00 01 00 00 00 48 63 61 31" +
                              zeros(28) + zeros(20))));
}

TEST(SimClientInfo, NodeidTable) {
    struct Case {
        const char* name;
        std::string nodeid;
        bool ok;
        PayloadError want;
    };
    const Case cases[] = {
        {"empty: the default node", "", true, {}},
        {"Hca1", "Hca1", true, {}},
        {"Switch1", "Switch1", true, {}},
        {"31 characters, the most that fits", std::string(31, 'n'), true, {}},
        {"32 characters leave no room for the NUL", std::string(32, 'n'), false, PayloadError::nodeid_too_long},
        {"a NUL inside", std::string("Hca\0" "1", 5), false, PayloadError::nodeid_has_nul},
        {"a space, as NodeDescriptions have", "Hca1 HCA-1", true, {}},
        {"a newline would start a log line of its own", "Hca1\nsim: client 1 attached", false,
         PayloadError::nodeid_not_printable},
        {"an escape sequence for the terminal", "\x1b[2JHca1", false, PayloadError::nodeid_not_printable},
        {"a byte above 0x7E", "Hca\xc3\xa9", false, PayloadError::nodeid_not_printable},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const ClientInfo info{.id = 0x01020304, .qp = 0, .issm = 1, .nodeid = c.nodeid};
        CtlMessage m;
        auto put = put_client_info(info, m);
        ASSERT_EQ(put.has_value(), c.ok);
        if (!c.ok) {
            EXPECT_EQ(put.error(), c.want) << to_string(put.error());
            continue;
        }
        EXPECT_EQ(m.data[client_info_offset::nodeid + c.nodeid.size()], 0) << "NUL-terminated";
        auto b = encode_ctl(m);
        ASSERT_TRUE(b.has_value());
        auto parsed = parse_ctl(*b);
        ASSERT_TRUE(parsed.has_value());
        auto back = read_client_info(*parsed);
        ASSERT_TRUE(back.has_value()) << to_string(back.error());
        EXPECT_EQ(*back, info);
    }
}

TEST(SimClientInfo, ReadRefusesWhatIsNotAWholeTerminatedClientInfo) {
    struct Case {
        const char* name;
        void (*edit)(CtlMessage&);
        PayloadError want;
    };
    const Case cases[] = {
        {"32 nodeid bytes without a NUL",
         [](CtlMessage& m) { std::fill_n(m.data.begin() + client_info_offset::nodeid, 32, std::uint8_t{'x'}); },
         PayloadError::nodeid_unterminated},
        {"a control character in the name", [](CtlMessage& m) { m.data[client_info_offset::nodeid + 1] = '\r'; },
         PayloadError::nodeid_not_printable},
        {"a GET_VENDOR message", [](CtlMessage& m) { m.type = CtlType::get_vendor; }, PayloadError::wrong_type},
        {"len 43", [](CtlMessage& m) { m.len = 43; }, PayloadError::short_payload},
        {"len 0", [](CtlMessage& m) { m.len = 0; }, PayloadError::short_payload},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        CtlMessage m;
        ASSERT_TRUE(put_client_info({.id = 7, .nodeid = "Hca2"}, m).has_value());
        ASSERT_TRUE(read_client_info(m).has_value());
        c.edit(m);
        auto r = read_client_info(m);
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.error(), c.want) << to_string(r.error());
    }
}

TEST(SimClientInfo, ReadStopsAtTheFirstNul) {
    CtlMessage m;
    ASSERT_TRUE(put_client_info({.id = 7, .nodeid = "Hca2"}, m).has_value());
    // Bytes after the NUL (stale stack in a C client) are not part of the name.
    std::fill_n(m.data.begin() + client_info_offset::nodeid + 5, 27, std::uint8_t{'z'});
    m.data[client_info_offset::nodeid + 31] = 'z';  // the last byte too: one NUL is enough
    auto r = read_client_info(m);
    ASSERT_TRUE(r.has_value()) << to_string(r.error());
    EXPECT_EQ(r->nodeid, "Hca2");
}

// ---------------------------------------------------------------------------
// GET_VENDOR, GET_PORT, SET_ISSM payloads

TEST(SimVendor, KnownBytes) {
    struct Case {
        const char* name;
        Vendor vendor;
        const char* hex;
    };
    const Case cases[] = {
        {"what ibsim sends for a Mellanox node: hw 0xa1, fw 1",
         {.vendor_id = 0x0002c9, .vendor_part_id = 0x5a44, .hw_ver = 0xa1, .fw_ver = 1},
         "c9 02 00 00 44 5a 00 00 a1 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00"},
        {"every byte distinct",
         {.vendor_id = 0x11121314, .vendor_part_id = 0x21222324, .hw_ver = 0x31323334,
          .fw_ver = 0x4142434445464748ULL},
         "14 13 12 11 24 23 22 21 34 33 32 31 00 00 00 00 48 47 46 45 44 43 42 41"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        CtlMessage m;
        put_vendor(c.vendor, m);
        EXPECT_EQ(m.type, CtlType::get_vendor);
        EXPECT_EQ(m.len, 24u);
        const std::vector<std::uint8_t> payload(m.data.begin(), m.data.end());
        EXPECT_EQ(to_hex(payload), to_hex(from_hex(std::string(c.hex) + zeros(40))));
        m.data[vendor_offset::padding] = 0xEE;  // alignment padding is not read
        auto back = read_vendor(m);
        ASSERT_TRUE(back.has_value()) << to_string(back.error());
        EXPECT_EQ(*back, c.vendor);
    }
    CtlMessage m;
    put_vendor({}, m);
    m.len = 23;
    EXPECT_EQ(read_vendor(m).error(), PayloadError::short_payload);
    m.len = 24;
    m.type = CtlType::get_guid;
    EXPECT_EQ(read_vendor(m).error(), PayloadError::wrong_type);
}

TEST(SimGetPort, KnownBytes) {
    CtlMessage m;
    put_get_port_reply({.lid = 0x0103, .port_state = 4}, m);
    EXPECT_EQ(m.type, CtlType::get_port);
    EXPECT_EQ(m.len, 4u);
    EXPECT_EQ(to_hex(std::vector<std::uint8_t>(m.data.begin(), m.data.begin() + 4)), "03010400");
    auto back = read_get_port_reply(m);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, (GetPortReply{.lid = 0x0103, .port_state = 4}));
    m.len = 3;
    EXPECT_EQ(read_get_port_reply(m).error(), PayloadError::short_payload);
}

TEST(SimSetIssm, ValuesTable) {
    struct Case {
        const char* name;
        const char* hex;
        bool ok;
        bool issm;
        PayloadError want;
    };
    const Case cases[] = {
        {"1: set IsSM", "01 00 00 00", true, true, {}},
        {"0: clear IsSM", "00 00 00 00", true, false, {}},
        {"2", "02 00 00 00", false, false, PayloadError::bad_issm_value},
        {"1 in network order", "00 00 00 01", false, false, PayloadError::bad_issm_value},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        CtlMessage m;
        m.type = CtlType::set_issm;
        m.len = 4;
        const auto v = from_hex(c.hex);
        std::copy(v.begin(), v.end(), m.data.begin());
        auto r = read_set_issm(m);
        ASSERT_EQ(r.has_value(), c.ok);
        if (c.ok) {
            EXPECT_EQ(*r, c.issm);
            CtlMessage again;
            put_set_issm(c.issm, again);
            EXPECT_EQ(again, m) << "put_set_issm writes the same message";
        } else {
            EXPECT_EQ(r.error(), c.want) << to_string(r.error());
        }
    }
    CtlMessage m;
    put_set_issm(true, m);
    m.len = 2;
    EXPECT_EQ(read_set_issm(m).error(), PayloadError::short_payload);
    m.len = 4;
    m.type = CtlType::connect;
    EXPECT_EQ(read_set_issm(m).error(), PayloadError::wrong_type);
}

TEST(SimPayload, PutZeroesTheDataBehindThePayload) {
    CtlMessage m;
    m.data.fill(0xAB);  // the request's bytes, about to become the reply
    put_get_port_reply({.lid = 1, .port_state = 4}, m);
    for (std::size_t i = 3; i < kCtlDataSize; ++i) EXPECT_EQ(m.data[i], 0) << i;
}

// ---------------------------------------------------------------------------
// Data messages

// Section 4's measured SA reply to LID 3 from LID 1 on QP1, length 0x70,
// with garbage where the format says "ignore": dlid/slid bytes 2-3, the
// padding, and the MAD past its 112 bytes.
std::vector<std::uint8_t> measured_sa_reply() {
    std::string hex = "00 03 a5 5a | 00 01 00 00 | 00 00 00 01 | 00 00 00 01 | 00 00 00 00 | de ad 77 01 |"
                      "00 00 00 00 00 00 00 70 |";
    for (int i = 0; i < 112; ++i) hex += to_hex({static_cast<std::uint8_t>(i + 1)}) + " ";
    for (int i = 112; i < 256; ++i) hex += "ee ";
    return from_hex(hex);
}

TEST(SimRequestWire, ParsesTheMeasuredExample) {
    const auto wire = measured_sa_reply();
    ASSERT_EQ(wire.size(), 288u);
    auto r = parse_request(wire);
    ASSERT_TRUE(r.has_value()) << to_string(r.error());
    EXPECT_EQ(r->dlid, 3);
    EXPECT_EQ(r->slid, 1);
    EXPECT_EQ(r->dqp, 1u);
    EXPECT_EQ(r->sqp, 1u);
    EXPECT_EQ(r->status, 0u);
    EXPECT_EQ(r->length, 0x70u);
    ASSERT_EQ(r->mad_bytes().size(), 112u);
    for (std::size_t i = 0; i < 112; ++i) EXPECT_EQ(r->mad[i], i + 1) << i;
    for (std::size_t i = 112; i < kMadAreaSize; ++i) EXPECT_EQ(r->mad[i], 0) << "past length: " << i;

    // Re-encoded, the ignored bytes come out zero and nothing else changes.
    auto again = encode_request(*r);
    ASSERT_TRUE(again.has_value());
    auto want = wire;
    want[2] = want[3] = 0;
    std::fill_n(want.begin() + static_cast<std::ptrdiff_t>(request_offset::padding), kRequestPaddingSize, 0);
    std::fill(want.begin() + static_cast<std::ptrdiff_t>(request_offset::mad + 112), want.end(), 0);
    EXPECT_EQ(to_hex(to_vector(*again)), to_hex(want));
}

TEST(SimRequestWire, EncodeWritesEachFieldInItsOrder) {
    SimRequest r;
    r.dlid = 0xFFFF;  // directed route, as smpquery -D sends it
    r.slid = 0x1234;
    r.dqp = 0x01020304;
    r.sqp = 0x0A0B0C0D;
    r.status = kStatusTimedOut;
    r.length = 3;
    r.mad[0] = 0x01;
    r.mad[1] = 0x81;
    r.mad[2] = 0x01;
    r.mad[3] = 0x99;  // past length: zero on the wire
    r.mad[255] = 0x99;
    auto b = encode_request(r);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(to_hex(to_vector(*b)),
              to_hex(from_hex("ff ff 00 00 | 12 34 00 00 | 01 02 03 04 | 0a 0b 0c 0d | 00 00 00 6e | 00 00 00 00 |"
                              "00 00 00 00 00 00 00 03 | 01 81 01" + zeros(253))));
}

TEST(SimRequestWire, ParseTable) {
    auto with_length = [](std::uint64_t length) {
        auto b = measured_sa_reply();
        store_be64(b.data() + request_offset::length, length);
        return b;
    };
    auto sized = [](std::size_t n) {
        auto b = measured_sa_reply();
        b.resize(n, 0);
        return b;
    };
    struct Case {
        const char* name;
        std::vector<std::uint8_t> datagram;
        bool ok;
        RequestError want;
    };
    const Case cases[] = {
        {"the measured SA reply", measured_sa_reply(), true, {}},
        {"287 bytes", sized(287), false, RequestError::wrong_size},
        {"289 bytes", sized(289), false, RequestError::wrong_size},
        {"224 bytes", sized(224), false, RequestError::wrong_size},
        {"nothing", {}, false, RequestError::wrong_size},
        {"length 256, the whole MAD", with_length(256), true, {}},
        {"length 0", with_length(0), true, {}},
        {"length 257", with_length(257), false, RequestError::bad_length},
        {"length 0x70 little-endian (2^62 + ...)", with_length(0x7000000000000000ULL), false,
         RequestError::bad_length},
        {"length 2^64-1", with_length(~0ULL), false, RequestError::bad_length},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        auto r = parse_request(c.datagram);
        ASSERT_EQ(r.has_value(), c.ok);
        if (!c.ok) {
            EXPECT_EQ(r.error(), c.want) << to_string(r.error());
        }
    }
}

TEST(SimRequestWire, EncodeRefusesALengthBeyondTheMad) {
    SimRequest r;
    r.length = 257;
    auto b = encode_request(r);
    ASSERT_FALSE(b.has_value());
    EXPECT_EQ(b.error(), RequestError::bad_length);
    EXPECT_EQ(r.mad_bytes().size(), kMadAreaSize) << "mad_bytes() stays inside the array";
}

TEST(SimRequestWire, RoundTrips) {
    struct Case {
        const char* name;
        SimRequest request;
    };
    auto with_mad = [](SimRequest r) {
        for (std::size_t i = 0; i < r.length; ++i) r.mad[i] = static_cast<std::uint8_t>(0x5A ^ i);
        return r;
    };
    const Case cases[] = {
        {"smpquery -D: DR, QP0 to QP0", with_mad({.dlid = 0xFFFF, .slid = 0xFFFF, .length = 256})},
        {"saquery: to the SA at LID 1, slid left to the server",
         with_mad({.dlid = 1, .slid = 0, .dqp = 1, .sqp = 1, .length = 256})},
        {"OpenSM's GetTableResp of 112 bytes", with_mad({.dlid = 3, .slid = 1, .dqp = 1, .sqp = 1, .length = 112})},
        {"a request echoed with status 110",
         with_mad({.dlid = 99, .slid = 3, .status = kStatusTimedOut, .length = 256})},
        {"every field at its widest",
         with_mad({.dlid = 0xBFFF, .slid = 0xC000, .dqp = 0xFFFFFFFF, .sqp = 0x80000001, .status = 0xFFFFFFFF,
                   .length = 255})},
        {"length 0", {.dlid = 1, .slid = 2}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        auto b = encode_request(c.request);
        ASSERT_TRUE(b.has_value());
        auto back = parse_request(*b);
        ASSERT_TRUE(back.has_value()) << to_string(back.error());
        EXPECT_EQ(*back, c.request);
    }
}

// ---------------------------------------------------------------------------
// TransactionID bits

TEST(SimTid, MeasuredTids) {
    struct Case {
        const char* name;
        std::uint64_t tid;
        std::uint16_t slot;
        std::uint16_t agent;
    };
    const Case cases[] = {
        {"smpquery -D: agent 1, slot 0", 0x000000016d8031e1ULL, 0, 1},
        {"smpquery nodeinfo 1 reply: slot 1 stamped by the server", 0x0001000025ad2e73ULL, 1, 0},
        {"forwarded SA request to OpenSM", 0x00010000514383caULL, 1, 0},
        {"all of both", 0xFFFFFFFF00000000ULL, 0xFFFF, 0xFFFF},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        EXPECT_EQ(slot_of(c.tid), c.slot);
        EXPECT_EQ(agent_of(c.tid), c.agent);
    }
}

TEST(SimTid, RewritesTouchOnlyTheirBits) {
    // The shim's rewrite with agent 0, as measured.
    EXPECT_EQ(with_agent(0x1122334455667788ULL, 0), 0x1122000055667788ULL);
    EXPECT_EQ(with_agent(0x1122334455667788ULL, 0x0007), 0x1122000755667788ULL);
    // The server's: the slot in the top 16 bits.
    EXPECT_EQ(with_slot(0x0000000025ad2e73ULL, 1), 0x0001000025ad2e73ULL);
    EXPECT_EQ(with_slot(0x1122334455667788ULL, 1), 0x0001334455667788ULL);
    EXPECT_EQ(with_slot(0x1122334455667788ULL, 9), 0x0009334455667788ULL);
    constexpr std::uint64_t tid = with_slot(with_agent(0xFFFFFFFFFFFFFFFFULL, 0x0102), 0x0304);
    static_assert(slot_of(tid) == 0x0304 && agent_of(tid) == 0x0102);
    EXPECT_EQ(tid & 0xFFFFFFFFULL, 0xFFFFFFFFULL);
}

// ---------------------------------------------------------------------------
// Socket names

TEST(SimSocketNames, NamesAndTheirMeasuredAddressLengths) {
    // Section 1 and 9: base "refprobe20187", a client pid of five digits.
    struct Case {
        const char* name;
        std::string socket;
        const char* want;
        std::size_t addrlen;
    };
    const std::string base = "refprobe20187";
    const Case cases[] = {
        {"server control", server_ctl_name(base), "refprobe20187:ctl", 21},
        {"server data, slot 0", server_out_name(base, 0), "refprobe20187:out0", 22},
        {"client control", client_ctl_name(base, 12345), "refprobe20187:ctl12345", 26},
        {"client data", client_in_name(base, 12345), "refprobe20187:in12345", 25},
        {"default base, slot 9", server_out_name(kDefaultSocketBaseName, 9), "sim:out9", 12},
        {"default base, pid 1", client_in_name(kDefaultSocketBaseName, 1), "sim:in1", 11},
        {"pid 4194304 (pid_max on 64-bit)", client_ctl_name("sim", 4194304), "sim:ctl4194304", 18},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        EXPECT_EQ(c.socket, c.want);
        EXPECT_EQ(abstract_address_length(c.socket), c.addrlen);
        EXPECT_EQ(kSunFamilySize + abstract_address(c.socket).size(), c.addrlen);
    }
}

TEST(SimSocketNames, AbstractAddressEndsWithItsNul) {
    const auto a = abstract_address("refprobe20187:ctl");
    std::vector<std::uint8_t> want{0};
    for (char ch : std::string("refprobe20187:ctl")) want.push_back(static_cast<std::uint8_t>(ch));
    want.push_back(0);
    EXPECT_EQ(to_hex(a), to_hex(want));
    EXPECT_EQ(to_hex(abstract_address("")), "0000");
    EXPECT_EQ(kMaxAbstractNameLength, 106u);
}

TEST(SimSocketNames, BaseNameFromTheEnvironment) {
    EXPECT_EQ(socket_base_name(nullptr), "sim");
    EXPECT_EQ(socket_base_name("refprobe20187"), "refprobe20187");
    EXPECT_EQ(socket_base_name(""), "") << "set but empty is used as is";
    EXPECT_STREQ(kSocketBaseNameEnv, "IBSIM_SOCKNAME");
}

}  // namespace
}  // namespace ipoibd::fabric::sim
