#include "sa_client/tools/sa_output.h"

#include <cinttypes>

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

}  // namespace ipoibd::sa::tools
