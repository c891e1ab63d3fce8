// The SA's topology records: the NodeRecord, PortInfoRecord and LinkRecord
// codecs of sa_topology.h, and what SaServer answers for them and for SA
// ClassPortInfo.
//
// Codec offsets were written from the spec's tables (IBA vol. 1 15.2.5.2,
// 15.2.5.3, 15.2.5.13; NodeInfo 14.2.5.3, PortInfo 14.2.5.6) as OpenSM's
// ib_node_record_t, ib_portinfo_record_t and ib_link_record_t lay them out,
// and the component-mask bits from its IB_NR_COMPMASK_*, IB_PIR_COMPMASK_*
// and IB_LR_COMPMASK_*, not from this code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "fabric/sa/sa_server.h"
#include "sa_client/rmpp.h"
#include "sa_client/sa_mad.h"
#include "sa_client/sa_topology.h"

namespace ipoibd::sa {
namespace {

// ---------------------------------------------------------------------------
// Codecs

constexpr std::uint8_t kUnwritten = 0xEE;  // no sample value uses this byte

struct ByteCase {
    const char* field;
    std::size_t offset;
    std::vector<std::uint8_t> bytes;
};

// Encodes into a buffer filled with kUnwritten.
template <class Record>
std::vector<std::uint8_t> encode_dirty(const Record& r) {
    std::vector<std::uint8_t> wire(Record::size, kUnwritten);
    r.write_to(wire.data());
    return wire;
}

void expect_cases(const std::vector<std::uint8_t>& wire, const std::vector<ByteCase>& cases) {
    for (const ByteCase& c : cases) {
        ASSERT_LE(c.offset + c.bytes.size(), wire.size()) << c.field;
        for (std::size_t i = 0; i < c.bytes.size(); ++i)
            EXPECT_EQ(wire[c.offset + i], c.bytes[i]) << c.field << ": byte " << c.offset + i;
    }
}

// Every byte of the record was written (reserved ones included).
void expect_all_written(const std::vector<std::uint8_t>& wire) {
    for (std::size_t i = 0; i < wire.size(); ++i) EXPECT_NE(wire[i], kUnwritten) << "byte " << i << " left unwritten";
}

void expect_zero(const std::vector<std::uint8_t>& wire, std::size_t from, std::size_t to, const char* what) {
    for (std::size_t i = from; i < to; ++i) EXPECT_EQ(wire.at(i), 0) << what << ": byte " << i;
}

// Through a whole SA MAD: request, 256 bytes on the wire, decoded again.
template <class Record>
void expect_mad_round_trip(const Record& r, std::uint64_t mask) {
    auto req = make_sa_request(ib::method::get_table, 0x42, r, mask);
    ASSERT_TRUE(req.has_value());
    std::vector<std::uint8_t> mad(kSaMadSize);
    req->write_to(mad.data());
    auto back = decode_sa_mad(mad);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->header.attribute_id, Record::attribute_id);
    EXPECT_EQ(back->component_mask, mask);
    EXPECT_TRUE(get_record<Record>(*back) == r);
}

TEST(SaTopologyCodec, SizesAttributeIdsAndOffsets) {
    static_assert(NodeRecord::size == 108 && attribute_offset_for(NodeRecord::size) == 14);
    static_assert(PortInfoRecord::size == 68 && attribute_offset_for(PortInfoRecord::size) == 9);
    static_assert(LinkRecord::size == 8 && attribute_offset_for(LinkRecord::size) == 1);
    static_assert(NodeRecord::attribute_id == 0x0011 && PortInfoRecord::attribute_id == 0x0012 &&
                  LinkRecord::attribute_id == 0x0020);
    static_assert(ib::NodeInfo::size == 40 && ib::NodeDescription::size == 64 && ib::PortInfo::size == 64);
    SUCCEED();
}

TEST(SaTopologyCodec, ComponentMaskBitsAreOpenSms) {
    // IB_NR_COMPMASK_*: the record's fields in table order, Reserved1 counted.
    static_assert(node_record_comp::lid == 0x1 && node_record_comp::reserved == 0x2 &&
                  node_record_comp::base_version == 0x4 && node_record_comp::class_version == 0x8 &&
                  node_record_comp::node_type == 0x10 && node_record_comp::num_ports == 0x20 &&
                  node_record_comp::system_image_guid == 0x40 && node_record_comp::node_guid == 0x80 &&
                  node_record_comp::port_guid == 0x100 && node_record_comp::partition_cap == 0x200 &&
                  node_record_comp::device_id == 0x400 && node_record_comp::revision == 0x800 &&
                  node_record_comp::local_port_num == 0x1000 && node_record_comp::vendor_id == 0x2000 &&
                  node_record_comp::node_description == 0x4000);
    // IB_PIR_COMPMASK_LID, PORTNUM, OPTIONS, MKEY, GIDPRE, BASELID, SMLID, CAPMASK.
    static_assert(port_info_record_comp::endport_lid == 0x1 && port_info_record_comp::port_num == 0x2 &&
                  port_info_record_comp::options == 0x4 && port_info_record_comp::m_key == 0x8 &&
                  port_info_record_comp::gid_prefix == 0x10 && port_info_record_comp::lid == 0x20 &&
                  port_info_record_comp::master_sm_lid == 0x40 && port_info_record_comp::capability_mask == 0x80);
    // IB_LR_COMPMASK_FROM_LID, FROM_PORT, TO_PORT, TO_LID.
    static_assert(link_record_comp::from_lid == 0x1 && link_record_comp::from_port == 0x2 &&
                  link_record_comp::to_port == 0x4 && link_record_comp::to_lid == 0x8);
    SUCCEED();
}

// ---- NodeRecord

NodeRecord sample_node_record() {
    NodeRecord r;
    r.lid = 0x1A2B;
    r.node_info.base_version = 1;
    r.node_info.class_version = 1;
    r.node_info.node_type = ib::node_type::switch_node;
    r.node_info.num_ports = 0x24;
    r.node_info.system_image_guid = 0x0102030405060708ULL;
    r.node_info.node_guid = 0x1112131415161718ULL;
    r.node_info.port_guid = 0x2122232425262728ULL;
    r.node_info.partition_cap = 0x3132;
    r.node_info.device_id = 0x4142;
    r.node_info.revision = 0x51525354;
    r.node_info.local_port_num = 0x61;
    r.node_info.vendor_id = 0x717273;
    r.node_description.text = "ibfabricd soft switch";  // 21 bytes
    return r;
}

TEST(SaTopologyCodec, NodeRecordFieldsAtTheirOffsets) {
    const auto wire = encode_dirty(sample_node_record());
    const std::string text = "ibfabricd soft switch";
    std::vector<std::uint8_t> desc;
    for (char ch : text) desc.push_back(static_cast<std::uint8_t>(ch));
    expect_cases(wire, {
                           {"LID", 0, {0x1A, 0x2B}},
                           {"Reserved", 2, {0x00, 0x00}},
                           {"NodeInfo.BaseVersion", 4, {0x01}},
                           {"NodeInfo.ClassVersion", 5, {0x01}},
                           {"NodeInfo.NodeType", 6, {0x02}},
                           {"NodeInfo.NumPorts", 7, {0x24}},
                           {"NodeInfo.SystemImageGUID", 8, {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}},
                           {"NodeInfo.NodeGUID", 16, {0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}},
                           {"NodeInfo.PortGUID", 24, {0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28}},
                           {"NodeInfo.PartitionCap", 32, {0x31, 0x32}},
                           {"NodeInfo.DeviceID", 34, {0x41, 0x42}},
                           {"NodeInfo.Revision", 36, {0x51, 0x52, 0x53, 0x54}},
                           {"NodeInfo.LocalPortNum", 40, {0x61}},
                           {"NodeInfo.VendorID", 41, {0x71, 0x72, 0x73}},
                           {"NodeDescription", 44, desc},
                       });
    expect_zero(wire, 44 + desc.size(), NodeRecord::size, "NodeDescription padding");
    expect_all_written(wire);
}

TEST(SaTopologyCodec, NodeRecordReservedBytesAreZeroAndIgnored) {
    NodeRecord r = sample_node_record();
    auto wire = encode_dirty(r);
    expect_zero(wire, 2, 4, "Reserved");
    wire[2] = 0xFF;
    wire[3] = 0xFF;
    EXPECT_TRUE(NodeRecord::read_from(wire.data()) == r) << "Reserved is not read";
}

TEST(SaTopologyCodec, NodeRecordRoundTrips) {
    std::vector<NodeRecord> samples;
    samples.push_back(sample_node_record());
    samples.push_back(NodeRecord{});  // all defaults, empty description
    NodeRecord ca;
    ca.lid = 0xBFFF;
    ca.node_info.node_type = ib::node_type::channel_adapter;
    ca.node_info.num_ports = 1;
    ca.node_info.node_guid = 0xFFFFFFFFFFFFFFFFULL;
    ca.node_info.port_guid = 0x8000000000000001ULL;
    ca.node_info.local_port_num = 1;
    ca.node_info.vendor_id = 0xFFFFFF;
    ca.node_description.text = std::string(64, 'x');  // the whole field: no NUL on the wire
    samples.push_back(ca);
    for (const NodeRecord& r : samples) {
        ASSERT_TRUE(r.fields_in_range());
        const auto wire = encode_dirty(r);
        expect_all_written(wire);
        EXPECT_TRUE(NodeRecord::read_from(wire.data()) == r) << "LID " << r.lid;
        expect_mad_round_trip(r, node_record_comp::lid | node_record_comp::node_guid);
    }
    const auto full = encode_dirty(ca);
    EXPECT_EQ(full[107], 'x') << "a 64-byte description ends at byte 107";
}

// ---- PortInfoRecord

PortInfoRecord sample_port_info_record() {
    PortInfoRecord r;
    r.endport_lid = 0x3C4D;
    r.port_num = 0x24;
    r.options = 0x5A;
    ib::PortInfo& pi = r.port_info;
    pi.m_key = 0x0102030405060708ULL;
    pi.gid_prefix = 0xFE80000000000000ULL;
    pi.lid = 0x3C4D;
    pi.master_sm_lid = 0x0001;
    pi.capability_mask = 0x02510868;
    pi.local_port_num = 0x24;
    pi.link_speed_supported = 7;
    pi.port_state = ib::port_state::active;
    pi.m_key_protect_bits = 1;
    pi.lmc = 2;
    pi.neighbor_mtu = 4;
    pi.master_sm_sl = 3;
    pi.client_reregister = true;
    pi.subnet_timeout = 0x12;
    pi.resp_time_value = 0x10;
    pi.link_round_trip_latency = 0x123456;
    pi.capability_mask2 = 0x1024;
    pi.link_speed_ext_active = 1;
    pi.link_speed_ext_supported = 3;
    pi.link_speed_ext_enabled = 0x1F;
    return r;
}

TEST(SaTopologyCodec, PortInfoRecordFieldsAtTheirOffsets) {
    const auto wire = encode_dirty(sample_port_info_record());
    expect_cases(wire, {
                           {"EndportLID", 0, {0x3C, 0x4D}},
                           {"PortNum", 2, {0x24}},
                           {"Options", 3, {0x5A}},
                           {"PortInfo.M_Key", 4, {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}},
                           {"PortInfo.GidPrefix", 12, {0xFE, 0x80, 0, 0, 0, 0, 0, 0}},
                           {"PortInfo.LID", 20, {0x3C, 0x4D}},
                           {"PortInfo.MasterSMLID", 22, {0x00, 0x01}},
                           {"PortInfo.CapabilityMask", 24, {0x02, 0x51, 0x08, 0x68}},
                           {"PortInfo.LocalPortNum", 32, {0x24}},
                           {"PortInfo.LinkSpeedSupported|PortState", 36, {0x74}},
                           {"PortInfo.M_KeyProtectBits|LMC", 38, {0x42}},
                           {"PortInfo.NeighborMTU|MasterSMSL", 40, {0x43}},
                           {"PortInfo.ClientReregister|SubnetTimeOut", 55, {0x92}},
                           {"PortInfo.RespTimeValue", 56, {0x10}},
                           {"PortInfo.Reserved|LinkRoundTripLatency", 60, {0x00, 0x12, 0x34, 0x56}},
                           {"PortInfo.CapabilityMask2", 64, {0x10, 0x24}},
                           {"PortInfo.LinkSpeedExtActive|Supported", 66, {0x13}},
                           {"PortInfo.LinkSpeedExtEnabled", 67, {0x1F}},
                       });
    expect_all_written(wire);
}

TEST(SaTopologyCodec, PortInfoRecordRoundTrips) {
    PortInfoRecord sw0;
    sw0.endport_lid = 1;
    sw0.port_num = 0;
    sw0.port_info.lid = 1;
    sw0.port_info.port_state = ib::port_state::active;
    sw0.port_info.p_key_violations = 0x0102;
    sw0.port_info.guid_cap = 8;
    for (const PortInfoRecord& r : {sample_port_info_record(), PortInfoRecord{}, sw0}) {
        ASSERT_TRUE(r.fields_in_range());
        const auto wire = encode_dirty(r);
        expect_all_written(wire);
        EXPECT_TRUE(PortInfoRecord::read_from(wire.data()) == r) << "EndportLID " << r.endport_lid;
        expect_mad_round_trip(r, port_info_record_comp::endport_lid | port_info_record_comp::port_num);
    }
}

// ---- LinkRecord

TEST(SaTopologyCodec, LinkRecordFieldsAtTheirOffsets) {
    const LinkRecord r{0x1234, 0x56, 0x78, 0x9ABC};
    const auto wire = encode_dirty(r);
    expect_cases(wire, {
                           {"FromLID", 0, {0x12, 0x34}},
                           {"FromPort", 2, {0x56}},
                           {"ToPort", 3, {0x78}},
                           {"ToLID", 4, {0x9A, 0xBC}},
                           {"Reserved", 6, {0x00, 0x00}},
                       });
    expect_all_written(wire);
}

TEST(SaTopologyCodec, LinkRecordRoundTripsAndIgnoresReserved) {
    for (const LinkRecord& r : {LinkRecord{0x1234, 0x56, 0x78, 0x9ABC}, LinkRecord{}, LinkRecord{0xFFFF, 0xFF, 0xFF, 0xFFFF}}) {
        auto wire = encode_dirty(r);
        expect_zero(wire, 6, 8, "Reserved");
        EXPECT_TRUE(LinkRecord::read_from(wire.data()) == r);
        wire[6] = 0xA5;
        wire[7] = 0x5A;
        EXPECT_TRUE(LinkRecord::read_from(wire.data()) == r) << "Reserved is not read";
        expect_mad_round_trip(r, link_record_comp::from_lid);
    }
}

}  // namespace
}  // namespace ipoibd::sa

