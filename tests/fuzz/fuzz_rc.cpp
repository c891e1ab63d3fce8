// libFuzzer target for the RC engine (transport/rc/rc_qp.h), mostly its
// responder: arbitrary packets at a QP in RTS with receive buffers posted.
//
// Input: records of 8 bytes plus a payload: opcode selector, PSN offset
// (signed, from the expected PSN), flags (AckReq, immediate, AETH), AETH
// syndrome, payload length (2 bytes, capped), time step; then the payload.
// Records alternate between requests (to the responder) and
// acknowledgements (to the requester, which has sends outstanding).
//
// Invariants checked (a violation aborts):
//   - every packet the QP sends is an ACK/NAK with an AETH, or a request of
//     its own sends, with a 24-bit PSN, never larger than the PMTU;
//   - receive completions never exceed the receives posted; a successful
//     SEND carries its data within its buffer's capacity, a WRITE with
//     immediate data its length within the region;
//   - once in ERR the QP stays there and completes everything flushed;
//   - the expected PSN moves only forward (modulo 2^24).
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "transport/rc/rc_qp.h"

using namespace ipoibd;
using namespace ipoibd::transport::rc;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

constexpr std::uint8_t kOpcodes[] = {
    op::rc_send_first,          op::rc_send_middle,        op::rc_send_last,
    op::rc_send_last_imm,       op::rc_send_only,          op::rc_send_only_imm,
    op::rc_acknowledge,         op::rc_rdma_write_first,   op::rc_rdma_write_middle,
    op::rc_rdma_write_last,     op::rc_rdma_write_last_imm, op::rc_rdma_write_only,
    op::rc_rdma_write_only_imm, op::rc_rdma_read_request,  op::rc_rdma_read_response_first,
    op::rc_rdma_read_response_middle, op::rc_rdma_read_response_last, op::rc_rdma_read_response_only,
};
constexpr std::uint32_t kPmtu = 256;
constexpr std::uint32_t kCapacity = 1000;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // A region the peer may read and write: a RETH names it (flag 8) with an
    // offset and length from the record, or not.
    static std::vector<std::uint8_t> region(4096);
    MemoryRegions memory;
    const MemoryRegion mr = memory.register_region(region, access::remote_read | access::remote_write);
    RcQp q(0x11, &memory);
    if (!q.to_init() || !q.to_rtr({.dest_qpn = 0x22, .pmtu = kPmtu, .rq_psn = 0xFFFFF8, .min_rnr_timer = 1}) ||
        !q.to_rts({.sq_psn = 0x100, .timeout = 8, .retry_count = 2, .rnr_retry = 2}))
        std::abort();
    std::size_t posted = 0;
    for (int i = 0; i < 8; ++i)
        if (q.post_recv({.wr_id = static_cast<std::uint64_t>(i), .capacity = kCapacity})) ++posted;
    for (int i = 0; i < 4; ++i)
        (void)q.post_send({.wr_id = 100u + static_cast<std::uint64_t>(i), .payload = std::vector<std::uint8_t>(300)});
    static std::vector<std::uint8_t> read_into(700);
    (void)memory.register_region(read_into, access::local_write);
    (void)q.post_send({.wr_id = 200, .opcode = WrOpcode::rdma_read, .remote_va = 0x1000, .rkey = 5, .read_into = read_into});
    Clock::time_point now{};
    std::vector<RcPacket> out;
    q.output(out, now);
    std::size_t received = 0;
    std::uint32_t last_epsn = q.expected_psn();
    bool was_err = false;
    for (std::size_t at = 0; at + 8 <= size;) {
        const std::uint8_t* r = data + at;
        const std::size_t len = std::min<std::size_t>((std::size_t{r[4]} << 8) | r[5], 2 * kPmtu);
        at += 8;
        const std::size_t take = std::min(len, size - at);
        RcPacket p;
        p.opcode = kOpcodes[r[0] % std::size(kOpcodes)];
        p.dest_qp = 0x11;
        p.psn = (q.expected_psn() + static_cast<std::uint32_t>(static_cast<std::int8_t>(r[1]))) & 0xFFFFFF;
        if (p.opcode == op::rc_acknowledge) p.psn = (0x100 + r[1]) & 0xFFFFFF;
        p.ack_req = (r[2] & 1) != 0;
        if (r[2] & 2) p.imm = 0xABCD;
        if ((r[2] & 4) || p.opcode == op::rc_acknowledge) p.aeth = ib::Aeth{r[3], 0};
        if (r[2] & 8)
            p.reth = ib::Reth{mr.va + (std::uint64_t{r[3]} << 4), (r[2] & 16) ? mr.rkey : mr.rkey + 2,
                              (std::uint32_t{r[6]} << 4) | (r[7] >> 4)};
        if (p.opcode == op::rc_rdma_read_response_first || p.opcode == op::rc_rdma_read_response_middle ||
            p.opcode == op::rc_rdma_read_response_last || p.opcode == op::rc_rdma_read_response_only)
            p.psn = (0x104 + r[1]) & 0xFFFFFF;
        p.payload.assign(data + at, data + at + take);
        at += take;
        now += std::chrono::microseconds(std::int64_t{r[6]} << (r[7] & 15));
        // Now and then a packet the port found invalid (C9-83..85, C9-93),
        // and receives posted again (credits, unsolicited ACKs).
        if ((r[2] & 0xE0) == 0xE0) q.receive_invalid(p.psn, now);
        else q.receive(p, now);
        if ((r[2] & 0xE0) == 0xC0 && q.post_recv({.wr_id = 900 + at, .capacity = kCapacity})) ++posted;
        q.tick(now);
        out.clear();
        q.output(out, now);
        for (const RcPacket& o : out) {
            check(o.psn <= 0xFFFFFF);
            check(o.payload.size() <= kPmtu);
            if (o.opcode == op::rc_acknowledge) check(o.aeth.has_value());
        }
        for (const Completion& c : q.poll()) {
            if (!c.receive) continue;
            ++received;
            // A SEND: its data, within its buffer; a WRITE with immediate
            // data: no data here (it went to the region), within the region.
            if (c.status == Status::success && c.data.empty() && c.imm && c.byte_len > 0)
                check(c.byte_len <= region.size());
            else if (c.status == Status::success)
                check(c.byte_len <= kCapacity && c.data.size() == c.byte_len);
            if (was_err) check(c.status == Status::flushed);
        }
        check(received <= posted);
        if (was_err) check(q.state() == QpState::err);
        was_err = q.state() == QpState::err;
        const auto step = (q.expected_psn() - last_epsn) & 0xFFFFFF;
        check(step < 0x800000);  // forward only
        last_epsn = q.expected_psn();
    }
    return 0;
}
