// SPDX-License-Identifier: MIT
/**
 * @file softmax.hpp
 * Softmax attention for `backend::simd<Arch>` / `simd_policy<Arch>`: a tiled, flash-style
 * kernel with an online softmax (the reference kernel's recurrence, backend/reference/softmax.hpp).
 *
 * Per call: K is packed by key tiles of BK = U·W keys (W = vector width; U = 4 with 32 vector
 * registers, 8 with 16: 64 float keys either way), feature-major inside a tile so that keys are
 * the SIMD dimension; V is copied with its rows padded to W, each key tile flagged when its
 * values hold a NaN or ±∞ (its P·V then skips zero weights: 0·∞ = NaN must not reach a row that
 * masks the key). Per query tile of BQ rows (pre-scaled by scale·log₂e, so the exponent is a
 * bare exp2):
 *
 *     S   = Q̂ Kᵀ             register-blocked micro-kernel of R = 6 rows × 4W keys with 32
 *                            vector registers, 6×2W with 16 (four calls per tile); d-loop of broadcast·FMA
 *     S  += log₂e·bias        additive encodings (ALiBi, T5, tables): one bias(s, t) call per
 *                            diagonal t − s of the tile when positions are offsets (the bias
 *                            contract: a function of t − s), else one per entry
 *     mask                   only on tiles that straddle the causal diagonal or the end of K;
 *                            tiles entirely above it are skipped (never computed)
 *     m, l, α, P = 2^(S−m)   W rows at a time: row maxima and sums by transposing reductions
 *                            (compat::hmaxp/haddp), vectorised exp2 (polynomial, exact 0 for
 *                            masked entries), α of the W rows by one exp2
 *     O   = α·O + P V         register-blocked micro-kernel, 6×(≤4W) (16 registers: 6×(≤2W))
 *
 * Calls of at most `softmax_direct_max_rows` query rows (decode steps over a KV cache) take the
 * direct kernel instead (`softmax_direct`): K and V read as they are, no packing.
 *
 * Memory: the packed K and V (O(n·d)) and per-thread tiles, all in a reused `simd_workspace`:
 * no allocation and no page fault per call in steady state. Encodings with a value term (Shaw)
 * or a URPE reweighting, and non-additive, non-linearizable scores (DeBERTa, Shaw, XL's direct
 * score) fall back to the reference kernel (docs/performance.md).
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/merge.hpp>
#include <lrpe/core/paged.hpp>
#include <lrpe/backend/reference/softmax.hpp>
#include <lrpe/backend/simd/detail/exp2.hpp>
#include <lrpe/backend/simd/detail/micro_kernels.hpp>
#include <lrpe/backend/simd/detail/prefetch.hpp>
#include <lrpe/backend/simd/detail/stored.hpp>
#include <lrpe/backend/simd/parallel.hpp>
#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/backend/simd/workspace.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/backend/simd/detail/tuning.hpp>
#include <lrpe/detail/mul_add.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <tuple>
#include <type_traits>
#include <utility>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// No additive bias (plain content logits).
struct no_bias {};

/// The shared, read-only part of one softmax call: packed K and V, key-tile bounds.
template <class T>
struct softmax_shared {
  const T* kp;           ///< packed K: tiles × d × BK
  const T* vp;           ///< V: nk × dvp
  const position_t* kb;  ///< per key tile: min, max position, 1 if its V rows hold a NaN or ±∞ (else 0)
  index_t d, dv, dvp, nk, tiles;
  bool prefetch;  ///< packed K and V past the L3 share: each key tile prefetches the next (softmax_tile_prefetch_bytes)
};

/**
 * An additive bias in the kernels' base-2 logits: log₂e·b, formed in double and, when finite,
 * held within ±max(T). A finite table entry past max(T)/log₂e (−3.4e38, float's "minus
 * infinity" of many masks, is one) would otherwise become an infinite logit: NaN rows for +,
 * and for − rows taken as fully masked where the reference gives their softmax. Infinite and
 * NaN biases pass as they are (a −∞ bias masks, as on the reference).
 */
template <class T>
inline T bias_log2(double b) noexcept {
  constexpr double top = static_cast<double>(std::numeric_limits<T>::max());
  if (std::isinf(b)) return static_cast<T>(b);
  return static_cast<T>(std::clamp(std::numbers::log2e * b, -top, top));  // NaN stays NaN
}

/**
 * The working state of one query tile [i0, i0 + bq): the scaled queries, the scores of the key
 * tile in hand, the output accumulator and the online-softmax row statistics, all in the
 * workspace's scratch; the rows' positions (rows past bq repeat the last real one).
 */
template <class T, class A>
struct query_tile {
  using tl = softmax_tiling<T, A>;
  T* qt;      ///< Q̂ = scale·log₂e·Q, bqp × d (rows past bq zero)
  T* st;      ///< S, BQ × BK, then the diagonal bias table (BK + BQ)
  T* ot;      ///< O accumulator, BQ × dvp
  T* m;       ///< running row maxima
  T* l;       ///< running row sums
  T* alpha;   ///< this key tile's rescale factors 2^(m_old − m_new)
  index_t i0, bq, bqp;
  position_t q_min, q_max;
  position_t pos[tl::BQ];
  index_t group_keys[tl::BQ / tl::R + 1];  ///< per group of R rows: keys of the tile visible to it (0: none)
};

/// A row's natural log-sum-exp from its base-2 running max m and sum l (−∞ when l = 0).
template <class T>
T log_sum_exp_of(T m, T l) {
  return l != T(0) ? (m + std::log2(l)) * std::numbers::ln2_v<T> : -std::numeric_limits<T>::infinity();
}

/// Keys k0, k0 + 1, … (bk of them) visible to a query at s under `mask`: [first, end).
inline std::pair<index_t, index_t> visible_keys(const key_mask& mask, position_t s, position_t k0, index_t bk) noexcept {
  const position_t lo = mask.lo(s);
  const index_t first = lo == key_mask::lowest ? 0 : visible_prefix(lo - 1, k0, bk);
  return {first, std::max(first, visible_prefix(mask.hi(s), k0, bk))};
}

/// The running max and sum a row starts from: −∞ and 0, or with a sink σ, log₂e·σ and 1.
template <class T, class SV>
std::pair<T, T> row_start(const softmax_problem<T, SV>& p) noexcept {
  if (p.sink == -std::numeric_limits<double>::infinity()) return {-std::numeric_limits<T>::infinity(), T(0)};
  return {bias_log2<T>(p.sink), T(1)};
}

