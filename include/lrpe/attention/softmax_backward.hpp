// SPDX-License-Identifier: MIT
/**
 * @file softmax_backward.hpp
 * `lrpe::softmax_attention_backward`: the gradients of `softmax_attention` with respect to Q, K,
 * V and the encoder's parameters, FlashAttention-2's way (no n×n matrix; docs/training.md).
 *
 * | encoding | dQ, dK | parameters |
 * |---|---|---|
 * | `no_encoding` | from dS | none |
 * | every `lrpe::encoder` | dS gives dQ̃, dK̃ (the features); `encoder::backward` gives dQ, dK | θ, Householder v, dense P (added to `grad`) |
 * | `additive_encoding` (ALiBi, T5, tables) | from dS (the bias does not depend on Q, K) | not yet: the bias's own gradient |
 *
 * URPE's reweighting C is differentiated through (C itself is fixed). Other encodings (Shaw,
 * DeBERTa, Transformer-XL, cosFormer, value terms) are a compile error naming what is missing.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/softmax.hpp>
#include <lrpe/encoder.hpp>

#include <span>
#include <type_traits>
#include <vector>

namespace lrpe {
inline namespace v0 {

namespace detail {

/// Validates the backward's own arguments (the forward's are validated as by softmax_attention).
template <class T>
void validate_softmax_backward(const matrix_view<const T>& q, const matrix_view<const T>& k,
                               const matrix_view<const T>& v, const matrix_view<const T>& d_out,
                               std::span<const T> lse, const matrix_view<T>& dq, const matrix_view<T>& dk,
                               const matrix_view<T>& dv, const char* where) {
  validate(d_out, where, "d_out");
  validate(dq, where, "dq");
  validate(dk, where, "dk");
  validate(dv, where, "dv");
  require_equal(d_out.rows, q.rows, where, "d_out.rows", "q.rows");
  require_equal(d_out.cols, v.cols, where, "d_out.cols", "v.cols");
  require_shape(lse.empty() || static_cast<index_t>(lse.size()) == q.rows, where, "lse.size()",
                lazy_concat("must be 0 (recomputed) or q.rows = ", q.rows), lse.size());
  require_equal(dq.rows, q.rows, where, "dq.rows", "q.rows");
  require_equal(dq.cols, q.cols, where, "dq.cols", "q.cols");
  require_equal(dk.rows, k.rows, where, "dk.rows", "k.rows");
  require_equal(dk.cols, k.cols, where, "dk.cols", "k.cols");
  require_equal(dv.rows, v.rows, where, "dv.rows", "v.rows");
  require_equal(dv.cols, v.cols, where, "dv.cols", "v.cols");
}

/// `pos` − centre for `rows` rows (an offset, or `storage` holding the shifted array). The call's
/// positions span at most 2^63 − 1 (validated), so no difference overflows.
inline positions shifted(const positions& pos, index_t rows, position_t centre, std::vector<position_t>& storage) {
  if (!pos.is_array()) return positions(pos.offset() - centre);
  storage.resize(static_cast<std::size_t>(rows));
  for (index_t i = 0; i < rows; ++i) storage[static_cast<std::size_t>(i)] = pos[i] - centre;
  return positions(std::span<const position_t>(storage));
}

}  // namespace detail

/**
 * The backward of `softmax_attention` for one head: dq, dk, dv are written; the encoder's
 * parameter gradients are added to `*grad` when it is not null.
 *
 * @param q, k, v   the forward's inputs (as for `softmax_attention`).
 * @param out       the forward's output O (n_q×d_v).
 * @param d_out     dL/dO (n_q×d_v).
 * @param lse       the forward's log-sum-exps (`softmax_attention_lse`), or empty: recomputed by
 *                  one more pass of the forward kernel.
 * @param dq, dk, dv outputs, shaped as q, k, v; must not overlap the inputs.
 * @param encoding, options  as given to the forward (same positions, causal, scale, reweighting).
 * @param grad      null, or `encoding.make_gradient()`-shaped for an `lrpe::encoder`.
 * @param backend   a backend with `softmax_backward_kernel` (the reference; `simd<A>` runs the
 *                  reference kernel).
 *
 * A query row with no visible key contributes nothing. Scratch: O(tile²) plus, for encoders,
 * the encoded Q and K and their gradients (O(n·d)).
 * @throws shape_error on mismatched shapes; otherwise as `softmax_attention`.
 */
template <class Q, class K, class V, class O, class DO, class DQ, class DK, class DV, class Encoding,
          class Reweight = no_reweighting, class Backend = backend::reference>
  requires detail::matrix_input<Q> && detail::matrix_input<K> && detail::matrix_input<V> &&
           detail::matrix_input<O> && detail::matrix_input<DO>
