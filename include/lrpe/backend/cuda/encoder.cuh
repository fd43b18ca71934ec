// SPDX-License-Identifier: MIT
/**
 * @file encoder.cuh
 * The fused encoder kernels: Q and K (any preset, any `device_encoder`) encoded in one launch,
 * positions by offset or device array, in place or out of place. The launcher picks one of
 * three: RoPE-like encoders on 16-byte-aligned rows by vectors in registers
 * (`encode_rotation_vector_kernel`); other encoders with angles and several rows per position
 * (heads), a warp per row with each position's cos/sin formed once per block and shared
 * (`encode_qk_shared_angles_kernel`); the rest a warp per row (`encode_qk_kernel`).
 *
 * q_out row (b, h, s) = features of M_{qp[s]} q row (b, h, s), and likewise for K with kp,
 * exactly the CPU `encoder::encode_features` (real view [Re, Im] for complex encoders), computed
 * in fp32 from fp32 / fp16 / bf16 storage and rounded once on store.
 */
#pragma once

#include <lrpe/backend/cuda/device_encoder.cuh>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lrpe {
inline namespace v0 {
namespace cuda {
namespace detail {

inline constexpr int encode_threads = 256;  // 8 warps, one row each at a time

/// q = n / m and r = n − q·m for 0 ≤ n and 1 ≤ m, in 32-bit arithmetic when both fit (a 64-bit
/// division is a long subroutine on the GPU, and the kernels split an index for every row).
__device__ __forceinline__ void divide(index_t n, index_t m, index_t& q, index_t& r) {
  if (n <= 0xffffffff && m <= 0xffffffff) {
    const auto nu = static_cast<unsigned>(n), mu = static_cast<unsigned>(m);
    const unsigned qu = nu / mu;
    q = qu;
    r = nu - qu * mu;
  } else {
    q = n / m;
    r = n - q * m;
  }
}

/// Rows [0, nq) are Q rows, [nq, nq + nk) are K rows; a grid-stride loop of warps over them.
template <class T>
__global__ void __launch_bounds__(encode_threads)
    encode_qk_kernel(encoder_desc e, device_view<const T> q, device_positions qp, device_view<T> qo,
                     device_view<const T> k, device_positions kp, device_view<T> ko) {
  extern __shared__ float smem[];
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5);
  float* xs = smem + static_cast<index_t>(warp) * encode_scratch_floats(e.d);
  float* yr = xs + e.d;
  float* yi = yr + e.d;
  const index_t nq = q.rows(), total = nq + k.rows();
  for (index_t r = static_cast<index_t>(blockIdx.x) * warps + warp; r < total;
       r += static_cast<index_t>(gridDim.x) * warps) {
    const bool is_q = r < nq;
    // by value: a reference chosen at run time between two kernel parameters puts both in local memory
    const device_view<const T> in = is_q ? q : k;
    const device_view<T> out = is_q ? qo : ko;
    const index_t row = is_q ? r : r - nq;
    index_t s = 0, h = 0, b = 0, bh = 0;
    divide(row, in.seq, bh, s);
    divide(bh, in.heads, b, h);
    const T* x = in.row(b, h, s);
    T* o = out.row(b, h, s);
    const position_t pos = is_q ? qp[s] : kp[s];
    encode_row_warp(
        e, pos, [x](int j) { return to_float(x[j]); }, xs, yr, yi,
        [o](int i, float v) { o[i] = from_float<T>(v); });
  }
}

/**
 * The loop of the kernels that share a position's angles: for each sequence row this block takes
 * (Q's rows first, then K's; a grid-stride loop over positions, so the same trip count in every
 * thread), cos/sin of its position go into `table` (`fill_angle_table`) and every thread of the
 * block calls `body(in, out, s, pos)` for that row s of the input `in` and output `out`.
 */
template <class T, class Body>
__device__ __forceinline__ void for_each_position(const encoder_desc& e, const device_view<const T>& q,
                                                  const device_positions& qp, const device_view<T>& qo,
                                                  const device_view<const T>& k, const device_positions& kp,
                                                  const device_view<T>& ko, float2* table, Body body) {
  const index_t slots = q.seq + k.seq;
  for (index_t r = blockIdx.x; r < slots; r += gridDim.x) {
    const bool is_q = r < q.seq;
    // by value: a reference chosen at run time between two kernel parameters puts both in local memory
    const device_view<const T> in = is_q ? q : k;
    const device_view<T> out = is_q ? qo : ko;
    const index_t s = is_q ? r : r - q.seq;
    const position_t pos = is_q ? qp[s] : kp[s];
    fill_angle_table(e, pos, table, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
    __syncthreads();
    body(in, out, s, pos);
    __syncthreads();  // the table is rewritten for the next position
  }
}

/**
 * The same encoding with the angles shared: a block takes one sequence row (a position) at a
 * time, Q's seq rows first, then K's; its threads form cos/sin of s·θ_k once into shared memory
 * and its warps encode the batch·heads rows at that position from the table. For encoders with
 * angles (rotations, complex phases) and several rows per position, where forming the exact
 * angle (double reduction, sincosf) costs more than moving the row.
 */
template <class T>
__global__ void __launch_bounds__(encode_threads, 4)  // 64 registers: 32 warps per multiprocessor
    encode_qk_shared_angles_kernel(encoder_desc e, device_view<const T> q, device_positions qp, device_view<T> qo,
                                   device_view<const T> k, device_positions kp, device_view<T> ko) {
  extern __shared__ float2 table[];  // angle_count(e) pairs, then each warp's scratch
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5);
  float* xs = reinterpret_cast<float*>(table + angle_count(e)) +  // after the table: this warp's scratch
              static_cast<index_t>(warp) * encode_scratch_floats(e.d);
  float* yr = xs + e.d;
  float* yi = yr + e.d;
  const auto encode_rows = [&](const device_view<const T>& in, const device_view<T>& out, index_t s, position_t pos) {
    for (index_t g = warp; g < in.batch * in.heads; g += warps) {  // one warp per row (head)
      index_t b = 0, h = 0;
      divide(g, in.heads, b, h);
      const T* x = in.row(b, h, s);
      T* o = out.row(b, h, s);
      encode_row_warp(
          e, pos, [x](int j) { return to_float(x[j]); }, xs, yr, yi, [o](int i, float v) { o[i] = from_float<T>(v); },
          table);
    }
  };
  for_each_position(e, q, qp, qo, k, kp, ko, table, encode_rows);
}

/// Elements of T in one 16-byte vector (4 fp32, 8 fp16 / bf16).
template <class T>
inline constexpr int vector_width = static_cast<int>(16 / sizeof(T));

/// Loads 16 aligned bytes at p as `vector_width<T>` floats.
template <class T>
__device__ __forceinline__ void load_vector(const T* p, float (&f)[vector_width<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  T e[vector_width<T>];
  memcpy(e, &raw, sizeof raw);
#pragma unroll
  for (int i = 0; i < vector_width<T>; ++i) f[i] = to_float(e[i]);
}

/// Rounds `vector_width<T>` floats to T and stores them as 16 aligned bytes at p.
template <class T>
__device__ __forceinline__ void store_vector(T* p, const float (&f)[vector_width<T>]) {
  T e[vector_width<T>];
#pragma unroll
  for (int i = 0; i < vector_width<T>; ++i) e[i] = from_float<T>(f[i]);
  uint4 raw;
  memcpy(&raw, e, sizeof raw);
  *reinterpret_cast<uint4*>(p) = raw;
}

/**
 * RoPE-like encoders (identity P, rotation Λ: rope_neox, rope_gptj, any θ and partial rotary)
 * with 16-byte vectors and no shared row: a block takes one sequence row at a time and forms its
 * cos/sin table once (as `encode_qk_shared_angles_kernel`); each thread then takes a unit of one
 * row, V = vector_width<T> pairs (split-half: V elements at k and at k + half; interleaved: 2V
 * consecutive elements), or V unrotated tail elements, loads them as vectors,
 * rotates them in registers and stores them. The launcher takes it only when every row start is
 * 16-byte aligned and the pairs and the tail split into whole vectors.
 */
template <class T>
__global__ void __launch_bounds__(encode_threads)
    encode_rotation_vector_kernel(encoder_desc e, device_view<const T> q, device_positions qp, device_view<T> qo,
                                  device_view<const T> k, device_positions kp, device_view<T> ko) {
  constexpr int V = vector_width<T>;
  extern __shared__ float2 angle_table[];
  const int half = e.half;
  const int pair_units = half / V;  // units of V rotated pairs per row
  const int units = pair_units + (e.d - 2 * half) / V;  // then the unrotated tail
  const auto rotate_rows = [&](const device_view<const T>& in, const device_view<T>& out, index_t s, position_t) {
    const index_t work = in.batch * in.heads * units;
    for (index_t w = threadIdx.x; w < work; w += blockDim.x) {
      index_t g = 0, u = 0, b = 0, h = 0;
      divide(w, units, g, u);
      divide(g, in.heads, b, h);
      const T* x = in.row(b, h, s);
      T* o = out.row(b, h, s);
      float a[V], c[V];
      if (u >= pair_units) {  // unrotated tail: copied, unless in place
        const int j = 2 * half + static_cast<int>(u - pair_units) * V;
        if (static_cast<const void*>(x) != static_cast<const void*>(o)) {
          load_vector(x + j, a);
          store_vector(o + j, a);
        }
      } else if (e.split_half) {  // pairs (i, i + half) for i in [i0, i0 + V)
        const int i0 = static_cast<int>(u) * V;
        load_vector(x + i0, a);
        load_vector(x + i0 + half, c);
#pragma unroll
        for (int t = 0; t < V; ++t) {
          const float2 cs = angle_table[i0 + t];
          const float lo = a[t] * cs.x - c[t] * cs.y, hi = c[t] * cs.x + a[t] * cs.y;
          a[t] = lo;
          c[t] = hi;
        }
        store_vector(o + i0, a);
        store_vector(o + i0 + half, c);
      } else {  // pairs (2k, 2k + 1) for the V pairs of elements [j0, j0 + 2V)
        const int j0 = static_cast<int>(u) * 2 * V;
        load_vector(x + j0, a);
        load_vector(x + j0 + V, c);
#pragma unroll
        for (int t = 0; t < V; t += 2) {
          const float2 ca = angle_table[j0 / 2 + t / 2], cc = angle_table[(j0 + V) / 2 + t / 2];
          const float a0 = a[t] * ca.x - a[t + 1] * ca.y, a1 = a[t + 1] * ca.x + a[t] * ca.y;
          const float c0 = c[t] * cc.x - c[t + 1] * cc.y, c1 = c[t + 1] * cc.x + c[t] * cc.y;
          a[t] = a0;
          a[t + 1] = a1;
          c[t] = c0;
          c[t + 1] = c1;
        }
        store_vector(o + j0, a);
        store_vector(o + j0 + V, c);
      }
    }
  };
  for_each_position(e, q, qp, qo, k, kp, ko, angle_table, rotate_rows);
}

/// Whether `encode_rotation_vector_kernel` takes this launch: identity P, rotation Λ, real; the
/// pairs in whole units of V and the tail in whole 16-byte vectors; every row start 16-byte
/// aligned.
template <class T>
bool rotation_vectorizable(const encoder_desc& e, const device_view<const T>& q, const device_view<T>& qo,
                           const device_view<const T>& k, const device_view<T>& ko) {
  constexpr int V = vector_width<T>;
  if (e.p != p_kind::identity || e.lambda != lambda_kind::rotation || e.is_complex) return false;
  if (e.half % V != 0 || (e.d - 2 * e.half) % V != 0) return false;  // whole units of V pairs
  const auto aligned = [](const auto& view) {
    constexpr auto bytes = static_cast<index_t>(sizeof(T));
    return view.rows() == 0 ||
           (reinterpret_cast<std::uintptr_t>(view.data) % 16 == 0 && view.batch_stride * bytes % 16 == 0 &&
            view.head_stride * bytes % 16 == 0 && view.seq_stride * bytes % 16 == 0);
  };
  return aligned(q) && aligned(qo) && aligned(k) && aligned(ko);
}

template <class T>
void validate_encode_pair(const encoder_desc& e, const device_view<const T>& x, const device_view<T>& out,
                          const char* where, const char* xn, const char* on) {
  using ::lrpe::detail::concat;
  using ::lrpe::detail::lazy_concat;
  validate_view(x, where, xn);
  validate_view(out, where, on);
  ::lrpe::detail::require_shape(x.dim == e.d, where, xn, lazy_concat("must have dim = encoder dim() = ", e.d), x.dim);
  ::lrpe::detail::require_shape(out.dim == e.feature_dim, where, on,
                                lazy_concat("must have dim = encoder feature_dim() = ", e.feature_dim), out.dim);
  require_same_rows(out, x, where, on, xn);
  const void* xb = x.data;
  const void* ob = out.data;
  if (xb == ob && x.rows() > 0) {
    ::lrpe::detail::require_shape(
        e.feature_dim == e.d && out.batch_stride == x.batch_stride && out.head_stride == x.head_stride &&
            out.seq_stride == x.seq_stride,
        where, on,
        "may alias the input only for a real encoder (feature_dim() == dim()) with identical strides "
        "(in-place encoding)",
        lazy_concat("feature_dim ", e.feature_dim, ", dim ", e.d));
  }
}

}  // namespace detail

namespace detail {

/// Argument names of one encode call's messages ("q", "qp", "q_out", …, or "x", "p", "x_out").
struct encode_names {
  const char *q, *qp, *q_out, *k, *kp, *k_out;
};

/// The host checks and the launch of `encode` (on an encoder's flat description; every check
/// comes before the first CUDA call, so a host without a device can test them).
template <storage_type T>
void encode_launch(const encoder_desc& desc, device_view<const T> q, device_positions qp, device_view<T> q_out,
                   device_view<const T> k, device_positions kp, device_view<T> k_out, cudaStream_t stream,
                   const char* where, const encode_names& n) {
  validate_encode_pair(desc, q, q_out, where, n.q, n.q_out);
  validate_encode_pair(desc, k, k_out, where, n.k, n.k_out);
  // an offset's last row must be a position (offset + seq − 1 ≤ 2^63 − 1), as on the CPU
  if (!qp.is_array() && q.rows() > 0) ::lrpe::positions(qp.offset).require_rows(q.seq, where, n.qp);
  if (!kp.is_array() && k.rows() > 0) ::lrpe::positions(kp.offset).require_rows(k.seq, where, n.kp);
  const index_t total = q.rows() + k.rows();
  if (total == 0) return;
  constexpr index_t shared_limit = 48 * 1024;  // no opt-in needed below it
  const index_t per_warp = encode_scratch_floats(desc.d) * static_cast<index_t>(sizeof(float));
  int dev = 0, sms = 0;
  LRPE_CUDA_CHECK(cudaGetDevice(&dev));
  LRPE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

  const index_t table_bytes = angle_count(desc) * static_cast<index_t>(sizeof(float2));
  if (rotation_vectorizable(desc, q, q_out, k, k_out)) {
    const auto blocks = static_cast<unsigned>(std::min<index_t>(q.seq + k.seq, static_cast<index_t>(sms) * 16));
    LRPE_CUDA_CHECK_PENDING("lrpe::cuda::detail::encode_rotation_vector_kernel");
    encode_rotation_vector_kernel<T><<<blocks, encode_threads, static_cast<std::size_t>(table_bytes), stream>>>(
        desc, q, qp, q_out, k, kp, k_out);
    LRPE_CUDA_CHECK_LAUNCH("lrpe::cuda::detail::encode_rotation_vector_kernel");
    return;
  }
  // rows per position (every head of a sequence row): the angles are shared when there are
  // several and the table fits beside one warp's scratch
  const index_t per_position = std::max(q.seq > 0 ? q.batch * q.heads : 0, k.seq > 0 ? k.batch * k.heads : 0);
  if (angle_count(desc) > 0 && per_position >= 2 && table_bytes + per_warp <= shared_limit) {
    const int warps = static_cast<int>(
        std::clamp<index_t>(std::min((shared_limit - table_bytes) / per_warp, per_position), 1, encode_threads / 32));
    const auto shared = static_cast<std::size_t>(table_bytes + warps * per_warp);
    const auto blocks = static_cast<unsigned>(std::min<index_t>(q.seq + k.seq, static_cast<index_t>(sms) * 16));
    LRPE_CUDA_CHECK_PENDING("lrpe::cuda::detail::encode_qk_shared_angles_kernel");
    encode_qk_shared_angles_kernel<T><<<blocks, static_cast<unsigned>(warps * 32), shared, stream>>>(
        desc, q, qp, q_out, k, kp, k_out);
    LRPE_CUDA_CHECK_LAUNCH("lrpe::cuda::detail::encode_qk_shared_angles_kernel");
    return;
  }
  // one warp per row: warps per block so that 3·d floats of scratch per warp stay within 48 KiB
  const int warps = static_cast<int>(std::clamp<index_t>(shared_limit / per_warp, 1, encode_threads / 32));
  const auto shared = static_cast<std::size_t>(warps * per_warp);
  const index_t wanted = (total + warps - 1) / warps;
  const auto blocks = static_cast<unsigned>(std::min<index_t>(wanted, static_cast<index_t>(sms) * 32));
  LRPE_CUDA_CHECK_PENDING("lrpe::cuda::detail::encode_qk_kernel");
  encode_qk_kernel<T><<<blocks, static_cast<unsigned>(warps * 32), shared, stream>>>(desc, q, qp, q_out, k, kp,
                                                                                      k_out);
  LRPE_CUDA_CHECK_LAUNCH("lrpe::cuda::detail::encode_qk_kernel");
}

}  // namespace detail

/**
 * Encodes Q and K in one fused launch: q_out = features of M_{qp} q, k_out = features of M_{kp} k.
 *
 * @param e           the device encoder.
 * @param q, k        batch × heads × seq × d device views (any strides, dim contiguous); empty allowed.
 * @param qp, kp      positions of the seq rows (offset or device array), shared by all (b, h).
 * @param q_out,k_out batch × heads × seq × feature_dim() views; may be the inputs themselves
 *                    (in place) for real encoders with identical strides; must not otherwise overlap.
 * @param stream      the stream the launch is queued on (asynchronous: nothing is synchronised).
 * @throws shape_error on mismatched views; parameter_error on an offset whose last row passes
 *         2^63 − 1; cuda_error on a failed launch.
 */
template <storage_type T>
void encode(const device_encoder& e, device_view<const T> q, device_positions qp, device_view<T> q_out,
            device_view<const T> k, device_positions kp, device_view<T> k_out, cudaStream_t stream = nullptr) {
  detail::encode_launch<T>(e.desc(), q, qp, q_out, k, kp, k_out, stream, "lrpe::cuda::encode",
                           {"q", "qp", "q_out", "k", "kp", "k_out"});
}

/// Encodes one tensor (x_out = features of M_p x); the same kernel with no K rows.
template <storage_type T>
void encode(const device_encoder& e, device_view<const T> x, device_positions p, device_view<T> x_out,
            cudaStream_t stream = nullptr) {
  device_view<const T> none_in(x.data, x.batch, x.heads, 0, x.dim, 0, 0, 0);
  device_view<T> none_out(x_out.data, x.batch, x.heads, 0, x_out.dim, 0, 0, 0);
  detail::encode_launch<T>(e.desc(), x, p, x_out, none_in, p, none_out, stream, "lrpe::cuda::encode",
                           {"x", "p", "x_out", "x", "p", "x_out"});
}

}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
