// ibfabricd: the soft InfiniBand fabric. One switch with a subnet manager on
// its management port, IBA packets carried in UDP datagrams.
//
//   ibfabricd [--listen ADDR:PORT] [--pcap FILE] [--sweep-interval 1s] ...
//
// main():
//  1. parse options, a table of rows (errors name the option and value, exit 2)
//  2. block the signals, open the fabric service (fabric_service.h): bind the
//     UDP socket, open the capture file (errors exit 1)
//  3. on the EventLoop: the service's socket, its tick timer, the signals,
//     the control socket (ibfabricctl), the metrics; say "listening"
//  4. loop: datagrams -> switch; timer ticks -> link packets, link timeouts,
//     SM sweeps and retries; SIGUSR1 -> counters to stdout; SIGHUP -> the
//     fabric key and partitions files again; SIGTERM/SIGINT -> counters,
//     then exit 0

#include <boost/program_options.hpp>

#include <map>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "common/duration.h"
#include "common/hex.h"
#include "common/option_table.h"
#include "common/prometheus.h"
#include "common/socket_address.h"
#include "common/unique_fd.h"
#include "common/utf8.h"
#include "runtime/control.h"
#include "runtime/event_loop.h"
#include "runtime/metrics_http.h"
#include "fabric/fabric_control.h"
#include "fabric/fabric_service.h"
#include "fabric/topology_config.h"
#include "transport/gid.h"

namespace po = boost::program_options;
using namespace ipoibd;
using namespace ipoibd::fabric;

