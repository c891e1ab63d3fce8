// The steady-state data path allocates nothing per packet.
//
// Two in-process hosts (engine_harness.h) exchange pings after warm-up (ARP
// resolved, path known). While the packets move, every call of the global
// operator new is attributed, by its stack, to the innermost function of the
// project (ipoibd::...) that asked for it:
//   - the test's stand-ins for the outside world are not counted: the
//     harness (ipoibd::ipoib::test: World, Host, its TUN and SA) and the
//     in-memory wire (MemoryFabric/MemoryPort, in the daemon a UDP socket);
//   - everything else is the data path (Engine, PortLink, PortCore, the
//     caches and codecs): its allocations are counted, and each distinct
//     site is printed with a backtrace when the bound is exceeded.
// This needs the executable's symbols in the dynamic table (ENABLE_EXPORTS,
// -rdynamic) so that dladdr() names them; functions with internal linkage
// have no name there and are attributed to their caller.
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "engine_harness.h"

namespace alloc_probe {

constexpr int kMaxFrames = 40;
constexpr std::size_t kMaxSites = 32;

struct Site {
    void* function = nullptr;  // dli_saddr of the innermost project frame
    std::size_t count = 0;
    int depth = 0;
    void* frames[kMaxFrames] = {};
};

std::atomic<bool> counting{false};
thread_local bool inside = false;
Site sites[kMaxSites];
std::size_t site_count = 0;
std::size_t data_path = 0;   // counted
std::size_t outside = 0;     // harness and in-memory wire: not counted
std::size_t unattributed = 0;  // no project frame at all: counted too

// Skips one call offset of a thunk's name: [n]<digits>_ (Itanium ABI).
const char* skip_call_offset(const char* p) {
    if (*p == 'n') ++p;
    while (*p >= '0' && *p <= '9') ++p;
    return *p == '_' ? p + 1 : nullptr;
}

// Mangled name of a function of namespace ipoibd? Returns the rest after
// "6ipoibd" (the nested names) or nullptr.
const char* project_scope(const char* mangled) {
    if (!mangled || std::strncmp(mangled, "_Z", 2) != 0) return nullptr;
    const char* p = mangled + 2;
    // A thunk (_ZTh<offset>_ non-virtual, _ZTv<offset>_<offset>_ virtual) is
    // named after the function it adjusts `this` for; at -O3 the function's
    // body may be inlined into it, so the thunk's frame is that function's.
    if (std::strncmp(p, "Th", 2) == 0) {
        p = skip_call_offset(p + 2);
    } else if (std::strncmp(p, "Tv", 2) == 0) {
        p = skip_call_offset(p + 2);
        if (p) p = skip_call_offset(p);
    }
    if (!p) return nullptr;
    if (*p == 'Z') ++p;  // local entity (a lambda's operator())
    if (*p != 'N') return nullptr;
    ++p;
    while (*p == 'K' || *p == 'V' || *p == 'r') ++p;  // cv-qualifiers of a member function
    return std::strncmp(p, "6ipoibd", 7) == 0 ? p + 7 : nullptr;
}

bool is_outside_world(const char* scope) {
    return std::strncmp(scope, "5ipoib4test", 11) == 0 || std::strncmp(scope, "9transport12MemoryFabric", 24) == 0 ||
           std::strncmp(scope, "9transport10MemoryPort", 22) == 0;
}

void note() {
    if (!counting.load(std::memory_order_relaxed) || inside) return;
    inside = true;
    void* frames[kMaxFrames];
    const int n = ::backtrace(frames, kMaxFrames);
    void* function = nullptr;
    bool outside_world = false;
    for (int i = 1; i < n; ++i) {
        Dl_info info{};
        if (!::dladdr(frames[i], &info)) continue;
        const char* scope = project_scope(info.dli_sname);
        if (!scope) continue;
        function = info.dli_saddr;
        outside_world = is_outside_world(scope);
        break;
    }
    if (outside_world) {
        ++outside;
    } else {
        ++(function ? data_path : unattributed);
        std::size_t i = 0;
        while (i < site_count && sites[i].function != function) ++i;
        if (i == site_count && site_count < kMaxSites) {
            sites[i].function = function;
            sites[i].depth = n;
            std::memcpy(sites[i].frames, frames, sizeof(void*) * static_cast<std::size_t>(n));
            ++site_count;
        }
        if (i < site_count) ++sites[i].count;
    }
    inside = false;
}

void reset() {
    for (Site& s : sites) s = Site{};
    site_count = 0;
    data_path = outside = unattributed = 0;
}

void print_sites() {
    for (std::size_t s = 0; s < site_count; ++s) {
        Dl_info info{};
        std::string name = "(no project frame)";
        if (sites[s].function && ::dladdr(sites[s].function, &info) && info.dli_sname) {
            int status = 0;
            char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
            name = d ? d : info.dli_sname;
            std::free(d);
        }
        std::fprintf(stderr, "---- %zu allocation(s) in %s; backtrace of the first:\n", sites[s].count, name.c_str());
        ::backtrace_symbols_fd(sites[s].frames, sites[s].depth, STDERR_FILENO);
    }
}

void* allocate(std::size_t n) {
    note();
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}

}  // namespace alloc_probe

