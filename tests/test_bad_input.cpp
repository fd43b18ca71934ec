// SPDX-License-Identifier: MIT
// Bad input that used to crash or give wrong answers (issue 36 §2), reference backend: each case
// must throw an lrpe::error naming the argument, before anything is read or written. Run under
// ASan/UBSan: before the fixes, these cases were heap-buffer-overflow writes, null dereferences,
// signed overflows or silently wrong results.
#include <lrpe/lrpe.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using lrpe::index_t;
using lrpe::position_t;
namespace cn = lrpe::canonical;

constexpr position_t lo64 = std::numeric_limits<position_t>::min();
constexpr position_t hi64 = std::numeric_limits<position_t>::max();

/// A shared encoding handed out per head by a callable, counting the heads that asked for it:
/// a multi-head call that validates everything before any head runs never calls it on error.
struct counting_encodings {
  const lrpe::rope_neox<float>* enc;
  int* calls;
  const lrpe::rope_neox<float>& operator()(index_t) const {
    ++*calls;
    return *enc;
  }
};

}  // namespace

// ---------------------------------------------------------------- item 1: out.seq of GQA calls

TEST_CASE("multi-head softmax, grouped K/V: out.seq and out.dim must match q.seq and v.dim") {
  const lrpe::rope_neox<float> enc(8);
  constexpr index_t B = 2, H = 4, HK = 2, D = 8, NK = 5;
  std::vector<float> q(B * H * 1 * D, 0.5f), k(B * HK * NK * D, 0.25f), v(B * HK * NK * D, 1.0f);
  const auto qv = lrpe::bnsh<const float>(q.data(), B, H, 1, D);  // a decode step: one query row
  const auto kv = lrpe::bnsh<const float>(k.data(), B, HK, NK, D);
  const auto vv = lrpe::bnsh<const float>(v.data(), B, HK, NK, D);
  // BSNH with seq = 0: head_stride = D, so the grouped decode path took it and wrote 2 rows a group
  // past a one-element buffer (heap-buffer-overflow before the check)
  std::vector<float> shorter(1);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(qv, kv, vv, lrpe::bsnh(shorter.data(), B, 0, H, D), enc),
                       "lrpe::softmax_attention (multi-head): argument 'out.seq' must equal q.seq = 1; got 0",
                       lrpe::shape_error);
  // a longer out was accepted and only its first row written
  std::vector<float> longer(B * H * 3 * D);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(qv, kv, vv, lrpe::bnsh(longer.data(), B, H, 3, D), enc),
                       doctest::Contains("argument 'out.seq' must equal q.seq = 1; got 3"), lrpe::shape_error);
  // equal head counts: the same front check (it used to come from the first head's call)
  std::vector<float> kfull(B * H * NK * D, 0.25f);
  const auto kf = lrpe::bnsh<const float>(kfull.data(), B, H, NK, D);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(qv, kf, kf, lrpe::bnsh(longer.data(), B, H, 3, D), enc),
                       doctest::Contains("'out.seq' must equal q.seq = 1"), lrpe::shape_error);
  // out's width against v's, on the grouped path too
  std::vector<float> wide(B * H * 1 * (D + 2));
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(qv, kv, vv, lrpe::bnsh(wide.data(), B, H, 1, D + 2), enc),
                       doctest::Contains("'out.dim' must equal v.dim = 8; got 10"), lrpe::shape_error);
  // k's width against q's, v's rows against k's
  CHECK_THROWS_WITH_AS(
      lrpe::softmax_attention(qv, lrpe::bnsh<const float>(k.data(), B, HK, NK - 1, D + 1), vv,
                              lrpe::bnsh(longer.data(), B, H, 1, D), enc),
      doctest::Contains("'k.dim' must equal q.dim = 8; got 9"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(qv, kv, lrpe::bnsh<const float>(v.data(), B, HK, NK - 1, D),
                                               lrpe::bnsh(longer.data(), B, H, 1, D), enc),
                       doctest::Contains("'v.seq' must equal k.seq = 5; got 4"), lrpe::shape_error);
  // the matching call still works, and out gets one row per head
  std::vector<float> out(B * H * 1 * D, -1.0f);
  CHECK_NOTHROW(lrpe::softmax_attention(qv, kv, vv, lrpe::bnsh(out.data(), B, H, 1, D), enc));
  for (float x : out) CHECK(x == doctest::Approx(1.0f));  // every value row is 1
}

