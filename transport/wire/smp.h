// Subnet Management Packets (IBA vol. 1 14.2): the 256-byte MADs of the
// subnet management classes, LID-routed (class 0x01) and directed-route
// (class 0x81), and the SMP attributes an SM and an SMA exchange.
//
// LID-routed SMP                      Directed-route SMP
//   0-23    MAD common header           0-23    MAD common header, except:
//                                               4-5  D(15) Status(14:0)
//                                               6    HopPointer
//                                               7    HopCount
//   24-31   M_Key                       24-31   M_Key
//   32-63   Reserved (32 bytes)         32-33   DrSLID
//                                       34-35   DrDLID
//                                       36-63   Reserved (28 bytes)
//   64-127  SMP Data (64 bytes)         64-127  SMP Data (64 bytes)
//   128-255 Reserved (128 bytes)        128-191 InitialPath[0..63]
//                                       192-255 ReturnPath[0..63]
//
// D is 0 on the way out (requester to responder) and 1 on the way back.
// The hop rules that move HopPointer and fill ReturnPath are in smp_dr.h.
//
// Each attribute is a struct of host values in the spec's field names with
// write_to()/read_from() at fixed offsets of the 64-byte SMP Data, usable
// with the length-first encode()/decode<>() of headers.h. Reserved bits are
// written as zero and ignored on read.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/byte_io.h"
#include "common/expected.h"
#include "transport/wire/headers.h"
#include "transport/wire/mad.h"

namespace ipoibd::ib {

inline constexpr std::size_t kSmpDataSize = 64;
inline constexpr std::size_t kSmpPathSize = 64;    // InitialPath / ReturnPath entries
inline constexpr std::uint8_t kSmpMaxHopCount = 63;  // C14-6: HopCount 0..63
using SmpData = std::array<std::uint8_t, kSmpDataSize>;
using DrPath = std::array<std::uint8_t, kSmpPathSize>;

namespace smp_offset {
inline constexpr std::size_t status = 4;
inline constexpr std::size_t hop_pointer = 6;
inline constexpr std::size_t hop_count = 7;
inline constexpr std::size_t m_key = 24;
inline constexpr std::size_t dr_slid = 32;
inline constexpr std::size_t dr_dlid = 34;
inline constexpr std::size_t data = 64;
inline constexpr std::size_t initial_path = 128;
inline constexpr std::size_t return_path = 192;
}  // namespace smp_offset

inline constexpr std::uint16_t kSmpDirectionBit = 0x8000;  // D, the top bit of Status (DR only)
inline constexpr std::uint16_t kSmpDrStatusMask = 0x7FFF;

// SMP attribute IDs (IBA 14.2.5, table 145).
namespace smp_attr {
inline constexpr std::uint16_t notice = 0x0002;
inline constexpr std::uint16_t node_description = 0x0010;
inline constexpr std::uint16_t node_info = 0x0011;
inline constexpr std::uint16_t switch_info = 0x0012;
inline constexpr std::uint16_t guid_info = 0x0014;
inline constexpr std::uint16_t port_info = 0x0015;
inline constexpr std::uint16_t p_key_table = 0x0016;
inline constexpr std::uint16_t sl_to_vl_mapping_table = 0x0017;
inline constexpr std::uint16_t vl_arbitration_table = 0x0018;
inline constexpr std::uint16_t linear_forwarding_table = 0x0019;
inline constexpr std::uint16_t random_forwarding_table = 0x001A;
inline constexpr std::uint16_t multicast_forwarding_table = 0x001B;
inline constexpr std::uint16_t sm_info = 0x0020;
inline constexpr std::uint16_t vendor_diag = 0x0030;
inline constexpr std::uint16_t led_info = 0x0031;
}  // namespace smp_attr
// ---------------------------------------------------------------------------
// An SMP (the 256-byte MAD) as a whole packet on QP0 (IBA 14.2.1): VL15,
// LRH SLID/DLID as given, UD SEND Only from QP0 to QP0, P_Key 0xFFFF, ICRC
// and VCRC. kQp0PacketSize bytes; nullopt if `out` is too small or `mad`
// is not 256 bytes.
inline constexpr std::size_t kQp0PacketSize = 8 + 12 + 8 + kMadSize + 6;  // LRH BTH DETH MAD ICRC+VCRC
std::optional<std::size_t> build_qp0_packet(bytes mad, std::uint16_t slid, std::uint16_t dlid,
                                            std::span<std::uint8_t> out);

// "PortInfo", "NodeInfo", ...; "unknown attribute" for others.
const char* smp_attribute_name(std::uint16_t attribute_id);

// ---------------------------------------------------------------------------
// The whole SMP. Hop fields, D, DrSLID/DrDLID and the paths exist only in
// directed-route SMPs: write_to() leaves their bytes zero (Reserved) for a
// LID-routed SMP and read_from() gives them their defaults.
struct Smp {
    static constexpr std::size_t size = kMadSize;

