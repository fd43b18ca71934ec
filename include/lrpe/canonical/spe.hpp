// SPDX-License-Identifier: MIT
/**
 * @file spe.hpp
 * Stochastic positional encoding, sineSPE (Liutkus et al. 2021, "Relative positional encoding for
 * Transformers with linear complexity"; one of the LRPE paper's competitors): random features
 * whose expected dot product is a stationary relative kernel, so that linear attention gets a
 * relative encoding it could not factorise exactly.
 *
 * Per feature d of a head, K sinusoids with frequencies f_dk = sigmoid(φ_dk)/2 ∈ (0, ½), phases
 * θ_dk and gains λ_dk = softplus(γ_dk) (φ, θ, γ the reference implementation's raw parameters)
 * define the kernel of the lag δ = s − t (query minus key)
 *
 *     P_d(δ) = (1/2K) Σ_k λ_dk² cos(2π f_dk δ + θ_dk),     gated: P̃_d = (1 − g_d) P_d + g_d,
 *
 * g_d = sigmoid(gate_d). A draw (`draw(n, R, seed)`, the `spe_code` of positions 0 … n − 1 and R
 * realizations) takes Z ~ N(0, 1/2K)·λ of shape 2K × R per feature and, as the reference does,
 *
 *     q̄_d(m) = Ω_q(m)ᵀ Z_d / (RD)^¼,  Ω_q(m) = [cos(2π f_dk m + θ_dk), sin(2π f_dk m + θ_dk)]_k
 *     k̄_d(n) = Ω_k(n)ᵀ Z_d / (RD)^¼,  Ω_k(n) = [cos(2π f_dk n), sin(2π f_dk n)]_k
 *
 * (gated: q̄ ← √(1−g) q̄ + √g ε, k̄ ← √(1−g) k̄ + √g ε with one ε ~ N(0, (DR)^−½) per (d, r));
 * then φ_q(q, m) = Σ_d q_d q̄_d(m) and φ_k(k, n) = Σ_d k_d k̄_d(n), R features each. Their product
 * is an unbiased estimate:
 *
 *     E[φ_q(q, s)·φ_k(k, t)] = √(R/D) Σ_d q_d k_d P̃_d(s − t)        (`expected_score`)
 *
 * with a relative error that falls as 1/√R. A code is linearizable (its features are exact for
 * itself) and is used as any linearizable encoding in linear or softmax attention, at positions
 * 0 … n − 1 (checked by `require_positions`). In lrpe's linear attention the feature map (ReLU,
 * elu + 1) is applied to q and k before the code, as for every linearizable encoding. Angles are
 * exact: 2π f_dk·m by the exact product of m and fl(2π f_dk) (detail/angle.hpp), then θ added as
 * a rotation. Draws use lrpe's documented generator: one seed gives the same code everywhere.
 *
 * convSPE (`conv_spe`): per feature d two learned filters a_d, b_d of K taps filter one white
 * noise signal z_d (one per realization), q̄_d(m) = Σ_j a_dj z_d(m + j) / (RD)^¼ and
 * k̄_d(n) = Σ_j b_dj z_d(n + j) / (RD)^¼ (the reference's two grouped `Conv1d`s, which are
 * correlations), so that the kernel is the filters' cross-correlation
 *
 *     P_d(δ) = Σ_j a_dj b_d,j+δ   (0 ≤ j, j + δ < K; 0 for |δ| ≥ K),   δ = s − t,
 *
 * gated as sineSPE's, with the same expectation √(R/D) Σ_d q_d k_d P̃_d(s − t). The reference
 * draws a longer signal and drops its borders; only the n + K − 1 samples that reach positions
 * 0 … n − 1 matter, and those are what `draw` draws (the same distribution). A draw costs
 * O(n·K·D·R).
 *
 * Training: a code's `make_gradient()` holds dL/dq̄ and dL/dk̄, which attention's backward fills
 * (through `features_backward`); the SPE's `draw_backward(length, R, seed, code_gradient)` draws
 * the same noise again and returns the gradients of its raw parameters.
 */
#pragma once

