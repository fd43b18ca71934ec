// SPDX-License-Identifier: MIT
/**
 * @file encode_dft.hpp
 * LRPE Type 8 (unitary DFT P, complex phase Λ) with SIMD across rows.
 *
 * "Vertical" SIMD: lane r of every vector belongs to row r of a group of `lanes` rows, so a
 * radix-2 FFT written as if on scalars runs on all rows at once with no shuffles. Per group:
 * the real rows are packed as M = d/2 complex values z_n = x_2n + i·x_2n+1 (16×16 in-register
 * transposes on AVX-512 float, 8×8 / 4×4 on AVX and AVX2, gathers elsewhere), scaled by 1/√d and placed in bit-reversed
 * order; log₂M decimation-in-time stages run on vectors (twiddles e^{−2πi t/d} from exactly
 * reduced double angles, broadcast); the d bins follow from the M-point result by the standard
 * real-input split (X_k = E_k + W_d^k·O_k, X_{d−k} = conj X_k) — half the butterflies of a
 * d-point complex FFT; the bins are transposed to a row-major scratch block, and the phase
 * e^{i s θ_k} of each row's position (the driver's per-position table) is applied row-wise
 * while writing [Re, Im] to the output. Widths that are not a power of two, or above
 * `max_dim`, take the reference path (docs/backends.md).
 *
 * "Horizontal" at d ∈ {32, 64, 128} (AVX-512 float, phase on every bin): `row_fft` keeps one
 * row's d/2 complex values in d/16 registers and needs no transposes or scratch. At d = 64 and
 * 128 on AVX2 float, `row_fft8<R>` does the same with a 4-step FFT in 2R 8-lane registers. Both
 * measured faster than the vertical path (bench/results/tuning.md#dft-row-fft).
 */
#pragma once

#include <lrpe/backend/simd/detail/kernels.hpp>
#include <lrpe/p/dft.hpp>

#include <climits>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

template <class Arch, class T>
class dft_phase_kernel {
  using b = xsimd::batch<T, Arch>;
  using ib = xsimd::batch<index_of_t<T>, Arch>;

 public:
  static constexpr index_t lanes = static_cast<index_t>(b::size);
  /// Largest d with a SIMD path.
  static constexpr index_t max_dim = 256;
  /// Scalars of caller-provided scratch `apply_rows` needs for width d (the group's bins and
  /// its row-major block: 4·d·lanes; 64 KiB at d = 256). The driver takes it from the
  /// thread's `simd_workspace`, so the stack stays small at any d.
  static constexpr index_t scratch_size(index_t d) noexcept { return 4 * d * lanes; }

  /// True when this kernel handles width d (a power of two in [2, max_dim]).
  static constexpr bool supports(index_t d) noexcept { return d >= 2 && d <= max_dim && (d & (d - 1)) == 0; }

  dft_phase_kernel(index_t d, const lambda::complex_phase<T>& l) : d_(d), phase_(l) {
    // Bit reversal of the M = d/2-point FFT (real input packed as M complex values).
    const index_t M = d_ / 2;
    int log2m = 0;
    while ((index_t{1} << log2m) < M) ++log2m;
    rev_.resize(static_cast<std::size_t>(M));
    for (index_t n = 0; n < M; ++n) {
      index_t r = 0;
      for (int bit = 0; bit < log2m; ++bit) r |= ((n >> bit) & 1) << (log2m - 1 - bit);
      rev_[static_cast<std::size_t>(n)] = r;
    }
    tw_re_.resize(static_cast<std::size_t>(d_ / 2));
    tw_im_.resize(static_cast<std::size_t>(d_ / 2));
    for (index_t t = 0; t < d_ / 2; ++t) {
      const double a = -2.0 * std::numbers::pi * static_cast<double>(t) / static_cast<double>(d_);
      tw_re_[static_cast<std::size_t>(t)] = static_cast<T>(std::cos(a));
      tw_im_[static_cast<std::size_t>(t)] = static_cast<T>(std::sin(a));
    }
    scale_ = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d_)));
#if defined(__AVX512F__)
    if constexpr (row_fft_arch) {
      if (d_ == 32 || d_ == 64 || d_ == 128) build_row_fft();
    }
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if constexpr (row_fft_avx2_arch) {
      if (d_ == 64 || d_ == 128) build_row_fft8();
    }
