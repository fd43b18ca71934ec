// SPDX-License-Identifier: MIT
/**
 * @file stored.hpp
 * Internal: vectors loaded from K and V rows as they are stored, float or double as they are,
 * `lrpe::half` and `lrpe::bfloat16` widened to float on the way (exact): the softmax kernels
 * read 16-bit caches without a widened copy. The ISA-specific conversions are hooks of isa/.
 */
#pragma once

#include <lrpe/backend/simd/detail/isa/avx2.hpp>
#include <lrpe/backend/simd/detail/isa/avx512.hpp>
#include <lrpe/backend/simd/detail/isa/generic.hpp>
#include <lrpe/backend/simd/detail/micro_kernels.hpp>
#include <lrpe/core/storage.hpp>

#include <cmath>
#include <cstddef>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// One vector of compute_t<S> from p[0, W), unaligned.
template <class A, class S>
LRPE_ALWAYS_INLINE xsimd::batch<compute_t<S>, A> load_stored(const S* p) noexcept {
  using B = xsimd::batch<compute_t<S>, A>;
  if constexpr (!half_precision<S>) {
    return B::load_unaligned(p);
  } else {
    B out;
    if (load_widened_isa(A{}, p, out)) return out;
    alignas(B) float buf[B::size];
    for (std::size_t i = 0; i < B::size; ++i) buf[i] = widen(p[i]);
    return B::load_aligned(buf);
  }
}

/// One vector of compute_t<S> stored into p[0, W) as S, unaligned: as it is for float and
/// double, rounded once (to nearest even) for 16-bit S.
template <class A, class S>
LRPE_ALWAYS_INLINE void store_stored(S* p, const xsimd::batch<compute_t<S>, A>& v) noexcept {
  using B = xsimd::batch<compute_t<S>, A>;
  if constexpr (!half_precision<S>) {
    v.store_unaligned(p);
  } else {
    if (store_narrowed_isa(A{}, p, v)) return;
    alignas(B) float buf[B::size];
    v.store_aligned(buf);
    for (std::size_t i = 0; i < B::size; ++i) p[i] = narrow<S>(buf[i]);
  }
}

/// count floats of x into S (16 bits) at p, rounded once: by vectors where the ISA has the
/// rounding (`store_narrowed_isa`), else, and for the tail, one by one.
template <class A, half_precision S>
inline void narrow_row(const float* x, S* p, index_t count) noexcept {
  using B = xsimd::batch<float, A>;
  constexpr index_t W = B::size;
  index_t i = 0;
  for (; i + W <= count; i += W)
    if (!store_narrowed_isa(A{}, p + i, B::load_unaligned(x + i))) break;
  for (; i < count; ++i) p[i] = narrow<S>(x[i]);
}

/// count values stored as S at p widened into x (exact).
template <class A, half_precision S>
inline void widen_row(const S* p, float* x, index_t count) noexcept {
  using B = xsimd::batch<float, A>;
  constexpr index_t W = B::size;
  index_t i = 0;
  for (; i + W <= count; i += W) load_stored<A>(p + i).store_unaligned(x + i);
  for (; i < count; ++i) x[i] = widen(p[i]);
}

/// `all_finite` of values stored as S.
template <class T, class A, class S>
inline bool all_finite_stored(const S* x, index_t count) noexcept {
  if constexpr (!half_precision<S>) {
    return all_finite<T, A>(x, count);
  } else {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    B acc(T(0));
    index_t i = 0;
    for (; i + W <= count; i += W) acc = compat::fma(load_stored<A>(x + i), B(T(0)), acc);
    T rest = compat::reduce_add(acc);
    for (; i < count; ++i) rest += widen(x[i]) * T(0);
    return !std::isnan(rest);
  }
}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
