// SPDX-License-Identifier: MIT
/**
 * @file options.hpp
 * Options of softmax and linear attention, the "no encoding" tag, URPE reweighting, and the
 * encoding traits attention dispatches on. The math is in docs/attention.md.
 */
#pragma once

#include <lrpe/attention/mask.hpp>
#include <lrpe/canonical/linearizable.hpp>
#include <lrpe/core/error.hpp>
#include <lrpe/core/relative.hpp>
#include <lrpe/core/view.hpp>

#include <cmath>
#include <concepts>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

/// No positional encoding: logit = scale·q·k; in linear attention q̃ = φ(q).
struct no_encoding {};

/// No post-softmax reweighting (C ≡ 1): the default of `softmax_options`.
struct no_reweighting {};

/**
 * A URPE post-softmax reweighting C (Luo et al.): A = softmax(logits) ⊙ C, not renormalised.
 * Any callable `c(position_t s, position_t t) -> double` (query position s, key position t),
 * or a type with a member `weight(s, t)`. URPE's C is Toeplitz (a function of t − s), but any
 * function of the two positions is accepted.
 */
template <class C>
concept reweighting = std::same_as<C, no_reweighting> ||
                      requires(const C& c, position_t s) {
                        { c(s, s) } -> std::convertible_to<double>;
                      } ||
                      requires(const C& c, position_t s) {
                        { c.weight(s, s) } -> std::convertible_to<double>;
                      };

/**
 * Options of `softmax_attention`.
 *
 * - `causal`: key row t is visible to query row s iff k_positions[t] ≤ q_positions[s]
 *   (positions, not row indices: with a KV cache of n_past keys at 0.. and queries at offset
 *   n_past, every cached key is visible). A query row that sees no key (fully masked) gets a
 *   zero output row.
 * - `anti_causal`: the reverse direction, key t visible iff k_positions[t] ≥ q_positions[s]
 *   (a right-to-left decoder; DiSAN's backward mask).
 * - `exclude_self`: with `causal` or `anti_causal`, the key at the query's own position is
 *   hidden too: t < s or t > s (DiSAN's forward and backward masks). Without a direction it is a
 *   `parameter_error`: t ≠ s alone (DiSAN's diagonal-disabled mask) is the merge of the two
 *   strict directions (docs/attention.md#directional-masks-disan).
 * - `scale`: multiplies the content term; default: the encoding's `default_scale(d)` when it
 *   has one (T5: 1, DeBERTa: 1/√(3d)), else 1/√d with d the width of Q.
 * - `q_positions`, `k_positions`: offset (row i at offset + i) or per-row arrays.
 * - `tile`: rows per query tile and per key tile of the online softmax (≥ 1).
 * - `reweight`: URPE's C (see `reweighting`).
 *
 * The options of inference engines (docs/attention.md#attention-options), each off by default
 * and combinable with the others, with `causal` and with every encoding:
 * - `window` (w > 0): a sliding window, key t visible to query s only if s − t < w: the w
 *   positions up to and including s (HF's `sliding_window`, Mistral, Gemma). Left only: without
 *   `causal`, keys after s stay visible.
 * - `chunk` (C > 0): chunked attention, key t visible to query s only if ⌊s/C⌋ = ⌊t/C⌋ (Llama 4's
 *   `attention_chunk_size`).
 * - `softcap` (c > 0): logit soft-capping, the content term x = scale·content replaced by
 *   c·tanh(x/c) before an additive bias and the mask (Gemma 2, Grok; FlashAttention's order).
 * - `sink`: an attention sink (gpt-oss): a logit σ that joins every row's softmax denominator
 *   without a value, out_s = Σ_t e^{l_st} v_t / (e^σ + Σ_t e^{l_st}); −∞ (the default) is none.
 *   The log-sum-exp written by `softmax_attention_lse` includes it (so a split call gives the
 *   sink to one part only). `head_sinks`: one per query head of a multi-head call (empty:
 *   `sink` for every head); a single-head call rejects a non-empty one.
 * - `sink_gradient`: read by the backward only: null, or where dL/dσ is added (one double; one
 *   per query head for the multi-head backward).
 */
