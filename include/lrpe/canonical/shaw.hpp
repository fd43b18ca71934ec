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
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <limits>

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

  [[nodiscard]] auto canonical() const {
    auto column = [v = *this](position_t delta, T* a) {
      const T* src = v.key_vector(delta);
      std::copy(src, src + v.dim(), a);
    };
    return canonical_form(term(identity_map<T>(d_), identity_op<T>(d_), identity_map<T>(d_)),
                          term(identity_map<T>(d_), column_op<T, decltype(column)>(d_, column), one_map<T>(d_)));
  }

 private:
  index_t d_;
  position_t r_;
  detail_::shared_table<row_matrix<T>> key_, value_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
