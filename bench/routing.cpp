// The SM's routing engines on fat trees of 1,000 and 10,000 CA ports, in
// process: hop tables and LFTs for every switch (minhop, updn with its
// roots named), a re-route after a lost uplink with
// the previous tables kept where they still hold, and the credit-loop
// check. Google Benchmark; prints figures, asserts nothing.
//
//   bench_routing [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include "fabric/routing/credit_loops.h"
#include "fabric/routing/routing.h"
#include "fabric/routing/shapes.h"

using namespace ipoibd::fabric::routing;

namespace {

// 1,008 CA ports: 42 leaves of 24 hosts and 12 uplinks, 12 spines.
// 10,032: 209 leaves of 48 hosts and 16 uplinks, 16 spines of 209 ports.
FatTreeShape shape(std::int64_t hosts) {
    if (hosts <= 1008) return {.leaves = 42, .spines = 12, .hosts_per_leaf = 24};
    return {.leaves = 209, .spines = 16, .hosts_per_leaf = 48};
}

void label(benchmark::State& state, const Topology& t) {
    state.counters["ca_ports"] = static_cast<double>(t.endpoints().size());
    state.counters["switches"] = static_cast<double>(t.switches().size());
    state.counters["links"] = static_cast<double>(t.links());
}

void BM_Route(benchmark::State& state, Engine engine) {
    const FatTreeShape sh = shape(state.range(0));
    const Topology t = fat_tree(sh);
    RoutingOptions o;
    o.engine = engine;
    // updn rooted at the spines, as an operator names them: OpenSM's own
    // rule makes every switch of these trees a root (each leaf holds under
    // 5% of the CA ports), which is min-hop.
    if (engine == Engine::updn)
        for (unsigned s = sh.leaves; s < sh.leaves + sh.spines; ++s) o.root_guids.push_back(t.switches()[s].guid);
    std::size_t unrouted = 0;
    for (auto _ : state) {
        RoutingResult r = route(t, o);
        unrouted = r.routes ? r.routes->unrouted : ~std::size_t{0};
        benchmark::DoNotOptimize(r);
    }
    label(state, t);
    state.counters["unrouted"] = static_cast<double>(unrouted);
    // LFT entries written per second.
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(t.switches().size()) *
                            static_cast<std::int64_t>(t.max_lid()));
}
BENCHMARK_CAPTURE(BM_Route, minhop, Engine::minhop)->Arg(1008)->Arg(10032)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Route, updn, Engine::updn)->Arg(1008)->Arg(10032)->Unit(benchmark::kMillisecond);

void BM_RerouteAfterLostUplink(benchmark::State& state) {
    Topology t = fat_tree(shape(state.range(0)));
    const RoutingResult before = route(t, {});
    t.cut(0, static_cast<std::uint8_t>(shape(state.range(0)).hosts_per_leaf + 1));
    RoutingOptions o;
    o.previous = &*before.routes;
    std::size_t moved = 0;
    for (auto _ : state) {
        RoutingResult r = route(t, o);
        benchmark::DoNotOptimize(r);
        moved = 0;
        for (std::size_t s = 0; s < r.routes->lft.size(); ++s)
            for (std::size_t lid = 0; lid < r.routes->lft[s].size(); ++lid)
                moved += r.routes->lft[s][lid] != before.routes->lft[s][lid] ? 1u : 0u;
    }
    label(state, t);
    state.counters["entries_moved"] = static_cast<double>(moved);
}
BENCHMARK(BM_RerouteAfterLostUplink)->Arg(1008)->Arg(10032)->Unit(benchmark::kMillisecond);

void BM_CreditLoopCheck(benchmark::State& state) {
    const FatTreeShape sh = shape(state.range(0));
    const Topology t = fat_tree(sh);
    RoutingOptions o;
    o.engine = Engine::updn;
    for (unsigned s = sh.leaves; s < sh.leaves + sh.spines; ++s) o.root_guids.push_back(t.switches()[s].guid);
    const RoutingResult r = route(t, o);
    ChannelGraph g;
    for (auto _ : state) {
        g = check_credit_loops(t, *r.routes);
        benchmark::DoNotOptimize(g);
    }
    label(state, t);
    state.counters["dependencies"] = static_cast<double>(g.dependencies);
    state.counters["cycle"] = static_cast<double>(g.cycle.size());
}
BENCHMARK(BM_CreditLoopCheck)->Arg(1008)->Arg(10032)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
