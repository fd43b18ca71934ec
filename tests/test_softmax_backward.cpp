// SPDX-License-Identifier: MIT
// softmax_attention_backward and softmax_attention_lse against an independent long-double
// reference: the forward written densely here (logits from the reference matrices of
// tests/reference.hpp, the softmax, the reweighting, L = Σ dO∘O), and every gradient (dQ, dK,
// dV, θ, the Householder vector) by Richardson-extrapolated central differences of it. Causal
// and not, offsets and position arrays (far, and rows with no visible key), ALiBi, a URPE-style
// reweighting, complex encoders, tiles, the log-sum-exps, and bad input.
#include "gradient_helpers.hpp"
#include "reference.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

using grad_test::cvec;
using grad_test::derivative;
using grad_test::relative_error;
using grad_test::uniform;
using lrpe::index_t;
using lrpe::position_t;
using ref::cld;
using ref::ld;

namespace {

using ld_rows = Eigen::Matrix<ld, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// One softmax problem: shapes, positions, and the encoding's pieces as long-double functions.
struct setup {
  index_t nq = 5, nk = 6, d = 4, dv = 3;
  std::vector<position_t> qp, kp;
  bool causal = false;
  index_t tile = 64;
  std::function<ld(position_t, position_t)> bias = [](position_t, position_t) { return ld(0); };
  std::function<ld(position_t, position_t)> weight = [](position_t, position_t) { return ld(1); };
  /// A learnable bias's parameters, and the bias they give (for its finite differences).
  std::vector<double> bias_params;
  std::function<std::function<ld(position_t, position_t)>(const std::vector<double>&)> bias_with;
};

/// The rows' logits' features: M(s) x as complex d-vectors (M = I without an encoder).
using features_fn = std::function<cvec(position_t, const ld_rows&, index_t)>;

/// The dense long-double forward: per query row, its visible logits, their softmax, the
/// reweighting, O; then L = Σ dO∘O and (optionally) each row's log-sum-exp.
ld reference_loss(const setup& c, ld scale, const features_fn& feat, const ld_rows& q, const ld_rows& k,
                   const ld_rows& v, const ld_rows& d_out, std::vector<ld>* lse = nullptr) {
  std::vector<cvec> kf;
  for (index_t t = 0; t < c.nk; ++t) kf.push_back(feat(c.kp[std::size_t(t)], k, t));
  ld loss = 0;
  for (index_t s = 0; s < c.nq; ++s) {
    const position_t ps = c.qp[std::size_t(s)];
    const cvec qf = feat(ps, q, s);
    std::vector<ld> logit(std::size_t(c.nk), -std::numeric_limits<ld>::infinity());
    ld top = -std::numeric_limits<ld>::infinity();
    for (index_t t = 0; t < c.nk; ++t) {
      const position_t pt = c.kp[std::size_t(t)];
      if (c.causal && pt > ps) continue;
      logit[std::size_t(t)] = scale * (qf.adjoint() * kf[std::size_t(t)])(0, 0).real() + c.bias(ps, pt);
      top = std::max(top, logit[std::size_t(t)]);
    }
    if (lse != nullptr) lse->push_back(top);
    if (top == -std::numeric_limits<ld>::infinity()) continue;  // no visible key: O_s = 0
    ld sum = 0;
    for (ld l : logit) sum += std::exp(l - top);
    if (lse != nullptr) lse->back() = top + std::log(sum);
    for (index_t t = 0; t < c.nk; ++t) {
      const ld p = std::exp(logit[std::size_t(t)] - top) / sum;
      if (p == 0) continue;
      const ld w = p * c.weight(ps, c.kp[std::size_t(t)]);
      for (index_t j = 0; j < c.dv; ++j) loss += d_out(s, j) * w * v(t, j);
    }
  }
  return loss;
}

features_fn plain_features() {
  return [](position_t, const ld_rows& x, index_t i) { return cvec(x.row(i).transpose().template cast<cld>()); };
}
/// Λ(s)·P·x with Λ from the policy's parameters and P given as a long-double matrix.
template <class L>
features_fn lambda_features(const L& l, const ref::mat& p) {
  return [l, p](position_t s, const ld_rows& x, index_t i) {
    return cvec(ref::Lambda(l, s) * (p * x.row(i).transpose().template cast<cld>()));
  };
}
template <class E>
features_fn encoder_features(const E& e) {
  return lambda_features(e.lambda(), ref::P(e.p()));
}

template <class T>
ld_rows to_ld(const lrpe::row_matrix<T>& m) {
  return m.template cast<ld>();
}

/// Finite differences of L along every entry of one input (the others fixed).
template <class Loss>
std::vector<ld> input_gradient(const ld_rows& x, const Loss& loss_with) {
  std::vector<double> w(x.data(), x.data() + x.size());
  std::vector<ld> g(w.size());
  for (std::size_t j = 0; j < w.size(); ++j) {
    g[j] = derivative(w, j, 1e-3, [&](const std::vector<double>& p) {
      ld_rows y = x;
      for (index_t i = 0; i < y.size(); ++i) y.data()[i] = p[std::size_t(i)];
      return loss_with(y);
    });
  }
  return g;
}

template <class T>
std::vector<double> flat(const lrpe::row_matrix<T>& m) {
  return std::vector<double>(m.data(), m.data() + m.size());
}

template <class T>
ld tolerance() {
  return sizeof(T) < sizeof(double) ? 2e-4L : 1e-10L;
}

/// The library's forward (with log-sum-exps) and backward on `c` against the reference: O, lse,
/// dQ, dK, dV, and the encoder's parameter gradients.
template <class T, class Encoding>
void check_case(const setup& c, const Encoding& encoding, const features_fn& feat, std::uint64_t seed) {
  CAPTURE(c.causal);
  CAPTURE(c.tile);
  const auto q = uniform<T>(c.nq, c.d, seed), k = uniform<T>(c.nk, c.d, seed + 1);
  const auto v = uniform<T>(c.nk, c.dv, seed + 2), d_out = uniform<T>(c.nq, c.dv, seed + 3);
  const ld scale = 1 / std::sqrt(ld(c.d));
  const auto reweight = [&c](position_t s, position_t t) { return double(c.weight(s, t)); };
  // the scale explicit: T5's default is 1, not 1/√d
  lrpe::softmax_options<decltype(reweight)> opt{c.causal, double(scale), c.qp, c.kp, c.tile, reweight};

  lrpe::row_matrix<T> out(c.nq, c.dv), dq(c.nq, c.d), dk(c.nk, c.d), dv(c.nk, c.dv);
  std::vector<T> lse(std::size_t(c.nq));
  lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), encoding, opt);
  constexpr bool learnable = requires { encoding.make_gradient(); };
  lrpe::encoding_gradient_t<Encoding> grad{};
  if constexpr (learnable) grad = encoding.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out, d_out, std::span<const T>(lse), dq, dk, dv, encoding, opt,
                                   learnable ? &grad : nullptr);

  const ld_rows ql = to_ld(q), kl = to_ld(k), vl = to_ld(v), dol = to_ld(d_out);
  std::vector<ld> lse_ref;
  reference_loss(c, scale, feat, ql, kl, vl, dol, &lse_ref);
  for (index_t i = 0; i < c.nq; ++i) {
    if (std::isinf(lse_ref[std::size_t(i)])) CHECK(lse[std::size_t(i)] == -std::numeric_limits<T>::infinity());
    else CHECK(std::abs(ld(lse[std::size_t(i)]) - lse_ref[std::size_t(i)]) <= 64 * std::numeric_limits<T>::epsilon());
  }
  const auto loss = [&](const ld_rows& qq, const ld_rows& kk, const ld_rows& vv) {
    return reference_loss(c, scale, feat, qq, kk, vv, dol);
  };
  CHECK(relative_error(flat(dq), input_gradient(ql, [&](const ld_rows& x) { return loss(x, kl, vl); })) <= tolerance<T>());
  CHECK(relative_error(flat(dk), input_gradient(kl, [&](const ld_rows& x) { return loss(ql, x, vl); })) <= tolerance<T>());
  CHECK(relative_error(flat(dv), input_gradient(vl, [&](const ld_rows& x) { return loss(ql, kl, x); })) <= tolerance<T>());

  if constexpr (learnable && !lrpe::lrpe_encoder<Encoding>) {  // a bias's slope or table
    REQUIRE(c.bias_with);
    std::vector<ld> want(c.bias_params.size());
    for (std::size_t j = 0; j < want.size(); ++j) {
      want[j] = derivative(c.bias_params, j, 1e-4, [&](const std::vector<double>& w) {
        setup perturbed = c;
        perturbed.bias = c.bias_with(w);
        return reference_loss(perturbed, scale, feat, ql, kl, vl, dol);
      });
    }
    CHECK(relative_error(grad, want) <= tolerance<T>());
  }
  if constexpr (lrpe::lrpe_encoder<Encoding>) {
    using P = typename Encoding::p_type;
    using L = typename Encoding::lambda_type;
    if constexpr (lrpe::reparameterisable<L>) {
      double far = 1;  // the loss depends on t − s only: the step is sized by the span
      for (auto s : c.qp)
        for (auto t : c.kp) far = std::max(far, std::abs(double(t - s)));
      const auto theta = encoding.lambda().parameters();
      std::vector<ld> want(theta.size());
      for (std::size_t j = 0; j < theta.size(); ++j) {
        want[j] = derivative(theta, j, 1e-4 / far, [&](const std::vector<double>& w) {
          return reference_loss(c, scale, lambda_features(encoding.lambda().with_parameters(w), ref::P(encoding.p())),
                                ql, kl, vl, dol);
        });
      }
      CHECK(relative_error(grad.lambda, want) <= tolerance<T>());
    }
    if constexpr (std::is_same_v<P, lrpe::p::householder<T>>) {
      const auto w0 = encoding.p().parameters();  // ‖v‖·u
      std::vector<ld> want(w0.size());
      for (std::size_t j = 0; j < w0.size(); ++j) {
        want[j] = derivative(w0, j, 1e-4 * encoding.p().input_norm(), [&](const std::vector<double>& w) {
          return reference_loss(c, scale, lambda_features(encoding.lambda(), grad_test::householder_from(w)), ql, kl,
                                vl, dol);
        });
      }
      CHECK(relative_error(grad.p, want) <= tolerance<T>());
    }
  }
}

