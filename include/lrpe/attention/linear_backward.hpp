// SPDX-License-Identifier: MIT
/**
 * @file linear_backward.hpp
 * `lrpe::linear_attention_backward`: the gradients of `linear_attention` with respect to Q, K,
 * V, the encoder's parameters and, for a sequence split across calls, the state
 * (docs/training.md). The features q̃ = M_s φ(q) are differentiated through the encoder
 * (`encoder::backward`) and the feature map (its `derivative`).
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/feature_map.hpp>
#include <lrpe/attention/linear.hpp>
#include <lrpe/attention/multihead.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/softmax_backward.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/encoder.hpp>

#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {

namespace detail {

/// The backward on validated views: φ and the features, the kernel, then the encoder's and
/// φ's backward, each through the backend's hooks (features, kernel, `encode_backward`). The
/// features live in the backend's feature scratch; the kernel writes dφ(x) straight into dq and
/// dk without an encoder. `initial`, `d_final`, `d_initial`: see `backend::linear_backward_problem`.
template <class T, class Encoding, class Phi, class Backend>
void run_linear_backward(const matrix_view<const T>& q, const matrix_view<const T>& k, const matrix_view<const T>& v,
                         const matrix_view<const T>& d_out, const matrix_view<T>& dq, const matrix_view<T>& dk,
                         const matrix_view<T>& dv, const Encoding& encoding, const Phi& phi,
                         const linear_options& options, const linear_attention_state<T>* initial,
                         const linear_state_gradient<T>* d_final, linear_state_gradient<T>* d_initial,
                         gradient_t<Encoding>* grad, Backend backend) {
  constexpr bool is_encoder = lrpe_encoder<Encoding>;
  constexpr bool is_feature_encoding = has_features_backward<Encoding, T>;  // Transformer-XL, cosFormer
  const index_t d = q.cols;
  using backend::call_guard;
  [[maybe_unused]] const auto guard = call_guard(backend);  // e.g. a pool's shared workspace
  // Without a state on either side, the features are taken at positions shifted by the first
  // query's (or key's): the outputs depend on differences only, and dL/dθ's sums over rows
  // then stay at the call's span (softmax_attention_backward says why). A state holds
  // features at absolute positions, so a call with one keeps them.
  const bool with_state = (initial != nullptr && !initial->empty()) || d_final != nullptr;
  const position_t centre = with_state ? 0 : q.rows > 0 ? options.q_positions[0] : k.rows > 0 ? options.k_positions[0] : 0;
  std::vector<position_t> q_shifted, k_shifted;
  const positions qp = shifted(options.q_positions, q.rows, centre, q_shifted);
  const positions kp = shifted(options.k_positions, k.rows, centre, k_shifted);
  const index_t f = [&] {
    if constexpr (is_encoder || is_feature_encoding) return encoding.feature_dim();
    else return d;
  }();
  // No encoding and φ = identity: the features are q and k themselves, read where they are
  constexpr bool raw_features = std::is_same_v<Encoding, no_encoding> && std::is_same_v<Phi, feature_maps::identity>;
  using backend::acquire_feature_scratch;
  backend::feature_scratch<T> fs;
  if constexpr (!raw_features) acquire_feature_scratch(backend, fs, q.rows, k.rows, f);
  row_matrix<T> phi_q, phi_k, dqf, dkf;  // the encoding's input φ(x) and its features' gradients
  if constexpr (is_encoder || is_feature_encoding) {
    phi_q.resize(q.rows, d);
    phi_k.resize(k.rows, d);
    for (index_t i = 0; i < q.rows; ++i) apply_feature_map(phi, q.row(i), phi_q.row(i).data(), d);
    for (index_t i = 0; i < k.rows; ++i) apply_feature_map(phi, k.row(i), phi_k.row(i).data(), d);
    using backend::encode_features_kernel;
    encode_features_kernel(backend, encoding, canonical::side::query, view(std::as_const(phi_q)), qp, fs.q);
    encode_features_kernel(backend, encoding, canonical::side::key, view(std::as_const(phi_k)), kp, fs.k);
    dqf.resize(q.rows, f);
    dkf.resize(k.rows, f);
  } else if constexpr (!raw_features) {
    using backend::linear_features_kernel;
    linear_features_kernel(backend, encoding, phi, q, qp, canonical::side::query, fs.q);
    linear_features_kernel(backend, encoding, phi, k, kp, canonical::side::key, fs.k);
  }
  const matrix_view<const T> qf = raw_features ? q : matrix_view<const T>(fs.q);
  const matrix_view<const T> kf = raw_features ? k : matrix_view<const T>(fs.k);
  backend::linear_problem<T> forward{qf, kf, v, matrix_view<T>{},
                                     options.q_positions, options.k_positions, options.causal, options.norm,
                                     options.eps, options.chunk};
  constexpr bool via_features = is_encoder || is_feature_encoding;
  backend::linear_backward_problem<T> problem{forward,   d_out, options.decay, initial, d_final, d_initial,
                                              via_features ? view(dqf) : dq, via_features ? view(dkf) : dk, dv,
                                              options.decay_gradient};
  using backend::linear_backward_kernel;
  linear_backward_kernel(backend, problem);
  if constexpr (is_encoder || is_feature_encoding) {  // dφ(x) through the encoding, and its parameters
    features_backward_rows(backend, encoding, canonical::side::query, view(std::as_const(phi_q)), qp,
                           view(std::as_const(dqf)), dq, grad);
    features_backward_rows(backend, encoding, canonical::side::key, view(std::as_const(phi_k)), kp,
                           view(std::as_const(dkf)), dk, grad);
  }
  if constexpr (!std::is_same_v<Phi, feature_maps::identity>) {  // (identity: φ' = 1)
    for (index_t i = 0; i < q.rows; ++i)
      for (index_t j = 0; j < d; ++j) dq.row(i)[j] *= static_cast<T>(phi.derivative(q.row(i)[j]));
    for (index_t i = 0; i < k.rows; ++i)
      for (index_t j = 0; j < d; ++j) dk.row(i)[j] *= static_cast<T>(phi.derivative(k.row(i)[j]));
  }
}

/// The checks of the backward beyond the forward's: the outputs' shapes, the encoding, φ, and grad.
template <class T, class Encoding, class Phi>
void validate_linear_backward(const matrix_view<const T>& q, const matrix_view<const T>& k,
                              const matrix_view<const T>& v, const matrix_view<T>& dq, const matrix_view<T>& dk,
                              const matrix_view<T>& dv, const Encoding& encoding, const gradient_t<Encoding>* grad,
                              const char* where) {
  static_assert(std::is_same_v<Encoding, no_encoding> || lrpe_encoder<Encoding> || has_features_backward<Encoding, T>,
                "lrpe::linear_attention_backward: the encoding has no backward: no_encoding, every "
                "lrpe::encoder, Transformer-XL and cosFormer have one; a user encoding needs "
                "features_backward (docs/training.md)");
  static_assert(differentiable_feature_map<Phi, T>,
                "lrpe::linear_attention_backward: the feature map needs a member derivative(x) returning "
                "phi'(x) (lrpe::differentiable_feature_map; lrpe's own maps have one)");
  require_gradient_shapes(q, k, v, dq, dk, dv, where);
  check_encoding_gradient(encoding, grad, where);
}

/// The views of a backward call, converted and checked to share the scalar of q.
template <class Q, class K, class V, class DO, class DQ, class DK, class DV>
auto linear_backward_views(const Q& q_in, const K& k_in, const V& v_in, const DO& d_out_in, DQ&& dq_in, DK&& dk_in,
                           DV&& dv_in) {
  using T = input_scalar_t<Q>;
  const auto q = as_input(q_in);
  const auto k = as_input(k_in);
  const auto v = as_input(v_in);
  const auto d_out = as_input(d_out_in);
  const auto dq = as_output(dq_in);
  const auto dk = as_output(dk_in);
  const auto dv = as_output(dv_in);
  static_assert(std::is_same_v<decltype(k), const matrix_view<const T>> &&
                    std::is_same_v<decltype(v), const matrix_view<const T>> &&
                    std::is_same_v<decltype(d_out), const matrix_view<const T>> &&
                    std::is_same_v<decltype(dq), const matrix_view<T>> &&
                    std::is_same_v<decltype(dk), const matrix_view<T>> && std::is_same_v<decltype(dv), const matrix_view<T>>,
                "lrpe::linear_attention_backward: every matrix must have the scalar type of q");
  return std::tuple{q, k, v, d_out, dq, dk, dv};
}

}  // namespace detail

/**
 * The backward of `linear_attention` for one head: dq, dk, dv written, the encoder's parameter
 * gradients added to `*grad` when it is not null.
 *
 * @param q, k, v   the forward's inputs; @param d_out dL/dO (n_q×d_v).
 * @param dq, dk, dv outputs shaped as q, k, v; must not overlap the inputs.
 * @param encoding  `no_encoding{}`, any `lrpe::encoder`, `canonical::cosformer` or
 *                  `canonical::transformer_xl` (its `make_gradient()` as grad); @param phi a
 *                  `differentiable_feature_map`.
 * @param options   the forward's (causal, normalisation, eps, decay, positions; chunk: the SIMD
 *                  kernel's, as in the forward).
 *
 * The reference kernel works pair by pair (O(n_q·n_k·(d_f + d_v)) time, O(n·d_f) memory); the
 * SIMD tags run three passes of their forward kernel by chunks (backend/simd/linear_backward.hpp;
 * causal queries past the last key and a causal dL/dλ: the reference kernel). At a normalised
 * row whose denominator is at or below eps the output is num/eps, whose gradient does not reach
 * the denominator.
 * @throws as `linear_attention`, and shape_error for dq, dk, dv or grad of the wrong shape.
 */
