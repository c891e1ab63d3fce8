#include "sa_client/tools/sa_request.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/duration.h"
#include "transport/gid.h"

namespace po = boost::program_options;

namespace ipoibd::sa::tools {
namespace {

constexpr std::uint64_t kOpenSmDefaultSmKey = 1;

// Which options each command takes.
const std::map<std::string, std::set<std::string>>& command_options() {
    static const std::map<std::string, std::set<std::string>> table = {
        {"port", {}},
        {"groups", {"sm-key"}},
        {"group", {"sm-key"}},
        {"members", {"sm-key"}},
        {"path", {"sm-key", "sgid", "dgid", "slid", "dlid", "pkey", "table"}},
        {"join", {"sm-key", "join-state", "qkey", "pkey", "mtu", "rate", "sl", "tclass", "flow-label", "create"}},
        {"leave", {"sm-key", "join-state"}},
        {"subscribe", {"sm-key", "listen"}},
        {"unsubscribe", {"sm-key"}},
        {"subscriptions", {"sm-key"}},
    };
    return table;
}

po::options_description request_options() {
    po::options_description d("request options");
    d.add_options()
        ("sm-key", po::value<std::string>(), "SM_Key of the request (default 0, untrusted; members: 1)")
        ("join-state", po::value<std::string>(), "join/leave: full | non | sendonly | sendonly-full (default full)")
        ("qkey", po::value<std::string>(), "join: Q_Key")
        ("pkey", po::value<std::string>(), "join, path: P_Key")
        ("mtu", po::value<std::string>(), "join: [gt|lt|eq|largest:]BYTES, e.g. gt:2048 (default eq)")
        ("rate", po::value<std::string>(), "join: [gt|lt|eq|largest:]GBPS, e.g. 10 or lt:40")
        ("sl", po::value<std::string>(), "join: service level")
        ("tclass", po::value<std::string>(), "join: traffic class")
        ("flow-label", po::value<std::string>(), "join: flow label")
        ("create", po::bool_switch(), "join: add the components that let the SA create the group "
                                      "(Q_Key, TClass, P_Key, FlowLabel, SL; needs --qkey)")
        ("sgid", po::value<std::string>(), "path: source GID")
        ("dgid", po::value<std::string>(), "path: destination GID")
        ("slid", po::value<std::string>(), "path: source LID")
        ("dlid", po::value<std::string>(), "path: destination LID")
        ("table", po::bool_switch(), "path: SubnAdmGetTable instead of SubnAdmGet")
        ("listen", po::value<std::string>(), "subscribe: print Reports for this long (e.g. 10s), then unsubscribe");
    return d;
}

std::optional<std::uint64_t> number(const std::string& s, std::uint64_t max) {
    try {
        std::size_t end = 0;
        if (s.empty() || s[0] == '-') return std::nullopt;
        const auto v = std::stoull(s, &end, 0);
        if (end != s.size() || v > max) return std::nullopt;
        return v;
    } catch (...) {
        return std::nullopt;
    }
}

// "[gt|lt|eq|largest:]VALUE" -> selector and the text of the value.
std::optional<std::pair<Selector, std::string>> selector_and_value(const std::string& s) {
    static const std::pair<const char*, Selector> kWords[] = {{"gt", Selector::greater_than},
                                                             {"lt", Selector::less_than},
                                                             {"eq", Selector::exactly},
                                                             {"largest", Selector::largest_available}};
    const auto colon = s.find(':');
    if (colon == std::string::npos) {
        if (s == "largest") return std::pair{Selector::largest_available, std::string()};
        return std::pair{Selector::exactly, s};
    }
    for (const auto& [word, sel] : kWords)
        if (s.compare(0, colon, word) == 0 && colon == std::string::size_type(std::char_traits<char>::length(word)))
            return std::pair{sel, s.substr(colon + 1)};
    return std::nullopt;
}

std::optional<std::uint8_t> join_state_of(const std::string& s) {
    if (s == "full") return join_state::full_member;
    if (s == "non") return join_state::non_member;
    if (s == "sendonly") return join_state::send_only_non_member;
    if (s == "sendonly-full") return join_state::send_only_full_member;
    const auto n = number(s, 0xF);
    if (n && *n != 0) return static_cast<std::uint8_t>(*n);
    return std::nullopt;
}

std::optional<std::uint8_t> rate_code_of_gbps(const std::string& s) {
    double gbps = 0;
    try {
        std::size_t end = 0;
        gbps = std::stod(s, &end);
        if (end != s.size()) return std::nullopt;
    } catch (...) {
        return std::nullopt;
    }
    for (std::uint8_t code = 2; code < 64; ++code)
        if (rate_mbps(code) != 0 && static_cast<double>(rate_mbps(code)) == gbps * 1000) return code;
    return std::nullopt;
}

}  // namespace

std::string request_usage() {
    std::ostringstream s;
    s << "commands:\n"
         "  port                          this port and its SM (nothing is sent)\n"
         "  groups                        every multicast group (MCMemberRecord GetTable)\n"
         "  group MGID                    one group (MCMemberRecord Get)\n"
         "  members MGID                  a group's members (GetTable with SM_Key 1 unless --sm-key)\n"
         "  path --dgid G|--dlid L [--sgid G|--slid L] [--pkey P] [--table]\n"
         "                                a PathRecord (source: this port unless given)\n"
         "  join MGID [--join-state S] [--qkey Q] [--pkey P] [--mtu M] [--rate R] [--sl N]\n"
         "            [--tclass N] [--flow-label N] [--create]\n"
         "  leave MGID [--join-state S]\n"
         "  subscribe TRAP [--listen D]   InformInfo subscription to trap 64..67 or all\n"
         "  unsubscribe TRAP\n"
         "  subscriptions                 InformInfoRecords (SM_Key 1 unless --sm-key)\n"
         "  batch FILE                    one command per line ('-': stdin; '#' comments)\n"
      << request_options();
    return s.str();
}

expected<Request, std::string> parse_request(const std::vector<std::string>& words) {
    Request r;
    for (const std::string& w : words) r.text += (r.text.empty() ? "" : " ") + w;
    if (words.empty()) return unexpected(std::string("no command (see --help)"));
    r.command = words.front();
    const auto allowed = command_options().find(r.command);
    if (allowed == command_options().end()) return unexpected("unknown command '" + r.command + "' (see --help)");

    po::options_description desc = request_options();
    desc.add_options()("args", po::value<std::vector<std::string>>(), "");
    po::positional_options_description pos;
    pos.add("args", -1);
    po::variables_map vm;
    try {
        const std::vector<std::string> rest(words.begin() + 1, words.end());
        po::store(po::command_line_parser(rest).options(desc).positional(pos).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        return unexpected(r.command + ": " + e.what());
    }
    auto fail = [&](const std::string& what) { return unexpected(r.command + ": " + what); };
    for (const auto& [name, value] : vm) {
        if (name == "args" || value.defaulted()) continue;
        if (name == "create" || name == "table") {
            if (!value.as<bool>()) continue;
        }
        if (!allowed->second.count(name)) return fail("--" + name + " does not apply to '" + r.command + "'");
    }
    const auto args = vm.count("args") ? vm["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
    const bool wants_mgid = r.command == "group" || r.command == "members" || r.command == "join" || r.command == "leave";
    const bool wants_trap = r.command == "subscribe" || r.command == "unsubscribe";
    if (args.size() != (wants_mgid || wants_trap ? 1u : 0u)) {
        if (wants_mgid) return fail("give one MGID");
        if (wants_trap) return fail("give one trap number (64..67) or all");
        return fail("takes no arguments, got '" + args.front() + "'");
    }
    std::optional<Gid> mgid;
    if (wants_mgid) {
        mgid = parse_gid(args.front());
        if (!mgid) return fail("'" + args.front() + "' is not a GID");
    }
    auto opt = [&](const char* name) -> std::optional<std::string> {
        if (!vm.count(name)) return std::nullopt;
        return vm[name].as<std::string>();
    };
    auto num_opt = [&](const char* name, std::uint64_t max) -> expected<std::optional<std::uint64_t>, std::string> {
        const auto s = opt(name);
        if (!s) return std::optional<std::uint64_t>{};
        const auto n = number(*s, max);
        if (!n) return fail("--" + std::string(name) + " '" + *s + "': expected a number up to " + std::to_string(max));
        return std::optional<std::uint64_t>{*n};
    };

    auto sm_key = num_opt("sm-key", ~0ULL);
    if (!sm_key) return unexpected(sm_key.error());
    const bool trusted = r.command == "members" || r.command == "subscriptions";
    r.sm_key = sm_key->value_or(trusted ? kOpenSmDefaultSmKey : 0);

    if (r.command == "port") return r;
    if (wants_trap) {
        std::uint16_t trap = kInformAllTraps;
        if (args.front() != "all") {
            const auto n = number(args.front(), 0xFFFF);
            if (!n) return fail("'" + args.front() + "': expected a trap number (64..67) or all");
            trap = static_cast<std::uint16_t>(*n);
        }
        r.method = ib::method::set;
        // Reports go to the QP the subscription names: this tool's QP1.
        // OpenSM stores the requester's QPN and removes a subscription only
        // when the unsubscribing InformInfo names the same QPN.
        InformInfo info = generic_trap_subscription(trap, r.command == "subscribe");
        info.qpn = ib::kQp1;
        r.query = info;
        if (const auto s = opt("listen")) {
            const auto d = parse_duration(*s);
            if (!d) return fail("--listen '" + *s + "': " + d.error());
            r.listen = *d;
        }
        return r;
    }
    if (r.command == "subscriptions") {
        r.method = ib::method::get_table;
        r.query = InformInfoRecordQuery{};
        return r;
    }
    if (r.command == "groups" || r.command == "group" || r.command == "members") {
        McMemberQuery q;
        if (mgid) q.set_mgid(*mgid);
        r.method = r.command == "group" ? ib::method::get : ib::method::get_table;
        r.query = q;
        return r;
    }
    if (r.command == "path") {
        PathQuery q;
        for (const char* name : {"sgid", "dgid"}) {
            if (const auto s = opt(name)) {
                const auto g = parse_gid(*s);
                if (!g) return fail("--" + std::string(name) + " '" + *s + "' is not a GID");
                name[0] == 's' ? q.set_sgid(*g) : q.set_dgid(*g);
            }
        }
        auto slid = num_opt("slid", 0xFFFF), dlid = num_opt("dlid", 0xFFFF), pkey = num_opt("pkey", 0xFFFF);
        for (const auto* e : {&slid, &dlid, &pkey})
            if (!*e) return unexpected(e->error());
        if (*slid) q.set_slid(static_cast<std::uint16_t>(**slid));
        if (*dlid) q.set_dlid(static_cast<std::uint16_t>(**dlid));
        if (*pkey) q.set_p_key(static_cast<std::uint16_t>(**pkey));
        if (!(q.component_mask & (path_comp::dgid | path_comp::dlid))) return fail("give --dgid or --dlid");
        if ((q.component_mask & path_comp::sgid) && (q.component_mask & path_comp::slid))
            return fail("give --sgid or --slid, not both");
        if ((q.component_mask & path_comp::dgid) && (q.component_mask & path_comp::dlid))
            return fail("give --dgid or --dlid, not both");
        r.method = vm["table"].as<bool>() ? ib::method::get_table : ib::method::get;
        r.query = q;
        return r;
    }

    // join, leave
    McMemberQuery q;
    q.set_mgid(*mgid);
    r.with_port_gid = true;
    std::uint8_t js = join_state::full_member;
    if (const auto s = opt("join-state")) {
        const auto v = join_state_of(*s);
        if (!v) return fail("--join-state '" + *s + "': expected full, non, sendonly, sendonly-full or 1..15");
        js = *v;
    }
    q.set_join_state(js);
    r.method = r.command == "join" ? ib::method::set : ib::method::del;
    if (r.command == "leave") {
        r.query = q;
        return r;
    }
    const bool create = vm["create"].as<bool>();
    auto qkey = num_opt("qkey", 0xFFFFFFFF), pkey = num_opt("pkey", 0xFFFF), sl = num_opt("sl", 0xF),
         tclass = num_opt("tclass", 0xFF), flow = num_opt("flow-label", 0xFFFFF);
    for (const auto* e : {&qkey, &pkey, &sl, &tclass, &flow})
        if (!*e) return unexpected(e->error());
    if (create && !*qkey) return fail("--create needs --qkey (the new group's Q_Key)");
    if (*qkey) q.set_q_key(static_cast<std::uint32_t>(**qkey));
    if (*pkey || create) q.set_p_key(static_cast<std::uint16_t>(pkey->value_or(ib::kPKeyDefault)));
    if (*sl || create) q.set_sl(static_cast<std::uint8_t>(sl->value_or(0)));
    if (*tclass || create) q.set_tclass(static_cast<std::uint8_t>(tclass->value_or(0)));
    if (*flow || create) q.set_flow_label(static_cast<std::uint32_t>(flow->value_or(0)));
    if (const auto s = opt("mtu")) {
        const auto sv = selector_and_value(*s);
        const std::uint8_t code = sv && !sv->second.empty() ? mtu_code(static_cast<std::uint32_t>(number(sv->second, 4096).value_or(0))) : 0;
        if (!sv || (code == 0 && sv->first != Selector::largest_available))
            return fail("--mtu '" + *s + "': expected [gt|lt|eq|largest:]256|512|1024|2048|4096");
        q.set_mtu(sv->first, code);
    }
    if (const auto s = opt("rate")) {
        const auto sv = selector_and_value(*s);
        const auto code = sv && !sv->second.empty() ? rate_code_of_gbps(sv->second) : std::optional<std::uint8_t>{};
        if (!sv || (!code && sv->first != Selector::largest_available))
            return fail("--rate '" + *s + "': expected [gt|lt|eq|largest:]GBPS, e.g. 10, 2.5, eq:40");
        q.set_rate(sv->first, code.value_or(0));
    }
    r.query = q;
    return r;
}

expected<SaMad, std::string> build_mad(const Request& request, const MadPortInfo& port) {
    expected<SaMad, ib::CodecError> mad = unexpected(ib::CodecError::field_out_of_range);
    if (const auto* mq = std::get_if<McMemberQuery>(&request.query)) {
        McMemberQuery q = *mq;
        if (request.with_port_gid) q.set_port_gid(port.gid);
        mad = q.request(request.method, 0);
    } else if (const auto* pq = std::get_if<PathQuery>(&request.query)) {
        mad = pq->request(request.method, 0);
    } else if (const auto* ii = std::get_if<InformInfo>(&request.query)) {
        mad = make_sa_request(request.method, 0, *ii);
    } else if (const auto* iq = std::get_if<InformInfoRecordQuery>(&request.query)) {
        mad = make_sa_request(request.method, 0, iq->record, iq->component_mask);
    } else {
        return unexpected(request.command + " sends nothing");
    }
    if (!mad) return unexpected(request.command + ": a field is out of range");
    mad->sm_key = request.sm_key;
    return *mad;
}

}  // namespace ipoibd::sa::tools
