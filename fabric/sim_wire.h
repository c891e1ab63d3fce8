// The ibsim <-> libumad2sim socket protocol: the codecs an ibsim-compatible
// server (ibfabricd) needs to serve clients running under
// LD_PRELOAD=libumad2sim.so (OpenSM, smpquery, saquery, ...). No sockets
// here: bytes in, values out, and back.
//
// What the protocol is. The shim replaces the kernel's umad devices with two
// AF_UNIX datagram sockets per process, in the abstract namespace, named
// from a base name B ($IBSIM_SOCKNAME, "sim" when unset):
//   - a control socket: 80-byte CtlMessages, one request and one reply at a
//     time (CONNECT hands out a client slot 0..9, then the client fetches
//     its node's vendor data, NodeInfo, PortInfo and P_Keys, flips IsSM and
//     finally DISCONNECTs);
//   - a data socket: 288-byte SimRequests, each carrying one MAD (at most
//     256 bytes) with the LIDs and QPs the umad address would hold.
// The server binds B:ctl and one data socket B:out<slot> per slot; a client
// binds B:ctl<pid> and B:in<pid> and connect()s them to the server's.
//
// Byte order. The control channel is in the host order of the machines the
// shim runs on, which is little-endian on every platform it is used on (the
// measurements were on x86-64): this codec reads and writes it explicitly
// little-endian, so it gives the same bytes whatever the server's host. The
// data channel's header is big-endian apart from the LIDs, which are a
// network-order u16 held in a host u32 (on a little-endian host: the LID
// big-endian in bytes 0-1, zero in bytes 2-3).
//
// Sources (facts only; no code or prose taken from ibsim, which is GPL/BSD):
//   - ../shared/reference/ibsim-protocol.md (beside the project): sockets
//     and names (section 1), control messages and their payloads (3), the data message's byte
//     orders and the measured example (4), the TID rewrite (4, 7), the limits
//     (8) and a server's checklist (10). Measured against Debian's ibsim and
//     libumad2sim 0.10.
//   - linux-rdma/ibsim include/ibsim.h (unchanged from 0.10 to 0.12): the
//     structs sim_ctl, sim_client_info, sim_vendor, sim_port and
//     sim_request, the SIM_CTL_* type codes, SIM_MAGIC, SIM_CTL_MAX_DATA,
//     IBSIM_MAX_CLIENTS and SIM_BASENAME, from which the sizes below follow.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/byte_io.h"
#include "common/expected.h"

namespace ipoibd::fabric::sim {

// ---------------------------------------------------------------------------
// Limits shared by both channels

inline constexpr std::size_t kMaxClients = 10;  // slots 0..9 (IBSIM_MAX_CLIENTS)
inline constexpr std::string_view kDefaultSocketBaseName = "sim";
inline constexpr const char* kSocketBaseNameEnv = "IBSIM_SOCKNAME";

// ---------------------------------------------------------------------------
// Control messages, 80 bytes each way, little-endian (see above)
//   0-3   magic 0xDEADBEEF (bytes ef be ad de)
//   4-7   client_id: 0 before CONNECT, the slot afterwards
//   8-11  type (CtlType)
//   12-15 len: how many bytes of data are meaningful (at most 64)
//   16-79 data
inline constexpr std::size_t kCtlMessageSize = 80;
inline constexpr std::size_t kCtlDataSize = 64;
inline constexpr std::uint32_t kCtlMagic = 0xDEADBEEF;

namespace ctl_offset {
inline constexpr std::size_t magic = 0;
inline constexpr std::size_t client_id = 4;
inline constexpr std::size_t type = 8;
inline constexpr std::size_t len = 12;
inline constexpr std::size_t data = 16;
}  // namespace ctl_offset
static_assert(ctl_offset::data + kCtlDataSize == kCtlMessageSize);

// A reply carries the request's type, or error to refuse it (the client
// then gives up). GET_PORT, GET_GID and GET_GUID are never sent by
// libumad2sim 0.10.
enum class CtlType : std::uint32_t {
    error = 0,
    connect = 1,
    disconnect = 2,
    get_port = 3,
    get_vendor = 4,
    get_gid = 5,
    get_guid = 6,
    get_nodeinfo = 7,
    get_portinfo = 8,
    set_issm = 9,
    get_pkeys = 10,
};
inline constexpr CtlType kLastCtlType = CtlType::get_pkeys;
// "CONNECT", "GET_VENDOR", ... as the protocol names them; "unknown" for
// values outside the enum.
const char* to_string(CtlType t);
constexpr bool is_known(CtlType t) { return t <= kLastCtlType; }

// The len each type carries (reference section 3): the client copies back
// this many bytes of the reply's data.
constexpr std::size_t ctl_payload_size(CtlType t) {
    switch (t) {
        case CtlType::connect: return 44;       // ClientInfo
        case CtlType::get_port: return 4;       // GetPortReply
        case CtlType::get_vendor: return 24;    // Vendor
        case CtlType::get_gid: return 16;       // GID prefix, then node GUID
        case CtlType::get_guid: return 8;       // node GUID
        case CtlType::get_nodeinfo: return 64;  // NodeInfo, IBA wire format
        case CtlType::get_portinfo: return 64;  // PortInfo, IBA wire format
        case CtlType::set_issm: return 4;       // u32 0 or 1
        case CtlType::get_pkeys: return 64;     // 32 big-endian P_Keys
        case CtlType::error:
        case CtlType::disconnect: return 0;
    }
    return 0;
}

struct CtlMessage {
    static constexpr std::size_t size = kCtlMessageSize;

