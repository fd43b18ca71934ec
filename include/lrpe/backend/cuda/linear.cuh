// SPDX-License-Identifier: MIT
/**
 * @file linear.cuh
 * Linear attention on the GPU (the CPU contract of docs/attention.md, paper Eq. 39):
 *
 *     q̃_s = M_s φ(q_s),  k̃_t = M_t φ(k_t),  w_st = λ^{pos_s − pos_t}
 *     num_s = Σ_{t visible} w_st (q̃_s·k̃_t) v_t,  den_s = Σ_{t visible} w_st q̃_s·k̃_t
 *     out_s = num_s  or  num_s / max(den_s, eps)
 *
 * φ and the encoder are applied while Q/K tiles are loaded (fused loads). One block of 128
 * threads per (32 value columns, head, batch) walks the whole sequence and keeps the d_f×32
 * state S and z in shared memory (fp32):
 * - non-causal: S = Σ_t k̃_t v_tᵀ, z = Σ_t k̃_t over key chunks, then out = q̃ᵀS [/ q̃·z];
 * - causal, by chunks of 32 queries (the CPU algorithm): fold into S every key with position
 *   ≤ the chunk's first query position (S ← λ^{p′−p} S + Σ_j λ^{p′−t_j} k̃_j v_jᵀ), read the state
 *   (λ^{s−p} q̃ᵀS), then the intra-chunk block A_ij = [t_j ≤ s_i] λ^{s_i−t_j} q̃_i·k̃_j. Every decay
 *   exponent is ≥ 0 (pow in double); positions must be non-decreasing.
 *
 * Deliberately simple: one block per head and column tile walks n sequentially, so the
 * parallelism is batch·heads·⌈d_v/32⌉ blocks and Q/K are re-encoded once per column tile.
 * docs/cuda.md lists the planned version (chunk-parallel scan of chunk states, tensor cores).
 */
#pragma once

#include <lrpe/attention/feature_map.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/backend/cuda/common.cuh>

#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace cuda {

/// Options of `cuda::linear_attention` (the CPU `linear_options` less chunk and states).
struct linear_options {
  bool causal = false;
  normalisation norm = normalisation::none;
  double eps = 1e-6;
  /// λ ∈ (0, 1] (1 = none); λ < 1 requires `causal`.
  double decay = 1.0;
  /// One λ per head (host memory, at most `max_decay_heads`); empty: `decay` for every head.
  std::span<const double> head_decays{};
  device_positions q_positions{};
  device_positions k_positions{};
  /// Check on the device that position arrays are non-decreasing in causal mode (one small
  /// kernel per array, then one stream synchronisation); false skips the check.
  bool validate_positions = true;
};

/// The most per-head decays a launch takes (they travel as kernel parameters).
inline constexpr index_t max_decay_heads = 64;

/// The device form of the CPU feature maps.
inline device_feature_map to_device(feature_maps::identity) noexcept { return {phi_kind::identity, 0.0f}; }
inline device_feature_map to_device(feature_maps::elu_plus_one) noexcept { return {phi_kind::elu_plus_one, 0.0f}; }
inline device_feature_map to_device(feature_maps::relu) noexcept { return {phi_kind::relu, 0.0f}; }
inline device_feature_map to_device(feature_maps::relu_eps m) {
  ::lrpe::detail::require_feature_map<float>(m, "lrpe::cuda::linear_attention");
  return {phi_kind::relu_eps, static_cast<float>(m.eps)};
}
inline device_feature_map to_device(device_feature_map m) noexcept { return m; }

