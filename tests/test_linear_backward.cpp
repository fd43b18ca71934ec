// SPDX-License-Identifier: MIT
// linear_attention_backward against an independent long-double reference: the forward written
// densely here (φ, the reference matrices of tests/reference.hpp, the decayed causal sums, the
// initial state, the normalisation), the loss L = Σ dO∘O + ⟨dS_f, S_f⟩ + ⟨dz_f, z_f⟩ (the
// state the call leaves), and every gradient (dQ, dK, dV, θ, the Householder vector, S₀, z₀)
// by Richardson-extrapolated central differences of it. Then: a sequence split in two calls
// with the state's gradient handed back equals one call, and bad input.
#include "gradient_helpers.hpp"
#include "reference.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
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
using ld_vec = Eigen::Matrix<ld, Eigen::Dynamic, 1>;

enum class phi_kind { elu_plus_one, relu, identity };

ld phi_of(phi_kind k, ld x) {
  switch (k) {
    case phi_kind::elu_plus_one: return x > 0 ? x + 1 : std::exp(x);
    case phi_kind::relu: return x > 0 ? x : 0;
    default: return x;
  }
}

/// One problem: shapes, positions, options, the initial state and the final state's gradient.
struct setup {
  index_t nq = 5, nk = 5, d = 4, dv = 3;
  std::vector<position_t> qp, kp;
  bool causal = false, normalised = false;
  double decay = 1.0;
  phi_kind phi = phi_kind::elu_plus_one;
  bool with_state = false;  ///< S₀, z₀ at p0 (causal), and dS_f, dz_f in the loss
  position_t p0 = 0;
};

/// The real view of M(s)·x (x the φ row): d entries, or [Re, Im] 2d entries for complex maps.
using features_fn = std::function<ld_vec(position_t, const ld_vec&)>;

features_fn plain_features() {
  return [](position_t, const ld_vec& x) { return x; };
}
template <class L>
features_fn lambda_features(const L& l, const ref::mat& p, bool complex_view) {
  return [l, p, complex_view](position_t s, const ld_vec& x) {
    const cvec y = ref::Lambda(l, s) * (p * x.template cast<cld>());
    const index_t d = y.size();
    ld_vec out(complex_view ? 2 * d : d);
    for (index_t i = 0; i < d; ++i) {
      out(i) = y(i).real();
      if (complex_view) out(d + i) = y(i).imag();
    }
    return out;
  };
}
template <class E>
features_fn encoder_features(const E& e) {
  return lambda_features(e.lambda(), ref::P(e.p()), E::is_complex);
}

/// The inputs of the loss, in long double.
struct inputs {
  ld_rows q, k, v, d_out, s0, ds_final;
  ld_vec z0, dz_final;
};

ld_vec phi_row(const setup& c, const ld_rows& x, index_t i) {
  ld_vec r(x.cols());
  for (index_t j = 0; j < x.cols(); ++j) r(j) = phi_of(c.phi, x(i, j));
  return r;
}

ld decay_pow(const setup& c, position_t delta) { return c.decay == 1.0 ? ld(1) : std::pow(ld(c.decay), ld(delta)); }