#endif
  }

  const l_kernel<Arch, lambda::complex_phase<T>>& phase() const noexcept { return phase_; }

  /// True when `lanes` rows `stride` apart can be addressed by one index vector.
  static bool stride_ok(index_t stride) noexcept {
    return stride >= 0 && static_cast<long double>(stride) * static_cast<long double>(lanes) <
                              static_cast<long double>(std::numeric_limits<index_of_t<T>>::max());
  }

  /**
   * Encodes m ≤ lanes rows: row r of x at x + r·x_stride, its table row at table + r·table_width,
   * output row at y + r·y_stride (2d features).
   *
   * Real input: one M = d/2-point complex FFT of z_n = x_2n + i·x_2n+1 (vectorised over rows),
   * then X_k = E_k + W_d^k·O_k with E_k = (Z_k + conj Z_{M−k})/2, O_k = −i(Z_k − conj Z_{M−k})/2,
   * and X_{d−k} = conj X_k: half the butterflies of a d-point transform. Stages: the rows into
   * bit-reversed bins, the FFT, the real split, the bins back to rows, the phase.
   */
  template <bool Stream = false>
  void apply_rows(const T* x, index_t x_stride, index_t m, const T* table, index_t table_width,
                  T* y, index_t y_stride, T* scratch) const noexcept {
    if (row_fft_applies<Stream>(x, x_stride, m, table, table_width, y, y_stride)) return;
    T* re = scratch;  // bins, slot-major: slot k at re + k·lanes (64-byte aligned: workspace)
    T* im = scratch + d_ * lanes;
    T* rows = scratch + 2 * d_ * lanes;
    load_bins(x, x_stride, m, re, im);
    fft_bins(re, im);
    split_real_bins(re, im);
    bins_to_rows(re, im, m, rows);
    for (index_t r = 0; r < m; ++r)
      phase_row<Stream>(table + r * table_width, rows + r * 2 * d_, y + r * y_stride);
  }

 private:
  /// The per-row FFTs in registers, where the arch and d have one (AVX-512 float at d ∈ {32,
  /// 64, 128}, AVX2 at d ∈ {64, 128}): true when they encoded the rows.
  template <bool Stream>
  LRPE_ALWAYS_INLINE bool row_fft_applies(const T* x, index_t x_stride, index_t m, const T* table, index_t table_width,
                                          T* y, index_t y_stride) const noexcept {
#if defined(__AVX512F__)
    if constexpr (row_fft_arch) {
      if (phase_.e_ == d_) {
        if (d_ == 32) return row_fft_rows<1, Stream>(x, x_stride, m, table, table_width, y, y_stride), true;
        if (d_ == 64) return row_fft_rows<2, Stream>(x, x_stride, m, table, table_width, y, y_stride), true;
        if (d_ == 128) return row_fft_rows<4, Stream>(x, x_stride, m, table, table_width, y, y_stride), true;
      }
    }
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if constexpr (row_fft_avx2_arch) {
      if (phase_.e_ == d_ && d_ == 64) {
        for (index_t r = 0; r < m; ++r) row_fft8<4, Stream>(x + r * x_stride, table + r * table_width, y + r * y_stride);
        return true;
      }
      if (phase_.e_ == d_ && d_ == 128) {
        for (index_t r = 0; r < m; ++r) row_fft8<8, Stream>(x + r * x_stride, table + r * table_width, y + r * y_stride);
        return true;
      }
    }
#endif
    (void)x, (void)x_stride, (void)m, (void)table, (void)table_width, (void)y, (void)y_stride;
    return false;
  }

  /// z_n = (x_2n + i·x_2n+1)/√d of the m rows (lanes as rows; idle lanes re-read row 0) into
  /// the bins (re, im)[revM(n)], bit-reversed for the in-place FFT.
  LRPE_ALWAYS_INLINE void load_bins(const T* x, index_t x_stride, index_t m, T* re, T* im) const noexcept {
    const b sc(scale_);
    if (fast_transpose()) {
      // lanes×lanes tiles of the rows, transposed in registers.
      b v[lanes];
      for (index_t c0 = 0; c0 < d_; c0 += lanes) {
        for (index_t r = 0; r < lanes; ++r) v[r] = b::load_unaligned(x + (r < m ? r : 0) * x_stride + c0);
        compat::transpose_square(v);
        for (index_t j = 0; j < lanes; j += 2) {
          const index_t slot = rev_[static_cast<std::size_t>((c0 + j) / 2)] * lanes;
          (v[j] * sc).store_aligned(re + slot);
          (v[j + 1] * sc).store_aligned(im + slot);
        }
      }
    } else {
      alignas(64) index_of_t<T> off[lanes];
      for (index_t r = 0; r < lanes; ++r) off[r] = static_cast<index_of_t<T>>((r < m ? r : 0) * x_stride);
      const ib xoff = ib::load_aligned(off);
      for (index_t n = 0; n < d_ / 2; ++n) {
        const index_t slot = rev_[static_cast<std::size_t>(n)] * lanes;
        (compat::gather(x + 2 * n, xoff) * sc).store_aligned(re + slot);
        (compat::gather(x + 2 * n + 1, xoff) * sc).store_aligned(im + slot);
      }
    }
  }

  /// W_d^t as two broadcasts.
  LRPE_ALWAYS_INLINE void twiddle(index_t t, b& wr, b& wi) const noexcept {
    wr = b(tw_re_[static_cast<std::size_t>(t)]);
    wi = b(tw_im_[static_cast<std::size_t>(t)]);
  }
  /// (ar, ai) ± (br, bi)·(wr, wi), in place.
  static LRPE_ALWAYS_INLINE void butterfly(b& ar, b& ai, b& br, b& bi, const b& wr, const b& wi) noexcept {
    const b tr = compat::fms(br, wr, bi * wi);
    const b ti = compat::fma(br, wi, bi * wr);
    br = ar - tr;
    bi = ai - ti;
    ar = ar + tr;
    ai = ai + ti;
  }

  /// The M-point FFT of the bins (decimation in time, bit-reversed input): two radix-2 stages
  /// per pass over the slots where two remain (4 slots loaded, 4 butterflies, 4 stored: the
  /// passes over L1 drop from log2 M to ⌈log2 M / 2⌉), a single stage for an odd last one.
  LRPE_ALWAYS_INLINE void fft_bins(T* re, T* im) const noexcept {
    const index_t d = d_, M = d_ / 2;
    for (index_t h = 1; h < M;) {
      if (2 * h < M) {  // stages h and 2h: slots a, a + h, a + 2h, a + 3h
        const index_t s1 = d / (2 * h), s2 = d / (4 * h);  // W_{2h}^j = W_d^{j·s1}, W_{4h}^j = W_d^{j·s2}
        for (index_t j = 0; j < h; ++j) {
          b w1r, w1i, w2r, w2i, w3r, w3i;
          twiddle(j * s1, w1r, w1i);
          twiddle(j * s2, w2r, w2i);
          twiddle((j + h) * s2, w3r, w3i);
          for (index_t start = 0; start < M; start += 4 * h) {
            T* p0r = re + (start + j) * lanes;
            T* p0i = im + (start + j) * lanes;
            const index_t o1 = h * lanes, o2 = 2 * h * lanes, o3 = 3 * h * lanes;
            b ar = b::load_aligned(p0r), ai = b::load_aligned(p0i);
            b br = b::load_aligned(p0r + o1), bi = b::load_aligned(p0i + o1);
            b cr = b::load_aligned(p0r + o2), ci = b::load_aligned(p0i + o2);
            b er = b::load_aligned(p0r + o3), ei = b::load_aligned(p0i + o3);
            butterfly(ar, ai, br, bi, w1r, w1i);
            butterfly(cr, ci, er, ei, w1r, w1i);
            butterfly(ar, ai, cr, ci, w2r, w2i);
            butterfly(br, bi, er, ei, w3r, w3i);
            ar.store_aligned(p0r);
            ai.store_aligned(p0i);
            br.store_aligned(p0r + o1);
            bi.store_aligned(p0i + o1);
            cr.store_aligned(p0r + o2);
            ci.store_aligned(p0i + o2);
            er.store_aligned(p0r + o3);
            ei.store_aligned(p0i + o3);
          }
        }
        h *= 4;
      } else {  // one radix-2 stage
        const index_t step = d / (2 * h);
        for (index_t j = 0; j < h; ++j) {
          b wr, wi;
          twiddle(j * step, wr, wi);
          for (index_t start = 0; start < M; start += 2 * h) {
            T* r0 = re + (start + j) * lanes;
            T* i0 = im + (start + j) * lanes;
            b ar = b::load_aligned(r0), ai = b::load_aligned(i0);
            b br = b::load_aligned(r0 + h * lanes), bi = b::load_aligned(i0 + h * lanes);
            butterfly(ar, ai, br, bi, wr, wi);
            ar.store_aligned(r0);
            ai.store_aligned(i0);
            br.store_aligned(r0 + h * lanes);
            bi.store_aligned(i0 + h * lanes);
          }
        }
        h *= 2;
      }
    }
  }

  /// X_k from A = Z_k, B = Z_{M−k}: E = ((A_r + B_r), (A_i − B_i))/2, O = ((A_i + B_i), −(A_r − B_r))/2.
  LRPE_ALWAYS_INLINE void real_bin(const b& ar, const b& ai, const b& br, const b& bi, index_t k, b& xr_out,
                                   b& xi_out) const noexcept {
    const b half(T(0.5));
    const b er = half * (ar + br), ei = half * (ai - bi);
    const b orr = half * (ai + bi), oi = half * (br - ar);
    const b wr(tw_re_[static_cast<std::size_t>(k)]), wi(tw_im_[static_cast<std::size_t>(k)]);
    xr_out = er + compat::fms(wr, orr, wi * oi);
    xi_out = ei + compat::fma(wr, oi, wi * orr);
  }

  /// The d bins of the real input from the M = d/2 complex ones, in place: X_0 and X_M real,
  /// X_k and X_{M−k} together, X_{d−k} = conj X_k.
  LRPE_ALWAYS_INLINE void split_real_bins(T* re, T* im) const noexcept {
    const index_t d = d_, M = d_ / 2;
    const b zero(T(0));
    {  // k = 0 and k = M: real bins Re Z_0 ± Im Z_0
      const b zr = b::load_aligned(re), zi = b::load_aligned(im);
      (zr + zi).store_aligned(re);
      zero.store_aligned(im);
      (zr - zi).store_aligned(re + M * lanes);
      zero.store_aligned(im + M * lanes);
    }
    for (index_t k = 1; k <= M / 2 && M >= 2; ++k) {
      const index_t k2 = M - k;  // its partner (k2 == k at k = M/2)
      const b ar = b::load_aligned(re + k * lanes), ai = b::load_aligned(im + k * lanes);
      const b br = b::load_aligned(re + k2 * lanes), bi = b::load_aligned(im + k2 * lanes);
      b xr, xi, yr, yi;
      real_bin(ar, ai, br, bi, k, xr, xi);
      real_bin(br, bi, ar, ai, k2, yr, yi);
      xr.store_aligned(re + k * lanes);
      xi.store_aligned(im + k * lanes);
      xr.store_aligned(re + (d - k) * lanes);  // X_{d−k} = conj X_k
      (-xi).store_aligned(im + (d - k) * lanes);
      if (k2 != k) {
        yr.store_aligned(re + k2 * lanes);
        yi.store_aligned(im + k2 * lanes);
        yr.store_aligned(re + (d - k2) * lanes);
        (-yi).store_aligned(im + (d - k2) * lanes);
      }
    }
  }

  /// Bins to a row-major block (row r: re[d], im[d]): in-register transposes where the arch has
  /// them, else a scalar transpose through L1 (faster than vector scatters, which some cores
  /// microcode: bench/results/tuning.md#dft-scalar-transpose).
  LRPE_ALWAYS_INLINE void bins_to_rows(const T* re, const T* im, index_t m, T* rows) const noexcept {
    const index_t d = d_;
    if (fast_transpose()) {
      b v[lanes];
      for (const T* src : {re, im}) {
        const index_t part = src == re ? 0 : d;  // the re or the im half of a row
        for (index_t k0 = 0; k0 < d; k0 += lanes) {
          for (index_t j = 0; j < lanes; ++j) v[j] = b::load_aligned(src + (k0 + j) * lanes);
          compat::transpose_square(v);
          // A compile-time trip count for a whole group keeps v[] in registers.
          if (m == lanes) {
            for (index_t r = 0; r < lanes; ++r) v[r].store_unaligned(rows + r * 2 * d + part + k0);
          } else {
            for (index_t r = 0; r < m; ++r) v[r].store_unaligned(rows + r * 2 * d + part + k0);
          }
        }
      }
    } else {
      for (index_t r = 0; r < m; ++r) {
        T* out_r = rows + r * 2 * d;
        for (index_t k = 0; k < d; ++k) {
          out_r[k] = re[k * lanes + r];
          out_r[d + k] = im[k * lanes + r];
        }
      }
    }
  }

