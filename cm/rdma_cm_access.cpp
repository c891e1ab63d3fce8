#include "cm/rdma_cm_access.h"

#include <fcntl.h>
#include <infiniband/ib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <vector>

namespace ipoibd::cm {

namespace {

constexpr int kResolveTimeoutMs = 2000;

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

sockaddr_ib ib_address(const ib::Gid& gid, std::uint16_t pkey, std::uint64_t service_id, bool with_service) {
    sockaddr_ib a{};
    a.sib_family = AF_IB;
    a.sib_pkey = htobe16(pkey);
    std::memcpy(&a.sib_addr, gid.data(), gid.size());
    if (with_service) {
        a.sib_sid = htobe64(service_id);
        a.sib_sid_mask = htobe64(~std::uint64_t{0});
    }
    return a;
}

}  // namespace

void visit(const RdmaCmCounters& c, CounterSink& out) {
    out.counter("rdmacm_connects", c.connects);
    out.counter("rdmacm_connect_responses", c.connect_responses);
    out.counter("rdmacm_established", c.established);
    out.counter("rdmacm_rejected", c.rejected);
    out.counter("rdmacm_unreachable", c.unreachable);
    out.counter("rdmacm_disconnected", c.disconnected);
    out.counter("rdmacm_call_errors", c.call_errors);
    out.counter("rdmacm_events", c.events);
}

expected<std::unique_ptr<RdmaCmAccess>, std::string> RdmaCmAccess::open(std::uint64_t ca_guid) {
    rdma_event_channel* channel = rdma_create_event_channel();
    if (!channel) return unexpected(errno_text("rdma_create_event_channel"));
    const int flags = ::fcntl(channel->fd, F_GETFL);
    if (flags < 0 || ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        const std::string why = errno_text("fcntl(O_NONBLOCK)");
        rdma_destroy_event_channel(channel);
        return unexpected(why);
    }
    // AF_IB must work: librdmacm's own probe binds an AF_IB id too.
    rdma_cm_id* probe = nullptr;
    if (rdma_create_id(channel, &probe, nullptr, RDMA_PS_IB) != 0) {
        const std::string why = errno_text("rdma_create_id(RDMA_PS_IB)");
        rdma_destroy_event_channel(channel);
        return unexpected(why);
    }
    sockaddr_ib any{};
    any.sib_family = AF_IB;
    const bool bound = rdma_bind_addr(probe, reinterpret_cast<sockaddr*>(&any)) == 0;
    const std::string why = bound ? std::string() : errno_text("rdma_bind_addr(AF_IB)");
    rdma_destroy_id(probe);
    if (!bound) {
        rdma_destroy_event_channel(channel);
        return unexpected(why + " (the kernel's RDMA CM has no AF_IB)");
    }
    return std::unique_ptr<RdmaCmAccess>(new RdmaCmAccess(channel, ca_guid));
}

RdmaCmAccess::~RdmaCmAccess() {
    while (!conns_.empty()) destroy(conns_.begin()->first);
    rdma_destroy_event_channel(channel_);
}

RdmaCmAccess::Conn* RdmaCmAccess::find(ConnectionId id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
}

void RdmaCmAccess::destroy(ConnectionId id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    // Every event of the id has been acknowledged (process() does so before
    // it acts): rdma_destroy_id() would wait for them otherwise. On a
    // connected id the kernel finishes the DREQ/DREP and TimeWait itself.
    if (it->second->cm_id) rdma_destroy_id(it->second->cm_id);
    conns_.erase(it);
}

expected<void, std::string> RdmaCmAccess::listen(std::uint64_t service_id, CmUser&) {
    char sid[24];
    std::snprintf(sid, sizeof sid, "0x%016llx", static_cast<unsigned long long>(service_id));
    return unexpected("librdmacm cannot listen on ServiceID " + std::string(sid) +
                      " (only on its own port spaces; the kernel's ib_cm holds the rest)");
}

expected<ConnectionId, std::string> RdmaCmAccess::connect(const ConnectParams& p, CmUser& user, Clock::time_point) {
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->user = &user;
    c->params = p;
    if (rdma_create_id(channel_, &c->cm_id, c.get(), RDMA_PS_IB) != 0) {
        ++counters_.call_errors;
        return unexpected(errno_text("rdma_create_id"));
    }
    sockaddr_ib src = ib_address(p.primary.local_gid, p.pkey, 0, false);
    sockaddr_ib dst = ib_address(p.primary.remote_gid, p.pkey, p.service_id, true);
    if (rdma_resolve_addr(c->cm_id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                          kResolveTimeoutMs) != 0) {
        ++counters_.call_errors;
        const std::string why = errno_text("rdma_resolve_addr");
        rdma_destroy_id(c->cm_id);
        return unexpected(why);
    }
    ++counters_.connects;
    const ConnectionId id = c->id;
    conns_.emplace(id, std::move(c));
    return id;
}

expected<void, std::string> RdmaCmAccess::accept(ConnectionId, const AcceptParams&, Clock::time_point) {
    return unexpected(std::string("librdmacm cannot accept IPoIB connections"));
}

expected<void, std::string> RdmaCmAccess::reject(ConnectionId id, std::uint16_t, bytes, Clock::time_point) {
    // The active side turning a REP down: destroying the id in REP_RCVD
    // makes the kernel send REJ "consumer reject".
    if (!find(id)) return unexpected(std::string("no such connection"));
    destroy(id);
    return {};
}

expected<void, std::string> RdmaCmAccess::establish(ConnectionId id, Clock::time_point) {
    Conn* c = find(id);
    if (!c) return unexpected(std::string("no such connection"));
    if (rdma_establish(c->cm_id) != 0) {
        ++counters_.call_errors;
        return unexpected(errno_text("rdma_establish"));
    }
    ++counters_.established;
    return {};
}

expected<void, std::string> RdmaCmAccess::disconnect(ConnectionId id, Clock::time_point) {
    Conn* c = find(id);
    if (!c) return unexpected(std::string("no such connection"));
    if (c->connected && rdma_disconnect(c->cm_id) != 0) ++counters_.call_errors;
    destroy(id);
    return {};
}

void RdmaCmAccess::forget(CmUser& user) {
    std::vector<ConnectionId> gone;
    for (const auto& [id, c] : conns_)
        if (c->user == &user) gone.push_back(id);
    for (ConnectionId id : gone) {
        if (Conn* c = find(id); c && c->connected) (void)rdma_disconnect(c->cm_id);
        destroy(id);
    }
}

void RdmaCmAccess::deliver(Conn& c, Event e, Clock::time_point now) {
    e.id = c.id;
    e.peer = c.params.peer;
    c.user->cm_event(e, now);
}

void RdmaCmAccess::process(Clock::time_point now, std::size_t max) {
    for (std::size_t n = 0; n < max; ++n) {
        rdma_cm_event* raw = nullptr;
        if (rdma_get_cm_event(channel_, &raw) != 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) ++counters_.call_errors;
            return;
        }
        ++counters_.events;
        // What the event says, copied: acknowledging frees it, and an id
        // is destroyed only once its events are acknowledged.
        rdma_cm_event ev = *raw;
        std::array<std::uint8_t, 196> private_data{};
        if (ev.param.conn.private_data && ev.param.conn.private_data_len)
            std::memcpy(private_data.data(), ev.param.conn.private_data,
                        std::min<std::size_t>(ev.param.conn.private_data_len, private_data.size()));
        rdma_ack_cm_event(raw);
        Conn* c = ev.id ? static_cast<Conn*>(ev.id->context) : nullptr;
        if (!c || !find(c->id)) continue;
        ev.param.conn.private_data = nullptr;
        handle(ev, *c, now);
        if (ev.event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
            // handle() left the REP to us: fill in what the kernel chose.
            Conn* still = find(c->id);
            if (!still) continue;
            ibv_qp_attr rtr{}, rts{};
            int mask = 0;
            rtr.qp_state = IBV_QPS_RTR;
            rts.qp_state = IBV_QPS_RTS;
            if (rdma_init_qp_attr(still->cm_id, &rtr, &mask) != 0 || rdma_init_qp_attr(still->cm_id, &rts, &mask) != 0) {
                ++counters_.call_errors;
                const ConnectionId id = still->id;
                CmUser* user = still->user;
                destroy(id);
                user->cm_event(Event{.kind = EventKind::timed_out, .id = id}, now);
                continue;
            }
            ++counters_.connect_responses;
            Rep rep;
            rep.local_qpn = rtr.dest_qp_num;
            rep.starting_psn = rts.sq_psn;
            rep.rnr_retry_count = rts.rnr_retry;
            rep.private_data = private_data;
            deliver(*still, Event{.kind = EventKind::rep_received,
                                  .rep = rep,
                                  .local_psn = rtr.rq_psn,
                                  .path_mtu = static_cast<std::uint8_t>(rtr.path_mtu)},
                    now);
        }
    }
}

