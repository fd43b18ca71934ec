// SPDX-License-Identifier: MIT
/**
 * @file softmax.hpp
 * `lrpe::softmax_attention`: softmax attention with any relative encoding (core/relative.hpp).
 *
 *     logit(s, t) = scale · content(q_s, k_t) + bias(s, t)
 *     out_s       = Σ_{t visible} softmax_t(logit(s, ·)) · c(s, t) · (v_t + a^V_{t−s})
 *
 * | encoding | content | bias | how |
 * |---|---|---|---|
 * | `no_encoding` | q·k | 0 | tile GEMM |
 * | `additive_encoding` (ALiBi, T5, tables) | q·k | `bias(s, t)` | tile GEMM + bias per entry |
 * | linearizable (every `lrpe::encoder`, cosFormer, Transformer-XL) | φ_q(q_s, s)·φ_k(k_t, t) (real view of M_s x for encoders) | 0 | features of Q, K once, tile GEMM |
 * | other `relative_encoding` (Shaw, DeBERTa, XL) | `score(q, s, k, t)` | 0 | per pair |
 *
 * `value_encoding`s (Shaw's a^V) add their value term; `options.reweight` is URPE's C.
 */
#pragma once

#include <lrpe/attention/options.hpp>
#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/core/relative.hpp>
#include <lrpe/core/storage.hpp>
#include <lrpe/core/view.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