    std::uint8_t base_version = kMadBaseVersion;
    std::uint8_t mgmt_class = mgmt_class::subn_lid_routed;
    std::uint8_t class_version = class_version::subn;
    std::uint8_t method = 0;            // R bit included
    std::uint16_t status = 0;           // 16 bits LID-routed, 15 bits directed route
    bool direction = false;             // D: false outbound, true returning
    std::uint8_t hop_pointer = 0;
    std::uint8_t hop_count = 0;
    std::uint64_t transaction_id = 0;
    std::uint16_t attribute_id = 0;
    std::uint32_t attribute_modifier = 0;
    std::uint64_t m_key = 0;
    std::uint16_t dr_slid = kLidPermissive;
    std::uint16_t dr_dlid = kLidPermissive;
    SmpData data{};
    DrPath initial_path{};
    DrPath return_path{};

    bool is_directed_route() const { return mgmt_class == mgmt_class::subn_directed_route; }
    bool fields_in_range() const { return !is_directed_route() || status <= kSmpDrStatusMask; }
    void write_to(std::uint8_t* p) const;
    static Smp read_from(const std::uint8_t* p);
    bool operator==(const Smp&) const = default;
};

enum class SmpError : std::uint8_t {
    wrong_size,     // an SMP is a whole 256-byte MAD
    not_smp_class,  // MgmtClass is neither 0x01 nor 0x81
};
const char* to_string(SmpError e);

// Decodes a received MAD as an SMP: exactly 256 bytes of class 0x01 or 0x81.
// Versions, method and attribute are the receiving agent's to judge (it
// answers a bad version with a status, so it needs the decoded header).
expected<Smp, SmpError> decode_smp(bytes mad);

// ---------------------------------------------------------------------------
// NodeInfo (IBA 14.2.5.3), 40 bytes
//   0 BaseVersion  1 ClassVersion  2 NodeType  3 NumPorts
//   4-11 SystemImageGUID  12-19 NodeGUID  20-27 PortGUID
//   28-29 PartitionCap  30-31 DeviceID  32-35 Revision
//   36 LocalPortNum  37-39 VendorID (24 bits)
namespace node_type {
inline constexpr std::uint8_t channel_adapter = 1;
inline constexpr std::uint8_t switch_node = 2;
inline constexpr std::uint8_t router = 3;
}  // namespace node_type

struct NodeInfo {
    static constexpr std::size_t size = 40;

    std::uint8_t base_version = kMadBaseVersion;
    std::uint8_t class_version = class_version::subn;
    std::uint8_t node_type = node_type::channel_adapter;
    std::uint8_t num_ports = 1;
    std::uint64_t system_image_guid = 0;
    std::uint64_t node_guid = 0;
    std::uint64_t port_guid = 0;
    std::uint16_t partition_cap = 0;
    std::uint16_t device_id = 0;
    std::uint32_t revision = 0;
    std::uint8_t local_port_num = 0;
    std::uint32_t vendor_id = 0;  // 24 bits (IEEE OUI)

    bool fields_in_range() const { return vendor_id <= 0xFFFFFF; }
    void write_to(std::uint8_t* p) const;
    static NodeInfo read_from(const std::uint8_t* p);
    bool operator==(const NodeInfo&) const = default;
};

// NodeDescription (IBA 14.2.5.2): 64 bytes of UTF-8, not necessarily
// NUL-terminated. Written NUL-padded; read up to the first NUL.
struct NodeDescription {
    static constexpr std::size_t size = 64;
    std::string text;

