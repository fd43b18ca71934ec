// SPDX-License-Identifier: MIT
/**
 * @file linear.hpp
 * `lrpe::linear_attention`: linear attention with an LRPE encoder (paper Eq. 39).
 *
 * With q̃_s = M_s φ(q_s) and k̃_t = M_t φ(k_t) (real view for complex encoders; for other
 * linearizable encodings q̃ = φ_q(φ(q_s), s), k̃ = φ_k(φ(k_t), t), canonical/linearizable.hpp) and
 * w_st = λ^{pos_s − pos_t} (1 without decay),
 *
 *     num_s = Σ_{t visible} w_st (q̃_s·k̃_t) v_t = Σ_t w_st φ(q_s)ᵀ W_{t−s} φ(k_t) v_t
 *     den_s = Σ_{t visible} w_st  q̃_s·k̃_t
 *     out_s = num_s                      (normalisation::none)
 *     out_s = num_s / max(den_s, eps)    (normalisation::denominator)
 *
 * Non-causal: every key visible, O(n·d_f·d_v). Causal: key t visible iff pos_t ≤ pos_s, by chunks
 * (the reference kernel: backend/reference/linear.hpp). Only linearizable encodings are accepted: anything else is a
 * compile error (use softmax_attention).
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/feature_map.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/softmax.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/core/storage.hpp>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>

namespace lrpe {
inline namespace v0 {

namespace detail {

/**
 * The checks of a linear-attention call (shapes, widths, eps, φ, chunk, decay, the state, the
 * causal order); returns the feature width d_f. `where` names the entry point in messages.
 */
template <class T, class Encoding, class Phi>
index_t validate_linear(const matrix_view<const T>& q, const matrix_view<const T>& k, const matrix_view<const T>& v,
                        const matrix_view<T>& out, const Encoding& encoding, const Phi& phi,
                        const linear_options& options, const linear_attention_state<T>* state, const char* where) {
  const call_span span = validate_qkv(q, k, v, out, options.q_positions, options.k_positions, where);
  if constexpr (!std::is_same_v<Encoding, no_encoding>) {
    require_encoding_dim<T>(encoding, q.cols, where);
    require_encoding_positions(encoding, span, where);
  }
  require_eps<T>(options.eps, where);
  require_feature_map<T>(phi, where);
  // Per-head decays belong to multi-head calls (heads_view); here they would be ignored.
  require_parameter(options.head_decays.empty(), where, "options.head_decays",
                    "must be empty on a single-head call (one head's decay is options.decay)",
                    lazy_concat("size ", options.head_decays.size()));
  require_parameter(options.chunk >= 1, where, "options.chunk", "must be >= 1", options.chunk);
  require_decay(options.decay, where);
  require_parameter(options.causal || options.decay == 1.0, where, "options.decay",
                    "must be 1 unless options.causal (the decay λ^{s−t} is defined for s ≥ t)", options.decay);
  const index_t f = [&] {
    if constexpr (std::is_same_v<Encoding, no_encoding>) return q.cols;
    else return canonical::feature_dim(encoding);
  }();
  if (state != nullptr) {
    require_parameter(options.causal, where, "options.causal", "must be true when a state is given", "false");
    require_shape(state->feature_dim() == f && state->value_dim() == v.cols, where, "state",
                  lazy_concat("must be ", f, "x", v.cols, " (feature_dim x v.cols)"),
                  lazy_concat(state->feature_dim(), "x", state->value_dim()));
    require_parameter(state->decay() == options.decay, where, "options.decay",
                      lazy_concat("must equal state.decay() = ", state->decay()), options.decay);
  }
  if (options.causal) {
    require_monotone(options.q_positions, q.rows, where, "options.q_positions");
    require_monotone(options.k_positions, k.rows, where, "options.k_positions");
    if (state != nullptr && !state->empty()) {
      if (q.rows > 0) {
        require_parameter(options.q_positions[0] >= state->last_position(), where, "options.q_positions[0]",
                          lazy_concat("must be >= state.last_position() = ", state->last_position()),
                          options.q_positions[0]);
      }
      if (k.rows > 0) {
        require_parameter(options.k_positions[0] >= state->last_position(), where, "options.k_positions[0]",
                          lazy_concat("must be >= state.last_position() = ", state->last_position()),
                          options.k_positions[0]);
      }
      require_within_span(span, state->last_position(), where, "state");
    }
  }
  return f;
}

