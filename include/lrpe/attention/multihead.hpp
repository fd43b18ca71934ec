// SPDX-License-Identifier: MIT
/**
 * @file multihead.hpp
 * Multi-head attention over `heads_view`s (core/heads.hpp: BNSH or BSNH memory, no copies): the
 * entry points loop over batch × heads (through the backend's `for_each_head`) and call the 2-D
 * kernels on each head's strided `matrix_view`.
 *
 * Per-head parameters: the encoding argument is one encoding (shared), a per-head table with
 * `heads()`/`head(h)` (canonical::alibi, t5_bias, urpe, transformer_xl, ...: head h uses
 * `head(h)`; a one-head table is shared), a random-access range of encodings (one per head), or a
 * callable `h -> encoding`; linear attention takes per-head decays in `linear_options::head_decays`.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/linear.hpp>
#include <lrpe/attention/softmax.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/core/heads.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <initializer_list>
#include <iterator>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>

namespace lrpe {
inline namespace v0 {

namespace detail {

/**
 * The lengths and widths every head's call needs, checked once for the whole call: the grouped
 * decode path (one call per K/V head, writing out by head_stride) makes no per-head call that
 * would see out.seq.
 */
template <class TQ, class TK, class TV, class T>
void require_head_shapes(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                         const heads_view<T>& out, const char* where) {
  require_equal(k.dim, q.dim, where, "k.dim", "q.dim");
  require_equal(v.seq, k.seq, where, "v.seq", "k.seq");
  require_equal(out.seq, q.seq, where, "out.seq", "q.seq");
  require_equal(out.dim, v.dim, where, "out.dim", "v.dim");
}

template <class T, class U>
void require_same_bh(const heads_view<T>& a, const heads_view<U>& b, const char* where, const char* arg) {
  require_shape(a.batch == b.batch && a.heads == b.heads, where, arg,
                lazy_concat("must have batch x heads = ", a.batch, "x", a.heads), lazy_concat(b.batch, "x", b.heads));
}

/**
 * K or V of a multi-head call: q's batch, and q's heads or a divisor of them (grouped-query
 * attention: query head h reads K/V head h / (q.heads / kv.heads), HF's `repeat_kv` order).
 */
template <class T, class U>
void require_kv_heads(const heads_view<T>& q, const heads_view<U>& kv, const char* where, const char* arg) {
  const bool grouped = kv.heads > 0 && q.heads % kv.heads == 0;
  require_shape(kv.batch == q.batch && (kv.heads == q.heads || grouped), where, arg,
                lazy_concat("must have batch = ", q.batch, " and heads = ", q.heads,
                            " or a divisor of it (grouped-query attention)"),
                lazy_concat("batch ", kv.batch, ", heads ", kv.heads));
}

/// The K/V head that query head h reads: h itself, or h / group for grouped-query attention.
template <class T, class U>
index_t kv_head(const heads_view<T>& q, const heads_view<U>& kv, index_t h) noexcept {
  return kv.heads == q.heads ? h : h / (q.heads / kv.heads);
}

/**
 * The most query heads of one group that a grouped-query decode step attends in one call: the
 * SIMD backend's direct kernel takes at most 8 rows (`softmax_direct_max_rows`); more would take
 * its tiled kernel, which sums in another order than the per-head calls.
 */
inline constexpr index_t grouped_decode_rows = 8;

/// The views of a multi-head attention call: each valid, K and V of q's batch (and q's heads or a
/// divisor of them), out of q's, and the lengths and widths every head needs.
template <class TQ, class TK, class TV, class T>
void validate_attention_heads(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                            const heads_view<T>& out, const char* where) {
  validate_heads(q, where, "q");
  validate_heads(k, where, "k");
  validate_heads(v, where, "v");
  validate_heads(out, where, "out");
  require_kv_heads(q, k, where, "k");
  require_same_bh(k, v, where, "v");
  require_same_bh(q, out, where, "out");
  require_head_shapes(q, k, v, out, where);
}

/// A per-head table (canonical alibi, t5_bias, urpe, ...): `heads()` and `head(h)` of the same type.
template <class E>
concept multi_head_table = requires(const E& e, index_t h) {
  { e.heads() } -> std::convertible_to<index_t>;
  { e.head(h) } -> std::same_as<E>;
};

/// Head h of a per-head table: `head(h)` when it has `heads` heads, itself when it has one.
template <multi_head_table E>
E table_head(const E& e, index_t h, index_t heads, const char* where, const char* arg) {
  if (e.heads() == 1) return e;
  require_shape(e.heads() == heads, where, arg, lazy_concat("must have 1 or ", heads, " heads (one per head)"), e.heads());
  return e.head(h);
}

