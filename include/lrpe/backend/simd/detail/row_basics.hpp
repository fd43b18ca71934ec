// SPDX-License-Identifier: MIT
/**
 * @file row_basics.hpp
 * Internal: what every row kernel of the SIMD backend uses, whatever the ISA: index types, row
 * copies and stores, compile-time widths, and the row maps (a P applied as a Λ kernel loads
 * each row). The kernels themselves are in kernels.hpp, their ISA-specific parts in isa/.
 */
#pragma once

#include <lrpe/backend/simd/detail/prefetch.hpp>
#include <lrpe/backend/simd/detail/tuning.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/core/config.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// T has xsimd batches (float, double).
template <class T>
inline constexpr bool simd_scalar_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// The signed integer of T's width: gather indices (int32 for float, int64 for double).
template <class T>
using index_of_t = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;

template <class T>
inline void copy_row(const T* x, T* y, index_t n) noexcept {
  if (n > 0) std::memcpy(y, x, static_cast<std::size_t>(n) * sizeof(T));
}

/// Calls f(std::integral_constant<int, K>{}) for the K of Ks equal to k: a run-time width
/// picks a kernel unrolled at compile time. False when k is none of Ks.
template <int... Ks, class F>
LRPE_ALWAYS_INLINE bool with_constant(index_t k, F&& f) {
  return ((k == Ks ? (f(std::integral_constant<int, Ks>{}), true) : false) || ...);
}

/// Generator of the pair-swap shuffle (0,1,2,3,…) → (1,0,3,2,…).
struct swap_pairs_mask {
  static constexpr unsigned get(unsigned i, unsigned) { return i ^ 1u; }
};
/// Generator of the duplicating shuffle (0,1,2,…) → (0,0,1,1,2,2,…).
struct dup_lo_mask {
  static constexpr unsigned get(unsigned i, unsigned) { return i / 2; }
};

/// Stores a whole batch: non-temporally (p aligned to the batch) when Stream, else unaligned.
template <bool Stream, class T, class Arch>
inline void store(const xsimd::batch<T, Arch>& v, T* p) noexcept {
  if constexpr (Stream) compat::store_stream(v, p);
  else v.store_unaligned(p);
}

// ============================================================================ row maps

/**
 * A row map is a P of the form P x = x + μ(x)·v (μ a scalar per row) that a Λ kernel applies
 * as it loads each row, so that no P-transformed copy of the row is written or read back:
 * x + μv is formed in registers (μ's dot product reads the row first; the second read hits
 * L1). `begin_rows(x, xs, cnt, st)` computes the states (μ) of up to
 * `rows_per_begin` rows at once (a Householder map sums `rows_per_begin` dot products with
 * one parallel horizontal add); `map(st, j, xv)` maps the vector of features j … j + w − 1
 * and `map1(st, j, x_j)` one feature. `for_each_mapped_row` drives it. `identity_map` is
 * P = I: every call compiles away.
 */
template <class Arch, class T>
struct identity_map {
  using b = xsimd::batch<T, Arch>;
  static constexpr bool trivial = true;
  static constexpr index_t rows_per_begin = 1;
  struct row_state {};
  LRPE_ALWAYS_INLINE void begin_rows(const T*, index_t, index_t, row_state*) const noexcept {}
  LRPE_ALWAYS_INLINE b map(row_state, index_t, b x) const noexcept { return x; }
  LRPE_ALWAYS_INLINE T map1(row_state, index_t, T x) const noexcept { return x; }
};

/// f(r, state of row r) for the m rows of x (d features, rows xs apart), states computed a
/// group at a time, inputs prefetched `mapped_prefetch_rows` ahead.
template <class Map, class T, class F>
LRPE_ALWAYS_INLINE void for_each_mapped_row(const Map& map, const T* x, index_t xs, index_t d, index_t m, F&& f) {
  constexpr index_t g = Map::rows_per_begin;
  typename Map::row_state st[g];
  for (index_t r0 = 0; r0 < m; r0 += g) {
    const index_t cnt = std::min(g, m - r0);
    map.begin_rows(x + r0 * xs, xs, cnt, st);
    for (index_t r = 0; r < cnt; ++r) {
      if (r0 + r + mapped_prefetch_rows < m) prefetch_row(x + (r0 + r + mapped_prefetch_rows) * xs, d);
      f(r0 + r, st[r]);
    }
  }
}

/// Features [from, d) of row x, mapped, into y (the pass-through tail of a partial Λ).
template <class Map, class T>
LRPE_ALWAYS_INLINE void map_copy(const Map& map, const typename Map::row_state& st, const T* x, T* y, index_t from,
                                 index_t d) noexcept {
  if constexpr (Map::trivial) copy_row(x + from, y + from, d - from);
  else
    for (index_t j = from; j < d; ++j) y[j] = map.map1(st, j, x[j]);
}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
