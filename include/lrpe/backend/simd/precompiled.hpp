// SPDX-License-Identifier: MIT
/**
 * @file precompiled.hpp
 * The SIMD kernels compiled once, in the optional library `lrpe::simd_kernels`
 * (src/simd_kernels.cpp), for the arch it was built for: with `LRPE_SIMD_PRECOMPILED` defined
 * (linking that target defines it), <lrpe/simd.hpp> declares them `extern template` here, so a
 * translation unit that calls them parses the headers but does not instantiate and optimise the
 * kernels again. What is not listed (other scalars, encodings or feature maps, user policies)
 * is instantiated in the calling translation unit as without the library: the header-only path
 * is unchanged.
 *
 * Listed: for float and double, the softmax kernel (content logits) and the linear kernel on
 * features; for float, the features of every in-library (P, Λ) pair (softmax's, and linear
 * attention's with 1+elu and ReLU) and the fused causal linear kernel with those maps. Presets
 * reach these through their `encoder<P, Λ>` (simd_detail::kernel_encoding).
 *
 * The library and its users must see the same `xsimd::default_arch`: the target passes its arch
 * flags to its users (LRPE_SIMD_KERNELS_FLAGS); a user translation unit built for another arch
 * names other specialisations, and the link reports them as undefined instead of mixing arches.
 */
#pragma once

#include <lrpe/backend/simd/linear.hpp>
#include <lrpe/backend/simd/softmax.hpp>
#include <lrpe/lambda/complex_phase.hpp>
#include <lrpe/lambda/permutation_power.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/dft.hpp>
#include <lrpe/p/householder.hpp>
#include <lrpe/p/identity.hpp>
#include <lrpe/p/permutation.hpp>

// LRPE_SIMD_KERNELS_FOR(X, T, A): the list, each entry an X(declaration) with `template` first
// (X adds `extern` for the declarations, nothing for the library's definitions).
#define LRPE_SIMD_SCALAR_KERNELS(X, T, A)                                                                         \
  X(template void lrpe::backend::simd_detail::softmax_simd<T, A, lrpe::backend::simd_detail::no_bias>(           \
      const lrpe::backend::softmax_problem<T>&, const lrpe::matrix_view<const T>&, const lrpe::matrix_view<const T>&, \
      T, T, const lrpe::backend::simd_detail::no_bias&, lrpe::backend::simd_detail::resources);)                  \
  X(template void lrpe::backend::simd_detail::linear_simd<T, A>(const lrpe::backend::linear_problem<T>&,         \
                                                                lrpe::linear_attention_state<T>*,                \
                                                                lrpe::backend::simd_workspace&);)

#define LRPE_SIMD_FEATURES(X, T, A, E, PHI)                                                                         \
  X(template void lrpe::backend::simd_detail::features<A, T, E, PHI>(const E&, const PHI&,                           \
                                                                     const lrpe::matrix_view<const T>&,              \
                                                                     const lrpe::positions&, lrpe::canonical::side, \
                                                                     const lrpe::matrix_view<T>&);)

#define LRPE_SIMD_FUSED(X, T, A, E, PHI)                                                                           \
  X(template bool lrpe::backend::simd_detail::linear_fused<T, A, E, PHI>(                                         \
      const E&, const PHI&, const lrpe::backend::linear_problem<T>&, lrpe::linear_attention_state<T>*,             \
      lrpe::backend::simd_workspace&);)

#define LRPE_SIMD_ENCODING_KERNELS(X, T, A, E)                          \
  LRPE_SIMD_FEATURES(X, T, A, E, lrpe::feature_maps::identity)         \
  LRPE_SIMD_FEATURES(X, T, A, E, lrpe::feature_maps::elu_plus_one)     \
  LRPE_SIMD_FEATURES(X, T, A, E, lrpe::feature_maps::relu)             \
  LRPE_SIMD_FUSED(X, T, A, E, lrpe::feature_maps::elu_plus_one)        \
  LRPE_SIMD_FUSED(X, T, A, E, lrpe::feature_maps::relu)

namespace lrpe {
inline namespace v0 {
namespace backend::simd_detail::precompiled {
// The in-library (P, Λ) pairs of Types 1-8, RoPE (both pairings) and PermuteFormer, one name
// each (a macro argument cannot hold the comma of encoder<P, Λ>).
template <class T> using householder_rotation = encoder<p::householder<T>, lambda::rotation<T>>;
template <class T> using householder_power = encoder<p::householder<T>, lambda::permutation_power<T>>;
template <class T> using odd_even_rotation = encoder<p::odd_even<T>, lambda::rotation<T>>;
template <class T> using odd_even_power = encoder<p::odd_even<T>, lambda::permutation_power<T>>;
template <class T> using dft_phase = encoder<p::dft<T>, lambda::complex_phase<T>>;
template <class T> using identity_rotation = encoder<p::identity<T>, lambda::rotation<T>>;
template <class T> using identity_power = encoder<p::identity<T>, lambda::permutation_power<T>>;
}  // namespace backend::simd_detail::precompiled
}  // namespace v0
}  // namespace lrpe

#define LRPE_SIMD_PAIR(name, T) lrpe::backend::simd_detail::precompiled::name<T>
#define LRPE_SIMD_KERNELS_FOR(X, T, A)                                                     \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, lrpe::no_encoding)                                    \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, LRPE_SIMD_PAIR(householder_rotation, T))              \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, LRPE_SIMD_PAIR(householder_power, T))                 \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, LRPE_SIMD_PAIR(odd_even_rotation, T))                 \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, LRPE_SIMD_PAIR(odd_even_power, T))                    \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, LRPE_SIMD_PAIR(dft_phase, T))                         \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, LRPE_SIMD_PAIR(identity_rotation, T))                 \
  LRPE_SIMD_ENCODING_KERNELS(X, T, A, LRPE_SIMD_PAIR(identity_power, T))

#define LRPE_SIMD_ALL_KERNELS(X, A)          \
  LRPE_SIMD_SCALAR_KERNELS(X, float, A)      \
  LRPE_SIMD_SCALAR_KERNELS(X, double, A)     \
  LRPE_SIMD_KERNELS_FOR(X, float, A)

#define LRPE_SIMD_EXTERN(...) extern __VA_ARGS__
#define LRPE_SIMD_DEFINE(...) __VA_ARGS__

#if defined(LRPE_SIMD_PRECOMPILED) && !defined(LRPE_SIMD_BUILDING_KERNELS)
LRPE_SIMD_ALL_KERNELS(LRPE_SIMD_EXTERN, xsimd::default_arch)
#endif
