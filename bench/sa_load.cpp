// SA load: 1,000 simulated ports join multicast groups and query paths
// against ibfabricd's SA engine, in process. Prints requests/s and latency
// percentiles per phase; asserts nothing (bench/ holds figures, not tests).
//
//   bench_sa_load [PORTS] [PATH_QUERIES]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "fabric/sa/sa_server.h"
#include "transport/gid.h"

using namespace ipoibd;
using namespace ipoibd::fabric;

namespace {

struct NullOutput final : SwitchOutput {
    void send(const SocketAddress&, bytes) override {}
};

ib::Gid gid_of(std::uint64_t guid) {
    ib::Gid g{};
    store_be64(g.data(), 0xFE80000000000000ULL);
    store_be64(g.data() + 8, guid);
    return g;
}

struct Phase {
    const char* name;
    std::vector<double> us;
    std::size_t errors = 0;
    double seconds = 0;

    void report() {
        std::sort(us.begin(), us.end());
        auto pct = [&](double p) { return us.empty() ? 0.0 : us[static_cast<std::size_t>(p * static_cast<double>(us.size() - 1))]; };
        std::printf("%-26s %8zu requests %10.0f req/s   p50 %7.1f us  p99 %7.1f us  max %8.1f us  errors %zu\n", name,
                    us.size(), static_cast<double>(us.size()) / seconds, pct(0.5), pct(0.99), us.empty() ? 0.0 : us.back(), errors);
    }
};

template <class F>
void timed(Phase& phase, F&& request) {
    const auto start = Clock::now();
    const bool ok = request();
    const auto end = Clock::now();
    phase.us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    phase.seconds += std::chrono::duration<double>(end - start).count();
    if (!ok) ++phase.errors;
}

}  // namespace

int main(int argc, char** argv) {
    const std::size_t n_ports = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
    const std::size_t n_paths = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 20000;
    NullOutput out;
    Switch sw(Switch::Config{.num_ports = 254}, out);
    std::vector<SaPort> ports;
    for (std::size_t i = 0; i < n_ports; ++i) {
        const auto guid = 0x0200000000000000ULL + i;
        ports.push_back({.lid = static_cast<std::uint16_t>(2 + i), .guid = guid, .gid = gid_of(guid), .mtu = 4, .rate = 7,
                         .pkeys = {0xFFFF}, .switch_port = static_cast<std::uint8_t>(1 + i % 254)});
    }
    SaServer sa(SaServerConfig{}, sw, [&] { return ports; });
    const ib::Gid broadcast = *parse_gid("ff12:401b:ffff::ffff:ffff");
    std::printf("SA load: %zu ports\n", n_ports);

    Phase joins{"join broadcast (Set)"};
    for (const SaPort& p : ports) {
        sa::McMemberQuery q;
        q.set_mgid(broadcast).set_port_gid(p.gid).set_join_state(sa::join_state::full_member);
        const auto req = q.request(ib::method::set, 1);
        timed(joins, [&] { return sa.handle(*req, p.lid).at(0).header.status == 0; });
    }
    joins.report();

    Phase groups{"join 8 IPoIB groups each"};
    for (const SaPort& p : ports) {
        for (std::uint8_t g = 0; g < 8; ++g) {
            ib::Gid mgid = *parse_gid("ff12:401b:ffff::e000:0");
            mgid[15] = static_cast<std::uint8_t>(g + 1);
            sa::McMemberQuery q;
            q.set_mgid(mgid).set_port_gid(p.gid).set_join_state(sa::join_state::full_member)
                .set_q_key(0x0B1B).set_tclass(0).set_p_key(0xFFFF).set_flow_label(0).set_sl(0);
            const auto req = q.request(ib::method::set, 2);
            timed(groups, [&] { return sa.handle(*req, p.lid).at(0).header.status == 0; });
        }
    }
    groups.report();

    Phase paths{"PathRecord Get"};
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::size_t> pick(0, n_ports - 1);
    for (std::size_t i = 0; i < n_paths; ++i) {
        const SaPort& s = ports[pick(rng)];
        const SaPort& d = ports[pick(rng)];
        sa::PathQuery q;
        q.set_sgid(s.gid).set_dgid(d.gid);
        const auto req = q.request(ib::method::get, 3);
        timed(paths, [&] { return sa.handle(*req, s.lid).at(0).header.status == 0; });
    }
    paths.report();

    Phase table{"MCMemberRecord GetTable"};
    for (int i = 0; i < 20; ++i) {
        sa::McMemberQuery q;
        auto req = q.request(ib::method::get_table, 4);
        req->sm_key = 1;  // trusted: one record per member, ~9,000 records
        timed(table, [&] { return !sa.handle(*req, ports[0].lid).empty(); });
    }
    table.report();

    Phase leaves{"leave broadcast (Delete)"};
    for (const SaPort& p : ports) {
        sa::McMemberQuery q;
        q.set_mgid(broadcast).set_port_gid(p.gid).set_join_state(sa::join_state::full_member);
        const auto req = q.request(ib::method::del, 5);
        timed(leaves, [&] { return sa.handle(*req, p.lid).at(0).header.status == 0; });
    }
    leaves.report();
    return 0;
}
