// SPDX-License-Identifier: MIT
/**
 * @file identity.hpp
 * P = I: the encoder is Λ alone (RoPE, PermuteFormer, "LRPE cosine").
 */
#pragma once

#include <lrpe/detail/validate.hpp>

namespace lrpe {
inline namespace v0 {
namespace p {

/**
 * The identity P policy.
 * @tparam T float or double.
 */
template <real_scalar T>
class identity {
 public:
  using scalar = T;
  using output_type = T;
  static constexpr bool is_complex = false;
  static constexpr bool is_real_orthogonal = true;

  /// @param d width; throws `shape_error` if d < 1.
  explicit identity(index_t d) : d_(d) { detail::require_dim(d, "lrpe::p::identity"); }

  [[nodiscard]] index_t dim() const noexcept { return d_; }

  /// y = x.
  template <class V>
  void apply(const V* x, V* y) const noexcept {
    for (index_t i = 0; i < d_; ++i) y[i] = x[i];
  }
  /// x = y.
  template <class V>
  void apply_adjoint(const V* y, V* x) const noexcept { apply(y, x); }

  [[nodiscard]] dense_matrix<T> matrix() const { return dense_matrix<T>::Identity(d_, d_); }

 private:
  index_t d_;
};

}  // namespace p
}  // namespace v0
}  // namespace lrpe
