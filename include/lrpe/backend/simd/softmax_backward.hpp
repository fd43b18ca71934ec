// SPDX-License-Identifier: MIT
/**
 * @file softmax_backward.hpp
 * Softmax attention backward for `backend::simd<Arch>` / `simd_policy<Arch>`: FlashAttention-2's
 * algorithm (the reference kernel's, backend/reference/softmax_backward.hpp) on the forward's
 * micro-kernels (detail/micro_kernels.hpp), in the forward's base-2 logits.
 *
 * Per call: Q, dO and K copied as rows padded to the vector width; K packed by key tiles and
 * scaled by scale·log₂e (for S), V packed by key tiles (for dP); per query row its base-2
 * log-sum-exp lse₂ and D_s = dO_s·O_s. Then per key tile, with its dK and dV accumulators, per
 * query tile of BQ rows (tiles entirely above the causal diagonal skipped):
 *
 *     S  = Q (Kᵀ·scale·log₂e) (+ log₂e·bias, mask)   qk_micro, R rows at a time
 *     P  = 2^(S − lse₂)                               exp2_nonpositive (0 where masked)
 *     dP = dO Vᵀ                                       qk_micro on the packed V
 *     dS = P ∘ (dP − D)                                (0 where P = 0)
 *     dV += Pᵀ dO,  dK += dSᵀ Q,  dQ += dS K           pv_micro, P and dS read transposed by stride
 *
 * and dK, dV, dQ are scaled by `scale` once at the end. The key tiles form
 * `softmax_backward_groups` interleaved groups, each with its own partial dQ (tuning.hpp): the
 * result does not depend on the number of threads. URPE reweighting and other scores take the
 * reference kernel; so does a call whose bias gradient is wanted, on the pool (one thread then).
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/backend/reference/softmax_backward.hpp>
#include <lrpe/backend/simd/softmax.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// The read-only, prepared inputs of one backward call (rows padded to the vector width).
template <class T>
struct backward_shared {
  const T* q;      ///< Q, nqp × dp (rows past n_q zero)
  const T* d_out;  ///< dO, nqp × dvp
  const T* k;      ///< K, tiles·BK × dp (for dQ)
  const T* kp;     ///< K·scale·log₂e packed by key tiles: tiles × d × BK (for S)
  const T* vp;     ///< V packed by key tiles: tiles × dv × BK (for dP)
  const T* lse2;   ///< per query row: its log-sum-exp in base 2
  const T* delta;  ///< per query row: D = dO·O
  const position_t* kb;  ///< per key tile: min, max position, 1 if its K rows hold a NaN or ±∞
  index_t d, dv, dp, dvp, nq, nqp, nk, tiles, qtiles;
  T cap;  ///< the soft cap in base-2 logits (0: none)
};

/// Rows per micro-kernel call of dK and dV (rows are keys there): 4·UM accumulators, which
/// leaves room for UM operand vectors with 16 registers as with 32.
inline constexpr index_t backward_key_rows = 4;

/// Per-thread scratch of the backward: one tile pair's S then P, dP then dS, and the dK and dV
/// accumulators of the key tile in hand.
template <class T>
struct backward_scratch {
  T* s;    ///< BQ × BK, then the bias diagonal table (BK + BQ)
  T* dp;   ///< BQ × BK
  T* dk;   ///< BK × dp
  T* dv;   ///< BK × dvp
  T* cap;  ///< BQ × BK: the soft cap's derivative 1 − tanh² per entry (with a cap only)
};

template <class T, class A>
backward_scratch<T> backward_scratch_of(simd_workspace& ws, const backward_shared<T>& sh) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t BQ = tl::BQ, BK = tl::BK;
  const index_t s_size = round_up(BQ * BK + BK + BQ, 16);
  const index_t cap_size = sh.cap != T(0) ? BQ * BK : 0;
  T* base = ws.get<T>(simd_workspace::grad_tile, s_size + BQ * BK + BK * (sh.dp + sh.dvp) + cap_size);
  T* dk = base + s_size + BQ * BK;
  T* dv = dk + BK * sh.dp;
  return {base, base + s_size, dk, dv, dv + BK * sh.dvp};
}

/// S = c·tanh(S/c) on the formed entries of the tile's live groups (base-2 logits and cap), and
/// the derivative 1 − (S/c)² kept in `w.cap` for dS.
template <class T, class A>
LRPE_ALWAYS_INLINE void soft_cap_tile(const query_tile<T, A>& t, backward_scratch<T>& w, T cap, bool prefix) {
  using B = xsimd::batch<T, A>;
  using tl = softmax_tiling<T, A>;
  constexpr index_t W = tl::W, BK = tl::BK, R = tl::R;
  const B c(cap), inv(T(1) / cap), one(T(1));
  for (index_t i = 0; i < t.bqp; ++i) {
    const index_t keys = t.group_keys[i / R];
    if (keys == 0) continue;
    for (index_t j = 0; j < (prefix ? round_up(keys, W) : BK); j += W) {
      const B th = xsimd::tanh(B::load_aligned(w.s + i * BK + j) * inv);
      (c * th).store_aligned(w.s + i * BK + j);
      (one - th * th).store_aligned(w.cap + i * BK + j);
    }
  }
}

/// P = 2^(S − lse₂) and dS = P ∘ (dP − D) in place of S and dP, for the tile's rows; rows past
/// the tile, rows of groups that see none of its keys and rows with no visible key at all
/// (lse = −∞) are 0. Where P is 0, dS is 0 (a masked key's non-finite dP reaches nothing).
template <class T, class A>
LRPE_ALWAYS_INLINE void probabilities_and_ds(const query_tile<T, A>& t, const backward_shared<T>& sh,
                                             backward_scratch<T>& w) {
  using B = xsimd::batch<T, A>;
  using tl = softmax_tiling<T, A>;
  constexpr index_t W = tl::W, U = tl::U, BK = tl::BK, R = tl::R;
  for (index_t i = 0; i < t.bqp; ++i) {
    T* srow = w.s + i * BK;
    T* drow = w.dp + i * BK;
    const T lse2 = sh.lse2[t.i0 + i];
    if (i >= t.bq || t.group_keys[i / R] == 0 || lse2 == -std::numeric_limits<T>::infinity()) {
      std::fill(srow, srow + BK, T(0));
      std::fill(drow, drow + BK, T(0));
      continue;
    }
    const B lb(lse2), db(sh.delta[t.i0 + i]), zero(T(0));
    for (index_t u = 0; u < U; ++u) {
      // (S − lse₂ ≤ 0 up to rounding: held at 0, a probability stays ≤ 1)
      const B p = exp2_nonpositive<T, A>(xsimd::min(B::load_aligned(srow + u * W) - lb, zero));
      const B ds = xsimd::select(p == zero, zero, p * (B::load_aligned(drow + u * W) - db));
      p.store_aligned(srow + u * W);
      ds.store_aligned(drow + u * W);
    }
  }
}

/**
 * One (query tile, key tile) pair: S and dP by groups of R rows (the visible prefix of the key
 * tile when keys are offsets), bias and mask as in the forward, P and dS, then dV += Pᵀ dO and
 * dK += dSᵀ Q over the tile's keys that some row sees, and dQ += dS K into `dq` (a partial).
 * A learnable bias's gradient gets dS_st per visible pair.
 */
