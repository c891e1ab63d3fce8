// Event subscription and delivery through the SA (IBA vol. 1 13.4.8.2-3,
// 14.2.5.1, 15.2.5): InformInfo (SubnAdmSet to subscribe or
// unsubscribe), InformInfoRecord (SubnAdmGet/GetTable of the
// subscriptions), and Notice (SubnAdmReport to a subscriber), with helpers
// for the SA's own traps 64-67, whose DataDetails carry one GID.
//
// Structs of host values in the spec's names, write_to()/read_from() at
// fixed offsets, as in sa_records.h. "X/Y" fields of the spec (ProducerType
// or VendorID, TrapNumber or DeviceID) are one member named x_y, read by
// IsGeneric. Layouts checked against OpenSM's ib_inform_info_t,
// ib_inform_info_record_t and ib_mad_notice_attr_t and against Wireshark.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "common/byte_io.h"
#include "sa_client/sa_mad.h"

namespace ipoibd::sa {

// Notice Type (7 bits).
namespace notice_type {
inline constexpr std::uint8_t fatal = 0;
inline constexpr std::uint8_t urgent = 1;
inline constexpr std::uint8_t security = 2;
inline constexpr std::uint8_t subnet_management = 3;
inline constexpr std::uint8_t info = 4;
inline constexpr std::uint8_t empty = 0x7F;
}  // namespace notice_type

// ProducerType of a generic notice (24 bits).
namespace producer_type {
inline constexpr std::uint32_t channel_adapter = 1;
inline constexpr std::uint32_t switch_node = 2;
inline constexpr std::uint32_t router = 3;
inline constexpr std::uint32_t class_manager = 4;  // the SM/SA
}  // namespace producer_type

// Generic trap numbers the SM/SA issues (IBA vol. 1 14.2.5.1).
namespace trap_number {
inline constexpr std::uint16_t gid_in_service = 64;
inline constexpr std::uint16_t gid_out_of_service = 65;
inline constexpr std::uint16_t mcast_group_created = 66;
inline constexpr std::uint16_t mcast_group_deleted = 67;
inline constexpr std::uint16_t unpath = 68;
inline constexpr std::uint16_t repath = 69;
}  // namespace trap_number

// InformInfo wildcards: "every LID", "every type", "every trap" and "every
// producer" (LIDRangeBegin, Type, TrapNumber/DeviceID, ProducerType/VendorID).
inline constexpr std::uint16_t kInformAllLids = 0xFFFF;
inline constexpr std::uint16_t kInformAllTypes = 0xFFFF;
inline constexpr std::uint16_t kInformAllTraps = 0xFFFF;
inline constexpr std::uint32_t kInformAllProducers = 0xFFFFFF;

// ---------------------------------------------------------------------------
// InformInfo (IBA vol. 1 13.4.8.3), 36 bytes
//   0-15  GID
//   16-17 LIDRangeBegin        18-19 LIDRangeEnd      20-21 Reserved
//   22    IsGeneric            23    Subscribe
//   24-25 Type                 26-27 TrapNumber/DeviceID
//   28-30 QPN (24 bits)        31    Reserved(7:5) RespTimeValue(4:0)
//   32    Reserved             33-35 ProducerType/VendorID
struct InformInfo {
    static constexpr std::size_t size = 36;
    static constexpr std::uint16_t attribute_id = sa_attr::inform_info;

    Gid gid{};
    std::uint16_t lid_range_begin = 0;
    std::uint16_t lid_range_end = 0;
    std::uint8_t is_generic = 0;  // 1 generic, 0 vendor; other values kept as received
    std::uint8_t subscribe = 0;   // 1 subscribe, 0 unsubscribe
    std::uint16_t type = 0;
    std::uint16_t trap_number_device_id = 0;
    std::uint32_t qpn = 0;                      // 24 bits
    std::uint8_t resp_time_value = 0;           // 5 bits
    std::uint32_t producer_type_vendor_id = 0;  // 24 bits