/// S = c·tanh(S/c) (base-2 logits and cap) on the first `keys` entries of `rows` rows of stride `ld`.
template <class T, class A>
LRPE_ALWAYS_INLINE void soft_cap_rows(T* s, index_t rows, index_t ld, index_t keys, T cap) {
  using B = xsimd::batch<T, A>;
  constexpr index_t W = static_cast<index_t>(B::size);
  const B c(cap), inv(T(1) / cap);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < keys; j += W) (c * xsimd::tanh(B::load_aligned(s + i * ld + j) * inv)).store_aligned(s + i * ld + j);
}

/// Loads Q̂ and the positions of the tile, zeroes O, starts m and l (`row_start`).
template <class T, class A>
LRPE_ALWAYS_INLINE void start_query_tile(query_tile<T, A>& t, const softmax_problem<T>& p, const matrix_view<const T>& q,
                                         T qscale, const softmax_shared<T>& sh, index_t i0, simd_workspace& ws) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t BQ = tl::BQ, BK = tl::BK;
  const index_t d = sh.d, dvp = sh.dvp;
  t.i0 = i0;
  t.bq = std::min(BQ, p.nq - i0);
  t.bqp = round_up(t.bq, tl::R);
  t.qt = ws.get<T>(simd_workspace::q_tile, BQ * d);
  t.st = ws.get<T>(simd_workspace::s_tile, BQ * BK + BK + BQ);
  t.ot = ws.get<T>(simd_workspace::o_tile, BQ * dvp);
  T* stats = ws.get<T>(simd_workspace::row_stats, 3 * BQ);
  t.m = stats;
  t.l = stats + BQ;
  t.alpha = stats + 2 * BQ;
  for (index_t i = 0; i < t.bqp; ++i) {
    T* dst = t.qt + i * d;
    if (i < t.bq) {
      const T* src = q.row(i0 + i);
      for (index_t c = 0; c < d; ++c) dst[c] = src[c] * qscale;
      t.pos[i] = p.q_positions[i0 + i];
    } else {
      std::fill(dst, dst + d, T(0));
      t.pos[i] = t.pos[t.bq - 1];
    }
    std::fill(t.ot + i * dvp, t.ot + (i + 1) * dvp, T(0));
  }
  const auto [m0, l0] = row_start(p);
  std::fill(t.m, t.m + BQ, m0);  // the softmax step reads every row, W at a time
  std::fill(t.l, t.l + BQ, l0);
  t.q_min = t.q_max = t.pos[0];
  for (index_t i = 1; i < t.bq; ++i) {
    t.q_min = std::min(t.q_min, t.pos[i]);
    t.q_max = std::max(t.q_max, t.pos[i]);
  }
}

/// Per group of R rows, the keys of tile [j0, j0 + bk) that the group's rows may see: a prefix
/// (up to the last key some row sees) when the key positions are offsets; 0 skips the group in
/// this tile.
template <class T, class A>
LRPE_ALWAYS_INLINE void count_visible_keys(query_tile<T, A>& t, const softmax_problem<T>& p, index_t j0, index_t bk,
                                           position_t k_min, position_t k_max) {
  constexpr index_t R = softmax_tiling<T, A>::R;
  const bool whole = p.mask.sees_all(t.q_min, t.q_max, k_min, k_max);
  for (index_t g = 0; g * R < t.bqp; ++g) {
    index_t n_vis = bk;
    if (!whole) {
      position_t g_min = t.pos[g * R], g_max = g_min;
      for (index_t r = 1; r < R; ++r) {
        g_min = std::min(g_min, t.pos[g * R + r]);
        g_max = std::max(g_max, t.pos[g * R + r]);
      }
      if (!p.mask.may_see(g_min, g_max, k_min, k_max)) n_vis = 0;
      else if (!p.k_positions.is_array()) n_vis = visible_prefix(p.mask.hi(g_max), p.k_positions[j0], bk);
    }
    t.group_keys[g] = n_vis;
  }
}

/// S = Q̂Kᵀ for key tile jt, group by group. With `prefix` (mask on, keys as offsets) only the
/// whole vectors of each group's visible prefix are formed; the masking step sets the rest to −∞.
template <class T, class A>
LRPE_ALWAYS_INLINE void tile_scores(query_tile<T, A>& t, const softmax_shared<T>& sh, index_t jt, bool prefix) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t BK = tl::BK, R = tl::R;
  const index_t d = sh.d, j0 = jt * BK;
  const T* kp = sh.kp + jt * d * BK;
  const bool fetch_next = sh.prefetch && jt + 1 < sh.tiles;
  const auto next_v_bytes = fetch_next ? static_cast<std::size_t>(std::min(BK, sh.nk - j0 - BK) * sh.dvp) * sizeof(T) : 0;
  for (index_t i = 0; i < t.bqp; i += R) {
    if (fetch_next) {  // the next tile's K and V, one slice per row group
      const auto g = static_cast<std::size_t>(i / R), groups = static_cast<std::size_t>(t.bqp / R);
      prefetch_part(kp + d * BK, static_cast<std::size_t>(d * BK) * sizeof(T), g, groups);
      prefetch_part(sh.vp + (j0 + BK) * sh.dvp, next_v_bytes, g, groups);
    }
    if (t.group_keys[i / R] == 0) continue;
    qk_micro_prefix<R, T, A>(prefix ? t.group_keys[i / R] : BK, t.qt + i * d, d, kp, d, t.st + i * BK, BK);
  }
}

/**
 * S += log₂e·bias(s, t) for key tile [j0, j0 + bk). A pair-keyed bias (`is_toeplitz_v` false)
 * is evaluated per entry (padding rows repeat the last real row's position). With offsets for
 * both sides a Toeplitz bias depends on t − s only: one call per diagonal. Row i, key j reads
 * entry e = bqp − 1 − i + j, the diagonal δ = (k0 + j) − (q0 + i). Only the entries of real
 * rows and keys (i < bq, j < bk) are evaluated, as bias(q0, k0 + j − i) for j ≥ i and
 * bias(q0 + i − j, k0) below: both arguments are positions of the call's real rows and keys,
 * every δ formed is the difference of two of them, and no position past them is (the padding
 * rows' and keys' entries are 0, their outputs discarded or masked).
 */
