// BTH opcodes (IBA vol. 1 9.2, table 35) and what each one carries.
//
// The opcode's top three bits select the transport (000 RC, 001 UC, 010 RD,
// 011 UD, 100 CNP, 101 XRC, 11x manufacturer specific); the low five bits the
// operation. opcode_info() tells, for any of the 256 values, whether it is
// defined, whether this transport core parses it, which extended transport
// headers follow the BTH (in wire order), and what payload it may carry.
#pragma once

#include <cstdint>

namespace ipoibd::ib {

enum class Transport : std::uint8_t { rc, uc, rd, ud, cnp, xrc, manufacturer, reserved };

namespace op {
// Operation codes, the low five bits, shared by RC, UC, RD and XRC.
inline constexpr std::uint8_t send_first = 0x00;
inline constexpr std::uint8_t send_middle = 0x01;
inline constexpr std::uint8_t send_last = 0x02;
inline constexpr std::uint8_t send_last_imm = 0x03;
inline constexpr std::uint8_t send_only = 0x04;
inline constexpr std::uint8_t send_only_imm = 0x05;
inline constexpr std::uint8_t rdma_write_first = 0x06;
inline constexpr std::uint8_t rdma_write_middle = 0x07;
inline constexpr std::uint8_t rdma_write_last = 0x08;
inline constexpr std::uint8_t rdma_write_last_imm = 0x09;
inline constexpr std::uint8_t rdma_write_only = 0x0A;
inline constexpr std::uint8_t rdma_write_only_imm = 0x0B;
inline constexpr std::uint8_t rdma_read_request = 0x0C;
inline constexpr std::uint8_t rdma_read_response_first = 0x0D;
inline constexpr std::uint8_t rdma_read_response_middle = 0x0E;
inline constexpr std::uint8_t rdma_read_response_last = 0x0F;
inline constexpr std::uint8_t rdma_read_response_only = 0x10;
inline constexpr std::uint8_t acknowledge = 0x11;
inline constexpr std::uint8_t atomic_acknowledge = 0x12;
inline constexpr std::uint8_t compare_swap = 0x13;
inline constexpr std::uint8_t fetch_add = 0x14;
inline constexpr std::uint8_t resync = 0x15;  // RD only
inline constexpr std::uint8_t send_last_inv = 0x16;
inline constexpr std::uint8_t send_only_inv = 0x17;

// Transport prefixes, the top three bits.
inline constexpr std::uint8_t rc = 0x00;
inline constexpr std::uint8_t uc = 0x20;
inline constexpr std::uint8_t rd = 0x40;
inline constexpr std::uint8_t ud = 0x60;
inline constexpr std::uint8_t cnp = 0x80;
inline constexpr std::uint8_t xrc = 0xA0;
inline constexpr std::uint8_t manufacturer = 0xC0;

// Complete opcodes, named as in IBA table 35.
inline constexpr std::uint8_t rc_send_first = rc | send_first;
inline constexpr std::uint8_t rc_send_middle = rc | send_middle;
inline constexpr std::uint8_t rc_send_last = rc | send_last;
inline constexpr std::uint8_t rc_send_last_imm = rc | send_last_imm;
inline constexpr std::uint8_t rc_send_only = rc | send_only;
inline constexpr std::uint8_t rc_send_only_imm = rc | send_only_imm;
inline constexpr std::uint8_t rc_rdma_write_first = rc | rdma_write_first;
inline constexpr std::uint8_t rc_rdma_write_middle = rc | rdma_write_middle;
inline constexpr std::uint8_t rc_rdma_write_last = rc | rdma_write_last;
inline constexpr std::uint8_t rc_rdma_write_last_imm = rc | rdma_write_last_imm;
inline constexpr std::uint8_t rc_rdma_write_only = rc | rdma_write_only;
inline constexpr std::uint8_t rc_rdma_write_only_imm = rc | rdma_write_only_imm;
inline constexpr std::uint8_t rc_rdma_read_request = rc | rdma_read_request;
inline constexpr std::uint8_t rc_rdma_read_response_first = rc | rdma_read_response_first;
inline constexpr std::uint8_t rc_rdma_read_response_middle = rc | rdma_read_response_middle;
inline constexpr std::uint8_t rc_rdma_read_response_last = rc | rdma_read_response_last;
inline constexpr std::uint8_t rc_rdma_read_response_only = rc | rdma_read_response_only;
inline constexpr std::uint8_t rc_acknowledge = rc | acknowledge;
inline constexpr std::uint8_t rc_atomic_acknowledge = rc | atomic_acknowledge;
inline constexpr std::uint8_t rc_compare_swap = rc | compare_swap;
inline constexpr std::uint8_t rc_fetch_add = rc | fetch_add;
inline constexpr std::uint8_t rc_send_last_inv = rc | send_last_inv;
inline constexpr std::uint8_t rc_send_only_inv = rc | send_only_inv;

inline constexpr std::uint8_t uc_send_first = uc | send_first;
inline constexpr std::uint8_t uc_send_middle = uc | send_middle;
inline constexpr std::uint8_t uc_send_last = uc | send_last;
inline constexpr std::uint8_t uc_send_last_imm = uc | send_last_imm;
inline constexpr std::uint8_t uc_send_only = uc | send_only;
inline constexpr std::uint8_t uc_send_only_imm = uc | send_only_imm;
inline constexpr std::uint8_t uc_rdma_write_first = uc | rdma_write_first;
inline constexpr std::uint8_t uc_rdma_write_middle = uc | rdma_write_middle;
inline constexpr std::uint8_t uc_rdma_write_last = uc | rdma_write_last;
inline constexpr std::uint8_t uc_rdma_write_last_imm = uc | rdma_write_last_imm;
inline constexpr std::uint8_t uc_rdma_write_only = uc | rdma_write_only;
inline constexpr std::uint8_t uc_rdma_write_only_imm = uc | rdma_write_only_imm;

inline constexpr std::uint8_t rd_send_first = rd | send_first;
inline constexpr std::uint8_t rd_send_middle = rd | send_middle;
inline constexpr std::uint8_t rd_send_last = rd | send_last;
inline constexpr std::uint8_t rd_send_last_imm = rd | send_last_imm;
inline constexpr std::uint8_t rd_send_only = rd | send_only;
inline constexpr std::uint8_t rd_send_only_imm = rd | send_only_imm;
inline constexpr std::uint8_t rd_rdma_write_first = rd | rdma_write_first;
inline constexpr std::uint8_t rd_rdma_write_middle = rd | rdma_write_middle;
inline constexpr std::uint8_t rd_rdma_write_last = rd | rdma_write_last;
inline constexpr std::uint8_t rd_rdma_write_last_imm = rd | rdma_write_last_imm;
inline constexpr std::uint8_t rd_rdma_write_only = rd | rdma_write_only;
inline constexpr std::uint8_t rd_rdma_write_only_imm = rd | rdma_write_only_imm;
inline constexpr std::uint8_t rd_rdma_read_request = rd | rdma_read_request;
inline constexpr std::uint8_t rd_rdma_read_response_first = rd | rdma_read_response_first;
inline constexpr std::uint8_t rd_rdma_read_response_middle = rd | rdma_read_response_middle;
inline constexpr std::uint8_t rd_rdma_read_response_last = rd | rdma_read_response_last;
inline constexpr std::uint8_t rd_rdma_read_response_only = rd | rdma_read_response_only;
inline constexpr std::uint8_t rd_acknowledge = rd | acknowledge;
inline constexpr std::uint8_t rd_atomic_acknowledge = rd | atomic_acknowledge;
inline constexpr std::uint8_t rd_compare_swap = rd | compare_swap;
inline constexpr std::uint8_t rd_fetch_add = rd | fetch_add;
inline constexpr std::uint8_t rd_resync = rd | resync;

inline constexpr std::uint8_t ud_send_only = ud | send_only;          // 0x64
inline constexpr std::uint8_t ud_send_only_imm = ud | send_only_imm;  // 0x65

inline constexpr std::uint8_t cnp_notify = cnp;  // congestion notification (IBA annex A10)
}  // namespace op

// Extended transport headers, as bits of OpcodeInfo::headers. The enumerator
// order is the wire order after the BTH (IBA 9.2, figure 41).
enum ExtHeader : std::uint16_t {
    eth_rdeth = 1u << 0,
    eth_deth = 1u << 1,
    eth_reth = 1u << 2,
    eth_atomic = 1u << 3,
    eth_aeth = 1u << 4,
    eth_atomic_ack = 1u << 5,
    eth_immdt = 1u << 6,
    eth_ieth = 1u << 7,
};

// What an opcode may carry after its headers (IBA 9.4, 9.5, C9-22..C9-28).
enum class PayloadRule : std::uint8_t {
    none,       // no payload at all: requests for reads and atomics, ACKs
    full_pmtu,  // First and Middle packets: exactly PMTU bytes, PadCnt 0
    up_to_pmtu, // Last and Only packets and UD sends: 0..PMTU bytes
};

struct OpcodeInfo {
    const char* name;  // nullptr for a reserved value
    Transport transport;
    std::uint16_t headers;  // ExtHeader bits
    PayloadRule payload;
    bool parsed;  // this transport core decodes it (RC, UC, RD, UD)
};

// Information for any of the 256 opcode values. Never fails: reserved values
// have name == nullptr and parsed == false.
const OpcodeInfo& opcode_info(std::uint8_t opcode);

inline constexpr Transport transport_of(std::uint8_t opcode) {
    switch (opcode >> 5) {
        case 0: return Transport::rc;
        case 1: return Transport::uc;
        case 2: return Transport::rd;
        case 3: return Transport::ud;
        case 4: return Transport::cnp;
        case 5: return Transport::xrc;
        default: return Transport::manufacturer;
    }
}

const char* to_string(Transport t);

}  // namespace ipoibd::ib
