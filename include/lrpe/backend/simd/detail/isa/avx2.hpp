// SPDX-License-Identifier: MIT
/**
 * @file avx2.hpp
 * Internal: the AVX2 hooks of the row kernels (generic.hpp says how hooks are chosen). Gathers
 * give way to scalar loads inserted into vectors, byte tables are composed by `vpshufb`, and the
 * rotation kernels replace cross-lane shuffles by in-lane ones and `fmaddsub`.
 */
#pragma once

#include <lrpe/backend/simd/detail/isa/generic.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#if defined(__AVX2__)
#include <immintrin.h>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// AVX2: 8 bfloat16 values widened to float (the 16 bits become a float's high half).
template <class Arch>
LRPE_ALWAYS_INLINE bool load_widened_isa(xsimd::avx2, const Eigen::bfloat16* p, xsimd::batch<float, Arch>& out) noexcept {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  out = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return true;
}
#if defined(__F16C__)
/// AVX2 with F16C: 8 binary16 values widened to float (`vcvtph2ps`, exact).
template <class Arch>
LRPE_ALWAYS_INLINE bool load_widened_isa(xsimd::avx2, const Eigen::half* p, xsimd::batch<float, Arch>& out) noexcept {
  out = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return true;
}
#endif

/// AVX2: 8 floats rounded to bfloat16 on their bits, as Eigen's scalar conversion (avx512.hpp's
/// rule), packed to 16 bits across the two lanes.
template <class Arch>
LRPE_ALWAYS_INLINE bool store_narrowed_isa(xsimd::avx2, Eigen::bfloat16* p, const xsimd::batch<float, Arch>& x) noexcept {
  const __m256i bits = _mm256_castps_si256(x), high = _mm256_srli_epi32(bits, 16);
  const __m256i bias = _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  const __m256i nan = _mm256_or_si256(_mm256_and_si256(high, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7fc0));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i r = _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);  // values ≤ 0xffff
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  return true;
}
#if defined(__F16C__)
/// AVX2 with F16C: 8 floats rounded to binary16 (`vcvtps2ph`, to nearest even).
template <class Arch>
LRPE_ALWAYS_INLINE bool store_narrowed_isa(xsimd::avx2, Eigen::half* p, const xsimd::batch<float, Arch>& x) noexcept {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return true;
}
#endif

/// AVX2: lo, hi = the first and second w lanes of (a0, b0, a1, b1, …), by an in-lane unpack pair
/// and two 128-bit lane selects.
template <class T, class Arch>
LRPE_ALWAYS_INLINE void interleave_avx2(const xsimd::batch<T, Arch>& a, const xsimd::batch<T, Arch>& b,
                                        xsimd::batch<T, Arch>& lo, xsimd::batch<T, Arch>& hi) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    const __m256 l = _mm256_unpacklo_ps(a, b), h = _mm256_unpackhi_ps(a, b);
    lo = _mm256_permute2f128_ps(l, h, 0x20);
    hi = _mm256_permute2f128_ps(l, h, 0x31);
  } else {
    const __m256d l = _mm256_unpacklo_pd(a, b), h = _mm256_unpackhi_pd(a, b);
    lo = _mm256_permute2f128_pd(l, h, 0x20);
    hi = _mm256_permute2f128_pd(l, h, 0x31);
  }
}

/// x, kept in a register: without the empty asm GCC folds the load of x into both the pair
/// swap and the FMA that read it, two loads per vector where the load ports are the
/// rotation's limit (bench/results/tuning.md#rotation-one-load).
LRPE_ALWAYS_INLINE __m256 one_load(__m256 x) noexcept {
  asm("" : "+x"(x));
  return x;
}

/// AVX2: w scalar loads inserted into a vector. vgatherdps measured slower, in L1 and streaming
/// from DRAM (bench/results/tuning.md#avx2-permute-inserts), and Intel's Gather Data Sampling
/// microcode slows gathers on the cores it covers.
template <bool Stream, class Arch, class T>
LRPE_ALWAYS_INLINE index_t permute_by_inserts_avx2(xsimd::avx2, const T* x, const index_of_t<T>* idx, T* y, index_t j,
                                                   index_t d) noexcept {
  using b = xsimd::batch<T, Arch>;
  constexpr index_t w = static_cast<index_t>(b::size);
  for (; j + w <= d; j += w) {
    const index_of_t<T>* i = idx + j;
    if constexpr (std::is_same_v<T, float>) {
      store<Stream>(b(_mm256_setr_ps(x[i[0]], x[i[1]], x[i[2]], x[i[3]], x[i[4]], x[i[5]], x[i[6]], x[i[7]])), y + j);
    } else {
      store<Stream>(b(_mm256_setr_pd(x[i[0]], x[i[1]], x[i[2]], x[i[3]])), y + j);
    }
  }
  return j;
}