/// L = Σ dO∘O (+ ⟨dS_f, S_f⟩ + ⟨dz_f, z_f⟩ with a state), the forward written densely.
ld reference_loss(const setup& c, double eps, const features_fn& feat, const inputs& in) {
  std::vector<ld_vec> kf;
  for (index_t t = 0; t < c.nk; ++t) kf.push_back(feat(c.kp[std::size_t(t)], phi_row(c, in.k, t)));
  ld loss = 0;
  for (index_t s = 0; s < c.nq; ++s) {
    const position_t ps = c.qp[std::size_t(s)];
    const ld_vec qf = feat(ps, phi_row(c, in.q, s));
    ld_vec num = ld_vec::Zero(c.dv);
    ld den = 0;
    if (c.with_state) {
      const ld w = decay_pow(c, ps - c.p0);
      num += w * (in.s0.transpose() * qf);
      den += w * qf.dot(in.z0);
    }
    for (index_t t = 0; t < c.nk; ++t) {
      const position_t pt = c.kp[std::size_t(t)];
      if (c.causal && pt > ps) continue;
      const ld a = (c.causal ? decay_pow(c, ps - pt) : ld(1)) * qf.dot(kf[std::size_t(t)]);
      num += a * in.v.row(t).transpose();
      den += a;
    }
    const ld inv = c.normalised ? 1 / std::max(den, ld(eps)) : ld(1);
    loss += in.d_out.row(s).dot(num.transpose()) * inv;
  }
  if (c.with_state) {
    const position_t last = c.nk > 0 ? c.kp.back() : c.p0;
    ld_rows sf = decay_pow(c, last - c.p0) * in.s0;
    ld_vec zf = decay_pow(c, last - c.p0) * in.z0;
    for (index_t t = 0; t < c.nk; ++t) {
      const ld w = decay_pow(c, last - c.kp[std::size_t(t)]);
      sf += w * kf[std::size_t(t)] * in.v.row(t);
      zf += w * kf[std::size_t(t)];
    }
    loss += (sf.array() * in.ds_final.array()).sum() + zf.dot(in.dz_final);
  }
  return loss;
}

/// Central differences of L along every entry of one input matrix of `in`.
template <class Loss>
std::vector<ld> input_gradient(const inputs& in, ld_rows inputs::*which, const Loss& loss_of) {
  const ld_rows& x = in.*which;
  std::vector<double> w(x.data(), x.data() + x.size());
  std::vector<ld> g(w.size());
  for (std::size_t j = 0; j < w.size(); ++j) {
    g[j] = derivative(w, j, 1e-5, [&](const std::vector<double>& p) {
      inputs y = in;
      for (index_t i = 0; i < (y.*which).size(); ++i) (y.*which).data()[i] = p[std::size_t(i)];
      return loss_of(y);
    });
  }
  return g;
}

template <class M>
std::vector<double> flat(const M& m) {
  std::vector<double> r;
  for (index_t i = 0; i < m.rows(); ++i)
    for (index_t j = 0; j < m.cols(); ++j) r.push_back(double(m(i, j)));
  return r;
}

template <class T>
ld tolerance() {
  return sizeof(T) < sizeof(double) ? 5e-4L : 1e-10L;
}

/// Runs `f(phi)` with lrpe's map of kind k.
template <class F>
void with_phi(phi_kind k, const F& f) {
  switch (k) {
    case phi_kind::elu_plus_one: f(lrpe::feature_maps::elu_plus_one{}); break;
    case phi_kind::relu: f(lrpe::feature_maps::relu{}); break;
    default: f(lrpe::feature_maps::identity{}); break;
  }
}

