// SPDX-License-Identifier: MIT
/**
 * @file encode.hpp
 * The backend-tagged encoder entry points on `backend::reference` (`encode`, `encode_qk`), so
 * that generic code can take the backend as a parameter with the CPU library alone; the SIMD
 * overloads are in `<lrpe/simd.hpp>`.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/core/heads.hpp>
#include <lrpe/core/error.hpp>
#include <lrpe/core/storage.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/encoder.hpp>

#include <algorithm>
#include <concepts>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

/// `enc.encode(x, pos, out)` on the reference backend.
template <lrpe_encoder E>
void encode(backend::reference, const E& enc, matrix_view<const typename E::scalar> x, positions pos,
            matrix_view<typename E::scalar> out) {
  enc.encode(x, pos, out);
}

/// Rows a 16-bit `encode` widens and encodes at a time: a multiple of the SIMD encoder's runs of
/// 64 positions (its float rows then do not depend on the blocking), and two float blocks of
/// d = 128 take 4 MiB, within a last-level cache.
inline constexpr index_t storage_block_rows = 4096;

namespace detail {

/// Widens count stored values into floats (exact), and rounds floats into storage (once): the
/// portable conversions of `encode_storage`, one value at a time; backends pass vectorised ones.
struct scalar_conversions {
  template <half_precision S>
  void widen_row(const S* p, float* x, index_t count) const noexcept {
    for (index_t i = 0; i < count; ++i) x[i] = widen(p[i]);
  }
  template <half_precision S>
  void narrow_row(const float* x, S* p, index_t count) const noexcept {
    for (index_t i = 0; i < count; ++i) p[i] = narrow<S>(x[i]);
  }
};

/**
 * `encode` of rows stored in 16 bits (S: `lrpe::half`, `lrpe::bfloat16`) by a float encoder:
 * blocks of `storage_block_rows` rows are widened (exactly) into float, encoded by
 * `encode_block(x_block, positions_block, out_block)`, and rounded once into `out` (by
 * `convert`'s `widen_row` and `narrow_row`). out may be x.
 */
template <half_precision S, class EncodeBlock, class Conversions = scalar_conversions>
void encode_storage(matrix_view<const S> x, positions pos, matrix_view<S> out, index_t dim, index_t feature_dim,
                    const EncodeBlock& encode_block, const Conversions& convert = {}) {
  constexpr const char* where = "lrpe::encode (16-bit storage)";
  validate(x, where, "x");
  validate(out, where, "out");
  require_equal(x.cols, dim, where, "x.cols", "encoding.dim()");
  require_equal(out.cols, feature_dim, where, "out.cols", "encoding.feature_dim()");
  require_equal(out.rows, x.rows, where, "out.rows", "x.rows");
  pos.require_rows(x.rows, where, "pos");
  const index_t block = std::min(storage_block_rows, x.rows);
  row_matrix<float> in(block, dim), encoded(block, feature_dim);
  for (index_t r0 = 0; r0 < x.rows; r0 += block) {
    const index_t m = std::min(block, x.rows - r0);
    for (index_t i = 0; i < m; ++i) convert.widen_row(x.row(r0 + i), in.row(i).data(), dim);
    encode_block(matrix_view<const float>(in.data(), m, dim, dim), pos.slice(r0, m),
                 matrix_view<float>(encoded.data(), m, feature_dim, feature_dim));
    for (index_t i = 0; i < m; ++i) convert.narrow_row(encoded.row(i).data(), out.row(r0 + i), feature_dim);
  }
}

}  // namespace detail

/// `encode` of rows stored in 16 bits (`lrpe::half`, `lrpe::bfloat16`) by a float encoder, on the
/// reference backend: computed in float, each output rounded once (docs/attention.md#16-bit-storage).
template <lrpe_encoder E, half_precision S>
  requires std::same_as<typename E::scalar, float>
void encode(backend::reference, const E& enc, matrix_view<const S> x, positions pos, matrix_view<S> out) {
  detail::encode_storage(x, pos, out, enc.dim(), enc.feature_dim(),
                         [&](const auto& xb, const positions& pb, const auto& ob) { enc.encode(xb, pb, ob); });
}

