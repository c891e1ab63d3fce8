#include "sa_client/tools/sa_request.h"

#include <boost/program_options.hpp>
#include <optional>
#include <ostream>
#include <sstream>

#include "common/duration.h"
#include "common/option_table.h"
#include "transport/gid.h"

namespace po = boost::program_options;

namespace ipoibd::sa::tools {
namespace {

constexpr std::uint64_t kOpenSmDefaultSmKey = 1;

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

// ---------------------------------------------------------------------------
// Request options: one row each, read into RequestOptions (every value
// checked; errors read "--mtu 'x': ...", the command is put in front).

struct RequestOptions {
    std::optional<std::uint64_t> sm_key, qkey, pkey, sl, tclass, flow_label, slid, dlid;
    std::optional<std::uint8_t> join_state;
    std::optional<std::pair<Selector, std::uint8_t>> mtu, rate;  // selector and code
    std::optional<Gid> sgid, dgid;
    std::optional<std::chrono::milliseconds> listen;
    bool create = false;
    bool table = false;
};

// A number up to `max` for the option `name`.
cli::Applied read_number(const char* name, const std::string& v, std::uint64_t max, std::optional<std::uint64_t>& into) {
    const auto n = number(v, max);
    if (!n) return unexpected("--" + std::string(name) + " '" + v + "': expected a number up to " + std::to_string(max));
    into = *n;
    return {};
}

cli::Applied read_gid(const char* name, const std::string& v, std::optional<Gid>& into) {
    const auto g = parse_gid(v);
    if (!g) return unexpected("--" + std::string(name) + " '" + v + "' is not a GID");
    into = *g;
    return {};
}

const cli::Option<RequestOptions> kRequestOptions[] = {
    {"sm-key", cli::Takes::value, "SM_Key of the request (default 0, untrusted; members: 1)",
     [](RequestOptions& o, const std::string& v) { return read_number("sm-key", v, ~0ULL, o.sm_key); }},
    {"join-state", cli::Takes::value, "join/leave: full | non | sendonly | sendonly-full (default full)",
     [](RequestOptions& o, const std::string& v) -> cli::Applied {
         o.join_state = join_state_of(v);
         if (!o.join_state) return unexpected("--join-state '" + v + "': expected full, non, sendonly, sendonly-full or 1..15");
         return {};
     }},
    {"qkey", cli::Takes::value, "join: Q_Key",
     [](RequestOptions& o, const std::string& v) { return read_number("qkey", v, 0xFFFFFFFF, o.qkey); }},
    {"pkey", cli::Takes::value, "join, path: P_Key",
     [](RequestOptions& o, const std::string& v) { return read_number("pkey", v, 0xFFFF, o.pkey); }},
    {"mtu", cli::Takes::value, "join: [gt|lt|eq|largest:]BYTES, e.g. gt:2048 (default eq)",
     [](RequestOptions& o, const std::string& v) -> cli::Applied {
         const auto sv = selector_and_value(v);
         const std::uint8_t code =
             sv && !sv->second.empty() ? mtu_code(static_cast<std::uint32_t>(number(sv->second, 4096).value_or(0))) : 0;
         if (!sv || (code == 0 && sv->first != Selector::largest_available))
             return unexpected("--mtu '" + v + "': expected [gt|lt|eq|largest:]256|512|1024|2048|4096");
         o.mtu = std::pair{sv->first, code};
         return {};
     }},
    {"rate", cli::Takes::value, "join: [gt|lt|eq|largest:]GBPS, e.g. 10 or lt:40",
     [](RequestOptions& o, const std::string& v) -> cli::Applied {
         const auto sv = selector_and_value(v);
         const auto code = sv && !sv->second.empty() ? rate_code_of_gbps(sv->second) : std::optional<std::uint8_t>{};
         if (!sv || (!code && sv->first != Selector::largest_available))
             return unexpected("--rate '" + v + "': expected [gt|lt|eq|largest:]GBPS, e.g. 10, 2.5, eq:40");
         o.rate = std::pair{sv->first, code.value_or(0)};
         return {};
     }},
    {"sl", cli::Takes::value, "join: service level",
     [](RequestOptions& o, const std::string& v) { return read_number("sl", v, 0xF, o.sl); }},
    {"tclass", cli::Takes::value, "join: traffic class",
     [](RequestOptions& o, const std::string& v) { return read_number("tclass", v, 0xFF, o.tclass); }},
    {"flow-label", cli::Takes::value, "join: flow label",
     [](RequestOptions& o, const std::string& v) { return read_number("flow-label", v, 0xFFFFF, o.flow_label); }},
    {"create", cli::Takes::nothing,
     "join: add the components that let the SA create the group (Q_Key, TClass, P_Key, FlowLabel, SL; needs --qkey)",
     [](RequestOptions& o, const std::string&) -> cli::Applied {
         o.create = true;
         return {};
     }},
    {"sgid", cli::Takes::value, "path: source GID",
     [](RequestOptions& o, const std::string& v) { return read_gid("sgid", v, o.sgid); }},
    {"dgid", cli::Takes::value, "path: destination GID",
     [](RequestOptions& o, const std::string& v) { return read_gid("dgid", v, o.dgid); }},
    {"slid", cli::Takes::value, "path: source LID",
     [](RequestOptions& o, const std::string& v) { return read_number("slid", v, 0xFFFF, o.slid); }},
    {"dlid", cli::Takes::value, "path: destination LID",
     [](RequestOptions& o, const std::string& v) { return read_number("dlid", v, 0xFFFF, o.dlid); }},
    {"table", cli::Takes::nothing, "path: SubnAdmGetTable instead of SubnAdmGet",
     [](RequestOptions& o, const std::string&) -> cli::Applied {
         o.table = true;
         return {};
     }},
    {"listen", cli::Takes::value, "subscribe: print Reports for this long (e.g. 10s), then unsubscribe",
     [](RequestOptions& o, const std::string& v) -> cli::Applied {
         const auto d = parse_duration(v);
         if (!d) return unexpected("--listen '" + v + "': " + d.error());
         o.listen = *d;
         return {};
     }},
};

po::options_description request_options() {
    po::options_description d("request options");
    cli::describe<RequestOptions>(kRequestOptions, d);
    return d;
}

// ---------------------------------------------------------------------------
// Commands: one row each (name, what it takes, the options that apply,
// usage, the handler that makes the query), like saquery's query_cmds[].

// The word after the command, and what it was read as.
enum class Argument { none, mgid, trap };
struct ArgumentValue {
    std::optional<Gid> mgid;
    std::uint16_t trap = kInformAllTraps;
};

// A handler fills in `r` (command, text, SM_Key and method already set).
using Build = expected<void, std::string> (*)(Request& r, const RequestOptions& o, const ArgumentValue& a);

struct Command {
    const char* name;
    Argument argument;
    std::uint8_t method;
    bool trusted;  // SM_Key 1 (OpenSM's default) unless --sm-key
    const char* options;  // the request options that apply, separated by spaces
    const char* synopsis;  // for --help, after the name
    const char* help;
    Build build;
};

expected<void, std::string> build_nothing(Request&, const RequestOptions&, const ArgumentValue&) {
    return {};
}

expected<void, std::string> build_groups(Request& r, const RequestOptions&, const ArgumentValue& a) {
    McMemberQuery q;
    if (a.mgid) q.set_mgid(*a.mgid);
    r.query = q;
    return {};
}

expected<void, std::string> build_path(Request& r, const RequestOptions& o, const ArgumentValue&) {
    PathQuery q;
    if (o.sgid) q.set_sgid(*o.sgid);
    if (o.dgid) q.set_dgid(*o.dgid);
    if (o.slid) q.set_slid(static_cast<std::uint16_t>(*o.slid));
    if (o.dlid) q.set_dlid(static_cast<std::uint16_t>(*o.dlid));
    if (o.pkey) q.set_p_key(static_cast<std::uint16_t>(*o.pkey));
    if (!(q.component_mask & (path_comp::dgid | path_comp::dlid))) return unexpected(std::string("give --dgid or --dlid"));
    if ((q.component_mask & path_comp::sgid) && (q.component_mask & path_comp::slid))
        return unexpected(std::string("give --sgid or --slid, not both"));
    if ((q.component_mask & path_comp::dgid) && (q.component_mask & path_comp::dlid))
        return unexpected(std::string("give --dgid or --dlid, not both"));
    if (o.table) r.method = ib::method::get_table;
    r.query = q;
    return {};
}

// join and leave: MGID, PortGID (this port's, known once it is open),
// JoinState; join adds each option given, --create the creation components.
expected<void, std::string> build_membership(Request& r, const RequestOptions& o, const ArgumentValue& a) {
    McMemberQuery q;
    q.set_mgid(*a.mgid);
    r.with_port_gid = true;
    q.set_join_state(o.join_state.value_or(join_state::full_member));
    if (r.command == "leave") {
        r.query = q;
        return {};
    }
    if (o.create && !o.qkey) return unexpected(std::string("--create needs --qkey (the new group's Q_Key)"));
    if (o.qkey) q.set_q_key(static_cast<std::uint32_t>(*o.qkey));
    if (o.pkey || o.create) q.set_p_key(static_cast<std::uint16_t>(o.pkey.value_or(ib::kPKeyDefault)));
    if (o.sl || o.create) q.set_sl(static_cast<std::uint8_t>(o.sl.value_or(0)));
    if (o.tclass || o.create) q.set_tclass(static_cast<std::uint8_t>(o.tclass.value_or(0)));
    if (o.flow_label || o.create) q.set_flow_label(static_cast<std::uint32_t>(o.flow_label.value_or(0)));
    if (o.mtu) q.set_mtu(o.mtu->first, o.mtu->second);
    if (o.rate) q.set_rate(o.rate->first, o.rate->second);
    r.query = q;
    return {};
}

expected<void, std::string> build_subscription(Request& r, const RequestOptions& o, const ArgumentValue& a) {
    // Reports go to the QP the subscription names: this tool's QP1.
    // OpenSM stores the requester's QPN and removes a subscription only
    // when the unsubscribing InformInfo names the same QPN.
    InformInfo info = generic_trap_subscription(a.trap, r.command == "subscribe");
    info.qpn = ib::kQp1;
    r.query = info;
    if (o.listen) r.listen = *o.listen;
    return {};
}

expected<void, std::string> build_subscriptions(Request& r, const RequestOptions&, const ArgumentValue&) {
    r.query = InformInfoRecordQuery{};
    return {};
}

const Command kCommands[] = {
    {"port", Argument::none, 0, false, "", "", "this port and its SM (nothing is sent)", build_nothing},
    {"groups", Argument::none, ib::method::get_table, false, "sm-key", "",
     "every multicast group (MCMemberRecord GetTable)", build_groups},
    {"group", Argument::mgid, ib::method::get, false, "sm-key", "MGID", "one group (MCMemberRecord Get)", build_groups},
    {"members", Argument::mgid, ib::method::get_table, true, "sm-key", "MGID",
     "a group's members (GetTable with SM_Key 1 unless --sm-key)", build_groups},
    {"path", Argument::none, ib::method::get, false, "sm-key sgid dgid slid dlid pkey table",
     "--dgid G|--dlid L [--sgid G|--slid L] [--pkey P] [--table]", "a PathRecord (source: this port unless given)",
     build_path},
    {"join", Argument::mgid, ib::method::set, false,
     "sm-key join-state qkey pkey mtu rate sl tclass flow-label create",
     "MGID [--join-state S] [--qkey Q] [--pkey P] [--mtu M] [--rate R] [--sl N]\n"
     "            [--tclass N] [--flow-label N] [--create]",
     "", build_membership},
    {"leave", Argument::mgid, ib::method::del, false, "sm-key join-state", "MGID [--join-state S]", "",
     build_membership},
    {"subscribe", Argument::trap, ib::method::set, false, "sm-key listen", "TRAP [--listen D]",
     "InformInfo subscription to trap 64..67 or all", build_subscription},
    {"unsubscribe", Argument::trap, ib::method::set, false, "sm-key", "TRAP", "", build_subscription},
    {"subscriptions", Argument::none, ib::method::get_table, true, "sm-key", "",
     "InformInfoRecords (SM_Key 1 unless --sm-key)", build_subscriptions},
};

bool applies(const Command& c, const std::string& option) {
    std::istringstream names(c.options);
    for (std::string name; names >> name;)
        if (name == option) return true;
    return false;
}

const Command* find_command(const std::string& name) {
    for (const Command& c : kCommands)
        if (name == c.name) return &c;
    return nullptr;
}

// The words after the command and before or between its options.
expected<ArgumentValue, std::string> read_argument(const Command& command, const std::vector<std::string>& args) {
    if (args.size() != (command.argument == Argument::none ? 0u : 1u)) {
        if (command.argument == Argument::mgid) return unexpected(std::string("give one MGID"));
        if (command.argument == Argument::trap) return unexpected(std::string("give one trap number (64..67) or all"));
        return unexpected("takes no arguments, got '" + args.front() + "'");
    }
    ArgumentValue a;
    if (command.argument == Argument::mgid) {
        a.mgid = parse_gid(args.front());
        if (!a.mgid) return unexpected("'" + args.front() + "' is not a GID");
    }
    if (command.argument == Argument::trap && args.front() != "all") {
        const auto n = number(args.front(), 0xFFFF);
        if (!n) return unexpected("'" + args.front() + "': expected a trap number (64..67) or all");
        a.trap = static_cast<std::uint16_t>(*n);
    }
    return a;
}

// "  name synopsis" and its help in a column, or on the next line when the
// synopsis is too long for it.
void usage_line(std::ostream& out, const std::string& synopsis, const std::string& help) {
    constexpr std::size_t kColumn = 30;
    out << "  " << synopsis;
    if (help.empty()) {
        out << "\n";
    } else if (synopsis.size() < kColumn) {
        out << std::string(kColumn - synopsis.size(), ' ') << help << "\n";
    } else {
        out << "\n" << std::string(kColumn + 2, ' ') << help << "\n";
    }
}

}  // namespace

std::string request_usage() {
    std::ostringstream s;
    s << "commands:\n";
    for (const Command& c : kCommands) usage_line(s, std::string(c.name) + (*c.synopsis ? " " : "") + c.synopsis, c.help);
    usage_line(s, "batch FILE", "one command per line ('-': stdin; '#' comments)");
    s << request_options();
    return s.str();
}

expected<Request, std::string> parse_request(const std::vector<std::string>& words) {
    Request r;
    for (const std::string& w : words) r.text += (r.text.empty() ? "" : " ") + w;
    if (words.empty()) return unexpected(std::string("no command (see --help)"));
    r.command = words.front();
    const Command* command = find_command(r.command);
    if (!command) return unexpected("unknown command '" + r.command + "' (see --help)");
    auto fail = [&](const std::string& what) { return unexpected(r.command + ": " + what); };

    po::options_description desc = request_options();
    desc.add_options()("args", po::value<std::vector<std::string>>(), "");
    po::positional_options_description pos;
    pos.add("args", -1);
    po::variables_map vm;
    if (auto error = cli::parse_arguments(std::vector<std::string>(words.begin() + 1, words.end()),
                                          [&](const std::vector<std::string>& args) {
                                              po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
                                              po::notify(vm);
                                          }))
        return fail(*error);
    for (const auto& given : vm) {
        const std::string& name = given.first;
        if (name == "args") continue;
        if (!applies(*command, name)) return fail("--" + name + " does not apply to '" + r.command + "'");
    }
    const auto argument =
        read_argument(*command, vm.count("args") ? vm["args"].as<std::vector<std::string>>() : std::vector<std::string>{});
    if (!argument) return fail(argument.error());
    RequestOptions options;
    if (auto applied = cli::apply<RequestOptions>(kRequestOptions, vm, options); !applied) return fail(applied.error());
    r.sm_key = options.sm_key.value_or(command->trusted ? kOpenSmDefaultSmKey : 0);
    r.method = command->method;
    if (auto built = command->build(r, options, *argument); !built) return fail(built.error());
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
