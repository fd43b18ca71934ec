// SPDX-License-Identifier: MIT
// SIMD attention kernels (backend::simd, simd_policy) == the reference backend.
//
// Tolerance: max |simd − reference| / (1 + max |reference|) ≤ 2e-5 (float) / 1e-12 (double).
// The two kernels sum in different orders (tiles of 4W keys vs `tile` keys, FMA vs separate
// products) and the SIMD exp2 is a polynomial (relative error < 2e-7 in float, < 1e-14 in
// double): on the unit-variance data below the observed errors are ~1e-6 (float) and ~1e-15
// (double); the bounds leave an order of magnitude, and every check is able to fail (a wrong
// mask, a missing bias, a wrong scale or a lost tile gives errors ≥ 1e-2).
#include "attention_helpers.hpp"

#include <doctest/doctest.h>

#include <lrpe/simd.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace {

using lrpe::index_t;
using lrpe::position_t;
using attention_test::for_each_preset;
using attention_test::random_matrix;
using attention_test::rm;

template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

/// max |a − b| / (1 + max |b|); ∞ if a has a non-finite entry.
template <class T>
double diff(const rm<T>& a, const rm<T>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  double err = 0, mag = 0;
  for (index_t i = 0; i < a.rows(); ++i)
    for (index_t j = 0; j < a.cols(); ++j) {
      if (!std::isfinite(static_cast<double>(a(i, j)))) return INFINITY;
      err = std::max(err, std::abs(static_cast<double>(a(i, j)) - static_cast<double>(b(i, j))));
      mag = std::max(mag, std::abs(static_cast<double>(b(i, j))));
    }
  return err / (1 + mag);
}

/// One random problem shape: sizes (including 1, non-multiples of the vector width and of the
/// tile), causal or not, positions as offsets or arrays.
struct shape {
  index_t nq, nk, d, dv;
  bool causal;
  position_t q_offset, k_offset;
  bool arrays;  ///< sorted random positions with repeats instead of offsets
};

std::vector<shape> shapes(std::uint64_t seed, int count) {
  lrpe::generator g(seed);
  const index_t sizes[] = {1, 2, 7, 16, 33, 63, 64, 65, 100, 129, 200};
  const index_t dims[] = {1, 3, 8, 16, 17, 32, 64};
  auto pick = [&](const auto& a) { return a[g.below(std::size(a))]; };
  std::vector<shape> out;
  // fixed corner cases first
  out.push_back({1, 1, 1, 1, false, 0, 0, false});
  out.push_back({1, 1, 64, 64, true, 0, 0, false});
  out.push_back({64, 64, 64, 64, true, 0, 0, false});
  out.push_back({65, 130, 16, 20, true, 65, 0, false});   // KV cache: queries after the keys
  out.push_back({70, 70, 8, 8, true, 0, 30, false});      // first 30 queries see nothing
  out.push_back({200, 150, 64, 64, false, 0, 0, false});
  for (int i = 0; i < count; ++i) {
    shape s{pick(sizes), pick(sizes), pick(dims), pick(dims), g.below(2) == 1, 0, 0, g.below(3) == 0};
    s.q_offset = static_cast<position_t>(g.below(50));
    s.k_offset = static_cast<position_t>(g.below(50));
    out.push_back(s);
  }
  return out;
}

std::vector<position_t> sorted_positions(lrpe::generator& g, index_t n, position_t start) {
  std::vector<position_t> p(static_cast<std::size_t>(n));
  position_t x = start;
  for (auto& e : p) {
    e = x;
    x += static_cast<position_t>(g.below(3));  // steps 0, 1, 2: repeats included
  }
  return p;
}

/// Runs reference and SIMD softmax on one shape with encoding `enc`; returns the difference.
template <class T, class Enc, class Backend = lrpe::backend::simd<>>
double softmax_case(const shape& s, const Enc& enc, std::uint64_t seed, Backend backend = {}) {
  lrpe::generator g(seed);
  const rm<T> q = random_matrix<T>(g, s.nq, s.d), k = random_matrix<T>(g, s.nk, s.d), v = random_matrix<T>(g, s.nk, s.dv);
  const auto qp = sorted_positions(g, s.nq, s.q_offset), kp = sorted_positions(g, s.nk, s.k_offset);
  lrpe::softmax_options<> opt;
  opt.causal = s.causal;
  opt.tile = 16;
  if (s.arrays) {
    opt.q_positions = lrpe::positions(std::span<const position_t>(qp));
    opt.k_positions = lrpe::positions(std::span<const position_t>(kp));
  } else {
    opt.q_positions = s.q_offset;
    opt.k_positions = s.k_offset;
  }
  rm<T> ref(s.nq, s.dv), out(s.nq, s.dv);
  out.setConstant(T(123));
  lrpe::softmax_attention(q, k, v, ref, enc, opt);
  lrpe::softmax_attention(q, k, v, out, enc, opt, backend);
  return diff(out, ref);
}

#define SHAPE_INFO(s)                                                                                      \
  INFO("nq=" << s.nq << " nk=" << s.nk << " d=" << s.d << " dv=" << s.dv << " causal=" << s.causal        \
             << " offsets=" << s.q_offset << "," << s.k_offset << " arrays=" << s.arrays)

}  // namespace

TEST_CASE_TEMPLATE("simd exp2 of non-positive arguments: relative error and exact zeros", T, float, double) {
  using A = xsimd::default_arch;
  using B = xsimd::batch<T, A>;
  constexpr std::size_t W = B::size;
  // normal results (x ≥ the smallest normal exponent): relative error; below: a subnormal no
  // larger than the smallest normal down to e_min − 1/2, exactly 0 past it
  const T e_min = std::is_same_v<T, float> ? T(-126) : T(-1022);
  double worst = 0;
  const auto check_range = [&](double lo, int steps) {
    for (int i = 0; i <= steps; ++i) {
      const T x = static_cast<T>(lo * i / steps);
      alignas(64) T in[W], res[W];
      for (std::size_t l = 0; l < W; ++l) in[l] = x;
      lrpe::backend::simd_detail::exp2_nonpositive<T, A>(B::load_aligned(in)).store_aligned(res);
      const long double want = std::exp2(static_cast<long double>(x));
      INFO("x = " << x);
      if (x >= e_min) {
        worst = std::max(worst, static_cast<double>(std::abs(res[0] - want) / want));
      } else if (x >= e_min - T(0.5)) {
        CHECK(res[0] >= T(0));
        CHECK(res[0] <= std::numeric_limits<T>::min());
      } else {
        CHECK(res[0] == T(0));
      }
    }
  };
  check_range(-130.0, 200000);
  check_range(static_cast<double>(e_min) - 4.0, 20000);
  MESSAGE("max relative error of exp2: " << worst);
  CHECK(worst < (std::is_same_v<T, float> ? 2e-7 : 1e-14));
  alignas(64) T in[W], res[W];
  for (std::size_t l = 0; l < W; ++l) in[l] = -std::numeric_limits<T>::infinity();
  lrpe::backend::simd_detail::exp2_nonpositive<T, A>(B::load_aligned(in)).store_aligned(res);
  CHECK(res[0] == T(0));
  for (std::size_t l = 0; l < W; ++l) in[l] = T(0);
  lrpe::backend::simd_detail::exp2_nonpositive<T, A>(B::load_aligned(in)).store_aligned(res);
  CHECK(res[0] == T(1));
}