template <class T, class A, class Bias>
LRPE_ALWAYS_INLINE void add_tile_bias(query_tile<T, A>& t, const softmax_problem<T>& p, const Bias& bias, index_t j0,
                                      index_t bk) {
  using B = xsimd::batch<T, A>;
  using tl = softmax_tiling<T, A>;
  constexpr index_t W = tl::W, U = tl::U, BK = tl::BK, BQ = tl::BQ;
  const index_t bq = t.bq, bqp = t.bqp;
  constexpr bool toeplitz = is_toeplitz_v<std::remove_cvref_t<decltype(*bias)>>;
  if (toeplitz && !p.q_positions.is_array() && !p.k_positions.is_array()) {
    T* tb = t.st + BQ * BK;
    const position_t q0 = p.q_positions[t.i0], k0 = p.k_positions[j0];
    const index_t e_lo = bqp - bq, e_hi = bqp - 1 + bk - 1;
    for (index_t e = 0; e < BK + bqp - 1; ++e) {
      // δ = j − i ≥ 0: (q0, k0 + δ), key k0 + δ real; δ < 0: (q0 − δ, k0), query row −δ real
      const index_t delta = e - (bqp - 1);
      tb[e] = e < e_lo || e > e_hi ? T(0)
                                   : bias_log2<T>(delta >= 0 ? bias->bias(q0, k0 + delta) : bias->bias(q0 - delta, k0));
    }
    for (index_t i = 0; i < bqp; ++i) {
      const T* row_b = tb + (bqp - 1 - i);
      T* srow = t.st + i * BK;
      for (index_t u = 0; u < U; ++u)
        (B::load_aligned(srow + u * W) + B::load_unaligned(row_b + u * W)).store_aligned(srow + u * W);
    }
  } else {
    for (index_t i = 0; i < bqp; ++i) {
      T* srow = t.st + i * BK;
      for (index_t j = 0; j < bk; ++j) srow[j] += bias_log2<T>(bias->bias(t.pos[i], p.k_positions[j0 + j]));
    }
  }
}

/// S = −∞ where key j0 + j is not visible to row i (past the tile's end, or hidden by the mask).
template <class T, class A>
LRPE_ALWAYS_INLINE void mask_tile_scores(query_tile<T, A>& t, const softmax_problem<T>& p, index_t j0, index_t bk) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t BK = tl::BK, R = tl::R;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  for (index_t i = 0; i < t.bqp; ++i) {
    if (t.group_keys[i / R] == 0) continue;
    T* srow = t.st + i * BK;
    const position_t s = t.pos[i];
    if (!p.k_positions.is_array()) {  // keys k0 + j: the visible ones are a run [first, end)
      const auto [first, end] = visible_keys(p.mask, s, p.k_positions[j0], bk);
      std::fill(srow, srow + first, neg_inf);
      std::fill(srow + end, srow + BK, neg_inf);
    } else {
      for (index_t j = 0; j < BK; ++j)
        if (j >= bk || !p.mask.visible(s, p.k_positions[j0 + j])) srow[j] = neg_inf;
    }
  }
}

/**
 * The online softmax step, W rows at a time: m, l, α, P = 2^(S − m) in place of S. The rows'
 * maxima and sums come from transposing reductions (a few vector ops per row, not a horizontal
 * reduction each) and α for the W rows from one vector exp2. Rows of skipped groups (and past
 * bqp) read as −∞: their m, l stay as they are and their S row is neither read nor written.
 */
template <class T, class A>
LRPE_ALWAYS_INLINE void online_softmax_step(query_tile<T, A>& t) {
  using B = xsimd::batch<T, A>;
  using tl = softmax_tiling<T, A>;
  constexpr index_t W = tl::W, U = tl::U, BK = tl::BK, R = tl::R;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  const auto live = [&](index_t i) { return i < t.bqp && t.group_keys[i / R] > 0; };
  for (index_t b0 = 0; b0 < t.bqp; b0 += W) {
    B part[W];
    for (index_t r = 0; r < W; ++r) {
      if (live(b0 + r)) {
        const T* srow = t.st + (b0 + r) * BK;
        B mx = B::load_aligned(srow);
        for (index_t u = 1; u < U; ++u) mx = xsimd::max(mx, B::load_aligned(srow + u * W));
        part[r] = mx;
      } else {
        part[r] = B(neg_inf);
      }
    }
    const B m_old = B::load_aligned(t.m + b0);
    const B m_new = xsimd::max(m_old, compat::hmaxp(part));
    // a row with nothing visible yet (m_new = −∞) shifts by 0: its P is 0, its α 0, its l 0
    const B shift = xsimd::select(m_new == B(neg_inf), B(T(0)), m_new);
    const B a = exp2_nonpositive<T, A>(m_old - shift);
    alignas(64) T sh_r[W];
    shift.store_aligned(sh_r);
    for (index_t r = 0; r < W; ++r) {
      if (live(b0 + r)) {
        T* srow = t.st + (b0 + r) * BK;
        const B mb(sh_r[r]);
        B sum(T(0));
        for (index_t u = 0; u < U; ++u) {
          const B e = exp2_nonpositive<T, A>(B::load_aligned(srow + u * W) - mb);
          e.store_aligned(srow + u * W);
          sum += e;
        }
        part[r] = sum;
      } else {
        part[r] = B(T(0));
      }
    }
    compat::fma(a, B::load_aligned(t.l + b0), compat::haddp(part)).store_aligned(t.l + b0);
    m_new.store_aligned(t.m + b0);
    a.store_aligned(t.alpha + b0);
  }
}

/// O = α·O + P V for key tile jt. Keys past a group's visible prefix have P = 0: not read. A
/// tile whose values hold a NaN or ±∞ skips every zero weight (masked keys of rows inside the
/// prefix, arrays, −∞ biases).
template <class T, class A>
LRPE_ALWAYS_INLINE void accumulate_tile_values(query_tile<T, A>& t, const softmax_shared<T>& sh, index_t jt) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t BK = tl::BK, R = tl::R;
  const T* vt = sh.vp + jt * BK * sh.dvp;
  const bool v_finite = sh.kb[3 * jt + 2] == 0;
  for (index_t i = 0; i < t.bqp; i += R) {
    const index_t keys = t.group_keys[i / R];
    if (keys == 0) continue;
    T* o = t.ot + i * sh.dvp;
    if (v_finite) pv_rows<R, T, A>(t.st + i * BK, BK, 1, t.alpha + i, vt, sh.dvp, keys, o);
    else pv_rows<R, T, A, true>(t.st + i * BK, BK, 1, t.alpha + i, vt, sh.dvp, keys, o);
  }
}

