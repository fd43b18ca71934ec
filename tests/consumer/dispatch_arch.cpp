// SPDX-License-Identifier: MIT
// Compiled once per ISA by lrpe_simd_dispatch() (the installed package's helper), with
// LRPE_SIMD_DISPATCH_ARCH naming the xsimd arch: that ISA's instantiation of the kernel.
#include "dispatch_kernel.hpp"

#if !defined(LRPE_SIMD_DISPATCH_ARCH)
#error "compile this file through lrpe_simd_dispatch()"
#endif

template void consumer::rope_encode::operator()<LRPE_SIMD_DISPATCH_ARCH>(LRPE_SIMD_DISPATCH_ARCH,
                                                                          const lrpe::rope_neox<float>&,
                                                                          const float*, float*, lrpe::index_t) const;
