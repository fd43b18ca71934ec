// SPDX-License-Identifier: MIT
/**
 * @file avx512.hpp
 * Internal: the AVX-512 hooks of the row kernels (generic.hpp says how hooks are chosen).
 * Permutes keep a row of up to 8 vectors in registers and pick its elements with two-source lane
 * permutes (`vpermt2ps`/`pd`) instead of gathers; the rotation kernels use in-lane swaps and
 * `fmaddsub`; the Householder chains (Types 3 and 4) hold v and the row in registers.
 */
#pragma once

#include <lrpe/backend/simd/detail/isa/generic.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#if defined(__AVX512F__)
#include <immintrin.h>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// AVX-512: 16 bfloat16 values widened to float (the 16 bits become a float's high half).
template <class Arch>
LRPE_ALWAYS_INLINE bool load_widened_isa(xsimd::avx512f, const Eigen::bfloat16* p,
                                         xsimd::batch<float, Arch>& out) noexcept {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  out = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return true;
}
/// AVX-512: 16 binary16 values widened to float (`vcvtph2ps`, exact).
template <class Arch>
LRPE_ALWAYS_INLINE bool load_widened_isa(xsimd::avx512f, const Eigen::half* p, xsimd::batch<float, Arch>& out) noexcept {
  out = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return true;
}

/// AVX-512: 16 floats rounded to bfloat16 on their bits, as Eigen's scalar conversion: + 0x7fff +
/// the kept part's lowest bit, then the high half; a NaN becomes 0x7fc0 with its sign.
template <class Arch>
LRPE_ALWAYS_INLINE bool store_narrowed_isa(xsimd::avx512f, Eigen::bfloat16* p, const xsimd::batch<float, Arch>& x) noexcept {
  const __m512i bits = _mm512_castps_si512(x), high = _mm512_srli_epi32(bits, 16);
  const __m512i bias = _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i nan = _mm512_or_si512(_mm512_and_si512(high, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7fc0));
  const __m512i r = _mm512_mask_mov_epi32(_mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16),
                                          _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), nan);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  return true;
}
/// AVX-512: 16 floats rounded to binary16 (`vcvtps2ph`, to nearest even: Eigen's F16C path).
template <class Arch>
LRPE_ALWAYS_INLINE bool store_narrowed_isa(xsimd::avx512f, Eigen::half* p, const xsimd::batch<float, Arch>& x) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return true;
}