std::vector<position_t> offset(position_t first, index_t n) {
  std::vector<position_t> p;
  for (index_t i = 0; i < n; ++i) p.push_back(first + i);
  return p;
}

}  // namespace

TEST_CASE_TEMPLATE("softmax backward, no encoding: dQ, dK, dV and the log-sum-exps against the long-double "
                   "reference (causal or not, offsets, arrays with masked rows, tiles)", T, float, double) {
  setup c;
  c.qp = offset(3, c.nq);
  c.kp = offset(0, c.nk);
  for (bool causal : {false, true}) {
    c.causal = causal;
    for (index_t tile : {1, 3, 64}) {
      c.tile = tile;
      check_case<T>(c, lrpe::no_encoding{}, plain_features(), 100 + std::uint64_t(tile));
    }
  }
  // positions arrays, causal: the first query row sees no key, another sees one
  c.qp = {-4, 0, 2, 2, 9};
  c.kp = {0, 1, 1, 5, 8, 30};
  c.causal = true;
  c.tile = 2;
  check_case<T>(c, lrpe::no_encoding{}, plain_features(), 200);
}

TEST_CASE_TEMPLATE("softmax backward, lrpe encoders: dQ, dK, dV and dθ, dv (Householder) against the long-double "
                   "reference, near and far positions", T, float, double) {
  setup c;
  c.d = 6;
  const lrpe::type3<T> type3(c.d);                           // learned Householder vector and θ
  const lrpe::rope_neox<T> neox(c.d);                         // split-half pairs
  const lrpe::type8<T> type8(c.d);                            // complex (DFT, phases)
  for (position_t base : {position_t(0), position_t(1'000'000)}) {
    c.qp = offset(base + 2, c.nq);
    c.kp = offset(base, c.nk);
    for (bool causal : {false, true}) {
      c.causal = causal;
      check_case<T>(c, type3, encoder_features(type3), 300);
      check_case<T>(c, neox, encoder_features(neox), 301);
      check_case<T>(c, type8, encoder_features(type8), 302);
    }
  }
}