#if defined(__AVX512F__)
  static constexpr bool row_fft_arch = std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, Arch>;
  /// Twiddle and lane-index vectors of `row_fft` (built once, for d = 32·NV, NV ∈ {1, 2, 4}).
  struct alignas(64) horizontal {  // every 16-lane row on its own cache line
    float cross_r[3][16], cross_i[3][16];  // stages across vectors: W_2S^(16j + lane), per (S, j)
    float t8r[16], t8i[16], t4r[16], t4i[16], t2r[16], t2i[16];  // stages inside a vector
    float wr[4][16], wi[4][16];           // W_d^k, k = 16q + lane < d/2 (the real split)
    std::int32_t even[16], odd[16];       // deinterleave of z_n = x_2n + i·x_2n+1
    std::int32_t a[4][16], bsrc[4][16];   // flat positions of Z_k and Z_{(M − k) mod M}
    std::int32_t up[4][16];               // flat position of X_{M − i} for the bin M + i
  };

  void build_row_fft() {
    const index_t M = d_ / 2, nv = M / 16;
    int bits = 0;
    while ((index_t{1} << bits) < M) ++bits;
    const auto rev = [&](index_t k) {
      index_t r = 0;
      for (int bit = 0; bit < bits; ++bit) r |= ((k >> bit) & 1) << (bits - 1 - bit);
      return static_cast<std::int32_t>(r);
    };
    const auto w = [&](index_t t, float& re, float& im) {
      re = tw_re_[static_cast<std::size_t>(t)];
      im = tw_im_[static_cast<std::size_t>(t)];
    };
    int c = 0;  // cross stages: span S = 16t for t = nv/2, …, 1; pairs (j, j + t), j < t
    for (index_t t = nv / 2; t >= 1; t /= 2)
      for (index_t j = 0; j < t; ++j, ++c)
        for (int l = 0; l < 16; ++l) w((16 * j + l) * (d_ / (2 * 16 * t)), h_.cross_r[c][l], h_.cross_i[c][l]);
    for (int l = 0; l < 16; ++l) {
      const auto in_vector = [&](int span, float* re, float* im) {  // W_{2·span}^(l mod span) on the upper lanes
        if (l & span) w((l & (span - 1)) * (d_ / (2 * span)), re[l], im[l]);
        else re[l] = 1, im[l] = 0;
      };
      in_vector(8, h_.t8r, h_.t8i);
      in_vector(4, h_.t4r, h_.t4i);
      in_vector(2, h_.t2r, h_.t2i);
      h_.even[l] = 2 * l;
      h_.odd[l] = 2 * l + 1;
      for (index_t q = 0; q < nv; ++q) {
        const index_t k = 16 * q + l;
        w(k, h_.wr[q][l], h_.wi[q][l]);
        h_.a[q][l] = rev(k);
        h_.bsrc[q][l] = rev((M - k) & (M - 1));
        h_.up[q][l] = static_cast<std::int32_t>(k == 0 ? 0 : M - k);  // lane 0 of q = 0: X_M (set apart)
      }
    }
  }

  // Unaligned loads: correct even where the kernel's storage is not over-aligned (same speed
  // when it is).
  static __m512i ld(const std::int32_t* p) noexcept { return _mm512_loadu_si512(p); }
  /// (r, i) ← (r, i)·(wr, wi).
  static void cmul(__m512& r, __m512& i, const float* wr, const float* wi) noexcept {
    const __m512 a = _mm512_loadu_ps(wr), c = _mm512_loadu_ps(wi);
    const __m512 nr = _mm512_fmsub_ps(r, a, _mm512_mul_ps(i, c));
    i = _mm512_fmadd_ps(r, c, _mm512_mul_ps(i, a));
    r = nr;
  }
  /// One decimation-in-frequency stage inside each vector: lanes l and l ^ s (bit s of l set:
  /// the lower input minus the upper, to be multiplied by the stage's twiddle; clear: the sum).
  template <int Shuffle>
  static void dif_in_vector(__m512& r, __m512& i, __mmask16 upper) noexcept {
    const auto swap = [](__m512 v) {
      if constexpr (Shuffle == 8) return _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2));
      else if constexpr (Shuffle == 4) return _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1));
      else if constexpr (Shuffle == 2) return _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2));
      else return _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
    };
    const __m512 tr = swap(r), ti = swap(i);
    r = _mm512_mask_sub_ps(_mm512_add_ps(r, tr), upper, tr, r);
    i = _mm512_mask_sub_ps(_mm512_add_ps(i, ti), upper, ti, i);
  }
  /// Lane l = v[idx[l]] for a flat index into NV registers of 16 lanes.
  template <int NV>
  static __m512 pick(const __m512* v, __m512i idx) noexcept {
    if constexpr (NV == 1) {
      return _mm512_permutexvar_ps(idx, v[0]);
    } else if constexpr (NV == 2) {
      return _mm512_permutex2var_ps(v[0], idx, v[1]);
    } else {
      const __m512 lo = _mm512_permutex2var_ps(v[0], idx, v[1]), hi = _mm512_permutex2var_ps(v[2], idx, v[3]);
      return _mm512_mask_mov_ps(lo, _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(32)), hi);
    }
  }

  /**
   * Type 8 at d = 32·NV (NV ∈ {1, 2, 4}) for one row, horizontally (AVX-512 float): the row's
   * M = d/2 complex values z_n = x_2n + i·x_2n+1 stay in 2·NV registers (real and imaginary
   * parts, 16 lanes each) through a radix-2 decimation-in-frequency FFT (stages of span ≥ 16
   * across vectors, the last four inside each vector by lane swaps and masked subtracts); the
   * real-input split reads Z_k and Z_{M−k} straight out of the bit-reversed result by lane
   * permutes, the conjugate-symmetric bins M … d − 1 likewise; then the phase and the stores.
   * No transposes and no scratch, and each row's stores go out as soon as it is done.
   */
  template <int NV, bool Stream>
  void row_fft_rows(const T* x, index_t x_stride, index_t m, const T* table, index_t table_width, T* y,
                    index_t y_stride) const noexcept {
    for (index_t r = 0; r < m; ++r) row_fft<NV, Stream>(x + r * x_stride, table + r * table_width, y + r * y_stride);
  }
  /// One row of `row_fft_rows`. One function (~80 lines) on purpose, as `row_fft8`: every stage
  /// works on the same 2·NV registers of the row.
  template <int NV, bool Stream>
  LRPE_ALWAYS_INLINE void row_fft(const T* x, const T* table, T* y) const noexcept {
    constexpr index_t M = 16 * NV, d = 2 * M;
    const horizontal& h = h_;
    const __m512 sc = _mm512_set1_ps(scale_);
    __m512 zr[NV], zi[NV];
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) {
      const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x + 32 * q), sc);
      const __m512 c = _mm512_mul_ps(_mm512_loadu_ps(x + 32 * q + 16), sc);
      zr[q] = _mm512_permutex2var_ps(a, ld(h.even), c);
      zi[q] = _mm512_permutex2var_ps(a, ld(h.odd), c);
    }
    int stage = 0;