template <class T, class Encoding, class Phi, class Backend>
void linear_attention_checked(const matrix_view<const T>& q, const matrix_view<const T>& k,
                              const matrix_view<const T>& v, const matrix_view<T>& out, const Encoding& encoding,
                              const Phi& phi, const linear_options& options, linear_attention_state<T>* state,
                              Backend backend) {
  constexpr const char* where = "lrpe::linear_attention";
  if constexpr (!std::is_same_v<Encoding, no_encoding>) {
    static_assert(std::is_same_v<typename Encoding::scalar, T>,
                  "lrpe::linear_attention: the encoder's scalar must be the scalar of q, k and v");
  }
  const index_t f = validate_linear(q, k, v, out, encoding, phi, options, state, where);
  if (q.rows == 0 && k.rows == 0) return;
  if (v.cols == 0 && state == nullptr) return;  // out is n_q x 0: nothing to write, causal or not
  using backend::call_guard;
  [[maybe_unused]] const auto guard = call_guard(backend);  // e.g. a pool's shared workspace

  // Backend hooks are found by ADL on the backend tag (unqualified calls), so that a backend
  // declared after this header (backend/simd) still provides its overloads.
  using backend::acquire_feature_scratch;
  using backend::linear_features_kernel;
  using backend::linear_fused_kernel;
  using backend::linear_kernel;
  std::optional<linear_attention_state<T>> local;
  if (options.causal && state == nullptr) state = &local.emplace(f, v.cols, options.decay);
  matrix_view<const T> qf = q, kf = k;
  backend::feature_scratch<T> fs;
  if constexpr (!(std::is_same_v<Encoding, no_encoding> && std::is_same_v<Phi, feature_maps::identity>)) {
    // (φ = identity without an encoding: the features are q and k themselves, no copy.)
    const backend::linear_problem<T> raw{q, k, v, out, options.q_positions, options.k_positions, options.causal,
                                         options.norm, options.eps, options.chunk};
    if (linear_fused_kernel(backend, encoding, phi, raw, state)) return;
    acquire_feature_scratch(backend, fs, q.rows, k.rows, f);
    linear_features_kernel(backend, encoding, phi, q, options.q_positions, canonical::side::query, fs.q);
    linear_features_kernel(backend, encoding, phi, k, options.k_positions, canonical::side::key, fs.k);
    qf = matrix_view<const T>(fs.q);
    kf = matrix_view<const T>(fs.k);
  }
  backend::linear_problem<T> problem{qf, kf, v, out, options.q_positions, options.k_positions, options.causal,
                                     options.norm, options.eps, options.chunk};
  linear_kernel(backend, problem, state);
}

/// Front door of the linear kernels: readable compile errors first, then validation.
template <class T, class Encoding, class Phi, class Backend>
void linear_attention_impl(const matrix_view<const T>& q, const matrix_view<const T>& k,
                           const matrix_view<const T>& v, const matrix_view<T>& out, const Encoding& encoding,
                           const Phi& phi, const linear_options& options, linear_attention_state<T>* state,
                           Backend backend) {
  static_assert(is_linearizable_encoding_v<Encoding>,
                "lrpe::linear_attention: the encoding is not linearizable (it has no per-position "
                "feature map, e.g. an additive bias such as ALiBi/T5, Shaw or DeBERTa); use "
                "lrpe::softmax_attention instead (docs/attention.md)");
  static_assert(feature_map<Phi, T>,
                "lrpe::linear_attention: phi must satisfy lrpe::feature_map (a callable T(T), or "
                "apply(const T*, T*, index_t))");
  if constexpr (is_linearizable_encoding_v<Encoding> && feature_map<Phi, T>) {
    linear_attention_checked<T>(q, k, v, out, encoding, phi, options, state, backend);
  }
}

/**
 * The front of the single-head `linear_attention` calls: with T = float, q, k, v and out may be
 * 16-bit storage of it (`lrpe::half`, `lrpe::bfloat16`). Such views are checked, widened
 * (exactly) into T copies, and a 16-bit out is computed in T and rounded once (O(n·d) scratch
 * each): the kernels run on T, so the result is the float call's on the widened inputs.
 */
