// SPDX-License-Identifier: MIT
/**
 * @file tupe.hpp
 * TUPE (Ke, He & Liu 2021, "Rethinking positional encoding in language pre-training"): untied
 * absolute positions, a relative bias and the [CLS] reset, as an additive bias keyed on the pair:
 *
 *     logit(s, t) = (q_s·k_t)/√(2d) + reset_θ(A_h)(s, t) + b_h[bucket(t − s)]
 *     A_h(s, t)  = (p_s U_Q,h)·(p_t U_K,h) / √(2d)
 *
 * with P the n × D absolute position embeddings (shared by the heads), U_Q and U_K their own
 * D × (heads·d) projections (head h: columns h·d … h·d + d − 1; never the content's W_Q, W_K),
 * and, with `cls_reset`, reset_θ(A)(0, t) = θ₁,h for every t and reset_θ(A)(s, 0) = θ₂,h for
 * s > 0 (the [CLS] token at position 0 attends and is attended to by its own learned value, not
 * by its position's correlation). TUPE-R's relative term b uses T5's buckets of t − s
 * (`config.relative`); without it the encoding is TUPE-A. `default_scale(d)` is 1/√(2d).
 *
 * Positions are indices 0 … n − 1 of P's rows (not Toeplitz: `is_toeplitz = false`, checked by
 * `require_positions`). Each head's n × n bias is formed once at construction (heads·n² doubles,
 * 25 MB at 12 heads and n = 512), so that the kernels read one entry per logit.
 *
 * Gradients, in two steps so that the backward stays O(1) per pair: a head's gradient vector
 * (`make_gradient()`) holds dL/dA_h (n × n), dL/dθ₁,h, dL/dθ₂,h and dL/db_h (the attention
 * backward fills it pair by pair); `parameter_gradients(grad)` then turns dL/dA_h into dL/dP,
 * dL/dU_Q and dL/dU_K with three matrix products. Summing the heads' results gives the model's.
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/detail/common.hpp>
#include <lrpe/core/view.hpp>

#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// TUPE's options: the [CLS] reset, and the relative term (TUPE-R) or none (TUPE-A).
struct tupe_config {
  bool cls_reset = true;
  std::optional<t5_buckets> relative = t5_buckets{32, 128, true};
};

/// The parameters' gradients of one head (`tupe::parameter_gradients`), laid out as the
/// parameters: P (n × D), U_Q and U_K (D × heads·d), θ (heads × 2), the relative table.
struct tupe_gradient {
  row_matrix<double> p, u_q, u_k, theta, relative;
};

template <real_scalar T>
class tupe {
 public:
  using scalar = T;
  static constexpr bool is_additive = true;
  static constexpr bool is_linearizable = false;
  static constexpr bool is_toeplitz = false;

  /**
   * @param d        head width (of q and k).
   * @param p        n × D absolute position embeddings.
   * @param u_q, u_k D × (heads·d) position projections.
   * @param config   the reset and the relative buckets.
   * @param theta    heads × 2 (θ₁, θ₂) with `cls_reset`; empty (0 × 0) otherwise.
   * @param relative heads × num_buckets with `config.relative`; empty otherwise.
   * @throws shape_error (sizes), parameter_error (the buckets), domain_error (a non-finite entry).
   */
  tupe(index_t d, row_matrix<T> p, row_matrix<T> u_q, row_matrix<T> u_k, const tupe_config& config = {},
       row_matrix<T> theta = {}, row_matrix<T> relative = {})
      : d_(d), config_(config) {
    constexpr const char* where = "lrpe::canonical::tupe";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_shape(p.rows() >= 1 && p.cols() >= 1, where, "p", "must be n x D with n, D >= 1",
                                lrpe::detail::lazy_concat(p.rows(), "x", p.cols()));
    lrpe::detail::require_shape(u_q.rows() == p.cols() && u_q.cols() >= d && u_q.cols() % d == 0, where, "u_q",
                                lrpe::detail::lazy_concat("must be D x (heads*d) = ", p.cols(), " x (heads*", d, ")"),
                                lrpe::detail::lazy_concat(u_q.rows(), "x", u_q.cols()));
    detail_::require_table_shape(u_k, u_q.rows(), u_q.cols(), where, "u_k");
    const index_t heads = u_q.cols() / d;
    if (config.cls_reset) detail_::require_table_shape(theta, heads, 2, where, "theta");
    else detail_::require_table_shape(theta, 0, 0, where, "theta");
    if (config.relative) {
      config.relative->validate(where);
      detail_::require_table_shape(relative, heads, config.relative->num_buckets, where, "relative");
    } else {
      detail_::require_table_shape(relative, 0, 0, where, "relative");
    }
    detail_::require_finite_table(p, where, "p");
    detail_::require_finite_table(u_q, where, "u_q");
    detail_::require_finite_table(u_k, where, "u_k");
    detail_::require_finite_table(theta, where, "theta");
    detail_::require_finite_table(relative, where, "relative");
    auto s = std::make_shared<shared>();
    s->p = std::move(p);
    s->u_q = std::move(u_q);
    s->u_k = std::move(u_k);
    s->theta = std::move(theta);
    s->relative = std::move(relative);
    s->heads = heads;
    form_biases(*s);
    shared_ = std::move(s);
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t heads() const noexcept { return shared_->heads; }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  /// The number of positions n (P's rows).
  [[nodiscard]] index_t max_positions() const noexcept { return shared_->p.rows(); }
  [[nodiscard]] const tupe_config& config() const noexcept { return config_; }
  [[nodiscard]] double default_scale(index_t d) const noexcept { return 1.0 / std::sqrt(2.0 * static_cast<double>(d)); }
  /// Head h's view (shares every table). @throws shape_error if h ∉ [0, heads).
  [[nodiscard]] tupe head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::tupe::head");
    tupe v = *this;
    v.h_ = h;
    return v;
  }

  /// A_h(s, t) before the reset: (p_s U_Q,h)·(p_t U_K,h)/√(2d).
  [[nodiscard]] double absolute_term(position_t s, position_t t) const noexcept {
    return shared_->correlation(h_ * max_positions() + static_cast<index_t>(s), static_cast<index_t>(t));
  }
  /// The whole bias of (s, t): reset_θ(A_h)(s, t) + b_h[bucket(t − s)]; 0 ≤ s, t < n.
  [[nodiscard]] double bias(position_t s, position_t t) const noexcept {
    return shared_->bias(h_ * max_positions() + static_cast<index_t>(s), static_cast<index_t>(t));
  }
  /// Throws `parameter_error` for a call whose positions are not rows of P.
  void require_positions(const lrpe::detail::call_span& span, const char* where) const {
    detail_::require_positions_below(span, max_positions(), max_positions(), where, "max_positions", "max_positions");
  }
  /// Direct formula q·k + bias(s, t), unscaled as every additive encoding's (attention scales
  /// q·k by `default_scale`). @throws parameter_error (s or t not a row of P).
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const {
    if (s < 0 || s >= max_positions() || t < 0 || t >= max_positions())
      lrpe::detail::fail<parameter_error>("lrpe::canonical::tupe::score", "s, t",
                                          lrpe::detail::lazy_concat("must lie in [0, ", max_positions(), ")"),
                                          lrpe::detail::concat("(", s, ", ", t, ")"));
    return detail_::dot(q, k, d_) + bias(s, t);
  }

  /// This head's gradient entries: n² (dL/dA_h, row-major) + 2 (θ₁, θ₂; zero without the
  /// reset) + the relative row's buckets (none for TUPE-A).
  [[nodiscard]] index_t parameter_count() const noexcept {
    return max_positions() * max_positions() + 2 + (config_.relative ? config_.relative->num_buckets : 0);
  }
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// Adds dL/d(parameters) of one logit (the layout of `parameter_count`).
  void accumulate_bias_gradient(position_t s, position_t t, double d_logit, double* grad) const {
    const index_t n = max_positions();
    if (config_.cls_reset && s == 0) grad[n * n] += d_logit;
    else if (config_.cls_reset && t == 0) grad[n * n + 1] += d_logit;
    else grad[s * n + t] += d_logit;
    if (config_.relative) grad[n * n + 2 + t5_bucket(saturating_offset(s, t), *config_.relative)] += d_logit;
  }
  /**
   * This head's gradient (from `accumulate_bias_gradient`) as the parameters' gradients: with
   * G = dL/dA_h and c = 1/√(2d), dL/d(P U_Q,h) = c·G (P U_K,h), dL/d(P U_K,h) = c·Gᵀ (P U_Q,h),
   * then dL/dU_Q,h = Pᵀ·that, dL/dP = that·U_Q,hᵀ + …; other heads' blocks are zero.
   * @throws shape_error (grad.size() is not `parameter_count()`).
   */
  [[nodiscard]] tupe_gradient parameter_gradients(std::span<const double> grad) const {
    lrpe::detail::require_shape(static_cast<index_t>(grad.size()) == parameter_count(),
                                "lrpe::canonical::tupe::parameter_gradients", "grad.size()",
                                lrpe::detail::lazy_concat("must be parameter_count() = ", parameter_count()), grad.size());
    const shared& sh = *shared_;
    const index_t n = max_positions(), big_d = sh.p.cols(), hd = h_ * d_;
    const double c = default_scale(d_);
    const Eigen::Map<const row_matrix<double>> g(grad.data(), n, n);
    const row_matrix<double> p = sh.p.template cast<double>();
    const row_matrix<double> uq = sh.u_q.middleCols(hd, d_).template cast<double>();
    const row_matrix<double> uk = sh.u_k.middleCols(hd, d_).template cast<double>();
    const row_matrix<double> d_pq = c * g * (p * uk), d_pk = c * g.transpose() * (p * uq);
    tupe_gradient out{row_matrix<double>::Zero(n, big_d), row_matrix<double>::Zero(big_d, sh.u_q.cols()),
                      row_matrix<double>::Zero(big_d, sh.u_q.cols()), row_matrix<double>::Zero(sh.theta.rows(), sh.theta.cols()),
                      row_matrix<double>::Zero(sh.relative.rows(), sh.relative.cols())};
    out.u_q.middleCols(hd, d_) = p.transpose() * d_pq;
    out.u_k.middleCols(hd, d_) = p.transpose() * d_pk;
    out.p = d_pq * uq.transpose() + d_pk * uk.transpose();
    if (config_.cls_reset) {
      out.theta(h_, 0) = grad[static_cast<std::size_t>(n * n)];
      out.theta(h_, 1) = grad[static_cast<std::size_t>(n * n + 1)];
    }
    for (index_t b = 0; b < out.relative.cols(); ++b) out.relative(h_, b) = grad[static_cast<std::size_t>(n * n + 2 + b)];
    return out;
  }

 private:
  struct shared {
    row_matrix<T> p, u_q, u_k, theta, relative;
    index_t heads = 0;
    row_matrix<double> correlation;  ///< (heads·n) × n: A_h, block h
    row_matrix<double> bias;         ///< (heads·n) × n: reset_θ(A_h) + b_h[bucket]
  };

  /// A_h = (P U_Q,h)(P U_K,h)ᵀ/√(2d) and the whole bias, per head.
  void form_biases(shared& s) const {
    const index_t n = s.p.rows();
    const double c = default_scale(d_);
    const row_matrix<double> p = s.p.template cast<double>();
    const row_matrix<double> pq = p * s.u_q.template cast<double>(), pk = p * s.u_k.template cast<double>();
    s.correlation.resize(s.heads * n, n);
    s.bias.resize(s.heads * n, n);
    for (index_t h = 0; h < s.heads; ++h) {
      s.correlation.middleRows(h * n, n) = c * pq.middleCols(h * d_, d_) * pk.middleCols(h * d_, d_).transpose();
      for (index_t i = 0; i < n; ++i) {
        for (index_t j = 0; j < n; ++j) {
          double b = s.correlation(h * n + i, j);
          if (config_.cls_reset && i == 0) b = static_cast<double>(s.theta(h, 0));
          else if (config_.cls_reset && j == 0) b = static_cast<double>(s.theta(h, 1));
          if (config_.relative) b += static_cast<double>(s.relative(h, t5_bucket(j - i, *config_.relative)));
          s.bias(h * n + i, j) = b;
        }
      }
    }
  }

  index_t d_;
  tupe_config config_;
  std::shared_ptr<const shared> shared_;
  index_t h_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