template <class T, class A, class Bias>
void backward_tile_pair(const softmax_backward_problem<T>& p, const backward_shared<T>& sh, const Bias& bias,
                        index_t it, index_t jt, backward_scratch<T>& w, T* dq) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t BQ = tl::BQ, BK = tl::BK, R = tl::R, RK = backward_key_rows;
  const softmax_problem<T>& f = p.forward;
  const index_t i0 = it * BQ, j0 = jt * BK, bk = std::min(BK, sh.nk - j0);
  query_tile<T, A> t{};
  t.st = w.s;
  t.i0 = i0;
  t.bq = std::min(BQ, sh.nq - i0);
  t.bqp = round_up(t.bq, R);
  for (index_t i = 0; i < t.bqp; ++i) t.pos[i] = f.q_positions[i0 + std::min(i, t.bq - 1)];
  t.q_min = *std::min_element(t.pos, t.pos + t.bq);
  t.q_max = *std::max_element(t.pos, t.pos + t.bq);
  const position_t k_min = sh.kb[3 * jt], k_max = sh.kb[3 * jt + 1];
  if (!f.mask.may_see(t.q_min, t.q_max, k_min, k_max)) return;  // no query sees a key
  const bool mask = !f.mask.sees_all(t.q_min, t.q_max, k_min, k_max) || bk < BK;
  const bool prefix = mask && !f.k_positions.is_array();
  count_visible_keys(t, f, j0, bk, k_min, k_max);

  index_t keys_seen = 0;  // keys [0, keys_seen) of the tile: every one some row sees
  for (index_t g = 0; g * R < t.bqp; ++g) {
    const index_t keys = t.group_keys[g];
    if (keys == 0) continue;
    keys_seen = std::max(keys_seen, keys);
    const index_t i = g * R, formed = prefix ? keys : BK;
    qk_micro_prefix<R, T, A>(formed, sh.q + (i0 + i) * sh.dp, sh.dp, sh.kp + jt * sh.d * BK, sh.d, w.s + i * BK, BK);
    qk_micro_prefix<R, T, A>(formed, sh.d_out + (i0 + i) * sh.dvp, sh.dvp, sh.vp + jt * sh.dv * BK, sh.dv,
                             w.dp + i * BK, BK);
  }
  if (keys_seen == 0) return;
  if (sh.cap != T(0)) soft_cap_tile(t, w, sh.cap, prefix);
  if constexpr (!std::is_same_v<Bias, no_bias>) add_tile_bias(t, f, bias, j0, bk);
  if (mask) mask_tile_scores(t, f, j0, bk);
  probabilities_and_ds(t, sh, w);

  if constexpr (!std::is_same_v<Bias, no_bias>) {
    if constexpr (learnable_bias_v<biased_logits<T, std::remove_cvref_t<decltype(*bias)>>>) {
      if (p.bias_grad != nullptr) {
        for (index_t i = 0; i < t.bq; ++i)
          for (index_t j = 0; j < bk; ++j)
            if (w.s[i * BK + j] != T(0))
              bias->accumulate_bias_gradient(t.pos[i], f.k_positions[j0 + j], static_cast<double>(w.dp[i * BK + j]),
                                             p.bias_grad);
      }
    }
  }

  if (sh.cap != T(0)) {  // dS of the content: through the cap's derivative (after the bias's dS above)
    using V = xsimd::batch<T, A>;
    const V zero(T(0));
    for (index_t i = 0; i < t.bqp; ++i) {
      const index_t keys = t.group_keys[i / R];
      if (keys == 0) continue;
      for (index_t j = 0; j < (prefix ? round_up(keys, tl::W) : BK); j += tl::W) {
        // (a masked entry's dS is 0 and stays 0, whatever its key held)
        const V ds = V::load_aligned(w.dp + i * BK + j);
        xsimd::select(ds == zero, zero, ds * V::load_aligned(w.cap + i * BK + j)).store_aligned(w.dp + i * BK + j);
      }
    }
  }

  alignas(64) static constexpr T ones[R > RK ? R : RK] = {T(1), T(1), T(1), T(1), T(1), T(1)};
  static_assert(R <= 6 && RK <= 6, "ones[] holds 6 entries");
  const index_t key_rows = round_up(keys_seen, RK);
  for (index_t kr = 0; kr < key_rows; kr += RK) {
    pv_rows<RK, T, A>(w.s + kr, 1, BK, ones, sh.d_out + i0 * sh.dvp, sh.dvp, t.bqp, w.dv + kr * sh.dvp);
    pv_rows<RK, T, A>(w.dp + kr, 1, BK, ones, sh.q + i0 * sh.dp, sh.dp, t.bqp, w.dk + kr * sh.dp);
  }
  const bool k_finite = sh.kb[3 * jt + 2] == 0;
  for (index_t g = 0; g * R < t.bqp; ++g) {
    const index_t keys = t.group_keys[g];
    if (keys == 0) continue;
    const index_t i = g * R;
    // a key tile holding a NaN or ±∞ skips zero weights: 0·∞ must not reach a row that masks the key
    if (k_finite) pv_rows<R, T, A>(w.dp + i * BK, BK, 1, ones, sh.k + j0 * sh.dp, sh.dp, keys, dq + (i0 + i) * sh.dp);
    else pv_rows<R, T, A, true>(w.dp + i * BK, BK, 1, ones, sh.k + j0 * sh.dp, sh.dp, keys, dq + (i0 + i) * sh.dp);
  }
}

