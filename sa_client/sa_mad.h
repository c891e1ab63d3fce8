// Subnet Administration MADs (IBA vol. 1 15.2.1): the 256-byte MAD of the
// SubnAdm class (0x03, class version 2), its RMPP header, its status codes
// and its ClassPortInfo.
//
//   0-23    MAD common header (ib::MadHeader)
//   24      RMPPVersion
//   25      RMPPType
//   26      RRespTime(7:3) RMPPFlags(2:0)  Last(2) First(1) Active(0)
//   27      RMPPStatus
//   28-31   Data1: SegmentNumber (DATA, ACK)
//   32-35   Data2: PayloadLength (DATA), NewWindowLast (ACK)
//   36-43   SM_Key
//   44-45   AttributeOffset, in 8-byte words: the stride of the records in
//           a GetTableResp, 0 when it holds none
//   46-47   Reserved
//   48-55   ComponentMask: bit i says field i of the record (in the spec's
//           table order, reserved fields counted) takes part in the query
//   56-255  SA data (200 bytes): one record, or a segment of a table
//
// Offsets were taken as facts from libibmad's fields.c (SaSMkey,
// SaAttrOffs, SaCompMask, Rmpp*) and OpenSM's ib_sa_mad_t; docs/sa.md lists
// the decisions. Records are in sa_records.h and sa_notice.h, RMPP
// segmentation and reassembly in rmpp.h.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/byte_io.h"
#include "common/expected.h"
#include "transport/wire/headers.h"
#include "transport/wire/mad.h"

