// ibfabricd: the soft InfiniBand fabric. One switch with a subnet manager on
// its management port, IBA packets carried in UDP datagrams.
//
//   ibfabricd [--listen ADDR:PORT] [--pcap FILE] [--sweep-interval 1s] ...
//
// main():
//  1. parse options (errors name the option and value, exit 2)
//  2. bind the UDP socket, open the capture file
//  3. loop: datagrams -> switch; timer ticks -> link packets, link timeouts,
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
#include "fabric/management.h"
#include "fabric/sm.h"
#include "fabric/switch.h"
#include "transport/capture/erf_pcap.h"
#include "transport/gid.h"
#include "transport/soft/udp_batch.h"

namespace po = boost::program_options;
using namespace ipoibd;
using namespace ipoibd::fabric;

namespace {

constexpr auto kTick = std::chrono::milliseconds(50);

struct Options {
    SocketAddress listen;
    std::string pcap;
    Switch::Config sw;
    SmConfig sm;
    std::vector<std::uint16_t> flood_groups;
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
        ("pcap", po::value(&o.pcap), "write every packet entering the switch to FILE (pcap, ERF type 21)")
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
    o.listen = *l;
    if (ports < 1 || ports > Switch::kMaxPorts) return fail("--ports " + std::to_string(ports) + ": must be 1..254");
    o.sw.num_ports = static_cast<std::uint8_t>(ports);
    const std::pair<std::string*, std::chrono::milliseconds*> durations[] = {
        {&sweep, &o.sm.sweep_interval}, {&link_timeout, &o.sw.link_timeout}, {&smp_timeout, &o.sm.smp_timeout}};
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
            o.sm.mtu = m;
            mtu_ok = true;
        }
    if (!mtu_ok) return fail("--mtu '" + mtu + "': must be 256, 512, 1024, 2048 or 4096");
    const auto gid = parse_gid(prefix);
    if (!gid || load_be64(gid->data() + 8) != 0)
        return fail("--subnet-prefix '" + prefix + "': expected the first 64 bits of a GID, such as fe80::");
    o.sm.subnet_prefix = load_be64(gid->data());
    for (const std::string& s : lids) {
        const auto eq = s.find('=');
        const auto guid = eq == std::string::npos ? std::nullopt : number(s.substr(0, eq), ~0ULL);
        const auto lid = eq == std::string::npos ? std::nullopt : number(s.substr(eq + 1), 0xFFFF);
        if (!guid || !lid || !ib::is_unicast_lid(static_cast<std::uint16_t>(*lid)) || *lid == o.sw.lid)
            return fail("--lid '" + s + "': expected GUID=LID with LID in 0x2..0xbfff");
        o.sm.static_lids[*guid] = static_cast<std::uint16_t>(*lid);
    }
    if (!partitions.empty()) {
        auto p = load_partitions(partitions);
        if (!p) return fail(p.error().to_string());
        o.sm.partitions = std::move(*p);
    }
    for (const std::string& s : groups) {
        const auto m = number(s, 0xFFFF);
        if (!m || !ib::is_multicast_lid(static_cast<std::uint16_t>(*m)))
            return fail("--mcast-group '" + s + "': expected an MLID in 0xc000..0xfffe");
        o.flood_groups.push_back(static_cast<std::uint16_t>(*m));
    }
    o.quiet = vm.count("quiet") > 0;
    return o;
}

class Output final : public SwitchOutput {
public:
    explicit Output(transport::UdpBatchSocket& s) : socket_(s) {}
    void send(const SocketAddress& peer, bytes datagram) override { socket_.queue(datagram, &peer); }

private:
    transport::UdpBatchSocket& socket_;
};

void print_sa_stats(const SaServer& sa) {
    const auto& c = sa.counters();
    std::printf("sa: requests %llu errors %llu malformed %llu groups_created %llu groups_deleted %llu "
                "reports_sent %llu reports_acked %llu reports_dropped %llu subscriptions %zu\n",
                static_cast<unsigned long long>(c.requests), static_cast<unsigned long long>(c.errors),
                static_cast<unsigned long long>(c.malformed), static_cast<unsigned long long>(c.groups_created),
                static_cast<unsigned long long>(c.groups_deleted), static_cast<unsigned long long>(c.reports_sent),
                static_cast<unsigned long long>(c.reports_acked), static_cast<unsigned long long>(c.reports_dropped),
                sa.subscriptions().size());
    for (const auto& [mgid, g] : sa.groups())
        std::printf("group %s mlid 0x%04x qkey 0x%08x pkey 0x%04x mtu %u members %zu%s\n", format_gid(mgid).c_str(),
                    g.params.mlid, g.params.q_key, g.params.p_key, g.params.mtu, g.members.size(),
                    g.predefined ? " (partition broadcast group)" : "");
    std::fflush(stdout);
}

