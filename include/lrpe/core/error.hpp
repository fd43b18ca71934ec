// SPDX-License-Identifier: MIT
/**
 * @file error.hpp
 * The exception hierarchy of lrpe.
 *
 * Every public entry point validates its input and throws one of these. Each message names
 * the function, the argument, what was expected and what was given, e.g.
 * `lrpe::lambda::rotation: argument 'rotated_dim' must be even and <= dim (64); got 63`.
 *
 * | type                     | std base                | thrown for                                   |
 * |--------------------------|-------------------------|----------------------------------------------|
 * | `lrpe::shape_error`      | `std::invalid_argument` | sizes, dims, strides, mismatched widths      |
 * | `lrpe::parameter_error`  | `std::invalid_argument` | a parameter outside its set (not a bijection, not unitary, zero vector) |
 * | `lrpe::domain_error`     | `std::domain_error`     | non-finite values (NaN, inf) in parameters   |
 *
 * All of them also derive from the marker base `lrpe::error`, so `catch (lrpe::error const&)`
 * catches everything the library throws on bad input.
 *
 * Sizes that a constructor allocates for (a width d, a state's d_f and d_v, a permutation's
 * length, a schedule's count, a table's heads) must be at most `lrpe::max_dim`; larger ones are a
 * `shape_error` naming the argument (`parameter_error` for `canonical::alibi_slopes`' heads),
 * never a `std::length_error` or an overflowed size. Within it, what the memory cannot hold is a
 * `std::bad_alloc`, as for any allocation.
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <charconv>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace lrpe {
inline namespace v0 {

/**
 * The largest size (d, d_f, d_v, heads, a schedule's length) a constructor accepts: 2^24. A
 * product of two of them (a d×d matrix, a d_f×d_v state) is then at most 2^48 elements, formed
 * without overflow; attention heads are a few hundred wide.
 */
inline constexpr index_t max_dim = index_t{1} << 24;

/// Marker base of every lrpe exception; `what()` is the full message.
class error {
 public:
  virtual ~error() = default;
  [[nodiscard]] virtual const char* what() const noexcept = 0;
};

/// Wrong sizes, dimensions or strides (d = 0, odd width where even is needed, n mismatch...).
class shape_error : public std::invalid_argument, public error {
 public:
  using std::invalid_argument::invalid_argument;
  [[nodiscard]] const char* what() const noexcept override { return std::invalid_argument::what(); }
};

/// A parameter outside the set it must belong to (not a bijection, not unitary, zero vector).
class parameter_error : public std::invalid_argument, public error {
 public:
  using std::invalid_argument::invalid_argument;
  [[nodiscard]] const char* what() const noexcept override { return std::invalid_argument::what(); }
};

/// Non-finite (NaN or infinite) values where finite ones are required.
class domain_error : public std::domain_error, public error {
 public:
  using std::domain_error::domain_error;
  [[nodiscard]] const char* what() const noexcept override { return std::domain_error::what(); }
};

namespace detail {

/// Writes one part of a message: floating-point values in their shortest form that reads back
/// to the same value (`std::to_chars`: 0.9, not 0.90000000000000002), the rest by `<<`.
template <class A>
void put_part(std::ostream& os, A const& a) {
  if constexpr (std::is_floating_point_v<A>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, a);
    os.write(buf, r.ptr - buf);
  } else {
    os << a;
  }
}

template <class... Args>
[[nodiscard]] std::string concat(Args const&... args) {
  std::ostringstream os;
  (put_part(os, args), ...);
  return os.str();
}

/**
 * The parts of a message, written out only when a check fails: `lazy_concat("must equal q.cols
 * = ", d)` in place of `concat(...)` as a `require_*` expectation (or value) costs nothing when
 * the check passes, where `concat` formats through a `std::ostringstream` every call (a heap
 * allocation, which shows on per-token paths). Holds references: use it only as an
 * argument of the call that may throw (the parts live until the end of that expression).
 */
template <class... Args>
struct lazy_message {
  std::tuple<Args const&...> parts;

  friend std::ostream& operator<<(std::ostream& os, const lazy_message& m) {
    std::apply([&os](auto const&... a) { (put_part(os, a), ...); }, m.parts);
    return os;
  }
};

template <class... Args>
[[nodiscard]] lazy_message<Args...> lazy_concat(Args const&... args) noexcept {
  return {std::tuple<Args const&...>(args...)};
}

/**
 * Throws `E` with the house message format:
 * `<where>: argument '<arg>' <expectation>; got <value>`.
 */
template <class E, class Expectation, class Value>
[[noreturn]] void fail(const char* where, const char* arg, Expectation const& expectation, Value const& got) {
  throw E(concat(where, ": argument '", arg, "' ", expectation, "; got ", got));
}

/// Throws `shape_error` unless `cond`. `expectation`: text, or `lazy_concat(...)` parts.
template <class Expectation, class Value>
void require_shape(bool cond, const char* where, const char* arg, Expectation const& expectation, Value const& got) {
  if (!cond) fail<shape_error>(where, arg, expectation, got);
}

/// Throws `parameter_error` unless `cond`. `expectation`: text, or `lazy_concat(...)` parts.
template <class Expectation, class Value>
void require_parameter(bool cond, const char* where, const char* arg, Expectation const& expectation,
                       Value const& got) {
  if (!cond) fail<parameter_error>(where, arg, expectation, got);
}

/// Throws `shape_error` unless `got == expected`: "argument '<arg>' must equal <expected_name> =
/// <expected>; got <got>". Builds the message only on failure (no allocation on the hot path).
template <class A, class B>
void require_equal(A const& got, B const& expected, const char* where, const char* arg,
                   const char* expected_name) {
  if (!(got == expected)) fail<shape_error>(where, arg, lazy_concat("must equal ", expected_name, " = ", expected), got);
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
