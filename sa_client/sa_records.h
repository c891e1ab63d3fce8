// The SA records IPoIB lives on (IBA vol. 1 15.2.5): MCMemberRecord (group
// joins, leaves and queries) and PathRecord (unicast paths), with their
// component-mask bits, the encodings their fields share (selectors, MTU,
// rate, JoinState) and query builders that set a field and its mask bit
// together.
//
// Each record is a struct of host values in the spec's field names with
// write_to()/read_from() at fixed offsets, usable with the length-first
// ib::encode()/ib::decode<>() of transport/wire/headers.h and with
// make_sa_request()/get_record() of sa_mad.h. Reserved bits are written as
// zero and ignored on read. Layouts were checked as facts against OpenSM's
// ib_member_rec_t/ib_path_rec_t, libibmad's fields.c and Wireshark.
//
// Component mask bit i is the i-th field of the record's table in the spec,
// reserved fields included (OpenSM's IB_MCR_COMPMASK_* and IB_PR_COMPMASK_*
// number them the same way).
#pragma once

#include <cstdint>

#include "common/byte_io.h"
#include "sa_client/sa_mad.h"

namespace ipoibd::sa {

// ---------------------------------------------------------------------------
// Encodings shared by the records

// MTUSelector, RateSelector, PacketLifeTimeSelector (2 bits).
enum class Selector : std::uint8_t {
    greater_than = 0,
    less_than = 1,
    exactly = 2,
    largest_available = 3,  // for PacketLifeTime: the smallest available
};
const char* to_string(Selector s);  // "greater than", "less than", "exactly", "largest available"

// MTU (6 bits): the path MTU codes of ib::Mtu.
// 256..4096 for codes 1..5, 0 for anything else.
std::uint32_t mtu_bytes(std::uint8_t mtu);
// The code of 256..4096 bytes, 0 for other sizes.
std::uint8_t mtu_code(std::uint32_t bytes);

// Rate (6 bits): the static rate codes of PathRecord and MCMemberRecord
// (the values of OpenSM's IB_PATH_RECORD_RATE_*).
namespace rate {
inline constexpr std::uint8_t gbps_2_5 = 2;
inline constexpr std::uint8_t gbps_10 = 3;
inline constexpr std::uint8_t gbps_30 = 4;
inline constexpr std::uint8_t gbps_5 = 5;
inline constexpr std::uint8_t gbps_20 = 6;
inline constexpr std::uint8_t gbps_40 = 7;
inline constexpr std::uint8_t gbps_60 = 8;
inline constexpr std::uint8_t gbps_80 = 9;
inline constexpr std::uint8_t gbps_120 = 10;
inline constexpr std::uint8_t gbps_14 = 11;
inline constexpr std::uint8_t gbps_56 = 12;
inline constexpr std::uint8_t gbps_112 = 13;
inline constexpr std::uint8_t gbps_168 = 14;
inline constexpr std::uint8_t gbps_25 = 15;
inline constexpr std::uint8_t gbps_100 = 16;
inline constexpr std::uint8_t gbps_200 = 17;
inline constexpr std::uint8_t gbps_300 = 18;
inline constexpr std::uint8_t gbps_28 = 19;
inline constexpr std::uint8_t gbps_50 = 20;
inline constexpr std::uint8_t gbps_400 = 21;
inline constexpr std::uint8_t gbps_600 = 22;
inline constexpr std::uint8_t gbps_800 = 23;
inline constexpr std::uint8_t gbps_1200 = 24;
}  // namespace rate
// Bandwidth of a rate code in Mb/s (10 Gb/s -> 10000), 0 for an undefined
// code. The codes are not in bandwidth order: compare rates with this.
std::uint32_t rate_mbps(std::uint8_t rate);
// "10 Gb/s", "2.5 Gb/s"; "unknown rate" for an undefined code.
const char* rate_name(std::uint8_t rate);

// JoinState bits of MCMemberRecord (4 bits).
namespace join_state {
inline constexpr std::uint8_t full_member = 0x1;
inline constexpr std::uint8_t non_member = 0x2;
inline constexpr std::uint8_t send_only_non_member = 0x4;
inline constexpr std::uint8_t send_only_full_member = 0x8;
}  // namespace join_state
// "FullMember", "NonMember|SendOnlyNonMember", "none" for 0.
std::string join_state_names(std::uint8_t join_state);

// Multicast address scope (low nibble of the MGID's second byte, and the
// Scope field of MCMemberRecord).
namespace mgid_scope {
inline constexpr std::uint8_t link_local = 0x2;
inline constexpr std::uint8_t site_local = 0x5;
inline constexpr std::uint8_t organization_local = 0x8;
inline constexpr std::uint8_t global = 0xE;
}  // namespace mgid_scope

// ---------------------------------------------------------------------------
// MCMemberRecord (IBA vol. 1 15.2.5.17), 52 bytes; AttributeOffset 7 (56)
//   0-15  MGID                 16-31 PortGID
//   32-35 Q_Key                36-37 MLID
//   38    MTUSelector(7:6) MTU(5:0)
//   39    TClass               40-41 P_Key
//   42    RateSelector(7:6) Rate(5:0)
//   43    PacketLifeTimeSelector(7:6) PacketLifeTime(5:0)
//   44-47 SL(31:28) FlowLabel(27:8) HopLimit(7:0)
//   48    Scope(7:4) JoinState(3:0)
//   49    ProxyJoin(7) Reserved(6:0)
//   50-51 Reserved
namespace mc_member_comp {
inline constexpr std::uint64_t mgid = 1ull << 0;
inline constexpr std::uint64_t port_gid = 1ull << 1;
inline constexpr std::uint64_t q_key = 1ull << 2;
inline constexpr std::uint64_t mlid = 1ull << 3;
inline constexpr std::uint64_t mtu_selector = 1ull << 4;
inline constexpr std::uint64_t mtu = 1ull << 5;
inline constexpr std::uint64_t tclass = 1ull << 6;
inline constexpr std::uint64_t p_key = 1ull << 7;
inline constexpr std::uint64_t rate_selector = 1ull << 8;
inline constexpr std::uint64_t rate = 1ull << 9;
inline constexpr std::uint64_t packet_life_time_selector = 1ull << 10;
inline constexpr std::uint64_t packet_life_time = 1ull << 11;
inline constexpr std::uint64_t sl = 1ull << 12;
inline constexpr std::uint64_t flow_label = 1ull << 13;
inline constexpr std::uint64_t hop_limit = 1ull << 14;
inline constexpr std::uint64_t scope = 1ull << 15;
inline constexpr std::uint64_t join_state = 1ull << 16;
inline constexpr std::uint64_t proxy_join = 1ull << 17;
inline constexpr std::uint64_t reserved = 1ull << 18;
}  // namespace mc_member_comp

struct McMemberRecord {
    static constexpr std::size_t size = 52;
    static constexpr std::uint16_t attribute_id = sa_attr::mc_member_record;

