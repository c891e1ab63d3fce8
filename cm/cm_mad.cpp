#include "cm/cm_mad.h"

#include <algorithm>
#include <cstring>

namespace ipoibd::cm {

namespace {

using ib::kMadHeaderSize;

template <std::size_t N>
void copy_in(std::uint8_t* p, const std::array<std::uint8_t, N>& a) {
    std::memcpy(p, a.data(), N);
}
template <std::size_t N>
void copy_out(const std::uint8_t* p, std::array<std::uint8_t, N>& a) {
    std::memcpy(a.data(), p, N);
}

std::uint32_t be24(const std::uint8_t* p) { return load_be24(p); }
void put24(std::uint8_t* p, std::uint32_t v) { store_be24(p, v & 0xFFFFFF); }

// A path at `p` (44 bytes, the REQ's order).
void write_path(std::uint8_t* p, const Path& a) {
    store_be16(p, a.local_lid);
    store_be16(p + 2, a.remote_lid);
    std::memcpy(p + 4, a.local_gid.data(), 16);
    std::memcpy(p + 20, a.remote_gid.data(), 16);
    store_be32(p + 36, (a.flow_label & 0xFFFFF) << 12 | (a.packet_rate & 0x3F));
    p[40] = a.traffic_class;
    p[41] = a.hop_limit;
    p[42] = static_cast<std::uint8_t>((a.sl & 0xF) << 4 | (a.subnet_local ? 0x08 : 0));
    p[43] = static_cast<std::uint8_t>((a.local_ack_timeout & 0x1F) << 3);
}

Path read_path(const std::uint8_t* p) {
    Path a;
    a.local_lid = load_be16(p);
    a.remote_lid = load_be16(p + 2);
    std::memcpy(a.local_gid.data(), p + 4, 16);
    std::memcpy(a.remote_gid.data(), p + 20, 16);
    const std::uint32_t w = load_be32(p + 36);
    a.flow_label = w >> 12;
    a.packet_rate = static_cast<std::uint8_t>(w & 0x3F);
    a.traffic_class = p[40];
    a.hop_limit = p[41];
    a.sl = p[42] >> 4;
    a.subnet_local = (p[42] & 0x08) != 0;
    a.local_ack_timeout = p[43] >> 3;
    return a;
}

struct Encoder {
    std::uint8_t* d;  // the MAD data (after the header)

    void operator()(const Req& m) const {
        store_be32(d, m.local_comm_id);
        store_be64(d + 8, m.service_id);
        store_be64(d + 16, m.local_ca_guid);
        store_be32(d + 28, m.local_qkey);
        put24(d + 32, m.local_qpn);
        d[35] = m.responder_resources;
        put24(d + 36, m.local_eecn);
        d[39] = m.initiator_depth;
        put24(d + 40, m.remote_eecn);
        d[43] = static_cast<std::uint8_t>((m.remote_cm_response_timeout & 0x1F) << 3 |
                                          (m.transport_service_type & 3) << 1 | (m.end_to_end_flow_control ? 1 : 0));
        put24(d + 44, m.starting_psn);
        d[47] = static_cast<std::uint8_t>((m.local_cm_response_timeout & 0x1F) << 3 | (m.retry_count & 7));
        store_be16(d + 48, m.pkey);
        d[50] = static_cast<std::uint8_t>((m.path_mtu & 0xF) << 4 | (m.rdc_exists ? 0x08 : 0) | (m.rnr_retry_count & 7));
        d[51] = static_cast<std::uint8_t>((m.max_cm_retries & 0xF) << 4 | (m.srq ? 0x08 : 0) |
                                          (m.extended_transport_type & 7));
        write_path(d + 52, m.primary);
        if (m.alternate) write_path(d + 96, *m.alternate);
        // 139: the alternate's ACK timeout (bits 7..3) shares the byte with SAP supported (bit 2).
        d[139] = static_cast<std::uint8_t>(d[139] | (m.sap_supported ? 0x04 : 0));
        copy_in(d + 140, m.private_data);
    }
    void operator()(const Mra& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        d[8] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(m.message_mraed) << 6);
        d[9] = static_cast<std::uint8_t>((m.service_timeout & 0x1F) << 3);
        copy_in(d + 10, m.private_data);
    }
    void operator()(const Rej& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        d[8] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(m.message_rejected) << 6);
        d[9] = static_cast<std::uint8_t>((std::min<std::uint8_t>(m.reject_info_length, 72) & 0x7F) << 1);
        store_be16(d + 10, m.reason);
        copy_in(d + 12, m.ari);
        copy_in(d + 84, m.private_data);
    }
    void operator()(const Rep& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        store_be32(d + 8, m.local_qkey);
        put24(d + 12, m.local_qpn);
        put24(d + 16, m.local_eecn);
        put24(d + 20, m.starting_psn);
        d[24] = m.responder_resources;
        d[25] = m.initiator_depth;
        d[26] = static_cast<std::uint8_t>((m.target_ack_delay & 0x1F) << 3 | (m.failover_accepted & 3) << 1 |
                                          (m.end_to_end_flow_control ? 1 : 0));
        d[27] = static_cast<std::uint8_t>((m.rnr_retry_count & 7) << 5 | (m.srq ? 0x10 : 0));
        store_be64(d + 28, m.local_ca_guid);
        copy_in(d + 36, m.private_data);
    }
    void operator()(const Rtu& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        copy_in(d + 8, m.private_data);
    }
    void operator()(const Dreq& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        put24(d + 8, m.remote_qpn);
        copy_in(d + 12, m.private_data);
    }
    void operator()(const Drep& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        copy_in(d + 8, m.private_data);
    }
    void operator()(const Lap& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        put24(d + 12, m.remote_qpn);
        d[15] = static_cast<std::uint8_t>((m.remote_cm_response_timeout & 0x1F) << 3);
    }
    void operator()(const Apr& m) const {
        store_be32(d, m.local_comm_id);
        store_be32(d + 4, m.remote_comm_id);
        d[8] = std::min<std::uint8_t>(m.additional_info_length, 72);
        d[9] = m.ap_status;
        copy_in(d + 12, m.additional_info);
        copy_in(d + 84, m.private_data);
    }
};

