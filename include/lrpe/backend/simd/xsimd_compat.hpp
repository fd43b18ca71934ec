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
 *
 * `reduce_max`/`reduce_min` here are written by a store to the stack and a scalar loop: they
 * are used once per row/tile, never in an inner loop, so a shuffle tree is not worth the
 * version-specific code. NaN: returns the max/min over the non-NaN lanes' comparisons as
 * `std::max` does (a NaN in lane 0 propagates; callers that care should check separately).
 */
#pragma once

#include <lrpe/backend/simd/tag.hpp>

#include <cstddef>

#include <xsimd/xsimd.hpp>

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

}  // namespace compat
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
