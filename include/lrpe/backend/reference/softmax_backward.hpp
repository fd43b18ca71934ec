// SPDX-License-Identifier: MIT
/**
 * @file softmax_backward.hpp
 * Reference kernel of the softmax attention backward, FlashAttention-2's algorithm written for
 * clarity: with D_s = dO_s·O_s and the row log-sum-exps (from the forward, or recomputed here by
 * the forward's own online pass), each (query tile, key tile) pair recomputes its logits and
 *
 *     P = e^{S − lse}  (0 where masked),   W = P ∘ C  (URPE's reweighting; C = 1 without)
 *     dV += Wᵀ dO,     dP = (dO Vᵀ) ∘ C,   dS = P ∘ (dP − D),   dC_st = P_st (dO_s·v_t)
 *     dA += scale·dS B,   dB += scale·dSᵀ A          (logits = scale·A Bᵀ + bias)
 *
 * Memory: one tile_q×tile_k tile of each of S, dP; never n×n. D_s = Σ_t P_st dP_st holds with
 * the reweighting too, since O_s = Σ_t P_st c_st v_t.
 *
 * An encoding with a direct score (Shaw, DeBERTa; `score_logits`) replaces the two GEMMs of the
 * last line by its `score_backward` per entry (scale·dS_st to dq_s, dk_t and its tables), and
 * Shaw's value term adds dO_s·a^V_{t−s} to dP_st and W_st·dO_s to a^V's gradient.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/backend/reference/softmax.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend {

namespace reference_detail {

/// A tile of rows [r0, r1) of a view as an Eigen map.
template <class T>
auto tile_of(const matrix_view<T>& x, index_t r0, index_t r1) {
  using M = Eigen::Map<std::conditional_t<std::is_const_v<T>, const row_matrix<std::remove_const_t<T>>,
                                          row_matrix<T>>,
                       0, Eigen::OuterStride<>>;
  return M(x.row(r0), r1 - r0, x.cols, Eigen::OuterStride<>(x.row_stride));
}

/// The soft-capped part of a logits provider: the content of an additive encoding's logits
/// (its bias is added after the cap), the whole logits otherwise.
template <class T, class E>
const dot_logits<T>& content_of(const biased_logits<T, E>& l) {
  return l.content;
}
template <class T, class E>
score_logits<T, E> content_of(const score_logits<T, E>& l) {
  score_logits<T, E> content = l;
  content.with_bias = false;
  return content;
}
template <class L>
const L& content_of(const L& l) {
  return l;
}

/// The forward's log-sum-exps, by its own kernel run on a scratch output (the values are not used).
template <class T, class Logits, class Reweight>
std::vector<T> recompute_lse(const softmax_problem<T>& fwd, const Logits& logits, const Reweight& c) {
  std::vector<T> lse(static_cast<std::size_t>(fwd.nq));
  row_matrix<T> scratch(fwd.nq, fwd.v.cols);
  softmax_problem<T> p = fwd;
  p.out = view(scratch);
  p.lse = lse.data();
  softmax_kernel(reference{}, p, logits, no_value_term{}, c);
  return lse;
}

/**
 * How a tile's dS reaches the inputs when the logits are content logits scale·A·Bᵀ:
 * dA += scale·dS·B, dB += scale·dSᵀ·A (two GEMMs); no value term.
 */
template <class T>
struct content_inputs {
  const dot_logits<T>& content;
  template <class Tile>
  void add_value_dots(index_t, index_t, index_t, index_t, Tile&) const {}
  template <class W, class DS>
  void operator()(const softmax_backward_problem<T>& p, index_t i0, index_t i1, index_t j0, index_t j1, const W&,
                  const DS& dS) const {
    tile_of(p.da, i0, i1).noalias() += content.scale * (dS * tile_of(content.b, j0, j1));
    tile_of(p.db, j0, j1).noalias() += content.scale * (dS.transpose() * tile_of(content.a, i0, i1));
  }
};

/**
 * How a tile's dS reaches the inputs when the logits are an encoding's scale·score(q, s, k, t):
 * per entry, the score's own backward (`score_backward`: dq, dk and the parameters), and a value
 * term's a^V: dP_st gains dO_s·a^V_{t−s}, a^V's gradient gains W_st·dO_s.
 */
