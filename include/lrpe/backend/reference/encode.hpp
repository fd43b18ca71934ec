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
#include <lrpe/core/view.hpp>
#include <lrpe/encoder.hpp>

#include <type_traits>

namespace lrpe {
inline namespace v0 {

/// `enc.encode(x, pos, out)` on the reference backend.
template <lrpe_encoder E>
void encode(backend::reference, const E& enc, matrix_view<const typename E::scalar> x, positions pos,
            matrix_view<typename E::scalar> out) {
  enc.encode(x, pos, out);
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
