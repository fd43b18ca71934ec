// SPDX-License-Identifier: MIT
// The SIMD backend's thread pool: shared pools, every item once, spinning and sleeping workers.
#include "simd_attention_helpers.hpp"

TEST_CASE("simd: two threads sharing one pool get the results of a pool each") {
  // Thread A: multi-head linear and softmax calls (the pool's run, workspace 0 on the caller);
  // thread B: single-head calls on the same simd_policy{&pool} (workspace 0 for the whole call).
  // The pool's call lock serialises them; without it B's workspace growth frees A's scratch
  // (a heap-use-after-free under ASan, wrong results without).
  using T = float;
  lrpe::generator g(71);
  const index_t heads = 4, n = 120, d = 32, n2 = 77, d2 = 16;
  std::vector<T> q(static_cast<std::size_t>(heads * n * d)), k(q.size()), v(q.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = static_cast<T>(0.5 * g.normal());
  const auto view = [&](std::vector<T>& x) { return lrpe::bnsh(x.data(), 1, heads, n, d); };
  const lrpe::rope_neox<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  const lrpe::linear_options lin{.causal = true, .norm = lrpe::normalisation::denominator, .decay = 0.99};
  const lrpe::softmax_options<> soft{.causal = true};
  const rm<T> q2 = random_matrix<T>(g, n2, d2), k2 = random_matrix<T>(g, n2, d2), v2 = random_matrix<T>(g, n2, d2);
  std::vector<position_t> pos2(static_cast<std::size_t>(n2));
  for (index_t i = 0; i < n2; ++i) pos2[static_cast<std::size_t>(i)] = 3 * i;  // arrays: the general path
  const lrpe::linear_options lin2{.causal = true, .decay = 0.95, .q_positions = pos2, .k_positions = pos2};
  // what each call gives on a pool of its own (results do not depend on the threads)
  std::vector<T> want_lin(q.size()), want_soft(q.size());
  rm<T> want2(n2, d2), want2_soft(n2, d2);
  {
    lrpe::backend::simd_threads own(2);
    const lrpe::backend::simd_policy<> p{&own};
    lrpe::linear_attention(view(q), view(k), view(v), view(want_lin), enc, phi, lin, p);
    lrpe::softmax_attention(view(q), view(k), view(v), view(want_soft), enc, soft, p);
    lrpe::linear_attention(q2, k2, v2, want2, lrpe::no_encoding{}, phi, lin2, p);
    lrpe::softmax_attention(q2, k2, v2, want2_soft, lrpe::no_encoding{}, soft, p);
  }
  lrpe::backend::simd_threads pool(2);
  const lrpe::backend::simd_policy<> shared{&pool};
  constexpr int reps = 12;
  int wrong_a = 0, wrong_b = 0;
  std::thread a([&] {
    std::vector<T> o(q.size());
    for (int r = 0; r < reps; ++r) {
      lrpe::linear_attention(view(q), view(k), view(v), view(o), enc, phi, lin, shared);
      wrong_a += o != want_lin;
      lrpe::softmax_attention(view(q), view(k), view(v), view(o), enc, soft, shared);
      wrong_a += o != want_soft;
    }
  });
  std::thread b([&] {
    rm<T> o(n2, d2);
    for (int r = 0; r < 4 * reps; ++r) {
      lrpe::linear_attention(q2, k2, v2, o, lrpe::no_encoding{}, phi, lin2, shared);
      wrong_b += o != want2;
      lrpe::softmax_attention(q2, k2, v2, o, lrpe::no_encoding{}, soft, shared);
      wrong_b += o != want2_soft;
    }
  });
  a.join();
  b.join();
  CHECK(wrong_a == 0);
  CHECK(wrong_b == 0);
}

TEST_CASE("simd_threads: every item once per run, whether the worker is spinning or asleep; spin < 0 is an error") {
  // spin 0: the worker always sleeps (the condition variable path); 50 ms: a run that follows
  // within that finds it spinning. Runs back to back and after a pause longer than the spin.
  using namespace std::chrono_literals;
  for (const auto spin : {std::chrono::microseconds{0}, std::chrono::microseconds{50'000}}) {
    CAPTURE(spin.count());
    lrpe::backend::simd_threads pool(2, spin);
    for (int r = 0; r < 40; ++r) {
      const index_t count = 1 + r % 9;
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
      std::atomic<int> bad_thread{0};
      pool.run(count, [&](index_t i, int t) {
        hits[static_cast<std::size_t>(i)].fetch_add(1);
        if (t < 0 || t >= pool.size()) bad_thread.fetch_add(1);
      });
      CHECK(bad_thread.load() == 0);
      for (const auto& h : hits) CHECK(h.load() == 1);
      if (r % 10 == 9) std::this_thread::sleep_for(2ms);  // past a 0 µs spin; within the 50 ms one
    }
    // an exception in a task reaches the caller, and the pool runs the next call
    CHECK_THROWS_AS(pool.run(4, [](index_t i, int) { if (i == 2) throw std::runtime_error("task"); }), std::runtime_error);
    std::atomic<int> after{0};
    pool.run(5, [&](index_t, int) { after.fetch_add(1); });
    CHECK(after.load() == 5);
  }
  CHECK_THROWS_WITH_AS(lrpe::backend::simd_threads(2, std::chrono::microseconds{-1}),
                       doctest::Contains("argument 'spin' must be >= 0"), lrpe::parameter_error);
}