template <class T>
struct avx512_permute;
template <>
struct avx512_permute<float> {
  using reg = __m512;
  using mask = __mmask16;
  static constexpr index_t lanes = 16;
  static mask first(index_t n) noexcept { return static_cast<mask>((1u << n) - 1u); }
  static reg load(const float* p, index_t n) noexcept { return n >= lanes ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(first(n), p); }
  static __m512i load_index(const std::int32_t* p, index_t n) noexcept {
    return n >= lanes ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(first(n), p);
  }
  static reg pick(reg a, __m512i ix, reg b) noexcept { return _mm512_permutex2var_ps(a, ix, b); }
  static reg merge_from(reg r, __m512i ix, index_t bound, reg t) noexcept {
    return _mm512_mask_mov_ps(r, _mm512_cmpge_epi32_mask(ix, _mm512_set1_epi32(static_cast<int>(bound))), t);
  }
  static void store_part(float* p, reg v, index_t n) noexcept { _mm512_mask_storeu_ps(p, first(n), v); }
  static reg fmadd(reg a, reg b, reg c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  static reg set1(float a) noexcept { return _mm512_set1_ps(a); }
  static float sum(reg a) noexcept { return _mm512_reduce_add_ps(a); }
};
template <>
struct avx512_permute<double> {
  using reg = __m512d;
  using mask = __mmask8;
  static constexpr index_t lanes = 8;
  static mask first(index_t n) noexcept { return static_cast<mask>((1u << n) - 1u); }
  static reg load(const double* p, index_t n) noexcept { return n >= lanes ? _mm512_loadu_pd(p) : _mm512_maskz_loadu_pd(first(n), p); }
  static __m512i load_index(const std::int64_t* p, index_t n) noexcept {
    return n >= lanes ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi64(first(n), p);
  }
  static reg pick(reg a, __m512i ix, reg b) noexcept { return _mm512_permutex2var_pd(a, ix, b); }
  static reg merge_from(reg r, __m512i ix, index_t bound, reg t) noexcept {
    return _mm512_mask_mov_pd(r, _mm512_cmpge_epi64_mask(ix, _mm512_set1_epi64(bound)), t);
  }
  static void store_part(double* p, reg v, index_t n) noexcept { _mm512_mask_storeu_pd(p, first(n), v); }
  static reg fmadd(reg a, reg b, reg c) noexcept { return _mm512_fmadd_pd(a, b, c); }
  static reg set1(double a) noexcept { return _mm512_set1_pd(a); }
  static double sum(reg a) noexcept { return _mm512_reduce_add_pd(a); }
};

/// The output half of the register permute: y[j] = row[idx[j]], the row in 2·Pairs registers.
template <int Pairs, bool Stream, class Arch, class T>
LRPE_ALWAYS_INLINE void store_permuted(const typename avx512_permute<T>::reg* v, const index_of_t<T>* idx, T* y,
                                       index_t d) noexcept {
  using ops = avx512_permute<T>;
  using b = xsimd::batch<T, Arch>;
  constexpr index_t L = ops::lanes;
  for (index_t j = 0; j < d; j += L) {
    const index_t n = std::min<index_t>(L, d - j);
    const __m512i ix = ops::load_index(idx + j, n);
    auto r = ops::pick(v[0], ix, v[1]);
    for (int p = 1; p < Pairs; ++p) r = ops::merge_from(r, ix, 2 * p * L, ops::pick(v[2 * p], ix, v[2 * p + 1]));
    if (n == L) store<Stream>(b(r), y + j);
    else ops::store_part(y + j, r, n);
  }
}

/// The register permute with `Pairs` pairs of input vectors (d ≤ 2·Pairs·lanes).
/// With a row map, the row is mapped as it is loaded: y[j] = (P x)[idx[j]].
template <int Pairs, bool Stream, class Arch, class T, class Map = identity_map<Arch, T>>
LRPE_ALWAYS_INLINE void permute_row_registers(const T* x, const index_of_t<T>* idx, T* y, index_t d,
                                              const Map& map = {}, typename Map::row_state st = {}) noexcept {
  using ops = avx512_permute<T>;
  using b = xsimd::batch<T, Arch>;
  constexpr index_t L = ops::lanes;
  typename ops::reg v[2 * Pairs];
  // Fully unrolled, or v[] lives on the stack (GCC stops unrolling this loop once the row map
  // makes its body longer), which measured slower (bench/results/tuning.md#permute-registers-unroll).
#pragma GCC unroll 8
  for (int i = 0; i < 2 * Pairs; ++i) {
    const index_t left = d - i * L;
    if constexpr (Map::trivial) {
      v[i] = left > 0 ? ops::load(x + i * L, left) : typename ops::reg{};
    } else if (left >= L) {
      v[i] = map.map(st, i * L, b(ops::load(x + i * L, L)));
    } else if (left > 0) {  // partial vector: mapped feature by feature
      alignas(sizeof(b)) T part[L] = {};
      for (index_t j = 0; j < left; ++j) part[j] = map.map1(st, i * L + j, x[i * L + j]);
      v[i] = ops::load(part, L);
    } else {
      v[i] = typename ops::reg{};
    }
  }
  store_permuted<Pairs, Stream, Arch, T>(v, idx, y, d);
}

/**
 * y_r[j] = (x_r − 2(v·x_r)v)[idx_r[j]] for m rows, d = K vectors exactly (K ≤ 8): v in K
 * registers for all rows, x + μv formed in registers, then the register permute — the
 * Householder·permutation-power chain (Type 4) without a scratch row or reloads of v.
 */
template <int K, bool Stream, class Arch, class T>
void reflect_permute_rows(const T* v, const index_of_t<T>* table, index_t tw, const T* x, index_t xs, T* y,
                          index_t ys, index_t m, index_t d) noexcept {
  using ops = avx512_permute<T>;
  constexpr index_t L = ops::lanes;
  constexpr int Pairs = (K + 1) / 2;
  typename ops::reg vv[K];
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) vv[k] = ops::load(v + k * L, L);
  // Groups of L rows: their μ by one parallel horizontal add (`compat::haddp`, ~2 shuffles per
  // row next to the permute's 8; faster than a horizontal sum per row:
  // bench/results/tuning.md#reflect-permute-haddp); x is read twice, the second time from L1.
  // The last group of cnt < L rows takes the same sum order, its missing rows zero, so that a
  // row's μ (and output) does not depend on how many rows its call has: a BSNH run of H heads
  // at one position and a BNSH head of n rows give the same bits (a horizontal sum per leftover
  // row did not: test_simd_encode, AVX-512 only).
  using bt = xsimd::batch<T, Arch>;
  const auto group = [&](index_t r, index_t cnt) LRPE_ALWAYS_INLINE_LAMBDA {
    bt acc[L];
#pragma GCC unroll 16
    for (index_t i = 0; i < L; ++i) {
      if (i < cnt) {
        const T* xr = x + (r + i) * xs;
        typename ops::reg a = ops::fmadd(ops::load(xr, L), vv[0], typename ops::reg{});
#pragma GCC unroll 8
        for (int k = 1; k < K; ++k) a = ops::fmadd(ops::load(xr + k * L, L), vv[k], a);
        acc[i] = bt(a);
      } else {
        acc[i] = bt(T(0));
      }
    }
    alignas(64) T mus[L];
    (T(-2) * compat::haddp(acc)).store_aligned(mus);
    for (index_t i = 0; i < cnt; ++i) {
      if (r + i + mapped_prefetch_rows < m) prefetch_row(x + (r + i + mapped_prefetch_rows) * xs, d);
      const T* xr = x + (r + i) * xs;
      typename ops::reg q[2 * Pairs];
      const auto mu = ops::set1(mus[i]);
#pragma GCC unroll 8
      for (int k = 0; k < K; ++k) q[k] = ops::fmadd(mu, vv[k], ops::load(xr + k * L, L));
      if constexpr (K < 2 * Pairs) q[K] = typename ops::reg{};
      store_permuted<Pairs, Stream, Arch, T>(q, table + (r + i) * tw, y + (r + i) * ys, d);
    }
  };
  index_t r = 0;
  for (; r + L <= m; r += L) group(r, L);
  if (r < m) group(r, m - r);
}

