// SPDX-License-Identifier: MIT
// Linear attention: every LRPE preset against the quadratic form of paper Eq. 39
// (Σ_t λ^{s−t} φ(q_s)ᵀ W_{t−s} φ(k_t) v_t with dense W_{t−s} from relative_matrix, long double),
// causal and not, with and without decay; chunked causal against a per-step recurrence for
// chunk sizes 1, 7, 64, n; feature maps; long decayed sequences; multi-head views; errors.
#include <lrpe/lrpe.hpp>

#include "attention_helpers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

using attention_test::linear_vs_exact;
using attention_test::for_each_preset;
using attention_test::random_matrix;
using attention_test::rel_error;

using lrpe::index_t;
using lrpe::position_t;
template <class T>
using rm = lrpe::row_matrix<T>;
using ld = long double;

template <class T, class Phi>
rm<T> apply_phi(const rm<T>& x, const Phi& phi) {
  rm<T> y(x.rows(), x.cols());
  for (index_t i = 0; i < x.rows(); ++i)
    for (index_t j = 0; j < x.cols(); ++j) y(i, j) = static_cast<T>(phi(x(i, j)));
  return y;
}

/**
 * Paper Eq. 39, quadratic and independent of the library's features: with a = φ(q), b = φ(k),
 * num_s = Σ_{t visible} λ^{p_s − p_t} Re(a_sᴴ W_{p_t − p_s} b_t) v_t, den_s likewise without v.
 */
template <class T, class Enc, class Phi>
rm<ld> quadratic(const Enc& enc, const Phi& phi, const rm<T>& q, const rm<T>& k, const rm<T>& v,
                 const lrpe::linear_options& o) {
  const rm<T> a = apply_phi(q, phi), b = apply_phi(k, phi);
  std::map<position_t, lrpe::dense_matrix<std::complex<ld>>> cache;
  rm<ld> out = rm<ld>::Zero(q.rows(), v.cols());
  for (index_t i = 0; i < q.rows(); ++i) {
    ld den = 0;
    for (index_t j = 0; j < k.rows(); ++j) {
      const position_t s = o.q_positions[i], t = o.k_positions[j];
      if (o.causal && t > s) continue;
      auto it = cache.find(t - s);
      if (it == cache.end()) it = cache.emplace(t - s, enc.relative_matrix(t - s).template cast<std::complex<ld>>()).first;
      ld score = 0;
      for (index_t r = 0; r < q.cols(); ++r)
        for (index_t c = 0; c < q.cols(); ++c) score += static_cast<ld>(a(i, r)) * it->second(r, c).real() * static_cast<ld>(b(j, c));
      if (o.decay != 1.0) score *= std::pow(static_cast<ld>(o.decay), static_cast<ld>(s - t));
      den += score;
      for (index_t e = 0; e < v.cols(); ++e) out(i, e) += score * static_cast<ld>(v(j, e));
    }
    if (o.norm == lrpe::normalisation::denominator) out.row(i) /= std::max(den, static_cast<ld>(o.eps));
  }
  return out;
}

/// Per-step recurrence in long double on the encoder's features: S ← λ^{Δ} S + k̃ vᵀ per key.
template <class T, class Enc, class Phi>
rm<ld> recurrence(const Enc& enc, const Phi& phi, const rm<T>& q, const rm<T>& k, const rm<T>& v,
                  const lrpe::linear_options& o) {
  const index_t f = enc.feature_dim();
  const rm<T> a = apply_phi(q, phi), b = apply_phi(k, phi);
  rm<ld> S = rm<ld>::Zero(f, v.cols());
  Eigen::Matrix<ld, Eigen::Dynamic, 1> z = Eigen::Matrix<ld, Eigen::Dynamic, 1>::Zero(f);
  std::vector<T> feat(static_cast<std::size_t>(f));
  rm<ld> out(q.rows(), v.cols());
  index_t j = 0;
  position_t last = 0;
  for (index_t i = 0; i < q.rows(); ++i) {
    const position_t s = o.q_positions[i];
    for (; j < k.rows() && o.k_positions[j] <= s; ++j) {
      const position_t t = o.k_positions[j];
      const ld w = j == 0 ? 1 : std::pow(static_cast<ld>(o.decay), static_cast<ld>(t - last));
      S *= w;
      z *= w;
      enc.encode_features(t, b.row(j).data(), feat.data());
      for (index_t r = 0; r < f; ++r) {
        z[r] += feat[static_cast<std::size_t>(r)];
        for (index_t e = 0; e < v.cols(); ++e) S(r, e) += static_cast<ld>(feat[static_cast<std::size_t>(r)]) * static_cast<ld>(v(j, e));
      }
      last = t;
    }
    enc.encode_features(s, a.row(i).data(), feat.data());
    const ld w = j == 0 ? 0 : std::pow(static_cast<ld>(o.decay), static_cast<ld>(s - last));
    ld den = 0;
    for (index_t e = 0; e < v.cols(); ++e) out(i, e) = 0;
    for (index_t r = 0; r < f; ++r) {
      const ld qr = w * feat[static_cast<std::size_t>(r)];
      den += qr * z[r];
      for (index_t e = 0; e < v.cols(); ++e) out(i, e) += qr * S(r, e);
    }
    if (o.norm == lrpe::normalisation::denominator) out.row(i) /= std::max(den, static_cast<ld>(o.eps));
  }
  return out;
}


}  // namespace

