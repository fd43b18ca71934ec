// SPDX-License-Identifier: MIT
/**
 * @file da_transformer.hpp
 * DA-Transformer (Wu, Wu and Huang 2021, "DA-Transformer: Distance-aware Transformer"): the
 * attention logits are the clipped dot products rescaled by a learned function of the real
 * distance,
 *
 *     f_rel(q_s, k_t) = ReLU(q_s·k_t) · R̂_h(|t − s|),   R̂_h(x) = (1 + e^{v_h}) / (1 + e^{v_h − w_h x}),
 *
 * then scaled by 1/√d as the dot product is (softmax(ReLU(QKᵀ) ∘ R̂ / √d), the paper's order).
 * Head h learns w_h (how much distance matters; w_h < 0 prefers near keys, w_h > 0 far ones)
 * and v_h (the sigmoid's offset): two parameters per head. R̂ > 0, so the survey's
 * ReLU((QKᵀ) ∘ R̂) is the same function. Direction-agnostic (|t − s|).
 *
 * - not in the canonical form (the ReLU is not bilinear in q and k) and not linearizable:
 *   softmax attention evaluates it per pair (`score`);
 * - R̂ = exp(softplus(v) − softplus(v − w x)) in double: no overflow at any distance, and
 *   R̂ ≤ 1 + e^v is finite because v ≤ 700 is required;
 * - gradient (`score_backward`): this head's [w_h, v_h]; ∂log R̂/∂w = x σ(v − w x),
 *   ∂log R̂/∂v = σ(v) − σ(v − w x); where q·k ≤ 0 nothing flows (the ReLU's subgradient 0).
 */
#pragma once

#include <lrpe/canonical/detail/common.hpp>
#include <lrpe/core/relative.hpp>

#include <cmath>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

template <real_scalar T>
class da_transformer {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = false;

  /**
   * @param d  width of q and k.
   * @param w  the distance weights w_h, one per head (finite, any sign).
   * @param v  the sigmoid offsets v_h, one per head (finite, ≤ 700).
   * @throws shape_error (d < 1, no heads, w and v of different sizes), domain_error
   *         (non-finite), parameter_error (v_h > 700).
   */
  da_transformer(index_t d, std::vector<double> w, std::vector<double> v) : d_(d) {
    constexpr const char* where = "lrpe::canonical::da_transformer";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_shape(!w.empty(), where, "w.size()", "must be >= 1 (one weight per head)", 0);
    lrpe::detail::require_shape(v.size() == w.size(), where, "v.size()",
                                lrpe::detail::lazy_concat("must equal w.size() = ", w.size()), v.size());
    lrpe::detail::require_finite(std::span<const double>(w), where, "w");
    lrpe::detail::require_finite(std::span<const double>(v), where, "v");
    for (const double x : v)
      lrpe::detail::require_parameter(x <= 700.0, where, "v", "must be <= 700 (R^ <= 1 + e^v stays finite)", x);
    p_ = detail_::share(params{std::move(w), std::move(v)});
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t heads() const noexcept { return static_cast<index_t>(p_->w.size()); }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  [[nodiscard]] double weight() const noexcept { return p_->w[static_cast<std::size_t>(h_)]; }
  [[nodiscard]] double offset() const noexcept { return p_->v[static_cast<std::size_t>(h_)]; }
  [[nodiscard]] da_transformer head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::da_transformer::head");
    da_transformer x = *this;
    x.h_ = h;
    return x;
  }

  /// R̂(|t − s|) of this head (query s, key t).
  [[nodiscard]] double coefficient(position_t s, position_t t) const noexcept {
    return coefficient_at(distance(s, t));
  }
  /// R̂(x) for a distance x ≥ 0.
  [[nodiscard]] double coefficient_at(double x) const noexcept {
    const double v = offset();
    return std::exp(softplus(v) - softplus(v - weight() * x));
  }

  /// ReLU(q·k)·R̂(|t − s|), unscaled.
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    const double a = detail_::dot(q, k, d_);
    return a > 0 ? a * coefficient(s, t) : 0.0;
  }

  /// This head's parameters [w_h, v_h].
  [[nodiscard]] static constexpr index_t parameter_count() noexcept { return 2; }
  [[nodiscard]] std::vector<double> make_gradient() const { return {0.0, 0.0}; }
  /// dq += g·∂f/∂q, dk += g·∂f/∂k and (grad not null) [dw, dv] += g·∂f/∂(w, v).
  void score_backward(const T* q, position_t s, const T* k, position_t t, double g, T* dq, T* dk,
                      double* grad) const noexcept {
    const double a = detail_::dot(q, k, d_);
    if (!(a > 0)) return;
    const double x = distance(s, t), w = weight(), v = offset();
    const double r = coefficient_at(x), gr = g * r;
    for (index_t i = 0; i < d_; ++i) {
      dq[i] += static_cast<T>(gr * static_cast<double>(k[i]));
      dk[i] += static_cast<T>(gr * static_cast<double>(q[i]));
    }
    if (grad == nullptr) return;
    const double f = g * a * r, inner = sigmoid(v - w * x);
    if (x != 0) grad[0] += f * x * inner;
    grad[1] += f * (sigmoid(v) - inner);
  }

 private:
  struct params {
    std::vector<double> w, v;
  };
  /// |t − s| in double (exact below 2^53; any pair of positions, no overflow).
  [[nodiscard]] static double distance(position_t s, position_t t) noexcept {
    return std::abs(lrpe::detail::offset_value(s, t));
  }
  [[nodiscard]] static double softplus(double x) noexcept {
    return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
  [[nodiscard]] static double sigmoid(double x) noexcept {
    if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
    const double e = std::exp(x);
    return e / (1.0 + e);
  }

  index_t d_;
  detail_::shared_table<params> p_;
  index_t h_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
