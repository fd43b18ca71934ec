// SPDX-License-Identifier: MIT
/**
 * @file linear_backward.hpp
 * Reference kernel of the linear attention backward, on encoded features, written pair by pair
 * for clarity (O(n_q·n_k·(d_f + d_v)) time, O(n·d_f) memory, no n×n matrix). The forward is
 *
 *     num_s = c_s·q̃_sᵀS₀ + Σ_t w_st (q̃_s·k̃_t) v_t,   den_s = c_s·q̃_s·z₀ + Σ_t w_st (q̃_s·k̃_t)
 *     out_s = num_s / max(den_s, eps)   (or num_s without normalisation)
 *
 * over the visible keys t (all; or pos_t ≤ pos_s when causal), w_st = λ^{pos_s − pos_t}, and
 * the initial state (S₀, z₀) at position p₀ weighted c_s = λ^{pos_s − p₀}. With
 * g_s = dO_s / max(den_s, eps) and e_s = −dO_s·out_s / den_s (0 unless normalised and
 * den_s > eps), each visible pair adds
 *
 *     dq̃_s += w_st (g_s·v_t + e_s) k̃_t,   dk̃_t += w_st (g_s·v_t + e_s) q̃_s,   dv_t += w_st (q̃_s·k̃_t) g_s
 *
 * and the state: dq̃_s += c_s (S₀ g_s + e_s z₀), dS₀ += c_s q̃_s g_sᵀ, dz₀ += c_s e_s q̃_s. The
 * state the call leaves, S_f = λ^{P − p₀} S₀ + Σ_t λ^{P − pos_t} k̃_t v_tᵀ (P: its last key's
 * position), passes its gradient on: dk̃_t += λ^{P − pos_t} (dS_f v_t + dz_f),
 * dv_t += λ^{P − pos_t} dS_fᵀ k̃_t, dS₀ += λ^{P − p₀} dS_f, dz₀ += λ^{P − p₀} dz_f.
 * Every exponent is ≥ 0. With `d_decay`, dL/dλ sums each weight's derivative Δ·λ^{Δ−1} times
 * what multiplies it: w_st by a_st (g_s·v_t + e_s), c_s by q̃_s·(S₀ g_s + e_s z₀), λ^{P−t} by
 * k̃_t·(dS_f v_t + dz_f), λ^{P−p₀} by ⟨dS_f, S₀⟩ + dz_f·z₀.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/state.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend {

namespace reference_detail {

/// λ^Δ for Δ ≥ 0, in double (1 when λ = 1 or Δ = 0).
inline double decay_power(double decay, position_t delta) {
  return decay == 1.0 || delta == 0 ? 1.0 : std::pow(decay, static_cast<double>(delta));
}

/// d(λ^Δ)/dλ = Δ·λ^{Δ−1} for Δ ≥ 0 (λ > 0).
inline double decay_slope(double decay, position_t delta) {
  return delta == 0 ? 0.0 : static_cast<double>(delta) * decay_power(decay, delta) / decay;
}

/// The forward's num_s and den_s of every query row (pairwise, in double).
template <class T>
void linear_rows(const linear_backward_problem<T>& p, std::vector<double>& num, std::vector<double>& den) {
  const linear_problem<T>& f = p.forward;
  const index_t nq = f.qf.rows, nk = f.kf.rows, df = f.qf.cols, dv = f.v.cols;
  const bool has_state = p.initial != nullptr && !p.initial->empty();
  num.assign(static_cast<std::size_t>(nq * dv), 0.0);
  den.assign(static_cast<std::size_t>(nq), 0.0);
  for (index_t s = 0; s < nq; ++s) {
    const T* q = f.qf.row(s);
    double* n = num.data() + s * dv;
    if (has_state) {
      const double c = decay_power(p.decay, f.q_positions[s] - p.initial->last_position());
      for (index_t i = 0; i < df; ++i) {
        den[static_cast<std::size_t>(s)] += c * q[i] * p.initial->k_sum()[i];
        for (index_t j = 0; j < dv; ++j) n[j] += c * q[i] * p.initial->kv()(i, j);
      }
    }
    for (index_t t = 0; t < nk; ++t) {
      if (f.causal && f.k_positions[t] > f.q_positions[s]) continue;
      double a = 0;
      for (index_t i = 0; i < df; ++i) a += static_cast<double>(q[i]) * f.kf.row(t)[i];
      a *= decay_power(p.decay, f.causal ? f.q_positions[s] - f.k_positions[t] : 0);
      den[static_cast<std::size_t>(s)] += a;
      for (index_t j = 0; j < dv; ++j) n[j] += a * f.v.row(t)[j];
    }
  }
}

/// The state's part: its gradient from the rows (dS₀, dz₀ += c_s q̃_s (g_s, e_s)) and the
/// gradient of the state the call leaves passed to the keys and to the initial state.
template <class T>
void linear_state_backward(const linear_backward_problem<T>& p, const std::vector<double>& g,
                           const std::vector<double>& e, std::vector<double>& dk, std::vector<double>& dvs) {
  const linear_problem<T>& f = p.forward;
  const index_t nq = f.qf.rows, nk = f.kf.rows, df = f.qf.cols, dv = f.v.cols;
  const bool has_state = p.initial != nullptr && !p.initial->empty();
  if (p.d_initial != nullptr) {
    p.d_initial->kv = row_matrix<T>::Zero(df, dv);
    p.d_initial->k_sum = dense_vector<T>::Zero(df);
  }
  if (has_state && p.d_initial != nullptr) {
    for (index_t s = 0; s < nq; ++s) {
      const double c = decay_power(p.decay, f.q_positions[s] - p.initial->last_position());
      for (index_t i = 0; i < df; ++i) {
        const double cq = c * f.qf.row(s)[i];
        p.d_initial->k_sum[i] += static_cast<T>(cq * e[static_cast<std::size_t>(s)]);
        for (index_t j = 0; j < dv; ++j) p.d_initial->kv(i, j) += static_cast<T>(cq * g[static_cast<std::size_t>(s * dv + j)]);
      }
    }
  }
  if (p.d_final == nullptr) return;
  // P: the last key's position, or the initial state's when the call adds no key
  if (nk == 0 && !has_state) return;
  const position_t last = nk > 0 ? f.k_positions[nk - 1] : p.initial->last_position();
  for (index_t t = 0; t < nk; ++t) {
    const double w = decay_power(p.decay, last - f.k_positions[t]);
    double through = 0;  // k̃_t·(dS_f v_t + dz_f), for dL/dλ
    for (index_t i = 0; i < df; ++i) {
      double acc = p.d_final->k_sum[i];
      for (index_t j = 0; j < dv; ++j) acc += static_cast<double>(p.d_final->kv(i, j)) * f.v.row(t)[j];
      dk[static_cast<std::size_t>(t * df + i)] += w * acc;
      through += acc * f.kf.row(t)[i];
    }
    if (p.d_decay != nullptr) *p.d_decay += decay_slope(p.decay, last - f.k_positions[t]) * through;
    for (index_t j = 0; j < dv; ++j) {
      double acc = 0;
      for (index_t i = 0; i < df; ++i) acc += static_cast<double>(p.d_final->kv(i, j)) * f.kf.row(t)[i];
      dvs[static_cast<std::size_t>(t * dv + j)] += w * acc;
    }
  }
  if (has_state && p.d_initial != nullptr) {
    const auto w = static_cast<T>(decay_power(p.decay, last - p.initial->last_position()));
    p.d_initial->kv += w * p.d_final->kv;
    p.d_initial->k_sum += w * p.d_final->k_sum;
  }
  if (has_state && p.d_decay != nullptr) {  // S_f and z_f hold λ^{P−p₀} S₀ and z₀
    double through = 0;
    for (index_t i = 0; i < df; ++i) {
      through += static_cast<double>(p.d_final->k_sum[i]) * p.initial->k_sum()[i];
      for (index_t j = 0; j < dv; ++j) through += static_cast<double>(p.d_final->kv(i, j)) * p.initial->kv()(i, j);
    }
    *p.d_decay += decay_slope(p.decay, last - p.initial->last_position()) * through;
  }
}

}  // namespace reference_detail

/**
 * Reference linear attention backward (see the file comment). Sums in double, results in T.
 * A non-causal call has no state.
 */
