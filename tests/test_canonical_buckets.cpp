// SPDX-License-Identifier: MIT
// Published position functions (REFERENCE.md): every T5 bucket value (bidirectional and causal),
// every DeBERTa-v2 log-bucket value, ALiBi slopes for 8, 12 and 16 heads; compile-time traits
// and concepts of every variant; error paths throw the documented lrpe error type.
#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace {
using lrpe::index_t;
using lrpe::position_t;
namespace cn = lrpe::canonical;
using vd = std::vector<double>;
using rows = lrpe::row_matrix<double>;
}  // namespace

// ------------------------------------------------------------------- compile-time facts
static_assert(lrpe::additive_encoding<cn::t5_bias<float>>);
static_assert(lrpe::additive_encoding<cn::alibi<double>>);
static_assert(lrpe::additive_encoding<cn::toeplitz_bias<float>>);
static_assert(lrpe::value_encoding<cn::shaw<float>>);
static_assert(!lrpe::additive_encoding<cn::shaw<float>>);
static_assert(lrpe::relative_encoding<cn::deberta_v2<double>>);
static_assert(!lrpe::additive_encoding<cn::deberta_v2<double>>);
static_assert(lrpe::relative_encoding<cn::transformer_xl<float>>);
static_assert(lrpe::relative_encoding<cn::cosformer<float>>);
static_assert(lrpe::relative_encoding<cn::multiplicative<lrpe::type8<float>>>);
static_assert(!lrpe::relative_encoding<cn::urpe<float>>);
static_assert(cn::post_softmax_reweighting<cn::urpe<float>>);

static_assert(cn::is_linearizable_v<lrpe::type1<float>>);
static_assert(cn::is_linearizable_v<lrpe::rope_neox<double>>);
static_assert(cn::is_linearizable_v<lrpe::permuteformer<double>>);
static_assert(cn::is_linearizable_v<lrpe::encoder<lrpe::p::dft<float>, lrpe::lambda::complex_phase<float>>>);
static_assert(cn::is_linearizable_v<cn::multiplicative<lrpe::type4<float>>>);
static_assert(cn::is_linearizable_v<cn::cosformer<float>>);
static_assert(cn::is_linearizable_v<cn::transformer_xl<float>>);
static_assert(!cn::is_linearizable_v<cn::t5_bias<float>>);
static_assert(!cn::is_linearizable_v<cn::alibi<float>>);
static_assert(!cn::is_linearizable_v<cn::toeplitz_bias<float>>);
static_assert(!cn::is_linearizable_v<cn::shaw<float>>);
static_assert(!cn::is_linearizable_v<cn::deberta_v2<float>>);
static_assert(!cn::is_linearizable_v<cn::urpe<float>>);
static_assert(!cn::is_linearizable_v<int>);
static_assert(!cn::is_encoder_v<cn::cosformer<float>>);
static_assert(cn::is_encoder_v<lrpe::type5<float>>);

// ---------------------------------------------------------------------- published values

TEST_CASE("buckets: T5 bidirectional (32 buckets, max_distance 128) reproduces REFERENCE.md") {
  const std::vector<std::pair<position_t, index_t>> published = {
      {-200, 15}, {-128, 15}, {-127, 15}, {-64, 14}, {-20, 10}, {-8, 8}, {-7, 7}, {-1, 1}, {0, 0},
      {1, 17},    {7, 23},    {8, 24},    {20, 26},  {64, 30},  {127, 31}, {128, 31}, {200, 31}};
  for (const auto& entry : published) {  // (CAPTURE is a lambda: no structured binding for clang < 16)
    const position_t rel = entry.first;
    const auto bucket = entry.second;
    CAPTURE(rel);
    CHECK(cn::t5_bucket(rel, cn::t5_buckets{32, 128, true}) == bucket);
  }
  CHECK(cn::t5_bucket(std::numeric_limits<position_t>::max() / 2, cn::t5_buckets{}) == 31);
  CHECK(cn::t5_bucket(-(std::numeric_limits<position_t>::max() / 2), cn::t5_buckets{}) == 15);
}

TEST_CASE("buckets: T5 causal (32 buckets, max_distance 128) reproduces REFERENCE.md") {
  const std::vector<std::pair<position_t, index_t>> published = {
      {-200, 31}, {-128, 31}, {-64, 26}, {-20, 17}, {-16, 16}, {-15, 15}, {-1, 1}, {0, 0}, {1, 0}, {5, 0}};
  for (const auto& entry : published) {  // (CAPTURE is a lambda: no structured binding for clang < 16)
    const position_t rel = entry.first;
    const auto bucket = entry.second;
    CAPTURE(rel);
    CHECK(cn::t5_bucket(rel, cn::t5_buckets{32, 128, false}) == bucket);
  }
}

TEST_CASE("buckets: T5 bias uses rel = key - query (t - s)") {
  // bias(s, t): query s, key t. Key after query (t > s) lands in the upper half when bidirectional.
  rows table = rows::Zero(1, 32);
  for (index_t b = 0; b < 32; ++b) table(0, b) = static_cast<double>(b);
  const cn::t5_bias<double> v(2, {}, table);
  CHECK(v.bias(10, 11) == 17);  // rel = +1
  CHECK(v.bias(11, 10) == 1);   // rel = −1
  const cn::t5_bias<double> causal(2, {32, 128, false}, table);
  CHECK(causal.bias(10, 30) == 0);   // future key → bucket 0
  CHECK(causal.bias(30, 10) == 17);  // rel = −20
}

TEST_CASE("buckets: offsets at the ends of int64 land in the last bucket or clipped entry (no overflow)") {
  constexpr position_t lo = std::numeric_limits<position_t>::min(), hi = std::numeric_limits<position_t>::max();
  // |INT64_MIN| does not exist in int64: the bucket of the most negative offset is the far one
  CHECK(cn::t5_bucket(lo, cn::t5_buckets{}) == 15);
  CHECK(cn::t5_bucket(lo, cn::t5_buckets{32, 128, false}) == 31);
  CHECK(cn::t5_bucket(hi, cn::t5_buckets{}) == 31);
  CHECK(cn::deberta_log_bucket(lo, 256, 512) == cn::deberta_log_bucket(lo + 1, 256, 512));
  CHECK(cn::deberta_log_bucket(lo, 256, 512) < 0);
  // the pair forms: t − s past int64 saturates, exact for clipped and bucketed offsets
  CHECK(cn::saturating_offset(lo, hi) == hi);
  CHECK(cn::saturating_offset(hi, lo) == -hi);
  CHECK(cn::saturating_offset(0, lo) == -hi);
  CHECK(cn::saturating_offset(5, 12) == 7);
  rows table = rows::Zero(1, 32);
  for (index_t b = 0; b < 32; ++b) table(0, b) = static_cast<double>(b);
  const cn::t5_bias<double> t5(2, {}, table);
  CHECK(t5.bias(lo, hi) == 31);
  CHECK(t5.bias(hi, lo) == 15);
  const cn::toeplitz_bias<double> tb(2, 3, vd{-3, -2, -1, 0, 1, 2, 3});
  CHECK(tb.bias(lo, hi) == 3);
  CHECK(tb.bias(hi, lo) == -3);
  CHECK(cn::deberta_relative_position(lo, hi, cn::deberta_buckets{0, 512}) == -hi);
  rows kr = rows::Zero(8, 2);
  for (index_t r = 0; r < 8; ++r) kr(r, 0) = static_cast<double>(r);
  const cn::deberta_v2<double> deb(2, 1, {0, 4}, kr, kr);  // no log buckets: span 4, rows 0 … 7
  CHECK(deb.table_index(lo) == 7);  // s − t = +∞ side, clamped
  CHECK(deb.table_index(hi) == 0);
  CHECK(deb.table_index(0) == 4);
}

