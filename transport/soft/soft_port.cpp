#include "transport/soft/soft_port.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>

#include "common/random.h"
#include "transport/soft/route_hint.h"
#include "transport/wire/link.h"

namespace ipoibd::transport {

class SoftPort::Link final : public LinkSink {
public:
    Link(SoftPort& port, UdpBatchSocket& socket) : port_(port), socket_(socket) {}
    bool transmit(bytes packet) override { return port_.transmit(packet); }
    void flush() override {
        if (!deferred) socket_.flush();
    }
    bool deferred = false;

private:
    SoftPort& port_;
    UdpBatchSocket& socket_;
};

namespace {

Error sys_error(const std::string& what, int err) { return Error{Errc::system_error, what, err}; }

// An unpredictable non-zero nonce: a forger who cannot see our requests
// cannot answer them.
std::uint64_t random_nonce() {
    std::uint64_t n = 0;
    while (n == 0) n = random_u64();
    return n;
}

}  // namespace

expected<std::unique_ptr<SoftPort>, Error> SoftPort::open(const SoftPortConfig& config) {
    if (config.port_guid == 0) return unexpected(Error{Errc::invalid_argument, "soft port needs a non-zero port GUID"});
    if (config.link_interval.count() <= 0 || config.link_timeout_intervals == 0)
        return unexpected(Error{Errc::invalid_argument, "link interval and timeout must be positive"});
    if (config.receive_budget == 0)
        return unexpected(Error{Errc::invalid_argument, "soft port receive budget must be positive"});
    SocketAddress bind_to;
    if (config.bind_to) {
        bind_to = *config.bind_to;
    } else {
        auto any = parse_socket_address(config.fabric.family() == AF_INET6 ? "[::]:0" : "0.0.0.0:0");
        bind_to = *any;
    }
    // Not connected: cut-through packets come from other ports' addresses.
    auto socket = UdpBatchSocket::open(bind_to, nullptr);
    if (!socket) return unexpected(sys_error(socket.error().operation, socket.error().error));

    UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!timer) return unexpected(sys_error("timerfd_create", errno));
    const auto armed_at = std::chrono::steady_clock::now();  // CLOCK_MONOTONIC too, taken before the timer starts
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(config.link_interval).count();
    itimerspec spec{};
    spec.it_interval.tv_sec = ns / 1'000'000'000;
    spec.it_interval.tv_nsec = ns % 1'000'000'000;
    spec.it_value = spec.it_interval;
    if (::timerfd_settime(timer.get(), 0, &spec, nullptr) != 0) return unexpected(sys_error("timerfd_settime", errno));

    UniqueFd more(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!more) return unexpected(sys_error("eventfd", errno));
    UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll) return unexpected(sys_error("epoll_create1", errno));
    for (int fd : {socket->fd(), timer.get(), more.get()}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return unexpected(sys_error("epoll_ctl", errno));
    }
    if (config.keys && config.keys->keys.empty())
        return unexpected(Error{Errc::invalid_argument, "a fabric key set with no key"});
    std::unique_ptr<SoftPort> port(
        new SoftPort(config, std::move(*socket), std::move(timer), std::move(more), std::move(epoll)));
    if (config.keys) (void)port->set_fabric_keys(*config.keys);
    port->timer_due_ = armed_at + config.link_interval;
    port->send_link_packet();  // announce the link at once
    port->socket_.flush();
    return port;
}

SoftPort::~SoftPort() = default;

expected<std::unique_ptr<UdQp>, Error> SoftPort::create_ud_qp(const UdQpConfig& config) {
    return port_.core().create_ud_qp(config);
}

expected<std::unique_ptr<UdQp>, Error> SoftPort::create_gsi_qp(std::uint32_t send_depth, std::uint32_t receive_depth) {
    return port_.core().create_gsi_qp(send_depth, receive_depth);
}

bool SoftPort::send_raw(bytes packet) {
    const bool ok = port_.core().transmit_raw(packet);
    socket_.flush();
    return ok;
}

void SoftPort::set_deferred_flush(bool deferred) { link_sink_->deferred = deferred; }

