#include "sa_client/tools/sa_output.h"

#include <algorithm>
#include <cinttypes>
#include <functional>
#include <vector>

#include "transport/gid.h"

namespace ipoibd::sa::tools {

std::string Json::quote(std::string_view s) {
    std::string q = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            q += '\\';
            q += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
            q += esc;
        } else {
            q += c;
        }
    }
    return q + "\"";
}

void Json::key(std::string_view k) {
    if (out_.size() > 1) out_ += ",";
    out_ += quote(k) + ":";
}

Json& Json::str(std::string_view k, std::string_view value) {
    key(k);
    out_ += quote(value);
    return *this;
}

Json& Json::num(std::string_view k, std::uint64_t value) {
    key(k);
    out_ += std::to_string(value);
    return *this;
}

Json& Json::boolean(std::string_view k, bool value) {
    key(k);
    out_ += value ? "true" : "false";
    return *this;
}

Json& Json::null(std::string_view k) {
    key(k);
    out_ += "null";
    return *this;
}

Json& Json::raw(std::string_view k, std::string_view json) {
    key(k);
    out_ += json;
    return *this;
}

namespace {

unsigned sel(Selector s) { return static_cast<unsigned>(s); }
// The selector and value byte as saquery prints it: 0x84 = exactly 2048.
unsigned sel_byte(Selector s, std::uint8_t v) { return (sel(s) << 6) | v; }

void line(std::FILE* out, const char* name, const std::string& value) {
    std::string dots(name);
    dots.resize(24, '.');
    std::fprintf(out, "\t\t%s%s\n", dots.c_str(), value.c_str());
}

std::string hex(std::uint64_t v, int digits = 0) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%0*" PRIx64, digits, v);
    return b;
}

}  // namespace

std::string to_json(const McMemberRecord& r) {
    return Json()
        .str("mgid", format_gid(r.mgid))
        .str("port_gid", format_gid(r.port_gid))
        .num("q_key", r.q_key)
        .num("mlid", r.mlid)
        .num("mtu_selector", sel(r.mtu_selector))
        .num("mtu", r.mtu)
        .num("tclass", r.tclass)
        .num("p_key", r.p_key)
        .num("rate_selector", sel(r.rate_selector))
        .num("rate", r.rate)
        .num("packet_life_time_selector", sel(r.packet_life_time_selector))
        .num("packet_life_time", r.packet_life_time)
        .num("sl", r.sl)
        .num("flow_label", r.flow_label)
        .num("hop_limit", r.hop_limit)
        .num("scope", r.scope)
        .num("join_state", r.join_state)
        .boolean("proxy_join", r.proxy_join)
        .done();
}

std::string to_json(const PathRecord& r) {
    return Json()
        .num("service_id", r.service_id)
        .str("dgid", format_gid(r.dgid))
        .str("sgid", format_gid(r.sgid))
        .num("dlid", r.dlid)
        .num("slid", r.slid)
        .boolean("raw_traffic", r.raw_traffic)
        .num("flow_label", r.flow_label)
        .num("hop_limit", r.hop_limit)
        .num("tclass", r.tclass)
        .boolean("reversible", r.reversible)
        .num("numb_path", r.numb_path)
        .num("p_key", r.p_key)
        .num("qos_class", r.qos_class)
        .num("sl", r.sl)
        .num("mtu_selector", sel(r.mtu_selector))
        .num("mtu", r.mtu)
        .num("rate_selector", sel(r.rate_selector))
        .num("rate", r.rate)
        .num("packet_life_time_selector", sel(r.packet_life_time_selector))
        .num("packet_life_time", r.packet_life_time)
        .num("preference", r.preference)
        .done();
}

std::string to_json(const InformInfo& r) {
    return Json()
        .str("gid", format_gid(r.gid))
        .num("lid_range_begin", r.lid_range_begin)
        .num("lid_range_end", r.lid_range_end)
        .num("is_generic", r.is_generic)
        .num("subscribe", r.subscribe)
        .num("type", r.type)
        .num("trap_number_device_id", r.trap_number_device_id)
        .num("qpn", r.qpn)
        .num("resp_time_value", r.resp_time_value)
        .num("producer_type_vendor_id", r.producer_type_vendor_id)
        .done();
}

std::string to_json(const InformInfoRecord& r) {
    return Json()
        .str("subscriber_gid", format_gid(r.subscriber_gid))
        .num("enum", r.enum_)
        .raw("inform_info", to_json(r.inform_info))
        .done();
}

std::string to_json(const Notice& r) {
    Json j;
    j.boolean("is_generic", r.is_generic)
        .num("type", r.type)
        .num("producer_type_vendor_id", r.producer_type_vendor_id)
        .num("trap_number_device_id", r.trap_number_device_id)
        .num("issuer_lid", r.issuer_lid)
        .boolean("notice_toggle", r.notice_toggle)
        .num("notice_count", r.notice_count)
        .str("issuer_gid", format_gid(r.issuer_gid));
    if (const auto g = trap_gid(r)) j.str("gid", format_gid(*g));
    return j.done();
}