TEST_CASE_TEMPLATE("linear: every LRPE preset equals the quadratic form (Eq. 39), causal or not, decay or not", T, float, double) {
  const std::uint64_t seed = 0x11AE'0001;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t d = 8, dv = 3;
  const std::vector<position_t> packed{3, 3, 4, 7, 8, 8, 9, 12, 13, 14, 20, 21, 22};  // gaps and repeats
  for_each_preset<T>(d, [&](const auto& enc, const char* name) {
    CAPTURE(name);
    for (int variant = 0; variant < 6; ++variant) {
      CAPTURE(variant);
      lrpe::linear_options o;
      o.causal = variant != 0;
      o.decay = variant >= 2 ? 0.9 : 1.0;
      o.chunk = variant == 3 ? 4 : 5;
      index_t nq = 1 + static_cast<index_t>(g.below(24)), nk = nq;
      if (variant == 3) {  // queries at offset n_past over a longer key sequence (positions ≠ rows)
        nk = nq + 6;
        o.q_positions = 1006;
        o.k_positions = 1000;
      } else if (variant == 4) {
        nq = nk = static_cast<index_t>(packed.size());
        o.q_positions = packed;
        o.k_positions = packed;
      } else if (variant == 5) {
        o.q_positions = -7;  // negative positions
        o.k_positions = -7;
      }
      const rm<T> q = random_matrix<T>(g, nq, d), k = random_matrix<T>(g, nk, d), v = random_matrix<T>(g, nk, dv);
      rm<T> out(nq, dv);
      const lrpe::feature_maps::elu_plus_one phi;
      lrpe::linear_attention(q, k, v, out, enc, phi, o);
      CHECK(rel_error(out, quadratic(enc, phi, q, k, v, o)) <= linear_vs_exact<T>());
    }
  });
}

TEST_CASE_TEMPLATE("linear: denominator normalisation, feature maps and no encoding", T, float, double) {
  const std::uint64_t seed = 0x11AE'0002;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t n = 19, d = 6;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const lrpe::rope_gptj<T> rope(d);
  rm<T> out(n, d);
  for (bool causal : {false, true}) {
    lrpe::linear_options o{.causal = causal, .norm = lrpe::normalisation::denominator, .chunk = 4};
    // with no encoding φ = 1 + elu > 0 keeps every denominator positive
    struct no_w {
      index_t d;
      lrpe::dense_matrix<std::complex<double>> relative_matrix(position_t) const {
        return lrpe::dense_matrix<std::complex<double>>::Identity(d, d);
      }
    } identity_w{d};
    lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, o);
    CHECK(rel_error(out, quadratic(identity_w, lrpe::feature_maps::elu_plus_one{}, q, k, v, o)) <= linear_vs_exact<T>());
    // a tiny eps, where LRPE denominators may be ≤ 0: max(den, eps) exactly as documented
    o.eps = 1e-2;
    lrpe::linear_attention(q, k, v, out, rope, lrpe::feature_maps::relu{}, o);
    CHECK(rel_error(out, quadratic(rope, lrpe::feature_maps::relu{}, q, k, v, o)) <= linear_vs_exact<T>());
    lrpe::linear_attention(q, k, v, out, rope, lrpe::feature_maps::relu_eps{1e-3}, o);
    CHECK(rel_error(out, quadratic(rope, lrpe::feature_maps::relu_eps{1e-3}, q, k, v, o)) <= linear_vs_exact<T>());
    o.norm = lrpe::normalisation::none;
    lrpe::linear_attention(q, k, v, out, rope, lrpe::feature_maps::identity{}, o);
    CHECK(rel_error(out, quadratic(rope, lrpe::feature_maps::identity{}, q, k, v, o)) <= linear_vs_exact<T>());
    // user maps: a lambda, and a row-wise map
    auto square = [](T x) { return x * x; };
    lrpe::linear_attention(q, k, v, out, rope, square, o);
    CHECK(rel_error(out, quadratic(rope, square, q, k, v, o)) <= linear_vs_exact<T>());
    struct rowwise {
      void apply(const T* x, T* y, index_t dd) const {
        for (index_t i = 0; i < dd; ++i) y[i] = x[i] * x[i];
      }
    };
    rm<T> out2(n, d);
    lrpe::linear_attention(q, k, v, out2, rope, rowwise{}, o);
    CHECK(out2 == out);
  }
  // the feature maps themselves
  CHECK(lrpe::feature_maps::elu_plus_one{}(T(-1)) == doctest::Approx(std::exp(-1.0)));
  CHECK(lrpe::feature_maps::elu_plus_one{}(T(2)) == T(3));
  CHECK(lrpe::feature_maps::relu{}(T(-2)) == T(0));
  CHECK(lrpe::feature_maps::relu_eps{}(T(-2)) == doctest::Approx(1e-3));
  CHECK(lrpe::feature_maps::identity{}(T(-2)) == T(-2));
}