/// The library's backward on `c` against the reference: dQ, dK, dV, the encoder's parameters
/// and (with a state) dS₀, dz₀.
template <class T, class Encoding>
void check_case(const setup& c, const Encoding& encoding, const features_fn& feat, std::uint64_t seed) {
  CAPTURE(c.causal);
  CAPTURE(c.normalised);
  CAPTURE(c.decay);
  CAPTURE(int(c.phi));
  CAPTURE(c.with_state);
  const index_t f = [&] {
    if constexpr (requires { encoding.feature_dim(); }) return encoding.feature_dim();
    else return c.d;
  }();
  const auto q = uniform<T>(c.nq, c.d, seed), k = uniform<T>(c.nk, c.d, seed + 1);
  const auto v = uniform<T>(c.nk, c.dv, seed + 2), d_out = uniform<T>(c.nq, c.dv, seed + 3);
  lrpe::linear_options opt;
  opt.causal = c.causal;
  opt.norm = c.normalised ? lrpe::normalisation::denominator : lrpe::normalisation::none;
  opt.decay = c.decay;
  opt.q_positions = c.qp;
  opt.k_positions = c.kp;
  double d_decay = 0.25;  // (added to)
  opt.decay_gradient = &d_decay;
  lrpe::row_matrix<T> dq(c.nq, c.d), dk(c.nk, c.d), dv(c.nk, c.dv);
  lrpe::encoder_gradient grad;
  if constexpr (lrpe::lrpe_encoder<Encoding>) grad = encoding.make_gradient();
  lrpe::encoder_gradient* gp = lrpe::lrpe_encoder<Encoding> ? &grad : nullptr;

  inputs in{q.template cast<ld>(), k.template cast<ld>(), v.template cast<ld>(), d_out.template cast<ld>(), {}, {}, {}, {}};
  lrpe::linear_attention_state<T> initial(f, c.dv, c.decay);
  lrpe::linear_state_gradient<T> d_final(f, c.dv), d_initial;
  if (c.with_state) {
    // a state with some keys before the call, and a gradient for the one it leaves
    // positive key features, as φ's, so that normalised denominators stay away from 0
    const lrpe::row_matrix<T> kb = uniform<T>(3, f, seed + 4).array() + T(1.5);
    const auto vb = uniform<T>(3, c.dv, seed + 5);
    const std::vector<position_t> before{c.p0 - 4, c.p0 - 1, c.p0};
    initial.append_block(kb, vb, before, 0);
    d_final.kv = uniform<T>(f, c.dv, seed + 6);
    d_final.k_sum = uniform<T>(1, f, seed + 7).transpose();
    in.s0 = initial.kv().template cast<ld>();
    in.z0 = initial.k_sum().template cast<ld>();
    in.ds_final = d_final.kv.template cast<ld>();
    in.dz_final = d_final.k_sum.template cast<ld>();
  }
  with_phi(c.phi, [&](const auto& phi) {
    if (c.with_state)
      lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, encoding, phi, initial, &d_final, &d_initial, opt, gp);
    else
      lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, encoding, phi, opt, gp);
  });
  const auto loss = [&](const inputs& x) { return reference_loss(c, opt.eps, feat, x); };
  {  // dL/dλ (0 without causality: no weight depends on λ)
    const ld want = c.causal ? derivative({c.decay}, 0, 1e-5, [&](const std::vector<double>& w) {
      setup moved = c;
      moved.decay = w[0];
      return reference_loss(moved, opt.eps, feat, in);
    }) : ld(0);
    CHECK(relative_error({d_decay - 0.25}, {want}) <= tolerance<T>());
  }
  CHECK(relative_error(flat(dq), input_gradient(in, &inputs::q, loss)) <= tolerance<T>());
  CHECK(relative_error(flat(dk), input_gradient(in, &inputs::k, loss)) <= tolerance<T>());
  if (c.with_state) {
    CHECK(relative_error(flat(d_initial.kv), input_gradient(in, &inputs::s0, loss)) <= tolerance<T>());
    // z₀ as a column: the same differences through a one-column matrix
    std::vector<double> z(in.z0.data(), in.z0.data() + in.z0.size());
    std::vector<ld> want(z.size());
    for (std::size_t j = 0; j < z.size(); ++j)
      want[j] = derivative(z, j, 1e-5, [&](const std::vector<double>& w) {
        inputs y = in;
        for (std::size_t i = 0; i < w.size(); ++i) y.z0(index_t(i)) = w[i];
        return loss(y);
      });
    CHECK(relative_error(std::vector<double>(d_initial.k_sum.data(), d_initial.k_sum.data() + f), want) <= tolerance<T>());
  }
  if constexpr (lrpe::lrpe_encoder<Encoding>) {
    using L = typename Encoding::lambda_type;
    if constexpr (lrpe::reparameterisable<L>) {
      double span = 1;  // the outputs depend on t − s (and on the state's absolute positions)
      for (auto s : c.qp)
        for (auto t : c.kp) span = std::max(span, std::abs(double(t - s)));
      if (c.with_state)
        for (auto s : c.qp) span = std::max(span, std::abs(double(s)));
      const auto theta = encoding.lambda().parameters();
      std::vector<ld> want(theta.size());
      for (std::size_t j = 0; j < theta.size(); ++j)
        want[j] = derivative(theta, j, 1e-4 / span, [&](const std::vector<double>& w) {
          return reference_loss(c, opt.eps,
                                lambda_features(encoding.lambda().with_parameters(w), ref::P(encoding.p()), Encoding::is_complex),
                                in);
        });
      CHECK(relative_error(grad.lambda, want) <= tolerance<T>());
    }
  }
}

