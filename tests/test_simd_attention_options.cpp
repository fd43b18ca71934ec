// SPDX-License-Identifier: MIT
// The attention options of inference engines (softmax_options: window, chunk, softcap, sink,
// head_sinks) and DiSAN's directional masks (anti_causal, exclude_self), alone and together, with causal, encoders, ALiBi and grouped-query heads, on the
// reference and SIMD backends: against a long-double loop written from the definitions (the
// mask's three conditions as stated, not through key_mask), the backward against central
// differences of that loop, and the errors.
#include "gradient_helpers.hpp"
#include "simd_attention_helpers.hpp"

#include <lrpe/attention/mask.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace {

using attention_test::kernel_vs_kernel;
using attention_test::ld;
using attention_test::random_matrix;
using attention_test::rm;
using attention_test::softmax_vs_exact;
using lrpe::index_t;
using lrpe::position_t;

constexpr double no_sink = -std::numeric_limits<double>::infinity();

/// ⌊a / b⌋ for b > 0, by repeated steps (small test positions only): independent of key_mask.
position_t floor_div(position_t a, position_t b) {
  position_t q = 0;
  while (a < 0) {
    a += b;
    --q;
  }
  return q + a / b;
}

struct engine {
  bool causal = false;
  position_t window = 0;
  position_t chunk = 0;
  double softcap = 0;
  double sink = no_sink;
  bool anti_causal = false;
  bool exclude_self = false;
};

/// The visibility rule as the options' documentation states it.
bool sees(const engine& o, position_t s, position_t t) {
  if (o.causal && t > s) return false;
  if (o.anti_causal && t < s) return false;
  if (o.exclude_self && t == s) return false;
  if (o.window > 0 && !(s - t < o.window)) return false;
  if (o.chunk > 0 && floor_div(s, o.chunk) != floor_div(t, o.chunk)) return false;
  return true;
}

/// Softmax attention in long double, entry by entry: x = scale·q_s·k_t, capped, plus bias(s, t);
/// the sink joins the denominator. lse (when asked) as the library defines it.
template <class Bias>
rm<ld> oracle(const rm<ld>& q, const rm<ld>& k, const rm<ld>& v, const std::vector<position_t>& qp,
              const std::vector<position_t>& kp, ld scale, const engine& o, const Bias& bias,
              std::vector<ld>* lse = nullptr) {
  rm<ld> out = rm<ld>::Zero(q.rows(), v.cols());
  if (lse != nullptr) lse->assign(static_cast<std::size_t>(q.rows()), -std::numeric_limits<ld>::infinity());
  for (index_t s = 0; s < q.rows(); ++s) {
    std::vector<ld> x(static_cast<std::size_t>(k.rows()));
    std::vector<bool> vis(static_cast<std::size_t>(k.rows()));
    ld m = o.sink == no_sink ? -std::numeric_limits<ld>::infinity() : ld(o.sink);
    for (index_t t = 0; t < k.rows(); ++t) {
      const auto j = static_cast<std::size_t>(t);
      vis[j] = sees(o, qp[static_cast<std::size_t>(s)], kp[j]);
      if (!vis[j]) continue;
      ld c = scale * q.row(s).dot(k.row(t));
      if (o.softcap > 0) c = ld(o.softcap) * std::tanh(c / ld(o.softcap));
      x[j] = c + ld(bias(qp[static_cast<std::size_t>(s)], kp[j]));
      m = std::max(m, x[j]);
    }
    if (m == -std::numeric_limits<ld>::infinity()) continue;
    ld den = o.sink == no_sink ? ld(0) : std::exp(ld(o.sink) - m);
    for (index_t t = 0; t < k.rows(); ++t) {
      const auto j = static_cast<std::size_t>(t);
      if (!vis[j]) continue;
      const ld w = std::exp(x[j] - m);
      den += w;
      out.row(s) += w * v.row(t);
    }
    out.row(s) /= den;
    if (lse != nullptr) (*lse)[static_cast<std::size_t>(s)] = m + std::log(den);
  }
  return out;
}

const auto no_bias = [](position_t, position_t) { return 0.0; };

template <class T>
rm<ld> to_ld(const rm<T>& x) {
  return x.template cast<ld>();
}

/// Positions: offsets from `first`, or a shuffled array (not monotone: the kernels must not assume it).
std::vector<position_t> make_positions(index_t n, position_t first, bool shuffled, std::uint64_t seed) {
  std::vector<position_t> p(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = first + i;
  if (shuffled) std::shuffle(p.begin(), p.end(), std::mt19937_64(seed));
  return p;
}

template <class Reweight = lrpe::no_reweighting>
lrpe::softmax_options<Reweight> options_of(const engine& e, const std::vector<position_t>& qp, const std::vector<position_t>& kp,
                                           bool arrays) {
  lrpe::softmax_options<Reweight> o;
  o.causal = e.causal;
  o.window = e.window;
  o.chunk = e.chunk;
  o.softcap = e.softcap;
  o.sink = e.sink;
  o.anti_causal = e.anti_causal;
  o.exclude_self = e.exclude_self;
  if (arrays) {
    o.q_positions = std::span<const position_t>(qp);
    o.k_positions = std::span<const position_t>(kp);
  } else {
    o.q_positions = lrpe::positions(qp.front());
    o.k_positions = lrpe::positions(kp.front());
  }
  return o;
}

/// A few rule combinations, each option alone and all together.
std::vector<engine> engines() {
  return {
      {true, 0, 0, 0, no_sink},   {false, 5, 0, 0, no_sink},  {true, 5, 0, 0, no_sink},   {true, 1, 0, 0, no_sink},
      {true, 100, 0, 0, no_sink}, {false, 0, 7, 0, no_sink},  {true, 0, 64, 0, no_sink},  {false, 0, 0, 4.0, no_sink},
      {true, 0, 0, 0, 0.5},       {false, 0, 0, 0, 3.0},      {true, 9, 0, 4.0, 1.5},     {true, 0, 13, 2.0, -1.0},
      {false, 70, 30, 3.0, 2.0},  {true, 65, 0, 0, 8.0},
      // DiSAN's forward (t < s) and backward (t > s) masks, the reverse direction, with others
      {true, 0, 0, 0, no_sink, false, true},   {false, 0, 0, 0, no_sink, true, true},
      {false, 0, 0, 0, no_sink, true, false},  {false, 0, 16, 2.0, 0.5, true, true},
      {true, 7, 0, 0, no_sink, false, true},   {true, 0, 0, 0, no_sink, true, false},
  };
}

}  // namespace

