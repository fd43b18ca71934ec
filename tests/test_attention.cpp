// SPDX-License-Identifier: MIT
// Softmax attention: the tiled online-softmax fast path against an independent naive O(n²)
// reference (long double, dense W_{t−s} from relative_matrix for encoders) for every kind of
// encoding, causal and not, with offsets and per-row positions, odd n and tiles; stability for
// logits of ±1e4; fully masked rows; multi-head views; error paths.
#include <lrpe/lrpe.hpp>

#include "attention_helpers.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <vector>

namespace {

using attention_test::softmax_vs_exact;
using attention_test::for_each_preset;
using attention_test::random_matrix;
using attention_test::rel_error;

using lrpe::index_t;
using lrpe::position_t;
template <class T>
using rm = lrpe::row_matrix<T>;
using ld = long double;

/**
 * Naive softmax attention in long double: out_s = Σ_t c(s,t) e^{l(s,t) − m} (v_t + a(s,t)) /
 * Σ_t e^{l(s,t) − m} over visible t; zero when nothing is visible.
 */
template <class T>
rm<ld> naive_softmax(index_t nq, index_t nk, const rm<T>& v, const std::function<ld(index_t, index_t)>& logit,
                     const std::function<bool(index_t, index_t)>& visible,
                     const std::function<ld(index_t, index_t)>& c = nullptr,
                     const std::function<void(index_t, index_t, ld, ld*)>& value_term = nullptr) {
  const index_t dv = v.cols();
  rm<ld> out = rm<ld>::Zero(nq, dv);
  std::vector<ld> l(static_cast<std::size_t>(nk));
  for (index_t i = 0; i < nq; ++i) {
    ld m = -INFINITY;
    for (index_t j = 0; j < nk; ++j) {
      l[j] = visible(i, j) ? logit(i, j) : -INFINITY;
      m = std::max(m, l[j]);
    }
    if (m == -INFINITY) continue;
    ld z = 0;
    for (index_t j = 0; j < nk; ++j) z += std::exp(l[j] - m);
    for (index_t j = 0; j < nk; ++j) {
      if (l[j] == -INFINITY) continue;
      ld a = std::exp(l[j] - m) / z;
      if (c) a *= c(i, j);
      for (index_t e = 0; e < dv; ++e) out(i, e) += a * static_cast<ld>(v(j, e));
      if (value_term) value_term(i, j, a, out.row(i).data());
    }
  }
  return out;
}

template <class T>
ld dot(const rm<T>& a, index_t i, const rm<T>& b, index_t j) {
  ld s = 0;
  for (index_t e = 0; e < a.cols(); ++e) s += static_cast<ld>(a(i, e)) * static_cast<ld>(b(j, e));
  return s;
}

/// Re(q_sᴴ W_{t−s} k_t) from the dense relative matrix, cached per offset.
template <class Enc>
struct dense_scores {
  const Enc& enc;
  std::map<position_t, lrpe::dense_matrix<std::complex<ld>>> cache{};
  template <class T>
  ld operator()(const T* q, const T* k, position_t offset) {
    auto it = cache.find(offset);
    if (it == cache.end()) {
      it = cache.emplace(offset, enc.relative_matrix(offset).template cast<std::complex<ld>>()).first;
    }
    const auto& w = it->second;
    ld s = 0;
    for (index_t a = 0; a < w.rows(); ++a)
      for (index_t b = 0; b < w.cols(); ++b) s += static_cast<ld>(q[a]) * w(a, b).real() * static_cast<ld>(k[b]);
    return s;
  }
};

/// Test-local ALiBi (until canonical/ lands): f_rel = q·k − m·|t − s|.
template <class T>
struct test_alibi {
  using scalar = T;
  static constexpr bool is_additive = true;
  index_t d = 0;
  double slope = 0.25;
  [[nodiscard]] index_t dim() const { return d; }
  [[nodiscard]] double bias(position_t s, position_t t) const { return -slope * static_cast<double>(t > s ? t - s : s - t); }
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const {
    double acc = 0;
    for (index_t i = 0; i < d; ++i) acc += static_cast<double>(q[i]) * static_cast<double>(k[i]);
    return acc + bias(s, t);
  }
};

/// Test-local additive encoding with its own default scale (like T5: scale 1).
template <class T>
struct test_unscaled_bias : test_alibi<T> {
  [[nodiscard]] static double default_scale(index_t) { return 1.0; }
};

/// Test-local Shaw et al.: e_st = q·(k + a^K_{clip(t−s)}), o_s = Σ α (v_t + a^V_{clip(t−s)}).
template <class T>
struct test_shaw {
  using scalar = T;
  static constexpr bool has_value_term = true;
  index_t d = 0;
  position_t r = 3;
  rm<T> ak, av;  // (2r+1) × d
  test_shaw(lrpe::generator& g, index_t d_, position_t r_) : d(d_), r(r_) {
    ak = random_matrix<T>(g, 2 * r + 1, d);
    av = random_matrix<T>(g, 2 * r + 1, d);
  }
  [[nodiscard]] index_t clip(position_t s, position_t t) const { return static_cast<index_t>(std::clamp(t - s, -r, r) + r); }
  [[nodiscard]] index_t dim() const { return d; }
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const {
    double acc = 0;
    for (index_t i = 0; i < d; ++i) acc += static_cast<double>(q[i]) * (static_cast<double>(k[i]) + ak(clip(s, t), i));
    return acc;
  }
  void add_value_term(position_t s, position_t t, T w, T* out) const {
    for (index_t i = 0; i < d; ++i) out[i] += w * av(clip(s, t), i);
  }
};

static_assert(lrpe::additive_encoding<test_alibi<float>>);
static_assert(lrpe::value_encoding<test_shaw<double>>);
static_assert(!lrpe::additive_encoding<test_shaw<double>>);
static_assert(lrpe::is_linearizable_encoding_v<lrpe::type8<float>>);
static_assert(!lrpe::is_linearizable_encoding_v<test_alibi<float>>);

/// One random problem: sizes, positions (offset or array), causal flag, tile.
struct setup {
  index_t nq, nk, d, dv, tile;
  bool causal;
  position_t q_off, k_off;
  bool arrays;
  std::vector<position_t> qpos, kpos;
};

std::vector<setup> setups(std::uint64_t seed) {
  lrpe::generator g(seed);
  std::vector<setup> out;
  const index_t sizes[] = {1, 2, 7, 16, 33};
  for (index_t n : sizes) {
    for (int causal = 0; causal < 2; ++causal) {
      setup s{n, n, 8, 5, 7, causal == 1, 0, 0, false, {}, {}};
      out.push_back(s);
      // KV cache: queries at offset n_past over n_past + n keys
      const index_t past = 1 + static_cast<index_t>(g.below(9));
      out.push_back(setup{n, n + past, 8, 3, 4, causal == 1, past + 100, 100, false, {}, {}});
    }
  }
  // per-row arrays: packed documents (positions restart), random n not a multiple of the tile
  for (int rep = 0; rep < 2; ++rep) {
    const index_t n = 20 + static_cast<index_t>(g.below(30));
    setup s{n, n, 6, 4, 16, rep == 1, 0, 0, true, {}, {}};
    position_t p = -5;
    for (index_t i = 0; i < n; ++i) {
      if (g.below(8) == 0) p = static_cast<position_t>(g.below(4));
      s.qpos.push_back(p);
      s.kpos.push_back(p);
      ++p;
    }
    out.push_back(s);
  }
  return out;
}

template <class Opt>
void set_positions(Opt& opt, const setup& s) {
  if (s.arrays) {
    opt.q_positions = lrpe::positions(std::span<const position_t>(s.qpos));
    opt.k_positions = lrpe::positions(std::span<const position_t>(s.kpos));
  } else {
    opt.q_positions = s.q_off;
    opt.k_positions = s.k_off;
  }
}

}  // namespace

