// ibsaquery: subnet administration queries in the spirit of saquery, over
// ipoibd's SA client, on the soft fabric (QP1 of a soft port) or through
// libibumad (real HCAs; OpenSM under ibsim).
//
//   ibsaquery [--transport soft --fabric ADDR:PORT | --transport umad [--ca NAME --port N]]
//             [-j] [--timeout 500ms --retries 3] COMMAND [ARGS]     (commands: --help)
//
// main():
//  1. parse the connection options and the request(s); usage errors exit 2
//  2. open the MAD transport: a soft port brought to ACTIVE by the SM and
//     its QP1, or a libibumad port
//  3. for each request: submit it to the SaClient and move MADs between the
//     client and the transport until its callback (the SaClient's timeouts
//     and retries bound the wait)
//  4. print each result in words or as one JSON object per line
// Exit status: 0 every request answered with status 0, 1 an SA error status,
// no answer, or the port could not be opened, 2 usage.
#include <poll.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/duration.h"
#include "common/socket_address.h"
#include "sa_client/mad_transport_soft.h"
#include "sa_client/rmpp.h"
#include "sa_client/sa_client.h"
#include "sa_client/tools/sa_output.h"
#include "sa_client/tools/sa_request.h"
#include "transport/gid.h"
#include "transport/soft/guid.h"
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

std::optional<std::uint64_t> number(const std::string& s, std::uint64_t max) {
    try {
        std::size_t end = 0;
        const auto v = std::stoull(s, &end, 0);
        if (s.empty() || s[0] == '-' || end != s.size() || v > max) return std::nullopt;
        return v;
    } catch (...) {
        return std::nullopt;
    }
}

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

expected<Options, Usage> parse(int argc, char** argv) {
    Options o;
    std::string kind = "soft", fabric = "127.0.0.1:18516", guid = "auto", instance = "ibsaquery";
    std::string timeout = "500ms", wait_active = "10s";
    po::options_description desc("ibsaquery [options] COMMAND [ARGS]\n\nconnection options");
    desc.add_options()
        ("help,h", "this text")
        ("version", "print the version")
        ("transport", po::value(&kind), "soft | umad")
        ("fabric", po::value(&fabric), "soft: ibfabricd address ADDR:PORT")
        ("guid", po::value(&guid), "soft: port GUID (hex) or auto")
        ("instance", po::value(&instance), "soft: name the automatic GUID is derived from")
        ("wait-active", po::value(&wait_active), "soft: how long the SM may take to make the port ACTIVE")
        ("ca", po::value(&o.umad.ca), "umad: CA name (default: the first)")
        ("port", po::value(&o.umad.port_num), "umad: port number (default: the first ACTIVE one)")
        ("timeout", po::value(&timeout), "first wait for a response; doubles on each retry")
        ("retries", po::value(&o.client.retries), "times a request is sent again")
        ("json,j", "one JSON object per result")
        ("verbose,v", "transport and client counters on stderr at the end");
    po::options_description all;
    all.add(desc).add_options()("words", po::value<std::vector<std::string>>(), "");
    po::positional_options_description pos;
    pos.add("words", -1);
    po::variables_map vm;
    po::parsed_options parsed(&all);
    try {
        parsed = po::command_line_parser(argc, argv).options(all).positional(pos).allow_unregistered().run();
        po::store(parsed, vm);
        po::notify(vm);
    } catch (const po::error& e) {
        return unexpected(Usage{e.what()});
    }
    if (vm.count("help")) {
        std::cout << desc << "\n" << request_usage() << "\n";
        std::exit(0);
    }
    if (vm.count("version")) {
        std::cout << "ibsaquery " IPOIBD_VERSION " (transports: soft" << (umad_transport_built() ? ", umad" : "") << ")\n";
        std::exit(0);
    }
    o.json = vm.count("json") > 0;
    o.verbose = vm.count("verbose") > 0;
    if (kind == "soft") {
        o.kind = Options::Kind::soft;
        auto f = parse_socket_address(fabric);
        if (!f) return unexpected(Usage{"--fabric '" + fabric + "': " + f.error()});
        o.soft.fabric = *f;
        if (guid == "auto") {
            o.soft.port_guid = transport::stable_port_guid(instance);
        } else {
            const auto g = number(guid, ~0ULL);
            if (!g || *g == 0) return unexpected(Usage{"--guid '" + guid + "': expected a non-zero number or auto"});
            o.soft.port_guid = *g;
        }
        o.soft.node_description = "ibsaquery " + instance;
        auto w = parse_duration(wait_active);
        if (!w) return unexpected(Usage{"--wait-active '" + wait_active + "': " + w.error()});
        o.wait_active = *w;
    } else if (kind == "umad") {
        o.kind = Options::Kind::umad;
    } else {
        return unexpected(Usage{"--transport '" + kind + "': expected soft or umad"});
    }
    auto t = parse_duration(timeout);
    if (!t) return unexpected(Usage{"--timeout '" + timeout + "': " + t.error()});
    if (t->count() == 0) return unexpected(Usage{"--timeout must be more than 0"});
    o.client.timeout = *t;
    o.client.max_timeout = std::max(o.client.max_timeout, *t);
    if (o.client.retries > 10) return unexpected(Usage{"--retries " + std::to_string(o.client.retries) + ": at most 10"});

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
    std::unique_ptr<transport::SoftPort> soft_port;  // soft only; outlives the transport
    std::unique_ptr<MadTransport> transport;
};

