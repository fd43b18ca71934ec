// SPDX-License-Identifier: MIT
/**
 * @file softmax.cuh
 * Flash-style softmax attention on the GPU (the CPU contract of docs/attention.md):
 *
 *     logit(s, t) = scale · q̃_s·k̃_t + bias(s, t),   out_s = Σ_{t visible} softmax_t(logit) v_t
 *
 * with q̃, k̃ the encoder's real features of q, k at their positions (identity for no encoding),
 * computed while the tiles are loaded (LRPE fused into the Q/K loads: encoded Q and K never
 * touch device memory). One block of 128 threads per (32-query tile, head, batch); key tiles
 * of 32 rows; online softmax (running max m, sum l, fp32 accumulator in shared memory);
 * causal rule on positions (key visible iff k_pos ≤ q_pos), a key tile whose smallest position
 * exceeds the query tile's largest is skipped; fully masked rows are zero.
 *
 * Deliberately simple (no tensor cores, fp32 FMA dot products from shared memory): written to
 * be obviously right first. docs/cuda.md lists the planned Hopper version (WGMMA, TMA).
 */
#pragma once

#include <lrpe/backend/cuda/bias.cuh>
#include <lrpe/backend/cuda/common.cuh>
#include <lrpe/attention/options.hpp>

#include <cmath>
#include <optional>

