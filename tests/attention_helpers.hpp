// SPDX-License-Identifier: MIT
// Helpers shared by the attention tests: aliases, reproducible random matrices, a scale-free error
// against a long-double reference, and the tolerances, named by what is compared (one place, so
// that two files comparing the same things use the same bound).
#pragma once

#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace attention_test {

using lrpe::index_t;
using lrpe::position_t;

/// Softmax attention (any encoding, any kernel) against a long-double dense reference: exp and
/// the normalisation run in T.
template <class T>
constexpr double softmax_vs_exact() {
  return std::is_same_v<T, float> ? 2e-4 : 1e-11;
}

/// Linear attention against a long-double dense reference (no exp; sums of products in T).
template <class T>
constexpr double linear_vs_exact() {
  return std::is_same_v<T, float> ? 3e-5 : 1e-13;
}

/// Two of the library's kernels on the same problem (the SIMD backend against the reference
/// backend; a call split into streaming segments against one call): the same math summed in
/// another order.
template <class T>
constexpr double kernel_vs_kernel() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

template <class T>
using rm = lrpe::row_matrix<T>;
using ld = long double;

/// r×c matrix of N(0, σ²) entries from `g`.
template <class T>
rm<T> random_matrix(lrpe::generator& g, lrpe::index_t r, lrpe::index_t c, double sigma = 1.0) {
  rm<T> m(r, c);
  for (lrpe::index_t i = 0; i < r; ++i)
    for (lrpe::index_t j = 0; j < c; ++j) m(i, j) = static_cast<T>(sigma * g.normal());
  return m;
}

/// max |a − b| / (1 + max |b|) over all entries (scale-free; sums grow with n); ∞ if a has a
/// non-finite entry.
template <class T>
double rel_error(const rm<T>& a, const rm<ld>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  ld err = 0, mag = 0;
  for (lrpe::index_t i = 0; i < a.rows(); ++i)
    for (lrpe::index_t j = 0; j < a.cols(); ++j) {
      if (!std::isfinite(static_cast<double>(a(i, j)))) return INFINITY;
      err = std::max(err, std::abs(static_cast<ld>(a(i, j)) - b(i, j)));
      mag = std::max(mag, std::abs(b(i, j)));
    }
  return static_cast<double>(err / (1 + mag));
}

/**
 * A long decode with a decay close to 1, where float rounding of the decay factor would drift:
 * n rows of features (q, k) and values in [0.05, 1), so that every output is a positive sum,
 * and the exact outputs in long double by the recurrence S ← λ·S + k vᵀ, o_t = q_tᵀ S
 * (normalisation none, identity φ, positions 0..n−1).
 */
struct decay_drift_case {
  rm<float> q, k, v;
  rm<ld> exact;
};

inline decay_drift_case make_decay_drift_case(lrpe::index_t n, lrpe::index_t d, lrpe::index_t dv, double decay,
                                              std::uint64_t seed) {
  lrpe::generator g(seed);
  const auto fill = [&](lrpe::index_t c) {
    rm<float> m(n, c);
    for (lrpe::index_t i = 0; i < n; ++i)
      for (lrpe::index_t j = 0; j < c; ++j) m(i, j) = static_cast<float>(0.05 + 0.95 * g.uniform01());
    return m;
  };
  decay_drift_case c{fill(d), fill(d), fill(dv), rm<ld>(n, dv)};
  rm<ld> S = rm<ld>::Zero(d, dv);
  for (lrpe::index_t t = 0; t < n; ++t) {
    for (lrpe::index_t i = 0; i < d; ++i)
      for (lrpe::index_t j = 0; j < dv; ++j)
        S(i, j) = S(i, j) * static_cast<ld>(decay) + static_cast<ld>(c.k(t, i)) * static_cast<ld>(c.v(t, j));
    for (lrpe::index_t j = 0; j < dv; ++j) {
      ld o = 0;
      for (lrpe::index_t i = 0; i < d; ++i) o += static_cast<ld>(c.q(t, i)) * S(i, j);
      c.exact(t, j) = o;
    }
  }
  return c;
}

