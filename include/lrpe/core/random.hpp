// SPDX-License-Identifier: MIT
/**
 * @file random.hpp
 * The documented, portable generator behind every seeded parameter (Householder vectors,
 * random permutations). `std::mt19937` is portable but `std::normal_distribution` and
 * `std::shuffle` are not (their algorithms are implementation-defined), so lrpe specifies its
 * own:
 *
 * - state: xoshiro256** seeded by four outputs of splitmix64(seed);
 * - `uniform01()`: the top 53 bits of a draw times 2^-53, in [0, 1);
 * - `below(n)`: an unbiased integer in [0, n): draws at or above the largest multiple of n
 *   are rejected, the rest reduced modulo n;
 * - `normal()`: Box–Muller in double, sqrt(-2 ln(1-u1)) cos(2π u2), one value per two draws;
 * - `permutation(d)`: Fisher–Yates from the last index down, swapping i with below(i+1).
 *
 * The integer streams are bit-identical everywhere; `normal()` relies on the platform's
 * `std::log`/`std::cos`, which agree to the last ulp on IEEE-754 platforms with a faithful libm.
 */
#pragma once

#include <lrpe/core/config.hpp>
#include <lrpe/core/error.hpp>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <vector>

namespace lrpe {
inline namespace v0 {

/// xoshiro256** seeded through splitmix64: lrpe's reproducible random source.
class generator {
 public:
  explicit constexpr generator(std::uint64_t seed) noexcept {
    for (auto& word : state_) word = splitmix64(seed);
  }

  /// Next 64 random bits.
  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  /// Uniform double in [0, 1) with 53 random bits.
  constexpr double uniform01() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Unbiased integer in [0, n), n >= 1 (rejection of the top partial block, then modulo).
  /// @throws parameter_error if n = 0 (the range is empty).
  constexpr std::uint64_t below(std::uint64_t n) {
    if (n == 0) detail::fail<parameter_error>("lrpe::generator::below", "n", "must be >= 1", n);
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // a multiple of n
    std::uint64_t x = next();
    while (x >= limit) x = next();
    return x % n;
  }

  /// Standard normal deviate (Box–Muller, cosine branch).
  double normal() noexcept {
    const double u1 = uniform01();
    const double u2 = uniform01();
    return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  /// A uniformly random permutation of 0..d-1 (Fisher–Yates). @throws parameter_error if d < 0.
  std::vector<index_t> permutation(index_t d) {
    if (d < 0) detail::fail<parameter_error>("lrpe::generator::permutation", "d", "must be >= 0", d);
    std::vector<index_t> p(static_cast<std::size_t>(d));
    std::iota(p.begin(), p.end(), index_t{0});
    for (index_t i = d - 1; i > 0; --i) {
      const auto j = static_cast<index_t>(below(static_cast<std::uint64_t>(i) + 1));
      std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
    }
    return p;
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  static constexpr std::uint64_t splitmix64(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_[4]{};
};

}  // namespace v0
}  // namespace lrpe
