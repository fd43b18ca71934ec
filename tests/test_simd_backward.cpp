// SPDX-License-Identifier: MIT
// The backward on the SIMD backend == the reference backend: encode_backward and
// encode_qk_backward (RoPE in both pairings and permutation powers on the SIMD kernels of the
// transposed encoder, every int64 position; the fallbacks: dx = x, other encoders), and the attention backwards (which run the
// reference kernels on SIMD-encoded features). Tolerances: simd_attention_helpers.hpp.
#include "simd_attention_helpers.hpp"

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

using namespace simd_attention_test;

namespace {

/// max |a − b| / (1 + max |b|) of two parameter gradients.
double vec_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / (1 + scale);
}

/// The size of θ's gradient's terms, Σ_i |s_i|·‖x_i‖·‖g_i‖: dL/dθ sums s·(x_i·dx_j − x_j·dx_i)
/// over rows, so two kernels whose dx agree to a relative δ agree on it to about δ times this
/// (the sum itself may cancel far below it).
template <class T>
double theta_terms(const rm<T>& x, const rm<T>& g, const lrpe::positions& pos) {
  double sum = 0;
  for (lrpe::index_t i = 0; i < x.rows(); ++i)
    sum += std::abs(static_cast<double>(pos[i])) * static_cast<double>(x.row(i).norm()) * static_cast<double>(g.row(i).norm());
  return sum;
}

template <class T, class E>
void backward_both(const E& enc, lrpe::index_t n, lrpe::positions pos, std::uint64_t seed) {
  lrpe::generator g(seed);
  const rm<T> x = random_matrix<T>(g, n, enc.dim()), d_out = random_matrix<T>(g, n, enc.feature_dim());
  rm<T> dx_ref(n, enc.dim()), dx(n, enc.dim());
  auto g_ref = enc.make_gradient(), g_simd = enc.make_gradient();
  lrpe::encode_backward(lrpe::backend::reference{}, enc, lrpe::view(x), pos, lrpe::view(d_out), lrpe::view(dx_ref),
                        &g_ref);
  lrpe::encode_backward(lrpe::backend::simd<>{}, enc, lrpe::view(x), pos, lrpe::view(d_out), lrpe::view(dx), &g_simd);
  CHECK(diff(dx, dx_ref) <= kernel_vs_kernel<T>());
  for (std::size_t j = 0; j < g_ref.lambda.size(); ++j)
    CHECK(std::abs(g_simd.lambda[j] - g_ref.lambda[j]) <= kernel_vs_kernel<T>() * (1 + theta_terms(x, d_out, pos)));
  CHECK(g_simd.p == g_ref.p);
  // dx = x in place: the fallback, the same result
  rm<T> inplace = x;
  lrpe::encode_backward(lrpe::backend::simd<>{}, enc, lrpe::view(std::as_const(inplace)), pos, lrpe::view(d_out),
                        lrpe::view(inplace));
  CHECK(diff(inplace, dx_ref) <= kernel_vs_kernel<T>());
}

}  // namespace

static_assert(lrpe::backend::simd_detail::simd_backward_v<lrpe::encoder<lrpe::p::identity<float>, lrpe::lambda::rotation<float>>>,
              "RoPE's backward runs on the SIMD kernels");

