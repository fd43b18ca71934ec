// SPDX-License-Identifier: MIT
/**
 * @file simd.hpp
 * Opt-in entry header of the xsimd backend: `#include <lrpe/simd.hpp>` after linking the
 * `lrpe::simd` CMake target. Gives `lrpe::backend::simd<Arch>` and every SIMD kernel
 * (encoders; softmax and linear attention). See docs/backends.md.
 */
#pragma once

#if !defined(LRPE_HAS_SIMD)
#error "<lrpe/simd.hpp> needs LRPE_HAS_SIMD. With CMake: target_link_libraries(<your target> PRIVATE lrpe::simd) (it finds xsimd and defines LRPE_HAS_SIMD=1). Without CMake: xsimd >= 8 on the include path and -DLRPE_HAS_SIMD=1. Build with -march=native (or the ISA you deploy to): without it the kernels are SSE2. Without SIMD, include <lrpe/lrpe.hpp> and use backend::reference."
#endif

#include <lrpe/detail/warnings_push.hpp>

#include <lrpe/lrpe.hpp>

#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/backend/simd/sincos.hpp>
#include <lrpe/backend/simd/encode.hpp>
#include <lrpe/backend/simd/encode_storage.hpp>
#include <lrpe/backend/simd/workspace.hpp>
#include <lrpe/backend/simd/parallel.hpp>
#include <lrpe/backend/simd/softmax.hpp>
#include <lrpe/backend/simd/paged.hpp>
#include <lrpe/backend/simd/softmax_backward.hpp>
#include <lrpe/backend/simd/linear.hpp>
#include <lrpe/backend/simd/linear_backward.hpp>
#include <lrpe/backend/simd/precompiled.hpp>

#include <lrpe/detail/warnings_pop.hpp>
