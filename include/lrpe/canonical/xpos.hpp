// SPDX-License-Identifier: MIT
/**
 * @file xpos.hpp
 * xPos (Sun et al. 2022, "A length-extrapolatable Transformer"; torchscale's `XPOS`, the
 * `use_xpos` option of rotary-embedding-torch): RoPE whose pairs also decay with the distance,
 *
 *     f_rel(q_s, k_t) = Σ_i ζ_i^{(s − t)/γ} · (R_s q)_i · (R_t k)_i,   ζ_i = (2i + 0.4d) / (1.4d),
 *
 * pair i of d/2 turning by RoPE's θ_i = base^(−2i/d), (R_s q)_i·(R_t k)_i that pair's dot product,
 * and γ the `scale_base` (512). ζ_i < 1, so for a causal key (s ≥ t) the pair's weight decays
 * with the distance, the more for low i. It is relative (only s − t enters) but not an LRPE: the
 * query is scaled by ζ^{s/γ} and the key by ζ^{−t/γ}, not by one unitary map.
 *
 * - linearizable: φ_q(q, s) = ζ^{(s − c)/γ} ∘ R_s q, φ_k(k, t) = ζ^{−(t − c)/γ} ∘ R_t k (width d),
 *   exactly f_rel for any centre c. The references centre their positions (c = n/2) because
 *   ζ^{±(s − c)/γ} over- or underflows far from c: the encoding takes c and checks that a call's
 *   positions lie within `reach()` of it (in float, 87/|ln ζ_0|·γ ≈ 69γ; in double ≈ 565γ);
 * - `score(q, s, k, t)` evaluates f_rel from s − t directly (in double), at any positions; for
 *   a key far after the query (t − s ≫ γ, not causal) the weight grows without bound, as xPos's.
 * - pairs: torchscale's `rotate_every_two` (`pairing::interleaved`, the default) or
 *   rotary-embedding-torch's `rotate_half` (`pairing::split_half`); angles exact.
 */
#pragma once

#include <lrpe/canonical/detail/common.hpp>
#include <lrpe/canonical/linearizable.hpp>
#include <lrpe/core/relative.hpp>
#include <lrpe/detail/angle.hpp>
#include <lrpe/freq/schedules.hpp>
#include <lrpe/lambda/rotation.hpp>

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

template <real_scalar T>
class xpos {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = true;

  /**
   * @param d          head width (even).
   * @param scale_base γ > 0 (512 in the references).
   * @param center     the position c the features' scales are taken from (the middle of the
   *                   positions a call uses; 0 for a decode that starts there).
   * @param base       RoPE's base (10000).
   * @throws shape_error (d odd or < 2), parameter_error (γ ≤ 0 or not finite, base ≤ 1).
   */
  explicit xpos(index_t d, double scale_base = 512.0, position_t center = 0, double base = 10000.0,
                pairing pairs = pairing::interleaved)
      : d_(d), gamma_(scale_base), center_(center), pairs_(pairs) {
    constexpr const char* where = "lrpe::canonical::xpos";
    lrpe::detail::require_shape(d >= 2 && d % 2 == 0, where, "d", "must be even and >= 2", d);
    lrpe::detail::require_parameter(std::isfinite(scale_base) && scale_base > 0, where, "scale_base",
                                    "must be finite and > 0", scale_base);
    theta_ = freq::rope(d / 2, base, d);
    log_zeta_.resize(static_cast<std::size_t>(d / 2));
    for (index_t i = 0; i < d / 2; ++i)
      log_zeta_[static_cast<std::size_t>(i)] = std::log((2.0 * static_cast<double>(i) + 0.4 * static_cast<double>(d)) /
                                                        (1.4 * static_cast<double>(d)));
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t feature_dim() const noexcept { return d_; }
  [[nodiscard]] double scale_base() const noexcept { return gamma_; }
  [[nodiscard]] position_t center() const noexcept { return center_; }
  [[nodiscard]] const std::vector<double>& theta() const noexcept { return theta_; }
  /// ζ_i of pair i.
  [[nodiscard]] double zeta(index_t i) const noexcept { return std::exp(log_zeta_[static_cast<std::size_t>(i)]); }
  /// The distance from the centre within which the features' scales ζ^{±(p − c)/γ} stay within
  /// T's normal range (e^{±80} in float): ⌊80 γ / |ln ζ_0|⌋ (700 in double).
  [[nodiscard]] position_t reach() const noexcept {
    const double limit = std::is_same_v<T, float> ? 80.0 : 700.0;
    return static_cast<position_t>(std::floor(limit * gamma_ / -log_zeta_[0]));
  }

  /// The pair (u, w) of pair i.
  [[nodiscard]] std::pair<index_t, index_t> pair(index_t i) const noexcept {
    return pairs_ == pairing::interleaved ? std::pair<index_t, index_t>{2 * i, 2 * i + 1}
                                          : std::pair<index_t, index_t>{i, i + d_ / 2};
  }

  /// f_rel from s − t (double), the rotations at s and t by exact angles.
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    const double lag = lrpe::detail::offset_value(t, s);  // s − t
    double acc = 0;
    for (index_t i = 0; i < d_ / 2; ++i) {
      const auto [u, w] = pair(i);
      const auto rs = lrpe::detail::angle_cos_sin(s, theta_[static_cast<std::size_t>(i)]);
      const auto rt = lrpe::detail::angle_cos_sin(t, theta_[static_cast<std::size_t>(i)]);
      const double qu = q[u], qw = q[w], ku = k[u], kw = k[w];
      const double a0 = qu * rs.c - qw * rs.s, a1 = qw * rs.c + qu * rs.s;
      const double b0 = ku * rt.c - kw * rt.s, b1 = kw * rt.c + ku * rt.s;
      acc += std::exp(lag / gamma_ * log_zeta_[static_cast<std::size_t>(i)]) * (a0 * b0 + a1 * b1);
    }
    return acc;
  }