#include <lrpe/canonical/detail/common.hpp>
#include <lrpe/canonical/linearizable.hpp>
#include <lrpe/core/random.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/detail/angle.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

template <real_scalar T>
class spe_code;

/// sineSPE's parameter gradients, in the raw parameters' shapes (`sine_spe::draw_backward`).
struct sine_spe_gradient {
  row_matrix<double> freqs, offsets, gains;  ///< D × K
  std::vector<double> gate;                  ///< D, or empty when not gated
};
/// convSPE's parameter gradients (`conv_spe::draw_backward`).
struct conv_spe_gradient {
  row_matrix<double> q_filters, k_filters;  ///< D × K
  std::vector<double> gate;                 ///< D, or empty when not gated
};

namespace detail_ {
/// The raw gates as g = sigmoid(gate) (checked finite); empty stays empty.
inline std::vector<double> spe_gates(std::vector<double> gate, const char* where) {
  for (double& g : gate) {
    require_finite_value(g, where, "gate");
    g = 1.0 / (1.0 + std::exp(-g));
  }
  return gate;
}
/// The gating noise ε ~ N(0, (DR)^−½), one per (d, r), d-major (none when not gated).
inline std::vector<double> spe_gating_noise(generator& g, index_t d, index_t r, bool gated) {
  std::vector<double> eps;
  if (!gated) return eps;
  eps.resize(static_cast<std::size_t>(d * r));
  const double scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(d) * static_cast<double>(r)));
  for (double& e : eps) e = g.normal() * scale;
  return eps;
}
/**
 * d(√(1 − g)·a + √g·e)/d(raw gate) for g = sigmoid(gate): −(g√(1 − g)/2)·a + (√g(1 − g)/2)·e.
 */
inline double spe_gate_derivative(double g, double a, double e) noexcept {
  return -0.5 * g * std::sqrt(1 - g) * a + 0.5 * std::sqrt(g) * (1 - g) * e;
}
/// The draw_backward's check of the code's gradient (`spe_code::make_gradient()` of the draw).
inline void require_code_gradient(std::span<const double> grad, index_t length, index_t d, index_t r,
                                  const char* where) {
  lrpe::detail::require_shape(static_cast<index_t>(grad.size()) == 2 * length * d * r, where, "code_gradient.size()",
                              lrpe::detail::lazy_concat("must be 2 x length x D x R = ", 2 * length * d * r,
                                                        " (spe_code::make_gradient() of the draw)"),
                              grad.size());
}

/// The draw's checks of `length` and `realizations`.
inline void require_spe_draw(index_t length, index_t d, index_t r, const char* where) {
  lrpe::detail::require_shape(length >= 1, where, "length", "must be >= 1", length);
  lrpe::detail::require_shape(r >= 1 && r <= max_dim && d * r <= std::numeric_limits<index_t>::max() / length, where,
                              "realizations", "must be in [1, lrpe::max_dim] with length x D x R an index_t", r);
}
}  // namespace detail_

/// sineSPE's parameters of one head: D features × K sinusoids (raw, as the reference stores them).
template <real_scalar T>
class sine_spe {
 public:
  using scalar = T;

  /**
   * @param freqs, offsets, gains D × K: f = sigmoid(freqs)/2, θ = offsets, λ = softplus(gains).
   * @param gate  D raw gates (g = sigmoid(gate)), or empty: no gating (the reference's `gated`).
   * @throws shape_error (sizes), domain_error (a non-finite entry).
   */
  sine_spe(row_matrix<double> freqs, row_matrix<double> offsets, row_matrix<double> gains, std::vector<double> gate = {})
      : f_(std::move(freqs)), theta_(std::move(offsets)), lambda_(std::move(gains)), gate_(std::move(gate)) {
    constexpr const char* where = "lrpe::canonical::sine_spe";
    lrpe::detail::require_shape(f_.rows() >= 1 && f_.cols() >= 1, where, "freqs", "must be D x K with D, K >= 1",
                                lrpe::detail::lazy_concat(f_.rows(), "x", f_.cols()));
    detail_::require_table_shape(theta_, f_.rows(), f_.cols(), where, "offsets");
    detail_::require_table_shape(lambda_, f_.rows(), f_.cols(), where, "gains");
    lrpe::detail::require_shape(gate_.empty() || static_cast<index_t>(gate_.size()) == f_.rows(), where, "gate.size()",
                                lrpe::detail::lazy_concat("must be 0 (no gating) or D = ", f_.rows()), gate_.size());
    detail_::require_finite_table(f_, where, "freqs");
    detail_::require_finite_table(theta_, where, "offsets");
    detail_::require_finite_table(lambda_, where, "gains");
    gate_ = detail_::spe_gates(std::move(gate_), where);
    for (index_t i = 0; i < f_.size(); ++i) {
      f_.data()[i] = 0.5 / (1.0 + std::exp(-f_.data()[i]));
      const double x = lambda_.data()[i];  // softplus, without overflow
      lambda_.data()[i] = x > 30 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    }
  }