    std::uint32_t client_id = 0;
    CtlType type = CtlType::error;
    std::uint32_t len = 0;
    std::array<std::uint8_t, kCtlDataSize> data{};  // all 64 bytes, meaningful or not

    bool operator==(const CtlMessage&) const = default;
};
using CtlBytes = std::array<std::uint8_t, kCtlMessageSize>;

enum class CtlError : std::uint8_t {
    wrong_size,    // not exactly 80 bytes
    bad_magic,     // not 0xDEADBEEF (ibsim drops these without a reply)
    unknown_type,  // above GET_PKEYS
    bad_length,    // len above 64
};
inline constexpr CtlError kLastCtlError = CtlError::bad_length;
const char* to_string(CtlError e);

// Length first, then magic, type and len. Every byte is kept: encode() of a
// parsed message gives back the same 80 bytes.
expected<CtlMessage, CtlError> parse_ctl(bytes message);
// Refuses what parse_ctl() would: a type outside the enum, len above 64.
expected<CtlBytes, CtlError> encode_ctl(const CtlMessage& m);

// ---------------------------------------------------------------------------
// Control payloads. The put_* functions set the message's type and len,
// zero its data and write the payload; the read_* functions check type and
// len first (len must cover the payload) and read it.

enum class PayloadError : std::uint8_t {
    wrong_type,           // the message's type does not carry this payload
    short_payload,        // len is smaller than the payload
    nodeid_too_long,      // encode: more than 31 characters
    nodeid_has_nul,       // encode: a NUL inside the name would end it early
    nodeid_unterminated,  // decode: no NUL within the 32 bytes
    nodeid_not_printable, // a byte outside printable ASCII (0x20..0x7E): it would become a NodeDescription and log text
    bad_issm_value,       // SET_ISSM: neither 0 nor 1
};
inline constexpr PayloadError kLastPayloadError = PayloadError::bad_issm_value;
const char* to_string(PayloadError e);

// CONNECT, both ways (sim_client_info), 44 bytes
//   0-3 id      request: the client's pid (its UDP port in remote mode);
//               reply: the slot 0..9
//   4-7 qp      0 from libumad2sim; echoed
//   8-11 issm   1 when $SIM_SET_ISSM is set; echoed
//   12-43 nodeid  NUL-terminated; request: $SIM_HOST, empty for the default
//               node; reply: the name of the node attached
namespace client_info_offset {
inline constexpr std::size_t id = 0;
inline constexpr std::size_t qp = 4;
inline constexpr std::size_t issm = 8;
inline constexpr std::size_t nodeid = 12;
}  // namespace client_info_offset

struct ClientInfo {
    static constexpr std::size_t size = 44;
    static constexpr std::size_t nodeid_size = 32;
    static constexpr std::size_t max_nodeid_length = nodeid_size - 1;  // room for the NUL

    std::uint32_t id = 0;
    std::uint32_t qp = 0;
    std::uint32_t issm = 0;  // kept as sent: ibsim treats any non-zero as set
    std::string nodeid;      // the bytes before the first NUL