#pragma GCC unroll 2
    for (int t = NV / 2; t >= 1; t /= 2) {  // spans 16t: vectors j and j + t of each block of 2t
#pragma GCC unroll 2
      for (int j = 0; j < t; ++j, ++stage) {
#pragma GCC unroll 2
        for (int blk = 0; blk < NV; blk += 2 * t) {
          __m512& ar = zr[blk + j];
          __m512& ai = zi[blk + j];
          __m512& br = zr[blk + j + t];
          __m512& bi = zi[blk + j + t];
          const __m512 sr = _mm512_add_ps(ar, br), si = _mm512_add_ps(ai, bi);
          br = _mm512_sub_ps(ar, br);
          bi = _mm512_sub_ps(ai, bi);
          ar = sr;
          ai = si;
          cmul(br, bi, h.cross_r[stage], h.cross_i[stage]);
        }
      }
    }
    // Stage by stage over the NV vectors (independent chains side by side for the scheduler).
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) dif_in_vector<8>(zr[q], zi[q], 0xFF00);
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) cmul(zr[q], zi[q], h.t8r, h.t8i);
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) dif_in_vector<4>(zr[q], zi[q], 0xF0F0);
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) cmul(zr[q], zi[q], h.t4r, h.t4i);
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) dif_in_vector<2>(zr[q], zi[q], 0xCCCC);
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) cmul(zr[q], zi[q], h.t2r, h.t2i);
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) dif_in_vector<1>(zr[q], zi[q], 0xAAAA);  // W_2^0 = 1
    // Flat position p holds Z_rev(p). Split, k = 16q + lane: A = Z_k, B = Z_{M−k}.
    const __m512 half = _mm512_set1_ps(0.5f);
    __m512 xr[NV], xi[NV], xm;
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) {
      const __m512i ai = ld(h.a[q]), bi = ld(h.bsrc[q]);
      const __m512 ar = pick<NV>(zr, ai), aim = pick<NV>(zi, ai);
      const __m512 br = pick<NV>(zr, bi), bim = pick<NV>(zi, bi);
      const __m512 er = _mm512_mul_ps(half, _mm512_add_ps(ar, br)), ei = _mm512_mul_ps(half, _mm512_sub_ps(aim, bim));
      __m512 orr = _mm512_mul_ps(half, _mm512_add_ps(aim, bim)), oi = _mm512_mul_ps(half, _mm512_sub_ps(br, ar));
      if (q == 0) xm = _mm512_sub_ps(er, orr);  // lane 0: X_M = Re Z_0 − Im Z_0
      cmul(orr, oi, h.wr[q], h.wi[q]);
      xr[q] = _mm512_add_ps(er, orr);
      xi[q] = _mm512_add_ps(ei, oi);
    }
    const T* c = table;
    const T* s = table + d;
    const auto out = [&](int q, __m512 re, __m512 im) LRPE_ALWAYS_INLINE_LAMBDA {  // bins 16q … 16q + 15
      const __m512 cv = _mm512_loadu_ps(c + 16 * q), sv = _mm512_loadu_ps(s + 16 * q);
      store<Stream>(b(_mm512_fmsub_ps(re, cv, _mm512_mul_ps(im, sv))), y + 16 * q);
      store<Stream>(b(_mm512_fmadd_ps(re, sv, _mm512_mul_ps(im, cv))), y + d + 16 * q);
    };
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) out(q, xr[q], xi[q]);
    // Bins M + i: X_M at i = 0, then conj X_{M−i}.
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) {
      const __m512i ui = ld(h.up[q]);
      __m512 re = pick<NV>(xr, ui), im = _mm512_sub_ps(zero, pick<NV>(xi, ui));
      if (q == 0) {
        re = _mm512_mask_mov_ps(re, 0x1, xm);
        im = _mm512_mask_mov_ps(im, 0x1, zero);
      }
      out(NV + q, re, im);
    }
  }
  horizontal h_{};
