// SPDX-License-Identifier: MIT
/**
 * @file complex_phase.hpp
 * Λ⁽ˢ⁾ = diag(e^{i s θ_j}) (LRPE Solution 1), acting on complex rows.
 *
 * The first θ.size() features get a phase, the rest pass through. Λ⁽ˢ⁾ is unitary and
 * Λ⁽ˢ⁾ᴴ Λ⁽ᵗ⁾ = diag(e^{i (t−s) θ_j}) = Λ⁽ᵗ⁻ˢ⁾. Paired with the unitary DFT this is LRPE Type 8;
 * with P = I it is "LRPE cosine" (TransNormerLLM): Re(q̃ᴴ k̃) = Σ_j q_j k_j cos((t−s) θ_j).
 */
#pragma once

#include <lrpe/detail/angle.hpp>
#include <lrpe/detail/validate.hpp>
#include <lrpe/freq/schedules.hpp>

#include <complex>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace lambda {

/**
 * Complex phases e^{i s θ_j}.
 * @tparam T float or double; angle and cos/sin in double.
 */
template <real_scalar T>
class complex_phase {
 public:
  using scalar = T;
  static constexpr bool is_complex = true;

  /**
   * @param d     the (complex) width.
   * @param theta the phase frequencies, θ.size() ≤ d, finite.
   * @throws shape_error if d < 1 or θ.size() ∉ [1, d]; domain_error if θ is not finite;
   *         parameter_error if some |θ| ≥ 2^960 (s·θ would overflow).
   */
  complex_phase(index_t d, std::vector<double> theta) : d_(d), theta_(std::move(theta)) {
    constexpr const char* where = "lrpe::lambda::complex_phase";
    detail::require_dim(d, where);
    detail::require_shape(!theta_.empty() && static_cast<index_t>(theta_.size()) <= d, where,
                          "theta.size()", detail::lazy_concat("must be in [1, d] = [1, ", d, "]"),
                          theta_.size());
    detail::require_frequencies(theta_, where, "theta");
  }

  /// The paper's default: θ_j = 10000^(−2j/d) on all d features.
  explicit complex_phase(index_t d)
      : complex_phase(d, (detail::require_dim(d, "lrpe::lambda::complex_phase"), freq::complex_phase(d))) {}

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] std::span<const double> frequencies() const noexcept { return theta_; }

  /// y_j = x_j e^{i s θ_j}.
  void apply(position_t s, const std::complex<T>* x, std::complex<T>* y) const noexcept {
    const auto e = static_cast<index_t>(theta_.size());
    for (index_t j = 0; j < e; ++j) {
      const auto [c, sn] = detail::angle_cos_sin(s, theta_[static_cast<std::size_t>(j)]);
      y[j] = x[j] * std::complex<T>(static_cast<T>(c), static_cast<T>(sn));
    }
    for (index_t j = e; j < d_; ++j) y[j] = x[j];
  }

  /// The learnable parameters are the frequencies θ (docs/training.md): θ.size() of them.
  [[nodiscard]] index_t parameter_count() const noexcept { return static_cast<index_t>(theta_.size()); }
  [[nodiscard]] std::vector<double> parameters() const { return theta_; }
  /// The same Λ (width) with frequencies `theta` (validated as by the constructor).
  [[nodiscard]] complex_phase with_parameters(std::span<const double> theta) const {
    return complex_phase(d_, std::vector<double>(theta.begin(), theta.end()));
  }

  /**
   * Adds dL/dθ of one row to `grad` (θ.size() entries), given y = Λ⁽ˢ⁾x and gy = dL/dy:
   * dy_j/dθ_j = i·s·y_j, so dL/dθ_j = s·Re(conj(gy_j)·i·y_j), in double.
   */
  void accumulate_gradient(position_t s, const std::complex<T>* y, const std::complex<T>* gy,
                           double* grad) const noexcept {
    const auto sd = static_cast<double>(s);
    for (index_t j = 0; j < parameter_count(); ++j)
      grad[j] += sd * detail::real_inner(gy[j], std::complex<T>(-y[j].imag(), y[j].real()));
  }

  [[nodiscard]] dense_matrix<std::complex<T>> matrix(position_t s) const {
    dense_matrix<std::complex<T>> m = dense_matrix<std::complex<T>>::Identity(d_, d_);
    for (index_t j = 0; j < static_cast<index_t>(theta_.size()); ++j) {
      const auto [c, sn] = detail::angle_cos_sin(s, theta_[static_cast<std::size_t>(j)]);
      m(j, j) = {static_cast<T>(c), static_cast<T>(sn)};
    }
    return m;
  }

 private:
  index_t d_;
  std::vector<double> theta_;
};

}  // namespace lambda
}  // namespace v0
}  // namespace lrpe