TEST_CASE_TEMPLATE("linear: chunked causal equals the per-step recurrence for chunk 1, 7, 64, n", T, float, double) {
  const std::uint64_t seed = 0x11AE'0003;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t n = 150, d = 8, dv = 4;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const lrpe::type8<T> t8(d);
  const lrpe::type4<T> t4(d);
  for (double decay : {1.0, 0.95}) {
    for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
      lrpe::linear_options o{.causal = true, .norm = norm, .decay = decay, .q_positions = 40, .k_positions = 40};
      const auto ref8 = recurrence(t8, lrpe::feature_maps::elu_plus_one{}, q, k, v, o);
      const auto ref4 = recurrence(t4, lrpe::feature_maps::relu_eps{}, q, k, v, o);
      for (index_t chunk : {index_t{1}, index_t{7}, index_t{64}, n}) {
        CAPTURE(chunk);
        CAPTURE(decay);
        o.chunk = chunk;
        rm<T> out(n, dv);
        lrpe::linear_attention(q, k, v, out, t8, lrpe::feature_maps::elu_plus_one{}, o);
        // denominators of LRPE features can be tiny: compare the un-normalised case tightly
        const double tol = norm == lrpe::normalisation::none ? linear_vs_exact<T>() : (std::is_same_v<T, float> ? 1e-2 : 1e-9);
        CHECK(rel_error(out, ref8) <= tol);
        lrpe::linear_attention(q, k, v, out, t4, lrpe::feature_maps::relu_eps{}, o);
        CHECK(rel_error(out, ref4) <= tol);
      }
    }
  }
}

