// SPDX-License-Identifier: MIT
/**
 * @file tag.hpp
 * The SIMD backend's tag type, `backend::simd<Arch>`. `Arch` is an xsimd architecture tag
 * (`xsimd::avx512f`, `xsimd::avx2`, `xsimd::sse2`, ...); the default, `xsimd::default_arch`,
 * is the best instruction set the translation unit is compiled for (compile-time selection).
 * For runtime dispatch, compile one translation unit per arch with the CMake helper
 * `lrpe_simd_dispatch` (cmake/lrpeSimdDispatch.cmake) and call through `xsimd::dispatch`.
 *
 * Kernels are chosen by overload on this tag; any (kernel, encoding) pair without a SIMD
 * specialisation falls back to the reference path, and a pair that cannot fall back fails
 * to compile with a sentence naming the pair (see docs/backends.md).
 */
#pragma once

#if !defined(LRPE_HAS_SIMD)
#error "lrpe/backend/simd/*.hpp needs the lrpe::simd CMake target (target_link_libraries(<t> PRIVATE lrpe::simd)), which defines LRPE_HAS_SIMD and finds xsimd."
#endif

#include <lrpe/core/config.hpp>

#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {

/**
 * The xsimd backend, instantiated for one instruction set.
 * @tparam Arch an xsimd arch tag; defaults to the best arch enabled at compile time.
 */
template <class Arch = xsimd::default_arch>
struct simd {
  using arch_type = Arch;
  static constexpr const char* name = "simd";
};

/// True for every `backend::simd<Arch>` (and `simd_policy<Arch>`, parallel.hpp).
template <class>
inline constexpr bool is_simd_backend_v = false;
template <class Arch>
inline constexpr bool is_simd_backend_v<simd<Arch>> = true;

/// A SIMD backend tag: each SIMD hook is written once for both tags, on this concept.
template <class B>
concept simd_backend = is_simd_backend_v<B>;

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
