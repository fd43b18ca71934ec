// SPDX-License-Identifier: MIT
/**
 * @file rotation.hpp
 * Λ as 2×2 rotation blocks (LRPE Solution 2; RoPE).
 *
 * The first e = 2·θ.size() features (the rotated width) are grouped into e/2 pairs, pair k
 * rotated by the angle s·θ_k:  (a, b) ↦ (a cos − b sin, b cos + a sin).
 * The remaining d − e features pass through (odd d, partial rotary).
 *
 * Pairing (which features form pair k):
 * - `pairing::interleaved` (GPT-J `rotate_every_two`, GGML mode 0, ONNX interleaved=1): (2k, 2k+1);
 * - `pairing::split_half` (GPT-NeoX / HF LLaMA `rotate_half`, GGML NEOX, ONNX interleaved=0):
 *   (k, k + e/2).
 *
 * Λ⁽ˢ⁾ is real orthogonal, Λ⁽⁰⁾ = I and Λ⁽ˢ⁾ᵀ Λ⁽ᵗ⁾ = Λ⁽ᵗ⁻ˢ⁾ because rotations by angles add.
 */
#pragma once

#include <lrpe/detail/angle.hpp>
#include <lrpe/detail/validate.hpp>
#include <lrpe/freq/schedules.hpp>

#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {

/// Which features form a rotation pair.
enum class pairing {
  interleaved,  ///< pairs (2k, 2k+1): GPT-J, GGML mode 0, Meta LLaMA checkpoints
  split_half    ///< pairs (k, k + e/2): GPT-NeoX, HF LLaMA rotate_half
};

namespace lambda {

/**
 * Rotation blocks at angles s·θ_k.
 * @tparam T float or double; the angle and its cos/sin are formed in double.
 */
template <real_scalar T>
class rotation {
 public:
  using scalar = T;
  static constexpr bool is_complex = false;

  /**
   * @param d     the width (≥ 1).
   * @param theta the e/2 frequencies (see lrpe::freq); 2·θ.size() ≤ d, finite.
   * @param p     the pairing of the rotated width.
   * @throws shape_error if d < 1, θ is empty or 2·θ.size() > d; domain_error if θ is not finite;
   *         parameter_error if some |θ| ≥ 2^960 (s·θ would overflow).
   */
  rotation(index_t d, std::vector<double> theta, pairing p = pairing::interleaved)
      : d_(d), theta_(std::move(theta)), pairing_(p) {
    constexpr const char* where = "lrpe::lambda::rotation";
    detail::require_dim(d, where);
    const auto e = 2 * static_cast<index_t>(theta_.size());
    detail::require_shape(e >= 2 && e <= d, where, "theta.size()",
                          detail::lazy_concat("must be in [1, d/2] = [1, ", d / 2, "] (rotated width 2*theta.size() <= d)"),
                          theta_.size());
    detail::require_frequencies(theta_, where, "theta");
  }

  /// Standard RoPE over the whole even part of d: θ = freq::theta_a(d − d mod 2).
  explicit rotation(index_t d, pairing p = pairing::interleaved)
      : rotation(d, freq::theta_a(require_at_least_two(d) - d % 2), p) {}

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  /// e, the number of rotated features.
  [[nodiscard]] index_t rotated_dim() const noexcept { return 2 * static_cast<index_t>(theta_.size()); }
  [[nodiscard]] std::span<const double> frequencies() const noexcept { return theta_; }
  [[nodiscard]] pairing pair_mode() const noexcept { return pairing_; }

  /// Index of the two features of pair k.
  [[nodiscard]] std::pair<index_t, index_t> pair(index_t k) const noexcept {
    if (pairing_ == pairing::interleaved) return {2 * k, 2 * k + 1};
    return {k, k + rotated_dim() / 2};
  }

  /// y = Λ⁽ˢ⁾ x; V is T or std::complex<T> (the rotation is real).
  template <class V>
  void apply(position_t s, const V* x, V* y) const noexcept {
    const auto half = static_cast<index_t>(theta_.size());
    for (index_t k = 0; k < half; ++k) {
      const auto [c, sn] = detail::angle_cos_sin(s, theta_[static_cast<std::size_t>(k)]);
      const T ct = static_cast<T>(c), st = static_cast<T>(sn);
      const auto [i, j] = pair(k);
      const V a = x[i], b = x[j];
      y[i] = a * ct - b * st;
      y[j] = b * ct + a * st;
    }
    for (index_t i = 2 * half; i < d_; ++i) y[i] = x[i];
  }

  /// The learnable parameters are the frequencies θ (docs/training.md): θ.size() of them.
  [[nodiscard]] index_t parameter_count() const noexcept { return static_cast<index_t>(theta_.size()); }
  [[nodiscard]] std::vector<double> parameters() const { return theta_; }
  /// The same Λ (width, pairing) with frequencies `theta` (validated as by the constructor).
  [[nodiscard]] rotation with_parameters(std::span<const double> theta) const {
    return rotation(d_, std::vector<double>(theta.begin(), theta.end()), pairing_);
  }

  /**
   * Adds dL/dθ of one row to `grad` (θ.size() entries), given y = Λ⁽ˢ⁾x and gy = dL/dy.
   * Pair k's angle is φ = s·θ_k and dy_i/dφ = −y_j, dy_j/dφ = y_i, so
   * dL/dθ_k = s·Re(conj(gy_j)·y_i − conj(gy_i)·y_j), in double.
   */
  template <class V>
  void accumulate_gradient(position_t s, const V* y, const V* gy, double* grad) const noexcept {
    const auto sd = static_cast<double>(s);
    for (index_t k = 0; k < parameter_count(); ++k) {
      const auto [i, j] = pair(k);
      grad[k] += sd * (detail::real_inner(gy[j], y[i]) - detail::real_inner(gy[i], y[j]));
    }
  }

  [[nodiscard]] dense_matrix<T> matrix(position_t s) const {
    dense_matrix<T> m = dense_matrix<T>::Identity(d_, d_);
    for (index_t k = 0; k < static_cast<index_t>(theta_.size()); ++k) {
      const auto [c, sn] = detail::angle_cos_sin(s, theta_[static_cast<std::size_t>(k)]);
      const auto [i, j] = pair(k);
      m(i, i) = static_cast<T>(c);
      m(i, j) = static_cast<T>(-sn);
      m(j, i) = static_cast<T>(sn);
      m(j, j) = static_cast<T>(c);
    }
    return m;
  }

 private:
  static index_t require_at_least_two(index_t d) {
    detail::require_shape(d >= 2, "lrpe::lambda::rotation", "dim", "must be >= 2 to rotate a pair", d);
    detail::require_max_dim(d, "lrpe::lambda::rotation", "dim");  // before theta_a allocates for it
    return d;
  }

  index_t d_;
  std::vector<double> theta_;
  pairing pairing_;
};

}  // namespace lambda
}  // namespace v0
}  // namespace lrpe
