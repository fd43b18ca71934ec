// SPDX-License-Identifier: MIT
// Compile-time probe of a translation unit that runs every preset through the SIMD backend:
// encode, causal softmax and causal linear attention, float (issue 37's second probe).
#include <lrpe/simd.hpp>

#include <iostream>

template <class E>
float run(const E& enc, lrpe::index_t n) {
  const lrpe::index_t d = enc.dim();
  lrpe::row_matrix<float> q = lrpe::row_matrix<float>::Random(n, d), k = lrpe::row_matrix<float>::Random(n, d),
                          v = lrpe::row_matrix<float>::Random(n, d), out(n, d), qe(n, enc.feature_dim());
  lrpe::encode(lrpe::backend::simd<>{}, enc, lrpe::view(q), lrpe::positions(0), lrpe::view(qe));
  lrpe::softmax_options<> causal;
  causal.causal = true;
  lrpe::softmax_attention(q, k, v, out, enc, causal, lrpe::backend::simd<>{});
  float sum = out.sum() + qe.sum();
  lrpe::linear_options lin;
  lin.causal = true;
  lrpe::linear_attention(q, k, v, out, enc, lrpe::feature_maps::elu_plus_one{}, lin, lrpe::backend::simd<>{});
  return sum + out.sum();
}

int main() {
  const lrpe::index_t d = 64, n = 64;
  float s = run(lrpe::type1<float>(d), n) + run(lrpe::type2<float>(d), n) + run(lrpe::type3<float>(d), n) +
            run(lrpe::type4<float>(d), n) + run(lrpe::type5<float>(d), n) + run(lrpe::type6<float>(d), n) +
            run(lrpe::type7<float>(d), n) + run(lrpe::type8<float>(d), n) + run(lrpe::rope_gptj<float>(d), n) +
            run(lrpe::rope_neox<float>(d), n) + run(lrpe::permuteformer<float>(d), n);
  std::cout << s << '\n';
}