    bool operator==(const ClientInfo&) const = default;
};
static_assert(client_info_offset::nodeid + ClientInfo::nodeid_size == ClientInfo::size);
static_assert(ClientInfo::size == ctl_payload_size(CtlType::connect) && ClientInfo::size <= kCtlDataSize);

// Whether a node name is one a client may give: printable ASCII, at most
// 31 characters (what put_client_info and read_client_info accept).
bool is_valid_nodeid(std::string_view nodeid);
expected<void, PayloadError> put_client_info(const ClientInfo& info, CtlMessage& m);
expected<ClientInfo, PayloadError> read_client_info(const CtlMessage& m);

// GET_VENDOR reply (sim_vendor), 24 bytes: a u64 after three u32s, so 4
// bytes of alignment padding (zero when written, ignored when read).
//   0-3 vendor_id  4-7 vendor_part_id  8-11 hw_ver  12-15 padding  16-23 fw_ver
// ibsim fills the first three from NodeInfo and sends fw_ver 1.
namespace vendor_offset {
inline constexpr std::size_t vendor_id = 0;
inline constexpr std::size_t vendor_part_id = 4;
inline constexpr std::size_t hw_ver = 8;
inline constexpr std::size_t padding = 12;
inline constexpr std::size_t fw_ver = 16;
}  // namespace vendor_offset

struct Vendor {
    static constexpr std::size_t size = 24;

    std::uint32_t vendor_id = 0;
    std::uint32_t vendor_part_id = 0;
    std::uint32_t hw_ver = 0;
    std::uint64_t fw_ver = 0;

    bool operator==(const Vendor&) const = default;
};
static_assert(vendor_offset::fw_ver + sizeof(std::uint64_t) == Vendor::size);
static_assert(Vendor::size == ctl_payload_size(CtlType::get_vendor));

void put_vendor(const Vendor& v, CtlMessage& m);
expected<Vendor, PayloadError> read_vendor(const CtlMessage& m);

// GET_PORT reply (sim_port), 4 bytes: 0-1 LID, 2 PortState, 3 padding.
namespace get_port_offset {
inline constexpr std::size_t lid = 0;
inline constexpr std::size_t port_state = 2;
}  // namespace get_port_offset

struct GetPortReply {
    static constexpr std::size_t size = 4;

    std::uint16_t lid = 0;
    std::uint8_t port_state = 0;  // IBA PortState: 4 Active

    bool operator==(const GetPortReply&) const = default;
};
static_assert(GetPortReply::size == ctl_payload_size(CtlType::get_port));

void put_get_port_reply(const GetPortReply& p, CtlMessage& m);
expected<GetPortReply, PayloadError> read_get_port_reply(const CtlMessage& m);

// SET_ISSM request (and its echo), 4 bytes: a u32, 1 to set IsSM on the
// client's port, 0 to clear it. libumad2sim sends nothing else; other
// values are refused rather than read as "set".
inline constexpr std::size_t kSetIssmSize = 4;
static_assert(kSetIssmSize == ctl_payload_size(CtlType::set_issm));

void put_set_issm(bool issm, CtlMessage& m);
expected<bool, PayloadError> read_set_issm(const CtlMessage& m);

// ---------------------------------------------------------------------------
// Data messages (sim_request), 288 bytes each way
//   0-3    dlid    a network-order u16 in a host u32: 0-1 the LID
//                  big-endian, 2-3 zero (ignored on parse)
//   4-7    slid    the same; 0 from a client means "fill in my LID"
//   8-11   dqp     big-endian
//   12-15  sqp     big-endian
//   16-19  status  big-endian: 0, or 110 (ETIMEDOUT) for a request the
//                  server could not deliver, sent back to its sender
//   20-23  padding (alignment of the u64; garbage in ibsim's replies)
//   24-31  length  big-endian u64: valid MAD bytes, at most 256
//   32-287 mad     bytes past `length` are uninitialised
// The client copies at most 224 MAD bytes to the application (its buffer is
// this struct's size less the 64-byte umad header): what matters in a MAD
// sent to a client must lie in its first 224 bytes.
inline constexpr std::size_t kSimRequestSize = 288;
inline constexpr std::size_t kMadAreaSize = 256;
inline constexpr std::size_t kUmadHeaderSize = 64;
inline constexpr std::size_t kClientReceiveLimit = kSimRequestSize - kUmadHeaderSize;
inline constexpr std::uint32_t kStatusOk = 0;
inline constexpr std::uint32_t kStatusTimedOut = 110;  // ETIMEDOUT on Linux

namespace request_offset {
inline constexpr std::size_t dlid = 0;
inline constexpr std::size_t slid = 4;
inline constexpr std::size_t dqp = 8;
inline constexpr std::size_t sqp = 12;
inline constexpr std::size_t status = 16;
inline constexpr std::size_t padding = 20;
inline constexpr std::size_t length = 24;
inline constexpr std::size_t mad = 32;
}  // namespace request_offset
inline constexpr std::size_t kLidFieldSize = 4;  // dlid, slid: a u32 of which 2 bytes hold the LID
inline constexpr std::size_t kRequestPaddingSize = 4;
static_assert(request_offset::mad + kMadAreaSize == kSimRequestSize);
static_assert(kClientReceiveLimit == 224);

struct SimRequest {
    static constexpr std::size_t size = kSimRequestSize;

