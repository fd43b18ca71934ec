// SPDX-License-Identifier: MIT
// Compile-time probe of a typical user translation unit: <lrpe/simd.hpp>, one RoPE softmax call
// and one causal linear call with a type1 encoder, on the SIMD backend (issue 37's probe).
#include <lrpe/simd.hpp>

#include <iostream>

int main() {
  const lrpe::index_t n = 128, d = 64;
  lrpe::row_matrix<float> q = lrpe::row_matrix<float>::Random(n, d), k = lrpe::row_matrix<float>::Random(n, d),
                          v = lrpe::row_matrix<float>::Random(n, d), out(n, d);
  lrpe::softmax_options<> causal;
  causal.causal = true;
  lrpe::softmax_attention(q, k, v, out, lrpe::rope_neox<float>(d), causal, lrpe::backend::simd<>{});
  float sum = out.sum();
  lrpe::linear_options lin;
  lin.causal = true;
  lrpe::linear_attention(q, k, v, out, lrpe::type1<float>(d), lrpe::feature_maps::elu_plus_one{}, lin,
                         lrpe::backend::simd<>{});
  std::cout << sum + out.sum() << '\n';
}