TEST_CASE_TEMPLATE("softmax: no encoding and additive bias equal the naive reference", T, float, double) {
  const std::uint64_t seed = 0xA77E'0001;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  for (const setup& s : setups(seed)) {
    CAPTURE(s.nq);
    CAPTURE(s.nk);
    CAPTURE(s.causal);
    CAPTURE(s.arrays);
    const rm<T> q = random_matrix<T>(g, s.nq, s.d), k = random_matrix<T>(g, s.nk, s.d), v = random_matrix<T>(g, s.nk, s.dv);
    lrpe::softmax_options<> opt;
    opt.causal = s.causal;
    opt.tile = s.tile;
    set_positions(opt, s);
    auto visible = [&](index_t i, index_t j) { return !s.causal || opt.k_positions[j] <= opt.q_positions[i]; };
    const ld scale = 1.0L / std::sqrt(static_cast<ld>(s.d));

    rm<T> out(s.nq, s.dv);
    lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, opt);
    auto ref = naive_softmax<T>(s.nq, s.nk, v, [&](index_t i, index_t j) { return scale * dot(q, i, k, j); }, visible);
    CHECK(rel_error(out, ref) <= softmax_vs_exact<T>());

    const test_alibi<T> alibi{s.d, 0.375};
    lrpe::softmax_attention(q, k, v, out, alibi, opt);
    ref = naive_softmax<T>(s.nq, s.nk, v, [&](index_t i, index_t j) {
      return scale * dot(q, i, k, j) - 0.375L * std::abs(static_cast<ld>(opt.k_positions[j] - opt.q_positions[i]));
    }, visible);
    CHECK(rel_error(out, ref) <= softmax_vs_exact<T>());

    // an encoding's default_scale replaces 1/√d; an explicit scale replaces both
    const test_unscaled_bias<T> unscaled{{s.d, 0.375}};
    lrpe::softmax_attention(q, k, v, out, unscaled, opt);
    ref = naive_softmax<T>(s.nq, s.nk, v, [&](index_t i, index_t j) {
      return dot(q, i, k, j) - 0.375L * std::abs(static_cast<ld>(opt.k_positions[j] - opt.q_positions[i]));
    }, visible);
    CHECK(rel_error(out, ref) <= softmax_vs_exact<T>());
    auto opt2 = opt;
    opt2.scale = 0.5;
    lrpe::softmax_attention(q, k, v, out, unscaled, opt2);
    ref = naive_softmax<T>(s.nq, s.nk, v, [&](index_t i, index_t j) {
      return 0.5L * dot(q, i, k, j) - 0.375L * std::abs(static_cast<ld>(opt.k_positions[j] - opt.q_positions[i]));
    }, visible);
    CHECK(rel_error(out, ref) <= softmax_vs_exact<T>());
  }
}

