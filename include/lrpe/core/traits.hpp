// SPDX-License-Identifier: MIT
/**
 * @file traits.hpp
 * Scalar and complex traits, and the small dense-matrix aliases used across lrpe.
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <Eigen/Core>

#include <complex>
#include <concepts>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

/// The real floating-point scalars lrpe computes in.
template <class T>
concept real_scalar = std::same_as<T, float> || std::same_as<T, double> ||
                      std::same_as<T, long double>;

/// True for `std::complex<T>`.
template <class T>
inline constexpr bool is_complex_v = false;
template <class T>
inline constexpr bool is_complex_v<std::complex<T>> = true;

namespace detail {
template <class T>
struct real_of {
  using type = T;
};
template <class T>
struct real_of<std::complex<T>> {
  using type = T;
};
}  // namespace detail

/// The real type underlying `T` (`T` itself for real types).
template <class T>
using real_t = typename detail::real_of<T>::type;

/// `std::complex<T>` when `Complex`, else `T`.
template <class T, bool Complex>
using maybe_complex_t = std::conditional_t<Complex, std::complex<T>, T>;

/// Dense column-major matrix (what `relative_matrix` and friends return).
template <class S>
using dense_matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;

/// Dense row-major matrix: one row per position, the layout of Q, K, V.
template <class S>
using row_matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Dense column vector.
template <class S>
using dense_vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;

namespace detail {
/// Real part that also works on real types.
template <class S>
constexpr real_t<S> real_part(const S& x) {
  if constexpr (is_complex_v<S>) return x.real(); else return x;
}
/// Complex conjugate that also works on real types (identity there).
template <class S>
constexpr S conj(const S& x) {
  if constexpr (is_complex_v<S>) return std::conj(x); else return x;
}
/// Re(conj(a)·b) in double: the real inner product of two entries (real or complex), the form
/// every gradient takes, since dL = Re(conj(∂L/∂y)·dy) for a real loss L.
template <class S>
constexpr double real_inner(const S& a, const S& b) {
  if constexpr (is_complex_v<S>)
    return static_cast<double>(a.real()) * static_cast<double>(b.real()) +
           static_cast<double>(a.imag()) * static_cast<double>(b.imag());
  else
    return static_cast<double>(a) * static_cast<double>(b);
}
}  // namespace detail

}  // namespace v0
}  // namespace lrpe
