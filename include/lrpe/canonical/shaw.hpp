// SPDX-License-Identifier: MIT
/**
 * @file shaw.hpp
 * Relative position representations (Shaw, Uszkoreit, Vaswani 2018):
 * e_st = q_s·(k_t + a^K_{clip(t−s, r)}), o_s = Σ_t α_st (v_t + a^V_{clip(t−s, r)}).
 *
 * - canonical: m = 2: (q, I, k) and (q, a^K_{clip(t−s, r)} as a d×1 column, 1);
 * - not linearizable (the clipped offsets give a Toeplitz structure of rank growing with n);
 * - a `value_encoding`: `add_value_term(s, t, w, out)` adds w·a^V_{clip(t−s, r)} to an output row.
 *
 * Layout: a^K and a^V are (2r+1) × d, row j holding offset j − r; as in the paper they are shared
 * by all heads (one object serves every head).
 *
 * Gradient (`score_backward`, `accumulate_value_gradient`, through attention's backward):
 * [a^K ((2r+1)·d), then a^V ((2r+1)·d) when there is a value table], each row-major as the
 * tables; `key_gradient` and `value_gradient` view them as matrices.
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <limits>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

template <real_scalar T>
class shaw {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = false;
  static constexpr bool has_value_term = true;

  /**
   * @param d           width of q, k and v.
   * @param r           clipping distance ≥ 0.
   * @param key_table   a^K, (2r+1) × d, finite.
   * @param value_table a^V, (2r+1) × d, finite; an empty (0×0) matrix means a^V = 0.
   * @throws shape_error (d < 1, table shapes), parameter_error (r < 0), domain_error (non-finite).
   */
  shaw(index_t d, position_t r, row_matrix<T> key_table, row_matrix<T> value_table = {}) : d_(d), r_(r) {
    constexpr const char* where = "lrpe::canonical::shaw";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_parameter(r >= 0 && r <= (std::numeric_limits<position_t>::max() - 1) / 2, where, "r",
                                    "must be in [0, 2^62 - 1] (the tables have 2r + 1 rows)", r);
    detail_::require_table_shape(key_table, 2 * r + 1, d, where, "key_table");
    detail_::require_finite_table(key_table, where, "key_table");
    if (value_table.size() != 0) {
      detail_::require_table_shape(value_table, 2 * r + 1, d, where, "value_table");
      detail_::require_finite_table(value_table, where, "value_table");
    }
    key_ = detail_::share(std::move(key_table));
    value_ = detail_::share(std::move(value_table));
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] position_t max_distance() const noexcept { return r_; }
  [[nodiscard]] const row_matrix<T>& key_table() const noexcept { return *key_; }
  [[nodiscard]] const row_matrix<T>& value_table() const noexcept { return *value_; }
  [[nodiscard]] bool has_value_table() const noexcept { return value_->size() != 0; }

  /// a^K_{clip(δ, r)} (d entries) for δ = t − s.
  [[nodiscard]] const T* key_vector(position_t delta) const noexcept { return key_->row(clip(delta, r_) + r_).data(); }
  /// a^V_{clip(δ, r)} (d entries), or nullptr when there is no value table.
  [[nodiscard]] const T* value_vector(position_t delta) const noexcept {
    return has_value_table() ? value_->row(clip(delta, r_) + r_).data() : nullptr;
  }

  /// Direct formula q_s·(k_t + a^K_{clip(t−s, r)}).
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    return detail_::dot(q, k, d_) + detail_::dot(q, key_vector(saturating_offset(s, t)), d_);
  }

  /// out += w·a^V_{clip(t−s, r)} (d elements); nothing when there is no value table.
  void add_value_term(position_t s, position_t t, T w, T* out) const noexcept {
    const T* a = value_vector(saturating_offset(s, t));
    if (a == nullptr) return;
    for (index_t i = 0; i < d_; ++i) out[i] += w * a[i];
  }

  /// (2r+1)·d for a^K, and as many for a^V when there is a value table.
  [[nodiscard]] index_t parameter_count() const noexcept {
    return (has_value_table() ? 2 : 1) * key_->size();
  }
  /// A zeroed gradient (the layout of the file comment).
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// a^K's part of a gradient, as a (2r+1) × d matrix.
  [[nodiscard]] Eigen::Map<row_matrix<double>> key_gradient(std::vector<double>& grad) const {
    return {part(grad, 0), key_->rows(), d_};
  }
  /// a^V's part of a gradient, as a (2r+1) × d matrix.
  /// @throws parameter_error when there is no value table.
  [[nodiscard]] Eigen::Map<row_matrix<double>> value_gradient(std::vector<double>& grad) const {
    lrpe::detail::require_parameter(has_value_table(), "lrpe::canonical::shaw::value_gradient", "value_table",
                                    "must not be empty (a^V has no gradient without it)", "empty");
    return {part(grad, key_->size()), key_->rows(), d_};
  }

  /// The score's backward: dq += g·(k + a^K), dk += g·q, and a^K_{clip(t−s, r)}'s gradient += g·q.
  void score_backward(const T* q, position_t s, const T* k, position_t t, double g, T* dq, T* dk,
                      double* grad) const noexcept {
    const position_t delta = saturating_offset(s, t);
    const T* a = key_vector(delta);
    double* ga = grad != nullptr ? grad + row_of(delta) * d_ : nullptr;
    for (index_t i = 0; i < d_; ++i) {
      dq[i] += static_cast<T>(g * (static_cast<double>(k[i]) + a[i]));
      dk[i] += static_cast<T>(g * q[i]);
      if (ga != nullptr) ga[i] += g * q[i];
    }
  }
  /// g·a^V_{clip(t−s, r)} (0 without a value table).
  [[nodiscard]] double value_term_dot(position_t s, position_t t, const T* g) const noexcept {
    const T* a = value_vector(saturating_offset(s, t));
    return a == nullptr ? 0.0 : detail_::dot(g, a, d_);
  }
  /// a^V_{clip(t−s, r)}'s gradient += w·g (nothing without a value table).
  void accumulate_value_gradient(position_t s, position_t t, double w, const T* g, double* grad) const noexcept {
    if (!has_value_table()) return;
    double* ga = grad + key_->size() + row_of(saturating_offset(s, t)) * d_;
    for (index_t i = 0; i < d_; ++i) ga[i] += w * g[i];
  }

  [[nodiscard]] auto canonical() const {
    auto column = [v = *this](position_t delta, T* a) {
      const T* src = v.key_vector(delta);
      std::copy(src, src + v.dim(), a);
    };
    return canonical_form(term(identity_map<T>(d_), identity_op<T>(d_), identity_map<T>(d_)),
                          term(identity_map<T>(d_), column_op<T, decltype(column)>(d_, column), one_map<T>(d_)));
  }

 private:
  [[nodiscard]] index_t row_of(position_t delta) const noexcept { return static_cast<index_t>(clip(delta, r_) + r_); }
  double* part(std::vector<double>& grad, index_t first) const {
    lrpe::detail::require_shape(static_cast<index_t>(grad.size()) == parameter_count(), "lrpe::canonical::shaw",
                                "grad.size()", lrpe::detail::lazy_concat("must equal parameter_count() = ", parameter_count()),
                                grad.size());
    return grad.data() + first;
  }

  index_t d_;
  position_t r_;
  detail_::shared_table<row_matrix<T>> key_, value_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