TEST_CASE_TEMPLATE("simd encode_backward == reference: RoPE, permutation powers, fallbacks", T, float, double) {
  const std::vector<position_t> far{-7, 0, 3, 1'000'003, -3'000'000'000LL, 2, 2, 9};
  const std::vector<position_t> extreme{std::numeric_limits<position_t>::min(), 5, std::numeric_limits<position_t>::max()};
  for (lrpe::index_t d : {8, 64, 13}) {
    CAPTURE(d);
    const lrpe::rope_gptj<T> gptj(d);
    const lrpe::rope_neox<T> neox(d);
    const lrpe::permuteformer<T> perm(d);
    const lrpe::type3<T> type3(d);  // not a SIMD backward: encoder::backward
    for (lrpe::index_t n : {1, 70, 200}) {
      CAPTURE(n);
      backward_both<T>(gptj, n, lrpe::positions(-5), 11);
      backward_both<T>(neox, n, lrpe::positions(100000), 12);
      backward_both<T>(perm, n, lrpe::positions(3), 13);
      backward_both<T>(type3, n, lrpe::positions(0), 14);
    }
    backward_both<T>(gptj, 8, far, 15);
    backward_both<T>(neox, 3, extreme, 16);  // ±2^63: Λ⁽ˢ⁾ᵀ without forming −s
    backward_both<T>(perm, 3, extreme, 17);
  }
}

TEST_CASE_TEMPLATE("simd encode_qk_backward == reference (every head a block of positions at a time)", T, float,
                   double) {
  const lrpe::rope_neox<T> enc(16);
  const lrpe::index_t B = 2, H = 3, nq = 9, nk = 150, d = 16;  // blocks of 64 rows; Q's end first
  lrpe::generator g(21);
  const rm<T> q = random_matrix<T>(g, B * H * nq, d), k = random_matrix<T>(g, B * H * nk, d);
  const rm<T> gq = random_matrix<T>(g, B * H * nq, d), gk = random_matrix<T>(g, B * H * nk, d);
  rm<T> dq1(B * H * nq, d), dk1(B * H * nk, d), dq2(B * H * nq, d), dk2(B * H * nk, d);
  auto g1 = enc.make_gradient(), g2 = enc.make_gradient();
  const auto heads = [&](const rm<T>& m, lrpe::index_t n) { return lrpe::bnsh(m.data(), B, H, n, d); };
  lrpe::encode_qk_backward(lrpe::backend::reference{}, enc, heads(q, nq), 4, heads(k, nk), 0, heads(gq, nq), heads(gk, nk),
                           lrpe::bnsh(dq1.data(), B, H, nq, d), lrpe::bnsh(dk1.data(), B, H, nk, d), &g1);
  lrpe::encode_qk_backward(lrpe::backend::simd<>{}, enc, heads(q, nq), 4, heads(k, nk), 0, heads(gq, nq), heads(gk, nk),
                           lrpe::bnsh(dq2.data(), B, H, nq, d), lrpe::bnsh(dk2.data(), B, H, nk, d), &g2);
  CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
  CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
  CHECK(vec_diff(g2.lambda, g1.lambda) <= kernel_vs_kernel<T>());
}

TEST_CASE_TEMPLATE("RoPE's backward with θ in one pass: non-temporal stores give the same bits", T, float, double) {
  // the pass streams outputs of 16 MiB or more; here a threshold of 0 forces it on small rows
  using A = lrpe::backend::simd<>::arch_type;
  const lrpe::rope_neox<T> enc(64);
  const lrpe::index_t H = 3, n = 130, d = 64;
  lrpe::generator g(27);
  const rm<T> x = random_matrix<T>(g, H * n, d), gr = random_matrix<T>(g, H * n, d);
  rm<T> dx1(H * n, d), dx2(H * n, d);
  std::vector<double> t1(32, 0.0), t2(32, 0.0);
  lrpe::backend::simd_workspace ws;
  const auto heads = [&](const rm<T>& m) { return lrpe::bnsh(m.data(), 1, H, n, d); };
  lrpe::backend::simd_detail::rope_theta_backward<A, T>(enc.lambda(), d, ws, 0)
      .side(heads(x), lrpe::positions(-40), heads(gr), lrpe::bnsh(dx1.data(), 1, H, n, d), t1.data());
  lrpe::backend::simd_detail::rope_theta_backward<A, T>(enc.lambda(), d, ws, SIZE_MAX)
      .side(heads(x), lrpe::positions(-40), heads(gr), lrpe::bnsh(dx2.data(), 1, H, n, d), t2.data());
  CHECK(dx1 == dx2);
  CHECK(t1 == t2);
  CHECK(dx1.cwiseAbs().maxCoeff() > T(0));
}

TEST_CASE_TEMPLATE("softmax and linear attention backward on the SIMD backend == reference", T, float, double) {
  const lrpe::index_t n = 40, d = 16, dv = 8;
  lrpe::generator g(31);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const rm<T> d_out = random_matrix<T>(g, n, dv);
  const lrpe::type2<T> enc(d);
  lrpe::softmax_options<> so;
  so.causal = true;
  rm<T> out(n, dv), dq1(n, d), dk1(n, d), dv1(n, dv), dq2(n, d), dk2(n, d), dv2(n, dv);
  lrpe::softmax_attention(q, k, v, out, enc, so);
  auto g1 = enc.make_gradient(), g2 = enc.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq1, dk1, dv1, enc, so, &g1);
  lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq2, dk2, dv2, enc, so, &g2, lrpe::backend::simd<>{});
  CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
  CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
  CHECK(diff(dv2, dv1) <= kernel_vs_kernel<T>());
  CHECK(vec_diff(g2.lambda, g1.lambda) <= kernel_vs_kernel<T>());

  lrpe::linear_options lo;
  lo.causal = true;
  lo.decay = 0.9;
  const lrpe::feature_maps::elu_plus_one phi;
  auto g3 = enc.make_gradient(), g4 = enc.make_gradient();
  lrpe::linear_attention_backward(q, k, v, d_out, dq1, dk1, dv1, enc, phi, lo, &g3);
  lrpe::linear_attention_backward(q, k, v, d_out, dq2, dk2, dv2, enc, phi, lo, &g4, lrpe::backend::simd<>{});
  CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
  CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
  CHECK(diff(dv2, dv1) <= kernel_vs_kernel<T>());
  CHECK(vec_diff(g4.lambda, g3.lambda) <= kernel_vs_kernel<T>());
}