TEST_CASE_TEMPLATE("softmax backward: ALiBi, T5 and Toeplitz biases (their slope's and tables' gradients) and a "
                   "URPE-style reweighting", T, float, double) {
  setup c;
  c.qp = offset(0, c.nq);
  c.kp = offset(0, c.nk);
  for (auto form : {lrpe::canonical::alibi_form::symmetric, lrpe::canonical::alibi_form::causal}) {
    const auto alibi = lrpe::canonical::alibi<T>::for_heads(c.d, 4, form).head(1);
    c.bias_params = {alibi.slope()};
    c.bias_with = [form, d = c.d](const std::vector<double>& m) {
      const auto a = lrpe::canonical::alibi<T>(d, {m[0]}, form);
      return std::function<ld(position_t, position_t)>([a](position_t s, position_t t) { return ld(a.bias(s, t)); });
    };
    c.bias = c.bias_with(c.bias_params);
    c.causal = false;
    check_case<T>(c, alibi, plain_features(), 400);
    c.causal = true;
    check_case<T>(c, alibi, plain_features(), 401);
  }
  // T5 buckets (bidirectional, so that both signs of t − s have buckets) and a Toeplitz table,
  // head 1 of 2: the row's gradient
  {
    const lrpe::canonical::t5_buckets cfg{8, 16, true};
    const lrpe::row_matrix<T> table = uniform<T>(2, 8, 403);
    const auto t5 = lrpe::canonical::t5_bias<T>(c.d, cfg, table).head(1);
    c.bias_params.assign(table.row(1).data(), table.row(1).data() + 8);
    // the differences step the table in double (a float table would round the steps taken)
    c.bias_with = [cfg, d = c.d, table](const std::vector<double>& row) {
      lrpe::row_matrix<double> t = table.template cast<double>();
      for (index_t j = 0; j < 8; ++j) t(1, j) = row[std::size_t(j)];
      const auto b = lrpe::canonical::t5_bias<double>(d, cfg, t).head(1);
      return std::function<ld(position_t, position_t)>([b](position_t s, position_t t) { return ld(b.bias(s, t)); });
    };
    c.bias = c.bias_with(c.bias_params);
    c.causal = false;
    check_case<T>(c, t5, plain_features(), 404);
    const lrpe::row_matrix<T> wt = uniform<T>(1, 5, 405);
    const auto toeplitz = lrpe::canonical::toeplitz_bias<T>(c.d, 2, wt);
    c.bias_params.assign(wt.data(), wt.data() + 5);
    c.bias_with = [d = c.d](const std::vector<double>& row) {
      lrpe::row_matrix<double> t(1, 5);
      for (index_t j = 0; j < 5; ++j) t(0, j) = row[std::size_t(j)];
      const auto b = lrpe::canonical::toeplitz_bias<double>(d, 2, t);
      return std::function<ld(position_t, position_t)>([b](position_t s, position_t t) { return ld(b.bias(s, t)); });
    };
    c.bias = c.bias_with(c.bias_params);
    c.causal = true;
    check_case<T>(c, toeplitz, plain_features(), 406);
  }
  c.bias = [](position_t, position_t) { return ld(0); };
  c.bias_with = nullptr;
  c.weight = [](position_t s, position_t t) { return ld(1) + ld(0.25) * ld((t - s) % 3); };
  check_case<T>(c, lrpe::no_encoding{}, plain_features(), 402);
  c.causal = false;
  const lrpe::rope_gptj<T> rope(c.d);
  check_case<T>(c, rope, encoder_features(rope), 403);
}

