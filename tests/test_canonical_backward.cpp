// SPDX-License-Identifier: MIT
// The backward of the canonical encodings with parameters or a score of their own — Shaw (a^K,
// a^V), DeBERTa-v2 (K_r, Q_r; the relative embeddings and projections), Transformer-XL (u, v,
// W_R; softmax and linear attention), cosFormer in softmax attention — against central
// differences of an independent long-double forward written here from the papers' formulas:
// logit = scale·f_rel(q_s, k_t), out_s = Σ_t P_st (v_t + a^V), L = Σ dO∘out (linear
// attention: out_s = Σ_{t ≤ s} (φ_q·φ_k) v_t). Causal or not, far positions, multi-head.
#include "gradient_helpers.hpp"

#include <lrpe/lrpe.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <span>
#include <type_traits>
#include <vector>

using grad_test::derivative;
using grad_test::relative_error;
using grad_test::uniform;
using lrpe::index_t;
using lrpe::position_t;
using ref::ld;

namespace {

using ld_rows = Eigen::Matrix<ld, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using params = std::vector<double>;

/// One attention problem and its encoding's f_rel and a^V as long-double functions of the
/// parameters w (laid out as the library's gradient).
struct model {
  index_t nq = 5, nk = 6, d = 4, dv = 4;
  std::vector<position_t> qp, kp;
  bool causal = false;
  ld scale = 0.5;
  std::function<ld(const ld* q, position_t s, const ld* k, position_t t, const params& w)> score;
  std::function<void(position_t s, position_t t, const params& w, ld* out)> value;  // adds a^V; may be empty
};

ld dot(const ld* a, const ld* b, index_t n) {
  ld acc = 0;
  for (index_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

/// The dense long-double softmax forward and L = Σ dO∘O.
ld softmax_loss(const model& m, const ld_rows& q, const ld_rows& k, const ld_rows& v, const ld_rows& d_out,
                const params& w) {
  ld loss = 0;
  std::vector<ld> logit(std::size_t(m.nk)), av(std::size_t(m.dv));
  for (index_t s = 0; s < m.nq; ++s) {
    const position_t ps = m.qp[std::size_t(s)];
    ld top = -std::numeric_limits<ld>::infinity();
    for (index_t t = 0; t < m.nk; ++t) {
      const position_t pt = m.kp[std::size_t(t)];
      logit[std::size_t(t)] = m.causal && pt > ps ? -std::numeric_limits<ld>::infinity()
                                                   : m.scale * m.score(&q(s, 0), ps, &k(t, 0), pt, w);
      top = std::max(top, logit[std::size_t(t)]);
    }
    if (std::isinf(top)) continue;
    ld sum = 0;
    for (ld l : logit) sum += std::exp(l - top);
    for (index_t t = 0; t < m.nk; ++t) {
      const ld p = std::exp(logit[std::size_t(t)] - top) / sum;
      if (p == 0) continue;
      std::fill(av.begin(), av.end(), ld(0));
      if (m.value) m.value(ps, m.kp[std::size_t(t)], w, av.data());
      for (index_t j = 0; j < m.dv; ++j) loss += d_out(s, j) * p * (v(t, j) + av[std::size_t(j)]);
    }
  }
  return loss;
}

/// Finite differences of L along every entry of x (a copy of which `with` perturbs).
template <class Loss>
std::vector<ld> fd(const std::vector<double>& x, double h, const Loss& loss_with) {
  std::vector<ld> g(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) g[j] = derivative(x, j, h, loss_with);
  return g;
}

ld_rows rows_of(const std::vector<double>& p, index_t r, index_t c) {
  ld_rows m(r, c);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = p[std::size_t(i)];
  return m;
}

template <class T>
std::vector<double> flat(const lrpe::row_matrix<T>& m) {
  return std::vector<double>(m.data(), m.data() + m.size());
}

template <class T>
ld tolerance() {
  return sizeof(T) < sizeof(double) ? 2e-4L : 1e-10L;
}

std::vector<position_t> offset(position_t first, index_t n) {
  std::vector<position_t> p;
  for (index_t i = 0; i < n; ++i) p.push_back(first + i);
  return p;
}

/// The library's forward and backward on `m` (encoding, its parameters w0) against the
/// long-double differences: dQ, dK, dV and the parameters' gradient (when w0 is not empty).
template <class T, class Encoding, class Backend = lrpe::backend::reference>
void check_softmax(const model& m, const Encoding& encoding, const params& w0, std::uint64_t seed, Backend backend = {}) {
  CAPTURE(m.causal);
  CAPTURE(m.qp[0]);
  const auto q = uniform<T>(m.nq, m.d, seed), k = uniform<T>(m.nk, m.d, seed + 1);
  const auto v = uniform<T>(m.nk, m.dv, seed + 2), d_out = uniform<T>(m.nq, m.dv, seed + 3);
  lrpe::softmax_options<> opt{m.causal, double(m.scale), m.qp, m.kp};
  lrpe::row_matrix<T> out(m.nq, m.dv), dq(m.nq, m.d), dk(m.nk, m.d), dv(m.nk, m.dv);
  std::vector<T> lse(std::size_t(m.nq));
  lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), encoding, opt, backend);
  lrpe::encoding_gradient_t<Encoding> grad{};
  constexpr bool learnable = requires { encoding.make_gradient(); };
  if constexpr (learnable) grad = encoding.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out, d_out, std::span<const T>(lse), dq, dk, dv, encoding, opt,
                                   learnable ? &grad : nullptr, backend);

