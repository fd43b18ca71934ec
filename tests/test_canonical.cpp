// SPDX-License-Identifier: MIT
// Canonical form: for every variant, direct formula == canonical form (operators) == canonical
// form (dense W) == features (linearizable ones) == an independent naive formula written here,
// on random q, k and positions (negative included), float and double; shift invariance.
// Every oracle below is written from REFERENCE.md, not from lrpe/canonical.
#include "canonical_helpers.hpp"

#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

namespace {

// ------------------------------------------------------------------ independent oracles

/// T5 bucket, written from REFERENCE.md (rel = key − query).
position_t naive_t5_bucket(position_t rel, position_t nb, position_t max_distance, bool bidirectional) {
  position_t out = 0;
  position_t n = rel;
  if (bidirectional) {
    nb = nb / 2;
    if (n > 0) out = nb;
    n = std::llabs(n);
  } else {
    n = n < 0 ? -n : 0;
  }
  const position_t max_exact = nb / 2;
  if (n < max_exact) return out + n;
  const ld v = static_cast<ld>(max_exact) + std::log(static_cast<ld>(n) / max_exact) /
                                                std::log(static_cast<ld>(max_distance) / max_exact) *
                                                static_cast<ld>(nb - max_exact);
  return out + std::min<position_t>(static_cast<position_t>(v), nb - 1);
}

/// DeBERTa-v2 log bucket, from REFERENCE.md (rel = query − key).
position_t naive_deberta_bucket(position_t rel, position_t bs, position_t max_pos) {
  const position_t mid = bs / 2;
  const position_t a = std::llabs(rel) < mid ? mid - 1 : std::llabs(rel);
  if (a <= mid) return rel;
  const auto lp = static_cast<position_t>(
      std::ceil(std::log(static_cast<ld>(a) / mid) / std::log(static_cast<ld>(max_pos - 1) / mid) * (mid - 1)) + mid);
  return rel < 0 ? -lp : lp;
}

}  // namespace

// ================================================================================ additive

TEST_CASE_TEMPLATE("canonical: T5 bias (bidirectional and causal) == q.k + B[h, bucket(key - query)]", T, float,
                   double) {
  const std::uint64_t seed = 303;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 6, heads = 3;
  for (bool bidirectional : {true, false}) {
    CAPTURE(bidirectional);
    const cn::t5_buckets cfg{32, 128, bidirectional};
    const rows_t<T> table = r.template mat<T>(heads, 32);
    const cn::t5_bias<T> all(d, cfg, table);
    CHECK(all.heads() == heads);
    for (index_t h = 0; h < heads; ++h) {
      CAPTURE(h);
      auto naive = [&](const T* q, position_t s, const T* k, position_t t) {
        return dot_ld(q, k, d) + static_cast<ld>(table(h, naive_t5_bucket(t - s, 32, 128, bidirectional)));
      };
      auto mag = [&](const T* q, const T* k) { return abs_dot(q, k, d) + 1; };
      check_variant<T>(all.head(h), naive, mag, 2, r);
      CHECK(all.head(h).default_scale(d) == 1.0);
    }
  }
}

TEST_CASE_TEMPLATE("canonical: learned Toeplitz table with clipping == q.k + w[clip(t - s, r)]", T, float, double) {
  const std::uint64_t seed = 404;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 5;
  const position_t rr = 7;
  const rows_t<T> table = r.template mat<T>(2, 2 * rr + 1);
  const cn::toeplitz_bias<T> all(d, rr, table);
  for (index_t h = 0; h < 2; ++h) {
    auto naive = [&](const T* q, position_t s, const T* k, position_t t) {
      const position_t off = std::max<position_t>(-rr, std::min<position_t>(rr, t - s));
      return dot_ld(q, k, d) + static_cast<ld>(table(h, off + rr));
    };
    auto mag = [&](const T* q, const T* k) { return abs_dot(q, k, d) + 1; };
    check_variant<T>(all.head(h), naive, mag, 2, r, 20);
  }
  // the clip itself: the extreme columns at and beyond ±r
  const auto v = all.head(1);
  CHECK(v.bias(0, rr) == static_cast<double>(table(1, 2 * rr)));
  CHECK(v.bias(0, 1000) == static_cast<double>(table(1, 2 * rr)));
  CHECK(v.bias(1000, 0) == static_cast<double>(table(1, 0)));
  CHECK(v.bias(5, 3) == static_cast<double>(table(1, rr - 2)));
}