// ---------------------------------------------------------------------------
// The SA server

namespace ipoibd::fabric {
namespace {

using sa::SaMad;
namespace nrc = sa::node_record_comp;
namespace pirc = sa::port_info_record_comp;
namespace lrc = sa::link_record_comp;

struct NullOutput final : SwitchOutput {
    void send(const SocketAddress&, bytes) override {}
};

ib::Gid gid_of(std::uint64_t guid) {
    ib::Gid g{};
    store_be64(g.data(), 0xFE80000000000000ULL);
    store_be64(g.data() + 8, guid);
    return g;
}

constexpr std::uint16_t kSwitchLid = 20;  // above every CA's
constexpr std::uint8_t kSwitchPorts = 4;
constexpr std::uint16_t kMethodAttrNotSupported = 0x000C;
constexpr std::uint16_t kErrNoRecords = 0x0300;
constexpr std::uint16_t kErrTooManyRecords = 0x0400;
constexpr std::uint64_t kMKeyA = 0x1122334455667788ULL;
constexpr std::uint64_t kMKeySwitch = 0x0123456789ABCDEFULL;

ib::PortInfo ca_port_info(std::uint16_t lid, std::uint8_t port_num) {
    ib::PortInfo pi;
    pi.gid_prefix = 0xFE80000000000000ULL;
    pi.lid = lid;
    pi.master_sm_lid = kSwitchLid;
    pi.capability_mask = ib::port_capability::is_notice_supported;
    pi.local_port_num = port_num;
    pi.port_state = ib::port_state::active;
    pi.port_physical_state = ib::port_physical_state::link_up;
    pi.mtu_cap = 5;
    pi.neighbor_mtu = 4;
    return pi;
}

SaPort ca(std::uint16_t lid, std::uint64_t guid, std::uint64_t node_guid, std::string description,
          std::vector<std::uint16_t> pkeys, std::uint8_t switch_port, std::uint8_t port_num = 1) {
    return {.lid = lid,
            .guid = guid,
            .gid = gid_of(guid),
            .mtu = 4,
            .rate = 7,
            .pkeys = std::move(pkeys),
            .switch_port = switch_port,
            .node_guid = node_guid,
            .description = std::move(description),
            .port_info = ca_port_info(lid, port_num)};
}

SaSwitch make_switch(std::uint16_t lid) {
    SaSwitch s;
    s.lid = lid;
    s.node_info.node_type = ib::node_type::switch_node;
    s.node_info.num_ports = kSwitchPorts;
    s.node_info.system_image_guid = 0x0002C90300000100ULL;
    s.node_info.node_guid = 0x0002C90300000100ULL;
    s.node_info.port_guid = 0x0002C90300000100ULL;
    s.node_info.partition_cap = 8;
    s.node_info.device_id = 0xB924;
    s.node_info.revision = 0xA0;
    s.node_info.vendor_id = 0x0002C9;
    s.description = "ibfabricd soft switch";
    for (std::uint8_t p = 0; p <= kSwitchPorts; ++p) {
        ib::PortInfo pi;
        pi.lid = p == 0 ? lid : std::uint16_t{0};
        pi.local_port_num = p;
        pi.port_state = ib::port_state::active;
        pi.link_width_active = static_cast<std::uint8_t>(p + 1);  // tells the ports apart
        if (p == 0) pi.m_key = kMKeySwitch;
        s.ports.push_back(pi);
    }
    return s;
}

// The fabric: a switch at LID 20 and, in no particular order,
//   A  LID 5  default partition  switch port 1
//   B  LID 6  default partition  switch port 2  (node 0xB0, port 1)
//   C  LID 7  partition 0x8001   switch port 3  (shares nothing with A)
//   D  LID 8  default partition  switch port 4  (node 0xB0, port 2)
//   E  LID 9  default partition  no switch port known
struct SaTopology : ::testing::Test {
    NullOutput out;
    Switch sw{Switch::Config{}, out};
    std::vector<SaPort> ports = {
        ca(6, 0xB, 0xB0, "host-b mlx4_0", {0xFFFF}, 2),
        ca(8, 0xD, 0xB0, "host-b mlx4_0", {0xFFFF}, 4, 2),
        ca(5, 0xA, 0xA0, "host-a mlx4_0", {0xFFFF}, 1),
        ca(7, 0xC, 0xC0, "host-c mlx4_0", {0x8001}, 3),
        ca(9, 0xE, 0xE0, "host-e", {0xFFFF}, 0),
    };
    std::optional<SaSwitch> view = make_switch(kSwitchLid);
    SaServer sa{SaServerConfig{}, sw, [this] { return ports; }};
    std::uint64_t next_tid = 0x100;

