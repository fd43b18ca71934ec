// SPDX-License-Identifier: MIT
/**
 * @file angle.hpp
 * cos and sin of the exact angle s·θ, where every scalar rotation and phase gets its
 * trigonometry from (docs/math.md §Angles); `lrpe::exact_cos_sin` is its public form, for
 * user-written Λ policies.
 *
 * The angle is the exact real product of the integer position s and the double frequency θ,
 * at every int64 position. It is never rounded to one double: s·θ is split into doubles whose
 * sum is exact (an FMA two-product, and for |s| > 2^53 first s = s_hi + s_lo), each part is
 * reduced by the libm's exact argument reduction, and the rotations by the parts are
 * multiplied. The result is within a few double ulps of cos and sin of the exact angle, so
 * angles add exactly — Λ⁽ˢ⁾ᴴ Λ⁽ᵗ⁾ = Λ⁽ᵗ⁻ˢ⁾ holds to rounding at s = 2^62 as at s = 1 — where
 * one rounded product fl(s·θ) is off by up to |s|·θ·2⁻⁵³ (1.1e-10 at s = 10⁶, θ = 1; a whole
 * radian at s = 2^62).
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <cmath>
#include <cstdint>
#include <utility>

namespace lrpe {
inline namespace v0 {
namespace detail {

struct cos_sin {
  double c, s;
};

/// e^{ia}·e^{ib}: the rotation by the sum of two angles.
constexpr cos_sin rotate(cos_sin a, cos_sin b) noexcept { return {a.c * b.c - a.s * b.s, a.s * b.c + a.c * b.s}; }

/// Below this |x| the two-term Taylor forms of cos and sin are exact to double rounding
/// (the next terms, x⁴/24 and x⁵/120, are under 2⁻⁸⁴).
inline constexpr double small_angle = 0x1p-20;

/// cos and sin of a double x exactly (to one libm rounding); small |x| by its Taylor terms.
inline cos_sin cos_sin_of(double x) noexcept {
  if (std::abs(x) < small_angle) {
    const double x2 = x * x;
    return {1.0 - 0.5 * x2, x - x * x2 * (1.0 / 6.0)};
  }
  return {std::cos(x), std::sin(x)};
}

/// The product m·θ as a + e exactly (a = fl(m·θ), e its rounding error), for a double m (an
/// integer, |m| ≤ 2^63) and a double θ, barring overflow. With FMA hardware (FP_FAST_FMA) one
/// fma; without it Dekker's two-product (Veltkamp splits, exact while no partial product
/// over- or underflows: |θ| in [2^-900, 2^900]), because std::fma is then glibc's software
/// fma, far slower (bench/results/tuning.md#two-product); outside that range std::fma all the same.
struct split_product {
  double a, e;
};
inline split_product two_product(double m, double theta) noexcept {
  const double a = m * theta;
#ifdef FP_FAST_FMA
  return {a, std::fma(m, theta, -a)};
#else
  const double mag = std::abs(theta);
  if (!(mag >= 0x1p-900 && mag <= 0x1p900)) return {a, std::fma(m, theta, -a)};
  constexpr double veltkamp = 0x1p27 + 1;  // splits a double into two halves of 26 bits
  const auto halves = [](double x) {
    const double c = veltkamp * x;
    const double hi = c - (c - x);
    return std::pair{hi, x - hi};
  };
  const auto [mh, ml] = halves(m);
  const auto [th, tl] = halves(theta);
  return {a, ((mh * th - a) + mh * tl + ml * th) + ml * tl};
#endif
}

/// The position as m_hi + m_lo, both exactly doubles: m_lo = 0 while |s| ≤ 2^53, else
/// m_lo = s mod 2^11 (in [0, 2^11)) and m_hi = s − m_lo (a multiple of 2^11 of at most 52
/// significant bits, −2^63 included).
struct split_position {
  double hi, lo;
};
inline split_position split(position_t s) noexcept {
  constexpr position_t limit = position_t{1} << 53;
  if (s >= -limit && s <= limit) return {static_cast<double>(s), 0.0};
  const position_t lo = s & position_t{2047};
  return {static_cast<double>(s - lo), static_cast<double>(lo)};
}

/// cos and sin of m·θ exactly, for m a double integer: the rotation by fl(m·θ) then by its
/// rounding error.
inline cos_sin exact_product_cos_sin(double m, double theta) noexcept {
  const auto [a, e] = two_product(m, theta);
  return rotate(cos_sin{std::cos(a), std::sin(a)}, cos_sin_of(e));
}

/// cos and sin of the exact angle position·θ (file comment): a few double ulps at any
/// position, for any finite θ with |position·θ| < 2^1023.
inline cos_sin angle_cos_sin(position_t position, double theta) noexcept {
  const auto [hi, lo] = split(position);
  const cos_sin r = exact_product_cos_sin(hi, theta);
  return lo == 0.0 ? r : rotate(r, exact_product_cos_sin(lo, theta));
}

}  // namespace detail

/// cos and sin of an angle.
struct cos_sin_pair {
  double cos, sin;
};

/**
 * cos and sin of the exact angle s·θ (docs/math.md §Angles), the arithmetic of every lrpe
 * rotation and phase, for user-written Λ policies: with it their W_sᴴ W_t = W_{t−s} holds to
 * rounding at every position (one rounded product fl(s·θ) drifts by ~|s·θ|·2⁻⁵³, which
 * `lrpe::check::relative` reports). θ finite with |θ| < 2^960.
 */
[[nodiscard]] inline cos_sin_pair exact_cos_sin(position_t s, double theta) noexcept {
  const auto r = detail::angle_cos_sin(s, theta);
  return {r.c, r.s};
}

}  // namespace v0
}  // namespace lrpe
