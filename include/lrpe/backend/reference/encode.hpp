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

/// Rows the reference backend's 16-bit `encode` widens and encodes at a time (two float blocks
/// of d = 128 take 4 MiB, within a last-level cache).
inline constexpr index_t storage_block_rows = 4096;

namespace detail {

/// The arguments of a 16-bit `encode` (every backend's).
template <half_precision S>
void check_encode_storage(const matrix_view<const S>& x, const positions& pos, const matrix_view<S>& out, index_t dim,
                          index_t feature_dim) {
  constexpr const char* where = "lrpe::encode (16-bit storage)";
  validate(x, where, "x");
  validate(out, where, "out");
  require_equal(x.cols, dim, where, "x.cols", "encoding.dim()");
  require_equal(out.cols, feature_dim, where, "out.cols", "encoding.feature_dim()");
  require_equal(out.rows, x.rows, where, "out.rows", "x.rows");
  pos.require_rows(x.rows, where, "pos");
}

/// The arguments of `encode_qk` (every backend's): q, k and their outputs against each other
/// and the encoder, the positions against the sequence lengths.
template <class E, class S>
void check_encode_qk(const E& enc, const heads_view<const S>& q, const positions& q_pos, const heads_view<const S>& k,
                     const positions& k_pos, const heads_view<S>& q_out, const heads_view<S>& k_out, const char* where) {
  const auto pair = [&](const heads_view<const S>& x, const heads_view<S>& out, const char* xn, const char* on) {
    validate_heads(x, where, xn);
    validate_heads(out, where, on);
    require_shape(out.batch == x.batch && out.heads == x.heads && out.seq == x.seq, where, on,
                  lazy_concat("must have ", xn, "'s batch, heads and seq"),
                  lazy_concat(out.batch, "x", out.heads, "x", out.seq));
    require_shape(x.dim == enc.dim(), where, xn, lazy_concat("must have dim() = ", enc.dim(), " columns"), x.dim);
    require_shape(out.dim == enc.feature_dim(), where, on,
                  lazy_concat("must have feature_dim() = ", enc.feature_dim(), " columns"), out.dim);
  };
  pair(q, q_out, "q", "q_out");
  pair(k, k_out, "k", "k_out");
  q_pos.require_rows(q.seq, where, "q_pos");
  k_pos.require_rows(k.seq, where, "k_pos");
}

/**
 * `encode` of rows stored in 16 bits (S: `lrpe::half`, `lrpe::bfloat16`) by a float encoder:
 * blocks of `storage_block_rows` rows are widened (exactly) into float, encoded by
 * `encode_block(x_block, positions_block, out_block)`, and rounded once into `out`. out may be x.
 */
template <half_precision S, class EncodeBlock>
void encode_storage(matrix_view<const S> x, positions pos, matrix_view<S> out, index_t dim, index_t feature_dim,
                    const EncodeBlock& encode_block) {
  check_encode_storage(x, pos, out, dim, feature_dim);
  const index_t block = std::min(storage_block_rows, x.rows);
  row_matrix<float> in(block, dim), encoded(block, feature_dim);
  for (index_t r0 = 0; r0 < x.rows; r0 += block) {
    const index_t m = std::min(block, x.rows - r0);
    for (index_t i = 0; i < m; ++i)
      for (index_t c = 0; c < dim; ++c) in(i, c) = widen(x(r0 + i, c));
    encode_block(matrix_view<const float>(in.data(), m, dim, dim), pos.slice(r0, m),
                 matrix_view<float>(encoded.data(), m, feature_dim, feature_dim));
    for (index_t i = 0; i < m; ++i)
      for (index_t c = 0; c < feature_dim; ++c) out(r0 + i, c) = narrow<S>(encoded(i, c));
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

/// Q and K of every (batch, head) stored in 16 bits (`lrpe::half`, `lrpe::bfloat16`) by a float
/// encoder, on the reference backend: each head as the 16-bit `encode`. q_out may be q, k_out k.
template <lrpe_encoder E, half_precision S>
  requires std::same_as<typename E::scalar, float>
void encode_qk(backend::reference, const E& enc, heads_view<const S> q, positions q_pos, heads_view<const S> k,
               positions k_pos, heads_view<S> q_out, heads_view<S> k_out) {
  detail::check_encode_qk(enc, q, q_pos, k, k_pos, q_out, k_out, "lrpe::encode_qk (16-bit storage)");
  for (index_t b = 0; b < q.batch; ++b)
    for (index_t h = 0; h < q.heads; ++h) encode(backend::reference{}, enc, q.head(b, h), q_pos, q_out.head(b, h));
  for (index_t b = 0; b < k.batch; ++b)
    for (index_t h = 0; h < k.heads; ++h) encode(backend::reference{}, enc, k.head(b, h), k_pos, k_out.head(b, h));
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
