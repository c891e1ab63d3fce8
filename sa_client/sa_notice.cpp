#include "sa_client/sa_notice.h"

#include <cstring>

namespace ipoibd::sa {

// ---------------------------------------------------------------------------
// InformInfo, InformInfoRecord

void InformInfo::write_to(std::uint8_t* p) const {
    std::memcpy(p, gid.data(), 16);
    store_be16(p + 16, lid_range_begin);
    store_be16(p + 18, lid_range_end);
    store_be16(p + 20, 0);
    p[22] = is_generic;
    p[23] = subscribe;
    store_be16(p + 24, type);
    store_be16(p + 26, trap_number_device_id);
    store_be32(p + 28, (qpn << 8) | (resp_time_value & 0x1Fu));
    store_be32(p + 32, producer_type_vendor_id);  // byte 32 Reserved: 24-bit field
}

InformInfo InformInfo::read_from(const std::uint8_t* p) {
    InformInfo i;
    std::memcpy(i.gid.data(), p, 16);
    i.lid_range_begin = load_be16(p + 16);
    i.lid_range_end = load_be16(p + 18);
    i.is_generic = p[22];
    i.subscribe = p[23];
    i.type = load_be16(p + 24);
    i.trap_number_device_id = load_be16(p + 26);
    i.qpn = load_be24(p + 28);
    i.resp_time_value = static_cast<std::uint8_t>(p[31] & 0x1F);
    i.producer_type_vendor_id = load_be24(p + 33);
    return i;
}

InformInfo generic_trap_subscription(std::uint16_t trap, bool subscribe) {
    InformInfo i;
    i.lid_range_begin = kInformAllLids;
    i.is_generic = 1;
    i.subscribe = subscribe ? 1 : 0;
    i.type = kInformAllTypes;
    i.trap_number_device_id = trap;
    i.producer_type_vendor_id = kInformAllProducers;
    return i;
}

void InformInfoRecord::write_to(std::uint8_t* p) const {
    std::memcpy(p, subscriber_gid.data(), 16);
    store_be16(p + 16, enum_);
    std::memset(p + 18, 0, 6);
    inform_info.write_to(p + 24);
}

InformInfoRecord InformInfoRecord::read_from(const std::uint8_t* p) {
    InformInfoRecord r;
    std::memcpy(r.subscriber_gid.data(), p, 16);
    r.enum_ = load_be16(p + 16);
    r.inform_info = InformInfo::read_from(p + 24);
    return r;
}

// ---------------------------------------------------------------------------
// Notice

void Notice::write_to(std::uint8_t* p) const {
    p[0] = static_cast<std::uint8_t>((is_generic ? 0x80 : 0x00) | (type & 0x7F));
    store_be24(p + 1, producer_type_vendor_id);
    store_be16(p + 4, trap_number_device_id);
    store_be16(p + 6, issuer_lid);
    store_be16(p + 8, static_cast<std::uint16_t>((notice_toggle ? 0x8000 : 0) | (notice_count & 0x7FFF)));
    std::memcpy(p + 10, data_details.data(), data_details.size());
    std::memcpy(p + 64, issuer_gid.data(), 16);
}

Notice Notice::read_from(const std::uint8_t* p) {
    Notice n;
    n.is_generic = (p[0] & 0x80) != 0;
    n.type = static_cast<std::uint8_t>(p[0] & 0x7F);
    n.producer_type_vendor_id = load_be24(p + 1);
    n.trap_number_device_id = load_be16(p + 4);
    n.issuer_lid = load_be16(p + 6);
    const std::uint16_t toggle_count = load_be16(p + 8);
    n.notice_toggle = (toggle_count & 0x8000) != 0;
    n.notice_count = toggle_count & 0x7FFF;
    std::memcpy(n.data_details.data(), p + 10, n.data_details.size());
    std::memcpy(n.issuer_gid.data(), p + 64, 16);
    return n;
}

Notice make_gid_trap(std::uint16_t trap, const Gid& gid, std::uint16_t issuer_lid, const Gid& issuer_gid) {
    Notice n;
    n.is_generic = true;
    n.type = notice_type::subnet_management;
    n.producer_type_vendor_id = producer_type::class_manager;
    n.trap_number_device_id = trap;
    n.issuer_lid = issuer_lid;
    std::memcpy(n.data_details.data() + kTrapGidAddrOffset, gid.data(), gid.size());
    n.issuer_gid = issuer_gid;
    return n;
}

std::optional<Gid> trap_gid(const Notice& notice) {
    if (!notice.is_generic || !is_gid_trap(notice.trap_number_device_id)) return std::nullopt;
    Gid g;
    std::memcpy(g.data(), notice.data_details.data() + kTrapGidAddrOffset, g.size());
    return g;
}

}  // namespace ipoibd::sa