    bool fields_in_range() const { return text.size() <= size; }
    void write_to(std::uint8_t* p) const;
    static NodeDescription read_from(const std::uint8_t* p);
    bool operator==(const NodeDescription&) const = default;
};

// ---------------------------------------------------------------------------
// PortInfo (IBA 14.2.5.6), 64 bytes. Byte offsets, bits of that byte:
//   0-7   M_Key                       8-15  GidPrefix
//   16-17 LID                         18-19 MasterSMLID
//   20-23 CapabilityMask              24-25 DiagCode
//   26-27 M_KeyLeasePeriod            28    LocalPortNum
//   29    LinkWidthEnabled            30    LinkWidthSupported
//   31    LinkWidthActive
//   32    LinkSpeedSupported(7:4)     PortState(3:0)
//   33    PortPhysicalState(7:4)      LinkDownDefaultState(3:0)
//   34    M_KeyProtectBits(7:6)       Reserved(5:3)  LMC(2:0)
//   35    LinkSpeedActive(7:4)        LinkSpeedEnabled(3:0)
//   36    NeighborMTU(7:4)            MasterSMSL(3:0)
//   37    VLCap(7:4)                  InitType(3:0)
//   38    VLHighLimit                 39    VLArbitrationHighCap
//   40    VLArbitrationLowCap
//   41    InitTypeReply(7:4)          MTUCap(3:0)
//   42    VLStallCount(7:5)           HOQLife(4:0)
//   43    OperationalVLs(7:4)         PartitionEnforcementInbound(3)
//         PartitionEnforcementOutbound(2)  FilterRawInbound(1)  FilterRawOutbound(0)
//   44-45 M_KeyViolations             46-47 P_KeyViolations
//   48-49 Q_KeyViolations             50    GUIDCap
//   51    ClientReregister(7)         MulticastPKeyTrapSuppressionEnabled(6:5)
//         SubnetTimeOut(4:0)
//   52    Reserved(7:5)               RespTimeValue(4:0)
//   53    LocalPhyErrors(7:4)         OverrunErrors(3:0)
//   54-55 MaxCreditHint               56    Reserved
//   57-59 LinkRoundTripLatency (24 bits)
//   60-61 CapabilityMask2
//   62    LinkSpeedExtActive(7:4)     LinkSpeedExtSupported(3:0)
//   63    Reserved(7:5)               LinkSpeedExtEnabled(4:0)
namespace port_state {  // PortState; 0 in a Set means no change
inline constexpr std::uint8_t no_change = 0;
inline constexpr std::uint8_t down = 1;
inline constexpr std::uint8_t init = 2;
inline constexpr std::uint8_t armed = 3;
inline constexpr std::uint8_t active = 4;
}  // namespace port_state

namespace port_physical_state {  // PortPhysicalState; 0 in a Set means no change
inline constexpr std::uint8_t no_change = 0;
inline constexpr std::uint8_t sleep = 1;
inline constexpr std::uint8_t polling = 2;
inline constexpr std::uint8_t disabled = 3;
inline constexpr std::uint8_t port_configuration_training = 4;
inline constexpr std::uint8_t link_up = 5;
inline constexpr std::uint8_t link_error_recovery = 6;
inline constexpr std::uint8_t phy_test = 7;
}  // namespace port_physical_state

namespace link_width {  // LinkWidth* bit masks
inline constexpr std::uint8_t x1 = 0x01;
inline constexpr std::uint8_t x4 = 0x02;
inline constexpr std::uint8_t x8 = 0x04;
inline constexpr std::uint8_t x12 = 0x08;
inline constexpr std::uint8_t x2 = 0x10;
}  // namespace link_width

namespace link_speed {  // LinkSpeed* bit masks (Gb/s per lane)
inline constexpr std::uint8_t sdr = 0x1;  // 2.5
inline constexpr std::uint8_t ddr = 0x2;  // 5.0
inline constexpr std::uint8_t qdr = 0x4;  // 10.0
}  // namespace link_speed

namespace port_capability {  // CapabilityMask bits
inline constexpr std::uint32_t is_sm = 1u << 1;
inline constexpr std::uint32_t is_notice_supported = 1u << 2;
inline constexpr std::uint32_t is_trap_supported = 1u << 3;
inline constexpr std::uint32_t is_sl_mapping_supported = 1u << 6;
inline constexpr std::uint32_t is_sm_disabled = 1u << 10;
inline constexpr std::uint32_t is_system_image_guid_supported = 1u << 11;
inline constexpr std::uint32_t is_communication_management_supported = 1u << 16;
inline constexpr std::uint32_t is_client_reregistration_supported = 1u << 25;
}  // namespace port_capability

struct PortInfo {
    static constexpr std::size_t size = 64;

