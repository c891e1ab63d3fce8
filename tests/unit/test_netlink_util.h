// Helpers for the netlink tests: hand-made kernel messages built with libmnl
// (so the parsers are checked against bytes that did not come from our own
// builders), and a walk of a built request's attributes with libmnl's
// parser.
#pragma once

#include <libmnl/libmnl.h>
#include <linux/netlink.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/ip_address.h"

namespace ipoibd::netlink::test {

// One netlink message under construction, as the kernel would send it.
class TestMessage {
public:
    explicit TestMessage(int type, int flags = 0, std::uint32_t seq = 0) : buffer_(4096) {
        header_ = mnl_nlmsg_put_header(buffer_.data());
        header_->nlmsg_type = static_cast<std::uint16_t>(type);
        header_->nlmsg_flags = static_cast<std::uint16_t>(flags);
        header_->nlmsg_seq = seq;
    }

    // The fixed header (ifinfomsg, ifaddrmsg, rtmsg, nlmsgerr...), zeroed.
    template <class Fixed>
    Fixed& fixed() {
        return *static_cast<Fixed*>(mnl_nlmsg_put_extra_header(header_, sizeof(Fixed)));
    }
    // Raw octets after what is there (for an int error code, an echoed request).
    TestMessage& raw(const void* data, std::size_t length) {
        void* at = mnl_nlmsg_put_extra_header(header_, length);
        std::memcpy(at, data, length);
        return *this;
    }
    TestMessage& attr(int type, const void* data, std::size_t length) {
        mnl_attr_put(header_, static_cast<std::uint16_t>(type), length, data);
        return *this;
    }
    TestMessage& u32(int type, std::uint32_t value) { return attr(type, &value, sizeof value); }
    TestMessage& str(int type, const std::string& text) {
        mnl_attr_put_strz(header_, static_cast<std::uint16_t>(type), text.c_str());
        return *this;
    }
    TestMessage& address(int type, const IpAddress& a) { return attr(type, a.data(), a.size()); }

    nlmsghdr& header() { return *header_; }
    std::vector<std::uint8_t> bytes() const {
        return std::vector<std::uint8_t>(buffer_.begin(), buffer_.begin() + header_->nlmsg_len);
    }

private:
    std::vector<std::uint8_t> buffer_;
    nlmsghdr* header_;
};

// Messages back to back in one datagram, each padded to 4 octets.
inline std::vector<std::uint8_t> datagram(std::initializer_list<std::vector<std::uint8_t>> messages) {
    std::vector<std::uint8_t> out;
    for (const auto& m : messages) {
        out.insert(out.end(), m.begin(), m.end());
        out.resize((out.size() + 3) & ~std::size_t{3});
    }
    return out;
}

inline IpAddress ip(const char* text) { return *parse_ip_address(text); }
inline IpPrefix prefix(const char* text) { return *parse_ip_prefix(text); }

// A built request read back with libmnl: its header, its fixed part and
// its attributes by type (libmnl's mnl_attr_parse, not our parser).
struct ParsedRequest {
    nlmsghdr header{};
    std::vector<std::uint8_t> fixed;           // the fixed header's octets
    std::map<int, std::vector<std::uint8_t>> attributes;
    bool well_formed = false;                  // mnl_nlmsg_ok and every attribute walked

    template <class Fixed>
    Fixed fixed_as() const {
        Fixed f{};
        std::memcpy(&f, fixed.data(), std::min(sizeof f, fixed.size()));
        return f;
    }
    bool has(int type) const { return attributes.count(type) != 0; }
    std::uint32_t u32(int type) const {
        std::uint32_t v = 0;
        const auto& a = attributes.at(type);
        std::memcpy(&v, a.data(), std::min(sizeof v, a.size()));
        return v;
    }
    std::vector<std::uint8_t> octets(int type) const { return attributes.at(type); }
};

inline ParsedRequest parse_request(std::span<const std::uint8_t> bytes, std::size_t fixed_size) {
    ParsedRequest out;
    const auto* nlh = reinterpret_cast<const nlmsghdr*>(bytes.data());
    if (!mnl_nlmsg_ok(nlh, static_cast<int>(bytes.size())) || nlh->nlmsg_len != bytes.size()) return out;
    out.header = *nlh;
    const auto* payload = static_cast<const std::uint8_t*>(mnl_nlmsg_get_payload(nlh));
    out.fixed.assign(payload, payload + fixed_size);
    auto collect = +[](const nlattr* a, void* data) -> int {
        auto& attributes = *static_cast<std::map<int, std::vector<std::uint8_t>>*>(data);
        const auto* p = static_cast<const std::uint8_t*>(mnl_attr_get_payload(a));
        attributes[mnl_attr_get_type(a)] = std::vector<std::uint8_t>(p, p + mnl_attr_get_payload_len(a));
        return MNL_CB_OK;
    };
    out.well_formed = mnl_attr_parse(nlh, static_cast<unsigned>(fixed_size), collect, &out.attributes) == MNL_CB_OK;
    return out;
}

inline std::vector<std::uint8_t> octets(const IpAddress& a) { return {a.data(), a.data() + a.size()}; }

}  // namespace ipoibd::netlink::test
