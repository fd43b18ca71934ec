// SPDX-License-Identifier: MIT
// SIMD softmax and linear attention vs this machine's limits and peers, in one run.
//
// Shapes (issue 6): batch 1, 8 heads, d = 64, fp32, n ∈ {512, 2048, 4096, 8192} (+16384 for
// softmax memory scaling), 1 and 2 threads.
//
// Anchors, measured first in the same run: `anchor_fma` (independent FMA chains: 16 on AVX-512,
// 12 on AVX2/FMA or SSE, where 16 would spill), on 1 and 2 threads; `anchor_copy_stream`
// (2×256 MiB memcpy); `anchor_copy_l3` (4 MiB → 4 MiB). Every kernel reports `GFLOPs` (useful
// flops: 4·n²·d per head for softmax, half of it (n(n+1)/2 pairs) causal; 4·n·d² for linear)
// and `frac_peak` = GFLOPs / the FMA anchor with the same thread count. Google Benchmark's times
// are means over a repetition's calls; `t_call_median` (seconds) is the median single call, the
// statistic of the peers' scripts, and `frac_peak_call` its fraction of the anchor's median call.
//
// Memory discipline: every kernel runs once before timing (steady state), then reports
// `minflt_per_call` (getrusage minor page faults per call) and `big_allocs_per_call` (heap
// allocations > 64 KiB per call: malloc, aligned_alloc and posix_memalign interposed on glibc).
//
// Peers in the same run: the reference backend, and plain Eigen attention (S = QKᵀ, row softmax,
// SV into preallocated matrices). PyTorch: bench/torch_peer.py. Tables: bench/summary.py.
#include <lrpe/simd.hpp>

#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace {
constinit std::atomic<std::size_t> g_big_allocs{0};
}  // namespace

#if defined(__GLIBC__)
// malloc and the aligned allocations (the kernels' workspaces use aligned_alloc, aligned
// operator new uses aligned_alloc or posix_memalign), each counted when over 64 KiB.
extern "C" void* __libc_malloc(std::size_t);
extern "C" void* __libc_memalign(std::size_t, std::size_t);
extern "C" void* malloc(std::size_t size) {
  if (size > 64 * 1024) g_big_allocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) {
  if (size > 64 * 1024) g_big_allocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, size);
}
extern "C" int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  if (size > 64 * 1024) g_big_allocs.fetch_add(1, std::memory_order_relaxed);
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr && size != 0) return ENOMEM;
  *out = p;
  return 0;
}
#endif

namespace {
using T = float;
using lrpe::index_t;
constexpr index_t heads = 8, d = 64;

double g_fma_peak[3] = {0, 0, 0};       // GFLOP/s with 1 and 2 threads (index = threads), mean
double g_fma_peak_call[3] = {0, 0, 0};  // the same from the median single call
double g_copy_stream = 0, g_copy_l3 = 0;  // GB/s (bytes read + written) of the copy anchors

// ------------------------------------------------------------------------------ anchors

// Independent FMA chains, as many as the register file holds with the two constant operands:
// 16 of 32 zmm registers on AVX-512, 12 of 16 ymm (xmm) registers otherwise (16 chains there
// would spill, and the anchor read ~60 % of the real peak on an AVX2 host). Either covers the
// FMA latency × 2 ports of current x86 cores (8–10 in flight).
double fma_loop(long iters) {
#if defined(__AVX512F__)
  using V = __m512;
  const auto set = [](float x) { return _mm512_set1_ps(x); };
  const auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  const auto add = [](V a, V b) { return _mm512_add_ps(a, b); };
  constexpr int lanes = 16, chains = 16;
#elif defined(__FMA__)
  using V = __m256;
  const auto set = [](float x) { return _mm256_set1_ps(x); };
  const auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  const auto add = [](V a, V b) { return _mm256_add_ps(a, b); };
  constexpr int lanes = 8, chains = 12;
#else
  using V = __m128;
  const auto set = [](float x) { return _mm_set1_ps(x); };
  const auto fma = [](V a, V b, V c) { return _mm_add_ps(_mm_mul_ps(a, b), c); };
  const auto add = [](V a, V b) { return _mm_add_ps(a, b); };
  constexpr int lanes = 4, chains = 12;
#endif
  V a[chains];
#pragma GCC unroll 16
  for (int k = 0; k < chains; ++k) a[k] = set(1.f + 0.1f * static_cast<float>(k));
  const V b = set(0.9999999f), c = set(1e-7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < chains; ++k) a[k] = fma(a[k], b, c);
  }
  V s = a[0];
#pragma GCC unroll 16
  for (int k = 1; k < chains; ++k) s = add(s, a[k]);
  benchmark::DoNotOptimize(s);
  return chains * 2.0 * lanes * static_cast<double>(iters);  // flops
}

void anchor_fma(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr long iters = 20'000'000;
  double flops = 0, per_call = 0;
  std::vector<double> call_secs;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const auto tc = std::chrono::steady_clock::now();
    std::vector<std::thread> extra;
    for (int t = 1; t < threads; ++t) extra.emplace_back([] { fma_loop(iters); });
    per_call = fma_loop(iters) * threads;
    for (auto& t : extra) t.join();
    flops += per_call;
    call_secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - tc).count());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g_fma_peak[threads] = flops / secs * 1e-9;  // the anchor of every later kernel with this many threads
  std::ranges::sort(call_secs);
  const std::size_t m = call_secs.size();
  const double median = m % 2 != 0 ? call_secs[m / 2] : 0.5 * (call_secs[m / 2 - 1] + call_secs[m / 2]);
  g_fma_peak_call[threads] = per_call / median * 1e-9;
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  state.counters["GFLOPs_call_median"] = g_fma_peak_call[threads];
}

