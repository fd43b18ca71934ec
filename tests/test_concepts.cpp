// SPDX-License-Identifier: MIT
// Compile-time tests: the concepts accept every library policy and reject malformed ones.
// Everything here is a static_assert; the single runtime case only records that it compiled.
#include <lrpe/lrpe.hpp>

#include <doctest/doctest.h>

namespace {

template <class T>
struct no_matrix_p {  // missing matrix()
  using scalar = T;
  using output_type = T;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 1; }
  void apply(const T*, T*) const {}
  void apply_adjoint(const T*, T*) const {}
};

template <class T>
struct int_scalar_lambda {  // scalar must be floating point
  using scalar = int;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 1; }
  void apply(lrpe::position_t, const int*, int*) const {}
  lrpe::dense_matrix<double> matrix(lrpe::position_t) const { return {}; }
};

template <class T>
struct positionless_lambda {  // apply without a position
  using scalar = T;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 1; }
  void apply(const T*, T*) const {}
  lrpe::dense_matrix<T> matrix(lrpe::position_t) const { return {}; }
};

template <class T>
struct wrong_output_p {  // output_type neither T nor complex<T>
  using scalar = T;
  using output_type = int;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 1; }
  void apply(const T*, int*) const {}
  void apply_adjoint(const int*, int*) const {}
  lrpe::dense_matrix<int> matrix() const { return {}; }
};

template <class T>
constexpr bool all_library_policies() {
  using namespace lrpe;
  static_assert(p_policy<p::identity<T>>);
  static_assert(p_policy<p::householder<T>>);
  static_assert(p_policy<p::permutation<T>>);
  static_assert(p_policy<p::odd_even<T>>);
  static_assert(p_policy<p::dct<T>>);
  static_assert(p_policy<p::dft<T>>);
  static_assert(p_policy<p::dense<T>>);
  static_assert(p_policy<p::dense<std::complex<T>>>);
  static_assert(lambda_policy<lambda::identity<T>>);
  static_assert(lambda_policy<lambda::rotation<T>>);
  static_assert(lambda_policy<lambda::complex_phase<T>>);
  static_assert(lambda_policy<lambda::permutation_power<T>>);
  static_assert(!p_policy<no_matrix_p<T>>);
  static_assert(!p_policy<wrong_output_p<T>>);
  static_assert(!lambda_policy<int_scalar_lambda<T>>);
  static_assert(!lambda_policy<positionless_lambda<T>>);
  static_assert(!p_policy<lambda::rotation<T>>);  // a Λ is not a P
  static_assert(!lambda_policy<p::householder<T>>);
  // Traits of the presets.
  static_assert(!type1<T>::is_complex && type8<T>::is_complex);
  static_assert(std::is_same_v<typename type8<T>::value_type, std::complex<T>>);
  static_assert(check::checkable_encoder<type4<T>>);
  static_assert(p::householder<T>::is_real_orthogonal && !p::dft<T>::is_real_orthogonal);
  return true;
}

static_assert(all_library_policies<float>());
static_assert(all_library_policies<double>());

}  // namespace

TEST_CASE("concepts accept the library's policies and reject malformed ones (compile time)") {
  CHECK(all_library_policies<float>());
}