  const std::vector<double> qw = flat(q), kw = flat(k), vw = flat(v);
  const ld_rows ql = rows_of(qw, m.nq, m.d), kl = rows_of(kw, m.nk, m.d), vl = rows_of(vw, m.nk, m.dv);
  const ld_rows dol = rows_of(flat(d_out), m.nq, m.dv);
  CHECK(relative_error(flat(dq), fd(qw, 1e-3, [&](const params& x) {
          return softmax_loss(m, rows_of(x, m.nq, m.d), kl, vl, dol, w0);
        })) <= tolerance<T>());
  CHECK(relative_error(flat(dk), fd(kw, 1e-3, [&](const params& x) {
          return softmax_loss(m, ql, rows_of(x, m.nk, m.d), vl, dol, w0);
        })) <= tolerance<T>());
  CHECK(relative_error(flat(dv), fd(vw, 1e-3, [&](const params& x) {
          return softmax_loss(m, ql, kl, rows_of(x, m.nk, m.dv), dol, w0);
        })) <= tolerance<T>());
  if constexpr (learnable) {
    REQUIRE(grad.size() == w0.size());
    CHECK(relative_error(grad, fd(w0, 1e-3, [&](const params& w) { return softmax_loss(m, ql, kl, vl, dol, w); })) <=
          tolerance<T>());
  }
}

/// w as a T table (the library's encoding is built from T values: w0 holds them exactly).
template <class T>
lrpe::row_matrix<T> table(const params& w, index_t first, index_t rows, index_t cols) {
  lrpe::row_matrix<T> m(rows, cols);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(w[std::size_t(first + i)]);
  return m;
}

// ------------------------------------------------------------------------------- the encodings

/// Shaw: f = q·(k + a^K_{clip(t−s, r)}), a^V_{clip(t−s, r)}; w = [a^K, a^V].
model shaw_model(index_t d, position_t r, bool with_value) {
  model m;
  m.d = m.dv = d;
  const auto row = [r](position_t s, position_t t) { return std::clamp<position_t>(t - s, -r, r) + r; };
  m.score = [d, row](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
    ld acc = dot(q, k, d);
    for (index_t i = 0; i < d; ++i) acc += q[i] * w[std::size_t(row(s, t) * d + i)];
    return acc;
  };
  if (with_value) {
    m.value = [d, r, row](position_t s, position_t t, const params& w, ld* out) {
      for (index_t i = 0; i < d; ++i) out[i] += w[std::size_t((2 * r + 1 + row(s, t)) * d + i)];
    };
  }
  return m;
}

/// DeBERTa head h: f = q·k + q·K_r[c] + k·Q_r[c] with c the library's clamped bucket of t − s
/// (checked against Hugging Face's in test_canonical); w = [K_r's head block, Q_r's head block].
template <class E>
model deberta_model(const E& head, index_t d) {
  model m;
  m.d = m.dv = d;
  const index_t block = 2 * head.buckets().span() * d;
  m.score = [head, d, block](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
    const index_t c = head.table_index(t - s);
    ld acc = dot(q, k, d);
    for (index_t i = 0; i < d; ++i)
      acc += q[i] * w[std::size_t(c * d + i)] + k[i] * w[std::size_t(block + c * d + i)];
    return acc;
  };
  return m;
}

/// Transformer-XL: f = (q + u)·k + (q + v)·(W_R R_{s−t}), R_δ = [sin δω, cos δω],
/// ω_j = base^(−2j/D); w = [u, v, W_R (d × D)].
model xl_model(index_t d, index_t dm, double base) {
  model m;
  m.d = m.dv = d;
  m.score = [d, dm, base](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
    std::vector<ld> r(static_cast<std::size_t>(dm));
    for (index_t j = 0; j < dm / 2; ++j) {
      const ld a = ld(s - t) * std::pow(ld(base), -2 * ld(j) / ld(dm));
      r[std::size_t(j)] = std::sin(a);
      r[std::size_t(dm / 2 + j)] = std::cos(a);
    }
    ld acc = 0;
    for (index_t i = 0; i < d; ++i) {
      ld wr = 0;
      for (index_t j = 0; j < dm; ++j) wr += w[std::size_t(2 * d + i * dm + j)] * r[std::size_t(j)];
      acc += (q[i] + w[std::size_t(i)]) * k[i] + (q[i] + w[std::size_t(d + i)]) * wr;
    }
    return acc;
  };
  return m;
}

}  // namespace

TEST_CASE_TEMPLATE("softmax backward, Shaw: dQ, dK, dV, a^K's and a^V's gradients against long-double differences "
                   "(clipped offsets, causal or not, far positions)", T, float, double) {
  constexpr index_t d = 4;
  constexpr position_t r = 2;
  for (bool with_value : {true, false}) {
    CAPTURE(with_value);
    model m = shaw_model(d, r, with_value);
    const auto tables = uniform<T>(with_value ? 2 * (2 * r + 1) : 2 * r + 1, d, 11);
    const params w0 = flat(tables);
    const lrpe::canonical::shaw<T> shaw(d, r, table<T>(w0, 0, 2 * r + 1, d),
                                        with_value ? table<T>(w0, (2 * r + 1) * d, 2 * r + 1, d) : lrpe::row_matrix<T>());
    for (position_t base : {position_t(0), position_t(1) << 40}) {
      m.qp = offset(base + 3, m.nq);  // offsets from −8 to 7: every clipped row is reached
      m.kp = offset(base - 1, m.nk);
      for (bool causal : {false, true}) {
        m.causal = causal;
        check_softmax<T>(m, shaw, w0, 20);
      }
    }
  }
}