#endif

#if defined(__AVX2__) && defined(__FMA__)
  static constexpr bool row_fft_avx2_arch = std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx2, Arch>;
  /// Constants of `row_fft8<R>` (AVX2 float, d = 16·R, R ∈ {4, 8}), each 8-lane row 32-byte aligned.
  struct alignas(32) horizontal8 {
    float t4r[8], t4i[8];      // the in-vector DIT stage of span 4: W_8^(l mod 4) on lanes 4–7
    float cr[8][8], ci[8][8];  // between the steps: W_M^(c·k1)/(2√d), register c, lane k1
    float wr[8][8], wi[8][8];  // the real split: W_d^k, k = 8q + lane
  };

  void build_row_fft8() {
    const index_t d = d_, R = d / 16;
    // e^{−2πi t/d} with t reduced exactly before the (double) angle.
    const auto w = [d](index_t t, double scale, float& re, float& im) {
      const double a = -2.0 * std::numbers::pi * static_cast<double>(t % d) / static_cast<double>(d);
      re = static_cast<float>(scale * std::cos(a));
      im = static_cast<float>(scale * std::sin(a));
    };
    // 1/√d, and the 1/2 of the real split's E and O (everything after is linear in Z).
    const double sc = 0.5 / std::sqrt(static_cast<double>(d));
    for (index_t l = 0; l < 8; ++l) {
      if (l & 4) w((l & 3) * (d / 8), 1.0, h8_.t4r[l], h8_.t4i[l]);  // W_8^j = W_d^(j·d/8)
      else h8_.t4r[l] = 1, h8_.t4i[l] = 0;
      for (index_t c = 0; c < R; ++c) {
        w(2 * c * l, sc, h8_.cr[c][l], h8_.ci[c][l]);  // W_M^(c·l) = W_d^(2 c l)
        w(8 * c + l, 1.0, h8_.wr[c][l], h8_.wi[c][l]);
      }
    }
  }

  /// (r, i) ← (r, i)·(wr, wi).
  static LRPE_ALWAYS_INLINE void cmul8(__m256& r, __m256& i, const float* wr, const float* wi) noexcept {
    const __m256 a = _mm256_load_ps(wr), c = _mm256_load_ps(wi);
    const __m256 nr = _mm256_fmsub_ps(r, a, _mm256_mul_ps(i, c));
    i = _mm256_fmadd_ps(r, c, _mm256_mul_ps(i, a));
    r = nr;
  }
  /// (r, i) ← (r, i)·W_8^E, E ∈ [0, 4): 1, (1 − i)/√2, −i, (−1 − i)/√2.
  template <int E>
  static LRPE_ALWAYS_INLINE void mul_w8(__m256& r, __m256& i) noexcept {
    if constexpr (E == 2) {
      const __m256 t = r;
      r = i;
      i = _mm256_sub_ps(_mm256_setzero_ps(), t);
    } else if constexpr (E == 1 || E == 3) {
      const __m256 h = _mm256_set1_ps(static_cast<float>(std::numbers::sqrt2 / 2));
      const __m256 s = _mm256_add_ps(r, i), t = _mm256_sub_ps(i, r);
      if constexpr (E == 1) r = _mm256_mul_ps(h, s), i = _mm256_mul_ps(h, t);  // ((r + i) + i(i − r))/√2
      else r = _mm256_mul_ps(h, t), i = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(h, s));  // ((i − r) − i(r + i))/√2
    }
  }
  /// One decimation-in-time stage inside each vector (span S, twiddle already on the upper
  /// lanes): lanes l and l ^ S give the sum on the lower lane, lower − upper on the upper one.
  template <int S>
  static LRPE_ALWAYS_INLINE void dit_in_vector(__m256& r, __m256& i) noexcept {
    const auto swap = [](__m256 v) {
      if constexpr (S == 4) return _mm256_permute2f128_ps(v, v, 0x01);
      else if constexpr (S == 2) return _mm256_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2));
      else return _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
    };
    constexpr int upper = S == 4 ? 0xF0 : S == 2 ? 0xCC : 0xAA;
    const __m256 tr = swap(r), ti = swap(i);
    r = _mm256_blend_ps(_mm256_add_ps(r, tr), _mm256_sub_ps(tr, r), upper);
    i = _mm256_blend_ps(_mm256_add_ps(i, ti), _mm256_sub_ps(ti, i), upper);
  }
  /// The R-point DFT across registers (decimation in frequency, natural order in, bit-reversed
  /// out), one stage of span S: (a, b) ← (a + b, (a − b)·W_2S^(c mod S)).
  template <int R, int S>
  static LRPE_ALWAYS_INLINE void dif_across(__m256* zr, __m256* zi) noexcept {
    [&]<int... C>(std::integer_sequence<int, C...>) LRPE_ALWAYS_INLINE_LAMBDA {
      const auto one = [&]<int Cc>(std::integer_sequence<int, Cc>) LRPE_ALWAYS_INLINE_LAMBDA {
        constexpr int blk = Cc / S, j = Cc % S, a = 2 * S * blk + j, bb = a + S;
        const __m256 sr = _mm256_add_ps(zr[a], zr[bb]), si = _mm256_add_ps(zi[a], zi[bb]);
        zr[bb] = _mm256_sub_ps(zr[a], zr[bb]);
        zi[bb] = _mm256_sub_ps(zi[a], zi[bb]);
        zr[a] = sr;
        zi[a] = si;
        mul_w8<j * (4 / S)>(zr[bb], zi[bb]);  // W_2S^j = W_8^(j·8/2S)
      };
      (one(std::integer_sequence<int, C>{}), ...);
    }(std::make_integer_sequence<int, R / 2>{});
  }

  /**
   * Type 8 at d = 16·R (R ∈ {4, 8}: d = 64, 128) for one row, horizontally (AVX2 float): the
   * M = 8R complex values z_n = x_2n + i·x_2n+1 as a 4-step FFT, n = R·i + c, k = k1 + 8·k2.
   * Lane i's R values are R/4 chunks of 8 floats; the chunks are loaded in bit-reversed order
   * of i and transposed 8×8 in registers, so register pair c holds (Re, Im) z_{Ri+c} at lane
   * rev₃(i); an 8-point decimation-in-time FFT inside each vector (lane swaps, blends) leaves
   * Y_c[k1] at lane k1, in natural order; the twiddles W_M^{c·k1} (with 1/√d and the split's
   * 1/2 folded in); an R-point DFT across the registers (its bit-reversed output order is a
   * renaming of registers) gives Z_{k1 + 8k2} in register k2, lane k1: Z in natural order. The
   * real split pairs Z_k with Z_{M−k} (a lane reversal of the mirror register), the bins
   * M … d − 1 are the mirrored conjugates, then the phase and the stores. No scratch and no
   * gathers.
   *
   * One function (~90 lines) on purpose: every stage reads and writes the same 2R registers of
   * the row, which live in local arrays; split into functions, the arrays would cross calls as
   * memory. The stages are marked in order below.
   */
  template <int R, bool Stream>
  LRPE_ALWAYS_INLINE void row_fft8(const T* x, const T* table, T* y) const noexcept {
    static_assert(R == 4 || R == 8);
    constexpr int d = 16 * R, M = 8 * R, G = R / 4;  // G chunks of 8 floats per lane
    constexpr int rev3[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    const horizontal8& h = h8_;
    __m256 zr[R], zi[R];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      xsimd::batch<float, Arch> t[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) t[i] = _mm256_loadu_ps(x + 8 * (G * rev3[i] + g));
      compat::transpose_square(t);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) zr[4 * g + c] = t[2 * c], zi[4 * g + c] = t[2 * c + 1];
    }
    // Step 1: 8-point DIT over the lanes. Span 1 has twiddle 1; span 2 has W_4^1 = −i on lanes
    // 3 and 7 ((r, i)·(−i) = (i, −r): two blends and a negation), 1 on the other upper lanes.
