// rtnetlink reply and notification parsers: pure functions from received
// bytes to typed results. The kernel is trusted, but the bytes are still
// untrusted input (STYLE.md guideline 8): a future kernel may add fields, a
// bug may truncate, a fuzzer will try everything. So every length is checked
// against the buffer before it is used, and a malformed message is refused
// with a reason, never read past its end.
//
// Layers, each on libmnl's walkers (mnl_nlmsg_ok/next, mnl_attr_parse_payload,
// mnl_attr_validate) with the bounds libmnl leaves to the caller added here:
//   1. split_messages: one datagram -> whole messages (nlmsg_len checked;
//      bytes left after the last message are an error, not ignored);
//   2. split_reply: the messages of one datagram that answer request `seq`:
//      data messages, the final NLMSG_ERROR (the ACK, with the kernel's
//      extended-ACK text) or NLMSG_DONE; others' messages are skipped;
//   3. parse_*_message: one message -> LinkInfo, AddressInfo, RouteInfo or
//      Ack. The attribute policies (which type must be how long) sit in one
//      table per message kind in rtnl_reply.cpp, as sd-netlink keeps them.
//
// The same parse_*_message functions read replies to our requests and
// multicast notifications (monitor.h): the kernel sends both in one format.
// Buffers must start 4-octet aligned (any std::vector or receive buffer
// does); a misaligned one is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/expected.h"
#include "common/ip_address.h"

namespace ipoibd::netlink {

using Bytes = std::span<const std::uint8_t>;

// RTM_NEWLINK / RTM_DELLINK.
struct LinkInfo {
    std::uint32_t ifindex = 0;
    std::string name;         // IFLA_IFNAME, empty when absent
    std::uint32_t flags = 0;  // ifi_flags: IFF_UP, IFF_RUNNING, IFF_LOWER_UP...
    std::uint32_t mtu = 0;    // IFLA_MTU, 0 when absent
    bool up() const;          // administratively up (IFF_UP)
    bool lower_up() const;    // carrier (IFF_LOWER_UP); a TUN has it while its fd is open
};

// RTM_NEWADDR / RTM_DELADDR.
struct AddressInfo {
    std::uint32_t ifindex = 0;
    IpPrefix prefix;          // IFA_LOCAL when present (IPv4), else IFA_ADDRESS
    std::uint32_t flags = 0;  // IFA_FLAGS when present, else ifa_flags: IFA_F_NODAD, IFA_F_TENTATIVE...
    std::uint8_t scope = 0;   // RT_SCOPE_*
    bool operator==(const AddressInfo&) const = default;
};

// RTM_NEWROUTE / RTM_DELROUTE.
struct RouteInfo {
    IpFamily family = IpFamily::ipv4;
    IpPrefix destination;               // RTA_DST / rtm_dst_len; length 0 is the default route
    std::optional<IpAddress> gateway;   // RTA_GATEWAY, or RTA_VIA (may be the other family)
    std::optional<IpAddress> preferred_source;  // RTA_PREFSRC
    std::uint32_t oif = 0;              // RTA_OIF, 0 when absent
    std::uint32_t table = 0;            // RTA_TABLE, else rtm_table
    std::uint32_t priority = 0;         // RTA_PRIORITY (metric)
    std::uint8_t type = 0;              // RTN_UNICAST, RTN_LOCAL, RTN_UNREACHABLE...
    std::uint8_t protocol = 0;          // RTPROT_*
    std::uint8_t scope = 0;             // RT_SCOPE_*
};

// Where the kernel sends a packet for some destination: the gateway when the
// route has one, else the destination itself (it is on the link).
struct NextHop {
    IpAddress address;
    std::uint32_t oif = 0;
    bool via_gateway = false;
    bool operator==(const NextHop&) const = default;
};
NextHop next_hop_for(const RouteInfo& route, const IpAddress& destination);

// NLMSG_ERROR (and an NLMSG_DONE carrying an error): error 0 is an ACK.
struct Ack {
    int error = 0;                 // positive errno, 0 for success
    std::string kernel_message;    // NLMSGERR_ATTR_MSG, empty when absent
    std::optional<std::uint32_t> bad_attribute_offset;  // NLMSGERR_ATTR_OFFS, into our request
};

expected<LinkInfo, std::string> parse_link_message(Bytes message);
expected<AddressInfo, std::string> parse_address_message(Bytes message);
expected<RouteInfo, std::string> parse_route_message(Bytes message);
expected<Ack, std::string> parse_error_message(Bytes message);  // NLMSG_ERROR or NLMSG_DONE

// nlmsg_type of a message split_messages returned (its length is checked).
std::uint16_t message_type(Bytes message);

// Every message of one datagram, each span exactly nlmsg_len long.
expected<std::vector<Bytes>, std::string> split_messages(Bytes datagram);

// What one received datagram says about the request numbered `seq`.
struct ReplyBatch {
    std::vector<Bytes> messages;  // its data messages (RTM_NEWROUTE, ...), in order
    std::optional<Ack> ack;       // the NLMSG_ERROR ending it (error 0: success)
    bool done = false;            // NLMSG_DONE ended a dump (an error in it is in ack)
    std::size_t foreign = 0;      // messages for another sequence number, skipped
};
expected<ReplyBatch, std::string> split_reply(Bytes datagram, std::uint32_t seq);

}  // namespace ipoibd::netlink
