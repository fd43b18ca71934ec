// SPDX-License-Identifier: MIT
/**
 * @file linear_decay_gradient.hpp
 * dL/dλ of causal linear attention by chunks, in O(n·(C + d_f)·d_a) time and O(d_f·d_a) state
 * instead of the reference's pairs. The reference's sum (backend/reference/linear_backward.hpp)
 * is, with ĝ_s = (g_s, e_s), v̂_t = (v_t, 1) and slope(Δ) = Δ·λ^{Δ−1},
 *
 *     dL/dλ = Σ_{t ≤ s} slope(p_s − p_t) (q̃_s·k̃_t)(ĝ_s·v̂_t)           the pairs
 *           + Σ_s slope(p_s − p₀) q̃_sᵀ Ĥ₀ ĝ_s                           the initial state Ĥ₀ = [S₀ | z₀]
 *           + Σ_t slope(P − p_t) k̃_tᵀ Ĝ_f v̂_t + slope(P − p₀)⟨Ĝ_f, Ĥ₀⟩   the final state's gradient
 *
 * The pairs go by chunks of C queries: keys before a chunk's first query are folded into two
 * states at a reference position r,
 *
 *     S = Σ_t λ^{r − p_t} k̃_t v̂_tᵀ,    D = Σ_t (r − p_t) λ^{r − p_t} k̃_t v̂_tᵀ,
 *
 * so that a query at p_s = r + δ gets Σ_t (p_s − p_t) λ^{p_s − p_t} (…) = λ^δ q̃_sᵀ (D + δ S) ĝ_s,
 * and moving r by Δ is S ← λ^Δ S, D ← λ^Δ (D + Δ S). Every weight is ≥ 0, so nothing cancels
 * beyond what the data's signs do (the identity through position-weighted values,
 * Σ p_s ĝ_s·o_s − Σ ĝ_s·o′_s, cancels terms of size n·|o|). The chunk's own keys: C × C blocks
 * of Q̃K̃ᵀ and ĜV̂ᵀ weighted pair by pair. The initial state enters as S = Ĥ₀, D = 0 at p₀ (the
 * state is an input: only its weight depends on λ). Products in T (Eigen), sums in double.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/backend/simd/linear.hpp>

#include <Eigen/Core>

#include <algorithm>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

template <class T>
class decay_gradient_chunks {
 public:
  using mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using rows_map = Eigen::Map<const mat, 0, Eigen::OuterStride<>>;
  static constexpr index_t C = 64;           ///< query rows per chunk
  static constexpr index_t key_block = 256;  ///< keys per block of a fold or of a chunk's own keys

  /// ĝ and v̂ (n_q × d_a, n_k × d_a); d_a = d_v + 1 when they carry the extra column.
  decay_gradient_chunks(const linear_backward_problem<T>& p, const matrix_view<const T>& g_hat,
                        const matrix_view<const T>& v_hat)
      : p_(p), f_(p.forward), gh_(g_hat), vh_(v_hat), df_(p.forward.qf.cols), da_(g_hat.cols), lambda_(p.decay) {
    for (index_t e = 0; e < table_size; ++e) powers_[e] = decay_pow(lambda_, e);
  }

  /// dL/dλ (see the file comment).
  double operator()() {
    const bool has_state = p_.initial != nullptr && !p_.initial->empty();
    S_ = mat::Zero(df_, da_);
    D_ = mat::Zero(df_, da_);
    if (has_state) {
      S_ = initial_state();
      ref_ = p_.initial->last_position();
      folded_ = true;
    }
    const index_t nq = f_.qf.rows, nk = f_.kf.rows;
    index_t kt = 0;
    for (index_t i0 = 0; i0 < nq; i0 += C) {
      const index_t m = std::min(C, nq - i0);
      const position_t first = f_.q_positions[i0], last_q = f_.q_positions[i0 + m - 1];
      index_t kb = kt;
      while (kb < nk && f_.k_positions[kb] < first) ++kb;
      if (kb > kt) fold(kt, kb);
      kt = kb;
      if (folded_) from_state(i0, m);
      index_t ke = kt;
      while (ke < nk && f_.k_positions[ke] <= last_q) ++ke;
      for (index_t j0 = kt; j0 < ke; j0 += key_block) own_keys(i0, m, j0, std::min(key_block, ke - j0));
    }
    if (p_.d_final != nullptr && nk > 0) final_state(has_state);
    return sum_ / lambda_;
  }

 private:
  const linear_backward_problem<T>& p_;
  const linear_problem<T>& f_;
  matrix_view<const T> gh_, vh_;
  index_t df_, da_;
  double lambda_;
  mat S_, D_;
  position_t ref_ = 0;
  bool folded_ = false;
  double sum_ = 0;  ///< Σ Δ·λ^Δ·(…): λ·dL/dλ
  /// λ^Δ for the small Δ of a chunk's own pairs (the same values as `decay_pow`'s).
  static constexpr index_t table_size = 4 * C;
  double powers_[table_size];

  static rows_map rows(const matrix_view<const T>& x, index_t r0, index_t m) {
    return rows_map(x.row(r0), m, x.cols, Eigen::OuterStride<>(x.row_stride));
  }

  /// λ^Δ, Δ ≥ 0.
  double power(position_t delta) const noexcept { return delta < table_size ? powers_[delta] : decay_pow(lambda_, delta); }

  /// Δ·λ^Δ, Δ ≥ 0.
  double weight(position_t delta) const noexcept { return static_cast<double>(delta) * power(delta); }

  /// Ĥ₀ = [S₀ | z₀] (z₀'s column only when ĝ and v̂ carry the extra one).
  mat initial_state() const {
    mat h = mat::Zero(df_, da_);
    const index_t dv = f_.v.cols;
    h.leftCols(dv) = p_.initial->kv();
    if (da_ > dv) h.col(dv) = p_.initial->k_sum();
    return h;
  }

  /// Ĝ_f = [dS_f | dz_f] likewise.
  mat final_gradient() const {
    mat h = mat::Zero(df_, da_);
    const index_t dv = f_.v.cols;
    h.leftCols(dv) = p_.d_final->kv;
    if (da_ > dv) h.col(dv) = p_.d_final->k_sum;
    return h;
  }

  /// Keys [a, b) into S and D, the reference moved to the last one's position.
  void fold(index_t a, index_t b) {
    const position_t r = f_.k_positions[b - 1];
    if (folded_) {
      const position_t delta = r - ref_;
      const T c = static_cast<T>(decay_pow(lambda_, delta));
      D_ = c * (D_ + static_cast<T>(delta) * S_);
      S_ *= c;
    }
    mat w, u;
    for (index_t j0 = a; j0 < b; j0 += key_block) {
      const index_t nb = std::min(key_block, b - j0);
      const auto v = rows(vh_, j0, nb);
      w.resize(nb, da_);
      u.resize(nb, da_);
      for (index_t t = 0; t < nb; ++t) {
        const position_t delta = r - f_.k_positions[j0 + t];
        const double lw = power(delta);
        w.row(t) = static_cast<T>(lw) * v.row(t);
        u.row(t) = static_cast<T>(static_cast<double>(delta) * lw) * v.row(t);
      }
      const auto k = rows(f_.kf, j0, nb);
      S_.noalias() += k.transpose() * w;
      D_.noalias() += k.transpose() * u;
    }
    ref_ = r;
    folded_ = true;
  }

  /// The folded keys' part for queries [i0, i0 + m): λ^δ q̃_sᵀ (D + δ S) ĝ_s, δ = p_s − r.
  void from_state(index_t i0, index_t m) {
    const auto q = rows(f_.qf, i0, m);
    const auto g = rows(gh_, i0, m);
    const mat x = q * D_, y = q * S_;
    for (index_t s = 0; s < m; ++s) {
      const position_t delta = f_.q_positions[i0 + s] - ref_;
      const double xs = x.row(s).dot(g.row(s)), ys = y.row(s).dot(g.row(s));
      sum_ += power(delta) * (xs + static_cast<double>(delta) * ys);
    }
  }

  /// The chunk's own keys [j0, j0 + nb) (positions ≥ its first query's): pair by pair from
  /// the blocks Q̃K̃ᵀ and ĜV̂ᵀ, the pairs with p_t ≤ p_s.
  void own_keys(index_t i0, index_t m, index_t j0, index_t nb) {
    const mat a = rows(f_.qf, i0, m) * rows(f_.kf, j0, nb).transpose();
    const mat b = rows(gh_, i0, m) * rows(vh_, j0, nb).transpose();
    for (index_t s = 0; s < m; ++s) {
      const position_t ps = f_.q_positions[i0 + s];
      for (index_t t = 0; t < nb; ++t) {
        const position_t delta = ps - f_.k_positions[j0 + t];
        if (delta <= 0) continue;  // later keys (and Δ = 0: no slope)
        sum_ += weight(delta) * static_cast<double>(a(s, t)) * static_cast<double>(b(s, t));
      }
    }
  }

  /// The final state's gradient: Σ_t (P − p_t) λ^{P − p_t} k̃_tᵀ Ĝ_f v̂_t, and (P − p₀) λ^{P − p₀}
  /// ⟨Ĝ_f, Ĥ₀⟩ with a state (P: the last key's position).
  void final_state(bool has_state) {
    const index_t nk = f_.kf.rows;
    const position_t last = f_.k_positions[nk - 1];
    const mat gf = final_gradient();
    for (index_t j0 = 0; j0 < nk; j0 += key_block) {
      const index_t nb = std::min(key_block, nk - j0);
      const mat y = rows(f_.kf, j0, nb) * gf;
      const auto v = rows(vh_, j0, nb);
      for (index_t t = 0; t < nb; ++t)
        sum_ += weight(last - f_.k_positions[j0 + t]) * static_cast<double>(y.row(t).dot(v.row(t)));
    }
    if (has_state) {
      const mat h0 = initial_state();
      sum_ += weight(last - p_.initial->last_position()) * (gf.template cast<double>().cwiseProduct(h0.template cast<double>())).sum();
    }
  }
};

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
