// SPDX-License-Identifier: MIT
// Attention with the canonical variants (canonical/): softmax with ALiBi, T5, Toeplitz tables,
// Shaw (value term), composite attention, DA-Transformer, DeBERTa, Transformer-XL (clamped too), xPos, cosFormer and multiplicative encoders, and URPE's
// post-softmax C, against a naive long-double reference built from each variant's own direct
// formula (score / bias); linear attention and streaming with the linearizable ones
// (cosFormer, Transformer-XL's asymmetric φ_q ≠ φ_k, multiplicative) against the quadratic sum
// of scores; per-head tables in multi-head views.
#include <lrpe/lrpe.hpp>
#include <lrpe/canonical/canonical.hpp>

#include "attention_helpers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace {

using attention_test::softmax_vs_exact;
using attention_test::random_matrix;
using attention_test::rel_error;

using lrpe::index_t;
using lrpe::position_t;
namespace cn = lrpe::canonical;
template <class T>
using rm = lrpe::row_matrix<T>;
using ld = long double;

/// max |out(s, i) − mean of v(t, i) over t ∈ [t0, t1) = keys(s)|, in long double: the rows whose
/// softmax weights tie on a range of keys (biases held at ±max) and are 0 elsewhere.
template <class T, class Keys>
double tied_rows_error(const rm<T>& out, const rm<T>& v, Keys keys) {
  double err = 0;
  for (index_t s = 0; s < out.rows(); ++s) {
    const auto [t0, t1] = keys(s);
    for (index_t i = 0; i < out.cols(); ++i) {
      ld want = 0;
      for (index_t t = t0; t < t1; ++t) want += v(t, i);
      want /= static_cast<ld>(t1 - t0);
      err = std::max(err, static_cast<double>(std::abs(static_cast<ld>(out(s, i)) - want)));
    }
  }
  return err;
}

/**
 * Naive softmax with the variant's direct formula: logit = scale·score for general variants,
 * scale·(score − bias) + bias for additive ones, scale·score + bias for composite ones; URPE's c multiplies the normalised weight.
 */
template <class T, class V, class C = std::nullptr_t>
rm<ld> naive(const V& var, const rm<T>& q, const rm<T>& k, const rm<T>& v, const lrpe::softmax_options<>& o,
             double scale, const C& c = nullptr) {
  rm<ld> out = rm<ld>::Zero(q.rows(), v.cols());
  std::vector<ld> l(static_cast<std::size_t>(k.rows()));
  std::vector<T> vt(static_cast<std::size_t>(v.cols()));
  for (index_t i = 0; i < q.rows(); ++i) {
    const position_t s = o.q_positions[i];
    ld m = -INFINITY;
    for (index_t j = 0; j < k.rows(); ++j) {
      const position_t t = o.k_positions[j];
      if (o.causal && t > s) {
        l[j] = -INFINITY;
        continue;
      }
      const ld score = var.score(q.row(i).data(), s, k.row(j).data(), t);
      if constexpr (lrpe::additive_encoding<V>) {
        const ld b = var.bias(s, t);
        l[j] = scale * (score - b) + b;
      } else if constexpr (lrpe::score_bias_encoding<V>) {
        l[j] = scale * score + var.bias(s, t);
      } else {
        l[j] = scale * score;
      }
      m = std::max(m, l[j]);
    }
    if (m == -INFINITY) continue;
    ld z = 0;
    for (index_t j = 0; j < k.rows(); ++j) z += std::exp(l[j] - m);
    for (index_t j = 0; j < k.rows(); ++j) {
      if (l[j] == -INFINITY) continue;
      ld a = std::exp(l[j] - m) / z;
      if constexpr (!std::is_same_v<C, std::nullptr_t>) a *= c.weight(s, o.k_positions[j]);
      for (index_t e = 0; e < v.cols(); ++e) out(i, e) += a * static_cast<ld>(v(j, e));
      if constexpr (lrpe::value_encoding<V>) {
        std::fill(vt.begin(), vt.end(), T(0));
        var.add_value_term(s, o.k_positions[j], T(1), vt.data());
        for (index_t e = 0; e < v.cols(); ++e) out(i, e) += a * static_cast<ld>(vt[static_cast<std::size_t>(e)]);
      }
    }
  }
  return out;
}