template <class Q, class K, class V, class DO, class DQ, class DK, class DV, class Encoding, class Phi,
          class Backend = backend::reference>
  requires detail::matrix_input<Q> && detail::matrix_input<K> && detail::matrix_input<V> && detail::matrix_input<DO>
void linear_attention_backward(const Q& q_in, const K& k_in, const V& v_in, const DO& d_out_in, DQ&& dq_in, DK&& dk_in,
                               DV&& dv_in, const Encoding& encoding, const Phi& phi, const linear_options& options = {},
                               detail::gradient_t<Encoding>* grad = nullptr, Backend backend = {}) {
  constexpr const char* where = "lrpe::linear_attention_backward";
  using T = detail::input_scalar_t<Q>;
  const auto [q, k, v, d_out, dq, dk, dv] = detail::linear_backward_views(q_in, k_in, v_in, d_out_in, dq_in, dk_in, dv_in);
  detail::validate_linear_backward<T, Encoding, Phi>(q, k, v, dq, dk, dv, encoding, grad, where);
  const matrix_view<T> d_out_shape(const_cast<T*>(d_out.data), d_out.rows, d_out.cols, d_out.row_stride);  // read only
  detail::validate_linear<T>(q, k, v, d_out_shape, encoding, phi, options, nullptr, where);
  detail::run_linear_backward<T>(q, k, v, d_out, dq, dk, dv, encoding, phi, options, nullptr, nullptr, nullptr, grad,
                                 backend);
}

