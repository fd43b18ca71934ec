// SPDX-License-Identifier: MIT
/**
 * @file common.hpp
 * Internal helpers of lrpe/canonical (not part of the public API): parameter validation of
 * tables, double-accumulated dot products, shared immutable multi-head storage.
 */
#pragma once

#include <lrpe/core/error.hpp>
#include <lrpe/core/traits.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/detail/validate.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {
namespace detail_ {

/// Throws `domain_error` naming the first non-finite entry (row, col) of `m`.
template <class M>
void require_finite_table(const M& m, const char* where, const char* arg) {
  for (index_t i = 0; i < m.rows(); ++i)
    for (index_t j = 0; j < m.cols(); ++j)
      if (!std::isfinite(static_cast<double>(m(i, j))))
        throw domain_error(lrpe::detail::concat(where, ": argument '", arg, "' must be finite; got ", m(i, j),
                                                " at (", i, ", ", j, ")"));
}

/// Throws `domain_error` unless x is finite.
inline void require_finite_value(double x, const char* where, const char* arg) {
  if (!std::isfinite(x)) throw domain_error(lrpe::detail::concat(where, ": argument '", arg, "' must be finite; got ", x));
}

/// Throws `shape_error` unless m is rows×cols.
template <class M>
void require_table_shape(const M& m, index_t rows, index_t cols, const char* where, const char* arg) {
  lrpe::detail::require_shape(m.rows() == rows && m.cols() == cols, where, arg,
                              lrpe::detail::lazy_concat("must be ", rows, "x", cols),
                              lrpe::detail::lazy_concat(m.rows(), "x", m.cols()));
}

/// Σ a_i b_i accumulated in double.
template <class T>
[[nodiscard]] double dot(const T* a, const T* b, index_t n) noexcept {
  double acc = 0;
  for (index_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return acc;
}

/// Immutable parameters shared by all heads' views (copying a variant is O(1)).
template <class M>
using shared_table = std::shared_ptr<const M>;

template <class M>
shared_table<M> share(M m) {
  return std::make_shared<const M>(std::move(m));
}

/// Throws `shape_error` unless 0 <= h < heads.
inline void require_head(index_t h, index_t heads, const char* where) {
  lrpe::detail::require_shape(h >= 0 && h < heads, where, "head",
                              lrpe::detail::lazy_concat("must be in [0, heads = ", heads, ")"), h);
}

/**
 * The check of an encoding defined on positions 0 … n − 1 only (`bounded_positions`): throws
 * `parameter_error` naming `options.q_positions` (or `k_positions`) unless the call's query
 * positions lie in [0, n_q) and its key positions in [0, n_k); `q_count` and `k_count` name the
 * encoding's members that give n_q and n_k.
 */
inline void require_positions_below(const lrpe::detail::call_span& span, index_t n_q, index_t n_k, const char* where,
                                    const char* q_count, const char* k_count) {
  const auto check = [&](const lrpe::detail::position_span& p, index_t n, const char* arg, const char* count) {
    if (p.empty || (p.lo >= 0 && p.hi < n)) return;
    lrpe::detail::fail<parameter_error>(where, arg,
                                        lrpe::detail::lazy_concat("must lie in [0, encoding.", count, "() = ", n, ")"),
                                        lrpe::detail::concat("[", p.lo, ", ", p.hi, "]"));
  };
  check(span.q, n_q, "options.q_positions", q_count);
  check(span.k, n_k, "options.k_positions", k_count);
}

/// `values` as a 1 × size table. A plain copy: GCC 12 at -O2 and above warns (-Warray-bounds,
/// a false positive) on Eigen's vectorised copy from a Map of a short vector.
template <class T>
row_matrix<T> one_row_table(const std::vector<T>& values) {
  row_matrix<T> m(1, static_cast<index_t>(values.size()));
  std::copy(values.begin(), values.end(), m.data());
  return m;
}

}  // namespace detail_
}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