    SaTopology() {
        ports[2].port_info.m_key = kMKeyA;
        sa.refresh_forwarding();  // read the ports again
        sa.set_switch_view([this] { return view; });
    }

    const SaPort& port(std::uint16_t lid) const {
        return *std::find_if(ports.begin(), ports.end(), [&](const SaPort& p) { return p.lid == lid; });
    }

    template <class Record>
    SaMad request(std::uint8_t method, const Record& r, std::uint64_t mask, std::uint64_t sm_key = 0) {
        auto req = sa::make_sa_request(method, next_tid++, r, mask);
        EXPECT_TRUE(req.has_value());
        req->sm_key = sm_key;
        return *req;
    }

    // A request answered by one MAD.
    SaMad one(SaServer& server, const SaMad& req, std::uint16_t requester) {
        const auto resp = server.handle(req, requester);
        EXPECT_EQ(resp.size(), 1u);
        if (resp.empty()) return {};
        EXPECT_EQ(resp[0].header.transaction_id, req.header.transaction_id);
        return resp[0];
    }
    SaMad one(const SaMad& req, std::uint16_t requester) { return one(sa, req, requester); }

    // A GetTable, the RMPP transfer driven ACK by ACK; the whole is checked
    // again with sa::reassemble.
    template <class Record>
    void table(SaServer& server, const SaMad& req, std::uint16_t requester, std::vector<Record>& records) {
        records.clear();
        std::vector<SaMad> received;
        std::vector<SaMad> segments = server.handle(req, requester);
        ASSERT_FALSE(segments.empty());
        sa::RmppReassembler rx;
        for (int round = 0; !rx.complete() && round < 100; ++round) {
            std::vector<SaMad> next;
            for (const SaMad& s : segments) {
                EXPECT_EQ(s.header.status, 0);
                EXPECT_EQ(s.header.method, ib::method::get_table_resp);
                EXPECT_EQ(s.header.attribute_id, Record::attribute_id);
                EXPECT_EQ(s.header.transaction_id, req.header.transaction_id);
                EXPECT_TRUE(s.rmpp.active());
                received.push_back(s);
                auto step = rx.add(s);
                ASSERT_TRUE(step.has_value()) << sa::to_string(step.error());
                if (step->ack) {
                    auto more = server.handle(*step->ack, requester);
                    next.insert(next.end(), more.begin(), more.end());
                }
            }
            segments = std::move(next);
        }
        ASSERT_TRUE(rx.complete());
        auto whole = sa::reassemble(received);
        ASSERT_TRUE(whole.has_value()) << sa::to_string(whole.error());
        if (!whole->payload.empty()) {
            EXPECT_EQ(whole->header.attribute_offset, sa::attribute_offset_for(Record::size));
        }
        auto unpacked = sa::unpack_records<Record>(whole->payload, whole->header.attribute_offset);
        ASSERT_TRUE(unpacked.has_value()) << sa::to_string(unpacked.error());
        records = std::move(*unpacked);
    }
    template <class Record>
    void table(const SaMad& req, std::uint16_t requester, std::vector<Record>& records) {
        table(sa, req, requester, records);
    }
};

std::vector<std::uint16_t> lids_of(const std::vector<sa::NodeRecord>& rs) {
    std::vector<std::uint16_t> out;
    for (const auto& r : rs) out.push_back(r.lid);
    return out;
}

using PortKey = std::pair<std::uint16_t, std::uint8_t>;
std::vector<PortKey> keys_of(const std::vector<sa::PortInfoRecord>& rs) {
    std::vector<PortKey> out;
    for (const auto& r : rs) out.emplace_back(r.endport_lid, r.port_num);
    return out;
}

using LinkTuple = std::tuple<std::uint16_t, std::uint8_t, std::uint8_t, std::uint16_t>;  // from LID/port, to port/LID
std::vector<LinkTuple> links_of(const std::vector<sa::LinkRecord>& rs) {
    std::vector<LinkTuple> out;
    for (const auto& r : rs) out.emplace_back(r.from_lid, r.from_port, r.to_port, r.to_lid);
    return out;
}

// ---------------------------------------------------------------------------
// ClassPortInfo

TEST_F(SaTopology, ClassPortInfoGet) {
    const SaMad r = one(request(ib::method::get, sa::ClassPortInfo{}, 0), 5);
    EXPECT_EQ(r.header.status, 0);
    EXPECT_EQ(r.header.method, ib::method::get_resp);
    EXPECT_EQ(r.header.attribute_id, sa::sa_attr::class_port_info);
    const auto cpi = sa::get_record<sa::ClassPortInfo>(r);
    EXPECT_EQ(cpi.base_version, 1);
    EXPECT_EQ(cpi.class_version, 2);
    EXPECT_NE(cpi.capability_mask & (1u << 1), 0u) << "IsGetSetNoticeSupported: InformInfo and Reports";
    EXPECT_NE(cpi.capability_mask & (1u << 9), 0u) << "IsUDMulticastSupported";
    EXPECT_NE(cpi.capability_mask & (1u << 13), 0u) << "IsPortInfoCapabilityMaskMatchSupported, as OpenSM";
    EXPECT_EQ(cpi.resp_time_value, 18);
    EXPECT_EQ(cpi.redirect_qp, 1u);
    EXPECT_EQ(cpi.redirect_q_key, 0x80010000u);
    // Also from a port in another partition: ClassPortInfo is everyone's.
    EXPECT_EQ(one(request(ib::method::get, sa::ClassPortInfo{}, 0), 7).header.status, 0);
}

TEST_F(SaTopology, ClassPortInfoIsGetOnly) {
    const SaMad set = one(request(ib::method::set, sa::ClassPortInfo{}, 0), 5);
    EXPECT_EQ(set.header.status, kMethodAttrNotSupported);
    EXPECT_EQ(set.header.method, ib::method::get_resp) << "a Set is answered with GetResp";
    EXPECT_EQ(one(request(ib::method::get_table, sa::ClassPortInfo{}, 0), 5).header.status, kMethodAttrNotSupported);
}

// ---------------------------------------------------------------------------
// NodeRecord

TEST_F(SaTopology, NodeRecordTableListsTheSwitchAndTheCasByLid) {
    std::vector<sa::NodeRecord> nodes;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::NodeRecord{}, 0), 5, nodes));
    // C shares no partition with A; the switch's LID is the highest.
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{5, 6, 8, 9, kSwitchLid}));
    ASSERT_EQ(nodes.size(), 5u);

    const sa::NodeRecord& s = nodes.back();
    EXPECT_EQ(s.lid, kSwitchLid);
    EXPECT_EQ(s.node_info.node_type, ib::node_type::switch_node);
    EXPECT_EQ(s.node_info, view->node_info) << "the switch's NodeInfo as its view gives it";
    EXPECT_EQ(s.node_description.text, "ibfabricd soft switch");

    for (std::size_t i = 0; i + 1 < nodes.size(); ++i) {
        const sa::NodeRecord& r = nodes[i];
        const SaPort& p = port(r.lid);
        SCOPED_TRACE("LID " + std::to_string(r.lid));
        EXPECT_EQ(r.node_info.base_version, 1);
        EXPECT_EQ(r.node_info.class_version, 1);
        EXPECT_EQ(r.node_info.node_type, ib::node_type::channel_adapter);
        EXPECT_EQ(r.node_info.num_ports, 1);
        EXPECT_EQ(r.node_info.node_guid, p.node_guid);
        EXPECT_EQ(r.node_info.port_guid, p.guid);
        EXPECT_EQ(r.node_info.local_port_num, p.port_info.local_port_num);
        EXPECT_EQ(r.node_description.text, p.description);
    }
    EXPECT_EQ(nodes[2].node_info.local_port_num, 2) << "D is port 2 of its node";
}