/**
 * The backward of the segment form of causal `linear_attention` (a sequence split across calls
 * or machines): as the single-call backward, plus the state.
 * @param initial   the state as it was *before* the forward call (keep a copy, or an exported
 *                  snapshot: the forward call advances it).
 * @param d_final   dL/d(the state the forward call left), from the backward of the next segment
 *                  (its `d_initial`), or null for the last segment.
 * @param d_initial receives dL/d(`initial`) (null: not wanted), sized feature_dim × d_v.
 * Splitting a sequence in segments and running their backwards from the last to the first,
 * each handing its `d_initial` to the previous one as `d_final`, gives the gradients of one call.
 */
template <class Q, class K, class V, class DO, class DQ, class DK, class DV, class Encoding, class Phi, class T,
          class Backend = backend::reference>
  requires detail::matrix_input<Q> && detail::matrix_input<K> && detail::matrix_input<V> && detail::matrix_input<DO>
void linear_attention_backward(const Q& q_in, const K& k_in, const V& v_in, const DO& d_out_in, DQ&& dq_in, DK&& dk_in,
                               DV&& dv_in, const Encoding& encoding, const Phi& phi,
                               const linear_attention_state<T>& initial,
                               const std::type_identity_t<linear_state_gradient<T>>* d_final,
                               std::type_identity_t<linear_state_gradient<T>>* d_initial, const linear_options& options,
                               detail::gradient_t<Encoding>* grad = nullptr, Backend backend = {}) {
  constexpr const char* where = "lrpe::linear_attention_backward";
  const auto [q, k, v, d_out, dq, dk, dv] = detail::linear_backward_views(q_in, k_in, v_in, d_out_in, dq_in, dk_in, dv_in);
  static_assert(std::is_same_v<detail::input_scalar_t<Q>, T>,
                "lrpe::linear_attention_backward: the state's scalar must be the scalar of q");
  detail::validate_linear_backward<T, Encoding, Phi>(q, k, v, dq, dk, dv, encoding, grad, where);
  const matrix_view<T> d_out_shape(const_cast<T*>(d_out.data), d_out.rows, d_out.cols, d_out.row_stride);  // read only
  const index_t f = detail::validate_linear<T>(q, k, v, d_out_shape, encoding, phi, options, &initial, where);
  if (d_final != nullptr) {
    detail::require_shape(d_final->kv.rows() == f && d_final->kv.cols() == v.cols && d_final->k_sum.size() == f, where,
                          "d_final", detail::lazy_concat("must be ", f, "x", v.cols, " (feature_dim x v.cols) and ", f),
                          detail::lazy_concat(d_final->kv.rows(), "x", d_final->kv.cols(), " and ", d_final->k_sum.size()));
  }
  detail::run_linear_backward<T>(q, k, v, d_out, dq, dk, dv, encoding, phi, options, &initial, d_final, d_initial, grad,
                                 backend);
}

