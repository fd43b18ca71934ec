// SPDX-License-Identifier: MIT
/**
 * @file linear_backward.hpp
 * Linear attention backward for `backend::simd<Arch>` / `simd_policy<Arch>`, as forward passes
 * of the SIMD linear kernel (linear.hpp: chunks, decay, state; never an n×n matrix). With
 * ĝ_s = (g_s, e_s) and v̂_t = (v_t, 1) (g, e as in backend/reference/linear_backward.hpp; without
 * normalisation ĝ = dO and v̂ = v, unless a state gradient's dz_f needs v̂'s 1), the reference's
 * sums regroup as
 *
 *     dq̃_s = c_s Ĥ₀ ĝ_s + Σ_{t ≤ s} λ^{s−t} (ĝ_s·v̂_t) k̃_t           causal linear attention:
 *                                                                  queries ĝ, keys v̂, values k̃,
 *                                                                  initial state Ĥ₀ᵀ = [S₀ | z₀]ᵀ
 *     dk̃_t = λ^{P−t} Ĝ_f v̂_t + Σ_{s ≥ t} λ^{s−t} (v̂_t·ĝ_s) q̃_s      the same backwards in time:
 *                                                                  queries v̂, keys ĝ, values q̃,
 *                                                                  initial state Ĝ_fᵀ = [dS_f | dz_f]ᵀ
 *     dv_t = λ^{P−t} dS_fᵀ k̃_t + Σ_{s ≥ t} λ^{s−t} (k̃_t·q̃_s) g_s     backwards: queries k̃, keys q̃,
 *                                                                  values g, initial state dS_f
 *
 * ("backwards in time": rows reversed, positions negated, so that s ≥ t becomes causal), and the
 * state the dk̃ pass leaves is [dS₀ | dz₀]ᵀ up to the decay from the first query to the initial
 * state. A normalised call first recomputes num and den by one more pass (values v̂). Covers
 * positions given as offsets or arrays, causal or not; causal queries past the last key take
 * the reference kernel. A causal dL/dλ goes by chunks (linear_decay_gradient.hpp).
 *
 * The common case, causal self-attention at offsets without decay or normalisation (d_f and d_v
 * multiples of the vector width), takes the dq̃ pass and then one sweep back over the rows in
 * place for dk̃, dv and dS₀ (linear_backward_sweep.hpp) instead of the two backwards passes on
 * reversed copies.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/backend/reference/linear_backward.hpp>
#include <lrpe/backend/simd/linear.hpp>
#include <lrpe/backend/simd/linear_backward_sweep.hpp>
#include <lrpe/backend/simd/linear_decay_gradient.hpp>

#include <algorithm>
#include <limits>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// x's rows in reverse order into dst (rows of x.cols, packed); the view of dst.
template <class T>
matrix_view<const T> reversed_rows(const matrix_view<const T>& x, T* dst) {
  for (index_t i = 0; i < x.rows && x.cols > 0; ++i) std::copy(x.row(i), x.row(i) + x.cols, dst + (x.rows - 1 - i) * x.cols);
  return matrix_view<const T>(dst, x.rows, x.cols, x.cols);
}

/// The first `cols` columns of x.
template <class T>
matrix_view<const T> left_cols(const matrix_view<const T>& x, index_t cols) {
  return matrix_view<const T>(x.data, x.rows, cols, x.row_stride);
}

/// n positions reversed and negated: −p[n − 1], …, −p[0] (an offset stays an offset; an array
/// is written to `storage`).
inline positions reversed_positions(const positions& p, index_t n, std::vector<position_t>& storage) {
  if (!p.is_array()) return positions(-(p.offset() + (n - 1)));
  storage.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) storage[static_cast<std::size_t>(i)] = -p[n - 1 - i];
  return positions(std::span<const position_t>(storage));
}

/// A state of the given sizes and decay holding S (rows of `stride`, or none: empty) at `last`.
template <class T>
linear_attention_state<T> state_with(index_t f, index_t dv, double decay, const T* s, index_t stride, position_t last) {
  linear_attention_state<T> st(f, dv, decay);
  if (s != nullptr) {
    const std::vector<T> zero(static_cast<std::size_t>(f), T(0));
    st.assign(s, stride, zero.data(), last, 1);
  }
  return st;
}

/// Whether ĝ and v̂ carry the extra column: normalised, or a causal call with a state gradient
/// (whose dz_f reaches dk̃ through v̂'s 1 even without normalisation).
template <class T>
bool linear_backward_augmented(const linear_backward_problem<T>& p) {
  return p.forward.norm == normalisation::denominator || (p.forward.causal && p.d_final != nullptr);
}

/// The pieces of one backward call: Q̃, K̃, V as the passes read them, ĝ and v̂.
template <class T>
struct linear_backward_inputs {
  matrix_view<const T> g_hat, v_hat;  ///< nq × da and nk × da (da = d_v, + 1 when augmented)
  index_t da;
};

/**
 * ĝ and v̂ (see the file comment): dO and V as they are without normalisation; normalised, num
 * and den recomputed by a forward pass with values (v, 1), then g_s = dO_s / max(den_s, eps)
 * and e_s = −(dO_s·out_s)/den_s (0 at or below eps), as the reference.
 */