TEST_CASE("pair forms at the ends of int64: smooth encodings in double, exact ones checked (no overflow)") {
  constexpr position_t lo = std::numeric_limits<position_t>::min(), hi = std::numeric_limits<position_t>::max();
  constexpr double two63 = 9223372036854775808.0;
  // t − s = 2^64 − 1 and −(2^64 − 1): both round to ±2^64 in double
  CHECK(lrpe::detail::offset_value(lo, hi) == 2 * two63);
  CHECK(lrpe::detail::offset_value(hi, lo) == -2 * two63);
  CHECK(lrpe::detail::offset_value(0, lo) == -two63);
  CHECK(lrpe::detail::offset_value(-5, 12) == 17.0);
  // ALiBi: m·(t − s) and −m·|t − s| with the offset in double, at any positions
  const auto al = cn::alibi<double>::for_heads(2, 1, cn::alibi_form::causal);
  const auto sym = cn::alibi<double>::for_heads(2, 1, cn::alibi_form::symmetric);
  const double m = al.slope();
  CHECK(al.bias(hi, lo) == -m * 2 * two63);
  CHECK(al.bias(lo, hi) == m * 2 * two63);
  CHECK(sym.bias(lo, hi) == -m * 2 * two63);
  CHECK(al.bias(3, 10) == al.bias_at(7));
  // cosFormer: cos(π(t − s)/2M); with M = 2^63 an offset of ±2^64 is the angle ±π (a wrapped
  // t − s = ∓1 would read cos ≈ 1)
  const cn::cosformer<double> cf(1, two63);
  const double one = 1;
  CHECK(cf.score(&one, lo, &one, hi) == doctest::Approx(-1.0).epsilon(1e-12));
  CHECK(cf.score(&one, hi, &one, lo) == doctest::Approx(-1.0).epsilon(1e-12));
  CHECK(cf.score(&one, 0, &one, lo) == doctest::Approx(0.0));  // −2^63: angle −π/2
  // URPE: the bucket of a saturated offset is exact (the last bucket of its side)
  rows c = rows::Zero(1, 64);
  for (index_t b = 0; b < 64; ++b) c(0, b) = static_cast<double>(b);
  const cn::urpe<double> u(cn::urpe<double>::default_buckets, c);
  CHECK(u.weight(lo, hi) == 63);
  CHECK(u.weight(hi, lo) == 31);
  CHECK(u.weight(lo, hi) == u.weight_at(hi));
  // W_{t−s} and the exact angles of Transformer-XL need t − s itself: a parameter_error naming t
  const lrpe::rope_gptj<double> rope(2);
  const auto mult = cn::multiplicative(rope).canonical();
  const double q2[2] = {1, 0};
  CHECK_THROWS_WITH_AS(static_cast<void>(mult.score(q2, lo, q2, hi)),
                       doctest::Contains("term::score: argument 't' must keep t - s within int64"), lrpe::parameter_error);
  CHECK_THROWS_AS(static_cast<void>(mult.dense_score(q2, 1, q2, lo)), lrpe::parameter_error);
  CHECK(mult.score(q2, hi - 3, q2, hi) == doctest::Approx(std::cos(3.0)));  // θ_0 = 1 at d = 2
  const cn::transformer_xl<double> xl(2, rows::Zero(1, 2), rows::Zero(1, 2), rows::Ones(2, 4));
  CHECK_THROWS_WITH_AS(static_cast<void>(xl.score(q2, hi, q2, -2)),
                       doctest::Contains("lrpe::canonical::transformer_xl::score"), lrpe::parameter_error);
  CHECK(std::isfinite(xl.score(q2, hi, q2, 0)));
  // t − s = −2^63 is an int64 but −(t − s) is not: R_{s−t} from R_{t−s} (sin odd, cos even)
  rows w_r = rows::Zero(2, 4);
  w_r(0, 0) = 1;  // r_0 = sin((s − t)·ω_0) = sin(2^63) with ω_0 = 1
  w_r(1, 2) = 1;  // r_1 = cos(2^63)
  const cn::transformer_xl<double> xl1(2, rows::Zero(1, 2), rows::Zero(1, 2), w_r);
  const double e0[2] = {1, 0}, e1[2] = {0, 1}, zero2[2] = {0, 0};
  const auto at = lrpe::detail::angle_cos_sin(lo, 1.0);  // (t − s)·ω_0 = −2^63
  CHECK(xl1.score(e0, 0, zero2, lo) == doctest::Approx(-at.s).epsilon(1e-12));
  CHECK(xl1.score(e1, 0, zero2, lo) == doctest::Approx(at.c).epsilon(1e-12));
  CHECK(xl1.score(e0, 0, zero2, 5) == doctest::Approx(std::sin(-5.0)).epsilon(1e-12));
}

TEST_CASE("cosFormer: exact angles, so features agree with the direct score far from 0; tiny M rejected") {
  // M = 7, t = s + 3: the weight cos(3π/14) at every s; one rounded angle π·s/(2M) in double
  // lost it (0.7317 at s = 2^52, 1.0 at 2^62)
  const cn::cosformer<double> cf(1, 7.0);
  const double want = std::cos(3 * std::numbers::pi / 14);
  const double one = 1;
  for (const position_t s : {position_t{0}, position_t{1} << 40, position_t{1} << 52, position_t{1} << 62,
                             std::numeric_limits<position_t>::max() - 3, std::numeric_limits<position_t>::min()}) {
    CAPTURE(s);
    double fs[2], ft[2];
    cf.features(cn::side::query, &one, s, fs);
    cf.features(cn::side::key, &one, s + 3, ft);
    CHECK(fs[0] * ft[0] + fs[1] * ft[1] == doctest::Approx(want).epsilon(1e-9));
    CHECK(cf.score(&one, s, &one, s + 3) == doctest::Approx(want).epsilon(1e-12));
  }
  CHECK_THROWS_WITH_AS(cn::cosformer<double>(1, std::numeric_limits<double>::denorm_min()),
                       doctest::Contains("argument 'M' must be at least pi / 2^961"), lrpe::parameter_error);
  CHECK_NOTHROW(cn::cosformer<double>(1, 1e-280));
}

