// Pure translations between libibverbs structures and the transport seam
// (transport/port.h). No device is touched here, so every mapping is tested
// without an HCA (tests/hw/test_verbs_convert.cpp).
//
// Byte order, as libibverbs defines it: LIDs, QPNs, Q_Keys and the wc/port
// attribute fields are host order; GIDs are raw network-order bytes; P_Keys
// from ibv_query_pkey(), immediate data (ibv_send_wr::imm_data,
// ibv_wc::imm_data) and ibv_device_attr::node_guid are big-endian.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>

#include "transport/port.h"

namespace ipoibd::transport::verbs {

// ibv_port_state -> PortState. ACTIVE_DEFER (the port is active but will go
// down soon) still carries traffic, so it reads as active; NOP reads as down.
PortState port_state_from_verbs(ibv_port_state s);

// ibv_mtu and ib::Mtu share the IBA encoding (1 = 256 ... 5 = 4096); values
// outside it read as 256, the MTU every IB port supports.
ib::Mtu mtu_from_verbs(ibv_mtu m);

// True when a port with this ibv_port_attr::link_layer speaks InfiniBand
// (LIDs, SM, SA). UNSPECIFIED is what drivers older than RoCE report for IB.
bool is_infiniband_link_layer(std::uint8_t link_layer);

// The PortEvent an asynchronous event means for the port it names, or none
// for events about QPs, CQs, SRQs or other kinds. GID_CHANGE (the SM changed
// the subnet prefix, or the port GUID changed) reads as lid_change: the
// port's address changed, so paths and joins must be redone. DEVICE_FATAL
// reads as port_down: nothing will pass through the port again.
std::optional<PortEvent> port_event_from_verbs(ibv_event_type type);

// Whether an asynchronous event concerns port `port_num` of its device: port
// events carry the port number; DEVICE_FATAL concerns every port.
bool event_concerns_port(const ibv_async_event& event, std::uint8_t port_num);

// ibv_wc_status -> CompletionStatus: LOC_LEN_ERR is a local length error,
// WR_FLUSH_ERR a flush, every other failure a general error.
CompletionStatus status_from_verbs(ibv_wc_status s);

// The Q_Key a UD send carries: a work request Q_Key with the high bit set
// means "use the QP's own Q_Key" (IBA 10.2.4, controlled Q_Keys).
std::uint32_t effective_qkey(std::uint32_t remote_qkey, std::uint32_t qp_qkey);

// The ibv_ah_attr for an AddressHandle on port `port_num`: is_global and the
// GRH fields when ah.grh is set; static rate 0 (the port's rate), since
// AddressHandle carries no rate.
ibv_ah_attr ah_attr_from(const AddressHandle& ah, std::uint8_t port_num);

// The receive-side fields of a successful UD work completion: source QPN,
// SLID, SL, GRH flag, immediate data (host order) and byte_len (which counts
// the 40-byte GRH slot). pkey_index is `qp_pkey_index`: verbs reports
// ibv_wc::pkey_index only for the GSI QP, and a UD QP accepts only packets
// whose P_Key matches its own (IBA 10.9.3), so the QP's index is the answer.
// wr_id, kind and status are left for the caller.
Completion receive_completion_from_wc(const ibv_wc& wc, std::uint16_t qp_pkey_index);

// Big-endian verbs fields <-> host integers, through bytes (no casts).
std::uint32_t be32_to_host(__be32 v);
__be32 host_to_be32(std::uint32_t v);
std::uint16_t be16_to_host(__be16 v);
std::uint64_t be64_to_host(__be64 v);

// Hash of every field of an AddressHandle, for the AH cache.
struct AddressHandleHash {
    std::size_t operator()(const AddressHandle& ah) const noexcept;
};

// Error{system_error, "<operation>", err} for a failed verbs call. Verbs
// calls that return NULL leave errno set, most of them; a zero errno
// becomes EIO so the error never reads "Success".
Error verbs_error(std::string operation, int err);

}  // namespace ipoibd::transport::verbs
