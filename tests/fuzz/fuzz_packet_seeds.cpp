// Writes the seed corpus of fuzz_packet into the directory given as argv[1]
// (created if missing). Every file is one fuzz input: a selector byte, then a
// datagram (parse mode) or header fields (build mode); see
// fuzz_packet_format.h.
//
// Parse-mode seeds: the four sample packets of tests/unit/wire_test_util.cpp,
// packets at each PMTU boundary (SEND First of exactly PMTU bytes, SEND Only
// of PMTU and of PMTU+1 bytes, at every PMTU), an RC packet with a GRH, and
// broken ones (truncated, short, corrupted CRCs). Each is written twice, the
// second time with the framing repair bit of the selector set.
// Build-mode seeds: header fields for a few opcodes of every transport.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_packet_format.h"
#include "tests/unit/wire_test_util.h"
#include "transport/wire/packet.h"

namespace {

using namespace ipoibd;
namespace fs = std::filesystem;

class SeedWriter {
public:
    explicit SeedWriter(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }

    void add(const std::string& name, std::uint8_t selector, const std::vector<std::uint8_t>& body) {
        std::vector<std::uint8_t> data;
        data.reserve(body.size() + 1);
        data.push_back(selector);
        data.insert(data.end(), body.begin(), body.end());
        const fs::path path = dir_ / (name + ".bin");
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
        if (!out) throw std::runtime_error("cannot write " + path.string());
        ++count_;
    }
    // A parse-mode seed, once as is and once with the framing repair bit.
    void add_parse(const std::string& name, std::uint8_t selector, const std::vector<std::uint8_t>& body) {
        add(name, selector, body);
        add(name + "_repair", static_cast<std::uint8_t>(selector | fuzz::kRepairBit), body);
    }
    int count() const { return count_; }

private:
    fs::path dir_;
    int count_ = 0;
};

std::vector<std::uint8_t> build(const ib::PacketSpec& spec) {
    std::vector<std::uint8_t> wire(ib::packet_size(spec));
    const auto n = ib::build_packet(spec, wire);
    if (!n) throw std::runtime_error(std::string("seed build failed: ") + ib::to_string(n.error()));
    wire.resize(*n);
    return wire;
}

std::vector<std::uint8_t> filler(std::size_t n) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 1);
    return v;
}

ib::PacketSpec rc_spec(std::uint8_t opcode, bytes payload) {
    ib::PacketSpec s;
    s.lrh = {.vl = 0, .lver = 0, .sl = 0, .lnh = ib::Lnh::iba_local, .dlid = 0x0002, .pkt_len = 0, .slid = 0x0003};
    s.bth.opcode = opcode;
    s.bth.pkey = ib::kPKeyDefault;
    s.bth.dest_qp = 0x000010;
    s.bth.psn = 0x000100;
    s.payload = payload;
    return s;
}

// Recomputes the VCRC after an edit, so that only the ICRC is wrong.
void fix_vcrc(std::vector<std::uint8_t>& wire) {
    const std::size_t at = wire.size() - ib::kVcrcSize;
    ib::store_vcrc(wire.data() + at, ib::compute_vcrc(bytes(wire).first(at)));
}

