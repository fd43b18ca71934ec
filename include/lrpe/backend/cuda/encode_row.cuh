// SPDX-License-Identifier: MIT
/**
 * @file encode_row.cuh
 * Device side of the encoders: the flat description of an encoder M_s = Λ⁽ˢ⁾ P that kernels
 * take by value (`encoder_desc`, built by `device_encoder`), the angle s·θ and its cos/sin,
 * the feature maps φ, and `encode_row_warp`, which encodes one row with one warp.
 *
 * Math (docs/math.md, docs/cuda.md): row x at position s becomes the real features of
 * M_s φ(x): M_s x itself for real encoders, [Re(M_s x), Im(M_s x)] (2d values) for complex
 * ones, exactly as `lrpe::encoder::encode_features` on the CPU. Arithmetic is fp32; the exact
 * angle s·θ is split into doubles and reduced modulo 2π in double before a float sincos
 * (`angle_mode::reduced_float`, default) or rotated by double sincos (`angle_mode::full_double`).
 */
#pragma once

#include <lrpe/backend/cuda/types.cuh>

#include <cmath>

namespace lrpe {
inline namespace v0 {
namespace cuda {

/// How P acts on the device.
enum class p_kind : int {
  identity,     ///< y = x
  householder,  ///< y = x − 2 (v·x) v; v in p_real (d)
  gather,       ///< y[j] = x[π(j)] (permutation, odd-even); π in p_index (d)
  dense_real,   ///< y = M x, M row-major d×d in p_real (DCT, user real P)
  dft,          ///< y_k = Σ_n w[(k·n) mod d] x_n, w_m = e^{−2πi m/d}/√d in p_real/p_imag (d)
  dense_complex, ///< y = M x, M row-major d×d, Re in p_real, Im in p_imag (user complex P)
  fft           ///< the unitary DFT for d a power of two ≥ 2: radix-2 FFT with w_m = e^{−2πi m/d}
                ///< (m < d/2) in p_real/p_imag, then × p_scale = 1/√d
};

/// How Λ⁽ˢ⁾ acts on the device.
enum class lambda_kind : int {
  identity,           ///< Λ = I
  rotation,           ///< `half` pairs rotated by s·θ_k; pairing interleaved or split-half
  permutation_power,  ///< y[j] = x[π^s(j)] from cycle tables
  complex_phase       ///< y_j = x_j e^{i s θ_j} for j < half (= number of phases)
};

/// Which trigonometry the device uses for cos/sin(s·θ).
enum class angle_mode : int {
  reduced_float,  ///< exact s·θ reduced mod 2π in double, sincosf of the remainder (default)
  full_double     ///< exact s·θ, double sincos, then rounded to float (slower, closest to the CPU)
};

/**
 * A flat, trivially copyable description of an encoder; every pointer is device memory owned
 * by a `device_encoder`. Kernels take it by value.
 */
struct encoder_desc {
  int d = 0;                ///< input width
  int feature_dim = 0;      ///< d (real) or 2d (complex, [Re, Im])
  bool is_complex = false;  ///< complex P or complex Λ
  p_kind p = p_kind::identity;
  const float* p_real = nullptr;
  const float* p_imag = nullptr;
  const int* p_index = nullptr;
  lambda_kind lambda = lambda_kind::identity;
  int half = 0;             ///< rotation: number of pairs (e/2); complex phase: number of phases
  bool split_half = false;  ///< rotation pairing (k, k + half) instead of (2k, 2k+1)
  float p_scale = 1.0f;     ///< fft: 1/√d
  const double* theta = nullptr;
  const int* cycle_start = nullptr;  ///< permutation powers: per feature, start of its cycle in cycle_elems
  const int* cycle_len = nullptr;    ///< per feature, its cycle length
  const int* cycle_place = nullptr;  ///< per feature, its place in its cycle
  const int* cycle_elems = nullptr;  ///< the cycles j0, π(j0), π²(j0), ... concatenated
  angle_mode angles = angle_mode::reduced_float;
};

/// The feature map φ applied elementwise before the encoder (linear attention).
enum class phi_kind : int { identity, elu_plus_one, relu, relu_eps };

/// φ on the device: a kind and, for relu_eps, its ε.
struct device_feature_map {
  phi_kind kind = phi_kind::identity;
  float eps = 0.0f;
};

namespace detail {

__device__ __forceinline__ float apply_phi(const device_feature_map& phi, float x) {
  switch (phi.kind) {
    case phi_kind::elu_plus_one: return x > 0.0f ? x + 1.0f : expf(x);
    case phi_kind::relu: return x < 0.0f ? 0.0f : x;  // NaN stays NaN
    case phi_kind::relu_eps: return (x < 0.0f ? 0.0f : x) + phi.eps;
    default: return x;
  }
}

/// x − k·2π for k = rint(fl(x/2π)), 2π split in two doubles (two fma), for |x| < 2^64: the
/// exact x mod 2π up to 3e-13. Near 2^64 k can be off by hundreds (|result| up to ~3e3 rather
/// than ≲ π); callers reduce their sum once more.
__host__ __device__ __forceinline__ double reduce_two_pi(double x) {
  constexpr double inv_two_pi = 0.15915494309189533577;
  constexpr double two_pi_hi = 6.283185307179586232;      // nearest double to 2π
  constexpr double two_pi_lo = 2.4492935982947063697e-16;  // 2π − two_pi_hi
  const double k = rint(x * inv_two_pi);
  return fma(-k, two_pi_lo, fma(-k, two_pi_hi, x));
}

/// sin and cos in double or float: CUDA's sincos/sincosf on the device, the standard
/// functions in the host pass (the GNU sincos is not on every host).
template <class F>
__host__ __device__ __forceinline__ void sin_cos(F x, F& s, F& c) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<F, double>) sincos(x, &s, &c);
  else sincosf(x, &s, &c);
#else
  s = std::sin(x);
  c = std::cos(x);
#endif
}

/**
 * cos and sin of the exact angle s·θ, as detail::angle_cos_sin on the CPU (docs/math.md
 * §Angles): s = m₀ + m₁ (m₁ = 0 while |s| ≤ 2^53, else s mod 2^11), each m·θ split by an fma
 * into a + e exactly, so s·θ = a₀ + e₀ + a₁ + e₁ with no rounding.
 * - `full_double`: the rotations by the parts, each by a double sincos (or, under 2⁻²⁰, its
 *   Taylor terms), multiplied in double — the CPU's arithmetic.
 * - `reduced_float`: each part reduced modulo 2π in double, the sum reduced again to r, then
 *   sincosf(float(r)) corrected to first order by r − float(r): about one float ulp over the
 *   CPU. A part of 2^64 or more (|s·θ| that large: θ > 2 at the int64 ends) is past
 *   `reduce_two_pi`'s range and takes the full_double arithmetic instead.
 * Host and device: the tests check it on the host against the CPU path, without a GPU.
 */
__host__ __device__ __forceinline__ void angle_cos_sin(position_t s, double theta, angle_mode mode, float& c, float& sn) {
  // the parts in scalars, not arrays indexed by a run-time count (those went to local memory)
  constexpr position_t limit = position_t{1} << 53;
  const bool one_part = s >= -limit && s <= limit;
  const position_t m_lo = one_part ? 0 : (s & position_t{2047});
  const double m0 = static_cast<double>(s - m_lo), m1 = static_cast<double>(m_lo);
  const double a0 = m0 * theta, e0 = fma(m0, theta, -a0);
  const double a1 = one_part ? 0.0 : m1 * theta, e1 = one_part ? 0.0 : fma(m1, theta, -a1);
  if (mode == angle_mode::reduced_float && fabs(a0) < 0x1p64 && fabs(a1) < 0x1p64) {
    double r = reduce_two_pi(a0) + reduce_two_pi(e0);
    if (!one_part) r += reduce_two_pi(a1) + reduce_two_pi(e1);
    r = reduce_two_pi(r);
    const float rf = static_cast<float>(r);
    const float dr = static_cast<float>(r - static_cast<double>(rf));  // |dr| ≤ ulp(π)/2
    float sf = 0, cf = 0;
    sin_cos(rf, sf, cf);
    c = cf - sf * dr;
    sn = sf + cf * dr;
    return;
  }
  double cr = 1, sr = 0;
  const auto rotate = [&](double cx, double sx) {
    const double c2 = cr * cx - sr * sx;
    sr = sr * cx + cr * sx;
    cr = c2;
  };
  const auto rotate_part = [&](double a, double e) {  // by a, then by the small e
    double sa = 0, ca = 0;
    sin_cos(a, sa, ca);
    rotate(ca, sa);
    if (fabs(e) < 0x1p-20) {
      rotate(1.0 - 0.5 * e * e, e - e * e * e * (1.0 / 6.0));
    } else {
      sin_cos(e, sa, ca);
      rotate(ca, sa);
    }
  };
  rotate_part(a0, e0);
  if (!one_part) rotate_part(a1, e1);
  c = static_cast<float>(cr);
  sn = static_cast<float>(sr);
}

/// s mod len in [0, len) for any sign of s.
__device__ __forceinline__ int reduce_mod(position_t s, int len) {
  const auto r = static_cast<int>(s % static_cast<position_t>(len));
  return r < 0 ? r + len : r;
}

/// Number of angles s·θ_k a row's Λ⁽ˢ⁾ uses: the rotation's pairs or the complex phases; 0 for
/// the identity and permutation powers.
LRPE_HOST_DEVICE constexpr int angle_count(const encoder_desc& e) noexcept {
  return e.lambda == lambda_kind::rotation || e.lambda == lambda_kind::complex_phase ? e.half : 0;
}

/// cos and sin of s·θ_k for k < angle_count(e) into `cs[k]` (.x = cos, .y = sin), by threads
/// `first`, `first + step`, … (a block or a warp); the caller synchronises before it is read.
__device__ __forceinline__ void fill_angle_table(const encoder_desc& e, position_t s, float2* cs, int first, int step) {
  for (int k = first; k < angle_count(e); k += step) angle_cos_sin(s, e.theta[k], e.angles, cs[k].x, cs[k].y);
}

/// cos and sin of s·θ_k: from the table when there is one, else computed here.
__device__ __forceinline__ void angle_at(const encoder_desc& e, position_t s, int k, const float2* cs, float& c,
                                         float& sn) {
  if (cs != nullptr) {
    const float2 t = cs[k];
    c = t.x;
    sn = t.y;
  } else {
    angle_cos_sin(s, e.theta[k], e.angles, c, sn);
  }
}

/// Sum over the 32 lanes of a warp (every lane gets the sum).
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/**
 * Encodes one row with one warp (all 32 lanes must call it).
 *
 * @param e     the encoder.
 * @param s     the row's position.
 * @param load  `load(j) -> float`, the j-th input of the row after φ (j < d).
 * @param xs    warp-private shared scratch of d floats.
 * @param yr    warp-private shared scratch of d floats (Re of P x).
 * @param yi    warp-private shared scratch of d floats (Im of P x; unused for real encoders).
 * @param store `store(i, value)` for each of the feature_dim features, each exactly once.
 * @param cs    nullptr, or cos and sin of s·θ_k already computed for this s (`cs[k]`, k <
 *              `angle_count(e)`, as `fill_angle_table` writes them): rows at one position
 *              (all heads of a sequence row) then share one table instead of each forming the
 *              angles again.
 *
 * Every input is read into `xs` before the first `store`, so `store` may overwrite the
 * input row (in-place encoding) when the row belongs to this warp alone.
 */
template <class Load, class Store>
__device__ __forceinline__ void encode_row_warp(const encoder_desc& e, position_t s, Load load, float* xs, float* yr,
                                                float* yi, Store store, const float2* cs = nullptr) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int d = e.d;
  for (int base = 0; base < d; base += 4 * 32) {  // four loads in flight per lane, then to shared
    float in[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = base + u * 32 + lane;
      in[u] = j < d ? load(j) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = base + u * 32 + lane;
      if (j < d) xs[j] = in[u];
    }
  }
  __syncwarp();

  // ---- y = P x
  switch (e.p) {
    case p_kind::identity:  // Λ reads xs itself
      break;
    case p_kind::householder: {
      float part = 0.0f;
      for (int j = lane; j < d; j += 32) part += e.p_real[j] * xs[j];
      const float two_dot = 2.0f * warp_sum(part);
      for (int j = lane; j < d; j += 32) yr[j] = xs[j] - two_dot * e.p_real[j];
      break;
    }
    case p_kind::gather:
      for (int j = lane; j < d; j += 32) yr[j] = xs[e.p_index[j]];
      break;
    case p_kind::dense_real:
      for (int k = lane; k < d; k += 32) {
        const float* m = e.p_real + static_cast<index_t>(k) * d;
        float acc = 0.0f;
        for (int n = 0; n < d; ++n) acc += m[n] * xs[n];
        yr[k] = acc;
      }
      break;
    case p_kind::dft:
      for (int k = lane; k < d; k += 32) {
        float re = 0.0f, im = 0.0f;
        int m = 0;  // (k·n) mod d, stepped by k: exact index, no large products
        for (int n = 0; n < d; ++n) {
          re += e.p_real[m] * xs[n];
          im += e.p_imag[m] * xs[n];
          m += k;
          if (m >= d) m -= d;
        }
        yr[k] = re;
        yi[k] = im;
      }
      break;
    case p_kind::fft: {
      // iterative radix-2 decimation in time: inputs in bit-reversed order, then log2(d)
      // stages of butterflies (each pair (i, i + half) owned by one lane within a stage)
      const int bits = 31 - __clz(d);
      for (int j = lane; j < d; j += 32) {
        const int r = static_cast<int>(__brev(static_cast<unsigned>(j)) >> (32 - bits));
        yr[r] = xs[j];
        yi[r] = 0.0f;
      }
      __syncwarp();
      for (int len = 2; len <= d; len <<= 1) {
        const int half = len >> 1, stride = d / len;  // w for this stage: e^{−2πi p/len} = w_{p·stride}
        for (int t = lane; t < d / 2; t += 32) {
          const int p = t % half, i = (t / half) * len + p, j = i + half;
          const float wr = e.p_real[p * stride], wi = e.p_imag[p * stride];
          const float tr = wr * yr[j] - wi * yi[j], ti = wr * yi[j] + wi * yr[j];
          const float ar = yr[i], ai = yi[i];
          yr[i] = ar + tr;
          yi[i] = ai + ti;
          yr[j] = ar - tr;
          yi[j] = ai - ti;
        }
        __syncwarp();
      }
      for (int j = lane; j < d; j += 32) {
        yr[j] *= e.p_scale;
        yi[j] *= e.p_scale;
      }
      break;
    }
    case p_kind::dense_complex:
      for (int k = lane; k < d; k += 32) {
        const float* mr = e.p_real + static_cast<index_t>(k) * d;
        const float* mi = e.p_imag + static_cast<index_t>(k) * d;
        float re = 0.0f, im = 0.0f;
        for (int n = 0; n < d; ++n) {
          re += mr[n] * xs[n];
          im += mi[n] * xs[n];
        }
        yr[k] = re;
        yi[k] = im;
      }
      break;
  }
  const bool p_complex = e.p == p_kind::dft || e.p == p_kind::fft || e.p == p_kind::dense_complex;
  if (e.is_complex && !p_complex) {
    for (int j = lane; j < d; j += 32) yi[j] = 0.0f;  // real P, complex Λ: lift to complex
  }
  __syncwarp();

  // ---- out = Λ⁽ˢ⁾ y (real view [Re, Im] when complex)
  const float* pr = e.p == p_kind::identity ? xs : yr;  // Re(P x)
  const bool cplx = e.is_complex;
  switch (e.lambda) {
    case lambda_kind::identity:
      for (int j = lane; j < d; j += 32) {
        store(j, pr[j]);
        if (cplx) store(d + j, yi[j]);
      }
      break;
    case lambda_kind::rotation: {
      const int half = e.half;
      for (int k = lane; k < half; k += 32) {
        float c = 0, sn = 0;
        angle_at(e, s, k, cs, c, sn);
        const int i = e.split_half ? k : 2 * k;
        const int j = e.split_half ? k + half : 2 * k + 1;
        store(i, pr[i] * c - pr[j] * sn);
        store(j, pr[j] * c + pr[i] * sn);
        if (cplx) {
          store(d + i, yi[i] * c - yi[j] * sn);
          store(d + j, yi[j] * c + yi[i] * sn);
        }
      }
      for (int j = 2 * half + lane; j < d; j += 32) {
        store(j, pr[j]);
        if (cplx) store(d + j, yi[j]);
      }
      break;
    }
    case lambda_kind::permutation_power:
      for (int j = lane; j < d; j += 32) {
        const int len = e.cycle_len[j];
        int p = e.cycle_place[j] + reduce_mod(s, len);
        if (p >= len) p -= len;
        const int src = e.cycle_elems[e.cycle_start[j] + p];
        store(j, pr[src]);
        if (cplx) store(d + j, yi[src]);
      }
      break;
    case lambda_kind::complex_phase:
      for (int j = lane; j < d; j += 32) {
        if (j < e.half) {
          float c = 0, sn = 0;
          angle_at(e, s, j, cs, c, sn);
          store(j, pr[j] * c - yi[j] * sn);
          store(d + j, pr[j] * sn + yi[j] * c);
        } else {
          store(j, pr[j]);
          store(d + j, yi[j]);
        }
      }
      break;
  }
  __syncwarp();  // the scratch may be reused for the next row
}

/// Floats of warp-private scratch `encode_row_warp` needs for width d.
LRPE_HOST_DEVICE constexpr index_t encode_scratch_floats(index_t d) noexcept { return 3 * d; }

}  // namespace detail
}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