TEST_CASE("key_mask: lo and hi bound exactly the positions the conditions let through") {
  std::mt19937_64 rng(0xA77E'0001);
  std::uniform_int_distribution<position_t> pos(-200, 200);
  for (const int direction : {0, 1, 2, 3, 4, 5})  // none, causal, anti, both; strict causal, strict anti
    for (const position_t window : {0, 1, 3, 17})
      for (const position_t chunk : {0, 1, 4, 9}) {
        const bool causal = direction == 1 || direction == 3 || direction == 4;
        const bool anti = direction == 2 || direction == 3 || direction == 5;
        const bool strict = direction >= 4;
        CAPTURE(direction);
        const engine e{causal, window, chunk, 0, no_sink, anti, strict};
        const lrpe::key_mask m{causal, window, chunk, anti, strict};
        for (int trial = 0; trial < 300; ++trial) {
          const position_t s = pos(rng), t = pos(rng);
          CAPTURE(s);
          CAPTURE(t);
          CHECK(m.visible(s, t) == sees(e, s, t));
        }
        // may_see never skips a visible pair; sees_all never claims a hidden one
        for (int trial = 0; trial < 200; ++trial) {
          position_t q0 = pos(rng), k0 = pos(rng);
          const position_t q1 = q0 + pos(rng) % 20 + 20, k1 = k0 + pos(rng) % 20 + 20;
          bool any = false, all = true;
          for (position_t s = q0; s <= q1; ++s)
            for (position_t t = k0; t <= k1; ++t) {
              any = any || sees(e, s, t);
              all = all && sees(e, s, t);
            }
          if (any) CHECK(m.may_see(q0, q1, k0, k1));
          if (!all) CHECK_FALSE(m.sees_all(q0, q1, k0, k1));
        }
      }
}

TEST_CASE("key_mask: no overflow at the ends of the position range") {
  constexpr position_t lo = std::numeric_limits<position_t>::min(), hi = std::numeric_limits<position_t>::max();
  for (const position_t chunk : {position_t{3}, position_t{1} << 62, hi}) {
    const lrpe::key_mask m{false, 0, chunk};
    CAPTURE(chunk);
    for (const position_t s : {lo, lo + 1, lo + 2, hi - 1, hi, position_t{0}, position_t{-1}}) {
      CAPTURE(s);
      CHECK(m.visible(s, s));
      CHECK(m.lo(s) <= s);
      CHECK(m.hi(s) >= s);
      // the chunk holds C positions, unless the range's ends cut it
      const auto [first, last] = lrpe::key_mask::chunk_of(s, chunk);
      if (first != lo && last != hi) CHECK(static_cast<ld>(last) - static_cast<ld>(first) + 1 == static_cast<ld>(chunk));
    }
  }
  // strict directions at the ends: no key (s ± 1 would overflow), and monotone ends
  const lrpe::key_mask fwd{true, 0, 0, false, true}, bwd{false, 0, 0, true, true};
  CHECK_FALSE(fwd.visible(lo, lo));
  CHECK(fwd.lo(lo) > fwd.hi(lo));
  CHECK(fwd.hi(lo + 1) == lo);
  CHECK(fwd.hi(lo) <= fwd.hi(lo + 1));
  CHECK(fwd.visible(hi, hi - 1));
  CHECK_FALSE(bwd.visible(hi, hi));
  CHECK(bwd.lo(hi) > bwd.hi(hi));
  CHECK(bwd.lo(hi - 1) == hi);
  CHECK(bwd.visible(lo, lo + 1));
  CHECK_FALSE(bwd.visible(lo, lo));
  // tiles holding the query that sees nothing: may_see and sees_all from the pairs themselves
  for (const auto& m : {fwd, bwd}) {
    const position_t edge = m.causal ? lo : hi, step = m.causal ? 1 : -1;
    for (position_t a = 0; a < 3; ++a)
      for (position_t b = a; b < 3; ++b)
        for (position_t c = 0; c < 4; ++c)
          for (position_t e = c; e < 4; ++e) {
            const position_t q0 = std::min(edge + step * a, edge + step * b), q1 = std::max(edge + step * a, edge + step * b);
            const position_t k0 = std::min(edge + step * c, edge + step * e), k1 = std::max(edge + step * c, edge + step * e);
            bool any = false, all = true;
            for (position_t s = q0;; ++s) {
              for (position_t t = k0;; ++t) {
                any = any || m.visible(s, t);
                all = all && m.visible(s, t);
                if (t == k1) break;
              }
              if (s == q1) break;
            }
            CAPTURE(m.causal);
            CAPTURE(a);
            CAPTURE(b);
            CAPTURE(c);
            CAPTURE(e);
            CHECK(m.may_see(q0, q1, k0, k1) == any);
            if (!all) CHECK_FALSE(m.sees_all(q0, q1, k0, k1));
          }
  }
  const lrpe::key_mask w{true, hi, 0};
  CHECK(w.lo(lo) == lo);
  CHECK(w.lo(hi) == 1);  // hi − (hi − 1)
  CHECK(w.visible(hi, 1));
  CHECK_FALSE(w.visible(hi, 0));
}

TEST_CASE_TEMPLATE("attention options: reference and SIMD softmax against the definitions", T, float, double) {
  const index_t d = 12, dv = 9;
  lrpe::generator g(0x0B710'0002);
  const lrpe::canonical::alibi<T> alibi(d, std::vector<double>{0.25});
  const lrpe::rope_neox<T> rope(d, 100.0);
  for (const auto& size : {std::pair<index_t, index_t>{1, 300}, {3, 40}, {70, 70}, {150, 150}, {20, 150}})
    for (const bool arrays : {false, true}) {
      const index_t nq = size.first, nk = size.second;  // (not a structured binding: CAPTURE's lambda reads them)
      const rm<T> q = random_matrix<T>(g, nq, d, 1.5), k = random_matrix<T>(g, nk, d, 1.5);
      const rm<T> v = random_matrix<T>(g, nk, dv);
      const auto kp = make_positions(nk, -37, arrays, 7);
      const auto qp = make_positions(nq, -37 + (nk - nq), arrays, 11);  // the queries are the last keys' positions
      // RoPE's rotated rows, for the oracle
      const rm<T> qr = rope.encode(q, lrpe::positions(std::span<const position_t>(qp)));
      const rm<T> kr = rope.encode(k, lrpe::positions(std::span<const position_t>(kp)));
      for (const engine& e : engines()) {
        CAPTURE(nq);
        CAPTURE(nk);
        CAPTURE(arrays);
        CAPTURE(e.causal);
        CAPTURE(e.window);
        CAPTURE(e.chunk);
        CAPTURE(e.softcap);
        CAPTURE(e.sink);
        CAPTURE(e.anti_causal);
        CAPTURE(e.exclude_self);
        const auto o = options_of(e, qp, kp, arrays);
        const ld scale = 1 / std::sqrt(ld(d));
        std::vector<ld> lse_exact;
        const rm<ld> plain = oracle(to_ld(q), to_ld(k), to_ld(v), qp, kp, scale, e, no_bias, &lse_exact);
        const rm<ld> biased = oracle(to_ld(q), to_ld(k), to_ld(v), qp, kp, scale, e,
                                     [&](position_t s, position_t t) { return alibi.bias(s, t); });
        const rm<ld> rotated = oracle(to_ld(qr), to_ld(kr), to_ld(v), qp, kp, scale, e, no_bias);
        rm<T> out(nq, dv);
        std::vector<T> lse(static_cast<std::size_t>(nq));
        lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), lrpe::no_encoding{}, o);
        CHECK(attention_test::rel_error(out, plain) <= softmax_vs_exact<T>());
        for (index_t i = 0; i < nq; ++i) {
          const ld want = lse_exact[static_cast<std::size_t>(i)];
          if (std::isinf(want)) CHECK(lse[static_cast<std::size_t>(i)] == -std::numeric_limits<T>::infinity());
          else CHECK(std::abs(lse[static_cast<std::size_t>(i)] - want) <= 10 * softmax_vs_exact<T>() * (1 + std::abs(want)));
        }
        rm<T> fast(nq, dv);
        std::vector<T> fast_lse(static_cast<std::size_t>(nq));
        lrpe::softmax_attention_lse(q, k, v, fast, std::span<T>(fast_lse), lrpe::no_encoding{}, o,
                                    lrpe::backend::simd<>{});
        CHECK(attention_test::rel_error(fast, plain) <= softmax_vs_exact<T>());
        for (index_t i = 0; i < nq; ++i) {
          const auto j = static_cast<std::size_t>(i);
          if (std::isinf(lse[j])) CHECK(fast_lse[j] == lse[j]);
          else CHECK(std::abs(fast_lse[j] - lse[j]) <= kernel_vs_kernel<T>() * (1 + std::abs(lse[j])));
        }
        lrpe::softmax_attention(q, k, v, out, alibi, o);
        CHECK(attention_test::rel_error(out, biased) <= softmax_vs_exact<T>());
        lrpe::softmax_attention(q, k, v, fast, alibi, o, lrpe::backend::simd<>{});
        CHECK(attention_test::rel_error(fast, biased) <= softmax_vs_exact<T>());
        lrpe::softmax_attention(q, k, v, out, rope, o);
        CHECK(attention_test::rel_error(out, rotated) <= softmax_vs_exact<T>());
        lrpe::softmax_attention(q, k, v, fast, rope, o, lrpe::backend::simd<>{});
        CHECK(attention_test::rel_error(fast, rotated) <= softmax_vs_exact<T>());
      }
    }
}

