// SPDX-License-Identifier: MIT
/**
 * @file validate.hpp
 * Internal argument checks shared by the policies (not part of the public API).
 */
#pragma once

#include <lrpe/core/error.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>

namespace lrpe {
inline namespace v0 {
namespace detail {

/// n <= lrpe::max_dim: a size about to be allocated for (a shape_error naming `arg`, never a
/// std::length_error or an overflowed size from the allocation).
inline void require_max_dim(index_t n, const char* where, const char* arg) {
  require_shape(n <= max_dim, where, arg, lazy_concat("must be <= lrpe::max_dim = ", max_dim), n);
}

/// 1 <= d <= lrpe::max_dim: a width that a constructor allocates for.
inline void require_dim(index_t d, const char* where, const char* arg = "dim") {
  require_shape(d >= 1, where, arg, "must be >= 1", d);
  require_max_dim(d, where, arg);
}

/// x is finite and within ±max(T), so that static_cast<T>(x) is defined ([conv.double]: a double
/// past float's range converts with undefined behaviour) and finite.
template <class T>
[[nodiscard]] constexpr bool finite_in(double x) noexcept {
  constexpr double top = static_cast<double>(std::numeric_limits<T>::max());  // ∞ for wider types
  return x - x == 0 && x <= top && x >= -top;                                 // x − x: NaN for ±∞, NaN
}

/// Every value finite; names the first offending index.
template <class T>
void require_finite(std::span<const T> values, const char* where, const char* arg) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(static_cast<double>(values[i]))) {
      throw domain_error(concat(where, ": argument '", arg, "' must be finite; got ", values[i],
                                " at index ", i));
    }
  }
}

/// Frequencies θ: finite (`domain_error`) and |θ| < 2^960 (`parameter_error`), so that the
/// angle s·θ is a finite double product at every int64 position s (|s| ≤ 2^63).
inline void require_frequencies(std::span<const double> theta, const char* where, const char* arg) {
  require_finite(theta, where, arg);
  for (std::size_t i = 0; i < theta.size(); ++i) {
    if (!(std::abs(theta[i]) < 0x1p960)) {
      throw parameter_error(concat(where, ": argument '", arg,
                                   "' must have |theta| < 2^960 (s*theta finite at every int64 position s); got ",
                                   theta[i], " at index ", i));
    }
  }
}

/// Frequencies computed from argument `arg` (a scalar, or a list with one entry per θ, of which
/// the offending entry is shown): the same bounds as `require_frequencies`, a `parameter_error`
/// naming `arg` when a computed θ breaks them.
template <class V>
void require_frequencies_from(std::span<const double> theta, const char* where, const char* arg, const V& value) {
  for (std::size_t i = 0; i < theta.size(); ++i) {
    if (!(std::abs(theta[i]) < 0x1p960)) {
      const auto shown = [&] {
        if constexpr (requires { value[i]; }) return value[i];
        else return value;
      }();
      throw parameter_error(concat(where, ": argument '", arg,
                                   "' must give frequencies with |theta| < 2^960 (s*theta finite at every int64 "
                                   "position s); got ",
                                   shown, ", which gives theta = ", theta[i], " at index ", i));
    }
  }
}

/// The extents of a contiguous four-axis layout (bnsh, bsnh, a paged pool's blocks): when none is
/// negative, their product (of the nonzero ones) must be an index_t, so that no stride or offset
/// overflows (shape_error naming `arg`, the product). Negative extents are left to the callers'
/// view checks, which name them.
inline void require_layout_extents(const char* where, index_t batch, index_t heads, index_t seq, index_t dim,
                                   const char* arg = "batch*heads*seq*dim") {
  if (batch < 0 || heads < 0 || seq < 0 || dim < 0) return;
  index_t total = 1;
  for (const index_t e : {dim, seq, heads, batch}) {
    if (e == 0) continue;
    require_shape(total <= std::numeric_limits<index_t>::max() / e, where, arg,
                  "must be an index_t (the strides and offsets of the layout)",
                  lazy_concat(batch, "x", heads, "x", seq, "x", dim));
    total *= e;
  }
}

/// a·b modulo 2^64: a stride of extents already checked by `require_layout_extents` (exact),
/// or of negative ones that the view checks reject (no undefined behaviour before they do).
[[nodiscard]] constexpr index_t wrapping_product(index_t a, index_t b) noexcept {
  return static_cast<index_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}

/// `got == expected` for a length.
inline void require_size(index_t got, index_t expected, const char* where, const char* arg) {
  require_shape(got == expected, where, arg, lazy_concat("must have size ", expected), got);
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
