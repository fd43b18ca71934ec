// SPDX-License-Identifier: MIT
/**
 * @file heads.hpp
 * Multi-head inputs without copies: `heads_view<T>`, a 4-D strided view indexed
 * (batch, head, seq, dim) with contiguous dim, built over [batch, heads, seq, d] (`bnsh`) or
 * [batch, seq, heads, d] (`bsnh`) memory, and its validation. The encoders' multi-head entry
 * points and the multi-head attention calls (attention/multihead.hpp) both take it.
 */
#pragma once

#include <lrpe/core/view.hpp>
#include <lrpe/detail/validate.hpp>

#include <type_traits>

namespace lrpe {
inline namespace v0 {
/**
 * A batch×heads×seq×dim strided view; element (b, h, s, i) is at
 * `data[b·batch_stride + h·head_stride + s·seq_stride + i]`.
 */
template <class T>
struct heads_view {
  T* data = nullptr;
  index_t batch = 0, heads = 0, seq = 0, dim = 0;
  index_t batch_stride = 0, head_stride = 0, seq_stride = 0;

  /// The (seq × dim) matrix of head h of batch entry b (row stride `seq_stride`). A view
  /// without elements may have null data: its heads do too (an offset from null is undefined).
  [[nodiscard]] matrix_view<T> head(index_t b, index_t h) const noexcept {
    T* const at = data == nullptr ? nullptr : data + b * batch_stride + h * head_stride;
    return matrix_view<T>(at, seq, dim, seq_stride);
  }
  /// A mutable view converts to a const one. (A template, so that a const view declares no
  /// conversion to its own type: nvcc's front end warns about one even when it is constrained away.)
  template <class U = T>
    requires(std::is_same_v<U, T> && !std::is_const_v<U>)
  operator heads_view<const U>() const noexcept  // NOLINT implicit
  {
    return {data, batch, heads, seq, dim, batch_stride, head_stride, seq_stride};
  }
};

/// [batch, heads, seq, dim] contiguous memory (PyTorch's default (B, H, N, D)).
/// @throws shape_error if batch·heads·seq·dim (of the nonzero extents) is not an index_t.
template <class T>
heads_view<T> bnsh(T* data, index_t batch, index_t heads, index_t seq, index_t dim) {
  detail::require_layout_extents("lrpe::bnsh", batch, heads, seq, dim);
  const index_t head = detail::wrapping_product(seq, dim);
  return {data, batch, heads, seq, dim, detail::wrapping_product(heads, head), head, dim};
}

/// [batch, seq, heads, dim] contiguous memory (the layout of a fused QKV projection's output).
/// @throws shape_error if batch·seq·heads·dim (of the nonzero extents) is not an index_t.
template <class T>
heads_view<T> bsnh(T* data, index_t batch, index_t seq, index_t heads, index_t dim) {
  detail::require_layout_extents("lrpe::bsnh", batch, heads, seq, dim);
  const index_t row = detail::wrapping_product(heads, dim);
  return {data, batch, heads, seq, dim, detail::wrapping_product(seq, row), dim, row};
}

namespace detail {

template <class X>
inline constexpr bool is_heads_view_v = false;
template <class T>
inline constexpr bool is_heads_view_v<heads_view<T>> = true;

/**
 * batch·heads, and the offsets the heads form, are index_t: the multi-head loops count
 * batch·heads matrices, and head(b, h) starts at b·batch_stride + h·head_stride (its rows, when
 * it has elements, up to (seq − 1)·seq_stride + dim − 1 further). Checked for a view built field
 * by field (`bnsh`/`bsnh` give such extents already). Positive and negative offsets are summed
 * apart, so that no partial sum overflows either. Negative extents are left to `validate_heads`,
 * which names them.
 */
template <class T>
void require_heads_extents(const heads_view<T>& x, const char* where, const char* arg) {
  if (x.batch < 0 || x.heads < 0 || x.seq < 0 || x.dim < 0) return;
  index_t count = 0;
  require_shape(!__builtin_mul_overflow(x.batch, x.heads, &count), where, arg, "must have batch*heads an index_t",
                lazy_concat(x.batch, "x", x.heads));
  if (count == 0) return;
  const bool rows = x.seq > 0 && x.dim > 0;
  index_t hi = rows ? x.dim - 1 : 0, lo = 0;
  bool fits = true;
  // (plain arrays: nvcc's front end rejects a structured binding over a braced list of pairs)
  const index_t extents[3] = {x.batch, x.heads, rows ? x.seq : 1};
  const index_t strides[3] = {x.batch_stride, x.head_stride, x.seq_stride};
  for (int a = 0; a < 3; ++a) {
    index_t term = 0;
    fits = fits && !__builtin_mul_overflow(extents[a] - 1, strides[a], &term) &&
           !__builtin_add_overflow(term >= 0 ? hi : lo, term, term >= 0 ? &hi : &lo);
  }
  require_shape(fits, where, arg,
                "must have the offset of its last element ((batch-1)*batch_stride + (heads-1)*head_stride + "
                "(seq-1)*seq_stride + dim-1) an index_t",
                lazy_concat("strides ", x.batch_stride, ", ", x.head_stride, ", ", x.seq_stride, " for ", x.batch, "x",
                            x.heads, "x", x.seq, "x", x.dim));
}

/**
 * A multi-head view, checked whole before any head runs (so that no head, on any thread, meets
 * a bad one): non-negative extents, seq_stride >= dim, the extents of `require_heads_extents`,
 * and non-null data when it has elements.
 */
template <class T>
void validate_heads(const heads_view<T>& x, const char* where, const char* arg) {
  require_shape(x.batch >= 0 && x.heads >= 0 && x.seq >= 0 && x.dim >= 0, where, arg,
                "must have non-negative extents", lazy_concat(x.batch, "x", x.heads, "x", x.seq, "x", x.dim));
  // (no rows, no stride to check: a view with 0 heads in BSNH has seq_stride = 0, and its error
  // is the heads count, which the callers' batch/heads checks name)
  require_shape(x.seq <= 1 || x.batch == 0 || x.heads == 0 || x.seq_stride >= x.dim, where, arg,
                lazy_concat("must have seq_stride >= dim (", x.dim, ")"), x.seq_stride);
  require_heads_extents(x, where, arg);
  // (each head's own call checks only its own pointer, data + offset, which is not null)
  const bool has_elements = x.batch > 0 && x.heads > 0 && x.seq > 0 && x.dim > 0;
  require_shape(!has_elements || x.data != nullptr, where, arg, "must have non-null data when non-empty", "nullptr");
}

template <class T>
heads_view<const T> as_const_heads(const heads_view<T>& x) noexcept {
  return {x.data, x.batch, x.heads, x.seq, x.dim, x.batch_stride, x.head_stride, x.seq_stride};
}

}  // namespace detail

}  // namespace v0
}  // namespace lrpe