/// One `vpshufb` per 16 entries of the lut (on the low 4 bits of the index), the results merged
/// by a tree of byte blends on index bits 4, 5, …
LRPE_ALWAYS_INLINE index_t lookup_bytes_avx2(xsimd::avx2, const std::uint8_t* lut, index_t lut_size,
                                             const std::uint8_t* in, std::uint8_t* out, index_t d) noexcept {
  index_t j = 0;
  const index_t chunks = (lut_size + 15) / 16;  // ≤ 16
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (; j + 32 <= d; j += 32) {
    const __m256i iv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + j));
    const __m256i lo = _mm256_and_si256(iv, low);
    __m256i part[16];
    for (index_t k = 0; k < chunks; ++k)
      part[k] = _mm256_shuffle_epi8(
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lut + 16 * k))), lo);
    // level b merges pairs by index bit 4 + b, moved to each byte's sign bit (16-bit shifts
    // move no other byte's bit there)
    index_t n = chunks;
    for (int b = 0; n > 1; ++b) {
      const __m256i sel = b == 0 ? _mm256_slli_epi16(iv, 3)
                        : b == 1 ? _mm256_slli_epi16(iv, 2)
                        : b == 2 ? _mm256_slli_epi16(iv, 1)
                                 : iv;
      for (index_t k = 0; k < n / 2; ++k) part[k] = _mm256_blendv_epi8(part[2 * k], part[2 * k + 1], sel);
      if (n % 2 != 0) part[n / 2] = part[n - 1];
      n = (n + 1) / 2;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), part[0]);
  }
  return j;
}

#if defined(__FMA__)

/// The duplicated c (or s) of the two vectors of x that a lane-ordered block at p serves.
LRPE_ALWAYS_INLINE void dup_pair_block(const float* p, __m256& lo, __m256& hi) noexcept {
  const __m256 t = _mm256_loadu_ps(p);
  lo = _mm256_unpacklo_ps(t, t);
  hi = _mm256_unpackhi_ps(t, t);
}

/// Features [i, i + 16) of an interleaved row, mapped, from a lane-ordered table row (cos at c,
/// sin at s): two vectors of y = fmaddsub(x, dup(c), swap_pairs(x)·dup(s)).
template <bool Stream, class Arch, class Map>
LRPE_ALWAYS_INLINE void rotate_lane_block(const float* c, const float* s, const float* x, float* y, index_t i,
                                          const Map& map, const typename Map::row_state& st) noexcept {
  using b = xsimd::batch<float, Arch>;
  __m256 c0, c1, s0, s1;
  dup_pair_block(c + i / 2, c0, c1);
  dup_pair_block(s + i / 2, s0, s1);
  const __m256 x0 = one_load(map.map(st, i, b(_mm256_loadu_ps(x + i))));
  const __m256 x1 = one_load(map.map(st, i + 8, b(_mm256_loadu_ps(x + i + 8))));
  store<Stream>(b(_mm256_fmaddsub_ps(x0, c0, _mm256_mul_ps(_mm256_permute_ps(x0, 0xB1), s0))), y + i);
  store<Stream>(b(_mm256_fmaddsub_ps(x1, c1, _mm256_mul_ps(_mm256_permute_ps(x1, 0xB1), s1))), y + i + 8);
}

/// Interleaved rotation. The generic loop's three cross-lane vpermps per vector are the kernel's
/// cost. Here c and s are loaded as one 128-bit half broadcast to both lanes and duplicated by an
/// in-lane vpermilps (or read lane-ordered), the pair swap is an in-lane immediate permute, and
/// fmaddsub does the signs.
template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE index_t rotate_interleaved_avx2(xsimd::avx2, const T* c, const T* s, const T* x, T* y, index_t i,
                                                   index_t e, const rotation_shape& sh, const Map& map,
                                                   const typename Map::row_state& st) noexcept {
  using b = xsimd::batch<T, Arch>;
  if constexpr (std::is_same_v<T, float>) {
    if constexpr (lane_ordered_rotation_v<Arch, T>) {
      if (sh.lane_order) {
        for (; i + 16 <= e; i += 16) rotate_lane_block<Stream, Arch>(c, s, x, y, i, map, st);
      }
    }
    const __m256i dup_idx = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (; i + 8 <= e; i += 8) {
      const __m256 xv = one_load(map.map(st, i, b(_mm256_loadu_ps(x + i))));
      const __m256 xs = _mm256_permute_ps(xv, 0xB1);
      const __m256 cv = _mm256_permutevar_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(c + i / 2)), dup_idx);
      const __m256 sv = _mm256_permutevar_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(s + i / 2)), dup_idx);
      store<Stream>(b(_mm256_fmaddsub_ps(xv, cv, _mm256_mul_ps(xs, sv))), y + i);
    }
  } else {
    for (; i + 4 <= e; i += 4) {
      const __m256d xv = map.map(st, i, b(_mm256_loadu_pd(x + i)));
      const __m256d xs = _mm256_permute_pd(xv, 0x5);
      const __m256d cv = _mm256_permute_pd(_mm256_broadcast_pd(reinterpret_cast<const __m128d*>(c + i / 2)), 0xC);
      const __m256d sv = _mm256_permute_pd(_mm256_broadcast_pd(reinterpret_cast<const __m128d*>(s + i / 2)), 0xC);
      store<Stream>(b(_mm256_fmaddsub_pd(xv, cv, _mm256_mul_pd(xs, sv))), y + i);
    }
  }
  return i;
}