  [[nodiscard]] index_t dim() const noexcept { return f_.rows(); }
  [[nodiscard]] index_t sines() const noexcept { return f_.cols(); }
  [[nodiscard]] bool gated() const noexcept { return !gate_.empty(); }
  /// f_dk, θ_dk, λ_dk and g_d after their squashing functions.
  [[nodiscard]] double frequency(index_t d, index_t k) const noexcept { return f_(d, k); }
  [[nodiscard]] double phase(index_t d, index_t k) const noexcept { return theta_(d, k); }
  [[nodiscard]] double gain(index_t d, index_t k) const noexcept { return lambda_(d, k); }
  [[nodiscard]] double gate(index_t d) const noexcept { return gated() ? gate_[static_cast<std::size_t>(d)] : 0.0; }

  /// P̃_d(δ): (1 − g_d)·(1/2K) Σ_k λ_dk² cos(2π f_dk δ + θ_dk) + g_d, for the lag δ = s − t.
  [[nodiscard]] double kernel(index_t d, position_t delta) const noexcept {
    double p = 0;
    for (index_t k = 0; k < sines(); ++k) {
      const lrpe::detail::cos_sin a = angle(d, k, delta, true);
      p += lambda_(d, k) * lambda_(d, k) * a.c;
    }
    p /= 2.0 * static_cast<double>(sines());
    return gated() ? (1 - gate(d)) * p + gate(d) : p;
  }
  /// E[φ_q(q, s)·φ_k(k, t)] over the draws of R realizations: √(R/D) Σ_d q_d k_d P̃_d(s − t).
  [[nodiscard]] double expected_score(const T* q, position_t s, const T* k, position_t t, index_t realizations) const {
    const position_t lag = lrpe::detail::checked_offset(t, s, "lrpe::canonical::sine_spe::expected_score");  // s − t
    double acc = 0;
    for (index_t d = 0; d < dim(); ++d) acc += static_cast<double>(q[d]) * static_cast<double>(k[d]) * kernel(d, lag);
    return std::sqrt(static_cast<double>(realizations) / static_cast<double>(dim())) * acc;
  }

  /// cos and sin of 2π f_dk·m (+ θ_dk with `phase`), the angle exact in m.
  [[nodiscard]] lrpe::detail::cos_sin angle(index_t d, index_t k, position_t m, bool with_phase) const noexcept {
    const lrpe::detail::cos_sin a = lrpe::detail::angle_cos_sin(m, 2.0 * std::numbers::pi * f_(d, k));
    return with_phase ? lrpe::detail::rotate(a, lrpe::detail::cos_sin_of(theta_(d, k))) : a;
  }

  /**
   * One draw of the code for positions 0 … length − 1 and R realizations, from `generator(seed)`
   * (Z feature by feature, d-major then k then r; then ε, d-major then r).
   * @throws shape_error (length < 1, realizations < 1, sizes past index_t).
   */
  [[nodiscard]] spe_code<T> draw(index_t length, index_t realizations, std::uint64_t seed) const;