#pragma GCC unroll 8
    for (int c = 0; c < R; ++c) dit_in_vector<1>(zr[c], zi[c]);
#pragma GCC unroll 8
    for (int c = 0; c < R; ++c) {
      const __m256 r = zr[c];
      zr[c] = _mm256_blend_ps(r, zi[c], 0x88);
      zi[c] = _mm256_blend_ps(zi[c], _mm256_sub_ps(_mm256_setzero_ps(), r), 0x88);
    }
#pragma GCC unroll 8
    for (int c = 0; c < R; ++c) dit_in_vector<2>(zr[c], zi[c]);
#pragma GCC unroll 8
    for (int c = 0; c < R; ++c) cmul8(zr[c], zi[c], h.t4r, h.t4i);
#pragma GCC unroll 8
    for (int c = 0; c < R; ++c) dit_in_vector<4>(zr[c], zi[c]);
    // Step 2: twiddles W_M^(c·k1), and the scale 1/√d with the split's 1/2 folded in.
#pragma GCC unroll 8
    for (int c = 1; c < R; ++c) cmul8(zr[c], zi[c], h.cr[c], h.ci[c]);
    {
      const __m256 sc = _mm256_load_ps(h.cr[0]);  // register 0: the scale alone
      zr[0] = _mm256_mul_ps(zr[0], sc);
      zi[0] = _mm256_mul_ps(zi[0], sc);
    }
    // Step 3: R-point DFT across the registers; register p then holds X_rev(p), renamed below.
    if constexpr (R == 8) dif_across<R, 4>(zr, zi);
    dif_across<R, 2>(zr, zi);
    dif_across<R, 1>(zr, zi);
    {
      constexpr int rev2[4] = {0, 2, 1, 3};
      __m256 tr[R], ti[R];
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) {
        const int p = R == 8 ? rev3[k] : rev2[k];
        tr[k] = zr[p], ti[k] = zi[p];
      }
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) zr[k] = tr[k], zi[k] = ti[k];
    }
    // mirror(reg) lane l of register q = reg[R − 1 − q] lane 8 − l for l ≥ 1 and
    // reg[(R − q) mod R] lane 0 at l = 0: the value at M − (8q + l), mod M.
    const __m256i rev = _mm256_setr_epi32(0, 7, 6, 5, 4, 3, 2, 1);
    const auto mirror = [&](const __m256* reg, __m256* out) LRPE_ALWAYS_INLINE_LAMBDA {
      __m256 p[R];
#pragma GCC unroll 8
      for (int q = 0; q < R; ++q) p[q] = _mm256_permutevar8x32_ps(reg[q], rev);
#pragma GCC unroll 8
      for (int q = 0; q < R; ++q) out[q] = _mm256_blend_ps(p[R - 1 - q], p[(R - q) % R], 0x01);
    };
    __m256 br[R], bi[R];
    mirror(zr, br);
    mirror(zi, bi);
    // The real split, k = 8q + lane: A = Z_k, B = Z_{(M − k) mod M} (Z here is half the
    // transform, so E and O need no 1/2).
    __m256 xr[R], xi[R], xm;
