// SPDX-License-Identifier: MIT
// CUDA backend tests (doctest). Built only when CUDA is enabled (tests/CMakeLists.txt), linked
// with lrpe::cuda. Without a device every GPU test case prints "[lrpe-skip] no CUDA device:
// skipping GPU tests" and returns (ctest reports the test as skipped); the host-side checks
// (test cases named "cuda host: ...": error type, validation before any CUDA call, the device
// code's host builds) run everywhere, as a ctest entry of their own that is never skipped
// (tests/CMakeLists.txt).
//
// With a device: every kernel against the CPU library in double on random data (fixed,
// printed seed), relative error ‖gpu − ref‖₂ / ‖ref‖₂ per tensor, bounds per storage type.
// The inputs are the stored values themselves (the reference reads them exactly), so a 16-bit
// result is the fp32 result rounded once: ‖round(y) − y‖ ≤ u‖y‖ with u = 2^-11 (fp16), 2^-8
// (bf16), and the bound is u plus the fp32 bound:
//   encode: fp32 1e-6, fp16 2^-11 + 1e-6, bf16 2^-8 + 1e-6;
//   attention: fp32 1e-5, fp16 2^-11 + 1e-5, bf16 2^-8 + 1e-5.
// The errors measured on a GPU are recorded in bench/results/history.md ("GPU checklist").
#include <lrpe/cuda.cuh>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

using lrpe::index_t;
using lrpe::position_t;
namespace cu = lrpe::cuda;

namespace {

constexpr std::uint64_t test_seed = 0x5eedc0dau;

bool have_device() {
  static const bool ok = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      std::printf("[lrpe-skip] no CUDA device: skipping GPU tests (cudaGetDeviceCount: %s, count %d)\n",
                  cudaGetErrorString(e), count);
      return false;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("lrpe CUDA tests on %s (sm_%d%d), seed %llu\n", prop.name, prop.major, prop.minor,
                static_cast<unsigned long long>(test_seed));
    return true;
  }();
  return ok;
}

template <class T>
T to_storage(double x) {
  if constexpr (std::is_same_v<T, float>) return static_cast<float>(x);
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(x));
  else return __float2bfloat16_rn(static_cast<float>(x));
}
template <class T>
double from_storage(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else return __bfloat162float(x);
}

/// Unit roundoff of the storage type (0 for fp32: the fp32 bound covers its output rounding).
template <class T>
double storage_roundoff() {
  if constexpr (std::is_same_v<T, float>) return 0.0;
  else if constexpr (std::is_same_v<T, __half>) return 0x1p-11;
  else return 0x1p-8;
}
template <class T>
double encode_bound() {
  return storage_roundoff<T>() + 1e-6;
}
template <class T>
double attention_bound() {
  return storage_roundoff<T>() + 1e-5;
}

/// A BSNH tensor [batch, seq, heads, dim]: storage copy on the device, exact double copy on the host.
template <class T>
struct tensor {
  index_t batch, seq, heads, dim;
  std::vector<T> host;
  std::vector<double> exact;  // the stored values, converted back
  cu::device_buffer<T> dev;

  tensor(index_t b, index_t n, index_t h, index_t d, std::mt19937_64& rng, double scale = 1.0)
      : batch(b), seq(n), heads(h), dim(d), host(static_cast<std::size_t>(b * n * h * d)), exact(host.size()) {
    std::normal_distribution<double> g(0.0, scale);
    for (std::size_t i = 0; i < host.size(); ++i) {
      host[i] = to_storage<T>(g(rng));
      exact[i] = from_storage(host[i]);
    }
    dev = cu::device_buffer<T>(host);
  }
  tensor(index_t b, index_t n, index_t h, index_t d)  // poisoned output (NaN)
      : batch(b), seq(n), heads(h), dim(d), host(static_cast<std::size_t>(b * n * h * d), to_storage<T>(NAN)),
        exact(host.size(), 0.0) {
    dev = cu::device_buffer<T>(host);
  }
  cu::device_view<T> view() { return cu::bsnh(dev.data(), batch, seq, heads, dim); }
  cu::device_view<const T> cview() { return cu::bsnh(static_cast<const T*>(dev.data()), batch, seq, heads, dim); }
  /// Head (b, h) of the exact copy as a CPU view.
  lrpe::matrix_view<const double> head(index_t b, index_t h) const {
    return {exact.data() + (b * seq * heads + h) * dim, seq, dim, heads * dim};
  }
  std::vector<double> download() const {
    const auto d = dev.download();
    std::vector<double> out(d.size());
    for (std::size_t i = 0; i < d.size(); ++i) out[i] = from_storage(d[i]);
    return out;
  }
};

double rel_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;  // unwritten (poisoned) or broken output
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

/// CHECKs rel_error(got, ref) <= bound and prints the measured error (the GPU checklist records
/// them: bench/results/history.md), one line per comparison: "[lrpe-error] <what> <dtype>: <err> (bound <b>)".
template <class T>
void check_rel_error(const std::vector<double>& got, const std::vector<double>& ref, double bound, const char* what,
                     const char* part) {
  const double err = rel_error(got, ref);
  std::printf("[lrpe-error] %s, %s, %s: %.3e (bound %.1e)\n", what, part, cu::storage_name<T>(), err, bound);
  CHECK(err <= bound);
}