/// Key tiles g, g + G, … against every query tile: their dK and dV written (times `scale`), dQ
/// summed into the group's partial `dq`.
template <class T, class A, class Bias>
void backward_key_group(const softmax_backward_problem<T>& p, const backward_shared<T>& sh, const Bias& bias, T scale,
                        index_t g, index_t groups, T* dq, simd_workspace& ws) {
  constexpr index_t BK = softmax_tiling<T, A>::BK;
  backward_scratch<T> w = backward_scratch_of<T, A>(ws, sh);
  std::fill(dq, dq + sh.nqp * sh.dp, T(0));
  for (index_t jt = g; jt < sh.tiles; jt += groups) {
    std::fill(w.dk, w.dk + BK * sh.dp, T(0));
    std::fill(w.dv, w.dv + BK * sh.dvp, T(0));
    for (index_t it = 0; it < sh.qtiles; ++it) backward_tile_pair<T, A>(p, sh, bias, it, jt, w, dq);
    const index_t j0 = jt * BK, bk = std::min(BK, sh.nk - j0);
    for (index_t j = 0; j < bk; ++j) {
      T* dk = p.db.row(j0 + j);
      T* dv = p.dv.row(j0 + j);
      for (index_t c = 0; c < sh.d; ++c) dk[c] = scale * w.dk[j * sh.dp + c];
      for (index_t c = 0; c < sh.dv; ++c) dv[c] = w.dv[j * sh.dvp + c];
    }
  }
}