/// Calls f(encoder, name) for every LRPE preset at width d (as its encoder<P, Λ> base).
template <class T, class F>
void for_each_preset(lrpe::index_t d, F&& f) {
  auto base = [](const auto& e) -> const auto& {
    using E = std::remove_cvref_t<decltype(e)>;
    return static_cast<const lrpe::encoder<typename E::p_type, typename E::lambda_type>&>(e);
  };
  f(base(lrpe::type1<T>(d)), "type1");
  f(base(lrpe::type2<T>(d)), "type2");
  f(base(lrpe::type3<T>(d)), "type3");
  f(base(lrpe::type4<T>(d)), "type4");
  f(base(lrpe::type5<T>(d)), "type5");
  f(base(lrpe::type6<T>(d)), "type6");
  f(base(lrpe::type7<T>(d)), "type7");
  f(base(lrpe::type8<T>(d)), "type8");
  f(base(lrpe::rope_gptj<T>(d)), "rope_gptj");
  f(base(lrpe::rope_neox<T>(d)), "rope_neox");
  f(base(lrpe::permuteformer<T>(d)), "permuteformer");
}

/**
 * Multi-head causal linear attention with one state per (b, h) on `backend` (`encodings`: one
 * encoder, or a callable h -> head h's encoder): a prefill segment
 * of `prompt` tokens, then one-token decode steps, over [batch, seq, heads, d] memory (BSNH
 * views of one step: seq = 1) with per-head decays. Checks every state's count and last
 * position, and returns the worst scale-free difference, max |a − b| / (1 + max |b|), of the
 * outputs against one stateless multi-head reference call over the whole sequence and of every
 * state (S, z) against the state a single-head reference call leaves.
 */
template <class T, class Encodings, class Backend>
double multihead_state_error(const Encodings& encodings, const Backend& backend, lrpe::index_t batch,
                             lrpe::index_t heads, lrpe::index_t d, lrpe::index_t prompt, lrpe::index_t steps,
                             std::uint64_t seed) {
  using lrpe::index_t;
  // one encoder for every head, or a callable h -> the head's encoder
  const auto enc_of = [&](index_t h) {
    if constexpr (std::is_invocable_v<const Encodings&, index_t>) return encodings(h);
    else return encodings;
  };
  const index_t n = prompt + steps, row = heads * d;
  lrpe::generator g(seed);
  std::vector<T> q(static_cast<std::size_t>(batch * n * row)), k(q.size()), v(q.size()), want(q.size()), got(q.size());
  for (auto* buf : {&q, &k, &v})
    for (auto& x : *buf) x = static_cast<T>(0.5 * g.normal());
  std::vector<double> decays(static_cast<std::size_t>(heads));
  for (index_t h = 0; h < heads; ++h) decays[static_cast<std::size_t>(h)] = 1.0 - 0.05 * static_cast<double>(h);
  const lrpe::feature_maps::elu_plus_one phi;
  // rows [s0, s0 + m) of every (b, h), BSNH in a buffer of n tokens
  const auto rows = [&](std::vector<T>& buf, index_t s0, index_t m) {
    return lrpe::heads_view<T>{buf.data() + s0 * row, batch, heads, m, d, n * row, d, row};
  };
  const auto in = [&](std::vector<T>& buf, index_t s0, index_t m) {
    return lrpe::heads_view<const T>(rows(buf, s0, m));
  };
  lrpe::linear_attention(in(q, 0, n), in(k, 0, n), in(v, 0, n), rows(want, 0, n), encodings, phi,
                         lrpe::linear_options{.causal = true, .head_decays = decays});
  std::vector<lrpe::linear_attention_state<T>> states;
  for (index_t b = 0; b < batch; ++b)
    for (index_t h = 0; h < heads; ++h)
      states.emplace_back(enc_of(h).feature_dim(), d, decays[static_cast<std::size_t>(h)]);
  lrpe::linear_attention(in(q, 0, prompt), in(k, 0, prompt), in(v, 0, prompt), rows(got, 0, prompt), encodings, phi,
                         states, lrpe::linear_options{.causal = true, .head_decays = decays}, backend);
  for (index_t t = prompt; t < n; ++t)
    lrpe::linear_attention(in(q, t, 1), in(k, t, 1), in(v, t, 1), rows(got, t, 1), encodings, phi, states,
                           lrpe::linear_options{.causal = true, .q_positions = t, .k_positions = t,
                                                .head_decays = decays},
                           backend);
  // scale-free: max |a − b| / (1 + max |b|) per quantity (S and z grow with n)
  const auto scaled = [](double err, double mag) { return err / (1 + mag); };
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(got[i] - want[i])));
    mag = std::max(mag, static_cast<double>(std::abs(want[i])));
  }
  double worst = scaled(err, mag);
  for (index_t b = 0; b < batch; ++b)
    for (index_t h = 0; h < heads; ++h) {
      const auto& st = states[static_cast<std::size_t>(b * heads + h)];
      CHECK(st.count() == n);
      CHECK(st.last_position() == n - 1);
      const auto head_enc = enc_of(h);
      lrpe::linear_attention_state<T> ref(head_enc.feature_dim(), d, decays[static_cast<std::size_t>(h)]);
      rm<T> o(n, d);
      lrpe::linear_attention(in(q, 0, n).head(b, h), in(k, 0, n).head(b, h), in(v, 0, n).head(b, h), o, head_enc, phi,
                             ref, lrpe::linear_options{.causal = true, .decay = decays[static_cast<std::size_t>(h)]});
      worst = std::max(worst, scaled(static_cast<double>((st.kv() - ref.kv()).cwiseAbs().maxCoeff()),
                                     static_cast<double>(ref.kv().cwiseAbs().maxCoeff())));
      worst = std::max(worst, scaled(static_cast<double>((st.k_sum() - ref.k_sum()).cwiseAbs().maxCoeff()),
                                     static_cast<double>(ref.k_sum().cwiseAbs().maxCoeff())));
    }
  return worst;
}