TEST_CASE_TEMPLATE("canonical: ALiBi causal -m(i - j) and symmetric -m|i - j|", T, float, double) {
  const std::uint64_t seed = 505;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 4;
  for (auto form : {cn::alibi_form::causal, cn::alibi_form::symmetric}) {
    const auto all = cn::alibi<T>::for_heads(d, 12, form);
    for (index_t h : {0, 7, 8, 11}) {
      CAPTURE(h);
      const ld m = (h < 8) ? std::pow(2.0L, -static_cast<ld>(h + 1)) : std::pow(2.0L, -0.5L - static_cast<ld>(h - 8));
      auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
        const ld dist = static_cast<ld>(i - j);
        return dot_ld(q, k, d) + (form == cn::alibi_form::causal ? -m * dist : -m * std::abs(dist));
      };
      auto mag = [&](const T* q, const T* k) { return abs_dot(q, k, d) + 1500; };
      check_variant<T>(all.head(h), naive, mag, 2, r);
    }
  }
}

// ==================================================================================== Shaw

TEST_CASE_TEMPLATE("canonical: Shaw key term q.(k + a^K_clip(t-s, r)) and value term a^V", T, float, double) {
  const std::uint64_t seed = 606;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 6;
  const position_t rr = 4;
  const rows_t<T> ak = r.template mat<T>(2 * rr + 1, d), av = r.template mat<T>(2 * rr + 1, d);
  const cn::shaw<T> v(d, rr, ak, av);
  auto row_of = [&](position_t s, position_t t) { return std::max<position_t>(-rr, std::min<position_t>(rr, t - s)) + rr; };
  auto naive = [&](const T* q, position_t s, const T* k, position_t t) {
    ld acc = 0;
    for (index_t i = 0; i < d; ++i) acc += static_cast<ld>(q[i]) * (static_cast<ld>(k[i]) + ak(row_of(s, t), i));
    return acc;
  };
  auto mag = [&](const T* q, const T* k) { return 2 * abs_dot(q, k, d) + 2 * d; };
  check_variant<T>(v, naive, mag, 2, r, 15);

  // (no structured binding: doctest's CAPTURE is a lambda, and clang < 16 cannot capture one)
  for (const auto& st : {std::pair<position_t, position_t>{3, 1}, {0, 9}, {-20, 40}, {5, 5}, {-1, -3}}) {
    const position_t s = st.first, t = st.second;
    CAPTURE(s);
    CAPTURE(t);
    std::vector<T> out(static_cast<std::size_t>(d), T(0.5));
    v.add_value_term(s, t, T(0.25), out.data());
    for (index_t i = 0; i < d; ++i) CHECK(out[static_cast<std::size_t>(i)] == doctest::Approx(0.5 + 0.25 * av(row_of(s, t), i)));
  }
  const cn::shaw<T> no_value(d, rr, ak);
  std::vector<T> out(static_cast<std::size_t>(d), T(1));
  no_value.add_value_term(0, 3, T(1), out.data());
  for (T x : out) CHECK(x == T(1));
}

// ================================================================================= DeBERTa

TEST_CASE_TEMPLATE("canonical: DeBERTa-v2 c2c + c2p + p2c with log buckets, span clamp and sqrt(3d)", T, float,
                   double) {
  const std::uint64_t seed = 707;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 4, heads = 2;
  struct setup {
    cn::deberta_buckets cfg;
    cn::deberta_terms terms;
    double scale_terms;
  };
  for (const setup& st : {setup{{16, 64}, {true, true}, 3}, setup{{16, 64}, {true, false}, 2},
                          setup{{16, 64}, {false, true}, 2}, setup{{0, 12}, {true, true}, 3}}) {
    CAPTURE(st.cfg.position_buckets);
    CAPTURE(st.terms.c2p);
    CAPTURE(st.terms.p2c);
    const index_t span = st.cfg.position_buckets > 0 ? st.cfg.position_buckets : st.cfg.max_relative_positions;
    const rows_t<T> kr = r.template mat<T>(2 * span, heads * d), qr = r.template mat<T>(2 * span, heads * d);
    const cn::deberta_v2<T> all(d, heads, st.cfg, kr, qr, st.terms);
    for (index_t h = 0; h < heads; ++h) {
      auto naive = [&](const T* q, position_t s, const T* k, position_t t) {
        // rel = query − key; HF's c2p index clamp(rel + span) and effective p2c index (after
        // the transpose of the key-major gather) are the same row.
        position_t rel = s - t;
        if (st.cfg.position_buckets > 0) rel = naive_deberta_bucket(rel, st.cfg.position_buckets, st.cfg.max_relative_positions);
        const position_t c = std::max<position_t>(0, std::min<position_t>(2 * span - 1, rel + span));
        ld acc = dot_ld(q, k, d);
        for (index_t i = 0; i < d; ++i) {
          if (st.terms.c2p) acc += static_cast<ld>(q[i]) * kr(c, h * d + i);
          if (st.terms.p2c) acc += static_cast<ld>(k[i]) * qr(c, h * d + i);
        }
        return acc;
      };
      auto mag = [&](const T* q, const T* k) { return abs_dot(q, k, d) + 4 * d; };
      check_variant<T>(all.head(h), naive, mag, 3, r, 200);
      CHECK(all.default_scale(d) == doctest::Approx(1.0 / std::sqrt(st.scale_terms * d)));
      CHECK(cn::default_scale(all, d) == doctest::Approx(1.0 / std::sqrt(st.scale_terms * d)));
    }
  }
}

