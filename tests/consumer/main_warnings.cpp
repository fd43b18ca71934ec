// SPDX-License-Identifier: MIT
// lrpe's headers, compiled by a user who asks for every warning: this translation unit is built
// with -Wall -Wextra -Wshadow -Werror (and -march=native where the compiler takes it, so that
// the AVX-512 or AVX2 paths are instantiated), with lrpe's include directory NOT a system one.
// It instantiates the common entry points on both CPU backends; it passes when it compiles, and
// its run checks that the SIMD results agree with the reference.
#include <lrpe/lrpe.hpp>
#if defined(LRPE_HAS_SIMD)
#  include <lrpe/simd.hpp>
#endif

#include <cstdio>

namespace {

template <class T, class Backend>
int run(Backend backend, const char* name) {
  using matrix = lrpe::row_matrix<T>;
  const lrpe::index_t n = 37, d = 32;
  const matrix q = matrix::Random(n, d), k = matrix::Random(n, d), v = matrix::Random(n, d);
  matrix soft(n, d), lin(n, d), enc_out(n, d), soft_ref(n, d), lin_ref(n, d);
  const lrpe::rope_neox<T> rope(d);
  const lrpe::type1<T> type1(d);
  const lrpe::type8<T> type8(d);
  lrpe::softmax_attention(q, k, v, soft, rope, lrpe::softmax_options<>{.causal = true}, backend);
  lrpe::softmax_attention(q, k, v, soft, lrpe::canonical::alibi<T>::for_heads(d, 4).head(1),
                          lrpe::softmax_options<>{.causal = true}, backend);
  lrpe::linear_attention(q, k, v, lin, type1, lrpe::feature_maps::elu_plus_one{},
                         lrpe::linear_options{.causal = true, .decay = 0.9}, backend);
  lrpe::linear_attention(q, k, v, lin, type8, lrpe::feature_maps::relu{}, lrpe::linear_options{}, backend);
  lrpe::encode(backend, rope, lrpe::view(q), 3, lrpe::view(enc_out));
  // the last calls once more on the reference backend
  lrpe::softmax_attention(q, k, v, soft_ref, lrpe::canonical::alibi<T>::for_heads(d, 4).head(1),
                          lrpe::softmax_options<>{.causal = true});
  lrpe::linear_attention(q, k, v, lin_ref, type8, lrpe::feature_maps::relu{}, lrpe::linear_options{});
  const matrix enc_ref = rope.encode(q, 3);
  const double err = std::max({(soft - soft_ref).cwiseAbs().maxCoeff(), (lin - lin_ref).cwiseAbs().maxCoeff(),
                               (enc_out - enc_ref).cwiseAbs().maxCoeff()});
  std::printf("%-9s %-6s max |backend - reference| = %g\n", name, sizeof(T) == 4 ? "float" : "double", err);
  return err <= (sizeof(T) == 4 ? 1e-4 : 1e-10) ? 0 : 1;
}

}  // namespace

int main() {
  int failures = run<float>(lrpe::backend::reference{}, "reference") + run<double>(lrpe::backend::reference{}, "reference");
#if defined(LRPE_HAS_SIMD)
  failures += run<float>(lrpe::backend::simd<>{}, "simd") + run<double>(lrpe::backend::simd<>{}, "simd");
#endif
  return failures == 0 ? 0 : 1;
}
