// SPDX-License-Identifier: MIT
/**
 * @file paged_kv.hpp
 * `lrpe::softmax_attention_paged`: decode (and short query blocks) of a batch of sequences over
 * a paged KV cache (core/paged.hpp), K and V in float or 16 bits, grouped-query heads, the
 * engine options (causal, window, chunk, softcap, sinks) and additive encodings (ALiBi, T5).
 */
#pragma once

#include <lrpe/attention/multihead.hpp>
#include <lrpe/attention/softmax.hpp>
#include <lrpe/core/heads.hpp>
#include <lrpe/core/paged.hpp>
#include <lrpe/core/storage.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace lrpe {
inline namespace v0 {


namespace backend {

/**
 * The paged decode of every (sequence, query head): the default, for any backend, copies each
 * (sequence, K/V head)'s rows out of the blocks (in their storage type) and runs the backend's
 * `softmax_attention` on them, query head by query head, at positions lengths[b] − m …. A
 * backend overloads it (found by ADL on its tag) to read the blocks in place (backend/simd).
 */
template <class Backend, class T, class SK, class SV, class Encodings>
void paged_decode_kernel(const Backend& backend, const heads_view<const T>& q, const paged_kv_view<const SK>& k,
                         const paged_kv_view<const SV>& v, const block_tables& tables, const heads_view<T>& out,
                         const Encodings& encodings, const softmax_options<>& options) {
  constexpr const char* where = "lrpe::softmax_attention_paged";
  const index_t group = q.heads / k.heads;
  for (index_t b = 0; b < q.batch; ++b) {
    const index_t len = tables.lengths[static_cast<std::size_t>(b)];
    for (index_t hk = 0; hk < k.heads; ++hk) {
      const auto kr = lrpe::detail::paged_rows_of(k, tables, b, hk);
      const auto vr = lrpe::detail::paged_rows_of(v, tables, b, hk);
      row_matrix<SK> kg(len, k.dim);
      row_matrix<SV> vg(len, v.dim);
      for (index_t j = 0; j < len; ++j) {
        std::copy(kr.row(j), kr.row(j) + k.dim, &kg(j, 0));
        std::copy(vr.row(j), vr.row(j) + v.dim, &vg(j, 0));
      }
      for (index_t h = hk * group; h < (hk + 1) * group; ++h) {
        softmax_options<> head = lrpe::detail::head_softmax_options(options, h, q.heads, where);
        head.q_positions = len - q.seq;
        softmax_attention(lrpe::detail::as_const_heads(q).head(b, h), kg, vg, out.head(b, h),
                          lrpe::detail::head_encoding(encodings, h, q.heads, where), head, backend);
      }
    }
  }
}

}  // namespace backend

/**
 * Softmax attention of a batch of sequences over a paged KV cache (vLLM's, FlashInfer's): query
 * row i of sequence b is at position lengths[b] − m + i (m = q.seq: the step's new tokens, whose
 * keys and values are already in the cache), its keys at 0 … lengths[b] − 1. Grouped-query
 * heads: query head h reads K/V head h / (q.heads / kv heads).
 *
 * @param q        batch × heads × m × d (the queries already encoded, e.g. by `lrpe::encode`
 *                 with RoPE at their positions; the cache holds encoded keys: `append_kv`).
 * @param k_cache, v_cache  the pools (`paged_nhd`, `paged_hnd`), in T or 16-bit storage of T
 *                 (`lrpe::half`, `lrpe::bfloat16`, with T = float), the same blocks and block
 *                 size (a power of two).
 * @param tables   each sequence's blocks and length (`block_tables`).
 * @param out      batch × heads × m × d_v.
 * @param encodings `no_encoding{}` or an additive encoding (ALiBi, T5, tables), shared or one
 *                 per query head as in the multi-head `softmax_attention` (a per-head table
 *                 such as `canonical::alibi::for_heads`, a range, a callable h → encoding).
 * @param options  causal, window, chunk, softcap, sink / head_sinks, scale; positions come from
 *                 the tables (q_positions and k_positions must be left at their defaults).
 *
 * The SIMD backend reads the blocks in place with its direct kernel (each K/V head once for its
 * query heads when m = 1); other backends get the default hook, which copies each sequence's
 * rows out first. Fully masked rows (an empty sequence) are zero.
 * @throws shape_error (shapes, head counts, a block size that is not a power of two, a block
 *         table entry outside the pool or a sequence longer than its table), parameter_error
 *         (positions set, engine options out of range), domain_error (a NaN option).
 */
template <class TQ, class SK, class SV, class T, class Encodings, class Backend = backend::reference>
void softmax_attention_paged(const heads_view<TQ>& q, const paged_kv_view<SK>& k_cache,
                             const paged_kv_view<SV>& v_cache, const block_tables& tables,
                             const heads_view<T>& out, const Encodings& encodings, const softmax_options<>& options = {},
                             Backend backend = {}) {
  constexpr const char* where = "lrpe::softmax_attention_paged";
  static_assert(!std::is_const_v<T>, "lrpe::softmax_attention_paged: out must be a mutable heads_view");
  static_assert(std::is_same_v<std::remove_const_t<TQ>, T>,
                "lrpe::softmax_attention_paged: q and out must have the same scalar type (float or double)");
  using Encoding = std::remove_cvref_t<decltype(detail::head_encoding(encodings, 0, 1, where))>;
  static_assert(std::is_same_v<compute_t<std::remove_const_t<SK>>, T> && std::is_same_v<compute_t<std::remove_const_t<SV>>, T>,
                "lrpe::softmax_attention_paged: the caches must hold T, or 16-bit storage of it (lrpe::half, "
                "lrpe::bfloat16 with T = float)");
  static_assert(std::is_same_v<Encoding, no_encoding> || additive_encoding<Encoding>,
                "lrpe::softmax_attention_paged: the encoding must be lrpe::no_encoding or an additive encoding "
                "(ALiBi, T5, tables); encode Q and the cached keys with an encoder (RoPE) instead");
  detail::require_softmax_types<T, Encoding, no_reweighting>();
  detail::validate_heads(q, where, "q");
  detail::validate_heads(out, where, "out");
  detail::validate_paged_pair(k_cache, v_cache, where, "k_cache", "v_cache");
  detail::require_shape(k_cache.heads >= 1 && q.heads % k_cache.heads == 0, where, "k_cache.heads",
                        detail::lazy_concat("must be >= 1 and divide q.heads = ", q.heads), k_cache.heads);
  detail::require_equal(k_cache.dim, q.dim, where, "k_cache.dim", "q.dim");
  detail::require_shape(q.dim >= 1, where, "q.dim", "must be >= 1", q.dim);
  detail::require_shape(out.batch == q.batch && out.heads == q.heads && out.seq == q.seq, where, "out",
                        detail::lazy_concat("must have batch x heads x seq = ", q.batch, "x", q.heads, "x", q.seq),
                        detail::lazy_concat(out.batch, "x", out.heads, "x", out.seq));
  detail::require_equal(out.dim, v_cache.dim, where, "out.dim", "v_cache.dim");
  detail::validate_block_tables(tables, q.batch, k_cache.blocks, k_cache.block_size, where);
  detail::require_parameter(!options.q_positions.is_array() && options.q_positions[0] == 0 &&
                                !options.k_positions.is_array() && options.k_positions[0] == 0,
                            where, "options.q_positions, options.k_positions",
                            "must be left at their defaults (the block tables give the positions)", "set");
  detail::require_parameter(options.sink_gradient == nullptr, where, "options.sink_gradient",
                            "must be null (a forward call)", "set");
  softmax_options<> single = options;  // the options every head shares, checked as a single-head call's
  single.head_sinks = {};
  detail::validate_engine_options<T>(single, where);
  detail::validate_head_sinks<T>(options, q.heads, where);
  if (q.batch == 0 || q.heads == 0 || q.seq == 0) {
    detail::check_head_encodings<T>(encodings, q.heads, q.dim, where);
    return;
  }
  // the positions of every sequence: queries lengths[b] − m … lengths[b] − 1, keys 0 … lengths[b] − 1
  const auto [shortest, longest] = std::ranges::minmax(tables.lengths.first(static_cast<std::size_t>(q.batch)));
  const detail::call_span span{{shortest - q.seq, longest - 1, false}, {0, longest - 1, longest == 0}};
  detail::check_head_encodings<T>(encodings, q.heads, q.dim, where, &span);
  softmax_options<> resolved = options;  // (every head's default scale is its width's: one encoding type)
  resolved.scale = detail::softmax_scale<T>(detail::head_encoding(encodings, 0, q.heads, where), options, q.dim, where);
  using backend::paged_decode_kernel;
  paged_decode_kernel(backend, detail::as_const_heads(q), detail::as_const_paged(k_cache), detail::as_const_paged(v_cache),
                      tables, out, encodings, resolved);
}

}  // namespace v0
}  // namespace lrpe