/**
 * The encoding of head h: a callable h -> encoding, a range indexed by h, a per-head table
 * (`heads()` / `head(h)`, e.g. canonical::alibi), or one encoding shared by every head.
 */
template <class E>
decltype(auto) head_encoding(const E& e, index_t h, index_t heads, const char* where) {
  if constexpr (multi_head_table<E>) {
    return table_head(e, h, heads, where, "encoding.heads()");
  } else if constexpr (std::is_invocable_v<const E&, index_t>) {
    return e(h);
  } else if constexpr (std::ranges::random_access_range<const E> && std::ranges::sized_range<const E>) {
    require_shape(static_cast<index_t>(std::ranges::size(e)) == heads, where, "encodings.size()",
                  lazy_concat("must equal the number of heads = ", heads), std::ranges::size(e));
    return std::ranges::begin(e)[static_cast<std::ptrdiff_t>(h)];
  } else {
    return (e);
  }
}

/// True when `E` is one encoding shared by every head (not a per-head table, callable or range).
template <class E>
inline constexpr bool shared_encoding_v =
    !multi_head_table<E> && !std::is_invocable_v<const E&, index_t> &&
    !(std::ranges::random_access_range<const E> && std::ranges::sized_range<const E>);

/**
 * Every head's encoding checked before any head runs (its width against q's, a table's or a
 * range's head count and, given the call's `span`, the positions a pair-keyed encoding covers),
 * so that a bad head h throws before heads 0 … h − 1 have written their outputs. A callable
 * h → encoding is not called twice (it may build each head's encoding): its heads are checked
 * as they run.
 */
template <class T, class E>
void check_head_encodings(const E& encodings, index_t heads, index_t d, const char* where,
                          const call_span* span = nullptr) {
  if constexpr (multi_head_table<E> || !std::is_invocable_v<const E&, index_t>) {
    const index_t distinct = shared_encoding_v<E> ? std::min<index_t>(heads, 1) : heads;
    for (index_t h = 0; h < distinct; ++h) {
      const auto& encoding = head_encoding(encodings, h, heads, where);
      if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(encoding)>, no_encoding>) {
        require_encoding_dim<T>(encoding, d, where);
        if (span != nullptr) require_encoding_positions(encoding, *span, where);
      }
    }
  }
}

/// The spans of a multi-head call's positions (shared by every head), checked as a single-head
/// call checks them.
template <class Options>
call_span head_call_span(const Options& options, index_t q_seq, index_t k_seq, const char* where) {
  options.q_positions.require_rows(q_seq, where, "options.q_positions");
  options.k_positions.require_rows(k_seq, where, "options.k_positions");
  return require_position_span(options.q_positions, q_seq, options.k_positions, k_seq, where);
}

/// `options.head_sinks`: empty (`options.sink` for every head) or one sink per query head, each
/// as `options.sink` must be.
template <class S, class Reweight>
void validate_head_sinks(const softmax_options<Reweight>& options, index_t heads, const char* where) {
  if (options.head_sinks.empty()) return;
  require_size(static_cast<index_t>(options.head_sinks.size()), heads, where, "options.head_sinks");
  for (const double sink : options.head_sinks) {
    if (std::isnan(sink)) fail<domain_error>(where, "options.head_sinks[h]", "must be a logit or -inf (none)", sink);
    require_parameter(sink == -std::numeric_limits<double>::infinity() || finite_in<S>(sink), where,
                      "options.head_sinks[h]", "must be finite in the scalar type, or -inf (none)", sink);
  }
}

/**
 * Query head h's options in a multi-head call: its row of a per-head reweighting table, its sink
 * (`head_sinks[h]`, or `sink`) and its entry of `sink_gradient` (q.heads entries).
 */
template <class Reweight>
softmax_options<Reweight> head_softmax_options(const softmax_options<Reweight>& options, index_t h, index_t heads,
                                               const char* where) {
  softmax_options<Reweight> head = options;
  if constexpr (multi_head_table<Reweight>)
    head.reweight = table_head(options.reweight, h, heads, where, "options.reweight.heads()");
  if (!options.head_sinks.empty()) head.sink = options.head_sinks[static_cast<std::size_t>(h)];
  head.head_sinks = {};
  if (options.sink_gradient != nullptr) head.sink_gradient = options.sink_gradient + h;
  return head;
}

}  // namespace detail

