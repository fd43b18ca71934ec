// SPDX-License-Identifier: MIT
// ggml (the tensor library under llama.cpp) on the shapes of bench_simd_attention and
// bench_simd_encode: flash attention (`ggml_flash_attn_ext`, causal through an F16 mask as
// llama.cpp builds it) and RoPE on Q and K (`ggml_rope_ext`, both pairings). A peer, not part of
// the library: bench/ggml_peer.sh fetches ggml's sources, builds this program against them and
// runs it. Output: a table on stdout and JSON records in the format of bench/torch_peer.py.
//
// Before timing, each attention configuration is checked against a naive double-precision
// softmax attention on a few query rows, so the tensors are laid out as the numbers assume.
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int H = 8;   // heads
constexpr int D = 64;  // head dimension

struct record {
  std::string kernel;
  int n, threads;
  double seconds;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// One graph in its own context, computed repeatedly on a persistent thread pool.
struct graph_runner {
  ggml_context* ctx = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_threadpool* pool = nullptr;
  std::vector<std::uint8_t> work;
  ggml_cplan plan{};

  explicit graph_runner(std::size_t bytes) {
    ggml_init_params ip{bytes, nullptr, false};
    ctx = ggml_init(ip);
    if (ctx == nullptr) {
      std::fprintf(stderr, "ggml_init(%zu bytes) failed\n", bytes);
      std::exit(1);
    }
  }
  ~graph_runner() {
    if (pool != nullptr) ggml_threadpool_free(pool);
    ggml_free(ctx);
  }
  graph_runner(const graph_runner&) = delete;
  graph_runner& operator=(const graph_runner&) = delete;

  void build(std::initializer_list<ggml_tensor*> outputs, int threads) {
    graph = ggml_new_graph(ctx);
    for (ggml_tensor* t : outputs) ggml_build_forward_expand(graph, t);
    ggml_threadpool_params tp = ggml_threadpool_params_default(threads);
    pool = ggml_threadpool_new(&tp);
    plan = ggml_graph_plan(graph, threads, pool);
    work.resize(plan.work_size + 64);
    plan.work_data = work.data();
  }

  void compute() {
    if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) {
      std::fprintf(stderr, "ggml_graph_compute failed\n");
      std::exit(1);
    }
  }

  /// Median wall time of `reps` calls after one warm-up call.
  double time(int reps) {
    compute();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const auto a = std::chrono::steady_clock::now();
      compute();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    return median(t);
  }
};

void fill_random(ggml_tensor* t, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  const std::int64_t count = ggml_nelements(t);
  std::vector<float> tmp(static_cast<std::size_t>(count));
  for (float& x : tmp) x = nd(rng);
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(t->data, tmp.data(), tmp.size() * sizeof(float));
  } else {
    ggml_fp32_to_fp16_row(tmp.data(), static_cast<ggml_fp16_t*>(t->data), count);
  }
}

float element(const ggml_tensor* t, std::int64_t i0, std::int64_t i1, std::int64_t i2) {
  const char* p = static_cast<const char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2];
  return t->type == GGML_TYPE_F32 ? *reinterpret_cast<const float*>(p) : ggml_fp16_to_fp32(*reinterpret_cast<const ggml_fp16_t*>(p));
}

/// max |ggml − naive| / (1 + max |naive|) over a few query rows of every head.
double check_attention(const ggml_tensor* q, const ggml_tensor* k, const ggml_tensor* v, const ggml_tensor* out, int n,
                       bool causal, float scale) {
  double err = 0.0, big = 0.0;
  const int rows[] = {0, 1, n / 3, n - 1};
  for (int h = 0; h < H; ++h) {
    for (int i : rows) {
      const int nk = causal ? i + 1 : n;
      std::vector<double> s(static_cast<std::size_t>(nk));
      double m = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < nk; ++j) {
        double dot = 0.0;
        for (int c = 0; c < D; ++c) dot += double(element(q, c, i, h)) * element(k, c, j, h);
        s[static_cast<std::size_t>(j)] = scale * dot;
        m = std::max(m, s[static_cast<std::size_t>(j)]);
      }
      double l = 0.0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int c = 0; c < D; ++c) {
        double o = 0.0;
        for (int j = 0; j < nk; ++j) o += s[static_cast<std::size_t>(j)] * element(v, c, j, h);
        o /= l;
        // out: [D, H, n] (ggml permutes the result)
        const float g = *reinterpret_cast<const float*>(static_cast<const char*>(out->data) + c * out->nb[0] +
                                                        h * out->nb[1] + i * out->nb[2]);
        err = std::max(err, std::abs(g - o));
        big = std::max(big, std::abs(o));
      }
    }
  }
  return err / (1.0 + big);
}

