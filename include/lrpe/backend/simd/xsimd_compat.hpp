// SPDX-License-Identifier: MIT
/**
 * @file xsimd_compat.hpp
 * One spelling for the few xsimd names that changed between the xsimd Debian ships (8.1) and
 * newer releases (9+, 10+, 12+), so that the SIMD kernels compile against both:
 *
 * | here                      | xsimd 8.x            | xsimd ≥ 9/10          |
 * |---------------------------|----------------------|-----------------------|
 * | `compat::reduce_add(b)`   | `xsimd::hadd(b)`     | `xsimd::reduce_add(b)`|
 * | `compat::reduce_max(b)`   | (none: written here) | `xsimd::reduce_max(b)`|
 * | `compat::reduce_min(b)`   | (none: written here) | `xsimd::reduce_min(b)`|
 * | `compat::common_arch`     | `xsimd::generic`     | `xsimd::common`       |
 * | `compat::gather(p, idx)`  | `batch::gather` (see below) | `batch::gather` |
 * | `compat::scatter(b, p, idx)` | `batch::scatter` (see below) | `batch::scatter` |
 * | `compat::store_stream(b, p)` | (none: intrinsics) | (none: intrinsics) |
 * | `compat::haddp(rows)`     | `xsimd::haddp` (see below) | `xsimd::haddp` |
 * | `compat::hmaxp(rows)`     | (none: written here) | (none: written here) |
 *
 * haddp (lane r = Σ rows[r]): xsimd 8.1's AVX-512 float version returns lanes 2–5 and 10–13
 * in the wrong order (lane 2 holds Σ rows[4], …; checked by test_simd_compat), so on AVX-512
 * float the compat version is a transpose-and-add tree of its own (30 shuffles and 15 adds for
 * 16 rows), and xsimd's everywhere else (its SSE, AVX, AVX2 and AVX-512 double versions are
 * right).
 *
 * hmaxp (lane r = max rows[r]) is the same tree with max for AVX-512 float (16 rows) and double
 * (8 rows), and a store to the stack and scalar loops elsewhere. The softmax kernel takes its
 * rows' maxima with it, W rows at a time (about 3 vector ops per row instead of a horizontal
 * reduction each).
 *
 * Gather/scatter: xsimd 8.1's overload resolution picks its generic lane-by-lane gather (one
 * insert per lane, far slower than `vgatherdps`: bench/results/tuning.md#xsimd-gather) even on
 * AVX-512, so on xsimd < 9 and x86 the compat versions call the AVX-512 / AVX2 intrinsics
 * directly, and fall back to a scalar loop through the stack elsewhere (which is what the
 * generic code does, minus the per-lane masks).
 *
 * `reduce_max`/`reduce_min` here are written by a store to the stack and a scalar loop: they
 * are for one-off reductions, never an inner loop (batches of rows use `haddp`/`hmaxp`), so a
 * shuffle tree is not worth the version-specific code. NaN: returns the max/min over the
 * non-NaN lanes' comparisons as `std::max` does (a NaN in lane 0 propagates; callers that care
 * should check separately).
 */
#pragma once

#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#if defined(__SSE2__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#if !defined(XSIMD_VERSION_MAJOR)
#error "lrpe: cannot read XSIMD_VERSION_MAJOR; is <xsimd/xsimd.hpp> from xsimd >= 8?"
#endif

/// 1 when xsimd spells the horizontal sum `reduce_add` (xsimd >= 9).
#if XSIMD_VERSION_MAJOR >= 9
#define LRPE_XSIMD_HAS_REDUCE_ADD 1
#else
#define LRPE_XSIMD_HAS_REDUCE_ADD 0
#endif

