// ibudping: UD datagrams between two ports, in the spirit of
// ibv_ud_pingpong, on the soft fabric or a real HCA.
//
//   ibudping [--fabric ADDR:PORT] server
//   ibudping [--fabric ADDR:PORT] client --dest-lid L --dest-qpn Q [--count N] [--size MIN:MAX] [--window W]
//   ibudping ... --mgid GID --mlid LID     multicast: attach; the client sends to the group
//
// 1. open the port (soft or verbs), wait until it is ACTIVE
// 2. create a UD QP with --qkey, post receive buffers (GRH slot included)
// 3. server: echo every unicast datagram to its sender; count multicast ones
//    client: send --count datagrams of mixed sizes, at most --window in
//    flight; every echo must come back intact and in order
// 4. print sent/received/lost and round-trip times; exit 0 only when
//    nothing was lost, corrupted or reordered
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <random>

#include "common/option_table.h"
#include "transport/gid.h"
#include "transport/soft/guid.h"
#include "transport/soft/guid.h"
#include "transport/port_factory.h"
#include "transport/tools/port_option_rows.h"

namespace po = boost::program_options;
using namespace ipoibd;
using namespace ipoibd::transport;
using Clock = std::chrono::steady_clock;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

constexpr std::size_t kHeader = 12;  // seq(4) len(4) crc32(4)
constexpr std::size_t kReceiveBuffers = 256;

struct Options {
    PortOptions port;
    std::string mode;
    std::uint32_t qkey = 0x00C0FFEE;
    std::uint16_t dest_lid = 0;
    std::uint32_t dest_qpn = 0;
    std::uint64_t count = 1000;
    std::size_t size_min = 64, size_max = 64;
    std::size_t window = 1;
    double timeout_s = 30;
    double wait_active_s = 10;
    std::optional<ib::Gid> mgid;
    std::uint16_t mlid = 0;
    bool quiet = false;
};

void fill_message(std::vector<std::uint8_t>& m, std::uint32_t seq) {
    for (std::size_t i = kHeader; i < m.size(); ++i) m[i] = static_cast<std::uint8_t>(seq * 31 + i);
    store_be32(m.data(), seq);
    store_be32(m.data() + 4, static_cast<std::uint32_t>(m.size()));
    const auto crc = crc32_z(0, m.data() + kHeader, m.size() - kHeader);
    store_be32(m.data() + 8, static_cast<std::uint32_t>(crc));
}

bool message_intact(bytes m) {
    if (m.size() < kHeader || load_be32(m.data() + 4) != m.size()) return false;
    return load_be32(m.data() + 8) == static_cast<std::uint32_t>(crc32_z(0, m.data() + kHeader, m.size() - kHeader));
}

// Receive ring: buffers are re-posted as soon as their completion is handled.
struct ReceiveRing {
    std::vector<std::vector<std::uint8_t>> buffers;
    explicit ReceiveRing(std::size_t size) : buffers(kReceiveBuffers, std::vector<std::uint8_t>(kGrhSlotSize + size)) {}
    bool post(UdQp& qp, std::uint64_t index) {
        const ReceiveBuffer b{index, buffers[index]};
        auto r = qp.post_receive({&b, 1});
        return r && *r == 1;
    }
    bytes payload(const Completion& c) const {
        return bytes(buffers[c.wr_id]).subspan(kGrhSlotSize, c.byte_len - kGrhSlotSize);
    }
};

// Waits for the port fd (or sleeps a little for fd-less ports), lets the
// port do its I/O, and reports its events.
void print_event(Port& port, PortEvent e) {
    const auto a = port.attributes();
    std::printf("event %s: state %s LID 0x%04x SM LID 0x%04x\n", to_string(e), to_string(a.state), a.lid, a.sm_lid);
    std::fflush(stdout);
}

void pump(Port& port, int epoll_fd, int timeout_ms) {
    if (epoll_fd >= 0) {
        epoll_event ev;
        ::epoll_wait(epoll_fd, &ev, 1, timeout_ms);
    } else {
        ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    }
    port.process();
    PortEvent events[8];
    for (std::size_t n = port.poll_events(events), i = 0; i < n; ++i) print_event(port, events[i]);
}

// The port's counters (packets, drops by reason, cut-through), one line
// per non-zero counter.
void print_port_counters(const Port& port) {
    struct Printer final : CounterSink {
        void counter(std::string_view name, std::uint64_t value) override {
            if (value != 0)
                std::printf("port %.*s %llu\n", static_cast<int>(name.size()), name.data(),
                            static_cast<unsigned long long>(value));
        }
    } printer;
    port.visit_counters(printer);
}

