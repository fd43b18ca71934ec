// SPDX-License-Identifier: MIT
// lrpe::simd_kernels: a translation unit that links the precompiled SIMD kernels (extern
// template declarations, src/simd_kernels.cpp) gets the results of the reference backend, for
// every preset and each listed feature map, in float and double. The kernels it runs are the
// library's (the link fails if a declared one is missing); the double encoders are not listed
// and are instantiated here, as with the header-only target.
#include "../attention_helpers.hpp"

#include <doctest/doctest.h>

#include <lrpe/simd.hpp>

#ifndef LRPE_SIMD_PRECOMPILED
#error "test_simd_kernels must link lrpe::simd_kernels (which defines LRPE_SIMD_PRECOMPILED)"
#endif

namespace {

using attention_test::kernel_vs_kernel;
using attention_test::random_matrix;
using attention_test::rm;
using lrpe::index_t;

template <class T>
double rel_diff(const rm<T>& a, const rm<T>& b) {
  return static_cast<double>((a - b).cwiseAbs().maxCoeff()) / (1.0 + static_cast<double>(b.cwiseAbs().maxCoeff()));
}

/// Softmax (causal) and linear attention (causal, fused in the kernel, and non-causal) on the
/// precompiled SIMD kernels against the reference backend, at positions from 1000 on.
template <class T, class E, class Phi>
void check_encoding(const E& enc, const Phi& phi, index_t n, index_t d, const char* name) {
  INFO(name << ", n = " << n);
  lrpe::generator g(17);
  const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, d);
  rm<T> out(n, d), ref(n, d);
  lrpe::softmax_options<> so;
  so.causal = true;
  so.q_positions = so.k_positions = lrpe::positions(1000);
  lrpe::softmax_attention(q, k, v, out, enc, so, lrpe::backend::simd<>{});
  lrpe::softmax_attention(q, k, v, ref, enc, so);
  CHECK(rel_diff(out, ref) <= kernel_vs_kernel<T>());
  for (const bool causal : {true, false}) {
    lrpe::linear_options lo;
    lo.causal = causal;
    lo.norm = lrpe::normalisation::denominator;
    lo.q_positions = lo.k_positions = lrpe::positions(1000);
    lrpe::linear_attention(q, k, v, out, enc, phi, lo, lrpe::backend::simd<>{});
    lrpe::linear_attention(q, k, v, ref, enc, phi, lo);
    CHECK(rel_diff(out, ref) <= kernel_vs_kernel<T>());
  }
}

template <class T, class Phi>
void check_all(const Phi& phi) {
  const index_t d = 32;
  for (const index_t n : {5, 100}) {
    check_encoding<T>(lrpe::no_encoding{}, phi, n, d, "no_encoding");
    attention_test::for_each_preset<T>(d, [&](const auto& enc, const char* name) { check_encoding<T>(enc, phi, n, d, name); });
    // a preset as users name it (its kernels are its encoder<P, Λ>'s)
    check_encoding<T>(lrpe::rope_neox<T>(d), phi, n, d, "rope_neox (preset type)");
  }
}

}  // namespace

TEST_CASE_TEMPLATE("lrpe::simd_kernels: every preset, softmax and linear attention == the reference backend", T,
                   float, double) {
  check_all<T>(lrpe::feature_maps::elu_plus_one{});
  check_all<T>(lrpe::feature_maps::relu{});
}