/// 1 when the arch-independent fallback arch is `xsimd::common` (xsimd >= 10), else `generic`.
#if XSIMD_VERSION_MAJOR >= 10
#define LRPE_XSIMD_HAS_COMMON_ARCH 1
#else
#define LRPE_XSIMD_HAS_COMMON_ARCH 0
#endif

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace compat {

#if LRPE_XSIMD_HAS_COMMON_ARCH
using common_arch = xsimd::common;
#else
using common_arch = xsimd::generic;
#endif

/// Number of lanes of `xsimd::batch<T, Arch>`.
template <class T, class Arch>
inline constexpr std::size_t lanes = xsimd::batch<T, Arch>::size;

/// Horizontal sum of all lanes.
template <class T, class Arch>
inline T reduce_add(const xsimd::batch<T, Arch>& b) noexcept {
#if LRPE_XSIMD_HAS_REDUCE_ADD
  return xsimd::reduce_add(b);
#else
  return xsimd::hadd(b);
#endif
}

/**
 * x·y + z (`fma`) and x·y − z (`fms`), fused exactly when the translation unit has FMA hardware
 * (`__FMA__`, implied by AVX-512), whatever the arch tag, and otherwise a product then a sum.
 * xsimd 8 fuses only on its fma3 and fma4 arches: on AVX-512, and on `avx2` or `avx` named in an
 * FMA-enabled unit, its `fma` is x·y + z, which GCC contracts into an FMA or not per copy of a
 * kernel and clang never does. The scalar tails' `detail::mul_add` makes the same choice, so an
 * element rounds alike in a vector body and in a scalar tail, in every copy and with either
 * compiler (tests compare layouts and kernel variants bit for bit).
 */
template <class T, class Arch>
LRPE_ALWAYS_INLINE xsimd::batch<T, Arch> fma(const xsimd::batch<T, Arch>& x, const xsimd::batch<T, Arch>& y,
                                             const xsimd::batch<T, Arch>& z) noexcept {
#if defined(__FMA__)
  // (by width, not by register type: a vector type as a template argument drops its attributes)
  constexpr std::size_t bytes = xsimd::batch<T, Arch>::size * sizeof(T);
  constexpr bool f32 = std::is_same_v<T, float>, f64 = std::is_same_v<T, double>;
  if constexpr (bytes == 16 && f32) return _mm_fmadd_ps(x, y, z);
  else if constexpr (bytes == 16 && f64) return _mm_fmadd_pd(x, y, z);
  else if constexpr (bytes == 32 && f32) return _mm256_fmadd_ps(x, y, z);
  else if constexpr (bytes == 32 && f64) return _mm256_fmadd_pd(x, y, z);
#if defined(__AVX512F__)
  else if constexpr (bytes == 64 && f32) return _mm512_fmadd_ps(x, y, z);
  else if constexpr (bytes == 64 && f64) return _mm512_fmadd_pd(x, y, z);
#endif
  else return xsimd::fma(x, y, z);
#else
  return xsimd::fma(x, y, z);
#endif
}

template <class T, class Arch>
LRPE_ALWAYS_INLINE xsimd::batch<T, Arch> fms(const xsimd::batch<T, Arch>& x, const xsimd::batch<T, Arch>& y,
                                             const xsimd::batch<T, Arch>& z) noexcept {
  return compat::fma(x, y, -z);
}

namespace detail {

/// Lane r = rows[r][0] ⊕ rows[r][1] ⊕ … on AVX-512 (float: 16 rows, double: 8), a transpose
/// tree of in-lane unpacks and 128-bit chunk shuffles; ⊕ is `add_op` or `max_op`. Each lane's ⊕
/// order is fixed, so the result does not depend on the caller.
#if defined(__AVX512F__)
struct add_op {
  LRPE_ALWAYS_INLINE __m512 operator()(__m512 a, __m512 b) const noexcept { return _mm512_add_ps(a, b); }
  LRPE_ALWAYS_INLINE __m512d operator()(__m512d a, __m512d b) const noexcept { return _mm512_add_pd(a, b); }
};
struct max_op {
  LRPE_ALWAYS_INLINE __m512 operator()(__m512 a, __m512 b) const noexcept { return _mm512_max_ps(a, b); }
  LRPE_ALWAYS_INLINE __m512d operator()(__m512d a, __m512d b) const noexcept { return _mm512_max_pd(a, b); }
};

template <class Op>
LRPE_ALWAYS_INLINE __m512 transpose_reduce16(const __m512* rows, Op op) noexcept {
  // 16 → 8: per 128-bit chunk, [a0⊕a2, b0⊕b2, a1⊕a3, b1⊕b3] for the row pair (a, b).
  __m512 t[8];
  for (int k = 0; k < 8; ++k) {
    const __m512 a = rows[2 * k], b = rows[2 * k + 1];
    t[k] = op(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
  // 8 → 4: per chunk, the four rows 4k … 4k + 3 reduced over the chunk.
  __m512 u[4];
  for (int k = 0; k < 4; ++k)
    u[k] = op(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // 4 → 2 → 1: chunks reduced pairwise across vectors; chunk q of the result = rows 4q … 4q + 3.
  const auto fold = [op](__m512 a, __m512 b) LRPE_ALWAYS_INLINE_LAMBDA {
    return op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  return fold(fold(u[0], u[1]), fold(u[2], u[3]));
}

template <class Op>
LRPE_ALWAYS_INLINE __m512d transpose_reduce8(const __m512d* rows, Op op) noexcept {
  // 8 → 4: per 128-bit chunk q, [a_{2q}⊕a_{2q+1}, b_{2q}⊕b_{2q+1}] for the row pair (a, b).
  __m512d t[4];
  for (int k = 0; k < 4; ++k) {
    const __m512d a = rows[2 * k], b = rows[2 * k + 1];
    t[k] = op(_mm512_unpacklo_pd(a, b), _mm512_unpackhi_pd(a, b));
  }
  // 4 → 2 → 1 as in the float tree: chunk q of the result = rows 2q, 2q + 1.
  const auto fold = [op](__m512d a, __m512d b) LRPE_ALWAYS_INLINE_LAMBDA {
    return op(_mm512_shuffle_f64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  return fold(fold(t[0], t[1]), fold(t[2], t[3]));
}
#endif

}  // namespace detail

/// Lane r = Σ_i rows[r][i], for the batch::size batches at `rows` (see the file comment).
template <class T, class Arch>
LRPE_ALWAYS_INLINE xsimd::batch<T, Arch> haddp(const xsimd::batch<T, Arch>* rows) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, Arch>) {
    __m512 r[16];
    for (int k = 0; k < 16; ++k) r[k] = rows[k];
    return detail::transpose_reduce16(r, detail::add_op{});
  }
#endif
  return xsimd::haddp(rows);
}

/// Lane r = max_i rows[r][i], for the batch::size batches at `rows` (NaN lanes: unspecified).
template <class T, class Arch>
LRPE_ALWAYS_INLINE xsimd::batch<T, Arch> hmaxp(const xsimd::batch<T, Arch>* rows) noexcept {
  using B = xsimd::batch<T, Arch>;
  constexpr std::size_t n = B::size;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, Arch>) {
    __m512 r[16];
    for (int k = 0; k < 16; ++k) r[k] = rows[k];
    return detail::transpose_reduce16(r, detail::max_op{});
  } else if constexpr (std::is_same_v<T, double> && std::is_base_of_v<xsimd::avx512f, Arch>) {
    __m512d r[8];
    for (int k = 0; k < 8; ++k) r[k] = rows[k];
    return detail::transpose_reduce8(r, detail::max_op{});
  }
#endif
  alignas(64) T out[n];
  for (std::size_t r = 0; r < n; ++r) {
    alignas(64) T tmp[n];
    rows[r].store_aligned(tmp);
    T m = tmp[0];
    for (std::size_t i = 1; i < n; ++i) m = tmp[i] > m ? tmp[i] : m;
    out[r] = m;
  }
  return B::load_aligned(out);
}

/// Horizontal maximum of all lanes.
template <class T, class Arch>
inline T reduce_max(const xsimd::batch<T, Arch>& b) noexcept {
  T tmp[xsimd::batch<T, Arch>::size];
  b.store_unaligned(tmp);
  T m = tmp[0];
  for (std::size_t i = 1; i < xsimd::batch<T, Arch>::size; ++i) m = tmp[i] > m ? tmp[i] : m;
  return m;
}

/// Horizontal minimum of all lanes.
template <class T, class Arch>
inline T reduce_min(const xsimd::batch<T, Arch>& b) noexcept {
  T tmp[xsimd::batch<T, Arch>::size];
  b.store_unaligned(tmp);
  T m = tmp[0];
  for (std::size_t i = 1; i < xsimd::batch<T, Arch>::size; ++i) m = tmp[i] < m ? tmp[i] : m;
  return m;
}

/// b[i] = base[idx[i]] (float with int32 indices, double with int64 indices).
template <class T, class I, class Arch>
inline xsimd::batch<T, Arch> gather(const T* base, const xsimd::batch<I, Arch>& idx) noexcept {
  static_assert(sizeof(T) == sizeof(I) && std::is_integral_v<I>, "compat::gather: index width must match T");
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    if constexpr (std::is_same_v<T, float>) return _mm512_i32gather_ps(idx, base, 4);
    else return _mm512_i64gather_pd(idx, base, 8);
  } else
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
    if constexpr (std::is_same_v<T, float>) return _mm256_i32gather_ps(base, idx, 4);
    else return _mm256_i64gather_pd(base, idx, 8);
  } else
#endif
  {
    constexpr std::size_t n = xsimd::batch<T, Arch>::size;
    I ix[n];
    T v[n];
    idx.store_unaligned(ix);
    for (std::size_t i = 0; i < n; ++i) v[i] = base[ix[i]];
    return xsimd::batch<T, Arch>::load_unaligned(v);
  }
}

/// base[idx[i]] = b[i] (indices must be distinct).
template <class T, class I, class Arch>
inline void scatter(const xsimd::batch<T, Arch>& b, T* base, const xsimd::batch<I, Arch>& idx) noexcept {
  static_assert(sizeof(T) == sizeof(I) && std::is_integral_v<I>, "compat::scatter: index width must match T");
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    if constexpr (std::is_same_v<T, float>) _mm512_i32scatter_ps(base, idx, b, 4);
    else _mm512_i64scatter_pd(base, idx, b, 8);
  } else
#endif
  {
    constexpr std::size_t n = xsimd::batch<T, Arch>::size;
    I ix[n];
    T v[n];
    idx.store_unaligned(ix);
    b.store_unaligned(v);
    for (std::size_t i = 0; i < n; ++i) base[ix[i]] = v[i];
  }
}

/**
 * Non-temporal store of a whole batch to `p`, which must be aligned to the batch's size
 * (`sizeof(xsimd::batch<T, Arch>)`): the line goes to memory without being read first (no
 * read-for-ownership) and without displacing the cache. x86 (SSE2, AVX, AVX-512) only; elsewhere
 * an ordinary aligned store. Call `stream_fence()` before other threads read the data.
 */
template <class T, class Arch>
inline void store_stream(const xsimd::batch<T, Arch>& b, T* p) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    if constexpr (std::is_same_v<T, float>) _mm512_stream_ps(p, b);
    else _mm512_stream_pd(p, b);
    return;
  } else
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, Arch>) {
    if constexpr (std::is_same_v<T, float>) _mm256_stream_ps(p, b);
    else _mm256_stream_pd(p, b);
    return;
  } else
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, Arch>) {
    if constexpr (std::is_same_v<T, float>) _mm_stream_ps(p, b);
    else _mm_stream_pd(p, b);
    return;
  } else
