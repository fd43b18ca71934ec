// SPDX-License-Identifier: MIT
/**
 * @file micro_kernels.hpp
 * The register-blocked, GEMM-like tiles shared by softmax and linear attention: the tile shape
 * per arch (`softmax_tiling`), S = Q Kᵀ over a key tile (`qk_micro`), O = α·O + P V
 * (`pv_micro`, `pv_rows`), the causal prefix of a key tile (`visible_prefix`) and a finiteness
 * test (`all_finite`).
 */
#pragma once

#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/core/config.hpp>
#include <lrpe/core/traits.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

template <class A>
inline constexpr bool wide_register_file = std::is_base_of_v<xsimd::avx512f, A>;

/// Tile sizes of the softmax kernel for scalar T on arch A.
template <class T, class A>
struct softmax_tiling {
  static constexpr index_t W = static_cast<index_t>(xsimd::batch<T, A>::size);  ///< lanes
  /// Key vectors per tile. 16 registers: 8, so that a tile has 64 float keys as with AVX-512 and
  /// the per-tile costs (α·O in every P·V call, the softmax step's reductions) are spread over
  /// twice the keys of 4 vectors (bench/results/tuning.md#softmax-key-tile).
  static constexpr index_t U = wide_register_file<A> ? 4 : 8;
  static constexpr index_t BK = U * W;                                        ///< keys per tile
  static constexpr index_t R = 6;                                             ///< rows per micro-kernel
  static constexpr index_t BQ = R * 8;                                        ///< query rows per tile
  /// Vectors per row of one micro-kernel call: R·UM accumulators, UM operand vectors and a
  /// broadcast in registers (27 of 32 with AVX-512, 15 of 16 with AVX2 or SSE); a tile's U
  /// vectors then take U / UM calls.
  static constexpr index_t UM = wide_register_file<A> ? 4 : 2;
};

/// Full unrolling of the micro-kernels' fixed-size loops (keeps the accumulators in registers).
#if defined(__clang__)
#define LRPE_UNROLL _Pragma("clang loop unroll(full)")
#elif defined(__GNUC__)
#define LRPE_UNROLL _Pragma("GCC unroll 16")
#else
#define LRPE_UNROLL
#endif

inline constexpr index_t round_up(index_t x, index_t m) noexcept { return (x + m - 1) / m * m; }

/**
 * S[r][0:U·W) = Σ_c q[r][c] · kp[c][0:U·W) for r < R: q row-major (stride qs), kp a packed
 * key tile (d rows of BK keys, aligned), S row-major (stride ss, aligned). U < the tile's
 * vector count computes only the first U·W keys (a causal prefix).
 */
template <index_t R, class T, class A, index_t U = softmax_tiling<T, A>::U>
inline void qk_micro(const T* q, index_t qs, const T* kp, index_t d, T* s, index_t ss) noexcept {
  using B = xsimd::batch<T, A>;
  constexpr index_t W = B::size, BK = softmax_tiling<T, A>::BK;
  static_assert(U >= 1 && U <= softmax_tiling<T, A>::U);
  B acc[R][U];
  LRPE_UNROLL
  for (index_t r = 0; r < R; ++r)
    LRPE_UNROLL
    for (index_t u = 0; u < U; ++u) acc[r][u] = B(T(0));
  // the d loop unrolled by 4, as the key loop of pv_micro: linear attention gains, softmax runs
  // the same (bench/results/tuning.md#micro-kernel-unroll)
#pragma GCC unroll 4
  for (index_t c = 0; c < d; ++c) {
    B k[U];
    LRPE_UNROLL
    for (index_t u = 0; u < U; ++u) k[u] = B::load_aligned(kp + c * BK + u * W);
    LRPE_UNROLL
    for (index_t r = 0; r < R; ++r) {
      const B qb(q[r * qs + c]);
      LRPE_UNROLL
      for (index_t u = 0; u < U; ++u) acc[r][u] = compat::fma(qb, k[u], acc[r][u]);
    }
  }
  LRPE_UNROLL
  for (index_t r = 0; r < R; ++r)
    LRPE_UNROLL
    for (index_t u = 0; u < U; ++u) acc[r][u].store_aligned(s + r * ss + u * W);
}

/// `qk_micro` over the first `keys` keys of the tile only (rounded up to whole vectors; 0 < keys ≤ BK),
/// at most UM vectors per call.
template <index_t R, class T, class A>
inline void qk_micro_prefix(index_t keys, const T* q, index_t qs, const T* kp, index_t d, T* s, index_t ss) noexcept {
  using tl = softmax_tiling<T, A>;
  constexpr index_t W = tl::W, UM = tl::UM;
  static_assert(tl::U % UM == 0 && (UM == 4 || UM == 2));
  const index_t vectors = (keys + W - 1) / W;
  index_t v = 0;
  for (; v + UM <= vectors; v += UM) qk_micro<R, T, A, UM>(q, qs, kp + v * W, d, s + v * W, ss);
  switch (vectors - v) {
    case 3: qk_micro<R, T, A, 3>(q, qs, kp + v * W, d, s + v * W, ss); break;
    case 2: qk_micro<R, T, A, 2>(q, qs, kp + v * W, d, s + v * W, ss); break;
    case 1: qk_micro<R, T, A, 1>(q, qs, kp + v * W, d, s + v * W, ss); break;
    default: break;
  }
}

