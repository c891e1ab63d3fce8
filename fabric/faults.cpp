#include "fabric/faults.h"

#include <charconv>

#include "common/duration.h"

namespace ipoibd::fabric {

void visit(const FaultCounters& c, CounterSink& out) {
    out.counter("fault_lost", c.lost);
    out.counter("fault_corrupted", c.corrupted);
    out.counter("fault_duplicated", c.duplicated);
    out.counter("fault_reordered", c.reordered);
    out.counter("fault_delayed", c.delayed);
    out.counter("fault_hold_full", c.hold_full);
}

namespace {

expected<double, std::string> parse_probability(std::string_view key, std::string_view v) {
    const bool percent = !v.empty() && v.back() == '%';
    if (percent) v.remove_suffix(1);
    double x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || end != v.data() + v.size() || v.empty())
        return unexpected(std::string(key) + " '" + std::string(v) + (percent ? "%" : "") + "': not a number");
    if (percent) x /= 100;
    if (x < 0 || x > 1) return unexpected(std::string(key) + ": must be between 0 and 100%");
    return x;
}

}  // namespace

expected<FaultRule, std::string> parse_fault_rule(std::string_view spec) {
    FaultRule r;
    bool any = false;
    while (!spec.empty()) {
        const auto comma = spec.find(',');
        const std::string_view part = spec.substr(0, comma);
        spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
        const auto eq = part.find('=');
        if (eq == std::string_view::npos) return unexpected("'" + std::string(part) + "': expected KEY=VALUE");
        const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
        if (key == "port") {
            unsigned p = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), p);
            if (ec != std::errc() || end != value.data() + value.size() || p < 1 || p > 254)
                return unexpected("port '" + std::string(value) + "': a switch port, 1..254");
            r.port = static_cast<std::uint8_t>(p);
            continue;
        }
        if (key == "delay") {
            auto d = parse_duration(value);
            if (!d) return unexpected("delay '" + std::string(value) + "': " + d.error());
            if (*d > std::chrono::seconds(10)) return unexpected(std::string("delay: at most 10s"));
            r.delay = *d;
            any = any || d->count() > 0;
            continue;
        }
        double* field = key == "loss" ? &r.loss : key == "corrupt" ? &r.corrupt : key == "dup" ? &r.dup
                      : key == "reorder" ? &r.reorder : nullptr;
        if (!field) return unexpected("'" + std::string(key) + "': not a fault (loss, corrupt, dup, reorder, delay, port)");
        auto p = parse_probability(key, value);
        if (!p) return unexpected(p.error());
        *field = *p;
        any = any || *p > 0;
    }
    if (!any) return unexpected(std::string("no fault given (loss, corrupt, dup, reorder or delay)"));
    return r;
}

FaultInjector::FaultInjector(std::vector<FaultRule> rules, std::uint64_t seed)
    : rules_(std::move(rules)), random_(seed) {}

const FaultRule* FaultInjector::rule_for(std::uint8_t port) const {
    const FaultRule* any = nullptr;
    for (const FaultRule& r : rules_) {
        if (r.port == port) return &r;
        if (!r.port) any = &r;
    }
    return any;
}

bool FaultInjector::chance(double p) {
    if (p <= 0) return false;
    return std::uniform_real_distribution<double>(0.0, 1.0)(random_) < p;
}

void FaultInjector::out(std::uint8_t port, bytes datagram, Clock::time_point now, const Send& send) {
    const FaultRule* r = rule_for(port);
    if (!r) {
        send(port, datagram);
        release(port, now, true, send);
        return;
    }
    if (chance(r->loss)) {
        ++counters_.lost;
        return;
    }
    std::vector<std::uint8_t> copy;
    if (chance(r->corrupt) && !datagram.empty()) {
        copy.assign(datagram.begin(), datagram.end());
        const std::size_t bit = std::uniform_int_distribution<std::size_t>(0, copy.size() * 8 - 1)(random_);
        copy[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
        datagram = copy;
        ++counters_.corrupted;
    }
    const int copies = chance(r->dup) ? 2 : 1;
    if (copies == 2) ++counters_.duplicated;
    const bool reorder = chance(r->reorder);
    const bool delay = r->delay.count() > 0;
    auto& q = held_[port];
    for (int i = 0; i < copies; ++i) {
        if ((reorder || delay) && q.size() < kMaxHeld) {
            q.push_back(Held{now + (delay ? r->delay : kReorderHold), reorder && !delay,
                             std::vector<std::uint8_t>(datagram.begin(), datagram.end())});
            ++(delay ? counters_.delayed : counters_.reordered);
            continue;
        }
        if (reorder || delay) ++counters_.hold_full;
        send(port, datagram);
    }
    if (!reorder && !delay) release(port, now, true, send);
}

void FaultInjector::release(std::uint8_t port, Clock::time_point now, bool behind_a_packet, const Send& send) {
    auto& q = held_[port];
    while (!q.empty()) {
        Held& h = q.front();
        // Held for reordering: out right behind the next packet; delayed:
        // when due.
        if (!(h.reorder && behind_a_packet) && now < h.due) break;
        send(port, h.packet);
        q.pop_front();
    }
}

void FaultInjector::tick(Clock::time_point now, const Send& send) {
    for (std::size_t p = 0; p < held_.size(); ++p)
        if (!held_[p].empty()) release(static_cast<std::uint8_t>(p), now, false, send);
}

}  // namespace ipoibd::fabric