namespace {

struct Options {
    FabricServiceOptions service;
    std::string key_file;  // --fabric-key: re-read on SIGHUP
    std::string partitions_file;  // --partitions: re-read on SIGHUP
    std::string control_socket;  // empty: default_fabric_socket(), best effort; "none": off
    std::optional<SocketAddress> metrics_listen;
    std::string metrics_file;
    bool quiet = false;
    // --sim-socket: serve libumad2sim clients (OpenSM, infiniband-diags).
    std::optional<SimServerOptions> sim;
    // --topology: the switches of a .net file (topology_config.h).
    std::string topology_file;
    std::vector<std::string> topology_switches;
    std::map<std::string, SocketAddress> switch_addresses;
};

SimServerOptions& sim_options(Options& o) {
    if (!o.sim) o.sim.emplace();
    return *o.sim;
}

// One line each, whatever a port or a file put in it (escape_text).
void log_line(const std::string& s) {
    std::fprintf(stderr, "ibfabricd: %s\n", escape_text(s).c_str());
    std::fflush(stderr);
}

using cli::number;

// A duration of more than 0 for `option`.
cli::Applied positive_duration(const char* option, const std::string& value, std::chrono::milliseconds& into) {
    auto d = parse_duration(value);
    if (!d) return unexpected(std::string(option) + ": " + d.error());
    if (d->count() == 0) return unexpected(std::string(option) + " must be more than 0");
    into = *d;
    return {};
}

// The options, one row each: name, what it takes, help, how it applies
// (and the value applied when it is not given).
const cli::Option<Options> kOptions[] = {
    {"help,h", cli::Takes::nothing, "this text"},
    {"version", cli::Takes::nothing, "print the version"},
    {"listen", cli::Takes::value, "UDP address the switch listens on, ADDR:PORT",
     [](Options& o, const std::string& v) -> cli::Applied {
         auto l = parse_socket_address(v);
         if (!l) return unexpected("--listen '" + v + "': " + l.error());
         if (l->port() == 4791) return unexpected(std::string("--listen: port 4791 is RoCEv2's; the soft fabric must not use it"));
         o.service.listen = *l;
         return {};
     },
     "0.0.0.0:18516"},
    {"pcap", cli::Takes::value, "write every packet entering the switch to FILE (pcap, ERF type 21)",
     [](Options& o, const std::string& v) -> cli::Applied {
         o.service.pcap = v;
         return {};
     }},
    {"ports", cli::Takes::value, "switch ports, 1..254",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto ports = cli::typed<unsigned>("ports", v);
         if (!ports) return unexpected(ports.error());
         if (*ports < 1 || *ports > Switch::kMaxPorts) return unexpected("--ports " + std::to_string(*ports) + ": must be 1..254");
         o.service.sw.num_ports = static_cast<std::uint8_t>(*ports);
         return {};
     },
     "64"},
    {"sweep-interval", cli::Takes::value, "how often the SM checks the ports (e.g. 1s, 500ms)",
     [](Options& o, const std::string& v) { return positive_duration("--sweep-interval", v, o.service.sm.sweep_interval); },
     "1s"},
    {"link-timeout", cli::Takes::value, "silence after which a port's link is down",
     [](Options& o, const std::string& v) { return positive_duration("--link-timeout", v, o.service.sw.link_timeout); },
     "1s"},
    {"smp-timeout", cli::Takes::value, "time the SM waits for each SMP response",
     [](Options& o, const std::string& v) { return positive_duration("--smp-timeout", v, o.service.sm.smp_timeout); },
     "250ms"},
    {"mtu", cli::Takes::value, "largest MTU of the fabric: 256, 512, 1024, 2048 or 4096",
     [](Options& o, const std::string& v) -> cli::Applied {
         const std::pair<const char*, ib::Mtu> mtus[] = {{"256", ib::Mtu::mtu256}, {"512", ib::Mtu::mtu512},
                                                         {"1024", ib::Mtu::mtu1024}, {"2048", ib::Mtu::mtu2048},
                                                         {"4096", ib::Mtu::mtu4096}};
         for (const auto& [text, m] : mtus) {
             if (v != text) continue;
             o.service.sm.mtu = m;
             return {};
         }
         return unexpected("--mtu '" + v + "': must be 256, 512, 1024, 2048 or 4096");
     },
     "4096"},
    {"routing", cli::Takes::value,
     "how the SM routes a fabric of several switches: minhop (least hops, ports balanced) or updn (up/down, free "
     "of credit loops; roots as OpenSM chooses them, or --updn-root)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto engine = routing::parse_engine(v);
         if (!engine) return unexpected("--routing '" + v + "': must be minhop or updn");
         o.service.sm.routing = *engine;
         return {};
     },
     "minhop"},
    {"updn-root", cli::Takes::values, "with --routing updn: a root switch by node GUID (repeatable)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto guid = number(v, ~0ULL);
         if (!guid || *guid == 0) return unexpected("--updn-root '" + v + "': expected a non-zero 64-bit GUID");
         o.service.sm.root_guids.push_back(*guid);
         return {};
     }},
    {"subnet-prefix", cli::Takes::value, "GID prefix of the subnet, an IPv6 /64 (default fe80::)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto gid = parse_gid(v);
         if (!gid || load_be64(gid->data() + 8) != 0)
             return unexpected("--subnet-prefix '" + v + "': expected the first 64 bits of a GID, such as fe80::");
         o.service.sm.subnet_prefix = load_be64(gid->data());
         return {};
     },
     "fe80::"},
    {"switch-lid", cli::Takes::value, "the switch's LID (its port 0's, where the SM and SA answer), 0x1..0xbfff",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto lid = number(v, 0xFFFF);
         if (!lid || !ib::is_unicast_lid(static_cast<std::uint16_t>(*lid)))
             return unexpected("--switch-lid '" + v + "': expected a LID in 0x1..0xbfff");
         o.service.sw.lid = static_cast<std::uint16_t>(*lid);
         return {};
     },
     "0x1"},
    {"switch-guid", cli::Takes::value,
     "the switch's node GUID (its port 0's, and the SM's in SMInfo), non-zero; each switch of a fabric needs its own",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto guid = number(v, ~0ULL);
         if (!guid || *guid == 0) return unexpected("--switch-guid '" + v + "': expected a non-zero 64-bit GUID");
         o.service.sw.guid = *guid;
         o.service.sm.guid = *guid;
         return {};
     },
     "0x020000fffe000001"},
    {"node-description", cli::Takes::value, "the switch's NodeDescription (what ibnetdiscover and ibtracert show), 1 to 64 bytes of text",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (const auto problem = text_problem(v))
             return unexpected("--node-description '" + escape_text(v) + "': " + *problem);
         if (v.empty() || v.size() > 64)
             return unexpected("--node-description '" + escape_text(v) + "': expected 1 to 64 bytes of text");
         o.service.sw.description = v;
         return {};
     },
     "ibfabricd soft switch"},
    {"lid", cli::Takes::values, "fixed LID for a port: GUID=LID (repeatable)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto eq = v.find('=');
         const auto guid = eq == std::string::npos ? std::nullopt : number(v.substr(0, eq), ~0ULL);
         const auto lid = eq == std::string::npos ? std::nullopt : number(v.substr(eq + 1), 0xFFFF);
         if (!guid || !lid || !ib::is_unicast_lid(static_cast<std::uint16_t>(*lid)) || *lid == o.service.sw.lid)
             return unexpected("--lid '" + v + "': expected GUID=LID with LID in 0x2..0xbfff");
         o.service.sm.static_lids[*guid] = static_cast<std::uint16_t>(*lid);
         return {};
     }},
    {"partitions", cli::Takes::value,
     "partitions file (partitions.conf syntax; default: Default=0x7fff, ipoib : ALL=full); SIGHUP re-reads it",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v.empty()) return {};
         auto p = load_partitions(v);
         if (!p) return unexpected(p.error().to_string());
         o.service.sm.partitions = std::move(*p);
         o.partitions_file = v;
         return {};
     }},
    {"mcast-group", cli::Takes::values, "MLID that every port receives without joining (a test aid beside the SA's groups; repeatable)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto m = number(v, 0xFFFF);
         if (!m || !ib::is_multicast_lid(static_cast<std::uint16_t>(*m)))
             return unexpected("--mcast-group '" + v + "': expected an MLID in 0xc000..0xfffe");
         o.service.flood_groups.push_back(static_cast<std::uint16_t>(*m));
         return {};
     }},
    {"fabric-key", cli::Takes::value,
     "FILE of one or two 64-hex-digit keys (mode 0600): every datagram of the fabric is authenticated with the first, "
     "the second is accepted too (rotation; SIGHUP re-reads the file)",
     [](Options& o, const std::string& v) -> cli::Applied {
         auto keys = load_fabric_key_file(v);
         if (!keys) return unexpected("--fabric-key: " + keys.error());
         o.service.keys = *keys;
         o.key_file = v;
         return {};
     }},
    {"link", cli::Takes::values,
     "inter-switch link: PORT=HOST:UDPPORT cables this switch's PORT to the switch (another ibfabricd) whose "
     "datagrams come from HOST:UDPPORT (repeatable; the port is never a host's)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto eq = v.find('=');
         const auto port = eq == std::string::npos ? std::nullopt : number(v.substr(0, eq), Switch::kMaxPorts);
         if (!port || *port == 0) return unexpected("--link '" + v + "': expected PORT=HOST:UDPPORT, PORT 1..254");
         auto peer = parse_socket_address(v.substr(eq + 1));
         if (!peer) return unexpected("--link '" + v + "': " + peer.error());
         o.service.sw.links.push_back({static_cast<std::uint8_t>(*port), *peer});
         return {};
     }},
    {"topology", cli::Takes::value,
     "run the switches of FILE (ibnetdiscover/ibsim .net syntax: Switch and Hca nodes and their cables), each on "
     "its own UDP address, cabled by inter-switch links; the first switch run here runs the SM (unless --sm=no: "
     "then an SM such as OpenSM through --sim-socket routes them), the others none",
     [](Options& o, const std::string& v) -> cli::Applied {
         o.topology_file = v;
         return {};
     }},
    {"topology-switch", cli::Takes::values,
     "with --topology: run only this switch of the file here (repeatable; default: every switch); the same file "
     "on several machines, each naming its own, splits one fabric over them",
     [](Options& o, const std::string& v) -> cli::Applied {
         o.topology_switches.push_back(v);
         return {};
     }},
    {"switch-address", cli::Takes::values,
     "with --topology: NAME=ADDR:PORT, where switch NAME of the file listens (repeatable; default: the --listen "
     "address, its port plus the switch's index among the file's switches)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto eq = v.find('=');
         if (eq == 0 || eq == std::string::npos) return unexpected("--switch-address '" + v + "': expected NAME=ADDR:PORT");
         auto a = parse_socket_address(v.substr(eq + 1));
         if (!a) return unexpected("--switch-address '" + v + "': " + a.error());
         o.switch_addresses[v.substr(0, eq)] = *a;
         return {};
     }},
    {"fault", cli::Takes::values,
     "inject faults into the packets the switch sends out of a port: [port=N,]loss=P%,corrupt=P%,dup=P%,reorder=P%,"
     "delay=DURATION (repeatable; a rule without port= is for every port; turns route hints off)",
     [](Options& o, const std::string& v) -> cli::Applied {
         auto rule = parse_fault_rule(v);
         if (!rule) return unexpected("--fault '" + v + "': " + rule.error());
         o.service.sw.faults.push_back(*rule);
         return {};
     }},
    {"fault-seed", cli::Takes::value, "seed of the fault injector's generator: the same seed, the same faults",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, ~0ULL);
         if (!n) return unexpected("--fault-seed '" + v + "': expected a number");
         o.service.sw.fault_seed = *n;
         return {};
     },
     "1"},
    {"cut-through", cli::Takes::value,
     "yes: ports that may talk send each other unicast directly, after the switch's route hints (the default); no: "
     "every packet passes the switch (--pcap and --fault imply no)",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v != "yes" && v != "no") return unexpected("--cut-through is yes or no, not '" + v + "'");
         o.service.sw.cut_through = v == "yes";
         return {};
     },
     "yes"},
    {"m-key", cli::Takes::value,
     "M_Key the SM gives the ports: random (per port, from a secret drawn at start), file:PATH (per port, from the "
     "secret in PATH, created 0600 when missing: restarts keep the keys), a 64-bit number (one key for all), or none",
     [](Options& o, const std::string& v) -> cli::Applied {
         MKeyPolicy& k = o.service.sm.m_key;
         if (v == "none") {
             k.mode = MKeyPolicy::Mode::none;
         } else if (v == "random") {
             k.mode = MKeyPolicy::Mode::derived;
             k.secret = random_secret();
         } else if (v.starts_with("file:")) {
             auto secret = load_key_file(v.substr(5), true);
             if (!secret) return unexpected("--m-key '" + v + "': " + secret.error());
             k.mode = MKeyPolicy::Mode::derived;
             k.secret = *secret;
         } else {
             const auto n = number(v, ~0ULL);
             if (!n || *n == 0)
                 return unexpected("--m-key '" + v + "': expected random, file:PATH, none or a non-zero 64-bit number");
             k.mode = MKeyPolicy::Mode::fixed;
             k.fixed = *n;
         }
         return {};
     },
     "random"},
    {"m-key-protect", cli::Takes::value,
     "M_KeyProtectBits: 0 (Gets show the key), 1 (Gets hide it), 2 or 3 (Gets need it too); Sets always need it",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, 3);
         if (!n) return unexpected("--m-key-protect '" + v + "': must be 0, 1, 2 or 3");
         o.service.sm.m_key.protect_bits = static_cast<std::uint8_t>(*n);
         return {};
     },
     "1"},
    {"m-key-lease", cli::Takes::value,
     "M_KeyLeasePeriod: seconds after a violation until a port drops its protection if its SM stays silent "
     "(0: never)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, 0xFFFF);
         if (!n) return unexpected("--m-key-lease '" + v + "': must be 0..65535 seconds");
         o.service.sm.m_key.lease_seconds = static_cast<std::uint16_t>(*n);
         return {};
     },
     "15"},
    {"control-socket", cli::Takes::value,
     "PATH of the control socket ibfabricctl talks to (default /run/ibfabricd/PORT.sock, PORT the --listen one; "
     "none: no socket)",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v.empty()) return unexpected(std::string("--control-socket: a path, or none"));
         o.control_socket = v;
         return {};
     }},
    {"metrics-listen", cli::Takes::value,
     "serve the counters in the Prometheus text format at http://ADDR:PORT/metrics (a local address: nothing "
     "authenticates the scraper)",
     [](Options& o, const std::string& v) -> cli::Applied {
         auto a = parse_socket_address(v);
         if (!a || a->port() == 0) return unexpected("--metrics-listen '" + v + "': expected ADDR:PORT");
         o.metrics_listen = *a;
         return {};
     }},
    {"metrics-file", cli::Takes::value,
     "write the counters in the Prometheus text format to FILE every 10 s (node_exporter's textfile collector)",
     [](Options& o, const std::string& v) -> cli::Applied {
         o.metrics_file = v;
         return {};
     }},
    {"sm", cli::Takes::value,
     "yes: ibfabricd's SM and SA manage the fabric (the default); no: neither runs, and an SM attached as a port "
     "(OpenSM under libumad2sim, --sim-socket) sweeps the fabric, programs the switch through its SMA and serves the SA",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v != "yes" && v != "no") return unexpected("--sm is yes or no, not '" + v + "'");
         o.service.sm_enabled = v == "yes";
         return {};
     },
     "yes"},
    {"sim-attach-wait", cli::Takes::value,
     "how long a sim client's GET_PORTINFO waits for the SM to make its new port ACTIVE (its fake sysfs is written "
     "once, from that answer)",
     [](Options& o, const std::string& v) {
         return positive_duration("--sim-attach-wait", v, sim_options(o).attach_wait);
     }},
    {"sim-request-timeout", cli::Takes::value,
     "how long a sim client's MAD waits for its answer before the client is told it timed out (status 110, as "
     "ibsim)",
     [](Options& o, const std::string& v) {
         return positive_duration("--sim-request-timeout", v, sim_options(o).request_timeout);
     }},
    {"sim-socket", cli::Takes::value,
     "serve programs run under libumad2sim (OpenSM, infiniband-diags) on the abstract unix sockets NAME:ctl and "
     "NAME:out<slot>, NAME as their IBSIM_SOCKNAME (sim when unset); each client's $SIM_HOST is a CA node of the "
     "fabric",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v.empty() || v.size() > 64 || v.find('\0') != std::string::npos)
             return unexpected("--sim-socket '" + v + "': expected a name of 1..64 characters");
         sim_options(o).base_name = v;
         return {};
     }},
    {"sim-clients", cli::Takes::value, "sim clients at once, 1..64 (ibsim's limit is 10)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, kMaxSimClients);
         if (!n || *n == 0) return unexpected("--sim-clients '" + v + "': must be 1..64");
         sim_options(o).max_clients = static_cast<std::size_t>(*n);
         return {};
     }},
    {"sim-node", cli::Takes::values,
     "node GUID of a sim node, NAME=GUID (repeatable; the port GUID is GUID+1; default: derived from NAME)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto eq = v.find('=');
         const auto guid = eq == std::string::npos ? std::nullopt : number(v.substr(eq + 1), ~0ULL - 1);
         if (eq == 0 || eq == std::string::npos || !sim::is_valid_nodeid(v.substr(0, eq)) || !guid || *guid == 0)
             return unexpected("--sim-node '" + v + "': expected NAME=GUID (a name of at most 31 printable ASCII "
                               "characters, a non-zero GUID)");
         sim_options(o).node_guids[v.substr(0, eq)] = *guid;
         return {};
     }},
    {"quiet,q", cli::Takes::nothing, "log only errors",
     [](Options& o, const std::string&) -> cli::Applied {
         o.quiet = true;
         return {};
     }},
};