TEST_CASE_TEMPLATE("canonical: DeBERTa-v2 from_embeddings (shared key projection) == projecting by hand", T, float,
                   double) {
  const std::uint64_t seed = 708;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 3, heads = 2, hidden = 5;
  const cn::deberta_buckets cfg{8, 32};
  const rows_t<T> emb = r.template mat<T>(2 * 8 + 3, hidden);  // extra rows are ignored
  cn::linear_projection<T> wk{r.template mat<T>(hidden, heads * d), {}};
  cn::linear_projection<T> wq{r.template mat<T>(hidden, heads * d), lrpe::dense_vector<T>(heads * d)};
  for (index_t i = 0; i < heads * d; ++i) wq.bias[i] = static_cast<T>(0.1 * static_cast<double>(i));
  const auto v = cn::deberta_v2<T>::from_embeddings(d, heads, cfg, emb, wk, wq).head(1);
  const auto q = r.template vec<T>(d), k = r.template vec<T>(d);
  for (auto [s, t] : {std::pair<position_t, position_t>{0, 0}, {2, 9}, {40, 1}, {-3, 100}}) {
    position_t rel = naive_deberta_bucket(s - t, 8, 32);
    const position_t c = std::max<position_t>(0, std::min<position_t>(15, rel + 8));
    ld acc = dot_ld(q.data(), k.data(), d);
    for (index_t i = 0; i < d; ++i) {
      ld kri = 0, qri = wq.bias[d + i];
      for (index_t j = 0; j < hidden; ++j) {
        kri += static_cast<ld>(emb(c, j)) * wk.weight(j, d + i);
        qri += static_cast<ld>(emb(c, j)) * wq.weight(j, d + i);
      }
      acc += static_cast<ld>(q[static_cast<std::size_t>(i)]) * kri + static_cast<ld>(k[static_cast<std::size_t>(i)]) * qri;
    }
    CHECK(v.score(q.data(), s, k.data(), t) == doctest::Approx(static_cast<double>(acc)).epsilon(1e-5));
  }
}

// =============================================================================== cosFormer

TEST_CASE_TEMPLATE("canonical: cosFormer (q.k) cos(pi (t-s) / 2M) and features [x sin a, x cos a]", T, float, double) {
  const std::uint64_t seed = 808;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 7;
  for (double m : {1.0, 64.0, 1000.5}) {
    CAPTURE(m);
    const cn::cosformer<T> v(d, m);
    auto naive = [&](const T* q, position_t s, const T* k, position_t t) {
      return dot_ld(q, k, d) * std::cos(std::numbers::pi_v<ld> * static_cast<ld>(t - s) / (2 * static_cast<ld>(m)));
    };
    auto mag = [&](const T* q, const T* k) { return 2 * abs_dot(q, k, d); };
    check_variant<T>(v, naive, mag, 1, r);
    CHECK(cn::feature_dim(v) == 2 * d);
  }
  // the published feature layout: [x sin a_i, x cos a_i], a_i = π i / (2M)
  const cn::cosformer<T> v(d, 10.0);
  const auto x = r.template vec<T>(d);
  std::vector<T> f(static_cast<std::size_t>(2 * d));
  cn::features(v, cn::side::key, x.data(), 3, f.data());
  const ld a = std::numbers::pi_v<ld> * 3 / 20;
  for (index_t j = 0; j < d; ++j) {
    CHECK(f[static_cast<std::size_t>(j)] == doctest::Approx(static_cast<double>(x[static_cast<std::size_t>(j)] * std::sin(a))));
    CHECK(f[static_cast<std::size_t>(d + j)] == doctest::Approx(static_cast<double>(x[static_cast<std::size_t>(j)] * std::cos(a))));
  }
}

