#include "netlink/rtnl_request.h"

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace ipoibd::netlink {

static_assert(kMainTable == RT_TABLE_MAIN);
static_assert(kProtocolStatic == RTPROT_STATIC);

namespace {

std::uint16_t u16(int value) { return static_cast<std::uint16_t>(value); }

// One message under construction in a kMaxRequestSize buffer. An attribute
// that does not fit aborts: every request here is small and fixed in shape,
// so overflow can only be a bug in this file.
class MessageBuilder {
public:
    MessageBuilder(int type, int flags) : buffer_(kMaxRequestSize) {
        header_ = mnl_nlmsg_put_header(buffer_.data());
        header_->nlmsg_type = u16(type);
        header_->nlmsg_flags = u16(flags);
    }

    // The family-specific fixed header (ifinfomsg, ifaddrmsg, rtmsg), zeroed.
    template <class Fixed>
    Fixed* put_fixed() {
        return static_cast<Fixed*>(mnl_nlmsg_put_extra_header(header_, sizeof(Fixed)));
    }

    void put(int type, const void* data, std::size_t length) {
        if (!mnl_attr_put_check(header_, buffer_.size(), u16(type), length, data)) std::abort();
    }
    void put_u32(int type, std::uint32_t value) { put(type, &value, sizeof value); }
    void put_address(int type, const IpAddress& a) { put(type, a.data(), a.size()); }

    Request finish(std::string operation, std::uint32_t ifindex, bool dump = false) {
        buffer_.resize(header_->nlmsg_len);
        return Request{.bytes = std::move(buffer_), .operation = std::move(operation), .ifindex = ifindex, .dump = dump};
    }

private:
    std::vector<std::uint8_t> buffer_;
    nlmsghdr* header_ = nullptr;
};

constexpr int kRequestAck = NLM_F_REQUEST | NLM_F_ACK;
constexpr int kCreateExclusive = NLM_F_CREATE | NLM_F_EXCL;

ifinfomsg* put_link_header(MessageBuilder& m, std::uint32_t ifindex) {
    auto* ifi = m.put_fixed<ifinfomsg>();
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = static_cast<int>(ifindex);
    return ifi;
}

}  // namespace

Request build_set_mtu(std::uint32_t ifindex, std::uint32_t mtu) {
    MessageBuilder m(RTM_NEWLINK, kRequestAck);
    put_link_header(m, ifindex);
    m.put_u32(IFLA_MTU, mtu);
    return m.finish("RTM_NEWLINK mtu " + std::to_string(mtu), ifindex);
}

Request build_set_link_up(std::uint32_t ifindex, bool up) {
    MessageBuilder m(RTM_NEWLINK, kRequestAck);
    ifinfomsg* ifi = put_link_header(m, ifindex);
    // ifi_change names the flags to touch; only IFF_UP changes.
    ifi->ifi_change = static_cast<unsigned>(IFF_UP);
    ifi->ifi_flags = up ? static_cast<unsigned>(IFF_UP) : 0u;
    return m.finish(up ? "RTM_NEWLINK up" : "RTM_NEWLINK down", ifindex);
}

Request build_get_link(std::uint32_t ifindex) {
    MessageBuilder m(RTM_GETLINK, kRequestAck);
    put_link_header(m, ifindex);
    return m.finish("RTM_GETLINK", ifindex);
}

Request build_address_change(Change change, std::uint32_t ifindex, const IpPrefix& prefix, AddressOptions options) {
    const bool add = change == Change::add;
    MessageBuilder m(add ? RTM_NEWADDR : RTM_DELADDR, add ? kRequestAck | kCreateExclusive : kRequestAck);
    auto* ifa = m.put_fixed<ifaddrmsg>();
    ifa->ifa_family = address_family(prefix.address.family);
    ifa->ifa_prefixlen = prefix.length;
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = ifindex;
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on
    // point-to-point links and the same address otherwise. `ip addr add`
    // sends both, for both families; so does this.
    m.put_address(IFA_LOCAL, prefix.address);
    m.put_address(IFA_ADDRESS, prefix.address);
    if (add && options.nodad && prefix.address.family == IpFamily::ipv6) {
        ifa->ifa_flags = IFA_F_NODAD;
        m.put_u32(IFA_FLAGS, IFA_F_NODAD);
    }
    return m.finish(std::string(add ? "RTM_NEWADDR " : "RTM_DELADDR ") + to_string(prefix), ifindex);
}

Request build_address_dump(std::uint32_t ifindex, std::optional<IpFamily> family) {
    MessageBuilder m(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP);
    auto* ifa = m.put_fixed<ifaddrmsg>();
    ifa->ifa_family = family ? address_family(*family) : static_cast<std::uint8_t>(AF_UNSPEC);
    ifa->ifa_index = ifindex;
    return m.finish("RTM_GETADDR dump", ifindex, true);
}

Request build_route_change(Change change, const RouteSpec& route) {
    const bool add = change == Change::add;
    const IpFamily family = route.destination.address.family;
    MessageBuilder m(add ? RTM_NEWROUTE : RTM_DELROUTE, add ? kRequestAck | kCreateExclusive : kRequestAck);
    auto* rtm = m.put_fixed<rtmsg>();
    rtm->rtm_family = address_family(family);
    rtm->rtm_dst_len = route.destination.length;
    // rtm_table holds 8 bits; RTA_TABLE carries the full number.
    rtm->rtm_table = static_cast<std::uint8_t>(route.table < 256 ? route.table : RT_TABLE_UNSPEC);
    if (add) {
        rtm->rtm_protocol = route.protocol;
        rtm->rtm_type = RTN_UNICAST;
        // As iproute2: an IPv4 route with no gateway reaches hosts on the
        // link itself (scope link); everything else is universe.
        rtm->rtm_scope = (family == IpFamily::ipv4 && !route.gateway) ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
    } else {
        rtm->rtm_scope = RT_SCOPE_NOWHERE;  // delete: match any scope
    }
    m.put_u32(RTA_TABLE, route.table);
    if (route.destination.length > 0) m.put_address(RTA_DST, route.destination.address);

    std::string operation = std::string(add ? "RTM_NEWROUTE " : "RTM_DELROUTE ") + to_string(route.destination);
    if (route.gateway) {
        if (route.gateway->family == family) {
            m.put_address(RTA_GATEWAY, *route.gateway);
        } else {
            // RFC 5549 style: struct rtvia is a 2-octet family then the address.
            std::array<std::uint8_t, sizeof(std::uint16_t) + 16> via{};
            const std::uint16_t via_family = address_family(route.gateway->family);
            std::memcpy(via.data(), &via_family, sizeof via_family);
            std::memcpy(via.data() + sizeof via_family, route.gateway->data(), route.gateway->size());
            m.put(RTA_VIA, via.data(), sizeof via_family + route.gateway->size());
        }
        operation += " via " + to_string(*route.gateway);
    }
    if (route.oif != 0) m.put_u32(RTA_OIF, route.oif);
    if (route.metric != 0) m.put_u32(RTA_PRIORITY, route.metric);
    return m.finish(std::move(operation), route.oif);
}

Request build_route_get(const IpAddress& destination) {
    MessageBuilder m(RTM_GETROUTE, kRequestAck);
    auto* rtm = m.put_fixed<rtmsg>();
    rtm->rtm_family = address_family(destination.family);
    rtm->rtm_dst_len = static_cast<std::uint8_t>(max_prefix_length(destination.family));
    m.put_address(RTA_DST, destination);
    return m.finish("RTM_GETROUTE " + to_string(destination), 0);
}

void set_sequence(std::span<std::uint8_t> request, std::uint32_t seq) {
    if (request.size() < sizeof(nlmsghdr)) std::abort();
    std::memcpy(request.data() + offsetof(nlmsghdr, nlmsg_seq), &seq, sizeof seq);
}

}  // namespace ipoibd::netlink
