// SPDX-License-Identifier: MIT
/**
 * @file composite.hpp
 * Composite attention (Chang, Xu, Xu and Tu 2021, "Convolutions and self-attention:
 * re-interpreting relative positions in pre-trained language models"): Shaw et al.'s relative
 * key and value embeddings together with a scalar bias per offset (T5's buckets, or a clipped
 * Toeplitz table: Chang et al.'s fixed lightweight convolution),
 *
 *     logit(s, t) = scale·q_s·(k_t + a^K_{clip(t−s)}) + b(s, t),
 *     o_s = Σ_t α_st (v_t + a^V_{clip(t−s)})                      (Shaw's value term kept)
 *
 * a `score_bias_encoding`: the bias is added after the scale, as an additive encoding's is.
 * `Bias` is any Toeplitz additive encoding of lrpe (`t5_bias`, the default; `toeplitz_bias`;
 * `alibi`); its heads are the composite's (`head(h)`), Shaw's tables are shared by every head
 * as in the paper.
 *
 * Gradient: [Shaw's (a^K, then a^V), then the bias's parameters of this head]; `shaw_gradient`
 * and `bias_gradient` give the two parts.
 */
#pragma once

#include <lrpe/canonical/shaw.hpp>
#include <lrpe/canonical/t5_bias.hpp>
#include <lrpe/core/relative.hpp>

#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

template <real_scalar T, class Bias = t5_bias<T>>
class composite {
  static_assert(additive_encoding<Bias> && is_toeplitz_v<Bias> && std::is_same_v<typename Bias::scalar, T>,
                "lrpe::canonical::composite: Bias must be a Toeplitz additive encoding of the same scalar "
                "(t5_bias, toeplitz_bias, alibi)");

 public:
  using scalar = T;
  static constexpr bool is_linearizable = false;
  static constexpr bool has_value_term = true;
  static constexpr bool has_score_bias = true;

  /**
   * @param relative Shaw's key (and value) tables.
   * @param bias     the scalar bias per offset, one or more heads.
   * @throws shape_error (the two widths differ).
   */
  composite(shaw<T> relative, Bias bias) : shaw_(std::move(relative)), bias_(std::move(bias)) {
    lrpe::detail::require_shape(bias_.dim() == shaw_.dim(), "lrpe::canonical::composite", "bias.dim()",
                                lrpe::detail::lazy_concat("must equal relative.dim() = ", shaw_.dim()), bias_.dim());
  }

  [[nodiscard]] index_t dim() const noexcept { return shaw_.dim(); }
  [[nodiscard]] const shaw<T>& relative() const noexcept { return shaw_; }
  [[nodiscard]] const Bias& bias_encoding() const noexcept { return bias_; }
  [[nodiscard]] index_t heads() const noexcept { return bias_.heads(); }
  [[nodiscard]] index_t head_index() const noexcept { return bias_.head_index(); }
  [[nodiscard]] composite head(index_t h) const { return composite(shaw_, bias_.head(h)); }

  /// Shaw's score q·(k + a^K_{clip(t−s)}) (scaled by attention).
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    return shaw_.score(q, s, k, t);
  }
  /// The bias b(s, t) (unscaled, added after the scale).
  [[nodiscard]] double bias(position_t s, position_t t) const noexcept { return bias_.bias(s, t); }
  void add_value_term(position_t s, position_t t, T w, T* out) const noexcept { shaw_.add_value_term(s, t, w, out); }

  /// Shaw's parameters, then this head's bias parameters.
  [[nodiscard]] index_t parameter_count() const noexcept { return shaw_.parameter_count() + bias_.parameter_count(); }
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// Shaw's part of a gradient from `make_gradient()` (a^K, then a^V).
  [[nodiscard]] std::span<double> shaw_gradient(std::vector<double>& grad) const noexcept {
    return std::span<double>(grad).first(static_cast<std::size_t>(shaw_.parameter_count()));
  }
  /// The bias's part of a gradient from `make_gradient()` (laid out as the bias's own).
  [[nodiscard]] std::span<double> bias_gradient(std::vector<double>& grad) const noexcept {
    return std::span<double>(grad).subspan(static_cast<std::size_t>(shaw_.parameter_count()));
  }
  void score_backward(const T* q, position_t s, const T* k, position_t t, double g, T* dq, T* dk,
                      double* grad) const noexcept {
    shaw_.score_backward(q, s, k, t, g, dq, dk, grad);
  }
  void accumulate_bias_gradient(position_t s, position_t t, double d_logit, double* grad) const noexcept {
    bias_.accumulate_bias_gradient(s, t, d_logit, grad + shaw_.parameter_count());
  }
  [[nodiscard]] double value_term_dot(position_t s, position_t t, const T* g) const noexcept {
    return shaw_.value_term_dot(s, t, g);
  }
  void accumulate_value_gradient(position_t s, position_t t, double w, const T* g, double* grad) const noexcept {
    shaw_.accumulate_value_gradient(s, t, w, g, grad);
  }

 private:
  shaw<T> shaw_;
  Bias bias_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