namespace {
template <class T, class Enc>
void check_encoder_softmax(const Enc& enc, const char* name, std::uint64_t seed) {
  CAPTURE(name);
  lrpe::generator g(seed);
  const index_t d = enc.dim();
  for (const setup& s0 : setups(seed)) {
    setup s = s0;
    if (s.d != d) s.d = d;
    CAPTURE(s.nq);
    CAPTURE(s.nk);
    CAPTURE(s.causal);
    CAPTURE(s.arrays);
    const rm<T> q = random_matrix<T>(g, s.nq, d), k = random_matrix<T>(g, s.nk, d), v = random_matrix<T>(g, s.nk, s.dv);
    lrpe::softmax_options<> opt;
    opt.causal = s.causal;
    opt.tile = s.tile;
    set_positions(opt, s);
    rm<T> out(s.nq, s.dv);
    lrpe::softmax_attention(q, k, v, out, enc, opt);
    dense_scores<Enc> w{enc};
    const ld scale = 1.0L / std::sqrt(static_cast<ld>(d));
    const auto ref = naive_softmax<T>(
        s.nq, s.nk, v,
        [&](index_t i, index_t j) {
          return scale * w(q.row(i).data(), k.row(j).data(), opt.k_positions[j] - opt.q_positions[i]);
        },
        [&](index_t i, index_t j) { return !s.causal || opt.k_positions[j] <= opt.q_positions[i]; });
    CHECK(rel_error(out, ref) <= softmax_vs_exact<T>());
  }
}

}  // namespace

TEST_CASE_TEMPLATE("softmax: every LRPE preset equals the naive reference with dense W_{t-s}", T, float, double) {
  const std::uint64_t seed = 0xA77E'0002;
  MESSAGE("seed = " << seed);
  for_each_preset<T>(8, [&](const auto& enc, const char* name) { check_encoder_softmax<T>(enc, name, seed); });
}

TEST_CASE_TEMPLATE("softmax: Shaw-style generic encoding with value term, and URPE reweighting", T, float, double) {
  const std::uint64_t seed = 0xA77E'0003;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  for (const setup& s : setups(seed)) {
    CAPTURE(s.nq);
    CAPTURE(s.nk);
    CAPTURE(s.causal);
    const test_shaw<T> shaw(g, s.d, 3);
    const rm<T> q = random_matrix<T>(g, s.nq, s.d), k = random_matrix<T>(g, s.nk, s.d), v = random_matrix<T>(g, s.nk, s.d);
    auto c = [](position_t qs, position_t kt) { return 1.0 + 0.5 * std::sin(0.7 * static_cast<double>(kt - qs)); };
    lrpe::softmax_options<decltype(c)> opt{.causal = s.causal, .tile = s.tile, .reweight = c};
    set_positions(opt, s);
    const ld scale = 1.0L / std::sqrt(static_cast<ld>(s.d));
    auto visible = [&](index_t i, index_t j) { return !s.causal || opt.k_positions[j] <= opt.q_positions[i]; };
    auto logit = [&](index_t i, index_t j) {
      ld acc = 0;
      const index_t b = shaw.clip(opt.q_positions[i], opt.k_positions[j]);
      for (index_t e = 0; e < s.d; ++e) acc += static_cast<ld>(q(i, e)) * (static_cast<ld>(k(j, e)) + static_cast<ld>(shaw.ak(b, e)));
      return scale * acc;
    };
    auto vterm = [&](index_t i, index_t j, ld a, ld* o) {
      const index_t b = shaw.clip(opt.q_positions[i], opt.k_positions[j]);
      for (index_t e = 0; e < s.d; ++e) o[e] += a * static_cast<ld>(shaw.av(b, e));
    };
    auto cref = [&](index_t i, index_t j) { return static_cast<ld>(c(opt.q_positions[i], opt.k_positions[j])); };

    rm<T> out(s.nq, s.d);
    lrpe::softmax_attention(q, k, v, out, shaw, opt);
    CHECK(rel_error(out, naive_softmax<T>(s.nq, s.nk, v, logit, visible, cref, vterm)) <= softmax_vs_exact<T>());

    // URPE on a plain encoder and on no encoding; a struct with weight(s, t) works too
    struct toeplitz {
      double weight(position_t qs, position_t kt) const { return kt == qs ? 2.0 : 0.5; }
    };
    lrpe::softmax_options<toeplitz> opt_w{.causal = s.causal, .tile = s.tile};
    set_positions(opt_w, s);
    lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, opt_w);
    CHECK(rel_error(out, naive_softmax<T>(s.nq, s.nk, v, [&](index_t i, index_t j) { return scale * dot(q, i, k, j); }, visible,
                                          [&](index_t i, index_t j) { return ld(opt.k_positions[j] == opt.q_positions[i] ? 2.0 : 0.5); })) <=
          softmax_vs_exact<T>());
  }
}

