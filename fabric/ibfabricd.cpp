// ibfabricd: the soft InfiniBand fabric. One switch with a subnet manager on
// its management port, IBA packets carried in UDP datagrams.
//
//   ibfabricd [--listen ADDR:PORT] [--pcap FILE] [--sweep-interval 1s] ...
//
// main():
//  1. parse options (errors name the option and value, exit 2)
//  2. open the fabric service (fabric_service.h): bind the UDP socket, open
//     the capture file (errors exit 1)
//  3. block the signals, create the timerfd and epoll set, say "listening"
//  4. loop: datagrams -> switch; timer ticks -> link packets, link timeouts,
//     SM sweeps and retries; SIGUSR1 -> counters to stdout; SIGTERM/SIGINT
//     -> counters, then exit 0
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>

#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "common/duration.h"
#include "common/socket_address.h"
#include "common/unique_fd.h"
#include "fabric/fabric_service.h"
#include "transport/gid.h"

namespace po = boost::program_options;
using namespace ipoibd;
using namespace ipoibd::fabric;

namespace {

struct Options {
    FabricServiceOptions service;
    bool quiet = false;
};

void log_line(const std::string& s) {
    std::fprintf(stderr, "ibfabricd: %s\n", s.c_str());
    std::fflush(stderr);
}

std::optional<std::uint64_t> number(const std::string& s, std::uint64_t max) {
    try {
        std::size_t end = 0;
        const auto v = std::stoull(s, &end, 0);
        if (end != s.size() || v > max) return std::nullopt;
        return v;
    } catch (...) {
        return std::nullopt;
    }
}

std::optional<Options> parse(int argc, char** argv) {
    Options o;
    FabricServiceOptions& f = o.service;
    std::string listen = "0.0.0.0:18516", sweep = "1s", link_timeout = "1s", smp_timeout = "250ms", mtu = "4096";
    std::string prefix = "fe80::";
    std::vector<std::string> lids, groups;
    std::string partitions;
    unsigned ports = 64;
    po::options_description desc("ibfabricd options");
    desc.add_options()
        ("help,h", "this text")
        ("version", "print the version")
        ("listen", po::value(&listen), "UDP address the switch listens on, ADDR:PORT")
        ("pcap", po::value(&f.pcap), "write every packet entering the switch to FILE (pcap, ERF type 21)")
        ("ports", po::value(&ports), "switch ports, 1..254")
        ("sweep-interval", po::value(&sweep), "how often the SM checks the ports (e.g. 1s, 500ms)")
        ("link-timeout", po::value(&link_timeout), "silence after which a port's link is down")
        ("smp-timeout", po::value(&smp_timeout), "time the SM waits for each SMP response")
        ("mtu", po::value(&mtu), "largest MTU of the fabric: 256, 512, 1024, 2048 or 4096")
        ("subnet-prefix", po::value(&prefix), "GID prefix of the subnet, an IPv6 /64 (default fe80::)")
        ("lid", po::value(&lids), "fixed LID for a port: GUID=LID (repeatable)")
        ("partitions", po::value(&partitions), "partitions file (partitions.conf syntax; default: Default=0x7fff, ipoib : ALL=full)")
        ("mcast-group", po::value(&groups), "MLID that every port receives without joining (a test aid beside the SA's groups; repeatable)")
        ("quiet,q", "log only errors");
    po::variables_map vm;
    auto fail = [](const std::string& what) -> std::optional<Options> {
        std::cerr << "ibfabricd: " << what << "\n";
        return std::nullopt;
    };
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        return fail(e.what());
    }
    if (vm.count("help")) {
        std::cout << desc << "\n";
        std::exit(0);
    }
    if (vm.count("version")) {
        std::cout << "ibfabricd " IPOIBD_VERSION "\n";
        std::exit(0);
    }
    auto l = parse_socket_address(listen);
    if (!l) return fail("--listen '" + listen + "': " + l.error());
    if (l->port() == 4791) return fail("--listen: port 4791 is RoCEv2's; the soft fabric must not use it");
    f.listen = *l;
    if (ports < 1 || ports > Switch::kMaxPorts) return fail("--ports " + std::to_string(ports) + ": must be 1..254");
    f.sw.num_ports = static_cast<std::uint8_t>(ports);
    const std::pair<std::string*, std::chrono::milliseconds*> durations[] = {
        {&sweep, &f.sm.sweep_interval}, {&link_timeout, &f.sw.link_timeout}, {&smp_timeout, &f.sm.smp_timeout}};
    const char* names[] = {"--sweep-interval", "--link-timeout", "--smp-timeout"};
    for (std::size_t i = 0; i < 3; ++i) {
        auto d = parse_duration(*durations[i].first);
        if (!d) return fail(std::string(names[i]) + ": " + d.error());
        if (d->count() == 0) return fail(std::string(names[i]) + " must be more than 0");
        *durations[i].second = *d;
    }
    const std::pair<const char*, ib::Mtu> mtus[] = {{"256", ib::Mtu::mtu256}, {"512", ib::Mtu::mtu512},
                                                    {"1024", ib::Mtu::mtu1024}, {"2048", ib::Mtu::mtu2048},
                                                    {"4096", ib::Mtu::mtu4096}};
    bool mtu_ok = false;
    for (const auto& [text, m] : mtus)
        if (mtu == text) {
            f.sm.mtu = m;
            mtu_ok = true;
        }
    if (!mtu_ok) return fail("--mtu '" + mtu + "': must be 256, 512, 1024, 2048 or 4096");
    const auto gid = parse_gid(prefix);
    if (!gid || load_be64(gid->data() + 8) != 0)
        return fail("--subnet-prefix '" + prefix + "': expected the first 64 bits of a GID, such as fe80::");
    f.sm.subnet_prefix = load_be64(gid->data());
    for (const std::string& s : lids) {
        const auto eq = s.find('=');
        const auto guid = eq == std::string::npos ? std::nullopt : number(s.substr(0, eq), ~0ULL);
        const auto lid = eq == std::string::npos ? std::nullopt : number(s.substr(eq + 1), 0xFFFF);
        if (!guid || !lid || !ib::is_unicast_lid(static_cast<std::uint16_t>(*lid)) || *lid == f.sw.lid)
            return fail("--lid '" + s + "': expected GUID=LID with LID in 0x2..0xbfff");
        f.sm.static_lids[*guid] = static_cast<std::uint16_t>(*lid);
    }
    if (!partitions.empty()) {
        auto p = load_partitions(partitions);
        if (!p) return fail(p.error().to_string());
        f.sm.partitions = std::move(*p);
    }
    for (const std::string& s : groups) {
        const auto m = number(s, 0xFFFF);
        if (!m || !ib::is_multicast_lid(static_cast<std::uint16_t>(*m)))
            return fail("--mcast-group '" + s + "': expected an MLID in 0xc000..0xfffe");
        f.flood_groups.push_back(static_cast<std::uint16_t>(*m));
    }
    o.quiet = vm.count("quiet") > 0;
    return o;
}

