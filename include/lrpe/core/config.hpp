// SPDX-License-Identifier: MIT
/**
 * @file config.hpp
 * Version, namespace and portability macros of lrpe. This is the single source of the
 * version: CMake parses the three `LRPE_VERSION_*` lines below.
 */
#pragma once

#define LRPE_VERSION_MAJOR 0
#define LRPE_VERSION_MINOR 1
#define LRPE_VERSION_PATCH 0

#define LRPE_VERSION (LRPE_VERSION_MAJOR * 10000 + LRPE_VERSION_MINOR * 100 + LRPE_VERSION_PATCH)

#if !defined(__cplusplus) || (__cplusplus < 202002L && !defined(__CUDACC__))
#  error "lrpe requires C++20 (compile with -std=c++20 or link the lrpe::lrpe CMake target)"
#endif

/// Marks functions that run on both host and CUDA device (like CUTE_HOST_DEVICE).
#if defined(__CUDACC__) || defined(__HIPCC__)
#  define LRPE_HOST_DEVICE __host__ __device__
#  define LRPE_DEVICE __device__
#else
#  define LRPE_HOST_DEVICE
#  define LRPE_DEVICE
#endif

#if defined(_MSC_VER)
#  define LRPE_RESTRICT __restrict
#else
#  define LRPE_RESTRICT __restrict__
#endif

#include <cstddef>
#include <cstdint>

namespace lrpe {
inline namespace v0 {

/// Signed index type for sizes and strides (like Eigen::Index).
using index_t = std::ptrdiff_t;
/// Positions are signed 64-bit integers; relative offsets t - s may be negative.
using position_t = std::int64_t;

}  // namespace v0
}  // namespace lrpe

/// Forces inlining of small kernel helpers whose arguments are register arrays (GCC and Clang:
/// an out-of-line call spills them through memory, which the Type 8 FFT path showed:
/// bench/results/tuning.md#always-inline).
/// `LRPE_ALWAYS_INLINE_LAMBDA` is the same for a lambda (after its parameter list).
#if defined(__GNUC__) || defined(__clang__)
#define LRPE_ALWAYS_INLINE inline __attribute__((always_inline))
#define LRPE_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))
#else
#define LRPE_ALWAYS_INLINE inline
#define LRPE_ALWAYS_INLINE_LAMBDA
#endif