expected<void, Error> SoftPort::set_fabric_keys(const FabricKeys& keys) {
    if (keys.keys.empty()) return unexpected(Error{Errc::invalid_argument, "a fabric key set with no key"});
    ++keys_version_;
    if (auth_) {
        auth_->set_keys(keys);
    } else {
        // Queued datagrams leave unsealed first: the switch refuses them, as
        // it would refuse anything sent before the key.
        socket_.flush();
        auth_ = std::make_unique<FabricAuth>(keys);
        socket_.set_auth(auth_.get());
    }
    return {};
}

void SoftPort::flush() {
    socket_.flush();
    if (send_shared_) publish_send_context();
}

expected<void, Error> SoftPort::set_capture(PacketTap tap) {
    port_.core().set_tap(std::move(tap));
    return {};
}

void SoftPort::visit_counters(CounterSink& out) const {
    visit(counters(), out);
    visit(udp_counters(), out);
    visit(link_counters(), out);
    visit(cut_through_counters(), out);
    visit(trust_counters(), out);
    visit(sma_counters(), out);
    if (auth_) visit(auth_->counters(), out);
}

void visit(const SoftTrustCounters& c, CounterSink& out) {
    out.counter("foreign_dropped", c.foreign);
    out.counter("peer_control_dropped", c.peer_not_data);
    out.counter("control_malformed", c.control_malformed);
    out.counter("permits_full", c.permits_full);
    out.counter("peer_slid_dropped", c.peer_slid);
    out.counter("peer_pkey_dropped", c.peer_pkey);
}

void visit(const SoftCutThroughCounters& c, CounterSink& out) {
    out.counter("route_hints", c.hints);
    out.counter("route_hints_unsolicited", c.hints_unsolicited);
    out.counter("route_hints_refused", c.hints_refused);
    out.counter("route_withdrawals", c.withdrawals);
    out.counter("route_permits", c.permits);
    out.counter("route_permit_withdrawals", c.permit_withdrawals);
    out.counter("direct_tx", c.direct_tx);
    out.counter("direct_rx", c.direct_rx);
    out.counter("via_switch_tx", c.via_switch_tx);
    out.counter("route_refresh_requests", c.refresh_requests);
    out.counter("route_markers", c.markers);
    out.counter("route_held", c.held);
    out.counter("route_marker_retries", c.marker_retries);
    out.counter("route_drain_timeouts", c.drain_timeouts);
}

void visit(const SoftLinkCounters& c, CounterSink& out) {
    out.counter("link_packets_sent", c.link_packets_sent);
    out.counter("link_packets_received", c.link_packets_received);
    out.counter("link_packets_bad", c.link_packets_bad);
    out.counter("link_ups", c.link_ups);
    out.counter("link_downs", c.link_downs);
}

void SoftPort::process() {
    // The timer is read only once it can have expired: process() runs
    // several times per loop turn, and a read that finds nothing is a
    // system call on every packet's path.
    const auto now = std::chrono::steady_clock::now();
    now_ = now;
    std::uint64_t expirations = 0;
    if (now >= timer_due_ && ::read(timer_.get(), &expirations, sizeof expirations) == sizeof expirations &&
        expirations > 0) {
        timer_due_ += config_.link_interval * static_cast<std::int64_t>(expirations);
        on_timer(expirations);
    }
    socket_.receive([this](bytes d, const SocketAddress& from) { on_datagram(d, from); }, config_.receive_budget);
    // The socket's fd does not show what the socket holds already received:
    // the eventfd is readable exactly while it holds some.
    if (socket_.pending() != more_armed_) {
        std::uint64_t n = 1;
        [[maybe_unused]] auto r = more_armed_ ? ::read(more_.get(), &n, sizeof n) : ::write(more_.get(), &n, sizeof n);
        more_armed_ = !more_armed_;
    }
    if (!held_.empty()) expire_drains(now);
    port_.core().service_rc(now);
    socket_.flush();
    if (send_shared_) publish_send_context();
}

void SoftPort::on_timer(std::uint64_t expirations) {
    if (send_shared_) refresh_queue_routes(now_);
    intervals_silent_ += expirations;
    if (link_up_ && intervals_silent_ >= config_.link_timeout_intervals) set_link(false);
    send_link_packet();
}

void SoftPort::send_link_packet() {
    std::array<std::uint8_t, ib::LinkPacket::size> buf{};
    ib::LinkPacket lp;
    lp.op = link_up_ ? ib::LinkPacket::kOpNormal : ib::LinkPacket::kOpInit;
    lp.write_to(buf.data());
    if (socket_.queue(buf, &config_.fabric)) ++link_.link_packets_sent;
}

