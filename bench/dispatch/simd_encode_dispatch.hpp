// SPDX-License-Identifier: MIT
// Runtime-dispatched SIMD encode for bench_simd_encode: one explicit instantiation per arch in
// simd_encode_arch.cpp, compiled once per arch by lrpe_simd_dispatch (cmake/lrpeSimdDispatch.cmake),
// which defines LRPE_SIMD_DISPATCH when the per-arch objects are linked. Without them (a plain
// one-file build) the calls go to the compile-time default arch.
#pragma once

#include <lrpe/lrpe.hpp>
#include <lrpe/backend/simd/encode.hpp>

namespace lrpe_bench {

/// Encodes Q and K (BNSH, batch 1) with `enc` through `lrpe::simd_encoder<E, Arch>`.
struct rope_neox_qk {
  template <class Arch>
  void operator()(Arch, const lrpe::rope_neox<float>& enc, const float* q, const float* k, float* qo, float* ko,
                  lrpe::index_t heads, lrpe::index_t n) const;
};

// Defined out of the class, so not implicitly inline: with the `extern template` declarations
// below the dispatching object never instantiates it (an inline body may be instantiated for
// inlining, and batch<float, avx512bw> does not compile in an object built without AVX-512).
template <class Arch>
void rope_neox_qk::operator()(Arch, const lrpe::rope_neox<float>& enc, const float* q, const float* k, float* qo,
                              float* ko, lrpe::index_t heads, lrpe::index_t n) const {
  const lrpe::index_t d = enc.dim();
  lrpe::simd_encoder<lrpe::rope_neox<float>, Arch>(enc).encode_qk(
      lrpe::bnsh(q, 1, heads, n, d), 0, lrpe::bnsh(k, 1, heads, n, d), 0, lrpe::bnsh(qo, 1, heads, n, d),
      lrpe::bnsh(ko, 1, heads, n, d));
}

#if defined(LRPE_SIMD_DISPATCH_ARCH)
// A per-arch object: only the functor (instantiated in simd_encode_arch.cpp).
#elif defined(LRPE_SIMD_DISPATCH)
// The arch list and its explicit instantiations (simd_encode_arch.cpp, one object per arch).
using dispatch_archs = xsimd::arch_list<xsimd::avx512bw, xsimd::avx2, xsimd::sse2>;
extern template void rope_neox_qk::operator()<xsimd::avx512bw>(xsimd::avx512bw, const lrpe::rope_neox<float>&,
                                                                const float*, const float*, float*, float*,
                                                                lrpe::index_t, lrpe::index_t) const;
extern template void rope_neox_qk::operator()<xsimd::avx2>(xsimd::avx2, const lrpe::rope_neox<float>&, const float*,
                                                            const float*, float*, float*, lrpe::index_t,
                                                            lrpe::index_t) const;
extern template void rope_neox_qk::operator()<xsimd::sse2>(xsimd::sse2, const lrpe::rope_neox<float>&, const float*,
                                                            const float*, float*, float*, lrpe::index_t,
                                                            lrpe::index_t) const;

inline void dispatch_rope_neox_qk(const lrpe::rope_neox<float>& enc, const float* q, const float* k, float* qo,
                                  float* ko, lrpe::index_t heads, lrpe::index_t n) {
  static auto f = xsimd::dispatch<dispatch_archs>(rope_neox_qk{});  // 8.1: operator() is non-const
  f(enc, q, k, qo, ko, heads, n);
}
struct arch_name {
  template <class Arch>
  const char* operator()(Arch) const { return Arch::name(); }
};
inline const char* dispatch_arch_name() {
  auto f = xsimd::dispatch<dispatch_archs>(arch_name{});
  return f();
}
#else
inline void dispatch_rope_neox_qk(const lrpe::rope_neox<float>& enc, const float* q, const float* k, float* qo,
                                  float* ko, lrpe::index_t heads, lrpe::index_t n) {
  rope_neox_qk{}(xsimd::default_arch{}, enc, q, k, qo, ko, heads, n);
}
inline const char* dispatch_arch_name() { return "compile-time default (no per-arch objects)"; }
#endif

}  // namespace lrpe_bench