TEST_CASE_TEMPLATE("softmax backward, Huang et al. 2020 methods 1-4: dQ, dK, dV and the table's gradient against "
                   "long-double differences (clipped offsets, causal or not)", T, float, double) {
  constexpr index_t d = 4;
  constexpr position_t r = 2;
  namespace cn = lrpe::canonical;
  // f_rel written from the paper (δ = t − s clipped to [−r, r]; method 1 on |δ|)
  const auto run = [&]<cn::huang_method M>(std::integral_constant<cn::huang_method, M>, index_t rows, index_t width) {
    CAPTURE(static_cast<int>(M));
    model m;
    m.d = m.dv = d;
    m.score = [width, d = d, r = r](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
      const position_t c = std::clamp<position_t>(t - s, -r, r);
      const std::size_t row = std::size_t(M == cn::huang_method::absolute_scale ? (c < 0 ? -c : c) : c + r);
      const ld qk = dot(q, k, d);
      ld acc = 0;
      if (width == 1) return qk * ld(w[row]);
      for (index_t i = 0; i < d; ++i) {
        const ld a = ld(w[row * std::size_t(d) + std::size_t(i)]);
        acc += M == cn::huang_method::sum_product ? q[i] * k[i] * a : q[i] * a + a * k[i];
      }
      return M == cn::huang_method::sum_product ? acc : qk + acc;
    };
    const auto table = uniform<T>(rows, width, 31);
    const params w0 = flat(table);
    const cn::huang2020<T, M> enc(d, r, table);
    m.qp = offset(3, m.nq);  // offsets from −8 to 7
    m.kp = offset(-1, m.nk);
    for (bool causal : {false, true}) {
      m.causal = causal;
      check_softmax<T>(m, enc, w0, 30);
    }
  };
  run(std::integral_constant<cn::huang_method, cn::huang_method::absolute_scale>{}, r + 1, 1);
  run(std::integral_constant<cn::huang_method, cn::huang_method::directional_scale>{}, 2 * r + 1, 1);
  run(std::integral_constant<cn::huang_method, cn::huang_method::sum_product>{}, 2 * r + 1, d);
  run(std::integral_constant<cn::huang_method, cn::huang_method::query_and_key>{}, 2 * r + 1, d);
}

TEST_CASE_TEMPLATE("softmax backward, composite attention (Chang et al. 2021: Shaw's a^K, a^V and an unscaled "
                   "offset bias): dQ, dK, dV, the tables' and the bias's gradients against long-double differences",
                   T, float, double) {
  constexpr index_t d = 4;
  constexpr position_t r = 2, rb = 3;
  namespace cn = lrpe::canonical;
  const index_t shaw_n = 2 * (2 * r + 1) * d, bias_n = 2 * rb + 1;
  const params w_all = flat(uniform<T>(1, shaw_n + 2 * bias_n, 35));  // Shaw's a^K, a^V; two heads' bias rows
  const cn::shaw<T> shaw(d, r, table<T>(w_all, 0, 2 * r + 1, d), table<T>(w_all, (2 * r + 1) * d, 2 * r + 1, d));
  const cn::composite<T, cn::toeplitz_bias<T>> comp(shaw, cn::toeplitz_bias<T>(d, rb, table<T>(w_all, shaw_n, 2, bias_n)));
  CHECK(comp.heads() == 2);
  params w0(w_all.begin(), w_all.begin() + shaw_n);  // head 1: Shaw's, then its bias row
  w0.insert(w0.end(), w_all.begin() + shaw_n + bias_n, w_all.end());
  model m = shaw_model(d, r, true);
  m.scale = 0.5;
  // the bias is added after the scale: inside scale·score it is bias / scale
  m.score = [rb = rb, shaw_score = m.score](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
    const std::size_t col = std::size_t(std::clamp<position_t>(t - s, -rb, rb) + rb);
    return shaw_score(q, s, k, t, w) + ld(w[std::size_t(shaw_n) + col]) / ld(0.5);
  };
  for (position_t base : {position_t(0), position_t(1) << 40}) {
    m.qp = offset(base + 3, m.nq);  // offsets from −8 to 7: every clipped row and column is reached
    m.kp = offset(base - 1, m.nk);
    for (bool causal : {false, true}) {
      m.causal = causal;
      check_softmax<T>(m, comp.head(1), w0, 40);
    }
  }
  // T5's buckets as the bias (the default), with a soft cap on the score only
  const cn::t5_buckets cfg{8, 20, true};
  const lrpe::row_matrix<T> t5_table = uniform<T>(1, 8, 36);
  const cn::composite<T> chang(shaw, cn::t5_bias<T>(d, cfg, t5_table));
  const auto q = uniform<T>(5, d, 37), k = uniform<T>(9, d, 38), v = uniform<T>(9, d, 39);
  lrpe::softmax_options<> opt;
  opt.causal = true;
  opt.softcap = 0.7;
  opt.k_positions = lrpe::positions(-4);
  lrpe::row_matrix<T> out(5, d);
  lrpe::softmax_attention(q, k, v, out, chang, opt);
  const ld scale = 1 / std::sqrt(ld(d));
  double worst = 0;
  for (index_t i = 0; i < 5; ++i) {
    std::vector<ld> logit(9), o(std::size_t(d), 0);
    ld top = -std::numeric_limits<ld>::infinity(), sum = 0;
    for (index_t j = 0; j < 9; ++j) {
      const position_t s = i, t = j - 4;
      if (t > s) continue;
      ld x = 0;
      for (index_t c = 0; c < d; ++c)
        x += ld(q(i, c)) * (ld(k(j, c)) + ld(shaw.key_table()(std::clamp<position_t>(t - s, -r, r) + r, c)));
      x = ld(0.7) * std::tanh(scale * x / ld(0.7));
      logit[std::size_t(j)] = x + ld(t5_table(0, cn::t5_bucket(t - s, cfg)));
      top = std::max(top, logit[std::size_t(j)]);
    }
    for (index_t j = 0; j < 9; ++j) {
      const position_t s = i, t = j - 4;
      if (t > s) continue;
      const ld e = std::exp(logit[std::size_t(j)] - top);
      sum += e;
      for (index_t c = 0; c < d; ++c)
        o[std::size_t(c)] += e * (ld(v(j, c)) + ld(shaw.value_table()(std::clamp<position_t>(t - s, -r, r) + r, c)));
    }
    for (index_t c = 0; c < d; ++c) worst = std::max(worst, double(std::abs(o[std::size_t(c)] / sum - ld(out(i, c)))));
  }
  CHECK(worst <= 20 * double(std::numeric_limits<T>::epsilon()));
  CHECK_THROWS_AS((cn::composite<T>(shaw, cn::t5_bias<T>(d + 1, cfg, t5_table))), lrpe::shape_error);
}

