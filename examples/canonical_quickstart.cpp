// SPDX-License-Identifier: MIT
// lrpe::canonical in five steps; docs/canonical.md quotes the blocks between the [name] markers.
// Each step checks what it claims and the program exits 1 if a check fails.
#include <lrpe/lrpe.hpp>

#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

namespace cn = lrpe::canonical;

static bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * (1 + std::abs(b)); }

int main() {
  bool ok = true;
  const lrpe::index_t d = 8, heads = 4, n = 5;
  lrpe::row_matrix<double> q = lrpe::row_matrix<double>::Random(n, d);
  lrpe::row_matrix<double> k = lrpe::row_matrix<double>::Random(n, d);
  lrpe::row_matrix<double> v = lrpe::row_matrix<double>::Random(n, d);

  // [score]
  // Pick an encoding by name; score one pair (query at s = 3, key at t = -2).
  const lrpe::row_matrix<double> table = lrpe::row_matrix<double>::Random(heads, 32);  // heads × buckets
  const cn::t5_bias<double> t5(d, cn::t5_buckets{32, 128, /*bidirectional=*/true}, table);
  const cn::t5_bias<double> head2 = t5.head(2);  // O(1): shares the table
  const double f = head2.score(q.row(0).data(), 3, k.row(1).data(), -2);  // q·k + B[2, bucket(-2 - 3)]
  const lrpe::dense_matrix<double> scores = cn::score_matrix(head2, q, k);  // n × n, positions 0..n-1
  // [score]
  ok &= near(f, q.row(0).dot(k.row(1)) + table(2, cn::t5_bucket(-5, {})));
  ok &= near(scores(1, 3), q.row(1).dot(k.row(3)) + table(2, cn::t5_bucket(2, {})));

  // [canonical]
  // Its canonical form: m = 2 terms (q, I, k) and (1, B[bucket(t-s)], 1).
  const auto cf = head2.canonical();
  static_assert(decltype(cf)::size() == 2);
  const double via_terms = cf.score(q.row(0).data(), 3, k.row(1).data(), -2);      // operators
  const double via_dense = cf.dense_score(q.row(0).data(), 3, k.row(1).data(), -2);  // blockdiag W, dense
  const lrpe::dense_matrix<double> w = cf.dense_w(-5);  // (d+1) × (d+1) = blockdiag(I, B[bucket(-5)])
  // [canonical]
  ok &= near(via_terms, f) && near(via_dense, f) && w.rows() == d + 1 && near(w(d, d), table(2, cn::t5_bucket(-5, {})));

  // [features]
  // Linearizable encodings factorise: features(query) · features(key) = f_rel.
  const lrpe::rope_neox<double> rope(d);
  const cn::cosformer<double> cosf(d, /*M=*/512.0);
  static_assert(cn::is_linearizable_v<decltype(rope)> && cn::is_linearizable_v<cn::cosformer<double>>);
  static_assert(!cn::is_linearizable_v<cn::t5_bias<double>>);  // features(t5, ...) would not compile
  const std::vector<lrpe::position_t> pos = {0, 7, 100, 101, -4};
  const lrpe::row_matrix<double> fq = cn::features(cosf, cn::side::query, q, pos);  // n × 2d
  const lrpe::row_matrix<double> fk = cn::features(cosf, cn::side::key, k, pos);
  const double dot = fq.row(2).dot(fk.row(4));  // = cosf.score(q_2, 100, k_4, -4)
  // [features]
  ok &= near(dot, cosf.score(q.row(2).data(), 100, k.row(4).data(), -4));
  ok &= near(cn::canonical_form_of(rope).score(q.row(0).data(), 9, k.row(0).data(), 2),
             rope.score(q.row(0).data(), 9, k.row(0).data(), 2));

  // [compose]
  // A new variant from primitives: f = (q·k)·w(t-s) + b(t-s).
  auto wfun = [](lrpe::position_t delta) { return std::exp(-0.1 * std::abs(static_cast<double>(delta))); };
  auto bfun = [](lrpe::position_t delta) { return delta <= 0 ? 0.0 : -1e9; };  // a causal mask as a bias
  const cn::canonical_form mine(
      cn::term(cn::identity_map<double>(d), cn::scalar_op<double, decltype(wfun)>(d, wfun), cn::identity_map<double>(d)),
      cn::term(cn::one_map<double>(d), cn::bias_op<double, decltype(bfun)>(bfun), cn::one_map<double>(d)));
  static_assert(lrpe::relative_encoding<decltype(mine)>);  // usable wherever a relative encoding is
  // [compose]
  ok &= near(mine.score(q.row(1).data(), 4, k.row(2).data(), 1), q.row(1).dot(k.row(2)) * std::exp(-0.3));

  // [attention]
  // Attention consumes the variants through core/relative.hpp: here ALiBi per head with softmax,
  // and cosFormer in linear attention (ReLU feature map first, and the denominator, as cosFormer does).
  const auto alibi = cn::alibi<double>::for_heads(d, heads, cn::alibi_form::causal);
  lrpe::row_matrix<double> out(n, d), out_lin(n, d);
  lrpe::softmax_options<> so;
  so.causal = true;
  lrpe::softmax_attention(q, k, v, out, alibi.head(1), so);
  lrpe::linear_attention(q, k, v, out_lin, cosf, lrpe::feature_maps::relu{},
                         lrpe::linear_options{.norm = lrpe::normalisation::denominator});
  // [attention]
  {  // the softmax output by hand: logits scale·q·k − m(s − t) on t ≤ s
    const double m = alibi.head(1).slope(), scale = 1 / std::sqrt(static_cast<double>(d));
    for (lrpe::index_t s = 0; s < n; ++s) {
      std::vector<double> p(static_cast<std::size_t>(s + 1));
      double mx = -1e300, z = 0;
      for (lrpe::index_t t = 0; t <= s; ++t) {
        p[static_cast<std::size_t>(t)] = scale * q.row(s).dot(k.row(t)) - m * static_cast<double>(s - t);
        mx = std::max(mx, p[static_cast<std::size_t>(t)]);
      }
      for (double& x : p) { x = std::exp(x - mx); z += x; }
      for (lrpe::index_t j = 0; j < d; ++j) {
        double o = 0;
        for (lrpe::index_t t = 0; t <= s; ++t) o += p[static_cast<std::size_t>(t)] / z * v(t, j);
        if (std::abs(o - out(s, j)) > 1e-9) ok = false;
      }
    }
  }
  {  // the cosFormer output by hand: w_st = relu(q_s)·relu(k_t)·cos(π(t − s)/(2M)), out_s = Σ w_st v_t / Σ w_st
    const auto relu = [](double x) { return x > 0 ? x : 0.0; };
    for (lrpe::index_t s = 0; s < n; ++s) {
      std::vector<double> w(static_cast<std::size_t>(n));
      double z = 0;
      for (lrpe::index_t t = 0; t < n; ++t) {
        double qk = 0;
        for (lrpe::index_t j = 0; j < d; ++j) qk += relu(q(s, j)) * relu(k(t, j));
        w[static_cast<std::size_t>(t)] = qk * std::cos(std::numbers::pi * static_cast<double>(t - s) / (2 * 512.0));
        z += w[static_cast<std::size_t>(t)];
      }
      for (lrpe::index_t j = 0; j < d; ++j) {
        double o = 0;
        for (lrpe::index_t t = 0; t < n; ++t) o += w[static_cast<std::size_t>(t)] * v(t, j);
        if (std::abs(o / std::max(z, 1e-6) - out_lin(s, j)) > 1e-9) ok = false;
      }
    }
  }
  std::printf("canonical quickstart: %s\n", ok ? "all checks passed" : "A CHECK FAILED");
  return ok ? 0 : 1;
}
