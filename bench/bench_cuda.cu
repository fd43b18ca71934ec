// SPDX-License-Identifier: MIT
// bench_cuda: the CUDA backend's benchmarks (bench/results/history.md, "GPU checklist", item 3). Built when
// CUDA is enabled (bench/CMakeLists.txt), never run by CI (no GPU there); without a device every
// benchmark reports "no CUDA device" and skips itself.
//
// Timing: CUDA events around one launch per iteration, 20 iterations after 3 warm-up launches
// (benchmark's manual time = the event time). The counters carry the median over the
// iterations: `median_ms`, and `GB_per_s` with `frac_copy` (of the device-to-device copy, read +
// write, measured once per run by `cuda_copy`) for the encoders, `TFLOP_per_s` for softmax
// attention (4·n²·d per (batch, head), halved when causal: the convention of
// bench/torch_gpu_peer.py, which times torch's SDPA on the same shapes), and `ns_per_row` for
// linear attention (t(2n)/t(n) ≈ 2 is the linear scaling to show). Inputs are pseudo-random in
// [−1, 1) (never zero: METHOD.md), written on the device.
//
//   build/cuda/bench/bench_cuda --benchmark_out=$OUT/bench_cuda.json
#include <lrpe/cuda.cuh>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

namespace {

using lrpe::index_t;
namespace cu = lrpe::cuda;

constexpr int warmup_launches = 3;
constexpr int timed_iterations = 20;

bool have_device() {
  static const bool ok = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) return false;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
    std::printf("bench_cuda on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    return true;
  }();
  return ok;
}

/// Pseudo-random values in [−1, 1) from a hash of the index (splitmix64's finaliser).
template <class T>
__global__ void fill_kernel(T* x, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x[i] = cu::detail::from_float<T>(static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0));
  }
}

/// A device buffer of n pseudo-random values.
template <class T>
cu::device_buffer<T> random_buffer(std::size_t n, std::uint64_t seed) {
  cu::device_buffer<T> b(n);
  fill_kernel<T><<<1024, 256>>>(b.data(), n, seed);
  LRPE_CUDA_CHECK_LAUNCH("bench_cuda fill_kernel");
  LRPE_CUDA_CHECK(cudaDeviceSynchronize());
  return b;
}

