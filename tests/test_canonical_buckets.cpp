// SPDX-License-Identifier: MIT
// Published position functions (REFERENCE.md): every T5 bucket value (bidirectional and causal),
// every DeBERTa-v2 log-bucket value, ALiBi slopes for 8, 12 and 16 heads; compile-time traits
// and concepts of every variant; error paths throw the documented lrpe error type.
#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <cmath>
#include <limits>
#include <numbers>
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
