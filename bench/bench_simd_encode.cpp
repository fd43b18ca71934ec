// SPDX-License-Identifier: MIT
// SIMD encoders (backend::simd<>, compile-time arch) on the issue-6 shapes: batch 1, 8 heads,
// d = 64, fp32, Q and K encoded in one call (BNSH), n ∈ {512, 8192}; beside in-run anchors and the
// reference backend.
//
// Anchors (measured first, in the same run; the best run of each is kept as the ceiling):
// - `anchor/copy_stream`: memcpy of 256 MiB into another 256 MiB (STREAM-like copy);
// - `anchor/copy_l3`: memcpy of 2 MiB into 2 MiB (4 MiB footprint, L3-resident on this machine).
// Every kernel reports GB/s of bytes read + written (inputs once, outputs once) and `frac` = that
// over the matching anchor (STREAM copy for n = 8192, L3 copy for n = 512), `ms` per call, and
// `minflt` = minor page faults per call (getrusage; 0 means no first-touch of fresh pages).
// `dispatch/*` runs the same kernel through runtime dispatch (xsimd::dispatch over per-arch
// translation units built by cmake/lrpeSimdDispatch.cmake) when the build provides them.
//
// Run by hand (Release): bench_simd_encode --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true
#include <lrpe/lrpe.hpp>
#include <lrpe/backend/simd/encode.hpp>
#include <lrpe/backend/simd/encode_storage.hpp>

#include "dispatch/simd_encode_dispatch.hpp"

#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr lrpe::index_t heads = 8, dim = 64;

double g_stream_bw = 0;  // bytes/s, best anchor run
double g_l3_bw = 0;

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/// Times `body` per iteration (manual time) and reports GB/s, frac of the anchor, ms, minflt.
template <class Body>
void timed(benchmark::State& state, double bytes, double anchor_bw, Body&& body) {
  body();  // warm-up: first touch of outputs, kernel caches
  double total = 0;
  const long f0 = minor_faults();
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    body();
    const auto t1 = clock_type::now();
    const double s = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  const long f1 = minor_faults();
  const double iters = static_cast<double>(state.iterations());
  const double bw = bytes * iters / total;
  state.counters["GB/s"] = bw / 1e9;
  state.counters["ms"] = 1e3 * total / iters;
  state.counters["minflt"] = static_cast<double>(f1 - f0) / iters;
  if (anchor_bw > 0) state.counters["frac"] = bw / anchor_bw;
}

void copy_anchor(benchmark::State& state, std::size_t bytes, double& best) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double total = 0;
  std::memcpy(dst.data(), src.data(), bytes);
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
    const auto t1 = clock_type::now();
    const double s = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  const double bw = 2.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations()) / total;
  best = std::max(best, bw);
  state.counters["GB/s"] = bw / 1e9;
}

void anchor_copy_stream(benchmark::State& state) { copy_anchor(state, 256u << 20, g_stream_bw); }
void anchor_copy_l3(benchmark::State& state) { copy_anchor(state, 2u << 20, g_l3_bw); }

double anchor_for(lrpe::index_t n) { return n >= 4096 ? g_stream_bw : g_l3_bw; }

/// Q and K (BNSH, batch 1) with their outputs.
struct qk_data {
  lrpe::row_matrix<float> q, k, qo, ko;
  qk_data(lrpe::index_t n, lrpe::index_t f, lrpe::index_t d = dim)
      : q(lrpe::row_matrix<float>::Random(heads * n, d)),
        k(lrpe::row_matrix<float>::Random(heads * n, d)),
        qo(lrpe::row_matrix<float>::Zero(heads * n, f)),
        ko(lrpe::row_matrix<float>::Zero(heads * n, f)) {}
  double bytes() const {
    return static_cast<double>(sizeof(float)) * static_cast<double>(q.size() + k.size() + qo.size() + ko.size());
  }
};

/// [batch, heads, seq, dim] (PyTorch's attention layout) or [batch, seq, heads, dim] (a QKV
/// projection's output, llama.cpp's and HF's layout before the transpose).
/// `bsnh_to_bnsh`: inputs BSNH, outputs BNSH (a transposed view of a QKV buffer encoded into
/// new tensors).
enum class layout { bnsh, bsnh, bsnh_to_bnsh };

