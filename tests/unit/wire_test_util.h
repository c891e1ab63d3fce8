// Sample packets and independent reference computations shared by the wire
// tests, the tshark test and the fuzz corpus generator.
//
// The reference CRCs here are deliberately written differently from
// transport/wire/crc.cpp (bit by bit, no zlib, masks applied by field), so a
// test comparing the two checks the production code against a second
// reading of the spec rather than against itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/wire/packet.h"

namespace ipoibd::test {

// A spec plus the payload storage it points to. Copies and moves re-point
// spec.payload at their own storage.
struct SamplePacket {
    SamplePacket() = default;
    SamplePacket(const SamplePacket& o) : name(o.name), spec(o.spec), payload(o.payload), wire(o.wire) { repoint(); }
    SamplePacket(SamplePacket&& o) noexcept
        : name(std::move(o.name)), spec(o.spec), payload(std::move(o.payload)), wire(std::move(o.wire)) {
        repoint();
    }
    SamplePacket& operator=(SamplePacket o) noexcept {
        name = std::move(o.name);
        spec = o.spec;
        payload = std::move(o.payload);
        wire = std::move(o.wire);
        repoint();
        return *this;
    }
    ~SamplePacket() = default;
    void repoint() { spec.payload = payload; }

    std::string name;
    ib::PacketSpec spec;
    std::vector<std::uint8_t> payload;
    std::vector<std::uint8_t> wire;  // built bytes
};

// UD SEND Only to QP1 carrying a 256-byte SubnAdm MAD (LID-routed, local).
SamplePacket sample_ud_mad();
// UD SEND Only to a unicast QP carrying an IPoIB-like payload (local).
SamplePacket sample_ud_payload();
// UD SEND Only with a GRH to multicast DLID 0xC000, DestQP 0xFFFFFF.
SamplePacket sample_ud_multicast_grh();
// RC Acknowledge carrying an AETH.
SamplePacket sample_rc_ack();
// All of the above.
std::vector<SamplePacket> all_samples();

// Bit-at-a-time reference CRCs.
std::uint32_t reference_crc32(const std::vector<std::uint8_t>& data);
std::uint16_t reference_crc16_vcrc(const std::vector<std::uint8_t>& data);
// ICRC recomputed from a whole packet (LRH..VCRC) with the variant fields
// masked by name; VCRC over LRH..ICRC.
std::uint32_t reference_icrc(const std::vector<std::uint8_t>& wire);
std::uint16_t reference_vcrc(const std::vector<std::uint8_t>& wire);

std::vector<std::uint8_t> from_hex(const std::string& hex);  // ignores spaces and newlines
std::string to_hex(const std::vector<std::uint8_t>& bytes);

}  // namespace ipoibd::test