    std::uint64_t m_key = 0;
    std::uint64_t gid_prefix = 0;
    std::uint16_t lid = 0;
    std::uint16_t master_sm_lid = 0;
    std::uint32_t capability_mask = 0;
    std::uint16_t diag_code = 0;
    std::uint16_t m_key_lease_period = 0;
    std::uint8_t local_port_num = 0;
    std::uint8_t link_width_enabled = 0;
    std::uint8_t link_width_supported = 0;
    std::uint8_t link_width_active = 0;
    std::uint8_t link_speed_supported = 0;     // 4 bits
    std::uint8_t port_state = 0;               // 4 bits
    std::uint8_t port_physical_state = 0;      // 4 bits
    std::uint8_t link_down_default_state = 0;  // 4 bits
    std::uint8_t m_key_protect_bits = 0;       // 2 bits
    std::uint8_t lmc = 0;                      // 3 bits
    std::uint8_t link_speed_active = 0;        // 4 bits
    std::uint8_t link_speed_enabled = 0;       // 4 bits
    std::uint8_t neighbor_mtu = 0;             // 4 bits, Mtu encoding
    std::uint8_t master_sm_sl = 0;             // 4 bits
    std::uint8_t vl_cap = 0;                   // 4 bits
    std::uint8_t init_type = 0;                // 4 bits
    std::uint8_t vl_high_limit = 0;
    std::uint8_t vl_arbitration_high_cap = 0;
    std::uint8_t vl_arbitration_low_cap = 0;
    std::uint8_t init_type_reply = 0;          // 4 bits
    std::uint8_t mtu_cap = 0;                  // 4 bits, Mtu encoding
    std::uint8_t vl_stall_count = 0;           // 3 bits
    std::uint8_t hoq_life = 0;                 // 5 bits
    std::uint8_t operational_vls = 0;          // 4 bits
    bool partition_enforcement_inbound = false;
    bool partition_enforcement_outbound = false;
    bool filter_raw_inbound = false;
    bool filter_raw_outbound = false;
    std::uint16_t m_key_violations = 0;
    std::uint16_t p_key_violations = 0;
    std::uint16_t q_key_violations = 0;
    std::uint8_t guid_cap = 0;
    bool client_reregister = false;
    std::uint8_t multicast_pkey_trap_suppression_enabled = 0;  // 2 bits
    std::uint8_t subnet_timeout = 0;           // 5 bits
    std::uint8_t resp_time_value = 0;          // 5 bits
    std::uint8_t local_phy_errors = 0;         // 4 bits
    std::uint8_t overrun_errors = 0;           // 4 bits
    std::uint16_t max_credit_hint = 0;
    std::uint32_t link_round_trip_latency = 0;  // 24 bits
    std::uint16_t capability_mask2 = 0;
    std::uint8_t link_speed_ext_active = 0;     // 4 bits
    std::uint8_t link_speed_ext_supported = 0;  // 4 bits
    std::uint8_t link_speed_ext_enabled = 0;    // 5 bits

    bool fields_in_range() const;
    void write_to(std::uint8_t* p) const;
    static PortInfo read_from(const std::uint8_t* p);
    bool operator==(const PortInfo&) const = default;
};

// PortInfo AttributeModifier: the port number (bits 7:0); 0 on a CA means
// the port the SMP arrived on.
inline constexpr std::uint32_t kPortInfoPortMask = 0xFF;

// ---------------------------------------------------------------------------
// P_KeyTable (IBA 14.2.5.7): one block of 32 P_Keys, 16 bits each.
// AttributeModifier: bits 15:0 block number, bits 31:16 port number
// (switch external ports only).
struct PKeyTableBlock {
    static constexpr std::size_t size = 64;
    static constexpr std::size_t entries = 32;
    std::array<std::uint16_t, entries> p_keys{};

    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const;
    static PKeyTableBlock read_from(const std::uint8_t* p);
    bool operator==(const PKeyTableBlock&) const = default;
};
inline constexpr std::uint32_t p_key_table_modifier(std::uint16_t block, std::uint16_t port = 0) {
    return (std::uint32_t{port} << 16) | block;
}

// ---------------------------------------------------------------------------
// Notice in an SMP (a Trap or TrapRepress, IBA 14.2.5.1): the first 64 bytes
// of the Notice attribute (13.4.8.2; an SMP's Data has no room for
// IssuerGID).
//   0     IsGeneric(7) Type(6:0)     1-3 ProducerType (24 bits)
//   4-5   TrapNumber                 6-7 IssuerLID
//   8-9   NoticeToggle(15) NoticeCount(14:0)
//   10-63 DataDetails (54 bytes)
struct SmpNotice {
    static constexpr std::size_t size = 64;

