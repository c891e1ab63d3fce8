// libFuzzer target for what the kernel's rtnetlink sends the daemon
// (netlink/rtnl_reply.h, netlink/monitor.h): a reply datagram split and
// parsed as the request code reads it, and a notification datagram as the
// monitor reads it.
//
// Input: a received datagram, the first 4 bytes the sequence number of the
// request it would answer.
//
// Invariants checked (a violation aborts):
//   - split_messages() gives spans inside the datagram, each at least a
//     netlink header long, in order, not overlapping;
//   - split_reply() keeps only messages of its sequence number, fewer than
//     the datagram's;
//   - every message parser either refuses with a reason or gives prefix
//     lengths within their family's bits;
//   - parse_notifications() counts every message once (an event, malformed
//     or ignored) and emits no more events than messages.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include <linux/netlink.h>

#include "netlink/monitor.h"
#include "netlink/rtnl_reply.h"

using namespace ipoibd;
using namespace ipoibd::netlink;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 4 || size > 1 << 16) return 0;
    const std::uint32_t seq = static_cast<std::uint32_t>(data[0]) | static_cast<std::uint32_t>(data[1]) << 8 |
                              static_cast<std::uint32_t>(data[2]) << 16 | static_cast<std::uint32_t>(data[3]) << 24;
    const Bytes datagram(data + 4, size - 4);

    std::size_t messages = 0;
    bool framed = false;
    if (auto split = split_messages(datagram)) {
        framed = true;
        const std::uint8_t* last_end = datagram.data();
        for (Bytes m : *split) {
            check(m.size() >= NLMSG_HDRLEN);
            check(m.data() >= last_end && m.data() + m.size() <= datagram.data() + datagram.size());
            last_end = m.data() + m.size();
            (void)message_type(m);
            if (auto link = parse_link_message(m); !link) check(!link.error().empty());
            if (auto address = parse_address_message(m))
                check(address->prefix.length <= max_prefix_length(address->prefix.address.family));
            else check(!address.error().empty());
            if (auto route = parse_route_message(m))
                check(route->destination.length <= max_prefix_length(route->destination.address.family));
            else check(!route.error().empty());
            if (auto ack = parse_error_message(m)) check(ack->error >= 0);
            else check(!ack.error().empty());
        }
        messages = split->size();
    } else {
        check(!split.error().empty());
    }
    if (auto reply = split_reply(datagram, seq)) {
        check(reply->messages.size() + reply->foreign <= messages);
    }

    std::vector<MonitorEvent> events;
    MonitorCounters counters;
    std::string why;
    parse_notifications(datagram, events, counters, &why);
    // Each message counts once: an event, malformed or ignored (a datagram
    // whose framing is broken as one malformed).
    check(events.size() <= messages);
    check(counters.link_events + counters.address_events + counters.route_events + counters.malformed +
              counters.ignored == (framed ? messages : 1));
    return 0;
}