/// A pair of CUDA events that times one launch at a time.
class event_timer {
 public:
  event_timer() {
    LRPE_CUDA_CHECK(cudaEventCreate(&start_));
    LRPE_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;
  ~event_timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  /// Milliseconds of `launch()` on the default stream.
  template <class Launch>
  double time(Launch&& launch) {
    LRPE_CUDA_CHECK(cudaEventRecord(start_));
    launch();
    LRPE_CUDA_CHECK(cudaEventRecord(stop_));
    LRPE_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    LRPE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

double median(std::vector<double> x) {
  if (x.empty()) return 0;
  std::nth_element(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(x.size() / 2), x.end());
  return x[x.size() / 2];
}

template <class Launch>
void warm_up(Launch&& launch) {
  for (int i = 0; i < warmup_launches; ++i) launch();
  LRPE_CUDA_CHECK(cudaDeviceSynchronize());
}

/// One launch per benchmark iteration, timed by CUDA events; the median in ms (0 if skipped).
template <class Launch>
double time_events(benchmark::State& state, Launch&& launch) {
  warm_up(launch);
  event_timer timer;
  std::vector<double> ms;
  for (auto _ : state) {
    ms.push_back(timer.time(launch));
    state.SetIterationTime(ms.back() * 1e-3);
  }
  const double m = median(ms);
  state.counters["median_ms"] = m;
  return m;
}

/// Device-to-device copy of 1 GiB, read + write bytes per second (the encoders' ceiling);
/// timed as a benchmark (`state`) or, when an encoder benchmark ran without the anchor (a
/// filter), here with the same warm-up and count.
double measure_copy_gbps(benchmark::State* state) {
  constexpr std::size_t bytes = std::size_t{1} << 30;
  const auto src = random_buffer<float>(bytes / sizeof(float), 1);
  cu::device_buffer<float> dst(bytes / sizeof(float));
  const auto copy = [&] { LRPE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice)); };
  double ms = 0;
  if (state != nullptr) {
    ms = time_events(*state, copy);
  } else {
    warm_up(copy);
    event_timer timer;
    std::vector<double> t;
    for (int i = 0; i < timed_iterations; ++i) t.push_back(timer.time(copy));
    ms = median(t);
  }
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

std::optional<double>& copy_gbps_slot() {
  static std::optional<double> gbps;
  return gbps;
}

double copy_gbps() {
  auto& g = copy_gbps_slot();
  if (!g) g = measure_copy_gbps(nullptr);
  return *g;
}

bool skip_without_device(benchmark::State& state) {
  if (have_device()) return false;
  state.SkipWithError("no CUDA device");
  return true;
}

// ----------------------------------------------------------------------------- anchor

void cuda_copy(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const double gbps = measure_copy_gbps(&state);
  copy_gbps_slot() = gbps;
  state.counters["GB_per_s"] = gbps;
}

// ----------------------------------------------------------------------------- encoders

/// Q and K of 2^20 rows each (batch 1, 32 heads, 32768 positions, BSNH), d = 128, one fused
/// launch; in place for real encoders, into separate outputs for type8 (2d features). Presets
/// 0–4: rope_neox, type1, type4, type8, rope_gptj.
template <class T>
void cuda_encode(benchmark::State& state) {
  if (skip_without_device(state)) return;
  constexpr index_t d = 128, heads = 32, seq = 32768;
  const auto preset = state.range(0);
  std::optional<cu::device_encoder> enc;
  switch (preset) {
    case 0: enc.emplace(lrpe::rope_neox<float>(d)); state.SetLabel("rope_neox"); break;
    case 1: enc.emplace(lrpe::type1<float>(d)); state.SetLabel("type1"); break;
    case 2: enc.emplace(lrpe::type4<float>(d)); state.SetLabel("type4"); break;
    case 3: enc.emplace(lrpe::type8<float>(d)); state.SetLabel("type8"); break;
    default: enc.emplace(lrpe::rope_gptj<float>(d)); state.SetLabel("rope_gptj"); break;
  }
  const index_t f = enc->desc().feature_dim;
  const auto rows = static_cast<std::size_t>(heads * seq);
  auto q = random_buffer<T>(rows * d, 2), k = random_buffer<T>(rows * d, 3);
  const bool in_place = f == d;
  cu::device_buffer<T> qo(in_place ? 0 : rows * f), ko(in_place ? 0 : rows * f);
  const auto qv = cu::bsnh(q.data(), 1, seq, heads, d), kv = cu::bsnh(k.data(), 1, seq, heads, d);
  const auto qov = in_place ? qv : cu::bsnh(qo.data(), 1, seq, heads, f);
  const auto kov = in_place ? kv : cu::bsnh(ko.data(), 1, seq, heads, f);
  const double ms = time_events(state, [&] {
    cu::encode<T>(*enc, qv, cu::offset_positions(4096), qov, kv, cu::offset_positions(4096), kov);
  });
  if (ms <= 0) return;
  const double bytes = 2.0 * static_cast<double>(rows) * static_cast<double>(d + f) * sizeof(T);
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  state.counters["GB_per_s"] = gbps;
  state.counters["frac_copy"] = gbps / copy_gbps();
}

// ----------------------------------------------------------------------------- softmax

/// The shapes of bench/torch_gpu_peer.py's SDPA part: BNSH, batch = max(1, 16384 / n),
/// 16 heads; args (d, n, causal).
template <class T>
void cuda_softmax(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const index_t d = state.range(0), n = state.range(1), heads = 16, batch = std::max<index_t>(1, 16384 / n);
  const bool causal = state.range(2) != 0;
  const auto count = static_cast<std::size_t>(batch * heads * n * d);
  auto q = random_buffer<T>(count, 4), k = random_buffer<T>(count, 5), v = random_buffer<T>(count, 6);
  cu::device_buffer<T> out(count);
  const auto view = [&](const cu::device_buffer<T>& b) {
    return cu::bnsh(static_cast<const T*>(b.data()), batch, heads, n, d);
  };
  const auto ov = cu::bnsh(out.data(), batch, heads, n, d);
  const double ms = time_events(state, [&] {
    cu::softmax_attention<T>(view(q), view(k), view(v), ov, lrpe::no_encoding{}, nullptr, {.causal = causal});
  });
  if (ms <= 0) return;
  const double flops = 4.0 * static_cast<double>(batch * heads) * static_cast<double>(n) * static_cast<double>(n) *
                       static_cast<double>(d) / (causal ? 2.0 : 1.0);
  state.counters["TFLOP_per_s"] = flops / (ms * 1e-3) / 1e12;
}

// ----------------------------------------------------------------------------- linear

/// Causal linear attention, batch 1, 16 heads, d = 64, φ = 1+elu, rope_neox fused into the
/// loads, decay 0.99; arg n. `ns_per_row` (per head) stays flat when the time is linear in n.
template <class T>
void cuda_linear_causal(benchmark::State& state) {
  if (skip_without_device(state)) return;
  constexpr index_t d = 64, heads = 16;
  const index_t n = state.range(0);
  const auto count = static_cast<std::size_t>(heads * n * d);
  auto q = random_buffer<T>(count, 7), k = random_buffer<T>(count, 8), v = random_buffer<T>(count, 9);
  cu::device_buffer<T> out(count);
  const cu::device_encoder enc{lrpe::rope_neox<float>(d)};
  const auto view = [&](const cu::device_buffer<T>& b) {
    return cu::bnsh(static_cast<const T*>(b.data()), 1, heads, n, d);
  };
  const auto ov = cu::bnsh(out.data(), 1, heads, n, d);
  const double ms = time_events(state, [&] {
    cu::linear_attention<T>(view(q), view(k), view(v), ov, enc, lrpe::feature_maps::elu_plus_one{},
                            {.causal = true, .decay = 0.99});
  });
  if (ms <= 0) return;
  state.counters["ns_per_row"] = ms * 1e6 / static_cast<double>(n);
}

}  // namespace

// The copy anchor first (registration order is run order): the encoders' frac_copy uses it.
BENCHMARK(cuda_copy)->UseManualTime()->Iterations(timed_iterations)->Unit(benchmark::kMillisecond);

BENCHMARK_TEMPLATE(cuda_encode, float)->ArgName("preset")->DenseRange(0, 4)->UseManualTime()->Iterations(timed_iterations)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(cuda_encode, __nv_bfloat16)->ArgName("preset")->DenseRange(0, 4)->UseManualTime()->Iterations(timed_iterations)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(cuda_encode, __half)->ArgName("preset")->DenseRange(0, 4)->UseManualTime()->Iterations(timed_iterations)->Unit(benchmark::kMillisecond);

BENCHMARK_TEMPLATE(cuda_softmax, __nv_bfloat16)
    ->ArgNames({"d", "n", "causal"})
    ->ArgsProduct({{64, 128}, {1024, 4096, 16384}, {0, 1}})
    ->UseManualTime()
    ->Iterations(timed_iterations)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_TEMPLATE(cuda_linear_causal, float)->RangeMultiplier(2)->Range(1024, 65536)->UseManualTime()->Iterations(timed_iterations)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(cuda_linear_causal, __nv_bfloat16)->RangeMultiplier(2)->Range(1024, 65536)->UseManualTime()->Iterations(timed_iterations)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