template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE bool permute_in_registers_avx512(xsimd::avx512f, const T* x, const index_of_t<T>* idx, T* y,
                                                    index_t d, const Map& map,
                                                    const typename Map::row_state& st) noexcept {
  constexpr index_t L = avx512_permute<T>::lanes;
  if (d <= 2 * L) return permute_row_registers<1, Stream, Arch>(x, idx, y, d, map, st), true;
  if (d <= 4 * L) return permute_row_registers<2, Stream, Arch>(x, idx, y, d, map, st), true;
  if (d <= 6 * L) return permute_row_registers<3, Stream, Arch>(x, idx, y, d, map, st), true;
  if (d <= 8 * L) return permute_row_registers<4, Stream, Arch>(x, idx, y, d, map, st), true;
  return false;
}

template <bool Stream, class Arch, class T, class Map>
  requires requires(const Map& map) { map.reflector(); }
LRPE_ALWAYS_INLINE bool permute_rows_reflected_avx512(xsimd::avx512f, const Map& map, const index_of_t<T>* table,
                                                      index_t tw, const T* x, index_t xs, T* y, index_t ys, index_t m,
                                                      index_t d) noexcept {
  constexpr index_t L = avx512_permute<T>::lanes;
  if (d % L != 0 || d > 8 * L) return false;
  const T* v = map.reflector();
  with_constant<1, 2, 3, 4, 5, 6, 7, 8>(d / L, [&](auto k) {
    reflect_permute_rows<decltype(k)::value, Stream, Arch>(v, table, tw, x, xs, y, ys, m, d);
  });
  return true;
}