bool SoftPort::hints_current() const {
    const PortAttributes& a = port_.core().attributes();
    return a.state == PortState::active && a.lid == hints_lid_ && a.sm_lid == hints_sm_lid_ &&
           port_.reregistrations() == hints_reregistrations_;
}

bool SoftPort::transmit(bytes packet) {
    // Hints belong to one programming of the port by one SM: a port that is
    // not ACTIVE, whose LID or SM changed, or that an SM asked to
    // re-register (a restarted fabric re-sweeps without the link going down
    // and may give a LID to a port at another address) forgets them.
    if (!direct_.empty() && !hints_current()) forget_hints();
    // SMPs (QP0) always pass the switch: a port takes them from nowhere
    // else (the trust rules, route_hint.h).
    const std::size_t bth = ib::Lrh::size + (packet.size() > 1 && (packet[1] & 3) == 3 ? ib::Grh::size : 0);
    const bool qp0 = packet.size() >= bth + ib::Bth::size && load_be24(packet.data() + bth + 5) == ib::kQp0;
    if (!direct_.empty() && !qp0 && packet.size() >= ib::Lrh::size) {
        const std::uint16_t dlid = load_be16(packet.data() + 2);
        if (auto it = direct_.find(dlid); it != direct_.end()) {
            const auto now = std::chrono::steady_clock::now();
            Direct& d = it->second;
            if (d.draining) {
                if (now < d.drain_deadline && held_.size() < kMaxHeld) {
                    held_.push_back(Held{dlid, std::vector<std::uint8_t>(packet.begin(), packet.end())});
                    ++cut_.held;
                    return true;
                }
                // Too much held (a burst): the held packets and this one go
                // through the switch, in order, and a new marker behind them
                // (what the old one would have answered no longer covers
                // everything sent); the deadline stays.
                release_held(dlid, config_.fabric, false);
                ++cut_.via_switch_tx;
                const bool queued = socket_.queue(packet, &config_.fabric);
                if (now < d.drain_deadline && send_request(dlid, &d.nonce)) {
                    ++cut_.markers;
                    ++cut_.marker_retries;
                    return queued;
                }
                // No answer in time: a later hint tries again.
                ++cut_.drain_timeouts;
                direct_.erase(it);
                return queued;
            } else if (now < d.expires) {
                if (now >= d.refresh_at && !d.refresh_asked) {
                    if (send_request(dlid, &d.nonce)) ++cut_.refresh_requests;
                    d.refresh_asked = true;
                }
                ++cut_.direct_tx;
                return socket_.queue(packet, &d.peer);
            } else {
                direct_.erase(it);  // expired: this packet fetches a fresh hint
            }
        }
    }
    ++cut_.via_switch_tx;
    return socket_.queue(packet, &config_.fabric);
}

void SoftPort::on_route_hint(const RouteHint& hint) {
    const PortAttributes& a = port_.core().attributes();
    if (!hints_current()) forget_hints();
    hints_lid_ = a.lid;
    hints_sm_lid_ = a.sm_lid;
    hints_reregistrations_ = port_.reregistrations();
    const auto now = std::chrono::steady_clock::now();
    const auto ttl = std::chrono::milliseconds(hint.ttl_ms);
    auto it = direct_.find(hint.dlid);
    if (hint.nonce == 0 && hint.ttl_ms == 0) {
        // Withdrawn: the LID moved or went. What waits for the route goes
        // through the switch, in order, and so does everything after.
        ++cut_.withdrawals;
        if (it == direct_.end()) return;
        release_held(hint.dlid, config_.fabric, false);
        direct_.erase(it);
        return;
    }
    if (hint.nonce == 0) {
        // "A route exists": ask for it, behind the packets sent through the
        // switch so far, and hold later ones until the answer.
        ++cut_.hints_unsolicited;
        if (it != direct_.end()) return;  // asked already, or in use
        Direct d{.peer = {}, .expires = now + ttl, .refresh_at = now + ttl / 2, .refresh_asked = false, .nonce = 0,
                 .draining = true, .drain_deadline = now + config_.drain_timeout};
        if (!send_request(hint.dlid, &d.nonce)) return;  // no request, no route: try with a later hint
        ++cut_.markers;
        direct_[hint.dlid] = d;
        return;
    }
    if (it == direct_.end() || it->second.nonce != hint.nonce) {
        ++cut_.hints_refused;
        if (drop_log_)
            drop_log_("route_hint_refused", "refused a route hint for LID " + std::to_string(hint.dlid) + " to " +
                                                hint.peer.to_string() + " that answers no request of ours");
        return;
    }
    ++cut_.hints;
    Direct& d = it->second;
    const bool was_draining = d.draining;
    d = Direct{.peer = hint.peer, .expires = now + ttl, .refresh_at = now + ttl / 2, .refresh_asked = false};
    if (was_draining) release_held(hint.dlid, d.peer, true);
}

