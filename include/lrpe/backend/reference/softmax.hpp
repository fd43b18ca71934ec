// SPDX-License-Identifier: MIT
/**
 * @file softmax.hpp
 * Reference kernel of tiled softmax attention with an online softmax (FlashAttention's
 * recurrence): per query row a running max m, a running sum l and an accumulator, rescaled by
 * e^{m_old − m_new} whenever a key tile raises the max. Memory: one tile_q×tile_k logit tile
 * and one tile_q×d_v accumulator; never n×n.
 *
 * The kernel is encoding-agnostic: the front end (attention/softmax.hpp) hands it a logit tile
 * provider (scaled content + bias), an optional value term (Shaw a^V) and an optional URPE
 * reweighting C.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/core/traits.hpp>
#include <lrpe/core/view.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend {

namespace reference_detail {

/// The lowest and highest of positions [i0, i1).
inline std::pair<position_t, position_t> position_range(const positions& pos, index_t i0, index_t i1) {
  position_t lo = pos[i0], hi = lo;
  for (index_t i = i0 + 1; i < i1; ++i) {
    lo = std::min(lo, pos[i]);
    hi = std::max(hi, pos[i]);
  }
  return {lo, hi};
}

/**
 * The online softmax step of one (query tile, key tile) pair: the mask (`key_mask`), the rows' maxima
 * m and sums l, S = e^(S − m) in place, acc rescaled by α = e^(m_old − m), and URPE's C applied
 * to the weights. A max that propagates NaN (std::max drops a NaN second argument): a NaN logit
 * reaches its row.
 */
template <class T, class Reweight, class Tile, class Acc>
void softmax_tile_step(const softmax_problem<T>& p, const Reweight& c, index_t i0, index_t j0, Tile& S,
                       std::vector<T>& m, std::vector<T>& l, Acc& acc) {
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  const auto nan_max = [](T a, T b) { return a > b || std::isnan(a) ? a : b; };
  const index_t bq = S.rows(), bk = S.cols();
  for (index_t i = 0; i < bq; ++i) {
    const position_t s = p.q_positions[i0 + i];
    T row_max = neg_inf;
    for (index_t j = 0; j < bk; ++j) {
      if (!p.mask.visible(s, p.k_positions[j0 + j])) S(i, j) = neg_inf;
      row_max = nan_max(row_max, S(i, j));
    }
    const T m_new = nan_max(m[i], row_max);  // NaN once any logit of the row was: sticks
    if (m_new == neg_inf) {  // nothing visible yet in this row
      S.row(i).setZero();
      continue;
    }
    const T alpha = std::exp(m[i] - m_new);  // 0 when m[i] = −∞
    T sum = 0;
    for (index_t j = 0; j < bk; ++j) {
      const T e = std::exp(S(i, j) - m_new);  // masked: e^{−∞} = 0
      S(i, j) = e;
      sum += e;
    }
    l[i] = alpha * l[i] + sum;
    m[i] = m_new;
    acc.row(i) *= alpha;
    if constexpr (!std::is_same_v<Reweight, no_reweighting>) {
      for (index_t j = 0; j < bk; ++j) {
        if (S(i, j) != T(0)) S(i, j) *= static_cast<T>(lrpe::detail::reweight_at(c, s, p.k_positions[j0 + j]));
      }
    }
  }
}

/**
 * acc += S V over one key tile [j0, j0 + S.cols()). A zero weight (a masked key) must not
 * multiply a NaN or ±∞ value (0·∞ = NaN): such a tile takes the product with those values at 0
 * (every other column as in a clean call, bit for bit), then each non-finite value times its
 * nonzero weights. `v_finite` is scratch, allocated only when a tile needs it.
 */
template <class T, class Tile, class Acc>
void add_tile_values(const matrix_view<const T>& v, index_t j0, const Tile& S, Acc& acc, row_matrix<T>& v_finite) {
  using tile_t = row_matrix<T>;
  const index_t bq = S.rows(), bk = S.cols(), dv = v.cols;
  const Eigen::Map<const tile_t, 0, Eigen::OuterStride<>> v_tile(v.row(j0), bk, dv,
                                                                 Eigen::OuterStride<>(v.row_stride));
  if (v_tile.allFinite()) {
    acc.topRows(bq).noalias() += S * v_tile;
  } else {
    v_finite.resize(bk, dv);
    v_finite = v_tile.unaryExpr([](T x) { return std::isfinite(x) ? x : T(0); });
    // through the clean path's Map type: one Eigen product instantiation for both, whose
    // summation order cannot differ
    acc.topRows(bq).noalias() +=
        S * Eigen::Map<const tile_t, 0, Eigen::OuterStride<>>(v_finite.data(), bk, dv, Eigen::OuterStride<>(dv));
    for (index_t j = 0; j < bk; ++j)
      for (index_t col = 0; col < dv; ++col)
        if (!std::isfinite(v_tile(j, col)))
          for (index_t i = 0; i < bq; ++i)
            if (S(i, j) != T(0)) acc(i, col) += S(i, j) * v_tile(j, col);
  }
}

}  // namespace reference_detail