void print_record(std::FILE* out, const InformInfo& r) {
    std::fprintf(out, "InformInfo dump:\n");
    line(out, "gid", format_gid(r.gid));
    line(out, "lid_range_begin", hex(r.lid_range_begin, 4));
    line(out, "lid_range_end", hex(r.lid_range_end, 4));
    line(out, "is_generic", hex(r.is_generic, 2));
    line(out, "subscribe", hex(r.subscribe, 2));
    line(out, "type", hex(r.type, 4));
    line(out, "trap_num_device_id", hex(r.trap_number_device_id, 4) + " (" + std::to_string(r.trap_number_device_id) + ")");
    line(out, "qpn", hex(r.qpn, 6));
    line(out, "resp_time_val", hex(r.resp_time_value, 2));
    line(out, "producer_type", hex(r.producer_type_vendor_id, 6));
}

void print_record(std::FILE* out, const InformInfoRecord& r) {
    std::fprintf(out, "InformInfoRecord dump:\n");
    line(out, "subscriber_gid", format_gid(r.subscriber_gid));
    line(out, "subscriber_enum", hex(r.enum_, 4));
    print_record(out, r.inform_info);
}

void print_record(std::FILE* out, const Notice& r) {
    std::fprintf(out, "Notice dump:\n");
    line(out, "generic", r.is_generic ? "yes" : "no");
    line(out, "type", hex(r.type, 2));
    line(out, "producer_type", hex(r.producer_type_vendor_id, 6));
    line(out, "trap_num", hex(r.trap_number_device_id, 4) + " (" + std::to_string(r.trap_number_device_id) + ")");
    line(out, "issuer_lid", hex(r.issuer_lid, 4));
    line(out, "issuer_gid", format_gid(r.issuer_gid));
    if (const auto g = trap_gid(r)) line(out, "gid", format_gid(*g));
}

void print_record(std::FILE* out, const McMemberRecord& r) {
    std::fprintf(out, "MCMemberRecord dump:\n");
    line(out, "MGID", format_gid(r.mgid));
    line(out, "PortGid", format_gid(r.port_gid));
    line(out, "qkey", hex(r.q_key, 8));
    line(out, "mlid", hex(r.mlid, 4));
    line(out, "mtu", hex(sel_byte(r.mtu_selector, r.mtu), 2) + " (" + to_string(r.mtu_selector) + " " +
                         std::to_string(mtu_bytes(r.mtu)) + ")");
    line(out, "TClass", hex(r.tclass, 2));
    line(out, "pkey", hex(r.p_key, 4));
    line(out, "rate", hex(sel_byte(r.rate_selector, r.rate), 2) + " (" + to_string(r.rate_selector) + " " +
                          rate_name(r.rate) + ")");
    line(out, "pkt_life", hex(sel_byte(r.packet_life_time_selector, r.packet_life_time), 2));
    line(out, "SL", hex(r.sl));
    line(out, "FlowLabel", hex(r.flow_label));
    line(out, "HopLimit", hex(r.hop_limit, 2));
    line(out, "Scope", hex(r.scope));
    line(out, "JoinState", hex(r.join_state) + " (" + join_state_names(r.join_state) + ")");
    line(out, "ProxyJoin", hex(r.proxy_join ? 1 : 0));
}

void print_record(std::FILE* out, const PathRecord& r) {
    std::fprintf(out, "PathRecord dump:\n");
    line(out, "service_id", hex(r.service_id, 16));
    line(out, "dgid", format_gid(r.dgid));
    line(out, "sgid", format_gid(r.sgid));
    line(out, "dlid", hex(r.dlid));
    line(out, "slid", hex(r.slid));
    line(out, "hop_flow_raw", hex((std::uint64_t{r.raw_traffic} << 31) | (std::uint64_t{r.flow_label} << 8) | r.hop_limit));
    line(out, "tclass", hex(r.tclass));
    line(out, "num_path_revers", hex((r.reversible ? 0x80u : 0u) | r.numb_path, 2));
    line(out, "pkey", hex(r.p_key, 4));
    line(out, "qos_class", hex(r.qos_class));
    line(out, "sl", hex(r.sl));
    line(out, "mtu", hex(sel_byte(r.mtu_selector, r.mtu), 2) + " (" + to_string(r.mtu_selector) + " " +
                         std::to_string(mtu_bytes(r.mtu)) + ")");
    line(out, "rate", hex(sel_byte(r.rate_selector, r.rate), 2) + " (" + to_string(r.rate_selector) + " " +
                          rate_name(r.rate) + ")");
    line(out, "pkt_life", hex(sel_byte(r.packet_life_time_selector, r.packet_life_time), 2));
    line(out, "preference", hex(r.preference));
}