// A soft port on the fabric, ACTIVE with an SM LID, and its QP1.
expected<Connection, std::string> open_soft(const Options& o) {
    auto port = transport::SoftPort::open(o.soft);
    if (!port) return unexpected("could not open a soft port to " + o.soft.fabric.to_string() + ": " + port.error().message());
    transport::SoftPort& p = **port;
    const auto deadline = Clock::now() + o.wait_active;
    while (p.attributes().state != transport::PortState::active || p.attributes().sm_lid == 0) {
        if (Clock::now() > deadline)
            return unexpected("the port did not become ACTIVE within " + std::to_string(o.wait_active.count()) +
                              " ms (state " + to_string(p.attributes().state) + "; is ibfabricd at " +
                              o.soft.fabric.to_string() + "?)");
        pollfd pfd{.fd = p.fd(), .events = POLLIN, .revents = 0};
        ::poll(&pfd, 1, 20);
        p.process();
        transport::PortEvent events[8];
        while (p.poll_events(events) > 0) {
        }
    }
    auto gsi = p.create_gsi_qp(kGsiSendDepth, kGsiReceiveDepth);
    if (!gsi) return unexpected("could not create QP1: " + gsi.error().message());
    auto t = SoftMadTransport::open(p, std::move(*gsi));
    if (!t) return unexpected(t.error().message());
    Connection c;
    c.transport = std::move(*t);
    c.soft_port = std::move(*port);
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

expected<SaResult, SaFailure> run_request(SaClient& client, MadTransport& t, const SaMad& mad) {
    std::optional<expected<SaResult, SaFailure>> result;
    auto handle = client.submit(mad, [&](const expected<SaResult, SaFailure>& r) { result = r; }, Clock::now());
    std::string last_send_error;
    while (!result) {
        for (const SaMad& m : client.take_outbound()) {
            auto s = t.send(m);
            if (!s && s.error().message() != last_send_error) {
                last_send_error = s.error().message();
                std::fprintf(stderr, "ibsaquery: %s\n", last_send_error.c_str());
            }
        }
        if (result) break;
        auto wait = kMaxWait;
        if (const auto deadline = client.next_deadline()) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
            wait = std::clamp(left, std::chrono::milliseconds(0), kMaxWait);
        }
        t.wait(wait);
        t.receive([&](bytes m) { client.on_mad(m, Clock::now()); });
        client.tick(Clock::now());
    }
    return *result;
}

// The records of a response. A table that came without RMPP (libumad2sim
// hands OpenSM's table over in one MAD, valid up to valid_bytes) is cut to
// the whole records that arrived; `truncated` says a record was cut.
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
        if (!whole && std::all_of(rec.begin(), rec.end(), [](std::uint8_t b) { return b == 0; })) break;
        out.push_back(Record::read_from(rec.data()));
    }
    if (!whole && valid_bytes < kSaMadSize) {
        const bytes rest = payload.subspan(std::min(at, payload.size()));
        truncated = std::any_of(rest.begin(), rest.end(), [](std::uint8_t b) { return b != 0; }) ||
                    payload.size() - std::min(at, payload.size()) < stride;
        truncated = truncated && !out.empty() && at + stride > payload.size();
    }
    return out;
}

// ---------------------------------------------------------------------------
// Output

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

// Prints one result; returns whether it was a success (status 0).
bool print_result(const Request& req, const SaMad& sent, const expected<SaResult, SaFailure>& result,
                  std::size_t valid_bytes, bool json) {
    const char* attribute = sa_attribute_name(sent.header.attribute_id);
    Json j;
    j.str("request", req.text)
        .str("command", req.command)
        .str("method", ib::method_name(sent.header.method))
        .str("attribute", attribute)
        .num("component_mask", sent.component_mask)
        .num("sm_key", sent.sm_key);
    if (!result) {
        if (json) {
            std::printf("%s\n", j.null("status").str("failure", to_string(result.error())).done().c_str());
        } else {
            std::printf("%s: SubnAdm%s(%s): %s\n", req.text.c_str(), ib::method_name(sent.header.method), attribute,
                        to_string(result.error()));
        }
        return false;
    }
    const SaResult& r = *result;
    bool truncated = false;
    std::string records = "[";
    std::vector<McMemberRecord> mc;
    std::vector<PathRecord> paths;
    if (sent.header.attribute_id == sa_attr::mc_member_record) mc = records_of<McMemberRecord>(r, valid_bytes, truncated);
    if (sent.header.attribute_id == sa_attr::path_record) paths = records_of<PathRecord>(r, valid_bytes, truncated);
    for (const auto& m : mc) records += (records.size() > 1 ? "," : "") + to_json(m);
    for (const auto& p : paths) records += (records.size() > 1 ? "," : "") + to_json(p);
    records += "]";
    if (json) {
        j.num("status", r.status())
            .str("status_text", describe_sa_status(r.status()))
            .str("response_method", ib::method_name(r.header.header.method))
            .num("attribute_offset", r.header.attribute_offset)
            .raw("records", records)
            .boolean("truncated", truncated)
            .null("failure");
        std::printf("%s\n", j.done().c_str());
    } else {
        std::printf("%s: SubnAdm%s(%s) -> %s %s, %zu record(s)%s\n", req.text.c_str(), ib::method_name(sent.header.method),
                    attribute, ib::method_name(r.header.header.method), describe_sa_status(r.status()).c_str(),
                    mc.size() + paths.size(), truncated ? " (table cut: libumad2sim carries 224 bytes of a MAD)" : "");
        for (const auto& m : mc) print_record(stdout, m);
        for (const auto& p : paths) print_record(stdout, p);
    }
    return r.status() == 0;
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
    const Options& o = *options;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);

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
        all_ok = print_result(req, *mad, result, transport.valid_bytes(), o.json) && all_ok;
    }
    if (o.verbose) print_counters(client, transport);
    return all_ok ? 0 : 1;
}
