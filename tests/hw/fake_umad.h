// A fake libibumad for the node-over-fake-HCA test: one CA ("fake_ib0",
// port 1, the fake libibverbs' port), one SubnAdm agent, and an SA behind
// it that answers with the engine tests' ScriptedSa. fake_umad.cpp defines
// the umad_* entry points the MAD path calls (mad_transport_umad.cpp);
// linked into a test executable they take the place of the real library's.
//   - umad_send() hands the MAD to the SA at once; its answer (if any) is
//     queued, with the high 32 bits of its TID rewritten as the kernel
//     does, and a pipe becomes readable: umad_get_fd()
//   - umad_recv() returns queued answers, -EWOULDBLOCK when none
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tests/unit/engine_harness.h"

namespace fake_umad {

struct Config {
    std::uint16_t lid = 0x0011;     // the fake HCA's port (fake_verbs::Config)
    std::uint16_t sm_lid = 0x0001;
    std::uint64_t port_guid = 0x0002C90300001234ULL;
    // false: class 0x07's Send is held (the kernel's ib_cm is loaded), and
    // registering for it fails with EINVAL as the MAD layer's would; true:
    // an agent may take it.
    bool cm_class_free = false;
    // false: SubnAdm's Report method is held by another agent (a
    // subscriber already running), and registering for it fails.
    bool sa_reports_free = true;
};

// A CM MAD the fake's port sent (umad_send through the class 0x07 agent)
// and where to.
struct SentMad {
    std::uint16_t dlid = 0;
    std::array<std::uint8_t, 256> mad{};
};

// Starts afresh: no port open, nothing queued, a new SA.
void reset(const Config& config = Config{});
ipoibd::ipoib::test::ScriptedSa& sa();
struct Stats {
    int sent = 0, received = 0, registered = 0, open_ports = 0;
    bool sa_takes_reports = false;  // the SubnAdm agent registered with Report (0x06) in its method mask
    std::vector<SentMad> cm_sent;
};
const Stats& stats();
// A CM MAD arriving from QP1 of `from_lid`, for the class 0x07 agent.
void inject_cm(const std::array<std::uint8_t, 256>& mad, std::uint16_t from_lid);

}  // namespace fake_umad
