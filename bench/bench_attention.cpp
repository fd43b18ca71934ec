// SPDX-License-Identifier: MIT
// Attention time vs sequence length (d = 64, 8 heads, float, reference backend):
// - softmax attention (causal, LRPE Type 1): O(n²) time, O(n) extra memory — the counter
//   `bytes_alloc` counts every byte allocated during one call (malloc interposed on glibc), and
//   `bytes_per_token` = bytes_alloc / n stays flat as n grows (the encoded Q and K, O(n·d));
// - linear attention (causal, chunked, LRPE Type 1): O(n) time — the counter `t2n_over_tn`
//   is t(n)/t(n/2) measured inside the run (≈ 2 for linear scaling, ≈ 4 for quadratic).
#include <lrpe/lrpe.hpp>

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <vector>

namespace {
constinit std::atomic<std::size_t> g_allocated{0};
}  // namespace

// Count every heap byte: Eigen allocates with std::malloc, the rest with operator new. On glibc,
// interpose malloc itself (operator new calls it); elsewhere count operator new only (Eigen's
// buffers are then missed).
#if defined(__GLIBC__)
extern "C" void* __libc_malloc(std::size_t);
extern "C" void* malloc(std::size_t size) {
  g_allocated.fetch_add(size, std::memory_order_relaxed);
  return __libc_malloc(size);
}
#else
// GCC flags free() on memory from a (replaced) operator new; the pairing is correct here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) {
  g_allocated.fetch_add(size, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace {
using T = float;
constexpr lrpe::index_t heads = 8, d = 64;

struct inputs {
  std::vector<T> q, k, v, out;
  explicit inputs(lrpe::index_t n) : q(n * heads * d), k(q.size()), v(q.size()), out(q.size()) {
    lrpe::generator g(1);
    for (auto* b : {&q, &k, &v})
      for (auto& x : *b) x = static_cast<T>(g.normal());
  }
  auto view(std::vector<T>& b, lrpe::index_t n) { return lrpe::bnsh(b.data(), 1, heads, n, d); }
};

void run_linear(inputs& in, lrpe::index_t n, const lrpe::type1<T>& enc) {
  lrpe::linear_attention(in.view(in.q, n), in.view(in.k, n), in.view(in.v, n), in.view(in.out, n), enc,
                         lrpe::feature_maps::elu_plus_one{}, lrpe::linear_options{.causal = true, .chunk = 64});
}

void bm_softmax(benchmark::State& state) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  inputs in(n);
  const lrpe::type1<T> enc(d);
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::size_t before = g_allocated.load();
    lrpe::softmax_attention(in.view(in.q, n), in.view(in.k, n), in.view(in.v, n), in.view(in.out, n), enc,
                            lrpe::softmax_options<>{.causal = true});
    bytes = g_allocated.load() - before;
    benchmark::DoNotOptimize(in.out.data());
  }
  state.counters["bytes_alloc"] = static_cast<double>(bytes);
  state.counters["bytes_per_token"] = static_cast<double>(bytes) / static_cast<double>(n);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

void bm_linear(benchmark::State& state) {
  const auto n = static_cast<lrpe::index_t>(state.range(0));
  inputs in(n);
  const lrpe::type1<T> enc(d);
  double ratio = 0;
  for (auto _ : state) {
    run_linear(in, n, enc);
    benchmark::DoNotOptimize(in.out.data());
  }
  {  // t(n) / t(n/2), timed here so that the counter is self-contained
    auto time = [&](lrpe::index_t m) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < 3; ++r) run_linear(in, m, enc);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    ratio = time(n) / time(n / 2);
  }
  const std::size_t before = g_allocated.load();
  run_linear(in, n, enc);
  state.counters["bytes_per_token"] = static_cast<double>(g_allocated.load() - before) / static_cast<double>(n);
  state.counters["t2n_over_tn"] = ratio;
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
}  // namespace

BENCHMARK(bm_softmax)->RangeMultiplier(2)->Range(256, 16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(bm_linear)->RangeMultiplier(2)->Range(256, 16384)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
