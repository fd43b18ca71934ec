// SPDX-License-Identifier: MIT
/**
 * @file alibi.hpp
 * ALiBi (Press et al.; ofirpress/attention_with_linear_biases):
 * f_rel(q_s, k_t) = q_s·k_t − m_h·(s − t) (causal form) or q_s·k_t − m_h·|s − t| (symmetric
 * form of encoder variants), with per-head slopes m_h (`alibi_slopes`).
 *
 * - canonical: m = 2: (q, I, k) and (1, −m·(s−t) or −m·|t−s|, 1);
 * - not linearizable as an f_rel here (see docs/canonical.md: the causal form is a rank-2
 *   bias whose features grow with the position; in linear attention ALiBi is a decay e^{−m}
 *   per step, applied by recurrence).
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/detail/additive.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <algorithm>
#include <limits>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// Which ALiBi bias: −m·(s − t) (decoder, causal) or −m·|s − t| (encoder, symmetric).
enum class alibi_form { causal, symmetric };

/**
 * ALiBi bias of head `head_index()`; `head(h)` gives another head's view in O(1).
 */
template <real_scalar T>
class alibi {
 public:
  using scalar = T;
  static constexpr bool is_additive = true;
  static constexpr bool is_linearizable = false;

  /**
   * @param d      width of q and k.
   * @param slopes one slope per head (finite; any sign is accepted, published slopes are > 0).
   * @throws shape_error (d < 1, no slopes), domain_error (non-finite slope).
   */
  alibi(index_t d, std::vector<double> slopes, alibi_form form = alibi_form::causal) : d_(d), form_(form) {
    constexpr const char* where = "lrpe::canonical::alibi";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_shape(!slopes.empty(), where, "slopes.size()", "must be >= 1 (one slope per head)", 0);
    lrpe::detail::require_finite(std::span<const double>(slopes), where, "slopes");
    slopes_ = detail_::share(std::move(slopes));
  }
  /// The published slopes for `heads` heads (`alibi_slopes(heads)`).
  [[nodiscard]] static alibi for_heads(index_t d, index_t heads, alibi_form form = alibi_form::causal) {
    return alibi(d, alibi_slopes(heads), form);
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] alibi_form form() const noexcept { return form_; }
  [[nodiscard]] index_t heads() const noexcept { return static_cast<index_t>(slopes_->size()); }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  [[nodiscard]] const std::vector<double>& slopes() const noexcept { return *slopes_; }
  /// m of this head.
  [[nodiscard]] double slope() const noexcept { return (*slopes_)[static_cast<std::size_t>(h_)]; }
  [[nodiscard]] alibi head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::alibi::head");
    alibi v = *this;
    v.h_ = h;
    return v;
  }

  /// The bias at offset δ = t − s: m·δ (= −m·(s − t)) or −m·|δ|.
  [[nodiscard]] double bias_at(position_t delta) const noexcept { return bias_of(static_cast<double>(delta)); }
  /// The unscaled additive bias −m·(s − t) or −m·|s − t| (query s, key t), for any positions
  /// (t − s in double: `lrpe::detail::offset_value`).
  [[nodiscard]] double bias(position_t s, position_t t) const noexcept {
    return bias_of(lrpe::detail::offset_value(s, t));
  }
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    return detail_::dot(q, k, d_) + bias(s, t);
  }

  /// The learnable parameter of this head: its slope m (docs/training.md).
  [[nodiscard]] static constexpr index_t parameter_count() noexcept { return 1; }
  [[nodiscard]] std::vector<double> make_gradient() const { return {0.0}; }
  /// Adds dL/dm of one logit: d_logit·(t − s), or −d_logit·|t − s| (0 where the bias is held).
  void accumulate_bias_gradient(position_t s, position_t t, double d_logit, double* grad) const noexcept {
    const double x = lrpe::detail::offset_value(s, t);
    if (std::abs(bias_of(x)) == std::numeric_limits<double>::max()) return;
    grad[0] += d_logit * (form_ == alibi_form::causal ? x : -std::abs(x));
  }
  [[nodiscard]] auto canonical() const {
    return detail_::additive_canonical<T>(d_, [v = *this](position_t delta) { return v.bias_at(delta); });
  }

 private:
  // held at ±DBL_MAX: a finite slope at a far offset would otherwise give ±∞, a masked key or
  // (+∞ − +∞ in the softmax) a NaN row
  [[nodiscard]] double bias_of(double x) const noexcept {
    constexpr double top = std::numeric_limits<double>::max();
    return std::clamp(form_ == alibi_form::causal ? slope() * x : -slope() * std::abs(x), -top, top);
  }

  index_t d_;
  alibi_form form_;
  detail_::shared_table<std::vector<double>> slopes_;
  index_t h_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