    bool is_generic = true;
    std::uint8_t type = 0;            // 7 bits: 2 security
    std::uint32_t producer_type = 0;  // 24 bits: 1 CA, 2 switch
    std::uint16_t trap_number = 0;
    std::uint16_t issuer_lid = 0;
    bool notice_toggle = false;
    std::uint16_t notice_count = 0;   // 15 bits
    std::array<std::uint8_t, 54> data_details{};

    bool fields_in_range() const { return type <= 0x7F && producer_type <= 0xFFFFFF && notice_count <= 0x7FFF; }
    void write_to(std::uint8_t* p) const;
    static SmpNotice read_from(const std::uint8_t* p);
    bool operator==(const SmpNotice&) const = default;
};

namespace trap {
inline constexpr std::uint8_t type_urgent = 1;    // IBA 13.4.8.2, Notice Type
inline constexpr std::uint8_t type_security = 2;
inline constexpr std::uint32_t producer_channel_adapter = 1;
inline constexpr std::uint32_t producer_switch = 2;
inline constexpr std::uint16_t link_state_change = 128;  // DataDetails 0-1: LIDADDR, the switch's LID
inline constexpr std::uint16_t bad_m_key = 256;
}  // namespace trap

// Trap 256, Bad M_Key (14.2.5.1): DataDetails
//   0-1 LIDADDR (the requester's LRH SLID)   2-3 DRSLID
//   4   Method   5 reserved   6-7 AttributeID   8-11 AttributeModifier
//   12-19 M_Key (the one the request carried)
//   20  DRNotice(7) DRPathTruncated(6) DRHopCount(5:0)   21-50 DRNoticeReturnPath
struct BadMKeyTrap {
    std::uint16_t lid = 0;
    std::uint16_t dr_slid = 0;
    std::uint8_t method = 0;
    std::uint16_t attribute_id = 0;
    std::uint32_t attribute_modifier = 0;
    std::uint64_t m_key = 0;
    bool operator==(const BadMKeyTrap&) const = default;
};
void write_bad_m_key(const BadMKeyTrap& t, std::array<std::uint8_t, 54>& details);
BadMKeyTrap read_bad_m_key(const std::array<std::uint8_t, 54>& details);

// GUIDInfo (IBA 14.2.5.5): one block of 8 GUIDs; AttributeModifier is the
// block number. GUID index 0 is the port GUID and read-only.
struct GuidInfoBlock {
    static constexpr std::size_t size = 64;
    static constexpr std::size_t entries = 8;
    std::array<std::uint64_t, entries> guids{};

    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const;
    static GuidInfoBlock read_from(const std::uint8_t* p);
    bool operator==(const GuidInfoBlock&) const = default;
};

// ---------------------------------------------------------------------------
// SwitchInfo (IBA 14.2.5.4), 20 bytes
//   0-1 LinearFDBCap  2-3 RandomFDBCap  4-5 MulticastFDBCap  6-7 LinearFDBTop
//   8 DefaultPort  9 DefaultMulticastPrimaryPort  10 DefaultMulticastNotPrimaryPort
//   11 LifeTimeValue(7:3) PortStateChange(2) OptimizedSLtoVLMappingProgramming(1:0)
//   12-13 LIDsPerPort  14-15 PartitionEnforcementCap
//   16 InboundEnforcementCap(7) OutboundEnforcementCap(6) FilterRawInboundCap(5)
//      FilterRawOutboundCap(4) EnhancedPort0(3) Reserved(2:0)
//   17 Reserved  18-19 MulticastFDBTop
struct SwitchInfo {
    static constexpr std::size_t size = 20;

