// SPDX-License-Identifier: MIT
/**
 * @file feature_map.hpp
 * Feature maps φ for linear attention, applied elementwise before the LRPE transform:
 * q̃_s = M_s φ(q_s), k̃_t = M_t φ(k_t) (the order of the reference code, REFERENCE.md).
 *
 * | map | φ(x) |
 * |---|---|
 * | `feature_maps::elu_plus_one` | x + 1 for x > 0, eˣ otherwise (1 + elu) |
 * | `feature_maps::relu` | max(x, 0) |
 * | `feature_maps::relu_eps{ε}` | max(x, 0) + ε (PermuteFormer, ε = 1e-3) |
 * | `feature_maps::identity` | x |
 *
 * Each map takes NaN to NaN (relu included: x < 0 ? 0 : x), so a NaN in q or k reaches the
 * output rows that see it, as in softmax attention.
 *
 * A user map is any `feature_map`: a callable `T(T)` applied elementwise (a lambda works), or a
 * type with a row-wise member `apply(const T* x, T* y, index_t d)` (width preserving). The
 * backward needs φ' too: an elementwise map with a member `derivative(x)`
 * (`differentiable_feature_map`).
 */
#pragma once

#include <lrpe/core/error.hpp>
#include <lrpe/core/traits.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

/// A feature map for rows of `T`: elementwise `T(T)` or row-wise `apply(x, y, d)`.
template <class F, class T>
concept feature_map =
    std::copy_constructible<F> &&
    (requires(const F& f, T x) {
      { f(x) } -> std::convertible_to<T>;
    } || requires(const F& f, const T* x, T* y, index_t d) { f.apply(x, y, d); });

namespace feature_maps {

/// φ(x) = 1 + elu(x): x + 1 for x > 0, eˣ otherwise (always > 0).
struct elu_plus_one {
  template <real_scalar T>
  T operator()(T x) const noexcept { return x > T(0) ? x + T(1) : std::exp(x); }
  /// φ'(x): 1 for x > 0, eˣ otherwise.
  template <real_scalar T>
  T derivative(T x) const noexcept { return x > T(0) ? T(1) : std::exp(x); }
};

/// φ(x) = max(x, 0); φ(NaN) = NaN.
struct relu {
  template <real_scalar T>
  T operator()(T x) const noexcept { return x < T(0) ? T(0) : x; }  // NaN stays NaN
  /// φ'(x): 1 for x > 0, else 0 (0 at x = 0, as PyTorch's).
  template <real_scalar T>
  T derivative(T x) const noexcept { return x > T(0) ? T(1) : T(0); }
};

/// φ(x) = max(x, 0) + ε (PermuteFormer uses ε = 1e-3).
struct relu_eps {
  double eps = 1e-3;
  template <real_scalar T>
  T operator()(T x) const noexcept { return (x < T(0) ? T(0) : x) + static_cast<T>(eps); }
  /// φ'(x): 1 for x > 0, else 0.
  template <real_scalar T>
  T derivative(T x) const noexcept { return x > T(0) ? T(1) : T(0); }
};

/// φ(x) = x.
struct identity {
  template <real_scalar T>
  T operator()(T x) const noexcept { return x; }
  template <real_scalar T>
  T derivative(T) const noexcept { return T(1); }
};

}  // namespace feature_maps

/**
 * A feature map with a derivative, for the backward of linear attention: an elementwise map
 * with a member `derivative(x)` → φ'(x) (lrpe's maps have one; a lambda does not).
 */
template <class F, class T>
concept differentiable_feature_map = feature_map<F, T> && requires(const F& f, T x) {
  { f(x) } -> std::convertible_to<T>;
  { f.derivative(x) } -> std::convertible_to<T>;
};

namespace detail {
/// The parameters of lrpe's own maps: relu_eps's ε finite and ≥ 0, also once rounded to the
/// scalar type T the features are computed in (a NaN ε would make every feature NaN, a negative
/// one negative features, one past T's range every feature +∞). User maps are their authors'
/// to check.
template <class T = double, class Phi>
void require_feature_map(const Phi& phi, const char* where, const char* arg = "phi") {
  if constexpr (std::is_same_v<Phi, feature_maps::relu_eps>) {
    if (!std::isfinite(phi.eps)) fail<domain_error>(where, arg, "must have a finite eps (relu_eps)", phi.eps);
    require_parameter(phi.eps >= 0, where, arg, "must have eps >= 0 (relu_eps)", phi.eps);
    require_parameter(finite_in<T>(phi.eps), where, arg,
                      "must have an eps finite in the scalar type (relu_eps)", phi.eps);
  }
}

/// y = φ(x) for one row of d elements (x and y may alias for elementwise maps).
template <class T, class F>
void apply_feature_map(const F& f, const T* x, T* y, index_t d) {
  if constexpr (requires { f.apply(x, y, d); }) {
    f.apply(x, y, d);
  } else {
    for (index_t i = 0; i < d; ++i) y[i] = static_cast<T>(f(x[i]));
  }
}
}  // namespace detail

}  // namespace v0
}  // namespace lrpe
