// The rtnetlink monitor: a second netlink socket that listens to the
// kernel's multicast notifications about links, addresses and routes, so the
// daemon hears about changes made behind its back (`ip link set ib0 mtu`,
// `ip route add ... via G dev ib0`, an address removed by an operator).
//
// Flow:
//   1. open() subscribes to RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR,
//      RTNLGRP_IPV6_IFADDR, RTNLGRP_IPV4_ROUTE and RTNLGRP_IPV6_ROUTE on a
//      non-blocking socket with a large receive buffer;
//   2. the epoll loop sees fd() readable and calls drain(), which reads at
//      most max_datagrams_per_drain datagrams (STYLE.md guideline 6: a
//      batch per wake-up; level-triggered epoll calls again if more wait);
//   3. parse_notifications turns each datagram into typed events:
//      LinkEvent (state, MTU, up/down of one ifindex), AddressEvent (added or
//      removed, ifindex, family, address, prefix length), RouteEvent (a route
//      changed: the daemon clears NextHopCache);
//   4. a malformed message is counted and skipped, never fatal;
//   5. when the socket's queue overflowed the kernel drops notifications and
//      the next recv fails with ENOBUFS. Nothing that was lost can be
//      recovered from the socket, so drain() emits ResyncNeeded and counts an
//      overrun: the daemon re-reads what it cares about (get_link,
//      list_addresses) and clears its caches.
//
// Events carry the state the kernel reports, not a difference: RTM_NEWLINK
// is sent for any change to a link, without saying which. The daemon keeps
// the previous MTU and flags of its one interface and compares, as networkd
// does. Notifications of every link arrive; filtering by ifindex is the
// caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "common/counters.h"
#include "common/expected.h"
#include "common/sys_error.h"
#include "netlink/rtnl_reply.h"

struct mnl_socket;

namespace ipoibd::netlink {

struct LinkEvent {
    LinkInfo link;         // ifindex, name, flags (up(), lower_up()), mtu
    bool removed = false;  // RTM_DELLINK
};

struct AddressEvent {
    AddressInfo address;   // ifindex, prefix (family, address, length), flags
    bool removed = false;  // RTM_DELADDR
};

struct RouteEvent {
    RouteInfo route;
    bool removed = false;  // RTM_DELROUTE
};

// The kernel dropped notifications (ENOBUFS): cached state may be stale.
struct ResyncNeeded {};

using MonitorEvent = std::variant<LinkEvent, AddressEvent, RouteEvent, ResyncNeeded>;

// Everything the monitor saw, for `ipoibctl` counters.
struct MonitorCounters {
    std::uint64_t datagrams = 0;
    std::uint64_t link_events = 0;
    std::uint64_t address_events = 0;
    std::uint64_t route_events = 0;
    std::uint64_t malformed = 0;       // messages (or whole datagrams) refused by the parsers
    std::uint64_t ignored = 0;         // well-formed messages of other types (NLMSG_NOOP, RTM_NEWNEIGH...)
    std::uint64_t overruns = 0;        // ENOBUFS: the kernel dropped notifications
    std::uint64_t receive_errors = 0;  // any other recv failure; ENOSPC (a datagram larger than the buffer) also resyncs
    bool operator==(const MonitorCounters&) const = default;
};
// As "netlink_datagrams", "netlink_overruns", ...
void visit(const MonitorCounters& c, CounterSink& out);

// Pure: appends the events of one received datagram to `events`, counting
// every message in `counters`. When `last_error` is given, the reason the
// last malformed message was refused is written there (for a rate-limited
// debug log).
void parse_notifications(Bytes datagram, std::vector<MonitorEvent>& events, MonitorCounters& counters,
                         std::string* last_error = nullptr);

class RtnlMonitor {
public:
    struct Options {
        // SO_RCVBUF asked for; the kernel caps it at net.core.rmem_max
        // (root gets exactly this through SO_RCVBUFFORCE). Bigger means
        // fewer overruns when many routes change at once.
        int receive_buffer = 1 << 20;
        std::size_t max_datagrams_per_drain = 64;
    };
    static constexpr std::size_t kReceiveBufferSize = 32 * 1024;

    static expected<RtnlMonitor, SysError> open(Options options);
    static expected<RtnlMonitor, SysError> open() { return open(Options{}); }

    RtnlMonitor(RtnlMonitor&&) noexcept;
    RtnlMonitor& operator=(RtnlMonitor&&) noexcept;
    ~RtnlMonitor();

    // Non-blocking, close-on-exec; readable when notifications wait.
    int fd() const;

    // Reads the waiting notifications until EAGAIN, at most
    // max_datagrams_per_drain datagrams, and returns their events in
    // order. A lost notification (ENOBUFS, or ENOSPC for one too large for
    // the buffer) yields ResyncNeeded at the point of the loss.
    std::vector<MonitorEvent> drain();

    const MonitorCounters& counters() const { return counters_; }
    // Why the last malformed message was refused, or the last recv error.
    const std::string& last_error() const { return last_error_; }

private:
    struct MnlClose {
        void operator()(mnl_socket* s) const;
    };
    RtnlMonitor(std::unique_ptr<mnl_socket, MnlClose> socket, Options options);

    std::unique_ptr<mnl_socket, MnlClose> socket_;
    Options options_;
    std::vector<std::uint8_t> buffer_;
    MonitorCounters counters_;
    std::string last_error_;
};

}  // namespace ipoibd::netlink
