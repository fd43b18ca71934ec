// SPDX-License-Identifier: MIT
/**
 * @file common.cuh
 * Internal pieces shared by the attention kernels: the identity encoder description used for
 * "no encoding", tile loaders that encode rows while loading them (LRPE fused into the Q/K
 * loads), and a device binary search over positions.
 */
#pragma once

#include <lrpe/backend/cuda/device_encoder.cuh>

namespace lrpe {
inline namespace v0 {
namespace cuda {
namespace detail {

/// M_s = I on d features: what the kernels run for `no_encoding` (d is q.dim: checked to be a
/// width the kernels take, before it is narrowed to int).
inline encoder_desc identity_desc(index_t d, const char* where) {
  ::lrpe::detail::require_shape(d >= 1 && d <= max_encoder_dim, where, "q.dim",
                                ::lrpe::detail::lazy_concat("must be in [1, ", max_encoder_dim, "]"), d);
  encoder_desc e{};
  e.d = static_cast<int>(d);
  e.feature_dim = static_cast<int>(d);
  return e;
}

/// Host-side checks shared by the attention launchers: views valid, q/k widths equal the
/// encoder's d, k/v and out/q row counts agree, out.dim = v.dim, grid limits respected.
template <class T>
void validate_attention_views(const encoder_desc& enc, const device_view<const T>& q, const device_view<const T>& k,
                              const device_view<const T>& v, const device_view<T>& out, const char* where) {
  using ::lrpe::detail::concat;
  using ::lrpe::detail::lazy_concat;
  using ::lrpe::detail::require_shape;
  validate_view(q, where, "q");
  validate_view(k, where, "k");
  validate_view(v, where, "v");
  validate_view(out, where, "out");
  require_shape(q.dim == enc.d, where, "q.dim", lazy_concat("must equal the encoder's dim() = ", enc.d), q.dim);
  require_shape(k.dim == q.dim, where, "k.dim", lazy_concat("must equal q.dim = ", q.dim), k.dim);
  require_shape(k.batch == q.batch && k.heads == q.heads, where, "k", "must have the batch and heads of q",
                lazy_concat(k.batch, "x", k.heads));
  require_same_rows(v, k, where, "v", "k");
  require_same_rows(out, q, where, "out", "q");
  require_shape(out.dim == v.dim, where, "out.dim", lazy_concat("must equal v.dim = ", v.dim), out.dim);
  require_shape(q.heads <= 65535 && q.batch <= 65535, where, "q", "must have at most 65535 heads and batches",
                lazy_concat(q.batch, "x", q.heads));
}

/// The grid's x extent (query tiles, value-column tiles): at most 2^31 − 1 blocks.
inline unsigned grid_x(index_t blocks, const char* where, const char* arg, index_t value) {
  ::lrpe::detail::require_shape(blocks <= 2147483647, where, arg, "must need at most 2^31 - 1 blocks of the grid",
                                value);
  return static_cast<unsigned>(blocks);
}

/**
 * Host-side position checks shared by the attention launchers: an offset's last row must not
 * pass 2^63 − 1, and when Q and K are both offsets every t − s must fit in int64 (as on the CPU
 * backends). Device arrays are not read on the host: that their differences fit in int64 is
 * the caller's precondition (docs/cuda.md).
 */
inline void validate_device_positions(const device_positions& qp, index_t nq, const device_positions& kp, index_t nk,
                                      const char* where) {
  const ::lrpe::positions hq(qp.offset), hk(kp.offset);
  if (!qp.is_array()) hq.require_rows(nq, where, "options.q_positions");
  if (!kp.is_array()) hk.require_rows(nk, where, "options.k_positions");
  if (!qp.is_array() && !kp.is_array()) ::lrpe::detail::require_position_span(hq, nq, hk, nk, where);
}

/**
 * Loads and encodes `rows` rows (seq rows r0..r0+rows−1 of head (b, h)) into a shared tile
 * `tile[i·stride + c]` (c < feature_dim) with one warp per row; rows in [rows, tile_rows) are
 * zero; `pos[i]` gets each row's position. Call with the whole block; ends without a barrier.
 */
template <class T>
__device__ void load_encoded_tile(const encoder_desc& e, const device_feature_map& phi, const device_view<const T>& x,
                                  const device_positions& xp, index_t b, index_t h, index_t r0, int rows,
                                  int tile_rows, float* tile, int stride, position_t* pos, float* scratch) {
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warps = static_cast<int>(blockDim.x >> 5);
  float* xs = scratch + static_cast<index_t>(warp) * encode_scratch_floats(e.d);
  for (int i = warp; i < tile_rows; i += warps) {
    float* dst = tile + static_cast<index_t>(i) * stride;
    if (i < rows) {
      const position_t s = xp[r0 + i];
      const T* src = x.row(b, h, r0 + i);
      encode_row_warp(
          e, s, [src, phi](int j) { return apply_phi(phi, to_float(src[j])); }, xs, xs + e.d, xs + 2 * e.d,
          [dst](int c, float v) { dst[c] = v; });
      if (lane == 0) pos[i] = s;
    } else {
      for (int c = lane; c < e.feature_dim; c += 32) dst[c] = 0.0f;
      if (lane == 0) pos[i] = 0;
    }
  }
}

/// Loads columns [c0, c0 + cols) of `rows` value rows into `tile[j·cols + c]` (zeros outside).
template <class T>
__device__ void load_value_tile(const device_view<const T>& v, index_t b, index_t h, index_t r0, int rows, int tile_rows,
                                index_t c0, int cols, float* tile) {
  for (int e = static_cast<int>(threadIdx.x); e < tile_rows * cols; e += static_cast<int>(blockDim.x)) {
    const int j = e / cols, c = e % cols;
    tile[e] = (j < rows && c0 + c < v.dim) ? to_float(v.row(b, h, r0 + j)[c0 + c]) : 0.0f;
  }
}

/// The first index i in [lo, hi) with p[i] > value (hi if none); p non-decreasing on [lo, hi).
__device__ __forceinline__ index_t upper_bound_position(const device_positions& p, index_t lo, index_t hi,
                                                        position_t value) {
  while (lo < hi) {
    const index_t mid = lo + (hi - lo) / 2;
    if (p[mid] <= value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace detail
}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
