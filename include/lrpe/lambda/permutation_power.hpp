// SPDX-License-Identifier: MIT
/**
 * @file permutation_power.hpp
 * Λ⁽ˢ⁾ = the s-th power of a permutation π (LRPE Solution 3; PermuteFormer):
 * (Λ⁽ˢ⁾ x)[j] = x[π^s(j)].
 *
 * No table of powers: π is decomposed into cycles once; for j at place p of a cycle c of length
 * ℓ, π^s(j) = c[(p + s) mod ℓ]. Applying Λ⁽ˢ⁾ costs O(d) for any s ∈ ℤ, negative included.
 * Λ⁽ˢ⁾ Λ⁽ᵗ⁾ = Λ⁽ˢ⁺ᵗ⁾ and Λ⁽ˢ⁾ᵀ = Λ⁽⁻ˢ⁾, hence Λ⁽ˢ⁾ᵀ Λ⁽ᵗ⁾ = Λ⁽ᵗ⁻ˢ⁾.
 */
#pragma once

#include <lrpe/core/random.hpp>
#include <lrpe/detail/permutation_check.hpp>

#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace lambda {

/**
 * Powers of one permutation π, by cycle decomposition.
 * @tparam T float or double.
 */
template <real_scalar T>
class permutation_power {
 public:
  using scalar = T;
  static constexpr bool is_complex = false;

  /// @throws shape_error if π is empty; parameter_error if π is not a bijection of 0..d−1.
  explicit permutation_power(std::span<const index_t> pi) : pi_(pi.begin(), pi.end()) {
    detail::require_bijection(pi, "lrpe::lambda::permutation_power", "pi");
    decompose();
  }
  explicit permutation_power(const std::vector<index_t>& pi)
      : permutation_power(std::span<const index_t>(pi)) {}

  /// A uniformly random π from `lrpe::generator(seed).permutation(d)`.
  static permutation_power seeded(index_t d, std::uint64_t seed) {
    detail::require_dim(d, "lrpe::lambda::permutation_power::seeded");
    return permutation_power(generator(seed).permutation(d));
  }

  [[nodiscard]] index_t dim() const noexcept { return static_cast<index_t>(pi_.size()); }
  [[nodiscard]] std::span<const index_t> indices() const noexcept { return pi_; }
  /// Number of cycles of π.
  [[nodiscard]] index_t cycle_count() const noexcept { return static_cast<index_t>(cycle_start_.size()) - 1; }

  /// π^s(j) for any s ∈ ℤ.
  /// @throws shape_error unless 0 ≤ j < dim().
  [[nodiscard]] index_t power(position_t s, index_t j) const {
    detail::require_shape(j >= 0 && j < dim(), "lrpe::lambda::permutation_power::power", "j",
                          detail::lazy_concat("must be in [0, dim() = ", dim(), ")"), j);
    const index_t c = cycle_of_[static_cast<std::size_t>(j)];
    const index_t start = cycle_start_[static_cast<std::size_t>(c)];
    const index_t len = cycle_start_[static_cast<std::size_t>(c) + 1] - start;
    const index_t shift = reduce(s, len);
    index_t p = place_[static_cast<std::size_t>(j)] + shift;
    if (p >= len) p -= len;
    return elems_[static_cast<std::size_t>(start + p)];
  }

  /// y[j] = x[π^s(j)], O(d): one modulo per cycle.
  template <class V>
  void apply(position_t s, const V* x, V* y) const noexcept {
    const index_t cycles = cycle_count();
    for (index_t c = 0; c < cycles; ++c) {
      const index_t start = cycle_start_[static_cast<std::size_t>(c)];
      const index_t len = cycle_start_[static_cast<std::size_t>(c) + 1] - start;
      const index_t* cyc = elems_.data() + start;
      index_t src = reduce(s, len);
      for (index_t p = 0; p < len; ++p) {
        y[cyc[p]] = x[cyc[src]];
        if (++src == len) src = 0;
      }
    }
  }

  [[nodiscard]] dense_matrix<T> matrix(position_t s) const {
    dense_matrix<T> m = dense_matrix<T>::Zero(dim(), dim());
    for (index_t j = 0; j < dim(); ++j) m(j, power(s, j)) = T(1);
    return m;
  }

 private:
  /// s mod len in [0, len), for any sign of s.
  static index_t reduce(position_t s, index_t len) noexcept {
    const auto r = static_cast<index_t>(s % static_cast<position_t>(len));
    return r < 0 ? r + len : r;
  }

  void decompose() {
    const std::size_t d = pi_.size();
    cycle_of_.assign(d, -1);
    place_.assign(d, 0);
    elems_.clear();
    elems_.reserve(d);
    cycle_start_.clear();
    for (std::size_t j0 = 0; j0 < d; ++j0) {
      if (cycle_of_[j0] >= 0) continue;
      const auto c = static_cast<index_t>(cycle_start_.size());
      cycle_start_.push_back(static_cast<index_t>(elems_.size()));
      // The cycle lists j0, π(j0), π²(j0), ... so that π^s(elem[p]) = elem[p + s].
      index_t j = static_cast<index_t>(j0), p = 0;
      do {
        cycle_of_[static_cast<std::size_t>(j)] = c;
        place_[static_cast<std::size_t>(j)] = p++;
        elems_.push_back(j);
        j = pi_[static_cast<std::size_t>(j)];
      } while (j != static_cast<index_t>(j0));
    }
    cycle_start_.push_back(static_cast<index_t>(elems_.size()));
  }

  std::vector<index_t> pi_;
  std::vector<index_t> cycle_of_;     // cycle id of each feature
  std::vector<index_t> place_;        // place of each feature in its cycle
  std::vector<index_t> elems_;        // cycles, concatenated
  std::vector<index_t> cycle_start_;  // offsets into elems_, one past the end last
};

}  // namespace lambda
}  // namespace v0
}  // namespace lrpe
