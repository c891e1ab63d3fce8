#include "fabric/partitions.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace ipoibd::fabric {
namespace {

std::string trim(std::string_view s) {
    std::size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return std::string(s.substr(b, e - b));
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

std::vector<std::string> split(std::string_view s, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= s.size(); ++i) {
        if (i == s.size() || s[i] == sep) {
            out.push_back(trim(s.substr(start, i - start)));
            start = i + 1;
        }
    }
    return out;
}

bool number(const std::string& s, std::uint64_t max, std::uint64_t& out) {
    if (s.empty()) return false;
    try {
        std::size_t end = 0;
        out = std::stoull(s, &end, 0);
        return end == s.size() && out <= max;
    } catch (...) {
        return false;
    }
}

bool membership(const std::string& s, Membership& m) {
    const std::string v = lower(s);
    if (v == "full") m = Membership::full;
    else if (v == "limited") m = Membership::limited;
    else if (v == "both") m = Membership::both;
    else return false;
    return true;
}

// One statement "header : members", starting at `line`.
expected<Partition, std::string> parse_statement(const std::string& stmt) {
    const auto colon = stmt.find(':');
    if (colon == std::string::npos) return unexpected(std::string("expected 'Name=PKey[,flags] : members ;'"));
    Partition p;
    const auto header = split(std::string_view(stmt).substr(0, colon), ',');
    const auto eq = header[0].find('=');
    p.name = trim(header[0].substr(0, eq));
    if (p.name.empty()) return unexpected(std::string("partition without a name"));
    if (eq == std::string::npos) return unexpected("partition '" + p.name + "' has no P_Key (write " + p.name + "=0x...)");
    std::uint64_t v = 0;
    const std::string pkey_text = trim(header[0].substr(eq + 1));
    if (!number(pkey_text, 0xFFFF, v) || (v & 0x7FFF) == 0)
        return unexpected("P_Key '" + pkey_text + "' of '" + p.name + "' is not a valid P_Key");
    p.pkey = static_cast<std::uint16_t>(v & 0x7FFF);
    Membership def = Membership::limited;
    for (std::size_t i = 1; i < header.size(); ++i) {
        const std::string& f = header[i];
        const auto feq = f.find('=');
        const std::string key = lower(trim(f.substr(0, feq)));
        const std::string val = feq == std::string::npos ? "" : trim(f.substr(feq + 1));
        auto need = [&](std::uint64_t max, auto& field) -> bool {
            if (!number(val, max, v)) return false;
            field = static_cast<std::remove_reference_t<decltype(field)>>(v);
            return true;
        };
        bool ok = true;
        if (key == "ipoib" && feq == std::string::npos) p.ipoib = true;
        else if (key == "mtu") ok = need(5, p.broadcast.mtu) && p.broadcast.mtu >= 1;
        else if (key == "rate") ok = need(63, p.broadcast.rate) && p.broadcast.rate >= 2;
        else if (key == "sl") ok = need(15, p.broadcast.sl);
        else if (key == "scope") ok = need(15, p.broadcast.scope);
        else if (key == "qkey" || key == "q_key") ok = need(0xFFFFFFFF, p.broadcast.qkey);
        else if (key == "tclass") ok = need(255, p.broadcast.tclass);
        else if (key == "flowlabel") ok = need(0xFFFFF, p.broadcast.flow_label);
        else if (key == "defmember") ok = membership(val, def);
        else return unexpected("unknown flag '" + f + "' in partition '" + p.name + "'");
        if (!ok) return unexpected("bad value '" + val + "' for " + key + " in partition '" + p.name + "'");
    }
    for (const std::string& m : split(std::string_view(stmt).substr(colon + 1), ',')) {
        if (m.empty()) continue;
        const auto meq = m.find('=');
        const std::string who = trim(m.substr(0, meq));
        PartitionMember member;
        member.membership = def;
        if (meq != std::string::npos && !membership(trim(m.substr(meq + 1)), member.membership))
            return unexpected("membership of '" + who + "' must be full, limited or both");
        if (who == "ALL") member.kind = PartitionMember::Kind::all;
        else if (who == "ALL_CAS") member.kind = PartitionMember::Kind::all_cas;
        else if (who == "ALL_SWITCHES") member.kind = PartitionMember::Kind::all_switches;
        else if (who == "SELF") member.kind = PartitionMember::Kind::self;
        else if (number(who, ~0ULL, v) && v != 0) {
            member.kind = PartitionMember::Kind::guid;
            member.guid = v;
        } else {
            return unexpected("member '" + who + "' is not ALL, ALL_CAS, ALL_SWITCHES, SELF or a port GUID");
        }
        p.members.push_back(member);
    }
    return p;
}

}  // namespace

