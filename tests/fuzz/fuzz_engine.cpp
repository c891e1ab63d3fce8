// libFuzzer target for the IPoIB engine: arbitrary frames from the fabric
// and arbitrary datagrams from the TUN, between two hosts that are up
// (engine_harness.h: in-memory fabric, scripted SA, fake clock).
//
// Input: records of [selector][length][bytes...] until the input ends:
//   selector % 4 == 0  a datagram to B: the bytes are the UD payload (IPoIB
//                      header and all), from A's QPN and LID
//   selector % 4 == 1  a datagram from A's host: the bytes are the IP packet
//   selector % 4 == 2  the same, with byte 0 forced to a version (4 or 6)
//                      and the length fields repaired, to get past inspection
//   selector % 4 == 3  time passes: length * 100 ms
// After each record the World is pumped.
//
// Invariants (a violation traps):
//   - every drop lands in a counter: nothing throws, nothing crashes;
//   - both links stay up (no input from a peer or the host takes them down);
//   - the tables respect their bounds (entries, the neighbours' queued bytes);
//   - afterwards, a ping from A to B still gets through.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "../unit/engine_harness.h"

using namespace ipoibd;
using namespace ipoibd::ipoib;
using namespace ipoibd::ipoib::test;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

void repair(Packet& p) {
    if (p.empty()) return;
    if ((p[0] >> 4) != 6) {
        p[0] = static_cast<std::uint8_t>(0x45 | (p[0] & 0x0F));
        if (p.size() >= 20) {
            p[0] = 0x45;
            store_be16(p.data() + 2, static_cast<std::uint16_t>(p.size()));
        }
    } else if (p.size() >= 40) {
        store_be16(p.data() + 4, static_cast<std::uint16_t>(p.size() - 40));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    World w;
    Host& a = w.add_host();
    Host& b = w.add_host();
    a.record_frames = b.record_frames = false;
    a.add_address("198.18.0.1/24");
    a.add_address("2001:db8::1/64");
    b.add_address("198.18.0.2/24");
    b.add_address("2001:db8::2/64");
    a.start();
    b.start();
    w.advance(std::chrono::seconds(2));
    check(a.engine.link().up && b.engine.link().up);

    std::size_t off = 0;
    for (int records = 0; records < 64 && off + 2 <= size; ++records) {
        const std::uint8_t selector = data[off];
        const std::size_t len = std::min<std::size_t>(data[off + 1], size - off - 2);
        Packet body(data + off + 2, data + off + 2 + len);
        off += 2 + len;
        switch (selector % 4) {
        case 0:
            b.engine.on_datagram({.payload = body, .src_qp = a.engine.link().qpn, .slid = a.port->attributes().lid},
                                 w.now);
            break;
        case 1:
            a.from_host(body);
            break;
        case 2:
            repair(body);
            a.from_host(body);
            break;
        case 3:
            w.advance(std::chrono::milliseconds(100) * len);
            break;
        }
        w.pump();
        check(a.engine.link().up && b.engine.link().up);
        check(a.engine.neighbours().size() <= a.engine.neighbours().config().max_entries);
        check(a.engine.neighbours().queued_bytes() <= a.engine.neighbours().config().max_queued_bytes);
        check(a.engine.multicast().groups().size() <= 1024);
    }
    const Packet ping = icmp_echo_v4("198.18.0.1", "198.18.0.2", 4242);
    b.tun.clear();
    for (int i = 0; i < 10 && b.tun.empty(); ++i) {
        a.from_host(ping);
        w.advance(std::chrono::seconds(1));
    }
    bool found = false;
    for (const Packet& p : b.tun) found = found || p == ping;
    check(found);
    return 0;
}
