// SPDX-License-Identifier: MIT
/**
 * @file paged.hpp
 * The SIMD backend's `paged_decode_kernel`: the direct softmax kernel (softmax.hpp) reading K
 * and V rows in place through the block tables (`detail::paged_rows`), float or 16-bit. With one
 * query row per head (decode) a K/V head's query heads are the rows of one kernel call, so its
 * blocks are read once for the group; (sequence, K/V head) pairs go to the pool's threads.
 */
#pragma once

#include <lrpe/attention/paged_kv.hpp>
#include <lrpe/backend/simd/parallel.hpp>
#include <lrpe/backend/simd/softmax.hpp>
#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/detail/small_buffer.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace lrpe {
inline namespace v0 {
namespace backend {

namespace simd_detail {

/// Rows [0, rows) of one direct-kernel call over paged K and V, G = 4 at a time.
template <class T, class A, class Bias, class SV, class KRows, class VRows>
void paged_direct(const softmax_problem<T, SV>& p, const matrix_view<const T>& q, const KRows& k, const VRows& v,
                  T qscale, T cap, const Bias& bias, simd_workspace& ws) {
  for (index_t i0 = 0; i0 < p.nq; i0 += 4) {
    switch (std::min<index_t>(4, p.nq - i0)) {
      case 1: softmax_direct_rows<1, T, A>(p, q, k, v, qscale, cap, bias, i0, ws); break;
      case 2: softmax_direct_rows<2, T, A>(p, q, k, v, qscale, cap, bias, i0, ws); break;
      case 3: softmax_direct_rows<3, T, A>(p, q, k, v, qscale, cap, bias, i0, ws); break;
      default: softmax_direct_rows<4, T, A>(p, q, k, v, qscale, cap, bias, i0, ws); break;
    }
  }
}

/// The direct kernel's bias argument for an encoding: none, or the additive encoding itself.
template <class E>
auto paged_bias(const E& e) noexcept {
  if constexpr (std::is_same_v<E, no_encoding>) return no_bias{};
  else return &e;
}

/**
 * Sequence b, K/V head hk: with m = 1, one encoding and one sink for all heads, its query heads
 * as the rows of one call (all at position len − 1); otherwise one call per query head (m rows
 * at len − m …, the head's own encoding and sink).
 */
template <class A, class T, class SK, class SV, class Encodings>
void paged_pair(const heads_view<const T>& q, const paged_kv_view<const SK>& kc, const paged_kv_view<const SV>& vc,
                const block_tables& tables, const heads_view<T>& out, const Encodings& encodings,
                const softmax_options<>& o, index_t b, index_t hk, simd_workspace& ws) {
  const index_t group = q.heads / kc.heads, len = tables.lengths[static_cast<std::size_t>(b)];
  const auto k = lrpe::detail::paged_rows_of(kc, tables, b, hk);
  const auto v = lrpe::detail::paged_rows_of(vc, tables, b, hk);
  const T qscale = static_cast<T>(*o.scale) * std::numbers::log2e_v<T>;
  const T cap = static_cast<T>(std::min(o.softcap * std::numbers::log2e, static_cast<double>(std::numeric_limits<T>::max())));
  softmax_problem<T, SV> p{};
  p.nk = len;
  p.v = matrix_view<const SV>(nullptr, 0, vc.dim, vc.dim);  // (the kernel reads V through `v`)
  p.mask = o.mask();
  if (lrpe::detail::shared_encoding_v<Encodings> && q.seq == 1 && o.head_sinks.empty() && q.head_stride >= q.dim &&
      out.head_stride >= out.dim) {
    lrpe::detail::small_buffer<position_t> at(group);
    std::fill(at.data(), at.data() + group, len - 1);
    p.nq = group;
    p.q_positions = positions(std::span<const position_t>(at.data(), static_cast<std::size_t>(group)));
    p.out = matrix_view<T>(out.data + b * out.batch_stride + hk * group * out.head_stride, group, out.dim, out.head_stride);
    p.sink = o.sink;
    const matrix_view<const T> rows(q.data + b * q.batch_stride + hk * group * q.head_stride, group, q.dim, q.head_stride);
    paged_direct<T, A>(p, rows, k, v, qscale, cap, paged_bias(encodings), ws);
    return;
  }
  for (index_t h = hk * group; h < (hk + 1) * group; ++h) {
    p.nq = q.seq;
    p.q_positions = positions(len - q.seq);
    p.out = out.head(b, h);
    p.sink = o.head_sinks.empty() ? o.sink : o.head_sinks[static_cast<std::size_t>(h)];
    const auto& e = lrpe::detail::head_encoding(encodings, h, q.heads, "lrpe::softmax_attention_paged");
    paged_direct<T, A>(p, lrpe::detail::as_const_heads(q).head(b, h), k, v, qscale, cap, paged_bias(e), ws);
  }
}

}  // namespace simd_detail

/// SIMD paged decode: the blocks read in place (no copy), on the pool's threads if any.
template <simd_backend B, class T, class SK, class SV, class Encodings>
void paged_decode_kernel(const B& b, const heads_view<const T>& q, const paged_kv_view<const SK>& k,
                         const paged_kv_view<const SV>& v, const block_tables& tables, const heads_view<T>& out,
                         const Encodings& encodings, const softmax_options<>& options) {
  using A = typename B::arch_type;
  if (!std::isfinite(static_cast<T>(*options.scale) * std::numbers::log2e_v<T>)) {
    lrpe::detail::fail<domain_error>("lrpe::softmax_attention_paged (simd backend)", "options.scale",
                                     "must be at most max(T) / log2(e) in magnitude (the kernel folds log2(e) into it)",
                                     *options.scale);
  }
  [[maybe_unused]] const auto guard = call_guard(b);
  const simd_detail::resources res = simd_detail::resolve(b);
  const index_t pairs = q.batch * k.heads;
  const auto pair = [&](index_t item, simd_workspace& ws) {
    simd_detail::paged_pair<A>(q, k, v, tables, out, encodings, options, item / k.heads, item % k.heads, ws);
  };
  if (res.pool == nullptr || pairs < 2) {
    for (index_t i = 0; i < pairs; ++i) pair(i, *res.ws);
    return;
  }
  res.pool->run(pairs, [&](index_t item, int t) { pair(item, t == 0 ? *res.ws : res.pool->workspace(t)); });
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
