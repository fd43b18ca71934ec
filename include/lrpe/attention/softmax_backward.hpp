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
 * | `additive_encoding` (ALiBi, T5, Toeplitz tables) | from dS (the bias does not depend on Q, K) | the head's slope or table row: dL/dbias(s, t) = dS_st |
 * | `differentiable_score` (Shaw with a^V, DeBERTa) | `score_backward` per entry | its tables (`make_gradient()`) |
 * | `has_features_backward` (Transformer-XL, cosFormer) | dS gives the features' gradients; `features_backward` gives dQ, dK | XL's u, v, W_R |
 *
 * URPE's reweighting C is differentiated through, and its table gets a gradient where
 * `options.reweight_gradient` asks for one. Another encoding is a compile error naming what it
 * lacks.
 * The multi-head forms take `heads_view`s, grouped-query K/V included (dK, dV summed over each
 * K/V head's query heads).
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/multihead.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/softmax.hpp>
#include <lrpe/encoder.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {

namespace detail {

/// dq, dk, dv: valid views shaped as q, k, v (the outputs of every attention backward).
template <class T>
void require_gradient_shapes(const matrix_view<const T>& q, const matrix_view<const T>& k, const matrix_view<const T>& v,
                             const matrix_view<T>& dq, const matrix_view<T>& dk, const matrix_view<T>& dv,
                             const char* where) {
  validate(dq, where, "dq");
  validate(dk, where, "dk");
  validate(dv, where, "dv");
  require_equal(dq.rows, q.rows, where, "dq.rows", "q.rows");
  require_equal(dq.cols, q.cols, where, "dq.cols", "q.cols");
  require_equal(dk.rows, k.rows, where, "dk.rows", "k.rows");
  require_equal(dk.cols, k.cols, where, "dk.cols", "k.cols");
  require_equal(dv.rows, v.rows, where, "dv.rows", "v.rows");
  require_equal(dv.cols, v.cols, where, "dv.cols", "v.cols");
}

/// Validates the backward's own arguments (the forward's are validated as by softmax_attention).
template <class T>
void validate_softmax_backward(const matrix_view<const T>& q, const matrix_view<const T>& k,
                               const matrix_view<const T>& v, const matrix_view<const T>& d_out,
                               std::span<const T> lse, const matrix_view<T>& dq, const matrix_view<T>& dk,
                               const matrix_view<T>& dv, const char* where) {
  validate(d_out, where, "d_out");
  require_equal(d_out.rows, q.rows, where, "d_out.rows", "q.rows");
  require_equal(d_out.cols, v.cols, where, "d_out.cols", "v.cols");
  require_shape(lse.empty() || static_cast<index_t>(lse.size()) == q.rows, where, "lse.size()",
                lazy_concat("must be 0 (recomputed) or q.rows = ", q.rows), lse.size());
  require_gradient_shapes(q, k, v, dq, dk, dv, where);
}

/// What `make_gradient()` of an encoding returns (`encoder_gradient` for encoders, a vector for
/// a learnable additive bias); `encoder_gradient` for an encoding without one (null is passed).
template <class E>
struct gradient_of {
  using type = encoder_gradient;
};
template <class E>
  requires requires(const E& e) { e.make_gradient(); }
struct gradient_of<E> {
  using type = decltype(std::declval<const E&>().make_gradient());
};
template <class E>
using gradient_t = typename gradient_of<E>::type;

/**
 * A linearizable encoding whose features have a backward (Transformer-XL, cosFormer):
 * `features_backward(side, x, g, pos, dx, grad)` writes dx = (∂φ_side(x, pos)/∂x)ᵀ g (dim()
 * entries, from the feature_dim() entries of g) and, when `grad` is not null, adds the
 * parameters' gradient to it (`parameter_count()` entries; none for cosFormer).
 */
template <class E, class T>
concept has_features_backward = requires(const E& e, const T* x, position_t pos, T* dx, double* grad) {
  e.features_backward(canonical::side::query, x, x, pos, dx, grad);
};

/// True for an encoding with parameters of its own (`parameter_count()`, a vector gradient).
template <class E>
inline constexpr bool has_parameter_vector_v = requires(const E& e) {
  { e.parameter_count() } -> std::convertible_to<index_t>;
  { e.make_gradient() } -> std::same_as<std::vector<double>>;
};

/// `grad`'s entries for an encoding with a parameter vector (null when there is none).
template <class E, class G>
double* parameter_data(G* grad) {
  if constexpr (has_parameter_vector_v<E>) return grad != nullptr ? grad->data() : nullptr;
  else return nullptr;
}

/// grad: null, or `make_gradient()`-shaped (an encoder's, or an encoding's parameter vector).
template <class Encoding>
void check_encoding_gradient(const Encoding& encoding, const gradient_t<Encoding>* grad, const char* where) {
  if constexpr (lrpe_encoder<Encoding>) {
    encoding.check_gradient(grad, where);
  } else if constexpr (has_parameter_vector_v<Encoding>) {
    if (grad != nullptr)
      require_equal(static_cast<index_t>(grad->size()), encoding.parameter_count(), where, "grad->size()",
                    "encoding.parameter_count()");
  }
}

/// The features' backward of rows x at `pos`: dx (written) from the features' gradient g, and
/// the parameters' gradient (an encoder's `encode_backward`, or the encoding's `features_backward`).
template <class T, class Encoding, class Backend>
void features_backward_rows(const Backend& backend, const Encoding& encoding, canonical::side which,
                            const matrix_view<const T>& x, const positions& pos, const matrix_view<const T>& g,
                            const matrix_view<T>& dx, gradient_t<Encoding>* grad) {
  if constexpr (lrpe_encoder<Encoding>) {
    (void)which;
    encode_backward(backend, encoding, x, pos, g, dx, grad);
  } else {
    double* params = parameter_data<Encoding>(grad);
    for (index_t i = 0; i < x.rows; ++i) encoding.features_backward(which, x.row(i), g.row(i), pos[i], dx.row(i), params);
  }
}

/**
 * dL/dσ of a sink σ: the sink's probability in row s is p_s = e^{σ − lse_s} and
 * ∂O_s/∂σ = −p_s·O_s, so dL/dσ = −Σ_s p_s (dO_s·O_s) (in double).
 */
template <class T>
double sink_gradient(const matrix_view<const T>& out, const matrix_view<const T>& d_out, std::span<const T> lse,
                     double sink) {
  double g = 0;
  for (index_t i = 0; i < out.rows; ++i) {
    double dot = 0;
    for (index_t j = 0; j < out.cols; ++j)
      dot += static_cast<double>(d_out.row(i)[j]) * static_cast<double>(out.row(i)[j]);
    if (dot != 0) g -= std::exp(sink - static_cast<double>(lse[static_cast<std::size_t>(i)])) * dot;
  }
  return g;
}

/// The encoding of one head of a multi-head call (the element of a range, a table's head, …).
template <class Encodings>
using head_encoding_t = std::remove_cvref_t<decltype(head_encoding(std::declval<const Encodings&>(), 0, 1, ""))>;

/// `pos` − centre for `rows` rows (an offset, or `storage` holding the shifted array). The call's
/// positions span at most 2^63 − 1 (validated), so no difference overflows.
inline positions shifted(const positions& pos, index_t rows, position_t centre, std::vector<position_t>& storage) {
  if (!pos.is_array()) return positions(pos.offset() - centre);
  storage.resize(static_cast<std::size_t>(rows));
  for (index_t i = 0; i < rows; ++i) storage[static_cast<std::size_t>(i)] = pos[i] - centre;
  return positions(std::span<const position_t>(storage));
}

/**
 * The backward through an encoder or a feature encoding (Transformer-XL, cosFormer): Q and K
 * encoded, the kernel on the features, then the features' backward to dq, dk and the parameters. The logits depend on t − s only, so Q and K
 * are encoded at positions shifted by the first query's: the same scores, and dL/dθ = Σ s·(…)
 * over rows at |s| ≤ the call's span instead of at |s| up to 2^63, where the sums over Q and
 * over K cancel to the few digits left.
 */
template <class T, class Encoding, class Reweight, class Backend>
void softmax_backward_encoded(const matrix_view<const T>& q, const matrix_view<const T>& k, const matrix_view<T>& dq,
                              const matrix_view<T>& dk, const Encoding& encoding,
                              const softmax_options<Reweight>& options, T scale, gradient_t<Encoding>* grad,
                              backend::softmax_backward_problem<T> problem, const Backend& backend) {
  const position_t centre = options.q_positions[0];
  std::vector<position_t> q_shifted, k_shifted;
  const positions qp = shifted(options.q_positions, q.rows, centre, q_shifted);
  const positions kp = shifted(options.k_positions, k.rows, centre, k_shifted);
  const index_t f = encoding.feature_dim();
  using backend::acquire_feature_scratch;
  backend::feature_scratch<T> fs;  // (the backend's reused memory, where it has some)
  acquire_feature_scratch(backend, fs, q.rows, k.rows, f);
  row_matrix<T> dqf(q.rows, f), dkf(k.rows, f);
  using backend::encode_features_kernel;
  encode_features_kernel(backend, encoding, canonical::side::query, q, qp, fs.q);
  encode_features_kernel(backend, encoding, canonical::side::key, k, kp, fs.k);
  problem.da = view(dqf);
  problem.db = view(dkf);
  const backend::dot_logits<T> content{matrix_view<const T>(fs.q), matrix_view<const T>(fs.k), scale,
                                       static_cast<T>(options.softcap)};
  using backend::softmax_backward_kernel;
  softmax_backward_kernel(backend, problem, content, content, options.reweight);
  features_backward_rows(backend, encoding, canonical::side::query, q, qp, view(std::as_const(dqf)), dq, grad);
  features_backward_rows(backend, encoding, canonical::side::key, k, kp, view(std::as_const(dkf)), dk, grad);
}

/**
 * The multi-head backwards' loop over (b, h): `head(b, h, hk, dk_h, dv_h)` writes query head h's
 * dq and its own dK, dV into `dk_h`, `dv_h`: the K/V head's views, or without grouped-query
 * K/V; with it, scratch that is then added to the K/V head's (zeroed first), so that dK and dV
 * sum over each group's query heads.
 */
template <class S, class TQ, class TK, class F>
void for_each_backward_head(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<S>& dk,
                            const heads_view<S>& dv, F&& head) {
  const bool grouped = k.heads != q.heads;
  row_matrix<S> dk_head(grouped ? dk.seq : 0, dk.dim), dv_head(grouped ? dv.seq : 0, dv.dim);
  for (index_t b = 0; b < q.batch; ++b) {
    for (index_t hk = 0; hk < k.heads && grouped; ++hk) {
      for (const auto* m : {&dk, &dv}) {
        const auto kv = m->head(b, hk);
        for (index_t i = 0; i < kv.rows; ++i) std::fill(kv.row(i), kv.row(i) + kv.cols, S(0));
      }
    }
    for (index_t h = 0; h < q.heads; ++h) {
      const index_t hk = kv_head(q, k, h);
      head(b, h, hk, grouped ? view(dk_head) : dk.head(b, hk), grouped ? view(dv_head) : dv.head(b, hk));
      if (!grouped) continue;
      const auto dk_out = dk.head(b, hk), dv_out = dv.head(b, hk);
      for (index_t i = 0; i < dk.seq; ++i)
        for (index_t j = 0; j < dk.dim; ++j) dk_out.row(i)[j] += dk_head(i, j);
      for (index_t i = 0; i < dv.seq; ++i)
        for (index_t j = 0; j < dv.dim; ++j) dv_out.row(i)[j] += dv_head(i, j);
    }
  }
}

/// The multi-head backwards' views: each whole and valid, K/V heads dividing Q's, d_out and
/// the gradients shaped as out (`out_like`: the forward's out, or d_out) and q, k, v.
template <class TQ, class TK, class TV, class TO, class TD, class T>
void validate_backward_heads(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                             const heads_view<TO>& out_like, const heads_view<TD>& d_out, const heads_view<T>& dq,
                             const heads_view<T>& dk, const heads_view<T>& dv, const char* where) {
  for (const auto& [x, name] : {std::pair{as_const_heads(q), "q"}, std::pair{as_const_heads(k), "k"},
                                std::pair{as_const_heads(v), "v"}, std::pair{as_const_heads(out_like), "out"},
                                std::pair{as_const_heads(d_out), "d_out"}, std::pair{as_const_heads(dq), "dq"},
                                std::pair{as_const_heads(dk), "dk"}, std::pair{as_const_heads(dv), "dv"}})
    validate_heads(x, where, name);
  require_kv_heads(q, k, where, "k");
  require_same_bh(k, v, where, "v");
  require_same_bh(q, out_like, where, "out");
  require_same_bh(q, d_out, where, "d_out");
  require_same_bh(q, dq, where, "dq");
  require_same_bh(k, dk, where, "dk");
  require_same_bh(v, dv, where, "dv");
  require_head_shapes(q, k, v, out_like, where);
  require_head_shapes(q, k, v, d_out, where);
}

/// grads: empty, one (an encoding shared by every head) or one per head.
template <class Encodings>
void require_head_gradients(std::size_t count, index_t heads, const char* where) {
  constexpr bool shared = shared_encoding_v<Encodings>;
  require_shape(count == 0 || static_cast<index_t>(count) == (shared ? 1 : heads), where, "grads.size()",
                shared ? "must be 0 or 1 (one encoder shared by every head)"
                       : "must be 0 or q.heads (one gradient per head's encoder)",
                count);
}

}  // namespace detail

/// The gradient type of an encoding (`make_gradient()`): `encoder_gradient` for encoders,
/// `std::vector<double>` for an encoding with tables (ALiBi, T5, Toeplitz, Shaw, DeBERTa, XL).
template <class Encoding>
using encoding_gradient_t = detail::gradient_t<Encoding>;

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
 * @param grad      null, or `encoding.make_gradient()`-shaped: an `encoder_gradient` for an
 *                  `lrpe::encoder`, a vector for an encoding with tables (ALiBi, T5, Toeplitz,
 *                  Shaw, DeBERTa, Transformer-XL) (added to).
 * @param backend   a backend with `softmax_backward_kernel` (the reference; `simd<A>` and
 *                  `simd_policy<A>` run their own kernel, backend/simd/softmax_backward.hpp).
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
                                detail::gradient_t<Encoding>* grad = nullptr, Backend backend = {}) {
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
  constexpr bool is_featured = lrpe_encoder<Encoding> || detail::has_features_backward<Encoding, T>;
  constexpr bool is_additive = additive_encoding<Encoding> && !value_encoding<Encoding>;
  constexpr bool is_score = !is_featured && !is_additive && differentiable_score<Encoding> &&
                            (!value_encoding<Encoding> || differentiable_value_term<Encoding>);
  static_assert(is_none || is_featured || is_additive || is_score,
                "lrpe::softmax_attention_backward: the encoding has no backward: no_encoding, every "
                "lrpe::encoder, additive encodings (ALiBi, T5, Toeplitz tables), Shaw, DeBERTa, "
                "Transformer-XL and cosFormer have one; a user encoding needs score_backward "
                "(lrpe::differentiable_score) or features_backward (docs/training.md)");
  // out is read; the forward's validation wants a mutable view of the same shape
  const matrix_view<T> out_shape(const_cast<T*>(out.data), out.rows, out.cols, out.row_stride);
  detail::validate_softmax(q, k, v, out_shape, encoding, options, where);
  detail::validate_softmax_backward(q, k, v, d_out, lse, dq, dk, dv, where);
  detail::check_encoding_gradient(encoding, grad, where);
  if constexpr (!backend::learnable_reweight_v<Reweight>) {
    detail::require_parameter(options.reweight_gradient == nullptr, where, "options.reweight_gradient",
                              "must be null: the reweighting has no parameters", "non-null");
  }
  if (q.rows == 0 || k.rows == 0) {  // no key visible anywhere: every gradient is zero
    for (const auto* m : {&dq, &dk, &dv})
      for (index_t i = 0; i < m->rows; ++i) std::fill(m->row(i), m->row(i) + m->cols, T(0));
    return;
  }
  const double scale_d = detail::softmax_scale<T>(encoding, options, q.cols, where);
  const T scale = static_cast<T>(scale_d);
  std::vector<T> own_lse;  // (recomputed here only for a sink's gradient without the forward's)
  if (options.sink_gradient != nullptr && options.sink != -std::numeric_limits<double>::infinity()) {
    if (lse.empty()) {
      own_lse.resize(static_cast<std::size_t>(q.rows));
      row_matrix<T> scratch(q.rows, v.cols);
      detail::run_softmax(q, k, v, view(scratch), own_lse.data(), encoding, options, scale_d, backend);
      lse = own_lse;
    }
    *options.sink_gradient += detail::sink_gradient(out, d_out, lse, options.sink);
  }
  using backend::call_guard;
  [[maybe_unused]] const auto guard = call_guard(backend);

  const T softcap = static_cast<T>(options.softcap);
  backend::softmax_backward_problem<T> problem{
      {q.rows, k.rows, v, out_shape, options.q_positions, options.k_positions, options.mask(), options.tile, nullptr,
       options.sink},
      d_out,
      lse.empty() ? nullptr : lse.data(),
      dq,
      dk,
      dv,
      nullptr,
      options.reweight_gradient};
  using backend::softmax_backward_kernel;
  if constexpr (is_none) {
    const backend::dot_logits<T> content{q, k, scale, softcap};
    softmax_backward_kernel(backend, problem, content, content, options.reweight);
  } else if constexpr (is_featured) {
    detail::softmax_backward_encoded(q, k, dq, dk, encoding, options, scale, grad, problem, backend);
  } else if constexpr (is_score) {  // dq, dk and the tables' gradient from score_backward
    problem.bias_grad = detail::parameter_data<Encoding>(grad);
    softmax_backward_kernel(backend, problem, backend::dot_logits<T>{q, k, scale},
                            backend::score_logits<T, Encoding>{&encoding, q, k, options.q_positions,
                                                               options.k_positions, scale_d, options.softcap},
                            options.reweight);
  } else {
    if constexpr (backend::learnable_bias_v<backend::biased_logits<T, Encoding>>) {
      if (grad != nullptr) problem.bias_grad = grad->data();
    }
    const backend::dot_logits<T> content{q, k, scale, softcap};
    softmax_backward_kernel(
        backend, problem, content,
        backend::biased_logits<T, Encoding>{content, &encoding, options.q_positions, options.k_positions},
        options.reweight);
  }
}

