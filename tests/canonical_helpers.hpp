// SPDX-License-Identifier: MIT
// Helpers shared by the canonical-form tests (test_canonical.cpp, test_canonical_lrpe.cpp):
// random data, long-double dot products and the all-forms-agree check. The oracles the tests
// compare against are written in the test files, from REFERENCE.md, not from lrpe/canonical.
#pragma once

#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

namespace {

using lrpe::index_t;
using lrpe::position_t;
using ld = long double;
namespace cn = lrpe::canonical;

template <class T>
using rows_t = lrpe::row_matrix<T>;

// ----------------------------------------------------------------------------- random data
struct rng {
  lrpe::generator g;
  explicit rng(std::uint64_t seed) : g(seed) {}
  double uniform(double lo, double hi) { return lo + (hi - lo) * g.uniform01(); }
  position_t integer(position_t lo, position_t hi) {
    return lo + static_cast<position_t>(g.below(static_cast<std::uint64_t>(hi - lo + 1)));
  }
  template <class T>
  std::vector<T> vec(index_t n) {
    std::vector<T> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<T>(uniform(-1, 1));
    return v;
  }
  template <class T>
  rows_t<T> mat(index_t r, index_t c, double scale = 1) {
    rows_t<T> m(r, c);
    for (index_t i = 0; i < r; ++i)
      for (index_t j = 0; j < c; ++j) m(i, j) = static_cast<T>(scale * uniform(-1, 1));
    return m;
  }
};

template <class T>
ld dot_ld(const T* a, const T* b, index_t n) {
  ld acc = 0;
  for (index_t i = 0; i < n; ++i) acc += static_cast<ld>(a[i]) * static_cast<ld>(b[i]);
  return acc;
}
template <class T>
ld abs_dot(const T* a, const T* b, index_t n) {
  ld acc = 0;
  for (index_t i = 0; i < n; ++i) acc += std::abs(static_cast<ld>(a[i]) * static_cast<ld>(b[i]));
  return acc;
}

template <class T>
double eps_of() { return std::is_same_v<T, float> ? 2e-5 : 1e-12; }

/// Re(q̂ᵀ W k̂) from the dense view, in long double.
template <class CF, class T>
ld dense_view_score(const CF& cf, const T* q, position_t s, const T* k, position_t t) {
  const auto qh = cf.q_hat(q);
  const auto kh = cf.k_hat(k);
  const auto w = cf.dense_w(t - s);
  REQUIRE(w.rows() == qh.size());
  REQUIRE(w.cols() == kh.size());
  ld acc = 0;
  for (index_t i = 0; i < w.rows(); ++i)
    for (index_t j = 0; j < w.cols(); ++j) {
      const auto wij = w(i, j);
      ld re;
      if constexpr (lrpe::is_complex_v<std::remove_cvref_t<decltype(wij)>>) re = static_cast<ld>(wij.real());
      else re = static_cast<ld>(wij);
      acc += static_cast<ld>(qh[i]) * re * static_cast<ld>(kh[j]);
    }
  return acc;
}

/**
 * The common check: for `trials` random (q, s, k, t), the naive oracle `naive(q, s, k, t)`
 * (long double) equals the direct score, the canonical score, the dense canonical score, the
 * features' dot product (linearizable variants) and the shifted score (s + c, t + c).
 * `mag(q, k)` bounds |terms| for the tolerance.
 */
template <class T, class V, class Naive, class Mag>
void check_variant(const V& v, Naive naive, Mag mag, std::size_t m, rng& r, position_t pos_range = 700,
                   int trials = 30) {
  const index_t d = v.dim();
  const auto cf = cn::canonical_form_of(v);
  CHECK(cf.size() == m);
  CHECK(cf.dim() == d);
  for (int trial = 0; trial < trials; ++trial) {
    const auto q = r.template vec<T>(d);
    const auto k = r.template vec<T>(d);
    const position_t s = r.integer(-pos_range, pos_range);
    const position_t t = (trial % 5 == 0) ? s : r.integer(-pos_range, pos_range);
    const position_t c = r.integer(-1'000'000, 1'000'000);
    CAPTURE(trial);
    CAPTURE(s);
    CAPTURE(t);
    CAPTURE(c);
    const ld ref = naive(q.data(), s, k.data(), t);
    const double tol = eps_of<T>() * static_cast<double>(mag(q.data(), k.data()) + 1);
    const double direct = v.score(q.data(), s, k.data(), t);
    CHECK(std::abs(direct - static_cast<double>(ref)) <= tol);
    CHECK(std::abs(cf.score(q.data(), s, k.data(), t) - static_cast<double>(ref)) <= tol);
    CHECK(std::abs(static_cast<double>(dense_view_score(cf, q.data(), s, k.data(), t) - ref)) <= tol);
    CHECK(std::abs(cf.dense_score(q.data(), s, k.data(), t) - static_cast<double>(ref)) <= tol);
    // angles are formed as position·θ in double: one rounding of |position|·ε absolute error
    const double far = static_cast<double>(std::llabs(s + c) + std::llabs(t + c) + std::llabs(s) + std::llabs(t));
    const double shift_tol = tol + 8 * far * std::numeric_limits<double>::epsilon() *
                                       static_cast<double>(mag(q.data(), k.data()) + 1);
    CHECK(std::abs(v.score(q.data(), s + c, k.data(), t + c) - direct) <= shift_tol);
    if constexpr (cn::is_linearizable_v<V>) {
      const index_t f = cn::feature_dim(v);
      std::vector<T> fq(static_cast<std::size_t>(f)), fk(fq.size());
      cn::features(v, cn::side::query, q.data(), s, fq.data());
      cn::features(v, cn::side::key, k.data(), t, fk.data());
      CHECK(std::abs(static_cast<double>(dot_ld(fq.data(), fk.data(), f) - ref)) <= tol);
    }
  }
}

}  // namespace