TEST_CASE_TEMPLATE("softmax: logits of +-1e4 stay finite and exact", T, float, double) {
  const std::uint64_t seed = 0xA77E'0004;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t n = 21, d = 4;
  const rm<T> v = random_matrix<T>(g, n, 3);
  // ALiBi with slope 1e4: every off-diagonal logit is ≤ −1e4 below the diagonal one, so out = v
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d);
  rm<T> out(n, 3);
  for (bool causal : {false, true}) {
    lrpe::softmax_attention(q, k, v, out, test_alibi<T>{d, 1e4}, lrpe::softmax_options<>{.causal = causal, .tile = 8});
    CHECK(rel_error(out, rm<ld>(v.template cast<ld>())) <= softmax_vs_exact<T>());
  }
  // content logits of ±1e4: q, k scaled so that scale·q·k ~ 1e4; compare to the long-double reference
  const rm<T> qb = random_matrix<T>(g, n, d, 100.0), kb = random_matrix<T>(g, n, d, 100.0);
  for (bool causal : {false, true}) {
    lrpe::softmax_options<> opt{.causal = causal, .scale = 1.0, .tile = 5};
    lrpe::softmax_attention(qb, kb, v, out, lrpe::no_encoding{}, opt);
    CHECK(out.allFinite());
    const auto ref = naive_softmax<T>(n, n, v, [&](index_t i, index_t j) { return dot(qb, i, kb, j); },
                                      [&](index_t i, index_t j) { return !causal || j <= i; });
    // a float logit of 1e4 carries an absolute rounding error ~1e-3, hence the looser bound
    CHECK(rel_error(out, ref) <= (std::is_same_v<T, float> ? 5e-2 : 1e-9));
  }
  // negative logits only (all ≈ −1e4): still a proper softmax
  lrpe::softmax_attention(q, k, v, out, test_alibi<T>{d, -0.0}, lrpe::softmax_options<>{.scale = 1e-30});
  CHECK(out.allFinite());
}

TEST_CASE_TEMPLATE("softmax: fully masked rows are zero; empty inputs", T, float, double) {
  lrpe::generator g(0xA77E'0005);
  const index_t n = 6, d = 4;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, 2);
  rm<T> out = rm<T>::Constant(n, 2, T(7));
  // keys at 3..8, queries at 0..5: queries 0..2 see nothing
  lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, lrpe::softmax_options<>{.causal = true, .k_positions = 3, .tile = 2});
  for (index_t i = 0; i < 3; ++i) CHECK(out.row(i).cwiseAbs().maxCoeff() == T(0));
  for (index_t i = 3; i < n; ++i) CHECK(out.row(i).cwiseAbs().maxCoeff() > T(0));
  CHECK((out.row(3) - v.row(0)).cwiseAbs().maxCoeff() <= T(1e-6));  // only key 0 visible
  // n_k = 0: every row masked
  const rm<T> k0(0, d), v0(0, 2);
  lrpe::softmax_attention(q, k0, v0, out, lrpe::type1<T>(d));
  CHECK(out.cwiseAbs().maxCoeff() == T(0));
  // n_q = 0: a no-op
  const rm<T> q0(0, d);
  rm<T> out0(0, 2);
  lrpe::softmax_attention(q0, k, v, out0, lrpe::no_encoding{});
  CHECK(out0.size() == 0);
}