void SoftPort::on_permit(const PeerPermit& permit) {
    if (permit.ttl_ms == 0) {  // withdrawn
        ++cut_.permit_withdrawals;
        std::erase_if(permits_, [&](const Permit& p) { return p.peer == permit.peer; });
        last_permit_ = 0;
        return;
    }
    ++cut_.permits;
    const auto expires = now_ + std::chrono::milliseconds(permit.ttl_ms);
    Permit* current = nullptr;
    for (Permit& p : permits_)
        if (p.peer == permit.peer) current = &p;
    if (!current) {
        std::erase_if(permits_, [this](const Permit& p) { return p.expires <= now_; });
        last_permit_ = 0;
        if (permits_.size() >= kMaxPermits) {
            ++trust_.permits_full;
            return;
        }
        current = &permits_.emplace_back(Permit{.peer = permit.peer});
    } else if (!permit.first) {
        // More P_Keys of the permit just taken (the switch sends them back
        // to back); the LIDs and lifetime are the first one's.
        for (std::uint16_t key : permit.pkeys) {
            if ((key & 0x7FFF) == 0 || current->pkey_count >= current->pkeys.size()) continue;
            current->pkeys[current->pkey_count++] = key;
        }
        return;
    }
    current->expires = expires;
    current->lid = permit.lid;
    current->lmc = permit.lmc;
    current->any_pkey = permit.any_pkey;
    current->pkey_count = 0;
    for (std::uint16_t key : permit.pkeys)
        if ((key & 0x7FFF) != 0) current->pkeys[current->pkey_count++] = key;
}

const SoftPort::Permit* SoftPort::permitted(const SocketAddress& from) {
    if (last_permit_ < permits_.size() && permits_[last_permit_].peer == from)
        return permits_[last_permit_].expires > now_ ? &permits_[last_permit_] : nullptr;
    for (std::size_t i = 0; i < permits_.size(); ++i)
        if (permits_[i].peer == from) {
            last_permit_ = i;
            return permits_[i].expires > now_ ? &permits_[i] : nullptr;
        }
    return nullptr;
}

bool SoftPort::within_permit(const Permit& permit, bytes d, const SocketAddress& from) {
    // The LRH's SLID, and the BTH's P_Key behind the GRH when LNH says so.
    if (d.size() < ib::Lrh::size) return true;
    const std::size_t bth = ib::Lrh::size + ((d[1] & 3) == static_cast<std::uint8_t>(ib::Lnh::iba_global) ? ib::Grh::size : 0);
    if (d.size() < bth + 4) return true;
    const std::uint16_t slid = load_be16(d.data() + 6);
    if ((slid >> permit.lmc) != (permit.lid >> permit.lmc)) {
        ++trust_.peer_slid;
        refuse("peer_slid", from, "a packet", "a peer the fabric named, writing an SLID not of its LIDs");
        return false;
    }
    if (permit.any_pkey) return true;
    const std::uint16_t pkey = load_be16(d.data() + bth + 2);
    for (std::uint8_t i = 0; i < permit.pkey_count; ++i)
        if (permit_allows_pkey(permit.pkeys[i], pkey)) return true;
    ++trust_.peer_pkey;
    refuse("peer_pkey", from, "a packet", "a peer the fabric named, with a P_Key the switch would not have passed");
    return false;
}