bool wait_active(Port& port, double seconds) {
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(seconds));
    return wait_until_active(port, timeout, [&](PortEvent e) { print_event(port, e); }, [] { return g_stop != 0; });
}

int run_server(const Options& o, Port& port, UdQp& qp, int epoll_fd) {
    ReceiveRing ring(ib::kMaxPmtuBytes);
    for (std::uint64_t i = 0; i < kReceiveBuffers; ++i) ring.post(qp, i);
    std::uint64_t unicast = 0, multicast = 0, corrupt = 0, echo_refused = 0;
    const auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout_s);
    while (!g_stop && Clock::now() < deadline && (o.count == 0 || unicast + multicast < o.count)) {
        pump(port, epoll_fd, 50);
        Completion wc[64];
        for (std::size_t n = qp.poll(wc), i = 0; i < n; ++i) {
            const Completion& c = wc[i];
            if (c.kind == CompletionKind::send) continue;
            if (c.status != CompletionStatus::success) {
                ++corrupt;
            } else if (!message_intact(ring.payload(c))) {
                ++corrupt;
            } else if (c.grh_present && o.mgid) {
                ++multicast;
                if (!o.quiet) std::printf("multicast seq %u from LID 0x%04x QPN 0x%06x\n", load_be32(ring.payload(c).data()), c.slid, c.src_qp);
            } else {
                ++unicast;
                const SendRequest echo{.wr_id = 0, .ah = {.dlid = c.slid, .sl = c.sl}, .remote_qpn = c.src_qp,
                                       .remote_qkey = o.qkey, .payload = ring.payload(c)};
                auto r = qp.post_send({&echo, 1});
                if (!r || *r != 1) ++echo_refused;
            }
            ring.post(qp, c.wr_id);
        }
    }
    std::printf("server: unicast %llu multicast %llu corrupt %llu echo_refused %llu\n",
                static_cast<unsigned long long>(unicast), static_cast<unsigned long long>(multicast),
                static_cast<unsigned long long>(corrupt), static_cast<unsigned long long>(echo_refused));
    return corrupt == 0 ? 0 : 1;
}

int run_client(const Options& o, Port& port, UdQp& qp, int epoll_fd) {
    ReceiveRing ring(ib::kMaxPmtuBytes);
    for (std::uint64_t i = 0; i < kReceiveBuffers; ++i) ring.post(qp, i);
    std::mt19937 rng(12345);
    std::uniform_int_distribution<std::size_t> size_of(o.size_min, o.size_max);
    const bool multicast = o.mgid.has_value();
    AddressHandle ah{.dlid = multicast ? o.mlid : o.dest_lid};
    if (multicast) ah.grh = GrhAttributes{.dgid = *o.mgid, .hop_limit = 1};
    const std::uint32_t remote_qpn = multicast ? ib::kQpnMulticast : o.dest_qpn;

    std::uint64_t sent = 0, received = 0, corrupt = 0, reordered = 0, self_copies = 0;
    std::deque<std::pair<std::uint32_t, Clock::time_point>> in_flight;
    std::vector<double> rtt_us;
    std::vector<std::uint8_t> msg;
    const auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout_s);
    const std::uint32_t my_qpn = qp.qpn();
    // Unicast: every echo back; multicast: every own copy back (the fabric
    // returns a group's datagrams to the sender's port too).
    auto outstanding = [&] { return multicast ? sent - self_copies : in_flight.size(); };
    while (!g_stop && Clock::now() < deadline && (sent < o.count || outstanding() > 0)) {
        while (sent < o.count && outstanding() < o.window) {
            msg.assign(std::max(kHeader, size_of(rng)), 0);
            fill_message(msg, static_cast<std::uint32_t>(sent));
            const SendRequest req{.wr_id = sent, .ah = ah, .remote_qpn = remote_qpn, .remote_qkey = o.qkey, .payload = msg};
            auto r = qp.post_send({&req, 1});
            if (!r) {
                std::fprintf(stderr, "ibudping: send failed: %s\n", r.error().message().c_str());
                return 1;
            }
            if (*r == 0) break;  // send queue full: poll first
            if (!multicast) in_flight.emplace_back(static_cast<std::uint32_t>(sent), Clock::now());
            ++sent;
        }
        pump(port, epoll_fd, 5);
        Completion wc[64];
        for (std::size_t n = qp.poll(wc), i = 0; i < n; ++i) {
            const Completion& c = wc[i];
            if (c.kind == CompletionKind::send) continue;
            const bytes m = ring.payload(c);
            if (c.status != CompletionStatus::success || !message_intact(m)) {
                ++corrupt;
            } else if (multicast) {
                if (c.src_qp == my_qpn) ++self_copies;
            } else if (in_flight.empty() || load_be32(m.data()) != in_flight.front().first) {
                ++reordered;
            } else {
                rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - in_flight.front().second).count());
                in_flight.pop_front();
                ++received;
            }
            ring.post(qp, c.wr_id);
        }
    }
    if (multicast) {
        std::printf("client: multicast sent %llu own copies received %llu corrupt %llu\n",
                    static_cast<unsigned long long>(sent), static_cast<unsigned long long>(self_copies),
                    static_cast<unsigned long long>(corrupt));
        return sent == o.count && self_copies == sent && corrupt == 0 ? 0 : 1;
    }
    const std::uint64_t lost = sent - received;
    std::printf("client: sent %llu received %llu lost %llu corrupt %llu out_of_order %llu\n",
                static_cast<unsigned long long>(sent), static_cast<unsigned long long>(received),
                static_cast<unsigned long long>(lost), static_cast<unsigned long long>(corrupt),
                static_cast<unsigned long long>(reordered));
    if (!rtt_us.empty()) {
        std::sort(rtt_us.begin(), rtt_us.end());
        double sum = 0;
        for (double v : rtt_us) sum += v;
        const auto pct = [&](double p) { return rtt_us[static_cast<std::size_t>(p * static_cast<double>(rtt_us.size() - 1))]; };
        std::printf("rtt_us: min %.1f avg %.1f p50 %.1f p99 %.1f max %.1f\n", rtt_us.front(),
                    sum / static_cast<double>(rtt_us.size()), pct(0.5), pct(0.99), rtt_us.back());
    }
    return sent == o.count && lost == 0 && corrupt == 0 && reordered == 0 ? 0 : 1;
}