std::optional<Options> parse(int argc, char** argv) {
    auto fail = [](const std::string& what) -> std::optional<Options> {
        std::cerr << "ibfabricd: " << escape_text(what) << "\n";  // quotes what was typed
        return std::nullopt;
    };
    po::options_description desc("ibfabricd options");
    cli::describe<Options>(kOptions, desc);
    po::variables_map vm;
    if (auto error = cli::parse_arguments(cli::arguments(argc, argv), [&](const std::vector<std::string>& args) {
            po::store(po::command_line_parser(args).options(desc).run(), vm);
            po::notify(vm);
        }))
        return fail(*error);
    if (vm.count("help")) {
        std::cout << desc << "\n";
        std::exit(0);
    }
    if (vm.count("version")) {
        std::cout << "ibfabricd " IPOIBD_VERSION "\n";
        std::exit(0);
    }
    Options o;
    if (auto applied = cli::apply<Options>(kOptions, vm, o); !applied) return fail(applied.error());
    if (o.sim && !vm.count("sim-socket"))
        return fail("--sim-clients, --sim-node and --sim-attach-wait need --sim-socket NAME");
    if (o.sim) o.sim->mtu = o.service.sm.mtu;
    if (auto error = Switch::config_error(o.service.sw)) return fail("--link: " + *error);
    if (o.topology_file.empty()) {
        for (const char* name : {"topology-switch", "switch-address"})
            if (vm.count(name)) return fail(std::string("--") + name + " needs --topology FILE");
    } else {
        // The file says what each switch is.
        for (const char* name : {"switch-guid", "node-description", "ports", "link", "pcap", "switch-lid"})
            if (vm.count(name) && !vm[name].defaulted())
                return fail(std::string("--") + name + " cannot be given with --topology: the file names the switches, "
                            "their ports and cables" + (std::string(name) == "pcap" ? " (and a capture is one switch's)" : ""));
    }
    return o;
}

