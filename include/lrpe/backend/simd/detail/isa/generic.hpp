// SPDX-License-Identifier: MIT
/**
 * @file generic.hpp
 * Internal: the ISA hooks of the row kernels (kernels.hpp), for every arch. A kernel written
 * with xsimd calls a hook with its arch tag, `hook(Arch{}, ...)`, where one ISA has a faster
 * way; overload resolution on the tag picks avx512.hpp's or avx2.hpp's version when Arch
 * derives from `xsimd::avx512f` or `xsimd::avx2` and the translation unit is compiled for it,
 * else the version here, which does nothing (returns `false`, or the index it was given): the
 * kernel's own xsimd loop then does the work. Hooks named `..._avx512` and `..._avx2` run one
 * after the other where a kernel lets both ISAs take a share.
 */
#pragma once

#include <lrpe/backend/simd/detail/row_basics.hpp>
#include <lrpe/core/storage.hpp>

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// This translation unit is compiled with AVX-512F (avx512.hpp's hooks exist).
#if defined(__AVX512F__)
inline constexpr bool avx512_kernels = true;
#else
inline constexpr bool avx512_kernels = false;
#endif
/// This translation unit is compiled with AVX2 (avx2.hpp's shuffles and inserts exist).
#if defined(__AVX2__)
inline constexpr bool avx2_kernels = true;
#else
inline constexpr bool avx2_kernels = false;
#endif
/// ... and with FMA (avx2.hpp's rotation kernels exist).
#if defined(__AVX2__) && defined(__FMA__)
inline constexpr bool avx2_fma_kernels = true;
#else
inline constexpr bool avx2_fma_kernels = false;
#endif

/// The AVX2 float rotation reads its table rows lane-ordered (`lane_order_row`): where the
/// natural order took a 128-bit broadcast load and a `vpermilps` per vector, one load and an
/// in-lane unpack serve two vectors. Not with AVX-512, whose kernels read the natural order.
template <class Arch, class T>
inline constexpr bool lane_ordered_rotation_v = avx2_fma_kernels && std::is_same_v<T, float> &&
                                                std::is_base_of_v<xsimd::avx2, Arch> &&
                                                !std::is_base_of_v<xsimd::avx512f, Arch>;

// ---------------------------------------------------------------- 16-bit storage

/// A vector of floats from as many `lrpe::half` or `lrpe::bfloat16` values, widened in
/// registers: done (true) on AVX-512 and AVX2 (F16C for half); the caller widens one by one.
template <class Arch, class S>
LRPE_ALWAYS_INLINE bool load_widened_isa(xsimd::generic, const S*, xsimd::batch<float, Arch>&) noexcept {
  return false;
}

/// A vector of floats rounded (to nearest, ties to even) into as many `lrpe::half` or
/// `lrpe::bfloat16` values, the bits Eigen's scalar conversion gives (a NaN bfloat16: 0x7fc0 with
/// the sign): done (true) on AVX-512 and AVX2 (F16C for half); the caller rounds one by one.
template <class Arch, class S>
LRPE_ALWAYS_INLINE bool store_narrowed_isa(xsimd::generic, S*, const xsimd::batch<float, Arch>&) noexcept {
  return false;
}

// ---------------------------------------------------------------- permutations

/// y[j] = (P x)[idx[j]] with the row held in registers: done (true) for small d on AVX-512.
template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE bool permute_in_registers_avx512(xsimd::generic, const T*, const index_of_t<T>*, T*, index_t,
                                                    const Map&, const typename Map::row_state&) noexcept {
  return false;
}

/// y[j] = x[idx[j]] for the whole vectors from j on by scalar loads inserted into vectors
/// (AVX2); returns the first index not done.
template <bool Stream, class Arch, class T>
LRPE_ALWAYS_INLINE index_t permute_by_inserts_avx2(xsimd::generic, const T*, const index_of_t<T>*, T*, index_t j,
                                                   index_t) noexcept {
  return j;
}

/// out[j] = lut[in[j]] in bytes, 32 at a time by byte shuffles (AVX2); returns the first j not done.
LRPE_ALWAYS_INLINE index_t lookup_bytes_avx2(xsimd::generic, const std::uint8_t*, index_t, const std::uint8_t*,
                                             std::uint8_t*, index_t) noexcept {
  return 0;
}

/// Permutation powers after a Householder row map with the rows in registers (AVX-512): done (true)
/// when d is a whole number of vectors, at most 8.
template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE bool permute_rows_reflected_avx512(xsimd::generic, const Map&, const index_of_t<T>*, index_t,
                                                      const T*, index_t, T*, index_t, index_t, index_t) noexcept {
  return false;
}

/// next[j] = π(prev[j]) by register permutes (AVX-512): done (true) for d ≤ 4 vectors.
template <class T>
LRPE_ALWAYS_INLINE bool next_power_avx512(xsimd::generic, const index_of_t<T>*, const index_of_t<T>*, index_of_t<T>*,
                                          index_t) noexcept {
  return false;
}

// ---------------------------------------------------------------- rotations

/// The shape of a rotation Λ's rows, as its kernels read them.
struct rotation_shape {
  index_t half;     ///< rotated pairs (table row: C[half] | S[half])
  index_t d;        ///< row width (features past 2·half pass through)
  bool lane_order;  ///< the table rows are lane-ordered (avx2.hpp, `lane_order_row`)
};

/// Interleaved rotation of features [i, e) of one row, by whole vectors; returns the first
/// feature not done.
template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE index_t rotate_interleaved_avx512(xsimd::generic, const T*, const T*, const T*, T*, index_t i,
                                                     index_t, const Map&, const typename Map::row_state&) noexcept {
  return i;
}
template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE index_t rotate_interleaved_avx2(xsimd::generic, const T*, const T*, const T*, T*, index_t i,
                                                   index_t, const rotation_shape&, const Map&,
                                                   const typename Map::row_state&) noexcept {
  return i;
}

/// Interleaved rotation of every feature after a Householder row map, whole rows in
/// registers (AVX-512 float): done (true) where d allows.
template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE bool rotate_rows_reflected_avx512(xsimd::generic, const Map&, const rotation_shape&, const T*,
                                                     index_t, const T*, index_t, T*, index_t, index_t) noexcept {
  return false;
}
/// Interleaved rotation of every feature after a row map, unrolled over the row (AVX2 float):
/// done (true) where d allows.
template <bool Stream, class Arch, class T, class Map>
LRPE_ALWAYS_INLINE bool rotate_rows_mapped_avx2(xsimd::generic, const Map&, const rotation_shape&, const T*, index_t,
                                                const T*, index_t, T*, index_t, index_t) noexcept {
  return false;
}

/// The odd-even fold (interleaved rotation of (x[k], x[h+k]), outputs interleaved) for pairs
/// [k, half); returns the first pair not done.
template <bool Stream, class Arch, class T>
LRPE_ALWAYS_INLINE index_t rotate_odd_even_avx512(xsimd::generic, const T*, const T*, const T*, const T*, T*,
                                                  index_t k, index_t) noexcept {
  return k;
}
template <bool Stream, class Arch, class T>
LRPE_ALWAYS_INLINE index_t rotate_odd_even_avx2(xsimd::generic, const T*, const T*, const T*, const T*, T*,
                                                index_t k, index_t) noexcept {
  return k;
}

/// Reorders a table row's cos and sin blocks for the lane-ordered AVX2 kernels.
template <class T>
LRPE_ALWAYS_INLINE void lane_order_row(xsimd::generic, T*, index_t) noexcept {}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