void* operator new(std::size_t n) { return alloc_probe::allocate(n); }
void* operator new[](std::size_t n) { return alloc_probe::allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    alloc_probe::note();
    return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    alloc_probe::note();
    return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace ipoibd::ipoib::test {

// At most this many allocations by the data path over the whole run of
// kRoundTrips (4 x kRoundTrips packets through engines and ports): none per
// packet, a few one-off ones (a container reaching its steady size) allowed.
constexpr std::size_t kRoundTrips = 1000;
constexpr std::size_t kMaxDataPathAllocations = 8;

class DataPathAllocation : public ::testing::Test {
protected:
    void SetUp() override {
        a = &w.add_host();
        b = &w.add_host();
        a->add_address("198.18.0.1/24");
        a->add_address("2001:db8::1/64");
        b->add_address("198.18.0.2/24");
        b->add_address("2001:db8::2/64");
        a->start();
        b->start();
        w.advance(2s);  // broadcast joins, DAD
        ASSERT_TRUE(a->engine.link().up);
        ASSERT_TRUE(b->engine.link().up);
    }

    // One ping A -> B and its answer B -> A, each delivered.
    void round_trip(const Packet& ping, const Packet& pong) {
        a->from_host(ping);
        w.pump();
        b->from_host(pong);
        w.pump();
    }

    // Warm-up (ARP or ND both ways, path records, every queue at its steady
    // size), then kRoundTrips counted; returns the data path's allocations.
    std::size_t count_allocations(const Packet& ping, const Packet& pong, const IpAddress& b_ip) {
        for (int i = 0; i < 64; ++i) round_trip(ping, pong);
        EXPECT_EQ(b->tun.size(), 64u);
        EXPECT_EQ(a->tun.size(), 64u);
        const auto n = a->engine.neighbours().find(b_ip);
        EXPECT_TRUE(n && n->state == NeighbourState::reachable);
        for (Host* h : {a, b}) {
            h->record_frames = false;
            h->record_tun = false;
            h->tun_packets = 0;
            h->sent.clear();
        }
        const auto tx_before = a->engine.counters().tx_unicast;
        const auto solicits_before = a->engine.neighbours().counters().solicits;
        void* prime[2];
        (void)::backtrace(prime, 2);  // loads the unwinder now, not while counting

        alloc_probe::reset();
        alloc_probe::counting = true;
        for (std::size_t i = 0; i < kRoundTrips; ++i) round_trip(ping, pong);
        alloc_probe::counting = false;

        EXPECT_EQ(b->tun_packets, kRoundTrips);
        EXPECT_EQ(a->tun_packets, kRoundTrips);
        EXPECT_EQ(a->engine.counters().tx_unicast - tx_before, kRoundTrips);
        EXPECT_EQ(a->engine.neighbours().counters().solicits, solicits_before);
        std::fprintf(stderr,
                     "%zu round trips: %zu allocations by the data path, %zu unattributed, %zu by the harness "
                     "and the in-memory wire (not counted)\n",
                     kRoundTrips, alloc_probe::data_path, alloc_probe::unattributed, alloc_probe::outside);
        const std::size_t counted = alloc_probe::data_path + alloc_probe::unattributed;
        if (counted > kMaxDataPathAllocations) alloc_probe::print_sites();
        return counted;
    }

    World w;
    Host* a = nullptr;
    Host* b = nullptr;
};

TEST_F(DataPathAllocation, Ipv4PingsAfterWarmUpAllocateNothingPerPacket) {
    // Near-MTU datagrams (link MTU 2044).
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 1, 1400);
    const Packet pong = icmp_echo_v4("198.18.0.2", "198.18.0.1", 1, 1400);
    EXPECT_LE(count_allocations(ping, pong, ip("198.18.0.2")), kMaxDataPathAllocations)
        << "the data path allocates per packet; sites on stderr";
}

TEST_F(DataPathAllocation, Ipv6PingsAfterWarmUpAllocateNothingPerPacket) {
    const Packet ping = icmp_echo_v6("2001:db8::1", "2001:db8::2", 1, 1400);
    const Packet pong = icmp_echo_v6("2001:db8::2", "2001:db8::1", 1, 1400);
    EXPECT_LE(count_allocations(ping, pong, ip("2001:db8::2")), kMaxDataPathAllocations)
        << "the data path allocates per packet; sites on stderr";
}

// The probe itself: an allocation by a project function outside the
// harness is seen and attributed to that function.
TEST(AllocationProbe, SeesAnAllocationInTheDataPath) {
    alloc_probe::reset();
    alloc_probe::counting = true;
    NeighbourCache cache;
    const Packet p(64, 0x45);
    (void)cache.lookup_or_resolve(ip("198.18.0.9"), p, Clock::time_point{} + 1s);  // new entry, packet queued
    alloc_probe::counting = false;
    EXPECT_GE(alloc_probe::data_path, 1u);
    ASSERT_GE(alloc_probe::site_count, 1u);
    Dl_info info{};
    ASSERT_TRUE(::dladdr(alloc_probe::sites[0].function, &info) && info.dli_sname);
    EXPECT_NE(std::strstr(info.dli_sname, "NeighbourCache"), nullptr) << info.dli_sname;
}

// The probe's reading of mangled names: plain functions, lambdas and thunks
// (at -O3 a thunk's frame carries the inlined body of its function) of
// namespace ipoibd; the in-memory wire and the harness are outside.
TEST(AllocationProbe, ReadsProjectNamesAndThunks) {
    struct Case {
        const char* mangled;
        const char* scope;  // nullptr: not a project function
        bool outside;
    };
    const Case cases[] = {
        {"_ZN6ipoibd9transport8PortCore4sendERNS1_2QpE", "9transport8PortCore4sendERNS1_2QpE", false},
        {"_ZNK6ipoibd5ipoib6Engine4linkEv", "5ipoib6Engine4linkEv", false},
        {"_ZZN6ipoibd5ipoib6Engine4tickEvENKUlvE_clEv", "5ipoib6Engine4tickEvENKUlvE_clEv", false},
        {"_ZThn8_N6ipoibd9transport10MemoryPort8transmitESt4spanIKhLm1EE",
         "9transport10MemoryPort8transmitESt4spanIKhLm1EE", true},
        {"_ZTv0_n24_N6ipoibd9transport8PortCore7processEv", "9transport8PortCore7processEv", false},
        {"_ZN6ipoibd5ipoib4test4Host9from_hostEv", "5ipoib4test4Host9from_hostEv", true},
        {"_ZN7testing4Test3RunEv", nullptr, false},
        {"_ZThn8_N7testing4Test3RunEv", nullptr, false},
        {"_ZThn8", nullptr, false},  // truncated offset
        {"main", nullptr, false},
        {nullptr, nullptr, false},
    };
    for (const Case& c : cases) {
        const char* scope = alloc_probe::project_scope(c.mangled);
        if (!c.scope) {
            EXPECT_EQ(scope, nullptr) << (c.mangled ? c.mangled : "(null)");
            continue;
        }
        ASSERT_NE(scope, nullptr) << c.mangled;
        EXPECT_STREQ(scope, c.scope);
        EXPECT_EQ(alloc_probe::is_outside_world(scope), c.outside) << c.mangled;
    }
}

}  // namespace ipoibd::ipoib::test