  /**
   * The gradients of the raw parameters (freqs, offsets, gains, gate) from the gradient of the
   * code that `draw(length, realizations, seed)` returned (`spe_code::make_gradient()`, filled by
   * attention's backward): the draw's random numbers are drawn again from the seed, and the
   * code's dependence on the parameters is differentiated through the squashing functions.
   * @throws shape_error (as `draw`; code_gradient's size).
   */
  [[nodiscard]] sine_spe_gradient draw_backward(index_t length, index_t realizations, std::uint64_t seed,
                                                std::span<const double> code_gradient) const;

 private:
  struct noise {
    std::vector<double> n, eps;  ///< N(0, 1) of Z (d-major, then Z's row, then r); the gating noise
  };
  [[nodiscard]] noise draw_noise(index_t r, std::uint64_t seed) const {
    generator g(seed);
    noise out;
    out.n.resize(static_cast<std::size_t>(dim() * 2 * sines() * r));
    for (double& x : out.n) x = g.normal();
    out.eps = detail_::spe_gating_noise(g, dim(), r, gated());
    return out;
  }

  row_matrix<double> f_, theta_, lambda_;
  std::vector<double> gate_;
};

/**
 * One realization of a sineSPE code: q̄ and k̄ for positions 0 … n − 1 (n × D·R each, feature
 * d's R values at columns d·R …), a linearizable encoding of width D with R features.
 */
template <real_scalar T>
class spe_code {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = true;
  static constexpr bool is_toeplitz = false;  // relative only in expectation

  spe_code(index_t d, index_t realizations, row_matrix<T> q_bar, row_matrix<T> k_bar)
      : d_(d), r_(realizations), bars_(std::make_shared<const bars>(bars{std::move(q_bar), std::move(k_bar)})) {}

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t realizations() const noexcept { return r_; }
  [[nodiscard]] index_t feature_dim() const noexcept { return r_; }
  /// The positions the code was drawn for: 0 … length() − 1.
  [[nodiscard]] index_t length() const noexcept { return bars_->q.rows(); }
  [[nodiscard]] const row_matrix<T>& q_bar() const noexcept { return bars_->q; }
  [[nodiscard]] const row_matrix<T>& k_bar() const noexcept { return bars_->k; }

  /// φ(x, m) = Σ_d x_d·bar_d(m) (R entries). @throws parameter_error (m outside the code).
  void features(side which, const T* x, position_t m, T* out) const {
    require_position(m, "lrpe::canonical::spe_code::features");
    const T* bar = (which == side::query ? bars_->q : bars_->k).row(static_cast<index_t>(m)).data();
    for (index_t r = 0; r < r_; ++r) out[r] = T(0);
    for (index_t d = 0; d < d_; ++d)
      for (index_t r = 0; r < r_; ++r) out[r] += x[d] * bar[d * r_ + r];
  }
  /// The code's own "parameters" for the gradient: q̄ then k̄ (length × D·R each, row-major as
  /// `q_bar()` and `k_bar()`), 2·length·D·R entries; `draw_backward` of the SPE that drew the code
  /// takes them to its parameters.
  [[nodiscard]] index_t parameter_count() const noexcept { return bars_->q.size() + bars_->k.size(); }
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// The features' backward: dx_d = Σ_r g_r·bar_d(m)_r, and (grad not null) dL/dbar_d(m)_r += g_r·x_d.
  void features_backward(side which, const T* x, const T* g, position_t m, T* dx, double* grad) const {
    require_position(m, "lrpe::canonical::spe_code::features_backward");
    const T* bar = (which == side::query ? bars_->q : bars_->k).row(static_cast<index_t>(m)).data();
    for (index_t d = 0; d < d_; ++d) {
      T acc(0);
      for (index_t r = 0; r < r_; ++r) acc += g[r] * bar[d * r_ + r];
      dx[d] = acc;
    }
    if (grad == nullptr) return;
    double* gb = grad + (which == side::key ? bars_->q.size() : 0) + m * d_ * r_;
    for (index_t d = 0; d < d_; ++d)
      for (index_t r = 0; r < r_; ++r) gb[d * r_ + r] += static_cast<double>(g[r]) * static_cast<double>(x[d]);
  }
  /// This realization's score φ_q(q, s)·φ_k(k, t) (an estimate of `sine_spe::expected_score`).
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const {
    std::vector<T> a(static_cast<std::size_t>(r_)), b(static_cast<std::size_t>(r_));
    features(side::query, q, s, a.data());
    features(side::key, k, t, b.data());
    return detail_::dot(a.data(), b.data(), r_);
  }
  /// Throws `parameter_error` for a call whose positions lie outside 0 … length() − 1.
  void require_positions(const lrpe::detail::call_span& span, const char* where) const {
    detail_::require_positions_below(span, length(), length(), where, "length", "length");
  }

