// SPDX-License-Identifier: MIT
// The SIMD exp2 (softmax's exponential) against std::exp2: relative error and exact zeros.
#include "simd_attention_helpers.hpp"


TEST_CASE_TEMPLATE("simd exp2 of non-positive arguments: relative error and exact zeros", T, float, double) {
  using A = xsimd::default_arch;
  using B = xsimd::batch<T, A>;
  constexpr std::size_t W = B::size;
  // normal results (x ≥ the smallest normal exponent): relative error; below: a subnormal no
  // larger than the smallest normal down to e_min − 1/2, exactly 0 past it
  const T e_min = std::is_same_v<T, float> ? T(-126) : T(-1022);
  double worst = 0;
  const auto check_range = [&](double lo, int steps) {
    for (int i = 0; i <= steps; ++i) {
      const T x = static_cast<T>(lo * i / steps);
      alignas(64) T in[W], res[W];
      for (std::size_t l = 0; l < W; ++l) in[l] = x;
      lrpe::backend::simd_detail::exp2_nonpositive<T, A>(B::load_aligned(in)).store_aligned(res);
      const long double want = std::exp2(static_cast<long double>(x));
      INFO("x = " << x);
      if (x >= e_min) {
        worst = std::max(worst, static_cast<double>(std::abs(res[0] - want) / want));
      } else if (x >= e_min - T(0.5)) {
        CHECK(res[0] >= T(0));
        CHECK(res[0] <= std::numeric_limits<T>::min());
      } else {
        CHECK(res[0] == T(0));
      }
    }
  };
  check_range(-130.0, 200000);
  check_range(static_cast<double>(e_min) - 4.0, 20000);
  MESSAGE("max relative error of exp2: " << worst);
  CHECK(worst < (std::is_same_v<T, float> ? 2e-7 : 1e-14));
  alignas(64) T in[W], res[W];
  for (std::size_t l = 0; l < W; ++l) in[l] = -std::numeric_limits<T>::infinity();
  lrpe::backend::simd_detail::exp2_nonpositive<T, A>(B::load_aligned(in)).store_aligned(res);
  CHECK(res[0] == T(0));
  for (std::size_t l = 0; l < W; ++l) in[l] = T(0);
  lrpe::backend::simd_detail::exp2_nonpositive<T, A>(B::load_aligned(in)).store_aligned(res);
  CHECK(res[0] == T(1));
}

