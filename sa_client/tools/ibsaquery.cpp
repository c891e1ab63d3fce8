// ibsaquery: subnet administration queries in the spirit of saquery, over
// ipoibd's SA client, on the soft fabric (QP1 of a soft port) or through
// libibumad (real HCAs; OpenSM under ibsim).
//
//   ibsaquery [--transport soft --fabric ADDR:PORT | --transport umad [--ca NAME --port N]]
//             [-j] [--timeout 500ms --retries 3] COMMAND [ARGS]     (commands: --help)
//
// main():
//  1. parse the connection options (a table of rows) and the request(s);
//     usage errors exit 2
//  2. open the MAD transport: a soft port brought to ACTIVE by the SM and
//     its QP1, or a libibumad port
//  3. for each request: submit it to the SaClient and move MADs between the
//     client and the transport until its callback (the SaClient's timeouts
//     and retries bound the wait)
//  4. print each result in words or as one JSON object per line
// SIGINT/SIGTERM end subscribe --listen early (it then unsubscribes);
// every other wait is bounded by the SaClient's timeouts.
// Exit status: 0 every request answered with status 0, 1 an SA error status,
// no answer, or the port could not be opened, 2 usage.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/duration.h"
#include "common/option_table.h"
#include "common/socket_address.h"
#include "sa_client/mad_transport_soft.h"
#include "sa_client/sa_client.h"
#include "sa_client/tools/sa_output.h"
#include "sa_client/tools/sa_request.h"
#include "transport/gid.h"
#include "transport/soft/guid.h"
#include "transport/port_factory.h"
#include "transport/soft/soft_port.h"

namespace po = boost::program_options;
using namespace ipoibd;
using namespace ipoibd::sa;
using namespace ipoibd::sa::tools;

