// SPDX-License-Identifier: MIT
/**
 * @file kv_cache.hpp
 * `lrpe::append_kv`: a decode step's new keys and values into a KV cache, the keys encoded on the
 * way (RoPE or any `lrpe::encoder`) and written straight into the cache's rows, in one pass over
 * the new rows: no encoded copy in between.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/core/error.hpp>
#include <lrpe/core/heads.hpp>
#include <lrpe/core/paged.hpp>
#include <lrpe/core/storage.hpp>
#include <lrpe/detail/angle.hpp>
#include <lrpe/detail/small_buffer.hpp>
#include <lrpe/encoder.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/identity.hpp>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>

namespace lrpe {
inline namespace v0 {

namespace detail {

/// Rows [r0, r0 + m) of a view.
template <class S>
matrix_view<S> row_block(const matrix_view<S>& all, index_t r0, index_t m) noexcept {
  return matrix_view<S>(all.row(r0), m, all.cols, all.row_stride);
}

/// y[0, n) = x[0, n) stored as S (rounded to nearest even when S has 16 bits).
template <class T, class S>
void store_row(const T* x, S* y, index_t n) noexcept {
  if constexpr (std::is_same_v<S, T>) {
    std::copy(x, x + n, y);
  } else {
    for (index_t i = 0; i < n; ++i) y[i] = narrow<S>(x[i]);
  }
}

/// The cache's key width: k_new's (no encoding) or the encoder's feature width.
template <class T, class Encoding>
void require_key_width(const heads_view<const T>& k_new, index_t cache_dim, const Encoding& encoding, const char* where,
                       const char* arg) {
  if constexpr (std::is_same_v<Encoding, no_encoding>) {
    require_equal(cache_dim, k_new.dim, where, arg, "k_new.dim");
  } else {
    static_assert(lrpe_encoder<Encoding>, "lrpe::append_kv: the encoding must be lrpe::no_encoding or an lrpe::encoder");
    static_assert(std::is_same_v<typename Encoding::scalar, T>, "lrpe::append_kv: the encoder's scalar must be T");
    require_equal(k_new.dim, static_cast<index_t>(encoding.dim()), where, "k_new.dim", "encoding.dim()");
    require_equal(cache_dim, static_cast<index_t>(encoding.feature_dim()), where, arg, "encoding.feature_dim()");
  }
}

/// y = x's RoPE pairs turned by (c_j, sn_j), stored as SK: as Eigen array expressions, which
/// are vectorised at -O2 where a plain loop is not (split_half's halves are contiguous).
template <class T, class SK>
void rotate_pairs(const T* x, SK* y, const T* c, const T* sn, index_t half, pairing mode) {
  using column = Eigen::Array<T, Eigen::Dynamic, 1>;
  using stored = Eigen::Array<SK, Eigen::Dynamic, 1>;
  const Eigen::Map<const column> cm(c, half), sm(sn, half);
  const auto turn = [&](const auto& a, const auto& b, auto lo, auto hi) {  // pair j = (a_j, b_j)
    lo = (a * cm - b * sm).template cast<SK>();
    hi = (b * cm + a * sm).template cast<SK>();
  };
  if (mode == pairing::split_half) {  // pairs (j, j + half)
    turn(Eigen::Map<const column>(x, half), Eigen::Map<const column>(x + half, half), Eigen::Map<stored>(y, half),
         Eigen::Map<stored>(y + half, half));
  } else {  // pairs (2j, 2j + 1)
    using every_other = Eigen::InnerStride<2>;
    turn(Eigen::Map<const column, 0, every_other>(x, half), Eigen::Map<const column, 0, every_other>(x + 1, half),
         Eigen::Map<stored, 0, every_other>(y, half), Eigen::Map<stored, 0, every_other>(y + 1, half));
  }
}

/**
 * The rows of `append_kv` and `append_kv_paged` on validated arguments: row i of (b, h) of
 * k_new (encoded at positions_of(b)[i]) into k_row(b, h, i), v_new's into v_row(b, h, i).
 * RoPE and its family form each token's cos and sin once for all heads (and for all sequences
 * at the same position) by the backend's `cos_sin_kernel`; other encoders run
 * `lrpe::encode` on the backend into a T scratch, which is then stored.
 */
