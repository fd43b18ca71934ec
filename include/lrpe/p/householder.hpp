// SPDX-License-Identifier: MIT
/**
 * @file householder.hpp
 * Householder reflection P = I − 2 v vᵀ with ‖v‖ = 1 (LRPE Types 1–4).
 *
 * P is real, symmetric and orthogonal (P = Pᵀ = P⁻¹). The reference code draws v from N(0, I)
 * and normalises it; `householder::seeded` does the same with lrpe's documented generator.
 */
#pragma once

#include <lrpe/core/random.hpp>
#include <lrpe/detail/validate.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace p {

/**
 * Householder reflection x ↦ x − 2 (x·v) v.
 * @tparam T float or double.
 */
template <real_scalar T>
class householder {
 public:
  using scalar = T;
  using output_type = T;
  static constexpr bool is_complex = false;
  static constexpr bool is_real_orthogonal = true;

  /**
   * From an explicit vector, normalised here (in double).
   * @param v the reflection vector, any nonzero finite length (normalised without overflow or
   *          underflow: entries from the smallest subnormal to the largest finite are fine).
   * @throws shape_error if v is empty; domain_error if an entry is not finite;
   *         parameter_error if v is zero.
   */
  explicit householder(std::span<const T> v) : v_(v.begin(), v.end()) {
    constexpr const char* where = "lrpe::p::householder";
    detail::require_dim(static_cast<index_t>(v.size()), where, "v.size()");
    detail::require_finite(v, where, "v");
    // ‖v‖ scaled by max|v_i| (as hypot): Σ v_i² overflows from |v_i| ~ 1e154 and underflows
    // below ~1e-162 in double, which rejected such vectors as infinite or zero.
    double scale = 0;
    for (T x : v) scale = std::max(scale, std::abs(static_cast<double>(x)));
    detail::require_parameter(scale > 0, where, "v", "must be a nonzero vector", scale);
    double norm2 = 0;  // of v / scale, in [1, d]
    for (T x : v) norm2 += (static_cast<double>(x) / scale) * (static_cast<double>(x) / scale);
    const double unit_norm = std::sqrt(norm2);
    norm_ = scale * unit_norm;
    for (auto& x : v_) x = static_cast<T>((static_cast<double>(x) / scale) / unit_norm);
  }
  explicit householder(const std::vector<T>& v) : householder(std::span<const T>(v)) {}

  /// v ~ N(0, I_d) from `lrpe::generator(seed)`, then normalised.
  static householder seeded(index_t d, std::uint64_t seed) {
    detail::require_dim(d, "lrpe::p::householder::seeded");
    generator g(seed);
    std::vector<T> v(static_cast<std::size_t>(d));
    for (auto& x : v) x = static_cast<T>(g.normal());
    return householder(std::span<const T>(v));
  }

  [[nodiscard]] index_t dim() const noexcept { return static_cast<index_t>(v_.size()); }
  /// The unit vector v.
  [[nodiscard]] std::span<const T> vector() const noexcept { return v_; }

  /// y = x − 2 (vᵀx) v; works on real or complex rows (P is real).
  template <class V>
  void apply(const V* x, V* y) const noexcept {
    V dot{};
    const index_t d = dim();
    for (index_t i = 0; i < d; ++i) dot += v_[static_cast<std::size_t>(i)] * x[i];
    dot *= T(2);
    for (index_t i = 0; i < d; ++i) y[i] = x[i] - dot * v_[static_cast<std::size_t>(i)];
  }
  /// P is symmetric: Pᴴ = P.
  template <class V>
  void apply_adjoint(const V* y, V* x) const noexcept { apply(y, x); }

  /// ‖v‖ of the vector as given (before normalising), in double.
  [[nodiscard]] double input_norm() const noexcept { return norm_; }

  /// The learnable parameters are the vector as given, unnormalised (docs/training.md): d of
  /// them, returned as `input_norm()`·u.
  [[nodiscard]] index_t parameter_count() const noexcept { return dim(); }
  [[nodiscard]] std::vector<double> parameters() const {
    std::vector<double> w(v_.size());
    for (std::size_t i = 0; i < v_.size(); ++i) w[i] = norm_ * static_cast<double>(v_[i]);
    return w;
  }
  /// The reflection of the vector `w` (rounded to T, normalised as by the constructor).
  [[nodiscard]] householder with_parameters(std::span<const double> w) const {
    std::vector<T> v(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) v[i] = static_cast<T>(w[i]);
    return householder(std::span<const T>(v));
  }

  /**
   * Adds dL/dv of one row to `grad` (d entries), v the unnormalised vector, given x and
   * gy = dL/d(Px). With u = v/‖v‖, a = u·x, b = u·gy: dL/du = −2(a·gy + b·x), and through the
   * normalisation dL/dv = (I − uuᵀ)·dL/du / ‖v‖ = (−2(a·gy + b·x) + 4ab·u) / ‖v‖, in double.
   */
  void accumulate_gradient(const T* x, const T* gy, double* grad) const noexcept {
    const index_t d = dim();
    double a = 0, b = 0;
    for (index_t i = 0; i < d; ++i) {
      const auto u = static_cast<double>(v_[static_cast<std::size_t>(i)]);
      a += u * static_cast<double>(x[i]);
      b += u * static_cast<double>(gy[i]);
    }
    const double inv = 1.0 / norm_;
    for (index_t i = 0; i < d; ++i) {
      const auto u = static_cast<double>(v_[static_cast<std::size_t>(i)]);
      grad[i] += (-2.0 * (a * static_cast<double>(gy[i]) + b * static_cast<double>(x[i])) + 4.0 * a * b * u) * inv;
    }
  }

  [[nodiscard]] dense_matrix<T> matrix() const {
    const Eigen::Map<const dense_vector<T>> v(v_.data(), dim());
    return dense_matrix<T>::Identity(dim(), dim()) - T(2) * v * v.transpose();
  }

 private:
  std::vector<T> v_;
  double norm_ = 1;
};

}  // namespace p
}  // namespace v0
}  // namespace lrpe
