// libFuzzer target for the inbound IBA packet parser (ib::parse_packet) and
// its inverse (ib::build_packet). Input format: fuzz_packet_format.h.
//
// Parse mode checks, for every input (with or without the framing repair of
// fuzz_packet_format.h, which lets mutations get past the CRCs):
//   - failure: the DropReason is in range and has a name; reasons decided
//     before the payload checks (steps 1-7 of packet.h) do not depend on the
//     PMTU;
//   - success: the payload span lies inside the input, directly before the
//     pad, ICRC and VCRC; PktLen*4+2 is the datagram size; the extended
//     headers are exactly the opcode's; the payload obeys the PMTU and the
//     opcode's PayloadRule; the packet also parses at PMTU 4096 unless the
//     opcode must fill the PMTU;
//   - rebuild: build_packet() of the parsed headers and payload gives a packet
//     of the same size that parses to equal headers and payload (reserved
//     bits and pad bytes are not kept, so headers are compared as structs,
//     not bytes), and building that again is byte-for-byte the same.
// Build mode checks that any in-range header fields build for every opcode
// the core parses (and fail with unknown_opcode for the others), and that the
// packet parses back to the same fields at PMTU 4096, or, when the fields
// break an addressing rule of packet.h step 5, fails with that rule's reason.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "fuzz_packet_format.h"
#include "transport/wire/packet.h"