TEST_CASE_TEMPLATE("softmax backward: pair-keyed biases (Swin's window, Graphormer's distances, TUPE): their "
                   "gradients against the long-double reference", T, float, double) {
  setup c;  // 5 queries, 6 keys: the tokens of a 2 x 3 window, or 6 graph nodes
  c.qp = {0, 1, 2, 3, 5};
  c.kp = offset(0, c.nk);
  const index_t wh = 2, ww = 3, buckets = (2 * wh - 1) * (2 * ww - 1);
  const lrpe::row_matrix<T> table = uniform<T>(2, buckets, 410);
  const auto swin = lrpe::canonical::swin_bias<T>(c.d, wh, ww, table).head(1);
  c.bias_params.assign(table.row(1).data(), table.row(1).data() + buckets);
  // the bucket from the tokens' (y, x), written here from Swin's definition
  c.bias_with = [ww, wh](const std::vector<double>& row) {
    return std::function<ld(position_t, position_t)>([row, ww, wh](position_t s, position_t t) {
      const position_t dy = s / ww - t / ww + wh - 1, dx = s % ww - t % ww + ww - 1;
      return ld(row[std::size_t(dy * (2 * ww - 1) + dx)]);
    });
  };
  c.bias = c.bias_with(c.bias_params);
  for (bool causal : {false, true}) {
    c.causal = causal;
    check_case<T>(c, swin, plain_features(), 411);
  }
  // a path 0 - 1 - 2 - 3 and an edge 4 - 5: distances |s − t| on the path, 1 within the pair,
  // unreachable across; buckets min(φ, 2), unreachable 3
  const lrpe::canonical::adjacency_list graph =
      lrpe::canonical::undirected_graph(6, std::vector<std::pair<index_t, index_t>>{{0, 1}, {1, 2}, {2, 3}, {4, 5}});
  const lrpe::row_matrix<T> gt = uniform<T>(1, 4, 412);
  const auto spatial = lrpe::canonical::graphormer_spatial_bias<T>(c.d, graph, 2, gt);
  c.bias_params.assign(gt.data(), gt.data() + 4);
  c.bias_with = [](const std::vector<double>& row) {
    return std::function<ld(position_t, position_t)>([row](position_t s, position_t t) {
      const bool same_part = (s < 4) == (t < 4);
      return ld(row[same_part ? std::size_t(std::min<position_t>(std::abs(s - t), 2)) : 3]);
    });
  };
  c.bias = c.bias_with(c.bias_params);
  c.causal = false;
  check_case<T>(c, spatial, plain_features(), 413);
  // TUPE over 6 positions (head 1 of 2): its gradient vector is dL/dA_h (6 × 6), dL/dθ₁, dL/dθ₂
  // and the relative row; the bias from those parameters, written from the paper
  const lrpe::canonical::t5_buckets tupe_buckets{8, 16, true};
  const lrpe::canonical::tupe<T> tupe(c.d, uniform<T>(6, 5, 414), uniform<T>(5, 2 * c.d, 415),
                                      uniform<T>(5, 2 * c.d, 416), {true, tupe_buckets}, uniform<T>(2, 2, 417),
                                      uniform<T>(2, 8, 418));
  const auto head = tupe.head(1);
  c.bias_params.clear();
  for (position_t s = 0; s < 6; ++s)
    for (position_t t = 0; t < 6; ++t) c.bias_params.push_back(head.absolute_term(s, t));
  c.bias_params.push_back(double(uniform<T>(2, 2, 417)(1, 0)));
  c.bias_params.push_back(double(uniform<T>(2, 2, 417)(1, 1)));
  for (index_t b = 0; b < 8; ++b) c.bias_params.push_back(double(uniform<T>(2, 8, 418)(1, b)));
  c.bias_with = [tupe_buckets](const std::vector<double>& w) {
    return std::function<ld(position_t, position_t)>([w, tupe_buckets](position_t s, position_t t) {
      const double a = s == 0 ? w[36] : t == 0 ? w[37] : w[std::size_t(s * 6 + t)];
      return ld(a) + ld(w[std::size_t(38 + lrpe::canonical::t5_bucket(t - s, tupe_buckets))]);
    });
  };
  c.bias = c.bias_with(c.bias_params);
  for (bool causal : {false, true}) {
    c.causal = causal;
    check_case<T>(c, head, plain_features(), 419);
  }
}

