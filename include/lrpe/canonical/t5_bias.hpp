// SPDX-License-Identifier: MIT
/**
 * @file t5_bias.hpp
 * T5's bucketed relative bias (HF transformers `T5Attention`):
 * f_rel(q_s, k_t) = q_s·k_t + B[h, bucket(t − s)], rel = key_pos − query_pos.
 *
 * - canonical: m = 2: (q, I, k) and (1, B[bucket(t−s)], 1);
 * - not linearizable (log-bucketed Toeplitz matrix, rank grows with n);
 * - T5 does not scale QKᵀ: `default_scale(d)` = 1.
 *
 * Layout: the bias table is heads × num_buckets (row h = head h). T5 keeps it (transposed,
 * buckets × heads, as an nn.Embedding) in layer 0 and reuses it in every layer.
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/detail/additive.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/**
 * T5 relative bias of head `head_index()`; `head(h)` gives another head's view in O(1).
 */
template <real_scalar T>
class t5_bias {
 public:
  using scalar = T;
  static constexpr bool is_additive = true;
  static constexpr bool is_linearizable = false;

  /**
   * @param d     width of q and k.
   * @param cfg   num_buckets, max_distance, bidirectional (see `t5_buckets::validate`).
   * @param table heads × num_buckets, finite.
   * @throws shape_error (d < 1, table shape), parameter_error (cfg), domain_error (non-finite).
   */
  t5_bias(index_t d, t5_buckets cfg, row_matrix<T> table) : d_(d), cfg_(cfg) {
    constexpr const char* where = "lrpe::canonical::t5_bias";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    cfg_.validate(where);
    lrpe::detail::require_shape(table.rows() >= 1 && table.cols() == cfg.num_buckets, where, "table",
                                lrpe::detail::lazy_concat("must be heads x num_buckets = heads x ", cfg.num_buckets,
                                                     " with heads >= 1"),
                                lrpe::detail::lazy_concat(table.rows(), "x", table.cols()));
    detail_::require_finite_table(table, where, "table");
    table_ = detail_::share(std::move(table));
  }
  /// One head from num_buckets values.
  t5_bias(index_t d, t5_buckets cfg, const std::vector<T>& table)
      : t5_bias(d, cfg, detail_::one_row_table(table)) {}

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] const t5_buckets& buckets() const noexcept { return cfg_; }
  [[nodiscard]] index_t heads() const noexcept { return table_->rows(); }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  [[nodiscard]] const row_matrix<T>& table() const noexcept { return *table_; }
  [[nodiscard]] t5_bias head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::t5_bias::head");
    t5_bias v = *this;
    v.h_ = h;
    return v;
  }

  /// The bucket of the offset δ = t − s (key − query).
  [[nodiscard]] index_t bucket(position_t delta) const noexcept { return t5_bucket(delta, cfg_); }
  [[nodiscard]] double bias_at(position_t delta) const noexcept {
    return static_cast<double>((*table_)(h_, bucket(delta)));
  }
  /// The unscaled additive bias B[h, bucket(t − s)].
  [[nodiscard]] double bias(position_t s, position_t t) const noexcept { return bias_at(saturating_offset(s, t)); }
  /// Direct formula q·k + B[h, bucket(t − s)].
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    return detail_::dot(q, k, d_) + bias(s, t);
  }
  /// The learnable parameters of this head: its num_buckets table entries (docs/training.md).
  [[nodiscard]] index_t parameter_count() const noexcept { return cfg_.num_buckets; }
  /// A zeroed gradient of this head's row.
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// Adds dL/dB[h, ·] of one logit: its bucket gets `d_logit`.
  void accumulate_bias_gradient(position_t s, position_t t, double d_logit, double* grad) const noexcept {
    grad[bucket(saturating_offset(s, t))] += d_logit;
  }

  /// T5 does not scale QKᵀ.
  [[nodiscard]] static constexpr double default_scale(index_t) noexcept { return 1.0; }

  [[nodiscard]] auto canonical() const {
    return detail_::additive_canonical<T>(d_, [v = *this](position_t delta) { return v.bias_at(delta); });
  }

 private:
  index_t d_;
  t5_buckets cfg_;
  detail_::shared_table<row_matrix<T>> table_;
  index_t h_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