void anchor_copy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(2.0 * static_cast<double>(bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int reps = 4;
  for (int r = 0; r < reps; ++r) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (bytes > (64u << 20) ? g_copy_stream : g_copy_l3) = 2.0 * static_cast<double>(bytes) * reps / secs * 1e-9;  // the anchor of later kernels
}

// ------------------------------------------------------------------------------ inputs

/// Buffers 64-byte aligned, as PyTorch's CPU allocator gives its tensors (and as the encode
/// bench's Eigen matrices are on AVX-512): a std::vector of 1 MiB or more comes from mmap 16
/// bytes into a page, so that every vector of a row straddles two cache lines. On the Xeon host
/// that offset cost linear attention ~8 % at n = 8192 (non-causal, 12.7 against 11.5–11.9 ms).
template <class U>
struct aligned64 {
  using value_type = U;
  aligned64() = default;
  template <class V>
  aligned64(const aligned64<V>&) noexcept {}
  U* allocate(std::size_t n) { return static_cast<U*>(::operator new(n * sizeof(U), std::align_val_t{64})); }
  void deallocate(U* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
  template <class V>
  bool operator==(const aligned64<V>&) const noexcept { return true; }
};
template <class U>
using buffer = std::vector<U, aligned64<U>>;

struct inputs {
  index_t n;
  buffer<T> q, k, v, out;
  explicit inputs(index_t n_) : n(n_), q(static_cast<std::size_t>(n * heads * d)), k(q.size()), v(q.size()), out(q.size()) {
    lrpe::generator g(1);
    for (auto* b : {&q, &k, &v})
      for (auto& x : *b) x = static_cast<T>(g.normal());
  }
  auto view(buffer<T>& b) { return lrpe::bnsh(b.data(), 1, heads, n, d); }
};

long minflt() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Per-call wall times of the running benchmark, for `t_call_median`: the statistic the peers'
// scripts report (the median of single calls), so that ratios against them compare alike.
// Google Benchmark's own times are means over each repetition's calls, in which one preempted
// call counts in full. A fixed array (touched before the page-fault count starts): the first
// `call_log_size` calls of a repetition are logged, which is every call of the slow kernels.
constexpr std::size_t call_log_size = 1 << 14;
double g_call_log[call_log_size];

/// The median of the first `calls` entries of the call log (reorders them).
double call_log_median(std::size_t calls) {
  const std::size_t m = std::min(calls, call_log_size);
  if (m == 0) return 0;
  double* mid = g_call_log + m / 2;
  std::nth_element(g_call_log, mid, g_call_log + m);
  if (m % 2 != 0) return *mid;
  return 0.5 * (*mid + *std::max_element(g_call_log, mid));
}

/// Times `call` (after one untimed warm-up call) and sets the common counters; returns the
/// seconds per call (the repetition's mean). `t_call_median` is the median single call in
/// seconds, `frac_peak_call` its fraction of the FMA anchor's own median call.
template <class F>
double run_timed(benchmark::State& state, double flops_per_call, int threads, F&& call) {
  call();  // steady state: workspaces sized, pages touched
  std::fill(std::begin(g_call_log), std::end(g_call_log), 0.0);
  std::size_t logged = 0;
  const long f0 = minflt();
  const std::size_t a0 = g_big_allocs.load();
  const auto t0 = std::chrono::steady_clock::now();
  auto tc = t0;
  for (auto _ : state) {
    call();
    benchmark::ClobberMemory();
    const auto now = std::chrono::steady_clock::now();
    if (logged < call_log_size) g_call_log[logged++] = std::chrono::duration<double>(now - tc).count();
    tc = now;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double calls = static_cast<double>(state.iterations());
  const double median = call_log_median(logged);
  state.counters["minflt_per_call"] = static_cast<double>(minflt() - f0) / calls;
  state.counters["big_allocs_per_call"] = static_cast<double>(g_big_allocs.load() - a0) / calls;
  state.counters["GFLOPs"] = benchmark::Counter(flops_per_call * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
  state.counters["t_call_median"] = median;
  const double peak = g_fma_peak[threads], peak_call = g_fma_peak_call[threads];
  if (peak > 0) state.counters["frac_peak"] = flops_per_call * calls / secs * 1e-9 / peak;
  if (peak_call > 0 && median > 0) state.counters["frac_peak_call"] = flops_per_call / median * 1e-9 / peak_call;
  return secs / calls;
}

/// The median of `calls` timed calls of f, after one untimed call (the backward benches' forward).
template <class F>
double median_call_seconds(F&& f, int calls) {
  f();
  std::vector<double> t;
  for (int r = 0; r < calls; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::ranges::sort(t);
  return t[t.size() / 2];
}

double softmax_flops(index_t n, bool causal) {
  const double pairs = causal ? 0.5 * static_cast<double>(n) * static_cast<double>(n + 1)
                              : static_cast<double>(n) * static_cast<double>(n);
  return 4.0 * pairs * d * heads;
}
double linear_flops(index_t n) { return 4.0 * static_cast<double>(n) * d * d * heads; }

// ------------------------------------------------------------------------------ softmax

void softmax_simd(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool causal = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  inputs in(n);
  lrpe::backend::simd_threads pool(threads);
  const lrpe::backend::simd_policy<> policy{&pool};
  run_timed(state, softmax_flops(n, causal), threads, [&] {
    lrpe::softmax_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), lrpe::no_encoding{},
                            lrpe::softmax_options<>{.causal = causal}, policy);
  });
}

// Backward (issue 38): dQ, dK, dV of 8 heads from the forward's log-sum-exps, FlashAttention-2's
// algorithm; `GFLOPs` counts its five n²·d products (2.5 × the forward's useful flops), and
// `x_forward` is the call's time over the forward's (`softmax_attention_lse`, the median of 5
// calls measured first in the same benchmark). Arg 2 = 0: the reference backend.
void softmax_backward(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool causal = state.range(1) != 0;
  const bool simd = state.range(2) != 0;
  inputs in(n);
  buffer<T> d_out(in.q.size()), dq(in.q.size()), dk(in.q.size()), dv(in.q.size());
  lrpe::generator g(2);
  for (auto& x : d_out) x = static_cast<T>(g.normal());
  std::vector<T> lse(static_cast<std::size_t>(heads * n));
  const lrpe::softmax_options<> opt{.causal = causal};
  const auto forward = [&] {
    lrpe::softmax_attention_lse(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), std::span<T>(lse),
                                lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
  };
  const double t_forward = median_call_seconds(forward, 5);
  const auto backward = [&](auto backend) {
    lrpe::softmax_attention_backward(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), in.view(d_out),
                                     std::span<const T>(lse), in.view(dq), in.view(dk), in.view(dv), lrpe::no_encoding{},
                                     opt, {}, backend);
  };
  const double secs = run_timed(state, 2.5 * softmax_flops(n, causal), 1, [&] {
    if (simd) backward(lrpe::backend::simd<>{});
    else backward(lrpe::backend::reference{});
  });
  state.counters["x_forward"] = secs / t_forward;
}

// Causal linear attention backward (issue 38): dQ, dK, dV of 8 heads (one call per head),
// identity features, no encoding, no normalisation, chunk 64, as `linear_simd`; `x_forward` =
// its time over the multi-head forward's (the median of 5 calls measured first in the same
// benchmark); `GFLOPs` counts 3 × the forward's useful flops. Arg 1 = 0: the reference backend.
void linear_backward(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool simd = state.range(1) != 0;
  inputs in(n);
  buffer<T> d_out(in.q.size()), dq(in.q.size()), dk(in.q.size()), dv(in.q.size());
  lrpe::generator g(3);
  for (auto& x : d_out) x = static_cast<T>(g.normal());
  const lrpe::linear_options opt{.causal = true, .chunk = 64};
  const lrpe::feature_maps::identity phi;
  const auto forward = [&] {
    lrpe::linear_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), lrpe::no_encoding{}, phi, opt,
                           lrpe::backend::simd<>{});
  };
  const double t_forward = median_call_seconds(forward, 5);
  const auto backward = [&](auto backend) {
    for (index_t h = 0; h < heads; ++h)
      lrpe::linear_attention_backward(in.view(in.q).head(0, h), in.view(in.k).head(0, h), in.view(in.v).head(0, h),
                                      in.view(d_out).head(0, h), in.view(dq).head(0, h), in.view(dk).head(0, h),
                                      in.view(dv).head(0, h), lrpe::no_encoding{}, phi, opt, nullptr, backend);
  };
  const double secs = run_timed(state, 3 * linear_flops(n), 1, [&] {
    if (simd) backward(lrpe::backend::simd<>{});
    else backward(lrpe::backend::reference{});
  });
  state.counters["x_forward"] = secs / t_forward;
}