template <class T, class SQ, class SK, class SV, class SO, class Encoding, class Phi, class Backend>
void linear_entry(const matrix_view<const SQ>& q, const matrix_view<const SK>& k, const matrix_view<const SV>& v,
                  const matrix_view<SO>& out, const Encoding& encoding, const Phi& phi, const linear_options& options,
                  linear_attention_state<T>* state, Backend backend) {
  static_assert(std::is_same_v<compute_t<SQ>, T> && std::is_same_v<compute_t<SK>, T> &&
                    std::is_same_v<compute_t<SV>, T> && std::is_same_v<compute_t<SO>, T>,
                "lrpe::linear_attention: q, k, v and out must have the same scalar type (the state's, with a "
                "state), or be 16-bit storage of it (lrpe::half, lrpe::bfloat16: computed in float)");
  if constexpr (std::is_same_v<SQ, T> && std::is_same_v<SK, T> && std::is_same_v<SV, T> && std::is_same_v<SO, T>) {
    linear_attention_impl<T>(q, k, v, out, encoding, phi, options, state, backend);
  } else {
    constexpr const char* where = "lrpe::linear_attention (16-bit storage)";
    validate(q, where, "q");
    validate(k, where, "k");
    validate(v, where, "v");
    validate(out, where, "out");
    const widened<T, SQ> qw(q);
    const widened<T, SK> kw(k);
    const widened<T, SV> vw(v);
    if constexpr (std::is_same_v<SO, T>) {
      linear_attention_impl<T>(qw.view(), kw.view(), vw.view(), out, encoding, phi, options, state, backend);
    } else {
      row_matrix<T> o(out.rows, out.cols);
      linear_attention_impl<T>(qw.view(), kw.view(), vw.view(), view(o), encoding, phi, options, state, backend);
      for (index_t i = 0; i < out.rows; ++i)
        for (index_t c = 0; c < out.cols; ++c) out(i, c) = narrow<SO>(o(i, c));
    }
  }
}

}  // namespace detail

/**
 * Linear attention of one head.
 *
 * @param q, k, v  n_q×d, n_k×d, n_k×d_v (`matrix_view` or row-major Eigen), scalar T; with T =
 *                 float, any of them (and out) may be stored in 16 bits (`lrpe::half`,
 *                 `lrpe::bfloat16`): widened copies, computed in float, out rounded once.
 * @param out      n_q×d_v (must not overlap the inputs).
 * @param encoding a linearizable encoding: any `lrpe::encoder` (complex ones through their real
 *                 view), `canonical::cosformer`, `canonical::transformer_xl`, ... (see
 *                 `is_linearizable_encoding_v`) or `no_encoding{}`. Anything else does not compile.
 * @param phi      a `feature_map` (`feature_maps::elu_plus_one{}`, `relu{}`, `relu_eps{}`,
 *                 `identity{}`, or a lambda T(T)).
 * @param options  causal, normalisation, eps, chunk, decay, positions (`linear_options`).
 *
 * n_q = n_k = 0 is a no-op; n_k = 0 gives zero rows. Scratch: the encoded Q and K (O(n·d_f)),
 * one chunk×chunk block and one d_f×d_v state; a backend that computes the features inside its
 * kernel (`backend::linear_fused_kernel`: the SIMD backend for causal self-attention) needs
 * only a block of them.
 * @throws shape_error (shapes, widths), parameter_error (eps ≤ 0, chunk < 1, λ ∉ (0, 1],
 * λ < 1 without causal, decreasing positions in causal mode, a difference of two positions or
 * of a position and the state's last one that does not fit in int64), domain_error (NaN eps or λ).
 */
template <class Q, class K, class V, class O, class Encoding, class Phi, class Backend = backend::reference>
  requires detail::matrix_input<Q> && detail::matrix_input<K> && detail::matrix_input<V>
void linear_attention(const Q& q, const K& k, const V& v, O&& out, const Encoding& encoding, const Phi& phi,
                      const linear_options& options = {}, Backend backend = {}) {
  using T = compute_t<detail::input_scalar_t<Q>>;
  detail::linear_entry<T>(detail::as_input(q), detail::as_input(k), detail::as_input(v), detail::as_output(out),
                          encoding, phi, options, static_cast<linear_attention_state<T>*>(nullptr), backend);
}

/**
 * Causal linear attention of one segment of a longer sequence, continuing from `state` and
 * leaving in it every key of this segment: calling this on consecutive segments (any split)
 * gives exactly the result of one call on the whole sequence. `options.causal` must be true,
 * `options.decay` must equal `state.decay()`, and the segment's positions must not precede
 * `state.last_position()`.
 */
