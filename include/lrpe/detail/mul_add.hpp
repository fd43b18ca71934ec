// SPDX-License-Identifier: MIT
/**
 * @file mul_add.hpp
 * Internal: a scalar a·b + c whose rounding the code fixes, not the compiler.
 *
 * GCC contracts `o += w * v` into an FMA or not as its optimiser sees fit (-ffp-contract=fast,
 * its default), and it may decide differently for two copies of the same loop: the scalar tail
 * of a kernel with a plain and a zero-skipping variant, a tail inlined into several layout paths,
 * a kernel instantiated for 1 and for 4 rows. Results that must agree bit for bit between such
 * copies (a clean call and a call whose data selects the other variant, grouped-query decode and
 * per-head calls, one encoder over two layouts) then differ in the last bits, on some hosts and
 * tunings only. `mul_add` is one fused operation where the target has FMA hardware, and a
 * product then a sum where it has none (no contraction is possible there): the rounding is the
 * code's, not the compiler's.
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <cmath>
#include <type_traits>

namespace lrpe {
inline namespace v0 {
namespace detail {

// FMA hardware: GCC says so with __FP_FAST_FMA (hence <cmath>'s FP_FAST_FMA), clang on x86
// only with __FMA__
#if defined(FP_FAST_FMA) || defined(FP_FAST_FMAF) || defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define LRPE_DETAIL_FMA_HARDWARE 1
#else
#define LRPE_DETAIL_FMA_HARDWARE 0
#endif

template <class T>
[[nodiscard]] LRPE_ALWAYS_INLINE T mul_add(T a, T b, T c) noexcept {
  static_assert(std::is_floating_point_v<T>);
  if constexpr (LRPE_DETAIL_FMA_HARDWARE) return std::fma(a, b, c);
  else return a * b + c;
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