using cli::number;


// The options, one row each: name, what it takes, help, how it applies
// (and the value applied when it is not given). Rows apply in order:
// --transport before the soft-only ones, --guid before --instance.
// The soft-only rows leave their value unread under another transport.
const auto kOptions = cli::rows(
    std::to_array<cli::Option<Options>>({{"help,h", cli::Takes::nothing, "this text"}}),
    port_option_rows<Options>("ibudping"),
    std::to_array<cli::Option<Options>>({
    {"qkey", cli::Takes::value, "Q_Key of the QP and of sends",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto q = number(v, 0xFFFFFFFF);
         if (!q) return unexpected("bad --qkey '" + v + "'");
         o.qkey = static_cast<std::uint32_t>(*q);
         return {};
     }},
    {"dest-lid", cli::Takes::value, "client: destination LID",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, 0xFFFF);
         if (!n) return unexpected(std::string("bad --dest-lid or --dest-qpn"));
         o.dest_lid = static_cast<std::uint16_t>(*n);
         return {};
     }},
    {"dest-qpn", cli::Takes::value, "client: destination QPN",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, 0xFFFFFF);
         if (!n) return unexpected(std::string("bad --dest-lid or --dest-qpn"));
         o.dest_qpn = static_cast<std::uint32_t>(*n);
         return {};
     }},
    {"count", cli::Takes::value, "client: datagrams to send; server: stop after this many (0: run until signalled)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<std::uint64_t>("count", v);
         if (!n) return unexpected(n.error());
         o.count = *n;
         return {};
     }},
    {"size", cli::Takes::value, "client: payload bytes, N or MIN:MAX (at least 12)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto colon = v.find(':');
         const auto lo = number(v.substr(0, colon), ib::kMaxPmtuBytes);
         const auto hi = number(colon == std::string::npos ? v : v.substr(colon + 1), ib::kMaxPmtuBytes);
         if (!lo || !hi || *lo > *hi || *lo < kHeader) return unexpected("bad --size '" + v + "' (12..4096, MIN:MAX)");
         o.size_min = *lo;
         o.size_max = *hi;
         return {};
     }},
    {"window", cli::Takes::value, "client: datagrams in flight (1 = ping-pong)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<std::size_t>("window", v);
         if (!n) return unexpected(n.error());
         if (*n == 0) return unexpected(std::string("--window must be at least 1"));
         o.window = *n;
         return {};
     }},
    {"timeout", cli::Takes::value, "seconds before giving up",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<double>("timeout", v);
         if (!n) return unexpected(n.error());
         o.timeout_s = *n;
         return {};
     }},
    {"wait-active", cli::Takes::value, "seconds to wait for the port to become ACTIVE",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<double>("wait-active", v);
         if (!n) return unexpected(n.error());
         o.wait_active_s = *n;
         return {};
     }},
    {"mgid", cli::Takes::value, "multicast group GID (attach and, as client, send to it)",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v.empty()) return {};
         auto g = parse_gid(v);
         if (!g) return unexpected("bad --mgid '" + v + "'");
         o.mgid = *g;
         return {};
     }},
    {"mlid", cli::Takes::value, "multicast LID of the group",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, 0xFFFF);
         if (!n) return unexpected("bad --mlid '" + v + "'");
         o.mlid = static_cast<std::uint16_t>(*n);
         return {};
     }},
    {"quiet,q", cli::Takes::nothing, "no per-datagram lines",
     [](Options& o, const std::string&) -> cli::Applied {
         o.quiet = true;
         return {};
     }},
    {"mode", cli::Takes::value, "server | client",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v != "server" && v != "client") return unexpected(std::string("say 'server' or 'client'"));
         o.mode = v;
         return {};
     },
     ""},
    }));

