// SPDX-License-Identifier: MIT
// The optional compiled part of lrpe::simd (target lrpe::simd_kernels): the kernels listed in
// <lrpe/backend/simd/precompiled.hpp>, instantiated once for the arch this file is built for.
#define LRPE_SIMD_BUILDING_KERNELS 1
#include <lrpe/simd.hpp>

LRPE_SIMD_ALL_KERNELS(LRPE_SIMD_DEFINE, xsimd::default_arch)