template <class E, class Backend>
void encode_qk_bench(benchmark::State& state, const E& enc, Backend, layout lay = layout::bnsh) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  qk_data m(n, enc.feature_dim(), enc.dim());
  const auto hv = [&](auto* data, lrpe::index_t w, bool out) {
    return lay == layout::bnsh || (out && lay == layout::bsnh_to_bnsh) ? lrpe::bnsh(data, 1, heads, n, w)
                                                                       : lrpe::bsnh(data, 1, n, heads, w);
  };
  const auto qv = hv(static_cast<const float*>(m.q.data()), enc.dim(), false);
  const auto kv = hv(static_cast<const float*>(m.k.data()), enc.dim(), false);
  const auto qo = hv(m.qo.data(), enc.feature_dim(), true);
  const auto ko = hv(m.ko.data(), enc.feature_dim(), true);
  if constexpr (std::is_same_v<Backend, lrpe::backend::reference>) {
    timed(state, m.bytes(), anchor_for(n), [&] {
      lrpe::encode_qk(lrpe::backend::reference{}, enc, qv, 0, kv, 0, qo, ko);
      benchmark::ClobberMemory();
    });
  } else {
    const lrpe::simd_encoder<E> se(enc);  // kernels built once: steady-state calls
    timed(state, m.bytes(), anchor_for(n), [&] {
      se.encode_qk(qv, 0, kv, 0, qo, ko);
      benchmark::ClobberMemory();
    });
  }
}

using simd = lrpe::backend::simd<>;
using reference = lrpe::backend::reference;

void rope_interleaved(benchmark::State& s) { encode_qk_bench(s, lrpe::rope_gptj<float>(dim), simd{}); }
void rope_split_half(benchmark::State& s) { encode_qk_bench(s, lrpe::rope_neox<float>(dim), simd{}); }
void householder_only(benchmark::State& s) {
  encode_qk_bench(s, lrpe::encoder(lrpe::p::householder<float>::seeded(dim, 1), lrpe::lambda::identity<float>(dim)), simd{});
}
void permutation_only(benchmark::State& s) {
  encode_qk_bench(s, lrpe::encoder(lrpe::p::permutation<float>::seeded(dim, 1), lrpe::lambda::identity<float>(dim)), simd{});
}
void permutation_power(benchmark::State& s) { encode_qk_bench(s, lrpe::permuteformer<float>(dim), simd{}); }
void fused_householder_rotation_type1(benchmark::State& s) { encode_qk_bench(s, lrpe::type1<float>(dim), simd{}); }
void fused_odd_even_rotation_type5(benchmark::State& s) { encode_qk_bench(s, lrpe::type5<float>(dim), simd{}); }
void fused_householder_perm_power_type4(benchmark::State& s) { encode_qk_bench(s, lrpe::type4<float>(dim), simd{}); }
void fused_odd_even_perm_power_type7(benchmark::State& s) { encode_qk_bench(s, lrpe::type7<float>(dim), simd{}); }
void lrpe_cosine(benchmark::State& s) {
  encode_qk_bench(s, lrpe::encoder(lrpe::p::identity<float>(dim), lrpe::lambda::complex_phase<float>(dim)), simd{});
}
void dft_phase_type8(benchmark::State& s) { encode_qk_bench(s, lrpe::type8<float>(dim), simd{}); }
void reference_rope_interleaved(benchmark::State& s) { encode_qk_bench(s, lrpe::rope_gptj<float>(dim), reference{}); }
void reference_type1(benchmark::State& s) { encode_qk_bench(s, lrpe::type1<float>(dim), reference{}); }
void reference_type8(benchmark::State& s) { encode_qk_bench(s, lrpe::type8<float>(dim), reference{}); }
// Other head widths of Type 8: the per-row FFT (d = 128) and the across-rows FFT (d = 256).
void dft_phase_type8_d128(benchmark::State& s) { encode_qk_bench(s, lrpe::type8<float>(128), simd{}); }
void dft_phase_type8_d256(benchmark::State& s) { encode_qk_bench(s, lrpe::type8<float>(256), simd{}); }
void reference_type8_d128(benchmark::State& s) { encode_qk_bench(s, lrpe::type8<float>(128), reference{}); }
void reference_type8_d256(benchmark::State& s) { encode_qk_bench(s, lrpe::type8<float>(256), reference{}); }