template <class T>
void linear_backward_kernel(reference, const linear_backward_problem<T>& p) {
  const linear_problem<T>& f = p.forward;
  const index_t nq = f.qf.rows, nk = f.kf.rows, df = f.qf.cols, dv = f.v.cols;
  std::vector<double> dq(static_cast<std::size_t>(nq * df), 0.0), dk(static_cast<std::size_t>(nk * df), 0.0),
      dvs(static_cast<std::size_t>(nk * dv), 0.0);  // accumulated in double, written in T at the end
  std::vector<double> num, den;
  reference_detail::linear_rows(p, num, den);
  // g_s = dO_s / max(den, eps) and e_s = −(dO_s·out_s)/den_s (normalised rows with den_s > eps)
  std::vector<double> g(static_cast<std::size_t>(nq * dv)), e(static_cast<std::size_t>(nq), 0.0);
  for (index_t s = 0; s < nq; ++s) {
    const double d = den[static_cast<std::size_t>(s)];
    const bool normalised = f.norm == normalisation::denominator;
    const double inv = normalised ? 1.0 / std::max(d, f.eps) : 1.0;
    double dot = 0;
    for (index_t j = 0; j < dv; ++j) {
      const double go = p.d_out.row(s)[j];
      g[static_cast<std::size_t>(s * dv + j)] = go * inv;
      dot += go * num[static_cast<std::size_t>(s * dv + j)] * inv;
    }
    if (normalised && d > f.eps) e[static_cast<std::size_t>(s)] = -dot / d;
  }
  const bool has_state = p.initial != nullptr && !p.initial->empty();
  for (index_t s = 0; s < nq; ++s) {
    const T* q = f.qf.row(s);
    const double* gs = g.data() + s * dv;
    const double es = e[static_cast<std::size_t>(s)];
    if (has_state) {
      const position_t delta = f.q_positions[s] - p.initial->last_position();
      const double c = reference_detail::decay_power(p.decay, delta);
      double through = 0;  // q̃_s·(S₀ g_s + e_s z₀), for dL/dλ
      for (index_t i = 0; i < df; ++i) {
        double acc = es * p.initial->k_sum()[i];
        for (index_t j = 0; j < dv; ++j) acc += static_cast<double>(p.initial->kv()(i, j)) * gs[j];
        dq[static_cast<std::size_t>(s * df + i)] += c * acc;
        through += acc * q[i];
      }
      if (p.d_decay != nullptr) *p.d_decay += reference_detail::decay_slope(p.decay, delta) * through;
    }
    for (index_t t = 0; t < nk; ++t) {
      if (f.causal && f.k_positions[t] > f.q_positions[s]) continue;
      const double w = reference_detail::decay_power(p.decay, f.causal ? f.q_positions[s] - f.k_positions[t] : 0);
      const T* k = f.kf.row(t);
      double da = es, a = 0;  // dL/da_st and a_st = q̃_s·k̃_t
      for (index_t j = 0; j < dv; ++j) da += gs[j] * f.v.row(t)[j];
      for (index_t i = 0; i < df; ++i) a += static_cast<double>(q[i]) * k[i];
      for (index_t i = 0; i < df; ++i) {
        dq[static_cast<std::size_t>(s * df + i)] += w * da * k[i];
        dk[static_cast<std::size_t>(t * df + i)] += w * da * q[i];
      }
      for (index_t j = 0; j < dv; ++j) dvs[static_cast<std::size_t>(t * dv + j)] += w * a * gs[j];
      if (p.d_decay != nullptr && f.causal)
        *p.d_decay += reference_detail::decay_slope(p.decay, f.q_positions[s] - f.k_positions[t]) * a * da;
    }
  }
  reference_detail::linear_state_backward(p, g, e, dk, dvs);
  const auto write = [](const std::vector<double>& from, const matrix_view<T>& to) {
    for (index_t i = 0; i < to.rows; ++i)
      for (index_t j = 0; j < to.cols; ++j) to.row(i)[j] = static_cast<T>(from[static_cast<std::size_t>(i * to.cols + j)]);
  };
  write(dq, p.dqf);
  write(dk, p.dkf);
  write(dvs, p.dv);
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