TEST_CASE_TEMPLATE("softmax: strided views and Eigen maps give the contiguous result", T, float, double) {
  lrpe::generator g(0xA77E'0006);
  const index_t n = 13, d = 8, dv = 5;
  const rm<T> big = random_matrix<T>(g, n, 3 * d);  // [Q | K | V-ish] side by side
  const rm<T> q = big.leftCols(d), k = big.middleCols(d, d), v = big.rightCols(d).leftCols(dv);
  const lrpe::type5<T> enc(d);
  rm<T> ref(n, dv), out_big = rm<T>::Zero(n, 2 * dv);
  lrpe::softmax_attention(q, k, v, ref, enc, lrpe::softmax_options<>{.causal = true});
  lrpe::matrix_view<const T> qv(big.data(), n, d, 3 * d), kv(big.data() + d, n, d, 3 * d), vv(big.data() + 2 * d, n, dv, 3 * d);
  lrpe::matrix_view<T> ov(out_big.data() + dv, n, dv, 2 * dv);
  lrpe::softmax_attention(qv, kv, vv, ov, enc, lrpe::softmax_options<>{.causal = true});
  CHECK((out_big.rightCols(dv) - ref).cwiseAbs().maxCoeff() == T(0));
  CHECK(out_big.leftCols(dv).cwiseAbs().maxCoeff() == T(0));  // untouched
  rm<T> out_map = rm<T>::Zero(n, dv);
  Eigen::Map<const rm<T>, 0, Eigen::OuterStride<>> qm(big.data(), n, d, Eigen::OuterStride<>(3 * d));
  lrpe::softmax_attention(qm, k, v, out_map.block(0, 0, n, dv), enc, lrpe::softmax_options<>{.causal = true});
  CHECK((out_map - ref).cwiseAbs().maxCoeff() == T(0));
}

TEST_CASE_TEMPLATE("softmax: BNSH and BSNH views equal contiguous per-head calls", T, float, double) {
  const std::uint64_t seed = 0xA77E'0007;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t B = 2, H = 3, N = 11, D = 6;
  std::vector<T> qb(B * H * N * D), kb(qb.size()), vb(qb.size());
  for (auto* buf : {&qb, &kb, &vb})
    for (auto& x : *buf) x = static_cast<T>(g.normal());
  // per-head encodings (an array) and a shared one
  const std::vector<lrpe::rope_gptj<T>> encs{lrpe::rope_gptj<T>(D, 10000.0), lrpe::rope_gptj<T>(D, 500.0),
                                             lrpe::rope_gptj<T>(D, 50.0)};
  const lrpe::softmax_options<> opt{.causal = true, .q_positions = 4, .k_positions = 4, .tile = 4};
  for (bool bsnh : {false, true}) {
    CAPTURE(bsnh);
    auto make = [&](T* p) { return bsnh ? lrpe::bsnh(p, B, N, H, D) : lrpe::bnsh(p, B, H, N, D); };
    std::vector<T> ob(qb.size(), T(0));
    lrpe::softmax_attention(make(qb.data()), make(kb.data()), make(vb.data()), make(ob.data()), encs, opt);
    std::vector<T> ob_fn(qb.size(), T(0));
    lrpe::softmax_attention(make(qb.data()), make(kb.data()), make(vb.data()), make(ob_fn.data()),
                            [&](index_t h) -> const auto& { return encs[static_cast<std::size_t>(h)]; }, opt);
    CHECK(ob == ob_fn);
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h) {
        rm<T> q(N, D), k(N, D), v(N, D), o(N, D);
        for (index_t s = 0; s < N; ++s)
          for (index_t i = 0; i < D; ++i) {
            const index_t at = bsnh ? ((b * N + s) * H + h) * D + i : ((b * H + h) * N + s) * D + i;
            q(s, i) = qb[at];
            k(s, i) = kb[at];
            v(s, i) = vb[at];
          }
        lrpe::softmax_attention(q, k, v, o, encs[static_cast<std::size_t>(h)], opt);
        for (index_t s = 0; s < N; ++s)
          for (index_t i = 0; i < D; ++i) {
            const index_t at = bsnh ? ((b * N + s) * H + h) * D + i : ((b * H + h) * N + s) * D + i;
            CHECK(ob[at] == o(s, i));
          }
      }
  }
}

TEST_CASE_TEMPLATE("softmax: grouped-query attention equals K and V repeated to every head (repeat_kv)", T, float,
                   double) {
  // 6 query heads over 3, 2 or 1 K/V heads (group 2, 3 and multi-query), BNSH and BSNH, causal
  // with a KV-cache offset, per-head encodings (each query head its own RoPE base) and ALiBi
  const index_t B = 2, H = 6, N = 13, D = 8;
  const auto rope_of = [](index_t h) { return lrpe::rope_neox<T>(D, 1e4 / static_cast<double>(h + 1)); };
  const auto alibi = lrpe::canonical::alibi<T>::for_heads(D, H);
  const lrpe::softmax_options<> opt{.causal = true, .q_positions = 3, .k_positions = 0, .tile = 5};
  for (const index_t group : {index_t{2}, index_t{3}, index_t{6}})
    for (const bool bsnh : {false, true}) {
      CAPTURE(group);
      CAPTURE(bsnh);
      CHECK(attention_test::gqa_vs_repeated_kv<T>(0xA77E'0009, B, H, group, N, D, bsnh, [&](auto q, auto k, auto v, auto o) {
              lrpe::softmax_attention(q, k, v, o, rope_of, opt);
            }) == 0);
      CHECK(attention_test::gqa_vs_repeated_kv<T>(0xA77E'000A, B, H, group, N, D, bsnh, [&](auto q, auto k, auto v, auto o) {
              lrpe::softmax_attention(q, k, v, o, alibi, opt);
            }) == 0);
    }
}