// ========================================================================== Transformer-XL

TEST_CASE_TEMPLATE("canonical: Transformer-XL (q+u).k + (q+v).(W_R R_{i-j}), R = [sin, cos] halves", T, float, double) {
  const std::uint64_t seed = 909;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 4, heads = 2, dm = 8;
  const rows_t<T> u = r.template mat<T>(heads, d), vv = r.template mat<T>(heads, d), wr = r.template mat<T>(heads * d, dm, 0.5);
  const cn::transformer_xl<T> all(d, u, vv, wr);
  for (index_t h = 0; h < heads; ++h) {
    CAPTURE(h);
    auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
      std::vector<ld> rvec(static_cast<std::size_t>(dm));
      for (index_t m = 0; m < dm / 2; ++m) {
        const ld inv = 1.0L / std::pow(10000.0L, static_cast<ld>(2 * m) / dm);
        rvec[static_cast<std::size_t>(m)] = std::sin(static_cast<ld>(i - j) * inv);
        rvec[static_cast<std::size_t>(dm / 2 + m)] = std::cos(static_cast<ld>(i - j) * inv);
      }
      ld acc = 0;
      for (index_t a = 0; a < d; ++a) {
        ld ra = 0;
        for (index_t b = 0; b < dm; ++b) ra += static_cast<ld>(wr(h * d + a, b)) * rvec[static_cast<std::size_t>(b)];
        acc += (static_cast<ld>(q[a]) + u(h, a)) * k[a] + (static_cast<ld>(q[a]) + vv(h, a)) * ra;
      }
      return acc;
    };
    auto mag = [&](const T* q, const T* k) { return 4 * abs_dot(q, k, d) + 4 * d * dm; };
    check_variant<T>(all.head(h), naive, mag, 2, r);
    CHECK(all.default_scale(d) == doctest::Approx(0.5));
    CHECK(cn::feature_dim(all) == d + dm);
  }
}

TEST_CASE_TEMPLATE("canonical: TENER (q+u).k + (q+v).R'_{i-j}, R' = interleaved [sin, cos], unscaled", T, float, double) {
  const std::uint64_t seed = 910;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 6, heads = 2;
  const rows_t<T> u = r.template mat<T>(heads, d), vv = r.template mat<T>(heads, d);
  const auto tener = cn::transformer_xl<T>::tener(d, u, vv);
  for (index_t h = 0; h < heads; ++h) {
    CAPTURE(h);
    // written from the TENER paper: R_t = [sin(c_0 t), cos(c_0 t), …], c_i = 1/10000^(2i/d), t = i − j
    auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
      ld acc = 0;
      for (index_t a = 0; a < d; ++a) {
        const ld c = 1.0L / std::pow(10000.0L, static_cast<ld>(2 * (a / 2)) / d);
        const ld ra = a % 2 == 0 ? std::sin(static_cast<ld>(i - j) * c) : std::cos(static_cast<ld>(i - j) * c);
        acc += (static_cast<ld>(q[a]) + u(h, a)) * k[a] + (static_cast<ld>(q[a]) + vv(h, a)) * ra;
      }
      return acc;
    };
    auto mag = [&](const T* q, const T* k) { return 4 * abs_dot(q, k, d) + 4 * d; };
    check_variant<T>(tener.head(h), naive, mag, 2, r);
    CHECK(tener.default_scale(d) == 1.0);  // TENER does not scale
  }
  CHECK_THROWS_AS((void)cn::transformer_xl<T>::tener(5, r.template mat<T>(1, 5), r.template mat<T>(1, 5)),
                  lrpe::shape_error);
}

