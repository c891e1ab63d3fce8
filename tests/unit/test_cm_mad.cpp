// The CM MAD codecs (cm/cm_mad.h): named cases for what a decode refuses,
// the bytes of a REQ as Linux's ipoib_cm sends one, round trips of every
// message with every bit field at its widest, and tshark decoding REQ,
// REP, RTU and REJ as encoded.
#include <gtest/gtest.h>

#include <functional>

#include "cm/cm_mad.h"
#include "tests/unit/tshark_util.h"
#include "transport/wire/packet.h"

namespace ipoibd::cm {
namespace {

using Mad = std::array<std::uint8_t, ib::kMadSize>;
constexpr std::size_t H = ib::kMadHeaderSize;

ib::Gid gid(std::uint64_t guid) {
    ib::Gid g{};
    store_be64(g.data(), 0xFE80000000000000ULL);
    store_be64(g.data() + 8, guid);
    return g;
}

// A REQ with Linux ipoib_cm's parameters (ipoib-cm.md 5.1): the peer's UD
// QPN 0x48 in the ServiceID, RC, retries 0, CM timeouts 20, 15 CM retries,
// path MTU 2048, private data [0][QPN 0x123][65524].
Req linux_req() {
    Req r;
    r.local_comm_id = 0x1A2B3C4D;
    r.service_id = ipoib_service_id(0x48);
    r.local_ca_guid = 0x0002C90300001230ULL;
    r.local_qpn = 0x0004A1;
    r.responder_resources = 4;
    r.initiator_depth = 0;
    r.remote_cm_response_timeout = 20;
    r.transport_service_type = 0;
    r.starting_psn = 0;
    r.local_cm_response_timeout = 20;
    r.retry_count = 0;
    r.pkey = 0xFFFF;
    r.path_mtu = 4;
    r.rnr_retry_count = 0;
    r.max_cm_retries = 15;
    r.srq = true;
    r.primary = {.local_lid = 0x12, .remote_lid = 0x34, .local_gid = gid(0x1234), .remote_gid = gid(0x5678),
                 .flow_label = 0, .packet_rate = 3, .traffic_class = 0, .hop_limit = 0, .sl = 0,
                 .subnet_local = true, .local_ack_timeout = 18};
    write_ipoib_data(r.private_data, {.ud_qpn = 0x123, .receive_size = 65524});
    return r;
}

TEST(CmMad, ALinuxReqHasTheBytesOfTheReference) {
    const Mad m = encode(linux_req(), 0x0000000A1A2B3C4DULL);
    EXPECT_EQ(m[0], 1);
    EXPECT_EQ(m[1], 0x07);
    EXPECT_EQ(m[2], 2);
    EXPECT_EQ(m[3], 0x03);
    EXPECT_EQ(load_be16(m.data() + 16), attr::req);
    const std::uint8_t* d = m.data() + H;
    EXPECT_EQ(load_be32(d), 0x1A2B3C4Du);
    EXPECT_EQ(load_be64(d + 8), 0x1000000000000048ULL);
    EXPECT_EQ(load_be24(d + 32), 0x0004A1u);
    EXPECT_EQ(d[35], 4);
    EXPECT_EQ(d[43], 20 << 3);             // remote CM response timeout 20, RC, no flow control
    EXPECT_EQ(d[47], 20 << 3);             // local CM response timeout 20, retry count 0
    EXPECT_EQ(load_be16(d + 48), 0xFFFF);
    EXPECT_EQ(d[50], 4 << 4);              // MTU 2048, no RDC, RNR retry 0
    EXPECT_EQ(d[51], 15 << 4 | 0x08);      // 15 CM retries, SRQ
    EXPECT_EQ(load_be16(d + 52), 0x12);
    EXPECT_EQ(load_be16(d + 54), 0x34);
    EXPECT_EQ(load_be64(d + 64), 0x1234u);  // the local GID's GUID half
    EXPECT_EQ(d[91], 3);                   // packet rate
    EXPECT_EQ(d[94], 0x08);                // SL 0, subnet local
    EXPECT_EQ(d[95], 18 << 3);             // local ACK timeout
    for (std::size_t i = 96; i < 140; ++i) EXPECT_EQ(d[i], 0) << "no alternate path, byte " << i;
    EXPECT_EQ(d[140], 0);
    EXPECT_EQ(load_be24(d + 141), 0x123u);
    EXPECT_EQ(load_be32(d + 144), 65524u);
    const auto back = decode(m);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->transaction_id, 0x0000000A1A2B3C4DULL);
    EXPECT_EQ(std::get<Req>(back->message), linux_req());
    EXPECT_EQ(read_ipoib_data(std::get<Req>(back->message).private_data),
              (IpoibCmData{.ud_qpn = 0x123, .receive_size = 65524}));
}

struct RefusalCase {
    const char* name;
    std::function<void(Mad&)> edit;
    DecodeError want;
};

TEST(CmMad, DecodeRefusesWhatNoFieldMayHold) {
    const RefusalCase cases[] = {
        {"class version 1 (ib_cm registers only 2)", [](Mad& m) { m[2] = 1; }, DecodeError::bad_class_version},
        {"the SA's class", [](Mad& m) { m[1] = 0x03; }, DecodeError::not_cm},
        {"base version 2", [](Mad& m) { m[0] = 2; }, DecodeError::not_cm},
        {"method GetResp", [](Mad& m) { m[3] = 0x81; }, DecodeError::bad_method},
        {"SIDR_REQ (not handled here)", [](Mad& m) { store_be16(m.data() + 16, attr::sidr_req); },
         DecodeError::unknown_attribute},
        {"attribute 0x0030", [](Mad& m) { store_be16(m.data() + 16, 0x30); }, DecodeError::unknown_attribute},
        {"transport service type 3", [](Mad& m) { m[H + 43] |= 0x06; }, DecodeError::bad_transport_type},
        {"path MTU code 0", [](Mad& m) { m[H + 50] &= 0x0F; }, DecodeError::bad_path_mtu},
        {"path MTU code 6", [](Mad& m) { m[H + 50] = static_cast<std::uint8_t>(0x60 | (m[H + 50] & 0x0F)); },
         DecodeError::bad_path_mtu},
    };
    for (const RefusalCase& c : cases) {
        Mad m = encode(linux_req(), 1);
        c.edit(m);
        const auto r = decode(m);
        ASSERT_FALSE(r) << c.name;
        EXPECT_EQ(r.error(), c.want) << c.name << ": " << to_string(r.error());
    }
    Mad rej = encode(Rej{}, 1);
    rej[H + 9] = 73 << 1;
    EXPECT_EQ(decode(rej).error(), DecodeError::bad_info_length) << "REJ info length 73";
    Mad mra = encode(Mra{}, 1);
    mra[H + 8] = 0xC0;
    EXPECT_EQ(decode(mra).error(), DecodeError::bad_message_kind) << "MRA message code 3";
    Mad apr = encode(Apr{}, 1);
    apr[H + 8] = 80;
    EXPECT_EQ(decode(apr).error(), DecodeError::bad_info_length) << "APR info length 80";
    EXPECT_EQ(decode(bytes(encode(linux_req(), 1)).first(255)).error(), DecodeError::too_short);
}

TEST(CmMad, ReservedBitsAreIgnoredOnReceipt) {
    Mad m = encode(linux_req(), 1);
    m[H + 4] = 0xEE;        // reserved (ECE vendor ID in newer kernels)
    m[H + 24] = 0xFF;       // reserved before the local Q_Key
    m[H + 91] |= 0xC0;      // the 6 reserved bits between flow label and rate: top two
    const auto r = decode(m);
    ASSERT_TRUE(r);
    EXPECT_EQ(std::get<Req>(r->message).primary.packet_rate, 3);
}

// Every bit field at its widest value, neighbours set too: a field that
// leaks into the next shows as a difference.
std::vector<Message> widest() {
    std::vector<Message> out;
    Req q = linux_req();
    q.local_qkey = 0xFFFFFFFF;
    q.local_eecn = 0xFFFFFF;
    q.remote_eecn = 0xABCDEF;
    q.remote_cm_response_timeout = 31;
    q.transport_service_type = 2;
    q.end_to_end_flow_control = true;
    q.starting_psn = 0xFFFFFF;
    q.local_cm_response_timeout = 31;
    q.retry_count = 7;
    q.path_mtu = 5;
    q.rdc_exists = true;
    q.rnr_retry_count = 7;
    q.max_cm_retries = 15;
    q.extended_transport_type = 7;
    q.primary.flow_label = 0xFFFFF;
    q.primary.packet_rate = 0x3F;
    q.primary.sl = 15;
    q.primary.subnet_local = false;
    q.primary.local_ack_timeout = 31;
    q.alternate = Path{.local_lid = 0x99, .remote_lid = 0xAA, .local_gid = gid(1), .remote_gid = gid(2),
                       .flow_label = 0x12345, .packet_rate = 7, .traffic_class = 0xB8, .hop_limit = 0xFF, .sl = 9,
                       .subnet_local = true, .local_ack_timeout = 31};
    q.sap_supported = true;
    q.private_data.fill(0x5A);
    out.push_back(q);
    Req no_alt = linux_req();
    no_alt.sap_supported = true;  // shares its byte with the (absent) alternate's ACK timeout
    out.push_back(no_alt);
    Mra mra{.local_comm_id = 1, .remote_comm_id = 0xFFFFFFFF, .message_mraed = MessageKind::other, .service_timeout = 31};
    mra.private_data.fill(0xA5);
    out.push_back(mra);
    Rej rej{.local_comm_id = 0, .remote_comm_id = 7, .message_rejected = MessageKind::rep, .reject_info_length = 72,
            .reason = rej::stale_connection};
    rej.ari.fill(0x11);
    rej.private_data.fill(0x22);
    out.push_back(rej);
    Rep rep{.local_comm_id = 2, .remote_comm_id = 3, .local_qkey = 0x80010000, .local_qpn = 0xFFFFFF,
            .local_eecn = 0x123456, .starting_psn = 0xFEDCBA, .responder_resources = 0xFF, .initiator_depth = 0xEE,
            .target_ack_delay = 31, .failover_accepted = 3, .end_to_end_flow_control = true, .rnr_retry_count = 7,
            .srq = true, .local_ca_guid = 0x0123456789ABCDEFULL};
    write_ipoib_data(rep.private_data, {.ud_qpn = 0xFFFFFF, .receive_size = 65524});
    out.push_back(rep);
    Rtu rtu{.local_comm_id = 4, .remote_comm_id = 5};
    rtu.private_data.fill(0x33);
    out.push_back(rtu);
    Dreq dreq{.local_comm_id = 6, .remote_comm_id = 7, .remote_qpn = 0xFFFFFF};
    dreq.private_data.fill(0x44);
    out.push_back(dreq);
    Drep drep{.local_comm_id = 8, .remote_comm_id = 9};
    drep.private_data.fill(0x55);
    out.push_back(drep);
    out.push_back(Lap{.local_comm_id = 10, .remote_comm_id = 11, .remote_qpn = 0xABCDEF, .remote_cm_response_timeout = 31});
    Apr apr{.local_comm_id = 12, .remote_comm_id = 13, .additional_info_length = 72, .ap_status = apr_status::unsupported};
    apr.additional_info.fill(0x66);
    apr.private_data.fill(0x77);
    out.push_back(apr);
    return out;
}

TEST(CmMad, EveryMessageRoundTrips) {
    std::uint64_t tid = 0xFEDCBA9876543210ULL;
    for (const Message& m : widest()) {
        SCOPED_TRACE(name_of(m));
        const Mad wire = encode(m, tid);
        EXPECT_EQ(load_be16(wire.data() + 16), attribute_of(m));
        const auto back = decode(wire);
        ASSERT_TRUE(back) << to_string(back.error());
        EXPECT_EQ(back->transaction_id, tid);
        EXPECT_TRUE(back->message == m);
        EXPECT_EQ(encode(back->message, tid), wire) << "encode(decode(x)) == x";
        ++tid;
    }
}

TEST(CmMad, IpoibServiceIdsAndPrivateData) {
    EXPECT_EQ(ipoib_service_id(0x000048), 0x1000000000000048ULL);
    EXPECT_EQ(ipoib_service_id(0xFF123456), 0x1000000000123456ULL) << "24 bits of QPN";
    std::array<std::uint8_t, 8> pd{};
    write_ipoib_data(pd, {.ud_qpn = 0xABCDEF, .receive_size = 65524});
    EXPECT_EQ(pd, (std::array<std::uint8_t, 8>{0x00, 0xAB, 0xCD, 0xEF, 0x00, 0x00, 0xFF, 0xF4}));
    pd[0] = 0x7F;  // the reserved octet (librdmacm's CMA header byte) is ignored
    EXPECT_EQ(read_ipoib_data(pd).ud_qpn, 0xABCDEFu);
    EXPECT_EQ(read_ipoib_data(bytes(pd).first(7)), IpoibCmData{}) << "too short: nothing";
}

// --- tshark ---

std::vector<std::uint8_t> on_qp1(const Mad& mad) {
    ib::PacketSpec spec;
    spec.lrh = {.vl = 0, .lver = 0, .sl = 0, .lnh = ib::Lnh::iba_local, .dlid = 0x0034, .pkt_len = 0, .slid = 0x0012};
    spec.bth.opcode = ib::op::ud_send_only;
    spec.bth.pkey = ib::kPKeyDefault;
    spec.bth.dest_qp = ib::kQp1;
    spec.ext.deth = {ib::kGsiQKey, ib::kQp1};
    spec.payload = mad;
    std::vector<std::uint8_t> wire(ib::packet_size(spec));
    EXPECT_TRUE(ib::build_packet(spec, wire));
    return wire;
}

TEST(CmMad, TsharkDecodesReqRepRtuAndRejAsEncoded) {
    const Req req = linux_req();
    Rep rep{.local_comm_id = 0x0BADF00D, .remote_comm_id = req.local_comm_id, .local_qpn = 0x0004B2,
            .starting_psn = 0x00ABCD, .rnr_retry_count = 0, .srq = true, .local_ca_guid = 0x0002C90300005670ULL};
    write_ipoib_data(rep.private_data, {.ud_qpn = 0x48, .receive_size = 65524});
    const Rtu rtu{.local_comm_id = req.local_comm_id, .remote_comm_id = rep.local_comm_id};
    const Rej rej{.local_comm_id = 0, .remote_comm_id = req.local_comm_id, .message_rejected = MessageKind::req,
                  .reject_info_length = 0, .reason = rej::invalid_service_id};
    const Dreq dreq{.local_comm_id = 1, .remote_comm_id = 2, .remote_qpn = 0x4B2};
    const std::vector<Message> messages = {req, rep, rtu, rej, dreq, Drep{.local_comm_id = 2, .remote_comm_id = 1},
                                           Mra{.local_comm_id = 3, .remote_comm_id = 4, .service_timeout = 24}};
    std::vector<std::vector<std::uint8_t>> wires;
    for (const Message& m : messages) wires.push_back(on_qp1(encode(m, 0x42)));
    test::ScratchDir dir;
    const std::string pcap = dir.path() + "/cm.pcap";
    ASSERT_TRUE(test::write_capture(pcap, wires));
    const std::vector<std::string> fields = {
        "frame.protocols", "infiniband.mad.mgmtclass", "infiniband.mad.attributeid",
        "infiniband.cm.req.serviceid", "infiniband.cm.req.localcaguid", "infiniband.cm.req.localqpn",
        "infiniband.cm.req.responderres", "infiniband.cm.req.remoteresptout", "infiniband.cm.req.startpsn",
        "infiniband.cm.req.localresptout", "infiniband.cm.req.retrcount", "infiniband.cm.req.pkey",
        "infiniband.cm.req.pppmtu", "infiniband.cm.req.rnrretrcount", "infiniband.cm.req.maxcmretr",
        "infiniband.cm.req.srq", "infiniband.cm.req.prim_locallid", "infiniband.cm.req.prim_remotelid",
        "infiniband.cm.req.prim_remotegid", "infiniband.cm.req.prim_localacktout",
        "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn",
        "infiniband.cm.rep.srq", "infiniband.cm.rep.localcaguid",
        "infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
        "infiniband.cm.rej.remotecommid", "infiniband.cm.rej.msgrej", "infiniband.cm.rej.reason"};
    const auto rows = test::tshark_rows(dir.path(), pcap, fields);
    ASSERT_EQ(rows.size(), messages.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        SCOPED_TRACE(name_of(messages[i]));
        EXPECT_EQ(rows[i].at("frame.protocols").find("malformed"), std::string::npos) << rows[i].at("frame.protocols");
        test::expect_field(rows[i], "infiniband.mad.mgmtclass", "7");
        test::expect_field(rows[i], "infiniband.mad.attributeid", std::to_string(attribute_of(messages[i])));
    }
    const auto& q = rows[0];
    test::expect_field(q, "infiniband.cm.req.serviceid", std::to_string(req.service_id));
    test::expect_field(q, "infiniband.cm.req.localcaguid", std::to_string(req.local_ca_guid));
    test::expect_field(q, "infiniband.cm.req.localqpn", std::to_string(req.local_qpn));
    test::expect_field(q, "infiniband.cm.req.responderres", "4");
    test::expect_field(q, "infiniband.cm.req.remoteresptout", "20");
    test::expect_field(q, "infiniband.cm.req.startpsn", "0");
    test::expect_field(q, "infiniband.cm.req.localresptout", "20");
    test::expect_field(q, "infiniband.cm.req.retrcount", "0");
    test::expect_field(q, "infiniband.cm.req.pkey", "65535");
    test::expect_field(q, "infiniband.cm.req.pppmtu", "4");
    test::expect_field(q, "infiniband.cm.req.rnrretrcount", "0");
    test::expect_field(q, "infiniband.cm.req.maxcmretr", "15");
    test::expect_field(q, "infiniband.cm.req.srq", "1");
    test::expect_field(q, "infiniband.cm.req.prim_locallid", "18");
    test::expect_field(q, "infiniband.cm.req.prim_remotelid", "52");
    test::expect_field(q, "infiniband.cm.req.prim_remotegid", "fe80::5678");
    test::expect_field(q, "infiniband.cm.req.prim_localacktout", "18");
    const auto& p = rows[1];
    test::expect_field(p, "infiniband.cm.rep.remotecommid", std::to_string(req.local_comm_id));
    test::expect_field(p, "infiniband.cm.rep.localqpn", std::to_string(rep.local_qpn));
    test::expect_field(p, "infiniband.cm.rep.startpsn", std::to_string(rep.starting_psn));
    test::expect_field(p, "infiniband.cm.rep.srq", "1");
    test::expect_field(p, "infiniband.cm.rep.localcaguid", std::to_string(rep.local_ca_guid));
    test::expect_field(rows[2], "infiniband.cm.rtu.localcommid", std::to_string(rtu.local_comm_id));
    test::expect_field(rows[2], "infiniband.cm.rtu.remotecommid", std::to_string(rtu.remote_comm_id));
    test::expect_field(rows[3], "infiniband.cm.rej.remotecommid", std::to_string(rej.remote_comm_id));
    test::expect_field(rows[3], "infiniband.cm.rej.msgrej", "0");
    test::expect_field(rows[3], "infiniband.cm.rej.reason", "8");
}

}  // namespace
}  // namespace ipoibd::cm
