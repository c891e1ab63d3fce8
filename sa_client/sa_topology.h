// The SA records of the subnet's topology (IBA vol. 1 15.2.5): what
// osmtest, saquery and OpenSM's own tools read from an SA besides groups
// and paths. NodeRecord (15.2.5.2),
// PortInfoRecord (15.2.5.3) and LinkRecord (15.2.5.13), with their
// component-mask bits (bit i is the i-th field of the record's table,
// reserved ones included, as OpenSM's IB_NR_COMPMASK_* and friends number
// them). Host values with write_to()/read_from() at fixed offsets, as in
// sa_records.h.
#pragma once

#include <array>
#include <cstdint>

#include "common/byte_io.h"
#include "sa_client/sa_mad.h"
#include "transport/wire/smp.h"

namespace ipoibd::sa {

// ClassPortInfo is in sa_mad.h.

// NodeRecord (15.2.5.2), 108 bytes: LID(2) Reserved(2) NodeInfo(40)
// NodeDescription(64).
namespace node_record_comp {
inline constexpr std::uint64_t lid = 1ull << 0;
inline constexpr std::uint64_t reserved = 1ull << 1;
inline constexpr std::uint64_t base_version = 1ull << 2;
inline constexpr std::uint64_t class_version = 1ull << 3;
inline constexpr std::uint64_t node_type = 1ull << 4;
inline constexpr std::uint64_t num_ports = 1ull << 5;
inline constexpr std::uint64_t system_image_guid = 1ull << 6;
inline constexpr std::uint64_t node_guid = 1ull << 7;
inline constexpr std::uint64_t port_guid = 1ull << 8;
inline constexpr std::uint64_t partition_cap = 1ull << 9;
inline constexpr std::uint64_t device_id = 1ull << 10;
inline constexpr std::uint64_t revision = 1ull << 11;
inline constexpr std::uint64_t local_port_num = 1ull << 12;
inline constexpr std::uint64_t vendor_id = 1ull << 13;
inline constexpr std::uint64_t node_description = 1ull << 14;
}  // namespace node_record_comp

struct NodeRecord {
    static constexpr std::size_t size = 108;
    static constexpr std::uint16_t attribute_id = sa_attr::node_record;

    std::uint16_t lid = 0;
    ib::NodeInfo node_info;
    ib::NodeDescription node_description;

    bool fields_in_range() const { return node_info.fields_in_range() && node_description.fields_in_range(); }
    void write_to(std::uint8_t* p) const;
    static NodeRecord read_from(const std::uint8_t* p);
    bool operator==(const NodeRecord&) const = default;
};

// PortInfoRecord (15.2.5.3), 68 bytes: EndportLID(2) PortNum(1) Options(1)
// PortInfo(64). Component bits 3 and up are the PortInfo fields.
namespace port_info_record_comp {
inline constexpr std::uint64_t endport_lid = 1ull << 0;
inline constexpr std::uint64_t port_num = 1ull << 1;
inline constexpr std::uint64_t options = 1ull << 2;
inline constexpr std::uint64_t m_key = 1ull << 3;
inline constexpr std::uint64_t gid_prefix = 1ull << 4;
inline constexpr std::uint64_t lid = 1ull << 5;
inline constexpr std::uint64_t master_sm_lid = 1ull << 6;
inline constexpr std::uint64_t capability_mask = 1ull << 7;
}  // namespace port_info_record_comp

struct PortInfoRecord {
    static constexpr std::size_t size = 68;
    static constexpr std::uint16_t attribute_id = sa_attr::port_info_record;

    std::uint16_t endport_lid = 0;
    std::uint8_t port_num = 0;
    std::uint8_t options = 0;
    ib::PortInfo port_info;

    bool fields_in_range() const { return port_info.fields_in_range(); }
    void write_to(std::uint8_t* p) const;
    static PortInfoRecord read_from(const std::uint8_t* p);
    bool operator==(const PortInfoRecord&) const = default;
};

// LinkRecord (15.2.5.13), 8 bytes: FromLID(2) FromPort(1) ToPort(1)
// ToLID(2) Reserved(2). One record per direction of a link.
namespace link_record_comp {
inline constexpr std::uint64_t from_lid = 1ull << 0;
inline constexpr std::uint64_t from_port = 1ull << 1;
inline constexpr std::uint64_t to_port = 1ull << 2;
inline constexpr std::uint64_t to_lid = 1ull << 3;
}  // namespace link_record_comp

struct LinkRecord {
    static constexpr std::size_t size = 8;
    static constexpr std::uint16_t attribute_id = sa_attr::link_record;

    std::uint16_t from_lid = 0;
    std::uint8_t from_port = 0;
    std::uint8_t to_port = 0;
    std::uint16_t to_lid = 0;

    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const;
    static LinkRecord read_from(const std::uint8_t* p);
    bool operator==(const LinkRecord&) const = default;
};

}  // namespace ipoibd::sa