TEST_CASE_TEMPLATE("canonical: Transformer-XL with clamp_len, R at the clamped distance clip(i - j, c)", T, float,
                   double) {
  const std::uint64_t seed = 912;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 4, heads = 2, dm = 8;
  const position_t c = 5;
  const rows_t<T> u = r.template mat<T>(heads, d), vv = r.template mat<T>(heads, d), wr = r.template mat<T>(heads * d, dm, 0.5);
  const cn::clamped_transformer_xl<T> all(cn::transformer_xl<T>(d, u, vv, wr), c);
  CHECK(all.clamp_len() == c);
  CHECK(all.heads() == heads);
  for (index_t h = 0; h < heads; ++h) {
    CAPTURE(h);
    auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
      const ld dist = static_cast<ld>(std::clamp<position_t>(i - j, -c, c));
      ld acc = 0;
      for (index_t a = 0; a < d; ++a) {
        ld ra = 0;
        for (index_t m = 0; m < dm / 2; ++m) {
          const ld inv = 1.0L / std::pow(10000.0L, static_cast<ld>(2 * m) / dm);
          ra += static_cast<ld>(wr(h * d + a, m)) * std::sin(dist * inv) +
                static_cast<ld>(wr(h * d + a, dm / 2 + m)) * std::cos(dist * inv);
        }
        acc += (static_cast<ld>(q[a]) + u(h, a)) * k[a] + (static_cast<ld>(q[a]) + vv(h, a)) * ra;
      }
      return acc;
    };
    auto mag = [&](const T* q, const T* k) { return 4 * abs_dot(q, k, d) + 4 * d * dm; };
    check_variant<T>(all.head(h), naive, mag, 2, r, 12);
    CHECK(all.default_scale(d) == doctest::Approx(0.5));
  }
  static_assert(!cn::is_linearizable_v<cn::clamped_transformer_xl<T>>);
}

TEST_CASE_TEMPLATE("canonical: DA-Transformer ReLU(q.k) (1 + e^v) / (1 + e^(v - w|t - s|)), any distance", T, float,
                   double) {
  const std::uint64_t seed = 913;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 5;
  const std::vector<double> w{-0.3, 0.02, 2.5}, v{0.5, -3.0, 40.0};
  const cn::da_transformer<T> all(d, w, v);
  CHECK(all.heads() == 3);
  for (index_t h = 0; h < 3; ++h) {
    const auto da = all.head(h);
    CHECK(da.weight() == w[static_cast<std::size_t>(h)]);
    for (int trial = 0; trial < 40; ++trial) {
      const auto q = r.template vec<T>(d), k = r.template vec<T>(d);
      const position_t s = r.integer(-1000, 1000), t = trial % 4 == 0 ? s : r.integer(-1000, 1000);
      CAPTURE(h);
      CAPTURE(s);
      CAPTURE(t);
      ld qk = 0;
      for (index_t a = 0; a < d; ++a) qk += static_cast<ld>(q[a]) * k[a];
      const ld x = std::abs(static_cast<ld>(t - s)), wh = w[static_cast<std::size_t>(h)], vh = v[static_cast<std::size_t>(h)];
      const ld coef = (1 + std::exp(vh)) / (1 + std::exp(vh - wh * x));
      const ld want = qk > 0 ? qk * coef : 0;
      CHECK(std::abs(da.score(q.data(), s, k.data(), t) - static_cast<double>(want)) <=
            1e-13 * static_cast<double>(1 + std::abs(want)));
      // relative: only |t − s| enters (both directions, any shift)
      CHECK(da.score(q.data(), s + 1'000'000'007, k.data(), t + 1'000'000'007) == da.score(q.data(), s, k.data(), t));
      CHECK(da.coefficient(s, t) == da.coefficient(t, s));
    }
    // the ends of the range: R^ stays finite and positive, between 0 and 1 + e^v
    constexpr position_t lo = std::numeric_limits<position_t>::min(), hi = std::numeric_limits<position_t>::max();
    const double far = da.coefficient(lo, hi);
    CHECK(std::isfinite(far));
    CHECK(far >= 0);
    CHECK(far <= 1 + std::exp(v[static_cast<std::size_t>(h)]) * (1 + 1e-15));
  }
  static_assert(!cn::is_linearizable_v<cn::da_transformer<T>>);
  static_assert(lrpe::differentiable_score<cn::da_transformer<T>>);
}

// =================================================================================== URPE

