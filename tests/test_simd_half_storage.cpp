// SPDX-License-Identifier: MIT
// 16-bit storage (lrpe::half, lrpe::bfloat16) in softmax attention, on the reference and SIMD
// backends. Widening is exact, so a call on 16-bit K and V must equal, bit for bit, the same
// backend's float call on the widened values (the test widens with Eigen's casts, not the
// library's): the direct kernel (decode), the tiled kernel, split-KV on a pool, multi-head GQA,
// encoders and biases, the options, stored NaN/∞. Q and out in 16 bits: widened, and rounded
// once. Against the unrounded inputs: the stated error bound, checked with a long-double loop.
#include "attention_helpers.hpp"

#include <lrpe/simd.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

namespace {

using attention_test::ld;
using attention_test::random_matrix;
using attention_test::rm;
using lrpe::index_t;
using lrpe::position_t;

/// Bitwise equality of two float matrices (NaN equal to NaN).
bool same_bits(const rm<float>& a, const rm<float>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (index_t i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
  }
  return true;
}

template <class S>
rm<float> widened(const rm<S>& x) {
  return x.template cast<float>();
}

struct options_case {
  const char* name;
  bool causal;
  position_t window;
  double softcap;
  double sink;
};

const options_case option_cases[] = {
    {"plain", false, 0, 0, -std::numeric_limits<double>::infinity()},
    {"causal", true, 0, 0, -std::numeric_limits<double>::infinity()},
    {"causal window 40, softcap 5, sink 0.5", true, 40, 5.0, 0.5},
};

/// softmax_attention on (q, k, v) stored as S, against the same backend on the widened values.
template <class S, class Enc, class Backend>
void check_same_as_widened(const Enc& enc, index_t nq, index_t nk, index_t d, index_t dv, const options_case& oc,
                           std::uint64_t seed, Backend backend) {
  lrpe::generator g(seed);
  const rm<float> q = random_matrix<float>(g, nq, d);
  const rm<S> k = random_matrix<float>(g, nk, d).template cast<S>(), v = random_matrix<float>(g, nk, dv).template cast<S>();
  lrpe::softmax_options<> o;
  o.causal = oc.causal;
  o.window = oc.window;
  o.softcap = oc.softcap;
  o.sink = oc.sink;
  o.q_positions = nk - nq;
  rm<float> got(nq, dv), want(nq, dv);
  std::vector<float> lse_got(static_cast<std::size_t>(nq)), lse_want(static_cast<std::size_t>(nq));
  lrpe::softmax_attention_lse(q, k, v, got, std::span<float>(lse_got), enc, o, backend);
  lrpe::softmax_attention_lse(q, widened(k), widened(v), want, std::span<float>(lse_want), enc, o, backend);
  CAPTURE(oc.name);
  CAPTURE(nq);
  CAPTURE(nk);
  CAPTURE(d);
  CAPTURE(dv);
  CHECK(same_bits(got, want));
  for (std::size_t i = 0; i < lse_got.size(); ++i) CHECK(lse_got[i] == lse_want[i]);
}

template <class S>
void same_as_widened_everywhere() {
  const lrpe::backend::simd<> simd;
  const lrpe::backend::reference ref;
  std::uint64_t seed = 1;
  for (const auto& oc : option_cases) {
    // direct kernel rows (decode, short blocks) and tiled query blocks; widths that are and are
    // not a whole number of vectors
    for (const index_t nq : {1, 3, 4, 9, 70})
      for (const index_t nk : {0, 1, 50, 300})
        for (const auto [d, dv] : {std::pair<index_t, index_t>{8, 8}, {37, 5}, {64, 64}, {128, 40}}) {
          if (nq > nk && oc.causal && nk > 0) continue;
          check_same_as_widened<S>(lrpe::no_encoding{}, nq, nk, d, dv, oc, ++seed, simd);
        }
    check_same_as_widened<S>(lrpe::canonical::alibi<float>::for_heads(64, 8), 5, 200, 64, 64, oc, ++seed, simd);
    check_same_as_widened<S>(lrpe::canonical::alibi<float>::for_heads(64, 8), 80, 200, 64, 64, oc, ++seed, simd);
    check_same_as_widened<S>(lrpe::rope_neox<float>(64), 2, 150, 64, 48, oc, ++seed, simd);
    check_same_as_widened<S>(lrpe::rope_neox<float>(64), 90, 150, 64, 48, oc, ++seed, simd);
    // the reference widens K and V itself: the same bits as its float call
    check_same_as_widened<S>(lrpe::no_encoding{}, 7, 90, 24, 16, oc, ++seed, ref);
    check_same_as_widened<S>(lrpe::rope_gptj<float>(24), 7, 90, 24, 16, oc, ++seed, ref);
  }
}

TEST_CASE("16-bit K and V: the same bits as the float call on the widened values (SIMD and reference)") {
  SUBCASE("bfloat16") { same_as_widened_everywhere<lrpe::bfloat16>(); }
  SUBCASE("half") { same_as_widened_everywhere<lrpe::half>(); }
}

TEST_CASE("16-bit K and V: split-KV decode on a pool, and an encoding the SIMD kernel does not read (Shaw)") {
  lrpe::backend::simd_threads pool(2);
  const lrpe::backend::simd_policy<> on_pool{&pool};
  for (const auto& oc : option_cases) {
    check_same_as_widened<lrpe::bfloat16>(lrpe::no_encoding{}, 1, 3000, 64, 64, oc, 7, on_pool);
    check_same_as_widened<lrpe::half>(lrpe::no_encoding{}, 2, 2600, 128, 128, oc, 8, on_pool);
  }
  lrpe::generator g(3);
  const lrpe::canonical::shaw<float> shaw(16, 4, random_matrix<float>(g, 9, 16), random_matrix<float>(g, 9, 16));
  check_same_as_widened<lrpe::bfloat16>(shaw, 6, 40, 16, 16, option_cases[1], 9, lrpe::backend::simd<>{});
}

TEST_CASE("16-bit Q and out: Q widened, out rounded once from the float result") {
  lrpe::generator g(11);
  const index_t nq = 6, nk = 120, d = 32, dv = 24;
  const rm<lrpe::half> q = random_matrix<float>(g, nq, d).cast<lrpe::half>();
  const rm<lrpe::bfloat16> k = random_matrix<float>(g, nk, d).cast<lrpe::bfloat16>();
  const rm<lrpe::bfloat16> v = random_matrix<float>(g, nk, dv).cast<lrpe::bfloat16>();
  lrpe::softmax_options<> o;
  o.causal = true;
  o.q_positions = nk - nq;
  for (const bool simd : {false, true}) {
    rm<lrpe::bfloat16> out(nq, dv);
    rm<float> want(nq, dv);
    if (simd) {
      lrpe::softmax_attention(q, k, v, out, lrpe::rope_neox<float>(d), o, lrpe::backend::simd<>{});
      lrpe::softmax_attention(widened(q), widened(k), widened(v), want, lrpe::rope_neox<float>(d), o,
                              lrpe::backend::simd<>{});
    } else {
      lrpe::softmax_attention(q, k, v, out, lrpe::rope_neox<float>(d), o);
      lrpe::softmax_attention(widened(q), widened(k), widened(v), want, lrpe::rope_neox<float>(d), o);
    }
    const rm<lrpe::bfloat16> rounded = want.cast<lrpe::bfloat16>();
    CAPTURE(simd);
    for (index_t i = 0; i < out.size(); ++i)
      CHECK(Eigen::numext::bit_cast<std::uint16_t>(out.data()[i]) ==
            Eigen::numext::bit_cast<std::uint16_t>(rounded.data()[i]));
  }
}

TEST_CASE("16-bit K and V: NaN and infinity stored at hidden keys do not reach the rows") {
  // keys after the query (causal) hold ∞ and NaN in the same block as visible keys: their zero
  // weights must not multiply them (0·∞ = NaN); a visible NaN key does reach its rows
  const index_t nk = 40, d = 16, dv = 16;
  lrpe::generator g(5);
  const rm<float> q = random_matrix<float>(g, 2, d);
  rm<lrpe::bfloat16> k = random_matrix<float>(g, nk, d).cast<lrpe::bfloat16>();
  rm<lrpe::bfloat16> v = random_matrix<float>(g, nk, dv).cast<lrpe::bfloat16>();
  v(30, 3) = lrpe::bfloat16(std::numeric_limits<float>::infinity());
  v(31, 0) = lrpe::bfloat16(std::numeric_limits<float>::quiet_NaN());
  lrpe::softmax_options<> o;
  o.causal = true;
  o.q_positions = 20;
  rm<float> got(2, dv), want(2, dv);
  lrpe::softmax_attention(q, k, v, got, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  lrpe::softmax_attention(q, widened(k), widened(v), want, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  CHECK(got.allFinite());
  CHECK(same_bits(got, want));
  o.q_positions = 30;  // row 0 now sees key 30's ∞
  lrpe::softmax_attention(q, k, v, got, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  CHECK(!std::isfinite(got(0, 3)));
  CHECK(std::isfinite(got(0, 4)));
}

TEST_CASE("16-bit K and V (grouped-query decode, multi-head): the same bits as the widened call") {
  const index_t batch = 2, heads = 8, kv_heads = 2, n = 700, d = 64;
  lrpe::generator g(21);
  const rm<float> q = random_matrix<float>(g, batch * heads, d);
  const rm<lrpe::bfloat16> k = random_matrix<float>(g, batch * kv_heads * n, d).cast<lrpe::bfloat16>();
  const rm<lrpe::bfloat16> v = random_matrix<float>(g, batch * kv_heads * n, d).cast<lrpe::bfloat16>();
  const rm<float> kw = widened(k), vw = widened(v);
  rm<float> got(batch * heads, d), want(batch * heads, d);
  lrpe::softmax_options<> o;
  o.causal = true;
  o.q_positions = n - 1;
  o.window = 256;
  const auto qv = lrpe::bnsh(q.data(), batch, heads, 1, d);
  lrpe::softmax_attention(qv, lrpe::bnsh(k.data(), batch, kv_heads, n, d), lrpe::bnsh(v.data(), batch, kv_heads, n, d),
                          lrpe::bnsh(got.data(), batch, heads, 1, d), lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  lrpe::softmax_attention(qv, lrpe::bnsh(kw.data(), batch, kv_heads, n, d),
                          lrpe::bnsh(vw.data(), batch, kv_heads, n, d), lrpe::bnsh(want.data(), batch, heads, 1, d),
                          lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  CHECK(same_bits(got, want));
}

template <class S>
void append_kv_16bit_case() {
  const index_t batch = 2, heads = 3, d = 16, dv = 8, capacity = 12, m = 2, n_past = 5;
  lrpe::generator g(41);
  const rm<float> kn = random_matrix<float>(g, batch * heads * m, d), vn = random_matrix<float>(g, batch * heads * m, dv);
  const auto k_new = lrpe::bnsh(kn.data(), batch, heads, m, d);
  const auto v_new = lrpe::bnsh(vn.data(), batch, heads, m, dv);
  const lrpe::rope_neox<float> rope(d, 1e4);
  const lrpe::type1<float> t1(d);  // the generic path (lrpe::encode)
  const auto run = [&](const auto& enc, bool simd) {
    index_t f = d;
    if constexpr (!std::is_same_v<std::decay_t<decltype(enc)>, lrpe::no_encoding>) f = static_cast<index_t>(enc.feature_dim());
    rm<S> kc = rm<S>::Constant(batch * heads * capacity, f, S(7.0f)), vc = rm<S>::Constant(batch * heads * capacity, dv, S(7.0f));
    rm<float> kf = rm<float>::Constant(kc.rows(), f, 7.0f), vf = rm<float>::Constant(vc.rows(), dv, 7.0f);
    const auto k16 = lrpe::bsnh(kc.data(), batch, capacity, heads, f), v16 = lrpe::bsnh(vc.data(), batch, capacity, heads, dv);
    const auto k32 = lrpe::bsnh(kf.data(), batch, capacity, heads, f), v32 = lrpe::bsnh(vf.data(), batch, capacity, heads, dv);
    const auto& e = enc;
    if (simd) {
      lrpe::append_kv(k_new, v_new, k16, v16, n_past, e, std::nullopt, lrpe::backend::simd<>{});
      lrpe::append_kv(k_new, v_new, k32, v32, n_past, e, std::nullopt, lrpe::backend::simd<>{});
    } else {
      lrpe::append_kv(k_new, v_new, k16, v16, n_past, e);
      lrpe::append_kv(k_new, v_new, k32, v32, n_past, e);
    }
    const rm<S> k_want = kf.template cast<S>(), v_want = vf.template cast<S>();
    CAPTURE(simd);
    for (index_t i = 0; i < kc.size(); ++i)
      CHECK(Eigen::numext::bit_cast<std::uint16_t>(kc.data()[i]) == Eigen::numext::bit_cast<std::uint16_t>(k_want.data()[i]));
    for (index_t i = 0; i < vc.size(); ++i)
      CHECK(Eigen::numext::bit_cast<std::uint16_t>(vc.data()[i]) == Eigen::numext::bit_cast<std::uint16_t>(v_want.data()[i]));
  };
  for (const bool simd : {false, true}) {
    run(rope, simd);
    run(t1, simd);
    run(lrpe::no_encoding{}, simd);
  }
}

TEST_CASE("append_kv into a 16-bit cache: the float rows, rounded once as they are stored") {
  SUBCASE("bfloat16") { append_kv_16bit_case<lrpe::bfloat16>(); }
  SUBCASE("half") { append_kv_16bit_case<lrpe::half>(); }
}

/**
 * The bound docs/attention.md states for K and V rounded to S (unit roundoff u) from exact
 * values: each logit moves by at most δ = scale·max_s Σ_t-free Σ_c |q_sc|·|k_tc|·u, so each
 * probability by a factor within e^{±2δ}, and
 *     |o − o_exact| ≤ max|v|·(e^{2δ} − 1 + u)   (plus float's own rounding).
 */
template <class S>
void error_bound_case(double u) {
  lrpe::generator g(31);
  const index_t nq = 9, nk = 400, d = 64, dv = 32;
  const rm<float> q = random_matrix<float>(g, nq, d), k = random_matrix<float>(g, nk, d), v = random_matrix<float>(g, nk, dv);
  const double scale = 1.0 / std::sqrt(double(d));
  double delta = 0, vmax = 0;
  for (index_t s = 0; s < nq; ++s)
    for (index_t t = 0; t < nk; ++t) delta = std::max(delta, scale * u * double(q.row(s).cwiseAbs().dot(k.row(t).cwiseAbs())));
  for (index_t i = 0; i < v.size(); ++i) vmax = std::max(vmax, std::abs(double(v.data()[i])));
  const double bound = vmax * (std::exp(2 * delta) - 1 + u) + 1e-5 * vmax;
  // long double, unrounded inputs
  rm<ld> exact(nq, dv);
  for (index_t s = 0; s < nq; ++s) {
    std::vector<ld> x(static_cast<std::size_t>(nk));
    ld m = -std::numeric_limits<ld>::infinity(), den = 0;
    for (index_t t = 0; t < nk; ++t) {
      ld dot = 0;
      for (index_t c = 0; c < d; ++c) dot += ld(q(s, c)) * ld(k(t, c));
      x[static_cast<std::size_t>(t)] = ld(scale) * dot;
      m = std::max(m, x[static_cast<std::size_t>(t)]);
    }
    for (index_t c = 0; c < dv; ++c) exact(s, c) = 0;
    for (index_t t = 0; t < nk; ++t) {
      const ld w = std::exp(x[static_cast<std::size_t>(t)] - m);
      den += w;
      for (index_t c = 0; c < dv; ++c) exact(s, c) += w * ld(v(t, c));
    }
    for (index_t c = 0; c < dv; ++c) exact(s, c) /= den;
  }
  const rm<S> ks = k.cast<S>(), vs = v.cast<S>();
  for (const bool simd : {false, true}) {
    rm<float> got(nq, dv);
    if (simd) lrpe::softmax_attention(q, ks, vs, got, lrpe::no_encoding{}, {}, lrpe::backend::simd<>{});
    else lrpe::softmax_attention(q, ks, vs, got, lrpe::no_encoding{}, {});
    double worst = 0;
    for (index_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, double(std::abs(ld(got.data()[i]) - exact.data()[i])));
    CAPTURE(simd);
    CAPTURE(worst);
    CAPTURE(bound);
    CHECK(worst <= bound);
    CHECK(worst > 0);  // the rounding did reach the output (the inputs were rounded)
  }
}

TEST_CASE("16-bit K and V against long double on the unrounded inputs: within the stated bound") {
  SUBCASE("bfloat16, u = 2^-8") { error_bound_case<lrpe::bfloat16>(std::ldexp(1.0, -8)); }
  SUBCASE("half, u = 2^-11") { error_bound_case<lrpe::half>(std::ldexp(1.0, -11)); }
}

}  // namespace
