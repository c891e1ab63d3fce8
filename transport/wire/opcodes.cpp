// The opcode table of IBA vol. 1 table 35, computed once at compile time from
// the operation (low five bits) and the transport (top three bits).
#include "transport/wire/opcodes.h"

#include <array>

namespace ipoibd::ib {
namespace {

struct Operation {
    const char* name;
    std::uint16_t headers;
    PayloadRule payload;
    bool response;  // RD responses carry RDETH but no DETH
};

// Indexed by the low five bits; nullptr name = reserved for every transport.
constexpr std::array<Operation, 32> kOperations = [] {
    std::array<Operation, 32> t{};
    using enum PayloadRule;
    t[op::send_first] = {"SEND First", 0, full_pmtu, false};
    t[op::send_middle] = {"SEND Middle", 0, full_pmtu, false};
    t[op::send_last] = {"SEND Last", 0, up_to_pmtu, false};
    t[op::send_last_imm] = {"SEND Last with Immediate", eth_immdt, up_to_pmtu, false};
    t[op::send_only] = {"SEND Only", 0, up_to_pmtu, false};
    t[op::send_only_imm] = {"SEND Only with Immediate", eth_immdt, up_to_pmtu, false};
    t[op::rdma_write_first] = {"RDMA WRITE First", eth_reth, full_pmtu, false};
    t[op::rdma_write_middle] = {"RDMA WRITE Middle", 0, full_pmtu, false};
    t[op::rdma_write_last] = {"RDMA WRITE Last", 0, up_to_pmtu, false};
    t[op::rdma_write_last_imm] = {"RDMA WRITE Last with Immediate", eth_immdt, up_to_pmtu, false};
    t[op::rdma_write_only] = {"RDMA WRITE Only", eth_reth, up_to_pmtu, false};
    t[op::rdma_write_only_imm] = {"RDMA WRITE Only with Immediate", eth_reth | eth_immdt, up_to_pmtu, false};
    t[op::rdma_read_request] = {"RDMA READ Request", eth_reth, none, false};
    t[op::rdma_read_response_first] = {"RDMA READ Response First", eth_aeth, full_pmtu, true};
    t[op::rdma_read_response_middle] = {"RDMA READ Response Middle", 0, full_pmtu, true};
    t[op::rdma_read_response_last] = {"RDMA READ Response Last", eth_aeth, up_to_pmtu, true};
    t[op::rdma_read_response_only] = {"RDMA READ Response Only", eth_aeth, up_to_pmtu, true};
    t[op::acknowledge] = {"Acknowledge", eth_aeth, none, true};
    t[op::atomic_acknowledge] = {"ATOMIC Acknowledge", eth_aeth | eth_atomic_ack, none, true};
    t[op::compare_swap] = {"CmpSwap", eth_atomic, none, false};
    t[op::fetch_add] = {"FetchAdd", eth_atomic, none, false};
    t[op::resync] = {"RESYNC", 0, none, false};
    t[op::send_last_inv] = {"SEND Last with Invalidate", eth_ieth, up_to_pmtu, false};
    t[op::send_only_inv] = {"SEND Only with Invalidate", eth_ieth, up_to_pmtu, false};
    return t;
}();

constexpr bool defined_for(Transport tr, std::uint8_t low) {
    switch (tr) {
        case Transport::rc:
        case Transport::xrc:
            return low <= op::fetch_add || low == op::send_last_inv || low == op::send_only_inv;
        case Transport::uc: return low <= op::rdma_write_only_imm;
        case Transport::rd: return low <= op::resync;
        case Transport::ud: return low == op::send_only || low == op::send_only_imm;
        case Transport::cnp: return low == 0;
        default: return false;
    }
}

constexpr std::array<OpcodeInfo, 256> kTable = [] {
    std::array<OpcodeInfo, 256> t{};
    for (unsigned code = 0; code < 256; ++code) {
        const auto opcode = static_cast<std::uint8_t>(code);
        const Transport tr = transport_of(opcode);
        const std::uint8_t low = opcode & 0x1F;
        OpcodeInfo info{nullptr, tr, 0, PayloadRule::none, false};
        if (tr == Transport::manufacturer) {
            info.name = "manufacturer specific";
        } else if (tr == Transport::cnp) {
            if (defined_for(tr, low)) info.name = "Congestion Notification";
        } else if (defined_for(tr, low)) {
            const Operation& o = kOperations[low];
            info.name = o.name;
            info.headers = o.headers;
            info.payload = o.payload;
            info.parsed = tr != Transport::xrc;  // XRC needs XRCETH: not carried yet
            if (tr == Transport::rd) info.headers |= eth_rdeth | (o.response ? 0 : eth_deth);
            if (tr == Transport::ud) info.headers |= eth_deth;
        }
        if (info.name == nullptr) info.transport = Transport::reserved;
        t[code] = info;
    }
    return t;
}();

}  // namespace

const OpcodeInfo& opcode_info(std::uint8_t opcode) { return kTable[opcode]; }

const char* to_string(Transport t) {
    switch (t) {
        case Transport::rc: return "RC";
        case Transport::uc: return "UC";
        case Transport::rd: return "RD";
        case Transport::ud: return "UD";
        case Transport::cnp: return "CNP";
        case Transport::xrc: return "XRC";
        case Transport::manufacturer: return "manufacturer";
        case Transport::reserved: return "reserved";
    }
    return "?";
}

}  // namespace ipoibd::ib