/// Interleaved rotation of every feature after a row map, float, d = 8·K: the rotation of
/// `rotate_interleaved_avx2` unrolled over the K vectors of a row.
template <int K, bool Stream, class Arch, class Map>
void mapped_interleaved_rows(const float* table, index_t tw, const float* x, index_t xs, float* y, index_t ys,
                             index_t m, const Map& map_ref, const rotation_shape& sh) noexcept {
  using b = xsimd::batch<float, Arch>;
  // A local copy of the map (its v pointer) and of the half width: the vector stores are
  // may_alias, so values read through a reference are reloaded after every store.
  const Map map = map_ref;
  const index_t half = sh.half;
  const bool lane_order = sh.lane_order;
  const __m256i dup_idx = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  for_each_mapped_row(map, x, xs, sh.d, m, [&](index_t r, const typename Map::row_state& st) LRPE_ALWAYS_INLINE_LAMBDA {
    const float* xr = x + r * xs;
    float* yr = y + r * ys;
    const float* c = table + r * tw;
    const float* s = c + half;
    if constexpr (lane_ordered_rotation_v<Arch, float> && K % 2 == 0) {
      if (lane_order) {
#pragma GCC unroll 8
        for (int k = 0; k < K; k += 2) rotate_lane_block<Stream, Arch>(c, s, xr, yr, 8 * k, map, st);
        return;
      }
    }
#pragma GCC unroll 16
    for (int k = 0; k < K; ++k) {
      const index_t i = 8 * k;
      const __m256 xv = one_load(map.map(st, i, b(_mm256_loadu_ps(xr + i))));
      const __m256 xsw = _mm256_permute_ps(xv, 0xB1);
      const __m256 cv = _mm256_permutevar_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(c + i / 2)), dup_idx);
      const __m256 sv = _mm256_permutevar_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(s + i / 2)), dup_idx);
      store<Stream>(b(_mm256_fmaddsub_ps(xv, cv, _mm256_mul_ps(xsw, sv))), yr + i);
    }
  });
}

template <bool Stream, class Arch, class T, class Map>
  requires std::is_same_v<T, float>
LRPE_ALWAYS_INLINE bool rotate_rows_mapped_avx2(xsimd::avx2, const Map& map, const rotation_shape& sh, const T* table,
                                                index_t tw, const T* x, index_t xs, T* y, index_t ys,
                                                index_t m) noexcept {
  if (2 * sh.half != sh.d || sh.d % 8 != 0 || sh.d > 128) return false;
  return with_constant<1, 2, 4, 8, 16>(sh.d / 8, [&](auto k) {
    mapped_interleaved_rows<decltype(k)::value, Stream, Arch>(table, tw, x, xs, y, ys, m, map, sh);
  });
}

/// The odd-even fold: split-half rotation of the two halves, outputs interleaved by
/// `interleave_avx2`.
template <bool Stream, class Arch, class T>
LRPE_ALWAYS_INLINE index_t rotate_odd_even_avx2(xsimd::avx2, const T* c, const T* s, const T* xa, const T* xb, T* out,
                                                index_t k, index_t half) noexcept {
  using b = xsimd::batch<T, Arch>;
  constexpr index_t w = static_cast<index_t>(b::size);
  for (; k + w <= half; k += w) {
    const b a = b::load_unaligned(xa + k), bb = b::load_unaligned(xb + k);
    const b cv = b::load_unaligned(c + k), sv = b::load_unaligned(s + k);
    b lo, hi;
    interleave_avx2(compat::fms(a, cv, bb * sv), compat::fma(bb, cv, a * sv), lo, hi);
    store<Stream>(lo, out + 2 * k);
    store<Stream>(hi, out + 2 * k + w);
  }
  return k;
}

/// (c0, c1 | c2, c3 | c4, c5 | c6, c7) as four 64-bit units → units (0, 2, 1, 3), for the cos
/// and the sin half of a float table row: one load and an in-lane unpack then give the
/// duplicated c of two consecutive vectors of x.
template <class T>
LRPE_ALWAYS_INLINE void lane_order_row(xsimd::avx2, T* row, index_t half) noexcept {
  for (T* part : {row, row + half})
    for (index_t k = 0; k + 8 <= half; k += 8)
      _mm256_storeu_pd(reinterpret_cast<double*>(part + k),
                       _mm256_permute4x64_pd(_mm256_loadu_pd(reinterpret_cast<const double*>(part + k)), 0xD8));
}

#endif  // __FMA__

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe

#endif  // __AVX2__