TEST_CASE("multi-head linear: out.seq and out.dim are checked at the front, on every path") {
  const lrpe::rope_neox<float> enc(8);
  const lrpe::feature_maps::elu_plus_one phi;
  constexpr index_t B = 1, H = 4, HK = 2, D = 8, N = 3;
  std::vector<float> q(B * H * N * D, 0.5f), k(B * HK * N * D, 0.25f), v(B * HK * N * D, 1.0f);
  const auto qv = lrpe::bnsh<const float>(q.data(), B, H, N, D);
  const auto kv = lrpe::bnsh<const float>(k.data(), B, HK, N, D);
  const auto vv = lrpe::bnsh<const float>(v.data(), B, HK, N, D);
  std::vector<float> o(B * H * (N + 1) * (D + 1));
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(qv, kv, vv, lrpe::bnsh(o.data(), B, H, N + 1, D), enc, phi),
                       "lrpe::linear_attention (multi-head): argument 'out.seq' must equal q.seq = 3; got 4",
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(qv, kv, vv, lrpe::bnsh(o.data(), B, H, N, D + 1), enc, phi),
                       doctest::Contains("'out.dim' must equal v.dim = 8; got 9"), lrpe::shape_error);
  std::vector<lrpe::linear_attention_state<float>> states(B * H, lrpe::linear_attention_state<float>(D, D));
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(qv, kv, vv, lrpe::bnsh(o.data(), B, H, N + 1, D), enc, phi,
                                              std::span(states), lrpe::linear_options{.causal = true}),
                       doctest::Contains("'out.seq' must equal q.seq = 3"), lrpe::shape_error);
  for (const auto& st : states) CHECK(st.empty());  // nothing was folded in
}

// ---------------------------------------------------------------- item 2: null multi-head views

