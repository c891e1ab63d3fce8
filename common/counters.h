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

namespace ipoibd {

class CounterSink {
public:
    virtual ~CounterSink() = default;
    // One counter of the group being visited; `name` is snake_case.
    virtual void counter(std::string_view name, std::uint64_t value) = 0;
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