std::vector<position_t> offset(position_t first, index_t n) {
  std::vector<position_t> p;
  for (index_t i = 0; i < n; ++i) p.push_back(first + i);
  return p;
}

}  // namespace

TEST_CASE_TEMPLATE("linear backward, no encoding: non-causal and causal, normalised or not, decay, feature maps",
                   T, float, double) {
  setup c;
  c.qp = offset(0, c.nq);
  c.kp = offset(0, c.nk);
  std::uint64_t seed = 500;
  for (phi_kind phi : {phi_kind::elu_plus_one, phi_kind::relu, phi_kind::identity}) {
    c.phi = phi;
    for (bool causal : {false, true}) {
      c.causal = causal;
      for (bool normalised : {false, true}) {
        c.normalised = normalised && phi != phi_kind::identity;  // identity features: denominators near 0
        check_case<T>(c, lrpe::no_encoding{}, plain_features(), ++seed);
      }
    }
  }
  c.causal = true;
  c.phi = phi_kind::elu_plus_one;
  c.decay = 0.9;
  c.qp = {0, 2, 2, 5, 9};  // arrays with a repeated position, keys interleaved
  c.kp = {0, 1, 2, 6, 9};
  for (bool normalised : {false, true}) {
    c.normalised = normalised;
    check_case<T>(c, lrpe::no_encoding{}, plain_features(), ++seed);
  }
}

TEST_CASE_TEMPLATE("linear backward, lrpe encoders: dQ, dK, dV and dθ (real, split-half and complex), near and far",
                   T, float, double) {
  setup c;
  c.d = 6;
  const lrpe::type2<T> type2(c.d);
  const lrpe::rope_neox<T> neox(c.d);
  const lrpe::type8<T> type8(c.d);
  std::uint64_t seed = 600;
  for (position_t base : {position_t(0), position_t(1'000'000)}) {
    c.qp = offset(base, c.nq);
    c.kp = offset(base, c.nk);
    for (bool causal : {false, true}) {
      c.causal = causal;
      c.decay = causal ? 0.95 : 1.0;
      c.normalised = !causal;
      check_case<T>(c, type2, encoder_features(type2), ++seed);
      check_case<T>(c, neox, encoder_features(neox), ++seed);
      check_case<T>(c, type8, encoder_features(type8), ++seed);
    }
  }
}

TEST_CASE_TEMPLATE("linear backward with a state: dS₀, dz₀ and the final state's gradient passed to K and V", T,
                   float, double) {
  setup c;
  c.causal = true;
  c.with_state = true;
  c.p0 = 10;
  c.qp = offset(10, c.nq);
  c.kp = offset(11, c.nk);
  std::uint64_t seed = 700;
  for (double decay : {1.0, 0.9}) {
    c.decay = decay;
    for (bool normalised : {false, true}) {
      c.normalised = normalised;
      check_case<T>(c, lrpe::no_encoding{}, plain_features(), ++seed);
    }
  }
  c.d = 4;
  const lrpe::rope_gptj<T> rope(c.d);
  check_case<T>(c, rope, encoder_features(rope), ++seed);
}

