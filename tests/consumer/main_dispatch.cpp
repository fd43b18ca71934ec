// SPDX-License-Identifier: MIT
// Runtime ISA dispatch through the installed package's lrpe_simd_dispatch(): this object is
// compiled without -march; the per-ISA kernels come from dispatch_arch.cpp, built once per arch.
// xsimd::dispatch runs the widest one the CPU supports; its result must equal the reference's.
#include "dispatch_kernel.hpp"

#include <cstdio>

#if !defined(LRPE_SIMD_DISPATCH)
#error "lrpe_simd_dispatch() must define LRPE_SIMD_DISPATCH on the target"
#endif

extern template void consumer::rope_encode::operator()<xsimd::avx512bw>(xsimd::avx512bw, const lrpe::rope_neox<float>&,
                                                                         const float*, float*, lrpe::index_t) const;
extern template void consumer::rope_encode::operator()<xsimd::avx2>(xsimd::avx2, const lrpe::rope_neox<float>&,
                                                                     const float*, float*, lrpe::index_t) const;
extern template void consumer::rope_encode::operator()<xsimd::sse2>(xsimd::sse2, const lrpe::rope_neox<float>&,
                                                                     const float*, float*, lrpe::index_t) const;

struct arch_name {
  template <class Arch>
  const char* operator()(Arch) const {
    return Arch::name();
  }
};

int main() {
  using archs = xsimd::arch_list<xsimd::avx512bw, xsimd::avx2, xsimd::sse2>;
  const lrpe::index_t n = 100, d = 64;
  const lrpe::rope_neox<float> enc(d);
  const lrpe::row_matrix<float> x = lrpe::row_matrix<float>::Random(n, d);
  lrpe::row_matrix<float> out(n, d);
  auto encode = xsimd::dispatch<archs>(consumer::rope_encode{});
  encode(enc, x.data(), out.data(), n);
  const float err = (out - enc.encode(x, 0)).cwiseAbs().maxCoeff();
  std::printf("dispatched to %s: max |simd - reference| = %g\n", xsimd::dispatch<archs>(arch_name{})(),
              static_cast<double>(err));
  return err <= 1e-5f ? 0 : 1;
}