TEST_CASE("multi-head: a null view with elements is an error before any head runs") {
  const lrpe::rope_neox<float> enc(8);
  const lrpe::feature_maps::elu_plus_one phi;
  constexpr index_t B = 2, H = 6, N = 3, D = 8;
  std::vector<float> x(B * H * N * D, 0.5f), out(x.size());
  const auto good = lrpe::bsnh<const float>(x.data(), B, N, H, D);
  const auto null_in = lrpe::bsnh(static_cast<const float*>(nullptr), B, N, H, D);
  const auto o = lrpe::bsnh(out.data(), B, N, H, D);
  int calls = 0;
  const counting_encodings per_head{&enc, &calls};
  const std::string softmax_front = "lrpe::softmax_attention (multi-head): argument ";
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(null_in, good, good, o, per_head),
                       (softmax_front + "'q' must have non-null data when non-empty; got nullptr").c_str(),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(good, good, null_in, o, per_head),
                       doctest::Contains("(multi-head): argument 'v' must have non-null data"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(good, good, good, lrpe::bsnh(static_cast<float*>(nullptr), B, N, H, D),
                                               per_head),
                       doctest::Contains("(multi-head): argument 'out' must have non-null data"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(good, null_in, good, o, per_head, phi),
                       doctest::Contains("lrpe::linear_attention (multi-head): argument 'k' must have non-null data"),
                       lrpe::shape_error);
  CHECK(calls == 0);  // no head started (before: head 0 asked for its encoding, then threw)
  // views without elements may be null (nothing is read)
  CHECK_NOTHROW(lrpe::softmax_attention(lrpe::bsnh(static_cast<const float*>(nullptr), B, 0, H, D),
                                        lrpe::bsnh(static_cast<const float*>(nullptr), B, 0, H, D),
                                        lrpe::bsnh(static_cast<const float*>(nullptr), B, 0, H, D),
                                        lrpe::bsnh(static_cast<float*>(nullptr), B, 0, H, D), enc));
}

// ---------------------------------------------------------------- item 3: snapshots

TEST_CASE("snapshot: count 0 with a nonzero S or z, or a last position, is rejected") {
  using T = float;
  lrpe::linear_attention_state<T> st(4, 2, 0.5);
  const T k[4] = {1, -2, 3, 0.25f}, v[2] = {7, -1};
  st.append_features(k, v, 10);
  st.append_features(k, v, 12);
  const std::vector<double> good = st.export_state().to_flat();
  REQUIRE(good[6] == 2);  // count
  {
    std::vector<double> flat = good;
    flat[6] = 0;  // a zeroed count with S and z kept: resuming and appending gave wrong outputs
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(flat),
                         doctest::Contains("argument 'flat[6] (count)' must be > 0 when S or z has a nonzero entry"),
                         lrpe::parameter_error);
    auto snap = st.export_state();
    snap.count = 0;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>{snap},
                         doctest::Contains("argument 'snapshot.count' must be > 0 when S or z has a nonzero entry"),
                         lrpe::parameter_error);
  }
  // an empty state: S = 0, z = 0 and last position 0; only z nonzero, or only the position, is corrupt too
  lrpe::linear_attention_state<T> fresh(4, 2, 0.5);
  const std::vector<double> empty_flat = fresh.export_state().to_flat();
  CHECK_NOTHROW(lrpe::linear_attention_state<T>(lrpe::linear_attention_snapshot<T>::from_flat(empty_flat)));
  {
    std::vector<double> flat = empty_flat;
    flat.back() = 0.5;  // z[3]
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(flat), doctest::Contains("'flat[6] (count)'"),
                         lrpe::parameter_error);
    flat = empty_flat;
    flat[5] = 7;  // last_position's low half
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(flat),
                         doctest::Contains("'flat[6] (count)' must be > 0 when last_position is not 0"),
                         lrpe::parameter_error);
    auto snap = fresh.export_state();
    snap.last_position = -3;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>{snap}, doctest::Contains("'snapshot.count'"),
                         lrpe::parameter_error);
  }
  // the decay is checked by from_flat itself (the state's constructor checked it only later)
  for (const double bad : {1.5, 0.0, -0.5}) {
    CAPTURE(bad);
    std::vector<double> flat = good;
    flat[3] = bad;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(flat),
                         doctest::Contains("'flat[3] (decay)' must be in (0, 1]"), lrpe::parameter_error);
  }
  {
    std::vector<double> flat = good;
    flat[3] = NAN;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(flat), doctest::Contains("'flat[3] (decay)'"),
                         lrpe::domain_error);
  }
  // a valid snapshot still resumes bit for bit
  const lrpe::linear_attention_state<T> back(lrpe::linear_attention_snapshot<T>::from_flat(good));
  CHECK(back.kv() == st.kv());
  CHECK(back.count() == 2);
}