void SoftPort::refuse(std::string_view reason, const SocketAddress& from, const char* what, const char* why) {
    // A flood must not cost a formatted line per datagram: at most
    // kRefusalsLogged a second reach the owner's (rate-limited) log; the
    // counters count them all.
    if (!drop_log_) return;
    if (now_ - refusal_window_ >= std::chrono::seconds(1)) {
        refusal_window_ = now_;
        refusals_logged_ = 0;
    }
    if (refusals_logged_++ >= kRefusalsLogged) return;
    if (why) {
        drop_log_(reason, std::string("dropped ") + what + " from " + from.to_string() + ", " + why);
        return;
    }
    drop_log_(reason, std::string("dropped ") + what + " from " + from.to_string() + ", not the fabric (" +
                          config_.fabric.to_string() + ") nor a peer it named");
}

bool SoftPort::send_request(std::uint16_t dlid, std::uint64_t* nonce) {
    const std::uint64_t n = random_nonce();
    SoftControlBuffer req;
    encode_route_request({.dlid = dlid, .nonce = n}, req);
    if (!socket_.queue(req, &config_.fabric)) return false;
    *nonce = n;
    return true;
}

void SoftPort::release_held(std::uint16_t dlid, const SocketAddress& to, bool direct) {
    if (held_.empty()) return;
    std::size_t kept = 0;
    for (Held& h : held_) {
        if (dlid != 0 && h.dlid != dlid) {
            if (&held_[kept] != &h) held_[kept] = std::move(h);
            ++kept;
            continue;
        }
        ++(direct ? cut_.direct_tx : cut_.via_switch_tx);
        socket_.queue(h.packet, &to);  // a full socket queue counts its own drop
    }
    held_.resize(kept);
}

void SoftPort::forget_hints() {
    release_held(0, config_.fabric, false);
    direct_.clear();
}


void SoftPort::expire_drains(std::chrono::steady_clock::time_point now) {
    for (auto it = direct_.begin(); it != direct_.end();) {
        if (it->second.draining && now >= it->second.drain_deadline) {
            ++cut_.drain_timeouts;
            release_held(it->first, config_.fabric, false);
            it = direct_.erase(it);
        } else {
            ++it;
        }
    }
}

void SoftPort::on_datagram(bytes datagram, const SocketAddress& from) {
    if (!(from == config_.fabric)) {
        // Only unicast IBA packets come straight from peers, and only from
        // those the switch named (PortCore refuses SMPs and multicast).
        const bool control = datagram.size() == ib::LinkPacket::size || is_soft_control(datagram);
        const Permit* permit = link_up_ ? permitted(from) : nullptr;
        if (!permit) {
            ++trust_.foreign;
            refuse("foreign_source", from, control ? "a control datagram" : "a packet");
            return;
        }
        if (control) {
            ++trust_.peer_not_data;
            refuse("peer_control", from, "a link packet or route control datagram");
            return;
        }
        if (!within_permit(*permit, datagram, from)) return;
        ++cut_.direct_rx;
        port_.core().receive(datagram, false);
        return;
    }
    if (is_soft_control(datagram)) {
        on_control(datagram);
        return;
    }
    if (datagram.size() == ib::LinkPacket::size) {
        if (!ib::parse_link_packet(datagram)) {
            ++link_.link_packets_bad;
            return;
        }
        ++link_.link_packets_received;
        intervals_silent_ = 0;
        if (!link_up_) set_link(true);
        return;
    }
    port_.core().receive(datagram);
}

void SoftPort::on_control(bytes datagram) {
    if (const auto hint = decode_route_hint(datagram)) {
        if (!link_up_ || port_.core().attributes().state != PortState::active) {
            ++cut_.hints_refused;
            return;
        }
        on_route_hint(*hint);
        return;
    }
    if (const auto permit = decode_peer_permit(datagram)) {
        if (!link_up_) {
            ++trust_.foreign;
            return;
        }
        on_permit(*permit);
        return;
    }
    ++trust_.control_malformed;
}

}  // namespace ipoibd::transport

namespace ipoibd::transport {

SoftPort::SoftPort(const SoftPortConfig& config, UdpBatchSocket socket, UniqueFd timer, UniqueFd more,
                   UniqueFd epoll)
    : config_(config),
      socket_(std::move(socket)),
      timer_(std::move(timer)),
      more_(std::move(more)),
      epoll_(std::move(epoll)),
      link_sink_(std::make_unique<Link>(*this, socket_)),
      port_(SmaIdentity{
                .node_guid = config.node_guid ? config.node_guid : config.port_guid,
                .port_guid = config.port_guid,
                .node_description = config.node_description,
                .mtu_cap = config.mtu,
            },
            *link_sink_) {}

void SoftPort::set_link(bool up) {
    link_up_ = up;
    forget_hints();  // the SM will program the port anew
    permits_.clear();
    ++(up ? link_.link_ups : link_.link_downs);
    if (up)
        port_.link_up();
    else
        port_.link_down();
}

}  // namespace ipoibd::transport

