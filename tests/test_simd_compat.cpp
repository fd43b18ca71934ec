// SPDX-License-Identifier: MIT
// The xsimd compatibility layer (backend/simd/xsimd_compat.hpp) against scalar loops, on every
// x86 arch this translation unit is compiled for: the horizontal sums and extrema, and the
// parallel horizontal add `compat::haddp`, whose AVX-512 float version in xsimd 8.1 returns
// lanes out of order (this test is what catches it: it fails with `xsimd::haddp` there), and
// the parallel horizontal maximum `compat::hmaxp` (a transpose tree of its own on AVX-512); and
// `compat::transpose_square` (in-register shuffles on AVX-512 float and on AVX/AVX2) against
// the index swap it must be.
#include <lrpe/backend/simd/xsimd_compat.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace compat = lrpe::backend::compat;

namespace {

/// Row r, lane i: distinct values of mixed sign whose sums are exact in float.
template <class T>
T value(int r, int i) {
  return static_cast<T>((r * 37 + i * 11) % 64 - 20) * T(0.25);
}

template <class T, class A>
void check_arch() {
  using B = xsimd::batch<T, A>;
  constexpr int w = static_cast<int>(B::size);
  INFO(A::name() << ", " << sizeof(T) << "-byte lanes");
  B rows[w];
  T want[w], want_max[w];
  for (int r = 0; r < w; ++r) {
    alignas(64) T lane[w];
    T sum = 0, mx = value<T>(r, 0), mn = value<T>(r, 0);
    for (int i = 0; i < w; ++i) {
      lane[i] = value<T>(r, i);
      sum += lane[i];
      mx = std::max(mx, lane[i]);
      mn = std::min(mn, lane[i]);
    }
    rows[r] = B::load_aligned(lane);
    want[r] = sum;
    want_max[r] = mx;
    CHECK(compat::reduce_add(rows[r]) == sum);
    CHECK(compat::reduce_max(rows[r]) == mx);
    CHECK(compat::reduce_min(rows[r]) == mn);
  }
  alignas(64) T got[w];
  compat::haddp(rows).store_aligned(got);
  for (int r = 0; r < w; ++r) {
    INFO("haddp lane " << r);
    CHECK(got[r] == want[r]);
  }
  compat::hmaxp(rows).store_aligned(got);
  for (int r = 0; r < w; ++r) {
    INFO("hmaxp lane " << r);
    CHECK(got[r] == want_max[r]);
  }
  // hmaxp again with a distinct maximum per row (100 + r) at a lane that moves with the row,
  // so that a tree mixing up rows or lanes cannot pass by equal maxima
  for (int r = 0; r < w; ++r) {
    alignas(64) T lane[w];
    for (int i = 0; i < w; ++i) lane[i] = value<T>(r, i);
    lane[(5 * r + 3) % w] = static_cast<T>(100 + r);
    rows[r] = B::load_aligned(lane);
  }
  compat::hmaxp(rows).store_aligned(got);
  for (int r = 0; r < w; ++r) {
    INFO("hmaxp (spike) lane " << r);
    CHECK(got[r] == static_cast<T>(100 + r));
  }
}

/// transpose_square on distinct values: lane i of row r must land in lane r of row i.
template <class T, class A>
void check_transpose() {
  using B = xsimd::batch<T, A>;
  constexpr int w = static_cast<int>(B::size);
  INFO(A::name() << ", " << sizeof(T) << "-byte lanes, fast = " << compat::has_fast_transpose<T, A>);
  B v[w];
  for (int r = 0; r < w; ++r) {
    alignas(64) T lane[w];
    for (int i = 0; i < w; ++i) lane[i] = static_cast<T>(r * w + i);
    v[r] = B::load_aligned(lane);
  }
  compat::transpose_square(v);
  int wrong = 0;
  for (int r = 0; r < w; ++r) {
    alignas(64) T lane[w];
    v[r].store_aligned(lane);
    for (int i = 0; i < w; ++i) wrong += lane[i] != static_cast<T>(i * w + r);
  }
  CHECK(wrong == 0);
}

template <class A>
void check_both() {
  check_transpose<float, A>();
  check_transpose<double, A>();
  check_arch<float, A>();
  check_arch<double, A>();
}

}  // namespace

TEST_CASE("compat: reduce_add / reduce_max / reduce_min / haddp / hmaxp / transpose_square == scalar loops on every compiled arch") {
  check_both<xsimd::default_arch>();
#if defined(__SSE4_2__)
  check_both<xsimd::sse4_2>();
#endif
#if defined(__AVX__)
  check_both<xsimd::avx>();
#endif
#if defined(__AVX2__)
  check_both<xsimd::avx2>();
#endif
#if defined(__AVX512F__)
  check_both<xsimd::avx512f>();
#endif
}