TEST_CASE("softmax backward: recomputed log-sum-exps give the same gradients; empty problems give zeros") {
  using T = double;
  const lrpe::type2<T> e(4);
  const auto q = uniform<T>(5, 4, 1), k = uniform<T>(7, 4, 2), v = uniform<T>(7, 3, 3), d_out = uniform<T>(5, 3, 4);
  lrpe::softmax_options<> opt;
  opt.causal = true;
  opt.tile = 2;
  lrpe::row_matrix<T> out(5, 3), dq1(5, 4), dk1(7, 4), dv1(7, 3), dq2(5, 4), dk2(7, 4), dv2(7, 3);
  std::vector<T> lse(5);
  lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), e, opt);
  auto g1 = e.make_gradient(), g2 = e.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out, d_out, std::span<const T>(lse), dq1, dk1, dv1, e, opt, &g1);
  lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq2, dk2, dv2, e, opt, &g2);
  CHECK(dq1 == dq2);
  CHECK(dk1 == dk2);
  CHECK(dv1 == dv2);
  CHECK(g1.lambda == g2.lambda);
  CHECK(g1.p == g2.p);
  // The plain forward's output equals the one with log-sum-exps.
  lrpe::row_matrix<T> plain(5, 3);
  lrpe::softmax_attention(q, k, v, plain, e, opt);
  CHECK(plain == out);

  lrpe::row_matrix<T> none(0, 4), no_v(0, 3), dnone(0, 4), dnov(0, 3), o5(5, 3), g5(5, 3);
  o5.setZero();
  dq1.setConstant(7);
  lrpe::softmax_attention_backward(q, none, no_v, o5, d_out, {}, dq1, dnone, dnov, e, opt);
  CHECK(dq1.isZero(0));
}