/**
 * o[r][0:VU·W) = α[r]·o[r] + Σ_{j<nk} p(r, j) · v[j][0:VU·W) for r < R, with p(r, j) =
 * p[r·prs + j·pcs] (o stride os, v stride vs; o and v aligned). The one GEMM-like micro-kernel
 * of both attention kernels: P·V (softmax), Q·S, Kᵀ·V and A·V (linear attention).
 * SkipZero leaves out every product of a zero p (its FMA would only add ±0): the softmax tiles
 * whose values hold a NaN or ±∞, where 0·NaN and 0·∞ would reach rows that weigh them 0.
 */
template <index_t R, index_t VU, class T, class A, bool SkipZero = false>
inline void pv_micro(const T* p, index_t prs, index_t pcs, const T* alpha, const T* v, index_t vs, index_t nk, T* o,
                     index_t os) noexcept {
  using B = xsimd::batch<T, A>;
  constexpr index_t W = B::size;
  B acc[R][VU];
  LRPE_UNROLL
  for (index_t r = 0; r < R; ++r) {
    const B a(alpha[r]);
    LRPE_UNROLL
    for (index_t u = 0; u < VU; ++u) acc[r][u] = a * B::load_aligned(o + r * os + u * W);
  }
  // unrolled by 4: linear attention gains, softmax runs the same (bench/results/tuning.md#micro-kernel-unroll)
#pragma GCC unroll 4
  for (index_t j = 0; j < nk; ++j) {
    B vb[VU];
    LRPE_UNROLL
    for (index_t u = 0; u < VU; ++u) vb[u] = B::load_aligned(v + j * vs + u * W);
    const T* pj = p + j * pcs;
    LRPE_UNROLL
    for (index_t r = 0; r < R; ++r) {
      if constexpr (SkipZero) {
        if (pj[r * prs] == T(0)) continue;
      }
      const B pb(pj[r * prs]);
      LRPE_UNROLL
      for (index_t u = 0; u < VU; ++u) acc[r][u] = compat::fma(pb, vb[u], acc[r][u]);
    }
  }
  LRPE_UNROLL
  for (index_t r = 0; r < R; ++r)
    LRPE_UNROLL
    for (index_t u = 0; u < VU; ++u) acc[r][u].store_aligned(o + r * os + u * W);
}

/// The R-row block of O = α·O + P·V over all value columns (chunks of UM vectors, then the rest).
template <index_t R, class T, class A, bool SkipZero = false>
inline void pv_rows(const T* p, index_t prs, index_t pcs, const T* alpha, const T* v, index_t dvp, index_t nk,
                    T* o) noexcept {
  constexpr index_t W = xsimd::batch<T, A>::size, UM = softmax_tiling<T, A>::UM;
  index_t c = 0;
  for (; c + UM * W <= dvp; c += UM * W)
    pv_micro<R, UM, T, A, SkipZero>(p, prs, pcs, alpha, v + c, dvp, nk, o + c, dvp);
  switch ((dvp - c) / W) {
    case 3: pv_micro<R, 3, T, A, SkipZero>(p, prs, pcs, alpha, v + c, dvp, nk, o + c, dvp); break;
    case 2: pv_micro<R, 2, T, A, SkipZero>(p, prs, pcs, alpha, v + c, dvp, nk, o + c, dvp); break;
    case 1: pv_micro<R, 1, T, A, SkipZero>(p, prs, pcs, alpha, v + c, dvp, nk, o + c, dvp); break;
    default: break;
  }
}

/// Keys k0, k0 + 1, … (bk of them) visible to a query at position s (t ≤ s): a prefix length in
/// [0, bk], computed without overflow for any positions.
inline index_t visible_prefix(position_t s, position_t k0, index_t bk) noexcept {
  if (s < k0) return 0;
  const std::uint64_t gap = static_cast<std::uint64_t>(s) - static_cast<std::uint64_t>(k0);  // exact: s ≥ k0
  return gap >= static_cast<std::uint64_t>(bk) ? bk : static_cast<index_t>(gap) + 1;
}

/**
 * Whether x[0, count) holds no NaN or ±∞: x·0 is ±0 for finite x and NaN otherwise, summed by
 * FMAs (two chains), one test at the end.
 */
template <class T, class A>
inline bool all_finite(const T* x, index_t count) noexcept {
  using B = xsimd::batch<T, A>;
  constexpr index_t W = B::size;
  B acc(T(0)), acc2(T(0));
  index_t i = 0;
  for (; i + 2 * W <= count; i += 2 * W) {
    acc = compat::fma(B::load_unaligned(x + i), B(T(0)), acc);
    acc2 = compat::fma(B::load_unaligned(x + i + W), B(T(0)), acc2);
  }
  if (i + W <= count) {
    acc = compat::fma(B::load_unaligned(x + i), B(T(0)), acc);
    i += W;
  }
  T rest = compat::reduce_add(acc + acc2);
  for (; i < count; ++i) rest += x[i] * T(0);
  return !std::isnan(rest);
}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