TEST_CASE("state::assign: null pointers, and a count of 0 with nonzero S or z, are errors") {
  using T = double;
  lrpe::linear_attention_state<T> st(2, 3);
  const T kv[6] = {1, 2, 3, 4, 5, 6}, z[2] = {1, 1}, zeros[6] = {};
  CHECK_THROWS_WITH_AS(st.assign(nullptr, 3, z, 5, 1),
                       "lrpe::linear_attention_state::assign: argument 'kv' must be non-null; got nullptr",
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(st.assign(kv, 3, nullptr, 5, 1), doctest::Contains("argument 'k_sum' must be non-null"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(st.assign(kv, 3, z, 5, 0), doctest::Contains("argument 'count' must be > 0 when S or z"),
                       lrpe::parameter_error);
  CHECK(st.empty());
  CHECK(st.kv().isZero());
  CHECK_NOTHROW(st.assign(zeros, 3, zeros, 0, 0));
  CHECK_NOTHROW(st.assign(kv, 3, z, 5, 1));
  CHECK(st.kv()(1, 2) == 6);
  CHECK(st.last_position() == 5);
}

// ---------------------------------------------------------------- item 4: buckets at the extremes

TEST_CASE("t5_bucket: a configuration without a bucket for every offset is an error, not UB") {
  for (const index_t nb : {index_t{-5}, index_t{0}, index_t{1}}) {
    for (const bool bidirectional : {true, false}) {
      CAPTURE(nb);
      CAPTURE(bidirectional);
      CHECK_THROWS_WITH_AS((void)cn::t5_bucket(100, cn::t5_buckets{nb, 128, bidirectional}),
                           doctest::Contains("lrpe::canonical::t5_bucket: argument 'num_buckets' must be >= "),
                           lrpe::parameter_error);
    }
  }
  CHECK_THROWS_WITH_AS((void)cn::t5_bucket(100, cn::t5_buckets{32, 8, true}),
                       doctest::Contains("argument 'max_distance' must be > max_exact = 8"), lrpe::parameter_error);
  // (num_buckets 2^63 − 1, max_distance max_exact + 1): the log base rounds to 1 in double, and
  // log(1)/log(1) = NaN was converted to int64 (undefined); now a bucket in range
  const cn::t5_buckets huge{hi64, (index_t{1} << 61), true};
  REQUIRE(huge.max_exact() == (index_t{1} << 61) - 1);
  for (const position_t rel : {lo64, lo64 + 1, -huge.max_exact(), -huge.max_exact() - 1, position_t{-1}, position_t{0},
                               position_t{1}, huge.max_exact(), hi64}) {
    CAPTURE(rel);
    const index_t b = cn::t5_bucket(rel, huge);
    CHECK(b >= 0);
    CHECK(b < huge.num_buckets);
    CHECK((b >= huge.num_buckets / 2) == (rel > 0));  // the upper half holds keys after the query
  }
}

TEST_CASE("t5_bucket at the ends of int64: the published buckets (bidirectional and causal)") {
  // 32 buckets, max_distance 128: 16 a side, |rel| < 8 exact, then log-spaced up to bucket 15 of a side
  struct expect {
    position_t rel;
    index_t bidirectional, causal;
  };
  for (const expect e : {expect{lo64, 15, 31}, expect{lo64 + 1, 15, 31}, expect{-1, 1, 1}, expect{0, 0, 0},
                         expect{1, 17, 0}, expect{7, 23, 0}, expect{-7, 7, 7}, expect{hi64 - 1, 31, 0},
                         expect{hi64, 31, 0}}) {
    CAPTURE(e.rel);
    CHECK(cn::t5_bucket(e.rel, cn::t5_buckets{32, 128, true}) == e.bidirectional);
    CHECK(cn::t5_bucket(e.rel, cn::t5_buckets{32, 128, false}) == e.causal);
  }
}

TEST_CASE("deberta_log_bucket: invalid bucket_size or max_position is an error, not UB or a wrong sign") {
  CHECK_THROWS_WITH_AS((void)cn::deberta_log_bucket(100, 4, lo64),
                       doctest::Contains("lrpe::canonical::deberta_log_bucket: argument 'max_position' must be > "
                                         "bucket_size/2 + 1 = 3"),
                       lrpe::parameter_error);
  // (2^63 − 1, 8, 3) returned −179: max_position − 1 < mid turned the log negative
  CHECK_THROWS_WITH_AS((void)cn::deberta_log_bucket(hi64, 8, 3), doctest::Contains("argument 'max_position'"),
                       lrpe::parameter_error);
  for (const index_t bs : {std::numeric_limits<index_t>::min(), index_t{-4}, index_t{0}, index_t{1}, index_t{3}}) {
    CAPTURE(bs);
    CHECK_THROWS_WITH_AS((void)cn::deberta_log_bucket(100, bs, 512),
                         doctest::Contains("argument 'bucket_size' must be >= 4"), lrpe::parameter_error);
  }
  // deberta_relative_position checks the same through its configuration
  CHECK_THROWS_AS((void)cn::deberta_relative_position(0, 100, cn::deberta_buckets{8, 3}), lrpe::parameter_error);
  CHECK(cn::deberta_relative_position(0, 100, cn::deberta_buckets{0, 3}) == -100);  // no log buckets: s − t
}

TEST_CASE("deberta_log_bucket at the ends of int64 and of its parameters: HF's formula, odd in rel, no overflow") {
  // an independent evaluation of HF's formula in long double:
  // sign(rel)·(⌈log(|rel|/mid)/log((max − 1)/mid)·(mid − 1)⌉ + mid) for |rel| > mid, else rel
  const auto expected = [](position_t rel, index_t bucket_size, position_t max_position) -> long double {
    const long double mid = static_cast<long double>(bucket_size / 2);
    const long double a = rel == lo64 ? 0x1p63L : std::abs(static_cast<long double>(rel));
    if (a <= mid) return static_cast<long double>(rel);
    const long double p = std::ceil(std::log(a / mid) / std::log((static_cast<long double>(max_position) - 1) / mid) *
                                    (mid - 1)) +
                          mid;
    return rel < 0 ? -p : p;
  };
  struct config {
    index_t bucket_size;
    position_t max_position;
  };
  for (const config c : {config{256, 512}, config{4, 4}, config{4, hi64}, config{hi64 - 1, hi64}, config{8, 6}}) {
    for (const position_t rel : {lo64, lo64 + 1, position_t{-1}, position_t{0}, position_t{1}, hi64 - 1, hi64}) {
      CAPTURE(c.bucket_size);
      CAPTURE(c.max_position);
      CAPTURE(rel);
      const position_t got = cn::deberta_log_bucket(rel, c.bucket_size, c.max_position);
      const long double want = expected(rel, c.bucket_size, c.max_position);
      // computed in double: ⌈·⌉ of a rounded quotient may differ by one from the long-double value,
      // and a value past int64 saturates
      if (std::abs(want) <= 2) CHECK(static_cast<long double>(got) == want);
      if (std::abs(want) < 0x1p62L) CHECK(std::abs(static_cast<long double>(got) - want) <= 1);
      else CHECK(std::abs(static_cast<long double>(got)) >= 0x1p61L);
      CHECK((rel > 0) == (got > 0));
      CHECK((rel == 0) == (got == 0));
    }
  }
}

// ---------------------------------------------------------------- item 5: extents and sizes

TEST_CASE("heads_view built by hand: batch x heads, and the offset of the last element, must be index_t") {
  // (bnsh / bsnh check their extents; a view built field by field reached the fronts unchecked)
  const lrpe::rope_neox<float> enc(8);
  float x = 0;
  const index_t big = index_t{1} << 32;
  // no rows, but batch·heads (2^64) is what every multi-head loop counts: a signed overflow before
  const lrpe::heads_view<const float> q{&x, big, big, 0, 8, 0, 0, 8};
  lrpe::heads_view<float> o{&x, big, big, 0, 8, 0, 0, 8};
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, q, q, o, enc),
                       "lrpe::softmax_attention (multi-head): argument 'q' must have batch*heads an index_t; "
                       "got 4294967296x4294967296",
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, q, q, o, enc, lrpe::feature_maps::elu_plus_one{}),
                       doctest::Contains("(multi-head): argument 'q' must have batch*heads an index_t"),
                       lrpe::shape_error);
  // strides whose last element lies past index_t (2·2^62 + 15): head (2, 0) read far away before
  const lrpe::heads_view<const float> far{&x, 3, 1, 2, 8, index_t{1} << 62, 16, 8};
  lrpe::heads_view<float> o3{&x, 3, 1, 2, 8, 16, 16, 8};
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(far, far, far, o3, enc),
                       doctest::Contains("(multi-head): argument 'q' must have the offset of its last element "
                                         "((batch-1)*batch_stride + (heads-1)*head_stride + (seq-1)*seq_stride + dim-1) "
                                         "an index_t"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(lrpe::heads_view<const float>(o3), far, far, o3, enc,
                                              lrpe::feature_maps::elu_plus_one{}),
                       doctest::Contains("argument 'k' must have the offset of its last element"), lrpe::shape_error);
  // with no rows the heads' start offsets are still formed (head(2, 0) at 2·2^62)
  const lrpe::heads_view<const float> far_empty{&x, 3, 1, 0, 8, index_t{1} << 62, 16, 8};
  lrpe::heads_view<float> o_empty{&x, 3, 1, 0, 8, 0, 0, 8};
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(far_empty, far_empty, far_empty, o_empty, enc),
                       doctest::Contains("argument 'q' must have the offset of its last element"), lrpe::shape_error);
  CHECK_NOTHROW(lrpe::softmax_attention(lrpe::heads_view<const float>(o_empty), lrpe::heads_view<const float>(o_empty),
                                        lrpe::heads_view<const float>(o_empty), o_empty, enc));
}

