// SPDX-License-Identifier: MIT
// Canonical form of the multiplicative encodings (every preset, RoPE, PermuteFormer, LRPE
// cosine): direct == canonical (P, Λ⁽ᵗ⁻ˢ⁾, Pᴴ applied as factors) == dense == features == an
// oracle qᵀ Re(Pᴴ Λ⁽ᵗ⁻ˢ⁾ P) k formed here in long double from the policies' matrices (and an
// explicit cos/sin sum for RoPE); shift invariance. Shared helpers: canonical_helpers.hpp.
#include "canonical_helpers.hpp"

#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

// =================================================================== multiplicative (LRPE)

TEST_CASE_TEMPLATE("canonical: RoPE (GPT-J) direct == canonical == dense == features == explicit cos/sin sum", T, float,
                   double) {
  const std::uint64_t seed = 101;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 10;
  lrpe::rope_gptj<T> e(d);
  const auto theta = lrpe::freq::theta_a(d);
  auto naive = [&](const T* q, position_t s, const T* k, position_t t) {
    ld acc = 0;
    for (index_t j = 0; j < d / 2; ++j) {
      const ld phi = static_cast<ld>(t - s) * static_cast<ld>(theta[static_cast<std::size_t>(j)]);
      const ld q0 = q[2 * j], q1 = q[2 * j + 1], k0 = k[2 * j], k1 = k[2 * j + 1];
      acc += std::cos(phi) * (q0 * k0 + q1 * k1) + std::sin(phi) * (q1 * k0 - q0 * k1);
    }
    return acc;
  };
  auto mag = [&](const T* q, const T* k) { return 2 * abs_dot(q, k, d); };
  check_variant<T>(cn::multiplicative(e), naive, mag, 1, r);
  check_variant<T>(e, naive, mag, 1, r);  // a bare encoder works everywhere a variant does
}

namespace {
/// Oracle for any encoder: qᵀ Re(Pᴴ Λ⁽ᵗ⁻ˢ⁾ P) k from the policies' dense matrices, long double.
template <class T, class E>
void check_encoder(const E& e, rng& r) {
  const index_t d = e.dim();
  auto naive = [&](const T* q, position_t s, const T* k, position_t t) {
    using C = std::complex<ld>;
    const auto p = e.p().matrix().template cast<typename E::value_type>().eval();
    const auto l = e.lambda().matrix(t - s).template cast<typename E::value_type>().eval();
    Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic> pl(d, d), ll(d, d);
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) {
        pl(i, j) = C(p(i, j));
        ll(i, j) = C(l(i, j));
      }
    const auto w = (pl.adjoint() * ll * pl).eval();
    ld acc = 0;
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) acc += static_cast<ld>(q[i]) * w(i, j).real() * static_cast<ld>(k[j]);
    return acc;
  };
  auto mag = [&](const T* q, const T* k) {
    ld a = 0, b = 0;
    for (index_t i = 0; i < d; ++i) { a += std::abs(static_cast<ld>(q[i])); b += std::abs(static_cast<ld>(k[i])); }
    return 4 * a * b;
  };
  check_variant<T>(cn::multiplicative(e), naive, mag, 1, r, 700, 12);
}
}  // namespace

TEST_CASE_TEMPLATE("canonical: every preset's canonical form (P^H Λ P as factors) == its encoder == P^H Λ P dense",
                   T, float, double) {
  const std::uint64_t seed = 202;
  INFO("seed = " << seed);
  rng r(seed);
  SUBCASE("type1") { check_encoder<T>(lrpe::type1<T>(8), r); }
  SUBCASE("type2") { check_encoder<T>(lrpe::type2<T>(7), r); }
  SUBCASE("type3") { check_encoder<T>(lrpe::type3<T>(6), r); }
  SUBCASE("type4") { check_encoder<T>(lrpe::type4<T>(9), r); }
  SUBCASE("type5") { check_encoder<T>(lrpe::type5<T>(8), r); }
  SUBCASE("type6") { check_encoder<T>(lrpe::type6<T>(6), r); }
  SUBCASE("type7") { check_encoder<T>(lrpe::type7<T>(8), r); }
  SUBCASE("type8") { check_encoder<T>(lrpe::type8<T>(8), r); }
  SUBCASE("rope_gptj") { check_encoder<T>(lrpe::rope_gptj<T>(8), r); }
  SUBCASE("rope_neox") { check_encoder<T>(lrpe::rope_neox<T>(8, 10000.0, 6), r); }
  SUBCASE("permuteformer") { check_encoder<T>(lrpe::permuteformer<T>(8), r); }
  SUBCASE("LRPE cosine: identity P x complex phase (real P, complex Λ)") {
    check_encoder<T>(lrpe::encoder<lrpe::p::identity<T>, lrpe::lambda::complex_phase<T>>(
                         lrpe::p::identity<T>(6), lrpe::lambda::complex_phase<T>(6)),
                     r);
  }
}