TEST_F(SaTopology, NodeRecordTableSortedWhenTheSwitchLidIsLowest) {
    view = make_switch(1);
    std::vector<sa::NodeRecord> nodes;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::NodeRecord{}, 0), 5, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{1, 5, 6, 8, 9}));
}

TEST_F(SaTopology, NodeRecordGetByLid) {
    sa::NodeRecord q;
    q.lid = 6;
    const SaMad r = one(request(ib::method::get, q, nrc::lid), 5);
    ASSERT_EQ(r.header.status, 0);
    EXPECT_EQ(r.header.method, ib::method::get_resp);
    EXPECT_EQ(r.attribute_offset, sa::attribute_offset_for(sa::NodeRecord::size));
    const auto n = sa::get_record<sa::NodeRecord>(r);
    EXPECT_EQ(n.lid, 6);
    EXPECT_EQ(n.node_info.port_guid, 0xBu);
    EXPECT_EQ(n.node_description.text, "host-b mlx4_0");

    q.lid = kSwitchLid;
    const SaMad s = one(request(ib::method::get, q, nrc::lid), 5);
    ASSERT_EQ(s.header.status, 0);
    EXPECT_EQ(sa::get_record<sa::NodeRecord>(s).node_info.node_type, ib::node_type::switch_node);

    // A GetTable by LID: exactly one record too.
    q.lid = 9;
    std::vector<sa::NodeRecord> nodes;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, q, nrc::lid), 5, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{9}));
}