/// The encoder backward of Q and K (issue 38): dQ, dK from the gradients of the encoded Q and K,
/// and with `theta` the frequencies' gradient too (reading Q and K as well). Bytes: the
/// gradients read, dQ and dK written (and Q, K read with θ).
template <class E, class Backend>
void backward_qk_bench(benchmark::State& state, const E& enc, Backend backend, bool theta) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  qk_data m(n, enc.feature_dim(), enc.dim());  // q, k: the rows; qo, ko: their gradients
  lrpe::row_matrix<float> dq = lrpe::row_matrix<float>::Zero(heads * n, dim), dk = dq;
  const auto hv = [&](const float* p) { return lrpe::bnsh(p, 1, heads, n, dim); };
  auto grad = enc.make_gradient();
  const double bytes = m.bytes() / 2 * (theta ? 3 : 2);
  timed(state, bytes, anchor_for(n), [&] {
    lrpe::encode_qk_backward(backend, enc, hv(m.q.data()), 0, hv(m.k.data()), 0, hv(m.qo.data()), hv(m.ko.data()),
                             lrpe::bnsh(dq.data(), 1, heads, n, dim), lrpe::bnsh(dk.data(), 1, heads, n, dim),
                             theta ? &grad : nullptr);
    benchmark::ClobberMemory();
  });
}
void backward_rope_split_half(benchmark::State& s) { backward_qk_bench(s, lrpe::rope_neox<float>(dim), simd{}, false); }
void backward_rope_split_half_theta(benchmark::State& s) {
  backward_qk_bench(s, lrpe::rope_neox<float>(dim), simd{}, true);
}
void backward_rope_interleaved_theta(benchmark::State& s) {
  backward_qk_bench(s, lrpe::rope_gptj<float>(dim), simd{}, true);
}
void reference_backward_rope_split_half_theta(benchmark::State& s) {
  backward_qk_bench(s, lrpe::rope_neox<float>(dim), reference{}, true);
}

// BSNH: the heads of a position are adjacent in memory.
void rope_interleaved_bsnh(benchmark::State& s) { encode_qk_bench(s, lrpe::rope_gptj<float>(dim), simd{}, layout::bsnh); }
void permutation_power_bsnh(benchmark::State& s) {
  encode_qk_bench(s, lrpe::permuteformer<float>(dim), simd{}, layout::bsnh);
}
void fused_householder_rotation_type1_bsnh(benchmark::State& s) {
  encode_qk_bench(s, lrpe::type1<float>(dim), simd{}, layout::bsnh);
}
void lrpe_cosine_bsnh(benchmark::State& s) {
  encode_qk_bench(s, lrpe::encoder(lrpe::p::identity<float>(dim), lrpe::lambda::complex_phase<float>(dim)), simd{},
                  layout::bsnh);
}
void dft_phase_type8_bsnh(benchmark::State& s) { encode_qk_bench(s, lrpe::type8<float>(dim), simd{}, layout::bsnh); }
void rope_interleaved_bsnh_to_bnsh(benchmark::State& s) {
  encode_qk_bench(s, lrpe::rope_gptj<float>(dim), simd{}, layout::bsnh_to_bnsh);
}
void permutation_power_bsnh_to_bnsh(benchmark::State& s) {
  encode_qk_bench(s, lrpe::permuteformer<float>(dim), simd{}, layout::bsnh_to_bnsh);
}
void reference_rope_interleaved_bsnh(benchmark::State& s) {
  encode_qk_bench(s, lrpe::rope_gptj<float>(dim), reference{}, layout::bsnh);
}

void dispatch_rope_split_half(benchmark::State& state) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  const lrpe::rope_neox<float> enc(dim);
  qk_data m(n, dim);
  state.SetLabel(lrpe_bench::dispatch_arch_name());
  timed(state, m.bytes(), anchor_for(n), [&] {
    lrpe_bench::dispatch_rope_neox_qk(enc, m.q.data(), m.k.data(), m.qo.data(), m.ko.data(), heads, n);
    benchmark::ClobberMemory();
  });
}

