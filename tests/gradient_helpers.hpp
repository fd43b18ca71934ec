// SPDX-License-Identifier: MIT
// Shared by the gradient tests: random rows, a gradient's native (complex) form, central
// differences of a long-double function on the exact steps taken, and relative errors.
#pragma once

#include "reference.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace grad_test {

using ref::cld;
using ref::ld;
using lrpe::index_t;
using cvec = Eigen::Matrix<cld, Eigen::Dynamic, 1>;

template <class T>
lrpe::row_matrix<T> uniform(index_t rows, index_t cols, std::uint64_t seed) {
  lrpe::generator g(seed);
  lrpe::row_matrix<T> m(rows, cols);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) m(i, j) = static_cast<T>(2 * g.uniform01() - 1);
  return m;
}

/// g_i as d complex entries from the [Re, Im] halves of a feature gradient (Im = 0 when real).
template <class E, class T>
cvec native(const E& e, const lrpe::row_matrix<T>& g, index_t i) {
  const index_t d = e.dim();
  cvec z(d);
  for (index_t j = 0; j < d; ++j) z(j) = E::is_complex ? cld(g(i, j), g(i, d + j)) : cld(g(i, j), 0);
  return z;
}

/// d/dw_j of f(w) by the three-point quotient on the exact steps taken (w ± h is rarely a double),
/// extrapolated from h and h/2 (Richardson): f evaluated in long double.
template <class F>
ld derivative(std::vector<double> w, std::size_t j, double h, const F& f) {
  const ld at = f(w);
  const auto quotient = [&](double step) {
    const double w0 = w[j], hi = w0 + step, lo = w0 - step;
    REQUIRE(hi != w0);
    const ld a = ld(hi) - w0, b = ld(w0) - lo;
    w[j] = hi;
    const ld up = f(w);
    w[j] = lo;
    const ld down = f(w);
    w[j] = w0;
    return (b * b * up - a * a * down + (a * a - b * b) * at) / (a * b * (a + b));
  };
  return (4 * quotient(h / 2) - quotient(h)) / 3;
}

/// max_j |got_j − want_j| / max_j |want_j|.
inline ld relative_error(const std::vector<double>& got, const std::vector<ld>& want) {
  REQUIRE(got.size() == want.size());
  ld scale = 0, err = 0;
  for (std::size_t j = 0; j < got.size(); ++j) {
    scale = std::max(scale, std::abs(want[j]));
    err = std::max(err, std::abs(ld(got[j]) - want[j]));
  }
  return scale > 0 ? err / scale : err;
}

/// P = I − 2vvᵀ/‖v‖² from a raw (unnormalised) long-double vector.
inline ref::mat householder_from(const std::vector<double>& v) {
  const auto d = index_t(v.size());
  ld n2 = 0;
  for (double x : v) n2 += ld(x) * ld(x);
  ref::mat m = ref::mat::Identity(d, d);
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) m(i, j) -= 2 * ld(v[std::size_t(i)]) * ld(v[std::size_t(j)]) / n2;
  return m;
}

}  // namespace grad_test