TEST_CASE_TEMPLATE("linear backward: a sequence split in two calls, the state's gradient handed back, == one call", T,
                   float, double) {
  const index_t n = 9, d = 4, dv = 3, cut = 4;
  const lrpe::type2<T> e(d);
  const auto q = uniform<T>(n, d, 1), k = uniform<T>(n, d, 2), v = uniform<T>(n, dv, 3), d_out = uniform<T>(n, dv, 4);
  lrpe::linear_options opt;
  opt.causal = true;
  opt.decay = 0.9;
  opt.norm = lrpe::normalisation::denominator;
  const lrpe::feature_maps::elu_plus_one phi;
  lrpe::row_matrix<T> dq(n, d), dk(n, d), dv_all(n, dv);
  auto g_one = e.make_gradient();
  lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv_all, e, phi, opt, &g_one);

  // forward of the first segment leaves the state the second starts from
  lrpe::linear_attention_state<T> state(d, dv, opt.decay);
  const lrpe::linear_attention_state<T> before_first = state;
  lrpe::row_matrix<T> out1(cut, dv);
  lrpe::linear_attention(q.topRows(cut), k.topRows(cut), v.topRows(cut), out1, e, phi, state, opt);
  const lrpe::linear_attention_state<T> before_second = state;
  lrpe::linear_options second = opt;
  second.q_positions = cut;
  second.k_positions = cut;
  lrpe::row_matrix<T> dq2(n - cut, d), dk2(n - cut, d), dv2(n - cut, dv), dq1(cut, d), dk1(cut, d), dv1(cut, dv);
  lrpe::linear_state_gradient<T> d_state;
  auto g_split = e.make_gradient();
  lrpe::linear_attention_backward(q.bottomRows(n - cut), k.bottomRows(n - cut), v.bottomRows(n - cut),
                                  d_out.bottomRows(n - cut), dq2, dk2, dv2, e, phi, before_second, nullptr, &d_state,
                                  second, &g_split);
  lrpe::linear_attention_backward(q.topRows(cut), k.topRows(cut), v.topRows(cut), d_out.topRows(cut), dq1, dk1, dv1, e,
                                  phi, before_first, &d_state, nullptr, opt, &g_split);
  const auto close = [](const auto& a, const auto& b) {
    return ld((a - b).cwiseAbs().maxCoeff()) <= tolerance<T>() * (1 + ld(b.cwiseAbs().maxCoeff()));
  };
  CHECK(close(dq1, dq.topRows(cut)));
  CHECK(close(dq2, dq.bottomRows(n - cut)));
  CHECK(close(dk1, dk.topRows(cut)));
  CHECK(close(dk2, dk.bottomRows(n - cut)));
  CHECK(close(dv1, dv_all.topRows(cut)));
  CHECK(close(dv2, dv_all.bottomRows(n - cut)));
  std::vector<double> want(g_one.lambda.begin(), g_one.lambda.end());
  CHECK(relative_error(g_split.lambda, std::vector<ld>(want.begin(), want.end())) <= tolerance<T>() * 10);
}

TEST_CASE("linear backward: bad input is a clear error naming the argument") {
  using T = double;
  const auto q = uniform<T>(3, 4, 1), k = uniform<T>(5, 4, 2), v = uniform<T>(5, 2, 3), d_out = uniform<T>(3, 2, 4);
  lrpe::row_matrix<T> dq(3, 4), dk(5, 4), dv(5, 2), bad_dk(4, 4), bad_dout(3, 3);
  const lrpe::feature_maps::relu phi;
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const lrpe::error& e) {
      return std::string(dynamic_cast<const std::exception&>(e).what());
    }
    return std::string("no error");
  };
  const lrpe::no_encoding none;
  CHECK(message([&] { lrpe::linear_attention_backward(q, k, v, d_out, dq, bad_dk, dv, none, phi); }).find("dk.rows") !=
        std::string::npos);
  CHECK(message([&] { lrpe::linear_attention_backward(q, k, v, bad_dout, dq, dk, dv, none, phi); }).find("out.cols") !=
        std::string::npos);
  lrpe::linear_options decayed;
  decayed.decay = 0.5;  // without causal
  CHECK(message([&] { lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, none, phi, decayed); })
            .find("options.decay") != std::string::npos);
  lrpe::linear_options causal;
  causal.causal = true;
  const lrpe::linear_attention_state<T> wrong(3, 2);
  CHECK(message([&] {
          lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, none, phi, wrong, nullptr, nullptr, causal);
        }).find("state") != std::string::npos);
  const lrpe::linear_attention_state<T> state(4, 2);
  const lrpe::linear_state_gradient<T> bad_final(4, 3);
  CHECK(message([&] {
          lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, none, phi, state, &bad_final, nullptr, causal);
        }).find("d_final") != std::string::npos);
}