TEST_CASE("linear: long decayed sequences never overflow (no lambda^-t)") {
  // PermuteFormer's head-0 decay r = sigmoid(2) ≈ 0.881: r^{−t} overflows float32 near t ≈ 699
  const index_t n = 3000, d = 8, dv = 2;
  lrpe::generator g(0x11AE'0004);
  const rm<float> q = random_matrix<float>(g, n, d), k = random_matrix<float>(g, n, d), v = random_matrix<float>(g, n, dv);
  const double r = 1.0 / (1.0 + std::exp(-2.0));
  const lrpe::permuteformer<float> pf(d);
  const lrpe::permuteformer<double> pfd(d);
  lrpe::linear_options o{.causal = true, .chunk = 64, .decay = r, .q_positions = 1'000'000, .k_positions = 1'000'000};
  rm<float> out(n, dv);
  lrpe::linear_attention(q, k, v, out, pf, lrpe::feature_maps::relu_eps{}, o);
  CHECK(out.allFinite());
  rm<double> outd(n, dv);
  lrpe::linear_attention(rm<double>(q.cast<double>()), rm<double>(k.cast<double>()), rm<double>(v.cast<double>()), outd,
                         pfd, lrpe::feature_maps::relu_eps{}, o);
  CHECK((out.cast<double>() - outd).cwiseAbs().maxCoeff() <= 1e-4 * (1 + outd.cwiseAbs().maxCoeff()));
  // the last row only sees recent keys: compare with a direct window of 200 keys
  double direct = 0;
  for (index_t t = n - 200; t < n; ++t) {
    double score = 0;
    std::vector<double> a(d), b(d);
    for (index_t i = 0; i < d; ++i) {
      a[i] = lrpe::feature_maps::relu_eps{}(static_cast<double>(q(n - 1, i)));
      b[i] = lrpe::feature_maps::relu_eps{}(static_cast<double>(k(t, i)));
    }
    std::vector<double> fa(d), fb(d);
    pfd.encode_features(1'000'000 + n - 1, a.data(), fa.data());
    pfd.encode_features(1'000'000 + t, b.data(), fb.data());
    for (index_t i = 0; i < d; ++i) score += fa[i] * fb[i];
    direct += std::pow(r, static_cast<double>(n - 1 - t)) * score * static_cast<double>(v(t, 0));
  }
  CHECK(outd(n - 1, 0) == doctest::Approx(direct).epsilon(1e-9));
}

TEST_CASE_TEMPLATE("linear: BNSH and BSNH views with per-head decay equal contiguous per-head calls", T, float, double) {
  const std::uint64_t seed = 0x11AE'0005;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t B = 2, H = 3, N = 17, D = 8;
  std::vector<T> qb(B * H * N * D), kb(qb.size()), vb(qb.size());
  for (auto* buf : {&qb, &kb, &vb})
    for (auto& x : *buf) x = static_cast<T>(g.normal());
  const std::vector<double> decays{1.0, 0.9, 0.5};
  auto enc_of = [](index_t h) { return lrpe::type1<T>(D, 100 + static_cast<std::uint64_t>(h)); };
  for (bool bsnh : {false, true}) {
    CAPTURE(bsnh);
    auto make = [&](T* p) { return bsnh ? lrpe::bsnh(p, B, N, H, D) : lrpe::bnsh(p, B, H, N, D); };
    std::vector<T> ob(qb.size(), T(0));
    lrpe::linear_options o{.causal = true, .chunk = 5, .head_decays = decays};
    lrpe::linear_attention(make(qb.data()), make(kb.data()), make(vb.data()), make(ob.data()), enc_of,
                           lrpe::feature_maps::elu_plus_one{}, o);
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h) {
        rm<T> q(N, D), k(N, D), v(N, D), out(N, D);
        auto at = [&](index_t s, index_t i) { return bsnh ? ((b * N + s) * H + h) * D + i : ((b * H + h) * N + s) * D + i; };
        for (index_t s = 0; s < N; ++s)
          for (index_t i = 0; i < D; ++i) {
            q(s, i) = qb[at(s, i)];
            k(s, i) = kb[at(s, i)];
            v(s, i) = vb[at(s, i)];
          }
        lrpe::linear_options oh{.causal = true, .chunk = 5, .decay = decays[static_cast<std::size_t>(h)]};
        lrpe::linear_attention(q, k, v, out, enc_of(h), lrpe::feature_maps::elu_plus_one{}, oh);
        bool same = true;
        for (index_t s = 0; s < N; ++s)
          for (index_t i = 0; i < D; ++i) same = same && ob[at(s, i)] == out(s, i);
        CHECK(same);
      }
  }
}