TEST_CASE_TEMPLATE("softmax backward, DA-Transformer: ReLU(q.k) R^(|t - s|), dQ, dK, dV and the head's w and v "
                   "against long-double differences",
                   T, float, double) {
  constexpr index_t d = 4;
  namespace cn = lrpe::canonical;
  model m;
  m.d = m.dv = d;
  // written from the paper: R^ = (1 + e^v) / (1 + e^(v − w|t − s|)), w = [w_h, v_h]
  m.score = [](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
    const ld a = dot(q, k, d);
    if (a <= 0) return ld(0);
    const ld x = std::abs(ld(t - s)), ww = ld(w[0]), vv = ld(w[1]);
    return a * (1 + std::exp(vv)) / (1 + std::exp(vv - ww * x));
  };
  for (const auto& wv : {std::pair{-0.4, 0.3}, std::pair{0.25, -1.5}, std::pair{0.0, 2.0}}) {
    const double wh = wv.first, vh = wv.second;  // (not a structured binding: clang before 16 cannot capture one)
    CAPTURE(wh);
    CAPTURE(vh);
    const cn::da_transformer<T> da(d, {0.1, wh}, {0.0, vh});
    const params w0{wh, vh};
    for (position_t base : {position_t(0), position_t(-1) << 50}) {
      m.qp = offset(base + 2, m.nq);
      m.kp = offset(base, m.nk);
      for (bool causal : {false, true}) {
        m.causal = causal;
        check_softmax<T>(m, da.head(1), w0, 50);
      }
    }
  }
  CHECK_THROWS_AS((cn::da_transformer<T>(d, {1.0}, {701.0})), lrpe::parameter_error);
  CHECK_THROWS_AS((cn::da_transformer<T>(d, {1.0, 2.0}, {0.0})), lrpe::shape_error);
  CHECK_THROWS_AS((cn::da_transformer<T>(d, {std::nan("")}, {0.0})), lrpe::domain_error);
}

TEST_CASE_TEMPLATE("softmax backward, Transformer-XL with clamp_len: u, v and the clamped position table's "
                   "gradients against long-double differences; W_R's through gradient_tables",
                   T, float, double) {
  constexpr index_t d = 4, dm = 6, heads = 2;
  constexpr position_t c = 2;
  namespace cn = lrpe::canonical;
  const auto u = uniform<T>(heads, d, 61), v = uniform<T>(heads, d, 62), w_r = uniform<T>(heads * d, dm, 63);
  const cn::transformer_xl<T> xl(d, u, v, w_r, 100.0);
  const cn::clamped_transformer_xl<T> clamped(xl, c);
  const auto head = clamped.head(1);
  // parameters as the gradient lays them out: u_1, v_1, then r_δ for δ = −c … c (the table)
  params w0;
  for (index_t i = 0; i < d; ++i) w0.push_back(double(u(1, i)));
  for (index_t i = 0; i < d; ++i) w0.push_back(double(v(1, i)));
  for (position_t delta = -c; delta <= c; ++delta)
    for (index_t i = 0; i < d; ++i) w0.push_back(double(head.position_vector(delta)[i]));
  model m;
  m.d = m.dv = d;
  m.score = [c = c, d = d](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
    const std::size_t row = std::size_t(std::clamp<position_t>(t - s, -c, c) + c);
    ld acc = 0;
    for (index_t i = 0; i < d; ++i)
      acc += (q[i] + w[std::size_t(i)]) * k[i] + (q[i] + w[std::size_t(d + i)]) * w[2 * std::size_t(d) + row * d + std::size_t(i)];
    return acc;
  };
  for (position_t base : {position_t(0), position_t(1'000'000)}) {
    m.qp = offset(base + 2, m.nq);  // offsets −6 … 5: clamped both ways
    m.kp = offset(base, m.nk);
    for (bool causal : {false, true}) {
      m.causal = causal;
      check_softmax<T>(m, head, w0, 71);
    }
  }
  // the table is W_R R_{s−t} at the clamped distance (long double, from the formula)
  for (position_t delta = -c; delta <= c; ++delta)
    for (index_t i = 0; i < d; ++i) {
      ld want = 0;
      for (index_t j = 0; j < dm / 2; ++j) {
        const ld a = ld(-delta) * std::pow(ld(100), -2 * ld(j) / ld(dm));
        want += ld(w_r(d + i, j)) * std::sin(a) + ld(w_r(d + i, dm / 2 + j)) * std::cos(a);
      }
      CHECK(std::abs(double(want - ld(head.position_vector(delta)[i]))) <= 10 * double(std::numeric_limits<T>::epsilon()));
    }
  // where no distance reaches the clamp, the clamped encoding is Transformer-XL: same outputs,
  // same dQ, dK, dV, and gradient_tables gives XL's u, v, W_R gradients
  const cn::clamped_transformer_xl<T> wide(xl, 16);
  const auto q = uniform<T>(7, d, 64), k = uniform<T>(9, d, 65), vv = uniform<T>(9, d, 66), g = uniform<T>(7, d, 67);
  lrpe::softmax_options<> opt;
  opt.causal = true;
  opt.q_positions = lrpe::positions(2);
  const auto near = [](const lrpe::row_matrix<T>& a, const lrpe::row_matrix<T>& b, double ulps) {
    const double top = b.template cast<double>().cwiseAbs().maxCoeff();
    return (a - b).template cast<double>().cwiseAbs().maxCoeff() <= ulps * double(std::numeric_limits<T>::epsilon()) * (1 + top);
  };
  std::vector<std::vector<double>> gx, gc;
  lrpe::row_matrix<T> ox(7, d), oc(7, d), dqx(7, d), dkx(9, d), dvx(9, d), dqc(7, d), dkc(9, d), dvc(9, d);
  for (index_t h = 0; h < heads; ++h) {
    gx.push_back(xl.head(h).make_gradient());
    gc.push_back(wide.head(h).make_gradient());
    lrpe::softmax_attention(q, k, vv, ox, xl.head(h), opt);
    lrpe::softmax_attention(q, k, vv, oc, wide.head(h), opt);
    CHECK(near(oc, ox, 20));
    lrpe::softmax_attention_backward(q, k, vv, ox, g, {}, dqx, dkx, dvx, xl.head(h), opt, &gx.back());
    lrpe::softmax_attention_backward(q, k, vv, ox, g, {}, dqc, dkc, dvc, wide.head(h), opt, &gc.back());
    CHECK(near(dqc, dqx, 200));
    CHECK(near(dkc, dkx, 200));
    CHECK(near(dvc, dvx, 200));
  }
  const auto tx = xl.gradient_tables(gx), tc = wide.gradient_tables(gc);
  const auto close = [](const lrpe::row_matrix<double>& a, const lrpe::row_matrix<double>& b) {
    return (a - b).cwiseAbs().maxCoeff() <= 200 * double(std::numeric_limits<T>::epsilon()) * (1 + b.cwiseAbs().maxCoeff());
  };
  CHECK(close(tc.u, tx.u));
  CHECK(close(tc.v, tx.v));
  CHECK(close(tc.w_r, tx.w_r));
  CHECK_THROWS_AS((cn::clamped_transformer_xl<T>(xl, 0)), lrpe::parameter_error);
  CHECK_THROWS_AS((void)wide.gradient_tables(std::span<const std::vector<double>>(gc).first(1)), lrpe::shape_error);
}

