// Helpers shared by the attention tests: reproducible random matrices and a scale-free error
// against a long-double reference. Tolerances stay in each test file (they differ per kernel).
#pragma once

#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <algorithm>
#include <cmath>

namespace attention_test {

template <class T>
using rm = lrpe::row_matrix<T>;
using ld = long double;

/// r×c matrix of N(0, σ²) entries from `g`.
template <class T>
rm<T> random_matrix(lrpe::generator& g, lrpe::index_t r, lrpe::index_t c, double sigma = 1.0) {
  rm<T> m(r, c);
  for (lrpe::index_t i = 0; i < r; ++i)
    for (lrpe::index_t j = 0; j < c; ++j) m(i, j) = static_cast<T>(sigma * g.normal());
  return m;
}

/// max |a − b| / (1 + max |b|) over all entries (scale-free; sums grow with n); ∞ if a has a
/// non-finite entry.
template <class T>
double rel_error(const rm<T>& a, const rm<ld>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  ld err = 0, mag = 0;
  for (lrpe::index_t i = 0; i < a.rows(); ++i)
    for (lrpe::index_t j = 0; j < a.cols(); ++j) {
      if (!std::isfinite(static_cast<double>(a(i, j)))) return INFINITY;
      err = std::max(err, std::abs(static_cast<ld>(a(i, j)) - b(i, j)));
      mag = std::max(mag, std::abs(b(i, j)));
    }
  return static_cast<double>(err / (1 + mag));
}

}  // namespace attention_test