/// out = O / l per real row; a row that saw no key is zero.
template <class T, class A>
LRPE_ALWAYS_INLINE void finish_query_tile(const query_tile<T, A>& t, const softmax_problem<T>& p,
                                          const softmax_shared<T>& sh) {
  for (index_t i = 0; i < t.bq; ++i) {
    T* o = p.out.row(t.i0 + i);
    const T* src = t.ot + i * sh.dvp;
    if (t.l[i] != T(0)) {  // NaN (a NaN or overflowing logit) divides through: a NaN row
      const T inv = T(1) / t.l[i];
      for (index_t c = 0; c < sh.dv; ++c) o[c] = src[c] * inv;
    } else {
      for (index_t c = 0; c < sh.dv; ++c) o[c] = T(0);
    }
    if (p.lse != nullptr) p.lse[t.i0 + i] = log_sum_exp_of(t.m[i], t.l[i]);
  }
}

/**
 * One query tile [i0, i0 + bq) of the online softmax on the scratch of workspace `ws`: per key
 * tile, the visible keys, S = Q̂Kᵀ, the bias, the mask, the softmax step and O = α·O + P V.
 * @param bias `no_bias` or a pointer to an additive encoding (`bias(s, t)`).
 */
template <class T, class A, class Bias>
void softmax_query_tile(const softmax_problem<T>& p, const matrix_view<const T>& q, T qscale, T cap, const Bias& bias,
                        const softmax_shared<T>& sh, index_t i0, simd_workspace& ws) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t BK = tl::BK, R = tl::R;
  query_tile<T, A> t;
  start_query_tile(t, p, q, qscale, sh, i0, ws);
  const bool k_offsets = !p.k_positions.is_array();
  for (index_t jt = 0; jt < sh.tiles; ++jt) {
    const index_t j0 = jt * BK;
    const index_t bk = std::min(BK, sh.nk - j0);
    const position_t k_min = sh.kb[3 * jt], k_max = sh.kb[3 * jt + 1];
    if (!p.mask.may_see(t.q_min, t.q_max, k_min, k_max)) continue;  // no query sees a key: skip the tile
    const bool mask = !p.mask.sees_all(t.q_min, t.q_max, k_min, k_max) || bk < BK;
    count_visible_keys(t, p, j0, bk, k_min, k_max);
    tile_scores(t, sh, jt, mask && k_offsets);
    if (cap != T(0)) {
      for (index_t i = 0; i < t.bqp; i += R)
        if (t.group_keys[i / R] > 0) soft_cap_rows<T, A>(t.st + i * BK, R, BK, BK, cap);
    }
    if constexpr (!std::is_same_v<Bias, no_bias>) add_tile_bias(t, p, bias, j0, bk);
    if (mask) mask_tile_scores(t, p, j0, bk);
    online_softmax_step(t);
    accumulate_tile_values(t, sh, jt);
  }
  finish_query_tile(t, p, sh);
}

/**
 * Query rows [i0, i0 + G) of the direct kernel, which reads K and V as they are (no packing):
 * decode steps and short query blocks, where packing K and V (a pass over both) would cost more
 * than the rows' own work. Per block of BK keys: S = Q̂Kᵀ by per-key dot products whose W partial
 * sums are reduced W keys at a time (compat::haddp), bias and mask, the online softmax step per
 * row, then O = α·O + P V with each V row loaded once for the G rows. Keys after every row of
 * the group (causal, key positions an offset) are not read.
 *
 * K and V are read through `k.row(j)` and `v.row(j)`: a strided view (`matrix_view`, whose W
 * consecutive keys are reached by the row stride) or a paged cache's rows (`paged_rows`, each
 * key's row looked up in the block table).
 *
 * One function on purpose (~220 lines, the scores of a block as an always-inline lambda over
 * the key source): split into stages (the state in a struct, each stage an always-inline
 * function), the same operations in the same order made long decode steps measurably slower
 * (bench/results/issue37-before-after.md#the-direct-softmax-kernel), where the tiled kernel
 * above lost nothing. The stages are marked by comments instead.
 */