TEST_F(SaTopology, NodeRecordGetByNodeGuid) {
    sa::NodeRecord q;
    q.node_info.node_guid = 0xA0;
    const SaMad r = one(request(ib::method::get, q, nrc::node_guid), 6);
    ASSERT_EQ(r.header.status, 0);
    const auto n = sa::get_record<sa::NodeRecord>(r);
    EXPECT_EQ(n.lid, 5);
    EXPECT_EQ(n.node_info.node_guid, 0xA0u);
    EXPECT_EQ(n.node_info.port_guid, 0xAu);

    q.node_info.node_guid = view->node_info.node_guid;
    const SaMad s = one(request(ib::method::get, q, nrc::node_guid), 6);
    ASSERT_EQ(s.header.status, 0);
    EXPECT_EQ(sa::get_record<sa::NodeRecord>(s).lid, kSwitchLid);

    // Node 0xB0 has two ports (B and D): a record each; a Get of it is too many.
    q.node_info.node_guid = 0xB0;
    EXPECT_EQ(one(request(ib::method::get, q, nrc::node_guid), 6).header.status, kErrTooManyRecords);
    std::vector<sa::NodeRecord> nodes;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, q, nrc::node_guid), 6, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{6, 8}));
    // ... unless the port is named too.
    q.node_info.local_port_num = 2;
    const SaMad d = one(request(ib::method::get, q, nrc::node_guid | nrc::local_port_num), 6);
    ASSERT_EQ(d.header.status, 0);
    EXPECT_EQ(sa::get_record<sa::NodeRecord>(d).lid, 8);
}

