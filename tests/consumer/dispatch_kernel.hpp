// SPDX-License-Identifier: MIT
// A kernel dispatched at run time: one explicit instantiation per ISA (dispatch_arch.cpp, built
// by lrpe_simd_dispatch() once per arch), and the arch list the caller dispatches over.
#pragma once

#include <lrpe/lrpe.hpp>
#include <lrpe/simd.hpp>

namespace consumer {

/// RoPE of n rows of width enc.dim() at positions 0 … n − 1, with the SIMD encoder of Arch.
struct rope_encode {
  template <class Arch>
  void operator()(Arch, const lrpe::rope_neox<float>& enc, const float* x, float* out, lrpe::index_t n) const;
};

// Out of the class, so not implicitly inline: with the extern declarations below, the caller's
// object never instantiates it for an ISA it was not compiled for.
template <class Arch>
void rope_encode::operator()(Arch, const lrpe::rope_neox<float>& enc, const float* x, float* out,
                             lrpe::index_t n) const {
  const lrpe::index_t d = enc.dim();
  lrpe::simd_encoder<lrpe::rope_neox<float>, Arch>(enc).encode(lrpe::matrix_view<const float>(x, n, d, d), 0,
                                                              lrpe::matrix_view<float>(out, n, d, d));
}

}  // namespace consumer
