// Helpers shared by the attention tests: reproducible random matrices and a scale-free error
// against a long-double reference. Tolerances stay in each test file (they differ per kernel).
#pragma once

#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>

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

/// Calls f(encoder, name) for every LRPE preset at width d (as its encoder<P, Λ> base).
template <class T, class F>
void for_each_preset(lrpe::index_t d, F&& f) {
  auto base = [](const auto& e) -> const auto& {
    using E = std::remove_cvref_t<decltype(e)>;
    return static_cast<const lrpe::encoder<typename E::p_type, typename E::lambda_type>&>(e);
  };
  f(base(lrpe::type1<T>(d)), "type1");
  f(base(lrpe::type2<T>(d)), "type2");
  f(base(lrpe::type3<T>(d)), "type3");
  f(base(lrpe::type4<T>(d)), "type4");
  f(base(lrpe::type5<T>(d)), "type5");
  f(base(lrpe::type6<T>(d)), "type6");
  f(base(lrpe::type7<T>(d)), "type7");
  f(base(lrpe::type8<T>(d)), "type8");
  f(base(lrpe::rope_gptj<T>(d)), "rope_gptj");
  f(base(lrpe::rope_neox<T>(d)), "rope_neox");
  f(base(lrpe::permuteformer<T>(d)), "permuteformer");
}

}  // namespace attention_test