namespace ipoibd::sa {

using ib::Gid;

inline constexpr std::size_t kSaMadSize = ib::kMadSize;
inline constexpr std::size_t kSaHeaderSize = 56;  // MAD + RMPP + SA header: where the data starts
inline constexpr std::size_t kSaDataSize = kSaMadSize - kSaHeaderSize;  // 200
inline constexpr std::size_t kSaClassHeaderSize = 20;  // SM_Key through ComponentMask
using SaData = std::array<std::uint8_t, kSaDataSize>;

namespace sa_offset {
inline constexpr std::size_t rmpp = 24;
inline constexpr std::size_t sm_key = 36;
inline constexpr std::size_t attribute_offset = 44;
inline constexpr std::size_t component_mask = 48;
inline constexpr std::size_t data = 56;
}  // namespace sa_offset

// SubnAdm attribute IDs (IBA vol. 1 15.2.5).
namespace sa_attr {
inline constexpr std::uint16_t class_port_info = 0x0001;
inline constexpr std::uint16_t notice = 0x0002;
inline constexpr std::uint16_t inform_info = 0x0003;
inline constexpr std::uint16_t node_record = 0x0011;
inline constexpr std::uint16_t port_info_record = 0x0012;
inline constexpr std::uint16_t sl_to_vl_mapping_table_record = 0x0013;
inline constexpr std::uint16_t switch_info_record = 0x0014;
inline constexpr std::uint16_t linear_forwarding_table_record = 0x0015;
inline constexpr std::uint16_t random_forwarding_table_record = 0x0016;
inline constexpr std::uint16_t multicast_forwarding_table_record = 0x0017;
inline constexpr std::uint16_t sm_info_record = 0x0018;
inline constexpr std::uint16_t link_record = 0x0020;
inline constexpr std::uint16_t guid_info_record = 0x0030;
inline constexpr std::uint16_t service_record = 0x0031;
inline constexpr std::uint16_t p_key_table_record = 0x0033;
inline constexpr std::uint16_t path_record = 0x0035;
inline constexpr std::uint16_t vl_arbitration_table_record = 0x0036;
inline constexpr std::uint16_t mc_member_record = 0x0038;
inline constexpr std::uint16_t trace_record = 0x0039;
inline constexpr std::uint16_t multi_path_record = 0x003A;
inline constexpr std::uint16_t service_association_record = 0x003B;
inline constexpr std::uint16_t inform_info_record = 0x00F3;
}  // namespace sa_attr
// "MCMemberRecord", "PathRecord", ...; "unknown attribute" for others.
const char* sa_attribute_name(std::uint16_t attribute_id);

// SA-specific MAD status (IBA vol. 1 15.2.1.1): a code in the
// class-specific bits 15:8 of Status, next to the common bits of
// ib::mad_status. ERR_STATUS_PRIO_SUGGESTED (8) is the QoS annex's.
namespace sa_status {
inline constexpr unsigned shift = 8;
inline constexpr std::uint16_t mask = 0xFF00;
inline constexpr std::uint16_t err_no_resources = 1 << shift;
inline constexpr std::uint16_t err_req_invalid = 2 << shift;
inline constexpr std::uint16_t err_no_records = 3 << shift;
inline constexpr std::uint16_t err_too_many_records = 4 << shift;
inline constexpr std::uint16_t err_req_invalid_gid = 5 << shift;
inline constexpr std::uint16_t err_req_insufficient_components = 6 << shift;
inline constexpr std::uint16_t err_req_denied = 7 << shift;
inline constexpr std::uint16_t err_status_prio_suggested = 8 << shift;
}  // namespace sa_status

// The words infiniband-diags' saquery prints for each part of a status:
//   sa_error_name(3)           "SA_ERR_NO_RECORDS" (code of bits 15:8;
//                              "SA_NO_ERROR" for 0, "SA_ERR_UNKNOWN" above 8)
//   mad_invalid_field_name(3)  "MAD Method/Attribute combination is not
//                              supported" (code of bits 4:2)
const char* sa_error_name(std::uint8_t code);
const char* mad_invalid_field_name(std::uint8_t code);
// The whole status, its parts joined by "; ": "0x0300: SA_ERR_NO_RECORDS",
// "0x000c: MAD Method/Attribute combination is not supported",
// "0x0001: BUSY", "0x0000: success".
std::string describe_sa_status(std::uint16_t status);

// ---------------------------------------------------------------------------
// RMPP header (IBA vol. 1 13.6.2), bytes 24-35 of the MAD.
inline constexpr std::uint8_t kRmppVersion = 1;
namespace rmpp_type {
inline constexpr std::uint8_t none = 0;  // RMPP not in use (RMPPVersion 0 too)
inline constexpr std::uint8_t data = 1;
inline constexpr std::uint8_t ack = 2;
inline constexpr std::uint8_t stop = 3;
inline constexpr std::uint8_t abort = 4;
}  // namespace rmpp_type
namespace rmpp_flag {
inline constexpr std::uint8_t active = 0x1;
inline constexpr std::uint8_t first = 0x2;
inline constexpr std::uint8_t last = 0x4;
}  // namespace rmpp_flag
inline constexpr std::uint8_t kRmppNoRespTime = 0x1F;  // RRespTime: no time value given
// RMPPStatus (IBA vol. 1 13.6.2).
namespace rmpp_status {
inline constexpr std::uint8_t normal = 0;
inline constexpr std::uint8_t resources_exhausted = 1;     // STOP
inline constexpr std::uint8_t total_time_too_long = 118;   // ABORT from here on
inline constexpr std::uint8_t inconsistent_last_and_payload_length = 119;
inline constexpr std::uint8_t inconsistent_first_and_segment_number = 120;
inline constexpr std::uint8_t bad_rmpp_type = 121;
inline constexpr std::uint8_t new_window_last_too_small = 122;
inline constexpr std::uint8_t segment_number_too_big = 123;
inline constexpr std::uint8_t illegal_status = 124;
inline constexpr std::uint8_t unsupported_version = 125;
inline constexpr std::uint8_t too_many_retries = 126;
inline constexpr std::uint8_t unspecified = 127;
}  // namespace rmpp_status

struct RmppHeader {
    static constexpr std::size_t size = 12;

    std::uint8_t rmpp_version = 0;
    std::uint8_t rmpp_type = rmpp_type::none;
    std::uint8_t r_resp_time = 0;  // 5 bits
    std::uint8_t rmpp_flags = 0;   // 3 bits, rmpp_flag::
    std::uint8_t rmpp_status = rmpp_status::normal;
    std::uint32_t data1 = 0;  // SegmentNumber
    std::uint32_t data2 = 0;  // PayloadLength (DATA) or NewWindowLast (ACK)