std::vector<position_t> increasing_positions(index_t n, position_t start, std::mt19937_64& rng) {
  std::vector<position_t> p(static_cast<std::size_t>(n));
  std::uniform_int_distribution<int> step(0, 3);  // repeats allowed (packed documents)
  position_t x = start;
  for (auto& v : p) v = (x += step(rng));
  return p;
}

// ------------------------------------------------------------------------------- encoders

template <class T, class E>
void check_encoder(const E& e, const char* name, cu::angle_mode angles = cu::angle_mode::reduced_float) {
  CAPTURE(name);
  CAPTURE(cu::storage_name<T>());
  std::mt19937_64 rng(test_seed);
  const index_t b = 2, n = 37, h = 3, d = e.dim(), f = e.feature_dim();
  tensor<T> q(b, n, h, d, rng), k(b, n + 5, h, d, rng), qo(b, n, h, f), ko(b, n + 5, h, f);
  const position_t q_offset = 999'983;  // large positions: the angle path is exercised
  const auto kpos = increasing_positions(n + 5, -20, rng);
  cu::device_buffer<position_t> kpos_dev(kpos);
  const cu::device_encoder de(e, angles);
  cu::encode<T>(de, q.cview(), cu::offset_positions(q_offset), qo.view(), k.cview(), cu::array_positions(kpos_dev.data()),
                ko.view());
  LRPE_CUDA_CHECK(cudaDeviceSynchronize());

  auto reference = [&](const tensor<T>& x, auto pos_of, index_t rows) {
    std::vector<double> ref(static_cast<std::size_t>(b * rows * h * f));
    for (index_t bb = 0; bb < b; ++bb)
      for (index_t s = 0; s < rows; ++s)
        for (index_t hh = 0; hh < h; ++hh)
          e.encode_features(pos_of(s), x.head(bb, hh).row(s), ref.data() + ((bb * rows + s) * h + hh) * f);
    return ref;
  };
  const auto q_ref = reference(q, [&](index_t s) { return q_offset + s; }, n);
  const auto k_ref = reference(k, [&](index_t s) { return kpos[static_cast<std::size_t>(s)]; }, n + 5);
  check_rel_error<T>(qo.download(), q_ref, encode_bound<T>(), name, "q");
  check_rel_error<T>(ko.download(), k_ref, encode_bound<T>(), name, "k");

  // one head (0, 0) of k as a view of its own (one row per position: the kernel that forms
  // each row's angles itself, where the launch above shared them across the heads)
  tensor<T> ko1(b, n + 5, h, f);
  const cu::device_view<const T> k1(k.dev.data(), 1, 1, n + 5, d, 0, d, h * d);
  const cu::device_view<T> ko1v(ko1.dev.data(), 1, 1, n + 5, f, 0, f, h * f);
  cu::encode<T>(de, k1, cu::array_positions(kpos_dev.data()), ko1v);
  LRPE_CUDA_CHECK(cudaDeviceSynchronize());
  {
    const auto all = ko1.download();
    std::vector<double> got, want;
    for (index_t s = 0; s < n + 5; ++s) {
      for (index_t c = 0; c < f; ++c) {
        got.push_back(all[static_cast<std::size_t>(s * h * f + c)]);
        want.push_back(k_ref[static_cast<std::size_t>(s * h * f + c)]);
      }
    }
    check_rel_error<T>(got, want, encode_bound<T>(), name, "k, one head");
  }

  if constexpr (!E::is_complex) {  // in place: out = in
    cu::encode<T>(de, q.cview(), cu::offset_positions(q_offset), q.view());
    LRPE_CUDA_CHECK(cudaDeviceSynchronize());
    check_rel_error<T>(q.download(), q_ref, encode_bound<T>(), name, "q in place");
  }
}