// What no single option decides.
cli::Applied check_together(const Options& o) {
    if (o.mgid && !ib::is_multicast_lid(o.mlid)) return unexpected(std::string("--mgid needs --mlid in 0xc000..0xfffe"));
    if (o.mode == "client" && !o.mgid && (o.dest_lid == 0 || o.dest_qpn == 0))
        return unexpected(std::string("client needs --dest-lid and --dest-qpn (or --mgid/--mlid)"));
    return {};
}

std::optional<Options> parse(int argc, char** argv) {
    auto fail = [](const std::string& what) -> std::optional<Options> {
        std::cerr << "ibudping: " << what << "\n";
        return std::nullopt;
    };
    po::options_description desc("ibudping options");
    cli::describe<Options>(kOptions, desc);
    po::positional_options_description pos;
    pos.add("mode", 1);
    po::variables_map vm;
    if (auto error = cli::parse_arguments(cli::arguments(argc, argv), [&](const std::vector<std::string>& args) {
            po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
            po::notify(vm);
        }))
        return fail(*error);
    if (vm.count("help")) {
        std::cout << desc << "\n";
        std::exit(0);
    }
    Options o;
    if (auto applied = cli::apply<Options>(kOptions, vm, o); !applied) return fail(applied.error());
    if (auto together = check_together(o); !together) return fail(together.error());
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    auto options = parse(argc, argv);
    if (!options) return 2;
    const Options& o = *options;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into files and pipes
    ::signal(SIGINT, on_signal);
    ::signal(SIGTERM, on_signal);

    auto port = open_port(o.port);
    if (!port) {
        std::fprintf(stderr, "ibudping: could not open port: %s\n", port.error().message().c_str());
        return 1;
    }
    Port& p = *port->port;
    const int port_fd = p.fd();
    int epoll_fd = -1;
    if (port_fd >= 0) {
        epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, port_fd, &ev);
    }
    if (!wait_active(p, o.wait_active_s)) {
        std::fprintf(stderr, "ibudping: port not ACTIVE after %.0f s (state %s)\n", o.wait_active_s, to_string(p.attributes().state));
        return 1;
    }
    auto qp = p.create_ud_qp({.qkey = o.qkey, .send_depth = 512, .receive_depth = kReceiveBuffers});
    if (!qp) {
        std::fprintf(stderr, "ibudping: could not create QP: %s\n", qp.error().message().c_str());
        return 1;
    }
    if (o.mgid) {
        auto a = (*qp)->attach_multicast(*o.mgid, o.mlid);
        if (!a) {
            std::fprintf(stderr, "ibudping: could not attach to the group: %s\n", a.error().message().c_str());
            return 1;
        }
    }
    const auto attr = p.attributes();
    std::printf("ibudping %s: LID 0x%04x QPN 0x%06x GID %s MTU %u\n", o.mode.c_str(), attr.lid, (*qp)->qpn(),
                format_gid(attr.gid()).c_str(), ib::mtu_bytes(attr.active_mtu));
    std::fflush(stdout);
    const int rc = o.mode == "server" ? run_server(o, p, **qp, epoll_fd) : run_client(o, p, **qp, epoll_fd);
    print_port_counters(p);
    if (epoll_fd >= 0) ::close(epoll_fd);
    return rc;
}
