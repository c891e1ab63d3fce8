// Port GUIDs for soft ports that stay the same across restarts: derived from
// the host's /etc/machine-id (or its hostname when there is none) and an
// instance name, so ipoibd@ib0 on one host always has the same GUID, and
// the SM gives it the same LID again.
#pragma once

#include <cstdint>
#include <string_view>

namespace ipoibd::transport {

// 0x02 in the top byte marks the GUID as locally administered (EUI-64 U/L
// bit), never colliding with a vendor-assigned HCA GUID.
std::uint64_t stable_port_guid(std::string_view instance);
std::uint64_t derive_port_guid(std::string_view machine_id, std::string_view instance);

}  // namespace ipoibd::transport