template <class T, class E>
struct score_inputs {
  const score_logits<T, E>& logits;
  const matrix_view<const T>& d_out;
  template <class Tile>
  void add_value_dots(index_t i0, index_t i1, index_t j0, index_t j1, Tile& dP) const {
    if constexpr (value_encoding<E>) {
      for (index_t i = i0; i < i1; ++i)
        for (index_t j = j0; j < j1; ++j)
          dP(i - i0, j - j0) += static_cast<T>(
              logits.encoding->value_term_dot(logits.q_positions[i], logits.k_positions[j], d_out.row(i)));
    }
  }
  template <class W, class DS>
  void operator()(const softmax_backward_problem<T>& p, index_t i0, index_t i1, index_t j0, index_t j1, const W& w,
                  const DS& dS) const {
    const E& e = *logits.encoding;
    for (index_t i = i0; i < i1; ++i) {
      const position_t s = logits.q_positions[i];
      for (index_t j = j0; j < j1; ++j) {
        const position_t t = logits.k_positions[j];
        if constexpr (value_encoding<E>) {
          if (p.bias_grad != nullptr && w(i - i0, j - j0) != T(0))
            e.accumulate_value_gradient(s, t, static_cast<double>(w(i - i0, j - j0)), d_out.row(i), p.bias_grad);
        }
        const T ds = dS(i - i0, j - j0);
        if (ds != T(0))
          e.score_backward(logits.q.row(i), s, logits.k.row(j), t, logits.scale * static_cast<double>(ds), p.da.row(i),
                           p.db.row(j), p.bias_grad);
      }
    }
  }
};

/**
 * One (query tile, key tile) pair of the backward: S (logits, masked) becomes P, then dS; the
 * tile's contributions are added to dV, to dS_st's `bias_grad(s, t, dS_st)`, and by `inputs`
 * to the inputs (`content_inputs`, `score_inputs`), through the soft cap's derivative `cap`
 * (1 − tanh², per entry) when there is one. Where P is 0 (masked, or underflowed), dS
 * is 0: a non-finite value of a masked key reaches no gradient.
 */
template <class T, class Reweight, class BiasGrad, class Inputs, class Tile>
void backward_tile(const softmax_backward_problem<T>& p, const Inputs& inputs, const Reweight& c,
                   const BiasGrad& bias_grad, const T* lse, const std::vector<T>& delta, index_t i0, index_t i1,
                   index_t j0, index_t j1, Tile& S, Tile& dP, const Tile* cap) {
  const softmax_problem<T>& f = p.forward;
  const index_t bq = i1 - i0, bk = j1 - j0;
  const auto d_out = tile_of(p.d_out, i0, i1);
  const auto v = tile_of(f.v, j0, j1);
  auto dp = dP.topLeftCorner(bq, bk);
  dp.noalias() = d_out * v.transpose();
  inputs.add_value_dots(i0, i1, j0, j1, dp);
  for (index_t i = 0; i < bq; ++i) {
    const position_t s = f.q_positions[i0 + i];
    for (index_t j = 0; j < bk; ++j) {
      const position_t t = f.k_positions[j0 + j];
      const bool visible = f.mask.visible(s, t);
      const T prob = visible ? std::exp(S(i, j) - lse[i0 + i]) : T(0);
      T weight = T(1);
      if constexpr (!std::is_same_v<Reweight, no_reweighting>) {
        if (prob != T(0)) weight = static_cast<T>(lrpe::detail::reweight_at(c, s, t));
        if constexpr (learnable_reweight_v<Reweight>) {  // dL/dC_st = P_st (dO_s·(v_t + a^V))
          if (p.reweight_grad != nullptr && prob != T(0))
            c.accumulate_weight_gradient(s, t, static_cast<double>(prob) * static_cast<double>(dP(i, j)), p.reweight_grad);
        }
      }
      S(i, j) = prob * weight;                                                    // W, for dV
      dP(i, j) = prob == T(0) ? T(0) : prob * (dP(i, j) * weight - delta[static_cast<std::size_t>(i0 + i)]);  // dS
      if (prob != T(0)) bias_grad(s, t, dP(i, j));
    }
  }
  const auto W = S.topLeftCorner(bq, bk);
  tile_of(p.dv, j0, j1).noalias() += W.transpose() * d_out;
  if (cap != nullptr) {  // (a masked entry's dS is 0 and stays 0, whatever its key held)
    for (index_t i = 0; i < bq; ++i)
      for (index_t j = 0; j < bk; ++j)
        if (dP(i, j) != T(0)) dP(i, j) *= (*cap)(i, j);
  }
  inputs(p, i0, i1, j0, j1, W, std::as_const(dP).topLeftCorner(bq, bk));
}

/**
 * The backward's loop over (query tile, key tile) pairs, after D_s = dO_s·O_s and the
 * log-sum-exps (the forward's, or recomputed): `logits` fills a tile, `inputs` takes its dS
 * to the inputs, `bias_grad(s, t, dS_st)` to an additive bias's parameters.
 */