template <class T, class A>
linear_backward_inputs<T> linear_gradient_rows(const linear_backward_problem<T>& p, T* scratch, simd_workspace& ws) {
  const linear_problem<T>& f = p.forward;
  const index_t nq = f.qf.rows, nk = f.kf.rows, df = f.qf.cols, dv = f.v.cols;
  if (!linear_backward_augmented(p)) return {p.d_out, f.v, dv};
  const index_t da = dv + 1;
  T* v_hat = scratch;
  T* num_den = v_hat + nk * da;
  T* g_hat = num_den + nq * da;
  for (index_t t = 0; t < nk; ++t) {
    std::copy(f.v.row(t), f.v.row(t) + dv, v_hat + t * da);
    v_hat[t * da + dv] = T(1);
  }
  if (f.norm != normalisation::denominator) {  // ĝ = (dO, 0): for dz_f alone
    for (index_t s = 0; s < nq; ++s) {
      std::copy(p.d_out.row(s), p.d_out.row(s) + dv, g_hat + s * da);
      g_hat[s * da + dv] = T(0);
    }
    return {matrix_view<const T>(g_hat, nq, da, da), matrix_view<const T>(v_hat, nk, da, da), da};
  }
  linear_problem<T> fwd = f;
  fwd.v = matrix_view<const T>(v_hat, nk, da, da);
  fwd.out = matrix_view<T>(num_den, nq, da, da);
  fwd.norm = normalisation::none;
  if (f.causal) {
    const bool has_state = p.initial != nullptr && !p.initial->empty();
    std::vector<T> s0;  // [S₀ | z₀]
    if (has_state) {
      s0.resize(static_cast<std::size_t>(df * da));
      for (index_t i = 0; i < df; ++i) {
        for (index_t j = 0; j < dv; ++j) s0[static_cast<std::size_t>(i * da + j)] = p.initial->kv()(i, j);
        s0[static_cast<std::size_t>(i * da + dv)] = p.initial->k_sum()[i];
      }
    }
    auto st = state_with<T>(df, da, p.decay, has_state ? s0.data() : nullptr, da,
                            has_state ? p.initial->last_position() : 0);
    linear_simd<T, A>(fwd, &st, ws);
  } else {
    linear_simd<T, A>(fwd, nullptr, ws);
  }
  for (index_t s = 0; s < nq; ++s) {
    const T* nd = num_den + s * da;
    const double den = static_cast<double>(nd[dv]);
    const double inv = 1.0 / std::max(den, f.eps);
    double dot = 0;
    for (index_t j = 0; j < dv; ++j) {
      const double go = static_cast<double>(p.d_out.row(s)[j]);
      g_hat[s * da + j] = static_cast<T>(go * inv);
      dot += go * static_cast<double>(nd[j]) * inv;
    }
    g_hat[s * da + dv] = static_cast<T>(den > f.eps ? -dot / den : 0.0);
  }
  return {matrix_view<const T>(g_hat, nq, da, da), matrix_view<const T>(v_hat, nk, da, da), da};
}

/// Whether the passes cover the call (see the file comment).
template <class T>
bool linear_backward_covered(const linear_backward_problem<T>& p) {
  const linear_problem<T>& f = p.forward;
  constexpr position_t lowest = std::numeric_limits<position_t>::min();
  if (f.qf.rows == 0 || f.kf.rows == 0 || f.qf.cols == 0 || f.v.cols == 0) return false;
  if (!f.causal) return true;
  // causal positions are non-decreasing (validated): the first is the least, the last the most
  const position_t q0 = f.q_positions[0], k0 = f.k_positions[0];
  const position_t q_last = f.q_positions[f.qf.rows - 1], k_last = f.k_positions[f.kf.rows - 1];
  if (q0 == lowest || k0 == lowest || q_last > k_last) return false;  // (negated; the reversed passes' state first)
  return p.initial == nullptr || p.initial->empty() || p.initial->last_position() <= q0;
}