template <class T, class PositionsOf, class KRow, class VRow, class Encoding, class Backend>
void append_rows(const heads_view<const T>& k_new, const heads_view<const T>& v_new, const PositionsOf& positions_of,
                 const KRow& k_row, const VRow& v_row, const Encoding& encoding, const Backend& backend) {
  const index_t m = k_new.seq;
  if (m == 0) return;
  const auto store_v = [&](index_t b, index_t h, index_t i) { store_row(v_new.head(b, h).row(i), v_row(b, h, i), v_new.dim); };
  if constexpr (std::is_base_of_v<encoder<p::identity<T>, lambda::rotation<T>>, Encoding>) {
    const lambda::rotation<T>& rot = encoding.lambda();
    const auto half = static_cast<index_t>(rot.frequencies().size());
    small_buffer<T> c(half), sn(half);
    small_buffer<double> cd(half), sd(half);
    bool have = false;
    position_t at = 0;
    using backend::cos_sin_kernel;
    for (index_t i = 0; i < m; ++i) {
      for (index_t b = 0; b < k_new.batch; ++b) {
        const position_t p = positions_of(b)[i];
        if (!have || p != at) {
          cos_sin_kernel(backend, p, rot.frequencies().data(), half, cd.data(), sd.data());
          for (index_t j = 0; j < half; ++j) {
            c[j] = static_cast<T>(cd[j]);
            sn[j] = static_cast<T>(sd[j]);
          }
          have = true;
          at = p;
        }
        for (index_t h = 0; h < k_new.heads; ++h) {
          const T* x = k_new.head(b, h).row(i);
          auto* y = k_row(b, h, i);
          rotate_pairs(x, y, c.data(), sn.data(), half, rot.pair_mode());
          store_row(x + 2 * half, y + 2 * half, k_new.dim - 2 * half);
          store_v(b, h, i);
        }
      }
    }
  } else {
    row_matrix<T> encoded;
    for (index_t b = 0; b < k_new.batch; ++b) {
      for (index_t h = 0; h < k_new.heads; ++h) {
        const auto k_in = k_new.head(b, h);
        if constexpr (std::is_same_v<Encoding, no_encoding>) {
          for (index_t i = 0; i < m; ++i) store_row(k_in.row(i), k_row(b, h, i), k_in.cols);
        } else {
          encoded.resize(m, static_cast<index_t>(encoding.feature_dim()));
          encode(backend, encoding, k_in, positions_of(b), view(encoded));
          for (index_t i = 0; i < m; ++i) store_row(&encoded(i, 0), k_row(b, h, i), encoded.cols());
        }
        for (index_t i = 0; i < m; ++i) store_v(b, h, i);
      }
    }
  }
}

}  // namespace detail

/**
 * Appends m new tokens to a cache that holds n_past: for every (batch, head), the rows of `k_new`
 * encoded at positions `pos` (default: n_past, n_past + 1, …) into rows n_past … n_past + m − 1
 * of `k_cache`, and `v_new`'s rows copied into the same rows of `v_cache`.
 *
 * @param k_new, v_new     batch × heads × m × d (d_v): the step's projected keys and values.
 * @param k_cache, v_cache batch × heads × capacity × d (d_v), any layout (`bnsh`, `bsnh`); T, or
 *                         16-bit storage (`lrpe::half`, `lrpe::bfloat16`) with T = float: the rows
 *                         are computed in float and rounded once as they are stored.
 * @param n_past           rows already in the cache; n_past + m ≤ capacity.
 * @param encoding         `no_encoding{}` (keys copied) or an `lrpe::encoder` (RoPE: `rope_neox`, …)
 *                         whose feature width equals the cache's d.
 * @param pos              the new rows' positions: an offset or m entries; empty (the default) means
 *                         n_past (a cache that evicted rows passes the true positions).
 * @param backend          runs the encoding (`lrpe::encode`): the reference, or `backend::simd<>`.
 *                         RoPE and its family (`encoder<p::identity, lambda::rotation>`: `rope_neox`,
 *                         `rope_gptj`, `hf_rope::make_encoder`) take a path of their own on every
 *                         backend: each new token's cos and sin formed once, for all heads, by
 *                         the backend's `cos_sin_kernel` (the exact angles: the backend's encode
 *                         to a few double ulps, so to float's rounding).
 * @throws shape_error (batch, heads or widths differ, pos's count, the cache too small),
 *         parameter_error (n_past < 0).
 */