template <class T>
LRPE_ALWAYS_INLINE bool next_power_avx512(xsimd::avx512f, const index_of_t<T>* pi, const index_of_t<T>* prev,
                                          index_of_t<T>* next, index_t d) noexcept {
  using ops = avx512_permute<T>;
  using reg = typename ops::reg;
  constexpr index_t L = ops::lanes;
  constexpr bool is_float = std::is_same_v<T, float>;
  const auto as_reg = [](__m512i v) -> reg {
    if constexpr (is_float) return _mm512_castsi512_ps(v);
    else return _mm512_castsi512_pd(v);
  };
  if (d > 4 * L) return false;
  reg pv[4];
  for (index_t k = 0; k < 4; ++k) pv[k] = as_reg(k * L < d ? ops::load_index(pi + k * L, d - k * L) : _mm512_setzero_si512());
  for (index_t j = 0; j < d; j += L) {
    const index_t n = std::min<index_t>(L, d - j);
    const __m512i ix = ops::load_index(prev + j, n);
    reg r = ops::pick(pv[0], ix, pv[1]);
    if (d > 2 * L) r = ops::merge_from(r, ix, 2 * L, ops::pick(pv[2], ix, pv[3]));
    if constexpr (is_float) _mm512_mask_storeu_epi32(next + j, ops::first(n), _mm512_castps_si512(r));
    else _mm512_mask_storeu_epi64(next + j, ops::first(n), _mm512_castpd_si512(r));
  }
  return true;
}

/// Interleaved rotation, float: an in-lane pair swap (vpermilps), c and s loaded as 8-wide
/// halves, and fmaddsub for the signs.
template <bool Stream, class Arch, class T, class Map>
  requires std::is_same_v<T, float>
LRPE_ALWAYS_INLINE index_t rotate_interleaved_avx512(xsimd::avx512f, const T* c, const T* s, const T* x, T* y,
                                                     index_t i, index_t e, const Map& map,
                                                     const typename Map::row_state& st) noexcept {
  using b = xsimd::batch<T, Arch>;
  const __m512i dup_idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  for (; i + 16 <= e; i += 16) {
    const __m512 xv = map.map(st, i, b(_mm512_loadu_ps(x + i)));
    const __m512 xs = _mm512_permute_ps(xv, 0xB1);
    const __m512 cv = _mm512_permutexvar_ps(dup_idx, _mm512_castps256_ps512(_mm256_loadu_ps(c + i / 2)));
    const __m512 sv = _mm512_permutexvar_ps(dup_idx, _mm512_castps256_ps512(_mm256_loadu_ps(s + i / 2)));
    store<Stream>(b(_mm512_fmaddsub_ps(xv, cv, _mm512_mul_ps(xs, sv))), y + i);
  }
  return i;
}

/**
 * Λ(x − 2(v·x)v) for interleaved rotation of every feature, d = 16·K float, with the whole row
 * in registers: v is loaded once into K registers for all m rows; each row is loaded once, its
 * μ = −2 v·x is one horizontal sum, and x + μv feeds the rotation without leaving registers: no
 * second read of x and no reload of v, where the generic row map reloads both per vector
 * (bench/results/tuning.md#reflect-rotate-rows).
 */
