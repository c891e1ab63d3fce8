#include "transport/wire/mad.h"

#include <cstdio>

namespace ipoibd::ib {

expected<MadHeader, MadError> decode_mad(bytes mad) {
    if (mad.size() != kMadSize) return unexpected(MadError::wrong_size);
    MadHeader h = MadHeader::read_from(mad.data());
    if (h.base_version != kMadBaseVersion) return unexpected(MadError::bad_base_version);
    return h;
}

std::optional<std::array<std::uint8_t, kMadSize>> class_not_supported_response(const MadHeader& request) {
    const std::uint8_t m = request.method;
    if (request.is_response() || m == method::trap_repress || m == method::send || m == method::trap) return std::nullopt;
    MadHeader response = request;
    response.method = m == method::set ? method::get_resp : static_cast<std::uint8_t>(m | method::response_bit);
    response.status = mad_status::bad_version;
    response.class_specific = 0;
    std::array<std::uint8_t, kMadSize> out{};
    response.write_to(out.data());
    return out;
}

const char* to_string(MadError e) {
    switch (e) {
        case MadError::wrong_size: return "MAD is not 256 bytes";
        case MadError::bad_base_version: return "unsupported MAD BaseVersion";
    }
    return "unknown";
}

const char* method_name(std::uint8_t m) {
    switch (m) {
        case method::get: return "Get";
        case method::set: return "Set";
        case method::send: return "Send";
        case method::trap: return "Trap";
        case method::report: return "Report";
        case method::trap_repress: return "TrapRepress";
        case method::get_table: return "GetTable";
        case method::get_trace_table: return "GetTraceTable";
        case method::get_multi: return "GetMulti";
        case method::del: return "Delete";
        case method::get_resp: return "GetResp";
        case method::report_resp: return "ReportResp";
        case method::get_table_resp: return "GetTableResp";
        case method::get_multi_resp: return "GetMultiResp";
        case method::del_resp: return "DeleteResp";
        default: return "unknown method";
    }
}

std::string describe_mad_status(std::uint16_t status) {
    std::string out;
    auto add = [&](const char* what) {
        if (!out.empty()) out += "; ";
        out += what;
    };
    if (status == 0) return "success";
    if (status & mad_status::busy) add("busy");
    if (status & mad_status::redirect_required) add("redirect required");
    switch (status & mad_status::invalid_field_mask) {
        case 0: break;
        case mad_status::bad_version: add("bad class or base version"); break;
        case mad_status::method_not_supported: add("method not supported"); break;
        case mad_status::method_attr_not_supported: add("method/attribute combination not supported"); break;
        case mad_status::invalid_attr_or_modifier: add("invalid attribute or modifier value"); break;
        default: add("reserved invalid-field code"); break;
    }
    if (status & mad_status::class_specific_mask) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "class-specific status 0x%02x", (status & 0xFF00) >> 8);
        add(buf);
    }
    char code[16];
    std::snprintf(code, sizeof code, "0x%04x: ", status);
    return code + out;
}

}  // namespace ipoibd::ib