namespace {

using namespace ipoibd;
using ib::DropReason;

[[noreturn]] void fail(const char* what, int line) {
    std::fprintf(stderr, "fuzz_packet: invariant violated at %s:%d: %s\n", __FILE__, line, what);
    std::fflush(stderr);
    __builtin_trap();
}

#define FUZZ_CHECK(cond)                      \
    do {                                      \
        if (!(cond)) fail(#cond, __LINE__);   \
    } while (0)

bool same_bytes(bytes a, bytes b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

std::size_t pad_for(std::size_t payload) { return (4 - payload % 4) % 4; }

bool depends_on_pmtu(DropReason r) {
    return r == DropReason::payload_exceeds_pmtu || r == DropReason::bad_payload_length;
}

void check_failure(DropReason r) {
    FUZZ_CHECK(static_cast<std::size_t>(r) < ib::kDropReasonCount);
    const char* name = ib::to_string(r);
    FUZZ_CHECK(name != nullptr);
    FUZZ_CHECK(std::strcmp(name, "unknown") != 0);
}

// Builds `spec` into a vector of exactly packet_size(spec) bytes.
std::vector<std::uint8_t> build_or_trap(const ib::PacketSpec& spec) {
    std::vector<std::uint8_t> out(ib::packet_size(spec));
    const auto n = ib::build_packet(spec, out);
    FUZZ_CHECK(n.has_value());
    FUZZ_CHECK(*n == out.size());
    return out;
}

// ---------------------------------------------------------------------------
// Parse mode.
void check_parse(bytes wire, std::uint32_t pmtu) {
    const auto parsed = ib::parse_packet(wire, {.pmtu = pmtu});
    if (!parsed) {
        check_failure(parsed.error());
        if (!depends_on_pmtu(parsed.error())) {
            const std::uint32_t other = pmtu == ib::kMaxPmtuBytes ? 256 : ib::kMaxPmtuBytes;
            const auto again = ib::parse_packet(wire, {.pmtu = other});
            FUZZ_CHECK(!again.has_value());
            FUZZ_CHECK(again.error() == parsed.error());
        }
        return;
    }
    const ib::Packet& pkt = *parsed;
    const ib::OpcodeInfo& info = ib::opcode_info(pkt.bth.opcode);

    // Framing.
    FUZZ_CHECK(wire.size() >= ib::kMinPacketSize && wire.size() <= ib::kMaxPacketSize);
    FUZZ_CHECK(std::size_t{pkt.lrh.pkt_len} * 4 + ib::kVcrcSize == wire.size());
    FUZZ_CHECK(pkt.lrh.lnh == ib::Lnh::iba_local || pkt.lrh.lnh == ib::Lnh::iba_global);
    FUZZ_CHECK(pkt.grh.has_value() == (pkt.lrh.lnh == ib::Lnh::iba_global));
    FUZZ_CHECK(info.name != nullptr && info.parsed);
    FUZZ_CHECK(pkt.ext.present == info.headers);
    FUZZ_CHECK(pkt.bth.pad_cnt <= 3);

    // The payload span lies inside the input, right after the headers and
    // right before pad, ICRC and VCRC.
    const auto base = reinterpret_cast<std::uintptr_t>(wire.data());
    const auto start = reinterpret_cast<std::uintptr_t>(pkt.payload.data());
    FUZZ_CHECK(start >= base && start <= base + wire.size());
    const std::size_t offset = start - base;
    FUZZ_CHECK(pkt.payload.size() <= wire.size() - offset);
    const std::size_t headers_end = ib::Lrh::size + (pkt.grh ? ib::Grh::size : 0) + ib::Bth::size +
                                    ib::ext_headers_size(info.headers);
    FUZZ_CHECK(offset == headers_end);
    FUZZ_CHECK(offset + pkt.payload.size() + pkt.bth.pad_cnt + ib::kIcrcSize + ib::kVcrcSize == wire.size());
    FUZZ_CHECK(pkt.icrc == ib::load_icrc(wire.data() + wire.size() - ib::kVcrcSize - ib::kIcrcSize));
    FUZZ_CHECK(pkt.vcrc == ib::load_vcrc(wire.data() + wire.size() - ib::kVcrcSize));

    // PMTU and payload rule.
    FUZZ_CHECK(pkt.payload.size() <= pmtu);
    switch (info.payload) {
        case ib::PayloadRule::none:
            FUZZ_CHECK(pkt.payload.empty() && pkt.bth.pad_cnt == 0);
            break;
        case ib::PayloadRule::full_pmtu:
            FUZZ_CHECK(pkt.payload.size() == pmtu && pkt.bth.pad_cnt == 0);
            break;
        case ib::PayloadRule::up_to_pmtu:
            if (pmtu != ib::kMaxPmtuBytes) FUZZ_CHECK(ib::parse_packet(wire, {.pmtu = ib::kMaxPmtuBytes}).has_value());
            break;
    }

    // Rebuild from the parsed fields.
    ib::PacketSpec spec;
    spec.lrh = pkt.lrh;
    spec.grh = pkt.grh;
    spec.bth = pkt.bth;
    spec.ext = pkt.ext;
    spec.payload = pkt.payload;
    FUZZ_CHECK(ib::packet_size(spec) == wire.size());
    std::vector<std::uint8_t> rebuilt = build_or_trap(spec);
    FUZZ_CHECK(rebuilt.size() == wire.size());

    const auto reparsed = ib::parse_packet(rebuilt, {.pmtu = pmtu});
    FUZZ_CHECK(reparsed.has_value());
    FUZZ_CHECK(reparsed->lrh == pkt.lrh);
    FUZZ_CHECK(reparsed->grh == pkt.grh);
    FUZZ_CHECK(reparsed->bth == pkt.bth);
    FUZZ_CHECK(reparsed->ext == pkt.ext);
    FUZZ_CHECK(same_bytes(reparsed->payload, pkt.payload));

    // Parse -> build is canonical: a second round trip changes no byte.
    ib::PacketSpec again = spec;
    again.lrh = reparsed->lrh;
    again.grh = reparsed->grh;
    again.bth = reparsed->bth;
    again.ext = reparsed->ext;
    again.payload = reparsed->payload;
    const std::vector<std::uint8_t> rebuilt2 = build_or_trap(again);
    FUZZ_CHECK(rebuilt2 == rebuilt);

    // One byte short of room: the builder refuses instead of overrunning.
    const auto short_out = ib::build_packet(spec, mutable_bytes(rebuilt).first(rebuilt.size() - 1));
    FUZZ_CHECK(!short_out.has_value() && short_out.error() == ib::BuildError::short_buffer);
}

// ---------------------------------------------------------------------------
// Build mode.

// The reason packet.h step 5 gives for these addressing fields, if any.
// `ambiguous` is set for a unicast DLID with DestQP 0xFFFFFF: packet.h states
// only the multicast-DLID direction of the multicast rule, so either outcome
// is accepted there as long as a failure is bad_multicast.
std::optional<DropReason> addressing_error(const ib::Lrh& lrh, const ib::Bth& bth, const ib::OpcodeInfo& info,
                                           bool& ambiguous) {
    ambiguous = false;
    const bool to_qp0 = bth.dest_qp == ib::kQp0;
    if (lrh.dlid == ib::kLidReserved || (lrh.dlid == ib::kLidPermissive && !to_qp0)) return DropReason::bad_dlid;
    if (!ib::is_unicast_lid(lrh.slid) && !(lrh.slid == ib::kLidPermissive && to_qp0)) return DropReason::bad_slid;
    if ((lrh.vl == ib::kVl15) != to_qp0) return DropReason::vl15_not_qp0;
    if (ib::is_multicast_lid(lrh.dlid)) {
        if (info.transport != ib::Transport::ud || bth.dest_qp != ib::kQpnMulticast) return DropReason::bad_multicast;
    } else if (bth.dest_qp == ib::kQpnMulticast) {
        ambiguous = true;
        return DropReason::bad_multicast;
    }
    return std::nullopt;
}

// The extended headers the parser should report: the opcode's, with the
// values given, and default values for the others.
ib::ExtHeaders expected_ext(const ib::ExtHeaders& given, std::uint16_t headers) {
    ib::ExtHeaders e;
    e.present = headers;
    if (headers & ib::eth_rdeth) e.rdeth = given.rdeth;
    if (headers & ib::eth_deth) e.deth = given.deth;
    if (headers & ib::eth_reth) e.reth = given.reth;
    if (headers & ib::eth_atomic) e.atomic = given.atomic;
    if (headers & ib::eth_aeth) e.aeth = given.aeth;
    if (headers & ib::eth_atomic_ack) e.atomic_ack = given.atomic_ack;
    if (headers & ib::eth_immdt) e.immdt = given.immdt;
    if (headers & ib::eth_ieth) e.ieth = given.ieth;
    return e;
}

void check_build(bytes in) {
    constexpr std::uint32_t pmtu = ib::kMaxPmtuBytes;
    fuzz::FieldReader reader(in);
    fuzz::BuildFields f;
    fuzz::visit_build_fields(reader, f);
    fuzz::mask_build_fields(f);
    const ib::OpcodeInfo& info = ib::opcode_info(f.bth.opcode);

    std::size_t payload_len = 0;
    switch (info.payload) {
        case ib::PayloadRule::none: payload_len = 0; break;
        case ib::PayloadRule::full_pmtu: payload_len = pmtu; break;
        case ib::PayloadRule::up_to_pmtu: payload_len = f.payload_len % (pmtu + 1); break;
    }
    const bytes rest = reader.rest();
    std::vector<std::uint8_t> payload(payload_len);
    for (std::size_t i = 0; i < payload_len; ++i)
        payload[i] = i < rest.size() ? rest[i] : static_cast<std::uint8_t>(i * 131 + 7);

    ib::PacketSpec spec;
    spec.lrh = f.lrh;
    if (f.has_grh) spec.grh = f.grh;
    spec.bth = f.bth;
    spec.ext = f.ext;
    spec.payload = payload;

    std::vector<std::uint8_t> wire(ib::packet_size(spec));
    const auto built = ib::build_packet(spec, wire);
    if (info.name == nullptr || !info.parsed) {
        FUZZ_CHECK(!built.has_value() && built.error() == ib::BuildError::unknown_opcode);
        return;
    }
    FUZZ_CHECK(built.has_value());
    FUZZ_CHECK(*built == wire.size());
    FUZZ_CHECK(wire.size() <= ib::kMaxPacketSize);

    const auto parsed = ib::parse_packet(wire, {.pmtu = pmtu});
    bool ambiguous = false;
    const std::optional<DropReason> addr = addressing_error(f.lrh, f.bth, info, ambiguous);
    if (addr) {
        if (ambiguous && parsed.has_value()) return;  // see addressing_error
        FUZZ_CHECK(!parsed.has_value());
        FUZZ_CHECK(parsed.error() == *addr);
        return;
    }
    FUZZ_CHECK(parsed.has_value());

    ib::Lrh lrh = f.lrh;
    lrh.lnh = f.has_grh ? ib::Lnh::iba_global : ib::Lnh::iba_local;
    lrh.pkt_len = static_cast<std::uint16_t>((wire.size() - ib::kVcrcSize) / 4);
    FUZZ_CHECK(parsed->lrh == lrh);
    if (f.has_grh) {
        ib::Grh grh = f.grh;
        grh.pay_len = static_cast<std::uint16_t>(wire.size() - ib::kVcrcSize - ib::Lrh::size - ib::Grh::size);
        FUZZ_CHECK(parsed->grh == grh);
    } else {
        FUZZ_CHECK(!parsed->grh.has_value());
    }
    ib::Bth bth = f.bth;
    bth.pad_cnt = static_cast<std::uint8_t>(pad_for(payload_len));
    FUZZ_CHECK(parsed->bth == bth);
    FUZZ_CHECK(parsed->ext == expected_ext(f.ext, info.headers));
    FUZZ_CHECK(same_bytes(parsed->payload, payload));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t selector = data[0];
    // An exact-size heap copy, so ASan's redzones sit right at both ends of
    // the datagram the parser sees.
    std::vector<std::uint8_t> body(data + 1, data + size);
    if (selector & ipoibd::fuzz::kBuildModeBit) {
        check_build(body);
        return 0;
    }
    if (selector & ipoibd::fuzz::kRepairBit) ipoibd::fuzz::repair_framing(body);
    check_parse(body, ipoibd::fuzz::pmtu_for_selector(selector));
    return 0;
}