    std::uint16_t dlid = 0;  // 0xFFFF: directed route
    std::uint16_t slid = 0;
    std::uint32_t dqp = 0;
    std::uint32_t sqp = 0;
    std::uint32_t status = kStatusOk;
    std::uint64_t length = 0;
    std::array<std::uint8_t, kMadAreaSize> mad{};  // zero past `length` once parsed

    // The first `length` bytes of mad (all of it if length is too large).
    bytes mad_bytes() const;
    bool operator==(const SimRequest&) const = default;
};
using SimRequestBytes = std::array<std::uint8_t, kSimRequestSize>;

enum class RequestError : std::uint8_t {
    wrong_size,  // not exactly 288 bytes (the shim crashes on a short one)
    bad_length,  // length above 256
};
inline constexpr RequestError kLastRequestError = RequestError::bad_length;
const char* to_string(RequestError e);

// Length first, then `length`. Ignores the padding and bytes 2-3 of the LID
// fields, and zeroes the MAD past `length` (those bytes are not trusted).
expected<SimRequest, RequestError> parse_request(bytes datagram);
// Refuses length above 256. Writes zero padding, zero LID bytes 2-3, and
// zeros the MAD past `length`.
expected<SimRequestBytes, RequestError> encode_request(const SimRequest& r);

// ---------------------------------------------------------------------------
// TransactionID bits the shim and the server rewrite
//   63..48  the client slot: the server stamps it into requests and sends
//           responses to the slot it finds there
//   47..32  the umad agent id: the shim stamps it into requests and picks
//           the receiving agent of a response from it
//   31..0   the application's; clients match responses on these
inline constexpr unsigned kTidSlotShift = 48;
inline constexpr unsigned kTidAgentShift = 32;
inline constexpr std::uint64_t kTidSlotMask = 0xFFFF'0000'0000'0000ULL;
inline constexpr std::uint64_t kTidAgentMask = 0x0000'FFFF'0000'0000ULL;

constexpr std::uint64_t with_slot(std::uint64_t tid, std::uint16_t slot) {
    return (tid & ~kTidSlotMask) | (std::uint64_t{slot} << kTidSlotShift);
}
constexpr std::uint16_t slot_of(std::uint64_t tid) { return static_cast<std::uint16_t>(tid >> kTidSlotShift); }
constexpr std::uint64_t with_agent(std::uint64_t tid, std::uint16_t agent) {
    return (tid & ~kTidAgentMask) | (std::uint64_t{agent} << kTidAgentShift);
}
constexpr std::uint16_t agent_of(std::uint64_t tid) {
    return static_cast<std::uint16_t>((tid & kTidAgentMask) >> kTidAgentShift);
}

// ---------------------------------------------------------------------------
// Socket names. B is the base name; <slot> and <pid> are in decimal.
//   B:ctl        the server's control socket
//   B:out<slot>  the server's data socket for a slot
//   B:ctl<pid>   a client's control socket (connected to B:ctl)
//   B:in<pid>    a client's data socket (connected to B:out<slot>)

// $IBSIM_SOCKNAME's value, or "sim" when it is unset (null). A set but
// empty value is used as is, as both ibsim and the shim do.
std::string socket_base_name(const char* env_value);
std::string server_ctl_name(std::string_view base);
std::string server_out_name(std::string_view base, unsigned slot);
std::string client_ctl_name(std::string_view base, std::uint32_t pid);
std::string client_in_name(std::string_view base, std::uint32_t pid);

// The abstract-namespace address of a name: the sun_path bytes
// "\0" + name + "\0". The trailing NUL is part of the name: an address
// without it is another socket (the client's connect() is then refused).
// The socket call's addrlen is abstract_address_length(name): the 2-byte
// sun_family, then those bytes. A name longer than kMaxAbstractNameLength
// does not fit sun_path: the caller must refuse it.
inline constexpr std::size_t kSunFamilySize = 2;
inline constexpr std::size_t kSunPathSize = 108;
inline constexpr std::size_t kMaxAbstractNameLength = kSunPathSize - 2;  // the two NULs
std::vector<std::uint8_t> abstract_address(std::string_view name);
std::size_t abstract_address_length(std::string_view name);

}  // namespace ipoibd::fabric::sim
