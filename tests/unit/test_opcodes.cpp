// The opcode table against IBA table 35: a row per opcode checked by value,
// and counts per transport.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "transport/wire/opcodes.h"

namespace ipoibd::ib {
namespace {

struct Row {
    std::uint8_t code;
    const char* name;
    Transport transport;
    std::uint16_t headers;
    PayloadRule payload;
};

TEST(Opcodes, SelectedRowsOfTable35) {
    using enum PayloadRule;
    const Row rows[] = {
        {0x00, "SEND First", Transport::rc, 0, full_pmtu},
        {0x04, "SEND Only", Transport::rc, 0, up_to_pmtu},
        {0x05, "SEND Only with Immediate", Transport::rc, eth_immdt, up_to_pmtu},
        {0x06, "RDMA WRITE First", Transport::rc, eth_reth, full_pmtu},
        {0x0B, "RDMA WRITE Only with Immediate", Transport::rc, eth_reth | eth_immdt, up_to_pmtu},
        {0x0C, "RDMA READ Request", Transport::rc, eth_reth, none},
        {0x0D, "RDMA READ Response First", Transport::rc, eth_aeth, full_pmtu},
        {0x0E, "RDMA READ Response Middle", Transport::rc, 0, full_pmtu},
        {0x11, "Acknowledge", Transport::rc, eth_aeth, none},
        {0x12, "ATOMIC Acknowledge", Transport::rc, eth_aeth | eth_atomic_ack, none},
        {0x13, "CmpSwap", Transport::rc, eth_atomic, none},
        {0x14, "FetchAdd", Transport::rc, eth_atomic, none},
        {0x16, "SEND Last with Invalidate", Transport::rc, eth_ieth, up_to_pmtu},
        {0x17, "SEND Only with Invalidate", Transport::rc, eth_ieth, up_to_pmtu},
        {0x20, "SEND First", Transport::uc, 0, full_pmtu},
        {0x2B, "RDMA WRITE Only with Immediate", Transport::uc, eth_reth | eth_immdt, up_to_pmtu},
        {0x40, "SEND First", Transport::rd, eth_rdeth | eth_deth, full_pmtu},
        {0x4C, "RDMA READ Request", Transport::rd, eth_rdeth | eth_deth | eth_reth, none},
        {0x50, "RDMA READ Response Only", Transport::rd, eth_rdeth | eth_aeth, up_to_pmtu},
        {0x51, "Acknowledge", Transport::rd, eth_rdeth | eth_aeth, none},
        {0x54, "FetchAdd", Transport::rd, eth_rdeth | eth_deth | eth_atomic, none},
        {0x55, "RESYNC", Transport::rd, eth_rdeth | eth_deth, none},
        {0x64, "SEND Only", Transport::ud, eth_deth, up_to_pmtu},
        {0x65, "SEND Only with Immediate", Transport::ud, eth_deth | eth_immdt, up_to_pmtu},
    };
    for (const Row& r : rows) {
        SCOPED_TRACE(r.code);
        const OpcodeInfo& info = opcode_info(r.code);
        ASSERT_NE(info.name, nullptr);
        EXPECT_STREQ(info.name, r.name);
        EXPECT_EQ(info.transport, r.transport);
        EXPECT_EQ(info.headers, r.headers);
        EXPECT_EQ(info.payload, r.payload);
        EXPECT_TRUE(info.parsed);
    }
    EXPECT_EQ(op::ud_send_only, 0x64);
    EXPECT_EQ(op::rc_send_only_inv, 0x17);
    EXPECT_EQ(op::rd_resync, 0x55);
}

TEST(Opcodes, ReservedAndUnparsedValues) {
    for (int code : {0x15, 0x18, 0x1F, 0x2C, 0x36, 0x3F, 0x56, 0x5F, 0x60, 0x63, 0x66, 0x7F, 0x81, 0x9F}) {
        SCOPED_TRACE(code);
        EXPECT_EQ(opcode_info(static_cast<std::uint8_t>(code)).name, nullptr);
        EXPECT_EQ(opcode_info(static_cast<std::uint8_t>(code)).transport, Transport::reserved);
        EXPECT_FALSE(opcode_info(static_cast<std::uint8_t>(code)).parsed);
    }
    // Defined but not parsed by this core.
    for (int code : {0x80, 0xA4, 0xB7, 0xC0, 0xFF}) {
        SCOPED_TRACE(code);
        EXPECT_NE(opcode_info(static_cast<std::uint8_t>(code)).name, nullptr);
        EXPECT_FALSE(opcode_info(static_cast<std::uint8_t>(code)).parsed);
    }
}

TEST(Opcodes, CountsPerTransport) {
    std::map<Transport, int> defined;
    for (unsigned c = 0; c < 256; ++c)
        if (opcode_info(static_cast<std::uint8_t>(c)).name) ++defined[opcode_info(static_cast<std::uint8_t>(c)).transport];
    EXPECT_EQ(defined[Transport::rc], 23);
    EXPECT_EQ(defined[Transport::uc], 12);
    EXPECT_EQ(defined[Transport::rd], 22);
    EXPECT_EQ(defined[Transport::ud], 2);
    EXPECT_EQ(defined[Transport::cnp], 1);
    EXPECT_EQ(defined[Transport::xrc], 23);
    EXPECT_EQ(defined[Transport::manufacturer], 64);
}

TEST(Opcodes, TransportNames) {
    EXPECT_STREQ(to_string(transport_of(0x64)), "UD");
    EXPECT_STREQ(to_string(transport_of(0x11)), "RC");
    EXPECT_STREQ(to_string(transport_of(0x2A)), "UC");
    EXPECT_STREQ(to_string(transport_of(0x41)), "RD");
}

}  // namespace
}  // namespace ipoibd::ib