TEST_CASE("softmax: errors name the argument") {
  using T = double;
  const rm<T> q = rm<T>::Ones(4, 8), k = rm<T>::Ones(5, 8), v = rm<T>::Ones(5, 3);
  rm<T> out(4, 3);
  const lrpe::type1<T> enc(8);
  CHECK_NOTHROW(lrpe::softmax_attention(q, k, v, out, enc));
  const rm<T> k6 = rm<T>::Ones(5, 6), v4 = rm<T>::Ones(4, 3);
  rm<T> out_bad(4, 2), out_rows(3, 3);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k6, v, out, enc), doctest::Contains("'k.cols'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v4, out, enc), doctest::Contains("'v.rows'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out_bad, enc), doctest::Contains("'out.cols'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out_rows, enc), doctest::Contains("'out.rows'"), lrpe::shape_error);
  const rm<T> q6 = rm<T>::Ones(4, 6);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q6, k6, v, out, enc), doctest::Contains("'encoding.dim()'"), lrpe::shape_error);
  const std::vector<position_t> three{0, 1, 2};
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, enc, lrpe::softmax_options<>{.q_positions = three}),
                       doctest::Contains("'options.q_positions'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, enc, lrpe::softmax_options<>{.tile = 0}),
                       doctest::Contains("'options.tile'"), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::softmax_attention(q, k, v, out, enc, lrpe::softmax_options<>{.scale = INFINITY}), lrpe::domain_error);
  lrpe::matrix_view<const T> bad_stride(q.data(), 4, 8, 4);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(bad_stride, k, v, out, enc), doctest::Contains("row_stride"), lrpe::shape_error);
  // value encodings need v.cols == dim()
  lrpe::generator g(1);
  const test_shaw<T> shaw(g, 8, 2);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, shaw), doctest::Contains("'v.cols'"), lrpe::shape_error);
  // multi-head: mismatched heads
  std::vector<T> buf(2 * 3 * 4 * 8), obuf(buf.size());
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(lrpe::bnsh(buf.data(), 2, 3, 4, 8), lrpe::bnsh(buf.data(), 2, 2, 4, 8),
                                               lrpe::bnsh(buf.data(), 2, 3, 4, 8), lrpe::bnsh(obuf.data(), 2, 3, 4, 8), enc),
                       doctest::Contains("'k'"), lrpe::shape_error);
  // layouts whose element count is not an index_t: the strides would overflow
  const index_t big = index_t{1} << 32;
  CHECK_THROWS_WITH_AS(lrpe::bnsh(buf.data(), 1, big, big, 8),
                       doctest::Contains("lrpe::bnsh: argument 'batch*heads*seq*dim' must be an index_t"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::bsnh(buf.data(), big, big, 1, 1), doctest::Contains("lrpe::bsnh: argument 'batch*heads*seq*dim'"),
                       lrpe::shape_error);
  CHECK_NOTHROW((void)lrpe::bnsh(buf.data(), 0, big, big / 32, 8));  // 2^62 elements a batch entry, none of them
  // grouped K/V: heads must divide q's, and v must have k's heads
  const std::string mh = "lrpe::softmax_attention (multi-head): argument ";
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(lrpe::bnsh(buf.data(), 1, 6, 4, 8), lrpe::bnsh(buf.data(), 1, 4, 4, 8),
                                               lrpe::bnsh(buf.data(), 1, 4, 4, 8), lrpe::bnsh(obuf.data(), 1, 6, 4, 8), enc),
                       (mh + "'k' must have batch = 1 and heads = 6 or a divisor of it (grouped-query attention); "
                             "got batch 1, heads 4").c_str(),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(lrpe::bnsh(buf.data(), 1, 6, 4, 8), lrpe::bnsh(buf.data(), 1, 2, 4, 8),
                                               lrpe::bnsh(buf.data(), 1, 3, 4, 8), lrpe::bnsh(obuf.data(), 1, 6, 4, 8), enc),
                       doctest::Contains("'v' must have batch x heads = 1x2"), lrpe::shape_error);
  CHECK_NOTHROW(lrpe::softmax_attention(lrpe::bnsh(buf.data(), 1, 6, 4, 8), lrpe::bnsh(buf.data(), 1, 2, 4, 8),
                                        lrpe::bnsh(buf.data(), 1, 2, 4, 8), lrpe::bnsh(obuf.data(), 1, 6, 4, 8), enc));
  // d = 0: the width itself is named (not the infinite default scale 1/√0 it implies)
  const rm<T> q0(4, 0), k0(5, 0);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q0, k0, v, out, lrpe::no_encoding{}), doctest::Contains("'q.cols' must be >= 1"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q0, k0, v, out, lrpe::no_encoding{}, lrpe::softmax_options<>{.scale = 1.0}),
                       doctest::Contains("'q.cols' must be >= 1"), lrpe::shape_error);
  // multi-head K with 0 heads in BSNH (seq_stride = heads·d = 0): the heads are named, not the stride
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(lrpe::bsnh(buf.data(), 1, 4, 2, 8), lrpe::bsnh(buf.data(), 1, 4, 0, 8),
                                               lrpe::bsnh(buf.data(), 1, 4, 0, 8), lrpe::bsnh(obuf.data(), 1, 4, 2, 8), enc),
                       doctest::Contains("'k' must have batch = 1 and heads = 2"), lrpe::shape_error);
  try {
    lrpe::softmax_attention(q, k6, v, out, enc);
  } catch (const lrpe::error& e) {
    MESSAGE(std::string(e.what()));
  }
}