namespace lrpe {
inline namespace v0 {

namespace detail {

template <class E>
concept has_dim = requires(const E& e) {
  { e.dim() } -> std::convertible_to<index_t>;
};

/// Validation shared by softmax and linear attention: Q, K, V, out shapes and positions (every
/// difference of two positions fits in int64). Returns the positions' spans.
template <class SQ, class SK, class SV, class SO>
call_span validate_qkv(const matrix_view<const SQ>& q, const matrix_view<const SK>& k,
                  const matrix_view<const SV>& v, const matrix_view<SO>& out, const positions& qp,
                  const positions& kp, const char* where) {
  validate(q, where, "q");
  validate(k, where, "k");
  validate(v, where, "v");
  validate(out, where, "out");
  require_shape(q.cols >= 1, where, "q.cols", "must be >= 1 (the width d of q and k)", q.cols);
  require_shape(k.cols == q.cols, where, "k.cols", lazy_concat("must equal q.cols = ", q.cols), k.cols);
  require_shape(v.rows == k.rows, where, "v.rows", lazy_concat("must equal k.rows = ", k.rows), v.rows);
  require_shape(out.rows == q.rows, where, "out.rows", lazy_concat("must equal q.rows = ", q.rows), out.rows);
  require_shape(out.cols == v.cols, where, "out.cols", lazy_concat("must equal v.cols = ", v.cols), out.cols);
  qp.require_rows(q.rows, where, "options.q_positions");
  kp.require_rows(k.rows, where, "options.k_positions");
  return require_position_span(qp, q.rows, kp, k.rows, where);
}

template <class T, class E>
void require_encoding_dim(const E& e, index_t d, const char* where) {
  if constexpr (has_dim<E>) {
    require_shape(static_cast<index_t>(e.dim()) == d, where, "encoding.dim()",
                  lazy_concat("must equal q.cols = ", d), e.dim());
  }
}

}  // namespace detail

namespace detail {

/// The static requirements of a softmax call on scalar T with this encoding and reweighting.
template <class T, class Encoding, class Reweight>
constexpr void require_softmax_types() {
  static_assert(reweighting<Reweight>,
                "lrpe::softmax_attention: options.reweight must be callable as c(s, t) -> double "
                "or have a member weight(s, t)");
  constexpr bool is_none = std::is_same_v<Encoding, no_encoding>;
  static_assert(is_none || relative_encoding<Encoding> || canonical::is_linearizable_v<Encoding>,
                "lrpe::softmax_attention: the encoding must be lrpe::no_encoding, an lrpe::encoder, "
                "or satisfy lrpe::relative_encoding (core/relative.hpp)");
  if constexpr (!is_none) {
    static_assert(std::is_same_v<typename Encoding::scalar, T>,
                  "lrpe::softmax_attention: the encoding's scalar must be the scalar of q, k and v");
  }
}

/// The options of inference engines (window, chunk, softcap, sink) of a single-head call.
template <class T, class Reweight>
void validate_engine_options(const softmax_options<Reweight>& options, const char* where) {
  require_parameter(options.window >= 0, where, "options.window", "must be >= 0 (0: no window)", options.window);
  require_parameter(options.chunk >= 0, where, "options.chunk", "must be >= 0 (0: no chunks)", options.chunk);
  require_parameter(!options.exclude_self || options.causal || options.anti_causal, where, "options.exclude_self",
                    "needs options.causal or options.anti_causal (t != s alone is two calls merged: "
                    "docs/attention.md#directional-masks-disan)",
                    "true");
  if (std::isnan(options.softcap)) fail<domain_error>(where, "options.softcap", "must be finite and >= 0 (0: none)", options.softcap);
  require_parameter(options.softcap >= 0 && finite_in<T>(options.softcap), where, "options.softcap",
                    "must be finite in the scalar type and >= 0 (0: none)", options.softcap);
  require_parameter(options.softcap == 0 || static_cast<T>(options.softcap) > T(0), where, "options.softcap",
                    "must be 0 (none) or > 0 once rounded to the scalar type", options.softcap);
  if (std::isnan(options.sink)) fail<domain_error>(where, "options.sink", "must be a logit or -inf (none)", options.sink);
  require_parameter(options.sink == -std::numeric_limits<double>::infinity() || finite_in<T>(options.sink), where,
                    "options.sink", "must be finite in the scalar type, or -inf (none)", options.sink);
  require_parameter(options.head_sinks.empty(), where, "options.head_sinks",
                    "must be empty for a single-head call (its sink is options.sink)", options.head_sinks.size());
}

/// Validates a softmax call: shapes, tile, the encoding's width and value table (T: the
/// scalar the call computes in; the views may hold 16-bit storage of it).
template <class SQ, class SK, class SV, class SO, class Encoding, class Reweight>
void validate_softmax(const matrix_view<const SQ>& q, const matrix_view<const SK>& k, const matrix_view<const SV>& v,
                      const matrix_view<SO>& out, const Encoding& encoding, const softmax_options<Reweight>& options,
                      const char* where) {
  using T = compute_t<SQ>;
  constexpr bool is_none = std::is_same_v<Encoding, no_encoding>;
  const call_span span = validate_qkv(q, k, v, out, options.q_positions, options.k_positions, where);
  require_parameter(options.tile >= 1, where, "options.tile", "must be >= 1", options.tile);
  validate_engine_options<T>(options, where);
  if constexpr (!is_none) {
    require_encoding_dim<T>(encoding, q.cols, where);
    require_encoding_positions(encoding, span, where);
  }
  if constexpr (value_encoding<Encoding>) {
    bool adds_values = true;  // a Shaw encoding without a^V table adds nothing: any v.cols
    if constexpr (requires { encoding.has_value_table(); }) adds_values = encoding.has_value_table();
    if (adds_values) {
      require_shape(v.cols == static_cast<index_t>(encoding.dim()), where, "v.cols",
                    lazy_concat("must equal encoding.dim() = ", encoding.dim(), " (the encoding adds a^V to the values)"),
                    v.cols);
    }
  }
}

/// The logits' scale in double (options.scale, or the encoding's default for width d), finite in T.
template <class T, class Encoding, class Reweight>
double softmax_scale(const Encoding& encoding, const softmax_options<Reweight>& options, index_t d, const char* where) {
  const double scale_d = resolve_scale(encoding, options.scale, d, where);
  if (!finite_in<T>(scale_d)) fail<domain_error>(where, "options.scale", "must be finite in the scalar type", scale_d);
  return scale_d;
}

/**
 * Whether the backend reads this call's 16-bit K (SK) and V (SV) itself: it overloads
 * `softmax_kernel` for `softmax_problem<T, SV>` with these logits (`softmax_storage_kernel`).
 * Encodings with per-pair scores or a value term, and URPE's reweighting, never do: their K
 * and V are widened first. A linearizable encoding's K is encoded (in T) before the kernel.
 */
template <class Backend, class T, class SK, class SV, class Encoding, class Reweight>
constexpr bool reads_storage() {
  if constexpr (std::is_same_v<Encoding, no_encoding>) {
    return backend::softmax_storage_kernel<Backend, T, SV, backend::dot_logits<T, SK>, Reweight>;
  } else if constexpr (value_encoding<Encoding>) {
    return false;
  } else if constexpr (additive_encoding<Encoding>) {
    return backend::softmax_storage_kernel<Backend, T, SV, backend::biased_logits<T, Encoding, SK>, Reweight>;
  } else if constexpr (canonical::is_linearizable_v<Encoding>) {
    return backend::softmax_storage_kernel<Backend, T, SV, backend::dot_logits<T>, Reweight>;
  } else {
    return false;
  }
}

/// The kernel call of `run_softmax` on views the backend reads (T, or 16-bit storage where
/// `reads_storage` says so).
template <class T, class SK, class SV, class Encoding, class Reweight, class Backend>
void call_softmax_kernel(const matrix_view<const T>& q, const matrix_view<const SK>& k, const matrix_view<const SV>& v,
                         const matrix_view<T>& out, T* lse, const Encoding& encoding,
                         const softmax_options<Reweight>& options, double scale_d, Backend backend) {
  constexpr bool is_none = std::is_same_v<Encoding, no_encoding>;
  const T scale = static_cast<T>(scale_d);
  using backend::call_guard;
  [[maybe_unused]] const auto guard = call_guard(backend);  // e.g. a pool's shared workspace

  backend::softmax_problem<T, SV> problem{q.rows, k.rows, v, out, options.q_positions, options.k_positions,
                                          options.mask(), options.tile, lse, options.sink};
  const T softcap = static_cast<T>(options.softcap);

  auto value_term = [&] {
    if constexpr (value_encoding<Encoding>) {
      return [&encoding](position_t s, position_t t, T w, T* acc) { encoding.add_value_term(s, t, w, acc); };
    } else {
      return backend::no_value_term{};
    }
  }();

  // Hooks are called unqualified: ADL on the backend tag finds a backend's overloads (declared
  // after this header, in any namespace); the using-declarations bring in the defaults and the
  // primary templates for a backend in another namespace.
  using backend::softmax_kernel;
  if constexpr (is_none) {
    softmax_kernel(backend, problem, backend::dot_logits<T, SK>{q, k, scale, softcap}, value_term, options.reweight);
  } else if constexpr (additive_encoding<Encoding>) {
    softmax_kernel(backend, problem,
                   backend::biased_logits<T, Encoding, SK>{{q, k, scale, softcap}, &encoding, options.q_positions,
                                                           options.k_positions},
                   value_term, options.reweight);
  } else if constexpr (canonical::is_linearizable_v<Encoding>) {
    const index_t f = canonical::feature_dim(encoding);
    backend::feature_scratch<T> fs;
    using backend::acquire_feature_scratch;
    using backend::encode_features_kernel;
    acquire_feature_scratch(backend, fs, q.rows, k.rows, f);
    encode_features_kernel(backend, encoding, canonical::side::query, q, options.q_positions, fs.q);
    encode_features_kernel(backend, encoding, canonical::side::key, k, options.k_positions, fs.k);
    softmax_kernel(backend, problem,
                   backend::dot_logits<T>{matrix_view<const T>(fs.q), matrix_view<const T>(fs.k), scale, softcap},
                   value_term, options.reweight);
  } else {
    softmax_kernel(backend, problem,
                   backend::score_logits<T, Encoding>{&encoding, q, k, options.q_positions, options.k_positions, scale_d,
                                                      options.softcap},
                   value_term, options.reweight);
  }
}

/// The body of `softmax_attention` on validated views; writes the rows' log-sum-exps to `lse`
/// when it is not null. K and V may be 16-bit storage (SK, SV) of T: read as they are by a
/// backend that can (`reads_storage`), else widened to T first (O(n_k·(d + d_v)) scratch).
template <class T, class SK, class SV, class Encoding, class Reweight, class Backend>
void run_softmax(const matrix_view<const T>& q, const matrix_view<const SK>& k, const matrix_view<const SV>& v,
                 const matrix_view<T>& out, T* lse, const Encoding& encoding, const softmax_options<Reweight>& options,
                 double scale_d, Backend backend) {
  constexpr bool stored = !std::is_same_v<SK, T> || !std::is_same_v<SV, T>;
  if constexpr (stored && !reads_storage<Backend, T, SK, SV, Encoding, Reweight>()) {
    const widened<T, SK> kw(k);
    const widened<T, SV> vw(v);
    call_softmax_kernel(q, kw.view(), vw.view(), out, lse, encoding, options, scale_d, backend);
  } else if constexpr (!std::is_same_v<SK, T> && canonical::is_linearizable_v<Encoding> &&
                       !std::is_same_v<Encoding, no_encoding>) {
    const widened<T, SK> kw(k);  // encoded in T by the kernel call
    call_softmax_kernel(q, kw.view(), v, out, lse, encoding, options, scale_d, backend);
  } else {
    call_softmax_kernel(q, k, v, out, lse, encoding, options, scale_d, backend);
  }
}

/// The front of `softmax_attention` and `softmax_attention_lse`: the inputs as views, the
/// static checks, the validation (and, with `lse`, its size), then `run_softmax`; a 16-bit Q
/// is widened and a 16-bit out is written through a T scratch (both O(n_q·d)).
template <class Q, class K, class V, class O, class Encoding, class Reweight, class Backend>
void softmax_entry(const char* where, const Q& q_in, const K& k_in, const V& v_in, O&& out_in,
                   std::optional<std::span<compute_t<input_scalar_t<Q>>>> lse, const Encoding& encoding,
                   const softmax_options<Reweight>& options, const Backend& backend) {
  const auto q = as_input(q_in);
  const auto k = as_input(k_in);
  const auto v = as_input(v_in);
  const auto out = as_output(out_in);
  using SO = std::remove_pointer_t<decltype(out.data)>;
  using T = compute_t<input_scalar_t<Q>>;
  static_assert(std::is_same_v<compute_t<input_scalar_t<K>>, T> && std::is_same_v<compute_t<input_scalar_t<V>>, T> &&
                    std::is_same_v<compute_t<SO>, T>,
                "lrpe::softmax_attention: q, k, v and out must have the same scalar type, or be 16-bit "
                "storage of it (lrpe::half, lrpe::bfloat16: computed in float)");
  require_softmax_types<T, Encoding, Reweight>();
  validate_softmax(q, k, v, out, encoding, options, where);
  if (lse) require_equal(static_cast<index_t>(lse->size()), q.rows, where, "lse.size()", "q.rows");
  if (q.rows == 0) return;
  const double scale_d = softmax_scale<T>(encoding, options, q.cols, where);
  T* lse_data = lse ? lse->data() : static_cast<T*>(nullptr);
  const widened<T, input_scalar_t<Q>> qw(q);
  if constexpr (std::is_same_v<SO, T>) {
    run_softmax(qw.view(), k, v, out, lse_data, encoding, options, scale_d, backend);
  } else {
    row_matrix<T> o(out.rows, out.cols);
    run_softmax(qw.view(), k, v, view(o), lse_data, encoding, options, scale_d, backend);
    for (index_t i = 0; i < out.rows; ++i)
      for (index_t c = 0; c < out.cols; ++c) out(i, c) = narrow<SO>(o(i, c));
  }
}

}  // namespace detail

/**
 * Softmax attention of one head with a relative encoding.
 *
 * @param q, k, v  n_q×d, n_k×d, n_k×d_v: `matrix_view`s (any row stride) or row-major Eigen
 *                 matrices / maps / blocks; the same scalar T (float or double).
 * @param out      n_q×d_v output (must not overlap the inputs).
 * @param encoding `no_encoding{}`, an `lrpe::encoder`, or any `relative_encoding` (see the table
 *                 above; e.g. `canonical::alibi`, `t5_bias`, `shaw`, `deberta_v2`); its `dim()`
 *                 must equal d; its scalar must be T.
 * @param options  causal, scale, positions, tile, URPE reweighting (`softmax_options`).
 *
 * Fully masked rows (no visible key, including n_k = 0) are zero; n_q = 0 is a no-op.
 * Stable for logits of any finite magnitude (max-subtracted online softmax).
 * Scratch memory: O(tile·(tile + d_v)) plus, for encoders, the encoded Q and K (O(n·d)).
 * @throws shape_error on mismatched shapes, widths or position arrays; parameter_error if
 * `tile` < 1 or some difference t − s of the positions does not fit in int64 (an offset's last
 * row included); domain_error if the scale is not finite.
 */
template <class Q, class K, class V, class O, class Encoding, class Reweight = no_reweighting,
          class Backend = backend::reference>
  requires detail::matrix_input<Q> && detail::matrix_input<K> && detail::matrix_input<V>
void softmax_attention(const Q& q_in, const K& k_in, const V& v_in, O&& out_in, const Encoding& encoding,
                       const softmax_options<Reweight>& options = {}, Backend backend = {}) {
  detail::softmax_entry("lrpe::softmax_attention", q_in, k_in, v_in, out_in, {}, encoding, options, backend);
}

/**
 * `softmax_attention` that also writes each query row's log-sum-exp of its visible logits,
 * lse_s = log Σ_t e^{logit(s, t)} (−∞ for a row with no visible key; URPE's C does not enter
 * it): what `softmax_attention_backward` takes to skip recomputing it (docs/training.md).
 * @param lse n_q entries (`std::span<T>` of the scalar of q).
 * @throws shape_error if lse.size() ≠ n_q; otherwise as `softmax_attention`.
 */
template <class Q, class K, class V, class O, class Encoding, class Reweight = no_reweighting,
          class Backend = backend::reference>
  requires detail::matrix_input<Q> && detail::matrix_input<K> && detail::matrix_input<V>
void softmax_attention_lse(const Q& q_in, const K& k_in, const V& v_in, O&& out_in,
                           std::span<compute_t<detail::input_scalar_t<Q>>> lse, const Encoding& encoding,
                           const softmax_options<Reweight>& options = {}, Backend backend = {}) {
  detail::softmax_entry("lrpe::softmax_attention_lse", q_in, k_in, v_in, out_in, std::optional(lse), encoding,
                        options, backend);
}

}  // namespace v0
}  // namespace lrpe