/**
 * Grouped-query attention against its definition, K and V repeated to every query head (HF's
 * `repeat_kv`: K/V head h / group serves query head h). `run(q, k, v, out)` (heads_views) is
 * called twice on the same random data: with K and V of H / group heads, then with them
 * repeated to H heads. Returns max |a − b| over the two outputs (∞ if an entry is not finite):
 * 0 expected, each query head doing the same arithmetic on the same values.
 */
template <class T, class Run>
double gqa_vs_repeated_kv(std::uint64_t seed, lrpe::index_t batch, lrpe::index_t heads, lrpe::index_t group,
                          lrpe::index_t n, lrpe::index_t d, bool bsnh, Run&& run) {
  using lrpe::index_t;
  REQUIRE(heads % group == 0);
  const index_t kv_heads = heads / group;
  lrpe::generator g(seed);
  std::vector<T> q(static_cast<std::size_t>(batch * heads * n * d)), k(static_cast<std::size_t>(batch * kv_heads * n * d)),
      v(k.size());
  for (auto* buf : {&q, &k, &v})
    for (auto& x : *buf) x = static_cast<T>(0.7 * g.normal());
  const auto view = [&](std::vector<T>& buf, index_t h) {
    return bsnh ? lrpe::bsnh(buf.data(), batch, n, h, d) : lrpe::bnsh(buf.data(), batch, h, n, d);
  };
  std::vector<T> k_rep(q.size()), v_rep(q.size());
  for (index_t b = 0; b < batch; ++b)
    for (index_t h = 0; h < heads; ++h)
      for (index_t s = 0; s < n; ++s)
        for (index_t i = 0; i < d; ++i) {
          view(k_rep, heads).head(b, h).row(s)[i] = view(k, kv_heads).head(b, h / group).row(s)[i];
          view(v_rep, heads).head(b, h).row(s)[i] = view(v, kv_heads).head(b, h / group).row(s)[i];
        }
  std::vector<T> out(q.size(), T(NAN)), out_rep(q.size(), T(NAN));
  run(view(q, heads), view(k, kv_heads), view(v, kv_heads), view(out, heads));
  run(view(q, heads), view(k_rep, heads), view(v_rep, heads), view(out_rep, heads));
  double worst = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(static_cast<double>(out[i])) || !std::isfinite(static_cast<double>(out_rep[i]))) return INFINITY;
    worst = std::max(worst, static_cast<double>(std::abs(out[i] - out_rep[i])));
  }
  return worst;
}

}  // namespace attention_test