// A learned decay: the causal linear backward of `linear_backward` with λ = 0.99 (the forward
// for `x_forward` likewise), arg 1 = 1 with dL/dλ of every head (options.decay_gradient: by
// chunks, backend/simd/linear_decay_gradient.hpp), 0 without.
void linear_backward_decay(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool gradient = state.range(1) != 0;
  inputs in(n);
  buffer<T> d_out(in.q.size()), dq(in.q.size()), dk(in.q.size()), dv(in.q.size());
  lrpe::generator g(3);
  for (auto& x : d_out) x = static_cast<T>(g.normal());
  lrpe::linear_options opt{.causal = true, .chunk = 64, .decay = 0.99};
  const lrpe::feature_maps::identity phi;
  const double t_forward = median_call_seconds(
      [&] {
        lrpe::linear_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), lrpe::no_encoding{}, phi,
                               opt, lrpe::backend::simd<>{});
      },
      5);
  double dl[heads] = {};
  const double secs = run_timed(state, 3 * linear_flops(n), 1, [&] {
    for (index_t h = 0; h < heads; ++h) {
      opt.decay_gradient = gradient ? &dl[h] : nullptr;
      lrpe::linear_attention_backward(in.view(in.q).head(0, h), in.view(in.k).head(0, h), in.view(in.v).head(0, h),
                                      in.view(d_out).head(0, h), in.view(dq).head(0, h), in.view(dk).head(0, h),
                                      in.view(dv).head(0, h), lrpe::no_encoding{}, phi, opt, nullptr,
                                      lrpe::backend::simd<>{});
    }
  });
  state.counters["x_forward"] = secs / t_forward;
  benchmark::DoNotOptimize(dl);
}