template <class Reweight = no_reweighting>
struct softmax_options {
  bool causal = false;
  std::optional<double> scale{};
  positions q_positions{};
  positions k_positions{};
  index_t tile = 64;
  Reweight reweight{};
  /// Backward only: null, or where dL/dC is added for a reweighting with parameters
  /// (`canonical::urpe`: laid out as its table, `reweight.make_gradient()`). The forward ignores it.
  double* reweight_gradient = nullptr;
  position_t window = 0;
  position_t chunk = 0;
  double softcap = 0;
  double sink = -std::numeric_limits<double>::infinity();
  std::span<const double> head_sinks{};
  double* sink_gradient = nullptr;
  bool anti_causal = false;
  bool exclude_self = false;

  /// The visibility rule these options describe.
  [[nodiscard]] key_mask mask() const noexcept { return {causal, window, chunk, anti_causal, exclude_self}; }
};

/// How linear attention normalises: not at all, or by the (decayed) kernel sum.
enum class normalisation {
  none,         ///< out_s = Σ_t w_st (q̃_s·k̃_t) v_t
  denominator,  ///< out_s = (Σ_t w_st (q̃_s·k̃_t) v_t) / max(Σ_t w_st q̃_s·k̃_t, eps)
};

/**
 * Options of `linear_attention` (w_st = λ^{pos_s − pos_t} for visible keys, 1 without decay).
 *
 * - `causal`: key t visible to query s iff k_positions[t] ≤ q_positions[s]; causal attention
 *   requires non-decreasing positions in Q and in K.
 * - `norm`, `eps`: see `normalisation`; eps > 0, also once rounded to the scalar type (default
 *   1e-6, as the reference code).
 * - `chunk`: query rows per chunk of the causal algorithm (≥ 1); a tuning parameter (results
 *   agree to rounding for any value). The SIMD backend uses chunks of one vector width instead
 *   for causal self-attention with d_f and d_v multiples of it (docs/performance.md).
 * - `decay`: λ ∈ (0, 1] (1 = none); λ < 1 requires `causal`. Applied by recurrence and
 *   chunk-local factors λ^{Δ} with Δ ≥ 0 only, never as λ^{−t}.
 * - `head_decays`: per-head λ for the multi-head entry points (empty: `decay` for every head);
 *   a single-head call rejects a non-empty one (`parameter_error`) rather than ignore it.
 * - `decay_gradient`: read by `linear_attention_backward` only: null, or where dL/dλ is added
 *   (a learned decay; docs/training.md). The forward ignores it.
 */
struct linear_options {
  bool causal = false;
  normalisation norm = normalisation::none;
  double eps = 1e-6;
  index_t chunk = 64;
  double decay = 1.0;
  positions q_positions{};
  positions k_positions{};
  std::span<const double> head_decays{};
  double* decay_gradient = nullptr;
};

/**
 * True when linear attention can use `E`: `no_encoding`, or a linearizable relative encoding
 * (`canonical::is_linearizable_v`: every `lrpe::encoder`, `canonical::multiplicative`,
 * `canonical::cosformer`, `canonical::transformer_xl`, or a user type that opts in with
 * `is_linearizable = true`, `feature_dim()` and `features(side, x, position, out)`).
 */
template <class E>
inline constexpr bool is_linearizable_encoding_v =
    std::same_as<E, no_encoding> || canonical::is_linearizable_v<E>;