TEST_CASE_TEMPLATE("linear backward, multi-head: grouped-query K/V (dK, dV summed over each group), per-head decays "
                   "and their gradients, a shared encoder's gradient summed over heads and batch", T, float, double) {
  const index_t batch = 2, heads = 4, kv_heads = 2, n = 9, d = 6, dv = 5;
  const auto q = uniform<T>(batch * heads * n, d, 900), d_out = uniform<T>(batch * heads * n, dv, 901);
  const auto k = uniform<T>(batch * kv_heads * n, d, 902), v = uniform<T>(batch * kv_heads * n, dv, 903);
  lrpe::row_matrix<T> dq(batch * heads * n, d), dk(batch * kv_heads * n, d), dv_(batch * kv_heads * n, dv);
  const auto bnsh = [](auto& m, index_t h, index_t cols) { return lrpe::bnsh(m.data(), batch, h, n, cols); };
  const std::vector<double> decays{0.9, 1.0, 0.8, 0.95};
  std::vector<double> d_decays(heads, 0.0);
  lrpe::linear_options opt;
  opt.causal = true;
  opt.head_decays = decays;
  opt.decay_gradient = d_decays.data();
  const lrpe::rope_neox<T> rope(d);
  const lrpe::feature_maps::elu_plus_one phi;
  std::vector<lrpe::encoder_gradient> grads{rope.make_gradient()};
  lrpe::linear_attention_backward(bnsh(q, heads, d), bnsh(k, kv_heads, d), bnsh(v, kv_heads, dv), bnsh(d_out, heads, dv),
                                  bnsh(dq, heads, d), bnsh(dk, kv_heads, d), bnsh(dv_, kv_heads, dv), rope, phi, opt,
                                  std::span<lrpe::encoder_gradient>(grads));
  // against one single-head call per (b, h)
  lrpe::row_matrix<T> dk_want = lrpe::row_matrix<T>::Zero(dk.rows(), d), dv_want = lrpe::row_matrix<T>::Zero(dv_.rows(), dv);
  lrpe::encoder_gradient g_want = rope.make_gradient();
  std::vector<double> dl_want(heads, 0.0);
  for (index_t b = 0; b < batch; ++b)
    for (index_t h = 0; h < heads; ++h) {
      const index_t hk = h / (heads / kv_heads), qr = (b * heads + h) * n, kr = (b * kv_heads + hk) * n;
      lrpe::linear_options one;
      one.causal = true;
      one.decay = decays[std::size_t(h)];
      one.decay_gradient = &dl_want[std::size_t(h)];
      lrpe::row_matrix<T> hq(n, d), hk_(n, d), hv(n, dv);
      const lrpe::row_matrix<T> qh = q.middleRows(qr, n), kh = k.middleRows(kr, n), vh = v.middleRows(kr, n),
                                oh = d_out.middleRows(qr, n);
      lrpe::linear_attention_backward(qh, kh, vh, oh, hq, hk_, hv, rope, phi, one, &g_want);
      CHECK(hq == lrpe::row_matrix<T>(dq.middleRows(qr, n)));
      dk_want.middleRows(kr, n) += hk_;
      dv_want.middleRows(kr, n) += hv;
    }
  CHECK((dk - dk_want).cwiseAbs().maxCoeff() <= T(0));
  CHECK((dv_ - dv_want).cwiseAbs().maxCoeff() <= T(0));
  CHECK(grads[0].lambda == g_want.lambda);
  CHECK(d_decays == dl_want);
  CHECK(d_decays[1] != 0.0);  // λ = 1 has a gradient too
  // a wrong count of gradients is an error naming it
  std::vector<lrpe::encoder_gradient> two{rope.make_gradient(), rope.make_gradient()};
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_backward(bnsh(q, heads, d), bnsh(k, kv_heads, d), bnsh(v, kv_heads, dv),
                                                       bnsh(d_out, heads, dv), bnsh(dq, heads, d), bnsh(dk, kv_heads, d),
                                                       bnsh(dv_, kv_heads, dv), rope, phi, opt,
                                                       std::span<lrpe::encoder_gradient>(two)),
                       doctest::Contains("grads.size()"), lrpe::shape_error);
}

