// SPDX-License-Identifier: MIT
// Bad input that used to crash (issue 36 §2), SIMD backend: a null multi-head view on a
// simd_threads pool, extents whose product passes int64 in simd_encoder::encode_qk, and a
// simd_encoder built from a temporary encoder. Run under ASan/UBSan: before the fixes these were a
// worker's SEGV, a signed overflow and a read of a destroyed encoder.
#include <lrpe/lrpe.hpp>
#include <lrpe/simd.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using lrpe::index_t;

/// A shared encoding handed out per head by a callable, counting the heads that asked for it.
struct counting_encodings {
  const lrpe::rope_neox<float>* enc;
  std::atomic<int>* calls;
  const lrpe::rope_neox<float>& operator()(index_t) const {
    calls->fetch_add(1);
    return *enc;
  }
};

template <class T>
lrpe::row_matrix<T> ramp(index_t rows, index_t cols) {
  lrpe::row_matrix<T> m(rows, cols);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) m(i, j) = static_cast<T>(((i * 7 + j * 3) % 17) - 8) / T(8);
  return m;
}

}  // namespace

TEST_CASE("simd_threads: a null multi-head view throws on the calling thread, every time, before any head runs") {
  const lrpe::rope_neox<float> enc(8);
  const lrpe::feature_maps::elu_plus_one phi;
  constexpr index_t B = 2, H = 64, N = 4, D = 8;
  std::vector<float> x(B * H * N * D, 0.5f), out(x.size());
  const auto good = lrpe::bsnh<const float>(x.data(), B, N, H, D);
  const auto null_in = lrpe::bsnh(static_cast<const float*>(nullptr), B, N, H, D);
  const auto o = lrpe::bsnh(out.data(), B, N, H, D);
  lrpe::backend::simd_threads pool(2);
  const lrpe::backend::simd_policy<> on_pool{&pool};
  std::atomic<int> calls{0};
  const counting_encodings per_head{&enc, &calls};
  // before: only head 0's own call saw the null pointer; the other thread ran head 1 at
  // nullptr + head_stride (SEGV in some runs, depending on which thread took which head)
  for (int run = 0; run < 40; ++run) {
    CAPTURE(run);
    CHECK_THROWS_WITH_AS(lrpe::softmax_attention(null_in, good, good, o, per_head, {}, on_pool),
                         "lrpe::softmax_attention (multi-head): argument 'q' must have non-null data when non-empty; "
                         "got nullptr",
                         lrpe::shape_error);
    CHECK_THROWS_WITH_AS(lrpe::softmax_attention(good, null_in, good, o, per_head, {}, on_pool),
                         doctest::Contains("(multi-head): argument 'k' must have non-null data"), lrpe::shape_error);
    CHECK_THROWS_WITH_AS(lrpe::linear_attention(good, good, good, lrpe::bsnh(static_cast<float*>(nullptr), B, N, H, D),
                                                per_head, phi, {}, on_pool),
                         doctest::Contains("lrpe::linear_attention (multi-head): argument 'out' must have non-null data"),
                         lrpe::shape_error);
  }
  CHECK(calls.load() == 0);
  // the pool still works afterwards
  CHECK_NOTHROW(lrpe::softmax_attention(good, good, good, o, enc, {}, on_pool));
  for (float y : out) CHECK(y == doctest::Approx(0.5f));  // every value is 0.5
}

