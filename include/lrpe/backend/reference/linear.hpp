// SPDX-License-Identifier: MIT
/**
 * @file linear.hpp
 * Reference kernels of linear attention on encoded features (q̃ = M_s φ(q), k̃ = M_t φ(k)).
 *
 * - Non-causal, O(n·d_f·d_v): S = Σ_t k̃_t v_tᵀ, z = Σ_t k̃_t; out_s = q̃_sᵀS [/ max(q̃_s·z, eps)].
 * - Causal, by chunks of `chunk` query rows: keys at positions ≤ the chunk's first query
 *   position are folded into the d_f×d_v state (`linear_attention_state::append_block`); the
 *   remaining keys up to the chunk's last query position are handled by an intra-chunk
 *   quadratic product with mask pos_t ≤ pos_s and factors λ^{pos_s − pos_t}. No n×n matrix and
 *   no n outer products are ever stored; every decay exponent is ≥ 0.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/core/view.hpp>

#include <algorithm>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend {

namespace detail {
template <class T>
auto rows_map(const matrix_view<const T>& x, index_t r0, index_t r1) {
  using M = Eigen::Map<const row_matrix<T>, 0, Eigen::OuterStride<>>;
  return M(x.row(r0), r1 - r0, x.cols, Eigen::OuterStride<>(x.row_stride));
}

/// out rows [i0, i0 + num.rows()) = num [/ max(den, eps)].
template <class T>
void write_normalised(const linear_problem<T>& p, index_t i0, const row_matrix<T>& num, const dense_vector<T>& den) {
  for (index_t i = 0; i < num.rows(); ++i) {
    T* o = p.out.row(i0 + i);
    const T inv = p.norm == normalisation::denominator ? T(1) / std::max(den[i], static_cast<T>(p.eps)) : T(1);
    for (index_t j = 0; j < num.cols(); ++j) o[j] = num(i, j) * inv;
  }
}
}  // namespace detail

/**
 * Reference linear-attention kernel. For causal attention `state` (never null then) holds the
 * keys of earlier segments on entry and every key of this call on exit.
 */
template <class T>
void linear_kernel(reference, const linear_problem<T>& p, linear_attention_state<T>* state) {
  const index_t nq = p.qf.rows, nk = p.kf.rows, f = p.qf.cols, dv = p.v.cols;
  if (!p.causal) {
    row_matrix<T> kv = row_matrix<T>::Zero(f, dv);
    dense_vector<T> z = dense_vector<T>::Zero(f);
    if (nk > 0) {
      const auto K = detail::rows_map(p.kf, 0, nk);
      kv.noalias() = K.transpose() * detail::rows_map(p.v, 0, nk);
      z.noalias() = K.colwise().sum().transpose();
    }
    const index_t bc = std::clamp<index_t>(p.chunk, 1, std::max<index_t>(1, nq));  // i0 + bc cannot overflow
    row_matrix<T> num;
    dense_vector<T> den;
    for (index_t i0 = 0; i0 < nq; i0 += bc) {
      const index_t i1 = std::min(nq, i0 + bc);
      const auto Q = detail::rows_map(p.qf, i0, i1);
      num.noalias() = Q * kv;
      den.noalias() = Q * z;
      detail::write_normalised(p, i0, num, den);
    }
    return;
  }

  const index_t bc = std::clamp<index_t>(p.chunk, 1, std::max<index_t>(1, nq));  // i0 + bc cannot overflow
  const auto& qp = p.q_positions;
  const auto& kp = p.k_positions;
  row_matrix<T> num, a;
  dense_vector<T> den;
  index_t folded = 0;  // keys [0, folded) are in the state
  for (index_t i0 = 0; i0 < nq; i0 += bc) {
    const index_t i1 = std::min(nq, i0 + bc);
    const index_t bq = i1 - i0;
    const position_t lo = qp[i0], hi = qp[i1 - 1];

    // inter-chunk: fold every key visible to all queries of the chunk (pos ≤ lo)
    index_t kq = folded;
    while (kq < nk && kp[kq] <= lo) ++kq;
    if (kq > folded) {
      state->append_block(detail::rows_map(p.kf, folded, kq), detail::rows_map(p.v, folded, kq), kp, folded);
      folded = kq;
    }
    const auto Q = detail::rows_map(p.qf, i0, i1);
    num.setZero(bq, dv);
    den.setZero(bq);
    if (!state->empty()) {
      // num_i = λ^{s_i − p} q̃_iᵀ S: apply the per-row factor after the product
      num.noalias() = Q * state->kv();
      den.noalias() = Q * state->k_sum();
      for (index_t i = 0; i < bq; ++i) {
        const T w = static_cast<T>(state->decay_factor(qp[i0 + i] - state->last_position()));
        if (w != T(1)) {
          num.row(i) *= w;
          den[i] *= w;
        }
      }
    }

    // intra-chunk: keys with lo < pos ≤ hi, masked pos_t ≤ pos_s, weighted λ^{pos_s − pos_t}.
    // Row i's visible keys are a prefix (positions are non-decreasing); its product runs over
    // that prefix only, so that an Inf or NaN in a later key's value does not reach it through
    // a masked weight (0·Inf = NaN).
    index_t ke = folded;
    while (ke < nk && kp[ke] <= hi) ++ke;
    if (ke > folded) {
      a.noalias() = Q * detail::rows_map(p.kf, folded, ke).transpose();
      const auto V = detail::rows_map(p.v, folded, ke);
      for (index_t i = 0; i < bq; ++i) {
        const position_t s = qp[i0 + i];
        index_t vis = 0;
        while (vis < ke - folded && kp[folded + vis] <= s) ++vis;
        for (index_t j = 0; j < vis; ++j) a(i, j) *= static_cast<T>(state->decay_factor(s - kp[folded + j]));
        if (vis == 0) continue;
        num.row(i).noalias() += a.row(i).head(vis) * V.topRows(vis);
        den[i] += a.row(i).head(vis).sum();
      }
    }
    detail::write_normalised(p, i0, num, den);
  }
  // the state leaves with every key of this call (so the next segment resumes from it)
  if (folded < nk) {
    state->append_block(detail::rows_map(p.kf, folded, nk), detail::rows_map(p.v, folded, nk), kp, folded);
  }
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