// ibfabricd's loop: the project's EventLoop with each service's socket
// (one switch, or the switches of --topology), a timer every
// FabricService::kTickInterval, the signals, the control socket and the
// metrics. The first switch is the one the control socket, the metrics
// and --sim-socket are about; `switches` lists them all.
class Daemon {
public:
    Daemon(std::vector<FabricService*> fabrics, std::vector<std::string> names, runtime::EventLoop& loop,
           const Options& options)
        : fabrics_(std::move(fabrics)), fabric_(*fabrics_.front()), loop_(loop), options_(options) {
        info_.started = std::chrono::steady_clock::now();
        info_.key_file = options.key_file;
        if (fabrics_.size() > 1)
            for (std::size_t i = 0; i < fabrics_.size(); ++i) info_.switches.push_back({names[i], fabrics_[i]});
    }

    // Everything but the wait; a failure is the exit status 1 with a message.
    expected<void, std::string> start() {
        for (FabricService* f : fabrics_)
            if (auto r = loop_.add_fd(f->fd(), [f] { f->on_readable(Clock::now()); }); !r)
                return unexpected(r.error().message());
        // Every wake-up ends with the SM learning of new ports and the
        // queued datagrams leaving (fabric_service.h, the owner's contract).
        loop_.set_on_iteration([this] {
            for (FabricService* f : fabrics_) f->after_wakeup(Clock::now());
        });
        tick();
        if (options_.sim) {
            SimServerOptions so = *options_.sim;
            so.fabric = fabric_.local_address();
            so.keys = fabric_.options().keys;
            auto sim = SimServer::open(std::move(so), options_.quiet ? SimServer::Log{} : SimServer::Log(log_line));
            if (!sim) return unexpected("--sim-socket: " + sim.error());
            sim_ = std::move(*sim);
            info_.sim = sim_.get();
            if (auto r = loop_.add_fd(sim_->fd(), [this] { sim_->process(Clock::now()); }); !r)
                return unexpected(r.error().message());
            log_line("serving libumad2sim clients on @" + sim::server_ctl_name(sim_->options().base_name) + " (" +
                     std::to_string(sim_->options().max_clients) + " slots)");
        }
        (void)loop_.on_signal(SIGUSR1, [this](const runtime::SignalInfo&) { print_stats(); });
        (void)loop_.on_signal(SIGHUP, [this](const runtime::SignalInfo&) { reload(); });
        for (int s : {SIGTERM, SIGINT})
            (void)loop_.on_signal(s, [this, s](const runtime::SignalInfo&) {
                print_stats();
                for (FabricService* f : fabrics_) f->flush();
                log_line("exiting on signal " + std::to_string(s));
                loop_.stop();
            });
        // The control socket: the default one is best effort (another
        // ibfabricd on this port in another namespace may hold it); one
        // given on the command line must open.
        const bool explicit_socket = !options_.control_socket.empty();
        const std::string path = explicit_socket ? options_.control_socket : default_fabric_socket(fabric_.local_address());
        if (path != "none") {
            auto control = runtime::ControlServer::open(
                loop_, path, [this](std::string_view command) { return fabric_answer(fabric_, info_, command); }, {},
                kFabricCommandSet);
            if (control) {
                control_ = std::move(*control);
            } else if (explicit_socket) {
                return unexpected("--control-socket: " + control.error().message());
            } else {
                log_line("no control socket (" + control.error().message() + "); give --control-socket PATH");
            }
        }
        if (options_.metrics_listen) {
            auto http = runtime::MetricsHttpServer::open(loop_, *options_.metrics_listen, [this] { return metrics(); });
            if (!http) return unexpected("--metrics-listen: " + http.error().message());
            metrics_http_ = std::move(*http);
        }
        if (!options_.metrics_file.empty()) {
            if (auto r = write_textfile(options_.metrics_file, metrics()); !r) return unexpected("--metrics-file: " + r.error());
            write_metrics_file();
        }
        return {};
    }

