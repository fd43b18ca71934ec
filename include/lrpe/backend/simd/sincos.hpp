/**
 * @file sincos.hpp
 * cos and sin of s·θ_k for many frequencies at once, vectorised over k in double.
 *
 * The numerical contract is the scalar one (`detail::angle_cos_sin`, docs/math.md §Angles):
 * the angle s·θ_k is formed in double (one rounding, exact for |s| < 2^53 up to it) and then
 * reduced and evaluated by xsimd's double `sincos`, whose argument reduction is exact enough
 * at every magnitude we use: Cody–Waite with a three-part π/2 (pio2_1..3 plus tails) up to
 * 2^19·π, fdlibm's `__ieee754_rem_pio2` (exact) beyond. Its result is within about one double
 * ulp of the libm value, so a float result rounds to the same float or a neighbour, and a
 * double result differs from the scalar path by ~1e-16 — far below the tolerance the tests
 * state for either (docs/backends.md).
 */
#pragma once

#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/core/config.hpp>

#include <cmath>
#include <cstddef>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/**
 * c[k] = cos(s·θ[k]), sn[k] = sin(s·θ[k]) for k < count, in double.
 * @tparam Arch the xsimd arch (double lanes of this arch are used).
 */
template <class Arch>
inline void angle_cos_sin(position_t s, const double* theta, index_t count, double* c, double* sn) noexcept {
  using bd = xsimd::batch<double, Arch>;
  constexpr index_t w = static_cast<index_t>(bd::size);
  const bd pos(static_cast<double>(s));
  index_t k = 0;
  for (; k + w <= count; k += w) {
    const bd a = pos * bd::load_unaligned(theta + k);  // the angle in double, one rounding
    const auto [sv, cv] = xsimd::sincos(a);
    cv.store_unaligned(c + k);
    sv.store_unaligned(sn + k);
  }
  if (k < count) {  // tail: the same vector code on a zero-padded copy
    double t[w] = {}, tc[w], ts[w];
    for (index_t i = k; i < count; ++i) t[i - k] = theta[i];
    const bd a = pos * bd::load_unaligned(t);
    const auto [sv, cv] = xsimd::sincos(a);
    cv.store_unaligned(tc);
    sv.store_unaligned(ts);
    for (index_t i = k; i < count; ++i) {
      c[i] = tc[i - k];
      sn[i] = ts[i - k];
    }
  }
}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