TEST_CASE("attention options: the cap bounds the content term, not an additive bias; a mask-like bias still masks") {
  const index_t d = 4;
  lrpe::generator g(0x0B710'0003);
  const rm<double> q = random_matrix<double>(g, 6, d, 30.0), k = random_matrix<double>(g, 6, d, 30.0);
  const rm<double> v = random_matrix<double>(g, 6, d);
  // a mask-like bias (−max) two keys back and far below the cap one key back
  rm<double> table = rm<double>::Zero(1, 5);
  table(0, 0) = std::numeric_limits<double>::lowest();
  table(0, 1) = -50;
  const lrpe::canonical::toeplitz_bias<double> bias(d, 2, table);
  lrpe::softmax_options<> o;
  o.softcap = 1.0;
  rm<double> ref(6, d), fast(6, d);
  lrpe::softmax_attention(q, k, v, ref, bias, o);
  lrpe::softmax_attention(q, k, v, fast, bias, o, lrpe::backend::simd<>{});
  const std::vector<position_t> p = make_positions(6, 0, false, 0);
  const rm<ld> want = oracle(to_ld(q), to_ld(k), to_ld(v), p, p, 0.5L, engine{false, 0, 0, 1.0, no_sink},
                             [&](position_t s, position_t t) { return bias.bias(s, t); });
  CHECK(attention_test::rel_error(ref, want) <= 1e-12);
  CHECK(attention_test::rel_error(fast, want) <= 1e-12);
  // one query at 2 over keys at 0..5, the value only in key 0, two back: its bias of −max gives
  // it weight 0 exactly (with the cap on the whole logit it would get about e^{−2}, not 0)
  rm<double> only(1, d);
  rm<double> v0 = rm<double>::Zero(6, d);
  v0.row(0).setOnes();
  lrpe::softmax_options<> at2 = o;
  at2.q_positions = lrpe::positions(2);
  lrpe::softmax_attention(q.topRows(1), k, v0, only, bias, at2);
  CHECK(only.cwiseAbs().maxCoeff() == 0.0);
  lrpe::softmax_attention(q.topRows(1), k, v0, only, bias, at2, lrpe::backend::simd<>{});
  CHECK(only.cwiseAbs().maxCoeff() == 0.0);
}

TEST_CASE_TEMPLATE("attention options: a sink with no visible key gives zero rows and lse = sink", T, float, double) {
  const index_t d = 8;
  lrpe::generator g(0x0B710'0004);
  const rm<T> q = random_matrix<T>(g, 20, d), k = random_matrix<T>(g, 20, d), v = random_matrix<T>(g, 20, d);
  lrpe::softmax_options<> o;
  o.causal = true;
  o.sink = 1.25;
  o.k_positions = lrpe::positions(100);  // every key after every query
  for (const bool simd : {false, true}) {
    rm<T> out = rm<T>::Constant(20, d, T(7));
    std::vector<T> lse(20);
    if (simd) lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
    else lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), lrpe::no_encoding{}, o);
    CHECK(out.cwiseAbs().maxCoeff() == T(0));
    for (const T x : lse) CHECK(x == T(1.25));
  }
}