TEST_CASE_TEMPLATE("linear: multi-head segments with one state per (b, h): prefill then decode steps == one call", T,
                   float, double) {
  // Batch 2 × 3 heads, per-head decays, a 9-token prefill then 6 one-token steps (BSNH views of
  // one token); Type 1 (a Householder P), RoPE, and per-head encodings (RoPE of base 10⁴·(h+1)).
  using lrpe::backend::reference;
  CHECK(attention_test::multihead_state_error<T>(lrpe::type1<T>(8), reference{}, 2, 3, 8, 9, 6, 0x11AE'0007) <=
        linear_vs_exact<T>());
  CHECK(attention_test::multihead_state_error<T>(lrpe::rope_neox<T>(8), reference{}, 2, 3, 8, 9, 6, 0x11AE'0008) <=
        linear_vs_exact<T>());
  const auto per_head = [](index_t h) { return lrpe::rope_neox<T>(8, 1e4 * static_cast<double>(h + 1)); };
  CHECK(attention_test::multihead_state_error<T>(per_head, reference{}, 2, 3, 8, 9, 6, 0x11AE'0009) <= linear_vs_exact<T>());
}

/// Rows [s0, s0 + m) of every (b, h) of a multi-head view.
template <class T>
lrpe::heads_view<T> seq_rows(lrpe::heads_view<T> x, index_t s0, index_t m) {
  x.data += s0 * x.seq_stride;
  x.seq = m;
  return x;
}

TEST_CASE_TEMPLATE("linear: grouped-query attention equals K and V repeated to every head (repeat_kv)", T, float,
                   double) {
  // 6 query heads over 3, 2 or 1 K/V heads; per-head encodings and decays; non-causal, causal,
  // and with one state per query head: a prefill, then one-token decode steps
  const index_t B = 2, H = 6, N = 14, D = 8, prompt = 9;
  const auto enc_of = [](index_t h) { return lrpe::type1<T>(D, 40 + static_cast<std::uint64_t>(h)); };
  std::vector<double> decays(static_cast<std::size_t>(H));
  for (index_t h = 0; h < H; ++h) decays[static_cast<std::size_t>(h)] = 1.0 - 0.07 * static_cast<double>(h);
  const lrpe::feature_maps::elu_plus_one phi;
  for (const index_t group : {index_t{2}, index_t{3}, index_t{6}})
    for (const bool bsnh : {false, true}) {
      CAPTURE(group);
      CAPTURE(bsnh);
      CHECK(attention_test::gqa_vs_repeated_kv<T>(0x11AE'000A, B, H, group, N, D, bsnh, [&](auto q, auto k, auto v, auto o) {
              lrpe::linear_attention(q, k, v, o, enc_of, phi, lrpe::linear_options{.norm = lrpe::normalisation::denominator});
            }) == 0);
      CHECK(attention_test::gqa_vs_repeated_kv<T>(0x11AE'000B, B, H, group, N, D, bsnh, [&](auto q, auto k, auto v, auto o) {
              lrpe::linear_attention(q, k, v, o, enc_of, phi, lrpe::linear_options{.causal = true, .chunk = 4, .head_decays = decays});
            }) == 0);
      CHECK(attention_test::gqa_vs_repeated_kv<T>(0x11AE'000C, B, H, group, N, D, bsnh, [&](auto q, auto k, auto v, auto o) {
              std::vector<lrpe::linear_attention_state<T>> states;
              for (index_t b = 0; b < B; ++b)
                for (index_t h = 0; h < H; ++h) states.emplace_back(D, D, decays[static_cast<std::size_t>(h)]);
              lrpe::linear_attention(seq_rows(q, 0, prompt), seq_rows(k, 0, prompt), seq_rows(v, 0, prompt),
                                     seq_rows(o, 0, prompt), enc_of, phi, states,
                                     lrpe::linear_options{.causal = true, .head_decays = decays});
              for (index_t t = prompt; t < N; ++t)
                lrpe::linear_attention(seq_rows(q, t, 1), seq_rows(k, t, 1), seq_rows(v, t, 1), seq_rows(o, t, 1), enc_of,
                                       phi, states,
                                       lrpe::linear_options{.causal = true, .q_positions = t, .k_positions = t,
                                                            .head_decays = decays});
            }) == 0);
    }
}

TEST_CASE("linear: multi-head segments with states: errors name the argument and leave every state as it was") {
  using T = double;
  std::vector<T> buf(2 * 3 * 4 * 8, 0.5), obuf(buf.size());
  const auto x = lrpe::bnsh<const T>(buf.data(), 2, 3, 4, 8);
  const auto o = lrpe::bnsh(obuf.data(), 2, 3, 4, 8);
  const lrpe::rope_neox<T> enc(8);
  const lrpe::feature_maps::elu_plus_one phi;
  const std::string where = "lrpe::linear_attention (multi-head): argument ";
  std::vector<lrpe::linear_attention_state<T>> five(5, lrpe::linear_attention_state<T>(8, 8, 1.0));
  {  // a head's decay < 1 without causal: named as that head's, before any head writes out
    const std::vector<double> decays{1.0, 0.5, 1.0};
    std::fill(obuf.begin(), obuf.end(), T(-7));
    CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, enc, phi, lrpe::linear_options{.head_decays = decays}),
                         doctest::Contains("'options.head_decays[h]' must be 1 unless options.causal"),
                         lrpe::parameter_error);
    CHECK(std::all_of(obuf.begin(), obuf.end(), [](T y) { return y == T(-7); }));
  }
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, enc, phi, five, lrpe::linear_options{.causal = true}),
                       (where + "'states.size()' must equal batch x heads = 6 (state b*heads + h for head (b, h)); "
                                "got 5").c_str(),
                       lrpe::shape_error);
  // Six states, advanced by one segment at positions 10 … 13.
  std::vector<lrpe::linear_attention_state<T>> six(6, lrpe::linear_attention_state<T>(8, 8, 1.0));
  lrpe::linear_attention(x, x, x, o, enc, phi, six, lrpe::linear_options{.causal = true, .q_positions = 10,
                                                                          .k_positions = 10});
  const auto untouched = [&] {
    for (const auto& st : six) {
      CHECK(st.count() == 4);
      CHECK(st.last_position() == 13);
    }
  };
  untouched();
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, enc, phi, six, lrpe::linear_options{.q_positions = 14,
                                                                                              .k_positions = 14}),
                       (where + "'options.causal' must be true when states are given; got false").c_str(),
                       lrpe::parameter_error);
  // A decay that is not the head's: head 1 of batch entry 0 is state 1; heads 0 and 2 would run.
  const std::vector<double> decays{1.0, 0.9, 1.0};
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, enc, phi, six,
                                              lrpe::linear_options{.causal = true, .q_positions = 14, .k_positions = 14,
                                                                   .head_decays = decays}),
                       (where + "'states' [1] (head b = 0, h = 1) must have decay() = options.head_decays[h] = 0.9; "
                                "got 1").c_str(),
                       lrpe::parameter_error);
  untouched();
  // A segment that starts before the states' last position.
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, enc, phi, six,
                                              lrpe::linear_options{.causal = true, .q_positions = 12, .k_positions = 12}),
                       (where + "'options.q_positions[0]' must be >= states[0].last_position() = 13; got 12").c_str(),
                       lrpe::parameter_error);
  untouched();
  // options.decay itself: a domain_error naming it, not a mismatch with the states' decays.
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, enc, phi, six,
                                              lrpe::linear_options{.causal = true, .decay = NAN, .q_positions = 14,
                                                                   .k_positions = 14}),
                       doctest::Contains((where + "'options.decay' must be in (0, 1]").c_str()), lrpe::domain_error);
  untouched();
  // Per-head encoders: head 2's is 4 wide (its 8 features fit its state, its dim does not fit
  // q's 8). Caught before head 0 runs: every state stays empty.
  using cosine = lrpe::encoder<lrpe::p::identity<T>, lrpe::lambda::complex_phase<T>>;
  const auto cosine_of = [](lrpe::index_t h) {
    const lrpe::index_t dh = h == 2 ? 4 : 8;
    return cosine(lrpe::p::identity<T>(dh), lrpe::lambda::complex_phase<T>(dh));
  };
  std::vector<lrpe::linear_attention_state<T>> per_head;
  for (lrpe::index_t i = 0; i < 6; ++i) per_head.emplace_back(cosine_of(i % 3).feature_dim(), 8, 1.0);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, cosine_of, phi, per_head, lrpe::linear_options{.causal = true}),
                       (where + "'encoding.dim()' must equal q.cols = 8; got 4").c_str(), lrpe::shape_error);
  for (const auto& st : per_head) CHECK(st.empty());
  // Widths: state 4 (head b = 1, h = 1) of another feature width.
  std::vector<lrpe::linear_attention_state<T>> wide(6, lrpe::linear_attention_state<T>(8, 8, 1.0));
  wide[4] = lrpe::linear_attention_state<T>(16, 8, 1.0);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, enc, phi, wide, lrpe::linear_options{.causal = true}),
                       (where + "'states' [4] (head b = 1, h = 1) must be 8x8 (the head's feature_dim x v.dim); "
                                "got 16x8").c_str(),
                       lrpe::shape_error);
  for (const auto& st : wide) CHECK(st.empty());
}