namespace {

/**
 * Per parameter of an additive encoding, the size of its gradient's terms: Σ_st |∂b_st/∂θ_j|·
 * P_st (|dP_st| + |D_s|) in double (each dS_st = P_st (dP_st − D_s) is rounded relative to
 * that size). The partial derivatives of ALiBi's slope, T5's and Toeplitz tables' entries keep
 * one sign per parameter, so accumulating these nonnegative weights gives the sum of sizes.
 */
template <class T, class Enc>
std::vector<double> bias_terms(const rm<T>& q, const rm<T>& k, const rm<T>& v, const rm<T>& d_out, const Enc& enc,
                               const lrpe::softmax_options<>& opt, const std::vector<T>& lse) {
  const double scale = lrpe::detail::softmax_scale<T>(enc, opt, q.cols(), "test");
  std::vector<double> terms(static_cast<std::size_t>(enc.parameter_count()), 0.0), prob(static_cast<std::size_t>(k.rows()));
  for (index_t i = 0; i < q.rows(); ++i) {
    const position_t s = opt.q_positions[i];
    const auto visible = [&](index_t j) { return !opt.causal || opt.k_positions[j] <= s; };
    Eigen::VectorXd o = Eigen::VectorXd::Zero(v.cols());
    for (index_t j = 0; j < k.rows(); ++j) {
      const double logit = scale * q.row(i).template cast<double>().dot(k.row(j).template cast<double>()) +
                           enc.bias(s, opt.k_positions[j]);
      prob[static_cast<std::size_t>(j)] =
          visible(j) ? std::exp(logit - static_cast<double>(lse[static_cast<std::size_t>(i)])) : 0.0;
      o += prob[static_cast<std::size_t>(j)] * v.row(j).template cast<double>().transpose();
    }
    const double delta = d_out.row(i).template cast<double>().dot(o.transpose());
    for (index_t j = 0; j < k.rows(); ++j) {
      if (!visible(j)) continue;
      const double dp = d_out.row(i).template cast<double>().dot(v.row(j).template cast<double>());
      enc.accumulate_bias_gradient(s, opt.k_positions[j], prob[static_cast<std::size_t>(j)] * (std::abs(dp) + std::abs(delta)),
                                   terms.data());
    }
  }
  for (auto& x : terms) x = std::abs(x);
  return terms;
}

/// The softmax backward of one shape on the reference and on `backend`: the largest difference
/// of dQ, dK, dV and of the encoding's parameter gradient (when it has one), with and without
/// the forward's log-sum-exps.
template <class T, class Enc, class Backend>
double softmax_backward_case(const shape& s, const Enc& enc, std::uint64_t seed, Backend backend) {
  lrpe::generator g(seed);
  const rm<T> q = random_matrix<T>(g, s.nq, s.d), k = random_matrix<T>(g, s.nk, s.d), v = random_matrix<T>(g, s.nk, s.dv);
  const rm<T> d_out = random_matrix<T>(g, s.nq, s.dv);
  const auto qp = sorted_positions(g, s.nq, s.q_offset), kp = sorted_positions(g, s.nk, s.k_offset);
  lrpe::softmax_options<> opt;
  opt.causal = s.causal;
  set_positions(opt, s, qp, kp);
  rm<T> out(s.nq, s.dv);
  std::vector<T> lse(static_cast<std::size_t>(s.nq));
  lrpe::softmax_attention_lse(q, k, v, out, std::span<T>(lse), enc, opt);
  double worst = 0;
  for (const bool given : {true, false}) {
    const std::span<const T> l = given ? std::span<const T>(lse) : std::span<const T>();
    rm<T> dq1(s.nq, s.d), dk1(s.nk, s.d), dv1(s.nk, s.dv), dq2 = dq1, dk2 = dk1, dv2 = dv1;
    dq2.setConstant(T(7));
    dk2.setConstant(T(7));
    dv2.setConstant(T(7));
    if constexpr (std::is_same_v<Enc, lrpe::no_encoding>) {
      lrpe::softmax_attention_backward(q, k, v, out, d_out, l, dq1, dk1, dv1, enc, opt);
      lrpe::softmax_attention_backward(q, k, v, out, d_out, l, dq2, dk2, dv2, enc, opt, nullptr, backend);
    } else {
      auto g1 = enc.make_gradient(), g2 = enc.make_gradient();
      lrpe::softmax_attention_backward(q, k, v, out, d_out, l, dq1, dk1, dv1, enc, opt, &g1);
      lrpe::softmax_attention_backward(q, k, v, out, d_out, l, dq2, dk2, dv2, enc, opt, &g2, backend);
      if constexpr (requires { g1.lambda; }) {
        worst = std::max(worst, vec_diff(g2.lambda, g1.lambda));
      } else {  // a bias's parameters: within the rounding of their terms' sizes
        const std::vector<double> terms = bias_terms(q, k, v, d_out, enc, opt, lse);
        for (std::size_t j = 0; j < g1.size(); ++j)
          worst = std::max(worst, std::abs(g2[j] - g1[j]) / (1 + terms[j]));
      }
    }
    worst = std::max({worst, diff(dq2, dq1), diff(dk2, dk1), diff(dv2, dv1)});
  }
  return worst;
}

}  // namespace