#pragma GCC unroll 8
    for (int q = 0; q < R; ++q) {
      const __m256 er = _mm256_add_ps(zr[q], br[q]), ei = _mm256_sub_ps(zi[q], bi[q]);
      __m256 orr = _mm256_add_ps(zi[q], bi[q]), oi = _mm256_sub_ps(br[q], zr[q]);
      if (q == 0) xm = _mm256_sub_ps(er, orr);  // lane 0: X_M = Re Z_0 − Im Z_0
      cmul8(orr, oi, h.wr[q], h.wi[q]);
      xr[q] = _mm256_add_ps(er, orr);
      xi[q] = _mm256_add_ps(ei, oi);
    }
    const auto out = [&](int q, __m256 re, __m256 im) LRPE_ALWAYS_INLINE_LAMBDA {  // bins 8q … 8q + 7
      phase_store<Stream>(b(re), b(im), table + 8 * q, table + d + 8 * q, y + 8 * q, d);
    };
#pragma GCC unroll 8
    for (int q = 0; q < R; ++q) out(q, xr[q], xi[q]);
    // Bins M + m: X_M at m = 0, then conj X_{M−m}.
    __m256 ur[R], ui[R];
    mirror(xr, ur);
    mirror(xi, ui);
    const __m256 zero = _mm256_setzero_ps();
    ur[0] = _mm256_blend_ps(ur[0], xm, 0x01);
    ui[0] = _mm256_blend_ps(ui[0], zero, 0x01);