TEST_CASE("softmax backward: bad input is a clear error naming the argument") {
  using T = float;
  const auto q = uniform<T>(3, 4, 1), k = uniform<T>(5, 4, 2), v = uniform<T>(5, 2, 3), d_out = uniform<T>(3, 2, 4);
  lrpe::row_matrix<T> out(3, 2), dq(3, 4), dk(5, 4), dv(5, 2), bad_dq(3, 5), bad_dout(2, 2);
  const std::vector<T> short_lse(2);
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const lrpe::error& e) {
      return std::string(dynamic_cast<const std::exception&>(e).what());
    }
    return std::string("no error");
  };
  const lrpe::no_encoding none;
  CHECK(message([&] { lrpe::softmax_attention_backward(q, k, v, out, bad_dout, {}, dq, dk, dv, none); })
            .find("d_out.rows") != std::string::npos);
  CHECK(message([&] { lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, bad_dq, dk, dv, none); })
            .find("dq.cols") != std::string::npos);
  CHECK(message([&] {
          lrpe::softmax_attention_backward(q, k, v, out, d_out, std::span<const T>(short_lse), dq, dk, dv, none);
        }).find("lse.size()") != std::string::npos);
  std::vector<T> lse(2);
  CHECK(message([&] { lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), none); }).find("lse.size()") !=
        std::string::npos);
  const lrpe::type2<T> e(4);
  lrpe::encoder_gradient wrong{{}, {}};
  CHECK(message([&] {
          lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq, dk, dv, e, lrpe::softmax_options<>{}, &wrong);
        }).find("grad->p.size()") != std::string::npos);
}