TEST_CASE_TEMPLATE("canonical: URPE C_st = c_h[T5 bucket(t - s)], per head; ones()", T, float, double) {
  const std::uint64_t seed = 1010;
  INFO("seed = " << seed);
  rng r(seed);
  const rows_t<T> table = r.template mat<T>(4, 64);
  const cn::urpe<T> all(cn::urpe<T>::default_buckets, table);
  CHECK(all.heads() == 4);
  for (index_t h = 0; h < 4; ++h) {
    const auto c = all.head(h);
    CHECK(c.head_index() == h);
    for (int trial = 0; trial < 50; ++trial) {
      const position_t s = r.integer(-300, 300), t = r.integer(-300, 300);
      const double expected = static_cast<double>(table(h, naive_t5_bucket(t - s, 64, 128, true)));
      CHECK(c.weight(s, t) == expected);
      CHECK(c.c(s, t) == expected);
      CHECK(c.weight(s + 12345, t + 12345) == expected);
    }
  }
  const auto ones = cn::urpe<T>::ones(3);
  CHECK(ones.head(2).weight(-5, 100) == 1.0);
  // Default: one head, C = 1 over the default buckets, so that options holding it default-construct.
  const cn::urpe<T> none;
  CHECK(none.heads() == 1);
  CHECK(none.buckets().num_buckets == 64);
  CHECK(none.buckets().max_distance == 128);
  CHECK(none.table().isOnes());
  CHECK(none.weight(7, -1000) == 1.0);
  lrpe::softmax_options<cn::urpe<T>> o;
  o.causal = true;
  CHECK(o.reweight.weight(0, 3) == 1.0);
  o.reweight = all.head(3);
  CHECK(o.reweight.weight(0, 3) == static_cast<double>(table(3, naive_t5_bucket(3, 64, 128, true))));
}

// ============================================================== composing a new variant