namespace lrpe {
inline namespace v0 {
namespace cuda {

/// Options of `cuda::softmax_attention` (the CPU `softmax_options` less URPE reweighting and tile).
struct softmax_options {
  bool causal = false;
  /// Multiplies q̃·k̃; default 1/√d with d the width of q (T5 bias: 1).
  std::optional<double> scale{};
  device_positions q_positions{};
  device_positions k_positions{};
};

namespace detail {

inline constexpr int softmax_threads = 128;
inline constexpr int softmax_br = 32;  // query rows per block
inline constexpr int softmax_bc = 32;  // key rows per tile (== warp width: one lane per key)

struct softmax_params {
  encoder_desc enc;
  bias_desc bias;
  device_positions qp, kp;
  float scale;
  bool causal;
};

LRPE_HOST_DEVICE constexpr index_t softmax_shared_bytes(index_t d, index_t f, index_t dv) noexcept {
  const index_t fs = f + 1;
  const index_t floats = softmax_br * fs + softmax_bc * fs + softmax_bc * dv + softmax_br * (softmax_bc + 1) +
                         softmax_br * dv + 2 * softmax_br + (softmax_threads / 32) * encode_scratch_floats(d);
  return (softmax_br + softmax_bc) * static_cast<index_t>(sizeof(position_t)) + floats * static_cast<index_t>(sizeof(float));
}

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

template <class T>
__global__ void __launch_bounds__(softmax_threads)
    softmax_kernel(softmax_params p, device_view<const T> q, device_view<const T> k, device_view<const T> v,
                   device_view<T> out) {
  constexpr int Br = softmax_br, Bc = softmax_bc, W = softmax_threads / 32;
  constexpr float neg_inf = -INFINITY;
  extern __shared__ __align__(16) unsigned char raw[];
  auto* qpos = reinterpret_cast<position_t*>(raw);
  position_t* kpos = qpos + Br;
  auto* qf = reinterpret_cast<float*>(kpos + Bc);
  const int f = p.enc.feature_dim, fs = f + 1, dv = static_cast<int>(v.dim);
  float* kf = qf + Br * fs;
  float* vs = kf + Bc * fs;
  float* S = vs + Bc * dv;
  float* O = S + Br * (Bc + 1);
  float* m = O + Br * dv;
  float* l = m + Br;
  float* scratch = l + Br;
  const device_feature_map no_phi{};

  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const index_t b = blockIdx.z, h = blockIdx.y, i0 = static_cast<index_t>(blockIdx.x) * Br;
  const index_t nq = q.seq, nk = k.seq;
  const int rows_q = static_cast<int>(nq - i0 < Br ? nq - i0 : Br);
  const int bias_head = p.bias.fixed_head >= 0 ? p.bias.fixed_head : static_cast<int>(h);

  load_encoded_tile(p.enc, no_phi, q, p.qp, b, h, i0, rows_q, Br, qf, fs, qpos, scratch);
  for (int e = tid; e < Br * dv; e += blockDim.x) O[e] = 0.0f;
  for (int i = tid; i < Br; i += blockDim.x) {
    m[i] = neg_inf;
    l[i] = 0.0f;
  }
  __syncthreads();
  position_t q_max = qpos[0];
  for (int i = 1; i < rows_q; ++i) q_max = qpos[i] > q_max ? qpos[i] : q_max;

  for (index_t j0 = 0; j0 < nk; j0 += Bc) {
    const int rows_k = static_cast<int>(nk - j0 < Bc ? nk - j0 : Bc);
    if (p.causal) {  // the same decision in every thread: skip tiles with no visible key
      position_t k_min = p.kp[j0];
      for (int j = 1; j < rows_k; ++j) k_min = p.kp[j0 + j] < k_min ? p.kp[j0 + j] : k_min;
      if (k_min > q_max) continue;
    }
    load_encoded_tile(p.enc, no_phi, k, p.kp, b, h, j0, rows_k, Bc, kf, fs, kpos, scratch);
    load_value_tile(v, b, h, j0, rows_k, Bc, 0, dv, vs);
    __syncthreads();

    for (int e = tid; e < Br * Bc; e += blockDim.x) {
      const int i = e / Bc, j = e % Bc;
      float logit = neg_inf;
      if (i < rows_q && j < rows_k && !(p.causal && kpos[j] > qpos[i])) {
        const float* a = qf + i * fs;
        const float* c = kf + j * fs;
        float dot = 0.0f;
        for (int x = 0; x < f; ++x) dot += a[x] * c[x];
        logit = p.scale * dot;
        if (p.bias.kind != bias_kind::none) logit += bias_value(p.bias, bias_head, qpos[i], kpos[j]);
      }
      S[i * (Bc + 1) + j] = logit;
    }
    __syncthreads();

    for (int i = warp; i < rows_q; i += W) {  // online softmax, one warp per query row, one lane per key
      float* srow = S + i * (Bc + 1);
      const float sv = srow[lane];
      if (__any_sync(0xffffffffu, sv != sv)) {
        // a NaN logit makes the row NaN (the CPU contract), also when every logit of the tile is
        // NaN, which fmaxf would drop (the row then looked fully masked). A NaN O and l stay NaN
        // through every later rescale (0·NaN too) and through the final O·(1/l or 0).
        for (int c = lane; c < dv; c += 32) O[i * dv + c] = __int_as_float(0x7fc00000);
        if (lane == 0) l[i] = __int_as_float(0x7fc00000);
        continue;
      }
      const float m_old = m[i];
      const float m_new = fmaxf(m_old, warp_max(sv));
      if (m_new == neg_inf) continue;  // nothing visible to this row yet (uniform in the warp)
      const float pj = sv == neg_inf ? 0.0f : expf(sv - m_new);
      const float alpha = m_old == neg_inf ? 0.0f : expf(m_old - m_new);
      srow[lane] = pj;
      const float row_sum = warp_sum(pj);
      __syncwarp();
      for (int c = lane; c < dv; c += 32) {
        float acc = alpha * O[i * dv + c];
        // a zero weight (masked key, −∞ bias, underflow) adds nothing: never 0·NaN or 0·∞ from
        // its value (the branch is the same in every lane: srow[j] is the row's)
        for (int j = 0; j < rows_k; ++j)
          if (srow[j] != 0.0f) acc += srow[j] * vs[j * dv + c];
        O[i * dv + c] = acc;
      }
      __syncwarp();
      if (lane == 0) {
        m[i] = m_new;
        l[i] = alpha * l[i] + row_sum;
      }
    }
    __syncthreads();
  }

  for (int i = warp; i < rows_q; i += W) {
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;  // fully masked rows are zero
    T* o = out.row(b, h, i0 + i);
    for (int c = lane; c < dv; c += 32) o[c] = from_float<T>(O[i * dv + c] * inv);
  }
}

template <storage_type T>
void softmax_launch(const encoder_desc& enc, const device_bias* bias, device_view<const T> q, device_view<const T> k,
                    device_view<const T> v, device_view<T> out, const softmax_options& options, cudaStream_t stream) {
  constexpr const char* where = "lrpe::cuda::softmax_attention";
  validate_attention_views(enc, q, k, v, out, where);
  validate_device_positions(options.q_positions, q.seq, options.k_positions, k.seq, where);
  softmax_params p{};
  p.bias = bias != nullptr ? bias->for_launch(q.heads, where) : bias_desc{};
  if (q.rows() == 0) return;  // as on the CPU: the scale of an empty call is not resolved

  p.enc = enc;
  p.qp = options.q_positions;
  p.kp = options.k_positions;
  p.causal = options.causal;
  double scale = 0;
  if (options.scale) scale = *options.scale;
  else scale = p.bias.unit_default_scale ? 1.0 : 1.0 / std::sqrt(static_cast<double>(q.dim));
  if (!::lrpe::detail::finite_in<float>(scale))
    ::lrpe::detail::fail<domain_error>(where, "options.scale", "must be finite in float (the kernels' fp32)", scale);
  p.scale = static_cast<float>(scale);  // the kernel computes in fp32 for every storage type

  const auto shared = static_cast<std::size_t>(softmax_shared_bytes(enc.d, enc.feature_dim, v.dim));
  reserve_shared(softmax_kernel<T>, shared, where, "the feature and value widths");
  const dim3 grid(grid_x((q.seq + softmax_br - 1) / softmax_br, where, "q.seq", q.seq), static_cast<unsigned>(q.heads),
                  static_cast<unsigned>(q.batch));
  LRPE_CUDA_CHECK_PENDING("lrpe::cuda::detail::softmax_kernel");
  softmax_kernel<T><<<grid, softmax_threads, shared, stream>>>(p, q, k, v, out);
  LRPE_CUDA_CHECK_LAUNCH("lrpe::cuda::detail::softmax_kernel");
}

}  // namespace detail

/**
 * Softmax attention of batch × heads heads with an LRPE encoder fused into the Q/K loads and
 * an optional additive bias (ALiBi, T5, Toeplitz table).
 *
 * @param q, k, v, out device views: q, out b×h×n_q×(d | d_v); k, v b×h×n_k×(d | d_v).
 * @param encoder      the device encoder (q.dim must be its dim()).
 * @param bias         nullptr or a device bias (see `device_bias` for how heads are chosen).
 * @param options      causal, scale, positions (device arrays or offsets).
 * @param stream       the stream (asynchronous).
 * @throws shape_error, domain_error (non-finite scale), cuda_error (launch).
 */
template <storage_type T>
void softmax_attention(device_view<const T> q, device_view<const T> k, device_view<const T> v, device_view<T> out,
                       const device_encoder& encoder, const device_bias* bias = nullptr,
                       const softmax_options& options = {}, cudaStream_t stream = nullptr) {
  detail::softmax_launch<T>(encoder.desc(), bias, q, k, v, out, options, stream);
}

/// Softmax attention without positional encoding of Q and K (logit = scale·q·k [+ bias]).
template <storage_type T>
void softmax_attention(device_view<const T> q, device_view<const T> k, device_view<const T> v, device_view<T> out,
                       no_encoding, const device_bias* bias = nullptr, const softmax_options& options = {},
                       cudaStream_t stream = nullptr) {
  detail::softmax_launch<T>(detail::identity_desc(q.dim, "lrpe::cuda::softmax_attention"), bias, q, k, v, out, options, stream);
}

}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
