// Parsers for what the kernel sends back. Order of checks in every parser:
// alignment, header length, nlmsg_len against the buffer, message type, the
// fixed header (ifinfomsg/ifaddrmsg/rtmsg) against nlmsg_len, then the
// attributes against their policy, and only then the values.
#include "netlink/rtnl_reply.h"

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <array>
#include <climits>
#include <initializer_list>
#include <cstring>

namespace ipoibd::netlink {
namespace {

// nlmsghdr is 16 octets, already 4-aligned (MNL_NLMSG_HDRLEN).
constexpr std::size_t kHeaderSize = sizeof(nlmsghdr);
static_assert(kHeaderSize % 4 == 0);

// IFF_LOWER_UP (RFC 2863 operational "lower layer up") is in <linux/if.h>,
// which cannot be included beside glibc's <net/if.h>; glibc stops before it.
constexpr unsigned kIffLowerUp = 1u << 16;

constexpr std::size_t align4(std::size_t n) { return (n + 3) & ~std::size_t{3}; }

// What a known attribute must look like. Unknown attribute types are
// skipped (a newer kernel adds them freely); a known one that fails its
// policy makes the whole message malformed.
struct AttributePolicy {
    int type;
    mnl_attr_data_type kind;
    const char* name;
};

// Addresses are MNL_TYPE_BINARY of any length here; their length depends
// on the family in the fixed header and is checked by the typed parser.
constexpr AttributePolicy kLinkPolicy[] = {
    {IFLA_IFNAME, MNL_TYPE_NUL_STRING, "IFLA_IFNAME"},
    {IFLA_MTU, MNL_TYPE_U32, "IFLA_MTU"},
};
constexpr AttributePolicy kAddressPolicy[] = {
    {IFA_ADDRESS, MNL_TYPE_BINARY, "IFA_ADDRESS"},
    {IFA_LOCAL, MNL_TYPE_BINARY, "IFA_LOCAL"},
    {IFA_FLAGS, MNL_TYPE_U32, "IFA_FLAGS"},
};
constexpr AttributePolicy kRoutePolicy[] = {
    {RTA_DST, MNL_TYPE_BINARY, "RTA_DST"},
    {RTA_OIF, MNL_TYPE_U32, "RTA_OIF"},
    {RTA_GATEWAY, MNL_TYPE_BINARY, "RTA_GATEWAY"},
    {RTA_PRIORITY, MNL_TYPE_U32, "RTA_PRIORITY"},
    {RTA_PREFSRC, MNL_TYPE_BINARY, "RTA_PREFSRC"},
    {RTA_TABLE, MNL_TYPE_U32, "RTA_TABLE"},
    {RTA_VIA, MNL_TYPE_BINARY, "RTA_VIA"},
};
constexpr AttributePolicy kExtAckPolicy[] = {
    {NLMSGERR_ATTR_MSG, MNL_TYPE_NUL_STRING, "NLMSGERR_ATTR_MSG"},
    {NLMSGERR_ATTR_OFFS, MNL_TYPE_U32, "NLMSGERR_ATTR_OFFS"},
};

// The attributes found, by type. Every type named in a policy is below 32.
using Found = std::array<const nlattr*, 32>;
static_assert(RTA_VIA < 32 && IFA_FLAGS < 32 && IFLA_MTU < 32 && NLMSGERR_ATTR_OFFS < 32);

struct Walk {
    std::span<const AttributePolicy> policy;
    Found found{};
    const std::uint8_t* base = nullptr;
    std::size_t end = 0;  // offset just past the last attribute seen, padded
    std::string error;
};

int on_attribute(const nlattr* attr, void* data) {
    auto& walk = *static_cast<Walk*>(data);
    walk.end = static_cast<std::size_t>(reinterpret_cast<const std::uint8_t*>(attr) - walk.base) +
               align4(mnl_attr_get_len(attr));
    const int type = mnl_attr_get_type(attr);
    for (const AttributePolicy& p : walk.policy) {
        if (p.type != type) continue;
        if (mnl_attr_validate(attr, p.kind) < 0) {
            walk.error = std::string(p.name) + " is malformed (" + std::to_string(mnl_attr_get_payload_len(attr)) +
                         " octets)";
            return MNL_CB_ERROR;
        }
        walk.found[static_cast<std::size_t>(type)] = attr;  // a repeated attribute: the last wins, as in the kernel
    }
    return MNL_CB_OK;
}

// The attributes of `message` (exactly nlmsg_len long) from `offset` on.
// libmnl stops silently at an attribute whose nla_len is below 4 or runs
// past the end; here that is an error, as are bytes after the last one.
expected<Found, std::string> walk_attributes(Bytes message, std::size_t offset, std::span<const AttributePolicy> policy) {
    Walk walk{.policy = policy, .base = message.data() + offset};
    if (offset >= message.size()) return walk.found;
    const std::size_t length = message.size() - offset;
    if (mnl_attr_parse_payload(walk.base, length, on_attribute, &walk) == MNL_CB_ERROR) return unexpected(walk.error);
    if (walk.end < length)
        return unexpected("attribute at offset " + std::to_string(offset + walk.end) +
                          " has a bad nla_len or runs past the message");
    return walk.found;
}

bool aligned(Bytes b) { return reinterpret_cast<std::uintptr_t>(b.data()) % alignof(nlmsghdr) == 0; }

std::string type_name(std::uint16_t type) {
    switch (type) {
    case NLMSG_ERROR: return "NLMSG_ERROR";
    case NLMSG_DONE: return "NLMSG_DONE";
    case RTM_NEWLINK: return "RTM_NEWLINK";
    case RTM_DELLINK: return "RTM_DELLINK";
    case RTM_NEWADDR: return "RTM_NEWADDR";
    case RTM_DELADDR: return "RTM_DELADDR";
    case RTM_NEWROUTE: return "RTM_NEWROUTE";
    case RTM_DELROUTE: return "RTM_DELROUTE";
    default: return "message type " + std::to_string(type);
    }
}

// The header of one message, checked against the buffer and against the
// fixed part (`fixed_size` octets) its type must carry. Also returns the
// message cut to nlmsg_len.
struct Checked {
    nlmsghdr header;
    Bytes message;
    const std::uint8_t* payload() const { return message.data() + kHeaderSize; }
    std::size_t payload_size() const { return message.size() - kHeaderSize; }
};

expected<Checked, std::string> check_message(Bytes message, std::initializer_list<int> types, std::size_t fixed_size) {
    if (!aligned(message)) return unexpected(std::string("buffer is not 4-octet aligned"));
    if (message.size() < kHeaderSize)
        return unexpected("message of " + std::to_string(message.size()) + " octets is shorter than nlmsghdr");
    Checked c{};
    std::memcpy(&c.header, message.data(), sizeof c.header);
    if (c.header.nlmsg_len < kHeaderSize || c.header.nlmsg_len > message.size())
        return unexpected("nlmsg_len " + std::to_string(c.header.nlmsg_len) + " does not fit the " +
                          std::to_string(message.size()) + " octets received");
    bool known = false;
    for (int t : types) known = known || c.header.nlmsg_type == t;
    if (!known) return unexpected("unexpected " + type_name(c.header.nlmsg_type));
    c.message = message.first(c.header.nlmsg_len);
    if (c.payload_size() < fixed_size)
        return unexpected(type_name(c.header.nlmsg_type) + " truncated: " + std::to_string(c.payload_size()) +
                          " octets of payload, its header needs " + std::to_string(fixed_size));
    return c;
}

// An address attribute that must hold exactly one address of `family`.
expected<IpAddress, std::string> address_attribute(const nlattr* attr, IpFamily family, const char* name) {
    const std::size_t length = mnl_attr_get_payload_len(attr);
    if (length != address_length(family))
        return unexpected(std::string(name) + " is " + std::to_string(length) + " octets, an " +
                          (family == IpFamily::ipv4 ? "IPv4" : "IPv6") + " address " +
                          std::to_string(address_length(family)));
    return IpAddress::from_bytes(family, static_cast<const std::uint8_t*>(mnl_attr_get_payload(attr)));
}

// struct rtvia: a 2-octet address family in host order, then the address.
expected<IpAddress, std::string> via_attribute(const nlattr* attr) {
    const std::size_t length = mnl_attr_get_payload_len(attr);
    const auto* payload = static_cast<const std::uint8_t*>(mnl_attr_get_payload(attr));
    std::uint16_t af = 0;
    if (length < sizeof af) return unexpected(std::string("RTA_VIA is shorter than its family field"));
    std::memcpy(&af, payload, sizeof af);
    auto family = family_from_af(af);
    if (!family) return unexpected("RTA_VIA has unsupported family " + std::to_string(af));
    if (length != sizeof af + address_length(*family))
        return unexpected("RTA_VIA is " + std::to_string(length) + " octets for its family");
    return IpAddress::from_bytes(*family, payload + sizeof af);
}

std::string with_type(std::uint16_t type, const std::string& reason) { return type_name(type) + ": " + reason; }

}  // namespace

bool LinkInfo::up() const { return (flags & static_cast<unsigned>(IFF_UP)) != 0; }
bool LinkInfo::lower_up() const { return (flags & kIffLowerUp) != 0; }

NextHop next_hop_for(const RouteInfo& route, const IpAddress& destination) {
    if (route.gateway) return NextHop{.address = *route.gateway, .oif = route.oif, .via_gateway = true};
    return NextHop{.address = destination, .oif = route.oif, .via_gateway = false};
}

std::uint16_t message_type(Bytes message) {
    nlmsghdr h{};
    if (message.size() < sizeof h) return 0;
    std::memcpy(&h, message.data(), sizeof h);
    return h.nlmsg_type;
}

expected<LinkInfo, std::string> parse_link_message(Bytes message) {
    auto c = check_message(message, {RTM_NEWLINK, RTM_DELLINK}, sizeof(ifinfomsg));
    if (!c) return unexpected(c.error());
    ifinfomsg ifi{};
    std::memcpy(&ifi, c->payload(), sizeof ifi);
    const std::uint16_t type = c->header.nlmsg_type;
    if (ifi.ifi_index <= 0) return unexpected(with_type(type, "ifi_index " + std::to_string(ifi.ifi_index)));
    auto found = walk_attributes(c->message, kHeaderSize + align4(sizeof ifi), kLinkPolicy);
    if (!found) return unexpected(with_type(type, found.error()));

    LinkInfo link{.ifindex = static_cast<std::uint32_t>(ifi.ifi_index), .flags = ifi.ifi_flags};
    if (const nlattr* a = (*found)[IFLA_IFNAME]) link.name = mnl_attr_get_str(a);
    if (const nlattr* a = (*found)[IFLA_MTU]) link.mtu = mnl_attr_get_u32(a);
    return link;
}

expected<AddressInfo, std::string> parse_address_message(Bytes message) {
    auto c = check_message(message, {RTM_NEWADDR, RTM_DELADDR}, sizeof(ifaddrmsg));
    if (!c) return unexpected(c.error());
    ifaddrmsg ifa{};
    std::memcpy(&ifa, c->payload(), sizeof ifa);
    const std::uint16_t type = c->header.nlmsg_type;
    auto family = family_from_af(ifa.ifa_family);
    if (!family) return unexpected(with_type(type, "unsupported family " + std::to_string(ifa.ifa_family)));
    if (ifa.ifa_prefixlen > max_prefix_length(*family))
        return unexpected(with_type(type, "prefix length " + std::to_string(ifa.ifa_prefixlen) + " too long"));
    auto found = walk_attributes(c->message, kHeaderSize + align4(sizeof ifa), kAddressPolicy);
    if (!found) return unexpected(with_type(type, found.error()));

    // IFA_LOCAL is our own address; IFA_ADDRESS is the peer on
    // point-to-point links and the only one IPv6 sends.
    const bool local = (*found)[IFA_LOCAL] != nullptr;
    const nlattr* attr = local ? (*found)[IFA_LOCAL] : (*found)[IFA_ADDRESS];
    if (!attr) return unexpected(with_type(type, "neither IFA_LOCAL nor IFA_ADDRESS"));
    auto address = address_attribute(attr, *family, local ? "IFA_LOCAL" : "IFA_ADDRESS");
    if (!address) return unexpected(with_type(type, address.error()));

    AddressInfo info{.ifindex = ifa.ifa_index,
                     .prefix = {.address = *address, .length = ifa.ifa_prefixlen},
                     .flags = ifa.ifa_flags,
                     .scope = ifa.ifa_scope};
    if (const nlattr* a = (*found)[IFA_FLAGS]) info.flags = mnl_attr_get_u32(a);
    return info;
}

expected<RouteInfo, std::string> parse_route_message(Bytes message) {
    auto c = check_message(message, {RTM_NEWROUTE, RTM_DELROUTE}, sizeof(rtmsg));
    if (!c) return unexpected(c.error());
    rtmsg rtm{};
    std::memcpy(&rtm, c->payload(), sizeof rtm);
    const std::uint16_t type = c->header.nlmsg_type;
    auto family = family_from_af(rtm.rtm_family);
    if (!family) return unexpected(with_type(type, "unsupported family " + std::to_string(rtm.rtm_family)));
    if (rtm.rtm_dst_len > max_prefix_length(*family))
        return unexpected(with_type(type, "rtm_dst_len " + std::to_string(rtm.rtm_dst_len) + " too long"));
    auto found = walk_attributes(c->message, kHeaderSize + align4(sizeof rtm), kRoutePolicy);
    if (!found) return unexpected(with_type(type, found.error()));
    const Found& a = *found;

    RouteInfo route{.family = *family,
                    .destination = {.address = IpAddress{.family = *family, .bytes = {}}, .length = rtm.rtm_dst_len},
                    .table = rtm.rtm_table,
                    .type = rtm.rtm_type,
                    .protocol = rtm.rtm_protocol,
                    .scope = rtm.rtm_scope};
    if (a[RTA_DST]) {
        auto dst = address_attribute(a[RTA_DST], *family, "RTA_DST");
        if (!dst) return unexpected(with_type(type, dst.error()));
        route.destination.address = *dst;
    } else if (rtm.rtm_dst_len != 0) {
        return unexpected(with_type(type, "rtm_dst_len " + std::to_string(rtm.rtm_dst_len) + " without RTA_DST"));
    }
    if (a[RTA_GATEWAY]) {
        auto gateway = address_attribute(a[RTA_GATEWAY], *family, "RTA_GATEWAY");
        if (!gateway) return unexpected(with_type(type, gateway.error()));
        route.gateway = *gateway;
    } else if (a[RTA_VIA]) {
        auto via = via_attribute(a[RTA_VIA]);
        if (!via) return unexpected(with_type(type, via.error()));
        route.gateway = *via;
    }
    if (a[RTA_PREFSRC]) {
        auto source = address_attribute(a[RTA_PREFSRC], *family, "RTA_PREFSRC");
        if (!source) return unexpected(with_type(type, source.error()));
        route.preferred_source = *source;
    }
    if (a[RTA_OIF]) route.oif = mnl_attr_get_u32(a[RTA_OIF]);
    if (a[RTA_TABLE]) route.table = mnl_attr_get_u32(a[RTA_TABLE]);
    if (a[RTA_PRIORITY]) route.priority = mnl_attr_get_u32(a[RTA_PRIORITY]);
    return route;
}

expected<Ack, std::string> parse_error_message(Bytes message) {
    auto c = check_message(message, {NLMSG_ERROR, NLMSG_DONE}, sizeof(int));
    if (!c) return unexpected(c.error());
    const std::uint16_t type = c->header.nlmsg_type;
    int code = 0;
    std::memcpy(&code, c->payload(), sizeof code);
    if (code > 0 || code == INT_MIN) return unexpected(with_type(type, "error code " + std::to_string(code)));
    Ack ack{.error = -code};

    // Where the extended-ACK attributes start (linux/netlink.h): after
    // struct nlmsgerr when the kernel capped the echoed request (always for
    // success, and for errors with NETLINK_CAP_ACK), else after the whole
    // echoed request. NLMSG_DONE carries only the int.
    std::size_t tlv_offset = sizeof(int);
    if (type == NLMSG_ERROR) {
        if (c->payload_size() < sizeof(nlmsgerr))
            return unexpected(with_type(type, "truncated: " + std::to_string(c->payload_size()) +
                                                  " octets of payload, struct nlmsgerr needs " +
                                                  std::to_string(sizeof(nlmsgerr))));
        nlmsghdr original{};
        std::memcpy(&original, c->payload() + sizeof(int), sizeof original);
        tlv_offset = sizeof(nlmsgerr);
        if (!(c->header.nlmsg_flags & NLM_F_CAPPED)) {
            if (original.nlmsg_len < sizeof original || sizeof(int) + original.nlmsg_len > c->payload_size())
                return unexpected(with_type(type, "echoed request of nlmsg_len " +
                                                      std::to_string(original.nlmsg_len) + " does not fit"));
            tlv_offset = align4(sizeof(int) + original.nlmsg_len);
        }
    }
    if (!(c->header.nlmsg_flags & NLM_F_ACK_TLVS)) return ack;

    auto found = walk_attributes(c->message, kHeaderSize + tlv_offset, kExtAckPolicy);
    if (!found) return unexpected(with_type(type, "extended ACK: " + found.error()));
    if (const nlattr* a = (*found)[NLMSGERR_ATTR_MSG]) ack.kernel_message = mnl_attr_get_str(a);
    if (const nlattr* a = (*found)[NLMSGERR_ATTR_OFFS]) ack.bad_attribute_offset = mnl_attr_get_u32(a);
    return ack;
}

expected<std::vector<Bytes>, std::string> split_messages(Bytes datagram) {
    if (!aligned(datagram)) return unexpected(std::string("buffer is not 4-octet aligned"));
    if (datagram.size() > static_cast<std::size_t>(INT_MAX)) return unexpected(std::string("datagram too large"));
    std::vector<Bytes> messages;
    int remaining = static_cast<int>(datagram.size());
    const auto* header = reinterpret_cast<const nlmsghdr*>(datagram.data());
    // libmnl 1.0.4's mnl_nlmsg_ok compares (int)nlmsg_len with the rest,
    // so a length of 2^31 or more passes it as negative; check that first.
    auto fits = [](const nlmsghdr* h, int rest) {
        return rest >= static_cast<int>(sizeof(nlmsghdr)) && h->nlmsg_len <= static_cast<unsigned>(rest) &&
               mnl_nlmsg_ok(h, rest);
    };
    while (fits(header, remaining)) {
        const auto offset = static_cast<std::size_t>(reinterpret_cast<const std::uint8_t*>(header) - datagram.data());
        messages.push_back(datagram.subspan(offset, header->nlmsg_len));
        header = mnl_nlmsg_next(header, &remaining);
    }
    // mnl_nlmsg_ok stops at a header that does not fit or whose nlmsg_len
    // is below 16 or beyond the buffer; a negative rest is only the last
    // message's missing padding.
    if (remaining > 0)
        return unexpected(std::to_string(remaining) + " octets after message " + std::to_string(messages.size()) +
                          " are not a whole message (truncated, or a bad nlmsg_len)");
    return messages;
}

expected<ReplyBatch, std::string> split_reply(Bytes datagram, std::uint32_t seq) {
    auto messages = split_messages(datagram);
    if (!messages) return unexpected(messages.error());
    ReplyBatch batch;
    for (Bytes message : *messages) {
        nlmsghdr h{};
        std::memcpy(&h, message.data(), sizeof h);
        // A late answer to a request that timed out, or anything after the
        // end of ours, belongs to someone else.
        if (h.nlmsg_seq != seq || batch.ack || batch.done) {
            ++batch.foreign;
            continue;
        }
        switch (h.nlmsg_type) {
        case NLMSG_NOOP: break;
        case NLMSG_ERROR: {
            auto ack = parse_error_message(message);
            if (!ack) return unexpected(ack.error());
            batch.ack = std::move(*ack);
            break;
        }
        case NLMSG_DONE: {
            batch.done = true;
            if (message.size() < kHeaderSize + sizeof(int)) break;  // kernels before 2.6.x sent no status
            auto status = parse_error_message(message);
            if (!status) return unexpected(status.error());
            if (status->error != 0) batch.ack = std::move(*status);
            break;
        }
        case NLMSG_OVERRUN: return unexpected(std::string("NLMSG_OVERRUN: the kernel lost part of the reply"));
        default:
            if (h.nlmsg_type < NLMSG_MIN_TYPE) return unexpected("unknown control " + type_name(h.nlmsg_type));
            batch.messages.push_back(message);
        }
    }
    return batch;
}

}  // namespace ipoibd::netlink
