/**
 * @file simd.hpp
 * Opt-in entry header of the xsimd backend: `#include <lrpe/simd.hpp>` after linking the
 * `lrpe::simd` CMake target. Gives `lrpe::backend::simd<Arch>` and every SIMD kernel
 * (encoders; softmax and linear attention). See docs/backends.md.
 */
#pragma once

#if !defined(LRPE_HAS_SIMD)
#error "<lrpe/simd.hpp> needs the lrpe::simd CMake target: target_link_libraries(<your target> PRIVATE lrpe::simd) (it finds xsimd and defines LRPE_HAS_SIMD). Without SIMD, include <lrpe/lrpe.hpp> and use backend::reference."
#endif

#include <lrpe/lrpe.hpp>

#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/backend/simd/sincos.hpp>
#include <lrpe/backend/simd/encode.hpp>
#include <lrpe/backend/simd/workspace.hpp>
#include <lrpe/backend/simd/parallel.hpp>
#include <lrpe/backend/simd/softmax.hpp>
#include <lrpe/backend/simd/linear.hpp>
