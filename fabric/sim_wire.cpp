#include "fabric/sim_wire.h"

#include <sys/un.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace ipoibd::fabric::sim {

static_assert(offsetof(sockaddr_un, sun_path) == kSunFamilySize);
static_assert(sizeof(sockaddr_un{}.sun_path) == kSunPathSize);

// ---------------------------------------------------------------------------
// Control messages

const char* to_string(CtlType t) {
    switch (t) {
        case CtlType::error: return "ERROR";
        case CtlType::connect: return "CONNECT";
        case CtlType::disconnect: return "DISCONNECT";
        case CtlType::get_port: return "GET_PORT";
        case CtlType::get_vendor: return "GET_VENDOR";
        case CtlType::get_gid: return "GET_GID";
        case CtlType::get_guid: return "GET_GUID";
        case CtlType::get_nodeinfo: return "GET_NODEINFO";
        case CtlType::get_portinfo: return "GET_PORTINFO";
        case CtlType::set_issm: return "SET_ISSM";
        case CtlType::get_pkeys: return "GET_PKEYS";
    }
    return "unknown";
}

const char* to_string(CtlError e) {
    switch (e) {
        case CtlError::wrong_size: return "control message is not 80 bytes";
        case CtlError::bad_magic: return "control message magic is not 0xDEADBEEF";
        case CtlError::unknown_type: return "control message type is unknown";
        case CtlError::bad_length: return "control message len is above 64";
    }
    return "unknown";
}

expected<CtlMessage, CtlError> parse_ctl(bytes message) {
    if (message.size() != kCtlMessageSize) return unexpected(CtlError::wrong_size);
    const std::uint8_t* p = message.data();
    if (load_le32(p + ctl_offset::magic) != kCtlMagic) return unexpected(CtlError::bad_magic);
    CtlMessage m;
    m.type = static_cast<CtlType>(load_le32(p + ctl_offset::type));
    if (!is_known(m.type)) return unexpected(CtlError::unknown_type);
    m.len = load_le32(p + ctl_offset::len);
    if (m.len > kCtlDataSize) return unexpected(CtlError::bad_length);
    m.client_id = load_le32(p + ctl_offset::client_id);
    std::memcpy(m.data.data(), p + ctl_offset::data, kCtlDataSize);
    return m;
}

expected<CtlBytes, CtlError> encode_ctl(const CtlMessage& m) {
    if (!is_known(m.type)) return unexpected(CtlError::unknown_type);
    if (m.len > kCtlDataSize) return unexpected(CtlError::bad_length);
    CtlBytes out{};
    std::uint8_t* p = out.data();
    store_le32(p + ctl_offset::magic, kCtlMagic);
    store_le32(p + ctl_offset::client_id, m.client_id);
    store_le32(p + ctl_offset::type, static_cast<std::uint32_t>(m.type));
    store_le32(p + ctl_offset::len, m.len);
    std::memcpy(p + ctl_offset::data, m.data.data(), kCtlDataSize);
    return out;
}

// ---------------------------------------------------------------------------
// Control payloads

const char* to_string(PayloadError e) {
    switch (e) {
        case PayloadError::wrong_type: return "control message type does not carry this payload";
        case PayloadError::short_payload: return "control message len is shorter than the payload";
        case PayloadError::nodeid_too_long: return "nodeid is longer than 31 characters";
        case PayloadError::nodeid_has_nul: return "nodeid holds a NUL";
        case PayloadError::nodeid_unterminated: return "nodeid has no NUL within 32 bytes";
        case PayloadError::nodeid_not_printable: return "nodeid holds a byte outside printable ASCII";
        case PayloadError::bad_issm_value: return "SET_ISSM value is neither 0 nor 1";
    }
    return "unknown";
}