template <index_t G, class T, class A, class Bias, class SV, class KRows, class VRows>
void softmax_direct_rows(const softmax_problem<T, SV>& p, const matrix_view<const T>& q, const KRows& k,
                         const VRows& v, T qscale, T cap, const Bias& bias, index_t i0, simd_workspace& ws) {
  using SK = std::remove_cvref_t<decltype(*k.row(0))>;
  constexpr bool widen_block = half_precision<SK> && G > 1;
  using B = xsimd::batch<T, A>;
  constexpr index_t W = static_cast<index_t>(B::size), BK = 4 * W, VU = 4;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  constexpr bool has_bias = !std::is_same_v<Bias, no_bias>;
  const index_t d = q.cols, dv = v.cols, dw = d / W * W, dvw = dv / W * W, dvp = round_up(std::max<index_t>(dv, 1), W);
  const index_t dp = round_up(std::max<index_t>(d, 1), W);
  const bool k_offsets = !p.k_positions.is_array();

  T* qt = ws.get<T>(simd_workspace::q_tile, G * dp);
  T* st = ws.get<T>(simd_workspace::s_tile, G * BK);
  T* ot = ws.get<T>(simd_workspace::o_tile, G * dvp);
  position_t qpos[G];
  T m[G], l[G], alpha[G];
  for (index_t r = 0; r < G; ++r) {
    const T* src = q.row(i0 + r);
    for (index_t c = 0; c < d; ++c) qt[r * dp + c] = src[c] * qscale;
    std::fill(qt + r * dp + d, qt + (r + 1) * dp, T(0));
    std::fill(ot + r * dvp, ot + (r + 1) * dvp, T(0));
    qpos[r] = p.q_positions[i0 + r];
    std::tie(m[r], l[r]) = row_start(p);
  }
  // keys at k0, k0 + 1, …: those before the group's first visible key (a window, a chunk) and
  // after its last (causal, a chunk) are never read
  index_t j_first = 0, n_vis = p.nk;
  if (!p.mask.none() && k_offsets && p.nk > 0) {
    position_t q_min = qpos[0], q_max = qpos[0];
    for (index_t r = 1; r < G; ++r) {
      q_min = std::min(q_min, qpos[r]);
      q_max = std::max(q_max, qpos[r]);
    }
    j_first = visible_keys(p.mask, q_min, p.k_positions[0], p.nk).first;
    n_vis = std::max(j_first, visible_keys(p.mask, q_max, p.k_positions[0], p.nk).second);
  }

  // K and V of the keys read past L2: the next block's K and V rows are prefetched, W of them per
  // key vector of the block (softmax_direct_prefetch_bytes)
  const bool prefetch =
      static_cast<std::size_t>(n_vis) * static_cast<std::size_t>(d + dv) * sizeof(T) >= softmax_direct_prefetch_bytes;

  // S = Q̂Kᵀ of one row over keys.row(base) … keys.row(base + bk − 1): per key W partial sums,
  // reduced W keys at a time; W keys a row stride apart (a strided view, or a paged run inside
  // one block) are read by stepping, other paged keys through W row pointers
  const auto block_scores = [&](const auto& keys, index_t base, index_t j0, index_t bk, const T* qr, T* sr,
                                index_t r) LRPE_ALWAYS_INLINE_LAMBDA {
    using R = std::remove_cvref_t<decltype(keys)>;
    using SR = std::remove_cvref_t<decltype(*keys.row(0))>;
    constexpr bool paged = lrpe::detail::is_paged_rows_v<R>;
    for (index_t u = 0; u * W < bk; ++u) {
      if (prefetch && r == 0) {
        const index_t jp = j0 + BK + u * W, je = std::min(jp + W, n_vis);
        for (index_t j = jp; j < je; ++j) {
          prefetch_row<3>(v.row(j), dv);
          if constexpr (!widen_block) prefetch_row<3>(k.row(j), d);  // (a tile's: bench/results/issue39-kv-storage.md)
        }
        if constexpr (widen_block) {  // the block after next's K and V into L2 (a paged cache's most)
          for (index_t j = jp + BK; j < std::min(je + BK, n_vis); ++j) {
            prefetch_row<2>(k.row(j), d);
            prefetch_row<2>(v.row(j), dv);
          }
        }
      }
      // W independent accumulators, one per key (a key past the block reads the block's last
      // key; the mask discards it)
      const index_t last = bk - 1 - u * W;
      B part[W];
      for (index_t jj = 0; jj < W; ++jj) part[jj] = B(T(0));
      bool run = last >= W - 1;
      if constexpr (paged) run = run && keys.same_block(base + u * W, W);
      if (run) {
        const index_t ks = keys.row_stride;
        for (index_t c = 0; c < dw; c += W) {
          const B qc = B::load_aligned(qr + c);
          const SR* kr = keys.row(base + u * W) + c;
          for (index_t jj = 0; jj < W; ++jj, kr += ks) part[jj] = compat::fma(qc, load_stored<A>(kr), part[jj]);
        }
      } else if constexpr (paged) {
        const SR* kr[W];
        for (index_t jj = 0; jj < W; ++jj) kr[jj] = keys.row(base + u * W + std::min(jj, last));
        for (index_t c = 0; c < dw; c += W) {
          const B qc = B::load_aligned(qr + c);
          for (index_t jj = 0; jj < W; ++jj) part[jj] = compat::fma(qc, load_stored<A>(kr[jj] + c), part[jj]);
        }
      } else {
        for (index_t c = 0; c < dw; c += W) {
          const B qc = B::load_aligned(qr + c);
          for (index_t jj = 0; jj <= last; ++jj)
            part[jj] = compat::fma(qc, load_stored<A>(keys.row(base + u * W + jj) + c), part[jj]);
        }
      }
      compat::haddp(part).store_aligned(sr + u * W);
    }
    if (dw < d) {  // the last d mod W features
      for (index_t j = 0; j < bk; ++j) {
        const SR* kr = keys.row(base + j);
        T t = 0;
        for (index_t c = dw; c < d; ++c) t = lrpe::detail::mul_add(qr[c], widen(kr[c]), t);
        sr[j] += t;
      }
    }
  };
  T* kt = widen_block ? ws.get<T>(simd_workspace::k_packed, BK * dp) : nullptr;

  for (index_t j0 = j_first; j0 < n_vis; j0 += BK) {
    const index_t bk = std::min(BK, n_vis - j0);
    // S = Q̂Kᵀ: per key W partial sums, reduced W keys at a time; the K block stays in L1 for
    // the group's other rows
    // 16-bit keys read by several rows: the block's keys widened once, into a float tile that
    // every row reads (each row would widen every K vector again)
    matrix_view<const T> k_tile;
    if constexpr (widen_block) {
      for (index_t j = 0; j < bk; ++j) {
        const SK* src = k.row(j0 + j);
        T* dst = kt + j * dp;
        for (index_t c = 0; c < dw; c += W) load_stored<A>(src + c).store_aligned(dst + c);
        for (index_t c = dw; c < d; ++c) dst[c] = widen(src[c]);
      }
      k_tile = matrix_view<const T>(kt, bk, d, dp);
    }
    for (index_t r = 0; r < G; ++r) {
      const T* qr = qt + r * dp;
      T* sr = st + r * BK;
      if constexpr (widen_block) block_scores(k_tile, 0, j0, bk, qr, sr, r);
      else block_scores(k, j0, j0, bk, qr, sr, r);
      if (cap != T(0)) soft_cap_rows<T, A>(sr, 1, BK, round_up(bk, W), cap);
      if constexpr (has_bias) {
        for (index_t j = 0; j < bk; ++j) sr[j] += bias_log2<T>(bias->bias(qpos[r], p.k_positions[j0 + j]));
      }
      // mask: keys past the block and those the mask hides from the row
      if (k_offsets) {
        const auto [first, end] = p.mask.none() ? std::pair<index_t, index_t>(0, bk)
                                                : visible_keys(p.mask, qpos[r], p.k_positions[j0], bk);
        std::fill(sr, sr + first, neg_inf);
        std::fill(sr + end, sr + BK, neg_inf);
      } else {
        std::fill(sr + bk, sr + BK, neg_inf);
        if (!p.mask.none())
          for (index_t j = 0; j < bk; ++j)
            if (!p.mask.visible(qpos[r], p.k_positions[j0 + j])) sr[j] = neg_inf;
      }
      // online softmax step
      B mx = B::load_aligned(sr);
      for (index_t u = 1; u < 4; ++u) mx = xsimd::max(mx, B::load_aligned(sr + u * W));
      const T m_new = std::max(m[r], compat::reduce_max(mx));
      const T shift = m_new == neg_inf ? T(0) : m_new;  // nothing visible yet: P = 0, α = 0
      const T a = std::exp2(m[r] - shift);
      B sum(T(0));
      for (index_t u = 0; u < 4; ++u) {
        const B e = exp2_nonpositive<T, A>(B::load_aligned(sr + u * W) - B(shift));
        e.store_aligned(sr + u * W);
        sum += e;
      }
      l[r] = lrpe::detail::mul_add(a, l[r], compat::reduce_add(sum));
      m[r] = m_new;
      alpha[r] = a;
    }
    // O = α·O + P V: VU column vectors of NR rows in registers, each V row loaded once per NR
    // rows. With 16 vector registers NR ≤ 2: 4 rows' 16 accumulators and the 4 V vectors do
    // not fit, and GCC kept accumulators on the stack (bench/results/tuning.md#softmax-direct-rows).
    // SkipZero: leave out the products of zero weights (the block's values hold a NaN or ±∞)
    const auto pv_rows = [&]<index_t NR, bool SkipZero>(std::integral_constant<index_t, NR>,
                                                        std::bool_constant<SkipZero>,
                                                        index_t r0) LRPE_ALWAYS_INLINE_LAMBDA {
      for (index_t c0 = 0; c0 < dvw; c0 += VU * W) {
        const index_t vu = std::min(VU, (dvw - c0) / W);
        B acc[NR][VU];
        for (index_t r = 0; r < NR; ++r)
          for (index_t u = 0; u < VU; ++u)
            acc[r][u] = u < vu ? B(alpha[r0 + r]) * B::load_aligned(ot + (r0 + r) * dvp + c0 + u * W) : B(T(0));
        for (index_t j = 0; j < bk; ++j) {
          const SV* vr = v.row(j0 + j) + c0;
          B vb[VU];
          for (index_t u = 0; u < VU; ++u) vb[u] = u < vu ? load_stored<A>(vr + u * W) : B(T(0));
          for (index_t r = 0; r < NR; ++r) {
            if constexpr (SkipZero) {
              if (st[(r0 + r) * BK + j] == T(0)) continue;
            }
            const B pj(st[(r0 + r) * BK + j]);
            for (index_t u = 0; u < VU; ++u) acc[r][u] = compat::fma(pj, vb[u], acc[r][u]);
          }
        }
        for (index_t r = 0; r < NR; ++r)
          for (index_t u = 0; u < vu; ++u) acc[r][u].store_aligned(ot + (r0 + r) * dvp + c0 + u * W);
      }
    };
    // A zero weight (a masked key, a −∞ bias, an underflow) times a NaN or ±∞ value would reach
    // its row (0·∞ = NaN): a block with both takes the products of nonzero weights only. The
    // values are read for this only when one of the block's real keys (not its padding past
    // bk) has a zero weight; otherwise the test costs a compare per weight vector.
    bool zero_weight = false;
    {
      const index_t bkw = bk / W * W;
      xsimd::batch_bool<T, A> zero_w(false);
      for (index_t r = 0; r < G; ++r) {
        for (index_t j = 0; j < bkw; j += W) zero_w = zero_w | (B::load_aligned(st + r * BK + j) == B(T(0)));
        for (index_t j = bkw; j < bk; ++j) zero_weight = zero_weight || st[r * BK + j] == T(0);
      }
      zero_weight = zero_weight || xsimd::any(zero_w);
    }
    bool skip_zero = false;
    for (index_t j = 0; zero_weight && j < bk && !skip_zero; ++j) skip_zero = !all_finite_stored<T, A>(v.row(j0 + j), dv);
    constexpr index_t GR = wide_register_file<A> ? G : std::min<index_t>(G, 2);
    const auto pv_all = [&]<bool SkipZero>(std::bool_constant<SkipZero> skip) LRPE_ALWAYS_INLINE_LAMBDA {
      for (index_t r0 = 0; r0 + GR <= G; r0 += GR) pv_rows(std::integral_constant<index_t, GR>{}, skip, r0);
      if constexpr (G % GR != 0) pv_rows(std::integral_constant<index_t, G % GR>{}, skip, G - G % GR);
      // the last dv mod W columns (mul_add: the same rounding in both variants)
      for (index_t c = dvw; c < dv; ++c) {
        for (index_t r = 0; r < G; ++r) {
          T o = alpha[r] * ot[r * dvp + c];
          for (index_t j = 0; j < bk; ++j)
            if (!SkipZero || st[r * BK + j] != T(0)) o = lrpe::detail::mul_add(st[r * BK + j], widen(v.row(j0 + j)[c]), o);
          ot[r * dvp + c] = o;
        }
      }
    };
    if (skip_zero) pv_all(std::true_type{});
    else pv_all(std::false_type{});
  }

  for (index_t r = 0; r < G; ++r) {
    T* o = p.out.row(i0 + r);
    if (l[r] != T(0)) {  // NaN (a NaN or overflowing logit) divides through: a NaN row
      const T inv = T(1) / l[r];
      for (index_t c = 0; c < dv; ++c) o[c] = ot[r * dvp + c] * inv;
    } else {
      for (index_t c = 0; c < dv; ++c) o[c] = T(0);
    }
    if (p.lse != nullptr) p.lse[i0 + r] = log_sum_exp_of(m[r], l[r]);
  }
}