namespace {

constexpr std::uint32_t kGsiSendDepth = 64;
constexpr std::uint32_t kGsiReceiveDepth = 32;
constexpr auto kMaxWait = std::chrono::milliseconds(100);  // per wait: link packets and ticks keep going

struct Options {
    enum class Kind { soft, umad } kind = Kind::soft;
    transport::SoftPortConfig soft;
    UmadTransportConfig umad;
    std::chrono::milliseconds wait_active{10000};
    SaClient::Config client;
    bool json = false;
    bool verbose = false;
    std::vector<Request> requests;
};

// A usage error: printed by main, exit 2.
struct Usage {
    std::string what;
};

using cli::number;

std::vector<std::string> split_words(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}

// Requests of a batch file: one per line, '#' starts a comment.
expected<std::vector<Request>, Usage> read_batch(const std::string& path) {
    std::ifstream file;
    std::istream* in = &std::cin;
    if (path != "-") {
        file.open(path);
        if (!file) return unexpected(Usage{"batch: cannot read '" + path + "'"});
        in = &file;
    }
    std::vector<Request> out;
    std::string line;
    for (unsigned n = 1; std::getline(*in, line); ++n) {
        if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
        const auto words = split_words(line);
        if (words.empty()) continue;
        if (words.front() == "batch") return unexpected(Usage{path + ":" + std::to_string(n) + ": batch files do not nest"});
        auto r = parse_request(words);
        if (!r) return unexpected(Usage{path + ":" + std::to_string(n) + ": " + r.error()});
        out.push_back(std::move(*r));
    }
    return out;
}

bool soft(const Options& o) { return o.kind == Options::Kind::soft; }

// The connection options, one row each: name, what it takes, help, how it
// applies (and the value applied when it is not given). Rows apply in
// order: --transport before the soft-only ones, --guid before --instance.
// The soft-only rows leave their value unread under another transport.
const cli::Option<Options> kOptions[] = {
    {"help,h", cli::Takes::nothing, "this text"},
    {"version", cli::Takes::nothing, "print the version"},
    {"transport", cli::Takes::value, "soft | umad",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v == "soft") {
             o.kind = Options::Kind::soft;
         } else if (v == "umad") {
             o.kind = Options::Kind::umad;
         } else {
             return unexpected("--transport '" + v + "': expected soft or umad");
         }
         return {};
     },
     "soft"},
    {"fabric", cli::Takes::value, "soft: ibfabricd address ADDR:PORT",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (!soft(o)) return {};
         auto f = parse_socket_address(v);
         if (!f) return unexpected("--fabric '" + v + "': " + f.error());
         o.soft.fabric = *f;
         return {};
     },
     "127.0.0.1:18516"},
    {"guid", cli::Takes::value, "soft: port GUID (hex) or auto",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (!soft(o) || v == "auto") return {};  // auto: --instance derives it
         const auto g = number(v, ~0ULL);
         if (!g || *g == 0) return unexpected("--guid '" + v + "': expected a non-zero number or auto");
         o.soft.port_guid = *g;
         return {};
     },
     "auto"},
    {"instance", cli::Takes::value, "soft: name the automatic GUID is derived from",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (!soft(o)) return {};
         if (o.soft.port_guid == 0) o.soft.port_guid = transport::stable_port_guid(v);
         o.soft.node_description = "ibsaquery " + v;
         return {};
     },
     "ibsaquery"},
    {"wait-active", cli::Takes::value, "soft: how long the SM may take to make the port ACTIVE",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (!soft(o)) return {};
         auto w = parse_duration(v);
         if (!w) return unexpected("--wait-active '" + v + "': " + w.error());
         o.wait_active = *w;
         return {};
     },
     "10s"},
    {"ca", cli::Takes::value, "umad: CA name (default: the first)",
     [](Options& o, const std::string& v) -> cli::Applied {
         o.umad.ca = v;
         return {};
     }},
    {"port", cli::Takes::value, "umad: port number (default: the first ACTIVE one)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<unsigned>("port", v);
         if (!n) return unexpected(n.error());
         o.umad.port_num = *n;
         return {};
     }},
    {"timeout", cli::Takes::value, "first wait for a response; doubles on each retry",
     [](Options& o, const std::string& v) -> cli::Applied {
         auto t = parse_duration(v);
         if (!t) return unexpected("--timeout '" + v + "': " + t.error());
         if (t->count() == 0) return unexpected(std::string("--timeout must be more than 0"));
         o.client.timeout = *t;
         o.client.max_timeout = std::max(o.client.max_timeout, *t);
         return {};
     },
     "500ms"},
    {"retries", cli::Takes::value, "times a request is sent again",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<unsigned>("retries", v);
         if (!n) return unexpected(n.error());
         if (*n > 10) return unexpected("--retries " + std::to_string(*n) + ": at most 10");
         o.client.retries = *n;
         return {};
     }},
    {"json,j", cli::Takes::nothing, "one JSON object per result",
     [](Options& o, const std::string&) -> cli::Applied {
         o.json = true;
         return {};
     }},
    {"verbose,v", cli::Takes::nothing, "transport and client counters on stderr at the end",
     [](Options& o, const std::string&) -> cli::Applied {
         o.verbose = true;
         return {};
     }},
};

expected<Options, Usage> parse(int argc, char** argv) {
    po::options_description desc("ibsaquery [options] COMMAND [ARGS]\n\nconnection options");
    cli::describe<Options>(kOptions, desc);
    po::options_description all;
    all.add(desc).add_options()("words", po::value<std::vector<std::string>>(), "");
    po::positional_options_description pos;
    pos.add("words", -1);
    po::variables_map vm;
    po::parsed_options parsed(&all);
    if (auto error = cli::parse_arguments(cli::arguments(argc, argv), [&](const std::vector<std::string>& args) {
            parsed = po::command_line_parser(args).options(all).positional(pos).allow_unregistered().run();
            po::store(parsed, vm);
            po::notify(vm);
        }))
        return unexpected(Usage{*error});
    if (vm.count("help")) {
        std::cout << desc << "\n" << request_usage() << "\n";
        std::exit(0);
    }
    if (vm.count("version")) {
        std::cout << "ibsaquery " IPOIBD_VERSION " (transports: soft" << (umad_transport_built() ? ", umad" : "") << ")\n";
        std::exit(0);
    }
    Options o;
    if (auto applied = cli::apply<Options>(kOptions, vm, o); !applied) return unexpected(Usage{applied.error()});

    // Everything the connection options did not take is the request.
    const auto words = po::collect_unrecognized(parsed.options, po::include_positional);
    if (!words.empty() && words.front() == "batch") {
        if (words.size() != 2) return unexpected(Usage{"batch: give one FILE ('-' for stdin)"});
        auto batch = read_batch(words[1]);
        if (!batch) return unexpected(batch.error());
        o.requests = std::move(*batch);
    } else {
        auto r = parse_request(words);
        if (!r) return unexpected(Usage{r.error()});
        o.requests.push_back(std::move(*r));
    }
    return o;
}

