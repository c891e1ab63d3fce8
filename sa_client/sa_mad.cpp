#include "sa_client/sa_mad.h"

#include <cstdio>
#include <cstring>
#include <iterator>

namespace ipoibd::sa {

// ---------------------------------------------------------------------------
// The SA MAD

void SaMad::write_to(std::uint8_t* p) const {
    header.write_to(p);
    rmpp.write_to(p + sa_offset::rmpp);
    store_be64(p + sa_offset::sm_key, sm_key);
    store_be16(p + sa_offset::attribute_offset, attribute_offset);
    store_be16(p + sa_offset::attribute_offset + 2, 0);  // Reserved
    store_be64(p + sa_offset::component_mask, component_mask);
    std::memcpy(p + sa_offset::data, data.data(), data.size());
}

SaMad SaMad::read_from(const std::uint8_t* p) {
    SaMad m;
    m.header = ib::MadHeader::read_from(p);
    m.rmpp = RmppHeader::read_from(p + sa_offset::rmpp);
    m.sm_key = load_be64(p + sa_offset::sm_key);
    m.attribute_offset = load_be16(p + sa_offset::attribute_offset);
    m.component_mask = load_be64(p + sa_offset::component_mask);
    std::memcpy(m.data.data(), p + sa_offset::data, m.data.size());
    return m;
}

expected<SaMad, SaMadError> decode_sa_mad(bytes mad) {
    if (mad.size() != SaMad::size) return unexpected(SaMadError::wrong_size);
    if (mad[1] != ib::mgmt_class::subn_adm) return unexpected(SaMadError::not_sa_class);
    return SaMad::read_from(mad.data());
}

const char* to_string(SaMadError e) {
    switch (e) {
        case SaMadError::wrong_size: return "SA MAD is not 256 bytes";
        case SaMadError::not_sa_class: return "MgmtClass is not SubnAdm";
    }
    return "unknown";
}

const char* sa_attribute_name(std::uint16_t attribute_id) {
    switch (attribute_id) {
        case sa_attr::class_port_info: return "ClassPortInfo";
        case sa_attr::notice: return "Notice";
        case sa_attr::inform_info: return "InformInfo";
        case sa_attr::node_record: return "NodeRecord";
        case sa_attr::port_info_record: return "PortInfoRecord";
        case sa_attr::sl_to_vl_mapping_table_record: return "SLtoVLMappingTableRecord";
        case sa_attr::switch_info_record: return "SwitchInfoRecord";
        case sa_attr::linear_forwarding_table_record: return "LinearForwardingTableRecord";
        case sa_attr::random_forwarding_table_record: return "RandomForwardingTableRecord";
        case sa_attr::multicast_forwarding_table_record: return "MulticastForwardingTableRecord";
        case sa_attr::sm_info_record: return "SMInfoRecord";
        case sa_attr::link_record: return "LinkRecord";
        case sa_attr::guid_info_record: return "GuidInfoRecord";
        case sa_attr::service_record: return "ServiceRecord";
        case sa_attr::p_key_table_record: return "P_KeyTableRecord";
        case sa_attr::path_record: return "PathRecord";
        case sa_attr::vl_arbitration_table_record: return "VLArbitrationTableRecord";
        case sa_attr::mc_member_record: return "MCMemberRecord";
        case sa_attr::trace_record: return "TraceRecord";
        case sa_attr::multi_path_record: return "MultiPathRecord";
        case sa_attr::service_association_record: return "ServiceAssociationRecord";
        case sa_attr::inform_info_record: return "InformInfoRecord";
        default: return "unknown attribute";
    }
}

// ---------------------------------------------------------------------------
// Status in words. The strings are the ones infiniband-diags prints
// (ibdiag_sa.c), so an operator sees the same text from ipoibd's tools and
// from saquery.

const char* sa_error_name(std::uint8_t code) {
    static constexpr const char* kNames[] = {
        "SA_NO_ERROR",
        "SA_ERR_NO_RESOURCES",
        "SA_ERR_REQ_INVALID",
        "SA_ERR_NO_RECORDS",
        "SA_ERR_TOO_MANY_RECORDS",
        "SA_ERR_REQ_INVALID_GID",
        "SA_ERR_REQ_INSUFFICIENT_COMPONENTS",
        "SA_ERR_REQ_DENIED",
        "SA_ERR_STATUS_PRIO_SUGGESTED",
    };
    if (code >= std::size(kNames)) return "SA_ERR_UNKNOWN";
    return kNames[code];
}

const char* mad_invalid_field_name(std::uint8_t code) {
    static constexpr const char* kNames[] = {
        "MAD No invalid fields",
        "MAD Bad version",
        "MAD Method specified is not supported",
        "MAD Method/Attribute combination is not supported",
        "MAD Reserved",
        "MAD Reserved",
        "MAD Reserved",
        "MAD Invalid value in Attribute field(s) or Attribute Modifier",
    };
    if (code >= std::size(kNames)) return "MAD UNKNOWN ERROR";
    return kNames[code];
}

std::string describe_sa_status(std::uint16_t status) {
    char code[16];
    std::snprintf(code, sizeof code, "0x%04x: ", status);
    if (status == 0) return std::string(code) + "success";
    std::string out;
    auto add = [&](const char* what) {
        if (!out.empty()) out += "; ";
        out += what;
    };
    if (status & ib::mad_status::busy) add("BUSY");
    if (status & ib::mad_status::redirect_required) add("Redirection Required");
    if (const auto field = static_cast<std::uint8_t>((status & ib::mad_status::invalid_field_mask) >> 2); field != 0)
        add(mad_invalid_field_name(field));
    if (const auto sa = static_cast<std::uint8_t>(status >> sa_status::shift); sa != 0) add(sa_error_name(sa));
    if (out.empty()) add("reserved status bits");  // only bits 7:5 set
    return code + out;
}

// ---------------------------------------------------------------------------
// ClassPortInfo

namespace {

// TC(31:24) SL(23:20) FL(19:0), as in the GRH and ClassPortInfo.
std::uint32_t tc_sl_fl(std::uint8_t tc, std::uint8_t sl, std::uint32_t fl) {
    return (std::uint32_t{tc} << 24) | (std::uint32_t{sl} << 20) | (fl & 0xFFFFF);
}

}  // namespace

bool ClassPortInfo::fields_in_range() const {
    return capability_mask2 <= 0x7FFFFFF && resp_time_value <= 0x1F && redirect_sl <= 0xF &&
           redirect_fl <= 0xFFFFF && redirect_qp <= ib::kQpnMask && trap_sl <= 0xF && trap_fl <= 0xFFFFF &&
           trap_qp <= ib::kQpnMask;
}

void ClassPortInfo::write_to(std::uint8_t* p) const {
    p[0] = base_version;
    p[1] = class_version;
    store_be16(p + 2, capability_mask);
    store_be32(p + 4, (capability_mask2 << 5) | resp_time_value);
    std::memcpy(p + 8, redirect_gid.data(), 16);
    store_be32(p + 24, tc_sl_fl(redirect_tc, redirect_sl, redirect_fl));
    store_be16(p + 28, redirect_lid);
    store_be16(p + 30, redirect_p_key);
    store_be32(p + 32, redirect_qp);  // byte 32 Reserved: QPN is 24 bits
    store_be32(p + 36, redirect_q_key);
    std::memcpy(p + 40, trap_gid.data(), 16);
    store_be32(p + 56, tc_sl_fl(trap_tc, trap_sl, trap_fl));
    store_be16(p + 60, trap_lid);
    store_be16(p + 62, trap_p_key);
    p[64] = trap_hl;
    store_be24(p + 65, trap_qp);
    store_be32(p + 68, trap_q_key);
}

ClassPortInfo ClassPortInfo::read_from(const std::uint8_t* p) {
    ClassPortInfo c;
    c.base_version = p[0];
    c.class_version = p[1];
    c.capability_mask = load_be16(p + 2);
    const std::uint32_t cm2 = load_be32(p + 4);
    c.capability_mask2 = cm2 >> 5;
    c.resp_time_value = static_cast<std::uint8_t>(cm2 & 0x1F);
    std::memcpy(c.redirect_gid.data(), p + 8, 16);
    const std::uint32_t redirect = load_be32(p + 24);
    c.redirect_tc = static_cast<std::uint8_t>(redirect >> 24);
    c.redirect_sl = static_cast<std::uint8_t>((redirect >> 20) & 0xF);
    c.redirect_fl = redirect & 0xFFFFF;
    c.redirect_lid = load_be16(p + 28);
    c.redirect_p_key = load_be16(p + 30);
    c.redirect_qp = load_be24(p + 33);
    c.redirect_q_key = load_be32(p + 36);
    std::memcpy(c.trap_gid.data(), p + 40, 16);
    const std::uint32_t trap = load_be32(p + 56);
    c.trap_tc = static_cast<std::uint8_t>(trap >> 24);
    c.trap_sl = static_cast<std::uint8_t>((trap >> 20) & 0xF);
    c.trap_fl = trap & 0xFFFFF;
    c.trap_lid = load_be16(p + 60);
    c.trap_p_key = load_be16(p + 62);
    c.trap_hl = p[64];
    c.trap_qp = load_be24(p + 65);
    c.trap_q_key = load_be32(p + 68);
    return c;
}

}  // namespace ipoibd::sa