/**
 * Reference online-softmax kernel.
 *
 * @param logits  `logits(i0, i1, j0, j1, S)` fills the row-major (i1−i0)×(j1−j0) tile S with
 *                scale·content + bias for query rows [i0, i1) and key rows [j0, j1).
 * @param value   `no_value_term`, or `value(s, t, w, acc_row)`: acc_row += w·a^V_{t−s}.
 * @param c       `no_reweighting` or a URPE reweighting: p_st is multiplied by c(s, t) in the
 *                numerator only (A = softmax ⊙ C, not renormalised).
 *
 * out_s = Σ_t c_st e^{l_st − m_s} (v_t + a^V) / Σ_t e^{l_st − m_s} over visible t; a row with
 * no visible key is set to zero. When `p.lse` is not null it gets m_s + log Σ_t e^{l_st − m_s}
 * (−∞ for a row with no visible key; c does not enter it). A NaN visible logit (NaN in q, k or a bias; +∞ from overflow
 * gives one as ∞ − ∞) makes its row NaN. A key whose weight is exactly zero in its tile (masked,
 * or underflowed there) adds nothing to a row, so a NaN or ±∞ in a masked key's value reaches
 * none of the rows that mask it (every other output value equals a clean call's).
 */
template <class T, class Logits, class ValueTerm, class Reweight>
void softmax_kernel(reference, const softmax_problem<T>& p, const Logits& logits,
                    const ValueTerm& value, const Reweight& c) {
  using tile_t = row_matrix<T>;
  const index_t dv = p.v.cols;
  const index_t bt = std::max<index_t>(1, p.tile);
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  // Buffers no larger than the problem: a tile option far above n (any value ≥ 1 is valid)
  // must not allocate tile² entries for a few rows.
  const index_t tq = std::min(bt, std::max<index_t>(1, p.nq)), tk = std::min(bt, std::max<index_t>(1, p.nk));
  tile_t s_tile(tq, tk);
  tile_t acc(tq, dv);
  tile_t v_finite;  // a value tile with its non-finite entries at 0, allocated only when one is met
  std::vector<T> m(static_cast<std::size_t>(tq)), l(static_cast<std::size_t>(tq));

  for (index_t i0 = 0; i0 < p.nq; i0 += bt) {
    const index_t i1 = std::min(p.nq, i0 + bt);
    const index_t bq = i1 - i0;
    acc.topRows(bq).setZero();
    // a sink starts every row's sums: the running max at σ, the sum at e^{σ−σ} = 1
    const bool has_sink = p.sink != -std::numeric_limits<double>::infinity();
    std::fill(m.begin(), m.end(), has_sink ? static_cast<T>(p.sink) : neg_inf);
    std::fill(l.begin(), l.end(), has_sink ? T(1) : T(0));

    const auto [q_min, q_max] = reference_detail::position_range(p.q_positions, i0, i1);
    for (index_t j0 = 0; j0 < p.nk; j0 += bt) {
      const index_t j1 = std::min(p.nk, j0 + bt);
      const index_t bk = j1 - j0;
      if (!p.mask.none()) {  // skip a tile none of whose keys any query of this tile sees
        const auto [k_min, k_max] = reference_detail::position_range(p.k_positions, j0, j1);
        if (!p.mask.may_see(q_min, q_max, k_min, k_max)) continue;
      }
      auto S = s_tile.topLeftCorner(bq, bk);
      logits(i0, i1, j0, j1, S);

      reference_detail::softmax_tile_step(p, c, i0, j0, S, m, l, acc);
      reference_detail::add_tile_values(p.v, j0, S, acc, v_finite);

      if constexpr (!std::is_same_v<ValueTerm, no_value_term>) {
        for (index_t i = 0; i < bq; ++i) {
          const position_t s = p.q_positions[i0 + i];
          for (index_t j = 0; j < bk; ++j) {
            if (S(i, j) != T(0)) value(s, p.k_positions[j0 + j], S(i, j), acc.row(i).data());
          }
        }
      }
    }

    for (index_t i = 0; i < bq; ++i) {
      T* o = p.out.row(i0 + i);
      if (l[i] != T(0)) {  // NaN (a NaN or overflowing logit) divides through: a NaN row
        const T inv = T(1) / l[i];
        for (index_t j = 0; j < dv; ++j) o[j] = acc(i, j) * inv;
      } else {
        for (index_t j = 0; j < dv; ++j) o[j] = T(0);
      }
      if (p.lse != nullptr) p.lse[i0 + i] = l[i] != T(0) ? m[i] + std::log(l[i]) : neg_inf;
    }
  }
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