// Decode: one query row per head (position n − 1, causal) over a KV cache of n keys, 8 heads in
// one multi-head call: arg 1 = 0 the reference backend, 1 the SIMD backend (its direct kernel:
// K and V read once, unpacked). Memory-bound: `GBps` = the K and V bytes read per second,
// `frac_copy` = GBps / the copy anchor whose size matches (L3 for caches of ≤ 16 MiB, else
// STREAM; the anchors count bytes read and written).
/// Softmax attention with the options of inference engines (docs/attention.md#attention-options),
/// causal, 8 heads, d = 64, on one thread: kind 0 plain, 1 softcap 30, 2 a sink per head, 3 both,
/// 4 a window of `range(2)` keys (GFLOPS over the visible pairs only: a window's cost per visible
/// pair against the plain call's).
void softmax_options_cost(benchmark::State& state) {
  const index_t n = state.range(0);
  const int kind = static_cast<int>(state.range(1));
  const index_t window = state.range(2);
  inputs in(n);
  lrpe::softmax_options<> opt{.causal = true};
  if (kind == 1 || kind == 3) opt.softcap = 30;
  static const std::vector<double> sinks{0.5, -0.25, 1.0, 0.0, 2.0, -1.0, 0.75, 0.1};
  if (kind == 2 || kind == 3) opt.head_sinks = sinks;
  if (kind == 4) opt.window = window;
  double pairs = 0;  // visible (query, key) pairs
  for (index_t s = 0; s < n; ++s) pairs += static_cast<double>(kind == 4 ? std::min(s + 1, window) : s + 1);
  run_timed(state, 4.0 * pairs * d * heads, 1, [&] {
    lrpe::softmax_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), lrpe::no_encoding{}, opt,
                            lrpe::backend::simd<>{});
  });
}

