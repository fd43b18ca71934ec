// SPDX-License-Identifier: MIT
/**
 * @file learned.hpp
 * Learned absolute position embeddings: one row per position (BERT, GPT-2, ViT), or Reformer's
 * axial factorisation, whose row for position p = i·n₂ + j is [E₁[i], E₂[j]] (two small tables
 * instead of one of n₁·n₂ rows). Both look rows up for a call's positions, add them to the
 * inputs, and accumulate the tables' gradients (dL/dE[p] = the sum of the rows of dL/dx at
 * position p).
 *
 * Positions are rows of the table: 0 … max_positions − 1 (a model that reserves rows, such as
 * OPT's offset of 2, passes its positions shifted). Any other position is an error naming it.
 */
#pragma once

#include <lrpe/core/view.hpp>
#include <lrpe/detail/validate.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace absolute {

namespace detail_ {
template <class T>
void require_finite_rows(const row_matrix<T>& m, const char* where, const char* arg) {
  for (index_t i = 0; i < m.size(); ++i)
    if (!std::isfinite(static_cast<double>(m.data()[i])))
      lrpe::detail::fail<domain_error>(where, arg, "must be finite",
                                       lrpe::detail::concat(m.data()[i], " at (", i / m.cols(), ", ", i % m.cols(), ")"));
}
}  // namespace detail_

/**
 * A table of max_positions × d learned embeddings (its rows' gradient is laid out as the table,
 * row-major). Copies share nothing: it is a value, as its table.
 */
template <real_scalar T>
class learned_positions {
 public:
  using scalar = T;

  /// @throws shape_error (an empty table), domain_error (a non-finite entry).
  explicit learned_positions(row_matrix<T> table) : table_(std::move(table)) {
    constexpr const char* where = "lrpe::absolute::learned_positions";
    lrpe::detail::require_shape(table_.rows() >= 1 && table_.cols() >= 1, where, "table",
                                "must be max_positions x d with both >= 1",
                                lrpe::detail::lazy_concat(table_.rows(), "x", table_.cols()));
    detail_::require_finite_rows(table_, where, "table");
  }

  [[nodiscard]] index_t dim() const noexcept { return table_.cols(); }
  [[nodiscard]] index_t max_positions() const noexcept { return table_.rows(); }
  [[nodiscard]] const row_matrix<T>& table() const noexcept { return table_; }

  /// The embedding of position p (d entries). @throws parameter_error (p outside the table).
  [[nodiscard]] auto row(position_t p) const {
    require_position(p, "lrpe::absolute::learned_positions::row");
    return table_.row(static_cast<index_t>(p));
  }
  /// x.row(i) += E[pos[i]] for the n = x.rows rows of x (x.cols = d).
  /// @throws shape_error (x's width), parameter_error (a position outside the table).
  void add_to(const matrix_view<T>& x, const positions& pos = 0) const {
    constexpr const char* where = "lrpe::absolute::learned_positions::add_to";
    check_call(x, pos, where, "x");
    for (index_t i = 0; i < x.rows; ++i)
      for (index_t c = 0; c < x.cols; ++c) x.row(i)[c] += table_(static_cast<index_t>(pos[i]), c);
  }
  /// grad (max_positions·d entries, the table's layout) += dL/dE from dL/dx of rows at `pos`.
  void accumulate_gradient(const matrix_view<const T>& dx, const positions& pos, std::span<double> grad) const {
    constexpr const char* where = "lrpe::absolute::learned_positions::accumulate_gradient";
    check_call(dx, pos, where, "dx");
    lrpe::detail::require_shape(static_cast<index_t>(grad.size()) == table_.size(), where, "grad.size()",
                                lrpe::detail::lazy_concat("must be max_positions x d = ", table_.size()), grad.size());
    for (index_t i = 0; i < dx.rows; ++i)
      for (index_t c = 0; c < dx.cols; ++c)
        grad[static_cast<std::size_t>(pos[i] * dim() + c)] += static_cast<double>(dx.row(i)[c]);
  }

 private:
  void require_position(position_t p, const char* where) const {
    if (p < 0 || p >= max_positions())
      lrpe::detail::fail<parameter_error>(where, "position",
                                          lrpe::detail::lazy_concat("must be in [0, max_positions = ", max_positions(), ")"),
                                          p);
  }
  template <class V>
  void check_call(const V& x, const positions& pos, const char* where, const char* arg) const {
    validate(x, where, arg);
    const index_t rows = x.rows;
    lrpe::detail::require_shape(x.cols == dim(), where, arg, lrpe::detail::lazy_concat("must have d = ", dim(), " columns"),
                                x.cols);
    pos.require_rows(rows, where, "pos");
    for (index_t i = 0; i < rows; ++i) {
      const position_t p = pos[i];
      if (p < 0 || p >= max_positions())
        lrpe::detail::fail<parameter_error>(
            where, "pos", lrpe::detail::lazy_concat("must be in [0, max_positions = ", max_positions(), ")"),
            lrpe::detail::concat(p, " at row ", i));
    }
  }

  row_matrix<T> table_;
};