    bool active() const { return (rmpp_flags & rmpp_flag::active) != 0; }
    bool first() const { return (rmpp_flags & rmpp_flag::first) != 0; }
    bool last() const { return (rmpp_flags & rmpp_flag::last) != 0; }
    std::uint32_t segment_number() const { return data1; }
    std::uint32_t payload_length() const { return data2; }
    std::uint32_t new_window_last() const { return data2; }

    bool fields_in_range() const { return r_resp_time <= 0x1F && rmpp_flags <= 0x7; }
    void write_to(std::uint8_t* p) const {
        p[0] = rmpp_version;
        p[1] = rmpp_type;
        p[2] = static_cast<std::uint8_t>((r_resp_time << 3) | (rmpp_flags & 0x7));
        p[3] = rmpp_status;
        store_be32(p + 4, data1);
        store_be32(p + 8, data2);
    }
    static RmppHeader read_from(const std::uint8_t* p) {
        RmppHeader h;
        h.rmpp_version = p[0];
        h.rmpp_type = p[1];
        h.r_resp_time = static_cast<std::uint8_t>(p[2] >> 3);
        h.rmpp_flags = static_cast<std::uint8_t>(p[2] & 0x7);
        h.rmpp_status = p[3];
        h.data1 = load_be32(p + 4);
        h.data2 = load_be32(p + 8);
        return h;
    }
    bool operator==(const RmppHeader&) const = default;
};

// ---------------------------------------------------------------------------
// The whole SA MAD. `header.class_specific` (bytes 6-7) is Reserved in this
// class and is carried as read.
struct SaMad {
    static constexpr std::size_t size = kSaMadSize;

    ib::MadHeader header{.mgmt_class = ib::mgmt_class::subn_adm, .class_version = ib::class_version::subn_adm};
    RmppHeader rmpp;
    std::uint64_t sm_key = 0;
    std::uint16_t attribute_offset = 0;  // 8-byte words
    std::uint64_t component_mask = 0;
    SaData data{};