record run_attention(int n, int threads, bool causal, ggml_type kv_type, int reps, std::mt19937& rng) {
  const std::size_t kv_bytes = ggml_type_size(kv_type);
  const std::size_t bytes = static_cast<std::size_t>(n) * D * H * (4 + 2 * kv_bytes + 4) +
                            (causal ? static_cast<std::size_t>(n) * n * 2 : 0) + (16u << 20);
  graph_runner g(bytes);
  ggml_tensor* q = ggml_new_tensor_3d(g.ctx, GGML_TYPE_F32, D, n, H);
  ggml_tensor* k = ggml_new_tensor_3d(g.ctx, kv_type, D, n, H);
  ggml_tensor* v = ggml_new_tensor_3d(g.ctx, kv_type, D, n, H);
  fill_random(q, rng);
  fill_random(k, rng);
  fill_random(v, rng);
  ggml_tensor* mask = nullptr;
  if (causal) {
    mask = ggml_new_tensor_2d(g.ctx, GGML_TYPE_F16, n, n);
    auto* m = static_cast<ggml_fp16_t*>(mask->data);
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), minus_inf = ggml_fp32_to_fp16(-INFINITY);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) m[static_cast<std::size_t>(i) * n + j] = j <= i ? zero : minus_inf;
  }
  const float scale = 1.0f / std::sqrt(float(D));
  ggml_tensor* out = ggml_flash_attn_ext(g.ctx, q, k, v, mask, scale, 0.0f, 0.0f);
  ggml_prec_set_acc(out, GGML_PREC_F32);  // as llama.cpp sets it
  g.build({out}, threads);
  g.compute();
  const double err = check_attention(q, k, v, out, n, causal, scale);
  const double tol = kv_type == GGML_TYPE_F32 ? 1e-4 : 2e-2;  // K/V were rounded to F16 before the check reads them
  if (!(err <= tol)) {
    std::fprintf(stderr, "ggml flash attention n=%d causal=%d: error %.3g > %.3g against the naive reference\n", n,
                 int(causal), err, tol);
    std::exit(1);
  }
  const std::string name = std::string(causal ? "softmax_causal" : "softmax") + (kv_type == GGML_TYPE_F16 ? "_kvf16" : "");
  return {name, n, threads, g.time(reps)};
}

/// One decode step: one query row per head over n cached keys (llama.cpp's decode: no mask
/// when every key is visible), checked against a naive loop. hq query heads over hkv K/V heads
/// (grouped-query attention when hkv < hq: ggml broadcasts K and V), width dim.
record run_decode(int n, int threads, ggml_type kv_type, int reps, std::mt19937& rng, int hq = H, int hkv = H,
                  int dim = D) {
  const std::size_t bytes = static_cast<std::size_t>(n) * dim * hkv * 2 * ggml_type_size(kv_type) + (16u << 20);
  graph_runner g(bytes);
  ggml_tensor* q = ggml_new_tensor_3d(g.ctx, GGML_TYPE_F32, dim, 1, hq);
  ggml_tensor* k = ggml_new_tensor_3d(g.ctx, kv_type, dim, n, hkv);
  ggml_tensor* v = ggml_new_tensor_3d(g.ctx, kv_type, dim, n, hkv);
  fill_random(q, rng);
  fill_random(k, rng);
  fill_random(v, rng);
  const float scale = 1.0f / std::sqrt(float(dim));
  ggml_tensor* out = ggml_flash_attn_ext(g.ctx, q, k, v, nullptr, scale, 0.0f, 0.0f);
  ggml_prec_set_acc(out, GGML_PREC_F32);
  g.build({out}, threads);
  g.compute();
  double err = 0.0, big = 0.0;
  for (int h = 0; h < hq; ++h) {
    const int hk = h / (hq / hkv);
    std::vector<double> s(static_cast<std::size_t>(n));
    double m = -std::numeric_limits<double>::infinity(), l = 0.0;
    for (int j = 0; j < n; ++j) {
      double dot = 0.0;
      for (int c = 0; c < dim; ++c) dot += double(element(q, c, 0, h)) * element(k, c, j, hk);
      m = std::max(m, s[static_cast<std::size_t>(j)] = scale * dot);
    }
    for (double& x : s) l += (x = std::exp(x - m));
    for (int c = 0; c < dim; ++c) {
      double o = 0.0;
      for (int j = 0; j < n; ++j) o += s[static_cast<std::size_t>(j)] * element(v, c, j, hk);
      const float got = *reinterpret_cast<const float*>(static_cast<const char*>(out->data) + c * out->nb[0] + h * out->nb[1]);
      err = std::max(err, std::abs(got - o / l));
      big = std::max(big, std::abs(o / l));
    }
  }
  if (!(err / (1.0 + big) <= (kv_type == GGML_TYPE_F32 ? 1e-4 : 2e-2))) {
    std::fprintf(stderr, "ggml decode n=%d: error %.3g against the naive reference\n", n, err / (1.0 + big));
    std::exit(1);
  }
  const std::string name = std::string(hkv < hq ? "softmax_decode_gqa" : "softmax_decode") +
                           (kv_type == GGML_TYPE_F16 ? "_kvf16" : "");
  return {name, n, threads, g.time(reps)};
}