 private:
  struct bars {
    row_matrix<T> q, k;
  };
  void require_position(position_t m, const char* where) const {
    if (m < 0 || m >= length())
      lrpe::detail::fail<parameter_error>(where, "position",
                                          lrpe::detail::lazy_concat("must be in [0, length() = ", length(), ")"), m);
  }

  index_t d_, r_;
  std::shared_ptr<const bars> bars_;
};

template <real_scalar T>
spe_code<T> sine_spe<T>::draw(index_t length, index_t realizations, std::uint64_t seed) const {
  constexpr const char* where = "lrpe::canonical::sine_spe::draw";
  const index_t d = dim(), kk = sines(), r = realizations;
  detail_::require_spe_draw(length, d, r, where);
  const noise nz = draw_noise(r, seed);
  // Z: per feature, 2K × R, N(0, 1/2K) scaled by the sinusoid's gain (both of its rows)
  std::vector<double> z(nz.n.size());
  const double z_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(kk));
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < 2 * kk; ++j)
      for (index_t c = 0; c < r; ++c) {
        const auto at = static_cast<std::size_t>((i * 2 * kk + j) * r + c);
        z[at] = nz.n[at] * z_scale * lambda_(i, j / 2);
      }
  const std::vector<double>& eps = nz.eps;
  const double scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(r) * static_cast<double>(d)));
  row_matrix<T> qb(length, d * r), kb(length, d * r);
  std::vector<double> oq(static_cast<std::size_t>(2 * kk)), ok(static_cast<std::size_t>(2 * kk));
  for (index_t m = 0; m < length; ++m) {
    for (index_t i = 0; i < d; ++i) {
      for (index_t k = 0; k < kk; ++k) {
        const auto aq = angle(i, k, m, true), ak = angle(i, k, m, false);
        oq[static_cast<std::size_t>(2 * k)] = aq.c;
        oq[static_cast<std::size_t>(2 * k + 1)] = aq.s;
        ok[static_cast<std::size_t>(2 * k)] = ak.c;
        ok[static_cast<std::size_t>(2 * k + 1)] = ak.s;
      }
      const double keep = gated() ? std::sqrt(1 - gate(i)) : 1.0, mix = gated() ? std::sqrt(gate(i)) : 0.0;
      for (index_t c = 0; c < r; ++c) {
        double vq = 0, vk = 0;
        for (index_t j = 0; j < 2 * kk; ++j) {
          const double zj = z[static_cast<std::size_t>((i * 2 * kk + j) * r + c)];
          vq += oq[static_cast<std::size_t>(j)] * zj;
          vk += ok[static_cast<std::size_t>(j)] * zj;
        }
        const double e = gated() ? eps[static_cast<std::size_t>(i * r + c)] : 0.0;
        qb(m, i * r + c) = static_cast<T>(keep * vq * scale + mix * e);
        kb(m, i * r + c) = static_cast<T>(keep * vk * scale + mix * e);
      }
    }
  }
  return spe_code<T>(d, r, std::move(qb), std::move(kb));
}

/**
 * q̄ ∝ λ(cos(αm + θ) n₀ + sin(αm + θ) n₁) and k̄ ∝ λ(cos(αm) n₀ + sin(αm) n₁) per sinusoid
 * (α = 2πf): the angle's derivative turns (cos, sin) into (−sin, cos); then f = sigmoid(φ)/2
 * gives dα/dφ = 2π f(1 − 2f), λ = softplus(γ) gives dλ/dγ = 1 − e^{−λ}.
 */