TEST_CASE("softmax, reference backend: a tile option far above n allocates for n, not for the tile") {
  using T = float;
  lrpe::generator g(3);
  rm<T> q(8, 16), k(9, 16), v(9, 5);
  for (auto* m : {&q, &k, &v})
    for (auto& x : m->reshaped()) x = static_cast<T>(g.normal());
  rm<T> want(8, 5), got(8, 5);
  lrpe::softmax_attention(q, k, v, want, lrpe::no_encoding{}, lrpe::softmax_options<>{.causal = true});
  // 2^40 rows per tile: a tile² buffer would be 4 TiB (std::bad_alloc before the fix)
  lrpe::softmax_attention(q, k, v, got, lrpe::no_encoding{}, lrpe::softmax_options<>{.causal = true, .tile = lrpe::index_t{1} << 40});
  CHECK((got - want).cwiseAbs().maxCoeff() <= 1e-6f);
}

TEST_CASE_TEMPLATE("positions: the extremes of int64 work; a difference t - s past int64 is an error naming the positions",
                   T, float, double) {
  constexpr position_t top = std::numeric_limits<position_t>::max();
  constexpr position_t bottom = std::numeric_limits<position_t>::min();
  constexpr index_t n = 5;
  lrpe::generator g(7);
  const rm<T> q = random_matrix<T>(g, n, 8), k = random_matrix<T>(g, n, 8), v = random_matrix<T>(g, n, 3);
  rm<T> out(n, 3), at_zero(n, 3);
  const lrpe::canonical::alibi<T> causal_alibi(8, {0.5});
  const lrpe::canonical::alibi<T> symmetric_alibi(8, {0.5}, lrpe::canonical::alibi_form::symmetric);

  // Only differences matter: the last rows at 2^63 − 1 give the result at 0 … n − 1, bit for bit.
  lrpe::softmax_attention(q, k, v, at_zero, causal_alibi, lrpe::softmax_options<>{.causal = true});
  lrpe::softmax_attention(q, k, v, out, causal_alibi,
                          lrpe::softmax_options<>{.causal = true, .q_positions = top - (n - 1), .k_positions = top - (n - 1)});
  CHECK(out == at_zero);
  const lrpe::feature_maps::elu_plus_one phi;
  const lrpe::linear_options decayed{.causal = true, .decay = 0.9};
  lrpe::linear_attention(q, k, v, at_zero, lrpe::no_encoding{}, phi, decayed);
  lrpe::linear_options decayed_top = decayed;
  decayed_top.q_positions = decayed_top.k_positions = top - (n - 1);
  lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, phi, decayed_top);
  CHECK(out == at_zero);

  // A span of exactly 2^63 − 1 (queries from −2^63, keys up to −1): every key is ~9.2e18 away,
  // so the symmetric bias weighs them equally: each row is the mean of v, finite, no overflow.
  lrpe::softmax_attention(q, k, v, out, symmetric_alibi,
                          lrpe::softmax_options<>{.q_positions = bottom, .k_positions = position_t{-n}});
  const Eigen::Matrix<T, 1, Eigen::Dynamic> mean = v.colwise().mean();
  for (index_t i = 0; i < n; ++i) CHECK((out.row(i) - mean).norm() <= T(1e-5) * (T(1) + mean.norm()));

  const std::string where = "lrpe::softmax_attention: argument ";
  // an offset whose last row passes 2^63 − 1
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, causal_alibi, lrpe::softmax_options<>{.q_positions = top - 3}),
                       (where + "'options.q_positions' must be an offset with offset + rows - 1 <= 2^63 - 1 (rows = 5); "
                                "got 9223372036854775804").c_str(),
                       lrpe::parameter_error);
  // Q's own span, K's own span, K's against Q's
  const std::vector<position_t> wide{0, bottom, 1, top, 2};
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, causal_alibi, lrpe::softmax_options<>{.q_positions = wide}),
                       (where + "'options.q_positions' must span at most 2^63 - 1 (every difference of two positions "
                                "must fit in int64); got [-9223372036854775808, 9223372036854775807]").c_str(),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, causal_alibi, lrpe::softmax_options<>{.k_positions = wide}),
                       doctest::Contains("argument 'options.k_positions' must span at most 2^63 - 1"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention(q, k, v, out, causal_alibi, lrpe::softmax_options<>{.k_positions = bottom}),
                       (where + "'options.k_positions' must lie within 2^63 - 1 of options.q_positions = [0, 4] (every "
                                "difference t - s must fit in int64); got [-9223372036854775808, "
                                "-9223372036854775804]").c_str(),
                       lrpe::parameter_error);
  // linear attention: the same checks, and with a state its last position counts too
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, phi,
                                              lrpe::linear_options{.q_positions = 0, .k_positions = bottom}),
                       doctest::Contains("lrpe::linear_attention: argument 'options.k_positions' must lie within 2^63 - 1"),
                       lrpe::parameter_error);
  lrpe::linear_attention_state<T> st(8, 3, 0.9);
  lrpe::linear_attention(q.topRows(1), k.topRows(1), v.topRows(1), out.topRows(1), lrpe::no_encoding{}, phi, st,
                         lrpe::linear_options{.causal = true, .decay = 0.9, .q_positions = bottom, .k_positions = bottom});
  REQUIRE(st.last_position() == bottom);
  const auto saved = st.export_state().to_flat();
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, phi, st,
                                              lrpe::linear_options{.causal = true, .decay = 0.9}),
                       "lrpe::linear_attention: argument 'options.q_positions' must lie within 2^63 - 1 of "
                       "state.last_position() = -9223372036854775808 (every difference t - last must fit in int64); "
                       "got [0, 4]",
                       lrpe::parameter_error);
  CHECK(st.export_state().to_flat() == saved);
  // the positions that reach too far are named: here K's (Q at −2^63 + 5 … is within 2^63 − 1 of
  // both the last position and K)
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, phi, st,
                                              lrpe::linear_options{.causal = true, .decay = 0.9,
                                                                   .q_positions = bottom + 5, .k_positions = 0}),
                       doctest::Contains("argument 'options.k_positions' must lie within 2^63 - 1 of "
                                         "state.last_position()"),
                       lrpe::parameter_error);
  CHECK(st.export_state().to_flat() == saved);
  // up to −1 is reachable from −2^63: the call runs
  CHECK_NOTHROW(lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, phi, st,
                                       lrpe::linear_options{.causal = true, .decay = 0.9, .q_positions = position_t{-n},
                                                            .k_positions = position_t{-n}}));
  CHECK(st.last_position() == -1);

  // multi-head segments with states: checked before any head runs
  std::vector<T> buf(1 * 2 * n * 8, T(0.5)), obuf(buf.size());
  const auto x = lrpe::bnsh<const T>(buf.data(), 1, 2, n, 8);
  const auto o = lrpe::bnsh(obuf.data(), 1, 2, n, 8);
  std::vector<lrpe::linear_attention_state<T>> states(2, lrpe::linear_attention_state<T>(8, 8, 1.0));
  lrpe::linear_attention(x, x, x, o, lrpe::no_encoding{}, phi, states,
                         lrpe::linear_options{.causal = true, .q_positions = bottom, .k_positions = bottom});
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(x, x, x, o, lrpe::no_encoding{}, phi, states,
                                              lrpe::linear_options{.causal = true, .q_positions = 0, .k_positions = 0}),
                       doctest::Contains("lrpe::linear_attention (multi-head): argument 'options.q_positions' must lie "
                                         "within 2^63 - 1 of states[0].last_position() = -9223372036854775804"),
                       lrpe::parameter_error);
  for (const auto& s : states) CHECK(s.last_position() == bottom + (n - 1));

  // canonical::score_matrix names its own arguments
  CHECK_THROWS_WITH_AS((void)lrpe::canonical::score_matrix(causal_alibi, q, k, 0, bottom),
                       doctest::Contains("argument 'kpos' must lie within 2^63 - 1 of qpos = [0, 4]"),
                       lrpe::parameter_error);
  const auto extreme = lrpe::canonical::score_matrix(causal_alibi, q, k, top - (n - 1), top - (n - 1));
  CHECK(extreme == lrpe::canonical::score_matrix(causal_alibi, q, k));
}