TEST_CASE_TEMPLATE("canonical: a user variant composed from primitives is a relative_encoding", T, float, double) {
  // f = q.k·w(t−s) + b(t−s): cosFormer-like weighting plus a bias, written with primitives.
  const index_t d = 3;
  auto w = [](position_t delta) { return 1.0 / (1.0 + std::abs(static_cast<double>(delta))); };
  auto b = [](position_t delta) { return 0.1 * static_cast<double>(delta); };
  const cn::canonical_form f(cn::term(cn::identity_map<T>(d), cn::scalar_op<T, decltype(w)>(d, w), cn::identity_map<T>(d)),
                             cn::term(cn::one_map<T>(d), cn::bias_op<T, decltype(b)>(b), cn::one_map<T>(d)));
  static_assert(lrpe::relative_encoding<decltype(f)>);
  static_assert(!cn::is_linearizable_v<decltype(f)>);
  const T q[3] = {1, 2, 3}, k[3] = {-1, 0.5, 2};
  const double qk = -1 + 1 + 6;
  CHECK(f.score(q, 2, k, 6) == doctest::Approx(qk / 5 + 0.4));
  CHECK(f.score(q, 6, k, 2) == doctest::Approx(qk / 5 - 0.4));
  CHECK(f.dense_score(q, 6, k, 2) == doctest::Approx(qk / 5 - 0.4));
  CHECK(f.q_hat_dim() == 4);
  CHECK(f.dense_w(3).rows() == 4);
  CHECK_THROWS_AS(cn::term(cn::identity_map<T>(3), cn::identity_op<T>(4), cn::identity_map<T>(3)), lrpe::shape_error);
  // operators of width < 1 (their dense() sized an Eigen matrix with it)
  const auto fill = [](lrpe::position_t, T*) {};
  const auto one = [](lrpe::position_t) { return 1.0; };
  using fill_t = decltype(fill);
  CHECK_THROWS_WITH_AS(cn::identity_op<T>(-1), doctest::Contains("lrpe::canonical::identity_op: argument 'd' must be >= 1"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS((cn::scalar_op<T, decltype(one)>(0, one)),
                       doctest::Contains("lrpe::canonical::scalar_op: argument 'd'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((cn::column_op<T, fill_t>(0, fill)), doctest::Contains("lrpe::canonical::column_op: argument 'd'"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS((cn::row_op<T, fill_t>(-3, fill)), doctest::Contains("lrpe::canonical::row_op: argument 'd'"),
                       lrpe::shape_error);
}

TEST_CASE_TEMPLATE("canonical: features stay exact at positions near 10^6 (angles formed in double)", T, float, double) {
  const std::uint64_t seed = 1111;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 4, dm = 6;
  const cn::cosformer<T> cosf(d, 100.0);
  const cn::transformer_xl<T> xl(d, r.template mat<T>(1, d), r.template mat<T>(1, d), r.template mat<T>(d, dm, 0.5));
  for (position_t base : {position_t{1'000'000}, position_t{-1'000'003}}) {
    CAPTURE(base);
    const position_t s = base + r.integer(-50, 50), t = base + r.integer(-50, 50);
    const auto q = r.template vec<T>(d), k = r.template vec<T>(d);
    // cosFormer oracle: (q·k) cos(π(t − s)/(2M)), only the offset enters
    const ld ref = dot_ld(q.data(), k.data(), d) * std::cos(std::numbers::pi_v<ld> * static_cast<ld>(t - s) / 200);
    std::vector<T> fq(static_cast<std::size_t>(2 * d)), fk(fq.size());
    cn::features(cosf, cn::side::query, q.data(), s, fq.data());
    cn::features(cosf, cn::side::key, k.data(), t, fk.data());
    CHECK(std::abs(static_cast<double>(dot_ld(fq.data(), fk.data(), 2 * d) - ref)) <= 10 * eps_of<T>());
    // Transformer-XL: features at large positions == the direct formula at small ones
    std::vector<T> gq(static_cast<std::size_t>(d + dm)), gk(gq.size());
    cn::features(xl, cn::side::query, q.data(), s, gq.data());
    cn::features(xl, cn::side::key, k.data(), t, gk.data());
    const double direct = xl.score(q.data(), s - base, k.data(), t - base);
    CHECK(std::abs(static_cast<double>(dot_ld(gq.data(), gk.data(), d + dm)) - direct) <= 50 * eps_of<T>() * (1 + std::abs(direct)));
  }
}

// ======================================================================== Huang et al. 2020

TEST_CASE_TEMPLATE("canonical: Huang et al. 2020 methods 1-4 ((q.k) w|d|, (q.k) w_d, sum_product(q, k, a_d), "
                   "(q + a).(k + a) - a.a)", T, float, double) {
  const std::uint64_t seed = 911;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 5;
  const position_t clip_r = 4;
  const auto row = [&](position_t i, position_t j) { return std::clamp<position_t>(j - i, -clip_r, clip_r); };
  {
    const rows_t<T> w = r.template mat<T>(clip_r + 1, 1);
    const cn::huang2020<T, cn::huang_method::absolute_scale> v(d, clip_r, w);
    auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
      ld qk = 0;
      for (index_t a = 0; a < d; ++a) qk += static_cast<ld>(q[a]) * k[a];
      return qk * static_cast<ld>(w(std::abs(row(i, j)), 0));
    };
    check_variant<T>(v, naive, [&](const T* q, const T* k) { return 4 * abs_dot(q, k, d); }, 1, r, 6);
  }
  {
    const rows_t<T> w = r.template mat<T>(2 * clip_r + 1, 1);
    const cn::huang2020<T, cn::huang_method::directional_scale> v(d, clip_r, w);
    auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
      ld qk = 0;
      for (index_t a = 0; a < d; ++a) qk += static_cast<ld>(q[a]) * k[a];
      return qk * static_cast<ld>(w(row(i, j) + clip_r, 0));
    };
    check_variant<T>(v, naive, [&](const T* q, const T* k) { return 4 * abs_dot(q, k, d); }, 1, r, 6);
  }
  {
    const rows_t<T> a = r.template mat<T>(2 * clip_r + 1, d);
    const cn::huang2020<T, cn::huang_method::sum_product> v(d, clip_r, a);
    auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
      ld acc = 0;
      for (index_t c = 0; c < d; ++c) acc += static_cast<ld>(q[c]) * k[c] * a(row(i, j) + clip_r, c);
      return acc;
    };
    check_variant<T>(v, naive, [&](const T* q, const T* k) { return 4 * abs_dot(q, k, d); }, 1, r, 6);
  }
  {
    const rows_t<T> a = r.template mat<T>(2 * clip_r + 1, d);
    const cn::huang2020<T, cn::huang_method::query_and_key> v(d, clip_r, a);
    auto naive = [&](const T* q, position_t i, const T* k, position_t j) {
      ld acc = 0;
      for (index_t c = 0; c < d; ++c) {
        const ld ac = a(row(i, j) + clip_r, c);
        acc += (static_cast<ld>(q[c]) + ac) * (static_cast<ld>(k[c]) + ac) - ac * ac;
      }
      return acc;
    };
    check_variant<T>(v, naive, [&](const T* q, const T* k) { return 4 * abs_dot(q, k, d) + 4 * d; }, 3, r, 6);
  }
  CHECK_THROWS_AS((cn::huang2020<T, cn::huang_method::sum_product>(d, clip_r, r.template mat<T>(2 * clip_r + 1, 1))),
                  lrpe::shape_error);
  CHECK_THROWS_AS((cn::huang2020<T, cn::huang_method::absolute_scale>(d, -1, r.template mat<T>(1, 1))),
                  lrpe::parameter_error);
}

