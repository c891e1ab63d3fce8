#include "wire_test_util.h"

#include <stdexcept>

#include "transport/wire/mad.h"

namespace ipoibd::test {
namespace {

SamplePacket finish(SamplePacket s) {
    s.spec.payload = s.payload;
    s.wire.resize(ib::packet_size(s.spec));
    auto n = ib::build_packet(s.spec, s.wire);
    if (!n) throw std::runtime_error(std::string("sample build failed: ") + ib::to_string(n.error()));
    s.wire.resize(*n);
    return s;
}

ib::Gid gid(std::uint64_t prefix, std::uint64_t guid) {
    ib::Gid g{};
    store_be64(g.data(), prefix);
    store_be64(g.data() + 8, guid);
    return g;
}

}  // namespace

SamplePacket sample_ud_mad() {
    SamplePacket s;
    s.name = "ud_mad_qp1";
    s.spec.lrh = {.vl = 0, .lver = 0, .sl = 0, .lnh = ib::Lnh::iba_local, .dlid = 0x0001, .pkt_len = 0, .slid = 0x0005};
    s.spec.bth.opcode = ib::op::ud_send_only;
    s.spec.bth.pkey = 0xFFFF;
    s.spec.bth.dest_qp = ib::kQp1;
    s.spec.bth.psn = 0x000123;
    s.spec.ext.deth = {ib::kGsiQKey, ib::kQp1};
    s.payload.assign(ib::kMadSize, 0);
    ib::MadHeader mad;
    mad.mgmt_class = ib::mgmt_class::subn_adm;
    mad.class_version = ib::class_version::subn_adm;
    mad.method = ib::method::get;
    mad.transaction_id = 0x0000000012345678ULL;
    mad.attribute_id = 0x0035;  // PathRecord
    mad.write_to(s.payload.data());
    return finish(std::move(s));
}

SamplePacket sample_ud_payload() {
    SamplePacket s;
    s.name = "ud_payload";
    s.spec.lrh = {.vl = 0, .lver = 0, .sl = 3, .lnh = ib::Lnh::iba_local, .dlid = 0x0012, .pkt_len = 0, .slid = 0x0034};
    s.spec.bth.opcode = ib::op::ud_send_only;
    s.spec.bth.pkey = 0xFFFF;
    s.spec.bth.dest_qp = 0x000048;
    s.spec.bth.psn = 0x00ABCD;
    s.spec.ext.deth = {0x00000B1B, 0x000049};
    // IPoIB encapsulation header (type 0x0800, reserved 0) + 7 bytes: pad 1.
    s.payload = {0x08, 0x00, 0x00, 0x00, 'i', 'p', 'o', 'i', 'b', 'd', '!'};
    return finish(std::move(s));
}

SamplePacket sample_ud_multicast_grh() {
    SamplePacket s;
    s.name = "ud_multicast_grh";
    s.spec.lrh = {.vl = 0, .lver = 0, .sl = 0, .lnh = ib::Lnh::iba_global, .dlid = 0xC000, .pkt_len = 0, .slid = 0x0007};
    ib::Grh grh;
    grh.tclass = 0;
    grh.flow_label = 0;
    grh.hop_limit = 0;
    grh.sgid = gid(0xFE80000000000000ULL, 0x0002C90300001234ULL);
    grh.dgid = {0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
    s.spec.grh = grh;
    s.spec.bth.opcode = ib::op::ud_send_only;
    s.spec.bth.pkey = 0xFFFF;
    s.spec.bth.dest_qp = ib::kQpnMulticast;
    s.spec.bth.psn = 7;
    s.spec.ext.deth = {0x00000B1B, 0x000048};
    s.payload = {0x08, 0x06, 0x00, 0x00, 1, 2, 3, 4, 5, 6, 7, 8};
    return finish(std::move(s));
}

SamplePacket sample_rc_ack() {
    SamplePacket s;
    s.name = "rc_ack";
    s.spec.lrh = {.vl = 1, .lver = 0, .sl = 1, .lnh = ib::Lnh::iba_local, .dlid = 0x0020, .pkt_len = 0, .slid = 0x0021};
    s.spec.bth.opcode = ib::op::rc_acknowledge;
    s.spec.bth.pkey = 0x8001;
    s.spec.bth.dest_qp = 0x000100;
    s.spec.bth.psn = 0x00FFFF;
    s.spec.ext.aeth = {ib::Aeth::kSyndromeAck | 0x1F, 0x000042};
    return finish(std::move(s));
}

std::vector<SamplePacket> all_samples() {
    return {sample_ud_mad(), sample_ud_payload(), sample_ud_multicast_grh(), sample_rc_ack()};
}

std::uint32_t reference_crc32(const std::vector<std::uint8_t>& data) {
    std::uint32_t crc = 0xFFFFFFFF;
    for (std::uint8_t byte : data) {
        crc ^= byte;
        for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ ((crc & 1) ? 0xEDB88320u : 0u);
    }
    return ~crc;
}

std::uint16_t reference_crc16_vcrc(const std::vector<std::uint8_t>& data) {
    // Non-reflected shift register fed with bit-reversed bytes, output
    // reversed: the textbook definition of a reflected CRC, with 0x100B.
    auto reverse8 = [](std::uint8_t b) {
        std::uint8_t r = 0;
        for (int i = 0; i < 8; ++i) r = static_cast<std::uint8_t>(r | (((b >> i) & 1) << (7 - i)));
        return r;
    };
    std::uint16_t crc = 0xFFFF;
    for (std::uint8_t byte : data) {
        crc = static_cast<std::uint16_t>(crc ^ (reverse8(byte) << 8));
        for (int i = 0; i < 8; ++i)
            crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x100B : crc << 1);
    }
    std::uint16_t out = 0;
    for (int i = 0; i < 16; ++i) out = static_cast<std::uint16_t>(out | (((crc >> i) & 1) << (15 - i)));
    return static_cast<std::uint16_t>(out ^ 0xFFFF);
}

std::uint32_t reference_icrc(const std::vector<std::uint8_t>& wire) {
    if (wire.size() < ib::kMinPacketSize) throw std::invalid_argument("packet too short for an ICRC");
    std::vector<std::uint8_t> masked(wire.begin(), wire.end() - 6);
    const bool global = (masked.at(1) & 0x3) == 3;
    std::size_t bth = 8;
    if (global) {
        for (std::size_t i = 0; i < 8; ++i) masked[i] = 0xFF;       // LRH
        masked[8] = static_cast<std::uint8_t>(masked[8] | 0x0F);  // TClass high
        masked[9] = masked[10] = masked[11] = 0xFF;        // TClass low, FlowLabel
        masked[15] = 0xFF;                                 // HopLmt
        bth = 48;
    } else {
        masked[0] = static_cast<std::uint8_t>(masked[0] | 0xF0);  // VL
    }
    masked[bth + 4] = 0xFF;  // Resv8a
    return reference_crc32(masked);
}

std::uint16_t reference_vcrc(const std::vector<std::uint8_t>& wire) {
    return reference_crc16_vcrc(std::vector<std::uint8_t>(wire.begin(), wire.end() - 2));
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
    std::vector<std::uint8_t> out;
    int hi = -1;
    for (char c : hex) {
        int v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
        else continue;
        if (hi < 0) {
            hi = v;
        } else {
            out.push_back(static_cast<std::uint8_t>(hi * 16 + v));
            hi = -1;
        }
    }
    return out;
}

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (std::uint8_t b : bytes) {
        s += digits[b >> 4];
        s += digits[b & 0xF];
    }
    return s;
}

}  // namespace ipoibd::test