void parse_seeds(SeedWriter& w) {
    const std::uint8_t at4096 = fuzz::parse_selector(4096);
    const auto samples = test::all_samples();
    for (const auto& s : samples) w.add_parse("parse_" + s.name, at4096, s.wire);
    // The MAD sample is exactly 256 bytes of payload: the smallest PMTU.
    w.add_parse("parse_ud_mad_qp1_pmtu256", fuzz::parse_selector(256), test::sample_ud_mad().wire);

    for (const std::uint32_t pmtu : fuzz::kPmtus) {
        const std::uint8_t sel = fuzz::parse_selector(pmtu);
        const std::string tag = std::to_string(pmtu);
        const auto full = filler(pmtu);
        const auto over = filler(pmtu + 1);
        w.add_parse("parse_rc_send_first_" + tag, sel, build(rc_spec(ib::op::rc_send_first, full)));
        w.add_parse("parse_rc_send_only_" + tag, sel, build(rc_spec(ib::op::rc_send_only, full)));
        w.add_parse("parse_rc_send_only_over_" + tag, sel, build(rc_spec(ib::op::rc_send_only, over)));
        auto ud = rc_spec(ib::op::ud_send_only, full);
        ud.bth.dest_qp = 0x000048;
        ud.ext.deth = {0x00000B1B, 0x000049};
        w.add_parse("parse_ud_send_only_" + tag, sel, build(ud));
    }

    // RC RDMA WRITE Only with a GRH (unicast, routed).
    const auto small = filler(13);
    auto routed = rc_spec(ib::op::rc_rdma_write_only_imm, small);
    ib::Grh grh;
    grh.tclass = 0x12;
    grh.flow_label = 0x34567;
    grh.hop_limit = 64;
    grh.sgid = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x01};
    grh.dgid = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x02};
    routed.grh = grh;
    routed.ext.reth = {0x00007F0000001000ULL, 0x1234, 13};
    routed.ext.immdt = {0xCAFEBABE};
    w.add_parse("parse_rc_rdma_write_only_imm_grh", at4096, build(routed));

    // A few opcodes of each transport with their extended headers.
    auto rd = rc_spec(ib::op::rd_compare_swap, {});
    rd.ext.rdeth = {0x000321};
    rd.ext.deth = {0x11111111, 0x000022};
    rd.ext.atomic = {0x1000, 0x42, 5, 6};
    w.add_parse("parse_rd_compare_swap", at4096, build(rd));
    auto atomic_ack = rc_spec(ib::op::rc_atomic_acknowledge, {});
    atomic_ack.ext.aeth = {0, 0x000007};
    atomic_ack.ext.atomic_ack = {0x0102030405060708ULL};
    w.add_parse("parse_rc_atomic_ack", at4096, build(atomic_ack));
    auto uc = rc_spec(ib::op::uc_send_last_imm, small);
    uc.ext.immdt = {7};
    w.add_parse("parse_uc_send_last_imm", at4096, build(uc));
    const auto mad = filler(256);
    auto smp = rc_spec(ib::op::ud_send_only, mad);
    smp.lrh.vl = ib::kVl15;
    smp.lrh.dlid = ib::kLidPermissive;
    smp.lrh.slid = ib::kLidPermissive;
    smp.bth.dest_qp = ib::kQp0;
    smp.ext.deth = {0, ib::kQp0};
    w.add_parse("parse_ud_smp_vl15_permissive", at4096, build(smp));

    // Broken packets.
    const auto payload_pkt = test::sample_ud_payload().wire;
    w.add_parse("parse_truncated_by_4", at4096, std::vector<std::uint8_t>(payload_pkt.begin(), payload_pkt.end() - 4));
    w.add_parse("parse_too_short", at4096, std::vector<std::uint8_t>(payload_pkt.begin(), payload_pkt.begin() + 10));
    const auto grh_pkt = test::sample_ud_multicast_grh().wire;
    w.add_parse("parse_grh_truncated", at4096,
          std::vector<std::uint8_t>(grh_pkt.begin(), grh_pkt.begin() + ib::kMinPacketSize));
    auto bad_vcrc = payload_pkt;
    bad_vcrc.back() ^= 0x01;
    w.add_parse("parse_bad_vcrc", at4096, bad_vcrc);
    auto bad_icrc = payload_pkt;
    bad_icrc[ib::Lrh::size + ib::Bth::size + ib::Deth::size] ^= 0x01;  // first payload byte
    fix_vcrc(bad_icrc);
    w.add_parse("parse_bad_icrc", at4096, bad_icrc);
    w.add_parse("parse_empty", at4096, {});
}

void build_seed(SeedWriter& w, const std::string& name, const fuzz::BuildFields& f, bytes payload) {
    fuzz::FieldWriter out;
    fuzz::visit_build_fields(out, f);
    out.raw(payload.data(), payload.size());
    w.add(name, fuzz::kBuildModeBit, out.out);
}

fuzz::BuildFields base_fields(std::uint8_t opcode) {
    fuzz::BuildFields f;
    f.lrh.dlid = 0x0002;
    f.lrh.slid = 0x0003;
    f.bth.opcode = opcode;
    f.bth.dest_qp = 0x000010;
    f.bth.psn = 0x000001;
    return f;
}

void build_seeds(SeedWriter& w) {
    const auto payload = filler(37);
    auto ud = base_fields(ib::op::ud_send_only);
    ud.ext.deth = {0x00000B1B, 0x000049};
    ud.payload_len = 37;
    build_seed(w, "build_ud_send_only", ud, payload);

    auto mc = base_fields(ib::op::ud_send_only_imm);
    mc.has_grh = true;
    mc.lrh.dlid = 0xC001;
    mc.bth.dest_qp = ib::kQpnMulticast;
    mc.grh.dgid = {0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
    mc.ext.immdt = {0x01020304};
    mc.payload_len = 37;
    build_seed(w, "build_ud_multicast_grh", mc, payload);

    auto first = base_fields(ib::op::rc_rdma_write_first);
    first.ext.reth = {0x1000, 0x77, 8192};
    build_seed(w, "build_rc_rdma_write_first", first, {});

    auto ack = base_fields(ib::op::rc_acknowledge);
    ack.ext.aeth = {ib::Aeth::kSyndromeNak | 1, 0x000099};
    build_seed(w, "build_rc_nak", ack, {});

    auto rd = base_fields(ib::op::rd_rdma_write_only_imm);
    rd.ext.rdeth = {0x000555};
    rd.ext.deth = {0x22222222, 0x000033};
    rd.ext.reth = {0x2000, 0x88, 37};
    rd.ext.immdt = {0xFFFFFFFF};
    rd.payload_len = 37;
    build_seed(w, "build_rd_rdma_write_only_imm", rd, payload);

    auto inv = base_fields(ib::op::rc_send_only_inv);
    inv.ext.ieth = {0xABCDEF01};
    inv.payload_len = 4096;
    build_seed(w, "build_rc_send_only_inv_4096", inv, {});

    build_seed(w, "build_xrc_not_buildable", base_fields(ib::op::xrc | ib::op::send_only), {});
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s SEED_DIR\n", argc > 0 ? argv[0] : "fuzz_packet_seeds");
        return 2;
    }
    try {
        SeedWriter w{fs::path(argv[1])};
        parse_seeds(w);
        build_seeds(w);
        std::printf("wrote %d seeds to %s\n", w.count(), argv[1]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_packet_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