/// dq̃ of a causal call: a forward pass (queries ĝ, keys v̂, values k̃) from [S₀ | z₀]ᵀ, z₀'s row
/// only when ĝ and v̂ carry the extra column.
template <class T, class A>
void forward_dq(const linear_backward_problem<T>& p, const linear_backward_inputs<T>& in, bool augmented,
                simd_workspace& ws) {
  const linear_problem<T>& f = p.forward;
  const index_t df = f.qf.cols, dv = f.v.cols, da = in.da;
  const bool has_state = p.initial != nullptr && !p.initial->empty();
  std::vector<T> h0;
  if (has_state) {
    h0.assign(static_cast<std::size_t>(da * df), T(0));
    for (index_t i = 0; i < df; ++i) {
      for (index_t j = 0; j < dv; ++j) h0[static_cast<std::size_t>(j * df + i)] = p.initial->kv()(i, j);
      if (augmented) h0[static_cast<std::size_t>(dv * df + i)] = p.initial->k_sum()[i];
    }
  }
  auto st = state_with<T>(da, df, p.decay, has_state ? h0.data() : nullptr, df, has_state ? p.initial->last_position() : 0);
  const linear_problem<T> pp{in.g_hat, in.v_hat, f.kf, p.dqf, f.q_positions, f.k_positions, true,
                             normalisation::none, f.eps, f.chunk};
  linear_simd<T, A>(pp, &st, ws);
}

/// Whether `backward_sweep` takes the call (linear_backward_sweep.hpp): causal self-attention at
/// offsets, no decay, no normalisation, d_f and d_v multiples of the vector width.
template <class T, class A>
bool sweep_applies(const linear_backward_problem<T>& p) {
  constexpr index_t W = xsimd::batch<T, A>::size;
  const linear_problem<T>& f = p.forward;
  const auto& qp = f.q_positions;
  const auto& kp = f.k_positions;
  return f.causal && p.decay == 1.0 && p.d_decay == nullptr && f.norm == normalisation::none && !qp.is_array() &&
         !kp.is_array() &&
         qp.offset() == kp.offset() && f.qf.rows == f.kf.rows && f.qf.cols % W == 0 && f.v.cols % W == 0;
}

/// A call `sweep_applies` to: dq̃ by a forward pass, then dk̃, dv and dS₀ by the sweep.
template <class T, class A>
void linear_backward_by_sweep(const linear_backward_problem<T>& p, simd_workspace& ws) {
  const linear_problem<T>& f = p.forward;
  const index_t df = f.qf.cols, dv = f.v.cols;
  forward_dq<T, A>(p, linear_backward_inputs<T>{p.d_out, f.v, dv}, false, ws);
  using sweep_t = backward_sweep<T, A>;
  T* dS = ws.get<T>(simd_workspace::grad_state, sweep_t::scratch(df, dv));
  for (index_t i = 0; i < df; ++i)
    for (index_t j = 0; j < dv; ++j) dS[i * dv + j] = p.d_final != nullptr ? p.d_final->kv(i, j) : T(0);
  T* vt = dS + df * dv;
  T* mt = vt + dv * sweep_t::W;
  T* dkt = mt + sweep_t::W * sweep_t::W;
  const T* dz = p.d_final != nullptr ? p.d_final->k_sum.data() : nullptr;
  sweep_t sweep{f.qf, f.kf, f.v, p.d_out, p.dkf, p.dv, dz, df, dv, dS, vt, mt, dkt};
  sweep.run();
  if (p.d_initial != nullptr) {  // no decay: dS₀ = dS after the first row; dz₀ = dz_f (e = 0)
    p.d_initial->kv = row_matrix<T>::Zero(df, dv);
    p.d_initial->k_sum = dense_vector<T>::Zero(df);
    if (p.initial != nullptr && !p.initial->empty()) {
      for (index_t i = 0; i < df; ++i)
        for (index_t j = 0; j < dv; ++j) p.d_initial->kv(i, j) = dS[i * dv + j];
      if (dz != nullptr) p.d_initial->k_sum = p.d_final->k_sum;
    }
  }
}