// ibfabricd's own event loop around the service: the service's socket, a
// timerfd every FabricService::kTickInterval, and a signalfd.
class Loop {
public:
    // Blocks the signals before anyone is told the fabric listens: a
    // SIGUSR1 sent after "listening on" must not kill the process.
    explicit Loop(FabricService& fabric) : fabric_(fabric) {
        sigset_t mask;
        sigemptyset(&mask);
        for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&mask, s);
        sigprocmask(SIG_BLOCK, &mask, nullptr);
        sigfd_ = UniqueFd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
        timer_ = UniqueFd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
        itimerspec spec{};
        spec.it_interval.tv_nsec =
            std::chrono::duration_cast<std::chrono::nanoseconds>(FabricService::kTickInterval).count();
        spec.it_value = spec.it_interval;
        ::timerfd_settime(timer_.get(), 0, &spec, nullptr);
        epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
        for (int fd : {fabric_.fd(), sigfd_.get(), timer_.get()}) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.fd = fd;
            ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
        }
    }

    // Runs until SIGTERM or SIGINT; returns the exit status.
    int run() {
        for (;;) {
            epoll_event events[8];
            const int n = ::epoll_wait(epoll_.get(), events, 8, 1000);
            const auto now = Clock::now();
            for (int i = 0; i < n; ++i) {
                const int fd = events[i].data.fd;
                if (fd == fabric_.fd()) {
                    fabric_.on_readable(now);
                } else if (fd == timer_.get()) {
                    std::uint64_t expirations;
                    if (::read(timer_.get(), &expirations, sizeof expirations) > 0) fabric_.tick(now);
                } else if (fd == sigfd_.get()) {
                    if (const auto status = on_signals()) return *status;
                }
            }
            fabric_.after_wakeup(now);
        }
    }

private:
    // The exit status when a signal ends the process.
    std::optional<int> on_signals() {
        signalfd_siginfo si;
        while (::read(sigfd_.get(), &si, sizeof si) == sizeof si) {
            if (si.ssi_signo == SIGUSR1) {
                print_stats();
            } else if (si.ssi_signo == SIGHUP) {
                log_line("SIGHUP: nothing to reload (options are fixed at start)");
            } else {
                print_stats();
                fabric_.flush();
                log_line("exiting on signal " + std::to_string(si.ssi_signo));
                return 0;
            }
        }
        return std::nullopt;
    }

    void print_stats() {
        std::fputs(fabric_.stats().c_str(), stdout);
        std::fflush(stdout);
    }

    FabricService& fabric_;
    UniqueFd sigfd_;
    UniqueFd timer_;
    UniqueFd epoll_;
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

    auto opened = FabricService::open(std::move(options->service));
    if (!opened) {
        log_line(opened.error());
        return 1;
    }
    FabricService& fabric = **opened;
    Loop loop(fabric);
    const FabricServiceOptions& o = fabric.options();
    log_line("listening on " + fabric.local_address().to_string() + ", switch LID " + hex4(fabric.fabric_switch().lid()) +
             ", " + std::to_string(o.sw.num_ports) + " ports" + (o.pcap.empty() ? "" : ", capturing to " + o.pcap));
    return loop.run();
}