#endif
  {
    b.store_aligned(p);
  }
}

/// True when `store_stream` is a real non-temporal store for this arch.
template <class Arch>
inline constexpr bool has_stream_store = false
#if defined(__AVX512F__)
    || std::is_base_of_v<xsimd::avx512f, Arch>
#endif
#if defined(__AVX__)
    || std::is_base_of_v<xsimd::avx, Arch>
#endif
#if defined(__SSE2__)
    || std::is_base_of_v<xsimd::sse2, Arch>
#endif
    ;

/// Orders earlier non-temporal stores before later stores (sfence on x86; nothing elsewhere).
inline void stream_fence() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// True when `transpose_square<T, Arch>` is an in-register shuffle transpose (AVX-512 float;
/// AVX and AVX2, float and double).
template <class T, class Arch>
inline constexpr bool has_fast_transpose = false
#if defined(__AVX512F__)
    || (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, Arch>)
#endif
#if defined(__AVX__)
    || ((std::is_same_v<T, float> || std::is_same_v<T, double>) && std::is_base_of_v<xsimd::avx, Arch>)
#endif
    ;

/**
 * Transposes the lanes×lanes matrix whose row i is v[i], in place (v[i] becomes column i).
 * AVX-512 float: 64 shuffles for 16×16 (unpack ps, unpack pd, two rounds of shuffle_f32x4);
 * AVX float: 24 for 8×8 (unpack ps, shuffle ps, permute2f128); AVX double: 8 for 4×4 (unpack pd,
 * permute2f128); elsewhere a scalar transpose through the stack.
 */