TEST_CASE_TEMPLATE("attention options: split keys merge back with the sink in one part", T, float, double) {
  const index_t d = 8, n = 90;
  lrpe::generator g(0x0B710'0005);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  lrpe::softmax_options<> o;
  o.causal = true;
  o.window = 50;
  o.softcap = 3;
  o.sink = 0.7;
  rm<T> whole(n, d), a(n, d), b(n, d);
  std::vector<T> lw(n), la(n), lb(n);
  lrpe::softmax_attention_lse(q, k, v, whole, std::span<T>(lw), lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  lrpe::softmax_options<> first = o, second = o;
  second.sink = no_sink;  // the sink joins once
  second.k_positions = lrpe::positions(40);
  lrpe::softmax_attention_lse(q, k.topRows(40), v.topRows(40), a, std::span<T>(la), lrpe::no_encoding{}, first,
                              lrpe::backend::simd<>{});
  lrpe::softmax_attention_lse(q, k.bottomRows(n - 40), v.bottomRows(n - 40), b, std::span<T>(lb), lrpe::no_encoding{},
                              second, lrpe::backend::simd<>{});
  lrpe::merge_attention_states(a, std::span<T>(la), b, std::span<const T>(lb));
  CHECK(simd_attention_test::diff(a, whole) <= kernel_vs_kernel<T>());
}

TEST_CASE_TEMPLATE("attention options: multi-head with per-head sinks and grouped K/V equals the heads one by one", T,
                   float, double) {
  const index_t batch = 2, heads = 4, kv_heads = 2, d = 16, dv = 8;
  lrpe::generator g(0x0B710'0006);
  const lrpe::rope_neox<T> rope(d);
  for (const index_t nq : {index_t{1}, index_t{33}}) {  // the grouped decode path and the per-head one
    const index_t nk = 77;
    const rm<T> q = random_matrix<T>(g, batch * heads * nq, d), k = random_matrix<T>(g, batch * kv_heads * nk, d);
    const rm<T> v = random_matrix<T>(g, batch * kv_heads * nk, dv);
    const lrpe::heads_view<const T> qh = lrpe::bnsh(q.data(), batch, heads, nq, d);
    const lrpe::heads_view<const T> kh = lrpe::bnsh(k.data(), batch, kv_heads, nk, d);
    const lrpe::heads_view<const T> vh = lrpe::bnsh(v.data(), batch, kv_heads, nk, dv);
    const std::vector<double> sinks{0.5, -1.0, 2.0, no_sink};
    lrpe::softmax_options<> o;
    o.causal = true;
    o.window = 20;
    o.softcap = 5;
    o.q_positions = lrpe::positions(nk - nq);
    o.head_sinks = sinks;
    for (const bool simd : {false, true}) {
      CAPTURE(nq);
      CAPTURE(simd);
      rm<T> out(batch * heads * nq, dv);
      const auto oh = lrpe::bnsh(out.data(), batch, heads, nq, dv);
      if (simd) lrpe::softmax_attention(qh, kh, vh, oh, rope, o, lrpe::backend::simd<>{});
      else lrpe::softmax_attention(qh, kh, vh, oh, rope, o);
      for (index_t b = 0; b < batch; ++b)
        for (index_t h = 0; h < heads; ++h) {
          lrpe::softmax_options<> one = o;
          one.head_sinks = {};
          one.sink = sinks[static_cast<std::size_t>(h)];
          rm<T> want(nq, dv);
          const index_t hk = h / (heads / kv_heads);
          lrpe::softmax_attention(qh.head(b, h), kh.head(b, hk), vh.head(b, hk), want, rope, one);
          const rm<T> got = Eigen::Map<const rm<T>>(out.data() + (b * heads + h) * nq * dv, nq, dv);
          CHECK(simd_attention_test::diff(got, want) <= kernel_vs_kernel<T>());
        }
    }
  }
}

namespace {

/// L = Σ G∘O of the oracle, as a function of Q, K, V (flattened) and σ, in long double.
struct loss_of {
  index_t nq, nk, d, dv;
  std::vector<position_t> qp, kp;
  engine e;
  rm<ld> gout;
  ld operator()(const std::vector<double>& w) const {
    const auto at = [&](std::size_t off, index_t r, index_t c) {
      rm<ld> m(r, c);
      for (index_t i = 0; i < r; ++i)
        for (index_t j = 0; j < c; ++j) m(i, j) = w[off + static_cast<std::size_t>(i * c + j)];
      return m;
    };
    const std::size_t nqd = static_cast<std::size_t>(nq * d), nkd = static_cast<std::size_t>(nk * d);
    engine ee = e;
    ee.sink = w.back();
    const rm<ld> out = oracle(at(0, nq, d), at(nqd, nk, d), at(nqd + nkd, nk, dv), qp, kp, 1 / std::sqrt(ld(d)), ee, no_bias);
    return (out.array() * gout.array()).sum();
  }
};

}  // namespace

TEST_CASE("attention options: the backward (dQ, dK, dV, dσ) against central differences, reference and SIMD") {
  const index_t nq = 70, nk = 70, d = 6, dv = 5;
  lrpe::generator g(0x0B710'0007);
  const rm<double> q = random_matrix<double>(g, nq, d, 2.0), k = random_matrix<double>(g, nk, d, 2.0);
  const rm<double> v = random_matrix<double>(g, nk, dv), gout = random_matrix<double>(g, nq, dv);
  for (const engine& e : {engine{true, 9, 0, 1.5, 0.8}, engine{false, 0, 16, 2.0, -0.5}, engine{true, 0, 0, 0, 1.0},
                          engine{false, 30, 0, 0.7, no_sink}, engine{true, 0, 0, 0, no_sink, false, true},
                          engine{false, 0, 0, 1.0, 0.3, true, true}}) {
    CAPTURE(e.anti_causal);
    CAPTURE(e.exclude_self);
    CAPTURE(e.causal);
    CAPTURE(e.window);
    CAPTURE(e.chunk);
    CAPTURE(e.softcap);
    CAPTURE(e.sink);
    const auto qp = make_positions(nq, 0, false, 0), kp = qp;
    auto o = options_of(e, qp, kp, false);
    std::vector<double> w;
    for (const auto* m : {&q, &k, &v})
      for (index_t i = 0; i < m->rows(); ++i)
        for (index_t j = 0; j < m->cols(); ++j) w.push_back((*m)(i, j));
    w.push_back(e.sink == no_sink ? -1e300 : e.sink);  // (−∞ itself has no neighbourhood: a sink of weight 0)
    const loss_of loss{nq, nk, d, dv, qp, kp, e, gout.cast<ld>()};
    std::vector<double> fd(w.size(), 0.0);  // every 7th entry of dQ, dK, dV, and dσ
    for (std::size_t j = 0; j < w.size(); ++j)
      if ((j + 1 < w.size() && j % 7 == 0) || (j + 1 == w.size() && e.sink != no_sink)) fd[j] = static_cast<double>(grad_test::derivative(w, j, 1e-4, loss));
    for (const bool simd : {false, true}) {
      CAPTURE(simd);
      rm<double> out(nq, dv), dq(nq, d), dk(nk, d), dvv(nk, dv);
      std::vector<double> lse(nq);
      double dsink = 0.25;  // added to
      o.sink_gradient = &dsink;
      if (simd) {
        lrpe::softmax_attention_lse(q, k, v, out, std::span<double>(lse), lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
        lrpe::softmax_attention_backward(q, k, v, out, gout, std::span<const double>(lse), dq, dk, dvv,
                                         lrpe::no_encoding{}, o, nullptr, lrpe::backend::simd<>{});
      } else {  // the lse recomputed
        lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, o);
        lrpe::softmax_attention_backward(q, k, v, out, gout, std::span<const double>{}, dq, dk, dvv, lrpe::no_encoding{},
                                         o);
      }
      double worst = 0;
      std::size_t at = 0;
      for (const auto* m : {&dq, &dk, &dvv})
        for (index_t i = 0; i < m->rows(); ++i)
          for (index_t j = 0; j < m->cols(); ++j, ++at)
            if (at % 7 == 0) worst = std::max(worst, std::abs((*m)(i, j) - fd[at]));
      CHECK(worst <= 1e-8);
      if (e.sink != no_sink) CHECK(std::abs(dsink - 0.25 - fd.back()) <= 1e-8);
      else CHECK(dsink == 0.25);
    }
  }
}

TEST_CASE("attention options: bad values are errors naming the option") {
  const rm<double> q = rm<double>::Ones(3, 4);
  rm<double> out(3, 4);
  const auto fails = [&](auto set, const char* what) {
    lrpe::softmax_options<> o;
    set(o);
    for (const bool simd : {false, true}) {
      try {
        if (simd) lrpe::softmax_attention(q, q, q, out, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
        else lrpe::softmax_attention(q, q, q, out, lrpe::no_encoding{}, o);
        FAIL("no error for ", what);
      } catch (const lrpe::error& err) {
        CHECK(std::string(err.what()).find(what) != std::string::npos);
      }
    }
  };
  fails([](auto& o) { o.window = -1; }, "options.window");
  fails([](auto& o) { o.chunk = -3; }, "options.chunk");
  fails([](auto& o) { o.softcap = -1; }, "options.softcap");
  fails([](auto& o) { o.softcap = std::nan(""); }, "options.softcap");
  fails([](auto& o) { o.sink = std::nan(""); }, "options.sink");
  fails([](auto& o) { o.sink = std::numeric_limits<double>::infinity(); }, "options.sink");
  static const double sinks[] = {1.0, 2.0};
  fails([](auto& o) { o.head_sinks = sinks; }, "options.head_sinks");
  fails([](auto& o) { o.exclude_self = true; }, "options.exclude_self");
  fails([](auto& o) { o.exclude_self = true; o.window = 3; }, "options.exclude_self");
  // multi-head: one sink per query head
  const lrpe::heads_view<const double> h = lrpe::bnsh(q.data(), 1, 3, 1, 4);
  const auto oh = lrpe::bnsh(out.data(), 1, 3, 1, 4);
  lrpe::softmax_options<> o;
  o.head_sinks = sinks;
  CHECK_THROWS_AS(lrpe::softmax_attention(h, h, h, oh, lrpe::no_encoding{}, o), lrpe::shape_error);
  const double nan_sinks[] = {1.0, std::nan(""), 0.0};
  o.head_sinks = nan_sinks;
  CHECK_THROWS_AS(lrpe::softmax_attention(h, h, h, oh, lrpe::no_encoding{}, o), lrpe::domain_error);
}

TEST_CASE_TEMPLATE("split-KV decode on a pool equals one thread's, with every option", T, float, double) {
  const index_t d = 24, dv = 10;
  lrpe::generator g(0x0B710'0008);
  for (const int threads : {2, 3}) {
    lrpe::backend::simd_threads pool(threads);
    for (const auto& size : {std::pair<index_t, index_t>{1, 5000}, {3, 2600}, {8, 7000}, {1, 900}})
      for (const bool arrays : {false, true})
        for (const engine& e : {engine{}, engine{true, 0, 0, 0, no_sink}, engine{true, 3000, 0, 3.0, 1.5},
                                engine{false, 0, 2048, 0, -0.5}, engine{true, 0, 0, 0, 40.0},
                                engine{true, 0, 0, 0, no_sink, false, true}, engine{false, 0, 0, 0, 0.5, true, true}}) {
          const index_t nq = size.first, nk = size.second;
          CAPTURE(threads);
          CAPTURE(nq);
          CAPTURE(nk);
          CAPTURE(arrays);
          CAPTURE(e.window);
          CAPTURE(e.chunk);
          CAPTURE(e.sink);
          const rm<T> q = random_matrix<T>(g, nq, d), k = random_matrix<T>(g, nk, d), v = random_matrix<T>(g, nk, dv);
          const auto kp = make_positions(nk, 0, arrays, 3);
          const auto qp = make_positions(nq, nk - nq, false, 0);
          const auto o = options_of(e, qp, kp, arrays);
          rm<T> one(nq, dv), split(nq, dv);
          std::vector<T> l1(static_cast<std::size_t>(nq)), l2(static_cast<std::size_t>(nq));
          lrpe::softmax_attention_lse(q, k, v, one, std::span<T>(l1), lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
          lrpe::softmax_attention_lse(q, k, v, split, std::span<T>(l2), lrpe::no_encoding{}, o,
                                      lrpe::backend::simd_policy<>{&pool});
          CHECK(simd_attention_test::diff(split, one) <= kernel_vs_kernel<T>());
          for (std::size_t i = 0; i < l1.size(); ++i) {
            if (std::isinf(l1[i])) CHECK(l2[i] == l1[i]);
            else CHECK(std::abs(l2[i] - l1[i]) <= kernel_vs_kernel<T>() * (1 + std::abs(l1[i])));
          }
        }
  }
}

TEST_CASE_TEMPLATE("append_kv: RoPE'd keys and values into a cache at n_past, one pass, any layout", T, float, double) {
  const index_t batch = 2, heads = 3, d = 16, dv = 8, capacity = 20, m = 3, n_past = 11;
  lrpe::generator g(0x0B710'0009);
  const lrpe::rope_neox<T> rope(d, 1e4);
  const rm<T> kn = random_matrix<T>(g, batch * heads * m, d), vn = random_matrix<T>(g, batch * heads * m, dv);
  const auto k_new = lrpe::bnsh(kn.data(), batch, heads, m, d);
  const auto v_new = lrpe::bnsh(vn.data(), batch, heads, m, dv);
  for (const bool simd : {false, true}) {
    for (const bool bsnh : {false, true}) {
      CAPTURE(simd);
      CAPTURE(bsnh);
      rm<T> kc = rm<T>::Constant(batch * heads * capacity, d, T(7)), vc = rm<T>::Constant(batch * heads * capacity, dv, T(7));
      const auto k_cache = bsnh ? lrpe::bsnh(kc.data(), batch, capacity, heads, d) : lrpe::bnsh(kc.data(), batch, heads, capacity, d);
      const auto v_cache = bsnh ? lrpe::bsnh(vc.data(), batch, capacity, heads, dv) : lrpe::bnsh(vc.data(), batch, heads, capacity, dv);
      if (simd) lrpe::append_kv(k_new, v_new, k_cache, v_cache, n_past, rope, std::nullopt, lrpe::backend::simd<>{});
      else lrpe::append_kv(k_new, v_new, k_cache, v_cache, n_past, rope);
      for (index_t b = 0; b < batch; ++b)
        for (index_t h = 0; h < heads; ++h) {
          const rm<T> rows_in = Eigen::Map<const rm<T>>(k_new.head(b, h).data, m, d);
          const rm<T> want = rope.encode(rows_in, lrpe::positions(n_past));
          const auto kh = k_cache.head(b, h), vh = v_cache.head(b, h);
          for (index_t i = 0; i < capacity; ++i) {
            const bool written = i >= n_past && i < n_past + m;
            for (index_t j = 0; j < d; ++j) {
              const T got = kh.row(i)[j];
              if (written) CHECK(std::abs(got - want(i - n_past, j)) <= kernel_vs_kernel<T>());
              else CHECK(got == T(7));  // the rest of the cache untouched
            }
            for (index_t j = 0; j < dv; ++j) CHECK(vh.row(i)[j] == (written ? v_new.head(b, h).row(i - n_past)[j] : T(7)));
          }
        }
    }
  }
  // errors: the cache too small, n_past negative, a width that is not the encoder's
  rm<T> kc(batch * heads * capacity, d), vc(batch * heads * capacity, dv);
  const auto k_cache = lrpe::bnsh(kc.data(), batch, heads, capacity, d);
  const auto v_cache = lrpe::bnsh(vc.data(), batch, heads, capacity, dv);
  CHECK_THROWS_AS(lrpe::append_kv(k_new, v_new, k_cache, v_cache, capacity - m + 1, rope), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::append_kv(k_new, v_new, k_cache, v_cache, -1, rope), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::append_kv(k_new, v_new, v_cache, v_cache, 0, lrpe::no_encoding{}), lrpe::shape_error);
  // without an encoding: the keys copied as they are
  lrpe::append_kv(k_new, v_new, k_cache, v_cache, 4, lrpe::no_encoding{});
  CHECK(k_cache.head(1, 2).row(4 + m - 1)[d - 1] == k_new.head(1, 2).row(m - 1)[d - 1]);
  // another encoder (the generic path, through lrpe::encode): Type 1, features 2d wide, at positions of its own
  const lrpe::type1<T> t1(d);
  const index_t f = t1.feature_dim();
  rm<T> kf(batch * heads * capacity, f);
  const auto kf_cache = lrpe::bnsh(kf.data(), batch, heads, capacity, f);
  const std::vector<position_t> at{100, 7, -3};
  for (const bool simd : {false, true}) {
    if (simd) lrpe::append_kv(k_new, v_new, kf_cache, v_cache, 2, t1, lrpe::positions(std::span<const position_t>(at)),
                              lrpe::backend::simd<>{});
    else lrpe::append_kv(k_new, v_new, kf_cache, v_cache, 2, t1, lrpe::positions(std::span<const position_t>(at)));
    const rm<T> rows_in = Eigen::Map<const rm<T>>(k_new.head(1, 1).data, m, d);
    const rm<T> want = t1.encode(rows_in, lrpe::positions(std::span<const position_t>(at)));
    const rm<T> got = Eigen::Map<const rm<T>>(kf_cache.head(1, 1).row(2), m, f);
    CHECK(simd_attention_test::diff(got, want) <= kernel_vs_kernel<T>());
  }
  const std::vector<position_t> two{5, 6};
  CHECK_THROWS_AS(lrpe::append_kv(k_new, v_new, k_cache, v_cache, 0, rope, lrpe::positions(std::span<const position_t>(two))),
                  lrpe::shape_error);
}

TEST_CASE_TEMPLATE("DiSAN's diagonal-disabled mask (t != s): the strict forward and backward calls merged, and the "
                   "backward of the two parts summed, against the definition",
                   T, float, double) {
  const index_t n = 37, d = 6, dv = 5;
  lrpe::generator g(0x0B710'0009);
  const rm<T> q = random_matrix<T>(g, n, d, 1.5), k = random_matrix<T>(g, n, d, 1.5), v = random_matrix<T>(g, n, dv);
  const rm<T> gout = random_matrix<T>(g, n, dv);
  const auto qp = make_positions(n, 5, false, 0), kp = qp;
  const engine diagonal{false, 0, 0, 0, no_sink, false, true};  // the oracle reads exclude_self alone as t != s
  const rm<ld> want = oracle(to_ld(q), to_ld(k), to_ld(v), qp, kp, 1 / std::sqrt(ld(d)), diagonal, no_bias);
  for (const bool simd : {false, true}) {
    CAPTURE(simd);
    lrpe::softmax_options<> fwd, bwd;
    fwd.causal = bwd.anti_causal = true;
    fwd.exclude_self = bwd.exclude_self = true;
    fwd.q_positions = fwd.k_positions = bwd.q_positions = bwd.k_positions = lrpe::positions(5);
    rm<T> out(n, dv), part(n, dv);
    std::vector<T> lse(n), part_lse(n);
    const auto run = [&](const lrpe::softmax_options<>& o, rm<T>& x, std::vector<T>& l) {
      if (simd) lrpe::softmax_attention_lse(q, k, v, x, std::span<T>(l), lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
      else lrpe::softmax_attention_lse(q, k, v, x, std::span<T>(l), lrpe::no_encoding{}, o);
    };
    run(fwd, out, lse);
    run(bwd, part, part_lse);
    lrpe::merge_attention_states(out, std::span<T>(lse), part, std::span<const T>(part_lse));
    CHECK(attention_test::rel_error(out, want) <= softmax_vs_exact<T>());
    if constexpr (std::is_same_v<T, double>) {
      // each part's backward with the merged O and lse gives its share of dQ, dK, dV
      rm<T> dq = rm<T>::Zero(n, d), dk = rm<T>::Zero(n, d), dvv = rm<T>::Zero(n, dv);
      for (const auto* o : {&fwd, &bwd}) {
        rm<T> pq(n, d), pk(n, d), pv(n, dv);
        if (simd)
          lrpe::softmax_attention_backward(q, k, v, out, gout, std::span<const T>(lse), pq, pk, pv, lrpe::no_encoding{},
                                           *o, nullptr, lrpe::backend::simd<>{});
        else
          lrpe::softmax_attention_backward(q, k, v, out, gout, std::span<const T>(lse), pq, pk, pv, lrpe::no_encoding{},
                                           *o);
        dq += pq;
        dk += pk;
        dvv += pv;
      }
      std::vector<double> w;
      for (const auto* m : {&q, &k, &v})
        for (index_t i = 0; i < m->rows(); ++i)
          for (index_t j = 0; j < m->cols(); ++j) w.push_back((*m)(i, j));
      w.push_back(-1e300);  // no sink
      const loss_of loss{n, n, d, dv, qp, kp, diagonal, gout.template cast<ld>()};
      double worst = 0;
      std::size_t at = 0;
      for (const auto* m : {&dq, &dk, &dvv})
        for (index_t i = 0; i < m->rows(); ++i)
          for (index_t j = 0; j < m->cols(); ++j, ++at)
            if (at % 5 == 0)
              worst = std::max(worst, std::abs((*m)(i, j) - static_cast<double>(grad_test::derivative(w, at, 1e-4, loss))));
      CHECK(worst <= 1e-8);
    }
  }
  lrpe::softmax_options<> alone;
  alone.exclude_self = true;
  rm<T> out(n, dv);
  CHECK_THROWS_AS(lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, alone), lrpe::parameter_error);
}

TEST_CASE("cos_sin_kernel: the SIMD overload (vectorised over the frequencies) agrees with the default's exact "
          "angles to a few double ulps, at any position; append_kv's RoPE rows are the SIMD encoder's") {
  const std::vector<double> theta = lrpe::freq::rope(61, 5e5, 122);  // an odd count: a vector tail
  std::vector<double> c0(theta.size()), s0(theta.size()), c1(theta.size()), s1(theta.size());
  for (const position_t s : {position_t{0}, position_t{1}, position_t{-7}, position_t{123456789},
                             position_t{1} << 53, (position_t{1} << 62) + 3, std::numeric_limits<position_t>::min()}) {
    CAPTURE(s);
    lrpe::backend::cos_sin_kernel(lrpe::backend::reference{}, s, theta.data(), index_t(theta.size()), c0.data(), s0.data());
    lrpe::backend::cos_sin_kernel(lrpe::backend::simd<>{}, s, theta.data(), index_t(theta.size()), c1.data(), s1.data());
    double worst = 0;
    for (std::size_t k = 0; k < theta.size(); ++k)
      worst = std::max({worst, std::abs(c1[k] - c0[k]), std::abs(s1[k] - s0[k])});
    CHECK(worst <= 8 * std::numeric_limits<double>::epsilon());
  }
  // one token for 4 heads into a cache, on the SIMD tag: the rows the SIMD encoder writes
  const index_t heads = 4, d = 122;
  lrpe::generator g(0x0B710'000A);
  const lrpe::rope_neox<float> rope(d, 5e5);
  const rm<float> kn = random_matrix<float>(g, heads, d), vn = random_matrix<float>(g, heads, d);
  rm<float> kc(heads * 8, d), vc(heads * 8, d);
  lrpe::append_kv(lrpe::bnsh(kn.data(), 1, heads, 1, d), lrpe::bnsh(vn.data(), 1, heads, 1, d),
                  lrpe::bnsh(kc.data(), 1, heads, 8, d), lrpe::bnsh(vc.data(), 1, heads, 8, d), 5, rope, std::nullopt,
                  lrpe::backend::simd<>{});
  rm<float> want(heads, d);
  for (index_t h = 0; h < heads; ++h) {
    rm<float> row(1, d), out(1, d);
    row.row(0) = kn.row(h);
    lrpe::encode(lrpe::backend::simd<>{}, rope, lrpe::view(std::as_const(row)), lrpe::positions(5), lrpe::view(out));
    CHECK((rm<float>(kc.row(h * 8 + 5)) - out).cwiseAbs().maxCoeff() <= 4 * std::numeric_limits<float>::epsilon());
  }
}