/// Quadratic linear attention from the variant's direct score of φ(q), φ(k).
template <class T, class V, class Phi>
rm<ld> quadratic(const V& var, const Phi& phi, const rm<T>& q, const rm<T>& k, const rm<T>& v,
                 const lrpe::linear_options& o) {
  rm<ld> out = rm<ld>::Zero(q.rows(), v.cols());
  std::vector<T> a(static_cast<std::size_t>(q.cols())), b(a.size());
  for (index_t i = 0; i < q.rows(); ++i) {
    for (index_t e = 0; e < q.cols(); ++e) a[static_cast<std::size_t>(e)] = static_cast<T>(phi(q(i, e)));
    for (index_t j = 0; j < k.rows(); ++j) {
      const position_t s = o.q_positions[i], t = o.k_positions[j];
      if (o.causal && t > s) continue;
      for (index_t e = 0; e < k.cols(); ++e) b[static_cast<std::size_t>(e)] = static_cast<T>(phi(k(j, e)));
      ld w = var.score(a.data(), s, b.data(), t);
      if (o.decay != 1.0) w *= std::pow(static_cast<ld>(o.decay), static_cast<ld>(s - t));
      for (index_t e = 0; e < v.cols(); ++e) out(i, e) += w * static_cast<ld>(v(j, e));
    }
  }
  return out;
}

template <class T>
cn::transformer_xl<T> make_xl(lrpe::generator& g, index_t d, index_t heads) {
  return cn::transformer_xl<T>(d, random_matrix<T>(g, heads, d, 0.3), random_matrix<T>(g, heads, d, 0.3),
                               random_matrix<T>(g, heads * d, 2 * d, 0.3));
}

}  // namespace

TEST_CASE_TEMPLATE("softmax with every canonical variant equals the naive direct formula", T, float, double) {
  const std::uint64_t seed = 0xCA70'0001;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t d = 8;
  const auto alibi = cn::alibi<T>::for_heads(d, 4).head(2);
  const auto alibi_sym = cn::alibi<T>(d, {0.3}, cn::alibi_form::symmetric);
  const cn::t5_bias<T> t5(d, cn::t5_buckets{16, 32, true}, random_matrix<T>(g, 2, 16));
  const cn::toeplitz_bias<T> toeplitz(d, 5, random_matrix<T>(g, 1, 11));
  const cn::shaw<T> shaw(d, 3, random_matrix<T>(g, 7, d, 0.5), random_matrix<T>(g, 7, d, 0.5));
  const cn::deberta_v2<T> deberta(d, 2, cn::deberta_buckets{8, 16}, random_matrix<T>(g, 16, 2 * d, 0.5),
                                  random_matrix<T>(g, 16, 2 * d, 0.5));
  const auto xl = make_xl<T>(g, d, 2).head(1);
  const cn::cosformer<T> cos(d, 64.0);
  const cn::multiplicative<lrpe::type1<T>> mult{lrpe::type1<T>(d)};
  const cn::composite<T> chang(shaw, t5);
  const cn::da_transformer<T> da(d, {-0.2, 0.05}, {1.0, -0.5});
  const cn::clamped_transformer_xl<T> xl_clamped(make_xl<T>(g, d, 2), 4);
  const cn::xpos<T> xp(d, 32.0, /*center=*/8);

  const std::vector<position_t> packed{0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9};  // three documents
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    lrpe::softmax_options<> o;
    o.causal = variant % 2 == 1;
    o.tile = 5;
    index_t nq = 1 + static_cast<index_t>(g.below(30)), nk = nq;
    if (variant == 2) {  // KV cache: queries at n_past
      nk = nq + 9;
      o.q_positions = 9;
    } else if (variant == 3) {
      nq = nk = static_cast<index_t>(packed.size());
      o.q_positions = packed;
      o.k_positions = packed;
    }
    const rm<T> q = random_matrix<T>(g, nq, d), k = random_matrix<T>(g, nk, d), v = random_matrix<T>(g, nk, d);
    rm<T> out(nq, d);
    auto check = [&](const auto& var, const char* name) {
      CAPTURE(name);
      lrpe::softmax_attention(q, k, v, out, var, o);
      CHECK(rel_error(out, naive(var, q, k, v, o, cn::default_scale(var, d))) <= softmax_vs_exact<T>());
    };
    check(alibi, "alibi");
    check(alibi_sym, "alibi symmetric");
    check(t5.head(1), "t5");
    check(toeplitz, "toeplitz");
    check(shaw, "shaw");
    check(deberta.head(1), "deberta");
    check(xl, "transformer_xl");
    check(cos, "cosformer");
    check(mult, "multiplicative");
    check(chang.head(1), "composite (Chang et al.)");
    check(da.head(0), "DA-Transformer");
    check(xl_clamped.head(1), "transformer_xl, clamp_len");
    check(xp, "xpos");

    // URPE: A = softmax(scale·QKᵀ + B) ⊙ C with B a T5 bias, C per head
    const cn::urpe<T> c(cn::urpe<T>::default_buckets, random_matrix<T>(g, 2, 64, 0.5));
    lrpe::softmax_options<cn::urpe<T>> ou{o.causal, o.scale, o.q_positions, o.k_positions, o.tile, c.head(1)};
    lrpe::softmax_attention(q, k, v, out, t5.head(0), ou);
    CHECK(rel_error(out, naive(t5.head(0), q, k, v, o, 1.0, c.head(1))) <= softmax_vs_exact<T>());
  }
}

