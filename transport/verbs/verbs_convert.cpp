#include "transport/verbs/verbs_convert.h"

#include <cerrno>
#include <cstring>

namespace ipoibd::transport::verbs {

PortState port_state_from_verbs(ibv_port_state s) {
    switch (s) {
        case IBV_PORT_INIT: return PortState::init;
        case IBV_PORT_ARMED: return PortState::armed;
        case IBV_PORT_ACTIVE:
        case IBV_PORT_ACTIVE_DEFER: return PortState::active;
        case IBV_PORT_NOP:
        case IBV_PORT_DOWN: return PortState::down;
    }
    return PortState::down;
}

ib::Mtu mtu_from_verbs(ibv_mtu m) {
    switch (m) {
        case IBV_MTU_256: return ib::Mtu::mtu256;
        case IBV_MTU_512: return ib::Mtu::mtu512;
        case IBV_MTU_1024: return ib::Mtu::mtu1024;
        case IBV_MTU_2048: return ib::Mtu::mtu2048;
        case IBV_MTU_4096: return ib::Mtu::mtu4096;
    }
    return ib::Mtu::mtu256;
}

bool is_infiniband_link_layer(std::uint8_t link_layer) {
    return link_layer == IBV_LINK_LAYER_INFINIBAND || link_layer == IBV_LINK_LAYER_UNSPECIFIED;
}

std::optional<PortEvent> port_event_from_verbs(ibv_event_type type) {
    switch (type) {
        case IBV_EVENT_PORT_ACTIVE: return PortEvent::port_active;
        case IBV_EVENT_PORT_ERR: return PortEvent::port_down;
        case IBV_EVENT_LID_CHANGE: return PortEvent::lid_change;
        case IBV_EVENT_PKEY_CHANGE: return PortEvent::pkey_change;
        case IBV_EVENT_SM_CHANGE: return PortEvent::sm_change;
        case IBV_EVENT_CLIENT_REREGISTER: return PortEvent::client_reregister;
        case IBV_EVENT_GID_CHANGE: return PortEvent::lid_change;
        case IBV_EVENT_DEVICE_FATAL: return PortEvent::port_down;
        default: return std::nullopt;
    }
}

bool event_concerns_port(const ibv_async_event& event, std::uint8_t port_num) {
    if (event.event_type == IBV_EVENT_DEVICE_FATAL) return true;
    if (!port_event_from_verbs(event.event_type)) return false;
    return event.element.port_num == port_num;
}

CompletionStatus status_from_verbs(ibv_wc_status s) {
    switch (s) {
        case IBV_WC_SUCCESS: return CompletionStatus::success;
        case IBV_WC_LOC_LEN_ERR: return CompletionStatus::local_length_error;
        case IBV_WC_WR_FLUSH_ERR: return CompletionStatus::flushed;
        default: return CompletionStatus::general_error;
    }
}

std::uint32_t effective_qkey(std::uint32_t remote_qkey, std::uint32_t qp_qkey) {
    return (remote_qkey & ib::kQKeyControlledBit) ? qp_qkey : remote_qkey;
}

ibv_ah_attr ah_attr_from(const AddressHandle& ah, std::uint8_t port_num) {
    ibv_ah_attr attr{};
    attr.dlid = ah.dlid;
    attr.sl = ah.sl;
    attr.src_path_bits = ah.src_path_bits;
    attr.static_rate = 0;
    attr.port_num = port_num;
    if (ah.grh) {
        attr.is_global = 1;
        std::memcpy(attr.grh.dgid.raw, ah.grh->dgid.data(), ah.grh->dgid.size());
        attr.grh.flow_label = ah.grh->flow_label & 0xFFFFF;
        attr.grh.sgid_index = ah.grh->sgid_index;
        attr.grh.hop_limit = ah.grh->hop_limit;
        attr.grh.traffic_class = ah.grh->traffic_class;
    }
    return attr;
}

Completion receive_completion_from_wc(const ibv_wc& wc, std::uint16_t qp_pkey_index) {
    Completion c;
    c.kind = CompletionKind::receive;
    c.qp_num = wc.qp_num;
    c.status = status_from_verbs(wc.status);
    c.byte_len = wc.byte_len;
    c.src_qp = wc.src_qp & ib::kQpnMask;
    c.slid = wc.slid;
    c.sl = wc.sl;
    c.grh_present = (wc.wc_flags & IBV_WC_GRH) != 0;
    c.pkey_index = qp_pkey_index;
    if (wc.wc_flags & IBV_WC_WITH_IMM) c.immediate = be32_to_host(wc.imm_data);
    return c;
}

std::uint32_t be32_to_host(__be32 v) {
    std::uint8_t b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    return load_be32(b);
}

__be32 host_to_be32(std::uint32_t v) {
    std::uint8_t b[sizeof v];
    store_be32(b, v);
    __be32 out;
    std::memcpy(&out, b, sizeof out);
    return out;
}

std::uint16_t be16_to_host(__be16 v) {
    std::uint8_t b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    return load_be16(b);
}

std::uint64_t be64_to_host(__be64 v) {
    std::uint8_t b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    return load_be64(b);
}

std::size_t AddressHandleHash::operator()(const AddressHandle& ah) const noexcept {
    // FNV-1a over the fields; AHs are few and hashed once per send.
    std::uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&h](std::uint64_t v, int nbytes) {
        for (int i = 0; i < nbytes; ++i) {
            h ^= (v >> (8 * i)) & 0xFF;
            h *= 0x100000001b3ULL;
        }
    };
    mix(ah.dlid, 2);
    mix(ah.sl, 1);
    mix(ah.src_path_bits, 1);
    mix(ah.grh.has_value(), 1);
    if (ah.grh) {
        for (std::uint8_t b : ah.grh->dgid) mix(b, 1);
        mix(ah.grh->flow_label, 4);
        mix(ah.grh->sgid_index, 1);
        mix(ah.grh->hop_limit, 1);
        mix(ah.grh->traffic_class, 1);
    }
    return static_cast<std::size_t>(h);
}

Error verbs_error(std::string operation, int err) {
    return Error{Errc::system_error, std::move(operation), err != 0 ? err : EIO};
}

}  // namespace ipoibd::transport::verbs