TEST_CASE_TEMPLATE("canonical: xPos, sum_i zeta_i^((s - t)/gamma) (R_s q)_i.(R_t k)_i, as torchscale scales q and k",
                   T, float, double) {
  const std::uint64_t seed = 914;
  INFO("seed = " << seed);
  rng r(seed);
  const index_t d = 8;
  const double gamma = 64.0;
  for (const lrpe::pairing pairs : {lrpe::pairing::interleaved, lrpe::pairing::split_half}) {
    const position_t center = 300;
    const cn::xpos<T> x(d, gamma, center, 10000.0, pairs);
    CHECK(x.zeta(0) == doctest::Approx(0.4 / 1.4));
    for (int trial = 0; trial < 30; ++trial) {
      const auto q = r.template vec<T>(d), k = r.template vec<T>(d);
      const position_t s = r.integer(100, 500), t = trial % 3 == 0 ? s : r.integer(100, 500);
      CAPTURE(s);
      CAPTURE(t);
      // torchscale: q·cos·ζ^{(s−c)/γ} + rotate(q)·sin·ζ^{(s−c)/γ}; k with ζ^{−(t−c)/γ}; then the dot
      const auto rotated = [&](const T* v, position_t p, ld sign) {
        std::vector<ld> out(static_cast<std::size_t>(d));
        for (index_t i = 0; i < d / 2; ++i) {
          const index_t u = pairs == lrpe::pairing::interleaved ? 2 * i : i;
          const index_t w = pairs == lrpe::pairing::interleaved ? 2 * i + 1 : i + d / 2;
          const ld th = std::pow(10000.0L, -ld(2 * i) / ld(d)), a = ld(p) * th;
          const ld zeta = (ld(2 * i) + 0.4L * d) / (1.4L * d), scale = std::pow(zeta, sign * ld(p - center) / ld(gamma));
          out[static_cast<std::size_t>(u)] = scale * (ld(v[u]) * std::cos(a) - ld(v[w]) * std::sin(a));
          out[static_cast<std::size_t>(w)] = scale * (ld(v[w]) * std::cos(a) + ld(v[u]) * std::sin(a));
        }
        return out;
      };
      const auto qa = rotated(q.data(), s, 1), kb = rotated(k.data(), t, -1);
      ld want = 0, mag = 0;
      for (index_t j = 0; j < d; ++j) {
        want += qa[static_cast<std::size_t>(j)] * kb[static_cast<std::size_t>(j)];
        mag += std::abs(qa[static_cast<std::size_t>(j)] * kb[static_cast<std::size_t>(j)]);
      }
      const double tol = 4 * eps_of<T>() * (1 + double(mag));
      CHECK(std::abs(x.score(q.data(), s, k.data(), t) - double(want)) <= tol);
      std::vector<T> fq(static_cast<std::size_t>(d)), fk(fq.size());
      cn::features(x, cn::side::query, q.data(), s, fq.data());
      cn::features(x, cn::side::key, k.data(), t, fk.data());
      CHECK(std::abs(double(dot_ld(fq.data(), fk.data(), d) - want)) <= tol);
      // only s − t enters the score, the centre not at all
      CHECK(std::abs(x.score(q.data(), s + 1'000'000, k.data(), t + 1'000'000) - x.score(q.data(), s, k.data(), t)) <= tol);
    }
  }
  const cn::xpos<T> far(d, gamma);
  CHECK(far.reach() == static_cast<position_t>(std::floor((std::is_same_v<T, float> ? 80.0 : 700.0) * gamma / -std::log(0.4 / 1.4))));
  static_assert(cn::is_linearizable_v<cn::xpos<T>>);
  CHECK_THROWS_AS((cn::xpos<T>(7)), lrpe::shape_error);
  CHECK_THROWS_AS((cn::xpos<T>(8, 0.0)), lrpe::parameter_error);
}