namespace {

// Sets the type and the type's len and zeroes the data; returns where the
// payload goes.
std::uint8_t* start_payload(CtlType type, CtlMessage& m) {
    m.type = type;
    m.len = static_cast<std::uint32_t>(ctl_payload_size(type));
    m.data.fill(0);
    return m.data.data();
}

// The payload of a message of `type`, checked to be at least `size` long.
expected<const std::uint8_t*, PayloadError> payload_of(const CtlMessage& m, CtlType type, std::size_t size) {
    if (m.type != type) return unexpected(PayloadError::wrong_type);
    if (m.len < size) return unexpected(PayloadError::short_payload);
    return m.data.data();
}

}  // namespace

namespace {
bool printable(std::uint8_t c) { return c >= 0x20 && c <= 0x7E; }
bool all_printable(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return printable(static_cast<std::uint8_t>(c)); });
}
}  // namespace

bool is_valid_nodeid(std::string_view nodeid) {
    return nodeid.size() <= ClientInfo::max_nodeid_length && all_printable(nodeid);
}

expected<void, PayloadError> put_client_info(const ClientInfo& info, CtlMessage& m) {
    if (info.nodeid.size() > ClientInfo::max_nodeid_length) return unexpected(PayloadError::nodeid_too_long);
    if (info.nodeid.find('\0') != std::string::npos) return unexpected(PayloadError::nodeid_has_nul);
    if (!all_printable(info.nodeid)) return unexpected(PayloadError::nodeid_not_printable);
    std::uint8_t* p = start_payload(CtlType::connect, m);
    store_le32(p + client_info_offset::id, info.id);
    store_le32(p + client_info_offset::qp, info.qp);
    store_le32(p + client_info_offset::issm, info.issm);
    std::memcpy(p + client_info_offset::nodeid, info.nodeid.data(), info.nodeid.size());
    return {};
}

expected<ClientInfo, PayloadError> read_client_info(const CtlMessage& m) {
    auto p = payload_of(m, CtlType::connect, ClientInfo::size);
    if (!p) return unexpected(p.error());
    const std::uint8_t* name = *p + client_info_offset::nodeid;
    const std::uint8_t* name_end = name + ClientInfo::nodeid_size;
    const std::uint8_t* nul = std::find(name, name_end, std::uint8_t{0});
    if (nul == name_end) return unexpected(PayloadError::nodeid_unterminated);
    if (!std::all_of(name, nul, printable)) return unexpected(PayloadError::nodeid_not_printable);
    ClientInfo info;
    info.id = load_le32(*p + client_info_offset::id);
    info.qp = load_le32(*p + client_info_offset::qp);
    info.issm = load_le32(*p + client_info_offset::issm);
    info.nodeid.assign(name, nul);
    return info;
}

void put_vendor(const Vendor& v, CtlMessage& m) {
    std::uint8_t* p = start_payload(CtlType::get_vendor, m);
    store_le32(p + vendor_offset::vendor_id, v.vendor_id);
    store_le32(p + vendor_offset::vendor_part_id, v.vendor_part_id);
    store_le32(p + vendor_offset::hw_ver, v.hw_ver);
    store_le64(p + vendor_offset::fw_ver, v.fw_ver);
}

expected<Vendor, PayloadError> read_vendor(const CtlMessage& m) {
    auto p = payload_of(m, CtlType::get_vendor, Vendor::size);
    if (!p) return unexpected(p.error());
    Vendor v;
    v.vendor_id = load_le32(*p + vendor_offset::vendor_id);
    v.vendor_part_id = load_le32(*p + vendor_offset::vendor_part_id);
    v.hw_ver = load_le32(*p + vendor_offset::hw_ver);
    v.fw_ver = load_le64(*p + vendor_offset::fw_ver);
    return v;
}

void put_get_port_reply(const GetPortReply& r, CtlMessage& m) {
    std::uint8_t* p = start_payload(CtlType::get_port, m);
    store_le16(p + get_port_offset::lid, r.lid);
    p[get_port_offset::port_state] = r.port_state;
}

