// SPDX-License-Identifier: MIT
// Downstream use of lrpe::simd: it defines LRPE_HAS_SIMD, brings xsimd, and links (the
// installed package removes the dangling "xtl" link item of Debian's xsimd 8 package).
#if __has_include(<lrpe/simd.hpp>)
#  include <lrpe/simd.hpp>
#endif
#include <lrpe/lrpe.hpp>
#include <xsimd/xsimd.hpp>

#include <array>
#include <cstdio>

#if !defined(LRPE_HAS_SIMD) || LRPE_HAS_SIMD != 1
#  error "lrpe::simd must define LRPE_HAS_SIMD=1"
#endif

int main() {
  using batch = xsimd::batch<float>;
  const batch a(1.5f);
  std::array<float, batch::size> lanes{};
  (a + a).store_unaligned(lanes.data());  // (reduce_add/hadd differ between xsimd 8 and 9+)
  float sum = 0.0f;
  for (const float x : lanes) sum += x;
  std::printf("xsimd arch %s, %zu lanes, sum %g\n", xsimd::default_arch::name(), batch::size,
              static_cast<double>(sum));
  return sum == 3.0f * static_cast<float>(batch::size) ? 0 : 1;
}