TEST_CASE_TEMPLATE("softmax backward, multi-head: grouped-query K/V (dK, dV summed over each group), a shared encoder's "
                   "gradient summed over heads, per-head encoders' own, == the single-head calls", T, float, double) {
  const index_t B = 2, H = 4, HK = 2, n = 5, d = 6, dv = 3;
  std::vector<T> q(std::size_t(B * H * n * d)), k(std::size_t(B * HK * n * d)), v(std::size_t(B * HK * n * dv)),
      d_out(std::size_t(B * H * n * dv)), out(d_out.size()), dq(q.size()), dk(k.size()), dvv(v.size()),
      lse(std::size_t(B * H * n));
  lrpe::generator g(77);
  for (auto* buf : {&q, &k, &v, &d_out})
    for (auto& x : *buf) x = static_cast<T>(2 * g.uniform01() - 1);
  const auto qv = lrpe::bnsh(std::as_const(q).data(), B, H, n, d), kv = lrpe::bnsh(std::as_const(k).data(), B, HK, n, d);
  const auto vv = lrpe::bnsh(std::as_const(v).data(), B, HK, n, dv);
  const auto ov = lrpe::bnsh(std::as_const(out).data(), B, H, n, dv), dov = lrpe::bnsh(std::as_const(d_out).data(), B, H, n, dv);
  lrpe::softmax_options<> opt;
  opt.causal = true;
  opt.q_positions = 3;
  const lrpe::type3<T> shared(d);
  const std::vector<lrpe::rope_neox<T>> per_head{lrpe::rope_neox<T>(d), lrpe::rope_neox<T>(d), lrpe::rope_neox<T>(d),
                                                 lrpe::rope_neox<T>(d)};
  const auto run = [&](const auto& encodings, std::span<lrpe::encoder_gradient> grads, const auto& head_encoding) {
    lrpe::softmax_attention_lse(qv, kv, vv, lrpe::bnsh(out.data(), B, H, n, dv), std::span<T>(lse), encodings, opt);
    lrpe::softmax_attention_backward(qv, kv, vv, ov, dov, std::span<const T>(lse), lrpe::bnsh(dq.data(), B, H, n, d),
                                     lrpe::bnsh(dk.data(), B, HK, n, d), lrpe::bnsh(dvv.data(), B, HK, n, dv), encodings,
                                     opt, grads);
    // the single-head calls, K and V of head h / 2, summed by hand
    std::vector<lrpe::encoder_gradient> want;
    for (const auto& gr : grads) want.push_back(gr), want.back().zero();
    for (index_t b = 0; b < B; ++b) {
      lrpe::row_matrix<T> dk_sum = lrpe::row_matrix<T>::Zero(n * HK, d), dv_sum = lrpe::row_matrix<T>::Zero(n * HK, dv);
      for (index_t h = 0; h < H; ++h) {
        const index_t hk = h / (H / HK);
        lrpe::row_matrix<T> o1(n, dv), dq1(n, d), dk1(n, d), dv1(n, dv);
        std::vector<T> l1(static_cast<std::size_t>(n));
        const auto& e = head_encoding(h);
        lrpe::softmax_attention_lse(qv.head(b, h), kv.head(b, hk), vv.head(b, hk), o1, std::span<T>(l1), e, opt);
        lrpe::encoder_gradient* gr = want.empty() ? nullptr : &want[want.size() == 1 ? 0 : std::size_t(h)];
        lrpe::softmax_attention_backward(qv.head(b, h), kv.head(b, hk), vv.head(b, hk), o1, dov.head(b, h),
                                         std::span<const T>(l1), dq1, dk1, dv1, e, opt, gr);
        for (index_t i = 0; i < n; ++i) {
          for (index_t j = 0; j < d; ++j) CHECK(dq[std::size_t(((b * H + h) * n + i) * d + j)] == dq1(i, j));
          for (index_t j = 0; j < dv; ++j) CHECK(out[std::size_t(((b * H + h) * n + i) * dv + j)] == o1(i, j));
        }
        dk_sum.middleRows(hk * n, n) += dk1;
        dv_sum.middleRows(hk * n, n) += dv1;
      }
      for (index_t hk = 0; hk < HK; ++hk)
        for (index_t i = 0; i < n; ++i) {
          for (index_t j = 0; j < d; ++j) CHECK(dk[std::size_t(((b * HK + hk) * n + i) * d + j)] == dk_sum(hk * n + i, j));
          for (index_t j = 0; j < dv; ++j)
            CHECK(dvv[std::size_t(((b * HK + hk) * n + i) * dv + j)] == dv_sum(hk * n + i, j));
        }
    }
    for (std::size_t i = 0; i < grads.size(); ++i) {
      CHECK(grads[i].lambda == want[i].lambda);
      CHECK(grads[i].p == want[i].p);
    }
  };
  std::vector<lrpe::encoder_gradient> one{shared.make_gradient()};
  run(shared, one, [&](index_t) -> const lrpe::type3<T>& { return shared; });
  std::vector<lrpe::encoder_gradient> four(4, per_head[0].make_gradient());
  run(per_head, four, [&](index_t h) -> const lrpe::rope_neox<T>& { return per_head[std::size_t(h)]; });
  CHECK_THROWS_AS(run(per_head, one, [&](index_t h) -> const lrpe::rope_neox<T>& { return per_head[std::size_t(h)]; }),
                  lrpe::shape_error);
}

TEST_CASE("softmax backward, multi-head: a per-head ALiBi table gives each head's slope gradient") {
  using T = double;
  const index_t B = 1, H = 3, n = 6, d = 4, dv = 2;
  std::vector<T> q(std::size_t(B * H * n * d)), k(q.size()), v(std::size_t(B * H * n * dv)), d_out(v.size()),
      out(v.size()), dq(q.size()), dk(k.size()), dvv(v.size());
  lrpe::generator g(91);
  for (auto* buf : {&q, &k, &v, &d_out})
    for (auto& x : *buf) x = 2 * g.uniform01() - 1;
  const auto alibi = lrpe::canonical::alibi<T>::for_heads(d, H);
  const auto qv = lrpe::bnsh(std::as_const(q).data(), B, H, n, d), kv = lrpe::bnsh(std::as_const(k).data(), B, H, n, d);
  const auto vv = lrpe::bnsh(std::as_const(v).data(), B, H, n, dv), dov = lrpe::bnsh(std::as_const(d_out).data(), B, H, n, dv);
  lrpe::softmax_options<> opt;
  opt.causal = true;
  lrpe::softmax_attention(qv, kv, vv, lrpe::bnsh(out.data(), B, H, n, dv), alibi, opt);
  std::vector<std::vector<double>> grads(H, alibi.make_gradient());
  lrpe::softmax_attention_backward(qv, kv, vv, lrpe::bnsh(std::as_const(out).data(), B, H, n, dv), dov, {},
                                   lrpe::bnsh(dq.data(), B, H, n, d), lrpe::bnsh(dk.data(), B, H, n, d),
                                   lrpe::bnsh(dvv.data(), B, H, n, dv), alibi, opt, std::span<std::vector<double>>(grads));
  for (index_t h = 0; h < H; ++h) {
    const auto head = alibi.head(h);
    lrpe::row_matrix<T> o(n, dv), a(n, d), b(n, d), c(n, dv);
    lrpe::softmax_attention(qv.head(0, h), kv.head(0, h), vv.head(0, h), o, head, opt);
    auto want = head.make_gradient();
    lrpe::softmax_attention_backward(qv.head(0, h), kv.head(0, h), vv.head(0, h), o, dov.head(0, h), {}, a, b, c, head,
                                     opt, &want);
    CHECK(grads[std::size_t(h)] == want);
    CHECK(want[0] != 0);
  }
}