TEST_CASE_TEMPLATE("linear attention and streaming with linearizable canonical variants", T, float, double) {
  const std::uint64_t seed = 0xCA70'0002;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t d = 6, n = 37;
  const auto xl = make_xl<T>(g, d, 3).head(2);
  const cn::cosformer<T> cos(d, 50.0);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, 4);
  const lrpe::feature_maps::relu phi;
  auto check = [&](const auto& var, const char* name) {
    CAPTURE(name);
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);
      lrpe::linear_options o{.causal = variant > 0, .chunk = 6, .decay = variant == 2 ? 0.8 : 1.0, .q_positions = 20, .k_positions = 20};
      rm<T> out(n, 4);
      lrpe::linear_attention(q, k, v, out, var, phi, o);
      CHECK(rel_error(out, quadratic(var, phi, q, k, v, o)) <= softmax_vs_exact<T>());
      if (!o.causal) continue;
      // streaming: the state uses φ_k on append and φ_q on query
      lrpe::linear_attention_state<T> st(cn::feature_dim(var), 4, o.decay);
      rm<T> streamed(n, 4);
      for (index_t i = 0; i < n; ++i) {
        st.append(var, phi, k.row(i).data(), v.row(i).data(), 20 + i);
        st.query(var, phi, q.row(i).data(), 20 + i, streamed.row(i).data());
      }
      CHECK(rel_error(streamed, quadratic(var, phi, q, k, v, o)) <= softmax_vs_exact<T>());
    }
  };
  check(xl, "transformer_xl");
  check(cos, "cosformer");
  check(cn::multiplicative<lrpe::type7<T>>(lrpe::type7<T>(d)), "multiplicative type7");
  check(cn::xpos<T>(d, 16.0, /*center=*/38), "xpos (centred on the call)");
  {  // xPos: positions beyond reach() of the centre would over- or underflow the features
    const cn::xpos<T> narrow(d, 1.0);
    lrpe::linear_options o{.causal = true, .q_positions = narrow.reach() - 10, .k_positions = narrow.reach() - 10};
    rm<T> out(n, 4);
    CHECK_THROWS_AS(lrpe::linear_attention(q, k, v, out, narrow, phi, o), lrpe::parameter_error);
    lrpe::softmax_options<> so;
    so.q_positions = so.k_positions = narrow.reach() - 10;
    CHECK_THROWS_AS(lrpe::softmax_attention(q, k, v, out, narrow, so), lrpe::parameter_error);
  }
  // Far positions: Transformer-XL's features take absolute angles s·ω and t·ω, its distance
  // form (s − t)·ω; the angles are exact, so the two agree at 2^62 as at 20. (With angles
  // rounded to one double, fl(s·ω) is off by up to a radian there.)
  for (const position_t base : {(position_t{1} << 62) + 20, std::numeric_limits<position_t>::min()}) {
    CAPTURE(base);
    lrpe::linear_options o{.causal = true, .chunk = 6, .q_positions = base, .k_positions = base};
    rm<T> out(n, 4);
    lrpe::linear_attention(q, k, v, out, xl, phi, o);
    CHECK(rel_error(out, quadratic(xl, phi, q, k, v, o)) <= softmax_vs_exact<T>());
  }
}