namespace ipoibd::transport {

// ---------------------------------------------------------------------------
// Send queues for other threads (soft_port.h, item 6)

class SoftPort::SendQueue final : public UdSendQueue {
public:
    SendQueue(std::shared_ptr<SendShared> shared, UdpBatchSocket socket, SocketAddress fabric)
        : shared_(std::move(shared)), socket_(std::move(socket)), fabric_(fabric), tx_(ib::kMaxPacketSize) {}

    std::size_t send(const SendAs& as, std::span<const SendRequest> requests) override {
        const std::shared_ptr<const SendContext> ctx = shared_->load();
        if (ctx->keys_version != keys_version_) {
            // The port's key changed (or came): seal as it does from now on.
            socket_.flush();
            auth_ = ctx->sealer ? ctx->sealer->share_session() : nullptr;
            socket_.set_auth(auth_.get());
            keys_version_ = ctx->keys_version;
        }
        const auto now = std::chrono::steady_clock::now();
        std::size_t taken = 0;
        for (const SendRequest& req : requests) {
            if (!ctx->active || req.payload.size() > ctx->mtu || ib::is_multicast_lid(req.ah.dlid) ||
                (req.ah.grh && req.ah.grh->sgid_index != 0) ||
                std::find(ctx->pkey_table.begin(), ctx->pkey_table.end(), as.pkey) == ctx->pkey_table.end()) {
                counters_.add(counters_.refused);
                continue;
            }
            ib::PacketSpec spec;
            spec.lrh.sl = req.ah.sl;
            spec.lrh.dlid = req.ah.dlid;
            spec.lrh.slid = static_cast<std::uint16_t>(ctx->lid | req.ah.src_path_bits);
            if (req.ah.grh) {
                ib::Grh grh;
                grh.tclass = req.ah.grh->traffic_class;
                grh.flow_label = req.ah.grh->flow_label;
                grh.hop_limit = req.ah.grh->hop_limit;
                grh.sgid = ctx->gid;
                grh.dgid = req.ah.grh->dgid;
                spec.grh = grh;
            }
            spec.bth.opcode = req.immediate ? ib::op::ud_send_only_imm : ib::op::ud_send_only;
            spec.bth.se = req.solicited;
            spec.bth.pkey = as.pkey;
            spec.bth.dest_qp = req.remote_qpn & ib::kQpnMask;
            spec.bth.psn = psn_;
            psn_ = (psn_ + 1) & ib::kPsnMask;
            spec.ext.deth.qkey = (req.remote_qkey & ib::kQKeyControlledBit) ? as.qkey : req.remote_qkey;
            spec.ext.deth.src_qp = as.qpn;
            if (req.immediate) spec.ext.immdt.value = *req.immediate;
            spec.payload = req.payload;
            auto built = ib::build_packet(spec, tx_);
            if (!built) {
                counters_.add(counters_.refused);
                continue;
            }
            const SocketAddress* to = &fabric_;
            const auto r = std::lower_bound(ctx->routes.begin(), ctx->routes.end(), req.ah.dlid,
                                            [](const SendRoute& a, std::uint16_t d) { return a.dlid < d; });
            if (r != ctx->routes.end() && r->dlid == req.ah.dlid && now < r->expires) {
                to = &r->peer;
                if (now >= r->refresh_at) {
                    std::atomic<bool>& late = ctx->used_late[static_cast<std::size_t>(r - ctx->routes.begin())];
                    if (!late.load(std::memory_order_relaxed)) late.store(true, std::memory_order_relaxed);
                }
                counters_.add(counters_.direct);
            } else {
                counters_.add(counters_.via_switch);
            }
            counters_.add(counters_.packets);
            counters_.add(counters_.bytes, *built);
            ++taken;
            if (!socket_.queue(bytes(tx_).first(*built), to)) note_drops();
        }
        return taken;
    }