template <real_scalar T>
sine_spe_gradient sine_spe<T>::draw_backward(index_t length, index_t realizations, std::uint64_t seed,
                                             std::span<const double> code_gradient) const {
  constexpr const char* where = "lrpe::canonical::sine_spe::draw_backward";
  const index_t d = dim(), kk = sines(), r = realizations;
  detail_::require_spe_draw(length, d, r, where);
  detail_::require_code_gradient(code_gradient, length, d, r, where);
  const noise nz = draw_noise(r, seed);
  const double z_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(kk));
  const double scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(r) * static_cast<double>(d)));
  sine_spe_gradient out{row_matrix<double>::Zero(d, kk), row_matrix<double>::Zero(d, kk),
                        row_matrix<double>::Zero(d, kk), std::vector<double>(gated() ? d : 0, 0.0)};
  row_matrix<double> d_alpha = row_matrix<double>::Zero(d, kk);
  const double* g_q = code_gradient.data();
  const double* g_k = g_q + length * d * r;
  std::vector<lrpe::detail::cos_sin> aq(static_cast<std::size_t>(kk)), ak(aq.size());
  for (index_t m = 0; m < length; ++m) {
    for (index_t i = 0; i < d; ++i) {
      for (index_t k = 0; k < kk; ++k) {
        aq[static_cast<std::size_t>(k)] = angle(i, k, m, true);
        ak[static_cast<std::size_t>(k)] = angle(i, k, m, false);
      }
      const double gi = gate(i), keep = gated() ? std::sqrt(1 - gi) : 1.0;
      for (index_t c = 0; c < r; ++c) {
        const double grad_q = g_q[(m * d + i) * r + c], grad_k = g_k[(m * d + i) * r + c];
        if (grad_q == 0 && grad_k == 0) continue;
        const double gq = grad_q * keep * scale, gk = grad_k * keep * scale;
        double vq = 0, vk = 0;  // the ungated sums
        for (index_t k = 0; k < kk; ++k) {
          const double n0 = nz.n[static_cast<std::size_t>((i * 2 * kk + 2 * k) * r + c)] * z_scale;
          const double n1 = nz.n[static_cast<std::size_t>((i * 2 * kk + 2 * k + 1) * r + c)] * z_scale;
          const auto& q_a = aq[static_cast<std::size_t>(k)];
          const auto& k_a = ak[static_cast<std::size_t>(k)];
          const double lam = lambda_(i, k);
          const double turn_q = lam * (-q_a.s * n0 + q_a.c * n1), turn_k = lam * (-k_a.s * n0 + k_a.c * n1);
          const double along_q = q_a.c * n0 + q_a.s * n1, along_k = k_a.c * n0 + k_a.s * n1;
          out.offsets(i, k) += gq * turn_q;
          d_alpha(i, k) += static_cast<double>(m) * (gq * turn_q + gk * turn_k);
          out.gains(i, k) += gq * along_q + gk * along_k;  // dL/dλ, chained below
          vq += lam * along_q;
          vk += lam * along_k;
        }
        if (gated()) {
          const double e = nz.eps[static_cast<std::size_t>(i * r + c)];
          out.gate[static_cast<std::size_t>(i)] += grad_q * detail_::spe_gate_derivative(gi, vq * scale, e) +
                                                   grad_k * detail_::spe_gate_derivative(gi, vk * scale, e);
        }
      }
    }
  }
  for (index_t i = 0; i < d; ++i)
    for (index_t k = 0; k < kk; ++k) {
      const double f = f_(i, k);
      out.freqs(i, k) = d_alpha(i, k) * 2.0 * std::numbers::pi * f * (1 - 2 * f);
      out.gains(i, k) *= -std::expm1(-lambda_(i, k));
    }
  return out;
}

/// convSPE's parameters of one head: D features × K taps of the query and key filters.
template <real_scalar T>
class conv_spe {
 public:
  using scalar = T;

