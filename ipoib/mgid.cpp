#include "ipoib/mgid.h"

#include <algorithm>
#include <cstring>

namespace ipoibd::ipoib {
namespace {

// Bytes 0-5 of every IPoIB MGID; the group ID is the caller's.
ib::Gid mgid_prefix(std::uint16_t signature, std::uint16_t pkey, Scope scope) {
    ib::Gid g{};
    g[0] = 0xFF;
    g[1] = static_cast<std::uint8_t>((kMgidFlagsTransient << 4) | (static_cast<std::uint8_t>(scope) & 0xF));
    store_be16(g.data() + kMgidOffsetSignature, signature);
    store_be16(g.data() + kMgidOffsetPKey, static_cast<std::uint16_t>(pkey | ib::kPKeyFullMemberBit));
    return g;
}

constexpr std::size_t kOffsetIpv4Group = 12;  // the 32 bits that hold the 28-bit group

}  // namespace

std::optional<Scope> scope_from_nibble(std::uint8_t nibble) {
    switch (nibble) {
        case 0x2: return Scope::link_local;
        case 0x5: return Scope::site_local;
        case 0x8: return Scope::organization_local;
        case 0xE: return Scope::global;
        default: return std::nullopt;
    }
}

const char* to_string(MgidError e) {
    switch (e) {
        case MgidError::not_multicast: return "not_multicast";
        case MgidError::count_: break;
    }
    return "unknown";
}

ib::Gid broadcast_mgid(std::uint16_t pkey, Scope scope) {
    ib::Gid g = mgid_prefix(kIpv4Signature, pkey, scope);
    store_be32(g.data() + kOffsetIpv4Group, 0xFFFFFFFF);
    return g;
}

expected<ib::Gid, MgidError> ipv4_group_mgid(const Ipv4Address& group, std::uint16_t pkey, Scope scope) {
    if (group == kIpv4LimitedBroadcast) return broadcast_mgid(pkey, scope);
    if (!is_ipv4_multicast(group)) return unexpected(MgidError::not_multicast);
    ib::Gid g = mgid_prefix(kIpv4Signature, pkey, scope);
    store_be32(g.data() + kOffsetIpv4Group, load_be32(group.data()) & kIpv4GroupMask);
    return g;
}

expected<ib::Gid, MgidError> ipv6_group_mgid(const Ipv6Address& group, std::uint16_t pkey, Scope scope) {
    if (!is_ipv6_multicast(group)) return unexpected(MgidError::not_multicast);
    ib::Gid g = mgid_prefix(kIpv6Signature, pkey, scope);
    std::memcpy(g.data() + kMgidOffsetGroupId, group.data() + (16 - kMgidGroupIdSize), kMgidGroupIdSize);
    return g;
}

std::optional<Ipv4Address> IpoibMgid::ipv4_group() const {
    if (family != MgidFamily::ipv4) return std::nullopt;
    if (broadcast) return kIpv4LimitedBroadcast;
    Ipv4Address a{};
    const std::uint32_t low28 = load_be32(group_id.data() + (kMgidGroupIdSize - 4)) & kIpv4GroupMask;
    store_be32(a.data(), 0xE0000000u | low28);
    return a;
}

std::optional<IpoibMgid> parse_ipoib_mgid(const ib::Gid& mgid) {
    if (mgid[0] != 0xFF || (mgid[1] >> 4) != kMgidFlagsTransient) return std::nullopt;
    IpoibMgid m;
    const std::uint16_t signature = load_be16(mgid.data() + kMgidOffsetSignature);
    if (signature == kIpv4Signature) {
        m.family = MgidFamily::ipv4;
    } else if (signature == kIpv6Signature) {
        m.family = MgidFamily::ipv6;
    } else {
        return std::nullopt;
    }
    m.scope = mgid[1] & 0xF;
    m.pkey = load_be16(mgid.data() + kMgidOffsetPKey);
    std::memcpy(m.group_id.data(), mgid.data() + kMgidOffsetGroupId, kMgidGroupIdSize);
    if (m.family == MgidFamily::ipv4) {
        // 48 zero bits, then either all ones (broadcast) or 4 zero bits and the group.
        const bool high_zero = std::all_of(mgid.begin() + kMgidOffsetGroupId, mgid.begin() + kOffsetIpv4Group,
                                           [](std::uint8_t b) { return b == 0; });
        if (!high_zero) return std::nullopt;
        const std::uint32_t low = load_be32(mgid.data() + kOffsetIpv4Group);
        if (low == 0xFFFFFFFF) {
            m.broadcast = true;
        } else if ((low & ~kIpv4GroupMask) != 0) {
            return std::nullopt;
        }
    }
    return m;
}

}  // namespace ipoibd::ipoib
