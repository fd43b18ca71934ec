// SPDX-License-Identifier: MIT
/**
 * @file paged.hpp
 * A paged KV cache as vLLM and FlashInfer keep one: a pool of fixed-size blocks of rows shared
 * by every sequence, and per sequence a block table listing its blocks in order. Row j of
 * sequence b (head h) is row j mod B of block table_b[⌊j / B⌋] (B = block_size).
 *
 *     auto k = lrpe::paged_nhd(k_pool, blocks, 16, kv_heads, 128);  // [blocks, 16, heads, 128]
 *     lrpe::block_tables t{table, max_blocks_per_seq, lengths};
 */
#pragma once

#include <lrpe/core/error.hpp>
#include <lrpe/core/traits.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/detail/validate.hpp>

#include <bit>
#include <cstdint>
#include <span>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

/**
 * A pool of `blocks` blocks of `block_size` rows of `heads` heads of width `dim`, any layout:
 * element (block, row, head, i) at `data[block·block_stride + head·head_stride + row·row_stride + i]`.
 * `paged_nhd` and `paged_hnd` build the two common layouts.
 */
template <class S>
struct paged_kv_view {
  S* data = nullptr;
  index_t blocks = 0, block_size = 0, heads = 0, dim = 0;
  index_t block_stride = 0, head_stride = 0, row_stride = 0;

  /// A mutable view converts to a const one.
  template <class U = S>
    requires(std::is_same_v<U, S> && !std::is_const_v<U>)
  operator paged_kv_view<const U>() const noexcept  // NOLINT implicit
  {
    return {data, blocks, block_size, heads, dim, block_stride, head_stride, row_stride};
  }
  /// The block_size × dim rows of head h in a block.
  [[nodiscard]] matrix_view<S> block_rows(index_t block, index_t h) const noexcept {
    return matrix_view<S>(data + block * block_stride + h * head_stride, block_size, dim, row_stride);
  }
};

/// [blocks, block_size, heads, dim] contiguous (FlashInfer's NHD; a block's rows hold every head).
/// @throws shape_error if blocks·block_size·heads·dim (of the nonzero extents) is not an index_t.
template <class S>
paged_kv_view<S> paged_nhd(S* data, index_t blocks, index_t block_size, index_t heads, index_t dim) {
  detail::require_layout_extents("lrpe::paged_nhd", blocks, block_size, heads, dim, "blocks*block_size*heads*dim");
  const index_t row = detail::wrapping_product(heads, dim);
  return {data, blocks, block_size, heads, dim, detail::wrapping_product(block_size, row), dim, row};
}

/// [blocks, heads, block_size, dim] contiguous (FlashInfer's HND: each head's rows together).
/// @throws shape_error if blocks·heads·block_size·dim (of the nonzero extents) is not an index_t.
template <class S>
paged_kv_view<S> paged_hnd(S* data, index_t blocks, index_t block_size, index_t heads, index_t dim) {
  detail::require_layout_extents("lrpe::paged_hnd", blocks, heads, block_size, dim, "blocks*heads*block_size*dim");
  const index_t head = detail::wrapping_product(block_size, dim);
  return {data, blocks, block_size, heads, dim, detail::wrapping_product(heads, head), head, dim};
}

/**
 * The block tables of a batch: sequence b holds `lengths[b]` rows, in blocks
 * `blocks[b·stride]`, `blocks[b·stride + 1]`, … (⌈lengths[b] / block_size⌉ of them; the rest of
 * its `stride` entries are not read).
 */
struct block_tables {
  std::span<const std::int32_t> blocks;
  index_t stride = 0;
  std::span<const index_t> lengths;
};