TEST_CASE_TEMPLATE("SIMD softmax backward == reference: shapes, causal, offsets and arrays, lse given or recomputed",
                   T, float, double) {
  for (const shape& s : shapes(77, 14)) {
    SHAPE_INFO(s);
    CHECK(softmax_backward_case<T>(s, lrpe::no_encoding{}, 5, lrpe::backend::simd<>{}) <= kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("SIMD softmax backward == reference: ALiBi's slope, T5's and a pair-keyed table, RoPE's θ", T, float, double) {
  for (const shape& s : shapes(78, 4)) {
    SHAPE_INFO(s);
    const lrpe::canonical::alibi<T> alibi(s.d, {0.25});
    lrpe::canonical::t5_buckets cfg;
    cfg.num_buckets = 8;
    cfg.max_distance = 40;
    cfg.bidirectional = !s.causal;
    lrpe::generator g(9);
    const lrpe::canonical::t5_bias<T> t5(s.d, cfg, random_matrix<T>(g, 1, 8));
    CHECK(softmax_backward_case<T>(s, alibi, 6, lrpe::backend::simd<>{}) <= kernel_vs_kernel<T>());
    CHECK(softmax_backward_case<T>(s, t5, 7, lrpe::backend::simd<>{}) <= kernel_vs_kernel<T>());
    CHECK(softmax_backward_case<T>(s, random_pair_bias<T>(s.d, 10), 9, lrpe::backend::simd<>{}) <= kernel_vs_kernel<T>());
    if (s.d % 2 == 0)
      CHECK(softmax_backward_case<T>(s, lrpe::rope_neox<T>(s.d), 8, lrpe::backend::simd<>{}) <= kernel_vs_kernel<T>());
  }
}

TEST_CASE("SIMD softmax backward: the pool's gradients equal one thread's bit for bit") {
  using T = float;
  const lrpe::index_t nq = 300, nk = 700, d = 32, dv = 24;
  lrpe::generator g(12);
  const rm<T> q = random_matrix<T>(g, nq, d), k = random_matrix<T>(g, nk, d), v = random_matrix<T>(g, nk, dv);
  const rm<T> d_out = random_matrix<T>(g, nq, dv);
  for (const bool causal : {false, true}) {
    lrpe::softmax_options<> opt;
    opt.causal = causal;
    opt.q_positions = nk - nq;
    rm<T> out(nq, dv), dq1(nq, d), dk1(nk, d), dv1(nk, dv), dq2 = dq1, dk2 = dk1, dv2 = dv1;
    lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, opt);
    lrpe::backend::simd_threads pool(2);
    lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq1, dk1, dv1, lrpe::no_encoding{}, opt, nullptr,
                                     lrpe::backend::simd<>{});
    lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq2, dk2, dv2, lrpe::no_encoding{}, opt, nullptr,
                                     lrpe::backend::simd_policy<>{&pool});
    CHECK(dq1 == dq2);
    CHECK(dk1 == dk2);
    CHECK(dv1 == dv2);
  }
}

TEST_CASE("SIMD softmax backward: masked keys' non-finite values reach no gradient; rows that see nothing are 0") {
  using T = float;
  const lrpe::index_t n = 100, d = 16;
  lrpe::generator g(13);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const rm<T> d_out = random_matrix<T>(g, n, d);
  rm<T> k_bad = k, v_bad = v;  // key 99: after every query, in a key tile with seen keys
  k_bad(n - 1, 3) = std::numeric_limits<T>::infinity();
  v_bad(n - 1, 2) = std::numeric_limits<T>::quiet_NaN();
  lrpe::softmax_options<> opt;
  opt.causal = true;
  opt.q_positions = -20;  // queries −20 … 79: the first 20 see no key, none sees key 99
  rm<T> out(n, d), dq1(n, d), dk1(n, d), dv1(n, d), dq2 = dq1, dk2 = dk1, dv2 = dv1;
  lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, opt);
  lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq1, dk1, dv1, lrpe::no_encoding{}, opt);
  lrpe::softmax_attention_backward(q, k_bad, v_bad, out, d_out, {}, dq2, dk2, dv2, lrpe::no_encoding{}, opt, nullptr,
                                   lrpe::backend::simd<>{});
  CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
  CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
  CHECK(diff(dv2, dv1) <= kernel_vs_kernel<T>());
  CHECK(dq2.topRows(20).cwiseAbs().maxCoeff() == T(0));
  CHECK(dk2.bottomRows(20).cwiseAbs().maxCoeff() == T(0));  // keys 80 … 99: no query sees them
  CHECK(dv2.bottomRows(20).cwiseAbs().maxCoeff() == T(0));
}