TEST_CASE("sizes past lrpe::max_dim are an lrpe::shape_error naming the argument, not length_error/bad_alloc") {
  const auto too_big = [](auto make, const std::string& arg) {
    CAPTURE(arg);
    try {
      make();
      FAIL("no exception");
    } catch (const lrpe::shape_error& e) {
      const std::string what = e.what();
      CHECK(what.find("'" + arg + "'") != std::string::npos);
      CHECK(what.find("lrpe::max_dim") != std::string::npos);
    } catch (const std::exception& e) {
      FAIL("not an lrpe::shape_error: " << std::string(e.what()));
    }
  };
  for (const index_t n : {hi64, lrpe::max_dim + 1}) {
    CAPTURE(n);
    const index_t even = n == hi64 ? hi64 - 1 : lrpe::max_dim + 2;
    too_big([n] { (void)lrpe::p::permutation<float>::seeded(n, 1); }, "dim");
    too_big([n] { (void)lrpe::p::odd_even<float>(n); }, "dim");
    too_big([n] { (void)lrpe::p::householder<float>::seeded(n, 1); }, "dim");
    too_big([n] { (void)lrpe::p::dct<float>(n); }, "dim");
    too_big([n] { (void)lrpe::p::dft<float>(n, lrpe::p::dft_method::dense); }, "dim");
    too_big([n] { (void)lrpe::p::identity<float>(n); }, "dim");
    too_big([n] { (void)lrpe::lambda::rotation<float>(n); }, "dim");
    too_big([n] { (void)lrpe::lambda::complex_phase<float>(n); }, "dim");
    too_big([n] { (void)lrpe::lambda::permutation_power<float>::seeded(n, 1); }, "dim");
    too_big([n] { (void)lrpe::lambda::identity<float>(n); }, "dim");
    too_big([n] { (void)lrpe::freq::complex_phase(n); }, "features");
    too_big([even] { (void)lrpe::freq::theta_a(even); }, "rotated_dim");
    too_big([even] { (void)lrpe::freq::theta_b(even, 100.0); }, "rotated_dim");
    too_big([even] { (void)lrpe::freq::theta_c(even, 100.0); }, "rotated_dim");
    too_big([n] { (void)lrpe::linear_attention_state<float>(n, 4); }, "feature_dim");
    too_big([n] { (void)lrpe::linear_attention_state<float>(4, n); }, "value_dim");
    too_big([n] { (void)cn::urpe<float>::ones(n); }, "heads");
  }
  too_big([] { (void)lrpe::freq::rope(hi64 / 4); }, "pairs");
  too_big([] { (void)lrpe::freq::rope(lrpe::max_dim / 2 + 1); }, "pairs");
  too_big([] { (void)cn::urpe<float>::ones(1, cn::t5_buckets{hi64, hi64, true}); }, "num_buckets");
  // the presets reach the same checks
  CHECK_THROWS_WITH_AS((void)lrpe::rope_neox<float>(hi64), doctest::Contains("lrpe::max_dim"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((void)lrpe::permuteformer<float>(hi64), doctest::Contains("lrpe::max_dim"), lrpe::shape_error);
  // alibi_slopes: a parameter_error, as for heads < 1
  CHECK_THROWS_WITH_AS((void)cn::alibi_slopes(lrpe::max_dim + 1), doctest::Contains("argument 'heads' must be in [1, "),
                       lrpe::parameter_error);
  // the largest size itself is accepted (nothing d² is built for it)
  CHECK(lrpe::p::identity<float>(lrpe::max_dim).dim() == lrpe::max_dim);
  CHECK(lrpe::freq::complex_phase(16).size() == 16);
}

// ---- found by the fuzz targets (tests/fuzz/regressions holds each input)

TEST_CASE("canonical::clip: a negative clip distance is an error (-r overflowed at INT64_MIN)") {
  CHECK(lrpe::canonical::clip(-7, 3) == -3);
  CHECK(lrpe::canonical::clip(std::numeric_limits<lrpe::position_t>::min(), 0) == 0);
  CHECK_THROWS_WITH_AS((void)lrpe::canonical::clip(0, std::numeric_limits<lrpe::position_t>::min()),
                       doctest::Contains("argument 'r' must be >= 0"), lrpe::parameter_error);
  CHECK_THROWS_AS((void)lrpe::canonical::clip(5, -1), lrpe::parameter_error);
}

TEST_CASE("matrix_view whose last row's offset passes int64 is an error at every entry point") {
  const lrpe::row_matrix<double> q = lrpe::row_matrix<double>::Ones(4, 8), k = q;
  lrpe::row_matrix<double> out(4, 8);
  const double row[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const lrpe::matrix_view<const double> wild(row, 4, 8, std::int64_t{1} << 62);  // 3·2^62 past int64
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, wild, out, lrpe::no_encoding{}),
                       doctest::Contains("argument 'v' must have the offset of its last element"), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::linear_attention(q, k, wild, out, lrpe::no_encoding{}, lrpe::feature_maps::identity{}),
                  lrpe::shape_error);
  // the largest stride that fits is accepted as a shape (one row: no stride is formed)
  const lrpe::matrix_view<const double> one_row(row, 1, 8, std::numeric_limits<index_t>::max());
  CHECK_NOTHROW(lrpe::validate(one_row, "test", "v"));
}

TEST_CASE("views without columns and with null data (an empty Eigen matrix's): no pointer is formed from null") {
  // under UBSan these were 'applying non-zero offset to null pointer' (reference) and a memcpy
  // from null (SIMD, test_simd_bad_input.cpp)
  const lrpe::row_matrix<float> q = lrpe::row_matrix<float>::Ones(4, 8), k = q;
  const lrpe::matrix_view<const float> v_empty(nullptr, 4, 0, 1);
  const lrpe::matrix_view<float> out_empty(nullptr, 4, 0, 1);
  CHECK_NOTHROW(lrpe::softmax_attention(q, k, v_empty, out_empty, lrpe::no_encoding{}));
  CHECK_NOTHROW(lrpe::linear_attention(q, k, v_empty, out_empty, lrpe::no_encoding{}, lrpe::feature_maps::identity{},
                                       lrpe::linear_options{.causal = true}));
  CHECK(v_empty.row(3) == nullptr);
}
