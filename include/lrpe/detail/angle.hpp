/**
 * @file angle.hpp
 * Internal: the angle s·θ in double and its cosine and sine, the one place every rotation
 * and phase gets its trigonometry from (docs/math.md §Angles).
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <cmath>

namespace lrpe {
inline namespace v0 {
namespace detail {

struct cos_sin {
  double c, s;
};

/// cos and sin of position·θ, the product formed in double (exact for |position| < 2^53 up
/// to one rounding) and reduced by the libm's exact argument reduction.
inline cos_sin angle_cos_sin(position_t position, double theta) noexcept {
  const double a = static_cast<double>(position) * theta;
  return {std::cos(a), std::sin(a)};
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