namespace {

// The records of a response. A table that came without RMPP (libumad2sim
// hands OpenSM's table over in one MAD, valid up to valid_bytes) is cut to
// the whole records that arrived, the zero padding after the last dropped;
// `truncated` says a record was cut.
template <class Record>
std::vector<Record> records_of(const SaResult& r, std::size_t valid_bytes, bool& truncated) {
    truncated = false;
    if (r.status() != 0) return {};
    if (r.header.header.method != ib::method::get_table_resp) return {get_record<Record>(r.header)};
    const std::size_t stride = std::size_t{r.header.attribute_offset} * 8;
    if (stride < Record::size) return {};
    bytes payload = r.payload;
    const bool whole = r.header.rmpp.active();
    if (!whole) payload = payload.first(std::min(payload.size(), valid_bytes - kSaHeaderSize));
    std::vector<Record> out;
    std::size_t at = 0;
    for (; at + stride <= payload.size(); at += stride) {
        const bytes rec = payload.subspan(at, stride);
        if (!whole && std::all_of(rec.begin(), rec.end(), [](std::uint8_t b) { return b == 0; })) return out;
        out.push_back(Record::read_from(rec.data()));
    }
    // Under libumad2sim the table may go on past the valid bytes: it was
    // cut if what is left holds part of a record, or if the records fill
    // the valid bytes so that no zero padding shows where the table ended.
    const bytes rest = payload.subspan(at);
    truncated = !whole && valid_bytes < kSaMadSize && !out.empty() &&
                (rest.empty() || std::any_of(rest.begin(), rest.end(), [](std::uint8_t b) { return b != 0; }));
    return out;
}

struct Printable {
    std::vector<std::string> json;
    std::vector<std::function<void()>> words;
    bool truncated = false;
};

template <class Record>
void collect(const SaResult& r, std::size_t valid_bytes, Printable& p) {
    for (const Record& rec : records_of<Record>(r, valid_bytes, p.truncated)) {
        p.json.push_back(to_json(rec));
        p.words.push_back([rec] { print_record(stdout, rec); });
    }
}

}  // namespace

bool print_result(const Request& req, const SaMad& sent, const expected<SaResult, SaFailure>& result,
                  std::size_t valid_bytes, bool json) {
    const char* attribute = sa_attribute_name(sent.header.attribute_id);
    const char* method = ib::method_name(sent.header.method);
    Json j;
    j.str("request", req.text)
        .str("command", req.command)
        .str("method", method)
        .str("attribute", attribute)
        .num("component_mask", sent.component_mask)
        .num("sm_key", sent.sm_key);
    if (!result) {
        if (json) std::printf("%s\n", j.null("status").str("failure", to_string(result.error())).done().c_str());
        else std::printf("%s: SubnAdm%s(%s): %s\n", req.text.c_str(), method, attribute, to_string(result.error()));
        return false;
    }
    const SaResult& r = *result;
    Printable p;
    switch (sent.header.attribute_id) {
        case sa_attr::mc_member_record: collect<McMemberRecord>(r, valid_bytes, p); break;
        case sa_attr::path_record: collect<PathRecord>(r, valid_bytes, p); break;
        case sa_attr::inform_info: collect<InformInfo>(r, valid_bytes, p); break;
        case sa_attr::inform_info_record: collect<InformInfoRecord>(r, valid_bytes, p); break;
        default: break;
    }
    if (json) {
        std::string records = "[";
        for (const std::string& rec : p.json) records += (records.size() > 1 ? "," : "") + rec;
        records += "]";
        j.num("status", r.status())
            .str("status_text", describe_sa_status(r.status()))
            .str("response_method", ib::method_name(r.header.header.method))
            .num("attribute_offset", r.header.attribute_offset)
            .raw("records", records)
            .boolean("truncated", p.truncated)
            .null("failure");
        std::printf("%s\n", j.done().c_str());
    } else {
        std::printf("%s: SubnAdm%s(%s) -> %s %s, %zu record(s)%s\n", req.text.c_str(), method, attribute,
                    ib::method_name(r.header.header.method), describe_sa_status(r.status()).c_str(), p.words.size(),
                    p.truncated ? " (table cut: libumad2sim carries 224 bytes of a MAD, no RMPP)" : "");
        for (const auto& print : p.words) print();
    }
    return r.status() == 0;
}

void print_port(const Request& req, const MadPortInfo& p, bool json) {
    if (json) {
        const std::string port = Json()
                                     .str("name", p.name)
                                     .num("lid", p.lid)
                                     .num("sm_lid", p.sm_lid)
                                     .num("sm_sl", p.sm_sl)
                                     .str("gid", format_gid(p.gid))
                                     .boolean("active", p.active)
                                     .done();
        std::printf("%s\n", Json().str("request", req.text).str("command", req.command).raw("port", port).done().c_str());
        return;
    }
    std::printf("%s: LID 0x%04x SM LID 0x%04x SM SL %u GID %s%s\n", p.name.c_str(), p.lid, p.sm_lid, p.sm_sl,
                format_gid(p.gid).c_str(), p.active ? "" : " (not ACTIVE)");
}

void print_report(const SaMad& report, bool json) {
    const Notice n = get_record<Notice>(report);
    if (json) {
        std::printf("%s\n", Json().str("command", "report").raw("notice", to_json(n)).done().c_str());
        return;
    }
    std::printf("Report: trap %u from LID 0x%04x\n", n.trap_number_device_id, n.issuer_lid);
    print_record(stdout, n);
}

}  // namespace ipoibd::sa::tools