/// No query or no key: every gradient is zero (written here).
template <class T>
bool backward_is_empty(const softmax_backward_problem<T>& p) {
  if (p.forward.nq > 0 && p.forward.nk > 0) return false;
  for (auto* m : {&p.da, &p.db, &p.dv})
    for (index_t i = 0; i < m->rows; ++i) std::fill(m->row(i), m->row(i) + m->cols, T(0));
  return true;
}

/// Rows [0, rows) of x (cols wide) into dst with rows of `width` (zero padded; rows up to
/// `rows_p` zero), each entry times `scale`.
template <class T>
void copy_padded(const matrix_view<const T>& x, index_t rows, index_t rows_p, index_t width, T scale, T* dst) {
  for (index_t i = 0; i < rows_p; ++i) {
    T* row = dst + i * width;
    index_t c = 0;
    if (i < rows && x.cols > 0)  // (an n×0 view may have null data)
      for (const T* src = x.row(i); c < x.cols; ++c) row[c] = src[c] * scale;
    std::fill(row + c, row + width, T(0));
  }
}

/// x's rows packed by key tiles, feature-major (tiles × cols × BK, keys past n zero), times `scale`.
template <class T>
void pack_key_tiles(const matrix_view<const T>& x, index_t n, index_t tiles, index_t bk_size, T scale, T* dst) {
  std::fill(dst, dst + tiles * x.cols * bk_size, T(0));
  for (index_t j = 0; j < n && x.cols > 0; ++j) {
    const T* src = x.row(j);
    T* tile = dst + (j / bk_size) * x.cols * bk_size + j % bk_size;
    for (index_t c = 0; c < x.cols; ++c) tile[c * bk_size] = src[c] * scale;
  }
}

/**
 * The whole backward call (see the file comment): the forward's lse recomputed by the SIMD
 * forward when not given, the inputs prepared on `res.ws`, the key-tile groups (on the pool
 * when there is one and no bias gradient is summed), then dQ from the groups' partials.
 */