/**
 * Multi-head softmax attention: for every (b, h), `softmax_attention` on the head's strided
 * views with encoding `head_encoding(encodings, h)` and the same options (positions are shared
 * by every batch entry and head). A per-head reweighting (`canonical::urpe` with `heads()` heads)
 * uses `reweight.head(h)`.
 *
 * Grouped-query (and multi-query) attention: k and v may have fewer heads than q, a divisor
 * G of q.heads; query head h then reads K/V head h / (q.heads / G) (HF's `repeat_kv` order),
 * with query head h's encoding applied to both. The result equals the call with K and V
 * repeated to q.heads heads, without the copy.
 * Every view is checked whole before any head runs, on any backend and thread.
 * @throws shape_error (k's batch or heads; v's batch, heads or seq not k's; out's batch, heads or
 * seq not q's, or its dim not v's; k's dim not q's; a view with elements and null data, or whose
 * batch·heads or last element's offset is not an index_t), and the single-head errors.
 */
template <class TQ, class TK, class TV, class T, class Encodings, class Reweight = no_reweighting,
          class Backend = backend::reference>
void softmax_attention(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                       const heads_view<T>& out, const Encodings& encodings,
                       const softmax_options<Reweight>& options = {}, Backend backend = {}) {
  constexpr const char* where = "lrpe::softmax_attention (multi-head)";
  static_assert(!std::is_const_v<T>, "lrpe::softmax_attention: out must be a mutable heads_view");
  detail::validate_attention_heads(q, k, v, out, where);
  const auto span = detail::head_call_span(options, q.seq, k.seq, where);
  detail::check_head_encodings<compute_t<TQ>>(encodings, q.heads, q.dim, where, &span);
  // Decode with grouped K/V (GQA, MQA): one query row per head and one encoding for every head.
  // The group's query heads are the rows of calls over their K/V head (at most
  // grouped_decode_rows each), which is then read (and encoded) once per call instead of once
  // per query head. Rows are independent: the result is the per-head calls' (bit for bit on the
  // SIMD backend, whose direct kernel runs each row alike; to rounding on the reference, whose
  // Eigen products sum several rows in another order than one).
  const index_t group = k.heads > 0 ? q.heads / k.heads : 1;
  detail::validate_head_sinks<compute_t<TQ>>(options, q.heads, where);
  if constexpr (detail::shared_encoding_v<Encodings> && !detail::multi_head_table<Reweight>) {
    options.q_positions.require_rows(q.seq, where, "options.q_positions");
    // (per-head sinks differ between the rows of such a call: they take the per-head path)
    if (group > 1 && q.seq == 1 && q.head_stride >= q.dim && out.head_stride >= out.dim &&
        options.head_sinks.empty()) {
      position_t at[detail::grouped_decode_rows];  // every row at the token's position
      std::fill(at, at + detail::grouped_decode_rows, options.q_positions[0]);
      const index_t calls = (group + detail::grouped_decode_rows - 1) / detail::grouped_decode_rows;
      using backend::for_each_head;
      for_each_head(backend, k.heads * q.batch * calls, [&](index_t item, const auto& head_backend) {
        const index_t hk = item / (q.batch * calls), b = item / calls % q.batch;
        const index_t h0 = hk * group + item % calls * detail::grouped_decode_rows;
        const index_t m = std::min(detail::grouped_decode_rows, (hk + 1) * group - h0);
        softmax_options<Reweight> call_options = options;
        call_options.q_positions = positions(std::span<const position_t>(at, static_cast<std::size_t>(m)));
        const matrix_view<const TQ> rows(q.data + b * q.batch_stride + h0 * q.head_stride, m, q.dim, q.head_stride);
        const matrix_view<T> out_rows(out.data + b * out.batch_stride + h0 * out.head_stride, m, out.dim,
                                      out.head_stride);
        softmax_attention(rows, detail::as_const_heads(k).head(b, hk), detail::as_const_heads(v).head(b, hk), out_rows,
                          encodings, call_options, head_backend);
      });
      return;
    }
  }
  // (b, h) pairs, h-major; a backend may run them on several threads (backend::for_each_head)
  using backend::for_each_head;
  for_each_head(backend, q.heads * q.batch, [&](index_t item, const auto& head_backend) {
    const index_t h = item / q.batch, b = item % q.batch, hk = detail::kv_head(q, k, h);
    const softmax_options<Reweight> head_options = detail::head_softmax_options(options, h, q.heads, where);
    softmax_attention(detail::as_const_heads(q).head(b, h), detail::as_const_heads(k).head(b, hk),
                      detail::as_const_heads(v).head(b, hk), out.head(b, h),
                      detail::head_encoding(encodings, h, q.heads, where), head_options, head_backend);
  });
}