TEST_CASE_TEMPLATE("softmax backward, DeBERTa-v2: K_r's and Q_r's gradients of one head (log buckets, one term or "
                   "both), and the embeddings' and projections' gradients through from_embeddings",
                   T, float, double) {
  constexpr index_t d = 4, heads = 2;
  const lrpe::canonical::deberta_buckets cfg{4, 8};  // span 4: clamped and bucketed offsets
  const index_t rows = 2 * cfg.span();
  const auto kr = uniform<T>(rows, heads * d, 30), qr = uniform<T>(rows, heads * d, 31);
  const lrpe::canonical::deberta_v2<T> deberta(d, heads, cfg, kr, qr);
  const auto head = deberta.head(1);
  params w0;
  for (const auto* t : {&kr, &qr})
    for (index_t c = 0; c < rows; ++c)
      for (index_t i = 0; i < d; ++i) w0.push_back(double((*t)(c, d + i)));
  model m = deberta_model(head, d);
  m.scale = ld(head.default_scale(d));
  for (position_t base : {position_t(0), position_t(-1) << 50}) {
    m.qp = {base + 9, base + 2, base, base + 5, base + 20};  // offsets of both signs, past the buckets
    m.kp = offset(base, m.nk);
    for (bool causal : {false, true}) {
      m.causal = causal;
      check_softmax<T>(m, head, w0, 40);
    }
  }
  SUBCASE("c2p only") {
    const lrpe::canonical::deberta_v2<T> c2p(d, heads, cfg, kr, {}, {true, false});
    const params wk(w0.begin(), w0.begin() + rows * d);
    model mk = m;
    mk.score = [&, inner = m.score](const ld* q, position_t s, const ld* k, position_t t, const params& w) {
      params both = w;
      both.resize(w0.size(), 0.0);  // Q_r = 0
      return inner(q, s, k, t, both);
    };
    mk.scale = ld(c2p.default_scale(d));
    check_softmax<T>(mk, c2p.head(1), wk, 41);
  }
  SUBCASE("gradient_tables and embeddings_backward: dE, dW, db of K_r = E·W_k + b_k by differences") {
    constexpr index_t hidden = 3, e_rows = 10;  // E has rows past 2·span, which get no gradient
    const auto e = uniform<double>(e_rows, hidden, 50);
    const lrpe::canonical::linear_projection<double> key{uniform<double>(hidden, heads * d, 51),
                                                         uniform<double>(1, heads * d, 52).row(0).transpose()};
    const lrpe::canonical::linear_projection<double> query{uniform<double>(hidden, heads * d, 53), {}};
    const auto dkr = uniform<double>(rows, heads * d, 54), dqr = uniform<double>(rows, heads * d, 55);
    // per-head gradients laid out as make_gradient(), gathered back into the tables' shapes
    const auto dd = lrpe::canonical::deberta_v2<double>::from_embeddings(d, heads, cfg, e, key, query);
    std::vector<std::vector<double>> per_head;
    for (index_t h = 0; h < heads; ++h) {
      std::vector<double> g;
      for (const auto* t : {&dkr, &dqr})
        for (index_t c = 0; c < rows; ++c)
          for (index_t i = 0; i < d; ++i) g.push_back((*t)(c, h * d + i));
      per_head.push_back(g);
    }
    const auto tables = dd.gradient_tables(per_head);
    CHECK(tables.pos_key == dkr);
    CHECK(tables.pos_query == dqr);
    const auto g = lrpe::canonical::deberta_v2<double>::embeddings_backward(d, heads, cfg, e, key, query, tables);
    // L = Σ dK_r∘K_r + Σ dQ_r∘Q_r, differentiated along every input of from_embeddings
    const auto loss = [&](const lrpe::row_matrix<double>& ee, const lrpe::canonical::linear_projection<double>& kk,
                          const lrpe::canonical::linear_projection<double>& qq) {
      ld acc = 0;  // the tables as from_embeddings projects them, written out here
      const lrpe::row_matrix<double> kt = ee.topRows(rows) * kk.weight + Eigen::VectorXd::Ones(rows) * kk.bias.transpose();
      const lrpe::row_matrix<double> qt = ee.topRows(rows) * qq.weight;
      for (index_t i = 0; i < kt.size(); ++i) acc += ld(dkr.data()[i]) * kt.data()[i] + ld(dqr.data()[i]) * qt.data()[i];
      return acc;
    };
    const auto with = [](const lrpe::row_matrix<double>& m0, const params& p) {
      lrpe::row_matrix<double> m1 = m0;
      for (index_t i = 0; i < m1.size(); ++i) m1.data()[i] = p[std::size_t(i)];
      return m1;
    };
    CHECK(relative_error(flat(g.rel_embeddings),
                         fd(flat(e), 1e-3, [&](const params& p) { return loss(with(e, p), key, query); })) <= 1e-10L);
    CHECK(relative_error(flat(g.key.weight), fd(flat(key.weight), 1e-3, [&](const params& p) {
                           return loss(e, {with(key.weight, p), key.bias}, query);
                         })) <= 1e-10L);
    CHECK(relative_error(std::vector<double>(g.key.bias.data(), g.key.bias.data() + g.key.bias.size()),
                         fd(std::vector<double>(key.bias.data(), key.bias.data() + key.bias.size()), 1e-3,
                            [&](const params& p) {
                              return loss(e, {key.weight, Eigen::Map<const Eigen::VectorXd>(p.data(), heads * d)},
                                          query);
                            })) <= 1e-10L);
    CHECK(relative_error(flat(g.query.weight), fd(flat(query.weight), 1e-3, [&](const params& p) {
                           return loss(e, key, {with(query.weight, p), {}});
                         })) <= 1e-10L);
    CHECK(g.query.bias.size() == 0);
    CHECK(g.rel_embeddings.bottomRows(e_rows - rows).isZero(0));
    CHECK_THROWS_AS((void)dd.gradient_tables(std::span(per_head).first(1)), lrpe::shape_error);
  }
}