TEST_F(SaTopology, NodeRecordGetMatchingNothing) {
    sa::NodeRecord q;
    q.lid = 99;
    const SaMad r = one(request(ib::method::get, q, nrc::lid), 5);
    EXPECT_EQ(r.header.status, kErrNoRecords);
    EXPECT_EQ(r.header.method, ib::method::get_resp);
    sa::NodeRecord g;
    g.node_info.node_guid = 0xDEAD;
    EXPECT_EQ(one(request(ib::method::get, g, nrc::node_guid), 5).header.status, kErrNoRecords);
    // A GetTable matching nothing is an empty table.
    std::vector<sa::NodeRecord> nodes{sa::NodeRecord{}};
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, q, nrc::lid), 5, nodes));
    EXPECT_TRUE(nodes.empty());
}

TEST_F(SaTopology, NodeRecordOfAPortInAnotherPartitionIsNotListed) {
    sa::NodeRecord q;
    q.lid = 7;  // C, partition 0x8001 only
    EXPECT_EQ(one(request(ib::method::get, q, nrc::lid), 5).header.status, kErrNoRecords) << "A does not see C";
    const SaMad own = one(request(ib::method::get, q, nrc::lid), 7);
    ASSERT_EQ(own.header.status, 0) << "C sees itself";
    EXPECT_EQ(sa::get_record<sa::NodeRecord>(own).node_description.text, "host-c mlx4_0");
    std::vector<sa::NodeRecord> nodes;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::NodeRecord{}, 0), 7, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{7, kSwitchLid})) << "C sees itself and the switch";
}

TEST_F(SaTopology, NodeRecordsOfLimitedMembersOfOnePartition) {
    // Two limited members of a partition share nothing (IBA 10.9.3); a
    // limited and a full member do.
    ports[3].pkeys = {0x0001};                                       // C: limited member of partition 1
    ports.push_back(ca(10, 0xF1, 0xF1, "full-1", {0x8001}, 0));      // full member
    ports.push_back(ca(11, 0xF2, 0xF2, "limited-1", {0x0001}, 0));   // limited member
    sa.refresh_forwarding();
    std::vector<sa::NodeRecord> nodes;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::NodeRecord{}, 0), 7, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{7, 10, kSwitchLid}));
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::NodeRecord{}, 0), 10, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{7, 10, 11, kSwitchLid}));
}

TEST_F(SaTopology, NodeRecordWithoutASwitchViewListsOnlyCaPorts) {
    SaServer bare{SaServerConfig{}, sw, [this] { return ports; }};
    std::vector<sa::NodeRecord> nodes;
    ASSERT_NO_FATAL_FAILURE(table(bare, request(ib::method::get_table, sa::NodeRecord{}, 0), 5, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{5, 6, 8, 9}));
    EXPECT_TRUE(std::all_of(nodes.begin(), nodes.end(), [](const sa::NodeRecord& r) {
        return r.node_info.node_type == ib::node_type::channel_adapter;
    }));
    // A view with no switch (or a switch without a LID yet) is the same.
    view.reset();
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::NodeRecord{}, 0), 5, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{5, 6, 8, 9}));
    view = make_switch(0);
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::NodeRecord{}, 0), 5, nodes));
    EXPECT_EQ(lids_of(nodes), (std::vector<std::uint16_t>{5, 6, 8, 9}));
}

// ---------------------------------------------------------------------------
// PortInfoRecord

TEST_F(SaTopology, PortInfoRecordTableListsSwitchAndCaPortsInOrder) {
    std::vector<sa::PortInfoRecord> recs;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::PortInfoRecord{}, 0), 5, recs));
    const std::vector<PortKey> want = {{5, 1}, {6, 1}, {8, 2}, {9, 1}, {kSwitchLid, 0}, {kSwitchLid, 1},
                                       {kSwitchLid, 2}, {kSwitchLid, 3}, {kSwitchLid, 4}};
    EXPECT_EQ(keys_of(recs), want) << "sorted by (EndportLID, PortNum); C is in another partition";
    ASSERT_EQ(recs.size(), want.size());
    for (const auto& r : recs) {
        SCOPED_TRACE("EndportLID " + std::to_string(r.endport_lid) + " port " + std::to_string(r.port_num));
        ib::PortInfo expected = r.endport_lid == kSwitchLid ? view->ports.at(r.port_num) : port(r.endport_lid).port_info;
        expected.m_key = 0;  // untrusted requester
        EXPECT_EQ(r.port_info, expected);
        EXPECT_EQ(r.options, 0);
    }
}

