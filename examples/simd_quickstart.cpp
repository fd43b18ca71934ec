// SPDX-License-Identifier: MIT
// The SIMD encoder and SIMD attention snippets of docs/backends.md and docs/howto-pick-backend-and-isa.md,
// compiled and checked against the reference backend; the docs quote the blocks between the
// [name] markers. Built only with the lrpe::simd target. Returns non-zero if a check fails.
#include <lrpe/lrpe.hpp>
#include <lrpe/simd.hpp>

#include <cstdint>
#include <cstdio>

int main() {
  using T = float;
  using matrix = lrpe::row_matrix<T>;
  const lrpe::index_t n = 300, heads = 4, d = 64;
  lrpe::generator g(11);
  auto random = [&](lrpe::index_t r, lrpe::index_t c) {
    matrix m(r, c);
    for (auto& x : m.reshaped()) x = static_cast<T>(g.normal());
    return m;
  };
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%-64s %s\n", what, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };

  const matrix x = random(n, d), q = random(heads * n, d), k = random(heads * n, d);
  matrix out(n, d), q_enc(heads * n, d), k_enc(heads * n, d);
  const matrix x_new = random(1, d);  // one more token
  matrix out_new(1, d);
  // batch 1, `heads` heads, [batch, heads, seq, dim] (BNSH) views of the same storage
  const auto q_heads = lrpe::bnsh<const T>(q.data(), 1, heads, n, d);
  const auto k_heads = lrpe::bnsh<const T>(k.data(), 1, heads, n, d);
  const auto q_out = lrpe::bnsh(q_enc.data(), 1, heads, n, d);
  const auto k_out = lrpe::bnsh(k_enc.data(), 1, heads, n, d);

  // [simd-encode]
  const lrpe::rope_neox<float> rope(64);
  // one n×d block (same result as rope.encode(x, pos, out)):
  lrpe::encode(lrpe::backend::simd<>{}, rope, lrpe::view(x), /*offset*/ 0, lrpe::view(out));
  // Q and K of every (batch, head) in one call, cos/sin shared:
  lrpe::encode_qk(lrpe::backend::simd<>{}, rope, q_heads, /*q_pos*/ 0, k_heads, /*k_pos*/ 0, q_out, k_out);
  // steady state, no allocation per call: build the kernels once
  lrpe::simd_encoder<lrpe::rope_neox<float>> fast(rope);
  fast.set_stream_threshold(SIZE_MAX);  // never bypass the cache (default: outputs ≥ 16 MiB do)
  fast.encode_qk(q_heads, 0, k_heads, 0, q_out, k_out);
  // a few rows per call (decode steps): nothing tabulated at construction, each row's angles by
  // a vectorised sincos (the default builds cos/sin tables for runs of 64 positions)
  lrpe::simd_encoder<lrpe::rope_neox<float>> step(rope, lrpe::position_tables::direct);
  step.encode(lrpe::view(x_new), /*position*/ n, lrpe::view(out_new));
  // [simd-encode]
  expect((out - rope.encode(x, 0)).cwiseAbs().maxCoeff() <= 1e-5f, "simd encode == reference encode");
  expect((out_new - rope.encode(x_new, n)).cwiseAbs().maxCoeff() <= 1e-5f, "simd encode, direct tables == reference");
  const matrix head2 = rope.encode(q.middleRows(2 * n, n), 0);
  expect((q_enc.middleRows(2 * n, n) - head2).cwiseAbs().maxCoeff() <= 1e-5f, "simd encode_qk head 2 == reference");

  const matrix v = random(n, d);
  matrix o_simd(n, d), o_pool(n, d), o_ref(n, d), l_pool(n, d), l_ref(n, d);
  const lrpe::type1<T> enc(d);
  const lrpe::softmax_options<> options{.causal = true};
  lrpe::linear_options lin_options;
  lin_options.causal = true;
  const lrpe::feature_maps::elu_plus_one phi;
  const auto qs = q.topRows(n), ks = k.topRows(n);  // one head

  // [simd-attention]
  lrpe::softmax_attention(qs, ks, v, o_simd, enc, options, lrpe::backend::simd<>{});

  lrpe::backend::simd_threads pool(2);  // caller-owned: 1 worker + the caller
  lrpe::backend::simd_workspace ws;     // caller-owned scratch (optional)
  lrpe::linear_attention(qs, ks, v, l_pool, enc, phi, lin_options, lrpe::backend::simd_policy<>{&pool});
  lrpe::softmax_attention(qs, ks, v, o_pool, enc, options, lrpe::backend::simd_policy<>{nullptr, &ws});
  // [simd-attention]
  lrpe::softmax_attention(qs, ks, v, o_ref, enc, options);
  lrpe::linear_attention(qs, ks, v, l_ref, enc, phi, lin_options);
  const auto close = [](const matrix& a, const matrix& b) {
    return (a - b).cwiseAbs().maxCoeff() <= 2e-5f * (1 + b.cwiseAbs().maxCoeff());
  };
  expect(close(o_simd, o_ref) && close(o_pool, o_ref), "simd softmax (thread-local and caller workspace) == reference");
  expect(close(l_pool, l_ref), "simd linear on a 2-thread pool == reference");
  return failures == 0 ? 0 : 1;
}