  /// φ_q(x, p) = ζ^{(p − c)/γ} ∘ R_p x, φ_k(x, p) = ζ^{−(p − c)/γ} ∘ R_p x.
  void features(side which, const T* x, position_t p, T* out) const noexcept {
    const double e = lrpe::detail::offset_value(center_, p) / gamma_ * (which == side::query ? 1.0 : -1.0);
    for (index_t i = 0; i < d_ / 2; ++i) {
      const auto [u, w] = pair(i);
      const auto r = lrpe::detail::angle_cos_sin(p, theta_[static_cast<std::size_t>(i)]);
      const double scale = std::exp(e * log_zeta_[static_cast<std::size_t>(i)]);
      const double a = x[u], b = x[w];
      out[u] = static_cast<T>(scale * (a * r.c - b * r.s));
      out[w] = static_cast<T>(scale * (b * r.c + a * r.s));
    }
  }
  /// The features' backward: dx = R_pᵀ (ζ^{±(p − c)/γ} ∘ g) (no parameters).
  void features_backward(side which, const T* /*x*/, const T* g, position_t p, T* dx, double* /*grad*/) const noexcept {
    const double e = lrpe::detail::offset_value(center_, p) / gamma_ * (which == side::query ? 1.0 : -1.0);
    for (index_t i = 0; i < d_ / 2; ++i) {
      const auto [u, w] = pair(i);
      const auto r = lrpe::detail::angle_cos_sin(p, theta_[static_cast<std::size_t>(i)]);
      const double scale = std::exp(e * log_zeta_[static_cast<std::size_t>(i)]);
      const double gu = scale * g[u], gw = scale * g[w];
      dx[u] = static_cast<T>(gu * r.c + gw * r.s);
      dx[w] = static_cast<T>(gw * r.c - gu * r.s);
    }
  }

  /// Throws `parameter_error` naming the positions when one lies farther than `reach()` from the
  /// centre (the features' scales would leave T's range).
  void require_positions(const lrpe::detail::call_span& span, const char* where) const {
    const position_t r = reach();
    const auto check = [&](const lrpe::detail::position_span& p, const char* arg) {
      if (p.empty) return;
      const double lo = lrpe::detail::offset_value(center_, p.lo), hi = lrpe::detail::offset_value(center_, p.hi);
      if (std::abs(lo) <= static_cast<double>(r) && std::abs(hi) <= static_cast<double>(r)) return;
      lrpe::detail::fail<parameter_error>(
          where, arg,
          lrpe::detail::lazy_concat("must lie within xpos::reach() = ", r, " of xpos::center() = ", center_,
                                    " (set the centre to the middle of the call's positions)"),
          lrpe::detail::concat("[", p.lo, ", ", p.hi, "]"));
    };
    check(span.q, "options.q_positions");
    check(span.k, "options.k_positions");
  }

 private:
  index_t d_;
  double gamma_;
  position_t center_;
  pairing pairs_;
  std::vector<double> theta_, log_zeta_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
