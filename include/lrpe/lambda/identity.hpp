// SPDX-License-Identifier: MIT
/**
 * @file identity.hpp
 * Λ⁽ˢ⁾ = I for every s: an encoder with this Λ is position-blind (a baseline, and a way to use a
 * bare P).
 */
#pragma once

#include <lrpe/detail/validate.hpp>

namespace lrpe {
inline namespace v0 {
namespace lambda {

/// The trivial unitary family Λ⁽ˢ⁾ = I.
template <real_scalar T>
class identity {
 public:
  using scalar = T;
  static constexpr bool is_complex = false;

  explicit identity(index_t d) : d_(d) { detail::require_dim(d, "lrpe::lambda::identity"); }

  [[nodiscard]] index_t dim() const noexcept { return d_; }

  template <class V>
  void apply(position_t /*s*/, const V* x, V* y) const noexcept {
    for (index_t i = 0; i < d_; ++i) y[i] = x[i];
  }

  [[nodiscard]] dense_matrix<T> matrix(position_t /*s*/) const {
    return dense_matrix<T>::Identity(d_, d_);
  }

 private:
  index_t d_;
};

}  // namespace lambda
}  // namespace v0
}  // namespace lrpe