    std::string metrics() const {
        PrometheusText text("ibfabricd");
        fabric_metrics(fabric_, text);
        if (sim_)
            visit_sim_sections(*sim_, [&](std::string_view name, const auto& visit_section) {
                PrometheusText::Sink sink(text, std::string(name), {});
                visit_section(sink);
            });
        if (control_) {
            PrometheusText::Sink sink(text, "control", {});
            visit(control_->counters(), sink);
        }
        if (metrics_http_) {
            PrometheusText::Sink sink(text, "metrics_http", {});
            visit(metrics_http_->counters(), sink);
        }
        return text.render();
    }

private:
    void tick() {
        for (FabricService* f : fabrics_) f->tick(Clock::now());
        if (sim_) sim_->tick(Clock::now());
        loop_.add_timer_after(FabricService::kTickInterval, [this] { tick(); });
    }

    // node_exporter's textfile collector reads the file at each scrape.
    void write_metrics_file() {
        if (auto r = write_textfile(options_.metrics_file, metrics()); !r) log_line("metrics file: " + r.error());
        loop_.add_timer_after(std::chrono::seconds(10), [this] { write_metrics_file(); });
    }

    // SIGHUP: the fabric key file (rotation) and the partitions file
    // again; the other options are fixed at start. A file that fails keeps
    // what is in use.
    void reload() {
        if (options_.key_file.empty() && options_.partitions_file.empty()) {
            log_line("SIGHUP: nothing to reload (no --fabric-key or --partitions; the other options are fixed at start)");
            return;
        }
        if (!options_.partitions_file.empty()) reload_partitions();
        if (!options_.key_file.empty()) reload_key();
    }