/// One decode step over n cached keys with a window of `range(1)` keys (0: none): the time
/// follows the window, not n.
void softmax_decode_window(benchmark::State& state) {
  const index_t n = state.range(0), window = state.range(1);
  inputs in(n);
  const auto row = [](auto view) {
    view.data += (view.seq - 1) * view.seq_stride;
    view.seq = 1;
    return view;
  };
  lrpe::softmax_options<> opt{.causal = true, .q_positions = n - 1};
  opt.window = window;
  const index_t read = window > 0 ? std::min(n, window) : n;
  const double per_call = run_timed(state, 4.0 * static_cast<double>(read) * d * heads, 1, [&] {
    lrpe::softmax_attention(row(in.view(in.q)), in.view(in.k), in.view(in.v), row(in.view(in.out)),
                            lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
  });
  const double kv_bytes = 2.0 * static_cast<double>(read) * d * heads * sizeof(T);
  state.counters["GBps"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double anchor = kv_bytes <= double(16u << 20) ? g_copy_l3 : g_copy_stream;
  if (anchor > 0) state.counters["frac_copy"] = kv_bytes / per_call * 1e-9 / anchor;
}

/// One decode step of one head (one query row, d = 64) over n cached keys on a pool of
/// `range(1)` threads: with more threads than row groups the keys are split across them
/// (split-KV) and the parts merged.
void softmax_decode_split(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  inputs in(n);
  lrpe::backend::simd_threads pool(threads);
  const lrpe::backend::simd_policy<> policy{&pool};
  const auto q = in.view(in.q).head(0, 0), k = in.view(in.k).head(0, 0), v = in.view(in.v).head(0, 0);
  const auto out = in.view(in.out).head(0, 0);
  const lrpe::softmax_options<> opt{.causal = true, .q_positions = n - 1};
  const lrpe::matrix_view<const T> row(q.row(n - 1), 1, d, q.row_stride);
  const lrpe::matrix_view<T> out_row(out.row(n - 1), 1, d, out.row_stride);
  const double per_call = run_timed(state, 4.0 * static_cast<double>(n) * d, threads, [&] {
    lrpe::softmax_attention(row, lrpe::matrix_view<const T>(k), lrpe::matrix_view<const T>(v), out_row,
                            lrpe::no_encoding{}, opt, policy);
  });
  const double kv_bytes = 2.0 * static_cast<double>(n) * d * sizeof(T);
  state.counters["GBps"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double anchor = kv_bytes <= double(16u << 20) ? g_copy_l3 : g_copy_stream;
  if (anchor > 0) state.counters["frac_copy"] = kv_bytes / per_call * 1e-9 / anchor;
}

/// A decode step's K and V for 8 KV heads (d = 128): RoPE on the keys and both written into a
/// cache of 4096 rows at n_past (`lrpe::append_kv`, SIMD encoder).
void append_kv_step(benchmark::State& state) {
  constexpr index_t kv_heads = 8, dk = 128, capacity = 4096;
  std::vector<T> kn(kv_heads * dk, T(0.5)), vn(kv_heads * dk, T(0.25));
  std::vector<T> kc(static_cast<std::size_t>(kv_heads * capacity * dk)), vc(kc.size());
  const lrpe::rope_neox<T> rope(dk, 5e5);
  const auto k_new = lrpe::bnsh(static_cast<const T*>(kn.data()), 1, kv_heads, 1, dk);
  const auto v_new = lrpe::bnsh(static_cast<const T*>(vn.data()), 1, kv_heads, 1, dk);
  const auto k_cache = lrpe::bnsh(kc.data(), 1, kv_heads, capacity, dk);
  const auto v_cache = lrpe::bnsh(vc.data(), 1, kv_heads, capacity, dk);
  index_t n_past = 1000;
  for (auto _ : state) {
    if (state.range(0) != 0) lrpe::append_kv(k_new, v_new, k_cache, v_cache, n_past, rope, std::nullopt, lrpe::backend::simd<>{});
    else lrpe::append_kv(k_new, v_new, k_cache, v_cache, n_past, rope);
    n_past = n_past == capacity - 1 ? 1000 : n_past + 1;
    benchmark::ClobberMemory();
  }
}

void softmax_decode(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool simd = state.range(1) != 0;
  inputs in(n);
  const auto row = [](auto view) {  // the last row of every head
    view.data += (view.seq - 1) * view.seq_stride;
    view.seq = 1;
    return view;
  };
  const lrpe::softmax_options<> opt{.causal = true, .q_positions = n - 1};
  const auto call = [&] {
    if (simd) {
      lrpe::softmax_attention(row(in.view(in.q)), in.view(in.k), in.view(in.v), row(in.view(in.out)),
                              lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
    } else {
      lrpe::softmax_attention(row(in.view(in.q)), in.view(in.k), in.view(in.v), row(in.view(in.out)),
                              lrpe::no_encoding{}, opt);
    }
  };
  const double per_call = run_timed(state, 4.0 * static_cast<double>(n) * d * heads, 1, call);
  const double kv_bytes = 2.0 * static_cast<double>(n) * d * heads * sizeof(T);
  state.counters["GBps"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double anchor = kv_bytes <= double(16u << 20) ? g_copy_l3 : g_copy_stream;
  if (anchor > 0) state.counters["frac_copy"] = kv_bytes / per_call * 1e-9 / anchor;
}

// softmax_decode's step (SIMD) on a K/V cache stored in 16 bits: arg 1 = 1 bfloat16, 2 half.
// The kernel widens each K and V vector as it loads it; `GBps` and `frac_copy` count the 16-bit
// bytes read, the peer's F16 cache's count (bench/ggml_peer.sh --decode).
void softmax_decode_16bit(benchmark::State& state) {
  const index_t n = state.range(0);
  const auto run = [&]<class S>(S) {
    inputs in(n);
    buffer<S> k(in.k.size()), v(in.v.size());
    std::transform(in.k.begin(), in.k.end(), k.begin(), [](T x) { return static_cast<S>(x); });
    std::transform(in.v.begin(), in.v.end(), v.begin(), [](T x) { return static_cast<S>(x); });
    const auto q = lrpe::bnsh(static_cast<const T*>(in.q.data()), 1, heads, 1, d);
    const auto out = lrpe::bnsh(in.out.data(), 1, heads, 1, d);
    const auto kv = [&](const buffer<S>& b) { return lrpe::bnsh(b.data(), 1, heads, n, d); };
    const lrpe::softmax_options<> opt{.causal = true, .q_positions = n - 1};
    const double per_call = run_timed(state, 4.0 * static_cast<double>(n) * d * heads, 1, [&] {
      lrpe::softmax_attention(q, kv(k), kv(v), out, lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
    });
    const double kv_bytes = 2.0 * static_cast<double>(n) * d * heads * sizeof(S);
    state.counters["GBps"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    const double anchor = kv_bytes <= double(16u << 20) ? g_copy_l3 : g_copy_stream;
    if (anchor > 0) state.counters["frac_copy"] = kv_bytes / per_call * 1e-9 / anchor;
  };
  if (state.range(1) == 1) run(lrpe::bfloat16{});
  else run(lrpe::half{});
}

// The decode shape: 32 query heads over 8 K/V heads (GQA), d = 128, one row per head, a
// cache of n keys, 1 thread, SIMD. arg 1 = 0 a float cache, contiguous per head (bnsh);
// 1 bfloat16, contiguous; 2 bfloat16, paged (blocks of 16 rows, NHD, handed out in a shuffled
// order, read through the block table). `frac_copy` counts the cache's bytes.
void softmax_decode_gqa_16bit(benchmark::State& state) {
  constexpr index_t hq = 32, hkv = 8, dk = 128, block = 16;
  const index_t n = state.range(0);
  const int mode = static_cast<int>(state.range(1));
  lrpe::generator g(3);
  buffer<T> q(static_cast<std::size_t>(hq * dk)), out(q.size());
  for (auto& x : q) x = static_cast<T>(g.normal());
  const auto qv = lrpe::bnsh(static_cast<const T*>(q.data()), 1, hq, 1, dk);
  const auto ov = lrpe::bnsh(out.data(), 1, hq, 1, dk);
  const lrpe::softmax_options<> opt{.causal = true, .q_positions = n - 1};
  const auto fill = [&](auto& b) {
    for (auto& x : b) x = static_cast<std::remove_reference_t<decltype(x)>>(static_cast<T>(g.normal()));
  };
  double per_call = 0, kv_bytes = 0;
  if (mode == 0) {
    buffer<T> k(static_cast<std::size_t>(hkv * n * dk)), v(k.size());
    fill(k);
    fill(v);
    per_call = run_timed(state, 4.0 * static_cast<double>(n) * dk * hq, 1, [&] {
      lrpe::softmax_attention(qv, lrpe::bnsh(k.data(), 1, hkv, n, dk), lrpe::bnsh(v.data(), 1, hkv, n, dk), ov,
                              lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
    });
    kv_bytes = 2.0 * static_cast<double>(k.size()) * sizeof(T);
  } else if (mode == 1) {
    buffer<lrpe::bfloat16> k(static_cast<std::size_t>(hkv * n * dk)), v(k.size());
    fill(k);
    fill(v);
    per_call = run_timed(state, 4.0 * static_cast<double>(n) * dk * hq, 1, [&] {
      lrpe::softmax_attention(qv, lrpe::bnsh(k.data(), 1, hkv, n, dk), lrpe::bnsh(v.data(), 1, hkv, n, dk), ov,
                              lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
    });
    kv_bytes = 2.0 * static_cast<double>(k.size()) * sizeof(lrpe::bfloat16);
  } else {
    const index_t blocks = (n + block - 1) / block;
    buffer<lrpe::bfloat16> k(static_cast<std::size_t>(blocks * block * hkv * dk)), v(k.size());
    fill(k);
    fill(v);
    std::vector<std::int32_t> table(static_cast<std::size_t>(blocks));
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>(i);
    for (std::size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[g.next() % i]);
    const std::vector<index_t> lengths{n};
    const lrpe::block_tables tables{table, blocks, lengths};
    const auto kc = lrpe::paged_nhd(static_cast<const lrpe::bfloat16*>(k.data()), blocks, block, hkv, dk);
    const auto vc = lrpe::paged_nhd(static_cast<const lrpe::bfloat16*>(v.data()), blocks, block, hkv, dk);
    lrpe::softmax_options<> paged_opt;
    paged_opt.causal = true;
    per_call = run_timed(state, 4.0 * static_cast<double>(n) * dk * hq, 1, [&] {
      lrpe::softmax_attention_paged(qv, kc, vc, tables, ov, lrpe::no_encoding{}, paged_opt, lrpe::backend::simd<>{});
    });
    kv_bytes = 2.0 * static_cast<double>(n) * hkv * dk * sizeof(lrpe::bfloat16);
  }
  state.counters["GBps"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double anchor = kv_bytes <= double(16u << 20) ? g_copy_l3 : g_copy_stream;
  if (anchor > 0) state.counters["frac_copy"] = kv_bytes / per_call * 1e-9 / anchor;
}

// Decode with grouped K/V (GQA): 32 query heads, one row each, over 8 K/V heads of a cache of n
// keys, one multi-head call. arg 1 = 0 the reference backend, 1 the SIMD backend (each K/V
// head's 4 query heads become the rows of one direct-kernel call: the cache read once per K/V
// head), 2 the SIMD backend on K and V repeated to 32 heads (`repeat_kv`, what a caller without
// grouped K/V support passes; the repeat itself is not timed). `GBps` and `frac_copy` count
// the 8 K/V heads' bytes, as softmax_decode.
void softmax_decode_gqa(benchmark::State& state) {
  constexpr index_t q_heads = 4 * heads;
  const index_t n = state.range(0);
  const int mode = static_cast<int>(state.range(1));
  buffer<T> q(static_cast<std::size_t>(q_heads * d)), out(q.size());
  buffer<T> k(static_cast<std::size_t>(heads * n * d)), v(k.size());
  lrpe::generator g(2);
  for (auto* b : {&q, &k, &v})
    for (auto& x : *b) x = static_cast<T>(g.normal());
  buffer<T> k_rep, v_rep;  // mode 2: K/V head h / 4 copied to query head h
  if (mode == 2) {
    const auto per_head = static_cast<std::size_t>(n * d);
    k_rep.resize(q_heads * per_head);
    v_rep.resize(k_rep.size());
    for (index_t h = 0; h < q_heads; ++h) {
      const auto src = static_cast<std::size_t>(h / 4) * per_head, dst = static_cast<std::size_t>(h) * per_head;
      std::copy_n(k.begin() + src, per_head, k_rep.begin() + dst);
      std::copy_n(v.begin() + src, per_head, v_rep.begin() + dst);
    }
  }
  const auto qv = lrpe::bnsh(static_cast<const T*>(q.data()), 1, q_heads, 1, d);
  const auto ov = lrpe::bnsh(out.data(), 1, q_heads, 1, d);
  const auto kv_view = [&](const buffer<T>& b, index_t h) { return lrpe::bnsh(b.data(), 1, h, n, d); };
  const lrpe::softmax_options<> opt{.causal = true, .q_positions = n - 1};
  const auto call = [&] {
    if (mode == 0) {
      lrpe::softmax_attention(qv, kv_view(k, heads), kv_view(v, heads), ov, lrpe::no_encoding{}, opt);
    } else if (mode == 1) {
      lrpe::softmax_attention(qv, kv_view(k, heads), kv_view(v, heads), ov, lrpe::no_encoding{}, opt,
                              lrpe::backend::simd<>{});
    } else {
      lrpe::softmax_attention(qv, kv_view(k_rep, q_heads), kv_view(v_rep, q_heads), ov, lrpe::no_encoding{}, opt,
                              lrpe::backend::simd<>{});
    }
  };
  const double per_call = run_timed(state, 4.0 * static_cast<double>(n) * d * q_heads, 1, call);
  const double kv_bytes = 2.0 * static_cast<double>(n) * d * heads * sizeof(T);
  state.counters["GBps"] = benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double anchor = kv_bytes <= double(16u << 20) ? g_copy_l3 : g_copy_stream;
  if (anchor > 0) state.counters["frac_copy"] = kv_bytes / per_call * 1e-9 / anchor;
}

void softmax_simd_rope(benchmark::State& state) {  // end to end: encode Q and K (reference encoder path), then the kernel
  const index_t n = state.range(0);
  inputs in(n);
  const lrpe::rope_neox<T> enc(d);
  run_timed(state, softmax_flops(n, true), 1, [&] {
    lrpe::softmax_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), enc,
                            lrpe::softmax_options<>{.causal = true}, lrpe::backend::simd<>{});
  });
}

void softmax_simd_alibi(benchmark::State& state) {
  const index_t n = state.range(0);
  inputs in(n);
  const auto alibi = lrpe::canonical::alibi<T>::for_heads(d, heads);
  run_timed(state, softmax_flops(n, true), 1, [&] {
    lrpe::softmax_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), alibi,
                            lrpe::softmax_options<>{.causal = true}, lrpe::backend::simd<>{});
  });
}

void softmax_reference(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool causal = state.range(1) != 0;
  inputs in(n);
  run_timed(state, softmax_flops(n, causal), 1, [&] {
    lrpe::softmax_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), lrpe::no_encoding{},
                            lrpe::softmax_options<>{.causal = causal});
  });
}

/// What a user would write with Eigen: S = QKᵀ (noalias, no temporary), scale, row softmax, O = SV.
void softmax_eigen(benchmark::State& state) {
  const index_t n = state.range(0);
  inputs in(n);
  using M = lrpe::row_matrix<T>;
  using Map = Eigen::Map<M>;
  M s(n, n);
  const T scale = T(1) / std::sqrt(T(d));
  run_timed(state, softmax_flops(n, false), 1, [&] {
    for (index_t h = 0; h < heads; ++h) {
      const Map q(in.q.data() + h * n * d, n, d), k(in.k.data() + h * n * d, n, d), v(in.v.data() + h * n * d, n, d);
      Map o(in.out.data() + h * n * d, n, d);
      s.noalias() = q * k.transpose();
      s *= scale;
      for (index_t i = 0; i < n; ++i) {
        auto row = s.row(i);
        row = (row.array() - row.maxCoeff()).exp();
        row /= row.sum();
      }
      o.noalias() = s * v;
    }
  });
}

// ------------------------------------------------------------------------------ linear

void linear_simd(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool causal = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  inputs in(n);
  lrpe::backend::simd_threads pool(threads);
  const lrpe::backend::simd_policy<> policy{&pool};
  run_timed(state, linear_flops(n), threads, [&] {
    lrpe::linear_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), lrpe::no_encoding{},
                           lrpe::feature_maps::identity{}, lrpe::linear_options{.causal = causal, .chunk = 64}, policy);
  });
}

/// `linear_simd` with other head layouts, one thread: arg 2 = 0 BNSH with the heads n·d + 16
/// scalars apart (not a power of two of bytes), 1 BSNH (a position's heads adjacent). Against
/// `linear_simd`'s BNSH (heads n·d apart: 2 MiB at n = 8192), whether the step from n = 4096 to
/// 8192 on the Xeon host (bench/results/history.md) comes from the heads' power-of-two distance.
void linear_simd_layout(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool causal = state.range(1) != 0, bsnh = state.range(2) != 0;
  const index_t head_stride = n * d + 16;
  buffer<T> buf[4];
  lrpe::generator g(1);
  for (auto& b : buf) {
    b.resize(static_cast<std::size_t>(bsnh ? n * heads * d : heads * head_stride));
    for (auto& x : b) x = static_cast<T>(g.normal());
  }
  const auto view = [&](buffer<T>& b) {
    if (bsnh) return lrpe::bsnh(b.data(), 1, n, heads, d);
    return lrpe::heads_view<T>{b.data(), 1, heads, n, d, heads * head_stride, head_stride, d};
  };
  run_timed(state, linear_flops(n), 1, [&] {
    lrpe::linear_attention(view(buf[0]), view(buf[1]), view(buf[2]), view(buf[3]), lrpe::no_encoding{},
                           lrpe::feature_maps::identity{}, lrpe::linear_options{.causal = causal, .chunk = 64},
                           lrpe::backend::simd<>{});
  });
}

void linear_simd_rope(benchmark::State& state) {  // end to end: 1+elu then RoPE features (in the kernel), causal
  const index_t n = state.range(0);
  inputs in(n);
  const lrpe::rope_neox<T> enc(d);
  run_timed(state, linear_flops(n), 1, [&] {
    lrpe::linear_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), enc,
                           lrpe::feature_maps::elu_plus_one{}, lrpe::linear_options{.causal = true, .chunk = 64},
                           lrpe::backend::simd<>{});
  });
}

