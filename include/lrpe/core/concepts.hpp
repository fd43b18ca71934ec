// SPDX-License-Identifier: MIT
/**
 * @file concepts.hpp
 * The two policy concepts an LRPE encoder is composed from.
 *
 * An encoder is a pair (P, Λ): a fixed unitary P and a unitary family Λ⁽ˢ⁾ with
 * Λ⁽ˢ⁾ᴴ Λ⁽ᵗ⁾ = Λ⁽ᵗ⁻ˢ⁾. It maps a row x at position s to M_s x = Λ⁽ˢ⁾ (P x); its relative matrix
 * is W_s = Pᴴ Λ⁽ˢ⁾ P. A user-written policy that satisfies these concepts works everywhere an
 * in-library one does (encoder, presets, `lrpe::check`, the reference backend).
 */
#pragma once

#include <lrpe/core/traits.hpp>

#include <complex>
#include <concepts>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {

/**
 * A P policy: a fixed unitary map P from real rows of width `dim()` to rows of `output_type`
 * (the scalar `T` for real orthogonal P, `std::complex<T>` for complex unitary P such as the DFT)
 * of the same width.
 *
 * Required members, for `p` a `const P&`:
 * - `using scalar = T` (float or double) and `using output_type`;
 * - `static constexpr bool is_complex` (`output_type` is complex);
 * - `p.dim()`: the width d (input and output);
 * - `p.apply(const scalar* x, output_type* y)`: y = P x (x real, no aliasing);
 * - `p.apply_adjoint(const output_type* y, output_type* x)`: x = Pᴴ y (no aliasing);
 * - `p.matrix()`: P as a dense d×d `dense_matrix<output_type>`.
 */
template <class P>
concept p_policy =
    std::copy_constructible<P> && real_scalar<typename P::scalar> &&
    (std::same_as<typename P::output_type, typename P::scalar> ||
     std::same_as<typename P::output_type, std::complex<typename P::scalar>>) &&
    requires(const P& p, const typename P::scalar* x, typename P::output_type* y,
             const typename P::output_type* cy) {
      { P::is_complex } -> std::convertible_to<bool>;
      { p.dim() } -> std::convertible_to<index_t>;
      p.apply(x, y);
      p.apply_adjoint(cy, y);
      { p.matrix() } -> std::convertible_to<dense_matrix<typename P::output_type>>;
    };

/// The element type a Λ policy acts on: complex for complex Λ, real otherwise.
template <class L>
using lambda_value_t = maybe_complex_t<typename L::scalar, L::is_complex>;

/**
 * A Λ policy: a unitary family Λ⁽ˢ⁾, s ∈ ℤ, with Λ⁽⁰⁾ = I and Λ⁽ˢ⁾ᴴ Λ⁽ᵗ⁾ = Λ⁽ᵗ⁻ˢ⁾.
 *
 * Required members, for `l` a `const L&` and `V = lambda_value_t<L>`:
 * - `using scalar = T` and `static constexpr bool is_complex` (Λ needs complex rows);
 * - `l.dim()`: the width it acts on;
 * - `l.apply(position_t s, const V* x, V* y)`: y = Λ⁽ˢ⁾ x (no aliasing);
 * - `l.matrix(position_t s)`: Λ⁽ˢ⁾ as a dense `dense_matrix<V>`.
 *
 * A real Λ (rotations, permutation powers) that is also used after a complex P must accept
 * `std::complex<T>` rows in `apply` (a template member does); `encoder` checks this.
 */
template <class L>
concept lambda_policy =
    std::copy_constructible<L> && real_scalar<typename L::scalar> &&
    requires(const L& l, position_t s, const lambda_value_t<L>* x, lambda_value_t<L>* y) {
      { L::is_complex } -> std::convertible_to<bool>;
      { l.dim() } -> std::convertible_to<index_t>;
      l.apply(s, x, y);
      { l.matrix(s) } -> std::convertible_to<dense_matrix<lambda_value_t<L>>>;
    };

/**
 * A policy with learnable parameters (docs/training.md): `q.parameter_count()`, the number of
 * them. Its gradient member is checked by `differentiable_p` / `differentiable_lambda`; a policy
 * without parameters (permutations, DCT, DFT, identity) has no such members and gets only dL/dx.
 */
template <class Q>
concept has_parameters = requires(const Q& q) {
  { q.parameter_count() } -> std::convertible_to<index_t>;
};

/**
 * A P policy whose parameters have a gradient: `p.accumulate_gradient(x, gy, grad)` adds
 * dL/d(parameters) of one row to `grad` (`parameter_count()` doubles), given the input x and
 * gy = dL/d(Px) (for complex output, ∂L/∂Re + i·∂L/∂Im).
 */
template <class P>
concept differentiable_p =
    p_policy<P> && has_parameters<P> &&
    requires(const P& p, const typename P::scalar* x, const typename P::output_type* gy, double* grad) {
      p.accumulate_gradient(x, gy, grad);
    };

/**
 * A Λ policy whose parameters have a gradient: `l.accumulate_gradient(s, y, gy, grad)` adds
 * dL/d(parameters) of one row to `grad`, given the output y = Λ⁽ˢ⁾x and gy = dL/dy, rows of V
 * (V = `lambda_value_t<L>`; a real Λ used after a complex P also takes complex rows).
 */
template <class L, class V = lambda_value_t<L>>
concept differentiable_lambda =
    lambda_policy<L> && has_parameters<L> && requires(const L& l, position_t s, const V* y, double* grad) {
      l.accumulate_gradient(s, y, y, grad);
    };

/**
 * A policy that can be rebuilt from a parameter vector: `q.parameters()` (a `std::vector<double>`
 * in gradient order) and `q.with_parameters(w)` (the same policy with parameters w). Finite-
 * difference checks (`lrpe::check::gradient`) and optimisers use it.
 */
template <class Q>
concept reparameterisable = has_parameters<Q> && requires(const Q& q, std::span<const double> w) {
  { q.parameters() } -> std::convertible_to<std::vector<double>>;
  { q.with_parameters(w) } -> std::convertible_to<Q>;
};

}  // namespace v0
}  // namespace lrpe