expected<MessageKind, DecodeError> message_kind(std::uint8_t byte) {
    const std::uint8_t k = byte >> 6;
    if (k > 2) return unexpected(DecodeError::bad_message_kind);
    return static_cast<MessageKind>(k);
}

}  // namespace

std::uint16_t attribute_of(const Message& m) {
    static constexpr std::uint16_t ids[] = {attr::req, attr::mra, attr::rej, attr::rep, attr::rtu,
                                            attr::dreq, attr::drep, attr::lap, attr::apr};
    return ids[m.index()];
}

const char* name_of(const Message& m) {
    static constexpr const char* names[] = {"REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "LAP", "APR"};
    return names[m.index()];
}

const char* to_string(DecodeError e) {
    switch (e) {
        case DecodeError::too_short: return "too_short";
        case DecodeError::not_cm: return "not_cm";
        case DecodeError::bad_class_version: return "bad_class_version";
        case DecodeError::bad_method: return "bad_method";
        case DecodeError::unknown_attribute: return "unknown_attribute";
        case DecodeError::bad_transport_type: return "bad_transport_type";
        case DecodeError::bad_path_mtu: return "bad_path_mtu";
        case DecodeError::bad_info_length: return "bad_info_length";
        case DecodeError::bad_message_kind: return "bad_message_kind";
        case DecodeError::count_: break;
    }
    return "?";
}

std::array<std::uint8_t, ib::kMadSize> encode(const Message& m, std::uint64_t tid) {
    std::array<std::uint8_t, ib::kMadSize> out{};
    ib::MadHeader h;
    h.mgmt_class = ib::mgmt_class::com_mgt;
    h.class_version = kClassVersion;
    h.method = ib::method::send;
    h.transaction_id = tid;
    h.attribute_id = attribute_of(m);
    h.write_to(out.data());
    std::visit(Encoder{out.data() + kMadHeaderSize}, m);
    return out;
}

expected<Decoded, DecodeError> decode(bytes mad) {
    if (mad.size() < ib::kMadSize) return unexpected(DecodeError::too_short);
    const ib::MadHeader h = ib::MadHeader::read_from(mad.data());
    if (h.base_version != ib::kMadBaseVersion || h.mgmt_class != ib::mgmt_class::com_mgt)
        return unexpected(DecodeError::not_cm);
    if (h.class_version != kClassVersion) return unexpected(DecodeError::bad_class_version);
    if (h.method != ib::method::send) return unexpected(DecodeError::bad_method);
    const std::uint8_t* d = mad.data() + kMadHeaderSize;
    Decoded out{.transaction_id = h.transaction_id, .message = Rtu{}};
    switch (h.attribute_id) {
        case attr::req: {
            Req m;
            m.local_comm_id = load_be32(d);
            m.service_id = load_be64(d + 8);
            m.local_ca_guid = load_be64(d + 16);
            m.local_qkey = load_be32(d + 28);
            m.local_qpn = be24(d + 32);
            m.responder_resources = d[35];
            m.local_eecn = be24(d + 36);
            m.initiator_depth = d[39];
            m.remote_eecn = be24(d + 40);
            m.remote_cm_response_timeout = d[43] >> 3;
            m.transport_service_type = (d[43] >> 1) & 3;
            m.end_to_end_flow_control = (d[43] & 1) != 0;
            if (m.transport_service_type == 3) return unexpected(DecodeError::bad_transport_type);
            m.starting_psn = be24(d + 44);
            m.local_cm_response_timeout = d[47] >> 3;
            m.retry_count = d[47] & 7;
            m.pkey = load_be16(d + 48);
            m.path_mtu = d[50] >> 4;
            if (m.path_mtu < 1 || m.path_mtu > 5) return unexpected(DecodeError::bad_path_mtu);
            m.rdc_exists = (d[50] & 0x08) != 0;
            m.rnr_retry_count = d[50] & 7;
            m.max_cm_retries = d[51] >> 4;
            m.srq = (d[51] & 0x08) != 0;
            m.extended_transport_type = d[51] & 7;
            m.primary = read_path(d + 52);
            // No alternate path: every field of it zero (reserved bits, and
            // SAP supported in its last byte, do not count).
            const Path alt = read_path(d + 96);
            if (!(alt == Path{.subnet_local = false})) m.alternate = alt;
            m.sap_supported = (d[139] & 0x04) != 0;
            copy_out(d + 140, m.private_data);
            out.message = m;
            break;
        }
        case attr::mra: {
            Mra m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            auto k = message_kind(d[8]);
            if (!k) return unexpected(k.error());
            m.message_mraed = *k;
            m.service_timeout = d[9] >> 3;
            copy_out(d + 10, m.private_data);
            out.message = m;
            break;
        }
        case attr::rej: {
            Rej m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            auto k = message_kind(d[8]);
            if (!k) return unexpected(k.error());
            m.message_rejected = *k;
            m.reject_info_length = d[9] >> 1;
            if (m.reject_info_length > 72) return unexpected(DecodeError::bad_info_length);
            m.reason = load_be16(d + 10);
            copy_out(d + 12, m.ari);
            copy_out(d + 84, m.private_data);
            out.message = m;
            break;
        }
        case attr::rep: {
            Rep m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            m.local_qkey = load_be32(d + 8);
            m.local_qpn = be24(d + 12);
            m.local_eecn = be24(d + 16);
            m.starting_psn = be24(d + 20);
            m.responder_resources = d[24];
            m.initiator_depth = d[25];
            m.target_ack_delay = d[26] >> 3;
            m.failover_accepted = (d[26] >> 1) & 3;
            m.end_to_end_flow_control = (d[26] & 1) != 0;
            m.rnr_retry_count = d[27] >> 5;
            m.srq = (d[27] & 0x10) != 0;
            m.local_ca_guid = load_be64(d + 28);
            copy_out(d + 36, m.private_data);
            out.message = m;
            break;
        }
        case attr::rtu: {
            Rtu m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            copy_out(d + 8, m.private_data);
            out.message = m;
            break;
        }
        case attr::dreq: {
            Dreq m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            m.remote_qpn = be24(d + 8);
            copy_out(d + 12, m.private_data);
            out.message = m;
            break;
        }
        case attr::drep: {
            Drep m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            copy_out(d + 8, m.private_data);
            out.message = m;
            break;
        }
        case attr::lap: {
            Lap m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            m.remote_qpn = be24(d + 12);
            m.remote_cm_response_timeout = d[15] >> 3;
            out.message = m;
            break;
        }
        case attr::apr: {
            Apr m;
            m.local_comm_id = load_be32(d);
            m.remote_comm_id = load_be32(d + 4);
            m.additional_info_length = d[8];
            if (m.additional_info_length > 72) return unexpected(DecodeError::bad_info_length);
            m.ap_status = d[9];
            copy_out(d + 12, m.additional_info);
            copy_out(d + 84, m.private_data);
            out.message = m;
            break;
        }
        default: return unexpected(DecodeError::unknown_attribute);
    }
    return out;
}

void write_ipoib_data(std::span<std::uint8_t> private_data, const IpoibCmData& d) {
    if (private_data.size() < 8) return;
    store_be32(private_data.data(), d.ud_qpn & 0xFFFFFF);
    store_be32(private_data.data() + 4, d.receive_size);
}

IpoibCmData read_ipoib_data(bytes private_data) {
    if (private_data.size() < 8) return {};
    return {.ud_qpn = load_be32(private_data.data()) & 0xFFFFFF, .receive_size = load_be32(private_data.data() + 4)};
}

}  // namespace ipoibd::cm