TEST_CASE_TEMPLATE("simd softmax, no encoding: == reference on random shapes, causal or not, offsets, arrays", T,
                   float, double) {
  const std::uint64_t seed = 0x51D0'0001;
  MESSAGE("seed = " << seed);
  int n = 0;
  for (const shape& s : shapes(seed, 60)) {
    SHAPE_INFO(s);
    CHECK(softmax_case<T>(s, lrpe::no_encoding{}, seed + static_cast<std::uint64_t>(++n)) <= tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("simd softmax, ALiBi and T5 bias (through bias(s, t)): == reference", T, float, double) {
  const std::uint64_t seed = 0x51D0'0002;
  MESSAGE("seed = " << seed);
  int n = 0;
  for (shape s : shapes(seed, 30)) {
    SHAPE_INFO(s);
    const lrpe::canonical::alibi<T> causal_alibi(s.d, {0.25}, lrpe::canonical::alibi_form::causal);
    const lrpe::canonical::alibi<T> sym_alibi(s.d, {0.0625}, lrpe::canonical::alibi_form::symmetric);
    lrpe::generator g(seed + 1000);
    std::vector<T> table(32);
    for (auto& x : table) x = static_cast<T>(2 * g.normal());
    const lrpe::canonical::t5_bias<T> t5(s.d, lrpe::canonical::t5_buckets{32, 64, !s.causal}, table);
    CHECK(softmax_case<T>(s, causal_alibi, seed + static_cast<std::uint64_t>(++n)) <= tolerance<T>());
    CHECK(softmax_case<T>(s, sym_alibi, seed + static_cast<std::uint64_t>(++n)) <= tolerance<T>());
    CHECK(softmax_case<T>(s, t5, seed + static_cast<std::uint64_t>(++n)) <= tolerance<T>());
  }
}

TEST_CASE("simd softmax: table biases past max(float)/log2(e) give the reference's softmax, not NaN or zero rows") {
  // The kernels add log2(e)·bias: a finite float entry of 3e38 (or the mask value −max) would
  // be ±inf there. Rows of equal huge biases: uniform weights (out = mean of v) as on the
  // reference; one far entry of −max among normal ones: weight 0 for it, as on the reference.
  const index_t d = 4;
  constexpr float big = std::numeric_limits<float>::max();
  for (const index_t n : {index_t{4}, index_t{70}}) {  // the direct kernel (≤ 8 rows) and the tiled one
    CAPTURE(n);
    lrpe::generator g(0x51D0'00B1);
    const rm<float> q = random_matrix<float>(g, n, d), k = random_matrix<float>(g, n, d);
    const rm<float> v = random_matrix<float>(g, n, d);
    const lrpe::canonical::toeplitz_bias<float> plus(d, 2, rm<float>::Constant(1, 5, 3e38f));
    const lrpe::canonical::toeplitz_bias<float> minus(d, 2, rm<float>::Constant(1, 5, -big));
    rm<float> far_masked = rm<float>::Zero(1, 5);
    far_masked(0, 0) = -big;  // t − s ≤ −2: masked by the bias alone
    const lrpe::canonical::toeplitz_bias<float> partly(d, 2, far_masked);
    const auto both = [&](const auto& enc, bool causal) {
      lrpe::softmax_options<> so;
      so.causal = causal;
      rm<float> ref(n, d), got(n, d);
      lrpe::softmax_attention(q, k, v, ref, enc, so);
      lrpe::softmax_attention(q, k, v, got, enc, so, lrpe::backend::simd<>{});
      REQUIRE(ref.allFinite());
      CHECK(got.allFinite());
      return static_cast<double>((got - ref).cwiseAbs().maxCoeff()) / (1 + ref.cwiseAbs().maxCoeff());
    };
    // ALiBi's double bias m·(t − s) past FLT_MAX: both backends hold it at ±max (the
    // reference with held_logit, the kernels with bias_log2), later keys tie, earlier get 0
    const lrpe::canonical::alibi<float> steep(d, std::vector<double>{1e300});
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      CHECK(both(plus, causal) <= 2e-5);
      CHECK(both(minus, causal) <= 2e-5);
      CHECK(both(partly, causal) <= 2e-5);
      CHECK(both(steep, causal) <= 2e-5);
    }
  }
}

TEST_CASE_TEMPLATE("simd softmax, every LRPE preset through the multiplicative path: == reference", T, float,
                   double) {
  const std::uint64_t seed = 0x51D0'0003;
  MESSAGE("seed = " << seed);
  const index_t d = 16;
  const shape cases[] = {{37, 37, d, 16, true, 3, 3, false},
                         {70, 90, d, 20, false, 1000, 7, false},
                         {65, 65, d, 16, true, 0, 0, true}};
  auto check = [&](const auto& enc, const char* name) {
    int n = 0;
    for (const shape& s : cases) {
      SHAPE_INFO(s);
      INFO("preset " << name);
      CHECK(softmax_case<T>(s, enc, seed + static_cast<std::uint64_t>(++n)) <= tolerance<T>());
    }
  };
  for_each_preset<T>(d, check);
}

TEST_CASE_TEMPLATE("simd softmax: logits of +-1e4 stay finite and equal the reference", T, float, double) {
  for (bool causal : {false, true}) {
    const shape s{50, 80, 8, 8, causal, 10, 0, false};
    SHAPE_INFO(s);
    const lrpe::canonical::alibi<T> steep(s.d, {1e4}, lrpe::canonical::alibi_form::symmetric);
    CHECK(softmax_case<T>(s, steep, 7) <= tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("softmax, reference and SIMD: a NaN or overflowing logit makes exactly the rows it reaches NaN",
                   T, float, double) {
  // 150 queries and keys (three SIMD key tiles, four reference tiles of 48), d = 64. Poisoning
  // q row 5 (NaN, or +inf: ∞ − ∞ in the exponent) must turn row 5 into NaN and leave every other
  // row bit-equal to the clean call's; poisoning key 70 (the second SIMD tile) must turn every
  // row that sees it into NaN: all rows without the mask, rows at positions ≥ 70 with it.
  const index_t n = 150, d = 64, dv = 24, poisoned_q = 5, poisoned_k = 70;
  lrpe::generator g(0x5AA5);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const auto run = [&](const rm<T>& qq, const rm<T>& kk, bool causal, bool simd) {
    lrpe::softmax_options<> opt;
    opt.causal = causal;
    opt.tile = 48;
    rm<T> out(n, dv);
    out.setConstant(T(123));
    if (simd) lrpe::softmax_attention(qq, kk, v, out, lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
    else lrpe::softmax_attention(qq, kk, v, out, lrpe::no_encoding{}, opt);
    return out;
  };
  const auto row_nan = [](const rm<T>& o, index_t i) {
    for (index_t c = 0; c < o.cols(); ++c)
      if (!std::isnan(o(i, c))) return false;
    return true;
  };
  for (const T poison : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
    for (bool causal : {false, true}) {
      for (bool simd : {false, true}) {
        INFO("poison = " << poison << ", causal = " << causal << ", simd = " << simd);
        const rm<T> clean = run(q, k, causal, simd);
        rm<T> qq = q;
        qq(poisoned_q, 17) = poison;
        const rm<T> out_q = run(qq, k, causal, simd);
        for (index_t i = 0; i < n; ++i) {
          INFO("q poisoned, row " << i);
          if (i == poisoned_q) CHECK(row_nan(out_q, i));
          else CHECK((out_q.row(i).array() == clean.row(i).array()).all());
        }
        if (std::isinf(poison)) continue;  // +inf in k: −inf logits for negative q entries (masked, not NaN)
        rm<T> kk = k;
        kk(poisoned_k, 3) = poison;
        const rm<T> out_k = run(q, kk, causal, simd);
        for (index_t i = 0; i < n; ++i) {
          INFO("k poisoned, row " << i);
          if (!causal || i >= poisoned_k) CHECK(row_nan(out_k, i));
          else CHECK((out_k.row(i).array() == clean.row(i).array()).all());
        }
      }
    }
  }
}

/// An additive encoding that masks every key more than `ahead` positions after its query by a
/// −∞ bias (a look-ahead window): masked keys among visible ones without the causal mask.
template <class T>
struct lookahead_mask {
  using scalar = T;
  static constexpr bool is_additive = true;
  index_t d = 0;
  position_t ahead = 5;
  [[nodiscard]] index_t dim() const { return d; }
  [[nodiscard]] double bias(position_t s, position_t t) const {
    return t - s > ahead ? -std::numeric_limits<double>::infinity() : 0.0;
  }
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const {
    double acc = 0;
    for (index_t i = 0; i < d; ++i) acc += static_cast<double>(q[i]) * static_cast<double>(k[i]);
    return acc + bias(s, t);
  }
};

TEST_CASE_TEMPLATE("softmax, reference and SIMD: a NaN or Inf in v reaches exactly the rows that weigh its key", T,
                   float, double) {
  // A masked key's weight is exactly 0, and 0·NaN = 0·∞ = NaN: multiplied in, a poisoned value
  // would reach every row of the reference's query tile (64 rows) or of the SIMD kernel's row
  // group (6 rows) that masks the key. Key 70 sits in the SIMD key tile 64–127 and the
  // reference's 64–127, whose rows 64–69 mask it (causal); key 100 in the middle of both; key
  // 148 in the SIMD kernel's last, partial tile. Masks: causal with offsets; causal with
  // positions as unsorted arrays; a −∞ bias without the causal mask; the direct kernel (7
  // query rows), causal or with the bias; and the direct kernel with rows at 149, 146, 147,
  // 148, where the first row sees every key and the only zero weights are among the last
  // block's final 150 mod W keys (past its whole vectors). d_v = 27 and 32 (padded value rows
  // and whole vectors); column 5, or the last (one of the direct kernel's scalar columns past
  // the whole vectors with d_v = 27, on any arch). The poisoned column of a row that weighs the
  // key must be NaN or ±∞; every other value must equal the clean call's.
  const index_t n = 150, d = 32;
  std::vector<position_t> kp_arr(n), qp_arr(n);
  for (index_t i = 0; i < n; ++i) {
    kp_arr[static_cast<std::size_t>(i)] = (i * 37) % n;
    qp_arr[static_cast<std::size_t>(i)] = (i * 53) % n;
  }
  const std::vector<position_t> direct_rows{60, 64, 65, 69, 70, 71, 149}, tail_rows{149, 146, 147, 148};
  const lookahead_mask<T> window{.d = d};
  for (const index_t dv : {index_t{27}, index_t{32}}) {
    lrpe::generator g(0x5AA8 + static_cast<std::uint64_t>(dv));
    const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
    for (const int mode : {0, 1, 2, 3, 4, 5}) {
      const bool direct = mode >= 3, biased = mode == 2 || mode == 4;
      const std::vector<position_t>& rows_at = mode == 5 ? tail_rows : direct_rows;
      const rm<T> q_direct = q.topRows(static_cast<index_t>(rows_at.size()));
      lrpe::softmax_options<> opt;
      opt.causal = !biased;
      if (mode == 1) {
        opt.q_positions = qp_arr;
        opt.k_positions = kp_arr;
      }
      if (direct) opt.q_positions = rows_at;
      const index_t rows = direct ? q_direct.rows() : n;
      // whether query row i weighs key j
      const auto weighs = [&](index_t i, index_t j) {
        const position_t s = direct ? rows_at[static_cast<std::size_t>(i)]
                                    : (mode == 1 ? qp_arr[static_cast<std::size_t>(i)] : i);
        const position_t t = mode == 1 ? kp_arr[static_cast<std::size_t>(j)] : j;
        return biased ? t - s <= window.ahead : t <= s;
      };
      for (const bool simd : {false, true}) {
        const auto run = [&](const rm<T>& values) {
          rm<T> out(rows, dv);
          out.setConstant(T(123));
          const rm<T>& qq = direct ? q_direct : q;
          if (biased && simd) lrpe::softmax_attention(qq, k, values, out, window, opt, lrpe::backend::simd<>{});
          else if (biased) lrpe::softmax_attention(qq, k, values, out, window, opt);
          else if (simd) lrpe::softmax_attention(qq, k, values, out, lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
          else lrpe::softmax_attention(qq, k, values, out, lrpe::no_encoding{}, opt);
          return out;
        };
        const rm<T> clean = run(v);
        REQUIRE(clean.allFinite());
        using poison = std::pair<index_t, index_t>;  // key, column
        const auto poisons = mode == 5 ? std::vector<poison>{{147, 5}, {148, 5}, {148, dv - 1}}
                                       : std::vector<poison>{{70, 5}, {100, dv - 1}, {148, 5}, {148, dv - 1}};
        for (const auto& poison_at : poisons) {
          const index_t poisoned = poison_at.first, col = poison_at.second;  // (INFO captures them: no binding, clang < 16)
          for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
            rm<T> vv = v;
            vv(poisoned, col) = bad;
            const rm<T> out = run(vv);
            index_t reached = 0;
            for (index_t i = 0; i < rows; ++i) {
              const bool w = weighs(i, poisoned);
              reached += w ? 1 : 0;
              for (index_t c = 0; c < dv; ++c) {
                INFO("dv " << dv << ", mode " << mode << ", simd " << simd << ", key " << poisoned << ", " << bad
                           << ", row " << i << ", column " << c);
                if (w && c == col) CHECK(!std::isfinite(out(i, c)));
                else CHECK(out(i, c) == clean(i, c));
              }
            }
            CHECK(reached > 0);          // the poisoned key is weighed by some rows ...
            CHECK(reached < rows);       // ... and masked for others
          }
        }
      }
    }
  }
}

using lrpe::canonical::alibi_form;

/// max |SIMD − reference| (relative, `diff`) of one softmax call with no encoding, or ALiBi of
/// slope 0.25 in the given form; the SIMD output starts as 123 so unwritten entries show.
template <class T>
double simd_vs_reference(const rm<T>& q, const lrpe::matrix_view<const T>& k, const lrpe::matrix_view<const T>& v,
                           const lrpe::softmax_options<>& opt, std::optional<alibi_form> bias) {
  rm<T> ref(q.rows(), v.cols), out(q.rows(), v.cols);
  out.setConstant(T(123));
  if (bias) {
    const lrpe::canonical::alibi<T> alibi(q.cols(), {0.25}, *bias);
    lrpe::softmax_attention(q, k, v, ref, alibi, opt);
    lrpe::softmax_attention(q, k, v, out, alibi, opt, lrpe::backend::simd<>{});
  } else {
    lrpe::softmax_attention(q, k, v, ref, lrpe::no_encoding{}, opt);
    lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
  }
  return diff(out, ref);
}

TEST_CASE_TEMPLATE("simd softmax, the direct kernel (at most 8 query rows: decode steps) == reference", T, float,
                   double) {
  // nq = 1 … 9 (9 takes the tiled kernel), keys around the block of 4 vectors, widths that are
  // not multiples of the vector, causal or not, offsets (a KV cache: queries after the keys) or
  // arrays with repeats, no bias or ALiBi, K and V read through a row stride (a BSNH view).
  static_assert(lrpe::backend::simd_detail::softmax_direct_max_rows == 8);
  const std::uint64_t seed = 0x51D0'0020;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t nks[] = {1, 15, 16, 17, 31, 63, 64, 65, 129, 300};
  const index_t dims[] = {1, 3, 16, 17, 33, 64, 80};
  auto pick = [&](const auto& a) { return a[g.below(std::size(a))]; };
  for (int i = 0; i < 120; ++i) {
    const index_t nq = 1 + static_cast<index_t>(i % 9), nk = pick(nks), d = pick(dims), dv = pick(dims);
    const bool causal = g.below(2) == 1, arrays = g.below(3) == 0, biased = g.below(2) == 1;
    INFO("nq=" << nq << " nk=" << nk << " d=" << d << " dv=" << dv << " causal=" << causal << " arrays=" << arrays
               << " bias=" << biased);
    const index_t stride = d + 5, vstride = dv + 3;  // rows of a wider buffer
    const rm<T> q = random_matrix<T>(g, nq, d), kb = random_matrix<T>(g, nk, stride), vb = random_matrix<T>(g, nk, vstride);
    const lrpe::matrix_view<const T> k(kb.data(), nk, d, stride), v(vb.data(), nk, dv, vstride);
    // queries: the last nq positions of the cache (some see fewer keys), or sorted arrays
    const auto qp = sorted_positions(g, nq, static_cast<position_t>(g.below(static_cast<std::uint64_t>(nk) + 1)));
    const auto kp = sorted_positions(g, nk, 0);
    lrpe::softmax_options<> opt{.causal = causal};
    if (arrays) {
      opt.q_positions = lrpe::positions(std::span<const position_t>(qp));
      opt.k_positions = lrpe::positions(std::span<const position_t>(kp));
    } else {
      opt.q_positions = nk - nq;
    }
    CHECK(simd_vs_reference<T>(q, k, v, opt, biased ? alibi_form::symmetric : std::optional<alibi_form>{}) <=
          tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("simd softmax, the direct kernel past its prefetch threshold (a long KV cache) == reference", T,
                   float, double) {
  // The keys a group reads hold at least softmax_direct_prefetch_bytes of K and V: the kernel
  // then prefetches the next block's V rows. Sizes just past it (and a causal group whose
  // visible prefix is below it), K and V through row strides, ALiBi or none.
  constexpr std::size_t threshold = lrpe::backend::simd_detail::softmax_direct_prefetch_bytes;
  const std::uint64_t seed = 0x51D0'0021;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t d = 64, dv = 40;
  const auto past = static_cast<index_t>(threshold / ((d + dv) * sizeof(T)));  // keys at the threshold
  for (const index_t nk : {past + 37, past + 1, 2 * past}) {
    for (const index_t nq : {index_t(1), index_t(5)}) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool causal = variant != 1, biased = variant == 2;
        INFO("nk=" << nk << " nq=" << nq << " causal=" << causal << " bias=" << biased);
        const index_t stride = d + 3, vstride = dv + 8;
        const rm<T> q = random_matrix<T>(g, nq, d), kb = random_matrix<T>(g, nk, stride), vb = random_matrix<T>(g, nk, vstride);
        const lrpe::matrix_view<const T> k(kb.data(), nk, d, stride), v(vb.data(), nk, dv, vstride);
        lrpe::softmax_options<> opt{.causal = causal};
        // the queries at the end of the cache, or (variant 2) where they see about half of it
        opt.q_positions = variant == 2 ? nk / 2 : nk - nq;
        CHECK(simd_vs_reference<T>(q, k, v, opt, biased ? alibi_form::causal : std::optional<alibi_form>{}) <=
              tolerance<T>());
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd softmax, the tiled kernel past its tile prefetch threshold == reference", T, float, double) {
  // Packed K and V of at least softmax_tile_prefetch_bytes: every query tile prefetches the next
  // key tile. Keys just past it with a partial last tile, query blocks of 9 to 100 rows, causal
  // (the queries at the end of the keys, or in their middle) or not, ALiBi or none.
  constexpr std::size_t threshold = lrpe::backend::simd_detail::softmax_tile_prefetch_bytes;
  const std::uint64_t seed = 0x51D0'0022;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t d = 64, dv = 64;
  const auto past = static_cast<index_t>(threshold / ((d + dv) * sizeof(T))) + 5;
  for (const index_t nq : {index_t(9), index_t(50), index_t(100)}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool causal = variant != 0, biased = variant == 3;
      INFO("nk=" << past << " nq=" << nq << " variant=" << variant);
      const rm<T> q = random_matrix<T>(g, nq, d), kb = random_matrix<T>(g, past, d), vb = random_matrix<T>(g, past, dv);
      const lrpe::matrix_view<const T> k(kb.data(), past, d, d), v(vb.data(), past, dv, dv);
      lrpe::softmax_options<> opt{.causal = causal};
      opt.q_positions = variant == 2 ? past / 2 : past - nq;
      CHECK(simd_vs_reference<T>(q, k, v, opt, biased ? alibi_form::causal : std::optional<alibi_form>{}) <=
            tolerance<T>());
    }
  }
}

TEST_CASE_TEMPLATE("simd softmax, the direct kernel: a pool, and a NaN reaches exactly the rows that see it", T, float,
                   double) {
  const index_t nk = 150, d = 64, dv = 24;
  lrpe::generator g(0x5AA6);
  const rm<T> q = random_matrix<T>(g, 8, d), k = random_matrix<T>(g, nk, d), v = random_matrix<T>(g, nk, dv);
  // query positions: three rows before key 70, five after it
  const std::vector<position_t> qp{10, 50, 69, 70, 71, 100, 148, 149};
  const lrpe::softmax_options<> opt{.causal = true, .q_positions = qp};
  rm<T> ref(8, dv), one(8, dv), two(8, dv);
  lrpe::softmax_attention(q, k, v, ref, lrpe::no_encoding{}, opt);
  lrpe::softmax_attention(q, k, v, one, lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
  lrpe::backend::simd_threads pool(2);  // two groups of 4 rows
  lrpe::softmax_attention(q, k, v, two, lrpe::no_encoding{}, opt, lrpe::backend::simd_policy<>{&pool});
  CHECK(diff(one, ref) <= tolerance<T>());
  CHECK(two == one);
  const auto row_nan = [](const rm<T>& o, index_t i) {
    for (index_t c = 0; c < o.cols(); ++c)
      if (!std::isnan(o(i, c))) return false;
    return true;
  };
  for (const bool offsets : {false, true}) {
    lrpe::softmax_options<> o = opt;
    if (offsets) o.q_positions = nk - 8;  // rows at 142 … 149: all see key 70
    rm<T> clean(8, dv), out(8, dv);
    lrpe::softmax_attention(q, k, v, clean, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
    rm<T> kk = k;
    kk(70, 3) = std::numeric_limits<T>::quiet_NaN();
    lrpe::softmax_attention(q, kk, v, out, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
    for (index_t i = 0; i < 8; ++i) {
      INFO("offsets = " << offsets << ", k poisoned, row " << i);
      if (offsets || qp[static_cast<std::size_t>(i)] >= 70) CHECK(row_nan(out, i));
      else CHECK((out.row(i).array() == clean.row(i).array()).all());
    }
    for (const T poison : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
      rm<T> qq = q;
      qq(5, 17) = poison;
      lrpe::softmax_attention(qq, k, v, out, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
      for (index_t i = 0; i < 8; ++i) {
        INFO("offsets = " << offsets << ", q poisoned with " << poison << ", row " << i);
        if (i == 5) CHECK(row_nan(out, i));
        else CHECK((out.row(i).array() == clean.row(i).array()).all());
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd softmax: Shaw value term and URPE reweighting fall back to the reference kernel", T, float,
                   double) {
  lrpe::generator g(11);
  const index_t n = 40, d = 8, r = 4;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const lrpe::canonical::shaw<T> shaw(d, r, random_matrix<T>(g, 2 * r + 1, d), random_matrix<T>(g, 2 * r + 1, d));
  rm<T> ref(n, d), out(n, d);
  lrpe::softmax_attention(q, k, v, ref, shaw, lrpe::softmax_options<>{.causal = true});
  lrpe::softmax_attention(q, k, v, out, shaw, lrpe::softmax_options<>{.causal = true}, lrpe::backend::simd<>{});
  CHECK(diff(out, ref) <= tolerance<T>());
}

TEST_CASE_TEMPLATE("simd softmax: 2 threads and caller-owned workspaces give the single-thread result bit for bit", T,
                   float, double) {
  lrpe::backend::simd_threads pool(2);
  lrpe::backend::simd_workspace ws;
  lrpe::generator g(21);
  for (bool causal : {false, true}) {
    const index_t n = 333, d = 32;
    const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
    rm<T> one(n, d), two(n, d), own(n, d), ref(n, d);
    const lrpe::softmax_options<> opt{.causal = causal};
    lrpe::softmax_attention(q, k, v, ref, lrpe::no_encoding{}, opt);
    lrpe::softmax_attention(q, k, v, one, lrpe::no_encoding{}, opt, lrpe::backend::simd<>{});
    lrpe::softmax_attention(q, k, v, two, lrpe::no_encoding{}, opt, lrpe::backend::simd_policy<>{&pool});
    lrpe::softmax_attention(q, k, v, own, lrpe::no_encoding{}, opt, lrpe::backend::simd_policy<>{nullptr, &ws});
    CHECK(diff(one, ref) <= tolerance<T>());
    CHECK(two == one);
    CHECK(own == one);
  }
}

TEST_CASE_TEMPLATE("simd softmax, multi-head (BNSH) on a 2-thread pool == reference per head", T, float, double) {
  lrpe::backend::simd_threads pool(2);
  lrpe::generator g(31);
  const index_t b = 2, h = 3, n = 77, d = 16;
  std::vector<T> q(static_cast<std::size_t>(b * h * n * d)), k(q.size()), v(q.size()), ref(q.size()), out(q.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = static_cast<T>(g.normal());
  const auto alibi = lrpe::canonical::alibi<T>::for_heads(d, h);
  const lrpe::softmax_options<> opt{.causal = true};
  lrpe::softmax_attention(lrpe::bnsh(q.data(), b, h, n, d), lrpe::bnsh(k.data(), b, h, n, d),
                          lrpe::bnsh(v.data(), b, h, n, d), lrpe::bnsh(ref.data(), b, h, n, d), alibi, opt);
  lrpe::softmax_attention(lrpe::bnsh(q.data(), b, h, n, d), lrpe::bnsh(k.data(), b, h, n, d),
                          lrpe::bnsh(v.data(), b, h, n, d), lrpe::bnsh(out.data(), b, h, n, d), alibi, opt,
                          lrpe::backend::simd_policy<>{&pool});
  double err = 0;
  for (std::size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(static_cast<double>(out[i] - ref[i])));
  CHECK(err <= 10 * tolerance<T>());
}

TEST_CASE("simd softmax: errors thrown on a worker thread reach the caller") {
  lrpe::backend::simd_threads pool(2);
  std::vector<float> q(2 * 4 * 8, 1.f), out(q.size());
  const auto alibi = lrpe::canonical::alibi<float>::for_heads(8, 3);  // 3 slopes for 2 heads
  CHECK_THROWS_AS(lrpe::softmax_attention(lrpe::bnsh(q.data(), 1, 2, 4, 8), lrpe::bnsh(q.data(), 1, 2, 4, 8),
                                          lrpe::bnsh(q.data(), 1, 2, 4, 8), lrpe::bnsh(out.data(), 1, 2, 4, 8), alibi,
                                          lrpe::softmax_options<>{}, lrpe::backend::simd_policy<>{&pool}),
                  lrpe::shape_error);
}

TEST_CASE_TEMPLATE("simd softmax: a per-tile bias at positions near +-2^62 forms no position past the call's", T, float,
                   double) {
  // Queries at 2^62 − 8 …, keys at −(2^62 − 1) …: every t − s fits int64, but the padding rows
  // of a tile (8 rows, rounded up to the micro-kernel's) and its padding keys (8 of 64) would
  // reach past it. Under UBSan (the asan preset) an overflow aborts the test.
  lrpe::generator g(91);
  const index_t n = 8, d = 16;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const position_t far = (position_t{1} << 62) - 1;
  for (const auto form : {lrpe::canonical::alibi_form::symmetric, lrpe::canonical::alibi_form::causal}) {
    CAPTURE(static_cast<int>(form));
    // slope 2^-60: biases of magnitude ≤ 8 (a larger slope makes the logits ~1e15, where
    // rounding alone separates any two orders of evaluation)
    const lrpe::canonical::alibi<T> alibi(d, {std::ldexp(1.0, -60)}, form);
    for (const bool keys_first : {true, false}) {
      CAPTURE(keys_first);
      const lrpe::softmax_options<> opt{.causal = keys_first, .q_positions = keys_first ? far - 7 : -far,
                                        .k_positions = keys_first ? -far : far - 7};
      rm<T> ref(n, d), out(n, d);
      lrpe::softmax_attention(q, k, v, ref, alibi, opt);
      lrpe::softmax_attention(q, k, v, out, alibi, opt, lrpe::backend::simd<>{});
      CHECK((out - ref).cwiseAbs().maxCoeff() <= tolerance<T>() * (1 + ref.cwiseAbs().maxCoeff()));
    }
  }
}

TEST_CASE_TEMPLATE("simd softmax and linear attention with the last row at 2^63 - 1: the result at 0, bit for bit", T,
                   float, double) {
  // Only differences of positions enter; under UBSan (the asan preset) any overflow aborts.
  constexpr position_t top = std::numeric_limits<position_t>::max();
  lrpe::generator g(92);
  const index_t n = 150, d = 16;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  rm<T> at_zero(n, d), out(n, d);
  const lrpe::canonical::alibi<T> alibi(d, {0.125});
  for (const bool causal : {true, false}) {
    CAPTURE(causal);
    lrpe::softmax_attention(q, k, v, at_zero, alibi, lrpe::softmax_options<>{.causal = causal}, lrpe::backend::simd<>{});
    lrpe::softmax_attention(q, k, v, out, alibi,
                            lrpe::softmax_options<>{.causal = causal, .q_positions = top - (n - 1), .k_positions = top - (n - 1)},
                            lrpe::backend::simd<>{});
    CHECK(out == at_zero);
  }
  // the other end: first rows at −2^63 (the tiled kernel's per-diagonal bias table must not
  // form positions below the call's; UBSan aborts if it does)
  constexpr position_t bottom = std::numeric_limits<position_t>::min();
  const lrpe::canonical::alibi<T> symmetric(d, {0.125}, lrpe::canonical::alibi_form::symmetric);
  for (const bool causal : {true, false}) {
    CAPTURE(causal);
    lrpe::softmax_attention(q, k, v, at_zero, symmetric, lrpe::softmax_options<>{.causal = causal},
                            lrpe::backend::simd<>{});
    lrpe::softmax_attention(q, k, v, out, symmetric,
                            lrpe::softmax_options<>{.causal = causal, .q_positions = bottom, .k_positions = bottom},
                            lrpe::backend::simd<>{});
    CHECK(out == at_zero);
  }
  // causal linear attention with decay: the general chunked kernel (chunk 7 on queries at other
  // positions than the keys') and the one-vector-chunk self-attention kernel
  const lrpe::feature_maps::elu_plus_one phi;
  for (const index_t chunk : {index_t{7}, index_t{64}}) {
    CAPTURE(chunk);
    lrpe::linear_options o{.causal = true, .norm = lrpe::normalisation::denominator, .chunk = chunk, .decay = 0.97};
    lrpe::linear_attention(q, k, v, at_zero, lrpe::no_encoding{}, phi, o, lrpe::backend::simd<>{});
    o.q_positions = o.k_positions = top - (n - 1);
    lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, phi, o, lrpe::backend::simd<>{});
    CHECK(out == at_zero);
  }
  // queries one step behind the keys' offset (not self-attention: the general kernel)
  lrpe::linear_options o{.causal = true, .decay = 0.97, .q_positions = 1, .k_positions = 0};
  lrpe::linear_attention(q, k, v, at_zero, lrpe::no_encoding{}, phi, o, lrpe::backend::simd<>{});
  o.q_positions = top - (n - 1);
  o.k_positions = top - n;
  lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, phi, o, lrpe::backend::simd<>{});
  CHECK(out == at_zero);
}

TEST_CASE_TEMPLATE("simd softmax and linear attention with RoPE and Type 8 near 2^63 - 1 and -2^63: the result at 0",
                   T, float, double) {
  // The encoders' angles are exact at every position (docs/math.md §Angles), so only T's
  // rounding of the features separates a far call from the same call at 0: bound 64·d·ε(T) on
  // `diff` (relative to the largest output). Angles formed as fl(s·θ) put errors of order 1 here.
  constexpr position_t top = std::numeric_limits<position_t>::max();
  constexpr position_t bottom = std::numeric_limits<position_t>::min();
  lrpe::generator g(93);
  const index_t n = 90, d = 16;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const double bound = 64.0 * d * static_cast<double>(std::numeric_limits<T>::epsilon());
  rm<T> at_zero(n, d), out(n, d);
  const auto far_vs_zero = [&](const auto& enc, const char* what) {
    for (const position_t base : {top - (n - 1), bottom, (position_t{1} << 62) + 777}) {
      for (const bool causal : {true, false}) {
        CAPTURE(what);
        CAPTURE(base);
        CAPTURE(causal);
        lrpe::softmax_attention(q, k, v, at_zero, enc, lrpe::softmax_options<>{.causal = causal},
                                lrpe::backend::simd<>{});
        lrpe::softmax_attention(q, k, v, out, enc,
                                lrpe::softmax_options<>{.causal = causal, .q_positions = base, .k_positions = base},
                                lrpe::backend::simd<>{});
        CHECK(diff(out, at_zero) <= bound);
        lrpe::linear_options o{.causal = causal, .norm = lrpe::normalisation::none};
        lrpe::linear_attention(q, k, v, at_zero, enc, lrpe::feature_maps::identity{}, o, lrpe::backend::simd<>{});
        o.q_positions = o.k_positions = base;
        lrpe::linear_attention(q, k, v, out, enc, lrpe::feature_maps::identity{}, o, lrpe::backend::simd<>{});
        CHECK(diff(out, at_zero) <= bound);
      }
    }
  };
  far_vs_zero(lrpe::rope_neox<T>(d), "rope_neox");
  far_vs_zero(lrpe::type8<T>(d), "type8");
}

TEST_CASE("simd softmax: a scale that overflows float is a domain_error naming options.scale") {
  lrpe::generator g(92);
  const rm<float> q = random_matrix<float>(g, 5, 8);
  rm<float> out(5, 8);
  // infinite in float (finite in double): every backend
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, q, q, out, lrpe::no_encoding{}, lrpe::softmax_options<>{.scale = 1e39},
                                               lrpe::backend::simd<>{}),
                       "lrpe::softmax_attention: argument 'options.scale' must be finite in the scalar type; got 1e+39",
                       lrpe::domain_error);
  // finite in float, not once the SIMD kernel folds log2(e) into it
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, q, q, out, lrpe::no_encoding{}, lrpe::softmax_options<>{.scale = 3e38},
                                               lrpe::backend::simd<>{}),
                       doctest::Contains("'options.scale' must be at most max(T) / log2(e) in magnitude"),
                       lrpe::domain_error);
}

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

TEST_CASE_TEMPLATE("softmax decode with grouped K/V: the group's rows in one call == each head's own call", T, float,
                   double) {
  // One query row per head over a cache of 70 keys: the multi-head call runs each K/V head's
  // query heads as the rows of calls of at most 8 (shared encodings only); rows are
  // independent, so on the SIMD backend it must equal the single-head calls bit for bit, any
  // layout, with a pool. Groups of 3 and 6, and of 9 and 18 (two and three calls, the last
  // partial: one call of more than 8 rows would take the tiled kernel).
  static_assert(lrpe::detail::grouped_decode_rows <= lrpe::backend::simd_detail::softmax_direct_max_rows);
  const index_t B = 2, N = 70, D = 16;
  lrpe::backend::simd_threads pool(2);
  const lrpe::rope_neox<T> rope(D);
  lrpe::generator g(0x6A0);
  for (const auto& shape : {std::pair<index_t, index_t>{6, 2}, {6, 1}, {18, 2}, {18, 1}}) {
    const index_t H = shape.first, kv_heads = shape.second;  // query heads, K/V heads
    const lrpe::canonical::alibi<T> alibi = lrpe::canonical::alibi<T>::for_heads(D, H);  // per head: not grouped
    CAPTURE(H);
    for (const bool bsnh : {false, true}) {
      for (const bool array : {false, true}) {
        CAPTURE(kv_heads);
        CAPTURE(bsnh);
        CAPTURE(array);
        std::vector<T> q(static_cast<std::size_t>(B * H * D)), k(static_cast<std::size_t>(B * kv_heads * N * D)),
            v(k.size());
        for (auto* buf : {&q, &k, &v})
          for (auto& x : *buf) x = static_cast<T>(g.normal());
        const auto view = [&](std::vector<T>& buf, index_t heads, index_t n) {
          return bsnh ? lrpe::bsnh(buf.data(), B, n, heads, D) : lrpe::bnsh(buf.data(), B, heads, n, D);
        };
        const std::vector<position_t> at{N - 3};
        lrpe::softmax_options<> opt{.causal = true};
        if (array) opt.q_positions = at;
        else opt.q_positions = N - 1;
        const auto check_with = [&](const auto& enc, auto backend, double tol = 0) {
          std::vector<T> out(q.size(), T(NAN)), each(q.size(), T(NAN));
          const auto ov = view(out, H, 1), ev = view(each, H, 1);
          lrpe::softmax_attention(view(q, H, 1), view(k, kv_heads, N), view(v, kv_heads, N), ov, enc, opt, backend);
          const auto qv = lrpe::detail::as_const_heads(view(q, H, 1));
          const auto kv = lrpe::detail::as_const_heads(view(k, kv_heads, N));
          const auto vv = lrpe::detail::as_const_heads(view(v, kv_heads, N));
          for (index_t b = 0; b < B; ++b)
            for (index_t h = 0; h < H; ++h) {
              const index_t hk = h / (H / kv_heads);
              lrpe::softmax_attention(qv.head(b, h), kv.head(b, hk), vv.head(b, hk), ev.head(b, h),
                                      lrpe::detail::head_encoding(enc, h, H, "test"), opt, backend);
            }
          double worst = 0;
          for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(double(out[i]) - double(each[i])));
          CHECK(worst <= tol);
        };
        INFO("no encoding, reference");
        // the reference backend's Eigen products sum in another order for several rows than for one
        check_with(lrpe::no_encoding{}, lrpe::backend::reference{}, tolerance<T>());
        INFO("no encoding, simd");
        check_with(lrpe::no_encoding{}, lrpe::backend::simd<>{});
        INFO("rope, simd");
        check_with(rope, lrpe::backend::simd<>{});
        INFO("rope, pool");
        check_with(rope, lrpe::backend::simd_policy<>{&pool});
        INFO("alibi, simd");
        check_with(alibi, lrpe::backend::simd<>{});
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd grouped-query attention == K and V repeated, on a 2-thread pool", T, float, double) {
  // 6 query heads over 2 K/V heads: softmax with RoPE, causal linear with per-head decays,
  // BSNH; the grouped call and the repeated one run the same kernels on the same values
  lrpe::backend::simd_threads pool(2);
  const lrpe::backend::simd_policy<> p{&pool};
  const index_t B = 1, H = 6, N = 70, D = 16;
  const lrpe::rope_neox<T> enc(D);
  const std::vector<double> decays{1.0, 0.99, 0.95, 0.9, 0.8, 0.5};
  const lrpe::feature_maps::elu_plus_one phi;
  CHECK(attention_test::gqa_vs_repeated_kv<T>(81, B, H, 3, N, D, true, [&](auto q, auto k, auto v, auto o) {
          lrpe::softmax_attention(q, k, v, o, enc, lrpe::softmax_options<>{.causal = true}, p);
        }) == 0);
  CHECK(attention_test::gqa_vs_repeated_kv<T>(82, B, H, 3, N, D, true, [&](auto q, auto k, auto v, auto o) {
          lrpe::linear_attention(q, k, v, o, enc, phi, lrpe::linear_options{.causal = true, .head_decays = decays}, p);
        }) == 0);
}

TEST_CASE("simd softmax: a reused workspace stops allocating after the first call") {
  lrpe::backend::simd_workspace ws;
  lrpe::generator g(41);
  const index_t n = 300, d = 64;
  const rm<float> q = random_matrix<float>(g, n, d), k = random_matrix<float>(g, n, d), v = random_matrix<float>(g, n, d);
  rm<float> out(n, d);
  const lrpe::type1<float> enc(d);
  const lrpe::backend::simd_policy<> policy{nullptr, &ws};
  lrpe::softmax_attention(q, k, v, out, enc, lrpe::softmax_options<>{.causal = true}, policy);
  const std::size_t after_first = ws.allocations();
  CHECK(after_first > 0);
  for (int i = 0; i < 3; ++i) lrpe::softmax_attention(q, k, v, out, enc, lrpe::softmax_options<>{.causal = true}, policy);
  CHECK(ws.allocations() == after_first);
}

// ------------------------------------------------------------------------------ linear attention

namespace {

struct linear_case_options {
  bool causal = false;
  lrpe::normalisation norm = lrpe::normalisation::none;
  index_t chunk = 64;
  double decay = 1.0;
};

/// Runs reference and SIMD linear attention on one shape; returns the difference.
template <class T, class Enc, class Phi>
double linear_case(const shape& s, const Enc& enc, const Phi& phi, const linear_case_options& lo, std::uint64_t seed) {
  lrpe::generator g(seed);
  const index_t d = s.d;
  const rm<T> q = random_matrix<T>(g, s.nq, d, 0.5), k = random_matrix<T>(g, s.nk, d, 0.5),
              v = random_matrix<T>(g, s.nk, s.dv);
  const auto qp = sorted_positions(g, s.nq, s.q_offset), kp = sorted_positions(g, s.nk, s.k_offset);
  lrpe::linear_options opt;
  opt.causal = lo.causal;
  opt.norm = lo.norm;
  opt.chunk = lo.chunk;
  opt.decay = lo.decay;
  if (s.arrays) {
    opt.q_positions = lrpe::positions(std::span<const position_t>(qp));
    opt.k_positions = lrpe::positions(std::span<const position_t>(kp));
  } else {
    opt.q_positions = s.q_offset;
    opt.k_positions = s.k_offset;
  }
  rm<T> ref(s.nq, s.dv), out(s.nq, s.dv);
  out.setConstant(T(123));
  lrpe::linear_attention(q, k, v, ref, enc, phi, opt);
  lrpe::linear_attention(q, k, v, out, enc, phi, opt, lrpe::backend::simd<>{});
  return diff(out, ref);
}

#define LINEAR_INFO(lo) INFO("causal=" << lo.causal << " norm=" << int(lo.norm) << " chunk=" << lo.chunk << " decay=" << lo.decay)

/// Rows [a, b) as one segment: through the SIMD backend (`backend`, state st) and the reference
/// (state ref_st), checking the two outputs agree; returns the SIMD output.
template <class T, class Enc, class Phi, class Backend>
rm<T> run_segment(const rm<T>& q, const rm<T>& k, const rm<T>& v, index_t a, index_t b, const Enc& enc, const Phi& phi,
                  lrpe::linear_attention_state<T>& st, lrpe::linear_attention_state<T>& ref_st,
                  const lrpe::linear_options& seg, const Backend& backend) {
  const index_t dv = v.cols();
  rm<T> o(b - a, dv), o_ref(b - a, dv);
  lrpe::linear_attention(q.middleRows(a, b - a), k.middleRows(a, b - a), v.middleRows(a, b - a), o, enc, phi, st, seg,
                         backend);
  lrpe::linear_attention(q.middleRows(a, b - a), k.middleRows(a, b - a), v.middleRows(a, b - a), o_ref, enc, phi,
                         ref_st, seg);
  CHECK(diff(o, o_ref) <= tolerance<T>());
  return o;
}

/// The SIMD-built state equals the reference state: count, last position, S and z.
template <class T>
void check_same_state(const lrpe::linear_attention_state<T>& st, const lrpe::linear_attention_state<T>& ref_st) {
  CHECK(st.count() == ref_st.count());
  CHECK(st.last_position() == ref_st.last_position());
  CHECK(diff(rm<T>(st.kv()), rm<T>(ref_st.kv())) <= tolerance<T>());
  CHECK(diff(rm<T>(st.k_sum().transpose()), rm<T>(ref_st.k_sum().transpose())) <= tolerance<T>());
}

}  // namespace

TEST_CASE_TEMPLATE("simd linear attention, no encoding: == reference (causal or not, norms, chunks, decay, offsets)", T,
                   float, double) {
  const std::uint64_t seed = 0x51D0'0010;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  // any chunk >= 1 is valid: 2^40 and 2^63 - 1 sized the SIMD scratch (bad_alloc, overflowed sizes)
  const index_t chunks[] = {1, 7, 16, 64, 100, index_t{1} << 40, std::numeric_limits<index_t>::max()};
  const double decays[] = {1.0, 0.97, 0.5};
  int n = 0;
  for (const shape& s : shapes(seed, 40)) {
    SHAPE_INFO(s);
    linear_case_options lo;
    lo.causal = s.causal;
    lo.norm = g.below(2) == 0 ? lrpe::normalisation::none : lrpe::normalisation::denominator;
    lo.chunk = chunks[g.below(std::size(chunks))];
    lo.decay = s.causal ? decays[g.below(std::size(decays))] : 1.0;
    LINEAR_INFO(lo);
    CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
          tolerance<T>());
    lo.causal = !lo.causal;  // the other mode on the same shape (no decay without causal)
    if (!lo.causal) lo.decay = 1.0;
    LINEAR_INFO(lo);
    CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::relu{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
          tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("simd linear attention with a large output (non-temporal stores) == reference", T, float, double) {
  // One head whose output reaches linear_stream_bytes takes non-temporal stores in both the
  // non-causal pass and the causal one-vector chunks; 17 rows past a multiple of the vector
  // width leave a tail for the general path after the streamed chunks.
  const std::uint64_t seed = 0x51D0'0020;
  MESSAGE("seed = " << seed);
  const index_t d = 64, dv = 64;
  const auto rows = static_cast<index_t>(lrpe::backend::simd_detail::linear_stream_bytes / (dv * sizeof(T))) + 17;
  int n = 0;
  for (bool causal : {false, true}) {
    for (double decay : {1.0, 0.999}) {
      if (!causal && decay != 1.0) continue;
      const shape s{rows, rows, d, dv, causal, 0, 0, false};
      SHAPE_INFO(s);
      const linear_case_options lo{causal, lrpe::normalisation::denominator, 64, decay};
      LINEAR_INFO(lo);
      // the output (an Eigen matrix) is vector-aligned: the case reaches the streamed stores
      REQUIRE(reinterpret_cast<std::uintptr_t>(rm<T>(rows, dv).data()) % sizeof(xsimd::batch<T>) == 0);
      CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, lo,
                           seed + static_cast<std::uint64_t>(++n)) <= tolerance<T>());
    }
  }
}

TEST_CASE_TEMPLATE("linear attention, reference and SIMD: a NaN in q or k makes exactly the rows it reaches NaN", T,
                   float, double) {
  // n = 100 (one-vector chunks of 16 with a remainder; key 40 sits inside the chunk of rows
  // 32–47, where the intra-chunk product must not carry it back to rows 32–39), every
  // vectorised φ (relu too: φ(NaN) = NaN), both normalisations, with and without RoPE (the
  // features computed inside the kernel) and a decay.
  const index_t n = 100, d = 32, dv = 24, poisoned_q = 5, poisoned_k = 40;
  lrpe::generator g(0x5AA6);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const lrpe::rope_neox<T> rope(d);
  const auto row_nan = [](const rm<T>& o, index_t i) {
    for (index_t c = 0; c < o.cols(); ++c)
      if (!std::isnan(o(i, c))) return false;
    return true;
  };
  const auto check = [&](const auto& enc, const auto& phi, const char* name) {
    for (const auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
      for (const bool causal : {false, true}) {
        for (const bool simd : {false, true}) {
          INFO(std::string(name) << ", norm " << static_cast<int>(norm) << ", causal " << causal << ", simd " << simd);
          lrpe::linear_options opt{.causal = causal, .norm = norm};
          if (causal) opt.decay = 0.97;
          const auto run = [&](const rm<T>& qq, const rm<T>& kk) {
            rm<T> out(n, dv);
            out.setConstant(T(123));
            if (simd) lrpe::linear_attention(qq, kk, v, out, enc, phi, opt, lrpe::backend::simd<>{});
            else lrpe::linear_attention(qq, kk, v, out, enc, phi, opt);
            return out;
          };
          const rm<T> clean = run(q, k);
          rm<T> qq = q, kk = k;
          qq(poisoned_q, 7) = std::numeric_limits<T>::quiet_NaN();
          kk(poisoned_k, 3) = std::numeric_limits<T>::quiet_NaN();
          const rm<T> out_q = run(qq, k), out_k = run(q, kk);
          for (index_t i = 0; i < n; ++i) {
            INFO("row " << i);
            if (i == poisoned_q) CHECK(row_nan(out_q, i));
            else CHECK((out_q.row(i).array() == clean.row(i).array()).all());
            if (!causal || i >= poisoned_k) CHECK(row_nan(out_k, i));
            else CHECK((out_k.row(i).array() == clean.row(i).array()).all());
          }
        }
      }
    }
  };
  for (const bool with_rope : {false, true}) {
    const auto each_phi = [&](const auto& enc) {
      check(enc, lrpe::feature_maps::identity{}, "identity");
      check(enc, lrpe::feature_maps::elu_plus_one{}, "elu+1");
      check(enc, lrpe::feature_maps::relu{}, "relu");
      check(enc, lrpe::feature_maps::relu_eps{}, "relu+eps");
    };
    if (with_rope) each_phi(rope);
    else each_phi(lrpe::no_encoding{});
  }
}

TEST_CASE_TEMPLATE("linear attention, reference and SIMD: a NaN or Inf in v reaches exactly the rows that see its key",
                   T, float, double) {
  // d = d_v = 32 reaches the one-vector chunks for float on AVX-512 as well (f and d_v
  // multiples of W), d_v = 24 the general path there. A poisoned value row must be skipped,
  // not multiplied by A's zeros (0·NaN = 0·Inf = NaN), by the rows before it that share its
  // block: row 40 sits in the general path's 6-row group 36–41 (and the reference's chunk
  // 0–63), row 42 in the one-vector chunks' 4-row block 40–43. Causal, with and without a
  // decay, both normalisations.
  const index_t n = 100, d = 32;
  const lrpe::feature_maps::elu_plus_one phi;
  for (const index_t dv : {index_t{24}, index_t{32}}) {
    lrpe::generator g(0x5AA7 + static_cast<std::uint64_t>(dv));
    const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
    for (const index_t poisoned : {index_t{40}, index_t{42}}) {
      for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
        rm<T> vv = v;
        vv(poisoned, 5) = bad;
        for (const auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
          for (const double decay : {1.0, 0.97}) {
            for (const bool simd : {false, true}) {
              INFO("dv " << dv << ", row " << poisoned << ", " << bad << ", norm " << static_cast<int>(norm)
                         << ", decay " << decay << ", simd " << simd);
              const lrpe::linear_options opt{.causal = true, .norm = norm, .decay = decay};
              const auto run = [&](const rm<T>& values) {
                rm<T> out(n, dv);
                out.setConstant(T(123));
                if (simd) {
                  lrpe::linear_attention(q, k, values, out, lrpe::no_encoding{}, phi, opt, lrpe::backend::simd<>{});
                } else {
                  lrpe::linear_attention(q, k, values, out, lrpe::no_encoding{}, phi, opt);
                }
                return out;
              };
              const rm<T> clean = run(v), out = run(vv);
              for (index_t i = 0; i < n; ++i) {
                INFO("row " << i);
                // the poisoned column from the poisoned row on: NaN, or ±Inf from an Inf; every
                // other value as in the clean call, bit for bit
                for (index_t c = 0; c < dv; ++c) {
                  if (i >= poisoned && c == 5) CHECK(!std::isfinite(out(i, c)));
                  else CHECK(out(i, c) == clean(i, c));
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd linear attention, every LRPE preset and feature map: == reference", T, float, double) {
  const std::uint64_t seed = 0x51D0'0011;
  MESSAGE("seed = " << seed);
  const index_t d = 16;
  auto check = [&](const auto& enc, const char* name) {
    INFO("preset " << name);
    int n = 0;
    // Offsets and sorted position arrays (n = 150 > the 64-row encode block: slices of both).
    for (const auto& ca : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
      const bool causal = ca.first, arrays = ca.second;  // (CAPTURE is a lambda: clang < 16 captures no binding)
      const shape s{150, 150, d, 24, true, 5, 5, arrays};
      CAPTURE(arrays);
      linear_case_options lo{causal, lrpe::normalisation::denominator, 64, causal ? 0.9 : 1.0};
      LINEAR_INFO(lo);
      CHECK(linear_case<T>(s, enc, lrpe::feature_maps::elu_plus_one{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
            tolerance<T>());
      lo.norm = lrpe::normalisation::none;
      CHECK(linear_case<T>(s, enc, lrpe::feature_maps::identity{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
            tolerance<T>());
      CHECK(linear_case<T>(s, enc, lrpe::feature_maps::relu_eps{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
            tolerance<T>());
      CHECK(linear_case<T>(s, enc, [](T x) { return x * x; }, lo, seed + static_cast<std::uint64_t>(++n)) <=
            tolerance<T>());
    }
  };
  for_each_preset<T>(d, check);
}

TEST_CASE_TEMPLATE("simd causal linear attention in segments with a state == one call; state == reference state", T,
                   float, double) {
  lrpe::generator g(51);
  const index_t n = 230, d = 16, dv = 12;
  const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
  const lrpe::type1<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  for (double decay : {1.0, 0.95}) {
    INFO("decay = " << decay);
    rm<T> whole(n, dv), parts(n, dv);
    lrpe::linear_options opt{.causal = true, .norm = lrpe::normalisation::denominator, .chunk = 32, .decay = decay};
    lrpe::linear_attention(q, k, v, whole, enc, phi, opt, lrpe::backend::simd<>{});
    lrpe::linear_attention_state<T> st(enc.feature_dim(), dv, decay), ref_st(enc.feature_dim(), dv, decay);
    const index_t cuts[] = {0, 1, 50, 51, 130, n};
    for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
      const index_t a = cuts[c], b = cuts[c + 1];
      lrpe::linear_options seg = opt;
      seg.q_positions = a;
      seg.k_positions = a;
      parts.middleRows(a, b - a) = run_segment(q, k, v, a, b, enc, phi, st, ref_st, seg, lrpe::backend::simd<>{});
    }
    CHECK(diff(parts, whole) <= tolerance<T>());
    check_same_state(st, ref_st);
    // streaming: the next token through the SIMD-built state == through the reference state
    std::vector<T> a_out(static_cast<std::size_t>(dv)), b_out(a_out.size());
    st.query(enc, phi, q.row(n - 1).data(), n, a_out.data(), lrpe::normalisation::denominator);
    ref_st.query(enc, phi, q.row(n - 1).data(), n, b_out.data(), lrpe::normalisation::denominator);
    for (index_t j = 0; j < dv; ++j) CHECK(std::abs(a_out[static_cast<std::size_t>(j)] - b_out[static_cast<std::size_t>(j)]) <= 10 * tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("simd causal linear self-attention by one-vector chunks (keys at the queries' positions) == reference",
                   T, float, double) {
  // Keys at the queries' positions with d and d_v multiples of 16 take the SIMD kernel's
  // one-vector chunks; the last n mod W rows take the general path.
  const std::uint64_t seed = 0x51D0'0013;
  MESSAGE("seed = " << seed);
  int n = 0;
  const std::pair<index_t, index_t> dims[] = {{16, 16}, {64, 64}, {32, 48}};
  for (index_t rows : {1, 15, 16, 17, 100, 257}) {
    for (auto [d, dv] : dims) {
      for (position_t offset : {0, 37}) {
        const shape s{rows, rows, d, dv, true, offset, offset, false};
        SHAPE_INFO(s);
        for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
          for (double decay : {1.0, 0.97, 0.5}) {
            const linear_case_options lo{true, norm, 64, decay};
            LINEAR_INFO(lo);
            CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, lo,
                                 seed + static_cast<std::uint64_t>(++n)) <= tolerance<T>());
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd causal linear attention, a decode loop of one-row segments == one reference call", T, float,
                   double) {
  // One token per call, positions with gaps (array positions in the one-call reference): each
  // call takes the state recurrence (`step_rows`), including d_v not a multiple of the vector
  // width (padded columns) and a first token on an empty state. The features of the one row
  // take the SIMD encoder with direct tables (RoPE, LRPE cosine: P = I) or the scalar encoder
  // (Type 1's Householder P).
  lrpe::generator g(57);
  const index_t n = 40;
  const lrpe::feature_maps::elu_plus_one phi;
  const std::pair<index_t, index_t> dims[] = {{64, 64}, {20, 12}};
  std::vector<position_t> pos(static_cast<std::size_t>(n));
  position_t p = 3;
  for (index_t i = 0; i < n; ++i) pos[static_cast<std::size_t>(i)] = (p += 1 + (i % 7 == 3 ? 25 : 0));
  const auto run = [&](const auto& enc, index_t d, index_t dv) {
    const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
    for (double decay : {1.0, 0.9}) {
      for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
        INFO("d = " << d << " dv = " << dv << " decay = " << decay << " norm = " << int(norm));
        lrpe::linear_options all{.causal = true, .norm = norm, .decay = decay,
                                 .q_positions = std::span<const position_t>(pos),
                                 .k_positions = std::span<const position_t>(pos)};
        rm<T> ref(n, dv), steps(n, dv);
        lrpe::linear_attention_state<T> ref_st(enc.feature_dim(), dv, decay), st(enc.feature_dim(), dv, decay);
        lrpe::linear_attention(q, k, v, ref, enc, phi, ref_st, all);
        for (index_t i = 0; i < n; ++i) {
          const position_t t = pos[static_cast<std::size_t>(i)];
          rm<T> o(1, dv);
          lrpe::linear_attention(q.middleRows(i, 1), k.middleRows(i, 1), v.middleRows(i, 1), o, enc, phi, st,
                                 lrpe::linear_options{.causal = true, .norm = norm, .decay = decay, .q_positions = t,
                                                      .k_positions = t},
                                 lrpe::backend::simd<>{});
          steps.row(i) = o;
        }
        CHECK(diff(steps, ref) <= tolerance<T>());
        CHECK(st.count() == n);
        CHECK(st.last_position() == pos.back());
        check_same_state(st, ref_st);
      }
    }
  };
  for (auto [d, dv] : dims) {
    run(lrpe::rope_neox<T>(d), d, dv);
    run(lrpe::encoder{lrpe::p::identity<T>(d), lrpe::lambda::complex_phase<T>(d)}, d, dv);
    run(lrpe::type1<T>(d), d, dv);
  }
}

TEST_CASE("simd causal linear attention in float with λ close to 1: decode steps and one call stay at the rounding floor") {
  // See the streaming test of the same name: the decay factor's rounding is carried from one
  // rescale to the next (state.decay_carry()), in the decode recurrence (`step_rows`, on the
  // state's storage when d_v is a multiple of the vector width, else on a copy) and in the
  // chunked paths. Without the carry, decode steps drifted to 8e-5 here.
  constexpr double decay = 0.9999, bound = 1.5e-5;
  for (const index_t d : {8, 4}) {
    CAPTURE(d);
    const auto c = attention_test::make_decay_drift_case(12000, d, d, decay, 0x51D0'0001);
    const index_t n = c.q.rows();
    const lrpe::feature_maps::identity phi;
    rm<float> steps(n, d), whole(n, d);
    lrpe::linear_attention_state<float> st(d, d, decay), ref_st(d, d, decay);
    for (index_t t = 0; t < n; ++t) {
      lrpe::linear_attention(c.q.middleRows(t, 1), c.k.middleRows(t, 1), c.v.middleRows(t, 1), steps.middleRows(t, 1),
                             lrpe::no_encoding{}, phi, st,
                             lrpe::linear_options{.causal = true, .decay = decay, .q_positions = t, .k_positions = t},
                             lrpe::backend::simd<>{});
      ref_st.append_features(c.k.row(t).data(), c.v.row(t).data(), t);
    }
    CHECK(attention_test::rel_error(steps, c.exact) <= bound);
    CHECK(st.decay_carry() == ref_st.decay_carry());  // the same factors, token by token
    lrpe::linear_attention(c.q, c.k, c.v, whole, lrpe::no_encoding{}, phi,
                           lrpe::linear_options{.causal = true, .decay = decay}, lrpe::backend::simd<>{});
    CHECK(attention_test::rel_error(whole, c.exact) <= bound);
  }
}

TEST_CASE_TEMPLATE("simd multi-head segments, one state per (b, h): prefill then decode steps == one reference call", T,
                   float, double) {
  // The decode steps' features on the SIMD backend: RoPE and LRPE cosine take direct tables
  // (their angles evaluated once per step for every head, q and k), Type 1 the scalar encoder;
  // the prefill (70 tokens) crosses a chunk. Single thread and a 2-thread pool.
  lrpe::backend::simd_threads pool(2);
  const lrpe::backend::simd_policy<> threads{&pool};
  const auto check = [&](const auto& enc, const char* what) {
    INFO(what);
    CHECK(attention_test::multihead_state_error<T>(enc, lrpe::backend::simd<>{}, 2, 4, 32, 70, 12, 0x51'0001) <=
          tolerance<T>());
    CHECK(attention_test::multihead_state_error<T>(enc, threads, 2, 4, 32, 70, 12, 0x51'0002) <= tolerance<T>());
  };
  check(lrpe::rope_neox<T>(32), "rope_neox");
  check(lrpe::encoder{lrpe::p::identity<T>(32), lrpe::lambda::complex_phase<T>(32)}, "LRPE cosine");
  check(lrpe::type1<T>(32), "type1");
  // Per-head encodings (RoPE of base 10⁴·(h+1)): one position, other θ per head, so the
  // remembered angles of one head must never serve another.
  check([](index_t h) { return lrpe::rope_neox<T>(32, 1e4 * static_cast<double>(h + 1)); }, "per-head RoPE bases");
  // The one-row features of RoPE and LRPE cosine do take the SIMD encoder (direct tables).
  using cosine = lrpe::encoder<lrpe::p::identity<T>, lrpe::lambda::complex_phase<T>>;
  static_assert(lrpe::backend::simd_detail::few_rows_simd_v<lrpe::rope_neox<T>> &&
                lrpe::backend::simd_detail::few_rows_simd_v<cosine> &&
                !lrpe::backend::simd_detail::few_rows_simd_v<lrpe::type1<T>>);
  static_assert(lrpe::simd_encoder<lrpe::rope_neox<T>>::path == lrpe::simd_path::vectorised &&
                lrpe::simd_encoder<cosine>::path == lrpe::simd_path::vectorised);
}

TEST_CASE_TEMPLATE("simd causal linear self-attention by one-vector chunks, in segments with gaps == reference", T,
                   float, double) {
  // Each segment continues a state whose last position lies 1, 40 or 1000 positions back:
  // the first chunk's weights λ^{s−last} come from outside the kernel's table of λ^{<2W}.
  lrpe::generator g(53);
  const index_t n = 300, d = 32, dv = 32;
  const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
  const lrpe::feature_maps::elu_plus_one phi;
  for (double decay : {1.0, 0.99}) {
    for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
      INFO("decay = " << decay << " norm = " << int(norm));
      lrpe::linear_attention_state<T> st(d, dv, decay), ref_st(d, dv, decay);
      const index_t cuts[] = {0, 40, 41, 120, 200, n};
      const position_t gaps[] = {0, 1, 40, 1000, 7};
      position_t start = 0;
      for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
        const index_t a = cuts[c], b = cuts[c + 1];
        start += gaps[c] + (c > 0 ? cuts[c] - cuts[c - 1] - 1 : 0);
        lrpe::linear_options seg{.causal = true, .norm = norm, .decay = decay, .q_positions = start, .k_positions = start};
        CAPTURE(start);
        run_segment(q, k, v, a, b, lrpe::no_encoding{}, phi, st, ref_st, seg, lrpe::backend::simd<>{});
        check_same_state(st, ref_st);
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd causal linear self-attention with the features computed in the kernel == reference", T,
                   float, double) {
  // Keys at the queries' positions, d_f and d_v multiples of 16, φ then an lrpe encoder (or a
  // vectorised φ alone): the SIMD backend computes Q̃ and K̃ block by block (64 rows) inside the
  // kernel. n crosses the block and chunk boundaries (16, 17, 65, 150); n = 15 has no whole
  // chunk and takes the stored-features path. Type 8 is complex: d_f = 2d = 32.
  const std::uint64_t seed = 0x51D0'0014;
  MESSAGE("seed = " << seed);
  const index_t d = 16, dv = 32;
  auto check = [&](const auto& enc, const char* name) {
    INFO("encoding " << std::string(name));
    int n = 0;
    for (index_t rows : {15, 16, 17, 65, 150}) {
      const shape s{rows, rows, d, dv, true, rows % 2 == 0 ? 0 : 5, rows % 2 == 0 ? 0 : 5, false};
      SHAPE_INFO(s);
      for (auto [norm, decay] : {std::pair{lrpe::normalisation::none, 1.0}, std::pair{lrpe::normalisation::denominator, 0.9}}) {
        const linear_case_options lo{true, norm, 64, decay};
        LINEAR_INFO(lo);
        CHECK(linear_case<T>(s, enc, lrpe::feature_maps::elu_plus_one{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
              tolerance<T>());
        CHECK(linear_case<T>(s, enc, lrpe::feature_maps::relu_eps{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
              tolerance<T>());
        CHECK(linear_case<T>(s, enc, [](T x) { return x * x; }, lo, seed + static_cast<std::uint64_t>(++n)) <=
              tolerance<T>());
        if constexpr (!std::is_same_v<std::decay_t<decltype(enc)>, lrpe::no_encoding>) {
          CHECK(linear_case<T>(s, enc, lrpe::feature_maps::identity{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
                tolerance<T>());
        }
      }
    }
  };
  check(lrpe::no_encoding{}, "none");
  for_each_preset<T>(d, check);
}

TEST_CASE_TEMPLATE("simd causal linear attention, features in the kernel: segments with a state, O(block) scratch", T,
                   float, double) {
  lrpe::generator g(54);
  const index_t n = 1000, d = 32, dv = 16;
  const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
  const lrpe::rope_gptj<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  lrpe::backend::simd_workspace ws;
  const lrpe::backend::simd_policy<> policy{nullptr, &ws};
  for (double decay : {1.0, 0.98}) {
    INFO("decay = " << decay);
    lrpe::linear_attention_state<T> st(d, dv, decay), ref_st(d, dv, decay);
    const index_t cuts[] = {0, 5, 70, 71, 600, n};  // segments shorter than a chunk, longer than a block
    for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
      const index_t a = cuts[c], b = cuts[c + 1];
      const lrpe::linear_options seg{
          .causal = true, .norm = lrpe::normalisation::denominator, .decay = decay, .q_positions = a, .k_positions = a};
      CAPTURE(a);
      run_segment(q, k, v, a, b, enc, phi, st, ref_st, seg, policy);
      check_same_state(st, ref_st);
    }
  }
  // The features never exist for the whole sequence: the workspace holds blocks of 64 rows,
  // less than the n × d_f Q̃ and K̃ (2 × 125 KiB in float) that computing them first needs.
  CHECK(ws.capacity() < static_cast<std::size_t>(2 * n * d) * sizeof(T));
}

TEST_CASE_TEMPLATE("simd linear attention, multi-head with per-head decays on a 2-thread pool == reference", T, float,
                   double) {
  lrpe::backend::simd_threads pool(2);
  lrpe::generator g(61);
  const index_t b = 1, h = 4, n = 150, d = 16;
  std::vector<T> q(static_cast<std::size_t>(b * h * n * d)), k(q.size()), v(q.size()), ref(q.size()), out(q.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = static_cast<T>(0.5 * g.normal());
  const std::vector<double> decays{1.0, 0.99, 0.9, 0.5};
  const lrpe::linear_options opt{.causal = true, .norm = lrpe::normalisation::denominator, .head_decays = decays};
  const lrpe::rope_neox<T> enc(d);
  lrpe::linear_attention(lrpe::bnsh(q.data(), b, h, n, d), lrpe::bnsh(k.data(), b, h, n, d), lrpe::bnsh(v.data(), b, h, n, d),
                         lrpe::bnsh(ref.data(), b, h, n, d), enc, lrpe::feature_maps::elu_plus_one{}, opt);
  lrpe::linear_attention(lrpe::bnsh(q.data(), b, h, n, d), lrpe::bnsh(k.data(), b, h, n, d), lrpe::bnsh(v.data(), b, h, n, d),
                         lrpe::bnsh(out.data(), b, h, n, d), enc, lrpe::feature_maps::elu_plus_one{}, opt,
                         lrpe::backend::simd_policy<>{&pool});
  double err = 0;
  for (std::size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(static_cast<double>(out[i] - ref[i])));
  CHECK(err <= 10 * tolerance<T>());
}
