// Per-packet costs of the data path, in process (Google Benchmark): what
// ipoibd does for every datagram between the TUN and the fabric socket.
// Prints figures and asserts nothing (bench/ holds figures, not tests).
//
//   BM_BuildUdPacket/N     build a UD SEND-only packet (LRH BTH DETH,
//                          payload, pad, ICRC, VCRC) carrying an IPoIB frame
//                          of 4 + N bytes, N the IP datagram (interface MTU
//                          2044 or 4092: the 2048 and 4096-byte IB MTUs)
//   BM_ParseUdPacket/N     validate the same packet (parse_packet: both
//                          CRCs and every header rule)
//   BM_Icrc/N, BM_Vcrc/N   the two CRCs alone over that packet (ibfabricd
//                          checks the VCRC of every packet it forwards too)
//   BM_Encapsulate/N       IPoIB header + copy of an N-byte datagram
//   BM_EncapsulateInPlace/N  header in front of a datagram already in place
//   BM_Decapsulate/N       classify a received frame (header, EtherType)
//   BM_NeighbourLookup/E   lookup_or_resolve over E REACHABLE entries, in a
//                          pseudo-random order (the engine's unicast path)
//   BM_RcSendMessage/N     the RC engine alone (transport/rc, no wire, no
//                          CRC): one N-byte SEND posted on a QP, its 4096-byte
//                          packets received by the peer's QP, the peer's ACK
//                          received back, both completions polled; posted
//                          and received as the port does (each packet
//                          handed over by a PacketSink), a receive posted
//                          again for each message
//
// Bytes/s count the IBA packet (build, parse), the bytes a CRC covers, or
// the frame written (encapsulate); items/s are packets or lookups.
//
//   bench_data_path [--benchmark_filter=REGEX] [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ipoib/frame.h"
#include "ipoib/hw_address.h"
#include "ipoib/neighbour_cache.h"
#include "transport/rc/rc_qp.h"
#include "transport/wire/crc.h"
#include "transport/wire/opcodes.h"
#include "transport/wire/packet.h"

using namespace ipoibd;

namespace {

// An IPv4-looking datagram of n bytes (contents do not matter to these layers).
std::vector<std::uint8_t> datagram(std::size_t n) {
    std::vector<std::uint8_t> d(n);
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<std::uint8_t>(i * 7 + 1);
    d[0] = 0x45;
    return d;
}

ib::PacketSpec ud_spec(bytes frame) {
    ib::PacketSpec s;
    s.lrh.dlid = 0x0002;
    s.lrh.slid = 0x0001;
    s.bth.opcode = ib::op::ud_send_only;
    s.bth.pkey = ib::kPKeyDefault;
    s.bth.dest_qp = 0x000049;
    s.bth.psn = 0x123456;
    s.ext.deth = {0x00000B1B, 0x000048};
    s.payload = frame;
    return s;
}

std::vector<std::uint8_t> ipoib_frame(std::size_t ip_len) {
    const auto ip = datagram(ip_len);
    std::vector<std::uint8_t> frame(ipoib::EncapHeader::size + ip_len);
    (void)ipoib::encapsulate(ipoib::EtherType::ipv4, ip, frame);
    return frame;
}

void BM_BuildUdPacket(benchmark::State& state) {
    const auto frame = ipoib_frame(static_cast<std::size_t>(state.range(0)));
    const ib::PacketSpec spec = ud_spec(frame);
    std::vector<std::uint8_t> wire(ib::kMaxPacketSize);
    std::size_t size = 0;
    for (auto _ : state) {
        auto n = ib::build_packet(spec, wire);
        if (!n) {
            state.SkipWithError("build_packet failed");
            break;
        }
        size = *n;
        benchmark::DoNotOptimize(wire.data());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size));
    state.counters["wire_bytes"] = static_cast<double>(size);
}

void BM_ParseUdPacket(benchmark::State& state) {
    const auto frame = ipoib_frame(static_cast<std::size_t>(state.range(0)));
    const ib::PacketSpec spec = ud_spec(frame);
    std::vector<std::uint8_t> wire(ib::packet_size(spec));
    if (!ib::build_packet(spec, wire)) {
        state.SkipWithError("build_packet failed");
        return;
    }
    const ib::ParseOptions options{.pmtu = ib::kMaxPmtuBytes};
    for (auto _ : state) {
        auto p = ib::parse_packet(wire, options);
        if (!p) {
            state.SkipWithError(ib::to_string(p.error()));
            break;
        }
        benchmark::DoNotOptimize(p->payload.data());
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(wire.size()));
}

// The two CRCs alone, over a whole packet of the size build/parse use.
void BM_Icrc(benchmark::State& state) {
    const auto frame = ipoib_frame(static_cast<std::size_t>(state.range(0)));
    std::vector<std::uint8_t> wire(ib::packet_size(ud_spec(frame)));
    (void)ib::build_packet(ud_spec(frame), wire);
    const bytes covered = bytes(wire).first(wire.size() - ib::kIcrcSize - ib::kVcrcSize);
    for (auto _ : state) benchmark::DoNotOptimize(ib::compute_icrc(covered, ib::Lnh::iba_local));
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(covered.size()));
}

void BM_Vcrc(benchmark::State& state) {
    const auto frame = ipoib_frame(static_cast<std::size_t>(state.range(0)));
    std::vector<std::uint8_t> wire(ib::packet_size(ud_spec(frame)));
    (void)ib::build_packet(ud_spec(frame), wire);
    const bytes covered = bytes(wire).first(wire.size() - ib::kVcrcSize);
    for (auto _ : state) benchmark::DoNotOptimize(ib::compute_vcrc(covered));
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(covered.size()));
}

