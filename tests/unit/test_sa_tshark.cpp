// SA MAD and record layouts checked against an independent decoder:
// Wireshark's InfiniBand dissector. SA MADs with a distinct value in every
// field are built into UD SEND Only packets to QP1 (Q_Key 0x80010000),
// written to an ERF pcap, and read back with tshark (Debian package
// `tshark`, no decode options); each field tshark shows must equal what was
// encoded. A missing tshark is a failure, not a skip, as in test_tshark.cpp.
//
// tshark prints integers as 0x-prefixed hex or decimal (parse_uint takes
// both) and GIDs (FT_IPv6) in IPv6 notation, compared through parse_gid.
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "sa_client/rmpp.h"
#include "sa_client/sa_mad.h"
#include "sa_client/sa_notice.h"
#include "sa_client/sa_records.h"
#include "test_sa_util.h"
#include "transport/capture/erf_pcap.h"
#include "transport/wire/packet.h"

#include "tshark_util.h"

namespace ipoibd::sa {
namespace {

using test::gid;
using Fields = std::map<std::string, std::string>;  // tshark field -> expected text or number

struct Sample {
    std::string name;
    SaMad mad;
    Fields expect;
};

constexpr std::uint64_t kLinkLocal = 0xFE80000000000000ULL;

std::string num(std::uint64_t v) { return std::to_string(v); }

std::string gid_text(const Gid& g) {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
    return buf;
}

SaMad sa_base(std::uint8_t method, std::uint16_t attribute, std::uint64_t tid) {
    SaMad m;
    m.header.method = method;
    m.header.transaction_id = tid;
    m.header.attribute_id = attribute;
    return m;
}

// ---------------------------------------------------------------------------
// Samples

McMemberRecord distinct_mc_member() {
    McMemberRecord r;
    r.mgid = gid(0xFF12401BFFFF0000ULL, 0x00000000FFFFFFFFULL);
    r.port_gid = gid(kLinkLocal, 0x0002C903000AB1C1ULL);
    r.q_key = 0x00000B1B;
    r.mlid = 0xC012;
    r.mtu_selector = Selector::less_than;
    r.mtu = 4;
    r.tclass = 0x21;
    r.p_key = 0xFFFF;
    r.rate_selector = Selector::exactly;
    r.rate = rate::gbps_10;
    r.packet_life_time_selector = Selector::largest_available;
    r.packet_life_time = 0x13;
    r.sl = 6;
    r.flow_label = 0x9ABCD;
    r.hop_limit = 0x3F;
    r.scope = mgid_scope::link_local;
    r.join_state = join_state::send_only_full_member;
    r.proxy_join = true;
    return r;
}

Fields mc_member_fields(const McMemberRecord& r) {
    return {
        {"infiniband.mcmemberrecord.mgid", gid_text(r.mgid)},
        {"infiniband.mcmemberrecord.portgid", gid_text(r.port_gid)},
        {"infiniband.mcmemberrecord.q_key", num(r.q_key)},
        {"infiniband.mcmemberrecord.mlid", num(r.mlid)},
        {"infiniband.mcmemberrecord.mtuselector", num(static_cast<unsigned>(r.mtu_selector))},
        {"infiniband.mcmemberrecord.mtu", num(r.mtu)},
        {"infiniband.mcmemberrecord.tclass", num(r.tclass)},
        {"infiniband.mcmemberrecord.p_key", num(r.p_key)},
        {"infiniband.mcmemberrecord.rateselector", num(static_cast<unsigned>(r.rate_selector))},
        {"infiniband.mcmemberrecord.rate", num(r.rate)},
        {"infiniband.mcmemberrecord.packetlifetimeselector", num(static_cast<unsigned>(r.packet_life_time_selector))},
        {"infiniband.mcmemberrecord.packetlifetime", num(r.packet_life_time)},
        {"infiniband.mcmemberrecord.sl", num(r.sl)},
        {"infiniband.mcmemberrecord.flowlabel", num(r.flow_label)},
        {"infiniband.mcmemberrecord.hoplimit", num(r.hop_limit)},
        {"infiniband.mcmemberrecord.scope", num(r.scope)},
        {"infiniband.mcmemberrecord.joinstate", num(r.join_state)},
        {"infiniband.mcmemberrecord.proxyjoin", num(r.proxy_join ? 1 : 0)},
    };
}

Sample mc_member_join_sample() {
    McMemberQuery q;
    const McMemberRecord d = distinct_mc_member();
    q.set_mgid(d.mgid)
        .set_port_gid(d.port_gid)
        .set_q_key(d.q_key)
        .set_mlid(d.mlid)
        .set_mtu(d.mtu_selector, d.mtu)
        .set_tclass(d.tclass)
        .set_p_key(d.p_key)
        .set_rate(d.rate_selector, d.rate)
        .set_packet_life_time(d.packet_life_time_selector, d.packet_life_time)
        .set_sl(d.sl)
        .set_flow_label(d.flow_label)
        .set_hop_limit(d.hop_limit)
        .set_scope(d.scope)
        .set_join_state(d.join_state)
        .set_proxy_join(d.proxy_join);
    auto mad = q.request(ib::method::set, 0x0000000100000021ULL);
    EXPECT_TRUE(mad.has_value());
    mad->sm_key = 0x0102030405060708ULL;
    Sample s{"SubnAdmSet MCMemberRecord (join)", *mad, mc_member_fields(d)};
    s.expect.insert({
        {"infiniband.mad.mgmtclass", num(ib::mgmt_class::subn_adm)},
        {"infiniband.mad.classversion", num(2)},
        {"infiniband.mad.method", num(ib::method::set)},
        {"infiniband.mad.transactionid", num(0x0000000100000021ULL)},
        {"infiniband.mad.attributeid", num(sa_attr::mc_member_record)},
        {"infiniband.sa.smkey", num(0x0102030405060708ULL)},
        {"infiniband.sa.attributeoffset", num(0)},
        {"infiniband.sa.componentmask", num(0x3FFFF)},
    });
    return s;
}

Sample mc_member_response_sample() {
    // OpenSM's default broadcast group as a GetResp.
    McMemberRecord r;
    r.mgid = gid(0xFF12401BFFFF0000ULL, 0x00000000FFFFFFFFULL);
    r.port_gid = gid(kLinkLocal, 0x0002C903000AB1C2ULL);
    r.q_key = 0x00000B1B;
    r.mlid = 0xC000;
    r.mtu_selector = Selector::exactly;
    r.mtu = 4;
    r.p_key = 0xFFFF;
    r.rate_selector = Selector::exactly;
    r.rate = rate::gbps_10;
    r.packet_life_time_selector = Selector::exactly;
    r.packet_life_time = 0x12;
    r.scope = mgid_scope::link_local;
    r.join_state = join_state::full_member;
    Sample s{"SubnAdmGetResp MCMemberRecord", sa_base(ib::method::get_resp, sa_attr::mc_member_record, 0x22),
             mc_member_fields(r)};
    s.mad.component_mask = kMcMemberJoinComponents;
    EXPECT_TRUE(put_record(r, s.mad).has_value());
    s.expect["infiniband.mad.method"] = num(ib::method::get_resp);
    s.expect["infiniband.sa.componentmask"] = num(kMcMemberJoinComponents);
    return s;
}

Sample path_record_sample() {
    PathRecord p;
    p.service_id = 0x1122334455667788ULL;
    p.dgid = gid(kLinkLocal, 0x0002C903000AB1C2ULL);
    p.sgid = gid(kLinkLocal, 0x0002C903000AB1C1ULL);
    p.dlid = 0x0012;
    p.slid = 0x0034;
    p.raw_traffic = true;
    p.flow_label = 0xABCDE;
    p.hop_limit = 0x05;
    p.tclass = 0x60;
    p.reversible = true;
    p.numb_path = 0x7E;
    p.p_key = 0x8001;
    p.qos_class = 0xABC;
    p.sl = 0xD;
    p.mtu_selector = Selector::greater_than;
    p.mtu = 5;
    p.rate_selector = Selector::less_than;
    p.rate = rate::gbps_56;
    p.packet_life_time_selector = Selector::largest_available;
    p.packet_life_time = 0x2A;
    p.preference = 0x77;
    Sample s{"SubnAdmGetResp PathRecord", sa_base(ib::method::get_resp, sa_attr::path_record, 0x23), {}};
    EXPECT_TRUE(put_record(p, s.mad).has_value());
    s.expect = {
        {"infiniband.mad.attributeid", num(sa_attr::path_record)},
        {"infiniband.pathrecord.dgid", gid_text(p.dgid)},
        {"infiniband.pathrecord.sgid", gid_text(p.sgid)},
        {"infiniband.pathrecord.dlid", num(p.dlid)},
        {"infiniband.pathrecord.slid", num(p.slid)},
        {"infiniband.pathrecord.rawtraffic", num(1)},
        {"infiniband.pathrecord.flowlabel", num(p.flow_label)},
        {"infiniband.pathrecord.hoplimit", num(p.hop_limit)},
        {"infiniband.pathrecord.tclass", num(p.tclass)},
        {"infiniband.pathrecord.reversible", num(1)},
        {"infiniband.pathrecord.numbpath", num(p.numb_path)},
        {"infiniband.pathrecord.p_key", num(p.p_key)},
        {"infiniband.pathrecord.sl", num(p.sl)},
        {"infiniband.pathrecord.mtuselector", num(static_cast<unsigned>(p.mtu_selector))},
        {"infiniband.pathrecord.mtu", num(p.mtu)},
        {"infiniband.pathrecord.rateselector", num(static_cast<unsigned>(p.rate_selector))},
        {"infiniband.pathrecord.rate", num(p.rate)},
        {"infiniband.pathrecord.packetlifetimeselector", num(static_cast<unsigned>(p.packet_life_time_selector))},
        {"infiniband.pathrecord.packetlifetime", num(p.packet_life_time)},
        {"infiniband.pathrecord.preference", num(p.preference)},
    };
    return s;
}

Sample table_segment_sample() {
    // The first segment of a three-segment GetTableResp of MCMemberRecords.
    std::vector<McMemberRecord> recs(8, distinct_mc_member());
    for (std::size_t i = 0; i < recs.size(); ++i) recs[i].mlid = static_cast<std::uint16_t>(0xC100 + i);
    SaMad resp = sa_base(ib::method::get_table_resp, sa_attr::mc_member_record, 0x24);
    resp.attribute_offset = attribute_offset_for(McMemberRecord::size);
    resp.component_mask = mc_member_comp::mgid;
    const auto segs = rmpp_segments(resp, pack_records<McMemberRecord>(recs), 0x11);
    EXPECT_EQ(segs.size(), 3u);
    Sample s{"SubnAdmGetTableResp MCMemberRecord, RMPP segment 1 of 3", segs.at(0), {}};
    s.expect = {
        {"infiniband.mad.method", num(ib::method::get_table_resp)},
        {"infiniband.rmpp.rmppversion", num(1)},
        {"infiniband.rmpp.rmpptype", num(rmpp_type::data)},
        // Byte 26 is RRespTime(7:3) RMPPFlags(2:0) (libibmad RmppResp and
        // RmppFlags, OpenSM's ib_rmpp_get_resp_time). Wireshark 4.0 splits
        // it into nibbles (masks 0xF0 and 0x0F), so it shows the top 4 bits
        // of RRespTime and the flags with RRespTime's low bit in bit 3.
        {"infiniband.rmpp.rresptime", num((0x11 << 3) >> 4)},
        {"infiniband.rmpp.rmppflags", num((0x11 << 3 | rmpp_flag::active | rmpp_flag::first) & 0x0F)},
        {"infiniband.rmpp.rmppstatus", num(0)},
        {"infiniband.rmpp.segmentnumber", num(1)},
        {"infiniband.rmpp.payloadlength", num(3 * 220 - (600 - 8 * 56))},
        {"infiniband.sa.attributeoffset", num(7)},
        {"infiniband.sa.componentmask", num(mc_member_comp::mgid)},
        {"infiniband.mcmemberrecord.mgid", gid_text(recs[0].mgid)},
        {"infiniband.mcmemberrecord.mlid", num(0xC100)},
        {"infiniband.mcmemberrecord.joinstate", num(recs[0].join_state)},
        {"infiniband.mcmemberrecord.q_key", num(recs[0].q_key)},
    };
    return s;
}

Sample inform_info_sample() {
    InformInfo i;
    i.gid = gid(kLinkLocal, 0x0002C903000AB1C1ULL);
    i.lid_range_begin = 0x0001;
    i.lid_range_end = 0x0102;
    i.is_generic = 1;
    i.subscribe = 1;
    i.type = notice_type::subnet_management;
    i.trap_number_device_id = trap_number::mcast_group_created;
    i.qpn = 0x000048;
    i.resp_time_value = 0x13;
    i.producer_type_vendor_id = producer_type::class_manager;
    Sample s{"SubnAdmSet InformInfo", sa_base(ib::method::set, sa_attr::inform_info, 0x25), {}};
    EXPECT_TRUE(put_record(i, s.mad).has_value());
    s.expect = {
        {"infiniband.informinfo.gid", gid_text(i.gid)},
        {"infiniband.informinfo.lidrangebegin", num(i.lid_range_begin)},
        {"infiniband.informinfo.lidrangeend", num(i.lid_range_end)},
        {"infiniband.informinfo.isgeneric", num(i.is_generic)},
        {"infiniband.informinfo.subscribe", num(i.subscribe)},
        {"infiniband.informinfo.type", num(i.type)},
        {"infiniband.informinfo.trapnumberdeviceid", num(i.trap_number_device_id)},
        {"infiniband.informinfo.qpn", num(i.qpn)},
        {"infiniband.informinfo.resptimevalue", num(i.resp_time_value)},
        {"infiniband.informinfo.producertypevendorid", num(i.producer_type_vendor_id)},
    };
    return s;
}

Sample notice_sample() {
    const Gid mgid = gid(0xFF12601BFFFF0000ULL, 0x0000000100000002ULL);
    Notice n = make_gid_trap(trap_number::mcast_group_created, mgid, 0x0001, gid(kLinkLocal, 0x0002C90300000001ULL));
    n.notice_toggle = true;
    n.notice_count = 0x0123;
    Sample s{"SubnAdmReport Notice (trap 66)", sa_base(ib::method::report, sa_attr::notice, 0x26), {}};
    EXPECT_TRUE(put_record(n, s.mad).has_value());
    s.expect = {
        {"infiniband.notice.isgeneric", num(1)},
        {"infiniband.notice.type", num(n.type)},
        {"infiniband.notice.producertypevendorid", num(n.producer_type_vendor_id)},
        {"infiniband.notice.trapnumberdeviceid", num(66)},
        {"infiniband.notice.issuerlid", num(1)},
        {"infiniband.notice.noticetoggle", num(1)},
        {"infiniband.notice.noticecount", num(0x0123)},
        {"infiniband.trap.gidaddr", gid_text(mgid)},
    };
    return s;
}

Sample class_port_info_sample() {
    ClassPortInfo c;
    c.capability_mask = class_capability::is_get_set_notice_supported | class_capability::is_ud_multicast_supported;
    c.capability_mask2 = sa_capability2::is_send_only_full_member_supported;
    c.resp_time_value = 0x12;
    c.redirect_gid = gid(kLinkLocal, 5);
    c.redirect_tc = 0x11;
    c.redirect_sl = 0x2;
    c.redirect_fl = 0x34567;
    c.redirect_lid = 0x0102;
    c.redirect_p_key = 0xFFFF;
    c.redirect_qp = 0x000001;
    c.redirect_q_key = ib::kGsiQKey;
    c.trap_gid = gid(kLinkLocal, 6);
    c.trap_tc = 0x22;
    c.trap_sl = 0x3;
    c.trap_fl = 0x89ABC;
    c.trap_lid = 0x0203;
    c.trap_p_key = 0x7FFF;
    c.trap_hl = 0x40;
    c.trap_qp = 0xABCDEF;
    c.trap_q_key = 0x01020304;
    Sample s{"SubnAdmGetResp ClassPortInfo", sa_base(ib::method::get_resp, sa_attr::class_port_info, 0x27), {}};
    EXPECT_TRUE(put_record(c, s.mad).has_value());
    s.expect = {
        {"infiniband.classportinfo.baseversion", num(1)},
        {"infiniband.classportinfo.classversion", num(2)},
        {"infiniband.classportinfo.capabilitymask", num(c.capability_mask)},
        {"infiniband.classportinfo.capabilitymask2", num(c.capability_mask2)},
        {"infiniband.classportinfo.resptimevalue", num(c.resp_time_value)},
        {"infiniband.classportinfo.redirectgid", gid_text(c.redirect_gid)},
        {"infiniband.classportinfo.redirecttc", num(c.redirect_tc)},
        {"infiniband.classportinfo.redirectsl", num(c.redirect_sl)},
        {"infiniband.classportinfo.redirectfl", num(c.redirect_fl)},
        {"infiniband.classportinfo.redirectlid", num(c.redirect_lid)},
        {"infiniband.classportinfo.redirectpkey", num(c.redirect_p_key)},
        {"infiniband.classportinfo.redirectqp", num(c.redirect_qp)},
        {"infiniband.classportinfo.redirectqkey", num(c.redirect_q_key)},
        {"infiniband.classportinfo.trapgid", gid_text(c.trap_gid)},
        {"infiniband.classportinfo.traptc", num(c.trap_tc)},
        {"infiniband.classportinfo.trapsl", num(c.trap_sl)},
        {"infiniband.classportinfo.trapfl", num(c.trap_fl)},
        {"infiniband.classportinfo.traplid", num(c.trap_lid)},
        {"infiniband.classportinfo.trappkey", num(c.trap_p_key)},
        {"infiniband.classportinfo.trapqp", num(c.trap_qp)},
        {"infiniband.classportinfo.trapqkey", num(c.trap_q_key)},
    };
    return s;
}

// ---------------------------------------------------------------------------
// Capture and tshark

// A UD SEND Only to QP1 carrying `mad`, LID-routed as SA traffic is.
std::vector<std::uint8_t> sa_packet(const SaMad& mad) {
    std::vector<std::uint8_t> payload(SaMad::size);
    mad.write_to(payload.data());
    ib::PacketSpec spec;
    spec.lrh = {.vl = 0, .lver = 0, .sl = 0, .lnh = ib::Lnh::iba_local, .dlid = 0x0001, .pkt_len = 0, .slid = 0x0012};
    spec.bth.opcode = ib::op::ud_send_only;
    spec.bth.pkey = ib::kPKeyDefault;
    spec.bth.dest_qp = ib::kQp1;
    spec.ext.deth = {ib::kGsiQKey, ib::kQp1};
    spec.payload = payload;
    std::vector<std::uint8_t> wire(ib::packet_size(spec));
    auto n = ib::build_packet(spec, wire);
    EXPECT_TRUE(n.has_value());
    return wire;
}

TEST(SaTshark, WiresharkDecodesEveryFieldAsEncoded) {
    const std::vector<Sample> samples = {mc_member_join_sample(), mc_member_response_sample(),
                                         path_record_sample(),    table_segment_sample(),
                                         inform_info_sample(),    notice_sample(),
                                         class_port_info_sample()};
    char tmpl[] = "/tmp/ipoibd_sa_tshark_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    const std::string pcap = dir + "/sa.pcap";
    {
        auto writer = capture::ErfPcapWriter::open(pcap);
        ASSERT_TRUE(writer.has_value());
        const auto t0 = std::chrono::system_clock::time_point{std::chrono::seconds{1'700'000'000}};
        for (const auto& s : samples) ASSERT_TRUE(writer->write(sa_packet(s.mad), t0)) << s.name;
        ASSERT_TRUE(writer->flush());
    }
    std::vector<std::string> fields;
    for (const auto& s : samples)
        for (const auto& [field, value] : s.expect) fields.push_back(field);
    std::sort(fields.begin(), fields.end());
    fields.erase(std::unique(fields.begin(), fields.end()), fields.end());

    const auto rows = ipoibd::test::tshark_rows(dir, pcap, fields);
    ASSERT_EQ(rows.size(), samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i) {
        SCOPED_TRACE(samples[i].name);
        for (const auto& [field, want] : samples[i].expect) ipoibd::test::expect_field(rows[i], field, want);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace ipoibd::sa