template <class T>
void check_every_preset() {
  check_encoder<T>(lrpe::type1<double>(64), "type1 d=64");
  check_encoder<T>(lrpe::type1<double>(33), "type1 d=33 (odd)");
  check_encoder<T>(lrpe::type3<double>(48, 7), "type3");
  check_encoder<T>(lrpe::type4<double>(64), "type4");
  check_encoder<T>(lrpe::type5<double>(15), "type5 d=15 (odd)");
  check_encoder<T>(lrpe::type7<double>(40), "type7");
  check_encoder<T>(lrpe::type8<double>(64), "type8");  // d a power of two: the FFT
  check_encoder<T>(lrpe::type8<double>(128), "type8 d=128");
  check_encoder<T>(lrpe::type8<double>(2), "type8 d=2");
  check_encoder<T>(lrpe::type8<double>(6), "type8 d=6");  // the direct DFT sum
  check_encoder<T>(lrpe::rope_gptj<double>(128), "rope_gptj d=128");
  check_encoder<T>(lrpe::rope_gptj<double>(64, 10000.0, 48), "rope_gptj partial rotary 48/64");
  check_encoder<T>(lrpe::rope_gptj<double>(36, 10000.0, 20), "rope_gptj partial rotary 20/36 (no 16-byte units)");
  check_encoder<T>(lrpe::rope_neox<double>(128, 10000.0, 32), "rope_neox partial rotary 32/128");
  check_encoder<T>(lrpe::rope_neox<double>(64, 500000.0), "rope_neox base 5e5");
  check_encoder<T>(lrpe::permuteformer<double>(64), "permuteformer");
  check_encoder<T>(lrpe::encoder<lrpe::p::dct<double>, lrpe::lambda::rotation<double>>(
                       lrpe::p::dct<double>(32), lrpe::lambda::rotation<double>(32)),
                   "dct x rotation (dense P)");
  check_encoder<T>(lrpe::encoder<lrpe::p::identity<double>, lrpe::lambda::complex_phase<double>>(
                       lrpe::p::identity<double>(32), lrpe::lambda::complex_phase<double>(32)),
                   "LRPE cosine (identity x complex phase)");
  check_encoder<T>(lrpe::type1<double>(64), "type1, full double angles", cu::angle_mode::full_double);
}

}  // namespace

TEST_CASE("cuda host: cuda_error carries the call, the place and the CUDA error string") {
  try {
    LRPE_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL("no exception");
  } catch (const lrpe::cuda_error& e) {
    const std::string what = e.what();
    CHECK(e.code() == cudaErrorInvalidValue);
    CHECK(what.find("cudaErrorInvalidValue") != std::string::npos);
    CHECK(what.find("test_cuda_kernels.cu") != std::string::npos);
    CHECK(what.find(cudaGetErrorString(cudaErrorInvalidValue)) != std::string::npos);
    const lrpe::error* base = &e;  // one catch (lrpe::error const&) catches it
    CHECK(base != nullptr);
  }
}

TEST_CASE("cuda host: an error pending before a launch is reported as the caller's, not the launch's") {
  CHECK_NOTHROW(lrpe::cuda::detail::check_pending(cudaSuccess, "lrpe::cuda::detail::softmax_kernel", "f.cuh", 1));
  try {
    lrpe::cuda::detail::check_pending(cudaErrorInvalidConfiguration, "lrpe::cuda::detail::softmax_kernel", "f.cuh",
                                      7);
    FAIL("no exception");
  } catch (const lrpe::cuda_error& e) {
    const std::string what = e.what();
    CHECK(e.code() == cudaErrorInvalidConfiguration);
    CHECK(what.find("f.cuh:7") != std::string::npos);
    CHECK(what.find("earlier CUDA call, not lrpe's") != std::string::npos);
    CHECK(what.find("before the launch of lrpe::cuda::detail::softmax_kernel") != std::string::npos);
    CHECK(what.find("cudaErrorInvalidConfiguration") != std::string::npos);
    CHECK(what.find("launch of lrpe::cuda::detail::softmax_kernel failed") == std::string::npos);
  }
}