TEST_CASE_TEMPLATE("softmax backward, Transformer-XL: u's, v's and W_R's gradients of one head, and cosFormer, "
                   "through their features' backward", T, float, double) {
  constexpr index_t d = 4, dm = 6, heads = 2;
  const params w_all = flat(uniform<T>(1, heads * (2 * d + d * dm), 60));
  // heads' u, v, W_R as the constructor takes them, from w_all's per-head blocks
  const index_t per = 2 * d + d * dm;
  lrpe::row_matrix<T> u(heads, d), v(heads, d), w_r(heads * d, dm);
  for (index_t h = 0; h < heads; ++h) {
    for (index_t i = 0; i < d; ++i) {
      u(h, i) = T(w_all[std::size_t(h * per + i)]);
      v(h, i) = T(w_all[std::size_t(h * per + d + i)]);
      for (index_t j = 0; j < dm; ++j) w_r(h * d + i, j) = T(w_all[std::size_t(h * per + 2 * d + i * dm + j)]);
    }
  }
  const lrpe::canonical::transformer_xl<T> xl(d, u, v, w_r, 100.0);
  const params w0(w_all.begin() + per, w_all.end());  // head 1
  model m = xl_model(d, dm, 100.0);
  for (position_t base : {position_t(0), position_t(1'000'000)}) {
    m.qp = offset(base + 2, m.nq);
    m.kp = offset(base, m.nk);
    for (bool causal : {false, true}) {
      m.causal = causal;
      check_softmax<T>(m, xl.head(1), w0, 70);
    }
  }
  // gradient_tables: the heads' vectors back in the constructor's shapes
  std::vector<std::vector<double>> per_head{params(w_all.begin(), w_all.begin() + per), w0};
  const auto tables = xl.gradient_tables(per_head);
  CHECK(tables.u == u.template cast<double>());
  CHECK(tables.v == v.template cast<double>());
  CHECK(tables.w_r == w_r.template cast<double>());

  const lrpe::canonical::cosformer<T> cos(d, 7.0);
  model c;
  c.score = [d](const ld* q, position_t s, const ld* k, position_t t, const params&) {
    return dot(q, k, d) * std::cos(std::numbers::pi_v<ld> * ld(t - s) / (2 * ld(7)));
  };
  c.qp = offset(1 << 20, c.nq);
  c.kp = offset((1 << 20) - 2, c.nk);
  c.causal = true;
  check_softmax<T>(c, cos, {}, 80);

  // xPos: Σ_i ζ_i^{(s−t)/γ} (R_s q)_i·(R_t k)_i, through its features' backward (no parameters)
  const lrpe::canonical::xpos<T> xp(d, 4.0, /*center=*/100);
  model x;
  x.score = [d = d](const ld* q, position_t s, const ld* k, position_t t, const params&) {
    ld acc = 0;
    for (index_t i = 0; i < d / 2; ++i) {
      const ld th = std::pow(10000.0L, -ld(2 * i) / ld(d)), zeta = (ld(2 * i) + 0.4L * d) / (1.4L * d);
      const ld a = ld(t - s) * th;  // the pair's relative angle: (R_s q)·(R_t k) = qᵀ R((t − s)θ) k
      acc += std::pow(zeta, ld(s - t) / 4) *
             ((q[2 * i] * k[2 * i] + q[2 * i + 1] * k[2 * i + 1]) * std::cos(a) +
              (q[2 * i + 1] * k[2 * i] - q[2 * i] * k[2 * i + 1]) * std::sin(a));
    }
    return acc;
  };
  x.qp = offset(101, x.nq);
  x.kp = offset(97, x.nk);
  for (bool causal : {false, true}) {
    x.causal = causal;
    check_softmax<T>(x, xp, {}, 81);
  }
}

namespace {

/// The dense long-double linear attention (identity φ, not normalised): out_s = Σ_{t visible}
/// (φ_q(q_s, s)·φ_k(k_t, t)) v_t with φ_q·φ_k = f_rel (Transformer-XL's score, exactly).
ld linear_loss(const model& m, const ld_rows& q, const ld_rows& k, const ld_rows& v, const ld_rows& d_out,
               const params& w) {
  ld loss = 0;
  for (index_t s = 0; s < m.nq; ++s) {
    for (index_t t = 0; t < m.nk; ++t) {
      if (m.causal && m.kp[std::size_t(t)] > m.qp[std::size_t(s)]) continue;
      const ld a = m.score(&q(s, 0), m.qp[std::size_t(s)], &k(t, 0), m.kp[std::size_t(t)], w);
      for (index_t j = 0; j < m.dv; ++j) loss += d_out(s, j) * a * v(t, j);
    }
  }
  return loss;
}

}  // namespace