TEST_CASE_TEMPLATE("softmax backward: URPE's table gets its gradient (options.reweight_gradient, laid out as the "
                   "table: head 1's row, head 0's untouched); a reweighting without parameters rejects one", T, float,
                   double) {
  setup c;
  c.qp = offset(0, c.nq);
  c.kp = offset(0, c.nk);
  const lrpe::canonical::t5_buckets cfg{8, 16, true};
  const lrpe::row_matrix<T> table = (uniform<T>(2, 8, 700).array() * T(0.5) + T(1)).matrix();
  const auto urpe = lrpe::canonical::urpe<T>(cfg, table).head(1);
  const auto q = uniform<T>(c.nq, c.d, 701), k = uniform<T>(c.nk, c.d, 702);
  const auto v = uniform<T>(c.nk, c.dv, 703), d_out = uniform<T>(c.nq, c.dv, 704);
  const ld_rows ql = to_ld(q), kl = to_ld(k), vl = to_ld(v), dol = to_ld(d_out);
  const ld scale = 1 / std::sqrt(ld(c.d));
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    c.causal = causal;
    lrpe::softmax_options<lrpe::canonical::urpe<T>> opt;
    opt.causal = causal;
    opt.q_positions = c.qp;
    opt.k_positions = c.kp;
    opt.reweight = urpe;
    std::vector<double> grad = urpe.make_gradient();
    REQUIRE(grad.size() == 16);
    opt.reweight_gradient = grad.data();
    lrpe::row_matrix<T> out(c.nq, c.dv), dq(c.nq, c.d), dk(c.nk, c.d), dv(c.nk, c.dv);
    std::vector<T> lse(std::size_t(c.nq));
    lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), lrpe::no_encoding{}, opt);
    lrpe::softmax_attention_backward(q, k, v, out, d_out, std::span<const T>(lse), dq, dk, dv, lrpe::no_encoding{}, opt);
    // the table in double: the differences step exactly what they say
    const std::vector<double> row(table.row(1).data(), table.row(1).data() + 8);
    std::vector<ld> want(8);
    for (std::size_t j = 0; j < 8; ++j)
      want[j] = derivative(row, j, 1e-4, [&](const std::vector<double>& w) {
        setup moved = c;
        moved.weight = [cfg, w](position_t s, position_t t) {
          return ld(w[std::size_t(lrpe::canonical::t5_bucket(lrpe::canonical::saturating_offset(s, t), cfg))]);
        };
        return reference_loss(moved, scale, plain_features(), ql, kl, vl, dol);
      });
    CHECK(relative_error(std::vector<double>(grad.begin() + 8, grad.end()), want) <= tolerance<T>());
    CHECK(std::all_of(grad.begin(), grad.begin() + 8, [](double x) { return x == 0.0; }));
  }
  double unused = 0;
  const auto plain = [](position_t, position_t) { return 1.0; };
  lrpe::softmax_options<decltype(plain)> bad{false, std::nullopt, 0, 0, 64, plain, &unused};
  lrpe::row_matrix<T> out(c.nq, c.dv), dq(c.nq, c.d), dk(c.nk, c.d), dv(c.nk, c.dv);
  lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, bad);
  CHECK_THROWS_WITH_AS(lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq, dk, dv, lrpe::no_encoding{}, bad),
                       doctest::Contains("options.reweight_gradient"), lrpe::parameter_error);
}