/**
 * Multi-head `linear_attention_backward`: for every (b, h), the single-head backward on the
 * head's views with encoding `head_encoding(encodings, h)` and decay `options.head_decays[h]`
 * (or `options.decay`); dq per head, dk and dv summed over the query heads that read each K/V
 * head (grouped-query attention, as the multi-head forward). Heads run in order on the calling
 * thread.
 * @param grads none; one `make_gradient()` for an encoding shared by every head (summed over
 *              heads and batch); or one per head (q.heads of them) for per-head encoders.
 * `options.decay_gradient`: null, or q.heads doubles: dL/dλ_h added to entry h (summed over the
 * batch; with one λ for every head, its gradient is the entries' sum).
 * @throws shape_error for the views as the multi-head forward, for d_out, dq, dk, dv and grads;
 *         parameter_error (`options.head_decays`); and the single-head errors.
 */
template <class TQ, class TK, class TV, class TD, class T, class Encodings, class Phi,
          class Backend = backend::reference>
void linear_attention_backward(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                               const heads_view<TD>& d_out, const heads_view<T>& dq, const heads_view<T>& dk,
                               const heads_view<T>& dv, const Encodings& encodings, const Phi& phi,
                               const linear_options& options = {}, std::span<detail::gradient_t<detail::head_encoding_t<Encodings>>> grads = {},
                               Backend backend = {}) {
  constexpr const char* where = "lrpe::linear_attention_backward (multi-head)";
  static_assert(!std::is_const_v<T>, "lrpe::linear_attention_backward: dq, dk, dv must be mutable heads_views");
  detail::validate_backward_heads(q, k, v, d_out, d_out, dq, dk, dv, where);
  detail::validate_head_decays(options, q.heads, where);
  detail::require_head_gradients<Encodings>(grads.size(), q.heads, where);
  detail::check_head_encodings<std::remove_const_t<TQ>>(encodings, q.heads, q.dim, where);
  constexpr bool shared = detail::shared_encoding_v<Encodings>;
  detail::for_each_backward_head(q, k, dk, dv, [&](index_t b, index_t h, index_t hk, const auto& dk_h, const auto& dv_h) {
    linear_options head_options = detail::head_linear_options(options, h);
    if (options.decay_gradient != nullptr) head_options.decay_gradient = options.decay_gradient + h;
    auto* grad = grads.empty() ? nullptr : &grads[shared ? 0 : static_cast<std::size_t>(h)];
    linear_attention_backward(detail::as_const_heads(q).head(b, h), detail::as_const_heads(k).head(b, hk),
                              detail::as_const_heads(v).head(b, hk), detail::as_const_heads(d_out).head(b, h),
                              dq.head(b, h), dk_h, dv_h, detail::head_encoding(encodings, h, q.heads, where), phi,
                              head_options, grad, backend);
  });
}