    std::uint16_t linear_fdb_cap = 0;
    std::uint16_t random_fdb_cap = 0;
    std::uint16_t multicast_fdb_cap = 0;
    std::uint16_t linear_fdb_top = 0;
    std::uint8_t default_port = 0;
    std::uint8_t default_multicast_primary_port = 0;
    std::uint8_t default_multicast_not_primary_port = 0;
    std::uint8_t life_time_value = 0;  // 5 bits
    bool port_state_change = false;    // write 1 to clear
    std::uint8_t optimized_sl_to_vl_mapping_programming = 0;  // 2 bits
    std::uint16_t lids_per_port = 0;
    std::uint16_t partition_enforcement_cap = 0;
    bool inbound_enforcement_cap = false;
    bool outbound_enforcement_cap = false;
    bool filter_raw_inbound_cap = false;
    bool filter_raw_outbound_cap = false;
    bool enhanced_port0 = false;
    std::uint16_t multicast_fdb_top = 0;

    bool fields_in_range() const { return life_time_value <= 0x1F && optimized_sl_to_vl_mapping_programming <= 3; }
    void write_to(std::uint8_t* p) const;
    static SwitchInfo read_from(const std::uint8_t* p);
    bool operator==(const SwitchInfo&) const = default;
};

// LinearForwardingTable (IBA 14.2.5.10): egress ports of 64 LIDs; block n
// (the AttributeModifier) covers LIDs 64n..64n+63.
struct LinearForwardingTableBlock {
    static constexpr std::size_t size = 64;
    static constexpr std::size_t entries = 64;
    std::array<std::uint8_t, entries> ports{};

    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const { std::memcpy(p, ports.data(), size); }
    static LinearForwardingTableBlock read_from(const std::uint8_t* p) {
        LinearForwardingTableBlock b;
        std::memcpy(b.ports.data(), p, size);
        return b;
    }
    bool operator==(const LinearForwardingTableBlock&) const = default;
};

// MulticastForwardingTable (IBA 14.2.5.12): 16-bit port masks of 32 MLIDs.
// AttributeModifier: bits 31:28 position (mask bit i is port 16*position+i),
// bits 8:0 block (MLIDs 0xC000 + 32*block ...).
struct MulticastForwardingTableBlock {
    static constexpr std::size_t size = 64;
    static constexpr std::size_t entries = 32;
    std::array<std::uint16_t, entries> port_masks{};

    bool fields_in_range() const { return true; }
    void write_to(std::uint8_t* p) const;
    static MulticastForwardingTableBlock read_from(const std::uint8_t* p);
    bool operator==(const MulticastForwardingTableBlock&) const = default;
};
inline constexpr std::uint32_t kMftBlockMask = 0x1FF;
inline constexpr unsigned kMftPositionShift = 28;
inline constexpr std::uint32_t multicast_forwarding_table_modifier(std::uint16_t block, std::uint8_t position) {
    return (std::uint32_t{position} << kMftPositionShift) | (block & kMftBlockMask);
}

// SMInfo (IBA 14.2.5.13), 21 bytes
//   0-7 GUID  8-15 SM_Key  16-19 ActCount  20 Priority(7:4) SMState(3:0)
namespace sm_state {
inline constexpr std::uint8_t not_active = 0;
inline constexpr std::uint8_t discovering = 1;
inline constexpr std::uint8_t standby = 2;
inline constexpr std::uint8_t master = 3;
}  // namespace sm_state

struct SmInfo {
    static constexpr std::size_t size = 21;

    std::uint64_t guid = 0;
    std::uint64_t sm_key = 0;
    std::uint32_t act_count = 0;
    std::uint8_t priority = 0;  // 4 bits
    std::uint8_t sm_state = 0;  // 4 bits

    bool fields_in_range() const { return priority <= 0xF && sm_state <= 0xF; }
    void write_to(std::uint8_t* p) const {
        store_be64(p, guid);
        store_be64(p + 8, sm_key);
        store_be32(p + 16, act_count);
        p[20] = static_cast<std::uint8_t>((priority << 4) | sm_state);
    }
    static SmInfo read_from(const std::uint8_t* p) {
        return {load_be64(p), load_be64(p + 8), load_be32(p + 16), static_cast<std::uint8_t>(p[20] >> 4),
                static_cast<std::uint8_t>(p[20] & 0xF)};
    }
    bool operator==(const SmInfo&) const = default;
};

// Writes `attribute` into an SMP's Data, zeroing the bytes after it.
template <class Attribute>
expected<void, CodecError> put_attribute(const Attribute& attribute, SmpData& data) {
    data.fill(0);
    auto n = encode(attribute, data);
    if (!n) return unexpected(n.error());
    return {};
}

}  // namespace ipoibd::ib
