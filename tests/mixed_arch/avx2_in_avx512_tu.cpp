// SPDX-License-Identifier: MIT
// Compile-only (tests/CMakeLists.txt builds it as an object library with AVX-512 flags; nothing
// runs it): the SIMD kernels choose code by the xsimd arch *and* by the translation unit's
// target macros, so an AVX-512 translation unit that instantiates them for AVX2 or AVX
// (`backend::simd<xsimd::avx2>`, a user's own dispatch) must still compile. An `if constexpr`
// on a property that both arch families share (it happened once with the in-register
// transposes) picks 512-bit intrinsics for 256-bit batches, which fails here and nowhere else
// on a CI host without AVX-512.
#include <lrpe/lrpe.hpp>
#include <lrpe/simd.hpp>

#if !defined(__AVX512F__)
#error "compile this file with AVX-512 enabled (tests/CMakeLists.txt adds the flags)"
#endif

namespace {

template <class Arch, class T>
void instantiate_transpose() {
  xsimd::batch<T, Arch> v[xsimd::batch<T, Arch>::size];
  lrpe::backend::compat::transpose_square(v);
}

template <class Arch, class T>
void instantiate_all() {
  instantiate_transpose<Arch, T>();
  T buf[128] = {};  // never run: only the instantiations matter
  const auto x = lrpe::matrix_view<const T>{buf, 1, 64, 64};
  const auto y = lrpe::matrix_view<T>{buf, 1, 64, 64};
  const auto y2 = lrpe::matrix_view<T>{buf, 1, 128, 128};
  lrpe::simd_encoder<lrpe::rope_gptj<T>, Arch>(lrpe::rope_gptj<T>(64)).encode(x, 0, y);
  lrpe::simd_encoder<lrpe::type1<T>, Arch>(lrpe::type1<T>(64)).encode(x, 0, y);
  lrpe::simd_encoder<lrpe::type4<T>, Arch>(lrpe::type4<T>(64)).encode(x, 0, y);
  lrpe::simd_encoder<lrpe::type5<T>, Arch>(lrpe::type5<T>(64)).encode(x, 0, y);
  lrpe::simd_encoder<lrpe::type7<T>, Arch>(lrpe::type7<T>(64)).encode(x, 0, y);
  lrpe::simd_encoder<lrpe::type8<T>, Arch>(lrpe::type8<T>(64)).encode(x, 0, y2);
  const lrpe::encoder perm(lrpe::p::permutation<T>::seeded(64, 1), lrpe::lambda::identity<T>(64));
  lrpe::simd_encoder<std::remove_const_t<decltype(perm)>, Arch>(perm).encode(x, 0, y);  // permute_tile
  const auto q = lrpe::bnsh(static_cast<const T*>(buf), 1, 1, 1, 64);
  const auto o = lrpe::bnsh(buf, 1, 1, 1, 64);
  lrpe::simd_encoder<lrpe::permuteformer<T>, Arch>(lrpe::permuteformer<T>(64)).encode_qk(q, 0, q, 0, o, o);
  lrpe::softmax_attention(q, q, q, o, lrpe::no_encoding{}, lrpe::softmax_options<>{.causal = true},
                          lrpe::backend::simd<Arch>{});
  lrpe::linear_attention(q, q, q, o, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{},
                         lrpe::linear_options{.causal = true}, lrpe::backend::simd<Arch>{});
}

}  // namespace

void lrpe_mixed_arch_instantiations() {
  instantiate_all<xsimd::fma3<xsimd::avx2>, float>();
  instantiate_all<xsimd::fma3<xsimd::avx2>, double>();
  instantiate_transpose<xsimd::avx2, float>();
  instantiate_transpose<xsimd::avx2, double>();
  instantiate_transpose<xsimd::avx, float>();
  instantiate_transpose<xsimd::avx, double>();
}