void BM_Encapsulate(benchmark::State& state) {
    const auto ip = datagram(static_cast<std::size_t>(state.range(0)));
    std::vector<std::uint8_t> out(ipoib::EncapHeader::size + ip.size());
    for (auto _ : state) {
        auto n = ipoib::encapsulate(ipoib::EtherType::ipv4, ip, out);
        benchmark::DoNotOptimize(n);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(out.size()));
}

void BM_EncapsulateInPlace(benchmark::State& state) {
    // The datagram was read from the TUN at out[4..]: only the header is written.
    std::vector<std::uint8_t> out = ipoib_frame(static_cast<std::size_t>(state.range(0)));
    for (auto _ : state) {
        auto n = ipoib::write_encap_header(ipoib::EtherType::ipv4, out);
        benchmark::DoNotOptimize(n);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_Decapsulate(benchmark::State& state) {
    const auto frame = ipoib_frame(static_cast<std::size_t>(state.range(0)));
    for (auto _ : state) {
        auto f = ipoib::decapsulate(frame);
        if (!f) {
            state.SkipWithError(ipoib::to_string(f.error()));
            break;
        }
        benchmark::DoNotOptimize(f->payload.data());
    }
    state.SetItemsProcessed(state.iterations());
}

IpAddress v4(std::uint32_t host) {
    // 198.18.0.0/15 (DESIGN.md test networks): 198.18.x.y and 198.19.x.y.
    const std::uint32_t a = (198u << 24 | 18u << 16) + host;
    return IpAddress::v4({static_cast<std::uint8_t>(a >> 24), static_cast<std::uint8_t>(a >> 16),
                                   static_cast<std::uint8_t>(a >> 8), static_cast<std::uint8_t>(a)});
}

void BM_NeighbourLookup(benchmark::State& state) {
    const auto entries = static_cast<std::uint32_t>(state.range(0));
    ipoib::NeighbourCache::Config config;
    config.max_entries = entries;
    ipoib::NeighbourCache cache(config);
    const ipoib::Clock::time_point now{std::chrono::seconds(1000)};
    const auto packet = datagram(64);
    std::vector<IpAddress> ips;
    for (std::uint32_t i = 0; i < entries; ++i) {
        const IpAddress ip = v4(1 + i);
        ipoib::HwAddress hw;
        hw.qpn = 0x48 + i;
        hw.gid[0] = 0xFE, hw.gid[1] = 0x80, hw.gid[15] = static_cast<std::uint8_t>(i);
        (void)cache.lookup_or_resolve(ip, packet, now);  // INCOMPLETE, packet queued
        (void)cache.learn(ip, hw, ipoib::LearnKind::solicited, now);  // REACHABLE
        ips.push_back(ip);
    }
    if (cache.size() != entries || cache.find(ips.back())->state != ipoib::NeighbourState::reachable) {
        state.SkipWithError("cache not filled with REACHABLE entries");
        return;
    }
    std::shuffle(ips.begin(), ips.end(), std::mt19937(42));
    std::size_t i = 0;
    for (auto _ : state) {
        ipoib::Resolution r = cache.lookup_or_resolve(ips[i], packet, now);
        benchmark::DoNotOptimize(r.send_to);
        if (++i == ips.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["entries"] = static_cast<double>(cache.size());
}

}  // namespace

void BM_RcSendMessage(benchmark::State& state) {
    namespace rc = transport::rc;
    const auto n = static_cast<std::size_t>(state.range(0));
    rc::RcQp a(0x100), b(0x200);
    (void)a.to_init();
    (void)b.to_init();
    (void)a.to_rtr({.dest_qpn = 0x200, .pmtu = 4096});
    (void)b.to_rtr({.dest_qpn = 0x100, .pmtu = 4096});
    (void)a.to_rts({});
    (void)b.to_rts({});
    const auto now = rc::Clock::now();
    // What the port does with each packet output() hands over, short of the
    // wire: the peer's QP takes it (header and payload apart).
    struct To final : rc::RcQp::PacketSink {
        explicit To(rc::RcQp& q, rc::Clock::time_point t) : qp(q), at(t) {}
        void send(const rc::RcPacket& p, bytes payload) override { qp.receive(p, payload, at); }
        rc::RcQp& qp;
        rc::Clock::time_point at;
    } to_b(b, now), to_a(a, now);
    std::uint64_t wr = 0;
    for (int i = 0; i < 64; ++i) (void)b.post_recv({.wr_id = wr++, .capacity = 65536});
    const auto message = datagram(n);
    for (auto _ : state) {
        rc::SendWr s;
        s.wr_id = wr++;
        assign_bytes(s.payload, message);
        (void)a.post_send(std::move(s));
        a.output(to_b, now);
        b.output(to_a, now);
        for (auto& c : b.poll()) {
            benchmark::DoNotOptimize(c.data.data());
            (void)b.post_recv({.wr_id = wr++, .capacity = 65536});
        }
        benchmark::DoNotOptimize(a.poll());
    }
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(n));
    state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_BuildUdPacket)->Arg(2044)->Arg(4092);
BENCHMARK(BM_ParseUdPacket)->Arg(2044)->Arg(4092);
BENCHMARK(BM_Icrc)->Arg(2044)->Arg(4092);
BENCHMARK(BM_Vcrc)->Arg(2044)->Arg(4092);
BENCHMARK(BM_Encapsulate)->Arg(2044)->Arg(4092);
BENCHMARK(BM_EncapsulateInPlace)->Arg(2044)->Arg(4092);
BENCHMARK(BM_Decapsulate)->Arg(2044)->Arg(4092);
BENCHMARK(BM_NeighbourLookup)->Arg(10'000);
BENCHMARK(BM_RcSendMessage)->Arg(4092)->Arg(65524);

BENCHMARK_MAIN();
