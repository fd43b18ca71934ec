// SPDX-License-Identifier: MIT
/**
 * @file permutation.hpp
 * Permutation P policies: an arbitrary permutation π (y[j] = x[π(j)]) and the paper's
 * odd-even permutation (LRPE Types 5–7).
 *
 * Convention (gather): (P x)[j] = x[π(j)], i.e. P has a one at (j, π(j)). Pᵀ = P⁻¹ scatters back.
 */
#pragma once

#include <lrpe/core/random.hpp>
#include <lrpe/detail/permutation_check.hpp>

#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace p {

/**
 * An arbitrary permutation of the d features, y[j] = x[π(j)].
 * @tparam T float or double.
 */
template <real_scalar T>
class permutation {
 public:
  using scalar = T;
  using output_type = T;
  static constexpr bool is_complex = false;
  static constexpr bool is_real_orthogonal = true;

  /// @throws shape_error if π is empty, parameter_error if π is not a bijection of 0..d-1.
  explicit permutation(std::span<const index_t> pi) : pi_(pi.begin(), pi.end()) {
    detail::require_bijection(pi, "lrpe::p::permutation", "pi");
  }
  explicit permutation(const std::vector<index_t>& pi)
      : permutation(std::span<const index_t>(pi)) {}

  /// A uniformly random π from `lrpe::generator(seed).permutation(d)`.
  static permutation seeded(index_t d, std::uint64_t seed) {
    detail::require_dim(d, "lrpe::p::permutation::seeded");
    return permutation(generator(seed).permutation(d));
  }

  [[nodiscard]] index_t dim() const noexcept { return static_cast<index_t>(pi_.size()); }
  /// π as an index array.
  [[nodiscard]] std::span<const index_t> indices() const noexcept { return pi_; }

  /// y[j] = x[π(j)].
  template <class V>
  void apply(const V* x, V* y) const noexcept {
    for (std::size_t j = 0; j < pi_.size(); ++j) y[j] = x[pi_[j]];
  }
  /// x[π(j)] = y[j].
  template <class V>
  void apply_adjoint(const V* y, V* x) const noexcept {
    for (std::size_t j = 0; j < pi_.size(); ++j) x[pi_[j]] = y[j];
  }

  [[nodiscard]] dense_matrix<T> matrix() const {
    dense_matrix<T> m = dense_matrix<T>::Zero(dim(), dim());
    for (std::size_t j = 0; j < pi_.size(); ++j) m(static_cast<index_t>(j), pi_[j]) = T(1);
    return m;
  }

 private:
  std::vector<index_t> pi_;
};

/// The odd-even index map: out[2k] = x[k], out[2k+1] = x[h+k], h = d − ⌊d/2⌋ (odd d: the middle
/// element x[h−1] goes last).
inline std::vector<index_t> odd_even_indices(index_t d) {
  detail::require_dim(d, "lrpe::p::odd_even_indices");
  const index_t half = d / 2;
  const index_t h = d - half;
  std::vector<index_t> pi(static_cast<std::size_t>(d));
  for (index_t k = 0; k < half; ++k) {
    pi[static_cast<std::size_t>(2 * k)] = k;
    pi[static_cast<std::size_t>(2 * k + 1)] = h + k;
  }
  if (d % 2 == 1) pi[static_cast<std::size_t>(d - 1)] = h - 1;
  return pi;
}

/**
 * The paper's odd-even permutation: interleaves the two halves of the row.
 *
 * Followed by interleaved (GPT-J) rotation blocks it gives exactly split-half (GPT-NeoX,
 * HF LLaMA `rotate_half`) RoPE scores, which is why Type 5 equals `rope_neox` for even d (for odd
 * d the pairs differ: x[k] meets x[k + ⌈d/2⌉] here, x[k + ⌊d/2⌋] in rope_neox).
 */
template <real_scalar T>
class odd_even : public permutation<T> {
 public:
  explicit odd_even(index_t d) : permutation<T>(odd_even_indices(d)) {}
};

}  // namespace p
}  // namespace v0
}  // namespace lrpe