template <class T, class A, class Bias, class SK, class SV>
void softmax_direct(const softmax_problem<T, SV>& p, const matrix_view<const T>& q, const matrix_view<const SK>& k,
                    T qscale, T cap, const Bias& bias, resources res);

/**
 * Split-KV (flash-decoding): keys [first, end) (those some row may see) in `parts` contiguous
 * ranges, one per thread, each a direct call of its own into a part output and log-sum-exp (the
 * sink in the first part only), then the parts merged row by row (`lrpe::detail::merge_row`, in
 * double). Keys outside [first, end) are hidden from every row: they add nothing.
 */
template <class T, class A, class Bias, class SK, class SV>
void softmax_direct_split(const softmax_problem<T, SV>& p, const matrix_view<const T>& q, const matrix_view<const SK>& k,
                          T qscale, T cap, const Bias& bias, resources res, index_t parts, index_t first, index_t end) {
  const index_t nq = p.nq, dv = p.v.cols, per = (end - first + parts - 1) / parts;
  T* outs = res.ws->get<T>(simd_workspace::split_parts, parts * nq * (dv + 1));
  T* lses = outs + parts * nq * dv;
  res.pool->run(parts, [&](index_t part, int t) {
    const index_t j0 = std::min(end, first + part * per), j1 = std::min(end, j0 + per);
    softmax_problem<T, SV> sub = p;
    sub.nk = j1 - j0;
    sub.v = matrix_view<const SV>(p.v.row(j0), j1 - j0, dv, p.v.row_stride);
    sub.k_positions = p.k_positions.slice(j0, j1 - j0);
    sub.out = matrix_view<T>(outs + part * nq * dv, nq, dv, dv);
    sub.lse = lses + part * nq;
    if (part > 0) sub.sink = -std::numeric_limits<double>::infinity();  // joins once
    const matrix_view<const SK> k_part(k.row(j0), j1 - j0, k.cols, k.row_stride);
    softmax_direct<T, A>(sub, q, k_part, qscale, cap, bias, {t == 0 ? res.ws : &res.pool->workspace(t), nullptr});
  });
  struct parts_t {
    const T* outs;
    const T* lses;
    index_t nq, dv;
    [[nodiscard]] T lse(std::size_t part, index_t i) const { return lses[static_cast<index_t>(part) * nq + i]; }
    [[nodiscard]] const T* row(std::size_t part, index_t i) const { return outs + (static_cast<index_t>(part) * nq + i) * dv; }
  } all{outs, lses, nq, dv};
  for (index_t i = 0; i < nq; ++i) {
    T lse = 0;
    lrpe::detail::merge_row(all, static_cast<std::size_t>(parts), i, dv, p.out.row(i), lse);
    if (p.lse != nullptr) p.lse[i] = lse;
  }
}