TEST_CASE("linear: errors name the argument; empty sequences") {
  using T = double;
  const rm<T> q = rm<T>::Ones(4, 8), k = rm<T>::Ones(5, 8), v = rm<T>::Ones(5, 3);
  rm<T> out(4, 3);
  const lrpe::type1<T> enc(8);
  const lrpe::feature_maps::elu_plus_one phi;
  using lrpe::linear_options;
  CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, enc, phi));
  const rm<T> q6 = rm<T>::Ones(4, 6), k6 = rm<T>::Ones(5, 6);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q6, k6, v, out, enc, phi), doctest::Contains("'encoding.dim()'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k6, v, out, enc, phi), doctest::Contains("'k.cols'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.eps = 0}),
                       doctest::Contains("'options.eps'"), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.eps = NAN}), lrpe::domain_error);
  // eps > 0 in double but 0 in float: an error for float (max(den, 0) would divide by zero), fine in double
  {
    const rm<float> qf = rm<float>::Ones(4, 8), kf = rm<float>::Ones(5, 8), vf = rm<float>::Ones(5, 3);
    rm<float> outf(4, 3);
    const linear_options tiny{.norm = lrpe::normalisation::denominator, .eps = 1e-300};
    CHECK_THROWS_WITH_AS(lrpe::linear_attention(qf, kf, vf, outf, lrpe::type1<float>(8), phi, tiny),
                         doctest::Contains("'options.eps' must be > 0 in the scalar type"), lrpe::parameter_error);
    CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, enc, phi, tiny));
    // and past float's range (the conversion itself would be undefined behaviour)
    const linear_options huge{.norm = lrpe::normalisation::denominator, .eps = 1e39};
    CHECK_THROWS_WITH_AS(lrpe::linear_attention(qf, kf, vf, outf, lrpe::type1<float>(8), phi, huge),
                         doctest::Contains("'options.eps' must be finite in the scalar type; got 1e+39"),
                         lrpe::parameter_error);
    CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, enc, phi, huge));
    lrpe::linear_attention_state<float> st(8, 3);
    std::vector<float> row(3);
    CHECK_THROWS_WITH_AS(st.query_features(qf.data(), 0, row.data(), lrpe::normalisation::denominator, 1e-300),
                         doctest::Contains("'eps'"), lrpe::parameter_error);
  }
  // relu_eps: a NaN eps would make every feature NaN, a negative one negative features
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, lrpe::feature_maps::relu_eps{NAN}),
                       doctest::Contains("'phi' must have a finite eps"), lrpe::domain_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, lrpe::feature_maps::relu_eps{-1.0}),
                       doctest::Contains("'phi' must have eps >= 0"), lrpe::parameter_error);
  CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, enc, lrpe::feature_maps::relu_eps{0.0}));
  {  // an eps finite in double but +inf in float made every float feature +inf (NaN outputs)
    const rm<float> qf = rm<float>::Ones(4, 8), kf = rm<float>::Ones(5, 8), vf = rm<float>::Ones(5, 3);
    rm<float> outf(4, 3);
    CHECK_THROWS_WITH_AS(lrpe::linear_attention(qf, kf, vf, outf, lrpe::type1<float>(8), lrpe::feature_maps::relu_eps{1e39}),
                         doctest::Contains("'phi' must have an eps finite in the scalar type"), lrpe::parameter_error);
    CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, enc, lrpe::feature_maps::relu_eps{1e39}));  // fine in double
  }
  {  // state.query with a bad eps throws before it writes out
    lrpe::linear_attention_state<T> st(8, 3);
    st.append(enc, phi, q.data(), v.data(), 0);
    std::vector<T> row(3, T(-7));
    CHECK_THROWS_WITH_AS(st.query(enc, phi, q.data(), 1, row.data(), lrpe::normalisation::denominator, -1.0),
                         doctest::Contains("'eps'"), lrpe::parameter_error);
    CHECK(row == std::vector<T>(3, T(-7)));
  }
  // d_v = 0: nothing to write, causal or not (causal named an internal state's 'value_dim')
  {
    const rm<T> v0(5, 0);
    rm<T> out0(4, 0);
    CHECK_NOTHROW(lrpe::linear_attention(q, k, v0, out0, enc, phi));
    CHECK_NOTHROW(lrpe::linear_attention(q, k, v0, out0, enc, phi, linear_options{.causal = true, .decay = 0.9}));
  }
  // a chunk of any size >= 1 is a tuning value (the SIMD backend sized its scratch by it)
  {
    lrpe::generator g(5);
    const rm<T> qa = random_matrix<T>(g, 4, 8);
    rm<T> a(4, 3), b(4, 3);
    const std::vector<position_t> qpos{0, 2, 2, 9}, kpos{0, 1, 2, 5, 9};
    linear_options o{.causal = true, .decay = 0.9, .q_positions = qpos, .k_positions = kpos};
    const rm<ld> want = recurrence(enc, phi, qa, k, v, o);
    lrpe::linear_attention(qa, k, v, a, enc, phi, o);
    CHECK(rel_error(a, want) <= linear_vs_exact<T>());
    o.chunk = std::numeric_limits<index_t>::max();
    lrpe::linear_attention(qa, k, v, b, enc, phi, o);
    CHECK(rel_error(b, want) <= linear_vs_exact<T>());
  }
  {
    lrpe::linear_attention_state<T> st(8, 3);
    CHECK_THROWS_AS(st.append(enc, lrpe::feature_maps::relu_eps{INFINITY}, q.data(), v.data(), 0), lrpe::domain_error);
    CHECK(st.empty());
  }
  // per-head decays on a single-head call would be ignored: an error instead
  const std::vector<double> one_decay{0.9};
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.causal = true, .head_decays = one_decay}),
                       doctest::Contains("'options.head_decays' must be empty on a single-head call"), lrpe::parameter_error);
  // d = 0 is named as such
  const rm<T> q0(4, 0), k0(5, 0);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q0, k0, v, out, lrpe::no_encoding{}, lrpe::feature_maps::identity{}),
                       doctest::Contains("'q.cols' must be >= 1"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.chunk = 0}),
                       doctest::Contains("'options.chunk'"), lrpe::parameter_error);
  for (double bad : {0.0, -0.5, 1.5}) {
    CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.causal = true, .decay = bad}),
                         doctest::Contains("'options.decay'"), lrpe::parameter_error);
  }
  CHECK_THROWS_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.causal = true, .decay = NAN}), lrpe::domain_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.decay = 0.5}),
                       doctest::Contains("unless options.causal"), lrpe::parameter_error);
  const std::vector<position_t> down{0, 1, 3, 2}, up{0, 1, 2, 3, 4};
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.causal = true, .q_positions = down, .k_positions = up}),
                       doctest::Contains("non-decreasing"), lrpe::parameter_error);
  // non-causal attention accepts any order
  CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, enc, phi, linear_options{.q_positions = down, .k_positions = up}));
  std::vector<T> buf(2 * 3 * 4 * 8), obuf(buf.size());
  const std::vector<double> two{1.0, 0.5};
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(lrpe::bnsh(buf.data(), 2, 3, 4, 8), lrpe::bnsh(buf.data(), 2, 3, 4, 8),
                                              lrpe::bnsh(buf.data(), 2, 3, 4, 8), lrpe::bnsh(obuf.data(), 2, 3, 4, 8), enc,
                                              phi, linear_options{.causal = true, .head_decays = two}),
                       doctest::Contains("'options.head_decays'"), lrpe::shape_error);
  // grouped K/V: heads must divide q's, and v must have k's heads
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(lrpe::bnsh(buf.data(), 2, 3, 4, 8), lrpe::bnsh(buf.data(), 2, 2, 4, 8),
                                              lrpe::bnsh(buf.data(), 2, 2, 4, 8), lrpe::bnsh(obuf.data(), 2, 3, 4, 8), enc,
                                              phi),
                       "lrpe::linear_attention (multi-head): argument 'k' must have batch = 2 and heads = 3 or a divisor "
                       "of it (grouped-query attention); got batch 2, heads 2",
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(lrpe::bnsh(buf.data(), 2, 3, 4, 8), lrpe::bnsh(buf.data(), 2, 1, 4, 8),
                                              lrpe::bnsh(buf.data(), 2, 3, 4, 8), lrpe::bnsh(obuf.data(), 2, 3, 4, 8), enc,
                                              phi),
                       doctest::Contains("'v' must have batch x heads = 2x1"), lrpe::shape_error);
  // empty: n_q = n_k = 0 is a no-op; n_k = 0 gives zero rows
  const rm<T> e0(0, 8), v0(0, 3);
  rm<T> o0(0, 3);
  CHECK_NOTHROW(lrpe::linear_attention(e0, e0, v0, o0, enc, phi, linear_options{.causal = true}));
  rm<T> o4 = rm<T>::Constant(4, 3, 9.0);
  lrpe::linear_attention(q, e0, v0, o4, enc, phi, linear_options{.causal = true});
  CHECK(o4.cwiseAbs().maxCoeff() == 0.0);
  o4.setConstant(9.0);
  lrpe::linear_attention(q, e0, v0, o4, enc, phi, linear_options{.norm = lrpe::normalisation::denominator});
  CHECK(o4.cwiseAbs().maxCoeff() == 0.0);
}