namespace {

struct linear_case {
  index_t nq, nk, d, dv;
  bool causal, normalised, with_state;
  double decay;
  index_t chunk;
  position_t q0, k0;
  bool arrays = false;  ///< positions as arrays (q0, k0 onwards with gaps) instead of offsets
};

/// n sorted positions from `first`, with gaps of 1 to 3 (the seed's).
std::vector<position_t> gapped(position_t first, index_t n, std::uint64_t seed) {
  lrpe::generator g(seed);
  std::vector<position_t> p;
  for (index_t i = 0; i < n; ++i) p.push_back(i == 0 ? first : p.back() + 1 + position_t(3 * g.uniform01()));
  return p;
}

/// The linear attention backward of one case (1+elu features, RoPE) on the reference and on
/// the SIMD backend: the largest difference of dQ, dK, dV, dθ and the initial state's gradient.
template <class T>
double linear_backward_case(const linear_case& c, std::uint64_t seed) {
  lrpe::generator g(seed);
  const rm<T> q = random_matrix<T>(g, c.nq, c.d), k = random_matrix<T>(g, c.nk, c.d), v = random_matrix<T>(g, c.nk, c.dv);
  const rm<T> d_out = random_matrix<T>(g, c.nq, c.dv);
  const lrpe::rope_neox<T> enc(c.d);
  const lrpe::feature_maps::elu_plus_one phi;
  lrpe::linear_options opt;
  opt.causal = c.causal;
  opt.norm = c.normalised ? lrpe::normalisation::denominator : lrpe::normalisation::none;
  opt.decay = c.decay;
  opt.chunk = c.chunk;
  opt.q_positions = c.q0;
  opt.k_positions = c.k0;
  // arrays: keys with gaps, each query at a key's position (so that every query has its keys)
  const std::vector<position_t> kp = gapped(c.k0, c.nk, seed + 9);
  const std::vector<position_t> qp(kp.end() - c.nq, kp.end());
  if (c.arrays) {
    opt.q_positions = qp;
    opt.k_positions = kp;
  }
  lrpe::linear_attention_state<T> initial(c.d, c.dv, c.decay);
  lrpe::linear_state_gradient<T> d_final(c.d, c.dv), di1, di2;
  if (c.with_state) {
    const rm<T> kb = random_matrix<T>(g, 3, c.d).array().abs() + T(0.5), vb = random_matrix<T>(g, 3, c.dv);
    const std::vector<position_t> before{c.k0 - 5, c.k0 - 2, c.k0 - 1};
    initial.append_block(kb, vb, before, 0);
    d_final.kv = random_matrix<T>(g, c.d, c.dv);
    d_final.k_sum = random_matrix<T>(g, 1, c.d).transpose();
  }
  rm<T> dq1(c.nq, c.d), dk1(c.nk, c.d), dv1(c.nk, c.dv), dq2 = dq1, dk2 = dk1, dv2 = dv1;
  dq2.setConstant(T(7));
  auto g1 = enc.make_gradient(), g2 = enc.make_gradient();
  if (c.with_state) {
    lrpe::linear_attention_backward(q, k, v, d_out, dq1, dk1, dv1, enc, phi, initial, &d_final, &di1, opt, &g1);
    lrpe::linear_attention_backward(q, k, v, d_out, dq2, dk2, dv2, enc, phi, initial, &d_final, &di2, opt, &g2,
                                    lrpe::backend::simd<>{});
  } else {
    lrpe::linear_attention_backward(q, k, v, d_out, dq1, dk1, dv1, enc, phi, opt, &g1);
    lrpe::linear_attention_backward(q, k, v, d_out, dq2, dk2, dv2, enc, phi, opt, &g2, lrpe::backend::simd<>{});
  }
  double worst = std::max({diff(dq2, dq1), diff(dk2, dk1), diff(dv2, dv1), vec_diff(g2.lambda, g1.lambda)});
  if (c.with_state) {
    worst = std::max(worst, diff(di2.kv, di1.kv));
    const rm<T> z1 = di1.k_sum.transpose(), z2 = di2.k_sum.transpose();
    worst = std::max(worst, diff(z2, z1));
  }
  return worst;
}

}  // namespace