template <class T, class Logits, class Reweight, class Inputs, class BiasGrad>
void backward_tiles(const softmax_backward_problem<T>& p, const Logits& logits, const Reweight& c,
                    const Inputs& inputs, const BiasGrad& bias_grad) {
  const softmax_problem<T>& f = p.forward;
  for (auto* m : {&p.da, &p.db, &p.dv})
    for (index_t i = 0; i < m->rows; ++i) std::fill(m->row(i), m->row(i) + m->cols, T(0));
  if (f.nq == 0 || f.nk == 0) return;
  std::vector<T> recomputed;
  const T* lse = p.lse;
  if (lse == nullptr) {
    recomputed = recompute_lse(f, logits, c);
    lse = recomputed.data();
  }
  std::vector<T> delta(static_cast<std::size_t>(f.nq));  // D_s = dO_s·O_s
  for (index_t i = 0; i < f.nq; ++i) {
    T acc = 0;
    for (index_t j = 0; j < f.v.cols; ++j) acc += p.d_out.row(i)[j] * f.out.row(i)[j];
    delta[static_cast<std::size_t>(i)] = acc;
  }
  const index_t bt = std::max<index_t>(1, f.tile);
  const index_t tq = std::min(bt, f.nq), tk = std::min(bt, f.nk);
  row_matrix<T> s_tile(tq, tk), dp_tile(tq, tk), cap_tile;
  const T softcap = content_of(logits).softcap;
  for (index_t i0 = 0; i0 < f.nq; i0 += bt) {
    const index_t i1 = std::min(f.nq, i0 + bt);
    for (index_t j0 = 0; j0 < f.nk; j0 += bt) {
      const index_t j1 = std::min(f.nk, j0 + bt);
      auto S = s_tile.topLeftCorner(i1 - i0, j1 - j0);
      logits(i0, i1, j0, j1, S);
      if (softcap != T(0)) {  // d(c·tanh(x/c))/dx = 1 − (capped x / c)², from the capped content alone
        cap_tile.resize(i1 - i0, j1 - j0);
        content_of(logits)(i0, i1, j0, j1, cap_tile);
        cap_tile = cap_tile.unaryExpr([softcap](T y) { return T(1) - (y / softcap) * (y / softcap); });
      }
      backward_tile(p, inputs, c, bias_grad, lse, delta, i0, i1, j0, j1, s_tile, dp_tile,
                    softcap != T(0) ? &cap_tile : nullptr);
    }
  }
}

}  // namespace reference_detail

/**
 * Reference softmax attention backward (see the file comment). A row with no visible key has
 * O = 0 and contributes nothing; a NaN row (a NaN logit) gives NaN gradients where it reaches.
 */
template <class T, class Logits, class Reweight>
void softmax_backward_kernel(reference, const softmax_backward_problem<T>& p, const dot_logits<T>& content,
                             const Logits& logits, const Reweight& c) {
  // a learnable additive encoding's bias gets dL/dbias(s, t) = dS_st
  const auto bias_grad = [&]([[maybe_unused]] position_t s, [[maybe_unused]] position_t t, [[maybe_unused]] T ds) {
    if constexpr (learnable_bias_v<Logits>) {
      if (p.bias_grad != nullptr) logits.encoding->accumulate_bias_gradient(s, t, static_cast<double>(ds), p.bias_grad);
    }
  };
  reference_detail::backward_tiles(p, logits, c, reference_detail::content_inputs<T>{content}, bias_grad);
}

/**
 * Reference softmax attention backward of an encoding with a direct score (Shaw, DeBERTa): A and
 * B are Q and K, and each logit's dS goes through the encoding's `score_backward`; `bias_grad`
 * receives the encoding's parameter gradient (score and value term).
 */
template <class T, class E, class Reweight>
void softmax_backward_kernel(reference, const softmax_backward_problem<T>& p, const dot_logits<T>&,
                             const score_logits<T, E>& logits, const Reweight& c) {
  // a score_bias_encoding's bias gets dL/dbias(s, t) = dS_st (before the soft cap's derivative)
  const auto bias_grad = [&]([[maybe_unused]] position_t s, [[maybe_unused]] position_t t, [[maybe_unused]] T ds) {
    if constexpr (score_bias_encoding<E> && requires(const E& e, position_t x, double* g) {
                    e.accumulate_bias_gradient(x, x, 0.0, g);
                  }) {
      if (p.bias_grad != nullptr) logits.encoding->accumulate_bias_gradient(s, t, static_cast<double>(ds), p.bias_grad);
    }
  };
  reference_detail::backward_tiles(p, logits, c, reference_detail::score_inputs<T, E>{logits, p.d_out}, bias_grad);
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