    Gid mgid{};
    Gid port_gid{};
    std::uint32_t q_key = 0;
    std::uint16_t mlid = 0;
    Selector mtu_selector = Selector::greater_than;
    std::uint8_t mtu = 0;                 // 6 bits
    std::uint8_t tclass = 0;
    std::uint16_t p_key = 0;
    Selector rate_selector = Selector::greater_than;
    std::uint8_t rate = 0;                // 6 bits
    Selector packet_life_time_selector = Selector::greater_than;
    std::uint8_t packet_life_time = 0;    // 6 bits
    std::uint8_t sl = 0;                  // 4 bits
    std::uint32_t flow_label = 0;         // 20 bits
    std::uint8_t hop_limit = 0;
    std::uint8_t scope = 0;               // 4 bits
    std::uint8_t join_state = 0;          // 4 bits, join_state::
    bool proxy_join = false;

    bool fields_in_range() const;
    void write_to(std::uint8_t* p) const;
    static McMemberRecord read_from(const std::uint8_t* p);
    bool operator==(const McMemberRecord&) const = default;
};

// A query or request: the record and the component mask that says which of
// its fields count. Each setter sets the field and its bit.
//
//   McMemberQuery q;
//   q.set_mgid(g).set_port_gid(mine).set_join_state(join_state::full_member);
//   auto mad = make_sa_request(ib::method::set, tid, q.record, q.component_mask);
struct McMemberQuery {
    McMemberRecord record;
    std::uint64_t component_mask = 0;

