// The IB connection manager's messages (IBA vol. 1 ch. 12.6): management
// class 0x07 (CommunicationManagement), class version 2, method Send, one
// attribute per message, each laid out in the 232 bytes after the MAD
// header. A codec and nothing else: the CM engine (issue 21) and the
// IPoIB-CM layer build on it.
//
// Layouts, offsets into the MAD data (add 24 for the MAD), big-endian;
// "byte[bit]" counts bits from the most significant (IBA's tables):
//   REQ  0 local comm ID, 8 service ID, 16 local CA GUID, 28 local Q_Key,
//        32 local QPN:24, 35 responder resources, 36 local EECN:24,
//        39 initiator depth, 40 remote EECN:24, 43 remote CM response
//        timeout:5 / transport service type:2 / end-to-end flow control:1,
//        44 starting PSN:24, 47 local CM response timeout:5 / retry count:3,
//        48 P_Key, 50 path MTU:4 / RDC exists:1 / RNR retry count:3,
//        51 max CM retries:4 / SRQ:1 / extended transport type:3,
//        52-95 primary path, 96-139 alternate path, 139[5] SAP supported,
//        140 private data (92)
//   path 0 local LID, 2 remote LID, 4 local GID, 20 remote GID, 36 flow
//        label:20, 39[2] packet rate:6, 40 traffic class, 41 hop limit,
//        42 SL:4 / subnet local:1, 43 local ACK timeout:5
//   MRA  0 local, 4 remote comm ID, 8[0] message MRAed:2, 9[0] service
//        timeout:5, 10 private data (222)
//   REJ  0 local, 4 remote comm ID, 8[0] message rejected:2, 9[0] reject
//        info length:7, 10 reason, 12 ARI (72), 84 private data (148)
//   REP  0 local, 4 remote comm ID, 8 local Q_Key, 12 local QPN:24, 16 local
//        EECN:24, 20 starting PSN:24, 24 responder resources, 25 initiator
//        depth, 26 target ACK delay:5 / failover accepted:2 / end-to-end
//        flow control:1, 27 RNR retry count:3 / SRQ:1, 28 local CA GUID,
//        36 private data (196)
//   RTU  0 local, 4 remote comm ID, 8 private data (224)
//   DREQ 0 local, 4 remote comm ID, 8 remote QPN/EECN:24, 12 private (220)
//   DREP 0 local, 4 remote comm ID, 8 private data (224)
//   LAP  0 local, 4 remote comm ID, 12 remote QPN:24, 15[0] remote CM
//        response timeout:5, 20-63 alternate path (LAP order), 64 private (168)
//   APR  0 local, 4 remote comm ID, 8 additional info length, 9 AP status,
//        12 additional info (72), 84 private data (148)
// Reserved bits are sent as zero and ignored on receipt (IBA 13.4.1). A
// decode refuses what no field may hold: another class, class version or
// method, an unknown attribute, a reserved transport service type, a path
// MTU code outside 1..5, a REJ's info length over 72.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "common/byte_io.h"
#include "common/expected.h"
#include "transport/wire/headers.h"
#include "transport/wire/mad.h"

