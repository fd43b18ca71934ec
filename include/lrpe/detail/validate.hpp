/**
 * @file validate.hpp
 * Internal argument checks shared by the policies (not part of the public API).
 */
#pragma once

#include <lrpe/core/error.hpp>

#include <cmath>
#include <span>

namespace lrpe {
inline namespace v0 {
namespace detail {

/// d >= 1.
inline void require_dim(index_t d, const char* where, const char* arg = "dim") {
  require_shape(d >= 1, where, arg, "must be >= 1", d);
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

/// `got == expected` for a length.
inline void require_size(index_t got, index_t expected, const char* where, const char* arg) {
  require_shape(got == expected, where, arg, lazy_concat("must have size ", expected), got);
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