  /**
   * @param q_filters, k_filters D × K: a (makes q̄) and b (makes k̄), as the reference's two
   *        grouped convolutions hold them.
   * @param gate D raw gates (g = sigmoid(gate)), or empty: no gating.
   * @throws shape_error (sizes), domain_error (a non-finite entry).
   */
  conv_spe(row_matrix<double> q_filters, row_matrix<double> k_filters, std::vector<double> gate = {})
      : a_(std::move(q_filters)), b_(std::move(k_filters)) {
    constexpr const char* where = "lrpe::canonical::conv_spe";
    lrpe::detail::require_shape(a_.rows() >= 1 && a_.cols() >= 1, where, "q_filters", "must be D x K with D, K >= 1",
                                lrpe::detail::lazy_concat(a_.rows(), "x", a_.cols()));
    detail_::require_table_shape(b_, a_.rows(), a_.cols(), where, "k_filters");
    lrpe::detail::require_shape(gate.empty() || static_cast<index_t>(gate.size()) == a_.rows(), where, "gate.size()",
                                lrpe::detail::lazy_concat("must be 0 (no gating) or D = ", a_.rows()), gate.size());
    detail_::require_finite_table(a_, where, "q_filters");
    detail_::require_finite_table(b_, where, "k_filters");
    gate_ = detail_::spe_gates(std::move(gate), where);
  }

  [[nodiscard]] index_t dim() const noexcept { return a_.rows(); }
  [[nodiscard]] index_t kernel_size() const noexcept { return a_.cols(); }
  [[nodiscard]] bool gated() const noexcept { return !gate_.empty(); }
  [[nodiscard]] double gate(index_t d) const noexcept { return gated() ? gate_[static_cast<std::size_t>(d)] : 0.0; }

  /// P̃_d(δ): (1 − g_d)·Σ_j a_dj b_d,j+δ + g_d, for the lag δ = s − t.
  [[nodiscard]] double kernel(index_t d, position_t delta) const noexcept {
    const index_t kk = kernel_size();
    double p = 0;
    if (delta > -kk && delta < kk) {
      const auto lag = static_cast<index_t>(delta);
      for (index_t j = std::max<index_t>(0, -lag); j < kk && j + lag < kk; ++j) p += a_(d, j) * b_(d, j + lag);
    }
    return gated() ? (1 - gate(d)) * p + gate(d) : p;
  }
  /// E[φ_q(q, s)·φ_k(k, t)] over the draws of R realizations: √(R/D) Σ_d q_d k_d P̃_d(s − t).
  [[nodiscard]] double expected_score(const T* q, position_t s, const T* k, position_t t, index_t realizations) const {
    const position_t lag = lrpe::detail::checked_offset(t, s, "lrpe::canonical::conv_spe::expected_score");  // s − t
    double acc = 0;
    for (index_t d = 0; d < dim(); ++d) acc += static_cast<double>(q[d]) * static_cast<double>(k[d]) * kernel(d, lag);
    return std::sqrt(static_cast<double>(realizations) / static_cast<double>(dim())) * acc;
  }