// The same computation with the features first, as the front end did before it fused them into
// the kernel (and as other linearizable encodings still run): φ and the SIMD encoder write Q̃ and
// K̃ of every head to memory, then the kernel reads them back.
void linear_simd_rope_features_first(benchmark::State& state) {
  const index_t n = state.range(0);
  inputs in(n);
  const lrpe::rope_neox<T> enc(d);
  buffer<T> qf(in.q.size()), kf(in.k.size());
  run_timed(state, linear_flops(n), 1, [&] {
    const auto q = in.view(in.q), k = in.view(in.k);
    const auto qo = lrpe::bnsh(qf.data(), 1, heads, n, d), ko = lrpe::bnsh(kf.data(), 1, heads, n, d);
    for (index_t h = 0; h < heads; ++h) {
      const lrpe::matrix_view<const T> qh = q.head(0, h), kh = k.head(0, h);
      lrpe::backend::simd_detail::features<xsimd::default_arch>(enc, lrpe::feature_maps::elu_plus_one{}, qh, {},
                                                                  lrpe::canonical::side::query, qo.head(0, h));
      lrpe::backend::simd_detail::features<xsimd::default_arch>(enc, lrpe::feature_maps::elu_plus_one{}, kh, {},
                                                                  lrpe::canonical::side::key, ko.head(0, h));
    }
    lrpe::linear_attention(qo, ko, in.view(in.v), in.view(in.out), lrpe::no_encoding{},
                           lrpe::feature_maps::identity{}, lrpe::linear_options{.causal = true, .chunk = 64},
                           lrpe::backend::simd<>{});
  });
}