/// The whole call (see the file comment); false, having done nothing, where it does not cover it.
template <class T, class A>
bool linear_backward_simd(const linear_backward_problem<T>& p, simd_workspace& ws) {
  if (!linear_backward_covered(p)) return false;
  if (sweep_applies<T, A>(p)) {
    linear_backward_by_sweep<T, A>(p, ws);
    return true;
  }
  const linear_problem<T>& f = p.forward;
  const index_t nq = f.qf.rows, nk = f.kf.rows, df = f.qf.cols, dv = f.v.cols;
  const bool augmented = linear_backward_augmented(p);
  const index_t da_max = dv + 1;
  T* scratch = ws.get<T>(simd_workspace::grad_rows, (nq + nk) * (3 * da_max + 2 * df) + nk * (df + dv));
  const linear_backward_inputs<T> in = linear_gradient_rows<T, A>(p, scratch, ws);
  const index_t da = in.da;
  T* rest = scratch + (augmented ? (nk + 2 * nq) * da : 0);
  const double lambda = p.decay;
  const auto pass = [&](matrix_view<const T> q, matrix_view<const T> k, matrix_view<const T> v, matrix_view<T> out,
                        positions qp, positions kp, linear_attention_state<T>* st) {
    const linear_problem<T> pp{q, k, v, out, qp, kp, f.causal, normalisation::none, f.eps, f.chunk};
    linear_simd<T, A>(pp, st, ws);
  };

  if (!f.causal) {  // no order, no state: three passes on the rows as they are
    pass(in.g_hat, in.v_hat, f.kf, p.dqf, f.q_positions, f.k_positions, nullptr);
    pass(in.v_hat, in.g_hat, f.qf, p.dkf, f.k_positions, f.q_positions, nullptr);
    pass(f.kf, f.qf, left_cols(in.g_hat, dv), p.dv, f.k_positions, f.q_positions, nullptr);
    return true;
  }

  const bool has_state = p.initial != nullptr && !p.initial->empty();
  forward_dq<T, A>(p, in, augmented, ws);

  // dk̃ and dv: backwards in time, from the final state's gradient at −P
  const position_t last_key = f.k_positions[nk - 1];
  std::vector<position_t> rq_store, rk_store;
  const positions rq = reversed_positions(f.k_positions, nk, rq_store), rk = reversed_positions(f.q_positions, nq, rk_store);
  T* at = rest;
  const auto v_hat_r = reversed_rows(in.v_hat, at);
  const auto g_hat_r = reversed_rows(in.g_hat, at += nk * da);
  const auto q_r = reversed_rows(f.qf, at += nq * da);
  const auto k_r = reversed_rows(f.kf, at += nq * df);
  T* dk_r = at += nk * df;
  T* dv_r = at += nk * df;
  std::vector<T> gf;  // Ĝ_fᵀ = [dS_f | dz_f]ᵀ
  if (p.d_final != nullptr) {
    gf.assign(static_cast<std::size_t>(da * df), T(0));
    for (index_t i = 0; i < df; ++i) {
      for (index_t j = 0; j < dv; ++j) gf[static_cast<std::size_t>(j * df + i)] = p.d_final->kv(i, j);
      if (augmented) gf[static_cast<std::size_t>(dv * df + i)] = p.d_final->k_sum[i];
    }
  }
  auto s4 = state_with<T>(da, df, lambda, p.d_final != nullptr ? gf.data() : nullptr, df, -last_key);
  pass(v_hat_r, g_hat_r, q_r, matrix_view<T>(dk_r, nk, df, df), rq, rk, &s4);
  auto s5 = state_with<T>(df, dv, lambda, p.d_final != nullptr ? p.d_final->kv.data() : nullptr, dv, -last_key);
  pass(k_r, q_r, left_cols(g_hat_r, dv), matrix_view<T>(dv_r, nk, dv, dv), rq, rk, &s5);
  for (index_t t = 0; t < nk; ++t) {
    std::copy(dk_r + (nk - 1 - t) * df, dk_r + (nk - t) * df, p.dkf.row(t));
    std::copy(dv_r + (nk - 1 - t) * dv, dv_r + (nk - t) * dv, p.dv.row(t));
  }

  if (p.d_initial != nullptr) {  // the dk̃ pass left Σ_s λ^{p_s − q0} ĝ_s q̃_sᵀ + λ^{P − q0} Ĝ_fᵀ at −q0
    p.d_initial->kv = row_matrix<T>::Zero(df, dv);
    p.d_initial->k_sum = dense_vector<T>::Zero(df);
    if (has_state) {
      const position_t p_init = p.initial->last_position(), q0 = f.q_positions[0];
      const T c = static_cast<T>(decay_pow(lambda, q0 - p_init));
      const row_matrix<T>& h = s4.kv();
      for (index_t i = 0; i < df; ++i) {
        for (index_t j = 0; j < dv; ++j) p.d_initial->kv(i, j) = c * h(j, i);
        if (augmented) p.d_initial->k_sum[i] = c * h(dv, i);  // (else e = 0 and no dz_f: dz₀ = 0)
      }
    }
  }
  if (p.d_decay != nullptr) *p.d_decay += decay_gradient_chunks<T>(p, in.g_hat, in.v_hat)();
  return true;
}

}  // namespace simd_detail

/// SIMD linear attention backward: passes of the SIMD forward kernel (see the file comment);
/// the calls they do not cover take the reference kernel.
template <simd_backend B, class T>
void linear_backward_kernel(const B& b, const linear_backward_problem<T>& p) {
  if (!simd_detail::linear_backward_simd<T, typename B::arch_type>(p, *simd_detail::resolve(b).ws))
    linear_backward_kernel(reference{}, p);
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