/**
 * Multi-head backward of the segment form (the multi-head `linear_attention` with `states`):
 * head (b, h) runs the single-head segment backward with `initial[i]` (its state as it was
 * before the forward call), `d_final[i]` (the next segment's `d_initial[i]`; an empty span for
 * the last segment) and writes `d_initial[i]` (an empty span: not wanted), i = b·heads + h.
 * dq, dk, dv, `grads` and `options.decay_gradient` as the multi-head backward without states.
 * Every state and state gradient is checked before any head runs.
 * @throws shape_error (the spans' sizes, a d_final not shaped as its state), and the errors of
 *         the multi-head forward with states and of the multi-head backward.
 */
template <class TQ, class TK, class TV, class TD, class T, class Encodings, class Phi,
          class Backend = backend::reference>
void linear_attention_backward(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                               const heads_view<TD>& d_out, const heads_view<T>& dq, const heads_view<T>& dk,
                               const heads_view<T>& dv, const Encodings& encodings, const Phi& phi,
                               std::type_identity_t<std::span<const linear_attention_state<T>>> initial,
                               std::type_identity_t<std::span<const linear_state_gradient<T>>> d_final,
                               std::type_identity_t<std::span<linear_state_gradient<T>>> d_initial,
                               const linear_options& options,
                               std::span<detail::gradient_t<detail::head_encoding_t<Encodings>>> grads = {},
                               Backend backend = {}) {
  constexpr const char* where = "lrpe::linear_attention_backward (multi-head, states)";
  static_assert(!std::is_const_v<T>, "lrpe::linear_attention_backward: dq, dk, dv must be mutable heads_views");
  detail::validate_backward_heads(q, k, v, d_out, d_out, dq, dk, dv, where);
  detail::validate_head_decays(options, q.heads, where);
  detail::require_head_gradients<Encodings>(grads.size(), q.heads, where);
  detail::check_head_states(q, k, v, encodings, options, initial, where);
  const index_t count = q.batch * q.heads;
  for (const auto& [size, arg] : {std::pair{d_final.size(), "d_final.size()"}, std::pair{d_initial.size(), "d_initial.size()"}})
    detail::require_shape(size == 0 || static_cast<index_t>(size) == count, where, arg,
                          detail::lazy_concat("must be 0 or batch x heads = ", count), size);
  for (std::size_t i = 0; i < d_final.size(); ++i) {
    const index_t f = initial[i].feature_dim(), dvi = initial[i].value_dim();
    detail::require_shape(d_final[i].kv.rows() == f && d_final[i].kv.cols() == dvi && d_final[i].k_sum.size() == f,
                          where, "d_final",
                          detail::lazy_concat("[", i, "] must be ", f, "x", dvi, " and ", f, " (its state's shapes)"),
                          detail::lazy_concat(d_final[i].kv.rows(), "x", d_final[i].kv.cols(), " and ",
                                              d_final[i].k_sum.size()));
  }
  constexpr bool shared = detail::shared_encoding_v<Encodings>;
  detail::for_each_backward_head(q, k, dk, dv, [&](index_t b, index_t h, index_t hk, const auto& dk_h, const auto& dv_h) {
    linear_options head_options = detail::head_linear_options(options, h);
    if (options.decay_gradient != nullptr) head_options.decay_gradient = options.decay_gradient + h;
    auto* grad = grads.empty() ? nullptr : &grads[shared ? 0 : static_cast<std::size_t>(h)];
    const auto i = static_cast<std::size_t>(b * q.heads + h);
    linear_attention_backward(detail::as_const_heads(q).head(b, h), detail::as_const_heads(k).head(b, hk),
                              detail::as_const_heads(v).head(b, hk), detail::as_const_heads(d_out).head(b, h),
                              dq.head(b, h), dk_h, dv_h, detail::head_encoding(encodings, h, q.heads, where), phi,
                              initial[i], d_final.empty() ? nullptr : &d_final[i],
                              d_initial.empty() ? nullptr : &d_initial[i], head_options, grad, backend);
  });
}

}  // namespace v0
}  // namespace lrpe