template <class T, class SK, class SV, class Encoding, class Backend = backend::reference>
void append_kv(const heads_view<const T>& k_new, const heads_view<const T>& v_new, const heads_view<SK>& k_cache,
               const heads_view<SV>& v_cache, index_t n_past, const Encoding& encoding,
               std::optional<positions> pos = std::nullopt, Backend backend = {}) {
  constexpr const char* where = "lrpe::append_kv";
  static_assert(!std::is_const_v<SK> && !std::is_const_v<SV>, "lrpe::append_kv: the caches must be mutable views");
  static_assert(std::is_same_v<compute_t<SK>, T> && std::is_same_v<compute_t<SV>, T>,
                "lrpe::append_kv: the caches must hold T, or 16-bit storage of it (lrpe::half, lrpe::bfloat16 with "
                "T = float)");
  detail::validate_heads(k_new, where, "k_new");
  detail::validate_heads(v_new, where, "v_new");
  detail::validate_heads(k_cache, where, "k_cache");
  detail::validate_heads(v_cache, where, "v_cache");
  detail::require_parameter(n_past >= 0, where, "n_past", "must be >= 0", n_past);
  const auto same_heads = [&](const auto& x, const char* name) {
    detail::require_shape(x.batch == k_new.batch && x.heads == k_new.heads, where, name,
                          detail::lazy_concat("must have batch x heads = ", k_new.batch, "x", k_new.heads),
                          detail::lazy_concat(x.batch, "x", x.heads));
  };
  same_heads(v_new, "v_new");
  same_heads(k_cache, "k_cache");
  same_heads(v_cache, "v_cache");
  const index_t m = k_new.seq;
  detail::require_equal(v_new.seq, m, where, "v_new.seq", "k_new.seq");
  detail::require_equal(v_new.dim, v_cache.dim, where, "v_new.dim", "v_cache.dim");
  detail::require_equal(v_cache.seq, k_cache.seq, where, "v_cache.seq", "k_cache.seq");
  detail::require_shape(n_past <= k_cache.seq - m, where, "n_past",
                        detail::lazy_concat("must leave room for k_new.seq = ", m, " rows in the cache's ",
                                            k_cache.seq),
                        n_past);
  detail::require_key_width(k_new, k_cache.dim, encoding, where, "k_cache.dim");
  const positions at = pos.value_or(positions(n_past));
  at.require_rows(m, where, "pos");
  detail::append_rows(
      k_new, v_new, [&](index_t) { return at; }, [&](index_t b, index_t h, index_t i) { return k_cache.head(b, h).row(n_past + i); },
      [&](index_t b, index_t h, index_t i) { return v_cache.head(b, h).row(n_past + i); }, encoding, backend);
}

/**
 * `append_kv` into a paged cache (core/paged.hpp): sequence b's m new rows (m = k_new.seq) go to
 * its rows lengths[b] − m … lengths[b] − 1 (the tables already count them: grow a sequence's
 * length, and give it a new block when it crosses one, before the call), its keys encoded at
 * those positions. The layout of `softmax_attention_paged`, which then reads them.
 *
 * @param k_new, v_new  batch × kv heads × m × d (d_v).
 * @param k_pages, v_pages the pools, in T or 16-bit storage of T (rows rounded once).
 * @throws shape_error (heads, widths, the tables as `softmax_attention_paged` checks them, a
 *         sequence shorter than m).
 */
template <class T, class SK, class SV, class Encoding, class Backend = backend::reference>
void append_kv_paged(const heads_view<const T>& k_new, const heads_view<const T>& v_new,
                     const paged_kv_view<SK>& k_pages, const paged_kv_view<SV>& v_pages, const block_tables& tables,
                     const Encoding& encoding, Backend backend = {}) {
  constexpr const char* where = "lrpe::append_kv_paged";
  static_assert(!std::is_const_v<SK> && !std::is_const_v<SV>, "lrpe::append_kv_paged: the pools must be mutable views");
  static_assert(std::is_same_v<compute_t<SK>, T> && std::is_same_v<compute_t<SV>, T>,
                "lrpe::append_kv_paged: the pools must hold T, or 16-bit storage of it (lrpe::half, lrpe::bfloat16 "
                "with T = float)");
  detail::validate_heads(k_new, where, "k_new");
  detail::validate_heads(v_new, where, "v_new");
  detail::validate_paged_pair(k_pages, v_pages, where, "k_pages", "v_pages");
  detail::require_shape(v_new.batch == k_new.batch && v_new.heads == k_new.heads && v_new.seq == k_new.seq, where,
                        "v_new", detail::lazy_concat("must have batch x heads x seq = ", k_new.batch, "x", k_new.heads,
                                                     "x", k_new.seq),
                        detail::lazy_concat(v_new.batch, "x", v_new.heads, "x", v_new.seq));
  detail::require_equal(k_pages.heads, k_new.heads, where, "k_pages.heads", "k_new.heads");
  detail::require_equal(v_pages.dim, v_new.dim, where, "v_pages.dim", "v_new.dim");
  detail::require_key_width(k_new, k_pages.dim, encoding, where, "k_pages.dim");
  detail::validate_block_tables(tables, k_new.batch, k_pages.blocks, k_pages.block_size, where);
  const index_t m = k_new.seq;
  for (index_t b = 0; b < k_new.batch; ++b)
    detail::require_shape(tables.lengths[static_cast<std::size_t>(b)] >= m, where, "tables.lengths[b]",
                          detail::lazy_concat("must count the k_new.seq = ", m, " new rows"),
                          tables.lengths[static_cast<std::size_t>(b)]);
  const auto first = [&](index_t b) { return tables.lengths[static_cast<std::size_t>(b)] - m; };
  detail::append_rows(
      k_new, v_new, [&](index_t b) { return positions(first(b)); },
      [&](index_t b, index_t h, index_t i) { return detail::paged_rows_of(k_pages, tables, b, h).row(first(b) + i); },
      [&](index_t b, index_t h, index_t i) { return detail::paged_rows_of(v_pages, tables, b, h).row(first(b) + i); },
      encoding, backend);
}

}  // namespace v0
}  // namespace lrpe