template <class Q, class K, class V, class O, class Encoding, class Phi, class T, class Backend = backend::reference>
  requires detail::matrix_input<Q> && detail::matrix_input<K> && detail::matrix_input<V>
void linear_attention(const Q& q, const K& k, const V& v, O&& out, const Encoding& encoding, const Phi& phi,
                      linear_attention_state<T>& state, const linear_options& options, Backend backend = {}) {
  detail::linear_entry<T>(detail::as_input(q), detail::as_input(k), detail::as_input(v), detail::as_output(out),
                          encoding, phi, options, &state, backend);
}

/**
 * The summary of a shard of keys for sequence-parallel causal linear attention (k, v may be
 * 16-bit storage of float, widened first): the state a
 * fresh `linear_attention_state(feature_dim, v.cols, options.decay)` reaches over the keys k, v
 * at `options.k_positions` (global positions: angles and decays are those of one call). Folding
 * the summaries of shards 0 … r − 1 with `append_state` gives shard r its incoming state;
 * `linear_attention(q, k, v, out, encoding, phi, incoming, options)` on each shard then gives
 * the one-call result. Features are encoded by blocks of `options.chunk` rows (the backend's
 * feature kernel), so the scratch is one block.
 * @throws shape_error (k, v shapes, the encoding's width), parameter_error (`options.causal`
 * false, positions decreasing), as `linear_attention`.
 */
template <class K, class V, class Encoding, class Phi, class Backend = backend::reference>
  requires detail::matrix_input<K> && detail::matrix_input<V>
auto linear_attention_summary(const K& k_in, const V& v_in, const Encoding& encoding, const Phi& phi,
                              const linear_options& options, Backend backend = {}) {
  constexpr const char* where = "lrpe::linear_attention_summary";
  using T = compute_t<detail::input_scalar_t<K>>;
  static_assert(std::is_same_v<compute_t<detail::input_scalar_t<V>>, T>,
                "lrpe::linear_attention_summary: k and v must have the same scalar type, or be 16-bit storage "
                "of it (lrpe::half, lrpe::bfloat16: computed in float)");
  const auto k_stored = detail::as_input(k_in);
  const auto v_stored = detail::as_input(v_in);
  validate(k_stored, where, "k");
  validate(v_stored, where, "v");
  // 16-bit k, v: widened copies (exact); float or double: the views themselves
  const detail::widened<T, detail::input_scalar_t<K>> kw(k_stored);
  const detail::widened<T, detail::input_scalar_t<V>> vw(v_stored);
  const matrix_view<const T>& k = kw.view();
  const matrix_view<const T>& v = vw.view();
  detail::require_parameter(options.causal, where, "options.causal", "must be true (a summary is a causal state)",
                            "false");
  const matrix_view<const T> no_q(k.data, 0, k.cols, k.row_stride);
  const matrix_view<T> no_out(nullptr, 0, v.cols, v.cols);
  linear_options keys_only = options;  // (the queries' positions play no part)
  keys_only.q_positions = positions();
  const index_t f = detail::validate_linear<T>(no_q, k, v, no_out, encoding, phi, keys_only, nullptr, where);
  linear_attention_state<T> state(f, v.cols, options.decay);
  const index_t block = std::max<index_t>(1, std::min(options.chunk, k.rows));
  row_matrix<T> features(block, f);
  using backend::linear_features_kernel;
  for (index_t r0 = 0; r0 < k.rows; r0 += block) {
    const index_t m = std::min(block, k.rows - r0);
    const matrix_view<const T> rows(k.row(r0), m, k.cols, k.row_stride);
    const matrix_view<T> out(features.data(), m, f, f);
    linear_features_kernel(backend, encoding, phi, rows, options.k_positions.slice(r0, m), canonical::side::key, out);
    const matrix_view<const T> vb(v.row(r0), m, v.cols, v.row_stride);
    state.append_block(Eigen::Map<const row_matrix<T>>(features.data(), m, f),
                       Eigen::Map<const row_matrix<T>, 0, Eigen::OuterStride<>>(vb.data, m, v.cols,
                                                                                  Eigen::OuterStride<>(vb.row_stride)),
                       options.k_positions, r0);
  }
  return state;
}

}  // namespace v0
}  // namespace lrpe