TEST_CASE_TEMPLATE("linear backward, multi-head with states: a sequence split in two segments (states per head, "
                   "their gradients handed back) == one call", T, float, double) {
  const index_t batch = 2, heads = 4, kv_heads = 2, n = 9, cut = 4, d = 6, dv = 5;
  const auto q = uniform<T>(batch * heads * n, d, 910), d_out = uniform<T>(batch * heads * n, dv, 911);
  const auto k = uniform<T>(batch * kv_heads * n, d, 912), v = uniform<T>(batch * kv_heads * n, dv, 913);
  const std::vector<double> decays{0.9, 1.0, 0.8, 0.95};
  const lrpe::type2<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  // a view of rows [r0, r0 + len) of every head
  const auto part = [](auto& m, index_t h, index_t cols, index_t r0, index_t len) {
    auto x = lrpe::bnsh(m.data(), batch, h, n, cols);
    x.data += r0 * x.seq_stride;
    x.seq = len;
    return x;
  };
  lrpe::linear_options opt;
  opt.causal = true;
  opt.norm = lrpe::normalisation::denominator;
  opt.head_decays = decays;
  std::vector<double> dl_one(heads, 0.0), dl_split(heads, 0.0);
  // one call
  lrpe::row_matrix<T> dq1(q.rows(), d), dk1(k.rows(), d), dv1(v.rows(), dv);
  std::vector<lrpe::encoder_gradient> g1{enc.make_gradient()};
  opt.decay_gradient = dl_one.data();
  lrpe::linear_attention_backward(part(q, heads, d, 0, n), part(k, kv_heads, d, 0, n), part(v, kv_heads, dv, 0, n),
                                  part(d_out, heads, dv, 0, n), part(dq1, heads, d, 0, n), part(dk1, kv_heads, d, 0, n),
                                  part(dv1, kv_heads, dv, 0, n), enc, phi, opt, std::span(g1));
  // two segments: the forward of the first leaves the states the second starts from
  std::vector<lrpe::linear_attention_state<T>> fresh, states;
  for (index_t i = 0; i < batch * heads; ++i)
    fresh.emplace_back(enc.feature_dim(), dv, decays[std::size_t(i % heads)]);
  states = fresh;
  lrpe::row_matrix<T> out(q.rows(), dv);
  lrpe::linear_options seg = opt;
  seg.decay_gradient = nullptr;
  seg.q_positions = seg.k_positions = 0;
  lrpe::linear_attention(part(q, heads, d, 0, cut), part(k, kv_heads, d, 0, cut), part(v, kv_heads, dv, 0, cut),
                         part(out, heads, dv, 0, cut), enc, phi, std::span(states), seg);
  lrpe::row_matrix<T> dq2(q.rows(), d), dk2(k.rows(), d), dv2(v.rows(), dv);
  std::vector<lrpe::encoder_gradient> g2{enc.make_gradient()};
  std::vector<lrpe::linear_state_gradient<T>> d_mid(std::size_t(batch * heads)), d_first(std::size_t(batch * heads));
  seg.decay_gradient = dl_split.data();
  seg.q_positions = seg.k_positions = cut;
  lrpe::linear_attention_backward(part(q, heads, d, cut, n - cut), part(k, kv_heads, d, cut, n - cut),
                                  part(v, kv_heads, dv, cut, n - cut), part(d_out, heads, dv, cut, n - cut),
                                  part(dq2, heads, d, cut, n - cut), part(dk2, kv_heads, d, cut, n - cut),
                                  part(dv2, kv_heads, dv, cut, n - cut), enc, phi,
                                  std::span<const lrpe::linear_attention_state<T>>(states), {}, std::span(d_mid), seg,
                                  std::span(g2));
  seg.q_positions = seg.k_positions = 0;
  lrpe::linear_attention_backward(part(q, heads, d, 0, cut), part(k, kv_heads, d, 0, cut), part(v, kv_heads, dv, 0, cut),
                                  part(d_out, heads, dv, 0, cut), part(dq2, heads, d, 0, cut),
                                  part(dk2, kv_heads, d, 0, cut), part(dv2, kv_heads, dv, 0, cut), enc, phi,
                                  std::span<const lrpe::linear_attention_state<T>>(fresh),
                                  std::span<const lrpe::linear_state_gradient<T>>(d_mid), std::span(d_first), seg,
                                  std::span(g2));
  const double tol = sizeof(T) < sizeof(double) ? 2e-5 : 1e-12;
  const auto close = [&](const lrpe::row_matrix<T>& a, const lrpe::row_matrix<T>& b) {
    return double((a - b).cwiseAbs().maxCoeff()) <= tol * (1 + double(b.cwiseAbs().maxCoeff()));
  };
  CHECK(close(dq2, dq1));
  CHECK(close(dk2, dk1));
  CHECK(close(dv2, dv1));
  CHECK(relative_error(g2[0].lambda, std::vector<ld>(g1[0].lambda.begin(), g1[0].lambda.end())) <= tol);
  CHECK(relative_error(g2[0].p, std::vector<ld>(g1[0].p.begin(), g1[0].p.end())) <= tol);
  CHECK(relative_error(dl_split, std::vector<ld>(dl_one.begin(), dl_one.end())) <= tol);
  // the first segment started from empty states: their gradient is still defined (and written)
  CHECK(d_first[0].kv.rows() == enc.feature_dim());
  // a d_final of the wrong count or shape is an error, raised before any head runs
  std::vector<lrpe::linear_state_gradient<T>> bad(std::size_t(batch * heads), lrpe::linear_state_gradient<T>(3, dv));
  dq2.setConstant(T(7));
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_backward(
                           part(q, heads, d, 0, cut), part(k, kv_heads, d, 0, cut), part(v, kv_heads, dv, 0, cut),
                           part(d_out, heads, dv, 0, cut), part(dq2, heads, d, 0, cut), part(dk2, kv_heads, d, 0, cut),
                           part(dv2, kv_heads, dv, 0, cut), enc, phi,
                           std::span<const lrpe::linear_attention_state<T>>(fresh),
                           std::span<const lrpe::linear_state_gradient<T>>(bad), {}, seg, std::span(g2)),
                       doctest::Contains("d_final"), lrpe::shape_error);
  CHECK(dq2(0, 0) == T(7));
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_backward(
                           part(q, heads, d, 0, cut), part(k, kv_heads, d, 0, cut), part(v, kv_heads, dv, 0, cut),
                           part(d_out, heads, dv, 0, cut), part(dq2, heads, d, 0, cut), part(dk2, kv_heads, d, 0, cut),
                           part(dv2, kv_heads, dv, 0, cut), enc, phi,
                           std::span<const lrpe::linear_attention_state<T>>(fresh).first(3), {}, {}, seg,
                           std::span(g2)),
                       doctest::Contains("states.size()"), lrpe::shape_error);
}

TEST_CASE_TEMPLATE("linear backward, cosFormer: dQ, dK, dV through its features [x sin a, x cos a] (causal or not, "
                   "decay, a state)", T, float, double) {
  setup c;
  c.qp = offset(3, c.nq);
  c.kp = offset(3, c.nk);
  const double m = 7.0;
  const lrpe::canonical::cosformer<T> cos_former(c.d, m);
  const features_fn feat = [m](position_t s, const ld_vec& x) {
    const ld a = ld(s) * std::acos(ld(-1)) / (2 * ld(m));
    ld_vec out(2 * x.size());
    out << x * std::sin(a), x * std::cos(a);
    return out;
  };
  std::uint64_t seed = 950;
  for (bool causal : {false, true}) {
    c.causal = causal;
    c.decay = causal ? 0.9 : 1.0;
    check_case<T>(c, cos_former, feat, ++seed);
  }
  c.with_state = true;
  c.p0 = 2;
  check_case<T>(c, cos_former, feat, ++seed);
}