TEST_CASE("cuda host: arguments are validated before any CUDA call") {
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});  // never dereferenced: validation throws first
  const auto q = cu::rows(static_cast<const float*>(fake), 8, 16);
  const auto k_bad = cu::rows(static_cast<const float*>(fake), 8, 12);
  const auto out = cu::rows(fake, 8, 16);
  CHECK_THROWS_AS(cu::softmax_attention<float>(q, k_bad, q, out, lrpe::no_encoding{}), lrpe::shape_error);
  CHECK_THROWS_AS(cu::softmax_attention<float>(q, q, q, cu::rows(fake, 7, 16), lrpe::no_encoding{}), lrpe::shape_error);
  CHECK_THROWS_AS(cu::softmax_attention<float>(q, q, q, out, lrpe::no_encoding{}, nullptr,
                                               cu::softmax_options{.scale = INFINITY}),
                  lrpe::domain_error);
  cu::linear_options bad_eps;
  bad_eps.eps = 0;
  CHECK_THROWS_AS(cu::linear_attention<float>(q, q, q, out, lrpe::no_encoding{}, lrpe::feature_maps::relu{}, bad_eps),
                  lrpe::parameter_error);
  cu::linear_options decay_not_causal;
  decay_not_causal.decay = 0.9;
  CHECK_THROWS_AS(cu::linear_attention<float>(q, q, q, out, lrpe::no_encoding{}, lrpe::feature_maps::relu{},
                                              decay_not_causal),
                  lrpe::parameter_error);
  const double decays[] = {0.9, 0.8};
  cu::linear_options wrong_heads;
  wrong_heads.causal = true;
  wrong_heads.head_decays = decays;  // 2 decays, 1 head
  CHECK_THROWS_AS(cu::linear_attention<float>(q, q, q, out, lrpe::no_encoding{}, lrpe::feature_maps::relu{},
                                              wrong_heads),
                  lrpe::shape_error);
  // positions (offsets, checked on the host): a last row past 2^63 − 1; Q and K too far apart
  cu::softmax_options far_q;
  far_q.q_positions = cu::offset_positions(std::numeric_limits<lrpe::position_t>::max() - 3);
  CHECK_THROWS_WITH_AS(cu::softmax_attention<float>(q, q, q, out, lrpe::no_encoding{}, nullptr, far_q),
                       doctest::Contains("argument 'options.q_positions' must be an offset with offset + rows - 1 <= "
                                         "2^63 - 1 (rows = 8)"),
                       lrpe::parameter_error);
  cu::linear_options apart;
  apart.k_positions = cu::offset_positions(std::numeric_limits<lrpe::position_t>::min());
  CHECK_THROWS_WITH_AS(cu::linear_attention<float>(q, q, q, out, lrpe::no_encoding{}, lrpe::feature_maps::relu{}, apart),
                       doctest::Contains("argument 'options.k_positions' must lie within 2^63 - 1 of "
                                         "options.q_positions = [0, 7]"),
                       lrpe::parameter_error);
  // an empty Q still has its K positions and its bias checked (as on the CPU)
  const auto q_empty = cu::rows(static_cast<const float*>(fake), 0, 16);
  cu::softmax_options far_k;
  far_k.k_positions = cu::offset_positions(std::numeric_limits<lrpe::position_t>::max() - 3);
  CHECK_THROWS_WITH_AS(cu::softmax_attention<float>(q_empty, q, q, cu::rows(fake, 0, 16), lrpe::no_encoding{}, nullptr,
                                                    far_k),
                       doctest::Contains("argument 'options.k_positions' must be an offset"), lrpe::parameter_error);
  cu::linear_options far_k_lin;
  far_k_lin.k_positions = far_k.k_positions;
  CHECK_THROWS_AS(cu::linear_attention<float>(q_empty, q, q, cu::rows(fake, 0, 16), lrpe::no_encoding{},
                                              lrpe::feature_maps::relu{}, far_k_lin),
                  lrpe::parameter_error);
  // q.dim = 0 with no encoding (the CPU's q.cols >= 1): named, not a division by zero in the scale
  const auto q0 = cu::rows(static_cast<const float*>(fake), 8, 0);
  CHECK_THROWS_WITH_AS(cu::softmax_attention<float>(q0, q0, q, out, lrpe::no_encoding{}),
                       doctest::Contains("argument 'q.dim' must be in [1, 4096]; got 0"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(cu::linear_attention<float>(q0, q0, q, out, lrpe::no_encoding{}, lrpe::feature_maps::relu{}),
                       doctest::Contains("argument 'q.dim' must be in [1, 4096]; got 0"), lrpe::shape_error);
  // a scale finite in double but not in the kernels' float
  CHECK_THROWS_WITH_AS(cu::softmax_attention<float>(q, q, q, out, lrpe::no_encoding{}, nullptr,
                                                    cu::softmax_options{.scale = 1e39}),
                       doctest::Contains("argument 'options.scale' must be finite in float"), lrpe::domain_error);
  // a device feature map built by hand: its kind and ε are checked as the CPU's are
  const cu::device_feature_map nan_eps{cu::phi_kind::relu_eps, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_WITH_AS(cu::linear_attention<float>(q, q, q, out, lrpe::no_encoding{}, nan_eps),
                       doctest::Contains("argument 'phi.eps' must be finite and >= 0 in float"),
                       lrpe::parameter_error);
  const cu::device_feature_map negative_eps{cu::phi_kind::relu_eps, -1.0f};
  CHECK_THROWS_AS(cu::linear_attention<float>(q, q, q, out, lrpe::no_encoding{}, negative_eps), lrpe::parameter_error);
  const cu::device_feature_map bad_kind{static_cast<cu::phi_kind>(7), 0.0f};
  CHECK_THROWS_WITH_AS(cu::linear_attention<float>(q, q, q, out, lrpe::no_encoding{}, bad_kind),
                       doctest::Contains("argument 'phi.kind' must be a phi_kind"), lrpe::parameter_error);
  // per-head decays without causal: the head's decay is named, not options.decay
  const cu::device_view<const float> q2(fake, 1, 2, 8, 16, 256, 128, 16);
  const cu::device_view<float> out2(fake, 1, 2, 8, 16, 256, 128, 16);
  const double two_decays[] = {1.0, 0.9};
  cu::linear_options per_head;
  per_head.head_decays = two_decays;
  CHECK_THROWS_WITH_AS(cu::linear_attention<float>(q2, q2, q2, out2, lrpe::no_encoding{}, lrpe::feature_maps::relu{},
                                                   per_head),
                       doctest::Contains("argument 'options.head_decays[1]' must be 1 unless options.causal"),
                       lrpe::parameter_error);
  // encode: an offset whose last row passes 2^63 − 1 (the launcher on an encoder's description,
  // which needs no device); the single-tensor form's names
  const auto desc = cu::detail::identity_desc(16, "test");
  const cu::device_positions far = cu::offset_positions(std::numeric_limits<lrpe::position_t>::max() - 3);
  CHECK_THROWS_WITH_AS(cu::detail::encode_launch<float>(desc, q, far, out, q, cu::offset_positions(0), out, nullptr,
                                                        "lrpe::cuda::encode", {"q", "qp", "q_out", "k", "kp", "k_out"}),
                       doctest::Contains("lrpe::cuda::encode: argument 'qp' must be an offset with offset + rows - 1"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(cu::detail::encode_launch<float>(desc, q, cu::offset_positions(0), out, q, far, out, nullptr,
                                                        "lrpe::cuda::encode", {"q", "qp", "q_out", "k", "kp", "k_out"}),
                       doctest::Contains("argument 'kp' must be an offset"), lrpe::parameter_error);
  // device biases: a T5 table too large to expand, a table value past float's range
  const lrpe::canonical::t5_bias<double> t5_far(16, {32, std::int64_t{1} << 40, true}, lrpe::row_matrix<double>::Zero(2, 32));
  CHECK_THROWS_WITH_AS(cu::device_bias{t5_far},
                       doctest::Contains("argument 't5.buckets().max_distance' must keep the expanded table"),
                       lrpe::parameter_error);
  lrpe::row_matrix<double> huge = lrpe::row_matrix<double>::Zero(1, 5);
  huge(0, 3) = 1e39;
  const lrpe::canonical::toeplitz_bias<double> tb_huge(16, 2, huge);
  CHECK_THROWS_WITH_AS(cu::device_bias{tb_huge}, doctest::Contains("argument 'tb.table()' must hold values finite in float"),
                       lrpe::domain_error);
}

TEST_CASE("cuda host: the kernels' bias(s, t) at positions 2^63 or more apart (no overflow)") {
  // bias_value is __host__ __device__: the kernels' code on host copies of the tables
  constexpr position_t lo = std::numeric_limits<position_t>::min(), hi = std::numeric_limits<position_t>::max();
  const double slopes[] = {0.5};
  cu::bias_desc alibi{};
  alibi.kind = cu::bias_kind::alibi;
  alibi.heads = 1;
  alibi.slopes = slopes;
  const lrpe::canonical::alibi<double> cpu(4, std::vector<double>{0.5});
  for (const auto& [s, t] : {std::pair{lo, hi}, {hi, lo}, {0, lo}, {lo, 0}, {-3, 9}, {hi - 2, hi}}) {
    CAPTURE(s);
    CAPTURE(t);
    CHECK(cu::detail::bias_value(alibi, 0, s, t) == lrpe::detail::held_logit<float>(cpu.bias(s, t)));
  }
  CHECK(cu::detail::bias_value(alibi, 0, lo, hi) > 9e18f);  // a wrapped t − s = −1 would read −0.5
  const double steep[] = {1e30};  // m·(t − s) past FLT_MAX: held there, as the CPU's held_logit
  alibi.slopes = steep;
  CHECK(cu::detail::bias_value(alibi, 0, 0, hi) == std::numeric_limits<float>::max());
  CHECK(cu::detail::bias_value(alibi, 0, hi, 0) == std::numeric_limits<float>::lowest());
  CHECK(cu::detail::bias_value(alibi, 0, 0, 1) == 1e30f);
  const float w[] = {-2, -1, 0, 1, 2};  // radius 2: entry clip(t − s, 2) + 2
  cu::bias_desc table{};
  table.kind = cu::bias_kind::table;
  table.heads = 1;
  table.table = w;
  table.radius = 2;
  CHECK(cu::detail::bias_value(table, 0, lo, hi) == 2.0f);
  CHECK(cu::detail::bias_value(table, 0, hi, lo) == -2.0f);
  CHECK(cu::detail::bias_value(table, 0, 1, lo) == -2.0f);
  CHECK(cu::detail::bias_value(table, 0, 5, 6) == 1.0f);
  CHECK(cu::detail::bias_value(table, 0, 6, 5) == -1.0f);
}

TEST_CASE("cuda host: the device angle (its host build) is the CPU's exact angle at every int64 position, both modes") {
  // cu::angle_cos_sin is __host__ __device__, so this runs without a GPU: the same code the
  // kernels run, against detail::angle_cos_sin (tested against a long-double reference in
  // test_policies). Stated bound 2.5e-7 (a float rounding plus sincosf's ulp); an angle formed
  // as one rounded double fl(s·θ) is off by ~1 at 2^62 and fails it. full_double: 2⁻²⁴ (the
  // float rounding of the CPU value, which itself differs from it by ~1e-16).
  std::mt19937_64 rng(test_seed);
  std::vector<position_t> positions = {0, 1, -1, 1'000'000, (position_t{1} << 53) + 1, -(position_t{1} << 53) - 7,
                                       (position_t{1} << 62) + 12'345, std::numeric_limits<position_t>::max(),
                                       std::numeric_limits<position_t>::min()};
  for (int i = 0; i < 100; ++i) {
    const int b = 1 + static_cast<int>(rng() % 62);
    const auto v = static_cast<position_t>((std::uint64_t{1} << b) | (rng() >> (64 - b)));
    positions.push_back(i % 2 ? v : -v);
  }
  std::vector<double> theta = lrpe::freq::theta_a(64);
  theta.insert(theta.end(), {3.0, 1e4, 1e10});  // |s·θ| past 2^64: reduced_float takes the double path
  double worst[2] = {0, 0};
  for (const position_t s : positions) {
    for (const double th : theta) {
      const auto want = lrpe::detail::angle_cos_sin(s, th);
      for (const auto mode : {cu::angle_mode::reduced_float, cu::angle_mode::full_double}) {
        float c = 0, sn = 0;
        cu::detail::angle_cos_sin(s, th, mode, c, sn);
        const double err = std::max(std::abs(c - want.c), std::abs(sn - want.s));
        double& w = worst[mode == cu::angle_mode::full_double ? 1 : 0];
        w = std::max(w, err);
      }
    }
  }
  MESSAGE("max error: reduced_float " << worst[0] << ", full_double " << worst[1]);
  CHECK(worst[0] <= 2.5e-7);
  CHECK(worst[1] <= 0x1p-24 + 1e-15);  // full_double: one float rounding of the CPU value
}

TEST_CASE_TEMPLATE("cuda: fused Q/K encoder == CPU encoder (every preset)", T, float, __half, __nv_bfloat16) {
  if (!have_device()) return;
  check_every_preset<T>();
}

// ------------------------------------------------------------------------------- attention

namespace {

template <class T, class Cpu, class Gpu>
void compare_attention(tensor<T>& q, tensor<T>& k, tensor<T>& v, Cpu cpu_head, Gpu gpu, const char* name,
                       const std::string& config) {
  CAPTURE(name);
  CAPTURE(cu::storage_name<T>());
  tensor<T> out(q.batch, q.seq, q.heads, v.dim);
  gpu(out);
  LRPE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ref(out.exact.size());
  for (index_t b = 0; b < q.batch; ++b) {
    for (index_t h = 0; h < q.heads; ++h) {
      lrpe::matrix_view<double> o(ref.data() + (b * q.seq * q.heads + h) * v.dim, q.seq, v.dim, q.heads * v.dim);
      cpu_head(h, q.head(b, h), k.head(b, h), v.head(b, h), o);
    }
  }
  check_rel_error<T>(out.download(), ref, attention_bound<T>(), name, config.c_str());
}

template <class T>
void check_softmax() {
  std::mt19937_64 rng(test_seed + 1);
  const index_t b = 2, h = 4, d = 64, nk = 70;
  for (const bool causal : {false, true}) {
    for (const index_t nq : {index_t{70}, index_t{10}}) {  // 10: new queries over a KV cache
      CAPTURE(causal);
      CAPTURE(nq);
      const std::string config = "causal " + std::to_string(causal) + ", nq " + std::to_string(nq);
      tensor<T> q(b, nq, h, d, rng), k(b, nk, h, d, rng), v(b, nk, h, d, rng);
      const position_t q_off = nk - nq;
      lrpe::softmax_options<> cpu_opt{.causal = causal, .q_positions = q_off, .k_positions = 0};
      cu::softmax_options gpu_opt{.causal = causal, .q_positions = cu::offset_positions(q_off),
                                  .k_positions = cu::offset_positions(0)};

      auto with_encoder = [&](const auto& enc, const char* name) {
        constexpr bool none = std::is_same_v<std::decay_t<decltype(enc)>, lrpe::no_encoding>;
        std::optional<cu::device_encoder> de;
        if constexpr (!none) de.emplace(enc);
        compare_attention<T>(
            q, k, v, [&](index_t, auto qh, auto kh, auto vh, auto oh) { lrpe::softmax_attention(qh, kh, vh, oh, enc, cpu_opt); },
            [&](tensor<T>& out) {
              if constexpr (none) {
                cu::softmax_attention<T>(q.cview(), k.cview(), v.cview(), out.view(), enc, nullptr, gpu_opt);
              } else {
                cu::softmax_attention<T>(q.cview(), k.cview(), v.cview(), out.view(), *de, nullptr, gpu_opt);
              }
            },
            name, config);
      };
      with_encoder(lrpe::no_encoding{}, "no encoding");
      with_encoder(lrpe::type1<double>(d), "type1");
      with_encoder(lrpe::type8<double>(d), "type8 (complex)");
      with_encoder(lrpe::rope_neox<double>(d), "rope_neox");
      with_encoder(lrpe::type7<double>(d), "type7");

      auto with_bias = [&](const auto& bias, const char* name) {
        const cu::device_bias db(bias);
        compare_attention<T>(
            q, k, v,
            [&](index_t hh, auto qh, auto kh, auto vh, auto oh) {
              lrpe::softmax_attention(qh, kh, vh, oh, bias.head(hh), cpu_opt);
            },
            [&](tensor<T>& out) {
              cu::softmax_attention<T>(q.cview(), k.cview(), v.cview(), out.view(), lrpe::no_encoding{}, &db, gpu_opt);
            },
            name, config);
      };
      with_bias(lrpe::canonical::alibi<double>::for_heads(d, h), "alibi");
      with_bias(lrpe::canonical::alibi<double>::for_heads(d, h, lrpe::canonical::alibi_form::symmetric), "alibi symmetric");
      lrpe::row_matrix<double> t5_table = lrpe::row_matrix<double>::Random(h, 32);
      with_bias(lrpe::canonical::t5_bias<double>(d, lrpe::canonical::t5_buckets{32, 40, !causal}, t5_table), "t5");
      lrpe::row_matrix<double> tb_table = lrpe::row_matrix<double>::Random(h, 2 * 9 + 1);
      with_bias(lrpe::canonical::toeplitz_bias<double>(d, 9, tb_table), "toeplitz r=9");
    }
  }
}

template <class T>
void check_linear() {
  std::mt19937_64 rng(test_seed + 2);
  const index_t b = 2, h = 3, d = 32, dv = 40, n = 77;  // dv = 40: two column tiles, one partial
  const std::vector<double> decays{1.0, 0.95, 0.8};
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    tensor<T> q(b, n, h, d, rng, 0.5), k(b, n, h, d, rng, 0.5), v(b, n, h, dv, rng);
    const auto pos = increasing_positions(n, 5, rng);  // repeated positions included
    cu::device_buffer<position_t> pos_dev(pos);
    for (const auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
      CAPTURE(static_cast<int>(norm));
      const std::string config = "causal " + std::to_string(causal) + ", norm " + std::to_string(static_cast<int>(norm));
      auto run = [&](const auto& enc, auto phi, const char* name) {
        cu::linear_options gpu_opt;
        gpu_opt.causal = causal;
        gpu_opt.norm = norm;
        gpu_opt.q_positions = cu::array_positions(pos_dev.data());
        gpu_opt.k_positions = cu::array_positions(pos_dev.data());
        if (causal) gpu_opt.head_decays = decays;
        std::optional<cu::device_encoder> de;
        if constexpr (!std::is_same_v<std::decay_t<decltype(enc)>, lrpe::no_encoding>) de.emplace(enc);
        compare_attention<T>(
            q, k, v,
            [&](index_t hh, auto qh, auto kh, auto vh, auto oh) {
              lrpe::linear_options o;
              o.causal = causal;
              o.norm = norm;
              o.q_positions = pos;
              o.k_positions = pos;
              o.decay = causal ? decays[static_cast<std::size_t>(hh)] : 1.0;
              lrpe::linear_attention(qh, kh, vh, oh, enc, phi, o);
            },
            [&](tensor<T>& out) {
              if constexpr (std::is_same_v<std::decay_t<decltype(enc)>, lrpe::no_encoding>) {
                cu::linear_attention<T>(q.cview(), k.cview(), v.cview(), out.view(), enc, phi, gpu_opt);
              } else {
                cu::linear_attention<T>(q.cview(), k.cview(), v.cview(), out.view(), *de, phi, gpu_opt);
              }
            },
            name, config);
      };
      run(lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, "no encoding, 1+elu");
      if (norm == lrpe::normalisation::none) {  // with LRPE den can be ≤ 0: the CPU contract, not compared
        run(lrpe::type1<double>(d), lrpe::feature_maps::elu_plus_one{}, "type1, 1+elu");
        run(lrpe::type4<double>(d), lrpe::feature_maps::relu{}, "type4, relu");
        run(lrpe::type8<double>(d), lrpe::feature_maps::elu_plus_one{}, "type8, 1+elu");
        run(lrpe::permuteformer<double>(d), lrpe::feature_maps::relu_eps{}, "permuteformer, relu+eps");
        run(lrpe::rope_gptj<double>(d), lrpe::feature_maps::identity{}, "rope_gptj, identity");
      }
    }
  }
}

/// The causal kernel rescales its state once per chunk of 32 keys. Rounding λ^32 to float each
/// time would drift as fl(λ^32)^chunks: λ = 0.999990092 is the λ near 1 − 1e-5 whose λ^32
/// rounds worst (relative 3.0e-8), and over 65536 keys a float simulation of the kernel's
/// algorithm drifts by 2.6e-5 without the carried rounding (lrpe::detail::carried_decay) and
/// stays at 9.5e-7 with it. The CPU reference in double does not drift.
void check_decay_drift() {
  std::mt19937_64 rng(test_seed + 4);
  const index_t n = 65536, d = 8;
  const double lambda = 0.999990092;
  tensor<float> q(1, n, 1, d, rng), k(1, n, 1, d, rng), v(1, n, 1, d, rng);
  compare_attention<float>(
      q, k, v,
      [&](index_t, auto qh, auto kh, auto vh, auto oh) {
        lrpe::linear_options o;
        o.causal = true;
        o.decay = lambda;
        lrpe::linear_attention(qh, kh, vh, oh, lrpe::no_encoding{}, lrpe::feature_maps::identity{}, o);
      },
      [&](tensor<float>& out) {
        cu::linear_options o;
        o.causal = true;
        o.decay = lambda;
        cu::linear_attention<float>(q.cview(), k.cview(), v.cview(), out.view(), lrpe::no_encoding{},
                                    lrpe::feature_maps::identity{}, o);
      },
      "decay 0.999990092 over 65536 keys", "causal 1, n 65536");
}

/// Non-finite inputs (attention.md, "Errors"): a NaN in q at (b, row pq, head h) or in k at
/// key pk must make exactly the rows that see it NaN, and a NaN in v at key pk the value's
/// column of those rows; every other value must equal the clean launch's bit for bit.
/// The CPU backends are tested for the same in test_simd_attention.
template <class T>
void check_nan_propagation() {
  std::mt19937_64 rng(test_seed + 3);
  const index_t b = 1, h = 2, d = 64, n = 150, pq = 5, pk = 70, hp = 1;
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    tensor<T> q(b, n, h, d, rng), k(b, n, h, d, rng, 0.5), v(b, n, h, d, rng);
    const auto clean_q = q.host, clean_k = k.host;
    const auto element = [&](index_t row, index_t col) { return static_cast<std::size_t>((row * h + hp) * d + col); };
    const auto check_rows = [&](const std::vector<double>& got, const std::vector<double>& clean, auto sees,
                                const std::string& what) {
      for (index_t i = 0; i < n; ++i) {
        for (index_t hh = 0; hh < h; ++hh) {
          bool all_nan = true, same = true;
          for (index_t c = 0; c < d; ++c) {
            const std::size_t e = static_cast<std::size_t>((i * h + hh) * d + c);
            all_nan = all_nan && std::isnan(got[e]);
            same = same && got[e] == clean[e];
          }
          CAPTURE(what);
          CAPTURE(i);
          CAPTURE(hh);
          if (hh == hp && sees(i)) CHECK(all_nan);
          else CHECK(same);
        }
      }
    };
    const auto softmax = [&](tensor<T>& out) {
      cu::softmax_attention<T>(q.cview(), k.cview(), v.cview(), out.view(), lrpe::no_encoding{}, nullptr,
                               cu::softmax_options{.causal = causal});
      return out.download();
    };
    const auto linear = [&](tensor<T>& out) {
      cu::linear_options opt;
      opt.causal = causal;
      cu::linear_attention<T>(q.cview(), k.cview(), v.cview(), out.view(), lrpe::no_encoding{},
                              lrpe::feature_maps::relu{}, opt);
      return out.download();
    };
    for (const bool soft : {true, false}) {
      tensor<T> out(b, n, h, d);
      q.dev = cu::device_buffer<T>(clean_q);
      k.dev = cu::device_buffer<T>(clean_k);
      const auto clean = soft ? softmax(out) : linear(out);
      auto poisoned = clean_q;
      poisoned[element(pq, 17)] = to_storage<T>(NAN);
      q.dev = cu::device_buffer<T>(poisoned);
      check_rows(soft ? softmax(out) : linear(out), clean, [&](index_t i) { return i == pq; },
                 soft ? "softmax, NaN in q" : "linear, NaN in q");
      q.dev = cu::device_buffer<T>(clean_q);
      poisoned = clean_k;
      poisoned[element(pk, 3)] = to_storage<T>(NAN);
      k.dev = cu::device_buffer<T>(poisoned);
      check_rows(soft ? softmax(out) : linear(out), clean, [&](index_t i) { return !causal || i >= pk; },
                 soft ? "softmax, NaN in k" : "linear, NaN in k");
      k.dev = cu::device_buffer<T>(clean_k);
      {  // a NaN in v reaches the value's column of exactly the rows that see its key (softmax: a
         // masked key's zero weight never multiplies it, also inside the diagonal tile)
        poisoned = v.host;
        poisoned[element(pk, 3)] = to_storage<T>(NAN);
        v.dev = cu::device_buffer<T>(poisoned);
        const auto got = soft ? softmax(out) : linear(out);
        for (index_t i = 0; i < n; ++i) {
          for (index_t hh = 0; hh < h; ++hh) {
            for (index_t c = 0; c < d; ++c) {
              const std::size_t e = static_cast<std::size_t>((i * h + hh) * d + c);
              CAPTURE(i);
              CAPTURE(hh);
              CAPTURE(c);
              if (hh == hp && c == 3 && (!causal || i >= pk)) CHECK(std::isnan(got[e]));
              else CHECK(got[e] == clean[e]);
            }
          }
        }
        v.dev = cu::device_buffer<T>(v.host);
      }
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("cuda: flash-style softmax attention == CPU softmax_attention", T, float, __half, __nv_bfloat16) {
  if (!have_device()) return;
  check_softmax<T>();
}

TEST_CASE_TEMPLATE("cuda: linear attention (non-causal, causal chunked, decay) == CPU linear_attention", T, float,
                   __half, __nv_bfloat16) {
  if (!have_device()) return;
  check_linear<T>();
}

TEST_CASE("cuda: causal linear attention with a decay does not drift over 65536 keys (carried rescale)") {
  if (!have_device()) return;
  check_decay_drift();
}

TEST_CASE_TEMPLATE("cuda: a NaN in q, k or v makes exactly the rows that see it NaN (softmax, linear)", T,
                   float, __nv_bfloat16) {
  if (!have_device()) return;
  check_nan_propagation<T>();
}