// Decode: 64 tokens, one at a time, each through the 8 heads' states (1+elu, RoPE, decay 0.99):
// arg 0 = the state's own append + query (scalar), 1 = one-row segments on the SIMD backend
// (the state recurrence in place) per head, 2 = one multi-head call per token (one state per
// head). Positions keep increasing across iterations.
void linear_decode(benchmark::State& state) {
  constexpr index_t tokens = 64;
  const bool simd = state.range(0) == 1, multi_head = state.range(0) == 2;
  inputs in(tokens);
  const lrpe::rope_neox<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  constexpr double decay = 0.99;
  std::vector<lrpe::linear_attention_state<T>> st(static_cast<std::size_t>(heads),
                                                  lrpe::linear_attention_state<T>(enc.feature_dim(), d, decay));
  lrpe::position_t t = 0;
  run_timed(state, linear_flops(tokens), 1, [&] {
    const auto q = in.view(in.q), k = in.view(in.k), v = in.view(in.v), o = in.view(in.out);
    for (index_t i = 0; i < tokens; ++i, ++t) {
      if (multi_head) {
        const auto token = [&](auto view) {  // row i of every head
          view.data += i * view.seq_stride;
          view.seq = 1;
          return view;
        };
        lrpe::linear_attention(token(q), token(k), token(v), token(o), enc, phi, st,
                               lrpe::linear_options{.causal = true, .decay = decay, .q_positions = t, .k_positions = t},
                               lrpe::backend::simd<>{});
        continue;
      }
      for (index_t h = 0; h < heads; ++h) {
        auto& s = st[static_cast<std::size_t>(h)];
        if (simd) {
          const auto row = [&](auto view) {
            const auto m = view.head(0, h);
            return decltype(m)(m.row(i), 1, m.cols, m.row_stride);
          };
          lrpe::linear_attention(row(q), row(k), row(v), row(o), enc, phi, s,
                                 lrpe::linear_options{.causal = true, .decay = decay, .q_positions = t, .k_positions = t},
                                 lrpe::backend::simd<>{});
        } else {
          s.append(enc, phi, k.head(0, h).row(i), v.head(0, h).row(i), t);
          s.query(enc, phi, q.head(0, h).row(i), t, o.head(0, h).row(i));
        }
      }
    }
  });
}

