// The QP1 MAD agent; the flow is drawn in mad_agent.h.
#include "sa_client/mad_agent.h"

#include <algorithm>

#include "transport/wire/mad.h"

namespace ipoibd::sa {

void visit(const MadAgentCounters& c, CounterSink& out) {
    out.counter("agent_dispatched", c.dispatched);
    out.counter("agent_unmatched_response", c.unmatched_response);
    out.counter("agent_unclaimed_class", c.unclaimed_class);
    out.counter("agent_class_not_supported_sent", c.class_not_supported_sent);
    out.counter("agent_unclaimed_method", c.unclaimed_method);
    out.counter("agent_too_short", c.too_short);
    out.counter("agent_requests_forgotten", c.requests_forgotten);
    out.counter("agent_response_wrong_source", c.response_wrong_source);
}

MadAgent::MadAgent(std::unique_ptr<MadTransport> path) : path_(std::move(path)) {
    // The path opens with the SA's class registered (mad_transport.h).
    classes_.emplace_back(ib::mgmt_class::subn_adm, ib::class_version::subn_adm);
}

expected<void, MadTransportError> MadAgent::register_client(MadClient& client, std::uint8_t mgmt_class,
                                                            std::uint8_t class_version,
                                                            std::vector<std::uint8_t> methods) {
    const std::pair<std::uint8_t, std::uint8_t> cls{mgmt_class, class_version};
    if (std::find(classes_.begin(), classes_.end(), cls) == classes_.end()) {
        if (auto r = path_->register_class(mgmt_class, class_version, methods); !r) return r;
        classes_.push_back(cls);
    }
    clients_.push_back({.client = &client, .mgmt_class = mgmt_class, .methods = std::move(methods)});
    return {};
}

void MadAgent::unregister_client(MadClient& client) {
    std::erase_if(clients_, [&](const Registration& r) { return r.client == &client; });
    // Their entries in outstanding_order_ no longer match a generation.
    std::erase_if(outstanding_, [&](const auto& entry) { return entry.second.client == &client; });
}

bool MadAgent::registered(const MadClient* client) const {
    return std::any_of(clients_.begin(), clients_.end(), [&](const Registration& r) { return r.client == client; });
}

void MadAgent::remember(std::uint64_t k, MadClient& client, std::uint16_t lid) {
    const std::uint64_t generation = next_generation_++;
    auto [it, fresh] = outstanding_.try_emplace(k, Outstanding{&client, generation, lid});
    if (!fresh) {
        // A retry (same client), or another client's TID reused: the newest
        // request owns it.
        if (it->second.client != &client) ++counters_.requests_forgotten;
        it->second = {&client, generation, lid};
    }
    outstanding_order_.emplace_back(k, generation);
    while (outstanding_.size() > kMaxOutstanding && !outstanding_order_.empty()) {
        const auto [oldest, gen] = outstanding_order_.front();
        outstanding_order_.pop_front();
        auto e = outstanding_.find(oldest);
        if (e == outstanding_.end() || e->second.generation != gen) continue;  // answered or re-sent since
        outstanding_.erase(e);
        ++counters_.requests_forgotten;
    }
    // Entries whose requests were answered leave stale order records: drop
    // them from the front; and where a live one at the front holds them
    // back (a request never answered, an RMPP transfer's), sweep the whole
    // queue once it is twice the table's bound, so it stays bounded (each
    // sweep leaves at most the table's size, so it costs O(1) a send).
    while (!outstanding_order_.empty()) {
        auto e = outstanding_.find(outstanding_order_.front().first);
        if (e != outstanding_.end() && e->second.generation == outstanding_order_.front().second) break;
        outstanding_order_.pop_front();
    }
    if (outstanding_order_.size() > 2 * kMaxOutstanding)
        std::erase_if(outstanding_order_, [this](const auto& record) {
            const auto e = outstanding_.find(record.first);
            return e == outstanding_.end() || e->second.generation != record.second;
        });
}

expected<void, MadTransportError> MadAgent::send(MadClient& client, const SaMad& mad) {
    auto r = path_->send(mad);
    if (r && !mad.header.is_response())
        remember(key(mad.header.mgmt_class, mad.header.transaction_id), client, path_->port_info().sm_lid);
    return r;
}

std::size_t MadAgent::receive(std::size_t max) {
    return path_->receive_from([this](bytes mad, const MadAddress& from) { dispatch(mad, from); }, max);
}

expected<void, MadTransportError> MadAgent::send_to(MadClient& client, bytes mad, const MadAddress& to) {
    (void)client;  // Sends expect no responses: nothing to remember for it
    return path_->send_to(mad, to);
}

void MadAgent::dispatch(bytes mad, const MadAddress& from) {
    if (mad.size() < ib::MadHeader::size) {
        ++counters_.too_short;
        return;
    }
    const ib::MadHeader h = ib::MadHeader::read_from(mad.data());
    if (h.is_response()) {
        auto it = outstanding_.find(key(h.mgmt_class, h.transaction_id));
        if (it == outstanding_.end()) {
            ++counters_.unmatched_response;
            return;
        }
        // Only from where the request went (the fabric vouches for a
        // source LID): a response from elsewhere with a guessed TID would
        // take the request's place, and the real answer would find none.
        if (it->second.lid != 0 && from.lid != 0 && from.lid != it->second.lid) {
            ++counters_.response_wrong_source;
            return;
        }
        MadClient* client = it->second.client;
        // A single-MAD response completes its request; RMPP segments keep
        // the entry (more follow; the client's ACKs carry the TID again).
        const bool rmpp = mad.size() >= kSaHeaderSize && h.mgmt_class == ib::mgmt_class::subn_adm &&
                          RmppHeader::read_from(mad.data() + ib::MadHeader::size).active();
        if (!rmpp) outstanding_.erase(it);
        ++counters_.dispatched;
        client->on_mad_from(mad, from);
        return;
    }
    bool of_class = false, taken = false;
    // A client may unregister (itself or another) from inside on_mad: walk
    // a copy, and call only clients still registered.
    const std::vector<Registration> clients = clients_;
    for (const Registration& r : clients) {
        if (r.mgmt_class != h.mgmt_class) continue;
        of_class = true;
        if (std::find(r.methods.begin(), r.methods.end(), h.method) == r.methods.end()) continue;
        if (!registered(r.client)) continue;
        taken = true;
        ++counters_.dispatched;
        r.client->on_mad_from(mad, from);
    }
    if (!of_class) {
        ++counters_.unclaimed_class;
        // Answered so that the requester fails at once instead of timing
        // out (IBA 13.4.7), as a GSI does (on an HCA, the kernel's MAD
        // layer answers for classes nobody registered before any reach us).
        if (const auto answer = ib::class_not_supported_response(h); answer && from.lid != 0 && path_->send_to(*answer, from))
            ++counters_.class_not_supported_sent;
    } else if (!taken)
        ++counters_.unclaimed_method;
}

}  // namespace ipoibd::sa
