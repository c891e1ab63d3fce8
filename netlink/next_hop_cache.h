// NextHopCache: destination IP -> the next hop the kernel chose for it.
//
// Why: a TUN device is handed IP packets but never told which route the
// kernel picked. For `ip route add 198.19.0.0/16 via 198.18.0.2 dev ib0` the
// packet for 198.19.5.7 must go to the IPoIB link address of 198.18.0.2, so
// the daemon must resolve the gateway, not the destination (DESIGN.md, "TUN
// and routing"). Asking the kernel (RTM_GETROUTE) per packet would cost a
// syscall round trip each; this cache asks once per destination.
//
// Flow of one egress packet in the daemon:
//   1. read a packet from the TUN, take its destination address;
//   2. resolve(destination): a hit returns the cached next hop; a miss calls
//      the injected lookup (NetlinkSocket::lookup_next_hop in the daemon, a
//      fake in tests) and caches its answer;
//   3. the next hop is the gateway for `via` routes, and the destination
//      itself for on-link ones; it goes to the neighbour cache
//      (ipoib/neighbour_cache.h), which resolves it to a link address.
//      The answer also names the output interface: a gateway of a route
//      by another link (the packet reached the TUN by IP_PKTINFO,
//      SO_BINDTODEVICE or a packet socket, or the routes changed since) is
//      no neighbour on the fabric, so the TUN port sends such a packet as
//      on-link, counted (host/tun_port.h gateway_of).
//
// Invalidation: any route notification (monitor.h RouteEvent) or
// ResyncNeeded clears the whole cache; so should link and address events
// of the daemon's interface, because IPv4 removes the routes of a downed
// link or a deleted address without sending RTM_DELROUTE. Clearing all is
// simple and cheap: route changes are rare, and refilling costs one lookup
// per active destination.
//
// Bounded: at most `capacity` entries; inserting into a full cache evicts the
// oldest-inserted entry (a FIFO; scans of many destinations cannot pin
// memory). The kernel's "no route" (ENETUNREACH, EHOSTUNREACH) is cached
// like an answer, until the next invalidation: a datagram bound to the TUN
// (IP_PKTINFO, SO_BINDTODEVICE) needs no route (IPv4 then takes its
// destination as on-link), and with no route at all (no default route)
// every such packet cost a netlink round trip before (~10 us), for any
// local sender naming destination after destination. Other failures (a
// timeout, ENOBUFS) are not cached: the next packet asks again.
//
// Sans-I/O apart from the lookup callback: no sockets, no clocks.
//
// Limits: the key is the destination only. With policy routing (ip rule by
// source, mark or TOS) the kernel's choice for the packet may differ from a
// destination-only RTM_GETROUTE; such setups are not supported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_map>

#include "common/expected.h"
#include "common/ip_address.h"
#include "netlink/netlink_error.h"
#include "netlink/rtnl_reply.h"

namespace ipoibd::netlink {

// Asks the kernel for the next hop of one destination (RTM_GETROUTE).
using NextHopLookup = std::function<expected<NextHop, NetlinkError>(const IpAddress& destination)>;

struct NextHopCounters {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;          // each one a lookup
    std::uint64_t lookups_failed = 0;  // misses whose lookup failed (only "no route" cached)
    std::uint64_t no_route_hits = 0;   // hits on a cached "no route"
    std::uint64_t invalidations = 0;   // invalidate() calls
    std::uint64_t evictions = 0;       // entries dropped to make room
    bool operator==(const NextHopCounters&) const = default;
};

class NextHopCache {
public:
    static constexpr std::size_t kDefaultCapacity = 4096;

    // `capacity` of 0 is taken as 1.
    explicit NextHopCache(NextHopLookup lookup, std::size_t capacity = kDefaultCapacity);

    // The next hop for `destination`, from the cache or from one lookup.
    // The lookup's error is returned as is.
    expected<NextHop, NetlinkError> resolve(const IpAddress& destination);

    // The cached next hop, without looking up or counting.
    std::optional<NextHop> peek(const IpAddress& destination) const;

    // Forgets every entry: routes changed.
    void invalidate();

    std::size_t size() const { return entries_.size(); }
    std::size_t capacity() const { return capacity_; }
    const NextHopCounters& counters() const { return counters_; }

private:
    NextHopLookup lookup_;
    std::size_t capacity_;
    // nullopt: the kernel said there is no route (its errno kept).
    struct Entry {
        std::optional<NextHop> hop;
        int error = 0;
    };
    std::unordered_map<IpAddress, Entry, IpAddressHash> entries_;
    std::deque<IpAddress> insertion_order_;  // front: the oldest entry; same keys as entries_
    NextHopCounters counters_;
};

}  // namespace ipoibd::netlink
