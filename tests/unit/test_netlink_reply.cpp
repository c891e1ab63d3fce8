// rtnetlink reply and notification parsers, with no kernel: hand-made
// messages as the kernel sends them (route replies with RTA_GATEWAY and
// RTA_OIF, errors with extended-ACK text, dumps), a table of malformed
// messages each refused with its reason, every truncation of a valid
// datagram, and the monitor's parse_notifications.
#include <gtest/gtest.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cerrno>
#include <functional>
#include <random>

#include "netlink/monitor.h"
#include "netlink/rtnl_reply.h"
#include "netlink/rtnl_request.h"
#include "test_netlink_util.h"

namespace ipoibd::netlink {
namespace {

using test::datagram;
using test::ip;
using test::prefix;
using test::TestMessage;
using Buffer = std::vector<std::uint8_t>;

constexpr std::uint32_t kSeq = 41;

// What the kernel answers to `ip route get 198.19.5.7` with a route via
// 198.18.5.2 dev ifindex 6, including attributes we do not read.
Buffer route_reply(bool with_gateway = true) {
    TestMessage m(RTM_NEWROUTE, 0, kSeq);
    auto& rtm = m.fixed<rtmsg>();
    rtm.rtm_family = AF_INET;
    rtm.rtm_dst_len = 32;
    rtm.rtm_table = RT_TABLE_MAIN;
    rtm.rtm_type = RTN_UNICAST;
    rtm.rtm_flags = RTM_F_CLONED;
    m.u32(RTA_TABLE, RT_TABLE_MAIN).address(RTA_DST, ip("198.19.5.7")).u32(RTA_OIF, 6);
    if (with_gateway) m.address(RTA_GATEWAY, ip("198.18.5.2"));
    m.address(RTA_PREFSRC, ip("198.18.5.1")).u32(RTA_UID, 0);
    const std::array<std::uint8_t, 32> cacheinfo{};
    m.attr(RTA_CACHEINFO, cacheinfo.data(), cacheinfo.size());
    return m.bytes();
}

// NLMSG_ERROR as a kernel with NETLINK_CAP_ACK and NETLINK_EXT_ACK sends it.
Buffer error_reply(int error, const std::string& text, std::uint32_t seq = kSeq) {
    TestMessage m(NLMSG_ERROR, NLM_F_CAPPED | (text.empty() ? 0 : NLM_F_ACK_TLVS), seq);
    auto& e = m.fixed<nlmsgerr>();
    e.error = -error;
    e.msg.nlmsg_len = 40;
    e.msg.nlmsg_type = RTM_NEWADDR;
    e.msg.nlmsg_seq = seq;
    if (!text.empty()) m.str(NLMSGERR_ATTR_MSG, text).u32(NLMSGERR_ATTR_OFFS, 24);
    return m.bytes();
}

Buffer done_reply(int error = 0) {
    TestMessage m(NLMSG_DONE, NLM_F_MULTI, kSeq);
    const int code = -error;
    m.raw(&code, sizeof code);
    return m.bytes();
}

Buffer address_message(int type, const char* local, const char* peer, std::uint8_t length, std::uint32_t ifindex) {
    TestMessage m(type);
    const IpAddress a = ip(peer);
    auto& ifa = m.fixed<ifaddrmsg>();
    ifa.ifa_family = address_family(a.family);
    ifa.ifa_prefixlen = length;
    ifa.ifa_index = ifindex;
    ifa.ifa_flags = IFA_F_PERMANENT;
    if (local) m.address(IFA_LOCAL, ip(local));
    m.address(IFA_ADDRESS, a);
    return m.bytes();
}

Buffer link_message(int type, std::uint32_t ifindex, unsigned flags, std::uint32_t mtu) {
    TestMessage m(type);
    auto& ifi = m.fixed<ifinfomsg>();
    ifi.ifi_index = static_cast<int>(ifindex);
    ifi.ifi_flags = flags;
    m.str(IFLA_IFNAME, "ib0").u32(IFLA_MTU, mtu).u32(IFLA_TXQLEN, 500);
    return m.bytes();
}

TEST(NetlinkReply, RouteReplyWithGatewayGivesTheGateway) {
    auto route = parse_route_message(route_reply());
    ASSERT_TRUE(route) << route.error();
    EXPECT_EQ(route->family, IpFamily::ipv4);
    EXPECT_EQ(route->destination, prefix("198.19.5.7/32"));
    EXPECT_EQ(route->gateway, ip("198.18.5.2"));
    EXPECT_EQ(route->preferred_source, ip("198.18.5.1"));
    EXPECT_EQ(route->oif, 6u);
    EXPECT_EQ(route->table, static_cast<std::uint32_t>(RT_TABLE_MAIN));
    EXPECT_EQ(route->type, RTN_UNICAST);
    EXPECT_EQ(next_hop_for(*route, ip("198.19.5.7")), (NextHop{.address = ip("198.18.5.2"), .oif = 6, .via_gateway = true}));
}

TEST(NetlinkReply, OnLinkRouteReplyGivesTheDestinationItself) {
    auto route = parse_route_message(route_reply(false));
    ASSERT_TRUE(route) << route.error();
    EXPECT_FALSE(route->gateway);
    EXPECT_EQ(next_hop_for(*route, ip("198.19.5.7")), (NextHop{.address = ip("198.19.5.7"), .oif = 6, .via_gateway = false}));
}

TEST(NetlinkReply, RtaViaGatewayOfTheOtherFamily) {
    TestMessage m(RTM_NEWROUTE);
    m.fixed<rtmsg>().rtm_family = AF_INET;
    std::array<std::uint8_t, 18> via{};
    const std::uint16_t family = AF_INET6;
    std::memcpy(via.data(), &family, 2);
    const IpAddress gateway = ip("2001:db8::2");
    std::memcpy(via.data() + 2, gateway.data(), 16);
    m.attr(RTA_VIA, via.data(), via.size());
    auto route = parse_route_message(m.bytes());
    ASSERT_TRUE(route) << route.error();
    EXPECT_EQ(route->gateway, gateway);
    EXPECT_EQ(route->destination.length, 0);  // the default route
}

TEST(NetlinkReply, ReplyAndAckInOneDatagram) {
    const Buffer d = datagram({route_reply(), error_reply(0, "")});
    auto batch = split_reply(d, kSeq);
    ASSERT_TRUE(batch) << batch.error();
    ASSERT_EQ(batch->messages.size(), 1u);
    EXPECT_EQ(message_type(batch->messages[0]), RTM_NEWROUTE);
    ASSERT_TRUE(batch->ack);
    EXPECT_EQ(batch->ack->error, 0);
    EXPECT_FALSE(batch->done);
    EXPECT_EQ(batch->foreign, 0u);
}

TEST(NetlinkReply, ErrorCarriesTheKernelsExtendedAckText) {
    auto ack = parse_error_message(error_reply(EEXIST, "ipv4: Address already assigned"));
    ASSERT_TRUE(ack) << ack.error();
    EXPECT_EQ(ack->error, EEXIST);
    EXPECT_EQ(ack->kernel_message, "ipv4: Address already assigned");
    EXPECT_EQ(ack->bad_attribute_offset, 24u);
}

TEST(NetlinkReply, UncappedErrorEchoesTheRequestBeforeTheText) {
    // Without NETLINK_CAP_ACK the whole request comes back between the
    // error code and the attributes.
    const Buffer request = build_address_change(Change::add, 5, prefix("198.18.0.1/24")).bytes;
    TestMessage m(NLMSG_ERROR, NLM_F_ACK_TLVS, kSeq);
    const int code = -EEXIST;
    m.raw(&code, sizeof code).raw(request.data(), request.size());
    m.str(NLMSGERR_ATTR_MSG, "ipv4: Address already assigned");
    auto ack = parse_error_message(m.bytes());
    ASSERT_TRUE(ack) << ack.error();
    EXPECT_EQ(ack->error, EEXIST);
    EXPECT_EQ(ack->kernel_message, "ipv4: Address already assigned");
    EXPECT_FALSE(ack->bad_attribute_offset);
}

TEST(NetlinkReply, ErrorWithoutExtendedAck) {
    auto ack = parse_error_message(error_reply(ENETUNREACH, ""));
    ASSERT_TRUE(ack) << ack.error();
    EXPECT_EQ(ack->error, ENETUNREACH);
    EXPECT_TRUE(ack->kernel_message.empty());
}

TEST(NetlinkReply, DumpEndsWithDoneAndSkipsOthersMessages) {
    const Buffer first = datagram({address_message(RTM_NEWADDR, "198.18.0.1", "198.18.0.1", 24, 5),
                                   error_reply(EPERM, "", kSeq - 1),  // a late answer to an older request
                                   address_message(RTM_NEWADDR, nullptr, "2001:db8::1", 64, 5)});
    // Dump messages carry the request's sequence number.
    Buffer fixed_seq = first;
    for (std::size_t off = 0; off < fixed_seq.size();) {
        nlmsghdr h{};
        std::memcpy(&h, fixed_seq.data() + off, sizeof h);
        if (h.nlmsg_type == RTM_NEWADDR) {
            h.nlmsg_seq = kSeq;
            std::memcpy(fixed_seq.data() + off, &h, sizeof h);
        }
        off += (h.nlmsg_len + 3u) & ~3u;
    }
    auto batch = split_reply(fixed_seq, kSeq);
    ASSERT_TRUE(batch) << batch.error();
    EXPECT_EQ(batch->messages.size(), 2u);
    EXPECT_EQ(batch->foreign, 1u);
    EXPECT_FALSE(batch->ack);
    EXPECT_FALSE(batch->done);

    auto end = split_reply(done_reply(), kSeq);
    ASSERT_TRUE(end) << end.error();
    EXPECT_TRUE(end->done);
    EXPECT_FALSE(end->ack);

    auto failed = split_reply(done_reply(EINTR), kSeq);
    ASSERT_TRUE(failed) << failed.error();
    EXPECT_TRUE(failed->done);
    ASSERT_TRUE(failed->ack);
    EXPECT_EQ(failed->ack->error, EINTR);
}

TEST(NetlinkReply, NoopIsSkippedAndOverrunIsRefused) {
    auto noop = split_reply(datagram({TestMessage(NLMSG_NOOP, 0, kSeq).bytes(), error_reply(0, "")}), kSeq);
    ASSERT_TRUE(noop) << noop.error();
    EXPECT_TRUE(noop->messages.empty());
    EXPECT_TRUE(noop->ack);
    auto overrun = split_reply(TestMessage(NLMSG_OVERRUN, 0, kSeq).bytes(), kSeq);
    ASSERT_FALSE(overrun);
    EXPECT_NE(overrun.error().find("NLMSG_OVERRUN"), std::string::npos);
}

TEST(NetlinkReply, AddressMessages) {
    // IPv4 point-to-point: IFA_LOCAL is ours, IFA_ADDRESS the peer.
    auto v4 = parse_address_message(address_message(RTM_NEWADDR, "198.18.0.1", "198.18.0.9", 24, 5));
    ASSERT_TRUE(v4) << v4.error();
    EXPECT_EQ(v4->ifindex, 5u);
    EXPECT_EQ(v4->prefix, prefix("198.18.0.1/24"));
    EXPECT_EQ(v4->flags, static_cast<std::uint32_t>(IFA_F_PERMANENT));

    // IPv6 sends IFA_ADDRESS only; IFA_FLAGS overrides the 8-bit field.
    Buffer v6_bytes = address_message(RTM_DELADDR, nullptr, "2001:db8:5::1", 64, 7);
    TestMessage with_flags(RTM_NEWADDR);
    auto& ifa = with_flags.fixed<ifaddrmsg>();
    ifa.ifa_family = AF_INET6;
    ifa.ifa_prefixlen = 64;
    ifa.ifa_index = 7;
    with_flags.address(IFA_ADDRESS, ip("2001:db8:5::1")).u32(IFA_FLAGS, IFA_F_NODAD | IFA_F_NOPREFIXROUTE);
    auto v6 = parse_address_message(with_flags.bytes());
    ASSERT_TRUE(v6) << v6.error();
    EXPECT_EQ(v6->prefix, prefix("2001:db8:5::1/64"));
    EXPECT_EQ(v6->flags, static_cast<std::uint32_t>(IFA_F_NODAD | IFA_F_NOPREFIXROUTE));
    EXPECT_TRUE(parse_address_message(v6_bytes));
}

TEST(NetlinkReply, LinkMessage) {
    auto link = parse_link_message(link_message(RTM_NEWLINK, 4, IFF_UP | IFF_RUNNING | (1u << 16), 2044));
    ASSERT_TRUE(link) << link.error();
    EXPECT_EQ(link->ifindex, 4u);
    EXPECT_EQ(link->name, "ib0");
    EXPECT_EQ(link->mtu, 2044u);
    EXPECT_TRUE(link->up());
    EXPECT_TRUE(link->lower_up());
    auto down = parse_link_message(link_message(RTM_NEWLINK, 4, 0, 1500));
    ASSERT_TRUE(down);
    EXPECT_FALSE(down->up());
    EXPECT_FALSE(down->lower_up());
}

// One malformed input per row: which parser, the bytes, and a word the
// refusal must contain.
struct MalformedCase {
    const char* name;
    std::function<Buffer()> make;
    std::function<std::optional<std::string>(const Buffer&)> parse;  // the error, or nullopt when accepted
    const char* reason;
};

template <class F>
std::function<std::optional<std::string>(const Buffer&)> refusal(F parser) {
    return [parser](const Buffer& b) -> std::optional<std::string> {
        auto r = parser(b);
        if (r) return std::nullopt;
        return r.error();
    };
}

Buffer with_header(Buffer b, std::uint32_t len) {
    std::memcpy(b.data(), &len, sizeof len);
    return b;
}

Buffer route_with(const std::function<void(TestMessage&)>& fill, std::uint8_t dst_len = 32, std::uint8_t family = AF_INET) {
    TestMessage m(RTM_NEWROUTE);
    auto& rtm = m.fixed<rtmsg>();
    rtm.rtm_family = family;
    rtm.rtm_dst_len = dst_len;
    fill(m);
    return m.bytes();
}

const auto route_parser = refusal([](const Buffer& b) { return parse_route_message(b); });
const auto error_parser = refusal([](const Buffer& b) { return parse_error_message(b); });
const auto split_parser = refusal([](const Buffer& b) { return split_messages(b); });

const MalformedCase kMalformed[] = {
    {"shorter than a header", [] { return Buffer(10, 0); }, split_parser, "not a whole message"},
    {"nlmsg_len past the datagram",
     [] {
         Buffer b = route_reply();
         b.resize(b.size() - 8);
         return b;
     },
     split_parser, "not a whole message"},
    {"nlmsg_len below the header", [] { return with_header(route_reply(), 8); }, split_parser, "not a whole message"},
    {"garbage after the last message",
     [] {
         Buffer b = route_reply();
         b.insert(b.end(), {0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0});
         return b;
     },
     split_parser, "octets after message 1"},
    {"route nlmsg_len past the buffer", [] { return with_header(route_reply(), 400); }, route_parser, "does not fit"},
    {"route payload shorter than rtmsg",
     [] { return with_header(route_reply(), 16 + 8); }, route_parser, "truncated"},
    {"attribute nla_len past the message",
     [] {
         Buffer b = route_reply();
         const std::uint16_t big = 200;
         std::memcpy(b.data() + 16 + 12, &big, 2);  // the first attribute's nla_len
         return b;
     },
     route_parser, "bad nla_len"},
    {"attribute nla_len below its header",
     [] {
         Buffer b = route_reply();
         const std::uint16_t tiny = 2;
         std::memcpy(b.data() + 16 + 12, &tiny, 2);
         return b;
     },
     route_parser, "bad nla_len"},
    {"RTA_GATEWAY of 3 octets",
     [] {
         return route_with([](TestMessage& m) {
             const std::uint8_t g[3] = {198, 18, 5};
             m.attr(RTA_GATEWAY, g, sizeof g);
         }, 0);
     },
     route_parser, "RTA_GATEWAY is 3 octets"},
    {"RTA_OIF of 2 octets",
     [] {
         return route_with([](TestMessage& m) {
             const std::uint16_t oif = 6;
             m.attr(RTA_OIF, &oif, sizeof oif);
         }, 0);
     },
     route_parser, "RTA_OIF is malformed"},
    {"IPv6 RTA_DST in an IPv4 route",
     [] { return route_with([](TestMessage& m) { m.address(RTA_DST, ip("2001:db8::1")); }); }, route_parser,
     "RTA_DST is 16 octets"},
    {"rtm_dst_len 33", [] { return route_with([](TestMessage&) {}, 33); }, route_parser, "too long"},
    {"rtm_dst_len without RTA_DST", [] { return route_with([](TestMessage&) {}, 24); }, route_parser,
     "without RTA_DST"},
    {"unknown family", [] { return route_with([](TestMessage&) {}, 0, AF_PACKET); }, route_parser,
     "unsupported family"},
    {"address message given to the route parser",
     [] { return address_message(RTM_NEWADDR, nullptr, "198.18.0.1", 24, 1); }, route_parser, "unexpected RTM_NEWADDR"},
    {"RTA_VIA without an address",
     [] {
         return route_with([](TestMessage& m) {
             const std::uint16_t family = AF_INET6;
             m.attr(RTA_VIA, &family, sizeof family);
         }, 0);
     },
     route_parser, "RTA_VIA is 2 octets"},
    {"error shorter than nlmsgerr",
     [] {
         TestMessage m(NLMSG_ERROR);
         const int code = -EPERM;
         m.raw(&code, sizeof code);
         return m.bytes();
     },
     error_parser, "struct nlmsgerr needs"},
    {"error echoing more than it holds",
     [] {
         TestMessage m(NLMSG_ERROR);
         m.fixed<nlmsgerr>().msg.nlmsg_len = 1000;
         return m.bytes();
     },
     error_parser, "does not fit"},
    {"extended-ACK text without its NUL",
     [] {
         TestMessage m(NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS);
         m.fixed<nlmsgerr>().error = -EEXIST;
         m.attr(NLMSGERR_ATTR_MSG, "abcd", 4);
         return m.bytes();
     },
     error_parser, "NLMSGERR_ATTR_MSG is malformed"},
    {"positive error code",
     [] {
         TestMessage m(NLMSG_ERROR, NLM_F_CAPPED);
         m.fixed<nlmsgerr>().error = 17;
         return m.bytes();
     },
     error_parser, "error code 17"},
};

TEST(NetlinkReply, MalformedMessagesAreRefusedWithAReason) {
    for (const MalformedCase& c : kMalformed) {
        SCOPED_TRACE(c.name);
        const Buffer bytes = c.make();
        auto error = c.parse(bytes);
        ASSERT_TRUE(error) << "accepted";
        EXPECT_NE(error->find(c.reason), std::string::npos) << *error;
    }
}

TEST(NetlinkReply, MisalignedBufferIsRefused) {
    Buffer b = route_reply();
    b.insert(b.begin(), 0);
    auto r = parse_route_message(Bytes(b).subspan(1));
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("aligned"), std::string::npos);
}

// Every prefix of a valid datagram, copied to a buffer of exactly that size
// (so AddressSanitizer sees any read past it), is parsed or refused, never
// overrun.
TEST(NetlinkReply, EveryTruncationIsHandled) {
    const Buffer whole = datagram({route_reply(), address_message(RTM_NEWADDR, "198.18.0.1", "198.18.0.1", 24, 5),
                                   link_message(RTM_NEWLINK, 4, IFF_UP, 2044), error_reply(EEXIST, "text")});
    for (std::size_t n = 0; n <= whole.size(); ++n) {
        const Buffer cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
        auto batch = split_reply(cut, kSeq);
        if (n == whole.size()) {
            ASSERT_TRUE(batch) << batch.error();
        }
        std::vector<MonitorEvent> events;
        MonitorCounters counters;
        parse_notifications(cut, events, counters);
        (void)parse_route_message(cut);
        (void)parse_error_message(cut);
    }
}

// Random octet flips in a valid datagram: no crash, no read out of bounds.
TEST(NetlinkReply, CorruptedDatagramsNeverCrash) {
    const Buffer whole = datagram({route_reply(), address_message(RTM_NEWADDR, "198.18.0.1", "198.18.0.1", 24, 5),
                                   link_message(RTM_NEWLINK, 4, IFF_UP, 2044), error_reply(EEXIST, "text")});
    std::mt19937 rng(1234);
    for (int round = 0; round < 2000; ++round) {
        Buffer b = whole;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<std::uint8_t>(rng());
        (void)split_reply(b, kSeq);
        std::vector<MonitorEvent> events;
        MonitorCounters counters;
        parse_notifications(b, events, counters);
        EXPECT_LE(events.size(), b.size() / 16);  // at most one per header-sized piece
    }
}

TEST(NetlinkMonitorParse, NotificationsBecomeTypedEvents) {
    TestMessage neighbour(RTM_NEWNEIGH);
    neighbour.fixed<ndmsg>().ndm_family = AF_INET;
    const Buffer d = datagram({link_message(RTM_NEWLINK, 4, IFF_UP, 2044),
                               address_message(RTM_NEWADDR, "198.18.5.1", "198.18.5.1", 24, 4),
                               address_message(RTM_DELADDR, nullptr, "2001:db8:5::1", 64, 4),
                               route_reply(),
                               neighbour.bytes(),
                               route_with([](TestMessage&) {}, 24),  // malformed: no RTA_DST
                               link_message(RTM_DELLINK, 4, 0, 2044)});
    std::vector<MonitorEvent> events;
    MonitorCounters counters;
    std::string last_error;
    parse_notifications(d, events, counters, &last_error);
    ASSERT_EQ(events.size(), 5u);

    const auto& link = std::get<LinkEvent>(events[0]);
    EXPECT_EQ(link.link.ifindex, 4u);
    EXPECT_EQ(link.link.mtu, 2044u);
    EXPECT_TRUE(link.link.up());
    EXPECT_FALSE(link.removed);

    const auto& added = std::get<AddressEvent>(events[1]);
    EXPECT_FALSE(added.removed);
    EXPECT_EQ(added.address.ifindex, 4u);
    EXPECT_EQ(added.address.prefix, prefix("198.18.5.1/24"));

    const auto& removed = std::get<AddressEvent>(events[2]);
    EXPECT_TRUE(removed.removed);
    EXPECT_EQ(removed.address.prefix.address.family, IpFamily::ipv6);
    EXPECT_EQ(removed.address.prefix, prefix("2001:db8:5::1/64"));

    const auto& route = std::get<RouteEvent>(events[3]);
    EXPECT_EQ(route.route.gateway, ip("198.18.5.2"));
    EXPECT_TRUE(std::get<LinkEvent>(events[4]).removed);

    EXPECT_EQ(counters, (MonitorCounters{.link_events = 2, .address_events = 2, .route_events = 1, .malformed = 1, .ignored = 1}));
    EXPECT_NE(last_error.find("without RTA_DST"), std::string::npos) << last_error;
}

TEST(NetlinkMonitorParse, BrokenFramingCountsTheDatagramOnce) {
    Buffer d = datagram({link_message(RTM_NEWLINK, 4, IFF_UP, 2044)});
    d.resize(d.size() - 4);
    std::vector<MonitorEvent> events;
    MonitorCounters counters;
    parse_notifications(d, events, counters);
    EXPECT_TRUE(events.empty());
    EXPECT_EQ(counters.malformed, 1u);
}

}  // namespace
}  // namespace ipoibd::netlink
