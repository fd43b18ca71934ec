// SPDX-License-Identifier: MIT
/**
 * @file relative.hpp
 * The contract between relative encodings (canonical/) and attention (attention/).
 *
 * Softmax attention computes, for a query row q_s and a key row k_t,
 *
 *     logit(s, t) = scale · content(q_s, k_t) + bias(s, t)
 *
 * - a multiplicative encoding (any `lrpe::encoder`) has content = M_s q_s · M_t k_t (real view)
 *   and no bias: attention encodes Q and K once, then runs plain dot products;
 * - an `additive_encoding` has content = q_s · k_t and an unscaled scalar `bias(s, t)` (ALiBi,
 *   T5 buckets, learned Toeplitz tables; keyed on the pair: Swin's and graph biases), added per
 *   tile after scaling, as every implementation of those encodings does;
 * - any other `relative_encoding` (Shaw, DeBERTa, Transformer-XL) has content =
 *   `score(q, s, k, t)`, its full f_rel, and may carry its own default scale
 *   (`default_scale(d)`: 1/√(3d) for DeBERTa with both terms, 1 for T5); a
 *   `score_bias_encoding` (Chang et al.'s composite attention) has an unscaled bias too.
 *
 * A `value_encoding` (Shaw's a^V) also adds a position-dependent term to the output:
 * o_s = Σ_t α_st (v_t + a^V_{t−s}).
 */
#pragma once

#include <lrpe/core/traits.hpp>
#include <lrpe/core/view.hpp>

#include <concepts>
#include <limits>

namespace lrpe {
inline namespace v0 {

/// Anything with a direct relative score f_rel(q_s, k_t).
template <class V>
concept relative_encoding =
    real_scalar<typename V::scalar> &&
    requires(const V& v, const typename V::scalar* q, position_t s) {
      { v.dim() } -> std::convertible_to<index_t>;
      { v.score(q, s, q, s) } -> std::convertible_to<double>;
    };

/// A relative encoding whose f_rel is q·k + bias(s, t) (scalar, unscaled; a function of t − s
/// unless the encoding says `is_toeplitz = false`).
template <class V>
concept additive_encoding =
    relative_encoding<V> && requires(const V& v, position_t s) {
      { V::is_additive } -> std::convertible_to<bool>;
      requires V::is_additive;
      { v.bias(s, s) } -> std::convertible_to<double>;
    };

/**
 * False when V declares `static constexpr bool is_toeplitz = false`: its bias is keyed on the
 * pair (s, t) itself (Swin's window bias, a graph's shortest-path bias, `canonical::pair_bias`),
 * not on t − s. The kernels then evaluate it per entry instead of once per diagonal of a tile,
 * and its positions are indices (of tokens, patches, nodes), not offsets to shift.
 */
template <class V>
inline constexpr bool is_toeplitz_v = [] {
  if constexpr (requires { V::is_toeplitz; }) return static_cast<bool>(V::is_toeplitz);
  else return true;
}();

/**
 * An encoding defined at some positions only (a pair-keyed table over n tokens or nodes):
 * `require_positions(span, where)` throws `parameter_error` naming `options.q_positions` or
 * `options.k_positions` when a position of the call lies outside. Attention calls it before any
 * score is formed, so that `bias(s, t)` is only ever called where it is defined.
 */
template <class V>
concept bounded_positions = requires(const V& v, const detail::call_span& c, const char* where) {
  v.require_positions(c, where);
};

/**
 * A relative encoding with a direct score and, besides it, an unscaled bias (Chang et al.'s
 * composite attention: Shaw's score and T5's buckets): it declares `has_score_bias = true` and
 * has `bias(s, t)`; softmax attention's logit is scale·score(q_s, s, k_t, t) + bias(s, t) (the
 * soft cap, when set, on the scaled score only). With `accumulate_bias_gradient(s, t, g, grad)`
 * the backward adds the bias's parameter gradient as an additive encoding's.
 */
template <class V>
concept score_bias_encoding = relative_encoding<V> && requires(const V& v, position_t s) {
  { V::has_score_bias } -> std::convertible_to<bool>;
  requires V::has_score_bias;
  { v.bias(s, s) } -> std::convertible_to<double>;
};

/// A relative encoding that adds a^V_{t−s} to the values (Shaw et al.).
template <class V>
concept value_encoding =
    relative_encoding<V> &&
    requires(const V& v, position_t s, typename V::scalar w, typename V::scalar* out) {
      { V::has_value_term } -> std::convertible_to<bool>;
      requires V::has_value_term;
      v.add_value_term(s, s, w, out);  // out += w · a^V_{t−s} (dim() elements)
    };

/**
 * A relative encoding whose score has a backward (Shaw, DeBERTa): `score_backward(q, s, k, t,
 * g, dq, dk, grad)` adds g·∂f_rel/∂q to dq and g·∂f_rel/∂k to dk (dim() entries each) and, when
 * `grad` is not null, g·∂f_rel/∂(parameters) to grad (`parameter_count()` entries, laid out as
 * the encoding's `make_gradient()` documents).
 */
template <class V>
concept differentiable_score =
    relative_encoding<V> && requires(const V& v, const typename V::scalar* q, position_t s, double g,
                                     typename V::scalar* dq, double* grad) {
      v.score_backward(q, s, q, s, g, dq, dq, grad);
    };

/**
 * A value encoding whose a^V has a backward: `value_term_dot(s, t, g)` is g·a^V_{t−s} (g: dim()
 * entries), and `accumulate_value_gradient(s, t, w, g, grad)` adds w·g to a^V_{t−s}'s entries
 * of `grad`.
 */
template <class V>
concept differentiable_value_term =
    value_encoding<V> && requires(const V& v, position_t s, const typename V::scalar* g, double* grad) {
      { v.value_term_dot(s, s, g) } -> std::convertible_to<double>;
      v.accumulate_value_gradient(s, s, 1.0, g, grad);
    };

namespace detail {
/// `e.require_positions(span, where)` for an encoding with `bounded_positions`; nothing otherwise.
template <class E>
void require_encoding_positions(const E& e, const call_span& span, const char* where) {
  if constexpr (bounded_positions<E>) e.require_positions(span, where);
}

/**
 * A bias or score (double) as the scalar type T of a logit: ±∞ and NaN kept, a finite value past
 * T's range held at ±max(T). A plain conversion is undefined behaviour there ([conv.double]), and
 * where it gives ±∞ it turns a finite logit into a masked key (−∞) or a NaN row (+∞ − +∞). Held,
 * the logit stays finite, as on the SIMD backend (`bias_log2`); the huge value dominates the row.
 */
template <real_scalar T>
constexpr T held_logit(double x) noexcept {
  constexpr double top = static_cast<double>(std::numeric_limits<T>::max());  // ∞ for wider types
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (x > top && x != inf) return std::numeric_limits<T>::max();
  if (x < -top && x != -inf) return std::numeric_limits<T>::lowest();
  return static_cast<T>(x);
}
}  // namespace detail

}  // namespace v0
}  // namespace lrpe