    void reload_partitions() {
        auto parts = load_partitions(options_.partitions_file);
        if (!parts) {
            log_line("SIGHUP: keeping the partitions in use: " + parts.error().to_string());
            return;
        }
        std::size_t changed = 0;
        for (FabricService* f : fabrics_) changed += f->set_partitions(*parts);
        log_line("SIGHUP: partitions reloaded from " + options_.partitions_file + " (" + std::to_string(changed) +
                 (changed == 1 ? " port's" : " ports'") + " P_Key table to set)");
    }

    void reload_key() {
        auto keys = load_fabric_key_file(options_.key_file);
        if (!keys) {
            log_line("SIGHUP: keeping the fabric keys in use: " + keys.error());
            return;
        }
        for (FabricService* f : fabrics_)
            if (auto r = f->set_fabric_keys(*keys); !r) {
                log_line("SIGHUP: " + r.error());
                return;
            }
        if (sim_) sim_->set_fabric_keys(*keys);
        log_line("SIGHUP: fabric keys reloaded from " + options_.key_file + " (" + std::to_string(keys->keys.size()) +
                 (keys->keys.size() == 1 ? " key)" : " keys)"));
    }

    void print_stats() {
        for (std::size_t i = 0; i < fabrics_.size(); ++i) {
            if (fabrics_.size() > 1) std::printf("== switch %s\n", escape_text(info_.switches[i].name).c_str());
            std::fputs(fabrics_[i]->stats().c_str(), stdout);
        }
        if (sim_) std::fputs(sim_->stats().c_str(), stdout);
        std::fflush(stdout);
    }