/**
 * Reformer's axial position embeddings: E₁ (n₁ × d₁) and E₂ (n₂ × d₂); position p = i·n₂ + j
 * (i = p / n₂, j = p % n₂, p < n₁·n₂) has the row [E₁[i], E₂[j]] of width d₁ + d₂, as
 * Reformer's `AxialPositionEmbeddings` (axial_pos_shape = (n₁, n₂)) broadcasts, concatenates and
 * flattens its weights.
 */
template <real_scalar T>
class axial_positions {
 public:
  using scalar = T;

  /// @throws shape_error (an empty table, n₁·n₂ past position_t), domain_error (non-finite).
  axial_positions(row_matrix<T> first, row_matrix<T> second) : e1_(std::move(first)), e2_(std::move(second)) {
    constexpr const char* where = "lrpe::absolute::axial_positions";
    lrpe::detail::require_shape(e1_.rows() >= 1 && e1_.cols() >= 1, where, "first", "must be n1 x d1 with both >= 1",
                                lrpe::detail::lazy_concat(e1_.rows(), "x", e1_.cols()));
    lrpe::detail::require_shape(e2_.rows() >= 1 && e2_.cols() >= 1 && e2_.rows() <= std::numeric_limits<index_t>::max() / e1_.rows(),
                                where, "second", "must be n2 x d2 with both >= 1 and n1*n2 an index_t",
                                lrpe::detail::lazy_concat(e2_.rows(), "x", e2_.cols()));
    detail_::require_finite_rows(e1_, where, "first");
    detail_::require_finite_rows(e2_, where, "second");
  }

  [[nodiscard]] index_t dim() const noexcept { return e1_.cols() + e2_.cols(); }
  [[nodiscard]] index_t max_positions() const noexcept { return e1_.rows() * e2_.rows(); }
  [[nodiscard]] const row_matrix<T>& first() const noexcept { return e1_; }
  [[nodiscard]] const row_matrix<T>& second() const noexcept { return e2_; }
  /// The number of parameters: n₁·d₁ + n₂·d₂ (the gradient's layout: E₁ then E₂, row-major).
  [[nodiscard]] index_t parameter_count() const noexcept { return e1_.size() + e2_.size(); }

  /// x.row(i) += [E₁[p / n₂], E₂[p % n₂]] with p = pos[i].
  /// @throws shape_error (x's width), parameter_error (a position outside [0, n₁·n₂)).
  void add_to(const matrix_view<T>& x, const positions& pos = 0) const {
    constexpr const char* where = "lrpe::absolute::axial_positions::add_to";
    check_call(x, pos, where, "x");
    const index_t d1 = e1_.cols(), d2 = e2_.cols(), n2 = e2_.rows();
    for (index_t r = 0; r < x.rows; ++r) {
      const index_t p = static_cast<index_t>(pos[r]);
      for (index_t c = 0; c < d1; ++c) x.row(r)[c] += e1_(p / n2, c);
      for (index_t c = 0; c < d2; ++c) x.row(r)[d1 + c] += e2_(p % n2, c);
    }
  }
  /// The full table, n₁·n₂ × (d₁ + d₂) (for inspection; `add_to` never forms it).
  [[nodiscard]] row_matrix<T> dense() const {
    row_matrix<T> out = row_matrix<T>::Zero(max_positions(), dim());
    add_to(view(out));
    return out;
  }
  /// grad (`parameter_count()` entries) += dL/dE₁, dL/dE₂ from dL/dx of rows at `pos`.
  void accumulate_gradient(const matrix_view<const T>& dx, const positions& pos, std::span<double> grad) const {
    constexpr const char* where = "lrpe::absolute::axial_positions::accumulate_gradient";
    check_call(dx, pos, where, "dx");
    lrpe::detail::require_shape(static_cast<index_t>(grad.size()) == parameter_count(), where, "grad.size()",
                                lrpe::detail::lazy_concat("must be n1*d1 + n2*d2 = ", parameter_count()), grad.size());
    const index_t d1 = e1_.cols(), d2 = e2_.cols(), n2 = e2_.rows();
    double* g2 = grad.data() + e1_.size();
    for (index_t r = 0; r < dx.rows; ++r) {
      const index_t p = static_cast<index_t>(pos[r]);
      for (index_t c = 0; c < d1; ++c) grad[static_cast<std::size_t>(p / n2 * d1 + c)] += static_cast<double>(dx.row(r)[c]);
      for (index_t c = 0; c < d2; ++c) g2[p % n2 * d2 + c] += static_cast<double>(dx.row(r)[d1 + c]);
    }
  }

 private:
  template <class V>
  void check_call(const V& x, const positions& pos, const char* where, const char* arg) const {
    validate(x, where, arg);
    const index_t rows = x.rows;
    lrpe::detail::require_shape(x.cols == dim(), where, arg,
                                lrpe::detail::lazy_concat("must have d1 + d2 = ", dim(), " columns"), x.cols);
    pos.require_rows(rows, where, "pos");
    for (index_t i = 0; i < rows; ++i) {
      const position_t p = pos[i];
      if (p < 0 || p >= max_positions())
        lrpe::detail::fail<parameter_error>(where, "pos",
                                            lrpe::detail::lazy_concat("must be in [0, n1*n2 = ", max_positions(), ")"),
                                            lrpe::detail::concat(p, " at row ", i));
    }
  }

  row_matrix<T> e1_, e2_;
};

}  // namespace absolute
}  // namespace v0
}  // namespace lrpe