// ---------------------------------------------------------------------------
// The MAD transport

struct Connection {
    std::unique_ptr<transport::Port> soft_port;  // soft only; outlives the transport
    std::unique_ptr<MadTransport> transport;
};

// A soft port on the fabric, ACTIVE with an SM LID, and its QP1.
expected<Connection, std::string> open_soft(const Options& o) {
    transport::PortOptions po;
    po.kind = transport::PortOptions::Kind::soft;
    po.fabric = o.soft.fabric;
    po.guid = o.soft.port_guid;
    po.node_description = o.soft.node_description;
    auto port = transport::open_port(po);
    if (!port) return unexpected("could not open a soft port to " + o.soft.fabric.to_string() + ": " + port.error().message());
    transport::Port& p = *port->port;
    if (!transport::wait_until_active(p, o.wait_active))
        return unexpected("the port did not become ACTIVE within " + std::to_string(o.wait_active.count()) +
                          " ms (state " + to_string(p.attributes().state) + "; is ibfabricd at " +
                          o.soft.fabric.to_string() + "?)");
    auto gsi = p.create_gsi_qp(kGsiSendDepth, kGsiReceiveDepth);
    if (!gsi) return unexpected("could not create QP1: " + gsi.error().message());
    auto t = SoftMadTransport::open(p, std::move(*gsi));
    if (!t) return unexpected(t.error().message());
    Connection c;
    c.transport = std::move(*t);
    c.soft_port = std::move(port->port);
    return c;
}

expected<Connection, std::string> open_connection(const Options& o) {
    if (o.kind == Options::Kind::soft) return open_soft(o);
    auto t = open_umad_transport(o.umad);
    if (!t) return unexpected(t.error().message());
    Connection c;
    c.transport = std::move(*t);
    if (c.transport->port_info().sm_lid == 0) return unexpected(c.transport->port_info().name + " has no SM LID (is an SM running?)");
    return c;
}

// ---------------------------------------------------------------------------
// One request through the SaClient

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// One turn of the loop: MADs out, a bounded wait, MADs in, timers.
void pump(SaClient& client, MadTransport& t, std::chrono::milliseconds max_wait, std::string& last_send_error) {
    for (const SaMad& m : client.take_outbound()) {
        auto s = t.send(m);
        if (!s && s.error().message() != last_send_error) {
            last_send_error = s.error().message();
            std::fprintf(stderr, "ibsaquery: %s\n", last_send_error.c_str());
        }
    }
    auto wait = max_wait;
    if (const auto deadline = client.next_deadline()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
        wait = std::clamp(left, std::chrono::milliseconds(0), max_wait);
    }
    t.wait(wait);
    t.receive([&](bytes m) { client.on_mad(m, Clock::now()); });
    client.tick(Clock::now());
}

// One request through the SaClient: its timeouts and retries end the wait.
expected<SaResult, SaFailure> run_request(SaClient& client, MadTransport& t, const SaMad& mad) {
    std::optional<expected<SaResult, SaFailure>> result;
    auto handle = client.submit(mad, [&](const expected<SaResult, SaFailure>& r) { result = r; }, Clock::now());
    std::string last_send_error;
    while (!result) pump(client, t, kMaxWait, last_send_error);
    // ACKs of a finished RMPP transfer, and the like, go out at once.
    for (const SaMad& m : client.take_outbound()) (void)t.send(m);
    return *result;
}

