// RC packets on the wire (transport/rc/rc_wire.h): every packet two engines
// exchange (SEND, WRITE, READ and their ACKs, NAKs and responses) encodes to
// an IBA packet that parses back to the same RcPacket, and that tshark
// decodes with the same opcode, PSN, RETH, AETH and ImmDt, nothing
// malformed.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "tests/unit/tshark_util.h"
#include "transport/rc/rc_wire.h"

namespace ipoibd::transport::rc {
namespace {

using Bytes = std::vector<std::uint8_t>;

// Every packet of a small exchange with a loss or two, in both directions.
std::vector<RcPacket> exchange() {
    MemoryRegions ma, mb;
    RcQp a(0x100, &ma), b(0x200, &mb);
    EXPECT_TRUE(a.to_init() && b.to_init());
    EXPECT_TRUE(a.to_rtr({.dest_qpn = 0x200, .pmtu = 256, .rq_psn = 0x10}));
    EXPECT_TRUE(b.to_rtr({.dest_qpn = 0x100, .pmtu = 256, .rq_psn = 0x20}));
    EXPECT_TRUE(a.to_rts({.sq_psn = 0x20, .timeout = 8}));
    EXPECT_TRUE(b.to_rts({.sq_psn = 0x10, .timeout = 8}));
    Bytes target(2000), source(2000, 0x3C), into(700);
    const MemoryRegion w = mb.register_region(target, access::remote_write);
    const MemoryRegion r = mb.register_region(source, access::remote_read);
    EXPECT_TRUE(ma.register_region(into, access::local_write).length);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(b.post_recv({.wr_id = static_cast<std::uint64_t>(i), .capacity = 2000}));
    EXPECT_TRUE(a.post_send({.wr_id = 1, .payload = Bytes(600, 1), .imm = 0x11223344}));
    EXPECT_TRUE(a.post_send({.wr_id = 2, .payload = Bytes(100, 2)}));
    EXPECT_TRUE(a.post_send({.wr_id = 3, .payload = Bytes(700, 3), .imm = 7, .opcode = WrOpcode::rdma_write,
                             .remote_va = w.va, .rkey = w.rkey}));
    EXPECT_TRUE(a.post_send({.wr_id = 4, .payload = Bytes(50, 4), .opcode = WrOpcode::rdma_write,
                             .remote_va = w.va + 1000, .rkey = w.rkey}));
    EXPECT_TRUE(a.post_send({.wr_id = 5, .opcode = WrOpcode::rdma_read, .remote_va = r.va, .rkey = r.rkey, .read_into = into}));
    std::vector<RcPacket> all;
    auto now = Clock::time_point{} + std::chrono::hours(1);
    int dropped = 0;
    for (int round = 0; round < 200; ++round) {
        std::vector<RcPacket> out_a, out_b;
        a.output(out_a, now);
        b.output(out_b, now);
        if (out_a.empty() && out_b.empty()) {
            const auto next = a.next_deadline();
            if (!next) break;
            now = *next;
            a.tick(now);
            continue;
        }
        for (RcPacket& p : out_a) {
            all.push_back(p);
            if (p.opcode == ib::op::rc_send_middle && dropped++ == 0) continue;  // one NAK on the way
            b.receive(p, now);
        }
        for (RcPacket& p : out_b) {
            all.push_back(p);
            a.receive(p, now);
        }
    }
    return all;
}

TEST(RcWire, EveryPacketRoundTripsThroughTheWireForm) {
    const auto packets = exchange();
    std::set<std::uint8_t> opcodes;
    for (const RcPacket& p : packets) {
        const auto wire = encode_rc_packet(p, {.slid = 2, .dlid = 3});
        ASSERT_TRUE(wire) << int(p.opcode);
        const auto parsed = ib::parse_packet(*wire, {.pmtu = 256});
        ASSERT_TRUE(parsed) << int(p.opcode) << " " << ib::to_string(parsed.error());
        const auto back = decode_rc_packet(*parsed);
        ASSERT_TRUE(back);
        EXPECT_EQ(*back, p) << int(p.opcode);
        opcodes.insert(p.opcode);
    }
    // The exchange used every opcode the engine has.
    for (std::uint8_t op : {ib::op::rc_send_first, ib::op::rc_send_middle, ib::op::rc_send_last_imm,
                            ib::op::rc_send_only, ib::op::rc_rdma_write_first, ib::op::rc_rdma_write_last_imm,
                            ib::op::rc_rdma_write_only, ib::op::rc_rdma_read_request,
                            ib::op::rc_rdma_read_response_first, ib::op::rc_rdma_read_response_middle,
                            ib::op::rc_rdma_read_response_last, ib::op::rc_acknowledge})
        EXPECT_TRUE(opcodes.contains(op)) << "opcode " << int(op) << " not exercised";
    // And refusals: a header the opcode needs, missing.
    EXPECT_FALSE(encode_rc_packet(RcPacket{.opcode = ib::op::rc_acknowledge}, {}));
    EXPECT_FALSE(encode_rc_packet(RcPacket{.opcode = ib::op::ud_send_only}, {}));
}

// The port's way (port_core.cpp): the payload apart, into a buffer that
// keeps its size, and a header decoded without copying the payload.
TEST(RcWire, ThePayloadApartEncodesAndDecodesTheSame) {
    Bytes buffer(8192, 0xEE);
    for (const RcPacket& p : exchange()) {
        const auto whole = encode_rc_packet(p, {.slid = 2, .dlid = 3});
        ASSERT_TRUE(whole);
        RcPacket header = p;
        header.payload.clear();
        const auto n = encode_rc_packet_into(header, p.payload, {.slid = 2, .dlid = 3}, buffer);
        ASSERT_TRUE(n);
        EXPECT_EQ(buffer.size(), 8192u) << "shrunk, to be zeroed again by the next";
        EXPECT_EQ(Bytes(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(*n)), *whole) << int(p.opcode);
        const auto parsed = ib::parse_packet(bytes(buffer).first(*n), {.pmtu = 256});
        ASSERT_TRUE(parsed);
        const auto back = decode_rc_header(*parsed);
        ASSERT_TRUE(back);
        EXPECT_EQ(*back, header) << int(p.opcode);
        EXPECT_EQ(Bytes(parsed->payload.begin(), parsed->payload.end()), p.payload) << int(p.opcode);
    }
    // A header its opcode lacks is refused here too, and leaves the buffer be.
    EXPECT_FALSE(encode_rc_packet_into(RcPacket{.opcode = ib::op::rc_acknowledge}, {}, {}, buffer));
    EXPECT_EQ(buffer.size(), 8192u);
}

TEST(RcWire, TsharkDecodesEveryPacketAsBuilt) {
    const auto packets = exchange();
    std::vector<Bytes> wires;
    for (const RcPacket& p : packets) wires.push_back(*encode_rc_packet(p, {.slid = 2, .dlid = 3}));
    test::ScratchDir dir;
    const std::string pcap = dir.path() + "/rc.pcap";
    ASSERT_TRUE(test::write_capture(pcap, wires));
    const std::vector<std::string> fields = {"frame.protocols",     "infiniband.bth.opcode",  "infiniband.bth.psn",
                                             "infiniband.bth.destqp", "infiniband.aeth.syndrome", "infiniband.aeth.msn",
                                             "infiniband.reth.va",  "infiniband.reth.r_key",  "infiniband.reth.dmalen",
                                             "infiniband.immdt"};
    const auto rows = test::tshark_rows(dir.path(), pcap, fields);
    ASSERT_EQ(rows.size(), packets.size());
    for (std::size_t i = 0; i < packets.size(); ++i) {
        const RcPacket& p = packets[i];
        SCOPED_TRACE("packet " + std::to_string(i) + " opcode " + std::to_string(p.opcode));
        EXPECT_EQ(rows[i].at("frame.protocols").find("malformed"), std::string::npos) << rows[i].at("frame.protocols");
        test::expect_field(rows[i], "infiniband.bth.opcode", std::to_string(p.opcode));
        test::expect_field(rows[i], "infiniband.bth.psn", std::to_string(p.psn));
        test::expect_field(rows[i], "infiniband.bth.destqp", std::to_string(p.dest_qp));
        if (p.aeth) {
            test::expect_field(rows[i], "infiniband.aeth.syndrome", std::to_string(p.aeth->syndrome));
            test::expect_field(rows[i], "infiniband.aeth.msn", std::to_string(p.aeth->msn));
        }
        if (p.reth) {
            test::expect_field(rows[i], "infiniband.reth.va", std::to_string(p.reth->va));
            test::expect_field(rows[i], "infiniband.reth.r_key", std::to_string(p.reth->rkey));
            test::expect_field(rows[i], "infiniband.reth.dmalen", std::to_string(p.reth->dma_len));
        }
        if (p.imm) {
            char hex[9];
            std::snprintf(hex, sizeof hex, "%08x", *p.imm);
            EXPECT_EQ(rows[i].at("infiniband.immdt"), hex);  // tshark shows the 4 bytes
        }
    }
}

}  // namespace
}  // namespace ipoibd::transport::rc
