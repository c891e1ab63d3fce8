// libFuzzer target: ibfabricd's SA engine fed arbitrary SA MADs from three
// ports, with time passing. Invariants: no crash or sanitizer report; every
// answer is a response MAD of the SubnAdm class; the broadcast group
// survives everything.
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <array>
#include <cstring>

#include "fabric/sa/sa_server.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static NullOutput out;
    Switch sw(Switch::Config{}, out);
    const std::vector<SaPort> ports = {
        {.lid = 2, .guid = 0xA, .gid = gid_of(0xA), .mtu = 4, .rate = 7, .pkeys = {0xFFFF}, .switch_port = 1},
        {.lid = 3, .guid = 0xB, .gid = gid_of(0xB), .mtu = 5, .rate = 3, .pkeys = {0xFFFF, 0x8001}, .switch_port = 2},
        {.lid = 4, .guid = 0xC, .gid = gid_of(0xC), .mtu = 4, .rate = 7, .pkeys = {0x0001}, .switch_port = 3},
    };
    SaServer sa(SaServerConfig{}, sw, [&] { return ports; });
    auto now = Clock::time_point{} + std::chrono::hours(1);
    // The input is a sequence of requests [lid selector][length N][N bytes]:
    // the N bytes are the start of a MAD, the rest zero, with BaseVersion 1
    // and the SubnAdm class so that most reach the SA's logic.
    std::size_t off = 0;
    while (off + 2 <= size) {
        const std::uint16_t lid = static_cast<std::uint16_t>(2 + data[off] % 4);  // 5: an unknown LID
        const std::size_t n = std::min<std::size_t>(data[off + 1], size - off - 2);
        std::array<std::uint8_t, sa::SaMad::size> mad_bytes{};
        std::memcpy(mad_bytes.data(), data + off + 2, n);
        mad_bytes[0] = ib::kMadBaseVersion;
        mad_bytes[1] = ib::mgmt_class::subn_adm;
        const std::uint8_t step = data[off];
        off += 2 + n;
        auto mad = sa::decode_sa_mad(mad_bytes);
        if (!mad) continue;
        for (const sa::SaMad& r : sa.handle(*mad, lid, 1, now)) {
            if (!r.header.is_response() || r.header.mgmt_class != ib::mgmt_class::subn_adm) std::abort();
        }
        now += std::chrono::milliseconds(step * 10);
        sa.tick(now);
        for (const SaOutgoing& o : sa.take_outbound())
            if (o.mad.header.method != ib::method::report && !o.mad.header.is_response()) std::abort();
    }
    sa.port_gone(0xA, now);
    if (sa.groups().empty()) std::abort();  // the partition's broadcast group is never deleted
    return 0;
}