void RdmaCmAccess::handle(const rdma_cm_event& ev, Conn& c, Clock::time_point now) {
    const ConnectionId id = c.id;
    CmUser* user = c.user;
    const Address peer = c.params.peer;
    auto fail = [&](EventKind kind, std::uint16_t reason) {
        destroy(id);  // `c` goes with it
        user->cm_event(Event{.kind = kind, .id = id, .peer = peer, .reason = reason}, now);
    };
    switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(c.cm_id, kResolveTimeoutMs) != 0) {
            ++counters_.call_errors;
            fail(EventKind::timed_out, 0);
        }
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        rdma_conn_param param{};
        param.private_data = c.params.private_data.data();
        param.private_data_len = 8;  // IpoibCmData: the reserved octet, our UD QPN, the receive size
        param.responder_resources = c.params.responder_resources;
        param.initiator_depth = c.params.initiator_depth;
        param.retry_count = c.params.retry_count;
        param.rnr_retry_count = c.params.rnr_retry_count;
        param.srq = c.params.srq ? 1 : 0;
        param.qp_num = c.params.local_qpn;
        if (rdma_connect(c.cm_id, &param) != 0) {
            ++counters_.call_errors;
            fail(EventKind::timed_out, 0);
            return;
        }
        c.connected = true;
        return;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return;  // process() builds the REP
    case RDMA_CM_EVENT_ESTABLISHED: return;
    case RDMA_CM_EVENT_REJECTED:
        ++counters_.rejected;
        fail(EventKind::rejected, static_cast<std::uint16_t>(ev.status));
        return;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        ++counters_.unreachable;
        fail(EventKind::timed_out, 0);
        return;
    case RDMA_CM_EVENT_DISCONNECTED: {
        // The peer's DREQ: the DREP, and the id goes (the kernel keeps the
        // TimeWait).
        ++counters_.disconnected;
        if (rdma_disconnect(c.cm_id) != 0) ++counters_.call_errors;
        destroy(id);
        user->cm_event(Event{.kind = EventKind::disconnect_requested, .id = id}, now);
        user->cm_event(Event{.kind = EventKind::timewait_exit, .id = id}, now);
        return;
    }
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        destroy(id);
        user->cm_event(Event{.kind = EventKind::timewait_exit, .id = id}, now);
        return;
    default: return;  // CONNECT_REQUEST (we listen on nothing), multicast, address change
    }
}

}  // namespace ipoibd::cm