    McMemberQuery& set_mgid(const Gid& v);
    McMemberQuery& set_port_gid(const Gid& v);
    McMemberQuery& set_q_key(std::uint32_t v);
    McMemberQuery& set_mlid(std::uint16_t v);
    McMemberQuery& set_mtu(Selector selector, std::uint8_t mtu);  // MTUSelector and MTU
    McMemberQuery& set_tclass(std::uint8_t v);
    McMemberQuery& set_p_key(std::uint16_t v);
    McMemberQuery& set_rate(Selector selector, std::uint8_t rate);  // RateSelector and Rate
    McMemberQuery& set_packet_life_time(Selector selector, std::uint8_t v);
    McMemberQuery& set_sl(std::uint8_t v);
    McMemberQuery& set_flow_label(std::uint32_t v);
    McMemberQuery& set_hop_limit(std::uint8_t v);
    McMemberQuery& set_scope(std::uint8_t v);
    McMemberQuery& set_join_state(std::uint8_t v);
    McMemberQuery& set_proxy_join(bool v);

    expected<SaMad, ib::CodecError> request(std::uint8_t method, std::uint64_t transaction_id) const {
        return make_sa_request(method, transaction_id, record, component_mask);
    }
};

// The components every join (Set) and leave (Delete) carries: MGID,
// PortGID and JoinState. OpenSM refuses a join without them.
inline constexpr std::uint64_t kMcMemberJoinComponents =
    mc_member_comp::mgid | mc_member_comp::port_gid | mc_member_comp::join_state;
// The components a join must also carry for the SA to create a group it
// does not know, as OpenSM checks them (otherwise
// SA_ERR_REQ_INSUFFICIENT_COMPONENTS): Q_Key, TClass, P_Key, FlowLabel and
// SL. The MGID may be zero, and the SA then picks one.
inline constexpr std::uint64_t kMcMemberCreateComponents = kMcMemberJoinComponents | mc_member_comp::q_key |
                                                           mc_member_comp::tclass | mc_member_comp::p_key |
                                                           mc_member_comp::flow_label | mc_member_comp::sl;

// ---------------------------------------------------------------------------
// PathRecord (IBA vol. 1 15.2.5.16), 64 bytes; AttributeOffset 8
//   0-7   ServiceID            8-23  DGID
//   24-39 SGID                 40-41 DLID         42-43 SLID
//   44-47 RawTraffic(31) Reserved(30:28) FlowLabel(27:8) HopLimit(7:0)
//   48    TClass
//   49    Reversible(7) NumbPath(6:0)
//   50-51 P_Key
//   52-53 QoSClass(15:4) SL(3:0)
//   54    MTUSelector(7:6) MTU(5:0)
//   55    RateSelector(7:6) Rate(5:0)
//   56    PacketLifeTimeSelector(7:6) PacketLifeTime(5:0)
//   57    Preference
//   58-63 Reserved
// ServiceID took the place of two 32-bit Reserved fields, so it owns
// component bits 0 and 1 (OpenSM: IB_PR_COMPMASK_SERVICEID_MSB/LSB).
namespace path_comp {
inline constexpr std::uint64_t service_id_msb = 1ull << 0;
inline constexpr std::uint64_t service_id_lsb = 1ull << 1;
inline constexpr std::uint64_t service_id = service_id_msb | service_id_lsb;
inline constexpr std::uint64_t dgid = 1ull << 2;
inline constexpr std::uint64_t sgid = 1ull << 3;
inline constexpr std::uint64_t dlid = 1ull << 4;
inline constexpr std::uint64_t slid = 1ull << 5;
inline constexpr std::uint64_t raw_traffic = 1ull << 6;
inline constexpr std::uint64_t reserved = 1ull << 7;
inline constexpr std::uint64_t flow_label = 1ull << 8;
inline constexpr std::uint64_t hop_limit = 1ull << 9;
inline constexpr std::uint64_t tclass = 1ull << 10;
inline constexpr std::uint64_t reversible = 1ull << 11;
inline constexpr std::uint64_t numb_path = 1ull << 12;
inline constexpr std::uint64_t p_key = 1ull << 13;
inline constexpr std::uint64_t qos_class = 1ull << 14;
inline constexpr std::uint64_t sl = 1ull << 15;
inline constexpr std::uint64_t mtu_selector = 1ull << 16;
inline constexpr std::uint64_t mtu = 1ull << 17;
inline constexpr std::uint64_t rate_selector = 1ull << 18;
inline constexpr std::uint64_t rate = 1ull << 19;
inline constexpr std::uint64_t packet_life_time_selector = 1ull << 20;
inline constexpr std::uint64_t packet_life_time = 1ull << 21;
inline constexpr std::uint64_t preference = 1ull << 22;
}  // namespace path_comp

struct PathRecord {
    static constexpr std::size_t size = 64;
    static constexpr std::uint16_t attribute_id = sa_attr::path_record;

