// SPDX-License-Identifier: MIT
/**
 * @file storage.hpp
 * 16-bit storage: Q, K, V, outputs and KV caches held in `lrpe::half` (IEEE binary16) or
 * `lrpe::bfloat16` (Eigen's types), computed in float. Widening to float is exact; narrowing
 * rounds to nearest, ties to even (Eigen's conversions).
 *
 * | storage S | `compute_t<S>` | relative rounding of a stored value |
 * |---|---|---|
 * | `float`, `double` | S | none |
 * | `lrpe::half` | float | 2⁻¹¹ (normal range, |x| ≤ 65504) |
 * | `lrpe::bfloat16` | float | 2⁻⁸ (float's range) |
 */
#pragma once

#include <lrpe/core/config.hpp>
#include <lrpe/core/traits.hpp>
#include <lrpe/core/view.hpp>

#include <Eigen/Core>

#include <concepts>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

using half = Eigen::half;          ///< IEEE 754 binary16: 11-bit significand, max 65504
using bfloat16 = Eigen::bfloat16;  ///< bfloat16: float's exponent, 8-bit significand

/// A 16-bit storage type: computed in float.
template <class S>
concept half_precision = std::same_as<std::remove_cv_t<S>, half> || std::same_as<std::remove_cv_t<S>, bfloat16>;

/// The scalar a stored value is computed in: float for the 16-bit types, the type itself otherwise.
template <class S>
using compute_t = std::conditional_t<half_precision<S>, float, std::remove_cv_t<S>>;

/// A stored value in its compute type (exact).
template <class S>
constexpr compute_t<S> widen(S x) noexcept {
  return static_cast<compute_t<S>>(x);
}

/// A value of the compute type rounded to storage S (to nearest, ties to even, for 16-bit S).
template <class S, class T>
constexpr S narrow(T x) noexcept {
  return static_cast<S>(x);
}

namespace detail {

/// A view in scalar T of a view stored as S: the view itself when S is T, else a widened copy
/// (exact) that this object owns.
template <class T, class S>
class widened {
 public:
  explicit widened(const matrix_view<const S>& x) {
    if constexpr (std::is_same_v<S, T>) {
      view_ = x;
    } else {
      copy_.resize(x.rows, x.cols);
      for (index_t i = 0; i < x.rows; ++i)
        for (index_t c = 0; c < x.cols; ++c) copy_(i, c) = static_cast<T>(x(i, c));
      view_ = matrix_view<const T>(copy_.data(), x.rows, x.cols, x.cols);
    }
  }
  widened(const widened&) = delete;
  widened& operator=(const widened&) = delete;
  [[nodiscard]] const matrix_view<const T>& view() const noexcept { return view_; }

 private:
  row_matrix<T> copy_;
  matrix_view<const T> view_;
};

}  // namespace detail

}  // namespace v0
}  // namespace lrpe
