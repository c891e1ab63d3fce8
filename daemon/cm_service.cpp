#include "daemon/cm_service.h"

namespace ipoibd::daemon {

CmService::CmService(sa::MadAgent& agent, cm::CmEngine::Config config, std::uint64_t seed)
    : agent_(agent), engine_(config, seed), ca_guid_(config.local_ca_guid) {}

void CmService::on_mad_from(bytes mad, const sa::MadAddress& from) {
    const auto now = cm::Clock::now();
    engine_.receive(mad, {.lid = from.lid, .gid = from.gid}, now);
    flush(now);
}

void CmService::tick(cm::Clock::time_point now) {
    engine_.tick(now);
    flush(now);
}

expected<void, std::string> CmService::listen(std::uint64_t service_id, cm::CmUser& user) {
    auto [it, inserted] = listeners_.emplace(service_id, &user);
    if (!inserted && it->second != &user) return unexpected(std::string("the ServiceID has another listener"));
    engine_.listen(service_id);
    return {};
}

void CmService::unlisten(std::uint64_t service_id) {
    listeners_.erase(service_id);
    engine_.unlisten(service_id);
}

expected<cm::ConnectionId, std::string> CmService::connect(const cm::ConnectParams& p, cm::CmUser& user,
                                                           cm::Clock::time_point now) {
    auto id = engine_.connect(p, now);
    if (id) owners_[*id] = &user;
    return after(std::move(id), now);
}

expected<void, std::string> CmService::accept(cm::ConnectionId id, const cm::AcceptParams& p,
                                              cm::Clock::time_point now) {
    return after(engine_.accept(id, p, now), now);
}

expected<void, std::string> CmService::reject(cm::ConnectionId id, std::uint16_t reason, bytes ari,
                                              cm::Clock::time_point now) {
    auto r = engine_.reject(id, reason, now, ari);
    if (!engine_.state(id)) owners_.erase(id);
    return after(std::move(r), now);
}

expected<void, std::string> CmService::establish(cm::ConnectionId id, cm::Clock::time_point now) {
    return after(engine_.establish(id, now), now);
}

expected<void, std::string> CmService::disconnect(cm::ConnectionId id, cm::Clock::time_point now) {
    auto r = engine_.disconnect(id, now);
    if (!engine_.state(id)) owners_.erase(id);
    return after(std::move(r), now);
}

void CmService::forget(cm::CmUser& user) {
    for (auto it = listeners_.begin(); it != listeners_.end();) {
        if (it->second == &user) {
            engine_.unlisten(it->first);
            it = listeners_.erase(it);
        } else {
            ++it;
        }
    }
    std::erase_if(owners_, [&](const auto& kv) { return kv.second == &user; });
}

void CmService::send_output() {
    for (const cm::Outgoing& o : engine_.take_output())
        if (!agent_.send_to(*this, o.mad, {.lid = o.to.lid, .gid = o.to.gid})) ++send_errors_;
}

void CmService::flush(cm::Clock::time_point now) {
    send_output();
    // Users may call back (accept, establish, ...), which flushes again:
    // only the outermost call hands events over, in order.
    if (dispatching_) return;
    dispatching_ = true;
    for (std::vector<cm::Event> events = engine_.take_events(); !events.empty(); events = engine_.take_events()) {
        for (const cm::Event& e : events) {
            cm::CmUser* user = nullptr;
            if (e.kind == cm::EventKind::req_received) {
                if (auto it = listeners_.find(e.req ? e.req->service_id : 0); it != listeners_.end()) {
                    user = it->second;
                    owners_[e.id] = user;
                }
            } else if (auto it = owners_.find(e.id); it != owners_.end()) {
                user = it->second;
            }
            if (!user) {
                ++events_unhandled_;
                // A REQ nobody takes any more (its listener left meanwhile):
                // answer it rather than let the peer time out.
                if (e.kind == cm::EventKind::req_received) engine_.reject(e.id, cm::rej::invalid_service_id, now);
                continue;
            }
            user->cm_event(e, now);
            if (!engine_.state(e.id)) owners_.erase(e.id);
        }
        send_output();
    }
    // An event the engine dropped (its queue full) may have been the last of
    // its connection (timewait_exit, timed_out, rejected), the one after
    // which its owner entry goes: whenever the engine has dropped one, the
    // entries of connections it no longer holds go now. Every other end of
    // a connection is an event handed over above or the owner's own call.
    if (engine_.counters().events_dropped != drops_swept_) {
        drops_swept_ = engine_.counters().events_dropped;
        std::erase_if(owners_, [&](const auto& kv) { return !engine_.state(kv.first); });
    }
    dispatching_ = false;
}

void CmService::visit_counters(CounterSink& out) const {
    visit(engine_.counters(), out);
    out.counter("cm_send_errors", send_errors_);
    out.counter("cm_events_unhandled", events_unhandled_);
    out.counter("cm_connections", engine_.connections());
}

}  // namespace ipoibd::daemon