    std::uint64_t service_id = 0;
    Gid dgid{};
    Gid sgid{};
    std::uint16_t dlid = 0;
    std::uint16_t slid = 0;
    bool raw_traffic = false;
    std::uint32_t flow_label = 0;   // 20 bits
    std::uint8_t hop_limit = 0;
    std::uint8_t tclass = 0;
    bool reversible = false;
    std::uint8_t numb_path = 0;     // 7 bits
    std::uint16_t p_key = 0;
    std::uint16_t qos_class = 0;    // 12 bits
    std::uint8_t sl = 0;            // 4 bits
    Selector mtu_selector = Selector::greater_than;
    std::uint8_t mtu = 0;           // 6 bits
    Selector rate_selector = Selector::greater_than;
    std::uint8_t rate = 0;          // 6 bits
    Selector packet_life_time_selector = Selector::greater_than;
    std::uint8_t packet_life_time = 0;  // 6 bits
    std::uint8_t preference = 0;

    bool fields_in_range() const;
    void write_to(std::uint8_t* p) const;
    static PathRecord read_from(const std::uint8_t* p);
    bool operator==(const PathRecord&) const = default;
};

struct PathQuery {
    PathRecord record;
    std::uint64_t component_mask = 0;

    PathQuery& set_service_id(std::uint64_t v);
    PathQuery& set_dgid(const Gid& v);
    PathQuery& set_sgid(const Gid& v);
    PathQuery& set_dlid(std::uint16_t v);
    PathQuery& set_slid(std::uint16_t v);
    PathQuery& set_raw_traffic(bool v);
    PathQuery& set_flow_label(std::uint32_t v);
    PathQuery& set_hop_limit(std::uint8_t v);
    PathQuery& set_tclass(std::uint8_t v);
    PathQuery& set_reversible(bool v);
    PathQuery& set_numb_path(std::uint8_t v);
    PathQuery& set_p_key(std::uint16_t v);
    PathQuery& set_qos_class(std::uint16_t v);
    PathQuery& set_sl(std::uint8_t v);
    PathQuery& set_mtu(Selector selector, std::uint8_t mtu);
    PathQuery& set_rate(Selector selector, std::uint8_t rate);
    PathQuery& set_packet_life_time(Selector selector, std::uint8_t v);
    PathQuery& set_preference(std::uint8_t v);

    expected<SaMad, ib::CodecError> request(std::uint8_t method, std::uint64_t transaction_id) const {
        return make_sa_request(method, transaction_id, record, component_mask);
    }
};

}  // namespace ipoibd::sa