void linear_reference(benchmark::State& state) {
  const index_t n = state.range(0);
  const bool causal = state.range(1) != 0;
  inputs in(n);
  run_timed(state, linear_flops(n), 1, [&] {
    lrpe::linear_attention(in.view(in.q), in.view(in.k), in.view(in.v), in.view(in.out), lrpe::no_encoding{},
                           lrpe::feature_maps::identity{}, lrpe::linear_options{.causal = causal, .chunk = 64});
  });
}

}  // namespace

// Anchors first (registration order is run order).
BENCHMARK(anchor_fma)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(anchor_copy)->Name("anchor_copy_stream")->Arg(256 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(anchor_copy)->Name("anchor_copy_l3")->Arg(4 << 20)->Unit(benchmark::kMicrosecond);

BENCHMARK(softmax_simd)
    ->ArgsProduct({{512, 2048, 4096, 8192}, {0, 1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_simd)->Args({16384, 0, 1})->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_simd_rope)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_decode)->ArgsProduct({{512, 4096, 16384, 65536}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(softmax_decode_gqa)->ArgsProduct({{4096, 16384}, {0, 1, 2}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(softmax_decode_16bit)->ArgsProduct({{4096, 16384, 65536}, {1, 2}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(softmax_decode_gqa_16bit)->ArgsProduct({{32768}, {0, 1, 2}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(softmax_simd_alibi)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_options_cost)
    ->ArgsProduct({{4096}, {0, 1, 2, 3}, {0}})
    ->Args({4096, 4, 512})
    ->Args({4096, 4, 1024})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_decode_split)->ArgsProduct({{16384, 65536, 262144}, {1, 2}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(append_kv_step)->Arg(0)->Arg(1)->Unit(benchmark::kNanosecond);
BENCHMARK(softmax_decode_window)->ArgsProduct({{32768}, {0, 4096}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(softmax_backward)->ArgsProduct({{512, 2048, 4096}, {0, 1}, {1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_backward)->ArgsProduct({{512}, {0, 1}, {0}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_reference)->ArgsProduct({{512, 2048, 4096}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_eigen)->Arg(512)->Arg(2048)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK(linear_simd)
    ->ArgsProduct({{512, 2048, 4096, 8192}, {0, 1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(linear_simd_layout)->ArgsProduct({{2048, 4096, 8192}, {0, 1}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(linear_simd_rope)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(linear_simd_rope_features_first)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(linear_decode)->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(linear_backward)->ArgsProduct({{2048, 8192}, {1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(linear_backward)->Args({2048, 0})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(linear_backward_decay)->ArgsProduct({{2048, 8192}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(linear_reference)->ArgsProduct({{512, 2048, 4096, 8192}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
