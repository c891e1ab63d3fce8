// Helpers shared by the SA codec tests: known-bytes checks in the shape of
// test_smp.cpp's, for any record with size/write_to/read_from.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/wire/headers.h"
#include "wire_test_util.h"

namespace ipoibd::sa::test {

using ipoibd::test::from_hex;
using ipoibd::test::to_hex;

inline std::string zeros(std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += "00 ";
    return s;
}

// Encodes `a`, compares with `hex`, decodes `hex` back and compares with
// `a`, then checks that one byte less is refused in both directions.
template <class A>
void expect_wire(const A& a, const std::string& hex) {
    const auto want = from_hex(hex);
    ASSERT_EQ(want.size(), A::size);
    std::vector<std::uint8_t> buf(A::size + 3, 0xEE);
    auto n = ib::encode(a, buf);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, A::size);
    buf.resize(A::size);
    EXPECT_EQ(to_hex(buf), to_hex(want));

    auto back = ib::decode<A>(want);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(*back == a);

    std::vector<std::uint8_t> small(A::size - 1);
    auto e = ib::encode(a, small);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error(), ib::CodecError::short_buffer);
    auto d = ib::decode<A>(bytes(want).first(A::size - 1));
    ASSERT_FALSE(d.has_value());
    EXPECT_EQ(d.error(), ib::CodecError::short_buffer);
}

template <class A>
void expect_out_of_range(const A& a) {
    std::vector<std::uint8_t> buf(A::size);
    auto n = ib::encode(a, buf);
    ASSERT_FALSE(n.has_value());
    EXPECT_EQ(n.error(), ib::CodecError::field_out_of_range);
}

// One field set alone must produce exactly these bytes at this offset, and
// the default record's bytes (zeros, but for defaults such as
// ClassPortInfo's versions) everywhere else; and decode back to the same
// record.
template <class A>
struct FieldCase {
    const char* name;
    void (*set)(A&);
    std::size_t offset;
    const char* hex;
};

template <class A>
void expect_fields_alone(const std::vector<FieldCase<A>>& cases) {
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        A a{};
        c.set(a);
        std::vector<std::uint8_t> want(A::size, 0);
        ASSERT_TRUE(ib::encode(A{}, want).has_value());
        const auto field = from_hex(c.hex);
        ASSERT_LE(c.offset + field.size(), A::size);
        std::copy(field.begin(), field.end(), want.begin() + static_cast<std::ptrdiff_t>(c.offset));
        std::vector<std::uint8_t> got(A::size, 0xEE);
        ASSERT_TRUE(ib::encode(a, got).has_value());
        EXPECT_EQ(to_hex(got), to_hex(want));
        auto back = ib::decode<A>(want);
        ASSERT_TRUE(back.has_value());
        EXPECT_TRUE(*back == a);
    }
}

// Reserved bits set on the wire are ignored: `wire` (a record of zeros
// with only reserved bits set) decodes to the default record.
template <class A>
void expect_reserved_ignored(const std::vector<std::uint8_t>& wire) {
    ASSERT_EQ(wire.size(), A::size);
    auto a = ib::decode<A>(wire);
    ASSERT_TRUE(a.has_value());
    EXPECT_TRUE(*a == A{});
}

inline ib::Gid gid(std::uint64_t prefix, std::uint64_t guid) {
    ib::Gid g{};
    store_be64(g.data(), prefix);
    store_be64(g.data() + 8, guid);
    return g;
}

}  // namespace ipoibd::sa::test
