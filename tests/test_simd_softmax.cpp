// SPDX-License-Identifier: MIT
// SIMD softmax attention (backend::simd, simd_policy) == the reference backend; tolerances:
// simd_attention_helpers.hpp.
#include "simd_attention_helpers.hpp"

TEST_CASE_TEMPLATE("simd softmax, no encoding: == reference on random shapes, causal or not, offsets, arrays", T,
                   float, double) {
  const std::uint64_t seed = 0x51D0'0001;
  MESSAGE("seed = " << seed);
  int n = 0;
  for (const shape& s : shapes(seed, 60)) {
    SHAPE_INFO(s);
    CHECK(softmax_case<T>(s, lrpe::no_encoding{}, seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
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
    CHECK(softmax_case<T>(s, causal_alibi, seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
    CHECK(softmax_case<T>(s, sym_alibi, seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
    CHECK(softmax_case<T>(s, t5, seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("simd softmax, a pair-keyed bias (per entry, not per diagonal): == reference", T, float, double) {
  const std::uint64_t seed = 0x51D0'0003;
  MESSAGE("seed = " << seed);
  int n = 0;
  for (shape s : shapes(seed, 20)) {
    SHAPE_INFO(s);
    const auto pair = random_pair_bias<T>(s.d, seed + static_cast<std::uint64_t>(n));
    CHECK(softmax_case<T>(s, pair, seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
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
      CHECK(softmax_case<T>(s, enc, seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
    }
  };
  for_each_preset<T>(d, check);
}

TEST_CASE_TEMPLATE("simd softmax: logits of +-1e4 stay finite and equal the reference", T, float, double) {
  for (bool causal : {false, true}) {
    const shape s{50, 80, 8, 8, causal, 10, 0, false};
    SHAPE_INFO(s);
    const lrpe::canonical::alibi<T> steep(s.d, {1e4}, lrpe::canonical::alibi_form::symmetric);
    CHECK(softmax_case<T>(s, steep, 7) <= kernel_vs_kernel<T>());
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
          kernel_vs_kernel<T>());
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
              kernel_vs_kernel<T>());
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
            kernel_vs_kernel<T>());
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
  CHECK(diff(one, ref) <= kernel_vs_kernel<T>());
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

TEST_CASE_TEMPLATE("simd softmax: Shaw value term, per-pair scores and URPE reweighting fall back to the reference kernel", T, float,
                   double) {
  lrpe::generator g(11);
  const index_t n = 40, d = 8, r = 4;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const lrpe::canonical::shaw<T> shaw(d, r, random_matrix<T>(g, 2 * r + 1, d), random_matrix<T>(g, 2 * r + 1, d));
  rm<T> ref(n, d), out(n, d);
  lrpe::softmax_attention(q, k, v, ref, shaw, lrpe::softmax_options<>{.causal = true});
  lrpe::softmax_attention(q, k, v, out, shaw, lrpe::softmax_options<>{.causal = true}, lrpe::backend::simd<>{});
  CHECK(diff(out, ref) <= kernel_vs_kernel<T>());
  // per-pair scores with a bias (composite attention), a non-bilinear score (DA-Transformer), a
  // clamped Transformer-XL: multi-head on a pool, each head == the reference's
  namespace cn = lrpe::canonical;
  const index_t heads = 2;
  const cn::composite<T> chang(shaw, cn::t5_bias<T>(d, cn::t5_buckets{8, 16, true}, random_matrix<T>(g, heads, 8)));
  const cn::da_transformer<T> da(d, {-0.3, 0.1}, {0.5, 2.0});
  const cn::clamped_transformer_xl<T> xl(
      cn::transformer_xl<T>(d, random_matrix<T>(g, heads, d), random_matrix<T>(g, heads, d), random_matrix<T>(g, heads * d, 2 * d)),
      6);
  const rm<T> qh = random_matrix<T>(g, heads * n, d), kh = random_matrix<T>(g, heads * n, d), vh = random_matrix<T>(g, heads * n, d);
  lrpe::backend::simd_threads pool(2);
  const auto run = [&](const auto& encoding) {
    rm<T> all(heads * n, d), one(n, d);
    lrpe::softmax_attention(lrpe::bnsh(qh.data(), 1, heads, n, d), lrpe::bnsh(kh.data(), 1, heads, n, d),
                            lrpe::bnsh(vh.data(), 1, heads, n, d), lrpe::bnsh(all.data(), 1, heads, n, d), encoding,
                            lrpe::softmax_options<>{.causal = true}, lrpe::backend::simd_policy<>{&pool});
    for (index_t h = 0; h < heads; ++h) {
      lrpe::softmax_attention(qh.middleRows(h * n, n), kh.middleRows(h * n, n), vh.middleRows(h * n, n), one,
                              encoding.head(h), lrpe::softmax_options<>{.causal = true});
      CHECK(diff(rm<T>(all.middleRows(h * n, n)), one) <= kernel_vs_kernel<T>());
    }
  };
  run(chang);
  run(da);
  run(xl);
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
    CHECK(diff(one, ref) <= kernel_vs_kernel<T>());
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
  CHECK(err <= 10 * kernel_vs_kernel<T>());
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
      CHECK((out - ref).cwiseAbs().maxCoeff() <= kernel_vs_kernel<T>() * (1 + ref.cwiseAbs().maxCoeff()));
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
        check_with(lrpe::no_encoding{}, lrpe::backend::reference{}, kernel_vs_kernel<T>());
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


TEST_CASE_TEMPLATE("simd softmax with log-sum-exps (softmax_attention_lse): == reference, tiled and direct kernels, "
                   "a bias, rows with no visible key", T, float, double) {
  lrpe::generator g(0x51D0'0150);
  const index_t d = 8;
  const lrpe::canonical::alibi<T> alibi(d, {0.25}, lrpe::canonical::alibi_form::causal);
  for (const index_t nq : {index_t{3}, index_t{70}}) {  // the direct kernel (≤ 8 rows) and the tiled one
    CAPTURE(nq);
    const index_t nk = 90;
    const rm<T> q = random_matrix<T>(g, nq, d), k = random_matrix<T>(g, nk, d), v = random_matrix<T>(g, nk, d);
    lrpe::softmax_options<> so;
    so.causal = true;
    so.q_positions = lrpe::positions(-2);  // the first two rows see no key
    const auto both = [&](const auto& enc) {
      rm<T> ref(nq, d), got(nq, d);
      std::vector<T> lse_ref(static_cast<std::size_t>(nq)), lse(static_cast<std::size_t>(nq));
      lrpe::softmax_attention_lse(q, k, v, ref, std::span<T>(lse_ref), enc, so);
      lrpe::softmax_attention_lse(q, k, v, got, std::span<T>(lse), enc, so, lrpe::backend::simd<>{});
      CHECK(lse[0] == -std::numeric_limits<T>::infinity());
      CHECK(lse[1] == -std::numeric_limits<T>::infinity());
      for (std::size_t i = 2; i < lse.size(); ++i)
        CHECK(std::abs(lse[i] - lse_ref[i]) <= kernel_vs_kernel<T>() * (1 + std::abs(lse_ref[i])));
      rm<T> plain(nq, d);
      lrpe::softmax_attention(q, k, v, plain, enc, so, lrpe::backend::simd<>{});
      CHECK(plain == got);  // writing the log-sum-exps changes nothing else
    };
    both(lrpe::no_encoding{});
    both(alibi);
    both(lrpe::rope_neox<T>(d));
  }
}