TEST_CASE_TEMPLATE("linear attention backward, Transformer-XL: dQ, dK, dV and the head's u, v, W_R gradients",
                   T, float, double) {
  constexpr index_t d = 4, dm = 6;
  const params w0 = flat(uniform<T>(1, 2 * d + d * dm, 90));
  const lrpe::canonical::transformer_xl<T> xl(d, table<T>(w0, 0, 1, d), table<T>(w0, d, 1, d),
                                              table<T>(w0, 2 * d, d, dm), 100.0);
  model m = xl_model(d, dm, 100.0);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    m.causal = causal;
    m.qp = offset(4000, m.nq);
    m.kp = offset(3999, m.nk);
    const auto q = uniform<T>(m.nq, d, 91), k = uniform<T>(m.nk, d, 92);
    const auto v = uniform<T>(m.nk, m.dv, 93), d_out = uniform<T>(m.nq, m.dv, 94);
    lrpe::linear_options opt;
    opt.causal = causal;
    opt.q_positions = m.qp;
    opt.k_positions = m.kp;
    lrpe::row_matrix<T> dq(m.nq, d), dk(m.nk, d), dv(m.nk, m.dv);
    auto grad = xl.make_gradient();
    lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, xl, lrpe::feature_maps::identity{}, opt, &grad);
    const ld_rows ql = rows_of(flat(q), m.nq, d), kl = rows_of(flat(k), m.nk, d), vl = rows_of(flat(v), m.nk, m.dv);
    const ld_rows dol = rows_of(flat(d_out), m.nq, m.dv);
    CHECK(relative_error(flat(dq), fd(flat(q), 1e-3, [&](const params& x) {
            return linear_loss(m, rows_of(x, m.nq, d), kl, vl, dol, w0);
          })) <= tolerance<T>());
    CHECK(relative_error(flat(dk), fd(flat(k), 1e-3, [&](const params& x) {
            return linear_loss(m, ql, rows_of(x, m.nk, d), vl, dol, w0);
          })) <= tolerance<T>());
    CHECK(relative_error(flat(dv), fd(flat(v), 1e-3, [&](const params& x) {
            return linear_loss(m, ql, kl, rows_of(x, m.nk, m.dv), dol, w0);
          })) <= tolerance<T>());
    CHECK(relative_error(grad, fd(w0, 1e-3, [&](const params& w) { return linear_loss(m, ql, kl, vl, dol, w); })) <=
          tolerance<T>());
  }
}

TEST_CASE("softmax backward, multi-head: Shaw's one gradient sums over heads; DeBERTa's per-head gradients equal "
          "the single-head calls'") {
  using T = double;
  constexpr index_t batch = 1, heads = 2, n = 5, d = 4;
  const auto x = uniform<T>(3 * heads * n, d, 100), g = uniform<T>(heads * n, d, 101);
  const auto view = [&](const T* p) { return lrpe::bnsh(p, batch, heads, n, d); };
  const T* q = x.data();
  const T* k = x.data() + heads * n * d;
  const T* v = x.data() + 2 * heads * n * d;
  lrpe::row_matrix<T> out(heads * n, d), dq(heads * n, d), dk(heads * n, d), dv(heads * n, d);
  const auto mut = [&](lrpe::row_matrix<T>& m) { return lrpe::bnsh(m.data(), batch, heads, n, d); };
  const lrpe::softmax_options<> opt{true};

  const lrpe::canonical::shaw<T> shaw(d, 2, uniform<T>(5, d, 102), uniform<T>(5, d, 103));
  lrpe::softmax_attention(view(q), view(k), view(v), mut(out), shaw, opt);
  std::vector<std::vector<double>> one{shaw.make_gradient()};
  lrpe::softmax_attention_backward(view(q), view(k), view(v), view(out.data()),
                                   view(g.data()), {}, mut(dq), mut(dk), mut(dv), shaw, opt, std::span(one));
  std::vector<double> sum = shaw.make_gradient();
  for (index_t h = 0; h < heads; ++h) {
    const auto rows = [&](const T* p) { return lrpe::matrix_view<const T>(p + h * n * d, n, d, d); };
    lrpe::row_matrix<T> o(n, d), a(n, d), b(n, d), c(n, d);
    lrpe::softmax_attention(rows(q), rows(k), rows(v), o, shaw, opt);
    lrpe::softmax_attention_backward(rows(q), rows(k), rows(v), o, rows(g.data()), {}, a, b, c, shaw, opt, &sum);
    CHECK((a - dq.middleRows(h * n, n)).cwiseAbs().maxCoeff() <= 1e-15);
  }
  for (std::size_t j = 0; j < sum.size(); ++j) CHECK(one[0][j] == doctest::Approx(sum[j]).epsilon(1e-13));
  CHECK(shaw.key_gradient(sum)(0, 0) == sum[0]);
  CHECK(shaw.value_gradient(sum)(0, 0) == sum[5 * d]);

  const lrpe::canonical::deberta_v2<T> deberta(d, heads, {0, 3}, uniform<T>(6, heads * d, 104),
                                               uniform<T>(6, heads * d, 105));
  std::vector<std::vector<double>> per_head{deberta.head(0).make_gradient(), deberta.head(1).make_gradient()};
  lrpe::softmax_attention(view(q), view(k), view(v), mut(out), deberta, opt);
  lrpe::softmax_attention_backward(view(q), view(k), view(v), view(out.data()),
                                   view(g.data()), {}, mut(dq), mut(dk), mut(dv), deberta, opt, std::span(per_head));
  for (index_t h = 0; h < heads; ++h) {
    const auto rows = [&](const T* p) { return lrpe::matrix_view<const T>(p + h * n * d, n, d, d); };
    lrpe::row_matrix<T> o(n, d), a(n, d), b(n, d), c(n, d);
    auto single = deberta.head(h).make_gradient();
    lrpe::softmax_attention(rows(q), rows(k), rows(v), o, deberta.head(h), opt);
    lrpe::softmax_attention_backward(rows(q), rows(k), rows(v), o, rows(g.data()), {}, a, b, c, deberta.head(h), opt,
                                     &single);
    CHECK(single == per_head[std::size_t(h)]);
    CHECK((b - dk.middleRows(h * n, n)).cwiseAbs().maxCoeff() == 0);
  }
}