// subscribe --listen: the Reports that come in until `duration` passes or
// a signal, each answered with ReportResp by the SaClient; then the
// subscription is removed again.
bool listen_then_unsubscribe(SaClient& client, MadTransport& t, const Request& subscribe, bool json) {
    client.set_report_handler([json](const SaMad& report) { print_report(report, json); });
    ::signal(SIGINT, on_signal);
    ::signal(SIGTERM, on_signal);
    const auto end = Clock::now() + subscribe.listen;
    std::string last_send_error;
    while (!g_stop && Clock::now() < end) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(end - Clock::now());
        pump(client, t, std::clamp(left, std::chrono::milliseconds(0), kMaxWait), last_send_error);
    }
    for (const SaMad& m : client.take_outbound()) (void)t.send(m);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    client.set_report_handler(nullptr);
    Request unsubscribe = subscribe;
    unsubscribe.command = "unsubscribe";
    InformInfo& info = std::get<InformInfo>(unsubscribe.query);
    info.subscribe = 0;
    unsubscribe.text = "unsubscribe " + (info.trap_number_device_id == kInformAllTraps
                                             ? std::string("all")
                                             : std::to_string(info.trap_number_device_id));
    unsubscribe.listen = {};
    const auto mad = build_mad(unsubscribe, t.port_info());
    if (!mad) return false;
    return print_result(unsubscribe, *mad, run_request(client, t, *mad), t.valid_bytes(), json);
}

void print_counters(const SaClient& client, const MadTransport& t) {
    const auto& c = client.counters();
    const auto& m = t.counters();
    std::fprintf(stderr,
                 "sa_client: requests %llu sent %llu retries %llu timeouts %llu responses %llu unmatched %llu malformed %llu\n"
                 "mad_transport: sent %llu send_errors %llu received %llu receive_errors %llu short %llu dropped %llu\n",
                 static_cast<unsigned long long>(c.requests), static_cast<unsigned long long>(c.sent),
                 static_cast<unsigned long long>(c.retries), static_cast<unsigned long long>(c.timeouts),
                 static_cast<unsigned long long>(c.responses), static_cast<unsigned long long>(c.unmatched),
                 static_cast<unsigned long long>(c.malformed), static_cast<unsigned long long>(m.sent),
                 static_cast<unsigned long long>(m.send_errors), static_cast<unsigned long long>(m.received),
                 static_cast<unsigned long long>(m.receive_errors), static_cast<unsigned long long>(m.short_received),
                 static_cast<unsigned long long>(m.dropped));
}

}  // namespace

int main(int argc, char** argv) {
    auto options = parse(argc, argv);
    if (!options) {
        std::fprintf(stderr, "ibsaquery: %s\n", options.error().what.c_str());
        return 2;
    }
    Options& o = *options;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    // subscribe --listen prints the SA's Reports: on an HCA the kernel
    // hands them only to an agent registered for them.
    o.umad.take_reports = std::any_of(o.requests.begin(), o.requests.end(),
                                      [](const Request& r) { return r.listen.count() > 0; });

    auto connection = open_connection(o);
    if (!connection) {
        std::fprintf(stderr, "ibsaquery: %s\n", connection.error().c_str());
        return 1;
    }
    MadTransport& transport = *connection->transport;
    SaClient client(o.client);

    bool all_ok = true;
    for (const Request& req : o.requests) {
        const MadPortInfo port = transport.port_info();
        if (req.command == "port") {
            print_port(req, port, o.json);
            continue;
        }
        const auto mad = build_mad(req, port);
        if (!mad) {
            std::fprintf(stderr, "ibsaquery: %s\n", mad.error().c_str());
            all_ok = false;
            continue;
        }
        const auto result = run_request(client, transport, *mad);
        const bool ok = print_result(req, *mad, result, transport.valid_bytes(), o.json);
        all_ok = ok && all_ok;
        if (ok && req.listen.count() > 0) all_ok = listen_then_unsubscribe(client, transport, req, o.json) && all_ok;
    }
    if (o.verbose) print_counters(client, transport);
    return all_ok ? 0 : 1;
}
