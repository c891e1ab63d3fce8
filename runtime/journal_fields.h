// Journal field names and the formats of their values, so that every entry
// spells a LID or a QPN the same way and `journalctl IB_QPN=0x000048` finds
// all of them. docs/journal.md documents each field.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace ipoibd::runtime::field {

// The interface and the peer, in IP terms.
inline constexpr std::string_view kIfname = "IPOIB_IFNAME";          // "ib0"
inline constexpr std::string_view kPeerIp = "IPOIB_PEER_IP";         // "198.18.0.2", "fe80::1"
inline constexpr std::string_view kPeerHw = "IPOIB_PEER_HW";         // 20-octet link address, "80:00:00:48:fe:80:..."
inline constexpr std::string_view kPeerOldHw = "IPOIB_PEER_OLD_HW";  // the address it replaced (peer changed)
inline constexpr std::string_view kMtu = "IPOIB_MTU";                // decimal
inline constexpr std::string_view kReason = "IPOIB_REASON";          // a reason token: "join_timeout", "bad_length"
inline constexpr std::string_view kSuppressed = "IPOIB_SUPPRESSED";  // messages a rate limit held back
inline constexpr std::string_view kConfigFile = "IPOIB_CONFIG_FILE"; // path of the configuration read
inline constexpr std::string_view kVersion = "IPOIB_VERSION";        // daemon version
inline constexpr std::string_view kCapabilities = "IPOIB_CAPABILITIES";                 // "cap_net_admin cap_net_raw"
inline constexpr std::string_view kCapabilitiesMissing = "IPOIB_CAPABILITIES_MISSING";  // asked for, not held

// The fabric, in IBA terms (IBA 1.4 spelling).
inline constexpr std::string_view kDevice = "IB_DEVICE";        // "mlx5_0", "soft"
inline constexpr std::string_view kPort = "IB_PORT";            // port number, decimal
inline constexpr std::string_view kGid = "IB_GID";              // "fe80::21e:6703:29:476f"
inline constexpr std::string_view kMgid = "IB_MGID";            // "ff12:401b:ffff::ffff:ffff"
inline constexpr std::string_view kLid = "IB_LID";              // format_lid()
inline constexpr std::string_view kMlid = "IB_MLID";            // format_lid()
inline constexpr std::string_view kQpn = "IB_QPN";              // format_qpn()
inline constexpr std::string_view kPkey = "IB_PKEY";            // format_pkey()
inline constexpr std::string_view kSaStatus = "IB_SA_STATUS";   // format_mad_status()
inline constexpr std::string_view kJoinState = "IB_JOIN_STATE"; // "full", "non", "send_only"

// systemd's own field for an errno, decimal (systemd.journal-fields(7)).
inline constexpr std::string_view kErrno = "ERRNO";

namespace detail {
inline std::string hex(unsigned value, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%0*x", digits, value);
    return buf;
}
}  // namespace detail

// "0x0012": LIDs and MLIDs as OpenSM and ibstat's neighbours print them.
inline std::string format_lid(std::uint16_t lid) { return detail::hex(lid, 4); }
// "0x000048": the 24-bit QPN.
inline std::string format_qpn(std::uint32_t qpn) { return detail::hex(qpn & 0xffffffu, 6); }
// "0xffff": the full P_Key, membership bit included.
inline std::string format_pkey(std::uint16_t pkey) { return detail::hex(pkey, 4); }
// "0x00000b1b": the 32-bit Q_Key, as the journal's IB_QKEY writes it.
inline std::string format_qkey(std::uint32_t qkey) { return detail::hex(qkey, 8); }
// "0x0200": the 16-bit MAD status as it is on the wire.
inline std::string format_mad_status(std::uint16_t status) { return detail::hex(status, 4); }

}  // namespace ipoibd::runtime::field
