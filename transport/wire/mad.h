// The MAD common header (IBA vol. 1 13.4.2), the 24 bytes every management
// datagram starts with, plus the constants shared by all management classes.
//
//   byte 0: BaseVersion   byte 1: MgmtClass   byte 2: ClassVersion
//   byte 3: R(7) Method(6:0)
//   bytes 4-5: Status     bytes 6-7: ClassSpecific (hop pointer/count for DR SMPs)
//   bytes 8-15: TransactionID
//   bytes 16-17: AttributeID   bytes 18-19: Reserved
//   bytes 20-23: AttributeModifier
//
// A MAD is always 256 bytes: the payload of a UD SEND Only to QP0 or QP1.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "common/byte_io.h"
#include "common/expected.h"
#include "transport/wire/headers.h"

namespace ipoibd::ib {

inline constexpr std::size_t kMadSize = 256;
inline constexpr std::size_t kMadHeaderSize = 24;
inline constexpr std::size_t kMadDataSize = kMadSize - kMadHeaderSize;
inline constexpr std::uint8_t kMadBaseVersion = 1;

namespace mgmt_class {
inline constexpr std::uint8_t subn_lid_routed = 0x01;
inline constexpr std::uint8_t subn_adm = 0x03;
inline constexpr std::uint8_t perf_mgt = 0x04;
inline constexpr std::uint8_t b_mgt = 0x05;
inline constexpr std::uint8_t dev_mgt = 0x06;
inline constexpr std::uint8_t com_mgt = 0x07;
inline constexpr std::uint8_t snmp = 0x08;
inline constexpr std::uint8_t subn_directed_route = 0x81;
}  // namespace mgmt_class

namespace class_version {
inline constexpr std::uint8_t subn = 1;      // SMPs
inline constexpr std::uint8_t subn_adm = 2;  // SA
inline constexpr std::uint8_t perf_mgt = 1;
}  // namespace class_version

namespace method {
inline constexpr std::uint8_t response_bit = 0x80;  // the R bit
inline constexpr std::uint8_t get = 0x01;
inline constexpr std::uint8_t set = 0x02;
inline constexpr std::uint8_t send = 0x03;
inline constexpr std::uint8_t trap = 0x05;
inline constexpr std::uint8_t report = 0x06;
inline constexpr std::uint8_t trap_repress = 0x07;
inline constexpr std::uint8_t get_table = 0x12;
inline constexpr std::uint8_t get_trace_table = 0x13;
inline constexpr std::uint8_t get_multi = 0x14;
inline constexpr std::uint8_t del = 0x15;  // "Delete" (delete is a keyword)
inline constexpr std::uint8_t get_resp = get | response_bit;          // 0x81
inline constexpr std::uint8_t report_resp = report | response_bit;    // 0x86
inline constexpr std::uint8_t get_table_resp = get_table | response_bit;  // 0x92
inline constexpr std::uint8_t get_multi_resp = get_multi | response_bit;  // 0x94
inline constexpr std::uint8_t del_resp = del | response_bit;          // 0x95
}  // namespace method

// MAD Status bits common to every class (IBA 13.4.7, table 106).
namespace mad_status {
inline constexpr std::uint16_t busy = 0x0001;
inline constexpr std::uint16_t redirect_required = 0x0002;
inline constexpr std::uint16_t invalid_field_mask = 0x001C;  // bits 4:2, a code
inline constexpr std::uint16_t bad_version = 1 << 2;
inline constexpr std::uint16_t method_not_supported = 2 << 2;
inline constexpr std::uint16_t method_attr_not_supported = 3 << 2;
inline constexpr std::uint16_t invalid_attr_or_modifier = 7 << 2;
inline constexpr std::uint16_t class_specific_mask = 0xFF00;  // bits 15:8
inline constexpr std::uint16_t dr_direction = 0x8000;  // the D bit of a DR SMP
}  // namespace mad_status

struct MadHeader {
    static constexpr std::size_t size = kMadHeaderSize;

    std::uint8_t base_version = kMadBaseVersion;
    std::uint8_t mgmt_class = 0;
    std::uint8_t class_version = 0;
    std::uint8_t method = 0;  // R bit included
    std::uint16_t status = 0;
    std::uint16_t class_specific = 0;
    std::uint64_t transaction_id = 0;
    std::uint16_t attribute_id = 0;
    std::uint32_t attribute_modifier = 0;

    bool is_response() const { return (method & method::response_bit) != 0; }
    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const {
        p[0] = base_version;
        p[1] = mgmt_class;
        p[2] = class_version;
        p[3] = method;
        store_be16(p + 4, status);
        store_be16(p + 6, class_specific);
        store_be64(p + 8, transaction_id);
        store_be16(p + 16, attribute_id);
        store_be16(p + 18, 0);
        store_be32(p + 20, attribute_modifier);
    }
    static MadHeader read_from(const std::uint8_t* p) {
        MadHeader h;
        h.base_version = p[0];
        h.mgmt_class = p[1];
        h.class_version = p[2];
        h.method = p[3];
        h.status = load_be16(p + 4);
        h.class_specific = load_be16(p + 6);
        h.transaction_id = load_be64(p + 8);
        h.attribute_id = load_be16(p + 16);
        h.attribute_modifier = load_be32(p + 20);
        return h;
    }
    bool operator==(const MadHeader&) const = default;
};

// Why a datagram is not a MAD this node can read.
enum class MadError : std::uint8_t {
    wrong_size,        // a MAD is exactly 256 bytes
    bad_base_version,  // BaseVersion != 1
};
const char* to_string(MadError e);

// Decodes the common header of a whole 256-byte MAD. Class-specific checks
// (class version, method, attribute) are the receiving agent's.
expected<MadHeader, MadError> decode_mad(bytes mad);

// The response a GSI gives to a request of a management class nobody on
// its port serves (IBA 13.4.7: "bad version", status 0x0004, the class or
// class version not supported), so that the requester fails at once
// instead of timing out: the request's header, method GetResp for Get and
// Set and the request's with the R bit otherwise, no data. Nullopt for a
// MAD that gets no answer: a response, TrapRepress, Send or Trap.
std::optional<std::array<std::uint8_t, kMadSize>> class_not_supported_response(const MadHeader& request);

// Method and status in words, like the diagnostics tools print them:
// "GetResp", "Set", "0x0c: method/attribute combination not supported".
const char* method_name(std::uint8_t method);
std::string describe_mad_status(std::uint16_t status);

}  // namespace ipoibd::ib