    bool fields_in_range() const { return rmpp.fields_in_range(); }
    void write_to(std::uint8_t* p) const;
    static SaMad read_from(const std::uint8_t* p);
    bool operator==(const SaMad&) const = default;
};

enum class SaMadError : std::uint8_t {
    wrong_size,    // a MAD is exactly 256 bytes
    not_sa_class,  // MgmtClass is not SubnAdm (0x03)
};
const char* to_string(SaMadError e);

// Decodes a received MAD as an SA MAD: exactly 256 bytes of class 0x03.
// Base and class versions, method and attribute are the receiving agent's
// to judge (it answers a bad version with a status, so it needs the
// decoded header).
expected<SaMad, SaMadError> decode_sa_mad(bytes mad);

// AttributeOffset of a record of `size` bytes: whole 8-byte words.
inline constexpr std::uint16_t attribute_offset_for(std::size_t size) {
    return static_cast<std::uint16_t>((size + 7) / 8);
}

// A request with `record` in the data and `component_mask` (AttributeOffset
// 0, SM_Key 0, RMPP off). Record types name their attribute_id.
template <class Record>
expected<SaMad, ib::CodecError> make_sa_request(std::uint8_t method, std::uint64_t transaction_id,
                                                const Record& record, std::uint64_t component_mask = 0) {
    static_assert(Record::size <= kSaDataSize);
    if (!record.fields_in_range()) return unexpected(ib::CodecError::field_out_of_range);
    SaMad m;
    m.header.method = method;
    m.header.transaction_id = transaction_id;
    m.header.attribute_id = Record::attribute_id;
    m.component_mask = component_mask;
    record.write_to(m.data.data());
    return m;
}

// The record at the start of the SA data (Get, Set, Delete and their
// responses, Report). 200 bytes hold every record type, so this cannot fail.
template <class Record>
Record get_record(const SaMad& mad) {
    static_assert(Record::size <= kSaDataSize);
    return Record::read_from(mad.data.data());
}

// Writes `record` at the start of the SA data, zeroing the rest.
template <class Record>
expected<void, ib::CodecError> put_record(const Record& record, SaMad& mad) {
    static_assert(Record::size <= kSaDataSize);
    mad.data.fill(0);
    if (!record.fields_in_range()) return unexpected(ib::CodecError::field_out_of_range);
    record.write_to(mad.data.data());
    return {};
}

// ---------------------------------------------------------------------------
// ClassPortInfo (IBA vol. 1 13.4.8.1), 72 bytes
//   0 BaseVersion  1 ClassVersion  2-3 CapabilityMask
//   4-7 CapabilityMask2(31:5) RespTimeValue(4:0)
//   8-23 RedirectGID
//   24-27 RedirectTC(31:24) RedirectSL(23:20) RedirectFL(19:0)
//   28-29 RedirectLID  30-31 RedirectP_Key
//   32 Reserved  33-35 RedirectQP
//   36-39 RedirectQ_Key
//   40-55 TrapGID
//   56-59 TrapTC(31:24) TrapSL(23:20) TrapFL(19:0)
//   60-61 TrapLID  62-63 TrapP_Key
//   64 TrapHL  65-67 TrapQP
//   68-71 TrapQ_Key
namespace class_capability {  // CapabilityMask: bits 7:0 every class, 15:8 SA
inline constexpr std::uint16_t is_trap_supported = 1u << 0;
inline constexpr std::uint16_t is_get_set_notice_supported = 1u << 1;
inline constexpr std::uint16_t is_capability_mask2_supported = 1u << 2;
inline constexpr std::uint16_t is_optional_records_supported = 1u << 8;
inline constexpr std::uint16_t is_ud_multicast_supported = 1u << 9;
inline constexpr std::uint16_t is_multipath_supported = 1u << 10;
inline constexpr std::uint16_t is_reinit_supported = 1u << 11;
inline constexpr std::uint16_t is_port_info_capability_mask_match_supported = 1u << 13;
}  // namespace class_capability
namespace sa_capability2 {  // CapabilityMask2 of the SA (27 bits)
inline constexpr std::uint32_t is_qos_supported = 1u << 1;
inline constexpr std::uint32_t is_reverse_path_p_key_supported = 1u << 2;
inline constexpr std::uint32_t is_mcast_top_supported = 1u << 3;
inline constexpr std::uint32_t is_hierarchy_info_supported = 1u << 4;
inline constexpr std::uint32_t is_alias_guids_supported = 1u << 5;
inline constexpr std::uint32_t is_full_port_info_record_supported = 1u << 6;
inline constexpr std::uint32_t is_extended_speeds_supported = 1u << 7;
inline constexpr std::uint32_t is_multicast_service_records_supported = 1u << 8;
inline constexpr std::uint32_t is_port_info_capability_mask2_match_supported = 1u << 10;
inline constexpr std::uint32_t is_send_only_full_member_supported = 1u << 12;
}  // namespace sa_capability2

struct ClassPortInfo {
    static constexpr std::size_t size = 72;
    static constexpr std::uint16_t attribute_id = sa_attr::class_port_info;

    std::uint8_t base_version = ib::kMadBaseVersion;
    std::uint8_t class_version = ib::class_version::subn_adm;
    std::uint16_t capability_mask = 0;
    std::uint32_t capability_mask2 = 0;  // 27 bits
    std::uint8_t resp_time_value = 0;    // 5 bits
    Gid redirect_gid{};
    std::uint8_t redirect_tc = 0;
    std::uint8_t redirect_sl = 0;        // 4 bits
    std::uint32_t redirect_fl = 0;       // 20 bits
    std::uint16_t redirect_lid = 0;
    std::uint16_t redirect_p_key = 0;
    std::uint32_t redirect_qp = 0;       // 24 bits
    std::uint32_t redirect_q_key = 0;
    Gid trap_gid{};
    std::uint8_t trap_tc = 0;
    std::uint8_t trap_sl = 0;            // 4 bits
    std::uint32_t trap_fl = 0;           // 20 bits
    std::uint16_t trap_lid = 0;
    std::uint16_t trap_p_key = 0;
    std::uint8_t trap_hl = 0;
    std::uint32_t trap_qp = 0;           // 24 bits
    std::uint32_t trap_q_key = 0;

    bool fields_in_range() const;
    void write_to(std::uint8_t* p) const;
    static ClassPortInfo read_from(const std::uint8_t* p);
    bool operator==(const ClassPortInfo&) const = default;
};

}  // namespace ipoibd::sa