void print_stats(const Switch& sw, const SubnetManager& sm, const transport::UdpBatchSocket& sock) {
    const auto& c = sw.counters();
    std::printf("switch: lid 0x%04x forwarded %llu to_management %llu link_packets in %llu out %llu\n", sw.lid(),
                static_cast<unsigned long long>(c.forwarded), static_cast<unsigned long long>(c.to_management),
                static_cast<unsigned long long>(c.link_packets_in), static_cast<unsigned long long>(c.link_packets_out));
    for (std::size_t i = 0; i < kSwitchDropCount; ++i)
        if (c.dropped[i]) std::printf("switch drop %s %llu\n", to_string(static_cast<SwitchDrop>(i)), static_cast<unsigned long long>(c.dropped[i]));
    for (std::size_t i = 0; i < ib::kDropReasonCount; ++i)
        if (c.link_drops[i]) std::printf("switch link_check %s %llu\n", ib::to_string(static_cast<ib::DropReason>(i)), static_cast<unsigned long long>(c.link_drops[i]));
    const auto& u = sock.counters();
    std::printf("udp: rx %llu oversized %llu errors %llu tx %llu queue_full %llu tx_errors %llu\n",
                static_cast<unsigned long long>(u.rx_datagrams), static_cast<unsigned long long>(u.rx_oversized),
                static_cast<unsigned long long>(u.rx_errors), static_cast<unsigned long long>(u.tx_datagrams),
                static_cast<unsigned long long>(u.tx_queue_full), static_cast<unsigned long long>(u.tx_errors));
    const auto& s = sm.counters();
    std::printf("sm: smps %llu responses %llu errors %llu timeouts %llu unexpected %llu configured %llu lost %llu\n",
                static_cast<unsigned long long>(s.smps_sent), static_cast<unsigned long long>(s.responses),
                static_cast<unsigned long long>(s.error_responses), static_cast<unsigned long long>(s.timeouts),
                static_cast<unsigned long long>(s.unexpected_responses), static_cast<unsigned long long>(s.ports_configured),
                static_cast<unsigned long long>(s.ports_lost));
    for (const auto& [sp, p] : sm.ports()) {
        const auto peer = sw.peer_of(sp);
        std::printf("port %u: %s lid 0x%04x guid 0x%016llx peer %s \"%s\"\n", sp, to_string(p.phase), p.lid,
                    static_cast<unsigned long long>(p.port_guid), peer ? peer->to_string().c_str() : "-", p.description.c_str());
    }
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    auto options = parse(argc, argv);
    if (!options) return 2;
    const Options& o = *options;

    auto socket = transport::UdpBatchSocket::open(o.listen, nullptr);
    if (!socket) {
        log_line(socket.error().message());
        return 1;
    }
    std::optional<capture::ErfPcapWriter> pcap;
    if (!o.pcap.empty()) {
        auto w = capture::ErfPcapWriter::open(o.pcap);
        if (!w) {
            log_line(w.error().message());
            return 1;
        }
        pcap.emplace(std::move(*w));
    }

    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&mask, s);
    sigprocmask(SIG_BLOCK, &mask, nullptr);
    UniqueFd sigfd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
    UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    itimerspec spec{};
    spec.it_interval.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(kTick).count();
    spec.it_value = spec.it_interval;
    ::timerfd_settime(timer.get(), 0, &spec, nullptr);
    UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
    for (int fd : {socket->fd(), sigfd.get(), timer.get()}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev);
    }

    Output output(*socket);
    Switch sw(o.sw, output);
    SubnetManager sm(o.sm, sw, [&](const std::string& line) {
        if (!o.quiet) log_line(line);
    });
    SaServerConfig sa_config;
    sa_config.partitions = o.sm.partitions;
    sa_config.subnet_prefix = o.sm.subnet_prefix;
    SaServer sa(sa_config, sw, [&] { return FabricManagement::sa_ports(sm, o.sm.subnet_prefix, o.sm.partitions); });
    FabricManagement management(sw, sm, sa);
    sm.set_hooks({.port_active = [&](const SmPort& p) { sa.port_active(p.port_guid, Clock::now()); management.flush(); },
                  .port_lost = [&](const SmPort& p) { sa.port_gone(p.port_guid, Clock::now()); management.flush(); }});
    sw.set_management(&management);
    for (std::uint16_t mlid : o.flood_groups) sw.set_multicast_flood(mlid, true);
    if (pcap)
        sw.set_tap([&](bytes packet, bool from_management) {
            pcap->write(packet, std::chrono::system_clock::now(),
                        from_management ? capture::Direction::sent : capture::Direction::received);
        });
    log_line("listening on " + socket->local_address().to_string() + ", switch LID 0x0001, " +
             std::to_string(o.sw.num_ports) + " ports" + (pcap ? ", capturing to " + o.pcap : ""));

    for (;;) {
        epoll_event events[8];
        const int n = ::epoll_wait(epoll.get(), events, 8, 1000);
        const auto now = Clock::now();
        for (int i = 0; i < n; ++i) {
            const int fd = events[i].data.fd;
            if (fd == socket->fd()) {
                socket->receive([&](bytes d, const SocketAddress& from) { sw.on_datagram(from, d, now); }, 8);
            } else if (fd == timer.get()) {
                std::uint64_t exp;
                if (::read(timer.get(), &exp, sizeof exp) > 0) {
                    sw.tick(now);
                    LinkEvent le[16];
                    for (std::size_t k = sw.poll_link_events(le), j = 0; j < k; ++j) sm.on_link_event(le[j], now);
                    sm.tick(now);
                    management.tick(now);
                }
            } else if (fd == sigfd.get()) {
                signalfd_siginfo si;
                while (::read(sigfd.get(), &si, sizeof si) == sizeof si) {
                    if (si.ssi_signo == SIGUSR1) {
                        print_stats(sw, sm, *socket);
                        print_sa_stats(sa);
                    } else if (si.ssi_signo == SIGHUP) {
                        log_line("SIGHUP: nothing to reload (options are fixed at start)");
                    } else {
                        print_stats(sw, sm, *socket);
                        print_sa_stats(sa);
                        if (pcap) pcap->flush();
                        log_line("exiting on signal " + std::to_string(si.ssi_signo));
                        return 0;
                    }
                }
            }
        }
        // Link events from packets (a new port) are handled at once.
        LinkEvent le[16];
        for (std::size_t k = sw.poll_link_events(le), j = 0; j < k; ++j) sm.on_link_event(le[j], now);
        socket->flush();
        if (pcap && n > 0) pcap->flush();
    }
}