TEST_CASE_TEMPLATE("multi-head: per-head tables (ALiBi slopes, URPE C) pick head(h)", T, float, double) {
  const std::uint64_t seed = 0xCA70'0003;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t B = 2, H = 4, N = 9, D = 4;
  std::vector<T> qb(B * H * N * D), kb(qb.size()), vb(qb.size()), ob(qb.size());
  for (auto* buf : {&qb, &kb, &vb})
    for (auto& x : *buf) x = static_cast<T>(g.normal());
  const auto alibi = cn::alibi<T>::for_heads(D, H);
  const auto c = cn::urpe<T>(cn::urpe<T>::default_buckets, random_matrix<T>(g, H, 64, 0.5));
  const lrpe::softmax_options<cn::urpe<T>> o{.causal = true, .tile = 4, .reweight = c};
  auto make = [&](T* p) { return lrpe::bsnh(p, B, N, H, D); };
  lrpe::softmax_attention(make(qb.data()), make(kb.data()), make(vb.data()), make(ob.data()), alibi, o);
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h) {
      const auto hv = [&](std::vector<T>& buf) { return make(buf.data()).head(b, h); };
      rm<T> out(N, D);
      lrpe::softmax_options<cn::urpe<T>> oh = o;
      oh.reweight = c.head(h);
      lrpe::softmax_attention(lrpe::matrix_view<const T>(hv(qb)), lrpe::matrix_view<const T>(hv(kb)),
                              lrpe::matrix_view<const T>(hv(vb)), lrpe::view(out), alibi.head(h), oh);
      bool same = true;
      for (index_t s = 0; s < N; ++s)
        for (index_t i = 0; i < D; ++i) same = same && hv(ob)(s, i) == out(s, i);
      CHECK(same);
    }
  // a table whose head count matches neither 1 nor H is an error
  const auto three = cn::alibi<T>::for_heads(D, 3);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(make(qb.data()), make(kb.data()), make(vb.data()), make(ob.data()), three),
                       doctest::Contains("'encoding.heads()'"), lrpe::shape_error);
}

TEST_CASE("per-pair scores are scaled in double, then rounded: a score past float whose logit is not") {
  // Shaw in float, a^K = 1e19 and q = 1e19 (d = 4): the score 4e38 is past FLT_MAX, the logit
  // 4e38 / sqrt(4) = 2e38 is not. Equal logits: out = mean of v = 1.
  const index_t d = 4;
  const cn::shaw<float> shaw(d, 0, rm<float>::Constant(1, d, 1e19f));
  const rm<float> q = rm<float>::Constant(2, d, 1e19f), k = rm<float>::Zero(2, d), v = rm<float>::Ones(2, d);
  rm<float> out(2, d);
  lrpe::softmax_attention(q, k, v, out, shaw, lrpe::softmax_options<>{});
  CHECK(out.allFinite());
  CHECK((out.array() - 1.0f).abs().maxCoeff() <= 1e-6f);
}

TEST_CASE("held_logit: a double past T's range is held at +-max(T); infinities and NaN are kept") {
  using lim = std::numeric_limits<float>;
  CHECK(lrpe::detail::held_logit<float>(1e39) == lim::max());
  CHECK(lrpe::detail::held_logit<float>(-1e300) == lim::lowest());
  CHECK(lrpe::detail::held_logit<float>(std::numeric_limits<double>::max()) == lim::max());
  CHECK(lrpe::detail::held_logit<float>(static_cast<double>(lim::max())) == lim::max());
  CHECK(lrpe::detail::held_logit<float>(-0.75) == -0.75f);
  CHECK(lrpe::detail::held_logit<float>(HUGE_VAL) == lim::infinity());
  CHECK(lrpe::detail::held_logit<float>(-HUGE_VAL) == -lim::infinity());
  CHECK(std::isnan(lrpe::detail::held_logit<float>(std::nan(""))));
  CHECK(lrpe::detail::held_logit<double>(std::numeric_limits<double>::max()) == std::numeric_limits<double>::max());
  CHECK(lrpe::detail::held_logit<double>(-HUGE_VAL) == -HUGE_VAL);
  CHECK(lrpe::detail::held_logit<long double>(1e300) == static_cast<long double>(1e300));
  // finite_in<T>: the range test before a conversion to T (scale, eps)
  CHECK(lrpe::detail::finite_in<float>(static_cast<double>(lim::max())));
  CHECK(lrpe::detail::finite_in<float>(-static_cast<double>(lim::max())));
  CHECK_FALSE(lrpe::detail::finite_in<float>(std::nextafter(static_cast<double>(lim::max()), HUGE_VAL)));
  CHECK_FALSE(lrpe::detail::finite_in<float>(-1e39));
  CHECK_FALSE(lrpe::detail::finite_in<float>(HUGE_VAL));
  CHECK_FALSE(lrpe::detail::finite_in<double>(std::nan("")));
  CHECK(lrpe::detail::finite_in<double>(std::numeric_limits<double>::max()));
  CHECK(lrpe::detail::finite_in<long double>(-std::numeric_limits<double>::max()));
}