TEST_CASE("simd encode_qk: batch x heads past index_t is an error (no signed overflow)") {
  const lrpe::rope_neox<float> enc(8);
  const lrpe::simd_encoder<lrpe::rope_neox<float>> se(enc);
  float x = 0;
  const index_t big = index_t{1} << 32;
  const lrpe::heads_view<const float> q{&x, big, big, 0, 8, 0, 0, 8};
  const lrpe::heads_view<float> q_out{&x, big, big, 0, 8, 0, 0, 8};
  const lrpe::heads_view<const float> k{&x, 1, 1, 0, 8, 0, 0, 8};
  const lrpe::heads_view<float> k_out{&x, 1, 1, 0, 8, 0, 0, 8};
  CHECK_THROWS_WITH_AS(se.encode_qk(q, 0, k, 0, q_out, k_out),
                       "lrpe::simd_encoder::encode_qk: argument 'q' must have batch*heads an index_t; "
                       "got 4294967296x4294967296",
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(se.encode_qk(k, 0, q, 0, k_out, q_out), doctest::Contains("argument 'k' must have batch*heads"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::encode_qk(lrpe::backend::simd<>{}, enc, q, 0, k, 0, q_out, k_out),
                       doctest::Contains("'q' must have batch*heads an index_t"), lrpe::shape_error);
}

TEST_CASE_TEMPLATE("simd_encoder built from a temporary keeps its own encoder (copies and moves too)", E,
                   lrpe::rope_neox<float>, lrpe::type1<float>, lrpe::type4<double>) {
  using T = typename E::scalar;
  constexpr index_t d = 64, n = 37;
  const E kept(d);  // the same encoder, alive for the whole test
  const lrpe::row_matrix<T> x = ramp<T>(n, d);
  lrpe::row_matrix<T> want(n, kept.feature_dim()), got(n, kept.feature_dim());
  lrpe::simd_encoder<E>(kept).encode(lrpe::view(x), 5, lrpe::view(want));
  // before: the encoder held a pointer to the temporary, destroyed at the end of the declaration
  // (stack-use-after-scope / heap-use-after-free under ASan on the first encode)
  lrpe::simd_encoder<E> from_temporary{E(d)};
  from_temporary.encode(lrpe::view(x), 5, lrpe::view(got));
  CHECK(got == want);
  // class template argument deduction takes the same constructor
  lrpe::simd_encoder deduced(E(d), lrpe::position_tables::direct);
  static_assert(std::is_same_v<decltype(deduced), lrpe::simd_encoder<E>>);
  got.setZero();
  deduced.encode(lrpe::view(x), 5, lrpe::view(got));
  lrpe::row_matrix<T> want_direct(n, kept.feature_dim());
  lrpe::simd_encoder<E>(kept, lrpe::position_tables::direct).encode(lrpe::view(x), 5, lrpe::view(want_direct));
  CHECK(got == want_direct);
  // copies and moves share the owned encoder: each outlives the one it came from
  auto copy = std::make_unique<lrpe::simd_encoder<E>>(from_temporary);
  {
    lrpe::simd_encoder<E> moved(std::move(from_temporary));
    from_temporary = lrpe::simd_encoder<E>(E(d + 2));  // the original now holds another encoder
    got.setZero();
    moved.encode(lrpe::view(x), 5, lrpe::view(got));
    CHECK(got == want);
  }
  got.setZero();
  copy->encode(lrpe::view(x), 5, lrpe::view(got));
  CHECK(got == want);
  CHECK(&copy->encoding() != &kept);
  CHECK(from_temporary.encoding().dim() == d + 2);
  // from an lvalue it still refers to the caller's encoder (no copy)
  CHECK(&lrpe::simd_encoder<E>(kept).encoding() == &kept);
  // independent check: the reference backend's features of the same rows
  lrpe::row_matrix<T> ref(n, kept.feature_dim());
  kept.encode(lrpe::view(x), 5, lrpe::view(ref));
  CHECK((want - ref).cwiseAbs().maxCoeff() <= T(2 * d) * std::numeric_limits<T>::epsilon());
}

// ---- found by the fuzz targets (tests/fuzz/regressions holds each input)

TEST_CASE("simd linear attention: V read in place only when d_v is whole vectors (no read past the view)") {
  // V's row stride is d_v rounded up to the vector width and V is aligned: the kernels used it in
  // place and loaded a whole vector from the last row, past the memory the view covers (ASan:
  // heap-buffer-overflow). The buffer below holds exactly what the view spans.
  constexpr index_t W = static_cast<index_t>(xsimd::batch<float>::size);
  const index_t n = 8, dv = 4;
  const std::size_t count = static_cast<std::size_t>((n - 1) * W + dv);
  struct aligned_free {
    void operator()(float* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<float, aligned_free> v(static_cast<float*>(::operator new(count * sizeof(float), std::align_val_t{64})));
  for (std::size_t i = 0; i < count; ++i) v.get()[i] = static_cast<float>(i % 5) - 2.0f;
  const lrpe::row_matrix<float> q = ramp<float>(n, 4), k = ramp<float>(n, 4);
  const lrpe::matrix_view<const float> vv(v.get(), n, dv, W);
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    lrpe::row_matrix<float> out(n, dv), ref(n, dv);
    const lrpe::linear_options opt{.causal = causal};
    lrpe::linear_attention(q, k, vv, out, lrpe::no_encoding{}, lrpe::feature_maps::identity{}, opt,
                           lrpe::backend::simd<>{});
    lrpe::linear_attention(q, k, vv, ref, lrpe::no_encoding{}, lrpe::feature_maps::identity{}, opt);
    CHECK((out - ref).cwiseAbs().maxCoeff() <= 1e-5f);
  }
}

TEST_CASE_TEMPLATE("simd softmax: a NaN logit gives a NaN row without a NaN-to-integer conversion", T, float, double) {
  // A scale whose logits overflow is documented to give NaN rows; the exp2 kernel converted the
  // NaN to an int64 exponent (UBSan: 'nan is outside the range of representable values').
  const lrpe::row_matrix<T> q = lrpe::row_matrix<T>::Ones(16, 4), k = q, v = q;
  lrpe::row_matrix<T> out(16, 4);
  lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, lrpe::softmax_options<>{.scale = 1e30},
                          lrpe::backend::simd<>{});
  lrpe::row_matrix<T> q_nan = q;
  q_nan(3, 1) = std::numeric_limits<T>::quiet_NaN();
  lrpe::softmax_attention(q_nan, k, v, out, lrpe::no_encoding{}, lrpe::softmax_options<>{}, lrpe::backend::simd<>{});
  CHECK(std::isnan(out(3, 0)));
  CHECK(std::isfinite(out(2, 0)));
}

TEST_CASE("simd softmax and linear: V and out without columns, null data (no memcpy from null)") {
  const lrpe::row_matrix<double> q = lrpe::row_matrix<double>::Ones(16, 8), k = q;
  lrpe::row_matrix<double> v(16, 0), out(16, 0);  // an empty Eigen matrix: data() is null
  CHECK_NOTHROW(lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, lrpe::softmax_options<>{},
                                        lrpe::backend::simd<>{}));
  CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, lrpe::feature_maps::identity{},
                                       lrpe::linear_options{.causal = true}, lrpe::backend::simd<>{}));
}