template <int K, bool Stream, class Arch, class T>
void reflect_rotate_rows(const T* v, const T* table, index_t tw, const T* x, index_t xs, T* y, index_t ys, index_t m,
                         index_t half, index_t d) noexcept {
  using b = xsimd::batch<T, Arch>;
  const __m512i dup_idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  __m512 vv[K];
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) vv[k] = _mm512_loadu_ps(v + 16 * k);
  for (index_t r = 0; r < m; ++r) {
    if (r + mapped_prefetch_rows < m) prefetch_row(x + (r + mapped_prefetch_rows) * xs, d);
    const T* xr = x + r * xs;
    const T* c = table + r * tw;
    const T* s = c + half;
    T* yr = y + r * ys;
    __m512 q[K];
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) q[k] = _mm512_loadu_ps(xr + 16 * k);
    __m512 a0 = _mm512_mul_ps(q[0], vv[0]), a1 = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int k = 1; k < K; ++k) {
      if (k % 2) a1 = _mm512_fmadd_ps(q[k], vv[k], a1);
      else a0 = _mm512_fmadd_ps(q[k], vv[k], a0);
    }
    const __m512 mu = _mm512_set1_ps(T(-2) * _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)));
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      const __m512 xv = _mm512_fmadd_ps(mu, vv[k], q[k]);
      const __m512 cv = _mm512_permutexvar_ps(dup_idx, _mm512_castps256_ps512(_mm256_loadu_ps(c + 8 * k)));
      const __m512 sv = _mm512_permutexvar_ps(dup_idx, _mm512_castps256_ps512(_mm256_loadu_ps(s + 8 * k)));
      store<Stream>(b(_mm512_fmaddsub_ps(xv, cv, _mm512_mul_ps(_mm512_permute_ps(xv, 0xB1), sv))), yr + 16 * k);
    }
  }
}

template <bool Stream, class Arch, class T, class Map>
  requires(std::is_same_v<T, float> && requires(const Map& map) { map.reflector(); })
LRPE_ALWAYS_INLINE bool rotate_rows_reflected_avx512(xsimd::avx512f, const Map& map, const rotation_shape& sh,
                                                     const T* table, index_t tw, const T* x, index_t xs, T* y,
                                                     index_t ys, index_t m) noexcept {
  if (2 * sh.half != sh.d || sh.d % 16 != 0 || sh.d > 128) return false;
  const T* v = map.reflector();
  with_constant<1, 2, 3, 4, 5, 6, 7, 8>(sh.d / 16, [&](auto k) {
    reflect_rotate_rows<decltype(k)::value, Stream, Arch>(v, table, tw, x, xs, y, ys, m, sh.half, sh.d);
  });
  return true;
}

/// The odd-even fold, float: split-half rotation of the two halves, outputs interleaved by one
/// two-source permute per output vector.
template <bool Stream, class Arch, class T>
  requires std::is_same_v<T, float>
LRPE_ALWAYS_INLINE index_t rotate_odd_even_avx512(xsimd::avx512f, const T* c, const T* s, const T* xa, const T* xb,
                                                  T* out, index_t k, index_t half) noexcept {
  using b = xsimd::batch<T, Arch>;
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (; k + 16 <= half; k += 16) {
    const __m512 a = _mm512_loadu_ps(xa + k), bb = _mm512_loadu_ps(xb + k);
    const __m512 cv = _mm512_loadu_ps(c + k), sv = _mm512_loadu_ps(s + k);
    const __m512 ya = _mm512_fmsub_ps(a, cv, _mm512_mul_ps(bb, sv));
    const __m512 yb = _mm512_fmadd_ps(bb, cv, _mm512_mul_ps(a, sv));
    store<Stream>(b(_mm512_permutex2var_ps(ya, lo, yb)), out + 2 * k);
    store<Stream>(b(_mm512_permutex2var_ps(ya, hi, yb)), out + 2 * k + 16);
  }
  return k;
}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe

#endif  // __AVX512F__