record run_rope(int n, int threads, bool split_half, int reps, std::mt19937& rng) {
  graph_runner g(static_cast<std::size_t>(n) * D * H * 4 * 4 + (16u << 20));
  // rows [D, H, n]: ggml's RoPE layout (positions on dimension 2)
  ggml_tensor* q = ggml_new_tensor_3d(g.ctx, GGML_TYPE_F32, D, H, n);
  ggml_tensor* k = ggml_new_tensor_3d(g.ctx, GGML_TYPE_F32, D, H, n);
  fill_random(q, rng);
  fill_random(k, rng);
  ggml_tensor* pos = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, n);
  for (int i = 0; i < n; ++i) static_cast<std::int32_t*>(pos->data)[i] = i;
  const int mode = split_half ? GGML_ROPE_TYPE_NEOX : 0;
  auto rope = [&](ggml_tensor* x) {
    return ggml_rope_ext(g.ctx, x, pos, nullptr, D, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
  };
  ggml_tensor* qo = rope(q);
  ggml_tensor* ko = rope(k);
  g.build({qo, ko}, threads);
  return {split_half ? "rope_qk_split_half" : "rope_qk_interleaved", n, threads, g.time(reps)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "build/ggml_peer.json";
  int reps = 5;
  std::vector<int> sizes{512, 2048, 4096, 8192};
  std::vector<int> decode_sizes, gqa_sizes;
  for (int a = 1; a < argc; ++a) {
    const std::string s = argv[a];
    if (s == "--decode" && a + 1 < argc) {  // decode steps only, over caches of these sizes
      for (const char* p = argv[++a]; *p != '\0';) {
        decode_sizes.push_back(std::atoi(p));
        while (*p != '\0' && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else if (s == "--decode-gqa" && a + 1 < argc) {  // decode, 32 query heads over 8 K/V heads, d = 128
      for (const char* p = argv[++a]; *p != '\0';) {
        gqa_sizes.push_back(std::atoi(p));
        while (*p != '\0' && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else if (s == "--out" && a + 1 < argc) {
      out_path = argv[++a];
    } else if (s == "--reps" && a + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++a]));
    } else if (s == "--sizes" && a + 1 < argc) {
      sizes.clear();
      for (const char* p = argv[++a]; *p != '\0';) {
        sizes.push_back(std::atoi(p));
        while (*p != '\0' && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--out FILE] [--reps N] [--sizes 512,2048,...] [--decode 4096,16384,...] "
                   "[--decode-gqa 32768,...]\n",
                   argv[0]);
      return 2;
    }
  }
  ggml_cpu_init();
  std::printf("ggml %s (commit %s), %d heads, d = %d, fp32 Q, medians of %d\n", ggml_version(), ggml_commit(), H, D, reps);
  std::mt19937 rng(7);
  std::vector<record> recs;
  auto add = [&](const record& r) {
    std::printf("%-22s n=%5d threads=%d: %10.3f ms\n", r.kernel.c_str(), r.n, r.threads, r.seconds * 1e3);
    std::fflush(stdout);
    recs.push_back(r);
  };
  for (int threads : {1, 2}) {
    for (int n : decode_sizes) {
      add(run_decode(n, threads, GGML_TYPE_F32, std::max(reps, 21), rng));
      add(run_decode(n, threads, GGML_TYPE_F16, std::max(reps, 21), rng));
    }
    for (int n : gqa_sizes) {
      add(run_decode(n, threads, GGML_TYPE_F32, std::max(reps, 21), rng, 32, 8, 128));
      add(run_decode(n, threads, GGML_TYPE_F16, std::max(reps, 21), rng, 32, 8, 128));
    }
    if (!decode_sizes.empty() || !gqa_sizes.empty()) continue;
    for (int n : sizes) {
      const int r = n <= 4096 ? reps : std::max(1, reps / 2);
      for (bool causal : {false, true}) {
        add(run_attention(n, threads, causal, GGML_TYPE_F32, r, rng));
        add(run_attention(n, threads, causal, GGML_TYPE_F16, r, rng));
      }
      add(run_rope(n, threads, false, std::max(reps, 21), rng));
      add(run_rope(n, threads, true, std::max(reps, 21), rng));
    }
  }
  FILE* f = std::fopen(out_path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::fprintf(f, "{\"ggml_version\": \"%s\", \"ggml_commit\": \"%s\", \"records\": [\n", ggml_version(), ggml_commit());
  for (std::size_t i = 0; i < recs.size(); ++i)
    std::fprintf(f, " {\"kernel\": \"%s\", \"n\": %d, \"threads\": %d, \"seconds\": %.9g}%s\n", recs[i].kernel.c_str(),
                 recs[i].n, recs[i].threads, recs[i].seconds, i + 1 < recs.size() ? "," : "");
  std::fprintf(f, "]}\n");
  std::fclose(f);
  return 0;
}