TEST_F(SaTopology, PortInfoRecordGetByEndportLidAndPortNum) {
    sa::PortInfoRecord q;
    q.endport_lid = kSwitchLid;
    q.port_num = 3;
    const SaMad r = one(request(ib::method::get, q, pirc::endport_lid | pirc::port_num), 5);
    ASSERT_EQ(r.header.status, 0);
    EXPECT_EQ(r.header.method, ib::method::get_resp);
    EXPECT_EQ(r.attribute_offset, sa::attribute_offset_for(sa::PortInfoRecord::size));
    const auto p = sa::get_record<sa::PortInfoRecord>(r);
    EXPECT_EQ(p.endport_lid, kSwitchLid);
    EXPECT_EQ(p.port_num, 3);
    EXPECT_EQ(p.port_info, view->ports[3]);

    q.endport_lid = 8;
    q.port_num = 2;
    const SaMad d = one(request(ib::method::get, q, pirc::endport_lid | pirc::port_num), 5);
    ASSERT_EQ(d.header.status, 0);
    EXPECT_EQ(sa::get_record<sa::PortInfoRecord>(d).port_info.lid, 8);

    q.port_num = 1;  // D is port 2
    EXPECT_EQ(one(request(ib::method::get, q, pirc::endport_lid | pirc::port_num), 5).header.status, kErrNoRecords);
    q.endport_lid = kSwitchLid;
    EXPECT_EQ(one(request(ib::method::get, q, pirc::endport_lid), 5).header.status, kErrTooManyRecords)
        << "the switch has five ports";
    q.endport_lid = 7;  // C
    EXPECT_EQ(one(request(ib::method::get, q, pirc::endport_lid), 5).header.status, kErrNoRecords)
        << "C is in another partition";

    std::vector<sa::PortInfoRecord> recs;
    q.endport_lid = kSwitchLid;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, q, pirc::endport_lid), 5, recs));
    EXPECT_EQ(recs.size(), std::size_t{kSwitchPorts} + 1);
}

TEST_F(SaTopology, PortInfoRecordMKeyOnlyForTheSmKey) {
    sa::PortInfoRecord q;
    q.endport_lid = 5;
    q.port_num = 1;
    const std::uint64_t mask = pirc::endport_lid | pirc::port_num;
    EXPECT_EQ(sa::get_record<sa::PortInfoRecord>(one(request(ib::method::get, q, mask, 0), 5)).port_info.m_key, 0u)
        << "untrusted: SM_Key 0";
    EXPECT_EQ(sa::get_record<sa::PortInfoRecord>(one(request(ib::method::get, q, mask, 1), 5)).port_info.m_key, kMKeyA)
        << "the SA's SM_Key (default 1)";
    q.endport_lid = kSwitchLid;
    q.port_num = 0;
    EXPECT_EQ(sa::get_record<sa::PortInfoRecord>(one(request(ib::method::get, q, mask, 0), 5)).port_info.m_key, 0u);
    EXPECT_EQ(sa::get_record<sa::PortInfoRecord>(one(request(ib::method::get, q, mask, 1), 5)).port_info.m_key,
              kMKeySwitch);

    std::vector<sa::PortInfoRecord> recs;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::PortInfoRecord{}, 0, 1), 5, recs));
    for (const auto& r : recs) {
        const ib::PortInfo& real = r.endport_lid == kSwitchLid ? view->ports.at(r.port_num) : port(r.endport_lid).port_info;
        EXPECT_EQ(r.port_info, real) << "trusted: everything, M_Key included (LID " << r.endport_lid << ")";
    }
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::PortInfoRecord{}, 0, 0), 5, recs));
    EXPECT_TRUE(std::all_of(recs.begin(), recs.end(), [](const sa::PortInfoRecord& r) { return r.port_info.m_key == 0; }));

    // Another non-zero key: no answer at all (C15-0.1.5).
    EXPECT_TRUE(sa.handle(request(ib::method::get, q, mask, 7), 5).empty());
}

TEST_F(SaTopology, PortInfoRecordMKeyWithAConfiguredSmKey) {
    SaServerConfig config;
    config.sm_key = 0x5A5A5A5A5A5A5A5AULL;
    SaServer keyed{config, sw, [this] { return ports; }};
    sa::PortInfoRecord q;
    q.endport_lid = 5;
    q.port_num = 1;
    const std::uint64_t mask = pirc::endport_lid | pirc::port_num;
    EXPECT_EQ(sa::get_record<sa::PortInfoRecord>(one(keyed, request(ib::method::get, q, mask, config.sm_key), 5))
                  .port_info.m_key,
              kMKeyA);
    EXPECT_EQ(sa::get_record<sa::PortInfoRecord>(one(keyed, request(ib::method::get, q, mask, 0), 5)).port_info.m_key,
              0u);
    EXPECT_TRUE(keyed.handle(request(ib::method::get, q, mask, 1), 5).empty()) << "1 is not this SA's key";
}

TEST_F(SaTopology, PortInfoRecordWithoutASwitchViewListsOnlyCaPorts) {
    SaServer bare{SaServerConfig{}, sw, [this] { return ports; }};
    std::vector<sa::PortInfoRecord> recs;
    ASSERT_NO_FATAL_FAILURE(table(bare, request(ib::method::get_table, sa::PortInfoRecord{}, 0), 5, recs));
    EXPECT_EQ(keys_of(recs), (std::vector<PortKey>{{5, 1}, {6, 1}, {8, 2}, {9, 1}}));
}

// ---------------------------------------------------------------------------
// LinkRecord

struct SaTopologyLinks : SaTopology {
    SaTopologyLinks() {
        // C in the default partition too, so that every port is A's to see
        // (a port A shares no partition with: LinksOfAnotherPartitionAreNotShown).
        ports[3].pkeys = {0x8001, 0xFFFF};
        sa.refresh_forwarding();
    }
};

TEST_F(SaTopologyLinks, TableHasBothDirectionsOfEveryCaLink) {
    std::vector<sa::LinkRecord> links;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::LinkRecord{}, 0), 5, links));
    // {FromLID, FromPort, ToPort, ToLID}; E has no switch port, so no link.
    const std::vector<LinkTuple> want = {
        {5, 1, 1, kSwitchLid},  {6, 1, 2, kSwitchLid},  {7, 1, 3, kSwitchLid},  {8, 2, 4, kSwitchLid},
        {kSwitchLid, 1, 1, 5},  {kSwitchLid, 2, 1, 6},  {kSwitchLid, 3, 1, 7},  {kSwitchLid, 4, 2, 8},
    };
    EXPECT_EQ(links_of(links), want);
}