void softmax_attention_backward(const Q& q_in, const K& k_in, const V& v_in, const O& out_in, const DO& d_out_in,
                                std::span<const detail::input_scalar_t<Q>> lse, DQ&& dq_in, DK&& dk_in, DV&& dv_in,
                                const Encoding& encoding, const softmax_options<Reweight>& options = {},
                                encoder_gradient* grad = nullptr, Backend backend = {}) {
  constexpr const char* where = "lrpe::softmax_attention_backward";
  using T = detail::input_scalar_t<Q>;
  const auto q = detail::as_input(q_in);
  const auto k = detail::as_input(k_in);
  const auto v = detail::as_input(v_in);
  const auto out = detail::as_input(out_in);
  const auto d_out = detail::as_input(d_out_in);
  const auto dq = detail::as_output(dq_in);
  const auto dk = detail::as_output(dk_in);
  const auto dv = detail::as_output(dv_in);
  static_assert(std::is_same_v<decltype(k), const matrix_view<const T>> &&
                    std::is_same_v<decltype(v), const matrix_view<const T>> &&
                    std::is_same_v<decltype(out), const matrix_view<const T>> &&
                    std::is_same_v<decltype(d_out), const matrix_view<const T>> &&
                    std::is_same_v<decltype(dq), const matrix_view<T>> && std::is_same_v<decltype(dk), const matrix_view<T>> &&
                    std::is_same_v<decltype(dv), const matrix_view<T>>,
                "lrpe::softmax_attention_backward: every matrix must have the scalar type of q");
  detail::require_softmax_types<T, Encoding, Reweight>();
  constexpr bool is_none = std::is_same_v<Encoding, no_encoding>;
  constexpr bool is_encoder = lrpe_encoder<Encoding>;
  static_assert(is_none || is_encoder || (additive_encoding<Encoding> && !value_encoding<Encoding>),
                "lrpe::softmax_attention_backward: the encoding has no backward yet: no_encoding, every "
                "lrpe::encoder and additive encodings (ALiBi, T5, tables: without their bias gradient) "
                "have one (docs/training.md)");
  // out is read; the forward's validation wants a mutable view of the same shape
  const matrix_view<T> out_shape(const_cast<T*>(out.data), out.rows, out.cols, out.row_stride);
  detail::validate_softmax(q, k, v, out_shape, encoding, options, where);
  detail::validate_softmax_backward(q, k, v, d_out, lse, dq, dk, dv, where);
  if constexpr (is_encoder) {
    if (grad != nullptr) {
      detail::require_equal(static_cast<index_t>(grad->p.size()), encoding.p_parameter_count(), where,
                            "grad->p.size()", "encoding.p_parameter_count()");
      detail::require_equal(static_cast<index_t>(grad->lambda.size()), encoding.lambda_parameter_count(), where,
                            "grad->lambda.size()", "encoding.lambda_parameter_count()");
    }
  }
  if (q.rows == 0 || k.rows == 0) {  // no key visible anywhere: every gradient is zero
    for (const auto* m : {&dq, &dk, &dv})
      for (index_t i = 0; i < m->rows; ++i) std::fill(m->row(i), m->row(i) + m->cols, T(0));
    return;
  }
  const double scale_d = detail::softmax_scale<T>(encoding, options, q.cols, where);
  const T scale = static_cast<T>(scale_d);
  using backend::call_guard;
  [[maybe_unused]] const auto guard = call_guard(backend);

  backend::softmax_backward_problem<T> problem{
      {q.rows, k.rows, v, out_shape, options.q_positions, options.k_positions, options.causal, options.tile},
      d_out,
      lse.empty() ? nullptr : lse.data(),
      dq,
      dk,
      dv};
  using backend::softmax_backward_kernel;
  if constexpr (is_none) {
    const backend::dot_logits<T> content{q, k, scale};
    softmax_backward_kernel(backend, problem, content, content, options.reweight);
  } else if constexpr (is_encoder) {
    // The logits depend on t − s only, so Q and K are encoded at positions shifted by the first
    // query's: the same scores, and dL/dθ = Σ s·(…) over rows at |s| ≤ the call's span instead of
    // at |s| up to 2^63, where the sums over Q and over K cancel to the few digits left.
    const position_t centre = options.q_positions[0];
    std::vector<position_t> q_shifted, k_shifted;
    const positions qp = detail::shifted(options.q_positions, q.rows, centre, q_shifted);
    const positions kp = detail::shifted(options.k_positions, k.rows, centre, k_shifted);
    const index_t f = encoding.feature_dim();
    row_matrix<T> qf(q.rows, f), kf(k.rows, f), dqf(q.rows, f), dkf(k.rows, f);
    using backend::encode_features_kernel;
    encode_features_kernel(backend, encoding, canonical::side::query, q, qp, view(qf));
    encode_features_kernel(backend, encoding, canonical::side::key, k, kp, view(kf));
    problem.da = view(dqf);
    problem.db = view(dkf);
    const backend::dot_logits<T> content{view(std::as_const(qf)), view(std::as_const(kf)), scale};
    softmax_backward_kernel(backend, problem, content, content, options.reweight);
    encoding.backward(q, qp, view(std::as_const(dqf)), dq, grad);
    encoding.backward(k, kp, view(std::as_const(dkf)), dk, grad);
  } else {
    const backend::dot_logits<T> content{q, k, scale};
    softmax_backward_kernel(
        backend, problem, content,
        backend::biased_logits<T, Encoding>{content, &encoding, options.q_positions, options.k_positions},
        options.reweight);
  }
}

}  // namespace v0
}  // namespace lrpe