TEST_CASE("DeBERTa-v2: spans of 2^62 or more rejected (2*span rows); a log bucket past int64 saturates") {
  CHECK_THROWS_WITH_AS(cn::deberta_buckets({0, std::numeric_limits<position_t>::max()}).validate("t"),
                       doctest::Contains("must give an attention span in [1, 2^62 - 1]"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(cn::deberta_buckets({0, position_t{1} << 62}).validate("t"),  // 2*span = 2^63
                       doctest::Contains("must give an attention span in [1, 2^62 - 1]"), lrpe::parameter_error);
  CHECK_NOTHROW(cn::deberta_buckets({0, (position_t{1} << 62) - 1}).validate("t"));
  // heads·d past index_t: an error before any table is read (a 0×0 table: shape checks come after)
  const lrpe::row_matrix<double> none;
  CHECK_THROWS_WITH_AS((void)cn::deberta_v2<double>(index_t{1} << 32, index_t{1} << 32, {0, 4}, none, none),
                       doctest::Contains("argument 'heads' must be >= 1 with heads*d an index_t"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((void)cn::deberta_v2<double>::from_embeddings(index_t{1} << 32, index_t{1} << 32, {0, 4}, none, {}, {}),
                       doctest::Contains("argument 'heads' must be >= 1 with heads*d an index_t"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((void)cn::deberta_v2<double>::from_embeddings(0, 1, {0, 4}, none, {}, {}),
                       doctest::Contains("argument 'd' must be >= 1"), lrpe::shape_error);
  // bucket size 2^41, max_position 2^40 + 2: log((2^40 + 1)/2^40) ≈ 2^−40 in the denominator
  const position_t top = std::numeric_limits<position_t>::max();
  CHECK(cn::deberta_log_bucket(top, index_t{1} << 41, (position_t{1} << 40) + 2) == top);
  CHECK(cn::deberta_log_bucket(std::numeric_limits<position_t>::min(), index_t{1} << 41, (position_t{1} << 40) + 2) ==
        -top);
  // a disabled term's table is empty (not even checked): its vectors are null, not a read past it
  rows kr = rows::Zero(8, 2);
  kr(5, 1) = 3;
  const cn::deberta_v2<double> c2p_only(2, 1, {0, 4}, kr, rows{}, cn::deberta_terms{true, false});
  CHECK(c2p_only.query_vector(1) == nullptr);
  REQUIRE(c2p_only.key_vector(-1) != nullptr);  // s − t = 1: row 1 + span = 5
  CHECK(c2p_only.key_vector(-1)[1] == 3);
  const cn::deberta_v2<double> p2c_only(2, 1, {0, 4}, rows{}, kr, cn::deberta_terms{false, true});
  CHECK(p2c_only.key_vector(0) == nullptr);
  CHECK(p2c_only.query_vector(-1)[1] == 3);
}

TEST_CASE("DeBERTa-v2: |rel| > mid maps beyond mid where |rel|/mid rounds to 1 in double (mid past 2^53)") {
  // found by fuzz_buckets (regressions/fuzz_buckets/deberta-ratio-rounds-to-one): mid + 1 gave mid
  const index_t bucket_size = 32092545397630984;  // mid = 16046272698815492 > 2^53
  const position_t max_position = 8517262853918176078;
  const position_t mid = bucket_size / 2;
  position_t before = cn::deberta_log_bucket(mid, bucket_size, max_position);
  CHECK(before == mid);
  for (position_t rel = mid + 1; rel <= mid + 64; ++rel) {
    CAPTURE(rel);
    const position_t got = cn::deberta_log_bucket(rel, bucket_size, max_position);
    CHECK(got > mid);
    CHECK(got >= before);  // monotone
    CHECK(cn::deberta_log_bucket(-rel, bucket_size, max_position) == -got);
    before = got;
  }
  // the smallest step is 1: ⌈log(1 + 1/mid)/log((max − 1)/mid)·(mid − 1)⌉ = ⌈≈ 1/log(530.8)⌉
  CHECK(cn::deberta_log_bucket(mid + 1, bucket_size, max_position) == mid + 1);
}

TEST_CASE("buckets: DeBERTa-v2 log buckets (256, 512) reproduce REFERENCE.md") {
  const std::vector<std::pair<position_t, position_t>> published = {
      {0, 0},     {1, 1},     {127, 127}, {128, 128},   {129, 129},   {130, 130},   {200, 169},
      {300, 207}, {511, 255}, {512, 256}, {1000, 317},  {5000, 465},  {-129, -129}, {-1000, -317}};
  for (const auto& entry : published) {  // (CAPTURE is a lambda: no structured binding for clang < 16)
    const position_t rel = entry.first;
    const auto bucket = entry.second;
    CAPTURE(rel);
    CHECK(cn::deberta_log_bucket(rel, 256, 512) == bucket);
  }
  // rel = query − key: the opposite sign to T5
  const cn::deberta_buckets cfg{256, 512};
  CHECK(cn::deberta_relative_position(1000, 0, cfg) == 317);
  CHECK(cn::deberta_relative_position(0, 1000, cfg) == -317);
  const cn::deberta_buckets none{0, 512};
  CHECK(cn::deberta_relative_position(0, 1000, none) == -1000);
  CHECK(none.span() == 512);
  CHECK(cfg.span() == 256);
}

TEST_CASE("buckets: ALiBi slopes for 8, 12 and 16 heads") {
  const auto s8 = cn::alibi_slopes(8);
  REQUIRE(s8.size() == 8);
  for (int i = 0; i < 8; ++i) CHECK(s8[static_cast<std::size_t>(i)] == doctest::Approx(std::ldexp(1.0, -(i + 1))).epsilon(1e-14));
  const auto s12 = cn::alibi_slopes(12);
  REQUIRE(s12.size() == 12);
  for (int i = 0; i < 8; ++i) CHECK(s12[static_cast<std::size_t>(i)] == doctest::Approx(s8[static_cast<std::size_t>(i)]).epsilon(1e-14));
  const double tail[4] = {0.707107, 0.353553, 0.176777, 0.088388};
  for (int i = 0; i < 4; ++i) CHECK(s12[static_cast<std::size_t>(8 + i)] == doctest::Approx(tail[i]).epsilon(1e-6));
  const auto s16 = cn::alibi_slopes(16);
  REQUIRE(s16.size() == 16);
  for (int i = 0; i < 16; ++i) CHECK(s16[static_cast<std::size_t>(i)] == doctest::Approx(std::pow(2.0, -0.5 * (i + 1))).epsilon(1e-14));
  CHECK(cn::alibi_slopes(1) == vd{1.0 / 256});
  CHECK(cn::alibi_slopes(3).size() == 3);
  CHECK(cn::alibi_slopes(3)[2] == doctest::Approx(std::pow(2.0, -2.0)));  // slopes(4)[0] = 2^-2
  // a head count past what a vector can hold: an error before the c·2 of the power-of-two loop overflows
  CHECK_THROWS_WITH_AS((void)cn::alibi_slopes(std::numeric_limits<lrpe::index_t>::max()),
                       doctest::Contains("argument 'heads' must be in [1, "), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::alibi_slopes(0), lrpe::parameter_error);
}

TEST_CASE("buckets: clip") {
  CHECK(cn::clip(5, 3) == 3);
  CHECK(cn::clip(-5, 3) == -3);
  CHECK(cn::clip(2, 3) == 2);
  CHECK(cn::clip(7, 0) == 0);
}

// ------------------------------------------------------------------------------ heads

TEST_CASE("heads: head(h) shares the table (O(1)) and selects the row; out of range throws") {
  rows table(3, 5);
  for (index_t h = 0; h < 3; ++h)
    for (index_t j = 0; j < 5; ++j) table(h, j) = static_cast<double>(10 * h + j);
  const cn::toeplitz_bias<double> all(4, 2, table);
  const auto h2 = all.head(2);
  CHECK(&h2.table() == &all.table());
  CHECK(h2.head_index() == 2);
  CHECK(h2.bias(0, 1) == 23);
  CHECK_THROWS_AS((void)all.head(3), lrpe::shape_error);
  CHECK_THROWS_AS((void)all.head(-1), lrpe::shape_error);
  const auto al = cn::alibi<double>::for_heads(4, 8);
  CHECK(al.head(3).slope() == doctest::Approx(1.0 / 16));
  CHECK(&al.head(3).slopes() == &al.slopes());
}

// ------------------------------------------------------------------------------ errors

TEST_CASE("errors: bad parameters throw the documented lrpe error type") {
  SUBCASE("T5") {
    CHECK_THROWS_AS(cn::t5_bias<double>(4, {0, 128, true}, rows(1, 0)), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::t5_bias<double>(4, {2, 128, true}, rows::Zero(1, 2)), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::t5_bias<double>(4, {1, 128, false}, rows::Zero(1, 1)), lrpe::parameter_error);
    // max_distance must exceed max_exact (8 for 32 bidirectional, 16 for 32 causal)
    CHECK_THROWS_AS(cn::t5_bias<double>(4, {32, 8, true}, rows::Zero(1, 32)), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::t5_bias<double>(4, {32, 16, false}, rows::Zero(1, 32)), lrpe::parameter_error);
    CHECK_NOTHROW(cn::t5_bias<double>(4, {32, 17, false}, rows::Zero(1, 32)));
    CHECK_THROWS_AS(cn::t5_bias<double>(4, {32, 128, true}, rows::Zero(2, 31)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::t5_bias<double>(0, {32, 128, true}, rows::Zero(2, 32)), lrpe::shape_error);
    rows bad = rows::Zero(2, 32);
    bad(1, 7) = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(cn::t5_bias<double>(4, {}, bad), lrpe::domain_error);
    try {
      (void)cn::t5_bias<double>(4, {32, 4, true}, rows::Zero(1, 32));
      FAIL("no throw");
    } catch (const lrpe::parameter_error& e) {
      const std::string what = e.what();
      CHECK(what.find("max_distance") != std::string::npos);
      CHECK(what.find("got 4") != std::string::npos);
    }
  }
  SUBCASE("learned table") {
    CHECK_THROWS_AS(cn::toeplitz_bias<double>(4, -1, rows::Zero(1, 1)), lrpe::parameter_error);
    // 2r + 1 past int64: the distance is named (not a wrapped table width)
    CHECK_THROWS_WITH_AS(cn::toeplitz_bias<double>(4, std::numeric_limits<position_t>::max(), rows::Zero(1, 1)),
                         doctest::Contains("'max_distance' must be in [0, 2^62 - 1]"), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::toeplitz_bias<double>(4, 3, rows::Zero(1, 6)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::toeplitz_bias<double>(4, 1, vd{0, std::numeric_limits<double>::infinity(), 0}),
                    lrpe::domain_error);
  }
  SUBCASE("ALiBi") {
    CHECK_THROWS_AS((void)cn::alibi_slopes(0), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::alibi<float>(4, vd{}), lrpe::shape_error);
    CHECK_THROWS_AS(cn::alibi<float>(4, vd{0.5, std::nan("")}), lrpe::domain_error);
  }
  SUBCASE("cosFormer") {
    CHECK_THROWS_AS(cn::cosformer<float>(4, 0.0), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::cosformer<float>(4, -3.0), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::cosformer<float>(4, std::numeric_limits<double>::infinity()), lrpe::domain_error);
    CHECK_THROWS_AS(cn::cosformer<float>(0, 1.0), lrpe::shape_error);
  }
  SUBCASE("Shaw") {
    CHECK_THROWS_AS(cn::shaw<double>(3, -1, rows::Zero(1, 3)), lrpe::parameter_error);
    CHECK_THROWS_WITH_AS(cn::shaw<double>(3, std::numeric_limits<position_t>::max(), rows::Zero(1, 3)),
                         doctest::Contains("'r' must be in [0, 2^62 - 1]"), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::shaw<double>(3, 2, rows::Zero(5, 4)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::shaw<double>(3, 2, rows::Zero(5, 3), rows::Zero(4, 3)), lrpe::shape_error);
    rows bad = rows::Zero(5, 3);
    bad(4, 2) = -std::numeric_limits<double>::infinity();
    CHECK_THROWS_AS(cn::shaw<double>(3, 2, bad), lrpe::domain_error);
  }
  SUBCASE("DeBERTa") {
    CHECK_THROWS_AS(cn::deberta_v2<double>(2, 1, {2, 512}, rows::Zero(4, 2), rows::Zero(4, 2)), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::deberta_v2<double>(2, 1, {256, 100}, rows::Zero(512, 2), rows::Zero(512, 2)), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::deberta_v2<double>(2, 1, {0, 0}, rows::Zero(0, 2), rows::Zero(0, 2)), lrpe::parameter_error);
    CHECK_THROWS_AS(cn::deberta_v2<double>(2, 2, {8, 32}, rows::Zero(16, 2), rows::Zero(16, 4)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::deberta_v2<double>(2, 0, {8, 32}, rows::Zero(16, 2), rows::Zero(16, 2)), lrpe::shape_error);
    rows bad = rows::Zero(16, 2);
    bad(3, 1) = std::nan("");
    CHECK_THROWS_AS(cn::deberta_v2<double>(2, 1, {8, 32}, rows::Zero(16, 2), bad), lrpe::domain_error);
    // a disabled term needs no table
    CHECK_NOTHROW(cn::deberta_v2<double>(2, 1, {8, 32}, rows::Zero(16, 2), rows(), {true, false}));
    CHECK_THROWS_AS((void)cn::deberta_v2<double>::from_embeddings(2, 1, {8, 32}, rows::Zero(10, 3),
                                                                   {rows::Zero(3, 2)}, {rows::Zero(3, 2)}),
                    lrpe::shape_error);
  }
  SUBCASE("Transformer-XL") {
    CHECK_THROWS_AS(cn::transformer_xl<double>(2, rows::Zero(1, 2), rows::Zero(1, 2), rows::Zero(2, 3)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::transformer_xl<double>(2, rows::Zero(2, 2), rows::Zero(1, 2), rows::Zero(4, 4)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::transformer_xl<double>(2, rows::Zero(1, 2), rows::Zero(1, 2), rows::Zero(3, 4)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::transformer_xl<double>(2, rows::Zero(1, 2), rows::Zero(1, 2), rows::Zero(2, 4), 1.0),
                    lrpe::parameter_error);
    rows bad = rows::Zero(1, 2);
    bad(0, 0) = std::nan("");
    CHECK_THROWS_AS(cn::transformer_xl<double>(2, bad, rows::Zero(1, 2), rows::Zero(2, 4)), lrpe::domain_error);
  }
  SUBCASE("URPE") {
    CHECK_THROWS_AS(cn::urpe<float>({64, 128, true}, lrpe::row_matrix<float>::Ones(2, 32)), lrpe::shape_error);
    CHECK_THROWS_AS(cn::urpe<float>({64, 16, true}, lrpe::row_matrix<float>::Ones(2, 64)), lrpe::parameter_error);
    CHECK_THROWS_AS((void)cn::urpe<float>::ones(0), lrpe::shape_error);
  }
  SUBCASE("features and score_matrix of a block with the wrong width") {
    const cn::cosformer<double> v(3, 8.0);
    const rows x = rows::Zero(4, 2);
    CHECK_THROWS_AS((void)cn::features(v, cn::side::query, x, 0), lrpe::shape_error);
    CHECK_THROWS_AS((void)cn::score_matrix(v, x, x), lrpe::shape_error);
    const std::vector<position_t> pos = {0, 1, 2};
    CHECK_THROWS_AS((void)cn::features(v, cn::side::query, rows::Zero(4, 3), pos), lrpe::shape_error);
  }
  SUBCASE("every error is an lrpe::error") {
    CHECK_THROWS_AS(cn::cosformer<float>(4, -1.0), lrpe::error);
    CHECK_THROWS_AS(cn::cosformer<float>(4, std::nan("")), lrpe::error);
  }
}

// ------------------------------------------------------------------- blocks and scales

TEST_CASE("score_matrix and block features agree with per-row scores; default scales") {
  const index_t d = 4, n = 6;
  rows q(n, d), k(n, d);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) {
      q(i, j) = std::sin(1.0 + static_cast<double>(i * d + j));
      k(i, j) = std::cos(2.0 + static_cast<double>(i * d + j));
    }
  const cn::cosformer<double> v(d, 16.0);
  const std::vector<position_t> qpos = {-3, 0, 7, 7, 100, -50}, kpos = {1, 2, 3, 4, 5, 6};
  const auto s = cn::score_matrix(v, q, k, qpos, kpos);
  const auto fq = cn::features(v, cn::side::query, q, qpos);
  const auto fk = cn::features(v, cn::side::key, k, kpos);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double expected = q.row(i).dot(k.row(j)) * std::cos(std::numbers::pi * static_cast<double>(kpos[static_cast<std::size_t>(j)] - qpos[static_cast<std::size_t>(i)]) / 32.0);
      CHECK(s(i, j) == doctest::Approx(expected).epsilon(1e-12));
      CHECK(fq.row(i).dot(fk.row(j)) == doctest::Approx(expected).epsilon(1e-12));
    }
  CHECK(cn::default_scale(v, 16) == doctest::Approx(0.25));
  CHECK(cn::default_scale(cn::t5_bias<double>(d, {}, rows::Zero(1, 32)), 16) == 1.0);
  CHECK(cn::default_scale(lrpe::rope_gptj<double>(4), 16) == doctest::Approx(0.25));
}

// ------------------------------------------------------------------- pair-keyed biases (2-D, graphs)
static_assert(lrpe::additive_encoding<cn::pair_bias<float>>);
static_assert(!lrpe::is_toeplitz_v<cn::pair_bias<float>>);
static_assert(lrpe::is_toeplitz_v<cn::t5_bias<float>>);
static_assert(lrpe::bounded_positions<cn::pair_bias<double>>);
static_assert(!lrpe::bounded_positions<cn::alibi<double>>);

TEST_CASE("Swin: relative_position_index as Swin builds it (published 2x2 window; 3x4 from the coordinates)") {
  // Swin's construction for a 2x2 window: coords (y, x) of tokens 0..3, relative coords shifted
  // by (1, 1), y scaled by 2*2 - 1 = 3
  const cn::index_matrix i22 = cn::swin_relative_position_index(2, 2);
  const int published[4][4] = {{4, 3, 1, 0}, {5, 4, 2, 1}, {7, 6, 4, 3}, {8, 7, 5, 4}};
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t < 4; ++t) CHECK(i22(s, t) == published[s][t]);
  // a non-square window: Swin's meshgrid ("ij") of (y, x), tokens row-major, (Δy, Δx) of query
  // minus key; every bucket of the (2h - 1)(2w - 1) is used, and the diagonal is the centre
  const index_t h = 3, w = 4;
  const cn::index_matrix idx = cn::swin_relative_position_index(h, w);
  REQUIRE(idx.rows() == h * w);
  std::vector<int> used((2 * h - 1) * (2 * w - 1), 0);
  for (index_t y1 = 0; y1 < h; ++y1)
    for (index_t x1 = 0; x1 < w; ++x1)
      for (index_t y2 = 0; y2 < h; ++y2)
        for (index_t x2 = 0; x2 < w; ++x2) {
          const index_t want = (y1 - y2 + h - 1) * (2 * w - 1) + (x1 - x2 + w - 1);
          CHECK(idx(y1 * w + x1, y2 * w + x2) == want);
          ++used[std::size_t(want)];
        }
  for (int u : used) CHECK(u >= 1);
  CHECK(idx(5, 5) == (h - 1) * (2 * w - 1) + (w - 1));
  CHECK_THROWS_AS((void)cn::swin_relative_position_index(0, 3), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::swin_relative_position_index(3, 20000), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::swin_bias<float>(4, 2, 2, lrpe::row_matrix<float>::Zero(2, 8)), lrpe::shape_error);
}

TEST_CASE("graphs: breadth-first distances equal Floyd-Warshall's on random graphs, directed and undirected") {
  lrpe::generator g(0x6AF0);
  for (int trial = 0; trial < 20; ++trial) {
    const auto n = static_cast<index_t>(1 + g.below(12));
    const bool directed = trial % 2 == 1;
    std::vector<std::pair<index_t, index_t>> edges;
    cn::adjacency_list adj(static_cast<std::size_t>(n));
    const auto m = g.below(static_cast<std::uint64_t>(2 * n));
    for (std::uint64_t e = 0; e < m; ++e) {
      const auto u = static_cast<index_t>(g.below(std::uint64_t(n))), v = static_cast<index_t>(g.below(std::uint64_t(n)));
      edges.emplace_back(u, v);
      adj[std::size_t(u)].push_back(v);
    }
    const cn::adjacency_list graph = directed ? adj : cn::undirected_graph(n, edges);
    // Floyd-Warshall on the adjacency matrix
    constexpr index_t inf = 1 << 20;
    std::vector<index_t> fw(std::size_t(n * n), inf);
    for (index_t i = 0; i < n; ++i) fw[std::size_t(i * n + i)] = 0;
    for (const auto& [u, v] : edges) {
      fw[std::size_t(u * n + v)] = std::min<index_t>(fw[std::size_t(u * n + v)], u == v ? 0 : 1);
      if (!directed) fw[std::size_t(v * n + u)] = std::min<index_t>(fw[std::size_t(v * n + u)], u == v ? 0 : 1);
    }
    for (index_t k = 0; k < n; ++k)
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j)
          fw[std::size_t(i * n + j)] = std::min(fw[std::size_t(i * n + j)], fw[std::size_t(i * n + k)] + fw[std::size_t(k * n + j)]);
    const cn::index_matrix dist = cn::shortest_path_distances(graph);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) {
        const index_t want = fw[std::size_t(i * n + j)] >= inf ? cn::unreachable : fw[std::size_t(i * n + j)];
        CHECK(dist(i, j) == want);
      }
    // Graphormer's buckets: min(φ, max_distance), unreachable → max_distance + 1
    const cn::index_matrix idx = cn::graphormer_spatial_index(dist, 2);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j)
        CHECK(idx(i, j) == (dist(i, j) < 0 ? 3 : std::min<index_t>(dist(i, j), 2)));
  }
  const std::vector<std::pair<index_t, index_t>> bad{{0, 3}};
  CHECK_THROWS_AS((void)cn::undirected_graph(3, bad), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::shortest_path_distances(cn::adjacency_list{{1}, {2}}), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::shortest_path_distances(cn::adjacency_list{{-1}}), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::graphormer_spatial_index(cn::index_matrix::Constant(2, 2, -2), 3), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::graphormer_spatial_index(cn::index_matrix::Zero(2, 2), -1), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::graphormer_spatial_bias<float>(4, cn::adjacency_list{{1}, {0}}, 2,
                                                           lrpe::row_matrix<float>::Zero(1, 3)),
                  lrpe::shape_error);
}

TEST_CASE("pair_bias: the table entry of each pair's bucket; dense per-pair biases; heads; bad input") {
  cn::index_matrix idx(2, 3);
  idx << 0, 1, 2, 2, 1, 0;
  rows table(2, 3);
  table << 0.5, -1, 2, 10, 20, 30;
  const cn::pair_bias<double> pb(4, idx, table);
  CHECK(pb.heads() == 2);
  CHECK(pb.query_count() == 2);
  CHECK(pb.key_count() == 3);
  CHECK(pb.bias(1, 0) == 2);
  CHECK(pb.head(1).bias(1, 0) == 30);
  CHECK(pb.head(1).bias(0, 1) == 20);
  const double q[4] = {1, 2, 3, 4}, k[4] = {1, 0, 0, 1};
  CHECK(pb.score(q, 0, k, 2) == 5 + 2);
  CHECK_THROWS_AS((void)pb.score(q, 2, k, 0), lrpe::parameter_error);
  CHECK_THROWS_AS((void)pb.score(q, 0, k, -1), lrpe::parameter_error);
  auto grad = pb.head(1).make_gradient();
  pb.head(1).accumulate_bias_gradient(1, 2, 0.25, grad.data());
  pb.head(1).accumulate_bias_gradient(0, 0, 1.0, grad.data());
  CHECK(grad == vd{1.25, 0, 0});
  rows dense_table(1, 6);
  dense_table << 1, 2, 3, 4, 5, 6;
  const auto dense = cn::pair_bias<double>::dense(4, 2, 3, dense_table);
  CHECK(dense.bias(1, 2) == 6);
  CHECK(dense.bias(0, 1) == 2);
  CHECK_THROWS_AS((void)cn::pair_bias<double>(0, idx, table), lrpe::shape_error);
  CHECK_THROWS_AS((void)cn::pair_bias<double>(4, cn::index_matrix(0, 0), table), lrpe::shape_error);
  cn::index_matrix outside = idx;
  outside(1, 2) = 3;
  CHECK_THROWS_AS((void)cn::pair_bias<double>(4, outside, table), lrpe::parameter_error);
  outside(1, 2) = -1;
  CHECK_THROWS_AS((void)cn::pair_bias<double>(4, outside, table), lrpe::parameter_error);
  rows nan_table = table;
  nan_table(1, 1) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS((void)cn::pair_bias<double>(4, idx, nan_table), lrpe::domain_error);
  CHECK_THROWS_AS((void)cn::pair_bias<double>::dense(4, 2, 3, rows::Zero(1, 5)), lrpe::shape_error);
  CHECK_THROWS_AS((void)cn::pair_bias<double>::dense(4, 0, 3, rows::Zero(1, 0)), lrpe::shape_error);
  CHECK_THROWS_AS((void)pb.head(2), lrpe::shape_error);
}

TEST_CASE("pair_bias in attention: == a dense softmax with the bias per pair; positions outside the index are "
          "errors naming them, checked before any head runs") {
  const index_t n = 6, d = 4;
  const cn::adjacency_list ring = cn::undirected_graph(
      n, std::vector<std::pair<index_t, index_t>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 0}});
  lrpe::generator g(0x9A1B);
  rows table(2, 5);
  for (index_t i = 0; i < table.size(); ++i) table.data()[i] = g.normal();
  const auto spatial = cn::graphormer_spatial_bias<double>(d, ring, 3, table);
  rows q(n, d), k(n, d), v(n, 3);
  for (auto* m : {&q, &k, &v})
    for (index_t i = 0; i < m->size(); ++i) m->data()[i] = g.normal();
  for (index_t h = 0; h < 2; ++h) {
    rows out(n, 3);
    lrpe::softmax_attention(q, k, v, out, spatial.head(h));
    for (index_t s = 0; s < n; ++s) {
      // ring distance min(|s − t|, n − |s − t|), clipped at 3
      std::vector<double> logit(static_cast<std::size_t>(n));
      double top = -INFINITY;
      for (index_t t = 0; t < n; ++t) {
        const index_t ring_d = std::min<index_t>(std::abs(s - t), n - std::abs(s - t));
        logit[std::size_t(t)] = q.row(s).dot(k.row(t)) / 2.0 + table(h, std::min<index_t>(ring_d, 3));
        top = std::max(top, logit[std::size_t(t)]);
      }
      Eigen::RowVectorXd o = Eigen::RowVectorXd::Zero(3);
      double z = 0;
      for (index_t t = 0; t < n; ++t) {
        z += std::exp(logit[std::size_t(t)] - top);
        o += std::exp(logit[std::size_t(t)] - top) * v.row(t);
      }
      CHECK((out.row(s) - o / z).cwiseAbs().maxCoeff() <= 1e-14);
    }
  }
  // a position past the graph's nodes: the error names the positions and the node count
  rows out(n, 3);
  lrpe::softmax_options<> shifted;
  shifted.k_positions = 1;
  try {
    lrpe::softmax_attention(q, k, v, out, spatial, shifted);
    FAIL("no error");
  } catch (const lrpe::parameter_error& e) {
    CHECK(std::string(e.what()).find("options.k_positions") != std::string::npos);
    CHECK(std::string(e.what()).find("key_count() = 6") != std::string::npos);
    CHECK(std::string(e.what()).find("[1, 6]") != std::string::npos);
  }
  const std::vector<position_t> negative{0, 1, 2, 3, 4, -1};
  lrpe::softmax_options<> arrays;
  arrays.q_positions = lrpe::positions(std::span<const position_t>(negative));
  CHECK_THROWS_AS(lrpe::softmax_attention(q, k, v, out, spatial, arrays), lrpe::parameter_error);
  // multi-head: every head's positions are checked before head 0 writes its output
  rows qh(n, 2 * d), kh(n, 2 * d), vh(n, 2 * 3), oh = rows::Constant(n, 2 * 3, 7.0);
  qh << q, q;
  kh << k, k;
  vh << v, v;
  const auto qv = lrpe::bsnh<const double>(qh.data(), 1, n, 2, d);
  const auto kv = lrpe::bsnh<const double>(kh.data(), 1, n, 2, d);
  const auto vv = lrpe::bsnh<const double>(vh.data(), 1, n, 2, 3);
  const auto ov = lrpe::bsnh(oh.data(), 1, n, 2, 3);
  CHECK_THROWS_AS(lrpe::softmax_attention(qv, kv, vv, ov, spatial, shifted), lrpe::parameter_error);
  CHECK(oh.isConstant(7.0));
  lrpe::softmax_attention(qv, kv, vv, ov, spatial);  // a multi_head_table: head h reads its row
  rows o1(n, 3);
  lrpe::softmax_attention(q, k, v, o1, spatial.head(1));
  CHECK((oh.rightCols(3) - o1).cwiseAbs().maxCoeff() == 0);
}

TEST_CASE("Laplacian eigenvectors: the cycle's spectrum 1 - cos(2 pi j / n), orthonormal eigenvectors, the sign "
          "convention, seeded flips, zero padding past n - 1, bad input") {
  const index_t n = 8;
  std::vector<std::pair<index_t, index_t>> edges;
  for (index_t i = 0; i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  const cn::adjacency_list cycle = cn::undirected_graph(n, edges);
  const auto pe = lrpe::absolute::laplacian_pe<double>(cycle, 4);
  // the cycle's normalised Laplacian I − A/2 has eigenvalues 1 − cos(2πj/n), j = 0 … n − 1
  std::vector<double> spectrum;
  for (index_t j = 0; j < n; ++j) spectrum.push_back(1 - std::cos(2 * std::numbers::pi * double(j) / double(n)));
  std::sort(spectrum.begin(), spectrum.end());
  rows lap = rows::Identity(n, n);
  for (index_t i = 0; i < n; ++i) lap(i, (i + 1) % n) = lap((i + 1) % n, i) = -0.5;
  for (index_t c = 0; c < 4; ++c) {
    CHECK(std::abs(pe.eigenvalues[std::size_t(c)] - spectrum[std::size_t(c + 1)]) <= 1e-12);
    const Eigen::VectorXd x = pe.vectors.col(c);
    CHECK((lap * x - pe.eigenvalues[std::size_t(c)] * x).norm() <= 1e-12);
    CHECK(std::abs(x.norm() - 1) <= 1e-12);
    for (index_t c2 = 0; c2 < c; ++c2) CHECK(std::abs(x.dot(pe.vectors.col(c2))) <= 1e-12);
    // the entry of largest magnitude (the first on a tie) is positive
    index_t top = 0;
    for (index_t i = 1; i < n; ++i)
      if (std::abs(x(i)) > std::abs(x(top)) * (1 + 1e-9)) top = i;
    CHECK(x(top) > 0);
  }
  // seeded flips: each column is ± the unflipped one, reproducibly, and some seed flips one
  lrpe::absolute::laplacian_options flip{true, 42};
  const auto f1 = lrpe::absolute::laplacian_pe<double>(cycle, 4, flip), f2 = lrpe::absolute::laplacian_pe<double>(cycle, 4, flip);
  CHECK(f1.vectors == f2.vectors);
  bool any_flipped = false;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    flip.seed = seed;
    const auto f = lrpe::absolute::laplacian_pe<double>(cycle, 4, flip);
    for (index_t c = 0; c < 4; ++c) {
      const bool same = f.vectors.col(c) == pe.vectors.col(c), negated = f.vectors.col(c) == -pe.vectors.col(c);
      CHECK((same || negated));
      any_flipped = any_flipped || negated;
    }
  }
  CHECK(any_flipped);
  // a path of 3 nodes has 2 non-trivial eigenvectors: the rest of k = 4 is zero padding
  const auto small = lrpe::absolute::laplacian_pe<float>(
      cn::undirected_graph(3, std::vector<std::pair<index_t, index_t>>{{0, 1}, {1, 2}}), 4);
  CHECK(small.vectors.col(1).norm() > 0.5f);
  CHECK(small.vectors.rightCols(2).isZero(0));
  CHECK(small.eigenvalues[3] == 0);
  // an isolated node: its row of L is e_i (eigenvalue 1)
  const auto isolated = lrpe::absolute::laplacian_pe<double>(cn::adjacency_list{{1}, {0}, {}}, 2);
  CHECK(std::abs(isolated.eigenvalues[0] - 1) <= 1e-12);
  CHECK_THROWS_AS((void)lrpe::absolute::laplacian_pe<double>(cycle, 0), lrpe::parameter_error);
  CHECK_THROWS_AS((void)lrpe::absolute::laplacian_pe<double>(cn::adjacency_list{}, 2), lrpe::shape_error);
  CHECK_THROWS_AS((void)lrpe::absolute::laplacian_pe<double>(cn::adjacency_list{{5}}, 2), lrpe::parameter_error);
}

TEST_CASE("TUPE: the untied absolute term, the [CLS] reset and T5's relative buckets; the parameters' gradients "
          "against finite differences; bad input") {
  lrpe::generator g(0x7B9E);
  const auto random = [&](index_t r, index_t c) {
    rows m(r, c);
    for (index_t i = 0; i < m.size(); ++i) m.data()[i] = g.normal();
    return m;
  };
  const index_t n = 7, big_d = 5, d = 3, heads = 2;
  const rows p = random(n, big_d), uq = random(big_d, heads * d), uk = random(big_d, heads * d);
  const rows theta = random(heads, 2), rel = random(heads, 8);
  const cn::tupe_config cfg{true, cn::t5_buckets{8, 16, true}};
  const cn::tupe<double> tupe(d, p, uq, uk, cfg, theta, rel);
  CHECK(tupe.default_scale(d) == 1 / std::sqrt(6.0));
  for (index_t h = 0; h < heads; ++h) {
    const auto e = tupe.head(h);
    for (index_t s = 0; s < n; ++s)
      for (index_t t = 0; t < n; ++t) {
        // written from the paper: (p_s U_Q,h)·(p_t U_K,h)/√(2d), reset on row and column 0
        const double a = (p.row(s) * uq.middleCols(h * d, d)).dot(p.row(t) * uk.middleCols(h * d, d)) / std::sqrt(2.0 * d);
        const double reset = s == 0 ? theta(h, 0) : t == 0 ? theta(h, 1) : a;
        const double want = reset + rel(h, cn::t5_bucket(t - s, *cfg.relative));
        CHECK(e.bias(s, t) == doctest::Approx(want).epsilon(1e-13));
        CHECK(e.absolute_term(s, t) == doctest::Approx(a).epsilon(1e-13));
      }
  }
  // TUPE-A (no relative term, no reset): the bias is A_h itself
  const cn::tupe<double> plain(d, p, uq, uk, {false, std::nullopt});
  CHECK(plain.head(1).bias(0, 3) == plain.head(1).absolute_term(0, 3));
  // gradients: L = Σ_st G_st·bias_h(s, t) for a random G; the chain rule of parameter_gradients
  // against central differences of L in every entry of P, U_Q, U_K (the bias is bilinear in them)
  const rows weights = random(n, n);
  const index_t h = 1;
  auto grad = tupe.head(h).make_gradient();
  for (index_t s = 0; s < n; ++s)
    for (index_t t = 0; t < n; ++t) tupe.head(h).accumulate_bias_gradient(s, t, weights(s, t), grad.data());
  const cn::tupe_gradient pg = tupe.head(h).parameter_gradients(grad);
  const auto loss = [&](const rows& pp, const rows& qq, const rows& kk, const rows& th, const rows& rr) {
    const cn::tupe<double> e(d, pp, qq, kk, cfg, th, rr);
    double l = 0;
    for (index_t s = 0; s < n; ++s)
      for (index_t t = 0; t < n; ++t) l += weights(s, t) * e.head(h).bias(s, t);
    return l;
  };
  const auto check_entries = [&](const rows& param, const rows& got, int which) {
    for (index_t j = 0; j < param.size(); ++j) {
      rows up = param, down = param;
      up.data()[j] += 1e-4;
      down.data()[j] -= 1e-4;
      const auto at = [&](const rows& x) {
        return loss(which == 0 ? x : p, which == 1 ? x : uq, which == 2 ? x : uk, which == 3 ? x : theta,
                     which == 4 ? x : rel);
      };
      CHECK(got.data()[j] == doctest::Approx((at(up) - at(down)) / 2e-4).epsilon(1e-7).scale(1));
    }
  };
  check_entries(p, pg.p, 0);
  check_entries(uq, pg.u_q, 1);
  check_entries(uk, pg.u_k, 2);
  check_entries(theta, pg.theta, 3);
  check_entries(rel, pg.relative, 4);
  // errors
  CHECK_THROWS_AS(cn::tupe<double>(d, p, random(big_d, 4), uk, cfg, theta, rel), lrpe::shape_error);
  CHECK_THROWS_AS(cn::tupe<double>(d, p, uq, uk, cfg, rows(0, 0), rel), lrpe::shape_error);
  CHECK_THROWS_AS(cn::tupe<double>(d, p, uq, uk, cfg, theta, random(heads, 7)), lrpe::shape_error);
  CHECK_THROWS_AS(cn::tupe<double>(d, p, uq, uk, {true, cn::t5_buckets{8, 2, true}}, theta, rel), lrpe::parameter_error);
  rows bad = p;
  bad(2, 2) = INFINITY;
  CHECK_THROWS_AS(cn::tupe<double>(d, bad, uq, uk, cfg, theta, rel), lrpe::domain_error);
  CHECK_THROWS_AS((void)tupe.parameter_gradients(std::vector<double>(3)), lrpe::shape_error);
  const double q[3] = {1, 2, 3};
  CHECK_THROWS_AS((void)tupe.score(q, 0, q, n), lrpe::parameter_error);
  rows qm = random(n + 1, d), out(n + 1, d);
  CHECK_THROWS_AS(lrpe::softmax_attention(qm, qm, qm, out, tupe), lrpe::parameter_error);
}

TEST_CASE("Graphormer edge encoding: valid shortest paths, the mean of x_e . w_n along them (first max_hops "
          "edges), gradients against finite differences") {
  lrpe::generator g(0xED6E);
  const auto random = [&](index_t r, index_t c) {
    rows m(r, c);
    for (index_t i = 0; i < m.size(); ++i) m.data()[i] = g.normal();
    return m;
  };
  // a path 0-1-2-3 (edges 0, 1, 2) and a separate edge 4-5 (edge 3)
  const std::vector<std::pair<index_t, index_t>> edges{{0, 1}, {1, 2}, {2, 3}, {4, 5}};
  const rows x = random(4, 2), w = random(2, 3 * 2);  // d_E = 2, max_hops = 3, 2 heads
  const cn::graph_paths paths = cn::shortest_paths(6, edges, 3);
  const auto bias = cn::graphormer_edge_bias<double>(4, paths, x, w);
  const auto hop = [&](index_t h, index_t n, index_t e) { return x.row(e).dot(w.row(h).segment(2 * n, 2)); };
  CHECK(bias.head(1).bias(0, 3) == doctest::Approx((hop(1, 0, 0) + hop(1, 1, 1) + hop(1, 2, 2)) / 3).epsilon(1e-14));
  CHECK(bias.head(0).bias(3, 1) == doctest::Approx((hop(0, 0, 2) + hop(0, 1, 1)) / 2).epsilon(1e-14));
  CHECK(bias.bias(5, 4) == doctest::Approx(hop(0, 0, 3)).epsilon(1e-14));
  CHECK(bias.bias(2, 2) == 0);
  CHECK(bias.bias(0, 5) == 0);  // unreachable
  const cn::graph_paths two = cn::shortest_paths(6, edges, 2);  // multi_hop_max_dist = 2
  const rows w2 = w.leftCols(4);
  CHECK(cn::graphormer_edge_bias<double>(4, two, x, w2).bias(0, 3) ==
        doctest::Approx((hop(0, 0, 0) + hop(0, 1, 1)) / 2).epsilon(1e-14));
  // random graphs: every path is a walk of φ edges from i to j (truncated at max_hops)
  for (int trial = 0; trial < 10; ++trial) {
    const auto n = static_cast<index_t>(2 + g.below(10));
    std::vector<std::pair<index_t, index_t>> es;
    for (std::uint64_t e = 0; e < std::uint64_t(n) + g.below(std::uint64_t(n)); ++e)
      es.emplace_back(index_t(g.below(std::uint64_t(n))), index_t(g.below(std::uint64_t(n))));
    const cn::graph_paths p = cn::shortest_paths(n, es, 4);
    CHECK(p.distance == cn::shortest_path_distances(cn::undirected_graph(n, es)));
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) {
        const auto path = p.path(i, j);
        CHECK(index_t(path.size()) == (p.distance(i, j) <= 0 ? 0 : std::min<index_t>(p.distance(i, j), 4)));
        index_t at = i;
        for (const std::int32_t e : path) {
          const auto [u, v] = es[std::size_t(e)];
          REQUIRE((u == at || v == at));
          at = u == at ? v : u;
        }
        if (p.distance(i, j) >= 0 && p.distance(i, j) <= 4) CHECK(at == j);
      }
  }
  // gradients of L = Σ_h Σ_ij G_h(i, j)·c_h(i, j)
  std::vector<std::vector<double>> grads;
  const rows gw = random(2, 36);
  for (index_t h = 0; h < 2; ++h) grads.emplace_back(gw.row(h).data(), gw.row(h).data() + 36);
  const cn::graphormer_edge_gradient eg = cn::graphormer_edge_gradients<double>(paths, x, w, grads);
  const auto loss = [&](const rows& xx, const rows& ww) {
    const auto b = cn::graphormer_edge_bias<double>(4, paths, xx, ww);
    double l = 0;
    for (index_t h = 0; h < 2; ++h)
      for (index_t i = 0; i < 6; ++i)
        for (index_t j = 0; j < 6; ++j) l += gw(h, i * 6 + j) * b.head(h).bias(i, j);
    return l;
  };
  for (index_t j = 0; j < w.size(); ++j) {
    rows up = w, down = w;
    up.data()[j] += 1e-4;
    down.data()[j] -= 1e-4;
    CHECK(eg.hop_weights.data()[j] == doctest::Approx((loss(x, up) - loss(x, down)) / 2e-4).epsilon(1e-8));
  }
  for (index_t j = 0; j < x.size(); ++j) {
    rows up = x, down = x;
    up.data()[j] += 1e-4;
    down.data()[j] -= 1e-4;
    CHECK(eg.edge_features.data()[j] == doctest::Approx((loss(up, w) - loss(down, w)) / 2e-4).epsilon(1e-8));
  }
  CHECK_THROWS_AS((void)cn::shortest_paths(3, edges, 3), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::shortest_paths(6, edges, 0), lrpe::parameter_error);
  CHECK_THROWS_AS((void)cn::graphormer_edge_bias<double>(4, paths, x, random(2, 5)), lrpe::shape_error);
  CHECK_THROWS_AS((void)cn::graphormer_edge_bias<double>(4, paths, x.topRows(2), w), lrpe::shape_error);
  CHECK_THROWS_AS((void)cn::graphormer_edge_gradients<double>(paths, x, w, std::span<const std::vector<double>>(grads).first(1)),
                  lrpe::shape_error);
}

namespace {

/// A draw's score is an unbiased estimate of `spe.expected_score`: per pair, the R
/// per-realization terms X_c = (Σ_d q_d q̄_d(s)_c)(Σ_d k_d k̄_d(t)_c) are i.i.d.; their sum is
/// within 6 standard errors of the expectation (about 2e-9 to fail per pair for a random seed),
/// and it is the code's own score.
template <class Spe>
void check_unbiased(const Spe& spe, const cn::spe_code<double>& code, index_t n, lrpe::generator& g) {
  const index_t d = spe.dim(), r = code.realizations();
  for (int pair = 0; pair < 20; ++pair) {
    Eigen::VectorXd q(d), k(d);
    for (index_t i = 0; i < d; ++i) {
      q(i) = g.normal();
      k(i) = g.normal();
    }
    const auto s = static_cast<position_t>(g.below(n)), t = static_cast<position_t>(g.below(n));
    double sum = 0, sum2 = 0;
    for (index_t c = 0; c < r; ++c) {
      double xq = 0, xk = 0;  // realization c's query and key feature: X_c = xq·xk
      for (index_t i = 0; i < d; ++i) {
        xq += q(i) * code.q_bar()(s, i * r + c);
        xk += k(i) * code.k_bar()(t, i * r + c);
      }
      sum += xq * xk;
      sum2 += xq * xk * xq * xk;
    }
    const double var = (sum2 - sum * sum / double(r)) / double(r - 1);
    CHECK(std::abs(code.score(q.data(), s, k.data(), t) - sum) <= 1e-12 * (1 + std::abs(sum)));
    CHECK(std::abs(sum - spe.expected_score(q.data(), s, k.data(), t, r)) <= 6 * std::sqrt(double(r) * var));
  }
}

/// The relative RMS error of a draw's scores against their expectation over 200 pairs, each
/// score divided by √R (the expectation grows as √R).
template <class Spe>
double rms_error(const Spe& spe, index_t n, index_t r, std::uint64_t seed) {
  const index_t d = spe.dim();
  const cn::spe_code<double> code = spe.draw(n, r, seed);
  lrpe::generator h(9);
  double err = 0, mag = 0;
  for (int pair = 0; pair < 200; ++pair) {
    Eigen::VectorXd q(d), k(d);
    for (index_t i = 0; i < d; ++i) {
      q(i) = h.normal();
      k(i) = h.normal();
    }
    const auto s = static_cast<position_t>(h.below(n)), t = static_cast<position_t>(h.below(n));
    const double want = spe.expected_score(q.data(), s, k.data(), t, r) / std::sqrt(double(r));
    const double got = code.score(q.data(), s, k.data(), t) / std::sqrt(double(r));
    err += (got - want) * (got - want);
    mag += want * want;
  }
  return std::sqrt(err / mag);
}

}  // namespace

TEST_CASE("sineSPE: the kernel formula; each draw's score is an unbiased estimate of sqrt(R/D) sum q k P(s - t) "
          "(a seeded test: 6 standard errors, failure probability about 2e-9 per pair for a random seed); the "
          "error falls as 1/sqrt(R); gating; linear attention with a code; bad input") {
  lrpe::generator g(0x5BE);
  const index_t d = 4, k_sines = 3;
  rows freqs(d, k_sines), offsets(d, k_sines), gains(d, k_sines);
  for (index_t i = 0; i < freqs.size(); ++i) {
    freqs.data()[i] = g.normal() - 2;
    offsets.data()[i] = g.normal();
    gains.data()[i] = g.normal();
  }
  const std::vector<double> gate{0.3, -1.0, 0.0, 2.0};
  for (const bool gated : {false, true}) {
    CAPTURE(gated);
    const cn::sine_spe<double> spe(freqs, offsets, gains, gated ? gate : std::vector<double>{});
    // the kernel, written from the paper with the reference's squashing functions
    for (index_t i = 0; i < d; ++i) {
      for (const position_t lag : {position_t(0), position_t(3), position_t(-7)}) {
        double p = 0;
        for (index_t k = 0; k < k_sines; ++k) {
          const double f = 0.5 / (1 + std::exp(-freqs(i, k))), lambda = std::log1p(std::exp(gains(i, k)));
          p += lambda * lambda * std::cos(2 * std::numbers::pi * f * double(lag) + offsets(i, k));
        }
        p /= 2.0 * double(k_sines);
        if (gated) {
          const double gg = 1 / (1 + std::exp(-gate[std::size_t(i)]));
          p = (1 - gg) * p + gg;
        }
        CHECK(spe.kernel(i, lag) == doctest::Approx(p).epsilon(1e-13));
      }
    }
    // unbiased, within 6 standard errors per pair
    const index_t n = 12, r = 4096;
    check_unbiased(spe, spe.draw(n, r, 77), n, g);
  }
  // the relative error of the score falls as 1/√R: 64 → 16384 realizations, over 200 pairs
  {
    const cn::sine_spe<double> spe(freqs, offsets, gains);
    const double coarse = rms_error(spe, 10, 64, 1), fine = rms_error(spe, 10, 16384, 2);
    CAPTURE(coarse);
    CAPTURE(fine);
    CHECK(fine < coarse / 8);  // √(16384/64) = 16 expected
  }
  // a code in linear attention (identity feature map, not normalised): out = Σ_t (φ_q·φ_k) v_t
  {
    const cn::sine_spe<double> spe(freqs, offsets, gains, gate);
    const cn::spe_code<double> code = spe.draw(6, 32, 3);
    rows q(6, d), k(6, d), v(6, 2);
    for (auto* m : {&q, &k, &v})
      for (index_t i = 0; i < m->size(); ++i) m->data()[i] = g.normal();
    rows out(6, 2);
    lrpe::linear_options lo;
    lo.causal = true;
    lrpe::linear_attention(q, k, v, out, code, lrpe::feature_maps::identity{}, lo);
    for (index_t s = 0; s < 6; ++s) {
      Eigen::RowVectorXd o = Eigen::RowVectorXd::Zero(2);
      for (index_t t = 0; t <= s; ++t) o += code.score(q.row(s).data(), s, k.row(t).data(), t) * v.row(t);
      CHECK((out.row(s) - o).cwiseAbs().maxCoeff() <= 1e-12 * (1 + o.cwiseAbs().maxCoeff()));
    }
    lo.q_positions = 1;
    lo.k_positions = 1;
    CHECK_THROWS_AS(lrpe::linear_attention(q, k, v, out, code, lrpe::feature_maps::identity{}, lo), lrpe::parameter_error);
    double buf[32];
    CHECK_THROWS_AS(code.features(cn::side::query, q.row(0).data(), 6, buf), lrpe::parameter_error);
  }
  CHECK_THROWS_AS(cn::sine_spe<double>(freqs, offsets, rows(d, 2)), lrpe::shape_error);
  CHECK_THROWS_AS(cn::sine_spe<double>(freqs, offsets, gains, std::vector<double>(3)), lrpe::shape_error);
  rows bad = freqs;
  bad(0, 0) = NAN;
  CHECK_THROWS_AS(cn::sine_spe<double>(bad, offsets, gains), lrpe::domain_error);
  CHECK_THROWS_AS((void)cn::sine_spe<double>(freqs, offsets, gains).draw(0, 8, 1), lrpe::shape_error);
  CHECK_THROWS_AS((void)cn::sine_spe<double>(freqs, offsets, gains).draw(8, 0, 1), lrpe::shape_error);
}

TEST_CASE("convSPE: the kernel is the filters' cross-correlation; each draw's score is an unbiased estimate of "
          "sqrt(R/D) sum q k P(s - t) (6 standard errors, as sineSPE's); the error falls as 1/sqrt(R); gating; "
          "bad input") {
  lrpe::generator g(0xC0DE);
  const index_t d = 3, taps = 5;
  rows a(d, taps), b(d, taps);
  for (index_t i = 0; i < a.size(); ++i) {
    a.data()[i] = g.normal();
    b.data()[i] = g.normal();
  }
  const std::vector<double> gate{-0.5, 1.0, 0.2};
  for (const bool gated : {false, true}) {
    CAPTURE(gated);
    const cn::conv_spe<double> spe(a, b, gated ? gate : std::vector<double>{});
    CHECK(spe.kernel_size() == taps);
    // P_d(δ) = E[q̄_d(m) k̄_d(m − δ)]·√(RD)/R, written as the filters' overlap at the lag
    for (index_t i = 0; i < d; ++i) {
      for (position_t lag = -taps - 1; lag <= taps + 1; ++lag) {
        double p = 0;
        for (index_t j = 0; j < taps; ++j)
          for (index_t jj = 0; jj < taps; ++jj)
            if (j + lag == jj) p += a(i, j) * b(i, jj);  // a_j z(m + j) meets b_jj z(n + jj) where m + j = n + jj
        if (gated) {
          const double gg = 1 / (1 + std::exp(-gate[std::size_t(i)]));
          p = (1 - gg) * p + gg;
        }
        CAPTURE(lag);
        CHECK(spe.kernel(i, lag) == doctest::Approx(p).epsilon(1e-13));
      }
    }
    const index_t n = 9, r = 4096;
    check_unbiased(spe, spe.draw(n, r, 78), n, g);
  }
  {
    const cn::conv_spe<double> spe(a, b);
    const index_t n = 8;
    const double coarse = rms_error(spe, n, 64, 1), fine = rms_error(spe, n, 16384, 2);
    CAPTURE(coarse);
    CAPTURE(fine);
    CHECK(fine < coarse / 8);  // √(16384/64) = 16 expected
    // one seed, one code
    CHECK(spe.draw(n, 8, 5).q_bar() == spe.draw(n, 8, 5).q_bar());
  }
  CHECK_THROWS_AS(cn::conv_spe<double>(a, rows(d, taps + 1)), lrpe::shape_error);
  CHECK_THROWS_AS(cn::conv_spe<double>(a, b, std::vector<double>(2)), lrpe::shape_error);
  rows bad = b;
  bad(1, 2) = NAN;
  CHECK_THROWS_AS(cn::conv_spe<double>(a, bad), lrpe::domain_error);
  CHECK_THROWS_AS(cn::conv_spe<double>(a, b, std::vector<double>{0.0, INFINITY, 0.0}), lrpe::domain_error);
  CHECK_THROWS_AS((void)cn::conv_spe<double>(a, b).draw(0, 8, 1), lrpe::shape_error);
  CHECK_THROWS_AS((void)cn::conv_spe<double>(a, b).draw(8, 0, 1), lrpe::shape_error);
}