namespace detail {

inline constexpr int linear_threads = 128;
inline constexpr int linear_chunk = 32;  // rows per query / key chunk
inline constexpr int linear_cols = 32;   // value columns per block

struct linear_params {
  encoder_desc enc;
  device_feature_map phi;
  device_positions qp, kp;
  bool causal;
  bool normalise;
  float eps;
  int decay_heads;  // 0: no decay; 1: decay[0] for every head; H: decay[h]
  double decay[max_decay_heads];
};

LRPE_HOST_DEVICE constexpr index_t linear_shared_bytes(index_t d, index_t f) noexcept {
  constexpr index_t C = linear_chunk, DC = linear_cols;
  const index_t fs = f + 1;
  const index_t floats = f * DC + f + 2 * C * fs + C * DC + C * (C + 1) + C * DC + 3 * C +
                         (linear_threads / 32) * encode_scratch_floats(d);
  return 2 * C * static_cast<index_t>(sizeof(position_t)) + floats * static_cast<index_t>(sizeof(float));
}

template <class T>
__global__ void __launch_bounds__(linear_threads)
    linear_kernel(linear_params p, device_view<const T> q, device_view<const T> k, device_view<const T> v,
                  device_view<T> out) {
  constexpr int C = linear_chunk, DC = linear_cols;
  extern __shared__ __align__(16) unsigned char raw[];
  auto* qpos = reinterpret_cast<position_t*>(raw);
  position_t* kpos = qpos + C;
  const int f = p.enc.feature_dim, fs = f + 1;
  auto* S = reinterpret_cast<float*>(kpos + C);  // f × DC
  float* z = S + f * DC;                          // f
  float* qf = z + f;                              // C × fs
  float* kf = qf + C * fs;                        // C × fs
  float* vs = kf + C * fs;                        // C × DC
  float* A = vs + C * DC;                         // C × (C+1)
  float* num = A + C * (C + 1);                   // C × DC
  float* den = num + C * DC;                      // C
  float* wq = den + C;                            // C
  float* wk = wq + C;                             // C
  float* scratch = wk + C;

  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const index_t b = blockIdx.z, h = blockIdx.y;
  const index_t c0 = static_cast<index_t>(blockIdx.x) * DC;
  const int cols = static_cast<int>(v.dim - c0 < DC ? v.dim - c0 : DC);
  const index_t nq = q.seq, nk = k.seq;
  const double lambda = p.decay_heads == 0 ? 1.0 : p.decay[p.decay_heads == 1 ? 0 : h];
  auto decay_factor = [lambda](position_t delta) -> float {  // λ^Δ, Δ ≥ 0
    return lambda == 1.0 || delta == 0 ? 1.0f : static_cast<float>(pow(lambda, static_cast<double>(delta)));
  };

  for (int e = tid; e < f * DC; e += nt) S[e] = 0.0f;
  for (int a = tid; a < f; a += nt) z[a] = 0.0f;
  __syncthreads();

  // out rows [i0, i0 + rows) from num and den (num already holds every term)
  auto write_rows = [&](index_t i0, int rows) {
    for (int e = tid; e < rows * DC; e += nt) {
      const int i = e / DC, c = e % DC;
      if (c >= cols) continue;
      float x = num[e];
      if (p.normalise) x *= 1.0f / fmaxf(den[i], p.eps);
      out.row(b, h, i0 + i)[c0 + c] = from_float<T>(x);
    }
  };

  if (!p.causal) {
    for (index_t j0 = 0; j0 < nk; j0 += C) {
      const int rows = static_cast<int>(nk - j0 < C ? nk - j0 : C);
      load_encoded_tile(p.enc, p.phi, k, p.kp, b, h, j0, rows, C, kf, fs, kpos, scratch);
      load_value_tile(v, b, h, j0, rows, C, c0, DC, vs);
      __syncthreads();
      for (int e = tid; e < f * DC; e += nt) {
        const int a = e / DC, c = e % DC;
        float acc = 0.0f;
        for (int j = 0; j < rows; ++j) acc += kf[j * fs + a] * vs[j * DC + c];
        S[e] += acc;
      }
      for (int a = tid; a < f; a += nt) {
        float acc = 0.0f;
        for (int j = 0; j < rows; ++j) acc += kf[j * fs + a];
        z[a] += acc;
      }
      __syncthreads();
    }
    for (index_t i0 = 0; i0 < nq; i0 += C) {
      const int rows = static_cast<int>(nq - i0 < C ? nq - i0 : C);
      load_encoded_tile(p.enc, p.phi, q, p.qp, b, h, i0, rows, C, qf, fs, qpos, scratch);
      __syncthreads();
      for (int i = tid; i < rows; i += nt) {
        float acc = 0.0f;
        for (int a = 0; a < f; ++a) acc += qf[i * fs + a] * z[a];
        den[i] = acc;
      }
      for (int e = tid; e < rows * DC; e += nt) {
        const int i = e / DC, c = e % DC;
        float acc = 0.0f;
        for (int a = 0; a < f; ++a) acc += qf[i * fs + a] * S[a * DC + c];
        num[e] = acc;
      }
      __syncthreads();
      write_rows(i0, rows);
      __syncthreads();
    }
    return;
  }

  bool has_state = false;
  double carry = 1.0;   // the rounding of the state's rescales, carried (lrpe::detail::carried_decay)
  position_t last = 0;  // position of the last folded key
  index_t folded = 0;   // keys [0, folded) are in the state
  for (index_t i0 = 0; i0 < nq; i0 += C) {
    const int rows_q = static_cast<int>(nq - i0 < C ? nq - i0 : C);
    const position_t lo = p.qp[i0], hi = p.qp[i0 + rows_q - 1];

    // 1. fold every key visible to the whole chunk (position ≤ lo)
    const index_t kq = upper_bound_position(p.kp, folded, nk, lo);
    for (index_t j0 = folded; j0 < kq; j0 += C) {
      const int rows = static_cast<int>(kq - j0 < C ? kq - j0 : C);
      load_encoded_tile(p.enc, p.phi, k, p.kp, b, h, j0, rows, C, kf, fs, kpos, scratch);
      load_value_tile(v, b, h, j0, rows, C, c0, DC, vs);
      __syncthreads();
      const position_t p_new = kpos[rows - 1];
      // S ← λ^{p′−p} S with the earlier rescales' rounding carried (no drift of fl(λ^Δ)^chunks)
      const double exact = lambda == 1.0 ? 1.0 : pow(lambda, static_cast<double>(p_new - last));
      const float rescale = has_state ? ::lrpe::detail::carried_decay<float>(exact, carry) : 1.0f;
      for (int j = tid; j < C; j += nt) wk[j] = j < rows ? decay_factor(p_new - kpos[j]) : 0.0f;
      __syncthreads();
      for (int e = tid; e < f * DC; e += nt) {
        const int a = e / DC, c = e % DC;
        float acc = 0.0f;
        for (int j = 0; j < rows; ++j) acc += kf[j * fs + a] * wk[j] * vs[j * DC + c];
        S[e] = rescale * S[e] + acc;
      }
      for (int a = tid; a < f; a += nt) {
        float acc = 0.0f;
        for (int j = 0; j < rows; ++j) acc += kf[j * fs + a] * wk[j];
        z[a] = rescale * z[a] + acc;
      }
      has_state = true;
      last = p_new;
      __syncthreads();
    }
    folded = kq;

    // 2. the chunk reads the state: num_i = λ^{s_i − p} q̃_iᵀS, den_i = λ^{s_i − p} q̃_i·z
    load_encoded_tile(p.enc, p.phi, q, p.qp, b, h, i0, rows_q, C, qf, fs, qpos, scratch);
    __syncthreads();
    for (int i = tid; i < C; i += nt) wq[i] = (has_state && i < rows_q) ? decay_factor(qpos[i] - last) : 0.0f;
    __syncthreads();
    for (int i = tid; i < rows_q; i += nt) {
      float acc = 0.0f;
      for (int a = 0; a < f; ++a) acc += qf[i * fs + a] * z[a];
      den[i] = wq[i] * acc;
    }
    for (int e = tid; e < rows_q * DC; e += nt) {
      const int i = e / DC, c = e % DC;
      float acc = 0.0f;
      for (int a = 0; a < f; ++a) acc += qf[i * fs + a] * S[a * DC + c];
      num[e] = wq[i] * acc;
    }
    __syncthreads();

    // 3. intra-chunk: keys with lo < position ≤ hi, masked t ≤ s, weighted λ^{s − t}
    const index_t ke = upper_bound_position(p.kp, kq, nk, hi);
    for (index_t j0 = kq; j0 < ke; j0 += C) {
      const int rows_k = static_cast<int>(ke - j0 < C ? ke - j0 : C);
      load_encoded_tile(p.enc, p.phi, k, p.kp, b, h, j0, rows_k, C, kf, fs, kpos, scratch);
      load_value_tile(v, b, h, j0, rows_k, C, c0, DC, vs);
      __syncthreads();
      for (int e = tid; e < C * C; e += nt) {
        const int i = e / C, j = e % C;
        float a_ij = 0.0f;
        if (i < rows_q && j < rows_k && kpos[j] <= qpos[i]) {
          float dot = 0.0f;
          for (int x = 0; x < f; ++x) dot += qf[i * fs + x] * kf[j * fs + x];
          a_ij = dot * decay_factor(qpos[i] - kpos[j]);
        }
        A[i * (C + 1) + j] = a_ij;
      }
      __syncthreads();
      for (int e = tid; e < rows_q * DC; e += nt) {
        const int i = e / DC, c = e % DC;
        float acc = 0.0f;
        // the keys row i sees (a prefix: positions are non-decreasing), not A's masked zeros
        // times their values: 0·Inf = NaN would carry a later value back to row i
        for (int j = 0; j < rows_k && kpos[j] <= qpos[i]; ++j) acc += A[i * (C + 1) + j] * vs[j * DC + c];
        num[e] += acc;
      }
      for (int i = tid; i < rows_q; i += nt) {
        float acc = 0.0f;
        for (int j = 0; j < rows_k; ++j) acc += A[i * (C + 1) + j];
        den[i] += acc;
      }
      __syncthreads();
    }
    write_rows(i0, rows_q);
    __syncthreads();
  }
}

/// Sets *bad = 1 if p[i] < p[i−1] for some 0 < i < n.
__global__ void decreasing_positions_kernel(const position_t* p, index_t n, int* bad) {
  for (index_t i = 1 + static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    if (p[i] < p[i - 1]) atomicExch(bad, 1);
  }
}

/// Two ints of device memory for the position checks: one pair per device and calling thread,
/// allocated on its first use and kept (a check synchronises before it returns, so the calls of
/// one thread never have the pair in flight twice). No cudaMalloc or cudaFree per call: a
/// cudaFree would also wait for every stream of the device.
inline int* position_check_flags() {
  int dev = 0;
  LRPE_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::vector<device_buffer<int>> flags;
  const auto i = static_cast<std::size_t>(dev);
  if (flags.size() <= i) flags.resize(i + 1);
  if (flags[i].data() == nullptr) flags[i] = device_buffer<int>(2);
  return flags[i].data();
}

/// Throws `parameter_error` naming the array that decreases somewhere (causal linear attention
/// needs non-decreasing positions): one kernel per array, one copy and one synchronisation for
/// both.
inline void require_non_decreasing(const device_positions& qp, index_t nq, const device_positions& kp, index_t nk,
                                   cudaStream_t stream, const char* where) {
  const bool check_q = qp.is_array() && nq >= 2, check_k = kp.is_array() && nk >= 2;
  if (!check_q && !check_k) return;
  int* flags = position_check_flags();
  LRPE_CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(int), stream));
  const auto launch = [&](const device_positions& p, index_t n, int* flag) {
    const auto blocks = static_cast<unsigned>(std::min<index_t>((n + 255) / 256, 1024));
    LRPE_CUDA_CHECK_PENDING("lrpe::cuda::detail::decreasing_positions_kernel");
    decreasing_positions_kernel<<<blocks, 256, 0, stream>>>(p.array, n, flag);
    LRPE_CUDA_CHECK_LAUNCH("lrpe::cuda::detail::decreasing_positions_kernel");
  };
  if (check_q) launch(qp, nq, flags);
  if (check_k) launch(kp, nk, flags + 1);
  int bad[2] = {0, 0};
  LRPE_CUDA_CHECK(cudaMemcpyAsync(bad, flags, 2 * sizeof(int), cudaMemcpyDeviceToHost, stream));
  LRPE_CUDA_CHECK(cudaStreamSynchronize(stream));
  constexpr const char* expected = "must be non-decreasing for causal linear attention";
  ::lrpe::detail::require_parameter(bad[0] == 0, where, "options.q_positions", expected, "a decreasing pair");
  ::lrpe::detail::require_parameter(bad[1] == 0, where, "options.k_positions", expected, "a decreasing pair");
}