TEST_CASE("canonical backward: bad gradients are clear errors") {
  using T = double;
  const auto q = uniform<T>(3, 4, 110);
  lrpe::row_matrix<T> out(3, 4), dq(3, 4), dk(3, 4), dv(3, 4);
  const lrpe::canonical::shaw<T> shaw(4, 1, uniform<T>(3, 4, 111));
  lrpe::softmax_attention(q, q, q, out, shaw);
  std::vector<double> wrong(5);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention_backward(q, q, q, out, q, {}, dq, dk, dv, shaw, {}, &wrong),
                       doctest::Contains("grad->size()"), lrpe::shape_error);
  CHECK_THROWS_AS((void)shaw.value_gradient(wrong), lrpe::parameter_error);
  std::vector<double> right = shaw.make_gradient();
  CHECK(right.size() == 12);
  CHECK_THROWS_AS((void)shaw.key_gradient(wrong), lrpe::shape_error);
}

TEST_CASE("SPE training: linear attention's backward fills the code's gradient, draw_backward takes it to sineSPE's "
          "and convSPE's raw parameters; against differences of the whole loss (each draw from the same seed)") {
  namespace cn = lrpe::canonical;
  constexpr index_t d = 3, n = 6, r = 8, dv = 2, sines = 2, taps = 3;
  constexpr std::uint64_t seed = 5;
  const auto q = uniform<double>(n, d, 90), k = uniform<double>(n, d, 91), v = uniform<double>(n, dv, 92);
  const auto d_out = uniform<double>(n, dv, 93);
  const lrpe::linear_options lo{.causal = true};
  // L = Σ dO∘out of linear attention (identity map) with the code that `make` draws from w
  const auto loss_of = [&](const auto& make) {
    return [&, make](const params& w) {
      lrpe::row_matrix<double> out(n, dv);
      lrpe::linear_attention(q, k, v, out, make(w).draw(n, r, seed), lrpe::feature_maps::identity{}, lo);
      return ld((out.array() * d_out.array()).sum());
    };
  };
  const auto grad_of = [&](const auto& spe) {
    const auto code = spe.draw(n, r, seed);
    auto cg = code.make_gradient();
    lrpe::row_matrix<double> dq(n, d), dk(n, d), dvv(n, dv);
    lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dvv, code, lrpe::feature_maps::identity{}, lo, &cg);
    return spe.draw_backward(n, r, seed, cg);
  };
  const auto table = [](const params& w, std::size_t at, index_t rows, index_t cols) {
    lrpe::row_matrix<double> m(rows, cols);
    for (index_t i = 0; i < m.size(); ++i) m.data()[i] = w[at + std::size_t(i)];
    return m;
  };
  for (const bool gated : {false, true}) {
    CAPTURE(gated);
    // sineSPE: w = [freqs, offsets, gains (d × K each), gate (d)]
    params w = flat(uniform<double>(1, 3 * d * sines + d, 94));
    const std::size_t block = std::size_t(d * sines);
    const auto make_sine = [&, gated](const params& x) {
      return cn::sine_spe<double>(table(x, 0, d, sines), table(x, block, d, sines), table(x, 2 * block, d, sines),
                                  gated ? params(x.begin() + 3 * std::ptrdiff_t(block), x.end()) : params{});
    };
    const auto gs = grad_of(make_sine(w));
    params got;
    for (const auto* m : {&gs.freqs, &gs.offsets, &gs.gains}) got.insert(got.end(), m->data(), m->data() + m->size());
    got.insert(got.end(), gs.gate.begin(), gs.gate.end());
    std::vector<ld> want;
    const auto loss_sine = loss_of(make_sine);
    for (std::size_t j = 0; j < (gated ? w.size() : 3 * block); ++j) want.push_back(derivative(w, j, 1e-4, loss_sine));
    CHECK(relative_error(got, want) <= 1e-7);
    // convSPE: w = [q filters, k filters (d × K each), gate (d)]
    params c = flat(uniform<double>(1, 2 * d * taps + d, 95));
    const std::size_t cb = std::size_t(d * taps);
    const auto make_conv = [&, gated](const params& x) {
      return cn::conv_spe<double>(table(x, 0, d, taps), table(x, cb, d, taps),
                                  gated ? params(x.begin() + 2 * std::ptrdiff_t(cb), x.end()) : params{});
    };
    const auto gc = grad_of(make_conv(c));
    got.clear();
    for (const auto* m : {&gc.q_filters, &gc.k_filters}) got.insert(got.end(), m->data(), m->data() + m->size());
    got.insert(got.end(), gc.gate.begin(), gc.gate.end());
    want.clear();
    const auto loss_conv = loss_of(make_conv);
    for (std::size_t j = 0; j < (gated ? c.size() : 2 * cb); ++j) want.push_back(derivative(c, j, 1e-4, loss_conv));
    CHECK(relative_error(got, want) <= 1e-7);
  }
  const auto spe = cn::conv_spe<double>(uniform<double>(d, taps, 96), uniform<double>(d, taps, 97));
  CHECK_THROWS_AS((void)spe.draw_backward(n, r, seed, params(3)), lrpe::shape_error);
}