/**
 * Multi-head `softmax_attention_lse`: `lse` holds batch × heads × seq entries, entry
 * (b·heads + h)·seq + i for row i of head h of batch entry b. Arguments and errors as the
 * multi-head `softmax_attention`; heads run in order on the calling thread.
 */
template <class TQ, class TK, class TV, class T, class Encodings, class Reweight = no_reweighting,
          class Backend = backend::reference>
void softmax_attention_lse(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                           const heads_view<T>& out, std::span<T> lse, const Encodings& encodings,
                           const softmax_options<Reweight>& options = {}, Backend backend = {}) {
  constexpr const char* where = "lrpe::softmax_attention_lse (multi-head)";
  static_assert(!std::is_const_v<T>, "lrpe::softmax_attention_lse: out must be a mutable heads_view");
  detail::validate_attention_heads(q, k, v, out, where);
  detail::require_equal(static_cast<index_t>(lse.size()), q.batch * q.heads * q.seq, where, "lse.size()",
                        "q.batch * q.heads * q.seq");
  const auto span = detail::head_call_span(options, q.seq, k.seq, where);
  detail::check_head_encodings<std::remove_const_t<TQ>>(encodings, q.heads, q.dim, where, &span);
  detail::validate_head_sinks<std::remove_const_t<TQ>>(options, q.heads, where);
  for (index_t b = 0; b < q.batch; ++b) {
    for (index_t h = 0; h < q.heads; ++h) {
      const index_t hk = detail::kv_head(q, k, h);
      const softmax_options<Reweight> head_options = detail::head_softmax_options(options, h, q.heads, where);
      softmax_attention_lse(detail::as_const_heads(q).head(b, h), detail::as_const_heads(k).head(b, hk),
                            detail::as_const_heads(v).head(b, hk), out.head(b, h),
                            lse.subspan(static_cast<std::size_t>((b * q.heads + h) * q.seq), static_cast<std::size_t>(q.seq)),
                            detail::head_encoding(encodings, h, q.heads, where), head_options, backend);
    }
  }
}

