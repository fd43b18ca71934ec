// SPDX-License-Identifier: MIT
/**
 * @file pair_bias.hpp
 * Additive biases keyed on the pair (s, t) itself, not on t − s: f(q_s, k_t) = q_s·k_t +
 * w[h, index(s, t)], with an n_q × n_k index matrix into a learned table of buckets per head.
 *
 * This is the form the 2-D and graph encodings share (the survey's "general form"): Swin's
 * window bias (`swin_relative_position_index`), Graphormer's spatial encoding (bucket = the
 * shortest-path distance, canonical/graph.hpp), and any bias given densely per pair (`dense`).
 *
 * - not Toeplitz (`is_toeplitz = false`): positions are indices of tokens, patches or nodes in
 *   [0, n_q) and [0, n_k); attention checks a call's positions against them before it starts
 *   (`require_positions`), and the kernels evaluate the bias per entry;
 * - no canonical form (its W would depend on s and t, not on t − s) and not linearizable;
 * - learnable: the table's gradient is dS summed per bucket (`accumulate_bias_gradient`).
 *
 * Layout: the index row-major n_q × n_k (int32), the table heads × buckets.
 */
#pragma once

#include <lrpe/canonical/detail/common.hpp>
#include <lrpe/core/view.hpp>

#include <cstdint>
#include <limits>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// A row-major matrix of bucket indices (int32: the tables of these encodings are small).
using index_matrix = Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/**
 * Learned scalar bias per pair bucket, one table row per head; this object scores head
 * `head_index()` and `head(h)` gives another head's view in O(1) (index and table are shared).
 */
template <real_scalar T>
class pair_bias {
 public:
  using scalar = T;
  static constexpr bool is_additive = true;
  static constexpr bool is_linearizable = false;
  static constexpr bool is_toeplitz = false;

  /**
   * @param d     width of q and k.
   * @param index n_q × n_k bucket of each pair (query s, key t), entries in [0, table.cols()).
   * @param table heads × buckets, finite.
   * @throws shape_error (d < 1, an empty index or table), parameter_error (an index entry outside
   *         the table), domain_error (a non-finite table entry).
   */
  pair_bias(index_t d, index_matrix index, row_matrix<T> table) : d_(d) {
    constexpr const char* where = "lrpe::canonical::pair_bias";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_shape(index.rows() >= 1 && index.cols() >= 1, where, "index",
                                "must have at least one row and one column",
                                lrpe::detail::lazy_concat(index.rows(), "x", index.cols()));
    lrpe::detail::require_shape(table.rows() >= 1 && table.cols() >= 1, where, "table",
                                "must be heads x buckets with heads, buckets >= 1",
                                lrpe::detail::lazy_concat(table.rows(), "x", table.cols()));
    for (index_t s = 0; s < index.rows(); ++s) {
      for (index_t t = 0; t < index.cols(); ++t) {
        const std::int32_t b = index(s, t);
        if (b < 0 || b >= table.cols())
          lrpe::detail::fail<parameter_error>(
              where, "index", lrpe::detail::lazy_concat("entries must be in [0, table.cols() = ", table.cols(), ")"),
              lrpe::detail::concat(b, " at (", s, ", ", t, ")"));
      }
    }
    detail_::require_finite_table(table, where, "table");
    index_ = detail_::share(std::move(index));
    table_ = detail_::share(std::move(table));
  }

  /**
   * A bias given per pair: head h's n_q × n_k matrix is row h of `table` (heads × (n_q·n_k),
   * pair (s, t) at column s·n_k + t), e.g. Graphormer's edge encoding or a precomputed mask.
   * @throws shape_error (n_q, n_k < 1, n_q·n_k past int32, table shape), domain_error.
   */
  static pair_bias dense(index_t d, index_t n_q, index_t n_k, row_matrix<T> table) {
    constexpr const char* where = "lrpe::canonical::pair_bias::dense";
    lrpe::detail::require_shape(n_q >= 1, where, "n_q", "must be >= 1", n_q);
    lrpe::detail::require_shape(n_k >= 1 && n_k <= std::numeric_limits<std::int32_t>::max() / n_q, where, "n_k",
                                lrpe::detail::lazy_concat("must be >= 1 with n_q x n_k <= 2^31 - 1 (n_q = ", n_q, ")"),
                                n_k);
    lrpe::detail::require_shape(table.rows() >= 1 && table.cols() == n_q * n_k, where, "table",
                                lrpe::detail::lazy_concat("must be heads x (n_q*n_k) = heads x ", n_q * n_k),
                                lrpe::detail::lazy_concat(table.rows(), "x", table.cols()));
    index_matrix index(n_q, n_k);
    for (index_t i = 0; i < n_q * n_k; ++i) index.data()[i] = static_cast<std::int32_t>(i);
    return pair_bias(d, std::move(index), std::move(table));
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t heads() const noexcept { return table_->rows(); }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  [[nodiscard]] index_t buckets() const noexcept { return table_->cols(); }
  /// The number of query positions n_q and of key positions n_k the bias is defined for.
  [[nodiscard]] index_t query_count() const noexcept { return index_->rows(); }
  [[nodiscard]] index_t key_count() const noexcept { return index_->cols(); }
  [[nodiscard]] const index_matrix& index() const noexcept { return *index_; }
  [[nodiscard]] const row_matrix<T>& table() const noexcept { return *table_; }
  /// Head h's view (shares index and table). @throws shape_error if h ∉ [0, heads).
  [[nodiscard]] pair_bias head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::pair_bias::head");
    pair_bias v = *this;
    v.h_ = h;
    return v;
  }