  /**
   * One draw of the code for positions 0 … length − 1 and R realizations, from `generator(seed)`
   * (z_d of realization r: length + K − 1 samples, d-major then r; then ε, d-major then r).
   * @throws shape_error (length < 1, realizations < 1, sizes past index_t).
   */
  [[nodiscard]] spe_code<T> draw(index_t length, index_t realizations, std::uint64_t seed) const {
    constexpr const char* where = "lrpe::canonical::conv_spe::draw";
    const index_t d = dim(), kk = kernel_size(), r = realizations;
    detail_::require_spe_draw(length, d, r, where);
    lrpe::detail::require_shape(kk - 1 <= std::numeric_limits<index_t>::max() / (d * r) - length, where, "length",
                                "must keep D x R x (length + K - 1) noise samples an index_t", length);
    const index_t samples = length + kk - 1;
    const noise nz = draw_noise(length, r, seed);
    const std::vector<double>&z = nz.z, &eps = nz.eps;
    const double scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(r) * static_cast<double>(d)));
    row_matrix<T> qb(length, d * r), kb(length, d * r);
    for (index_t i = 0; i < d; ++i) {
      const double keep = gated() ? std::sqrt(1 - gate(i)) : 1.0, mix = gated() ? std::sqrt(gate(i)) : 0.0;
      for (index_t c = 0; c < r; ++c) {
        const double* zs = z.data() + (i * r + c) * samples;
        const double e = gated() ? eps[static_cast<std::size_t>(i * r + c)] : 0.0;
        for (index_t m = 0; m < length; ++m) {
          double vq = 0, vk = 0;
          for (index_t j = 0; j < kk; ++j) {
            vq += a_(i, j) * zs[m + j];
            vk += b_(i, j) * zs[m + j];
          }
          qb(m, i * r + c) = static_cast<T>(keep * vq * scale + mix * e);
          kb(m, i * r + c) = static_cast<T>(keep * vk * scale + mix * e);
        }
      }
    }
    return spe_code<T>(d, r, std::move(qb), std::move(kb));
  }

  /**
   * The gradients of the filters and raw gates from the gradient of the code that
   * `draw(length, realizations, seed)` returned (`spe_code::make_gradient()`), the noise drawn
   * again from the seed: dL/da_dj = Σ dL/dq̄_d(m)·√(1 − g_d)·z(m + j)/(RD)^¼, b likewise.
   * @throws shape_error (as `draw`; code_gradient's size).
   */
  [[nodiscard]] conv_spe_gradient draw_backward(index_t length, index_t realizations, std::uint64_t seed,
                                                std::span<const double> code_gradient) const {
    constexpr const char* where = "lrpe::canonical::conv_spe::draw_backward";
    const index_t d = dim(), kk = kernel_size(), r = realizations;
    detail_::require_spe_draw(length, d, r, where);
    detail_::require_code_gradient(code_gradient, length, d, r, where);
    lrpe::detail::require_shape(kk - 1 <= std::numeric_limits<index_t>::max() / (d * r) - length, where, "length",
                                "must keep D x R x (length + K - 1) noise samples an index_t", length);
    const index_t samples = length + kk - 1;
    const noise nz = draw_noise(length, r, seed);
    const double scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(r) * static_cast<double>(d)));
    conv_spe_gradient out{row_matrix<double>::Zero(d, kk), row_matrix<double>::Zero(d, kk),
                          std::vector<double>(gated() ? d : 0, 0.0)};
    const double* g_q = code_gradient.data();
    const double* g_k = g_q + length * d * r;
    for (index_t i = 0; i < d; ++i) {
      const double gi = gate(i), keep = gated() ? std::sqrt(1 - gi) : 1.0;
      for (index_t c = 0; c < r; ++c) {
        const double* zs = nz.z.data() + (i * r + c) * samples;
        for (index_t m = 0; m < length; ++m) {
          const double grad_q = g_q[(m * d + i) * r + c], grad_k = g_k[(m * d + i) * r + c];
          const double gq = grad_q * keep * scale, gk = grad_k * keep * scale;
          double vq = 0, vk = 0;  // the ungated sums
          for (index_t j = 0; j < kk; ++j) {
            out.q_filters(i, j) += gq * zs[m + j];
            out.k_filters(i, j) += gk * zs[m + j];
            vq += a_(i, j) * zs[m + j];
            vk += b_(i, j) * zs[m + j];
          }
          if (gated()) {
            const double e = nz.eps[static_cast<std::size_t>(i * r + c)];
            out.gate[static_cast<std::size_t>(i)] += grad_q * detail_::spe_gate_derivative(gi, vq * scale, e) +
                                                     grad_k * detail_::spe_gate_derivative(gi, vk * scale, e);
          }
        }
      }
    }
    return out;
  }

 private:
  struct noise {
    std::vector<double> z, eps;  ///< z_d of realization r (length + K − 1 samples each); the gating noise
  };
  [[nodiscard]] noise draw_noise(index_t length, index_t r, std::uint64_t seed) const {
    generator g(seed);
    noise out;
    out.z.resize(static_cast<std::size_t>(dim() * r * (length + kernel_size() - 1)));
    for (double& x : out.z) x = g.normal();
    out.eps = detail_::spe_gating_noise(g, dim(), r, gated());
    return out;
  }

  row_matrix<double> a_, b_;
  std::vector<double> gate_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