/// Q and K rows (2·heads·n × d, one block of rows) stored as S, RoPE (split-half pairing) on the
/// SIMD tag through `lrpe::encode` (16 bits: widened, encoded and rounded by blocks; float: the
/// one-shot call on the same rows, set-up included as for 16 bits).
template <class S>
void rope_split_half_storage(benchmark::State& state) {
  const auto rows = 2 * heads * static_cast<lrpe::index_t>(state.range(0));
  lrpe::row_matrix<S> x(rows, dim), out(rows, dim);
  lrpe::generator g(5);
  for (lrpe::index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<S>(static_cast<float>(g.normal()));
  const lrpe::rope_neox<float> rope(dim);
  const double bytes = 2.0 * static_cast<double>(x.size()) * sizeof(S);
  timed(state, bytes, bytes >= double(16u << 20) ? g_stream_bw : g_l3_bw, [&] {
    lrpe::encode(simd{}, rope, lrpe::view(std::as_const(x)), 0, lrpe::view(out));
    benchmark::ClobberMemory();
  });
}
/// Q and K (8 heads each, BSNH or BNSH) stored as S, RoPE (split-half) through `lrpe::encode_qk` on
/// the SIMD tag into new tensors of S: the shape of an engine's 16-bit Q and K before attention
/// (one table per block of positions, shared by the heads and by Q and K). Float: the same call.
template <class S>
void rope_split_half_qk_storage(benchmark::State& state, layout lay) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  lrpe::row_matrix<S> q(heads * n, dim), k(heads * n, dim), qo(heads * n, dim), ko(heads * n, dim);
  lrpe::generator g(6);
  for (auto* x : {&q, &k})
    for (lrpe::index_t i = 0; i < x->size(); ++i) x->data()[i] = static_cast<S>(static_cast<float>(g.normal()));
  const auto hv = [&](auto* data) {
    return lay == layout::bnsh ? lrpe::bnsh(data, 1, heads, n, dim) : lrpe::bsnh(data, 1, n, heads, dim);
  };
  const lrpe::rope_neox<float> rope(dim);
  const double bytes = 4.0 * static_cast<double>(q.size()) * sizeof(S);
  timed(state, bytes, bytes >= double(16u << 20) ? g_stream_bw : g_l3_bw, [&] {
    lrpe::encode_qk(simd{}, rope, hv(static_cast<const S*>(q.data())), 0, hv(static_cast<const S*>(k.data())), 0,
                    hv(qo.data()), hv(ko.data()));
    benchmark::ClobberMemory();
  });
}
void rope_split_half_qk_bfloat16(benchmark::State& s) { rope_split_half_qk_storage<lrpe::bfloat16>(s, layout::bnsh); }
void rope_split_half_qk_half(benchmark::State& s) { rope_split_half_qk_storage<lrpe::half>(s, layout::bnsh); }
void rope_split_half_qk_bfloat16_bsnh(benchmark::State& s) {
  rope_split_half_qk_storage<lrpe::bfloat16>(s, layout::bsnh);
}
void rope_split_half_qk_float_bsnh(benchmark::State& s) { rope_split_half_qk_storage<float>(s, layout::bsnh); }

void rope_split_half_float_rows(benchmark::State& s) { rope_split_half_storage<float>(s); }
void rope_split_half_bfloat16_rows(benchmark::State& s) { rope_split_half_storage<lrpe::bfloat16>(s); }
void rope_split_half_half_rows(benchmark::State& s) { rope_split_half_storage<lrpe::half>(s); }

}  // namespace

BENCHMARK(anchor_copy_stream)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(anchor_copy_l3)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.5);
#define LRPE_QK(f) BENCHMARK(f)->Arg(8192)->Arg(512)->UseManualTime()->Unit(benchmark::kMicrosecond)
LRPE_QK(rope_interleaved);
LRPE_QK(rope_split_half);
LRPE_QK(householder_only);
LRPE_QK(permutation_only);
LRPE_QK(permutation_power);
LRPE_QK(fused_householder_rotation_type1);
LRPE_QK(fused_odd_even_rotation_type5);
LRPE_QK(fused_householder_perm_power_type4);
LRPE_QK(fused_odd_even_perm_power_type7);
LRPE_QK(lrpe_cosine);
LRPE_QK(dft_phase_type8);
LRPE_QK(reference_rope_interleaved);
LRPE_QK(reference_type1);
LRPE_QK(reference_type8);
LRPE_QK(dispatch_rope_split_half);
LRPE_QK(rope_interleaved_bsnh);
LRPE_QK(permutation_power_bsnh);
LRPE_QK(fused_householder_rotation_type1_bsnh);
LRPE_QK(lrpe_cosine_bsnh);
LRPE_QK(dft_phase_type8_bsnh);
LRPE_QK(rope_interleaved_bsnh_to_bnsh);
LRPE_QK(permutation_power_bsnh_to_bnsh);
LRPE_QK(reference_rope_interleaved_bsnh);
LRPE_QK(backward_rope_split_half);
LRPE_QK(backward_rope_split_half_theta);
LRPE_QK(backward_rope_interleaved_theta);
LRPE_QK(reference_backward_rope_split_half_theta);
#define LRPE_QK_WIDE(f) BENCHMARK(f)->Arg(2048)->Arg(512)->UseManualTime()->Unit(benchmark::kMicrosecond)
LRPE_QK_WIDE(dft_phase_type8_d128);
LRPE_QK_WIDE(dft_phase_type8_d256);
LRPE_QK_WIDE(reference_type8_d128);
LRPE_QK_WIDE(reference_type8_d256);
LRPE_QK(rope_split_half_float_rows);
LRPE_QK(rope_split_half_bfloat16_rows);
LRPE_QK(rope_split_half_half_rows);
LRPE_QK(rope_split_half_qk_bfloat16);
LRPE_QK(rope_split_half_qk_half);
LRPE_QK(rope_split_half_qk_bfloat16_bsnh);
LRPE_QK(rope_split_half_qk_float_bsnh);

BENCHMARK_MAIN();
