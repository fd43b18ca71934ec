// SPDX-License-Identifier: MIT
/**
 * @file toeplitz_bias.hpp
 * A learned Toeplitz bias table with clipping: f_rel(q_s, k_t) = q_s·k_t + w[clip(t − s, r)].
 *
 * - canonical: m = 2: (q, I, k) and (1, w[clip(t−s, r)], 1);
 * - not linearizable (a clipped Toeplitz matrix has rank growing with n).
 *
 * Layout: one row per head, 2r + 1 columns, column j holding offset t − s = j − r
 * (heads × (2r+1), row-major).
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/detail/additive.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <limits>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/**
 * Learned scalar bias per clipped offset, one table per head; this object scores head
 * `head_index()` and `head(h)` gives another head's view in O(1) (the table is shared).
 */
template <real_scalar T>
class toeplitz_bias {
 public:
  using scalar = T;
  static constexpr bool is_additive = true;
  static constexpr bool is_linearizable = false;

  /**
   * @param d            width of q and k.
   * @param max_distance r ≥ 0: offsets are clipped to [−r, r].
   * @param table        heads × (2r+1), column j ↔ offset j − r; finite.
   * @throws shape_error (d < 1, table shape), parameter_error (r < 0), domain_error (non-finite).
   */
  toeplitz_bias(index_t d, position_t max_distance, row_matrix<T> table) : d_(d), r_(max_distance) {
    constexpr const char* where = "lrpe::canonical::toeplitz_bias";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    constexpr position_t max_r = (std::numeric_limits<position_t>::max() - 1) / 2;  // 2r + 1 fits
    lrpe::detail::require_parameter(max_distance >= 0 && max_distance <= max_r, where, "max_distance",
                                    "must be in [0, 2^62 - 1] (the table has 2r + 1 columns)", max_distance);
    lrpe::detail::require_shape(table.rows() >= 1 && table.cols() == 2 * max_distance + 1, where, "table",
                                lrpe::detail::lazy_concat("must be heads x (2*max_distance+1) = heads x ", 2 * max_distance + 1,
                                                     " with heads >= 1"),
                                lrpe::detail::lazy_concat(table.rows(), "x", table.cols()));
    detail_::require_finite_table(table, where, "table");
    table_ = detail_::share(std::move(table));
  }
  /// One head from a table of 2r+1 values.
  toeplitz_bias(index_t d, position_t max_distance, const std::vector<T>& table)
      : toeplitz_bias(d, max_distance, detail_::one_row_table(table)) {}

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] position_t max_distance() const noexcept { return r_; }
  [[nodiscard]] index_t heads() const noexcept { return table_->rows(); }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  [[nodiscard]] const row_matrix<T>& table() const noexcept { return *table_; }
  /// Head h's view (shares the table). @throws shape_error if h ∉ [0, heads).
  [[nodiscard]] toeplitz_bias head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::toeplitz_bias::head");
    toeplitz_bias v = *this;
    v.h_ = h;
    return v;
  }

  /// w[clip(δ, r)] for the offset δ = t − s.
  [[nodiscard]] double bias_at(position_t delta) const noexcept {
    return static_cast<double>((*table_)(h_, clip(delta, r_) + r_));
  }
  /// The unscaled additive bias of (query s, key t).
  [[nodiscard]] double bias(position_t s, position_t t) const noexcept { return bias_at(saturating_offset(s, t)); }
  /// The learnable parameters of this head: its 2r + 1 table entries (docs/training.md).
  [[nodiscard]] index_t parameter_count() const noexcept { return static_cast<index_t>(2 * r_ + 1); }
  /// A zeroed gradient of this head's row.
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// Adds dL/dw[h, ·] of one logit: its clipped offset's entry gets `d_logit`.
  void accumulate_bias_gradient(position_t s, position_t t, double d_logit, double* grad) const noexcept {
    grad[clip(saturating_offset(s, t), r_) + r_] += d_logit;
  }

  /// Direct formula q·k + w[clip(t − s, r)].
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    return detail_::dot(q, k, d_) + bias(s, t);
  }
  [[nodiscard]] auto canonical() const {
    return detail_::additive_canonical<T>(d_, [v = *this](position_t delta) { return v.bias_at(delta); });
  }

 private:
  index_t d_;
  position_t r_;
  detail_::shared_table<row_matrix<T>> table_;
  index_t h_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