namespace detail {

/**
 * The states of a multi-head segment call, all checked before any head runs, so that an error
 * leaves every state as it was (each head's own call checks its state only as it starts):
 * batch × heads of them, and state b·heads + h with head h's feature and value widths, decay
 * and a last position not after the segment's first positions.
 */
template <class TQ, class TK, class TV, class T, class Encodings>
void check_head_states(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                       const Encodings& encodings, const linear_options& options,
                       std::span<const linear_attention_state<T>> states, const char* where) {
  require_shape(static_cast<index_t>(states.size()) == q.batch * q.heads, where, "states.size()",
                lazy_concat("must equal batch x heads = ", q.batch * q.heads, " (state b*heads + h for head (b, h))"),
                states.size());
  require_parameter(options.causal, where, "options.causal", "must be true when states are given", "false");
  options.q_positions.require_rows(q.seq, where, "options.q_positions");
  options.k_positions.require_rows(k.seq, where, "options.k_positions");
  const call_span span = require_position_span(options.q_positions, q.seq, options.k_positions, k.seq, where);
  const bool per_head = !options.head_decays.empty();
  for (index_t h = 0; h < q.heads; ++h) {
    const auto& encoding = head_encoding(encodings, h, q.heads, where);
    using E = std::remove_cvref_t<decltype(encoding)>;
    index_t f = q.dim;
    if constexpr (!std::is_same_v<E, no_encoding> && is_linearizable_encoding_v<E>) {
      require_encoding_dim<T>(encoding, q.dim, where);  // else a later head would throw mid-call
      require_encoding_positions(encoding, span, where);
      f = canonical::feature_dim(encoding);
    }
    const double lambda = per_head ? options.head_decays[static_cast<std::size_t>(h)] : options.decay;
    for (index_t b = 0; b < q.batch; ++b) {
      const index_t i = b * q.heads + h;
      const linear_attention_state<T>& st = states[static_cast<std::size_t>(i)];
      require_shape(st.feature_dim() == f && st.value_dim() == v.dim, where, "states",
                    lazy_concat("[", i, "] (head b = ", b, ", h = ", h, ") must be ", f, "x", v.dim,
                                " (the head's feature_dim x v.dim)"),
                    lazy_concat(st.feature_dim(), "x", st.value_dim()));
      require_parameter(st.decay() == lambda, where, "states",
                        lazy_concat("[", i, "] (head b = ", b, ", h = ", h, ") must have decay() = ",
                                    per_head ? "options.head_decays[h] = " : "options.decay = ", lambda),
                        st.decay());
      if (st.empty()) continue;
      if (q.seq > 0) {
        require_parameter(options.q_positions[0] >= st.last_position(), where, "options.q_positions[0]",
                          lazy_concat("must be >= states[", i, "].last_position() = ", st.last_position()),
                          options.q_positions[0]);
      }
      if (k.seq > 0) {
        require_parameter(options.k_positions[0] >= st.last_position(), where, "options.k_positions[0]",
                          lazy_concat("must be >= states[", i, "].last_position() = ", st.last_position()),
                          options.k_positions[0]);
      }
      require_within_span(span, st.last_position(), where, lazy_concat("states[", i, "]"));
    }
  }
}

/// `options.head_decays` (empty, or one valid λ per head, 1 unless causal) or `options.decay`,
/// checked before any head runs (a head's own call would name options.decay, after earlier
/// heads wrote their outputs).
inline void validate_head_decays(const linear_options& options, index_t heads, const char* where) {
  if (options.head_decays.empty()) {
    require_decay(options.decay, where);  // before the states are compared with it
    return;
  }
  require_size(static_cast<index_t>(options.head_decays.size()), heads, where, "options.head_decays");
  for (std::size_t h = 0; h < options.head_decays.size(); ++h) {
    const double lambda = options.head_decays[h];
    require_decay(lambda, where, "options.head_decays[h]");
    require_parameter(options.causal || lambda == 1.0, where, "options.head_decays[h]",
                      lazy_concat("must be 1 unless options.causal (the decay is defined for s >= t); head ", h),
                      lambda);
  }
}

/// Head h's options: its decay (`head_decays[h]`, or `decay`), no per-head list.
inline linear_options head_linear_options(const linear_options& options, index_t h) {
  linear_options head = options;
  head.head_decays = {};
  if (!options.head_decays.empty()) head.decay = options.head_decays[static_cast<std::size_t>(h)];
  return head;
}

/// The multi-head linear entry points; `states` null (no state) or batch × heads of them.
template <class TQ, class TK, class TV, class T, class Encodings, class Phi, class Backend>
void linear_attention_heads(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                            const heads_view<T>& out, const Encodings& encodings, const Phi& phi,
                            const linear_options& options,
                            std::span<linear_attention_state<compute_t<std::remove_const_t<T>>>>* states,
                            Backend backend) {
  constexpr const char* where = "lrpe::linear_attention (multi-head)";
  static_assert(!std::is_const_v<T>, "lrpe::linear_attention: out must be a mutable heads_view");
  using C = compute_t<T>;  // the scalar the heads compute in (out may be 16-bit storage of it)
  validate_attention_heads(q, k, v, out, where);
  require_feature_map<C>(phi, where);
  validate_head_decays(options, q.heads, where);
  if (states != nullptr) {
    check_head_states(q, k, v, encodings, options, std::span<const linear_attention_state<C>>(*states), where);
  } else {
    const call_span span = head_call_span(options, q.seq, k.seq, where);
    check_head_encodings<compute_t<std::remove_const_t<TQ>>>(encodings, q.heads, q.dim, where, &span);
  }
  // (b, h) pairs, h-major; a backend may run them on several threads (backend::for_each_head)
  using backend::for_each_head;
  for_each_head(backend, q.heads * q.batch, [&](index_t item, const auto& head_backend) {
    const index_t h = item / q.batch, b = item % q.batch, hk = kv_head(q, k, h);
    const linear_options head_options = head_linear_options(options, h);
    const auto qh = as_const_heads(q).head(b, h), kh = as_const_heads(k).head(b, hk), vh = as_const_heads(v).head(b, hk);
    const auto oh = out.head(b, h);
    const auto& encoding = head_encoding(encodings, h, q.heads, where);
    if (states != nullptr) {
      ::lrpe::linear_attention(qh, kh, vh, oh, encoding, phi, (*states)[static_cast<std::size_t>(b * q.heads + h)],
                               head_options, head_backend);
    } else {
      ::lrpe::linear_attention(qh, kh, vh, oh, encoding, phi, head_options, head_backend);
    }
  });
}

}  // namespace detail

