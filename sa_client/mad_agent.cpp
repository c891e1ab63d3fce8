// The QP1 MAD agent; the flow is drawn in mad_agent.h.
#include "sa_client/mad_agent.h"

#include <algorithm>

#include "transport/wire/mad.h"

namespace ipoibd::sa {

void visit(const MadAgentCounters& c, CounterSink& out) {
    out.counter("agent_dispatched", c.dispatched);
    out.counter("agent_unmatched_response", c.unmatched_response);
    out.counter("agent_unclaimed_class", c.unclaimed_class);
    out.counter("agent_unclaimed_method", c.unclaimed_method);
    out.counter("agent_too_short", c.too_short);
    out.counter("agent_requests_forgotten", c.requests_forgotten);
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
        if (auto r = path_->register_class(mgmt_class, class_version); !r) return r;
        classes_.push_back(cls);
    }
    clients_.push_back({.client = &client, .mgmt_class = mgmt_class, .methods = std::move(methods)});
    return {};
}

void MadAgent::unregister_client(MadClient& client) {
    std::erase_if(clients_, [&](const Registration& r) { return r.client == &client; });
    std::erase_if(outstanding_, [&](const auto& entry) { return entry.second == &client; });
}

void MadAgent::remember(std::uint32_t tid, MadClient& client) {
    auto [it, fresh] = outstanding_.try_emplace(tid, &client);
    if (!fresh) {
        // A retry (same client), or another client's TID reused: the newest
        // request owns it.
        if (it->second != &client) ++counters_.requests_forgotten;
        it->second = &client;
        return;
    }
    outstanding_order_.push_back(tid);
    while (outstanding_order_.size() > kMaxOutstanding) {
        if (outstanding_.erase(outstanding_order_.front()) > 0) ++counters_.requests_forgotten;
        outstanding_order_.pop_front();
    }
}

expected<void, MadTransportError> MadAgent::send(MadClient& client, const SaMad& mad) {
    auto r = path_->send(mad);
    if (r && !mad.header.is_response()) remember(static_cast<std::uint32_t>(mad.header.transaction_id), client);
    return r;
}

std::size_t MadAgent::receive(std::size_t max) {
    return path_->receive([this](bytes mad) { dispatch(mad); }, max);
}

void MadAgent::dispatch(bytes mad) {
    if (mad.size() < ib::MadHeader::size) {
        ++counters_.too_short;
        return;
    }
    const ib::MadHeader h = ib::MadHeader::read_from(mad.data());
    if (h.is_response()) {
        auto it = outstanding_.find(static_cast<std::uint32_t>(h.transaction_id));
        if (it == outstanding_.end()) {
            ++counters_.unmatched_response;
            return;
        }
        ++counters_.dispatched;
        it->second->on_mad(mad);  // RMPP: more segments, and ACKs, keep the same TID
        return;
    }
    bool of_class = false, taken = false;
    // A client may unregister from inside on_mad: walk a copy.
    const std::vector<Registration> clients = clients_;
    for (const Registration& r : clients) {
        if (r.mgmt_class != h.mgmt_class) continue;
        of_class = true;
        if (std::find(r.methods.begin(), r.methods.end(), h.method) == r.methods.end()) continue;
        taken = true;
        ++counters_.dispatched;
        r.client->on_mad(mad);
    }
    if (!of_class)
        ++counters_.unclaimed_class;
    else if (!taken)
        ++counters_.unclaimed_method;
}

}  // namespace ipoibd::sa
