// SPDX-License-Identifier: MIT
/**
 * @file prefetch.hpp
 * Internal: software prefetches of whole rows, for the SIMD kernels whose access patterns the
 * hardware prefetchers follow badly (several row streams at once, page-sized rows).
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <cstddef>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// Prefetches the `n` elements of one row, by default into L2 (`prefetcht1`); `Locality` = 3
/// into L1 as well, 0 the non-temporal hint. Not 0 by default: on some cores `prefetchnta`
/// fills L1 only, and rows prefetched 24–32 rows ahead were evicted before use
/// (bench/results/tuning.md#prefetch-locality).
template <int Locality = 2, class T>
LRPE_ALWAYS_INLINE void prefetch_row(const T* p, index_t n) noexcept {
  const char* c = reinterpret_cast<const char*>(p);
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
  for (std::size_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, Locality);
}

/// Prefetches the `n` elements of a row about to be written (`prefetchw` where the target has
/// it: the lines arrive owned, so the stores do not wait on a read for ownership).
template <class T>
LRPE_ALWAYS_INLINE void prefetch_row_for_write(T* p, index_t n) noexcept {
  char* c = reinterpret_cast<char*>(p);
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
  for (std::size_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 1, 2);
}

/// Prefetches part `part` of `parts` of the 64-byte lines of [p, p + bytes) into L2: a block
/// fetched a slice at a time over some computation, so that the misses do not all wait at once
/// on the L1 miss buffers.
LRPE_ALWAYS_INLINE void prefetch_part(const void* p, std::size_t bytes, std::size_t part, std::size_t parts) noexcept {
  const char* c = static_cast<const char*>(p);
  const std::size_t lines = (bytes + 63) / 64;
  for (std::size_t l = part * lines / parts; l < (part + 1) * lines / parts; ++l) __builtin_prefetch(c + 64 * l, 0, 2);
}

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