/**
 * Multi-head linear attention: for every (b, h), `linear_attention` on the head's strided
 * views with encoding `head_encoding(encodings, h)` and decay `options.head_decays[h]` (or
 * `options.decay` when `head_decays` is empty). k and v may have fewer heads than q
 * (grouped-query attention, as in the softmax entry point: query head h reads K/V head
 * h / (q.heads / k.heads)).
 * @throws shape_error for the views as in the multi-head `softmax_attention` (every view checked
 * whole before any head runs), parameter_error (`options.head_decays`), and the single-head errors.
 */
template <class TQ, class TK, class TV, class T, class Encodings, class Phi, class Backend = backend::reference>
void linear_attention(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                      const heads_view<T>& out, const Encodings& encodings, const Phi& phi,
                      const linear_options& options = {}, Backend backend = {}) {
  detail::linear_attention_heads(q, k, v, out, encodings, phi, options,
                                 static_cast<std::span<linear_attention_state<compute_t<T>>>*>(nullptr), backend);
}

/**
 * Multi-head causal linear attention of one segment, continuing one state per (b, h): head
 * (b, h) runs the single-head segment call with `states[b·heads + h]` (heads = q.heads, also
 * with grouped K/V: a query head's state holds its own features of the group's keys, which
 * differ between the group's heads when their encodings or decays do), so prefill and decode
 * steps (one token per call: `seq` = 1, `q_positions = k_positions = t`) over any split give
 * the one-call result. `states.size()` must be batch × heads, and state (b, h) must have the
 * head's decay (`options.head_decays[h]`, or `options.decay`) and dimensions d_f × d_v.
 * Every state, and every head's encoding width, is checked before any head runs: on an error
 * all of them are left as they were.
 * On the SIMD backend a decode step's features share one evaluation of the angles across the
 * heads run by one thread (docs/backends.md, direct tables).
 * @throws shape_error (`states.size()`, a state's widths), parameter_error (`options.causal`
 * false, a state's decay, positions before a state's last position), and the single-head errors.
 */
template <class TQ, class TK, class TV, class T, class Encodings, class Phi, class Backend = backend::reference>
void linear_attention(const heads_view<TQ>& q, const heads_view<TK>& k, const heads_view<TV>& v,
                      const heads_view<T>& out, const Encodings& encodings, const Phi& phi,
                      std::type_identity_t<std::span<linear_attention_state<compute_t<T>>>> states,
                      const linear_options& options,
                      Backend backend = {}) {
  detail::linear_attention_heads(q, k, v, out, encodings, phi, options, &states, backend);
}

}  // namespace v0
}  // namespace lrpe