#pragma GCC unroll 8
    for (int q = 0; q < R; ++q) out(R + q, ur[q], _mm256_sub_ps(zero, ui[q]));
    static_cast<void>(M);
  }
  horizontal8 h8_{};
#endif

  /// Tiles of lanes×lanes transposed in registers (AVX-512 float, AVX/AVX2 float and double; d a
  /// multiple of the lanes).
  bool fast_transpose() const noexcept { return compat::has_fast_transpose<T, Arch> && d_ % lanes == 0; }

  /// y[0, lanes) and y[d, d + lanes) = Re and Im of (re + i·im)·(c + i·s), one vector of bins.
  template <bool Stream>
  static LRPE_ALWAYS_INLINE void phase_store(const b& re, const b& im, const T* c, const T* s, T* y, index_t d) noexcept {
    const b cv = b::load_unaligned(c), sv = b::load_unaligned(s);
    store<Stream>(compat::fms(re, cv, im * sv), y);
    store<Stream>(compat::fma(re, sv, im * cv), y + d);
  }

  /// y = [Re, Im] of (re + i·im)·e^{iφ}: features ≥ e pass through.
  template <bool Stream>
  void phase_row(const T* row, const T* z, T* y) const noexcept {
    const index_t e = phase_.e_, d = d_;
    const T* c = row;
    const T* s = row + e;
    const T* zr = z;
    const T* zi = z + d;
    index_t k = 0;
    for (; k + lanes <= e; k += lanes)
      phase_store<Stream>(b::load_unaligned(zr + k), b::load_unaligned(zi + k), c + k, s + k, y + k, d);
    for (; k < e; ++k) {
      y[k] = lrpe::detail::mul_add(zr[k], c[k], -(zi[k] * s[k]));
      y[d + k] = lrpe::detail::mul_add(zr[k], s[k], zi[k] * c[k]);
    }
    for (; k < d; ++k) {
      y[k] = zr[k];
      y[d + k] = zi[k];
    }
  }

  index_t d_;
  l_kernel<Arch, lambda::complex_phase<T>> phase_;
  std::vector<index_t> rev_;
  std::vector<T> tw_re_, tw_im_;
  T scale_;
};

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