/// φ's device form: a kind the kernels know, and for relu_eps an ε finite and ≥ 0 in float (what
/// `to_device(feature_maps::relu_eps)` checks in double; a `device_feature_map` built by hand
/// comes here unchecked).
inline void validate_feature_map(const device_feature_map& phi, const char* where) {
  const auto kind = static_cast<int>(phi.kind);
  ::lrpe::detail::require_parameter(kind >= 0 && kind <= static_cast<int>(phi_kind::relu_eps), where, "phi.kind",
                                    "must be a phi_kind", kind);
  if (phi.kind == phi_kind::relu_eps) {
    ::lrpe::detail::require_parameter(std::isfinite(phi.eps) && phi.eps >= 0.0f, where, "phi.eps",
                                      "must be finite and >= 0 in float", phi.eps);
  }
}

template <storage_type T>
void linear_launch(const encoder_desc& enc, device_feature_map phi, device_view<const T> q, device_view<const T> k,
                   device_view<const T> v, device_view<T> out, const linear_options& o, cudaStream_t stream) {
  constexpr const char* where = "lrpe::cuda::linear_attention";
  using ::lrpe::detail::concat;
  using ::lrpe::detail::lazy_concat;
  using ::lrpe::detail::require_shape;
  validate_attention_views(enc, q, k, v, out, where);
  validate_feature_map(phi, where);
  ::lrpe::detail::require_eps<float>(o.eps, where);  // applied in fp32 for every storage type
  ::lrpe::detail::require_decay(o.decay, where);
  linear_params p{};
  if (!o.head_decays.empty()) {
    require_shape(static_cast<index_t>(o.head_decays.size()) == q.heads, where, "options.head_decays.size()",
                  lazy_concat("must equal the number of heads (", q.heads, ")"), o.head_decays.size());
    require_shape(q.heads <= max_decay_heads, where, "options.head_decays.size()",
                  lazy_concat("must be at most ", max_decay_heads), o.head_decays.size());
    for (std::size_t i = 0; i < o.head_decays.size(); ++i) {
      ::lrpe::detail::require_decay(o.head_decays[i], where, "options.head_decays");
      p.decay[i] = o.head_decays[i];
    }
    p.decay_heads = static_cast<int>(q.heads);
  } else if (o.decay != 1.0) {
    p.decay[0] = o.decay;
    p.decay_heads = 1;
  }
  if (!o.causal) {
    constexpr const char* causal_only = "must be 1 unless options.causal (the decay λ^{s−t} is defined for s ≥ t)";
    for (int i = 0; i < p.decay_heads; ++i) {
      if (p.decay[i] == 1.0) continue;
      if (o.head_decays.empty()) ::lrpe::detail::fail<parameter_error>(where, "options.decay", causal_only, o.decay);
      const std::string arg = ::lrpe::detail::concat("options.head_decays[", i, "]");
      ::lrpe::detail::fail<parameter_error>(where, arg.c_str(), causal_only, p.decay[i]);
    }
  }
  validate_device_positions(o.q_positions, q.seq, o.k_positions, k.seq, where);
  if (q.rows() == 0) return;
  if (o.causal && o.validate_positions) require_non_decreasing(o.q_positions, q.seq, o.k_positions, k.seq, stream, where);
  p.enc = enc;
  p.phi = phi;
  p.qp = o.q_positions;
  p.kp = o.k_positions;
  p.causal = o.causal;
  p.normalise = o.norm == normalisation::denominator;
  p.eps = static_cast<float>(o.eps);

  const auto shared = static_cast<std::size_t>(linear_shared_bytes(enc.d, enc.feature_dim));
  reserve_shared(linear_kernel<T>, shared, where, "the feature width");
  const index_t col_tiles = v.dim == 0 ? 0 : (v.dim + linear_cols - 1) / linear_cols;
  if (col_tiles == 0) return;
  const dim3 grid(grid_x(col_tiles, where, "v.dim", v.dim), static_cast<unsigned>(q.heads),
                  static_cast<unsigned>(q.batch));
  LRPE_CUDA_CHECK_PENDING("lrpe::cuda::detail::linear_kernel");
  linear_kernel<T><<<grid, linear_threads, shared, stream>>>(p, q, k, v, out);
  LRPE_CUDA_CHECK_LAUNCH("lrpe::cuda::detail::linear_kernel");
}

}  // namespace detail

