// The one way counters leave their owners. Each counter struct has a
// visit function beside its definition, naming every field once; the
// daemon's `ipoibctl stats` JSON, its table and the SIGUSR1 log all come
// from those visits, so a counter added to a struct shows everywhere by
// adding one line next to it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ipoibd {

class CounterSink {
public:
    virtual ~CounterSink() = default;
    // One counter of the group being visited; `name` is snake_case.
    virtual void counter(std::string_view name, std::uint64_t value) = 0;
};

// Passes every counter on with `prefix` before its name.
class PrefixedSink final : public CounterSink {
public:
    PrefixedSink(CounterSink& out, std::string_view prefix) : out_(out), prefix_(prefix) {}
    void counter(std::string_view name, std::uint64_t value) override {
        std::string n = prefix_;
        n += name;
        out_.counter(n, value);
    }

private:
    CounterSink& out_;
    std::string prefix_;
};

// Adds up the counters of several visits by name, in the order first seen
// (the sum of several data threads' counters).
class SummingSink final : public CounterSink {
public:
    void counter(std::string_view name, std::uint64_t value) override {
        for (auto& [n, v] : sums_)
            if (n == name) {
                v += value;
                return;
            }
        sums_.emplace_back(std::string(name), value);
    }
    void visit(CounterSink& out) const {
        for (const auto& [n, v] : sums_) out.counter(n, v);
    }

private:
    std::vector<std::pair<std::string, std::uint64_t>> sums_;
};

// A reason-indexed array: each non-zero entry as `prefix` + to_string(reason).
// Zero entries are left out (most reasons never happen on a healthy link).
template <class Reason, std::size_t N, class NameOf>
void visit_reasons(CounterSink& out, std::string_view prefix, const std::array<std::uint64_t, N>& counts,
                   NameOf name_of) {
    for (std::size_t i = 0; i < N; ++i) {
        if (counts[i] == 0) continue;
        std::string name(prefix);
        name += name_of(static_cast<Reason>(i));
        out.counter(name, counts[i]);
    }
}

}  // namespace ipoibd