expected<std::vector<Partition>, PartitionsError> parse_partitions(std::string_view text, const std::string& file) {
    if (text.starts_with("\xef\xbb\xbf")) text.remove_prefix(3);  // a UTF-8 byte order mark
    // Text only (a CR before a line break is the break's): a control
    // character or a byte that is not UTF-8 would reach the message that
    // quotes its statement, the terminal and the journal.
    int number = 1;
    for (std::size_t start = 0; start < text.size(); ++number) {
        const std::size_t end = std::min(text.find('\n', start), text.size());
        std::string_view l = text.substr(start, end - start);
        if (l.ends_with('\r')) l.remove_suffix(1);
        if (auto problem = text_problem(l)) return unexpected(PartitionsError{file, number, *problem + " (not text)"});
        start = end + 1;
    }
    std::vector<Partition> out;
    std::string stmt;
    int line = 1, stmt_line = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '#') {
            while (i < text.size() && text[i] != '\n') ++i;
            if (i < text.size()) ++line;
            continue;
        }
        if (c == '\n') ++line;
        if (c == ';') {
            auto p = parse_statement(stmt);
            if (!p) return unexpected(PartitionsError{file, stmt_line, p.error()});
            p->line = stmt_line;
            for (const Partition& q : out) {
                if (q.name == p->name)
                    return unexpected(PartitionsError{file, stmt_line, "partition '" + p->name + "' defined again (first at line " + std::to_string(q.line) + ")"});
                if (q.pkey == p->pkey)
                    return unexpected(PartitionsError{file, stmt_line, "P_Key of '" + p->name + "' already used by '" + q.name + "' (line " + std::to_string(q.line) + ")"});
            }
            out.push_back(std::move(*p));
            stmt.clear();
            stmt_line = 0;
            continue;
        }
        if (stmt_line == 0 && !std::isspace(static_cast<unsigned char>(c))) stmt_line = line;
        stmt += c;
    }
    if (!trim(stmt).empty()) return unexpected(PartitionsError{file, stmt_line, "statement not ended with ';'"});
    if (out.empty()) return unexpected(PartitionsError{file, line, "no partitions defined"});
    return out;
}

expected<std::vector<Partition>, PartitionsError> load_partitions(const std::string& path) {
    std::ifstream f(path);
    if (!f) return unexpected(PartitionsError{path, 0, "cannot be read"});
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_partitions(ss.str(), path);
}

std::vector<Partition> default_partitions() {
    Partition p;
    p.name = "Default";
    p.pkey = 0x7FFF;
    p.ipoib = true;
    p.members.push_back({PartitionMember::Kind::all, 0, Membership::full});
    return {p};
}

std::vector<std::uint16_t> pkeys_for_port(const std::vector<Partition>& partitions, std::uint64_t port_guid,
                                          std::uint64_t sm_port_guid) {
    std::vector<std::uint16_t> out;
    auto add = [&](std::uint16_t k) {
        if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
    };
    for (const Partition& p : partitions) {
        // A port named by several members gets every membership they give.
        bool full = false, limited = false;
        for (const PartitionMember& m : p.members) {
            using K = PartitionMember::Kind;
            const bool match = m.kind == K::all || m.kind == K::all_cas || (m.kind == K::guid && m.guid == port_guid) ||
                               (m.kind == K::self && sm_port_guid != 0 && port_guid == sm_port_guid);
            if (!match) continue;
            full = full || m.membership != Membership::limited;
            limited = limited || m.membership != Membership::full;
        }
        if (full) add(static_cast<std::uint16_t>(p.pkey | 0x8000));
        if (limited) add(p.pkey);
    }
    return out;
}

}  // namespace ipoibd::fabric
