// SPDX-License-Identifier: MIT
// Independent long-double references for the tests: dense matrices built from the policies'
// *parameters* (v, θ, π, pairing) with textbook formulas, never with the library's own matrix()
// or apply(). Shared by the test translation units.
#pragma once

#include <lrpe/lrpe.hpp>

#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <numbers>
#include <vector>

namespace ref {

using ld = long double;
using cld = std::complex<long double>;
using mat = Eigen::Matrix<cld, Eigen::Dynamic, Eigen::Dynamic>;

inline constexpr ld pi = std::numbers::pi_v<long double>;

/**
 * e^{i s θ} of the exact angle s·θ (s any int64, θ the library's double frequency), in long
 * double, by a method unlike the library's (detail/angle.hpp): |s| is cut into chunks of
 * digits(long double) − 53 bits (11 on x86's 80-bit long double), so each chunk·θ is exact in
 * long double; each is reduced by the libm's long-double cos/sin and the rotations multiplied.
 * About 1e-19 from the exact value on x86 at every position (checked against 400-bit mpmath
 * while writing it); where long double is double, one bit per chunk and ~1e-14.
 */
inline cld cis(lrpe::position_t s, double theta) {
  constexpr int bits = std::numeric_limits<ld>::digits - 53 > 0 ? std::numeric_limits<ld>::digits - 53 : 1;
  constexpr unsigned long long mask = (1ULL << bits) - 1;
  // |s| without overflow at s = −2^63.
  unsigned long long m = s < 0 ? 0ULL - static_cast<unsigned long long>(s) : static_cast<unsigned long long>(s);
  const ld sign = s < 0 ? -1 : 1;
  cld r = 1;
  for (int shift = 0; m != 0; shift += bits, m >>= bits) {
    const ld part = sign * std::ldexp(static_cast<ld>(m & mask), shift) * static_cast<ld>(theta);
    r *= cld(std::cos(part), std::sin(part));
  }
  return r;
}

/// The test seed, printed once so a failure can be reproduced.
inline std::uint64_t seed(std::uint64_t s) {
  static bool printed = false;
  if (!printed) { std::printf("[lrpe tests] base seed %llu\n", static_cast<unsigned long long>(s)); printed = true; }
  return s;
}

// ---- P ----
template <class T> mat P(const lrpe::p::identity<T>& p) { return mat::Identity(p.dim(), p.dim()); }
template <class T> mat P(const lrpe::p::householder<T>& p) {
  const auto v = p.vector();
  const auto d = p.dim();
  ld n2 = 0;
  for (auto x : v) n2 += ld(x) * ld(x);
  mat m = mat::Identity(d, d);
  for (lrpe::index_t i = 0; i < d; ++i)
    for (lrpe::index_t j = 0; j < d; ++j) m(i, j) -= 2 * ld(v[std::size_t(i)]) * ld(v[std::size_t(j)]) / n2;
  return m;
}
template <class T> mat P(const lrpe::p::permutation<T>& p) {
  const auto pi_ = p.indices();
  mat m = mat::Zero(p.dim(), p.dim());
  for (std::size_t j = 0; j < pi_.size(); ++j) m(lrpe::index_t(j), pi_[j]) = 1;  // (Px)[j] = x[π(j)]
  return m;
}
template <class T> mat P(const lrpe::p::dft<T>& p) {
  const auto d = p.dim();
  mat m(d, d);
  for (lrpe::index_t k = 0; k < d; ++k)
    for (lrpe::index_t n = 0; n < d; ++n)
      m(k, n) = std::polar(1 / std::sqrt(ld(d)), -2 * pi * ld(k) * ld(n) / ld(d));
  return m;
}
template <class T> mat P(const lrpe::p::dct<T>& p) {
  const auto d = p.dim();
  mat m(d, d);
  for (lrpe::index_t k = 0; k < d; ++k)
    for (lrpe::index_t n = 0; n < d; ++n)
      m(k, n) = std::sqrt((k == 0 ? ld(1) : ld(2)) / ld(d)) * std::cos(pi * ld(2 * n + 1) * ld(k) / ld(2 * d));
  return m;
}

template <class S> mat P(const lrpe::p::dense<S>& p) { return p.matrix().template cast<cld>(); }  // the definition

// ---- Λ ----
template <class T> mat Lambda(const lrpe::lambda::identity<T>& l, lrpe::position_t) { return mat::Identity(l.dim(), l.dim()); }
template <class T> mat Lambda(const lrpe::lambda::rotation<T>& l, lrpe::position_t s) {
  const auto d = l.dim();
  const auto th = l.frequencies();
  const auto e = lrpe::index_t(2 * th.size());
  mat m = mat::Identity(d, d);
  for (lrpe::index_t k = 0; k < e / 2; ++k) {
    const lrpe::index_t i = l.pair_mode() == lrpe::pairing::interleaved ? 2 * k : k;
    const lrpe::index_t j = l.pair_mode() == lrpe::pairing::interleaved ? 2 * k + 1 : k + e / 2;
    const cld z = cis(s, th[std::size_t(k)]);
    m(i, i) = z.real(); m(i, j) = -z.imag();
    m(j, i) = z.imag(); m(j, j) = z.real();
  }
  return m;
}
template <class T> mat Lambda(const lrpe::lambda::complex_phase<T>& l, lrpe::position_t s) {
  mat m = mat::Identity(l.dim(), l.dim());
  const auto th = l.frequencies();
  for (std::size_t j = 0; j < th.size(); ++j) m(lrpe::index_t(j), lrpe::index_t(j)) = cis(s, th[j]);
  return m;
}
/// π^s(j) by walking j's cycle: find its length, then step (s mod len) times (backwards via π⁻¹ never
/// needed: s mod len ≥ 0).
inline lrpe::index_t cycle_power(std::span<const lrpe::index_t> pi_, lrpe::position_t s, lrpe::index_t j) {
  lrpe::index_t len = 1;
  for (lrpe::index_t x = pi_[std::size_t(j)]; x != j; x = pi_[std::size_t(x)]) ++len;
  lrpe::position_t r = s % len;
  if (r < 0) r += len;
  lrpe::index_t x = j;
  for (lrpe::position_t i = 0; i < r; ++i) x = pi_[std::size_t(x)];
  return x;
}
template <class T> mat Lambda(const lrpe::lambda::permutation_power<T>& l, lrpe::position_t s) {
  mat m = mat::Zero(l.dim(), l.dim());
  for (lrpe::index_t j = 0; j < l.dim(); ++j) m(j, cycle_power(l.indices(), s, j)) = 1;
  return m;
}

/// Reference M_s = Λ⁽ˢ⁾ P and W_s = Pᴴ Λ⁽ˢ⁾ P of any encoder built from library policies.
template <class E> mat M(const E& e, lrpe::position_t s) { return Lambda(e.lambda(), s) * P(e.p()); }
template <class E> mat W(const E& e, lrpe::position_t s) {
  const mat p = P(e.p());
  return p.adjoint() * Lambda(e.lambda(), s) * p;
}

template <class A, class B>
long double max_abs_diff(const A& a, const B& b) {
  return (a.template cast<cld>() - b.template cast<cld>()).cwiseAbs().maxCoeff();
}

/// Uniform [-1, 1) matrix from lrpe::generator (reproducible).
template <class T>
lrpe::row_matrix<T> random_rows(lrpe::index_t n, lrpe::index_t d, std::uint64_t s) {
  lrpe::generator g(s);
  lrpe::row_matrix<T> m(n, d);
  for (lrpe::index_t i = 0; i < n; ++i)
    for (lrpe::index_t j = 0; j < d; ++j) m(i, j) = static_cast<T>(2 * g.uniform01() - 1);
  return m;
}

}  // namespace ref
