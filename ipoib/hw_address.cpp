#include "ipoib/hw_address.h"

#include <array>

namespace ipoibd::ipoib {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::string format_hw_address(const HwAddress& a) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::array<std::uint8_t, HwAddress::size> raw{};
    a.write_to(raw.data());
    std::string out;
    out.reserve(HwAddress::size * 3 - 1);
    for (std::size_t i = 0; i < raw.size(); ++i) {
        if (i != 0) out.push_back(':');
        out.push_back(kDigits[raw[i] >> 4]);
        out.push_back(kDigits[raw[i] & 0xF]);
    }
    return out;
}

std::optional<HwAddress> parse_hw_address(std::string_view text) {
    // "xx:" * 19 + "xx"
    if (text.size() != HwAddress::size * 3 - 1) return std::nullopt;
    std::array<std::uint8_t, HwAddress::size> raw{};
    for (std::size_t i = 0; i < raw.size(); ++i) {
        const std::size_t at = i * 3;
        if (i != 0 && text[at - 1] != ':') return std::nullopt;
        const int hi = hex_value(text[at]);
        const int lo = hex_value(text[at + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        raw[i] = static_cast<std::uint8_t>((hi << 4) | lo);
    }
    return HwAddress::read_from(raw.data());
}

}  // namespace ipoibd::ipoib