    void flush() override {
        socket_.flush();
        note_drops();
    }
    bool pending() const override { return socket_.queued() > 0; }
    int fd() const override { return socket_.fd(); }
    const SendQueueCounters& counters() const override { return counters_; }

private:
    // The socket's own counters are this thread's; the port's reads ours.
    void note_drops() {
        const UdpCounters& u = socket_.counters();
        const std::uint64_t d = u.tx_queue_full + u.tx_errors;
        if (d != counters_.dropped.load(std::memory_order_relaxed)) counters_.dropped.store(d, std::memory_order_relaxed);
    }

    std::shared_ptr<SendShared> shared_;
    UdpBatchSocket socket_;
    SocketAddress fabric_;
    std::uint32_t psn_ = 0;
    std::uint64_t keys_version_ = 0;
    std::unique_ptr<FabricAuth> auth_;
    std::vector<std::uint8_t> tx_;
    SendQueueCounters counters_;
};

expected<std::unique_ptr<UdSendQueue>, Error> SoftPort::create_send_queue() {
    auto socket = UdpBatchSocket::second_sender(socket_);
    if (!socket) return unexpected(sys_error(socket.error().operation, socket.error().error));
    if (!send_shared_) {
        send_shared_ = std::make_shared<SendShared>();
        keys_version_ += 1;  // a context is published below whatever the keys
    }
    publish_send_context();
    return std::unique_ptr<UdSendQueue>(
        new SendQueue(send_shared_, std::move(*socket), config_.fabric));
}

void SoftPort::publish_send_context() {
    const PortAttributes& a = port_.core().attributes();
    const auto current = send_shared_->context;  // only this thread writes it
    const bool active = a.state == PortState::active && link_up_;
    // Runs after every process(): compared in place, built only on a change.
    const auto same_routes = [&] {
        std::size_t n = 0;
        for (const auto& [dlid, d] : direct_) {
            if (d.draining) continue;
            ++n;
            const auto r = std::lower_bound(current->routes.begin(), current->routes.end(), dlid,
                                            [](const SendRoute& x, std::uint16_t v) { return x.dlid < v; });
            if (r == current->routes.end() || r->dlid != dlid || !(r->peer == d.peer) || r->refresh_at != d.refresh_at ||
                r->expires != d.expires)
                return false;
        }
        return n == current->routes.size();
    };
    if (current && current->active == active && current->lid == a.lid && current->mtu == ib::mtu_bytes(a.active_mtu) &&
        current->keys_version == keys_version_ && current->pkey_table == a.pkey_table && current->gid == a.gid() &&
        same_routes())
        return;
    std::vector<SendRoute> routes;
    routes.reserve(direct_.size());
    for (const auto& [dlid, d] : direct_)
        if (!d.draining) routes.push_back(SendRoute{dlid, d.peer, d.refresh_at, d.expires});
    std::sort(routes.begin(), routes.end(), [](const SendRoute& x, const SendRoute& y) { return x.dlid < y.dlid; });
    auto next = std::make_shared<SendContext>();
    next->active = active;
    next->lid = a.lid;
    next->mtu = ib::mtu_bytes(a.active_mtu);
    next->gid = a.gid();
    next->pkey_table = a.pkey_table;
    next->used_late = std::make_unique<std::atomic<bool>[]>(routes.size());
    next->routes = std::move(routes);
    next->keys_version = keys_version_;
    if (auth_) next->sealer = auth_->share_session();
    std::lock_guard g(send_shared_->lock);
    send_shared_->context = std::move(next);
}

void SoftPort::refresh_queue_routes(std::chrono::steady_clock::time_point now) {
    const auto ctx = send_shared_->context;
    if (!ctx) return;
    for (std::size_t i = 0; i < ctx->routes.size(); ++i) {
        if (!ctx->used_late[i].load(std::memory_order_relaxed)) continue;
        auto it = direct_.find(ctx->routes[i].dlid);
        if (it == direct_.end() || it->second.draining || it->second.refresh_asked || now >= it->second.expires)
            continue;
        if (send_request(it->first, &it->second.nonce)) ++cut_.refresh_requests;
        it->second.refresh_asked = true;
    }
    // A route nobody on this thread sends to would otherwise stay past its
    // end (transmit() drops expired ones), and the switch's "a route
    // exists" would find it in use.
    std::erase_if(direct_, [&](const auto& e) { return !e.second.draining && now >= e.second.expires; });
}

}  // namespace ipoibd::transport
