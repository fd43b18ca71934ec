// SPDX-License-Identifier: MIT
/**
 * @file dct.hpp
 * Orthonormal DCT-II as a real orthogonal P:
 * C[k][n] = α_k cos(π (2n+1) k / (2d)), α_0 = √(1/d), α_k = √(2/d) for k ≥ 1.
 *
 * The matrix is built once in double with exactly reduced angles and applied as a dense
 * product (d ≤ a few hundred in attention heads, where the d² product beats an FFT-based DCT).
 */
#pragma once

#include <lrpe/detail/validate.hpp>

#include <cmath>
#include <numbers>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace p {

/**
 * The orthonormal DCT-II.
 * @tparam T float or double.
 */
template <real_scalar T>
class dct {
 public:
  using scalar = T;
  using output_type = T;
  static constexpr bool is_complex = false;
  static constexpr bool is_real_orthogonal = true;

  /// @throws shape_error if d < 1.
  explicit dct(index_t d) : d_(d) {
    detail::require_dim(d, "lrpe::p::dct");
    c_.resize(static_cast<std::size_t>(d * d));
    for (index_t k = 0; k < d; ++k) {
      const double alpha = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(d));
      for (index_t n = 0; n < d; ++n) {
        // angle = π (2n+1) k / (2d); reduce (2n+1)k modulo 4d (one full period) exactly.
        const auto m = static_cast<double>(((2 * n + 1) * k) % (4 * d));
        c_[static_cast<std::size_t>(k * d + n)] =
            static_cast<T>(alpha * std::cos(std::numbers::pi * m / (2.0 * static_cast<double>(d))));
      }
    }
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }

  /// y = C x.
  template <class V>
  void apply(const V* x, V* y) const noexcept {
    for (index_t k = 0; k < d_; ++k) {
      const T* row = c_.data() + k * d_;
      V acc{};
      for (index_t n = 0; n < d_; ++n) acc += row[n] * x[n];
      y[k] = acc;
    }
  }
  /// x = Cᵀ y.
  template <class V>
  void apply_adjoint(const V* y, V* x) const noexcept {
    for (index_t n = 0; n < d_; ++n) x[n] = V{};
    for (index_t k = 0; k < d_; ++k) {
      const T* row = c_.data() + k * d_;
      for (index_t n = 0; n < d_; ++n) x[n] += row[n] * y[k];
    }
  }

  [[nodiscard]] dense_matrix<T> matrix() const {
    return Eigen::Map<const row_matrix<T>>(c_.data(), d_, d_);
  }

 private:
  index_t d_;
  std::vector<T> c_;  // row-major d×d
};

}  // namespace p
}  // namespace v0
}  // namespace lrpe