TEST_CASE("a float bias past FLT_MAX is held there: ALiBi with a slope of 1e300 gives finite rows") {
  // Causal-form ALiBi without the causal mask: bias m·(t − s) is +1e300·k for later keys (held at
  // +max: they tie) and −1e300·k for earlier ones (held at −max: weight 0). Row s < n − 1 is the
  // mean of v over t > s; the last row sees only itself (bias 0). A plain conversion gave +inf
  // and a NaN row (and is undefined behaviour).
  const index_t d = 4;
  for (const index_t n : {index_t{5}, index_t{70}}) {
    CAPTURE(n);
    lrpe::generator g(0xB1A5'0001);
    const rm<float> q = random_matrix<float>(g, n, d), k = random_matrix<float>(g, n, d);
    const rm<float> v = random_matrix<float>(g, n, d);
    const cn::alibi<float> steep(d, std::vector<double>{1e300});
    rm<float> out(n, d);
    lrpe::softmax_attention(q, k, v, out, steep, lrpe::softmax_options<>{});
    REQUIRE(out.allFinite());
    using range = std::pair<index_t, index_t>;
    CHECK(tied_rows_error(out, v, [&](index_t s) { return s + 1 < n ? range{s + 1, n} : range{n - 1, n}; }) <= 1e-6);
  }
}

TEST_CASE("ALiBi's m*delta past DBL_MAX is held there: finite rows in double, and for a negative slope") {
  // double, slope 1e306, causal form without the mask, n = 200: m·δ > DBL_MAX from δ = 180 on
  // (held: those keys tie), below it the gaps are ≥ 1e306 (weight 0 for the rest). Row s ≤ 19 is
  // the mean of v over t ≥ s + 180; every later row sees its largest bias at t = 199 alone.
  const index_t d = 4;
  lrpe::generator g(0xB1A5'0002);
  {
    const index_t n = 200;
    const rm<double> q = random_matrix<double>(g, n, d), k = random_matrix<double>(g, n, d);
    const rm<double> v = random_matrix<double>(g, n, d);
    rm<double> out(n, d);
    lrpe::softmax_attention(q, k, v, out, cn::alibi<double>(d, std::vector<double>{1e306}), lrpe::softmax_options<>{});
    REQUIRE(out.allFinite());
    using range = std::pair<index_t, index_t>;
    CHECK(tied_rows_error(out, v, [&](index_t s) { return s + 180 < n ? range{s + 180, n} : range{n - 1, n}; }) <=
          1e-13);
  }
  {  // float, slope −1e300 with the causal mask: every earlier key ties at +FLT_MAX, the key at s gets 0
    const index_t n = 40;
    const rm<float> q = random_matrix<float>(g, n, d), k = random_matrix<float>(g, n, d);
    const rm<float> v = random_matrix<float>(g, n, d);
    rm<float> out(n, d);
    lrpe::softmax_options<> causal;
    causal.causal = true;
    lrpe::softmax_attention(q, k, v, out, cn::alibi<float>(d, std::vector<double>{-1e300}), causal);
    REQUIRE(out.allFinite());
    using range = std::pair<index_t, index_t>;
    CHECK(tied_rows_error(out, v, [](index_t s) { return s > 0 ? range{0, s} : range{0, 1}; }) <= 1e-6);
  }
}

TEST_CASE("Shaw without an a^V table adds nothing to the values: any v.cols") {
  const index_t d = 4, n = 5;
  lrpe::generator g(0xA77C'0001);
  const rm<double> q = random_matrix<double>(g, n, d), k = random_matrix<double>(g, n, d);
  const rm<double> v = random_matrix<double>(g, n, 2);
  const rm<double> a_k = random_matrix<double>(g, 5, d);
  const cn::shaw<double> keys_only(d, 2, a_k);
  rm<double> out(n, 2);
  lrpe::softmax_attention(q, k, v, out, keys_only, lrpe::softmax_options<>{});
  // naive: softmax_t(q_s·(k_t + a^K_{clip(t−s, 2)}) / 2) v_t
  for (index_t s = 0; s < n; ++s) {
    std::vector<ld> w(static_cast<std::size_t>(n));
    ld mx = -std::numeric_limits<ld>::infinity(), sum = 0;
    for (index_t t = 0; t < n; ++t) {
      const index_t c = std::clamp<index_t>(t - s, -2, 2) + 2;
      ld acc = 0;
      for (index_t i = 0; i < d; ++i) acc += static_cast<ld>(q(s, i)) * (static_cast<ld>(k(t, i)) + a_k(c, i));
      w[static_cast<std::size_t>(t)] = acc / 2;
      mx = std::max(mx, acc / 2);
    }
    for (auto& x : w) sum += (x = std::exp(x - mx));
    for (index_t j = 0; j < 2; ++j) {
      ld o = 0;
      for (index_t t = 0; t < n; ++t) o += w[static_cast<std::size_t>(t)] / sum * v(t, j);
      CHECK(static_cast<double>(std::abs(o - out(s, j))) <= 1e-12);
    }
  }
  // with an a^V table the widths must agree (the encoding adds a^V_{t−s}, d entries, to v_t)
  const cn::shaw<double> with_values(d, 2, a_k, a_k);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, with_values, lrpe::softmax_options<>{}),
                       doctest::Contains("argument 'v.cols' must equal encoding.dim() = 4"), lrpe::shape_error);
}

TEST_CASE("multi-head: a head whose encoding has the wrong width throws before any head is written") {
  const index_t B = 1, H = 3, N = 5, D = 4;
  lrpe::generator g(0xCA70'0009);
  std::vector<double> qb(B * H * N * D), kb(qb.size()), vb(qb.size());
  for (auto* buf : {&qb, &kb, &vb})
    for (auto& x : *buf) x = g.normal();
  std::vector<double> ob(qb.size(), 7.0);  // sentinel: must survive the failed calls
  const auto make = [&](std::vector<double>& b) { return lrpe::bnsh(b.data(), B, H, N, D); };
  const auto cmake = [&](std::vector<double>& b) { return lrpe::heads_view<const double>(make(b)); };
  // one encoding per head, the last one 2 wide: heads 0 and 1 would run before head 2 threw
  const std::vector<cn::alibi<double>> softmax_heads = {cn::alibi<double>(D, {0.5}), cn::alibi<double>(D, {0.25}),
                                                         cn::alibi<double>(2, {0.125})};
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(cmake(qb), cmake(kb), cmake(vb), make(ob), softmax_heads),
                       doctest::Contains("argument 'encoding.dim()' must equal q.cols = 4; got 2"), lrpe::shape_error);
  CHECK(std::all_of(ob.begin(), ob.end(), [](double x) { return x == 7.0; }));
  const std::vector<cn::cosformer<double>> linear_heads = {cn::cosformer<double>(D, 8), cn::cosformer<double>(D, 8),
                                                            cn::cosformer<double>(3, 8)};
  CHECK_THROWS_AS(lrpe::linear_attention(cmake(qb), cmake(kb), cmake(vb), make(ob), linear_heads,
                                         lrpe::feature_maps::elu_plus_one{}),
                  lrpe::shape_error);
  CHECK(std::all_of(ob.begin(), ob.end(), [](double x) { return x == 7.0; }));
  // the valid heads alone run
  const std::vector<cn::alibi<double>> good(softmax_heads.begin(), softmax_heads.begin() + 2);
  const auto two = [&](std::vector<double>& b) { return lrpe::bnsh(b.data(), B, 2, N, D); };
  CHECK_NOTHROW(lrpe::softmax_attention(lrpe::heads_view<const double>(two(qb)), lrpe::heads_view<const double>(two(kb)),
                                        lrpe::heads_view<const double>(two(vb)), two(ob), good));
}