namespace detail {

/// The rows of one (sequence, head) of a paged cache, as the kernels read them: row(j).
template <class S>
struct paged_rows {
  S* data = nullptr;
  const std::int32_t* table = nullptr;  ///< the sequence's blocks
  int shift = 0;                        ///< log2(block_size)
  index_t block_stride = 0, row_stride = 0;
  index_t rows = 0, cols = 0;
  /// Rows j … j + n − 1 lie in one block (row_stride apart).
  [[nodiscard]] bool same_block(index_t j, index_t n) const noexcept {
    return (j & ((index_t(1) << shift) - 1)) + n <= (index_t(1) << shift);
  }
  [[nodiscard]] S* row(index_t j) const noexcept {
    return data + static_cast<index_t>(table[j >> shift]) * block_stride + (j & ((index_t(1) << shift) - 1)) * row_stride;
  }
};

template <class S>
paged_rows<S> paged_rows_of(const paged_kv_view<S>& cache, const block_tables& t, index_t b, index_t h) noexcept {
  return {cache.data + h * cache.head_stride,
          t.blocks.data() + b * t.stride,
          std::countr_zero(static_cast<std::uint64_t>(cache.block_size)),
          cache.block_stride,
          cache.row_stride,
          t.lengths[static_cast<std::size_t>(b)],
          cache.dim};
}

template <class S>
paged_kv_view<const S> as_const_paged(const paged_kv_view<S>& c) noexcept {
  return {c.data, c.blocks, c.block_size, c.heads, c.dim, c.block_stride, c.head_stride, c.row_stride};
}

/// Checks a paged view: non-negative sizes, a power-of-two block size, data when non-empty.
template <class S>
void validate_paged(const paged_kv_view<S>& c, const char* where, const char* arg) {
  require_shape(c.blocks >= 0 && c.heads >= 0 && c.dim >= 0, where, arg, "must have non-negative sizes",
                lazy_concat(c.blocks, " blocks, ", c.heads, " heads, dim ", c.dim));
  require_shape(c.block_size >= 1 && std::has_single_bit(static_cast<std::uint64_t>(c.block_size)), where,
                arg, "must have a block_size that is a power of two (1, 2, 4, ..., 16, ...)", c.block_size);
  require_shape(c.blocks == 0 || c.data != nullptr, where, arg, "must have non-null data when it has blocks",
                "nullptr");
  require_shape(c.block_stride >= 0 && c.head_stride >= 0 && c.row_stride >= 0, where, arg,
                "must have non-negative strides",
                lazy_concat(c.block_stride, ", ", c.head_stride, ", ", c.row_stride));
}

/// A K and a V pool that go together: each valid, the same blocks, block size and heads.
template <class SK, class SV>
void validate_paged_pair(const paged_kv_view<SK>& k, const paged_kv_view<SV>& v, const char* where, const char* k_arg,
                         const char* v_arg) {
  validate_paged(k, where, k_arg);
  validate_paged(v, where, v_arg);
  require_shape(v.blocks == k.blocks && v.block_size == k.block_size && v.heads == k.heads, where, v_arg,
                lazy_concat("must have the blocks, block_size and heads of ", k_arg, " (", k.blocks, ", ", k.block_size,
                            ", ", k.heads, ")"),
                lazy_concat(v.blocks, ", ", v.block_size, ", ", v.heads));
}

/// Every used entry of the block tables names a block of the pool; each sequence's blocks fit
/// its stride and the table.
inline void validate_block_tables(const block_tables& t, index_t batch, index_t blocks, index_t block_size,
                                  const char* where) {
  require_size(static_cast<index_t>(t.lengths.size()), batch, where, "tables.lengths");
  require_shape(t.stride >= 0 && (batch <= 1 || t.stride <= static_cast<index_t>(t.blocks.size())), where,
                "tables.stride", "must be >= 0, and at most tables.blocks.size() for a batch of several sequences",
                t.stride);
  for (index_t b = 0; b < batch; ++b) {
    const index_t len = t.lengths[static_cast<std::size_t>(b)];
    require_shape(len >= 0, where, "tables.lengths[b]", "must be >= 0", len);
    const index_t used = len / block_size + (len % block_size != 0 ? 1 : 0);
    require_shape(used <= t.stride, where, "tables.lengths[b]",
                  lazy_concat("must fit the table's stride: ceil(lengths[b] / block_size) <= ", t.stride), len);
    require_shape(b * t.stride + used <= static_cast<index_t>(t.blocks.size()), where, "tables.blocks",
                  lazy_concat("must hold batch x stride entries (sequence ", b, " reads ", b * t.stride + used, ")"),
                  t.blocks.size());
    for (index_t i = 0; i < used; ++i) {
      const std::int32_t blk = t.blocks[static_cast<std::size_t>(b * t.stride + i)];
      require_shape(blk >= 0 && blk < blocks, where, "tables.blocks[b*stride + i]",
                    lazy_concat("must name a block of the pool, 0 ... ", blocks - 1), blk);
    }
  }
}

template <class R>
inline constexpr bool is_paged_rows_v = false;
template <class S>
inline constexpr bool is_paged_rows_v<paged_rows<S>> = true;

}  // namespace detail

}  // namespace v0
}  // namespace lrpe