TEST_CASE_TEMPLATE("SIMD linear backward == reference: causal by chunks of 1, 7, 64 and n, decay, normalised, states",
                   T, float, double) {
  const index_t n = 150;
  for (const index_t chunk : {index_t{1}, index_t{7}, index_t{64}, n})
    for (const bool normalised : {false, true})
      for (const double decay : {1.0, 0.95})
        for (const bool with_state : {false, true}) {
          const linear_case c{n, n, 16, 16, true, normalised, with_state, decay, chunk, 40, 40};
          INFO("chunk=" << chunk << " normalised=" << normalised << " decay=" << decay << " state=" << with_state);
          CHECK(linear_backward_case<T>(c, 21) <= kernel_vs_kernel<T>());
        }
}

TEST_CASE_TEMPLATE("SIMD linear backward == reference: non-causal, cross-attention, widths off the vector width", T,
                   float, double) {
  const linear_case cases[] = {
      {70, 90, 16, 8, false, false, false, 1.0, 64, 0, 0},  {70, 90, 12, 5, false, true, false, 1.0, 64, 0, 0},
      {33, 100, 8, 24, true, false, true, 0.9, 16, 67, 0},  {33, 100, 10, 3, true, true, true, 1.0, 7, 60, 0},
      {1, 1, 4, 4, true, true, true, 0.9, 64, 7, 7},        {64, 64, 64, 64, true, false, true, 0.99, 64, -3, -3},
      {20, 30, 8, 8, true, false, true, 1.0, 64, 20, 0},  // queries past the last key: the reference path
      // position arrays with gaps: the SIMD passes on reversed, negated arrays
      {40, 90, 8, 6, true, true, true, 0.95, 16, 0, 10, true}, {90, 90, 16, 16, true, false, false, 0.9, 7, 0, -50, true},
      {30, 70, 8, 8, false, true, false, 1.0, 64, 0, 5, true},
  };
  for (const auto& c : cases) {
    INFO("nq=" << c.nq << " nk=" << c.nk << " d=" << c.d << " dv=" << c.dv << " causal=" << c.causal
               << " normalised=" << c.normalised << " q0=" << c.q0 << " k0=" << c.k0 << " arrays=" << c.arrays);
    CHECK(linear_backward_case<T>(c, 22) <= kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("SIMD linear backward's sweep (causal self-attention, no decay, no normalisation) == reference: "
                   "several vectors wide, rows off the vector width, states, far positions", T, float, double) {
  // linear_backward_sweep.hpp: the n mod W last rows one at a time, then chunks of W rows
  const linear_case cases[] = {
      {150, 150, 64, 32, true, false, false, 1.0, 64, 40, 40}, {150, 150, 64, 32, true, false, true, 1.0, 64, -3, -3},
      {16, 16, 32, 64, true, false, true, 1.0, 7, 0, 0},       {5, 5, 16, 16, true, false, true, 1.0, 64, 1000, 1000},
      {97, 97, 16, 48, true, false, false, 1.0, 1, position_t{1} << 40, position_t{1} << 40},
  };
  for (const auto& c : cases) {
    INFO("n=" << c.nq << " d=" << c.d << " dv=" << c.dv << " state=" << c.with_state << " q0=" << c.q0);
    CHECK(linear_backward_case<T>(c, 24) <= kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("SIMD linear backward's sweep: strided heads (BSNH, grouped K/V) and a non-finite query that "
                   "reaches only the rows it should", T, float, double) {
  const index_t n = 70, heads = 4, kv_heads = 2, d = 32;
  lrpe::generator g(25);
  std::vector<T> q(static_cast<std::size_t>(n * heads * d)), k(static_cast<std::size_t>(n * kv_heads * d));
  std::vector<T> v = k, d_out = q;
  for (auto* x : {&q, &k, &v, &d_out})
    for (auto& e : *x) e = static_cast<T>(g.normal());
  q[static_cast<std::size_t>((37 * heads + 1) * d + 5)] = std::numeric_limits<T>::quiet_NaN();  // row 37, head 1
  const lrpe::rope_neox<T> enc(d);
  const lrpe::feature_maps::identity phi;  // (φ(NaN) is the map's own business)
  const lrpe::linear_options opt{.causal = true};
  std::vector<T> dq1(q.size()), dk1(k.size()), dv1(v.size()), dq2 = dq1, dk2 = dk1, dv2 = dv1;
  const auto run = [&](std::vector<T>& dq, std::vector<T>& dk, std::vector<T>& dv, auto backend) {
    lrpe::linear_attention_backward(lrpe::bsnh<const T>(q.data(), 1, n, heads, d), lrpe::bsnh<const T>(k.data(), 1, n, kv_heads, d),
                                    lrpe::bsnh<const T>(v.data(), 1, n, kv_heads, d),
                                    lrpe::bsnh<const T>(d_out.data(), 1, n, heads, d), lrpe::bsnh(dq.data(), 1, n, heads, d),
                                    lrpe::bsnh(dk.data(), 1, n, kv_heads, d), lrpe::bsnh(dv.data(), 1, n, kv_heads, d), enc,
                                    phi, opt, {}, backend);
  };
  run(dq1, dk1, dv1, lrpe::backend::reference{});
  run(dq2, dk2, dv2, lrpe::backend::simd<>{});
  // NaN exactly where the reference has it (dk̃ and dv of rows ≤ 37 of K/V head 0, which query
  // head 1 reads), the rest within the kernels' bound
  for (const auto& [a, b] : {std::pair{&dq2, &dq1}, std::pair{&dk2, &dk1}, std::pair{&dv2, &dv1}}) {
    double worst = 0, scale = 0;
    index_t nan_mismatch = 0, nans = 0;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const double x = static_cast<double>((*a)[i]), y = static_cast<double>((*b)[i]);
      nans += std::isnan(y) ? 1 : 0;
      if (std::isnan(x) != std::isnan(y)) ++nan_mismatch;
      else if (!std::isnan(y)) worst = std::max(worst, std::abs(x - y)), scale = std::max(scale, std::abs(y));
    }
    CHECK(nan_mismatch == 0);
    CHECK(worst / (1 + scale) <= kernel_vs_kernel<T>());
    if (a != &dq2) CHECK(nans > 0);
  }
}

namespace {

struct decay_case {
  index_t nq, nk, d;
  double decay;
  bool normalised, with_state, arrays;
  position_t q0, k0;
};

/// dL/dλ (and dQ) of one causal case, RoPE and 1+elu features, on both backends: the
/// relative difference of dL/dλ, dQ's, and the reference's dL/dλ.
template <class T>
std::tuple<double, double, double> decay_gradient_case(const decay_case& c, std::uint64_t seed) {
  lrpe::generator g(seed);
  const index_t dv = c.d / 2 + 1;
  const rm<T> q = random_matrix<T>(g, c.nq, c.d), k = random_matrix<T>(g, c.nk, c.d), v = random_matrix<T>(g, c.nk, dv);
  const rm<T> d_out = random_matrix<T>(g, c.nq, dv);
  const lrpe::rope_neox<T> enc(c.d);
  const lrpe::feature_maps::elu_plus_one phi;
  lrpe::linear_options opt{.causal = true, .decay = c.decay};
  opt.norm = c.normalised ? lrpe::normalisation::denominator : lrpe::normalisation::none;
  opt.q_positions = c.q0;
  opt.k_positions = c.k0;
  const std::vector<position_t> kp = gapped(c.k0, c.nk, seed + 3);
  const std::vector<position_t> qp(kp.end() - c.nq, kp.end());
  if (c.arrays) {
    opt.q_positions = qp;
    opt.k_positions = kp;
  }
  lrpe::linear_attention_state<T> initial(c.d, dv, c.decay);
  lrpe::linear_state_gradient<T> d_final(c.d, dv), di;
  if (c.with_state) {
    const rm<T> kb = random_matrix<T>(g, 3, c.d).array().abs() + T(0.5), vb = random_matrix<T>(g, 3, dv);
    initial.append_block(kb, vb, std::vector<position_t>{c.k0 - 9, c.k0 - 4, c.k0 - 2}, 0);
    d_final.kv = random_matrix<T>(g, c.d, dv);
    d_final.k_sum = random_matrix<T>(g, 1, c.d).transpose();
  }
  double dl[2] = {0, 0};
  rm<T> dq[2] = {rm<T>(c.nq, c.d), rm<T>(c.nq, c.d)}, dk(c.nk, c.d), dvv(c.nk, dv);
  for (int b = 0; b < 2; ++b) {
    opt.decay_gradient = &dl[b];
    if (c.with_state && b == 0)
      lrpe::linear_attention_backward(q, k, v, d_out, dq[b], dk, dvv, enc, phi, initial, &d_final, &di, opt);
    else if (c.with_state)
      lrpe::linear_attention_backward(q, k, v, d_out, dq[b], dk, dvv, enc, phi, initial, &d_final, &di, opt, nullptr,
                                      lrpe::backend::simd<>{});
    else if (b == 0)
      lrpe::linear_attention_backward(q, k, v, d_out, dq[b], dk, dvv, enc, phi, opt);
    else
      lrpe::linear_attention_backward(q, k, v, d_out, dq[b], dk, dvv, enc, phi, opt, nullptr, lrpe::backend::simd<>{});
  }
  return {std::abs(dl[1] - dl[0]) / (1 + std::abs(dl[0])), diff(dq[1], dq[0]), dl[0]};
}

}  // namespace

TEST_CASE_TEMPLATE("SIMD linear backward: a learned decay's gradient (options.decay_gradient) by chunks == reference",
                   T, float, double) {
  // linear_decay_gradient.hpp: chunks of 64 queries, key blocks of 256, the states' terms
  const decay_case cases[] = {
      {150, 150, 16, 0.9, false, false, false, 0, 0},      {150, 150, 16, 0.99, true, true, false, -70, -70},
      {100, 300, 8, 0.95, false, true, false, 200, 0},     {100, 300, 8, 0.999, true, false, true, 0, 5},
      {130, 130, 16, 1.0, false, true, false, 1000, 1000}, {90, 90, 12, 0.8, true, true, true, 0, -40},
      {1, 1, 4, 0.9, false, true, false, 7, 7},
  };
  for (const auto& c : cases) {
    INFO("nq=" << c.nq << " nk=" << c.nk << " decay=" << c.decay << " normalised=" << c.normalised
               << " state=" << c.with_state << " arrays=" << c.arrays);
    const auto result = decay_gradient_case<T>(c, 26);
    CHECK(std::get<2>(result) != 0);
    CHECK(std::get<0>(result) <= kernel_vs_kernel<T>());
    CHECK(std::get<1>(result) <= kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("SIMD linear backward == reference: cosFormer's features", T, float, double) {
  const index_t n = 70, d = 16;
  lrpe::generator g(24);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const rm<T> d_out = random_matrix<T>(g, n, d);
  const lrpe::canonical::cosformer<T> enc(d, 64.0);
  const lrpe::feature_maps::relu phi;
  for (const bool causal : {false, true}) {
    const lrpe::linear_options opt{.causal = causal, .norm = lrpe::normalisation::denominator, .eps = 1e-3};
    rm<T> dq1(n, d), dk1(n, d), dv1(n, d), dq2 = dq1, dk2 = dk1, dv2 = dv1;
    lrpe::linear_attention_backward(q, k, v, d_out, dq1, dk1, dv1, enc, phi, opt);
    lrpe::linear_attention_backward(q, k, v, d_out, dq2, dk2, dv2, enc, phi, opt, nullptr, lrpe::backend::simd<>{});
    CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
    CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
    CHECK(diff(dv2, dv1) <= kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("SIMD softmax and linear backward == reference: Transformer-XL's features and parameters; Shaw "
                   "and DeBERTa (the reference kernel)", T, float, double) {
  const index_t n = 37, d = 8, dm = 12;
  lrpe::generator g(25);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, d);
  const rm<T> d_out = random_matrix<T>(g, n, d);
  const lrpe::canonical::transformer_xl<T> xl(d, random_matrix<T>(g, 1, d), random_matrix<T>(g, 1, d),
                                              random_matrix<T>(g, d, dm));
  const lrpe::canonical::shaw<T> shaw(d, 4, random_matrix<T>(g, 9, d), random_matrix<T>(g, 9, d));
  const lrpe::canonical::deberta_v2<T> deberta(d, 1, {8, 32}, random_matrix<T>(g, 16, d), random_matrix<T>(g, 16, d));
  const auto both = [&](const auto& enc, auto&& backward) {
    rm<T> dq1(n, d), dk1(n, d), dv1(n, d), dq2 = dq1, dk2 = dk1, dv2 = dv1;
    auto g1 = enc.make_gradient(), g2 = enc.make_gradient();
    backward(dq1, dk1, dv1, g1, lrpe::backend::reference{});
    backward(dq2, dk2, dv2, g2, lrpe::backend::simd<>{});
    CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
    CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
    CHECK(diff(dv2, dv1) <= kernel_vs_kernel<T>());
    CHECK(vec_diff(g2, g1) <= 4 * n * kernel_vs_kernel<T>());  // sums of n·n terms of size ~1
  };
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    lrpe::softmax_options<> opt;
    opt.causal = causal;
    opt.q_positions = 1000;
    opt.k_positions = 1000;
    const auto softmax = [&](const auto& enc) {
      both(enc, [&](rm<T>& dq, rm<T>& dk, rm<T>& dv, auto& grad, auto backend) {
        rm<T> out(n, d);
        lrpe::softmax_attention(q, k, v, out, enc, opt, backend);
        lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq, dk, dv, enc, opt, &grad, backend);
      });
    };
    softmax(xl);
    softmax(shaw);
    softmax(deberta);
    const lrpe::linear_options lopt{.causal = causal};
    both(xl, [&](rm<T>& dq, rm<T>& dk, rm<T>& dv, auto& grad, auto backend) {
      lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, xl, lrpe::feature_maps::identity{}, lopt, &grad,
                                      backend);
    });
  }
}
