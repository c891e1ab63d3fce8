// ipoibd::expected: the result type for everything that parses untrusted
// bytes or talks to the environment.
//
// It is std::expected where the standard library has it (g++ 12 in C++23
// mode). clang 14/16 cannot compile libstdc++'s <expected> (their
// __cpp_concepts is too old), and the sanitizer and libFuzzer builds use
// clang, so those builds get the small stand-in below. Project code must use
// only the members both provide: has_value(), operator bool, operator*,
// operator->, value(), value_or(), error(), and ipoibd::unexpected(e) to
// make an error;
// expected<void, E> is default-constructed (`return {};`) for success.
#pragma once

#include <utility>
#include <variant>
#include <version>

#if defined(__cpp_lib_expected) && __cpp_lib_expected >= 202202L
#include <expected>
namespace ipoibd {
template <class T, class E>
using expected = std::expected<T, E>;
template <class E>
constexpr std::unexpected<E> unexpected(E e) { return std::unexpected<E>(std::move(e)); }
}  // namespace ipoibd
#else
#include <cstdlib>
namespace ipoibd {

template <class E>
struct unexpected_value {
    E error;
};

template <class E>
constexpr unexpected_value<E> unexpected(E e) { return {std::move(e)}; }

template <class T, class E>
class expected {
public:
    constexpr expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}
    template <class G>
    constexpr expected(unexpected_value<G> u) : state_(std::in_place_index<1>, E(std::move(u.error))) {}

    constexpr bool has_value() const noexcept { return state_.index() == 0; }
    constexpr explicit operator bool() const noexcept { return has_value(); }
    constexpr T& operator*() & { return std::get<0>(state_); }
    constexpr const T& operator*() const& { return std::get<0>(state_); }
    constexpr T&& operator*() && { return std::move(std::get<0>(state_)); }
    constexpr T* operator->() { return &std::get<0>(state_); }
    constexpr const T* operator->() const { return &std::get<0>(state_); }
    constexpr T& value() & { return checked_value(); }
    constexpr T&& value() && { return std::move(checked_value()); }
    constexpr const T& value() const& { return const_cast<expected*>(this)->checked_value(); }
    constexpr const E& error() const& { return std::get<1>(state_); }
    template <class U>
    constexpr T value_or(U&& fallback) const& {
        return has_value() ? std::get<0>(state_) : static_cast<T>(std::forward<U>(fallback));
    }

private:
    constexpr T& checked_value() {
        if (!has_value()) std::abort();  // std::expected would throw bad_expected_access
        return std::get<0>(state_);
    }
    std::variant<T, E> state_;
};

// expected<void, E>: success carries no value.
template <class E>
class expected<void, E> {
public:
    constexpr expected() = default;
    template <class G>
    constexpr expected(unexpected_value<G> u) : error_(E(std::move(u.error))), ok_(false) {}

    constexpr bool has_value() const noexcept { return ok_; }
    constexpr explicit operator bool() const noexcept { return ok_; }
    constexpr void value() const {
        if (!ok_) std::abort();
    }
    constexpr const E& error() const& { return error_; }

private:
    E error_{};
    bool ok_ = true;
};

}  // namespace ipoibd
#endif
