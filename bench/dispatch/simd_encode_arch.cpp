// SPDX-License-Identifier: MIT
// One translation unit per arch (compiled by lrpe_simd_dispatch with LRPE_SIMD_DISPATCH_ARCH set
// to the xsimd arch tag and that arch's compiler flags): the explicit instantiation of the
// dispatched bench kernel for that arch.
#include "simd_encode_dispatch.hpp"

#if !defined(LRPE_SIMD_DISPATCH_ARCH)
#error "compile this file through lrpe_simd_dispatch (cmake/lrpeSimdDispatch.cmake)"
#endif

template void lrpe_bench::rope_neox_qk::operator()<LRPE_SIMD_DISPATCH_ARCH>(
    LRPE_SIMD_DISPATCH_ARCH, const lrpe::rope_neox<float>&, const float*, const float*, float*, float*,
    lrpe::index_t, lrpe::index_t) const;