/// Q and K of every (batch, head) on the reference backend: `enc.encode` per head.
template <lrpe_encoder E>
void encode_qk(backend::reference, const E& enc, heads_view<const typename E::scalar> q, positions q_pos,
               heads_view<const typename E::scalar> k, positions k_pos, heads_view<typename E::scalar> q_out,
               heads_view<typename E::scalar> k_out) {
  constexpr const char* where = "lrpe::encode_qk";
  detail::require_shape(q.batch >= 0 && q.heads >= 0 && q.seq >= 0, where, "q", "must have non-negative batch, heads and seq",
                        detail::lazy_concat(q.batch, "x", q.heads, "x", q.seq));
  detail::require_shape(k.batch >= 0 && k.heads >= 0 && k.seq >= 0, where, "k", "must have non-negative batch, heads and seq",
                        detail::lazy_concat(k.batch, "x", k.heads, "x", k.seq));
  q_pos.require_rows(q.seq, where, "q_pos");
  k_pos.require_rows(k.seq, where, "k_pos");
  detail::require_shape(q_out.batch == q.batch && q_out.heads == q.heads, where, "q_out",
                        "must have q's batch and heads", detail::lazy_concat(q_out.batch, "x", q_out.heads));
  detail::require_shape(k_out.batch == k.batch && k_out.heads == k.heads, where, "k_out",
                        "must have k's batch and heads", detail::lazy_concat(k_out.batch, "x", k_out.heads));
  for (index_t b = 0; b < q.batch; ++b)
    for (index_t h = 0; h < q.heads; ++h) enc.encode(q.head(b, h), q_pos, q_out.head(b, h));
  for (index_t b = 0; b < k.batch; ++b)
    for (index_t h = 0; h < k.heads; ++h) enc.encode(k.head(b, h), k_pos, k_out.head(b, h));
}

/// `enc.backward(x, pos, d_out, dx, grad)` on the reference backend (docs/training.md).
template <lrpe_encoder E>
void encode_backward(backend::reference, const E& enc, matrix_view<const typename E::scalar> x, positions pos,
                     matrix_view<const typename E::scalar> d_out, matrix_view<typename E::scalar> dx,
                     encoder_gradient* grad = nullptr) {
  enc.backward(x, pos, d_out, dx, grad);
}

/**
 * The backward of `encode_qk`: dq and dk of every (batch, head) from the gradients of the
 * encoded q and k (`d_q_out`, `d_k_out`), and dL/d(parameters) summed over Q, K, batch and
 * heads into `*grad` when it is not null (the encoder is shared by all of them).
 */
template <lrpe_encoder E>
void encode_qk_backward(backend::reference, const E& enc, heads_view<const typename E::scalar> q, positions q_pos,
                        heads_view<const typename E::scalar> k, positions k_pos,
                        heads_view<const typename E::scalar> d_q_out, heads_view<const typename E::scalar> d_k_out,
                        heads_view<typename E::scalar> dq, heads_view<typename E::scalar> dk,
                        encoder_gradient* grad = nullptr) {
  constexpr const char* where = "lrpe::encode_qk_backward";
  const auto same_heads = [&](const auto& a, const auto& ref, const char* arg, const char* ref_name) {
    detail::require_shape(a.batch == ref.batch && a.heads == ref.heads, where, arg,
                          detail::lazy_concat("must have ", ref_name, "'s batch and heads"),
                          detail::lazy_concat(a.batch, "x", a.heads));
  };
  detail::require_shape(q.batch >= 0 && q.heads >= 0 && q.seq >= 0, where, "q", "must have non-negative batch, heads and seq",
                        detail::lazy_concat(q.batch, "x", q.heads, "x", q.seq));
  detail::require_shape(k.batch >= 0 && k.heads >= 0 && k.seq >= 0, where, "k", "must have non-negative batch, heads and seq",
                        detail::lazy_concat(k.batch, "x", k.heads, "x", k.seq));
  same_heads(d_q_out, q, "d_q_out", "q");
  same_heads(dq, q, "dq", "q");
  same_heads(d_k_out, k, "d_k_out", "k");
  same_heads(dk, k, "dk", "k");
  for (index_t b = 0; b < q.batch; ++b)
    for (index_t h = 0; h < q.heads; ++h) enc.backward(q.head(b, h), q_pos, d_q_out.head(b, h), dq.head(b, h), grad);
  for (index_t b = 0; b < k.batch; ++b)
    for (index_t h = 0; h < k.heads; ++h) enc.backward(k.head(b, h), k_pos, d_k_out.head(b, h), dk.head(b, h), grad);
}

}  // namespace v0
}  // namespace lrpe