template <class T, class Arch>
LRPE_ALWAYS_INLINE void transpose_square(xsimd::batch<T, Arch>* v) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, Arch>) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = v[i];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    const auto lo = [](__m512 a, __m512 b) {
      return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    const auto hi = [](__m512 a, __m512 b) {
      return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    for (int i = 0; i < 16; i += 4) {
      r[i] = lo(t[i], t[i + 2]);
      r[i + 1] = hi(t[i], t[i + 2]);
      r[i + 2] = lo(t[i + 1], t[i + 3]);
      r[i + 3] = hi(t[i + 1], t[i + 3]);
    }
    for (int g = 0; g < 16; g += 8) {
      for (int i = 0; i < 4; ++i) {
        t[g + i] = _mm512_shuffle_f32x4(r[g + i], r[g + i + 4], 0x88);
        t[g + i + 4] = _mm512_shuffle_f32x4(r[g + i], r[g + i + 4], 0xdd);
      }
    }
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
    for (int i = 0; i < 16; ++i) v[i] = r[i];
    return;
  } else
#endif
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx, Arch>) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = v[i];
    for (int i = 0; i < 8; i += 2) {  // t[i] = (r_i0, r_{i+1}0, r_i1, r_{i+1}1 | lanes 4, 5), t[i+1] the 2, 3 | 6, 7
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // r[i + c] = column c (and c + 4) of rows i … i + 3
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; ++c) {  // 128-bit halves: rows 0–3 then rows 4–7
      v[c] = _mm256_permute2f128_ps(r[c], r[c + 4], 0x20);
      v[c + 4] = _mm256_permute2f128_ps(r[c], r[c + 4], 0x31);
    }
    return;
  } else if constexpr (std::is_same_v<T, double> && std::is_base_of_v<xsimd::avx, Arch>) {
    const __m256d r0 = v[0], r1 = v[1], r2 = v[2], r3 = v[3];
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);  // columns 0, 2 | 1, 3
    const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
    v[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    v[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    v[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    v[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
    return;
  } else
#endif
  {
    constexpr std::size_t n = xsimd::batch<T, Arch>::size;
    T m[n * n];
    for (std::size_t i = 0; i < n; ++i) v[i].store_unaligned(m + i * n);
    for (std::size_t i = 0; i < n; ++i) {
      T col[n];
      for (std::size_t j = 0; j < n; ++j) col[j] = m[j * n + i];
      v[i] = xsimd::batch<T, Arch>::load_unaligned(col);
    }
  }
}

}  // namespace compat
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
