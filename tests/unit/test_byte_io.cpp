#include <gtest/gtest.h>

#include <array>

#include "common/byte_io.h"
#include "common/expected.h"

namespace ipoibd {
namespace {

TEST(ByteIo, BigEndianRoundTrips) {
    std::array<std::uint8_t, 8> b{};
    store_be16(b.data(), 0x1234);
    EXPECT_EQ(b[0], 0x12);
    EXPECT_EQ(b[1], 0x34);
    EXPECT_EQ(load_be16(b.data()), 0x1234);
    store_be24(b.data(), 0xABCDEF);
    EXPECT_EQ(b[0], 0xAB);
    EXPECT_EQ(b[2], 0xEF);
    EXPECT_EQ(load_be24(b.data()), 0xABCDEFu);
    store_be32(b.data(), 0xDEADBEEF);
    EXPECT_EQ(b[0], 0xDE);
    EXPECT_EQ(load_be32(b.data()), 0xDEADBEEFu);
    store_be64(b.data(), 0x0102030405060708ULL);
    EXPECT_EQ(b[7], 0x08);
    EXPECT_EQ(load_be64(b.data()), 0x0102030405060708ULL);
}

TEST(ByteIo, LittleEndianRoundTrips) {
    std::array<std::uint8_t, 8> b{};
    store_le32(b.data(), 0x11223344);
    EXPECT_EQ(b[0], 0x44);
    EXPECT_EQ(load_le32(b.data()), 0x11223344u);
    store_le16(b.data(), 0xA1B2);
    EXPECT_EQ(b[0], 0xB2);
    EXPECT_EQ(load_le16(b.data()), 0xA1B2);
    store_le64(b.data(), 0x0102030405060708ULL);
    EXPECT_EQ(b[0], 0x08);
    EXPECT_EQ(b[7], 0x01);
}

TEST(ByteIo, UnalignedAccess) {
    std::array<std::uint8_t, 16> b{};
    store_be32(b.data() + 3, 0xCAFEBABE);
    EXPECT_EQ(load_be32(b.data() + 3), 0xCAFEBABEu);
    store_be64(b.data() + 5, 0x1122334455667788ULL);
    EXPECT_EQ(load_be64(b.data() + 5), 0x1122334455667788ULL);
}

expected<int, const char*> half(int x) {
    if (x % 2) return unexpected("odd");
    return x / 2;
}

TEST(Expected, ValueAndError) {
    auto a = half(4);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, 2);
    EXPECT_EQ(a.value(), 2);
    auto b = half(3);
    EXPECT_FALSE(b);
    EXPECT_STREQ(b.error(), "odd");
}

TEST(ByteIo, AssignAndAppendBytes) {
    std::vector<std::uint8_t> v(100, 0xEE);
    const std::uint8_t a[] = {1, 2, 3}, b[] = {4, 5};
    assign_bytes(v, a);
    EXPECT_EQ(v, (std::vector<std::uint8_t>{1, 2, 3}));
    append_bytes(v, b);
    EXPECT_EQ(v, (std::vector<std::uint8_t>{1, 2, 3, 4, 5}));
    append_bytes(v, {});
    EXPECT_EQ(v.size(), 5u);
    assign_bytes(v, {});  // an empty span (a null pointer) empties it
    EXPECT_TRUE(v.empty());
    append_bytes(v, b);
    EXPECT_EQ(v, (std::vector<std::uint8_t>{4, 5}));
}

}  // namespace
}  // namespace ipoibd