TEST_F(SaTopology, LinksOfAnotherPartitionAreNotShown) {
    // C (LID 7) is only in 0x8001: A sees no link of it, C sees its own.
    std::vector<sa::LinkRecord> links;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::LinkRecord{}, 0), 5, links));
    for (const auto& l : links_of(links)) EXPECT_TRUE(std::get<0>(l) != 7 && std::get<3>(l) != 7);
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::LinkRecord{}, 0), 7, links));
    EXPECT_FALSE(links.empty());
}

TEST_F(SaTopologyLinks, FilteredByFromLid) {
    sa::LinkRecord q;
    q.from_lid = kSwitchLid;
    std::vector<sa::LinkRecord> links;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, q, lrc::from_lid), 5, links));
    EXPECT_EQ(links_of(links), (std::vector<LinkTuple>{{kSwitchLid, 1, 1, 5},
                                                       {kSwitchLid, 2, 1, 6},
                                                       {kSwitchLid, 3, 1, 7},
                                                       {kSwitchLid, 4, 2, 8}}));
    q.from_lid = 8;
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, q, lrc::from_lid), 5, links));
    EXPECT_EQ(links_of(links), (std::vector<LinkTuple>{{8, 2, 4, kSwitchLid}}));
    q.from_lid = 9;  // E: no link
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, q, lrc::from_lid), 5, links));
    EXPECT_TRUE(links.empty());

    // Get: one record, or a status.
    q.from_lid = 6;
    const SaMad r = one(request(ib::method::get, q, lrc::from_lid), 5);
    ASSERT_EQ(r.header.status, 0);
    EXPECT_EQ(r.header.method, ib::method::get_resp);
    EXPECT_EQ(r.attribute_offset, sa::attribute_offset_for(sa::LinkRecord::size));
    EXPECT_EQ(sa::get_record<sa::LinkRecord>(r), (sa::LinkRecord{6, 1, 2, kSwitchLid}));
    q.from_lid = kSwitchLid;
    q.from_port = 4;
    const SaMad p4 = one(request(ib::method::get, q, lrc::from_lid | lrc::from_port), 5);
    ASSERT_EQ(p4.header.status, 0);
    EXPECT_EQ(sa::get_record<sa::LinkRecord>(p4), (sa::LinkRecord{kSwitchLid, 4, 2, 8}));
    EXPECT_EQ(one(request(ib::method::get, q, lrc::from_lid), 5).header.status, kErrTooManyRecords);
    q.from_lid = 9;
    EXPECT_EQ(one(request(ib::method::get, q, lrc::from_lid), 5).header.status, kErrNoRecords);
}

TEST_F(SaTopologyLinks, WithoutASwitchViewTheTableIsEmpty) {
    SaServer bare{SaServerConfig{}, sw, [this] { return ports; }};
    const auto resp = bare.handle(request(ib::method::get_table, sa::LinkRecord{}, 0), 5);
    ASSERT_EQ(resp.size(), 1u) << "one segment";
    EXPECT_EQ(resp[0].header.status, 0) << "no records is a valid, empty GetTableResp";
    EXPECT_EQ(resp[0].header.method, ib::method::get_table_resp);
    EXPECT_TRUE(resp[0].rmpp.active());
    EXPECT_TRUE(resp[0].rmpp.first());
    EXPECT_TRUE(resp[0].rmpp.last());
    EXPECT_EQ(resp[0].rmpp.payload_length(), 20u) << "the SA class header and no records";
    const sa::SaData none{};
    EXPECT_EQ(resp[0].data, none);
    auto whole = sa::reassemble(resp);
    ASSERT_TRUE(whole.has_value());
    EXPECT_TRUE(whole->payload.empty());
    std::vector<sa::LinkRecord> links;
    ASSERT_NO_FATAL_FAILURE(table(bare, request(ib::method::get_table, sa::LinkRecord{}, 0), 5, links));
    EXPECT_TRUE(links.empty());
    // A Get finds nothing.
    EXPECT_EQ(one(bare, request(ib::method::get, sa::LinkRecord{}, 0), 5).header.status, kErrNoRecords);
    // A view without a switch, or with a switch without a LID yet, too.
    view.reset();
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::LinkRecord{}, 0), 5, links));
    EXPECT_TRUE(links.empty());
    view = make_switch(0);
    ASSERT_NO_FATAL_FAILURE(table(request(ib::method::get_table, sa::LinkRecord{}, 0), 5, links));
    EXPECT_TRUE(links.empty());
}

// ---------------------------------------------------------------------------
// Methods other than Get and GetTable

TEST_F(SaTopology, OtherMethodsAreNotSupported) {
    struct Case {
        const char* name;
        std::uint8_t method;
        std::uint8_t response_method;
    };
    const Case methods[] = {
        {"Set", ib::method::set, ib::method::get_resp},
        {"Delete", ib::method::del, ib::method::del_resp},
        {"GetMulti", ib::method::get_multi, ib::method::get_multi_resp},
        {"GetTraceTable", ib::method::get_trace_table,
         static_cast<std::uint8_t>(ib::method::get_trace_table | ib::method::response_bit)},
    };
    for (const Case& c : methods) {
        SCOPED_TRACE(c.name);
        const SaMad n = one(request(c.method, sa::NodeRecord{}, 0), 5);
        EXPECT_EQ(n.header.status, kMethodAttrNotSupported) << "NodeRecord";
        EXPECT_EQ(n.header.method, c.response_method);
        const SaMad p = one(request(c.method, sa::PortInfoRecord{}, 0), 5);
        EXPECT_EQ(p.header.status, kMethodAttrNotSupported) << "PortInfoRecord";
        EXPECT_EQ(p.header.method, c.response_method);
        const SaMad l = one(request(c.method, sa::LinkRecord{}, 0), 5);
        EXPECT_EQ(l.header.status, kMethodAttrNotSupported) << "LinkRecord";
        EXPECT_EQ(l.header.method, c.response_method);
    }
}

}  // namespace
}  // namespace ipoibd::fabric