/**
 * Multi-head `softmax_attention_backward`: dq (q's shape) is written per head; dk and dv (k's
 * and v's shapes) get, per K/V head, the sum over the query heads that read it (grouped-query
 * attention). `lse`: as written by the multi-head `softmax_attention_lse`, or empty.
 * @param grads none; one gradient (`make_gradient()` of the encoding) for an encoder shared by
 *              every head (summed over heads and batch); or one per head (q.heads of them) for
 *              per-head encoders and per-head tables (ALiBi's slope, T5's row of head h).
 * @throws shape_error as the multi-head forward, and for d_out, dq, dk, dv, lse or grads of the
 *         wrong shape or count.
 */
template <class TQ, class TK, class TV, class TO, class TD, class T, class Encodings, class Reweight = no_reweighting,
          class Backend = backend::reference>
void softmax_attention_backward(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                                const heads_view<TO>& out, const heads_view<TD>& d_out,
                                std::span<const std::remove_const_t<TQ>> lse, const heads_view<T>& dq,
                                const heads_view<T>& dk, const heads_view<T>& dv, const Encodings& encodings,
                                const softmax_options<Reweight>& options = {},
                                std::span<detail::gradient_t<detail::head_encoding_t<Encodings>>> grads = {},
                                Backend backend = {}) {
  constexpr const char* where = "lrpe::softmax_attention_backward (multi-head)";
  static_assert(!std::is_const_v<T>, "lrpe::softmax_attention_backward: dq, dk, dv must be mutable heads_views");
  detail::validate_backward_heads(q, k, v, out, d_out, dq, dk, dv, where);
  detail::require_shape(lse.empty() || static_cast<index_t>(lse.size()) == q.batch * q.heads * q.seq, where,
                        "lse.size()", detail::lazy_concat("must be 0 (recomputed) or q.batch * q.heads * q.seq = ",
                                                          q.batch * q.heads * q.seq),
                        lse.size());
  detail::require_head_gradients<Encodings>(grads.size(), q.heads, where);
  const auto span = detail::head_call_span(options, q.seq, k.seq, where);
  detail::check_head_encodings<std::remove_const_t<TQ>>(encodings, q.heads, q.dim, where, &span);
  detail::validate_head_sinks<std::remove_const_t<TQ>>(options, q.heads, where);
  constexpr bool shared = detail::shared_encoding_v<Encodings>;
  detail::for_each_backward_head(q, k, dk, dv, [&](index_t b, index_t h, index_t hk, const auto& dk_h, const auto& dv_h) {
    const softmax_options<Reweight> head_options = detail::head_softmax_options(options, h, q.heads, where);
    auto* grad = grads.empty() ? nullptr : &grads[shared ? 0 : static_cast<std::size_t>(h)];
    const auto head_lse = lse.empty() ? lse : lse.subspan(static_cast<std::size_t>((b * q.heads + h) * q.seq),
                                                          static_cast<std::size_t>(q.seq));
    softmax_attention_backward(detail::as_const_heads(q).head(b, h), detail::as_const_heads(k).head(b, hk),
                               detail::as_const_heads(v).head(b, hk), detail::as_const_heads(out).head(b, h),
                               detail::as_const_heads(d_out).head(b, h), head_lse, dq.head(b, h), dk_h, dv_h,
                               detail::head_encoding(encodings, h, q.heads, where), head_options, grad, backend);
  });
}

}  // namespace v0
}  // namespace lrpe