template <class T, class A, class Bias>
void softmax_backward_simd(const softmax_backward_problem<T>& p, const dot_logits<T>& content, const Bias& bias,
                           resources res) {
  using tl = softmax_tiling<T, A>;
  constexpr index_t W = tl::W, BK = tl::BK, BQ = tl::BQ;
  const softmax_problem<T>& f = p.forward;
  const matrix_view<const T>& q = content.a;
  const matrix_view<const T>& k = content.b;
  const T scale = content.scale;
  const T qscale = scale * std::numbers::log2e_v<T>;
  if (!std::isfinite(qscale)) {  // as the forward
    lrpe::detail::fail<domain_error>("lrpe::softmax_attention_backward (simd backend)", "options.scale",
                                     "must be at most max(T) / log2(e) in magnitude (the kernel folds log2(e) into it)",
                                     scale);
  }
  std::vector<T> recomputed;  // (only without the forward's lse: one more forward pass)
  const T* lse = p.lse;
  if (lse == nullptr) {
    recomputed.resize(static_cast<std::size_t>(f.nq));
    row_matrix<T> scratch(f.nq, f.v.cols);
    softmax_problem<T> fwd = f;
    fwd.out = view(scratch);
    fwd.lse = recomputed.data();
    softmax_simd<T, A>(fwd, q, k, scale, content.softcap, bias, res);
    lse = recomputed.data();
  }

  const index_t d = q.cols, dv = f.v.cols, nq = f.nq, nk = f.nk;
  const index_t dp = round_up(std::max<index_t>(d, 1), W), dvp = round_up(std::max<index_t>(dv, 1), W);
  const index_t tiles = (nk + BK - 1) / BK, qtiles = (nq + BQ - 1) / BQ, nqp = qtiles * BQ;
  simd_workspace& ws = *res.ws;
  T* rows = ws.get<T>(simd_workspace::grad_rows, nqp * (dp + dvp + 2) + tiles * BK * dp);
  T* qr = rows;
  T* dor = qr + nqp * dp;
  T* lse2 = dor + nqp * dvp;
  T* delta = lse2 + nqp;
  T* kr = delta + nqp;
  copy_padded(q, nq, nqp, dp, T(1), qr);
  copy_padded(p.d_out, nq, nqp, dvp, T(1), dor);
  copy_padded(k, nk, tiles * BK, dp, T(1), kr);
  for (index_t i = 0; i < nqp; ++i) {
    T acc = 0;
    if (i < nq && dv > 0)
      for (index_t c = 0; c < dv; ++c) acc += p.d_out.row(i)[c] * f.out.row(i)[c];
    delta[i] = acc;
    lse2[i] = i < nq ? lse[i] * std::numbers::log2e_v<T> : -std::numeric_limits<T>::infinity();
  }
  T* kp = ws.get<T>(simd_workspace::k_packed, tiles * d * BK);
  T* vp = ws.get<T>(simd_workspace::v_packed, std::max<index_t>(tiles * dv * BK, 1));
  pack_key_tiles(k, nk, tiles, BK, qscale, kp);
  pack_key_tiles(f.v, nk, tiles, BK, T(1), vp);
  auto* kb = ws.get<position_t>(simd_workspace::key_bounds, 3 * std::max<index_t>(tiles, 1));
  for (index_t jt = 0; jt < tiles; ++jt) {
    const index_t j0 = jt * BK, j1 = std::min(nk, j0 + BK);
    position_t lo = f.k_positions[j0], hi = lo;
    for (index_t j = j0; j < j1; ++j) {
      lo = std::min(lo, f.k_positions[j]);
      hi = std::max(hi, f.k_positions[j]);
    }
    kb[3 * jt] = lo;
    kb[3 * jt + 1] = hi;
    kb[3 * jt + 2] = all_finite<T, A>(kr + j0 * dp, (j1 - j0) * dp) ? 0 : 1;
  }
  const T cap = static_cast<T>(std::min(static_cast<double>(content.softcap) * std::numbers::log2e,
                                        static_cast<double>(std::numeric_limits<T>::max())));  // as the forward
  const backward_shared<T> sh{qr, dor, kr, kp, vp, lse2, delta, kb, d, dv, dp, dvp, nq, nqp, nk, tiles, qtiles, cap};

  const index_t groups = std::min(softmax_backward_groups, tiles);
  T* dq = ws.get<T>(simd_workspace::grad_dq, groups * nqp * dp);
  const auto group = [&](index_t g, simd_workspace& tws) {
    backward_key_group<T, A>(p, sh, bias, scale, g, groups, dq + g * nqp * dp, tws);
  };
  if (res.pool == nullptr || groups < 2 || p.bias_grad != nullptr) {
    for (index_t g = 0; g < groups; ++g) group(g, ws);
  } else {
    res.pool->run(groups, [&](index_t g, int t) { group(g, t == 0 ? ws : res.pool->workspace(t)); });
  }
  for (index_t i = 0; i < nq; ++i) {
    T* out = p.da.row(i);
    for (index_t c = 0; c < d; ++c) {
      T acc = dq[i * dp + c];
      for (index_t g = 1; g < groups; ++g) acc += dq[(g * nqp + i) * dp + c];
      out[c] = scale * acc;
    }
  }
}

}  // namespace simd_detail

/// SIMD softmax backward: content logits (no encoding, or an encoder's features).
template <simd_backend B, class T>
void softmax_backward_kernel(const B& b, const softmax_backward_problem<T>& p, const dot_logits<T>& content,
                             const dot_logits<T>&, const no_reweighting&) {
  if (simd_detail::backward_is_empty(p)) return;
  simd_detail::softmax_backward_simd<T, typename B::arch_type>(p, content, simd_detail::no_bias{}, simd_detail::resolve(b));
}
/// SIMD softmax backward: content logits plus an additive bias (ALiBi, T5, Toeplitz tables).
template <simd_backend B, class T, class E>
void softmax_backward_kernel(const B& b, const softmax_backward_problem<T>& p, const dot_logits<T>& content,
                             const biased_logits<T, E>& l, const no_reweighting&) {
  if (simd_detail::backward_is_empty(p)) return;
  simd_detail::softmax_backward_simd<T, typename B::arch_type>(p, content, l.encoding, simd_detail::resolve(b));
}
/// Everything else (URPE reweighting): the reference kernel.
template <simd_backend B, class T, class Logits, class Reweight>
void softmax_backward_kernel(const B&, const softmax_backward_problem<T>& p, const dot_logits<T>& content,
                             const Logits& l, const Reweight& c) {
  softmax_backward_kernel(reference{}, p, content, l, c);
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