/// The direct kernel over all rows, G = 4 at a time (on the pool when there are several groups;
/// split over the keys when there are fewer groups than threads and keys enough).
template <class T, class A, class Bias, class SK, class SV>
void softmax_direct(const softmax_problem<T, SV>& p, const matrix_view<const T>& q, const matrix_view<const SK>& k,
                    T qscale, T cap, const Bias& bias, resources res) {
  constexpr index_t G = 4;
  const index_t groups = (p.nq + G - 1) / G;
  if (res.pool != nullptr && groups < res.pool->size() && p.nk > 0) {
    // the keys some row may see (keys as offsets): only those are split
    index_t first = 0, end = p.nk;
    if (!p.mask.none() && !p.k_positions.is_array()) {
      const auto [q_min, q_max] = reference_detail::position_range(p.q_positions, 0, p.nq);
      first = visible_keys(p.mask, q_min, p.k_positions[0], p.nk).first;
      end = std::max(first, visible_keys(p.mask, q_max, p.k_positions[0], p.nk).second);
    }
    const index_t parts = std::min<index_t>(res.pool->size(), (end - first) / softmax_split_min_keys);
    if (parts >= 2) {
      softmax_direct_split<T, A>(p, q, k, qscale, cap, bias, res, parts, first, end);
      return;
    }
  }
  const auto group = [&](index_t g, simd_workspace& ws) {
    const index_t i0 = g * G;
    switch (std::min(G, p.nq - i0)) {
      case 1: softmax_direct_rows<1, T, A>(p, q, k, p.v, qscale, cap, bias, i0, ws); break;
      case 2: softmax_direct_rows<2, T, A>(p, q, k, p.v, qscale, cap, bias, i0, ws); break;
      case 3: softmax_direct_rows<3, T, A>(p, q, k, p.v, qscale, cap, bias, i0, ws); break;
      default: softmax_direct_rows<4, T, A>(p, q, k, p.v, qscale, cap, bias, i0, ws); break;
    }
  };
  if (res.pool == nullptr || groups < 2) {
    for (index_t g = 0; g < groups; ++g) group(g, *res.ws);
    return;
  }
  res.pool->run(groups, [&](index_t item, int t) { group(item, t == 0 ? *res.ws : res.pool->workspace(t)); });
}

/// p with its values replaced by `v` (the query tiles read V from its packed copy).
template <class T, class SV>
softmax_problem<T> with_values(const softmax_problem<T, SV>& p, const matrix_view<const T>& v) noexcept {
  return {p.nq, p.nk, v, p.out, p.q_positions, p.k_positions, p.mask, p.tile, p.lse, p.sink};
}

