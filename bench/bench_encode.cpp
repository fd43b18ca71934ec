// SPDX-License-Identifier: MIT
// Encode throughput of every preset (reference backend), float, n ∈ {512, 4096, 32768},
// d ∈ {64, 128}, reported as GB/s of rows read + written (bytes_per_second), beside two peers in
// the same run:
// - `eigen_gemm`: Y = X·Mᵀ with ONE precomputed dense M (what a user with Eigen would write if M_s
//   did not depend on s — a lower bound on any dense approach, which needs a different M_s per row);
// - `copy`: a plain memcpy of the same bytes, the memory-bandwidth ceiling.
// Also `dft_dense` vs `dft_fft`: the two methods of p::dft, which set dft<T>::dense_limit.
// Run by hand: build/release/bench/bench_encode --benchmark_counters_tabular=true
#include <lrpe/lrpe.hpp>

#include <benchmark/benchmark.h>

#include <cstring>

namespace {

template <class E>
void encode(benchmark::State& state) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  const auto d = static_cast<lrpe::index_t>(state.range(1));
  const E enc(d);
  const lrpe::row_matrix<float> x = lrpe::row_matrix<float>::Random(n, d);
  lrpe::row_matrix<float> out(n, enc.feature_dim());
  for (auto _ : state) {
    enc.encode(lrpe::view(x), 0, lrpe::view(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * (d + enc.feature_dim()) * static_cast<int64_t>(sizeof(float)));
}

void eigen_gemm(benchmark::State& state) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  const auto d = static_cast<lrpe::index_t>(state.range(1));
  const lrpe::row_matrix<float> x = lrpe::row_matrix<float>::Random(n, d);
  const Eigen::MatrixXf m = lrpe::type1<float>(d).transform_matrix(3);
  lrpe::row_matrix<float> out(n, d);
  for (auto _ : state) {
    out.noalias() = x * m.transpose();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * d * static_cast<int64_t>(sizeof(float)));
}

void copy(benchmark::State& state) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  const auto d = static_cast<lrpe::index_t>(state.range(1));
  const lrpe::row_matrix<float> x = lrpe::row_matrix<float>::Random(n, d);
  lrpe::row_matrix<float> out(n, d);
  for (auto _ : state) {
    std::memcpy(out.data(), x.data(), sizeof(float) * static_cast<std::size_t>(n * d));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * d * static_cast<int64_t>(sizeof(float)));
}

template <lrpe::p::dft_method M>
void dft_apply(benchmark::State& state) {
  const auto d = static_cast<lrpe::index_t>(state.range(0));
  const lrpe::p::dft<float> p(d, M);
  const lrpe::row_matrix<float> x = lrpe::row_matrix<float>::Random(1, d);
  std::vector<std::complex<float>> y(static_cast<std::size_t>(d));
  for (auto _ : state) {
    p.apply(x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations());
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {512, 4096, 32768})
    for (int64_t d : {64, 128}) b->Args({n, d});
  b->ArgNames({"n", "d"})->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(copy)->Apply(shapes);
BENCHMARK(eigen_gemm)->Apply(shapes);
BENCHMARK(encode<lrpe::type1<float>>)->Name("type1")->Apply(shapes);
BENCHMARK(encode<lrpe::type2<float>>)->Name("type2")->Apply(shapes);
BENCHMARK(encode<lrpe::type3<float>>)->Name("type3")->Apply(shapes);
BENCHMARK(encode<lrpe::type4<float>>)->Name("type4")->Apply(shapes);
BENCHMARK(encode<lrpe::type5<float>>)->Name("type5")->Apply(shapes);
BENCHMARK(encode<lrpe::type6<float>>)->Name("type6")->Apply(shapes);
BENCHMARK(encode<lrpe::type7<float>>)->Name("type7")->Apply(shapes);
BENCHMARK(encode<lrpe::type8<float>>)->Name("type8")->Apply(shapes);
BENCHMARK(encode<lrpe::rope_gptj<float>>)->Name("rope_gptj")->Apply(shapes);
BENCHMARK(encode<lrpe::rope_neox<float>>)->Name("rope_neox")->Apply(shapes);
BENCHMARK(encode<lrpe::permuteformer<float>>)->Name("permuteformer")->Apply(shapes);
BENCHMARK(dft_apply<lrpe::p::dft_method::dense>)->Name("dft_dense")->RangeMultiplier(2)->Range(8, 256);
BENCHMARK(dft_apply<lrpe::p::dft_method::fft>)->Name("dft_fft")->RangeMultiplier(2)->Range(8, 256);

BENCHMARK_MAIN();