  /// True when query position s and key position t index the table (0 ≤ s < n_q, 0 ≤ t < n_k).
  [[nodiscard]] bool defined_at(position_t s, position_t t) const noexcept {
    return s >= 0 && s < query_count() && t >= 0 && t < key_count();
  }
  /// w[h, index(s, t)]; s and t must satisfy `defined_at` (attention calls check it first).
  [[nodiscard]] double bias(position_t s, position_t t) const noexcept {
    return static_cast<double>((*table_)(h_, (*index_)(static_cast<index_t>(s), static_cast<index_t>(t))));
  }
  /// Throws `parameter_error` naming the query or key positions of a call that the index does
  /// not cover.
  void require_positions(const lrpe::detail::call_span& span, const char* where) const {
    detail_::require_positions_below(span, query_count(), key_count(), where, "query_count", "key_count");
  }

  /// The learnable parameters of this head: its row of the table (docs/training.md).
  [[nodiscard]] index_t parameter_count() const noexcept { return buckets(); }
  /// A zeroed gradient of this head's row.
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// Adds dL/dw[h, ·] of one logit: the pair's bucket gets `d_logit`.
  void accumulate_bias_gradient(position_t s, position_t t, double d_logit, double* grad) const noexcept {
    grad[(*index_)(static_cast<index_t>(s), static_cast<index_t>(t))] += d_logit;
  }

  /// Direct formula q·k + w[h, index(s, t)]. @throws parameter_error (s or t not covered).
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const {
    constexpr const char* where = "lrpe::canonical::pair_bias::score";
    if (!defined_at(s, t))
      lrpe::detail::fail<parameter_error>(
          where, "s, t", lrpe::detail::lazy_concat("must lie in [0, ", query_count(), ") x [0, ", key_count(), ")"),
          lrpe::detail::concat("(", s, ", ", t, ")"));
    return detail_::dot(q, k, d_) + bias(s, t);
  }

 private:
  index_t d_;
  detail_::shared_table<index_matrix> index_;
  detail_::shared_table<row_matrix<T>> table_;
  index_t h_ = 0;
};

/**
 * Swin's `relative_position_index` for a window of window_h × window_w patches (token
 * i = y·window_w + x, row-major): index(i, j) = (y_i − y_j + window_h − 1)·(2·window_w − 1)
 * + (x_i − x_j + window_w − 1), in [0, (2·window_h − 1)(2·window_w − 1)). The table of
 * `swin_bias` is then Swin's `relative_position_bias_table` transposed (heads × buckets).
 * @throws parameter_error (a side < 1, or more than 46340 tokens: (window_h·window_w)² past int32).
 */
inline index_matrix swin_relative_position_index(index_t window_h, index_t window_w) {
  constexpr const char* where = "lrpe::canonical::swin_relative_position_index";
  constexpr index_t tokens_max = 46340;  // n² < 2^31: every pair of the window has an int32 column
  lrpe::detail::require_parameter(window_h >= 1 && window_h <= tokens_max, where, "window_h",
                                  "must be in [1, 46340]", window_h);
  lrpe::detail::require_parameter(window_w >= 1 && window_w <= tokens_max / window_h, where, "window_w",
                                  lrpe::detail::lazy_concat("must be >= 1 with window_h x window_w <= 46340 (window_h = ",
                                                            window_h, ")"),
                                  window_w);
  const index_t n = window_h * window_w;
  index_matrix index(n, n);
  for (index_t i = 0; i < n; ++i) {
    for (index_t j = 0; j < n; ++j) {
      const index_t dy = i / window_w - j / window_w + window_h - 1, dx = i % window_w - j % window_w + window_w - 1;
      index(i, j) = static_cast<std::int32_t>(dy * (2 * window_w - 1) + dx);
    }
  }
  return index;
}

/**
 * Swin's 2-D relative position bias over one window: `pair_bias` with
 * `swin_relative_position_index(window_h, window_w)` and `table` heads ×
 * ((2·window_h − 1)(2·window_w − 1)). Positions are the window's tokens 0 … window_h·window_w − 1.
 */
template <real_scalar T>
pair_bias<T> swin_bias(index_t d, index_t window_h, index_t window_w, row_matrix<T> table) {
  index_matrix index = swin_relative_position_index(window_h, window_w);
  detail_::require_table_shape(table, table.rows(), (2 * window_h - 1) * (2 * window_w - 1), "lrpe::canonical::swin_bias",
                               "table");
  return pair_bias<T>(d, std::move(index), std::move(table));
}

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