/**
 * Linear attention of batch × heads heads with φ and the LRPE encoder fused into the loads.
 *
 * @param q, k, v, out device views: q, out b×h×n_q×(d | d_v); k, v b×h×n_k×(d | d_v).
 * @param encoder      the device encoder (q.dim must be its dim()).
 * @param phi          `feature_maps::elu_plus_one{}`, `relu{}`, `relu_eps{ε}`, `identity{}`
 *                     (user callables have no device form).
 * @param options      causal, normalisation, eps, decay (scalar or per head), positions.
 * @param stream       the stream (asynchronous, except the optional position check).
 * @throws shape_error, parameter_error, domain_error as the CPU `linear_attention`; cuda_error.
 */
template <storage_type T, class Phi>
void linear_attention(device_view<const T> q, device_view<const T> k, device_view<const T> v, device_view<T> out,
                      const device_encoder& encoder, Phi phi, const linear_options& options = {},
                      cudaStream_t stream = nullptr) {
  detail::linear_launch<T>(encoder.desc(), to_device(phi), q, k, v, out, options, stream);
}

/// Linear attention without positional encoding (q̃ = φ(q), k̃ = φ(k)).
template <storage_type T, class Phi>
void linear_attention(device_view<const T> q, device_view<const T> k, device_view<const T> v, device_view<T> out,
                      no_encoding, Phi phi, const linear_options& options = {}, cudaStream_t stream = nullptr) {
  detail::linear_launch<T>(detail::identity_desc(q.dim, "lrpe::cuda::linear_attention"), to_device(phi), q, k, v, out, options, stream);
}

}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