    bool fields_in_range() const {
        return qpn <= ib::kQpnMask && resp_time_value <= 0x1F && producer_type_vendor_id <= 0xFFFFFF;
    }
    void write_to(std::uint8_t* p) const;
    static InformInfo read_from(const std::uint8_t* p);
    bool operator==(const InformInfo&) const = default;
};

// A subscription (or, `subscribe` false, its removal) to generic trap
// `trap` (kInformAllTraps: every one) from every producer about every LID,
// as a SubnAdmSet(InformInfo) carries it. GID and QPN are 0: the SA takes
// the subscriber's address and QPN from the request itself (OpenSM does).
InformInfo generic_trap_subscription(std::uint16_t trap, bool subscribe);

// ---------------------------------------------------------------------------
// InformInfoRecord (IBA vol. 1 15.2.5), 60 bytes; AttributeOffset 8 (64)
//   0-15 SubscriberGID  16-17 Enum  18-23 Reserved  24-59 InformInfo
namespace inform_info_record_comp {
inline constexpr std::uint64_t subscriber_gid = 1ull << 0;
inline constexpr std::uint64_t enum_ = 1ull << 1;  // Enum ("enum" is a keyword)
inline constexpr std::uint64_t reserved0 = 1ull << 2;
inline constexpr std::uint64_t gid = 1ull << 3;
inline constexpr std::uint64_t lid_range_begin = 1ull << 4;
inline constexpr std::uint64_t lid_range_end = 1ull << 5;
inline constexpr std::uint64_t reserved1 = 1ull << 6;
inline constexpr std::uint64_t is_generic = 1ull << 7;
inline constexpr std::uint64_t subscribe = 1ull << 8;
inline constexpr std::uint64_t type = 1ull << 9;
inline constexpr std::uint64_t trap_number_device_id = 1ull << 10;
inline constexpr std::uint64_t qpn = 1ull << 11;
inline constexpr std::uint64_t reserved2 = 1ull << 12;
inline constexpr std::uint64_t resp_time_value = 1ull << 13;
inline constexpr std::uint64_t reserved3 = 1ull << 14;
inline constexpr std::uint64_t producer_type_vendor_id = 1ull << 15;
}  // namespace inform_info_record_comp

struct InformInfoRecord {
    static constexpr std::size_t size = 60;
    static constexpr std::uint16_t attribute_id = sa_attr::inform_info_record;

    Gid subscriber_gid{};
    std::uint16_t enum_ = 0;
    InformInfo inform_info;

    bool fields_in_range() const { return inform_info.fields_in_range(); }
    void write_to(std::uint8_t* p) const;
    static InformInfoRecord read_from(const std::uint8_t* p);
    bool operator==(const InformInfoRecord&) const = default;
};

// ---------------------------------------------------------------------------
// Notice (IBA vol. 1 13.4.8.2), 80 bytes
//   0     IsGeneric(7) Type(6:0)
//   1-3   ProducerType/VendorID (24 bits)
//   4-5   TrapNumber/DeviceID
//   6-7   IssuerLID
//   8-9   NoticeToggle(15) NoticeCount(14:0)
//   10-63 DataDetails (54 bytes)
//   64-79 IssuerGID
// Traps 64-67 (IBA vol. 1 14.2.5.1): DataDetails bytes 0-5 Reserved, 6-21 GIDADDR
// (the port GID for 64/65, the MGID for 66/67), the rest Reserved.
inline constexpr std::size_t kNoticeDataDetailsSize = 54;
inline constexpr std::size_t kTrapGidAddrOffset = 6;  // within DataDetails
using NoticeDataDetails = std::array<std::uint8_t, kNoticeDataDetailsSize>;

struct Notice {
    static constexpr std::size_t size = 80;
    static constexpr std::uint16_t attribute_id = sa_attr::notice;

    bool is_generic = false;
    std::uint8_t type = 0;                      // 7 bits
    std::uint32_t producer_type_vendor_id = 0;  // 24 bits
    std::uint16_t trap_number_device_id = 0;
    std::uint16_t issuer_lid = 0;
    bool notice_toggle = false;
    std::uint16_t notice_count = 0;             // 15 bits
    NoticeDataDetails data_details{};
    Gid issuer_gid{};

    bool fields_in_range() const {
        return type <= 0x7F && producer_type_vendor_id <= 0xFFFFFF && notice_count <= 0x7FFF;
    }
    void write_to(std::uint8_t* p) const;
    static Notice read_from(const std::uint8_t* p);
    bool operator==(const Notice&) const = default;
};

// Traps 64-67 carry a GID in their DataDetails.
inline constexpr bool is_gid_trap(std::uint16_t trap) {
    return trap >= trap_number::gid_in_service && trap <= trap_number::mcast_group_deleted;
}

// The SA's notice for trap 64-67 about `gid`, as OpenSM issues it: generic,
// Type subnet management, ProducerType class manager, the SM's LID and GID
// as issuer. NoticeToggle and NoticeCount are left 0 (the issuer numbers
// its notices).
Notice make_gid_trap(std::uint16_t trap, const Gid& gid, std::uint16_t issuer_lid, const Gid& issuer_gid);

// GIDADDR of a generic notice for trap 64-67; nullopt for any other notice.
std::optional<Gid> trap_gid(const Notice& notice);

}  // namespace ipoibd::sa
