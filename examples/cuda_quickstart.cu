// SPDX-License-Identifier: MIT
// The snippet of docs/cuda.md ("Using it"), compiled by nvcc with lrpe::cuda. On a GPU every call
// of the snippet is checked against the CPU library on the same bf16-rounded inputs: each output
// is the fp32 result rounded once to bf16, so max |gpu − cpu| ≤ 2^-8 · max |cpu| plus the fp32
// difference (bound 2^-8 + 1e-5; an H200 measured 1.9e-3 to 3.3e-3); without a device it prints
// "[lrpe-skip] ..." and exits 0. Returns non-zero if a check fails.
#include <lrpe/cuda.cuh>  // the CPU library + lrpe::cuda; #error outside nvcc / without lrpe::cuda

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace {

using lrpe::index_t;
using bf16 = __nv_bfloat16;

/// The docs' block: every call on the same raw Q, K, V (the in-place encode comes last).
void snippet(bf16* q_ptr, bf16* k_ptr, bf16* v_ptr, bf16* o_lrpe_ptr, bf16* o_alibi_ptr, bf16* o_linear_ptr,
             index_t B, index_t N, index_t H, lrpe::position_t n_past, cudaStream_t stream) {
  // [cuda-snippet]
  const lrpe::type1<float> cpu_encoder(128);              // any preset, on the host
  const lrpe::cuda::device_encoder enc(cpu_encoder);      // its parameters copied to the device

  // Q, K, V and the outputs: [batch, seq, heads, 128] bf16 in device memory
  auto q = lrpe::cuda::bsnh(q_ptr, B, N, H, 128);
  auto k = lrpe::cuda::bsnh(k_ptr, B, N, H, 128);
  auto v = lrpe::cuda::bsnh(v_ptr, B, N, H, 128);
  auto o_lrpe = lrpe::cuda::bsnh(o_lrpe_ptr, B, N, H, 128);
  auto o_alibi = lrpe::cuda::bsnh(o_alibi_ptr, B, N, H, 128);
  auto o_linear = lrpe::cuda::bsnh(o_linear_ptr, B, N, H, 128);

  // flash-style softmax attention, LRPE applied while Q/K tiles are loaded
  lrpe::cuda::softmax_attention<bf16>(q, k, v, o_lrpe, enc, nullptr, {.causal = true}, stream);

  // ALiBi / T5 / Toeplitz bias instead of an encoder
  const lrpe::cuda::device_bias alibi(lrpe::canonical::alibi<float>::for_heads(128, H));
  lrpe::cuda::softmax_attention<bf16>(q, k, v, o_alibi, lrpe::no_encoding{}, &alibi, {.causal = true}, stream);

  // linear attention, causal, per-head decay, φ = 1 + elu
  const double decays[] = {1.0, 0.99, 0.9, 0.5};
  lrpe::cuda::linear_options lo{.causal = true, .head_decays = decays};
  lrpe::cuda::linear_attention<bf16>(q, k, v, o_linear, enc, lrpe::feature_maps::elu_plus_one{}, lo, stream);

  // or Q and K encoded once, in place, in one fused launch (e.g. into a KV cache at n_past)
  lrpe::cuda::encode<bf16>(enc, q, lrpe::cuda::offset_positions(n_past), q,
                           k, lrpe::cuda::offset_positions(n_past), k, stream);
  // [cuda-snippet]
}

/// max |got − want| over max |want| (0 when want is all zero and got equals it).
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return scale > 0 ? err / scale : err;
}

std::vector<float> widen(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  std::transform(x.begin(), x.end(), y.begin(), [](bf16 b) { return __bfloat162float(b); });
  return y;
}

}  // namespace

int main() {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    std::printf("[lrpe-skip] no CUDA device (cudaGetDeviceCount: %s, count %d)\n", cudaGetErrorString(e), count);
    return 0;
  }
  constexpr index_t B = 1, N = 96, H = 4, d = 128;
  constexpr lrpe::position_t n_past = 5;
  const auto size = static_cast<std::size_t>(B * N * H * d);
  lrpe::generator g(7);
  std::vector<bf16> hq(size), hk(size), hv(size);
  for (auto* x : {&hq, &hk, &hv})
    for (auto& e : *x) e = __float2bfloat16_rn(static_cast<float>(g.normal()));
  lrpe::cuda::device_buffer<bf16> q(hq), k(hk), v(hv), o1(size), o2(size), o3(size);
  cudaStream_t stream = nullptr;
  snippet(q.data(), k.data(), v.data(), o1.data(), o2.data(), o3.data(), B, N, H, n_past, stream);
  LRPE_CUDA_CHECK(cudaStreamSynchronize(stream));

  // The CPU library on the same (bf16-rounded) inputs, as float.
  const std::vector<float> fq = widen(hq), fk = widen(hk), fv = widen(hv);
  const auto cq = lrpe::bsnh<const float>(fq.data(), B, N, H, d), ck = lrpe::bsnh<const float>(fk.data(), B, N, H, d);
  const auto cv = lrpe::bsnh<const float>(fv.data(), B, N, H, d);
  const lrpe::type1<float> cpu_encoder(128);
  std::vector<float> want(size);
  const auto out = lrpe::bsnh(want.data(), B, N, H, d);
  int failures = 0;
  constexpr double bound = 0x1p-8 + 1e-5;  // one bf16 rounding of each output, plus fp32's difference
  const auto expect = [&](const char* what, const std::vector<float>& got) {
    const double err = relative_error(got, want);
    const bool ok = err <= bound;
    std::printf("%-52s relative error %.3g (bound %.3g) %s\n", what, err, bound, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };
  lrpe::softmax_attention(cq, ck, cv, out, cpu_encoder, lrpe::softmax_options<>{.causal = true});
  expect("softmax attention with Type 1 (LRPE in the tile loads)", widen(o1.download()));
  lrpe::softmax_attention(cq, ck, cv, out, lrpe::canonical::alibi<float>::for_heads(d, H),
                          lrpe::softmax_options<>{.causal = true});
  expect("softmax attention with ALiBi", widen(o2.download()));
  const std::vector<double> decays = {1.0, 0.99, 0.9, 0.5};
  lrpe::linear_attention(cq, ck, cv, out, cpu_encoder, lrpe::feature_maps::elu_plus_one{},
                         lrpe::linear_options{.causal = true, .head_decays = decays});
  expect("causal linear attention, 1+elu, per-head decay", widen(o3.download()));
  for (const auto* side : {&fq, &fk}) {
    const auto x = lrpe::bsnh<const float>(side->data(), B, N, H, d);
    for (index_t h = 0; h < H; ++h) cpu_encoder.encode(x.head(0, h), n_past, out.head(0, h));
    expect(side == &fq ? "in-place encode of Q at n_past" : "in-place encode of K at n_past",
           widen((side == &fq ? q : k).download()));
  }
  return failures == 0 ? 0 : 1;
}