    std::vector<FabricService*> fabrics_;
    FabricService& fabric_;  // the first
    runtime::EventLoop& loop_;
    const Options& options_;
    FabricDaemonInfo info_;
    std::unique_ptr<runtime::ControlServer> control_;
    std::unique_ptr<runtime::MetricsHttpServer> metrics_http_;
    std::unique_ptr<SimServer> sim_;
};

std::string hex4(std::uint16_t v) {
    char text[8];
    std::snprintf(text, sizeof text, "0x%04x", v);
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    auto options = parse(argc, argv);
    if (!options) return 2;
    if (!options->quiet) options->service.log = log_line;
    // Blocked before anyone is told the fabric listens: a SIGUSR1 sent
    // after "listening on" must not kill the process.
    if (auto r = runtime::EventLoop::block_signals({SIGTERM, SIGINT, SIGUSR1, SIGHUP}); !r) {
        log_line(r.error().message());
        return 1;
    }
    auto loop = runtime::EventLoop::create();
    if (!loop) {
        log_line(loop.error().message());
        return 1;
    }
    // One switch, or the switches of --topology that run here.
    std::vector<TopologySwitch> switches;
    if (options->topology_file.empty()) {
        switches.push_back({"", options->service});
    } else {
        auto net = routing::load_net(options->topology_file);
        if (!net) {
            log_line("--topology: " + net.error().to_string());
            return 2;
        }
        auto made = topology_switches({.net = &*net, .file = options->topology_file, .base = options->service,
                                       .run_here = options->topology_switches, .addresses = options->switch_addresses});
        if (!made) {
            log_line(made.error());
            return 2;
        }
        switches = std::move(*made);
    }
    std::vector<std::unique_ptr<FabricService>> services;
    std::vector<FabricService*> fabrics;
    std::vector<std::string> names;
    for (const TopologySwitch& t : switches) {
        auto opened = FabricService::open(t.options);
        if (!opened) {
            log_line((t.name.empty() ? std::string() : "switch \"" + t.name + "\": ") + opened.error());
            return 1;
        }
        fabrics.push_back(opened->get());
        names.push_back(t.name);
        services.push_back(std::move(*opened));
    }
    FabricService& fabric = *fabrics.front();
    Daemon d(fabrics, names, **loop, *options);
    if (auto r = d.start(); !r) {
        log_line(r.error());
        return 1;
    }
    for (std::size_t i = 1; i < fabrics.size(); ++i)
        log_line("switch \"" + names[i] + "\" (GUID " + hex(fabrics[i]->fabric_switch().guid(), 16) + ") listening on " +
                 fabrics[i]->local_address().to_string() + ", " + std::to_string(fabrics[i]->options().sw.num_ports) +
                 " ports, " + std::to_string(fabrics[i]->options().sw.links.size()) + " inter-switch links");
    const FabricServiceOptions& o = fabric.options();
    log_line((names.front().empty() ? std::string() : "switch \"" + names.front() + "\" ") + "listening on " +
             fabric.local_address().to_string() +
             (o.sm_enabled ? ", switch LID " + hex4(fabric.fabric_switch().lid())
                           : std::string(", no SM (--sm=no): the switch waits for one to set its LID")) +
             ", " + std::to_string(o.sw.num_ports) + " ports" + (o.pcap.empty() ? "" : ", capturing to " + o.pcap) +
             (o.keys ? ", fabric key from " + options->key_file : ", no fabric key") +
             (fabrics.size() > 1 ? ", " + std::to_string(fabrics.size()) + " switches in this process" : std::string()));
    if (auto r = (*loop)->run(); !r) {
        log_line(r.error().message());
        return 1;
    }
    return 0;
}