namespace ipoibd::cm {

inline constexpr std::uint8_t kClassVersion = 2;

namespace attr {
inline constexpr std::uint16_t req = 0x0010;
inline constexpr std::uint16_t mra = 0x0011;
inline constexpr std::uint16_t rej = 0x0012;
inline constexpr std::uint16_t rep = 0x0013;
inline constexpr std::uint16_t rtu = 0x0014;
inline constexpr std::uint16_t dreq = 0x0015;
inline constexpr std::uint16_t drep = 0x0016;
inline constexpr std::uint16_t sidr_req = 0x0017;
inline constexpr std::uint16_t sidr_rep = 0x0018;
inline constexpr std::uint16_t lap = 0x0019;
inline constexpr std::uint16_t apr = 0x001A;
}  // namespace attr

// Which message a REJ or MRA answers.
enum class MessageKind : std::uint8_t { req = 0, rep = 1, other = 2 };

// REJ reasons (IBA table 106-ish list of ch. 12.6.7), the ones this project
// sends or reads by name.
namespace rej {
inline constexpr std::uint16_t no_qp = 1;
inline constexpr std::uint16_t no_resources = 3;
inline constexpr std::uint16_t timeout = 4;
inline constexpr std::uint16_t unsupported_request = 5;
inline constexpr std::uint16_t invalid_comm_id = 6;
inline constexpr std::uint16_t invalid_service_id = 8;
inline constexpr std::uint16_t invalid_transport_type = 9;
inline constexpr std::uint16_t stale_connection = 10;
inline constexpr std::uint16_t invalid_gid = 12;
inline constexpr std::uint16_t invalid_lid = 13;
inline constexpr std::uint16_t invalid_path_mtu = 26;
inline constexpr std::uint16_t consumer_reject = 28;
inline constexpr std::uint16_t invalid_class_version = 31;
}  // namespace rej

// AP status of an APR (ib_cm_apr_status order).
namespace apr_status {
inline constexpr std::uint8_t success = 0;
inline constexpr std::uint8_t invalid_comm_id = 1;
inline constexpr std::uint8_t unsupported = 2;
inline constexpr std::uint8_t rejected = 3;
}  // namespace apr_status

struct Path {
    std::uint16_t local_lid = 0;
    std::uint16_t remote_lid = 0;
    ib::Gid local_gid{};
    ib::Gid remote_gid{};
    std::uint32_t flow_label = 0;  // 20 bits
    std::uint8_t packet_rate = 0;  // 6 bits (IBA rate code)
    std::uint8_t traffic_class = 0;
    std::uint8_t hop_limit = 0;
    std::uint8_t sl = 0;           // 4 bits
    bool subnet_local = true;
    std::uint8_t local_ack_timeout = 0;  // 5 bits
    bool operator==(const Path&) const = default;
};

struct Req {
    std::uint32_t local_comm_id = 0;
    std::uint64_t service_id = 0;
    std::uint64_t local_ca_guid = 0;
    std::uint32_t local_qkey = 0;
    std::uint32_t local_qpn = 0;  // 24 bits
    std::uint8_t responder_resources = 0;
    std::uint32_t local_eecn = 0;
    std::uint8_t initiator_depth = 0;
    std::uint32_t remote_eecn = 0;
    std::uint8_t remote_cm_response_timeout = 0;  // 5 bits
    std::uint8_t transport_service_type = 0;      // 0 RC, 1 UC, 2 RD (3 reserved)
    bool end_to_end_flow_control = false;
    std::uint32_t starting_psn = 0;
    std::uint8_t local_cm_response_timeout = 0;   // 5 bits
    std::uint8_t retry_count = 0;                 // 3 bits
    std::uint16_t pkey = 0;
    std::uint8_t path_mtu = 0;                    // 4 bits: 1 = 256 .. 5 = 4096
    bool rdc_exists = false;
    std::uint8_t rnr_retry_count = 0;             // 3 bits
    std::uint8_t max_cm_retries = 0;              // 4 bits
    bool srq = false;
    std::uint8_t extended_transport_type = 0;     // 3 bits
    Path primary;
    std::optional<Path> alternate;                // all zero on the wire: none
    bool sap_supported = false;
    std::array<std::uint8_t, 92> private_data{};
    bool operator==(const Req&) const = default;
};

struct Mra {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    MessageKind message_mraed = MessageKind::req;
    std::uint8_t service_timeout = 0;  // 5 bits
    std::array<std::uint8_t, 222> private_data{};
    bool operator==(const Mra&) const = default;
};

struct Rej {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    MessageKind message_rejected = MessageKind::req;
    std::uint8_t reject_info_length = 0;  // 0..72
    std::uint16_t reason = 0;
    std::array<std::uint8_t, 72> ari{};
    std::array<std::uint8_t, 148> private_data{};
    bool operator==(const Rej&) const = default;
};

struct Rep {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint32_t local_qkey = 0;
    std::uint32_t local_qpn = 0;
    std::uint32_t local_eecn = 0;
    std::uint32_t starting_psn = 0;
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    std::uint8_t target_ack_delay = 0;   // 5 bits
    std::uint8_t failover_accepted = 0;  // 2 bits
    bool end_to_end_flow_control = false;
    std::uint8_t rnr_retry_count = 0;    // 3 bits
    bool srq = false;
    std::uint64_t local_ca_guid = 0;
    std::array<std::uint8_t, 196> private_data{};
    bool operator==(const Rep&) const = default;
};

struct Rtu {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::array<std::uint8_t, 224> private_data{};
    bool operator==(const Rtu&) const = default;
};

struct Dreq {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint32_t remote_qpn = 0;  // 24 bits: the receiver's QP of the connection
    std::array<std::uint8_t, 220> private_data{};
    bool operator==(const Dreq&) const = default;
};

struct Drep {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::array<std::uint8_t, 224> private_data{};
    bool operator==(const Drep&) const = default;
};

// A LAP is decoded only as far as answering it: this CM has no path
// migration, and answers every LAP with an APR "unsupported".
struct Lap {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint32_t remote_qpn = 0;
    std::uint8_t remote_cm_response_timeout = 0;
    bool operator==(const Lap&) const = default;
};

struct Apr {
    std::uint32_t local_comm_id = 0;
    std::uint32_t remote_comm_id = 0;
    std::uint8_t additional_info_length = 0;  // 0..72
    std::uint8_t ap_status = 0;
    std::array<std::uint8_t, 72> additional_info{};
    std::array<std::uint8_t, 148> private_data{};
    bool operator==(const Apr&) const = default;
};

using Message = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, Lap, Apr>;

// The attribute ID of a message, and a short name ("REQ").
std::uint16_t attribute_of(const Message& m);
const char* name_of(const Message& m);

enum class DecodeError : std::uint8_t {
    too_short,                // under 256 bytes
    not_cm,                   // another base version or management class
    bad_class_version,        // CM class version other than 2
    bad_method,               // not Send
    unknown_attribute,        // SIDR and reserved IDs included: not handled here
    bad_transport_type,       // REQ transport service type 3 (reserved)
    bad_path_mtu,             // REQ path MTU code outside 1..5
    bad_info_length,          // REJ reject info or APR additional info over 72 bytes
    bad_message_kind,         // REJ/MRA "message" code 3 (reserved)
    count_
};
inline constexpr std::size_t kDecodeErrorCount = static_cast<std::size_t>(DecodeError::count_);
const char* to_string(DecodeError e);

struct Decoded {
    std::uint64_t transaction_id = 0;
    Message message;
};

// The 256-byte MAD: header (base version 1, class 0x07, version 2, method
// Send, `tid`, the message's attribute ID) and the message.
std::array<std::uint8_t, ib::kMadSize> encode(const Message& m, std::uint64_t tid);
expected<Decoded, DecodeError> decode(bytes mad);

// The IPoIB-CM ServiceID of a UD QPN as Linux uses it (RFC 4755's figure
// says 0x01 in the top octet; Linux and this project 0x10).
inline constexpr std::uint64_t kIpoibServiceIdBase = 0x1000000000000000ULL;
inline std::uint64_t ipoib_service_id(std::uint32_t ud_qpn) { return kIpoibServiceIdBase | (ud_qpn & 0xFFFFFF); }

// IPoIB-CM private data (REQ and REP): a reserved octet, the sender's UD
// QPN (24 bits), its receive size (32 bits, the 4-byte header included).
struct IpoibCmData {
    std::uint32_t ud_qpn = 0;
    std::uint32_t receive_size = 0;
    bool operator==(const IpoibCmData&) const = default;
};
void write_ipoib_data(std::span<std::uint8_t> private_data, const IpoibCmData& d);
IpoibCmData read_ipoib_data(bytes private_data);

}  // namespace ipoibd::cm
