// SPDX-License-Identifier: MIT
/**
 * @file huang2020.hpp
 * The four relative position methods of Huang et al. 2020 ("Improve transformer models with
 * better relative position embeddings"), δ = t − s (key minus query) clipped to [−r, r]:
 *
 * | method | f_rel(q_s, k_t) | table | canonical form |
 * |---|---|---|---|
 * | `absolute_scale` (1) | (q·k)·w[min(\|δ\|, r)] | r + 1 scalars | (q, w·I, k) |
 * | `directional_scale` (2) | (q·k)·w[clip(δ, r)] | 2r + 1 scalars | (q, w·I, k) |
 * | `sum_product` (3) | Σ_i q_i k_i a_{clip(δ, r), i} | (2r + 1) × d | (q, diag(a), k) |
 * | `query_and_key` (4) | (q + a)·(k + a) − a·a = q·k + q·a + a·k | (2r + 1) × d | (q, I, k), (q, a, 1), (1, aᵀ, k) |
 *
 * The method is a template argument (`huang2020<float, huang_method::sum_product>`): each has its
 * own canonical form. Methods 3 and 4 are the paper's best. None is linearizable (clipped Toeplitz tables). Like
 * Shaw's, the table is one per object (a model with per-head tables makes one object per head).
 * Gradient (`score_backward`): the table, row-major.
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <algorithm>
#include <limits>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// Which of Huang et al.'s methods (the paper's numbering in the enumerators' values).
enum class huang_method { absolute_scale = 1, directional_scale = 2, sum_product = 3, query_and_key = 4 };

template <real_scalar T, huang_method Method>
class huang2020 {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = false;
  static constexpr huang_method method = Method;

  /**
   * @param d      width of q and k.
   * @param r      clipping distance ≥ 0.
   * @param table  (r + 1) × 1 (method 1), (2r + 1) × 1 (method 2) or (2r + 1) × d (3, 4); row j
   *               holds |δ| = j (method 1) or δ = j − r; finite.
   * @throws shape_error (d, the table's shape), parameter_error (r), domain_error (non-finite).
   */
  huang2020(index_t d, position_t r, row_matrix<T> table) : d_(d), r_(r) {
    constexpr const char* where = "lrpe::canonical::huang2020";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_parameter(r >= 0 && r <= (std::numeric_limits<position_t>::max() - 1) / 2, where, "r",
                                    "must be in [0, 2^62 - 1] (the table has up to 2r + 1 rows)", r);
    detail_::require_table_shape(table, Method == huang_method::absolute_scale ? r + 1 : 2 * r + 1, per_feature ? d : 1,
                                 where, "table");
    detail_::require_finite_table(table, where, "table");
    table_ = detail_::share(std::move(table));
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] position_t max_distance() const noexcept { return r_; }
  [[nodiscard]] const row_matrix<T>& table() const noexcept { return *table_; }
  /// The table row of the offset δ = t − s.
  [[nodiscard]] index_t row_of(position_t delta) const noexcept {
    const position_t c = clip(delta, r_);
    return static_cast<index_t>(Method == huang_method::absolute_scale ? (c < 0 ? -c : c) : c + r_);
  }
  [[nodiscard]] const T* entry(position_t delta) const noexcept { return table_->row(row_of(delta)).data(); }

  /// Direct formula (the file comment's table).
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    const T* a = entry(saturating_offset(s, t));
    if constexpr (!per_feature) {
      return detail_::dot(q, k, d_) * static_cast<double>(a[0]);
    } else if constexpr (Method == huang_method::sum_product) {
      double acc = 0;
      for (index_t i = 0; i < d_; ++i) acc += static_cast<double>(q[i]) * static_cast<double>(k[i]) * a[i];
      return acc;
    } else {
      return detail_::dot(q, k, d_) + detail_::dot(q, a, d_) + detail_::dot(a, k, d_);
    }
  }

  /// The table's entries.
  [[nodiscard]] index_t parameter_count() const noexcept { return table_->size(); }
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// dq += g·∂f/∂q, dk += g·∂f/∂k, and (grad not null) the table row's gradient += g·∂f/∂row.
  void score_backward(const T* q, position_t s, const T* k, position_t t, double g, T* dq, T* dk,
                      double* grad) const noexcept {
    const position_t delta = saturating_offset(s, t);
    const T* a = entry(delta);
    const index_t width = table_->cols();
    double* ga = grad != nullptr ? grad + row_of(delta) * width : nullptr;
    if constexpr (!per_feature) {
      const double w = a[0];
      for (index_t i = 0; i < d_; ++i) {
        dq[i] += static_cast<T>(g * w * k[i]);
        dk[i] += static_cast<T>(g * w * q[i]);
      }
      if (ga != nullptr) ga[0] += g * detail_::dot(q, k, d_);
    } else {
      constexpr bool product = Method == huang_method::sum_product;
      for (index_t i = 0; i < d_; ++i) {
        const double qi = q[i], ki = k[i], ai = a[i];
        dq[i] += static_cast<T>(g * (product ? ki * ai : ki + ai));
        dk[i] += static_cast<T>(g * (product ? qi * ai : qi + ai));
        if (ga != nullptr) ga[i] += g * (product ? qi * ki : qi + ki);
      }
    }
  }

  /// The canonical form (the file comment's last column).
  [[nodiscard]] auto canonical() const {
    if constexpr (!per_feature) {
      auto w = [v = *this](position_t delta) { return static_cast<double>(v.entry(delta)[0]); };
      return canonical_form(term(identity_map<T>(d_), scalar_op<T, decltype(w)>(d_, w), identity_map<T>(d_)));
    } else {
      auto a = [v = *this](position_t delta, T* out) {
        const T* src = v.entry(delta);
        std::copy(src, src + v.dim(), out);
      };
      using A = decltype(a);
      if constexpr (Method == huang_method::sum_product) {
        return canonical_form(term(identity_map<T>(d_), diag_op<T, A>(d_, a), identity_map<T>(d_)));
      } else {
        return canonical_form(term(identity_map<T>(d_), identity_op<T>(d_), identity_map<T>(d_)),
                              term(identity_map<T>(d_), column_op<T, A>(d_, a), one_map<T>(d_)),
                              term(one_map<T>(d_), row_op<T, A>(d_, a), identity_map<T>(d_)));
      }
    }
  }

 private:
  static constexpr bool per_feature = Method == huang_method::sum_product || Method == huang_method::query_and_key;

  index_t d_;
  position_t r_;
  detail_::shared_table<row_matrix<T>> table_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