/// The whole call: pack K and V on `res.ws` (widened, when stored in 16 bits), then the query
/// tiles (on the pool if any); short query blocks take the direct kernel instead.
template <class T, class A, class Bias, class SK, class SV>
void softmax_simd(const softmax_problem<T, SV>& p, const matrix_view<const T>& q, const matrix_view<const SK>& k,
                  T scale, T softcap, const Bias& bias, resources res) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t W = tl::W, BK = tl::BK, BQ = tl::BQ;
  const index_t d = q.cols, dv = p.v.cols, nk = p.nk;
  const index_t dvp = round_up(std::max<index_t>(dv, 1), W);
  const index_t tiles = (nk + BK - 1) / BK;
  simd_workspace& ws = *res.ws;
  const T qscale = scale * std::numbers::log2e_v<T>;
  if (!std::isfinite(qscale)) {  // a finite scale within a factor log2(e) of T's largest value
    lrpe::detail::fail<domain_error>("lrpe::softmax_attention (simd backend)", "options.scale",
                                     "must be at most max(T) / log2(e) in magnitude (the kernel folds log2(e) into it)",
                                     scale);
  }
  // the cap in base-2 logits: log₂e·c·tanh(x/c) = c₂·tanh(log₂e·x/c₂) with c₂ = log₂e·c
  const T cap = static_cast<T>(std::min(static_cast<double>(softcap) * std::numbers::log2e,
                                        static_cast<double>(std::numeric_limits<T>::max())));
  if (p.nq <= softmax_direct_max_rows) {  // decode steps, short blocks: no packing
    softmax_direct<T, A>(p, q, k, qscale, cap, bias, res);
    return;
  }

  T* kp = ws.get<T>(simd_workspace::k_packed, tiles * d * BK);
  T* vp = ws.get<T>(simd_workspace::v_packed, std::max<index_t>(nk, 1) * dvp);
  auto* kb = ws.get<position_t>(simd_workspace::key_bounds, 3 * std::max<index_t>(tiles, 1));
  for (index_t jt = 0; jt < tiles; ++jt) {
    const index_t j0 = jt * BK, bk = std::min(BK, nk - j0);
    T* dst = kp + jt * d * BK;
    position_t lo = p.k_positions[j0], hi = lo;
    for (index_t j = 0; j < bk; ++j) {
      const SK* src = k.row(j0 + j);
      for (index_t c = 0; c < d; ++c) dst[c * BK + j] = widen(src[c]);
      lo = std::min(lo, p.k_positions[j0 + j]);
      hi = std::max(hi, p.k_positions[j0 + j]);
    }
    for (index_t c = 0; c < d; ++c)
      for (index_t j = bk; j < BK; ++j) dst[c * BK + j] = T(0);
    kb[3 * jt] = lo;
    kb[3 * jt + 1] = hi;
  }
  for (index_t jt = 0; jt < tiles; ++jt) {  // V, and per key tile whether it holds a NaN or ±∞
    const index_t j0 = jt * BK, j1 = std::min(nk, j0 + BK);
    for (index_t j = j0; j < j1; ++j) {
      // (no copy from a V without columns: its data may be null, and memcpy from null is undefined)
      if constexpr (std::is_same_v<SV, T>) {
        if (dv > 0) std::memcpy(vp + j * dvp, p.v.row(j), static_cast<std::size_t>(dv) * sizeof(T));
      } else {
        for (index_t c = 0; c < dv; ++c) vp[j * dvp + c] = widen(p.v.row(j)[c]);
      }
      std::fill(vp + j * dvp + dv, vp + (j + 1) * dvp, T(0));
    }
    kb[3 * jt + 2] = all_finite<T, A>(vp + j0 * dvp, (j1 - j0) * dvp) ? 0 : 1;
  }

  const bool prefetch = static_cast<std::size_t>(tiles * d * BK + nk * dvp) * sizeof(T) >= softmax_tile_prefetch_bytes;
  const softmax_shared<T> sh{kp, vp, kb, d, dv, dvp, nk, tiles, prefetch};
  const softmax_problem<T> pt = with_values(p, matrix_view<const T>(vp, nk, dv, dvp));
  const index_t qtiles = (p.nq + BQ - 1) / BQ;
  if (res.pool == nullptr || qtiles < 2) {
    for (index_t it = 0; it < qtiles; ++it) softmax_query_tile<T, A>(pt, q, qscale, cap, bias, sh, it * BQ, ws);
    return;
  }
  // causal: the last query tiles see the most keys; hand them out first
  res.pool->run(qtiles, [&](index_t item, int t) {
    const index_t it = p.mask.causal ? qtiles - 1 - item : item;
    softmax_query_tile<T, A>(pt, q, qscale, cap, bias, sh, it * BQ, t == 0 ? ws : res.pool->workspace(t));
  });
}

template <class Backend, class T, class SK, class SV>
void softmax_dispatch(const Backend& b, const softmax_problem<T, SV>& p, const dot_logits<T, SK>& l) {
  if (p.nq == 0) return;
  softmax_simd<T, typename Backend::arch_type>(p, l.a, l.b, l.scale, l.softcap, no_bias{}, resolve(b));
}
template <class Backend, class T, class E, class SK, class SV>
void softmax_dispatch(const Backend& b, const softmax_problem<T, SV>& p, const biased_logits<T, E, SK>& l) {
  if (p.nq == 0) return;
  softmax_simd<T, typename Backend::arch_type>(p, l.content.a, l.content.b, l.content.scale, l.content.softcap,
                                               l.encoding, resolve(b));
}

template <class Backend, class T>
void acquire_features(const Backend& b, feature_scratch<T>& s, index_t nq, index_t nk, index_t f) {
  simd_workspace& ws = *resolve(b).ws;
  s.q = matrix_view<T>(ws.get<T>(simd_workspace::q_features, nq * f), nq, f, f);
  s.k = matrix_view<T>(ws.get<T>(simd_workspace::k_features, nk * f), nk, f, f);
}

}  // namespace simd_detail

/// SIMD softmax kernel: content logits (no encoding, or encoded features of a linearizable one);
/// K (SK) and V (SV) as T or in 16 bits (`lrpe::half`, `lrpe::bfloat16`, widened as they are read).
template <simd_backend B, class T, class SK, class SV>
void softmax_kernel(const B& b, const softmax_problem<T, SV>& p, const dot_logits<T, SK>& l, const no_value_term&,
                    const no_reweighting&) {
  simd_detail::softmax_dispatch(b, p, l);
}
/// SIMD softmax kernel: content logits plus an additive bias (ALiBi, T5, Toeplitz tables).
template <simd_backend B, class T, class E, class SK, class SV>
void softmax_kernel(const B& b, const softmax_problem<T, SV>& p, const biased_logits<T, E, SK>& l,
                    const no_value_term&, const no_reweighting&) {
  simd_detail::softmax_dispatch(b, p, l);
}
/// Everything else (value terms, URPE reweighting, per-pair scores): the reference kernel, on
/// values of the scalar type (the front end widens 16-bit ones for it).
template <simd_backend B, class T, class SV, class Logits, class ValueTerm, class Reweight>
  requires values_in_scalar<SV, T>
void softmax_kernel(const B&, const softmax_problem<T, SV>& p, const Logits& l, const ValueTerm& v, const Reweight& c) {
  softmax_kernel(reference{}, p, l, v, c);
}

/// Encoded Q and K of linearizable encodings live in the (reused) workspace.
template <simd_backend B, class T>
void acquire_feature_scratch(const B& b, feature_scratch<T>& s, index_t nq, index_t nk, index_t f) {
  simd_detail::acquire_features(b, s, nq, nk, f);
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
