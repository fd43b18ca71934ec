// SPDX-License-Identifier: MIT
/**
 * @file exp2.hpp
 * The softmax kernels' exponential: 2^x for x ≤ 0 on xsimd batches, a polynomial with exact
 * zeros for masked entries (the kernels pre-scale logits by log₂e, so no exp is needed).
 */
#pragma once

#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/core/config.hpp>

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/**
 * 2^x for x ≤ 0 (softmax exponents): round-to-nearest split x = n + f, |f| ≤ 1/2, a polynomial
 * of 2^f, and 2^n from the exponent bits. Float: a degree-5 minimax polynomial (relative
 * error ≤ 1.73·10⁻⁷ for x ≥ −126, measured on every float), double: the degree-11 Taylor
 * polynomial (< 10⁻¹⁴). x is first clamped to −127 (double: −1023), where the exponent bits of
 * 2^n are all zero: exactly 0 for x < −126.5 (−1022.5), −∞ included, with no compare or
 * select after the clamp; subnormal (≤ 2⁻¹²⁶) in between. NaN gives NaN.
 */
template <class T, class A>
inline xsimd::batch<T, A> exp2_nonpositive(xsimd::batch<T, A> x) noexcept {
  using B = xsimd::batch<T, A>;
  using I = xsimd::as_integer_t<T>;
  constexpr bool is_float = std::is_same_v<T, float>;
  const B lo(is_float ? T(-127) : T(-1023));
  x = xsimd::select(x < lo, lo, x);  // a NaN x stays NaN (and so does the result)
  const B n = xsimd::nearbyint(x);
  const B f = x - n;
  B p;
  if constexpr (is_float) {
    // minimax for relative error on [−1/2, 1/2] with p(0) = 1
    p = B(T(1.3264714507386088e-3));
    p = compat::fma(p, f, B(T(9.671508334577084e-3)));
    p = compat::fma(p, f, B(T(5.550733581185341e-2)));
    p = compat::fma(p, f, B(T(2.4022242426872253e-1)));
    p = compat::fma(p, f, B(T(6.931470036506653e-1)));
    p = compat::fma(p, f, B(T(1)));
  } else {
    // Taylor coefficients ln2^k / k!, k = 11 … 1
    constexpr T c[] = {T(4.44553827187081162e-10), T(7.05491162080112336e-09), T(1.01780860092396999e-07),
                       T(1.32154867901443095e-06), T(1.52527338040598411e-05), T(1.54035303933816088e-04),
                       T(1.33335581464284433e-03), T(9.61812910762847688e-03), T(5.55041086648215831e-02),
                       T(2.40226506959100722e-01), T(0.693147180559945309417232121458176568)};
    p = B(c[0]);
    for (int k = 1; k < 11; ++k) p = compat::fma(p, f, B(c[k]));
    p = compat::fma(p, f, B(T(1)));
  }
  constexpr int mantissa = is_float ? 23 : 52;
  constexpr I bias = is_float ? I(127) : I(1023);
  // a NaN lane's exponent from n = 0 (converting NaN to an integer is undefined; f, hence p,
  // is NaN there already)
  const auto ni = xsimd::to_int(xsimd::select(n == n, n, B(T(0))));
  return p * xsimd::bitwise_cast<B>((ni + bias) << mantissa);  // n = −127 (−1023): 2^n reads as +0
}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
