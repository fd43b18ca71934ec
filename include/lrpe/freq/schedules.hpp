// SPDX-License-Identifier: MIT
/**
 * @file schedules.hpp
 * Frequency schedules θ for rotation blocks and complex phases.
 *
 * Frequencies are always `double`: the angle s·θ_k is formed in double before cos/sin, so a
 * float encoder at position 10⁶ still matches a long-double reference (docs/math.md §Angles).
 *
 * | schedule | θ | count |
 * |---|---|---|
 * | `rope(pairs, base, width)` | θ_k = base^(−2k/width), k = 0..pairs−1 (width defaults to 2·pairs) | pairs |
 * | `theta_a(e)` | 10000^(−2k/e), k = 0..e/2−1 (standard RoPE) | e/2 |
 * | `theta_b(e, L)` | π k / (L e), k = 1..e/2 | e/2 |
 * | `theta_c(e, L)` | π / (2 L k), k = 1..e/2 | e/2 |
 * | `complex_phase(e, base)` | base^(−2j/e), j = 0..e−1 (all e features) | e |
 *
 * L in types b and c is a fixed length parameter: the reference code uses the current sequence
 * length, which changes every angle when the length changes (no streaming, no extrapolation).
 */
#pragma once

#include <lrpe/detail/validate.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace freq {

namespace detail_ {
inline void require_base(double base, const char* where) {
  if (!std::isfinite(base)) throw domain_error(detail::concat(where, ": argument 'base' must be finite; got ", base));
  detail::require_parameter(base > 1.0, where, "base", "must be > 1", base);
}
inline void require_even_width(index_t e, const char* where) {
  detail::require_shape(e >= 2 && e % 2 == 0, where, "rotated_dim", "must be even and >= 2", e);
  detail::require_max_dim(e, where, "rotated_dim");  // e/2 frequencies are allocated
}
inline void require_length(double length, const char* where) {
  if (!std::isfinite(length)) throw domain_error(detail::concat(where, ": argument 'length' must be finite; got ", length));
  detail::require_parameter(length > 0, where, "length", "must be > 0", length);
}
}  // namespace detail_

/**
 * RoPE schedule θ_k = base^(−2k/width), k = 0..pairs−1.
 * @param pairs number of rotation pairs (1 … lrpe::max_dim / 2).
 * @param base  frequency base (> 1; 10000 in RoPE, 500000 in LLaMA 3).
 * @param width the width the exponent is normalised by; 0 means 2·pairs. With width = d and
 *              pairs < d/2 one rotates with the high-frequency part of the full-width schedule.
 */
inline std::vector<double> rope(index_t pairs, double base = 10000.0, index_t width = 0) {
  constexpr const char* where = "lrpe::freq::rope";
  detail::require_shape(pairs >= 1 && pairs <= std::numeric_limits<index_t>::max() / 2, where, "pairs",
                        "must be >= 1 and 2*pairs an index_t", pairs);
  // 2·pairs is the rotated width (and pairs frequencies are allocated)
  detail::require_shape(pairs <= max_dim / 2, where, "pairs",
                        detail::lazy_concat("must be <= lrpe::max_dim / 2 = ", max_dim / 2,
                                            " (2*pairs is the rotated width)"),
                        pairs);
  detail_::require_base(base, where);
  if (width == 0) width = 2 * pairs;
  detail::require_shape(width >= 2 * pairs, where, "width", detail::lazy_concat("must be >= 2*pairs = ", 2 * pairs), width);
  std::vector<double> theta(static_cast<std::size_t>(pairs));
  for (index_t k = 0; k < pairs; ++k)
    theta[static_cast<std::size_t>(k)] = std::pow(base, -2.0 * static_cast<double>(k) / static_cast<double>(width));
  return theta;
}

/// LRPE θ type a (standard RoPE) for a rotated width e (even).
inline std::vector<double> theta_a(index_t rotated_dim) {
  detail_::require_even_width(rotated_dim, "lrpe::freq::theta_a");
  return rope(rotated_dim / 2, 10000.0, rotated_dim);
}

/// LRPE θ type b: θ_k = π k / (L e), k = 1..e/2, with a fixed length parameter L.
inline std::vector<double> theta_b(index_t rotated_dim, double length) {
  constexpr const char* where = "lrpe::freq::theta_b";
  detail_::require_even_width(rotated_dim, where);
  detail_::require_length(length, where);
  std::vector<double> theta(static_cast<std::size_t>(rotated_dim / 2));
  for (std::size_t i = 0; i < theta.size(); ++i)
    theta[i] = std::numbers::pi * static_cast<double>(i + 1) / (length * static_cast<double>(rotated_dim));
  detail::require_frequencies_from(theta, where, "length", length);  // θ up to π/(2L): L > ~1e-289
  return theta;
}

/// LRPE θ type c: θ_k = π / (2 L k), k = 1..e/2, with a fixed length parameter L.
inline std::vector<double> theta_c(index_t rotated_dim, double length) {
  constexpr const char* where = "lrpe::freq::theta_c";
  detail_::require_even_width(rotated_dim, where);
  detail_::require_length(length, where);
  std::vector<double> theta(static_cast<std::size_t>(rotated_dim / 2));
  for (std::size_t i = 0; i < theta.size(); ++i)
    theta[i] = std::numbers::pi / (2.0 * length * static_cast<double>(i + 1));
  detail::require_frequencies_from(theta, where, "length", length);  // θ up to π/(2L): L > ~1e-289
  return theta;
}

/// Complex-phase schedule (LRPE Solution 1): θ_j = base^(−2j/e), j = 0..e−1.
inline std::vector<double> complex_phase(index_t features, double base = 10000.0) {
  constexpr const char* where = "lrpe::freq::complex_phase";
  detail::require_shape(features >= 1, where, "features", "must be >= 1", features);
  detail::require_max_dim(features, where, "features");
  detail_::require_base(base, where);
  std::vector<double> theta(static_cast<std::size_t>(features));
  for (index_t j = 0; j < features; ++j)
    theta[static_cast<std::size_t>(j)] = std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(features));
  return theta;
}

/// A user-supplied schedule, validated finite with |θ| < 2^960 (any sign; θ = 0 leaves a pair
/// unrotated).
inline std::vector<double> user(std::span<const double> theta) {
  detail::require_frequencies(theta, "lrpe::freq::user", "theta");
  return {theta.begin(), theta.end()};
}

}  // namespace freq
}  // namespace v0
}  // namespace lrpe