namespace detail {

/// Features of one row on one side: φ_q(x, s) or φ_k(x, t) (the real view of M_s x for encoders).
template <class E, class T>
void encoding_features(const E& e, canonical::side which, const T* x, position_t pos, T* out) {
  canonical::features(e, which, x, pos, out);
}

template <class E>
concept has_default_scale = requires(const E& e, index_t d) {
  { e.default_scale(d) } -> std::convertible_to<double>;
};

template <class E>
double resolve_scale(const E& e, std::optional<double> scale, index_t d, const char* where) {
  double s = 0;
  if (scale) {
    s = *scale;
  } else if constexpr (has_default_scale<E>) {
    s = static_cast<double>(e.default_scale(d));
  } else {
    s = 1.0 / std::sqrt(static_cast<double>(d));
  }
  if (!std::isfinite(s)) fail<domain_error>(where, "options.scale", "must be finite", s);
  return s;
}

template <class C>
double reweight_at(const C& c, position_t s, position_t t) {
  if constexpr (requires { c(s, t); }) {
    return static_cast<double>(c(s, t));
  } else {
    return static_cast<double>(c.weight(s, t));
  }
}

/// eps of a denominator normalisation, applied in T: finite and > 0 also once rounded to T (1e-300
/// is > 0 in double and 0 in float, where max(den, eps) would then divide by zero).
template <class T = double>
void require_eps(double eps, const char* where, const char* arg = "options.eps") {
  if (std::isnan(eps)) fail<domain_error>(where, arg, "must be finite and > 0", eps);
  require_parameter(eps > 0 && std::isfinite(eps), where, arg, "must be finite and > 0", eps);
  require_parameter(finite_in<T>(eps), where, arg, "must be finite in the scalar type", eps);
  require_parameter(static_cast<T>(eps) > T(0), where, arg,
                    lazy_concat("must be > 0 in the scalar type (at least ", std::numeric_limits<T>::denorm_min(), ")"),
                    eps);
}

inline void require_decay(double decay, const char* where, const char* arg = "options.decay") {
  if (std::isnan(decay)) fail<domain_error>(where, arg, "must be in (0, 1]", decay);
  require_parameter(decay > 0 && decay <= 1, where, arg, "must be in (0, 1]", decay);
}

/// Converts an input argument (matrix_view or row-major Eigen object) to a const view.
template <class T>
matrix_view<const T> as_input(const matrix_view<T>& v) noexcept {
  return matrix_view<const T>(v.data, v.rows, v.cols, v.row_stride);
}
template <class X>
  requires requires(const X& x) { ::lrpe::view(x); }
auto as_input(const X& x) {
  auto v = ::lrpe::view(x);
  using S = std::remove_const_t<std::remove_pointer_t<decltype(v.data)>>;
  return matrix_view<const S>(v.data, v.rows, v.cols, v.row_stride);
}

/// Converts an output argument (mutable matrix_view or row-major Eigen object) to a view.
template <class T>
  requires(!std::is_const_v<T>)
matrix_view<T> as_output(const matrix_view<T>& v) noexcept {
  return v;
}
template <class X>
  requires(!std::is_const_v<std::remove_reference_t<X>>) && requires(X& x) { ::lrpe::view(x); }
auto as_output(X& x) {
  auto v = ::lrpe::view(x);
  static_assert(!std::is_const_v<std::remove_pointer_t<decltype(v.data)>>,
                "lrpe attention: the output must be a mutable view or matrix");
  return v;
}

/// Q, K, V arguments: matrix_view or Eigen row-major objects.
template <class X>
concept matrix_input = requires(const X& x) { as_input(x); };

/// The scalar of an input argument (float for a `row_matrix<float>` or a `matrix_view<const float>`).
template <class X>
using input_scalar_t = std::remove_const_t<std::remove_pointer_t<decltype(as_input(std::declval<const X&>()).data)>>;

/// Positions must be non-decreasing (causal linear attention, streaming).
inline void require_monotone(const positions& p, index_t rows, const char* where, const char* arg) {
  if (!p.is_array()) return;
  for (index_t i = 1; i < rows; ++i) {
    if (p[i] < p[i - 1]) {
      throw parameter_error(concat(where, ": argument '", arg,
                                   "' must be non-decreasing for causal linear attention; got ",
                                   p[i], " after ", p[i - 1], " at row ", i));
    }
  }
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