expected<GetPortReply, PayloadError> read_get_port_reply(const CtlMessage& m) {
    auto p = payload_of(m, CtlType::get_port, GetPortReply::size);
    if (!p) return unexpected(p.error());
    GetPortReply r;
    r.lid = load_le16(*p + get_port_offset::lid);
    r.port_state = (*p)[get_port_offset::port_state];
    return r;
}

void put_set_issm(bool issm, CtlMessage& m) {
    std::uint8_t* p = start_payload(CtlType::set_issm, m);
    store_le32(p, issm ? 1u : 0u);
}

expected<bool, PayloadError> read_set_issm(const CtlMessage& m) {
    auto p = payload_of(m, CtlType::set_issm, kSetIssmSize);
    if (!p) return unexpected(p.error());
    const std::uint32_t value = load_le32(*p);
    if (value > 1) return unexpected(PayloadError::bad_issm_value);
    return value == 1;
}

// ---------------------------------------------------------------------------
// Data messages

const char* to_string(RequestError e) {
    switch (e) {
        case RequestError::wrong_size: return "sim_request is not 288 bytes";
        case RequestError::bad_length: return "sim_request length is above 256";
    }
    return "unknown";
}

bytes SimRequest::mad_bytes() const {
    return bytes(mad).first(static_cast<std::size_t>(std::min<std::uint64_t>(length, kMadAreaSize)));
}

expected<SimRequest, RequestError> parse_request(bytes datagram) {
    if (datagram.size() != kSimRequestSize) return unexpected(RequestError::wrong_size);
    const std::uint8_t* p = datagram.data();
    SimRequest r;
    r.length = load_be64(p + request_offset::length);
    if (r.length > kMadAreaSize) return unexpected(RequestError::bad_length);
    r.dlid = load_be16(p + request_offset::dlid);
    r.slid = load_be16(p + request_offset::slid);
    r.dqp = load_be32(p + request_offset::dqp);
    r.sqp = load_be32(p + request_offset::sqp);
    r.status = load_be32(p + request_offset::status);
    std::memcpy(r.mad.data(), p + request_offset::mad, static_cast<std::size_t>(r.length));
    return r;
}

expected<SimRequestBytes, RequestError> encode_request(const SimRequest& r) {
    if (r.length > kMadAreaSize) return unexpected(RequestError::bad_length);
    SimRequestBytes out{};
    std::uint8_t* p = out.data();
    store_be16(p + request_offset::dlid, r.dlid);
    store_be16(p + request_offset::slid, r.slid);
    store_be32(p + request_offset::dqp, r.dqp);
    store_be32(p + request_offset::sqp, r.sqp);
    store_be32(p + request_offset::status, r.status);
    store_be64(p + request_offset::length, r.length);
    std::memcpy(p + request_offset::mad, r.mad.data(), static_cast<std::size_t>(r.length));
    return out;
}

// ---------------------------------------------------------------------------
// Socket names

std::string socket_base_name(const char* env_value) {
    return env_value != nullptr ? std::string(env_value) : std::string(kDefaultSocketBaseName);
}

namespace {
std::string suffixed(std::string_view base, std::string_view suffix) {
    std::string name(base);
    name += ':';
    name += suffix;
    return name;
}
}  // namespace

std::string server_ctl_name(std::string_view base) { return suffixed(base, "ctl"); }
std::string server_out_name(std::string_view base, unsigned slot) {
    return suffixed(base, "out" + std::to_string(slot));
}
std::string client_ctl_name(std::string_view base, std::uint32_t pid) {
    return suffixed(base, "ctl" + std::to_string(pid));
}
std::string client_in_name(std::string_view base, std::uint32_t pid) {
    return suffixed(base, "in" + std::to_string(pid));
}

std::vector<std::uint8_t> abstract_address(std::string_view name) {
    std::vector<std::uint8_t> path(name.size() + 2, 0);
    if (!name.empty()) std::memcpy(path.data() + 1, name.data(), name.size());
    return path;
}

std::size_t abstract_address_length(std::string_view name) { return kSunFamilySize + 1 + name.size() + 1; }

}  // namespace ipoibd::fabric::sim
